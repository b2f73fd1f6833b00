//! Making sure a container's image is there, per its `imagePullPolicy`, with the image-pull
//! back-off and the waiting reasons the Go kubelet reports. Pulls try the credentials the
//! pod's keyring ([`crate::credentials`]) matches for the image, in turn.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Container, LocalObjectReference, ObjectReference};

use crate::backoff::Backoff;
use crate::credentials::Credentials;
use crate::cri::Cri;
use crate::events::{EventRecorder, EventType, reason};
use crate::status::Waiting;

/// An image ready for CreateContainer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ensured {
    /// The image id to create the container from.
    pub id: String,
    /// When its pull began (its `Pulling` event, before any wait for another pull), when it
    /// had to be pulled.
    pub pulled_from: Option<Instant>,
}

/// The image manager: pulls per policy, with back-off, one at a time when pulls are
/// serialized (`serializeImagePulls`).
pub struct ImageManager {
    cri: Cri,
    credentials: Credentials,
    serialize: bool,
    backoff: Backoff,
    errors: PullErrors,
    lock: tokio::sync::Mutex<()>,
}

/// Whose pull it is: the pod's UID, namespace and `imagePullSecrets`.
#[derive(Clone, Debug, Default)]
pub struct PullFor {
    /// The pod's UID (the back-off is per pod and image).
    pub uid: String,
    /// The pod's namespace, where its pull secrets live.
    pub namespace: String,
    /// The pod's `imagePullSecrets`.
    pub pull_secrets: Vec<LocalObjectReference>,
}

impl PullFor {
    /// The pull of `pod`'s images.
    pub fn pod(pod: &crate::types::Pod) -> Self {
        Self {
            uid: crate::types::uid_of(pod),
            namespace: pod
                .metadata
                .namespace
                .clone()
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| "default".into()),
            pull_secrets: pod
                .spec
                .as_ref()
                .and_then(|s| s.image_pull_secrets.clone())
                .unwrap_or_default(),
        }
    }
}

impl ImageManager {
    /// A manager pulling through `cri` with the node's `credentials`.
    pub fn new(cri: Cri, credentials: Credentials, serialize: bool) -> Self {
        Self {
            cri,
            credentials,
            serialize,
            backoff: Backoff::image_pull(),
            errors: PullErrors::default(),
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Drops back-off entries that have expired.
    pub fn gc_backoff(&self, now: Instant) {
        self.backoff.gc(now);
    }

    /// The image to create the container from, or why the container must wait (Go's
    /// `EnsureImageExists` for a container's image).
    /// `desired` says which pod UIDs are still wanted (old pull errors of others are dropped);
    /// the Go image manager's events about `object` (the container) go to `events`.
    pub async fn ensure_image(
        &self,
        pull: &PullFor,
        container: &Container,
        desired: &(dyn Fn(&str) -> bool + Sync),
        events: (&dyn EventRecorder, &ObjectReference),
    ) -> Result<Ensured, Waiting> {
        let image = container.image.as_deref().unwrap_or_default();
        let policy = container.image_pull_policy.as_deref();
        self.ensure(pull, image, policy, desired, events).await
    }

    /// `image` made present per pull `policy` (None: `IfNotPresent`), for a container or an
    /// image volume (Go's `EnsureImageExists`, which serves both): its id, or why whatever
    /// needs it must wait. Events about `object` go to `events`.
    pub async fn ensure(
        &self,
        pull: &PullFor,
        image: &str,
        policy: Option<&str>,
        desired: &(dyn Fn(&str) -> bool + Sync),
        events: (&dyn EventRecorder, &ObjectReference),
    ) -> Result<Ensured, Waiting> {
        let (events, object) = events;
        let event = |kind, why: &str, message: &str| events.record(object, kind, why, message);
        let uid = pull.uid.as_str();
        let image = image.to_string();
        if image.is_empty() {
            return Err(Waiting {
                reason: "InvalidImageName".into(),
                message: "the container has no image".into(),
            });
        }
        let policy = policy
            .filter(|p| !p.is_empty())
            .unwrap_or("IfNotPresent")
            .to_string();
        let present = match self.cri.image_id(&image).await {
            Ok(id) => id,
            Err(e) => {
                let message = format!("Failed to inspect image \"{image}\": {e}");
                event(EventType::Warning, reason::INSPECT_FAILED, &message);
                return Err(Waiting {
                    reason: "ErrImagePull".into(),
                    message: format!("checking image {image}: {e}"),
                });
            }
        };
        match (policy.as_str(), present) {
            ("Never", Some(id)) | ("IfNotPresent", Some(id)) => {
                let message = format!("Container image \"{image}\" already present on machine");
                event(EventType::Normal, reason::PULLED, &message);
                return Ok(Ensured {
                    id,
                    pulled_from: None,
                });
            }
            ("Never", None) => {
                let message =
                    format!("Container image \"{image}\" is not present with pull policy of Never");
                event(EventType::Warning, reason::ERR_IMAGE_NEVER_PULL, &message);
                return Err(Waiting {
                    reason: "ErrImageNeverPull".into(),
                    message,
                });
            }
            _ => {}
        }
        let key = format!("{uid}/{image}");
        if self.backoff.in_backoff(&key, Instant::now()).is_some() {
            let message = format!("Back-off pulling image \"{image}\"");
            event(EventType::Normal, reason::BACK_OFF, &message);
            // As the Go kubelet, the waiting message carries the error that started the wait.
            let message = match self.errors.last(&key) {
                Some(error) => format!("Back-off pulling image \"{image}\": {error}"),
                None => format!("Back-off pulling image \"{image}\""),
            };
            return Err(Waiting {
                reason: "ImagePullBackOff".into(),
                message,
            });
        }
        self.errors.forget(&key);
        event(
            EventType::Normal,
            reason::PULLING,
            &format!("Pulling image \"{image}\""),
        );
        let waited_from = Instant::now();
        let _serial = if self.serialize {
            Some(self.lock.lock().await)
        } else {
            None
        };
        let pull_from = Instant::now();
        match self.pull_with_credentials(pull, &image).await {
            Ok(image_ref) => {
                let message = format!(
                    "Successfully pulled image \"{image}\" in {} ({} including waiting)",
                    go_duration(pull_from.elapsed()),
                    go_duration(waited_from.elapsed())
                );
                event(EventType::Normal, reason::PULLED, &message);
                self.backoff.reset(&key);
                // The id is what CreateContainer wants; the ref is close enough if status fails.
                let id = self
                    .cri
                    .image_id(&image)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(image_ref);
                Ok(Ensured {
                    id,
                    pulled_from: Some(waited_from),
                })
            }
            Err(error) => {
                let message = format!("Failed to pull image \"{image}\": {error}");
                event(EventType::Warning, reason::FAILED, &message);
                self.backoff.next(&key, Instant::now());
                let message = format!("pulling image \"{image}\": {error}");
                self.errors.record(key, error, desired);
                Err(Waiting {
                    reason: "ErrImagePull".into(),
                    message,
                })
            }
        }
    }

    /// Pulls `image` for pod `uid` as the Go kubelet's `PullImage` does: with each credential
    /// the pod's keyring matches, in order, until one works (anonymously when none matches);
    /// when all fail, the last error's text.
    async fn pull_with_credentials(&self, pull: &PullFor, image: &str) -> Result<String, String> {
        let uid = pull.uid.as_str();
        let keyring = self
            .credentials
            .keyring(&pull.namespace, &pull.pull_secrets)
            .await
            .map_err(|e| e.to_string())?;
        let matches = keyring.matches(image);
        if matches.is_empty() {
            tracing::info!(pod = uid, %image, "pulling image without credentials");
            return self
                .cri
                .pull_image(image, None, None)
                .await
                .map_err(|e| e.to_string());
        }
        let tries = matches.len();
        let mut last = String::new();
        for (n, m) in matches.iter().enumerate() {
            tracing::info!(
                pod = uid,
                %image,
                registry = m.registry,
                source = %m.source,
                attempt = n + 1,
                of = tries,
                "pulling image with credentials"
            );
            match self
                .cri
                .pull_image(image, Some(m.auth_config()), None)
                .await
            {
                Ok(image_ref) => return Ok(image_ref),
                Err(e) => {
                    tracing::info!(pod = uid, %image, source = %m.source, error = %e, "pull with these credentials failed");
                    last = e.to_string();
                }
            }
        }
        Err(if tries == 1 {
            last
        } else {
            format!("{tries} credentials tried; the last failed: {last}")
        })
    }
}

/// A duration as Go prints one truncated to milliseconds (`1.234s`, `850ms`, `1m2.5s`).
pub fn go_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, frac) = (rest / 1000, rest % 1000);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&s.to_string());
    if frac > 0 {
        let digits = format!("{frac:03}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    out.push('s');
    out
}

/// The last pull error per back-off key (`<uid>/<image>`), shown in `ImagePullBackOff`
/// messages while the pull waits (the Go kubelet's `prevPullErrMsg`).
#[derive(Debug, Default)]
pub struct PullErrors(Mutex<HashMap<String, String>>);

impl PullErrors {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // Every update is a single insert or remove: a poisoned map is still consistent.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The error of the last failed pull for `key`.
    pub fn last(&self, key: &str) -> Option<String> {
        self.map().get(key).cloned()
    }

    /// Forgets `key` (a new pull starts).
    pub fn forget(&self, key: &str) {
        self.map().remove(key);
    }

    /// Records the error of a failed pull, dropping entries of pods `desired` no longer
    /// knows so the map cannot grow without bound.
    pub fn record(&self, key: String, error: String, desired: impl Fn(&str) -> bool) {
        let mut map = self.map();
        map.retain(|k, _| k.split_once('/').is_some_and(|(uid, _)| desired(uid)));
        map.insert(key, error);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use ferrolet_proto::cri;

    #[test]
    fn pull_errors_remember_the_last_and_drop_gone_pods() {
        let errors = PullErrors::default();
        errors.record("a/img:1".into(), "first".into(), |_| true);
        errors.record("a/img:1".into(), "second".into(), |_| true);
        assert_eq!(errors.last("a/img:1").as_deref(), Some("second"));
        errors.record("b/img:1".into(), "other".into(), |uid| uid != "a");
        assert_eq!(errors.last("a/img:1"), None);
        assert_eq!(errors.last("b/img:1").as_deref(), Some("other"));
        errors.forget("b/img:1");
        assert_eq!(errors.last("b/img:1"), None);
    }

    /// An image service that has `present` and pulls anything else (failing "bad/...").
    struct FakeImages {
        present: Mutex<Vec<String>>,
    }

    #[tonic::async_trait]
    impl ferrolet_proto::cri::image_service_server::ImageService for FakeImages {
        async fn list_images(
            &self,
            _: tonic::Request<cri::ListImagesRequest>,
        ) -> Result<tonic::Response<cri::ListImagesResponse>, tonic::Status> {
            Ok(tonic::Response::new(Default::default()))
        }

        async fn image_status(
            &self,
            req: tonic::Request<cri::ImageStatusRequest>,
        ) -> Result<tonic::Response<cri::ImageStatusResponse>, tonic::Status> {
            let name = req.into_inner().image.unwrap_or_default().image;
            let present = self.present.lock().unwrap().contains(&name);
            let image = present.then(|| cri::Image {
                id: format!("sha256:{name}"),
                ..Default::default()
            });
            Ok(tonic::Response::new(cri::ImageStatusResponse {
                image,
                ..Default::default()
            }))
        }

        async fn pull_image(
            &self,
            req: tonic::Request<cri::PullImageRequest>,
        ) -> Result<tonic::Response<cri::PullImageResponse>, tonic::Status> {
            let name = req.into_inner().image.unwrap_or_default().image;
            if name.starts_with("bad/") {
                return Err(tonic::Status::not_found("no such image"));
            }
            self.present.lock().unwrap().push(name.clone());
            Ok(tonic::Response::new(cri::PullImageResponse {
                image_ref: format!("sha256:{name}"),
            }))
        }

        async fn remove_image(
            &self,
            _: tonic::Request<cri::RemoveImageRequest>,
        ) -> Result<tonic::Response<cri::RemoveImageResponse>, tonic::Status> {
            Ok(tonic::Response::new(Default::default()))
        }

        async fn image_fs_info(
            &self,
            _: tonic::Request<cri::ImageFsInfoRequest>,
        ) -> Result<tonic::Response<cri::ImageFsInfoResponse>, tonic::Status> {
            Ok(tonic::Response::new(Default::default()))
        }
    }

    #[tokio::test]
    async fn pulls_record_gos_image_events() {
        use crate::events::{EventType, MemoryRecorder};
        use ferrolet_proto::cri::image_service_server::ImageServiceServer;
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("unix://{}/cri.sock", dir.path().display());
        let listener = ferrolet_proto::transport::bind(&endpoint, 0o600).unwrap();
        let fake = FakeImages {
            present: Mutex::new(vec!["here:1".into()]),
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ImageServiceServer::new(fake))
                .serve_with_incoming(ferrolet_proto::transport::incoming(listener, true)),
        );
        let cri = Cri::connect(&endpoint, "", std::time::Duration::from_secs(5))
            .await
            .unwrap();
        let credentials = Credentials::load(
            dir.path(),
            std::sync::Arc::new(crate::credentials::NoSecrets),
        )
        .await;
        let manager = ImageManager::new(cri, credentials, true);
        let events = MemoryRecorder::default();
        let object = ObjectReference {
            name: Some("web".into()),
            field_path: Some("spec.containers{app}".into()),
            ..Default::default()
        };
        let pull = PullFor {
            uid: "u1".into(),
            namespace: "default".into(),
            pull_secrets: Vec::new(),
        };
        let container = |image: &str, policy: &str| Container {
            name: "app".into(),
            image: Some(image.into()),
            image_pull_policy: Some(policy.into()),
            ..Default::default()
        };
        let ensure = |c: Container| {
            let (manager, pull, events, object) = (&manager, &pull, &events, &object);
            async move {
                manager
                    .ensure_image(pull, &c, &|_| true, (events, object))
                    .await
            }
        };
        assert!(ensure(container("here:1", "IfNotPresent")).await.is_ok());
        assert!(ensure(container("new:1", "Always")).await.is_ok());
        assert!(ensure(container("bad/x:1", "Always")).await.is_err());
        let waiting = ensure(container("bad/x:1", "Always")).await.unwrap_err();
        assert_eq!(waiting.reason, "ImagePullBackOff");
        let recorded = events.events.lock().unwrap().clone();
        let got: Vec<_> = recorded
            .iter()
            .map(|(_, _, kind, reason, message)| (*kind, reason.as_str(), message.as_str()))
            .collect();
        assert_eq!(
            got[0],
            (
                EventType::Normal,
                "Pulled",
                "Container image \"here:1\" already present on machine"
            )
        );
        assert_eq!(
            got[1],
            (EventType::Normal, "Pulling", "Pulling image \"new:1\"")
        );
        assert_eq!((got[2].0, got[2].1), (EventType::Normal, "Pulled"));
        assert!(
            got[2]
                .2
                .starts_with("Successfully pulled image \"new:1\" in "),
            "{}",
            got[2].2
        );
        assert!(got[2].2.ends_with(" including waiting)"), "{}", got[2].2);
        assert_eq!(
            got[3],
            (EventType::Normal, "Pulling", "Pulling image \"bad/x:1\"")
        );
        assert_eq!((got[4].0, got[4].1), (EventType::Warning, "Failed"));
        assert!(
            got[4].2.starts_with("Failed to pull image \"bad/x:1\": "),
            "{}",
            got[4].2
        );
        assert_eq!(
            got[5],
            (
                EventType::Normal,
                "BackOff",
                "Back-off pulling image \"bad/x:1\""
            )
        );
        assert_eq!(got.len(), 6);
        assert!(recorded.iter().all(|e| e.1 == "spec.containers{app}"));
    }

    #[test]
    fn go_durations() {
        use std::time::Duration;
        for (ms, want) in [
            (0, "0s"),
            (850, "850ms"),
            (1000, "1s"),
            (1200, "1.2s"),
            (1234, "1.234s"),
            (62_500, "1m2.5s"),
            (3_600_000, "1h0m0s"),
        ] {
            assert_eq!(go_duration(Duration::from_millis(ms)), want, "{ms}");
        }
    }
}
