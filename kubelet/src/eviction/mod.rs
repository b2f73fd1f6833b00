//! Node-pressure eviction, as the Go kubelet's eviction manager: every
//! [`MONITORING_PERIOD`] the summary's signals are compared with `evictionHard` (and
//! `evictionSoft`) thresholds; the node's MemoryPressure/DiskPressure/PIDPressure conditions
//! follow (logged when they change, readable through [`EvictionManager::conditions`]); and
//! while a threshold is crossed one pod per pass is evicted in rank order. Static pods are
//! critical and never evicted, so in standalone mode pressure is reported but acted on only
//! for pods of other sources.
//!
//! - [`config`]: the KubeletConfiguration fields; [`signals`]: signals and thresholds.
//! - [`rank`]: which pod goes first; [`manager`]: the control loop's pass.

pub mod config;
pub mod manager;
pub mod rank;
pub mod signals;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolet_proto::cri::ContainerState;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{
    ContainerState as ApiState, ContainerStateTerminated, PodCondition, PodStatus,
};

pub use config::EvictionConfig;
pub use manager::{EvictionManager, PodTerminator, REASON};
pub use signals::{Condition, Signal, Threshold, ThresholdValue};

use crate::kubelet::{Kubelet, pod_name, uid_of};
use crate::types::Pod;

/// How often the manager looks (the Go kubelet's `evictionMonitoringPeriod`).
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);

/// How long the manager waits for an evicted pod's containers to stop before it looks
/// again (Go's `podCleanupTimeout`).
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

impl Kubelet {
    /// Starts the eviction manager's loop; it ends with the runtime.
    pub fn spawn_eviction_manager(self: &Arc<Self>) {
        if self.eviction.thresholds().is_empty() {
            tracing::info!("eviction manager: no thresholds configured");
            return;
        }
        let thresholds: Vec<String> = self
            .eviction
            .thresholds()
            .iter()
            .map(ToString::to_string)
            .collect();
        tracing::info!(?thresholds, "eviction manager: starting");
        let kubelet = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(MONITORING_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                kubelet.eviction_pass().await;
            }
        });
    }

    /// One pass of the manager: the node-level signals first; pod stats only when a
    /// threshold calls for an eviction and a pod may be evicted (the ranking needs them).
    async fn eviction_pass(&self) {
        let failed = |e: crate::stats::StatsError| {
            tracing::warn!(error = %e, "Eviction manager: failed to get summary stats");
        };
        let node = match self.summary_of(crate::stats::Scope::Node).await {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        let states = self.pods();
        self.eviction
            .forget_evicted(|uid| states.iter().any(|s| uid_of(&s.pod) == uid));
        let Some(reclaim) = self.eviction.observe(&node, Instant::now()) else {
            return;
        };
        let active: Vec<Pod> = states
            .into_iter()
            .filter(|s| !s.terminating && self.eviction.evicted(&uid_of(&s.pod)).is_none())
            .filter(|s| {
                !s.status
                    .phase
                    .as_deref()
                    .is_some_and(crate::status::phase::is_terminal)
            })
            .map(|s| s.pod)
            .collect();
        // Ranking needs pod stats only when some pod may be evicted at all: static pods
        // never are, so a standalone node under pressure costs no per-pod stats.
        let evictable = active
            .iter()
            .any(|p| !crate::podspec::resources::is_critical_pod(p));
        let summary = if evictable {
            match self.stats_summary(false).await {
                Ok(s) => s,
                Err(e) => return failed(e),
            }
        } else {
            node
        };
        let dedicated = self.stats.dedicated_image_fs().unwrap_or(false);
        let evicted = self
            .eviction
            .reclaim(reclaim, &summary, &active, dedicated, self)
            .await;
        if let Some(uid) = evicted {
            tracing::info!(
                uid,
                "Eviction manager: pods evicted, waiting for pod to be cleaned up"
            );
            let deadline = Instant::now() + CLEANUP_TIMEOUT;
            while Instant::now() < deadline && self.runs_anything(&uid) {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }

    /// Whether the runtime still runs a container or a ready sandbox of the pod.
    fn runs_anything(&self, uid: &str) -> bool {
        self.pleg.get(uid).is_some_and(|p| {
            p.sandboxes.iter().any(|s| s.ready)
                || p.containers
                    .iter()
                    .any(|c| c.state == ContainerState::ContainerRunning)
        })
    }

    /// For the pod workers: an evicted pod is not synced again; whatever of it still runs
    /// (a container a sync started while it was being evicted) is stopped. Whether the pod
    /// was evicted.
    pub async fn enforce_eviction(&self, uid: &str) -> bool {
        if self.eviction.evicted(uid).is_none() {
            return false;
        }
        if self.runs_anything(uid) {
            self.stop_pod(uid, manager::IMMEDIATE_GRACE_PERIOD).await;
        }
        true
    }

    /// Stops the pod's running containers and its sandboxes, and tears down its volumes
    /// (so an evicted pod's memory-backed emptyDirs give their memory back); its stopped
    /// containers stay, for their logs and status.
    async fn stop_pod(&self, uid: &str, grace: i64) {
        let runtime = match self.pleg.refresh(uid).await {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(uid, error = %e, "reading the pod to evict");
                return;
            }
        };
        let running = runtime
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning);
        futures::future::join_all(running.map(|c| async move {
            if let Err(e) = self.cri.stop_container(&c.id, grace).await {
                tracing::warn!(id = %c.id, error = %e, "stopping an evicted pod's container");
            }
        }))
        .await;
        for sb in &runtime.sandboxes {
            if let Err(e) = self.cri.stop_pod_sandbox(&sb.id).await {
                tracing::warn!(id = %sb.id, error = %e, "stopping an evicted pod's sandbox");
            }
        }
        if let Err(e) = crate::volume::teardown(&self.config.root_dir, uid).await {
            tracing::warn!(uid, error = %e, "removing an evicted pod's volumes");
        }
        let _ = self.pleg.refresh(uid).await;
    }
}

impl PodTerminator for Kubelet {
    fn evict<'a>(
        &'a self,
        pod: &'a Pod,
        grace_secs: i64,
        message: &'a str,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let uid = uid_of(pod);
            tracing::debug!(pod = %pod_name(pod), "stopping an evicted pod");
            self.stop_pod(&uid, grace_secs).await;
            let now = crate::status::now();
            self.update_state(&uid, |s| evicted_status(&mut s.status, message, &now));
            if self.runs_anything(&uid) {
                return Err("containers still running after the stop".into());
            }
            Ok(())
        })
    }
}

/// The status of an evicted pod, as the Go kubelet leaves it: phase Failed, reason
/// `Evicted` with the message, a `DisruptionTarget` condition, not ready, and running
/// containers terminated.
pub fn evicted_status(
    status: &mut PodStatus,
    message: &str,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    status.phase = Some(crate::status::phase::FAILED.to_string());
    status.reason = Some(REASON.to_string());
    status.message = Some(message.to_string());
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    for c in conditions.iter_mut() {
        if matches!(c.type_.as_str(), "Ready" | "ContainersReady") && c.status != "False" {
            c.status = "False".into();
            c.reason = Some("PodFailed".into());
            c.last_transition_time = Some(now.clone());
        }
    }
    conditions.retain(|c| c.type_ != "DisruptionTarget");
    conditions.push(PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("TerminationByKubelet".into()),
        message: Some(message.to_string()),
        last_transition_time: Some(now.clone()),
        ..Default::default()
    });
    let statuses = status
        .container_statuses
        .iter_mut()
        .flatten()
        .chain(status.init_container_statuses.iter_mut().flatten());
    for cs in statuses {
        cs.ready = false;
        let Some(running) = cs.state.as_ref().and_then(|s| s.running.as_ref()) else {
            continue;
        };
        cs.state = Some(ApiState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some("Error".into()),
                started_at: running.started_at.clone(),
                finished_at: Some(now.clone()),
                container_id: cs.container_id.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
        cs.started = Some(false);
    }
}

#[cfg(test)]
mod tests;
