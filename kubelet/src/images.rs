//! Making sure a container's image is there, per its `imagePullPolicy`, with the image-pull
//! back-off and the waiting reasons the Go kubelet reports.

use std::time::Instant;

use k8s_openapi::api::core::v1::Container;

use crate::kubelet::Kubelet;
use crate::status::Waiting;

impl Kubelet {
    /// The image id to create the container from, or why the container must wait.
    pub async fn ensure_image(&self, uid: &str, container: &Container) -> Result<String, Waiting> {
        let image = container.image.clone().unwrap_or_default();
        if image.is_empty() {
            return Err(Waiting {
                reason: "InvalidImageName".into(),
                message: "the container has no image".into(),
            });
        }
        let policy = container
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| "IfNotPresent".into());
        let present = match self.cri.image_id(&image).await {
            Ok(id) => id,
            Err(e) => {
                return Err(Waiting {
                    reason: "ErrImagePull".into(),
                    message: format!("checking image {image}: {e}"),
                });
            }
        };
        match (policy.as_str(), present) {
            ("Never", Some(id)) | ("IfNotPresent", Some(id)) => return Ok(id),
            ("Never", None) => {
                return Err(Waiting {
                    reason: "ErrImageNeverPull".into(),
                    message: format!(
                        "Container image \"{image}\" is not present with pull policy of Never"
                    ),
                });
            }
            _ => {}
        }
        let key = format!("{uid}/{image}");
        if let Some(left) = self.pull_backoff.in_backoff(&key, Instant::now()) {
            return Err(Waiting {
                reason: "ImagePullBackOff".into(),
                message: format!(
                    "Back-off pulling image \"{image}\" ({}s left)",
                    left.as_secs()
                ),
            });
        }
        let _serial = if self.config.serialize_image_pulls {
            Some(self.pull_lock.lock().await)
        } else {
            None
        };
        tracing::info!(pod = uid, %image, "pulling image");
        match self.cri.pull_image(&image, None, None).await {
            Ok(image_ref) => {
                self.pull_backoff.reset(&key);
                // The id is what CreateContainer wants; the ref is close enough if status fails.
                Ok(self
                    .cri
                    .image_id(&image)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(image_ref))
            }
            Err(e) => {
                self.pull_backoff.next(&key, Instant::now());
                Err(Waiting {
                    reason: "ErrImagePull".into(),
                    message: format!("pulling image \"{image}\": {e}"),
                })
            }
        }
    }
}
