//! Task exits and OOM kills from containerd's event stream drive container and sandbox state
//! (no polling); the kernel's own OOM reports (`/dev/kmsg`) back up the OOM events; our own
//! state changes go out to GetContainerEvents subscribers.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ferrolet_proto::containerd::events::{TaskExit, TaskOom};
use ferrolet_proto::containerd::types::Envelope;
use ferrolet_proto::cri::{self, ContainerEventType};
use ferrolet_proto::prost::Message;
use tokio::sync::broadcast::error::RecvError;

use super::{Result, RuntimeError, RuntimeInner};
use crate::container::{Container, ContainerState};
use crate::sandbox::{Sandbox, SandboxState};
use crate::task::{self, TaskState};

/// containerd's stream of exit and OOM events for our namespace.
pub type ExitStream = tonic::Streaming<Envelope>;

/// A topic we publish to ourselves: containerd answers a subscription only with its first
/// event, so we send one to know the subscription is in place.
const SUBSCRIBED_TOPIC: &str = "/ferrolet/cri/subscribed";

/// Subscribes to task exits and OOM kills in our namespace; returns once containerd has the
/// subscription, so nothing that happens afterwards is missed.
pub async fn subscribe(inner: &RuntimeInner) -> Result<ExitStream> {
    inner
        .cd
        .subscribe_confirmed(
            &["/tasks/exit", "/tasks/oom"],
            SUBSCRIBED_TOPIC,
            |e| tracing::warn!(error = %e, "publishing the subscription marker"),
        )
        .await
        .map_err(RuntimeError::containerd(
            "subscribing to containerd task events",
        ))
}

/// Applies events until the process ends; when the stream breaks (containerd restarted) it
/// resubscribes and re-reads every running task, since exits may have been missed.
pub async fn follow(inner: Arc<RuntimeInner>, mut stream: ExitStream) {
    loop {
        while let Ok(Some(envelope)) = stream.message().await {
            apply(&inner, envelope);
        }
        tracing::warn!("containerd task event stream ended; resubscribing");
        stream = loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            match subscribe(&inner).await {
                Ok(s) => break s,
                Err(e) => tracing::warn!(error = %e, "resubscribing to task events"),
            }
        };
        resync(&inner).await;
    }
}

fn apply(inner: &Arc<RuntimeInner>, envelope: Envelope) {
    let Some(event) = envelope.event else {
        return;
    };
    match envelope.topic.as_str() {
        "/tasks/exit" => {
            let Ok(exit) = TaskExit::decode(event.value.as_slice()) else {
                return;
            };
            // Exec processes report their own exits to ExecSync.
            if exit.id != exit.container_id {
                return;
            }
            let exited_at = task::timestamp_ns(exit.exited_at.as_ref());
            // Reaping takes a while; the stream must keep flowing meanwhile.
            let inner = inner.clone();
            tokio::spawn(async move {
                inner
                    .handle_task_exit(&exit.container_id, exit.exit_status, exited_at)
                    .await;
            });
        }
        "/tasks/oom" => {
            if let Ok(oom) = TaskOom::decode(event.value.as_slice()) {
                mark_oom_killed(inner, &oom.container_id);
            }
        }
        _ => {}
    }
}

/// Records that the kernel OOM-killed a process of container `id` (if it is ours).
fn mark_oom_killed(inner: &Arc<RuntimeInner>, id: &str) {
    let Some(c) = inner.containers.get_exact(id) else {
        return;
    };
    c.oom_killed.store(true, Ordering::Relaxed);
    // An exit recorded before the event read as Error: it was the OOM kill, as containerd's
    // CRI updates a reason from a late TaskOOM.
    let inner = inner.clone();
    tokio::spawn(async move { inner.record_late_oom(&c).await });
}

/// Follows the kernel's OOM kills in `/dev/kmsg` until the process ends. containerd's OOM
/// event is not enough: under the systemd driver a container's scope goes with its last
/// process, and containerd 1.6's shim, watching the scope's `memory.events`, then sometimes
/// never sends it; the kernel names the victim's cgroup (the container's scope, or its cgroup
/// under cgroupfs) in a line it writes before the kill.
pub async fn follow_kernel_oom_kills(inner: Arc<RuntimeInner>, kmsg: &'static str) {
    let mut kills = match ferrolet_cgroups::oom::watch(Path::new(kmsg)).await {
        Ok(kills) => kills,
        Err(e) => {
            tracing::warn!(path = kmsg, error = %e, "not reading kernel OOM kills; containerd's OOM events alone tell an OOM kill");
            return;
        }
    };
    while let Some(kill) = kills.recv().await {
        if let Some(id) = kill.victim_cgroup_name() {
            tracing::debug!(id, pid = kill.pid, "kernel OOM kill");
            mark_oom_killed(&inner, id);
        }
    }
}

/// Re-reads the tasks of everything we think runs, and records the exits we missed.
pub async fn resync(inner: &RuntimeInner) {
    for c in inner.containers.list() {
        if c.status().state == ContainerState::Running {
            inner.recheck_container(&c).await;
        }
    }
    for sb in inner.sandboxes.list() {
        if sb.status().state == SandboxState::Ready {
            match task::task_state(&inner.cd, &sb.meta.id).await {
                Ok(Some(TaskState::Running { .. })) => {}
                Ok(_) => inner.handle_sandbox_exit(&sb).await,
                Err(e) => tracing::warn!(id = %sb.meta.id, error = %e, "reading pause task"),
            }
        }
    }
}

impl RuntimeInner {
    async fn handle_task_exit(&self, id: &str, exit_status: u32, exited_at: i64) {
        if let Some(c) = self.containers.get_exact(id) {
            self.handle_container_exit(&c, exit_status, exited_at).await;
        } else if let Some(sb) = self.sandboxes.get_exact(id) {
            self.handle_sandbox_exit(&sb).await;
        }
    }

    /// Asks containerd about a container we think runs, and records its exit if it ended.
    pub async fn recheck_container(&self, c: &Container) {
        match task::task_state(&self.cd, &c.meta.id).await {
            Ok(Some(TaskState::Running { .. })) => {}
            Ok(Some(TaskState::Stopped {
                exit_status,
                exited_at_ns,
            })) => {
                self.handle_container_exit(c, exit_status, exited_at_ns)
                    .await
            }
            Ok(None) => {
                // The task vanished with its exit status (containerd lost its state).
                c.update(|s| {
                    s.message =
                        "the container's task disappeared; its exit status is unknown".into()
                });
                self.handle_container_exit(c, 255, crate::store::now_ns())
                    .await;
            }
            Err(e) => tracing::warn!(id = %c.meta.id, error = %e, "reading task"),
        }
    }

    /// Records that a sandbox's pause process ended, and reaps it.
    pub async fn handle_sandbox_exit(&self, sb: &Sandbox) {
        let id = sb.meta.id.as_str();
        let was_ready = sb.update(|s| {
            let was = s.state == SandboxState::Ready;
            s.state = SandboxState::NotReady;
            s.pid = 0;
            was
        });
        if let Err(e) = task::delete_task(&self.cd, id).await {
            tracing::warn!(id, error = %e, "deleting the pause task");
        }
        if was_ready {
            if let Err(e) = sb.persist(&self.opts.root).await {
                tracing::warn!(id, error = %e, "recording the pause exit");
            }
            self.emit(id, id, ContainerEventType::ContainerStoppedEvent);
        }
    }

    /// Sends a container event to subscribers, with the pod's status attached.
    pub fn emit(&self, container_id: &str, sandbox_id: &str, kind: ContainerEventType) {
        if self.events.receiver_count() == 0 {
            return;
        }
        let sandbox = self.sandboxes.get(sandbox_id).ok();
        self.send_event(container_id, sandbox.as_deref(), sandbox_id, kind);
    }

    /// The DELETED event of a container that has already left the index.
    pub fn emit_removed_container(&self, c: &Container) {
        self.emit(
            &c.meta.id,
            &c.meta.sandbox_id,
            ContainerEventType::ContainerDeletedEvent,
        );
    }

    /// The DELETED event of a sandbox that has already left the index.
    pub fn emit_removed_sandbox(&self, sb: &Sandbox) {
        if self.events.receiver_count() == 0 {
            return;
        }
        self.send_event(
            &sb.meta.id,
            Some(sb),
            &sb.meta.id,
            ContainerEventType::ContainerDeletedEvent,
        );
    }

    fn send_event(
        &self,
        container_id: &str,
        sandbox: Option<&Sandbox>,
        sandbox_id: &str,
        kind: ContainerEventType,
    ) {
        let containers_statuses = self
            .containers_of(sandbox_id)
            .iter()
            .map(|c| self.cri_container_status(c))
            .collect();
        let event = cri::ContainerEventResponse {
            container_id: container_id.to_string(),
            container_event_type: kind as i32,
            created_at: crate::store::now_ns(),
            pod_sandbox_status: sandbox.map(Sandbox::cri_status),
            containers_statuses,
        };
        // No subscriber left is not an error.
        let _ = self.events.send(event);
    }
}

/// A GetContainerEvents stream: every event from now on; a subscriber too slow to keep up
/// skips what it missed (logged) rather than holding the others back.
pub fn container_event_stream(inner: &RuntimeInner) -> super::EventStream {
    let rx = inner.events.subscribe();
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(event) => return Some((Ok(event), rx)),
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "a GetContainerEvents subscriber fell behind");
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }))
}
