//! Image volumes (`volumes[].image`, Kubernetes 1.31+) as Go's kuberuntime handles them
//! (`getImageVolumes`, `toKubeContainerImageVolumes`): before a sync starts containers, each
//! image volume's image is made present through the image manager with the volume's
//! `pullPolicy` and the pod's pull secrets (events on the pod); a container that mounts a
//! volume whose pull failed waits with that pull's reason (`ErrImagePull`,
//! `ImagePullBackOff`, `ErrImageNeverPull`; a `Failed` event `Error: <reason>` on it per
//! failed volume); the others get CRI `Mount.image` for the runtime to mount
//! ([`crate::volume::mounts`]). Nothing of them is made on the node.
//!
//! Go pulls them on every SyncPod; ferrolet only on a pass that starts a container (which
//! is when they are used), so `Always` does not contact the registry on every resync.

use std::collections::BTreeMap;

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::Container;

use super::Kubelet;
use crate::images::PullFor;
use crate::manifest::defaults::image_tag;
use crate::status::Waiting;
use crate::types::Pod;

/// Each image volume's pull: the image for CRI, or why its users wait; by volume name.
pub(crate) type ImageVolumePulls = BTreeMap<String, Result<cri::ImageSpec, Waiting>>;

/// An image volume's pull policy: as given, else the API's default (`Always` for `:latest`
/// or no tag, else `IfNotPresent`), for pods that reach us undefaulted.
fn pull_policy(reference: &str, given: Option<&str>) -> String {
    match given.filter(|p| !p.is_empty()) {
        Some(p) => p.to_string(),
        None if image_tag(reference) == "latest" => "Always".into(),
        None => "IfNotPresent".into(),
    }
}

impl Kubelet {
    /// Makes every image volume's image of `pod` present, in spec order (Go pulls them all
    /// before any container starts, whichever mounts them).
    pub(crate) async fn pull_image_volumes(&self, pod: &Pod) -> ImageVolumePulls {
        let volumes = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| Some((v.name.as_str(), v.image.as_ref()?)));
        let mut pulls = ImageVolumePulls::new();
        let pull = PullFor::pod(pod);
        let object = crate::events::pod_ref(pod);
        let known = |uid: &str| self.knows(uid);
        for (name, source) in volumes {
            let reference = source.reference.as_deref().unwrap_or_default();
            let policy = pull_policy(reference, source.pull_policy.as_deref());
            let ensured = self
                .images
                .ensure(
                    &pull,
                    reference,
                    Some(&policy),
                    &known,
                    (&*self.events, &object),
                )
                .await;
            let result = ensured.map(|e| cri::ImageSpec {
                image: e.id,
                user_specified_image: reference.to_string(),
                annotations: pod
                    .metadata
                    .annotations
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                ..Default::default()
            });
            if let Err(w) = &result {
                tracing::warn!(volume = name, image = reference, reason = %w.reason, "image volume not ready: {}", w.message);
            }
            pulls.insert(name.to_string(), result);
        }
        pulls
    }

    /// The image references of the image volumes of every pod the kubelet knows (desired or
    /// still being killed): the image GC keeps their images.
    pub(crate) fn image_volume_references(&self) -> Vec<String> {
        self.pods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .flat_map(|s| {
                s.pod
                    .spec
                    .iter()
                    .flat_map(|spec| spec.volumes.iter().flatten())
            })
            .filter_map(|v| v.image.as_ref()?.reference.clone())
            .filter(|r| !r.is_empty())
            .collect()
    }
}

/// The images of the image volumes container `c` mounts, by volume name, or the failed
/// pulls among them, in mount order (Go's `toKubeContainerImageVolumes`: an event for each,
/// the container waits with the last).
pub(crate) fn container_image_volumes(
    pulls: &ImageVolumePulls,
    c: &Container,
) -> Result<BTreeMap<String, cri::ImageSpec>, Vec<Waiting>> {
    let mut images = BTreeMap::new();
    let mut failed = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        match pulls.get(&m.name) {
            Some(Ok(spec)) => {
                images.insert(m.name.clone(), spec.clone());
            }
            Some(Err(w)) => failed.push(w.clone()),
            None => {}
        }
    }
    if failed.is_empty() {
        Ok(images)
    } else {
        Err(failed)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::VolumeMount;

    #[test]
    fn the_pull_policy_defaults_as_the_api_s() {
        assert_eq!(pull_policy("busybox", None), "Always");
        assert_eq!(pull_policy("busybox:latest", Some("")), "Always");
        assert_eq!(
            pull_policy("127.0.0.1:5000/ferrolet/httpd:1", None),
            "IfNotPresent"
        );
        assert_eq!(pull_policy("busybox", Some("Never")), "Never");
    }

    #[test]
    fn a_container_waits_for_the_volumes_it_mounts_only() {
        let spec = |image: &str| cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        };
        let waiting = Waiting {
            reason: "ErrImagePull".into(),
            message: "pulling image \"x\": not found".into(),
        };
        let pulls = ImageVolumePulls::from([
            ("good".to_string(), Ok(spec("sha256:1"))),
            ("bad".to_string(), Err(waiting.clone())),
        ]);
        let mounting = |names: &[&str]| Container {
            name: "c".into(),
            volume_mounts: Some(
                names
                    .iter()
                    .map(|n| VolumeMount {
                        name: n.to_string(),
                        mount_path: format!("/{n}"),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        };
        let images = container_image_volumes(&pulls, &mounting(&["good", "data"])).unwrap();
        assert_eq!(images.len(), 1);
        assert_eq!(images["good"].image, "sha256:1");
        let err = container_image_volumes(&pulls, &mounting(&["good", "bad"])).unwrap_err();
        assert_eq!(err, [waiting]);
    }
}
