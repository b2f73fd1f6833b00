//! The kubelet's side of the volume manager: which pods' volumes are wanted, and releasing
//! them once a pod's containers are gone (Go's rule: volumes outlive the containers using
//! them, never the other way round).

use std::sync::Arc;
use std::time::Duration;

use super::Kubelet;
use crate::types::Pod;
use crate::volume::VolumeError;

/// How long a kill waits for the volume manager to tear the pod's volumes down before it
/// removes the pod's directory itself (which unmounts whatever is left).
const UNMOUNT_WAIT: Duration = Duration::from_secs(10);

impl Kubelet {
    /// Wants the volumes of an admitted pod, unless eviction stopped it (its volumes stay
    /// released until its source removes it).
    pub(crate) fn want_volumes(&self, uid: &str, pod: &Arc<Pod>) {
        if self.eviction.evicted(uid).is_none() {
            self.volumes.add_pod(pod);
        }
    }

    /// Releases pod `uid`'s volumes once its containers are gone: the volume manager tears
    /// them down, then the pod's directory goes (etc-hosts, containers/, anything left).
    pub(crate) async fn release_volumes(&self, uid: &str) -> Result<(), VolumeError> {
        self.volumes.remove_pod(uid);
        if !self.volumes.wait_for_unmount(uid, UNMOUNT_WAIT).await {
            tracing::warn!(
                uid,
                "volumes not torn down in time; removing the pod dir anyway"
            );
        }
        crate::volume::teardown(&self.config.root_dir, uid).await?;
        // Go releases the range when the pod's directory is cleaned up.
        self.userns.release(uid);
        Ok(())
    }
}
