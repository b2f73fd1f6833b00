//! The pods' cgroups through the container manager, at the points Go's kubelet touches them:
//! made (with the QoS cgroups updated) before a pod's sandbox, destroyed once its containers
//! and sandboxes are gone, swept in housekeeping when no pod wants them (also after a
//! restart), and the QoS cgroups refreshed every minute.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Kubelet;
use crate::cm::CmError;
use crate::types::Pod;

/// How often the QoS cgroups are rewritten for the active pods (Go's periodic update).
pub(super) const QOS_UPDATE_PERIOD: Duration = Duration::from_secs(60);

impl Kubelet {
    /// The pods the QoS cgroups account for: admitted and not finished (Go's active pods).
    /// Only the shared pods are copied, not their states.
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|s| !s.rejected && !s.terminating && !s.terminated)
            .filter(|s| {
                !matches!(
                    s.status.phase.as_deref(),
                    Some("Succeeded") | Some("Failed")
                )
            })
            .map(|s| s.pod.clone())
            .collect()
    }

    /// Makes `pod`'s cgroup unless it exists (Go's `EnsureExists`), before its sandbox. Every
    /// sync asks, so the common answer (it exists) costs one look and no list of pods.
    pub(crate) async fn ensure_pod_cgroup(&self, pod: &Arc<Pod>) -> Result<(), CmError> {
        let Some(cm) = self.cm.clone() else {
            return Ok(());
        };
        let (look, p) = (cm.clone(), pod.clone());
        let exists = tokio::task::spawn_blocking(move || look.pod_cgroup_exists(&p))
            .await
            .map_err(|e| CmError::Join(e.to_string()))??;
        if exists {
            return Ok(());
        }
        let mut active = self.active_pods();
        if !active.iter().any(|p| Arc::ptr_eq(p, pod)) {
            active.push(pod.clone());
        }
        let pod = pod.clone();
        let made = tokio::task::spawn_blocking(move || {
            let refs: Vec<&Pod> = active.iter().map(|p| p.as_ref()).collect();
            cm.ensure_pod(&pod, &refs)
        })
        .await
        .map_err(|e| CmError::Join(e.to_string()))??;
        if made {
            tracing::debug!("pod cgroup made");
        }
        Ok(())
    }

    /// Removes pod `uid`'s cgroup after killing what is left in it (Go's `Destroy` at the
    /// end of a pod's termination).
    pub(crate) async fn destroy_pod_cgroup(&self, uid: &str) {
        let Some(cm) = self.cm.clone() else {
            return;
        };
        let uid_owned = uid.to_string();
        let done = tokio::task::spawn_blocking(move || cm.destroy_pod(&uid_owned)).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(uid, error = %e, "removing the pod's cgroup"),
            Err(e) => tracing::warn!(uid, error = %e, "removing the pod's cgroup"),
        }
    }

    /// Removes the cgroups of pods that are neither wanted nor running (Go's
    /// `cleanupOrphanedPodCgroups`), and rewrites the QoS cgroups when their period is up.
    pub(crate) async fn sweep_pod_cgroups(
        &self,
        known: impl Fn(&str) -> bool,
        last_qos: &mut Instant,
    ) {
        let Some(cm) = self.cm.clone() else {
            return;
        };
        let running: BTreeSet<String> = self.pleg.all().into_iter().map(|p| p.uid).collect();
        let listing = cm.clone();
        let found = tokio::task::spawn_blocking(move || listing.pod_cgroups())
            .await
            .map_err(|e| CmError::Join(e.to_string()))
            .and_then(|r| r);
        let orphans: Vec<String> = match found {
            Ok(found) => found
                .into_iter()
                .map(|(uid, _)| uid)
                .filter(|uid| !known(uid) && !running.contains(uid))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "housekeeping: listing pod cgroups");
                Vec::new()
            }
        };
        for uid in orphans {
            tracing::info!(
                uid,
                "housekeeping: removing the cgroup of a pod no source wants"
            );
            self.destroy_pod_cgroup(&uid).await;
        }
        if last_qos.elapsed() >= QOS_UPDATE_PERIOD {
            *last_qos = Instant::now();
            let active = self.active_pods();
            let updated = tokio::task::spawn_blocking(move || {
                let refs: Vec<&Pod> = active.iter().map(|p| p.as_ref()).collect();
                cm.update_qos(&refs)
            })
            .await;
            if let Ok(Err(e)) = updated {
                tracing::warn!(error = %e, "housekeeping: updating the QoS cgroups");
            }
        }
    }
}
