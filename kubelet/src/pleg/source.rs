//! Where the PLEG reads the runtime: a small trait over the CRI calls it makes (so tests can
//! script a runtime), its implementation on [`Cri`], and filling a listed container in from
//! its `ContainerStatus`, termination message included.

use std::future::Future;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use ferrolet_proto::cri::{self, ContainerState};
use futures::{Stream, StreamExt};

use crate::cri::{Cri, CriError};
use crate::cri_log::{RenderOptions, Renderer, tail_start};
use crate::types::{RuntimeContainer, RuntimePod, labels};

/// A boxed future, as the trait's methods return.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
/// The runtime's container events: one item per event, the UID of the pod it is about when
/// it names one (that pod is relisted; the statuses it carries are not needed), ending when
/// the stream breaks.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Option<String>, CriError>> + Send>>;

/// The runtime calls the PLEG makes.
pub trait RuntimeSource: Send + Sync + 'static {
    /// Every sandbox and container, grouped by pod (`Cri::runtime_pods`).
    fn list(&self) -> BoxFut<'_, Result<Vec<RuntimePod>, CriError>>;
    /// Those of pod `uid` only (`Cri::runtime_pod`): none, or that one pod.
    fn list_pod(&self, uid: String) -> BoxFut<'_, Result<Vec<RuntimePod>, CriError>> {
        Box::pin(async move {
            let mut pods = self.list().await?;
            pods.retain(|p| p.uid == uid);
            Ok(pods)
        })
    }
    /// PodSandboxStatus.
    fn sandbox_status(&self, id: String) -> BoxFut<'_, Result<cri::PodSandboxStatus, CriError>>;
    /// ContainerStatus.
    fn container_status(&self, id: String) -> BoxFut<'_, Result<cri::ContainerStatus, CriError>>;
    /// GetContainerEvents; `Unimplemented` when the runtime has no events.
    fn events(&self) -> BoxFut<'_, Result<EventStream, CriError>>;
}

/// How long to wait for the runtime to accept an event subscription.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(30);

impl RuntimeSource for Cri {
    fn list(&self) -> BoxFut<'_, Result<Vec<RuntimePod>, CriError>> {
        Box::pin(self.runtime_pods())
    }

    fn list_pod(&self, uid: String) -> BoxFut<'_, Result<Vec<RuntimePod>, CriError>> {
        Box::pin(async move { self.runtime_pod(&uid).await })
    }

    fn sandbox_status(&self, id: String) -> BoxFut<'_, Result<cri::PodSandboxStatus, CriError>> {
        Box::pin(async move { self.pod_sandbox_status(&id).await })
    }

    fn container_status(&self, id: String) -> BoxFut<'_, Result<cri::ContainerStatus, CriError>> {
        Box::pin(async move { Cri::container_status(self, &id).await })
    }

    fn events(&self) -> BoxFut<'_, Result<EventStream, CriError>> {
        Box::pin(async move {
            let mut client = self.runtime();
            let call = client.get_container_events(cri::GetEventsRequest {});
            let stream = match tokio::time::timeout(SUBSCRIBE_TIMEOUT, call).await {
                Ok(Ok(resp)) => resp.into_inner(),
                Ok(Err(status)) => {
                    return Err(CriError::Call {
                        method: "GetContainerEvents",
                        status,
                    });
                }
                Err(_) => {
                    return Err(CriError::Timeout {
                        method: "GetContainerEvents",
                        timeout: SUBSCRIBE_TIMEOUT,
                    });
                }
            };
            let items = stream.map(|item| {
                item.map(|event| event_pod_uid(&event))
                    .map_err(|status| CriError::Call {
                        method: "GetContainerEvents",
                        status,
                    })
            });
            Ok(Box::pin(items) as EventStream)
        })
    }
}

/// The pod a container event is about: its sandbox's UID label (the one the relist groups
/// by), else the sandbox metadata's UID; None when the event carries no sandbox.
fn event_pod_uid(event: &cri::ContainerEventResponse) -> Option<String> {
    let sandbox = event.pod_sandbox_status.as_ref()?;
    sandbox
        .labels
        .get(labels::POD_UID)
        .cloned()
        .or_else(|| sandbox.metadata.as_ref().map(|m| m.uid.clone()))
        .filter(|uid| !uid.is_empty())
}

/// Container annotation with the termination message policy (the Go kubelet's key).
pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
/// Longest termination message kept, in bytes (Go's `MaxContainerTerminationMessageLength`).
const MAX_MESSAGE_BYTES: u64 = 4096;
/// Lines of log a `FallbackToLogsOnError` message is taken from.
const MAX_MESSAGE_LOG_LINES: usize = 80;
/// Bytes of log such a message keeps (the end of those lines).
const MAX_MESSAGE_LOG_BYTES: usize = 2048;

/// Copies what ContainerStatus knows into a listed container: state, times, exit code,
/// reason, message (with the termination message the container left, as Go reads it), log
/// path and image ref.
pub async fn fill_container(rc: &mut RuntimeContainer, status: cri::ContainerStatus) {
    rc.state = ContainerState::try_from(status.state).unwrap_or(rc.state);
    rc.started_at = status.started_at;
    rc.finished_at = status.finished_at;
    rc.exit_code = status.exit_code;
    rc.reason = status.reason;
    rc.message = status.message;
    rc.log_path = status.log_path;
    rc.resources = status.resources;
    if !status.image_ref.is_empty() {
        rc.image_ref = status.image_ref;
    }
    if rc.image.is_empty() {
        rc.image = status.image.map(|i| i.image).unwrap_or_default();
    }
    if rc.state != ContainerState::ContainerExited {
        return;
    }
    let path = rc
        .annotations
        .get(labels::TERMINATION_MESSAGE_PATH)
        .cloned()
        .unwrap_or_default();
    let fallback = rc
        .annotations
        .get(TERMINATION_MESSAGE_POLICY)
        .map(String::as_str)
        == Some("FallbackToLogsOnError")
        && rc.exit_code != 0
        && rc.reason != "ContainerCannotRun";
    let host_path = status
        .mounts
        .iter()
        .find(|m| !path.is_empty() && m.container_path == path)
        .map(|m| PathBuf::from(&m.host_path));
    let log_path = PathBuf::from(&rc.log_path);
    let text = tokio::task::spawn_blocking(move || {
        termination_message(host_path.as_deref(), fallback, &log_path)
    })
    .await
    .unwrap_or_default();
    if !text.is_empty() {
        if !rc.message.is_empty() {
            rc.message.push_str(": ");
        }
        rc.message.push_str(&text);
    }
}

/// The message file's last 4 KiB, or, when it is missing or empty and the policy says so, the
/// end of the container's log (Go's `getTerminationMessage` + `readLastStringFromContainerLogs`).
fn termination_message(file: Option<&Path>, fallback: bool, log: &Path) -> String {
    if let Some(file) = file {
        match read_last(file, MAX_MESSAGE_BYTES) {
            Ok(data) if !data.is_empty() || !fallback => {
                return String::from_utf8_lossy(&data).into_owned();
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return format!("Error on reading termination log {}: {e}", file.display()),
        }
    }
    if !fallback || log.as_os_str().is_empty() {
        return String::new();
    }
    last_log_lines(log).unwrap_or_default()
}

fn read_last(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let size = f.metadata()?.len();
    f.seek(SeekFrom::Start(size.saturating_sub(max)))?;
    let mut data = Vec::new();
    f.take(max).read_to_end(&mut data)?;
    Ok(data)
}

/// The last lines of a CRI log as text, at most 2 KiB of their end.
fn last_log_lines(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let start = tail_start(&mut f, MAX_MESSAGE_LOG_LINES)?;
    f.seek(SeekFrom::Start(start))?;
    let mut raw = Vec::new();
    f.read_to_end(&mut raw)?;
    let mut renderer = Renderer::new(RenderOptions::default());
    let mut out = Vec::new();
    for line in raw.split_inclusive(|b| *b == b'\n') {
        if line.ends_with(b"\n") {
            renderer.push_line(line, &mut out);
        } else {
            renderer.push_incomplete(line, &mut out);
        }
    }
    renderer.finish(&mut out);
    let cut = out.len().saturating_sub(MAX_MESSAGE_LOG_BYTES);
    Ok(String::from_utf8_lossy(&out[cut..]).into_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn exited(annotations: &[(&str, &str)], code: i32) -> (RuntimeContainer, cri::ContainerStatus) {
        let rc = RuntimeContainer {
            id: "c1".into(),
            state: ContainerState::ContainerRunning,
            image: "busybox".into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        let status = cri::ContainerStatus {
            id: "c1".into(),
            state: ContainerState::ContainerExited as i32,
            started_at: 5,
            finished_at: 9,
            exit_code: code,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            image_ref: "busybox@sha256:abc".into(),
            ..Default::default()
        };
        (rc, status)
    }

    #[tokio::test]
    async fn fills_status_fields_and_reads_the_termination_message() {
        let dir = tempfile::tempdir().unwrap();
        let msg = dir.path().join("termination-log");
        std::fs::write(&msg, "disk full").unwrap();
        let (mut rc, mut status) = exited(
            &[(labels::TERMINATION_MESSAGE_PATH, "/dev/termination-log")],
            1,
        );
        status.mounts.push(cri::Mount {
            container_path: "/dev/termination-log".into(),
            host_path: msg.display().to_string(),
            ..Default::default()
        });
        status.log_path = "/var/log/pods/x/app/0.log".into();
        fill_container(&mut rc, status).await;
        assert_eq!(rc.state, ContainerState::ContainerExited);
        assert_eq!((rc.started_at, rc.finished_at, rc.exit_code), (5, 9, 1));
        assert_eq!(rc.reason, "Error");
        assert_eq!(rc.message, "disk full");
        assert_eq!(rc.image_ref, "busybox@sha256:abc");
        assert_eq!(rc.log_path, "/var/log/pods/x/app/0.log");

        // Only the last 4 KiB of a long message.
        std::fs::write(&msg, "x".repeat(5000) + "END").unwrap();
        let (mut rc, mut status) = exited(
            &[(labels::TERMINATION_MESSAGE_PATH, "/dev/termination-log")],
            1,
        );
        status.message = "runtime says".into();
        status.mounts.push(cri::Mount {
            container_path: "/dev/termination-log".into(),
            host_path: msg.display().to_string(),
            ..Default::default()
        });
        fill_container(&mut rc, status).await;
        assert!(rc.message.starts_with("runtime says: xxx"));
        assert!(rc.message.ends_with("END"));
        assert_eq!(rc.message.len(), "runtime says: ".len() + 4096);
    }

    #[tokio::test]
    async fn falls_back_to_the_log_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        let mut text = String::new();
        for i in 0..100 {
            text.push_str(&format!("2024-05-01T10:00:00Z stderr F line {i}\n"));
        }
        std::fs::write(&log, &text).unwrap();
        let policy = [
            (labels::TERMINATION_MESSAGE_PATH, "/dev/termination-log"),
            (TERMINATION_MESSAGE_POLICY, "FallbackToLogsOnError"),
        ];
        let (mut rc, mut status) = exited(&policy, 2);
        status.log_path = log.display().to_string();
        fill_container(&mut rc, status.clone()).await;
        assert!(rc.message.ends_with("line 99\n"), "{}", rc.message);
        assert!(!rc.message.contains("line 19\n"), "only the last 80 lines");
        assert!(rc.message.len() <= 2048);

        // Exit 0: no fallback.
        let (mut rc, mut ok) = exited(&policy, 0);
        ok.log_path = status.log_path.clone();
        fill_container(&mut rc, ok).await;
        assert_eq!(rc.message, "");
    }
}
