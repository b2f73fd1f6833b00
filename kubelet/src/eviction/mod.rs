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

use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState as ApiState, ContainerStateTerminated, PodCondition, PodStatus,
};

pub use config::EvictionConfig;
pub use manager::{EvictionManager, PodTerminator, REASON};

/// How often the manager looks (the Go kubelet's `evictionMonitoringPeriod`).
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);

/// How long the manager waits for an evicted pod's containers to stop before it looks
/// again (Go's `podCleanupTimeout`).
pub const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

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
