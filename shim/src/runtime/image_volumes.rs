//! Image volumes (CRI `Mount.image`, Kubernetes `volumes[].image`): a CreateContainer mount
//! that names an image instead of a host path gets a read-only view (`Snapshots.View`) of
//! the image's top snapshot, made under the container's snapshot lease and kept by its
//! record's `containerd.io/gc.ref.snapshot.*` labels; the view's own mounts go into the OCI
//! spec ([`crate::oci::ImageVolume`]), so runc mounts them inside the container's mount
//! namespace and nothing is mounted on the host: there is nothing to unmount, before or
//! after a restart. RemoveContainer (and the sweeper, for a container nobody owns) removes
//! the views by their keys ([`store::image_volume_key`]).
//!
//! containerd 2.x mounts one writable snapshot per (sandbox, image) on the host under its
//! state dir and binds it into the pod's containers until StopPodSandbox; the checks on the
//! request (no host path, read-only) are its checks.

use ferrolet_proto::cri;

use super::{Result, RuntimeError, RuntimeInner};
use crate::image::store::Image;
use crate::oci::ImageVolume;
use crate::store;
use crate::task::{self, PreparedSnapshot};

/// An image volume checked and its image found, before anything is made.
pub(super) struct ResolvedImageVolume {
    /// Index of the mount in the request.
    index: usize,
    /// The image's top snapshot.
    chain_id: String,
}

/// The mounts of `config` that name an image, with their index.
fn image_mounts(config: &cri::ContainerConfig) -> impl Iterator<Item = (usize, &cri::Mount)> {
    config
        .mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| m.image.is_some())
}

impl RuntimeInner {
    /// Checks each image volume of `config` and finds its image (by reference or id), so
    /// that a bad one fails CreateContainer `name` before anything is made.
    pub(super) fn resolve_image_volumes(
        &self,
        name: &str,
        config: &cri::ContainerConfig,
    ) -> Result<Vec<ResolvedImageVolume>> {
        image_mounts(config)
            .map(|(index, m)| {
                let reference = m.image.as_ref().map(|i| i.image.as_str()).unwrap_or("");
                let what = format!(
                    "CreateContainer {name:?}: image volume mounts[{index}] at {:?}",
                    m.container_path
                );
                if reference.is_empty() {
                    return Err(RuntimeError::invalid(format!(
                        "{what}: image.image must not be empty"
                    )));
                }
                if !m.host_path.is_empty() {
                    return Err(RuntimeError::invalid(format!(
                        "{what}: host_path must be empty when an image is mounted (got {:?})",
                        m.host_path
                    )));
                }
                if !m.readonly {
                    return Err(RuntimeError::invalid(format!(
                        "{what}: readonly must be true when an image is mounted"
                    )));
                }
                let image: Image = self.images.resolve(reference).ok_or_else(|| {
                    RuntimeError::not_found(format!(
                        "{what}: image {reference:?} not found; pull it first"
                    ))
                })?;
                if image.chain_id.is_empty() {
                    return Err(RuntimeError::precondition(format!(
                        "{what}: image {reference:?} ({}) has no layers to mount",
                        image.id
                    )));
                }
                Ok(ResolvedImageVolume {
                    index,
                    chain_id: image.chain_id,
                })
            })
            .collect()
    }

    /// Makes the views of container `id`'s image volumes under its snapshot's lease; a
    /// failure leaves the views made so far to the caller's [`PreparedSnapshot::abandon`].
    pub(super) async fn make_image_volumes(
        &self,
        id: &str,
        snapshot: &mut PreparedSnapshot,
        resolved: &[ResolvedImageVolume],
    ) -> Result<Vec<ImageVolume>> {
        let mut volumes = Vec::with_capacity(resolved.len());
        for r in resolved {
            let key = store::image_volume_key(id, r.index);
            let mounts = snapshot.view(&self.cd, &key, &r.chain_id).await?;
            volumes.push(ImageVolume {
                index: r.index,
                mounts,
            });
        }
        Ok(volumes)
    }

    /// Removes the views of container `id`'s image volumes (`config` is its request), each
    /// tried whatever the others did; views that are gone already are fine.
    pub(super) async fn remove_image_volumes(
        &self,
        id: &str,
        config: &cri::ContainerConfig,
    ) -> Result<()> {
        let mut results = Vec::new();
        for (index, _) in image_mounts(config) {
            let key = store::image_volume_key(id, index);
            let removed = task::remove_snapshot(&self.cd, &self.opts.snapshotter, &key).await;
            results.push(removed.map_err(RuntimeError::from));
        }
        super::all_of(results)
    }
}
