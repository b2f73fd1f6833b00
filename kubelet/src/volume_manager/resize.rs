//! Online expansion of CSI volumes (Go 1.28's `ExpandInUseVolume`, its path without the
//! `RecoverVolumeExpansionFailure` gate): on each sync of a pod, every claim's CSI volume it
//! has published read-write is compared: when the PV (grown by the external resizer) holds
//! more than the claim's `status.capacity`, the driver's `NodeExpandVolume` grows the
//! filesystem, and the claim's status gets the new capacity with its resize conditions
//! cleared (Go's `MarkFSResizeFinished`), with Go's `FileSystemResizeSuccessful` event.
//! One check per pod at a time; syncs arriving meanwhile are folded into it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Weak;

use ferrolet_proto::csi::{CapacityRange, NodeExpandVolumeRequest};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::json;
use tokio::sync::mpsc;

use super::VolumeManager;
use super::csi_ops::CsiMounted;
use crate::csi::client::CsiClient;
use crate::csi::volume::CsiVolume;
use crate::events::{EventType, pod_ref};

/// Go's event reasons.
const RESIZE_SUCCEEDED: &str = "FileSystemResizeSuccessful";
const RESIZE_FAILED: &str = "FileSystemResizeFailed";
/// The claim conditions a finished resize clears.
const RESIZE_CONDITIONS: [&str; 2] = ["Resizing", "FileSystemResizePending"];

/// One published claim volume that may need growing.
struct Candidate {
    namespace: String,
    claim: String,
    target: PathBuf,
    staging: Option<PathBuf>,
    csi: CsiMounted,
}

/// Serves the pods' resize checks until the manager goes.
pub async fn run(manager: Weak<VolumeManager>, mut rx: mpsc::UnboundedReceiver<String>) {
    while let Some(uid) = rx.recv().await {
        let mut uids = BTreeSet::from([uid]);
        while let Ok(more) = rx.try_recv() {
            uids.insert(more);
        }
        let Some(manager) = manager.upgrade() else {
            return;
        };
        for uid in uids {
            manager.check_resize(&uid).await;
        }
    }
}

/// Storage bytes of a capacity map's `storage`, if any.
fn storage_bytes(
    capacity: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Option<i128> {
    let q = capacity?.get("storage")?;
    crate::status::qos::parse_quantity(&q.0).map(|nanos| nanos / 1_000_000_000)
}

impl VolumeManager {
    /// Grows what pod `uid` has published and its claims' PVs have outgrown.
    async fn check_resize(&self, uid: &str) {
        let (pod, candidates) = {
            let state = self.lock();
            let Some(pod) = state.desired.pod(uid).map(|p| p.pod.clone()) else {
                return;
            };
            let candidates: Vec<Candidate> = state
                .actual
                .volumes()
                .filter(|(k, m)| k.uid == uid && m.confirmed() && !m.read_only && !m.block)
                .filter_map(|(_, m)| {
                    let (namespace, claim) = m.pvc.clone()?;
                    let csi = m.csi.clone()?;
                    let staging = csi
                        .device
                        .as_ref()
                        .and_then(|d| state.devices.get(d))
                        .map(|d| d.path.clone());
                    Some(Candidate {
                        namespace,
                        claim,
                        target: m.path.clone(),
                        staging,
                        csi,
                    })
                })
                .collect();
            (pod, candidates)
        };
        for c in candidates {
            let Some((pvc, pv)) = self.claim_and_volume(&c).await else {
                continue;
            };
            let pv_bytes = storage_bytes(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()));
            let claim_bytes = storage_bytes(pvc.status.as_ref().and_then(|s| s.capacity.as_ref()));
            let (Some(pv_bytes), Some(claim_bytes)) = (pv_bytes, claim_bytes) else {
                continue;
            };
            if claim_bytes >= pv_bytes {
                continue;
            }
            let pv_name = pv.metadata.name.clone().unwrap_or_default();
            let node = self.settings.node.node_name.clone();
            match self.expand(&c, &pv, pv_bytes).await {
                Ok(()) => {
                    let msg = format!(
                        "MountVolume.NodeExpandVolume succeeded for volume {pv_name:?} {node}"
                    );
                    self.events
                        .record(&pod_ref(&pod), EventType::Normal, RESIZE_SUCCEEDED, &msg);
                    if let Err(e) = self.mark_resize_finished(&c, &pvc, &pv).await {
                        tracing::warn!(claim = c.claim, error = %e, "mountVolume.NodeExpandVolume update pvc status failed");
                    }
                }
                Err(e) => {
                    let msg =
                        format!("MountVolume.NodeExpandVolume failed for volume {pv_name:?} : {e}");
                    tracing::warn!(uid, "{msg}");
                    self.events
                        .record(&pod_ref(&pod), EventType::Warning, RESIZE_FAILED, &msg);
                }
            }
        }
    }

    async fn claim_and_volume(
        &self,
        c: &Candidate,
    ) -> Option<(PersistentVolumeClaim, PersistentVolume)> {
        let pvc = self.storage.claim(&c.namespace, &c.claim).await.ok()??;
        let pv_name = pvc.spec.as_ref()?.volume_name.clone()?;
        let pv = self.storage.persistent_volume(&pv_name).await.ok()??;
        Some((pvc, pv))
    }

    /// Go's `nodeExpandWithClient`.
    async fn expand(
        &self,
        c: &Candidate,
        pv: &PersistentVolume,
        bytes: i128,
    ) -> Result<(), String> {
        let client = CsiClient::connect(&self.drivers, &c.csi.driver)
            .await
            .map_err(|e| e.to_string())?;
        let caps = client.capabilities().await.map_err(|e| {
            format!("Expander.NodeExpand failed to check if node supports expansion : {e}")
        })?;
        if !caps.expand {
            return Err(format!(
                "Expander.NodeExpand found CSI plugin kubernetes.io/csi/{} to not support node expansion",
                c.csi.driver
            ));
        }
        let volume = CsiVolume::from_pv(pv, false).ok_or("the PersistentVolume is not CSI")?;
        let req = NodeExpandVolumeRequest {
            volume_id: c.csi.handle.clone(),
            volume_path: c.target.to_string_lossy().into_owned(),
            capacity_range: Some(CapacityRange {
                required_bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
                limit_bytes: 0,
            }),
            staging_target_path: c
                .staging
                .as_ref()
                .filter(|_| caps.stage_unstage)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            volume_capability: Some(crate::csi::volume::capability(&volume, &caps, None)),
            secrets: Default::default(),
        };
        client
            .expand(req)
            .await
            .map_err(|e| format!("Expander.NodeExpand failed to expand the volume : {e}"))
    }

    /// Go's `MarkFSResizeFinished`: the claim's capacity is the PV's, its resize conditions
    /// gone.
    async fn mark_resize_finished(
        &self,
        c: &Candidate,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
    ) -> Result<(), String> {
        let capacity = pv
            .spec
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|m| m.get("storage"))
            .map(|q| q.0.clone())
            .unwrap_or_default();
        let conditions: Vec<_> = pvc
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|cond| !RESIZE_CONDITIONS.contains(&cond.type_.as_str()))
            .collect();
        let patch =
            json!({"status": {"capacity": {"storage": capacity}, "conditions": conditions}});
        self.storage
            .patch_claim_status(&c.namespace, &c.claim, patch)
            .await
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    #[test]
    fn capacities_are_compared_in_bytes() {
        let map = |q: &str| {
            std::collections::BTreeMap::from([("storage".to_string(), Quantity(q.into()))])
        };
        assert_eq!(storage_bytes(Some(&map("1Mi"))), Some(1 << 20));
        assert_eq!(storage_bytes(Some(&map("2G"))), Some(2_000_000_000));
        assert!(storage_bytes(Some(&map("1Gi"))) > storage_bytes(Some(&map("1000Mi"))));
        assert_eq!(storage_bytes(None), None);
        assert_eq!(
            storage_bytes(Some(&std::collections::BTreeMap::new())),
            None
        );
    }
}
