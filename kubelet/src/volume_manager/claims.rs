//! The claims behind pod volumes (Go's populator, `createVolumeSpec`): a
//! `persistentVolumeClaim` volume, or an `ephemeral` one (whose claim `<pod>-<volume>` the
//! ephemeral controller makes, owned by the pod), resolved through the API to its bound
//! PersistentVolume, with Go's checks and messages: the claim exists, is not being deleted,
//! is bound and names its volume; the volume's `claimRef` points back at it; its
//! `volumeMode` matches how the containers use it. Then, at set-up, a PV's node affinity
//! against this node's labels (Go's `MountVolume.NodeAffinity check`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Volume};

use crate::objects::StorageSource;
use crate::types::Pod;
use crate::volume::persistent::pv_name;

/// A claim resolved to its volume.
#[derive(Clone, Debug)]
pub struct BoundClaim {
    /// The bound PersistentVolume.
    pub volume: PersistentVolume,
    /// The pod volume's `readOnly` (Go's `spec.ReadOnly`).
    pub read_only: bool,
}

/// Why a claim's volume cannot be set up; the text is Go's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// The claim or its volume is not usable (yet).
    #[error("error processing PVC {namespace}/{claim}: {reason}")]
    Processing {
        /// The pod's namespace.
        namespace: String,
        /// The claim's name.
        claim: String,
        /// Go's reason (`PVC is not bound`, ...).
        reason: String,
    },
    /// A generic ephemeral volume's claim that another object made.
    #[error("PVC {namespace}/{claim} was not created for pod {namespace}/{pod} (pod is not owner)")]
    NotOwner {
        /// The namespace.
        namespace: String,
        /// The claim's name.
        claim: String,
        /// The pod's name.
        pod: String,
    },
    /// The volume's mode does not fit how the containers use it.
    #[error("volume {volume} has volumeMode {mode}, but is specified in {field}")]
    VolumeMode {
        /// The pod volume's name.
        volume: String,
        /// The PV's `volumeMode`.
        mode: String,
        /// `volumeMounts` or `volumeDevices`.
        field: &'static str,
    },
    /// A PV whose node affinity excludes this node.
    #[error("MountVolume.NodeAffinity check failed for volume {volume:?} : {reason}")]
    NodeAffinity {
        /// The PV's name.
        volume: String,
        /// Go's reason (`no matching NodeSelectorTerms`) or why the node could not be read.
        reason: String,
    },
}

/// The claim a pod volume stands for, if any: a `persistentVolumeClaim`'s `claimName`, or an
/// `ephemeral` volume's `<pod>-<volume>` (Go's `ephemeral.VolumeClaimName`).
pub fn claim_name(pod: &Pod, volume: &Volume) -> Option<String> {
    if let Some(pvc) = &volume.persistent_volume_claim {
        return Some(pvc.claim_name.clone());
    }
    volume.ephemeral.as_ref().map(|_| {
        format!(
            "{}-{}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            volume.name
        )
    })
}

/// Resolves `volume` of `pod` if it is a claim's; `Ok(None)` for every other kind.
pub async fn resolve(
    storage: &dyn StorageSource,
    pod: &Pod,
    volume: &Volume,
) -> Result<Option<BoundClaim>, ClaimError> {
    let Some(claim) = claim_name(pod, volume) else {
        return Ok(None);
    };
    let namespace = super::namespace_of(pod).to_string();
    let processing = |reason: String| ClaimError::Processing {
        namespace: namespace.clone(),
        claim: claim.clone(),
        reason,
    };
    let pvc = match storage.claim(&namespace, &claim).await {
        Ok(Some(pvc)) => pvc,
        Ok(None) => {
            return Err(processing(format!(
                "failed to fetch PVC from API server: persistentvolumeclaims {claim:?} not found"
            )));
        }
        Err(e) => {
            return Err(processing(format!(
                "failed to fetch PVC from API server: {e}"
            )));
        }
    };
    let (pv_name, claim_uid) = bound_volume_name(&pvc).map_err(|r| processing(r.into()))?;
    if volume.ephemeral.is_some() && !controlled_by(&pvc, pod) {
        return Err(ClaimError::NotOwner {
            namespace: namespace.clone(),
            claim: claim.clone(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
        });
    }
    let pv = match storage.persistent_volume(&pv_name).await {
        Ok(Some(pv)) => pv,
        Ok(None) => {
            return Err(processing(format!(
                "failed to fetch PV {pv_name} from API server: persistentvolumes {pv_name:?} not found"
            )));
        }
        Err(e) => {
            return Err(processing(format!(
                "failed to fetch PV {pv_name} from API server: {e}"
            )));
        }
    };
    check_claim_ref(&pv, &pv_name, &claim_uid).map_err(processing)?;
    check_volume_mode(pod, &volume.name, &pv)?;
    let read_only = volume
        .persistent_volume_claim
        .as_ref()
        .and_then(|p| p.read_only)
        .unwrap_or(false);
    Ok(Some(BoundClaim {
        volume: pv,
        read_only,
    }))
}

/// Go's `getPVCExtractPV`: the bound claim's volume name and the claim's UID.
fn bound_volume_name(pvc: &PersistentVolumeClaim) -> Result<(String, String), &'static str> {
    if pvc.metadata.deletion_timestamp.is_some() {
        return Err("PVC is being deleted");
    }
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Bound") {
        return Err("PVC is not bound");
    }
    let name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    if name.is_empty() {
        return Err("PVC has empty pvc.Spec.VolumeName");
    }
    Ok((name, pvc.metadata.uid.clone().unwrap_or_default()))
}

/// Whether `pod` is the claim's controller (Go's `metav1.IsControlledBy`).
fn controlled_by(pvc: &PersistentVolumeClaim, pod: &Pod) -> bool {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    pvc.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Go's `getPVSpec` checks.
fn check_claim_ref(pv: &PersistentVolume, name: &str, claim_uid: &str) -> Result<(), String> {
    let Some(claim_ref) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Err(format!(
            "found PV object {name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        ));
    };
    let uid = claim_ref.uid.as_deref().unwrap_or_default();
    if uid != claim_uid {
        return Err(format!(
            "found PV object {name} but its pv.Spec.ClaimRef.UID {uid} does not point to claim.UID {claim_uid}"
        ));
    }
    Ok(())
}

/// The PV's `volumeMode` (`Filesystem` when unset).
pub fn volume_mode(pv: &PersistentVolume) -> &str {
    pv.spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem")
}

/// Go's check that containers mount only `Filesystem` volumes and use only `Block` ones as
/// devices.
fn check_volume_mode(pod: &Pod, volume: &str, pv: &PersistentVolume) -> Result<(), ClaimError> {
    let (mounts, devices) = uses(pod, volume);
    let mode = volume_mode(pv);
    let wrong = if mounts && mode != "Filesystem" {
        Some("volumeMounts")
    } else if devices && mode != "Block" {
        Some("volumeDevices")
    } else {
        None
    };
    match wrong {
        Some(field) => Err(ClaimError::VolumeMode {
            volume: volume.into(),
            mode: mode.into(),
            field,
        }),
        None => Ok(()),
    }
}

/// Whether some container mounts `volume`, and whether some uses it as a device.
fn uses(pod: &Pod, volume: &str) -> (bool, bool) {
    let Some(spec) = pod.spec.as_ref() else {
        return (false, false);
    };
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| (&c.volume_mounts, &c.volume_devices));
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| (&c.volume_mounts, &c.volume_devices));
    let (mut mounts, mut devices) = (false, false);
    for (m, d) in containers.chain(ephemeral) {
        mounts |= m.iter().flatten().any(|m| m.name == volume);
        devices |= d.iter().flatten().any(|d| d.name == volume);
    }
    (mounts, devices)
}

/// Whether `pv` needs this node's labels for [`check_node_affinity`].
pub fn has_node_affinity(pv: &PersistentVolume) -> bool {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .is_some_and(|a| a.required.is_some())
}

/// Go's `CheckNodeAffinity`: a PV's required node affinity against this node.
pub fn check_node_affinity(
    pv: &PersistentVolume,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), ClaimError> {
    let required = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref());
    match required {
        Some(sel) if !crate::admission::selection::selector_matches(sel, node_name, labels) => {
            Err(ClaimError::NodeAffinity {
                volume: pv_name(pv).into(),
                reason: "no matching NodeSelectorTerms".into(),
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Mutex;

    use futures::future::BoxFuture;

    use super::*;
    use crate::objects::ObjectError;

    /// Claims and volumes by name.
    #[derive(Default)]
    struct Storage {
        claims: Mutex<BTreeMap<String, PersistentVolumeClaim>>,
        volumes: Mutex<BTreeMap<String, PersistentVolume>>,
    }

    impl StorageSource for Storage {
        fn claim<'a>(
            &'a self,
            namespace: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Option<PersistentVolumeClaim>, ObjectError>> {
            let got = self
                .claims
                .lock()
                .unwrap()
                .get(&format!("{namespace}/{name}"))
                .cloned();
            Box::pin(async move { Ok(got) })
        }
        fn persistent_volume<'a>(
            &'a self,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Option<PersistentVolume>, ObjectError>> {
            let got = self.volumes.lock().unwrap().get(name).cloned();
            Box::pin(async move { Ok(got) })
        }
        fn node_labels(&self) -> BoxFuture<'_, Result<BTreeMap<String, String>, ObjectError>> {
            Box::pin(async { Ok(BTreeMap::new()) })
        }
        fn node_volumes(&self) -> BoxFuture<'_, Result<crate::objects::NodeVolumes, ObjectError>> {
            Box::pin(async { Ok(Default::default()) })
        }
        fn csi_driver<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<k8s_openapi::api::storage::v1::CSIDriver>, ObjectError>>
        {
            Box::pin(async { Ok(None) })
        }
        fn volume_attachment<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<
            'a,
            Result<Option<k8s_openapi::api::storage::v1::VolumeAttachment>, ObjectError>,
        > {
            Box::pin(async { Ok(None) })
        }
        fn secret<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<k8s_openapi::api::core::v1::Secret>, ObjectError>>
        {
            Box::pin(async { Ok(None) })
        }
        fn patch_claim_status<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: serde_json::Value,
        ) -> BoxFuture<'a, Result<(), ObjectError>> {
            Box::pin(async { Ok(()) })
        }
    }

    fn yaml<T: serde::de::DeserializeOwned>(s: &str) -> T {
        serde_yaml_ng::from_str(s).unwrap()
    }

    const POD: &str = "metadata: {name: web, namespace: ns, uid: pod-uid}
spec:
  containers:
  - name: c
    volumeMounts: [{name: data, mountPath: /data}, {name: scratch, mountPath: /s}]
    volumeDevices: [{name: raw, devicePath: /dev/xvda}]
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: claim, readOnly: true}}
  - {name: raw, persistentVolumeClaim: {claimName: claim}}
  - {name: scratch, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce]}}}}
  - {name: plain, emptyDir: {}}";

    fn volume(pod: &Pod, name: &str) -> Volume {
        let vols = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap();
        vols.iter().find(|v| v.name == name).unwrap().clone()
    }

    async fn err(storage: &Storage, pod: &Pod, name: &str) -> String {
        resolve(storage, pod, &volume(pod, name))
            .await
            .unwrap_err()
            .to_string()
    }

    #[tokio::test]
    async fn claims_resolve_to_their_bound_volume_with_go_messages() {
        let pod: Pod = yaml(POD);
        let storage = Storage::default();
        assert!(
            resolve(&storage, &pod, &volume(&pod, "plain"))
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            err(&storage, &pod, "data").await,
            "error processing PVC ns/claim: failed to fetch PVC from API server: persistentvolumeclaims \"claim\" not found"
        );
        let mut pvc: PersistentVolumeClaim = yaml(
            "metadata: {name: claim, namespace: ns, uid: claim-uid}\nstatus: {phase: Pending}",
        );
        storage
            .claims
            .lock()
            .unwrap()
            .insert("ns/claim".into(), pvc.clone());
        assert_eq!(
            err(&storage, &pod, "data").await,
            "error processing PVC ns/claim: PVC is not bound"
        );
        pvc.status = yaml("{phase: Bound}");
        storage
            .claims
            .lock()
            .unwrap()
            .insert("ns/claim".into(), pvc.clone());
        assert_eq!(
            err(&storage, &pod, "data").await,
            "error processing PVC ns/claim: PVC has empty pvc.Spec.VolumeName"
        );
        pvc.spec = yaml("{volumeName: pv1}");
        storage
            .claims
            .lock()
            .unwrap()
            .insert("ns/claim".into(), pvc.clone());
        assert_eq!(
            err(&storage, &pod, "data").await,
            "error processing PVC ns/claim: failed to fetch PV pv1 from API server: persistentvolumes \"pv1\" not found"
        );
        let mut pv: PersistentVolume = yaml("metadata: {name: pv1}\nspec: {hostPath: {path: /x}}");
        storage
            .volumes
            .lock()
            .unwrap()
            .insert("pv1".into(), pv.clone());
        assert_eq!(
            err(&storage, &pod, "data").await,
            "error processing PVC ns/claim: found PV object pv1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        );
        pv.spec.as_mut().unwrap().claim_ref = Some(yaml("{uid: other}"));
        storage
            .volumes
            .lock()
            .unwrap()
            .insert("pv1".into(), pv.clone());
        assert_eq!(
            err(&storage, &pod, "data").await,
            "error processing PVC ns/claim: found PV object pv1 but its pv.Spec.ClaimRef.UID other does not point to claim.UID claim-uid"
        );
        pv.spec.as_mut().unwrap().claim_ref = Some(yaml("{uid: claim-uid}"));
        storage
            .volumes
            .lock()
            .unwrap()
            .insert("pv1".into(), pv.clone());
        let bound = resolve(&storage, &pod, &volume(&pod, "data"))
            .await
            .unwrap()
            .unwrap();
        assert!(bound.read_only);
        assert_eq!(pv_name(&bound.volume), "pv1");
        // Mounted, so Filesystem; used as a device, so Block.
        assert_eq!(
            err(&storage, &pod, "raw").await,
            "volume raw has volumeMode Filesystem, but is specified in volumeDevices"
        );
        pv.spec.as_mut().unwrap().volume_mode = Some("Block".into());
        storage
            .volumes
            .lock()
            .unwrap()
            .insert("pv1".into(), pv.clone());
        assert!(resolve(&storage, &pod, &volume(&pod, "raw")).await.is_ok());
        assert_eq!(
            err(&storage, &pod, "data").await,
            "volume data has volumeMode Block, but is specified in volumeMounts"
        );
        pvc.metadata.deletion_timestamp = Some(yaml("\"2026-01-01T00:00:00Z\""));
        storage
            .claims
            .lock()
            .unwrap()
            .insert("ns/claim".into(), pvc);
        assert_eq!(
            err(&storage, &pod, "data").await,
            "error processing PVC ns/claim: PVC is being deleted"
        );
    }

    #[tokio::test]
    async fn an_ephemeral_volume_takes_the_claim_its_pod_owns() {
        let pod: Pod = yaml(POD);
        assert_eq!(
            claim_name(&pod, &volume(&pod, "scratch")).as_deref(),
            Some("web-scratch")
        );
        let storage = Storage::default();
        let pvc: PersistentVolumeClaim = yaml(
            "metadata: {name: web-scratch, namespace: ns, uid: cu, ownerReferences: [{apiVersion: v1, kind: Pod, name: web, uid: someone-else, controller: true}]}
spec: {volumeName: pv2}
status: {phase: Bound}",
        );
        storage
            .claims
            .lock()
            .unwrap()
            .insert("ns/web-scratch".into(), pvc.clone());
        assert_eq!(
            err(&storage, &pod, "scratch").await,
            "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)"
        );
        let mut owned = pvc;
        owned.metadata.owner_references.as_mut().unwrap()[0].uid = "pod-uid".into();
        storage
            .claims
            .lock()
            .unwrap()
            .insert("ns/web-scratch".into(), owned);
        let pv: PersistentVolume =
            yaml("metadata: {name: pv2}\nspec: {claimRef: {uid: cu}, local: {path: /x}}");
        storage.volumes.lock().unwrap().insert("pv2".into(), pv);
        let bound = resolve(&storage, &pod, &volume(&pod, "scratch"))
            .await
            .unwrap()
            .unwrap();
        assert!(!bound.read_only);
    }

    #[test]
    fn node_affinity_is_checked_against_the_node_labels() {
        let pv: PersistentVolume = yaml(
            "metadata: {name: local-pv}
spec:
  local: {path: /x}
  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n1]}]}]}}",
        );
        assert!(has_node_affinity(&pv));
        let labels =
            |h: &str| BTreeMap::from([("kubernetes.io/hostname".to_string(), h.to_string())]);
        assert!(check_node_affinity(&pv, "n1", &labels("n1")).is_ok());
        assert_eq!(
            check_node_affinity(&pv, "n2", &labels("n2"))
                .unwrap_err()
                .to_string(),
            "MountVolume.NodeAffinity check failed for volume \"local-pv\" : no matching NodeSelectorTerms"
        );
        let free: PersistentVolume = yaml("metadata: {name: p}\nspec: {local: {path: /x}}");
        assert!(!has_node_affinity(&free));
        assert!(check_node_affinity(&free, "n2", &BTreeMap::new()).is_ok());
    }
}
