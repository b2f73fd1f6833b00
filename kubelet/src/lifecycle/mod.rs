//! Container lifecycle hooks, as the Go kubelet's `lifecycle/handlers.go`: `postStart` runs
//! right after StartContainer, `preStop` right before StopContainer, each an `exec` (CRI
//! ExecSync in the container), an `httpGet` (from the node, as probes are, but any answer
//! counts) or a `sleep`. A failure comes back with Go's message for it, which the sync shows
//! as the waiting message of a container whose postStart failed.
//!
//! The preStop hook's time counts against the grace period: [`HookRunner::pre_stop`] runs it
//! for at most the grace period and says how long it took, [`remaining_grace`] what is left
//! for StopContainer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolet_proto::cri::ExecSyncResponse;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler};

use crate::cri::{Cri, CriError};
use crate::pleg::BoxFut;
use crate::podspec::env::go_quote;
use crate::prober::exec::{combined_output, is_timeout};
use crate::prober::http::{self, HttpGet};
use crate::types::Pod;

/// The least grace StopContainer gets after a preStop hook (Go's
/// `minimumGracePeriodInSeconds`).
pub const MIN_GRACE_AFTER_HOOK: i64 = 2;

/// A hook that failed, with Go's message for it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HookError {
    /// `Exec lifecycle hook ([...]) for Container "c" in Pod "p_ns(uid)" failed - error: ...`.
    pub message: String,
}

/// The container instance a hook runs for.
#[derive(Clone, Copy, Debug)]
pub struct HookTarget<'a> {
    /// Its pod.
    pub pod: &'a Pod,
    /// Its spec.
    pub container: &'a Container,
    /// The CRI container id.
    pub container_id: &'a str,
    /// The pod's primary IP ("" when unknown).
    pub pod_ip: &'a str,
}

/// Runs commands in containers (CRI ExecSync; tests script it).
pub trait ExecSync: Send + Sync + 'static {
    /// Runs `cmd` in the container, bounded by `timeout_secs` (0: no bound of its own).
    fn exec_sync<'a>(
        &'a self,
        container_id: &'a str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> BoxFut<'a, Result<ExecSyncResponse, CriError>>;
}

impl ExecSync for Cri {
    fn exec_sync<'a>(
        &'a self,
        container_id: &'a str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> BoxFut<'a, Result<ExecSyncResponse, CriError>> {
        Box::pin(Cri::exec_sync(self, container_id, cmd, timeout_secs))
    }
}

/// Runs hooks.
#[derive(Clone)]
pub struct HookRunner {
    exec: Arc<dyn ExecSync>,
    /// `Err` when the HTTP client could not be built (httpGet hooks then fail with it).
    http: Result<reqwest::Client, String>,
}

impl std::fmt::Debug for HookRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookRunner").finish_non_exhaustive()
    }
}

/// A pod as Go's `format.Pod` prints it: `name_namespace(uid)`.
pub fn format_pod(pod: &Pod) -> String {
    let m = &pod.metadata;
    format!(
        "{}_{}({})",
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default()
    )
}

/// A string list as Go's `%v` prints it: `[a b c]`.
fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

/// The error and output of an exec hook's ExecSync answer, `None` when it succeeded (Go's
/// remote runtime turns a non-zero exit into `command '...' exited with N: <stderr>`).
pub fn exec_failure(
    cmd: &[String],
    answer: Result<ExecSyncResponse, CriError>,
) -> Option<(String, String)> {
    match answer {
        Ok(resp) if resp.exit_code == 0 => None,
        Ok(resp) => Some((
            format!(
                "command '{}' exited with {}: {}",
                cmd.join(" "),
                resp.exit_code,
                String::from_utf8_lossy(&resp.stderr)
            ),
            combined_output(&resp),
        )),
        Err(e) if is_timeout(&e) => Some((
            format!("command {} timed out", go_quote(&cmd.join(" "))),
            String::new(),
        )),
        Err(e) => Some((e.to_string(), String::new())),
    }
}

impl HookRunner {
    /// Hooks through `cri` (exec) and from the node (HTTP).
    pub fn new(cri: Cri) -> Self {
        Self::with_exec(Arc::new(cri))
    }

    /// Hooks whose exec actions run through `exec`.
    pub fn with_exec(exec: Arc<dyn ExecSync>) -> Self {
        let http = http::client().map_err(|e| e.to_string());
        if let Err(e) = &http {
            tracing::error!(error = %e, "building the HTTP hook client; httpGet hooks will fail");
        }
        Self { exec, http }
    }

    /// Runs `handler` for `target`.
    pub async fn run(
        &self,
        handler: &LifecycleHandler,
        target: HookTarget<'_>,
    ) -> Result<(), HookError> {
        let container = &target.container.name;
        let pod = format_pod(target.pod);
        if let Some(exec) = &handler.exec {
            let cmd = exec.command.clone().unwrap_or_default();
            // No timeout of its own, as in Go: the runtime request timeout bounds it.
            let answer = self
                .exec
                .exec_sync(target.container_id, cmd.clone(), 0)
                .await;
            return match exec_failure(&cmd, answer) {
                None => Ok(()),
                Some((error, output)) => Err(HookError {
                    message: format!(
                        "Exec lifecycle hook ({}) for Container {} in Pod {} failed - error: {error}, message: {}",
                        go_list(&cmd),
                        go_quote(container),
                        go_quote(&pod),
                        go_quote(&output)
                    ),
                }),
            };
        }
        if let Some(get) = &handler.http_get {
            let fail = |error: String| HookError {
                message: format!(
                    "HTTP lifecycle hook ({}) for Container {} in Pod {} failed - error: {error}",
                    get.path.as_deref().unwrap_or_default(),
                    go_quote(container),
                    go_quote(&pod)
                ),
            };
            let has_host = get.host.as_deref().is_some_and(|h| !h.is_empty());
            if !has_host && target.pod_ip.is_empty() {
                return Err(fail("failed to find networking container".into()));
            }
            let req = HttpGet::new(get, target.container, target.pod_ip, "lifecycle")
                .map_err(|e| fail(e.to_string()))?;
            let client = self.http.as_ref().map_err(|e| fail(e.clone()))?;
            return http::get(client, &req).await.map_err(fail);
        }
        if let Some(sleep) = &handler.sleep {
            let secs = u64::try_from(sleep.seconds).unwrap_or(0);
            tokio::time::sleep(Duration::from_secs(secs)).await;
            return Ok(());
        }
        // tcpSocket is accepted by the API for old manifests but never ran as a hook.
        Err(HookError {
            message: "Cannot run handler: invalid handler: no exec, httpGet or sleep action".into(),
        })
    }

    /// Runs a preStop hook for at most `grace` seconds (it is left behind when it takes
    /// longer, as Go leaves it); how long it took (for [`remaining_grace`]) and whether it failed.
    pub async fn pre_stop(
        &self,
        handler: &LifecycleHandler,
        target: HookTarget<'_>,
        grace: i64,
    ) -> PreStopRun {
        let started = Instant::now();
        let mut failed = false;
        let limit = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
        let pod = crate::types::pod_name(target.pod);
        let container = target.container.name.as_str();
        match tokio::time::timeout(limit, self.run(handler, target)).await {
            Ok(Ok(())) => tracing::debug!(%pod, container, "preStop hook completed"),
            // Go keeps the message out of the event (it may hold secrets): the log has it.
            Ok(Err(e)) => {
                failed = true;
                tracing::warn!(%pod, container, reason = "FailedPreStopHook", "{e}")
            }
            Err(_) => {
                tracing::info!(%pod, container, grace, "preStop hook not completed in grace period")
            }
        }
        PreStopRun {
            spent: i64::try_from(started.elapsed().as_secs()).unwrap_or(i64::MAX),
            failed,
        }
    }
}

/// How a preStop hook went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreStopRun {
    /// Whole seconds it took.
    pub spent: i64,
    /// It failed (not: ran out of time), for Go's `FailedPreStopHook` event.
    pub failed: bool,
}

/// The grace StopContainer gets after a preStop hook took `spent` of `grace` seconds: the
/// rest, but at least [`MIN_GRACE_AFTER_HOOK`].
pub fn remaining_grace(grace: i64, spent: i64) -> i64 {
    grace.saturating_sub(spent).max(MIN_GRACE_AFTER_HOOK)
}

#[cfg(test)]
mod tests;
