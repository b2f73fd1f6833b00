//! The eviction manager's control loop body (Go's `managerImpl.synchronize`): observe the
//! signals in a summary, track which thresholds are met and for how long, derive the node's
//! pressure conditions (held for `evictionPressureTransitionPeriod` after the last
//! observation), and, when a threshold is met past its grace period with fresh stats, evict
//! the first non-critical pod in rank order: one pod per pass.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::config::EvictionConfig;
use super::rank::{self, RankBy};
use super::signals::{
    ALL_CONDITIONS, Condition, Observations, Resource, Signal, Threshold, format_quantity, observe,
    thresholds_met,
};
use crate::stats::types::{PodStats, Summary};
use crate::types::Pod;

/// Status reason of an evicted pod.
pub const REASON: &str = "Evicted";
/// Grace period of a hard eviction, seconds (Go's `immediateEvictionGracePeriodSeconds`).
pub const IMMEDIATE_GRACE_PERIOD: i64 = 1;

/// Stops pods for the manager.
pub trait PodTerminator: Send + Sync {
    /// Stops `pod` with `grace_secs` and leaves it Failed with reason `Evicted` and
    /// `message`; returns once it is stopped.
    fn evict<'a>(
        &'a self,
        pod: &'a Pod,
        grace_secs: i64,
        message: &'a str,
    ) -> BoxFuture<'a, Result<(), String>>;
}

/// Thresholds to reclaim for (memory first) and the observations that met them.
#[derive(Clone, Debug)]
pub struct Reclaim {
    /// Met past their grace periods, on fresh stats.
    pub thresholds: Vec<Threshold>,
    /// The signals as observed.
    pub observations: Observations,
}

/// One signal as last observed, with the threshold on it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg(test)]
pub struct SignalReport {
    /// The signal (`nodefs.available`).
    pub signal: String,
    /// What is available.
    pub available: i64,
    /// Out of.
    pub capacity: i64,
    /// The hard threshold's quantity on this capacity, if one is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hard_threshold: Option<i64>,
}

#[derive(Debug)]
struct State {
    node_conditions: Vec<Condition>,
    conditions_last_observed: BTreeMap<Condition, Instant>,
    first_observed: HashMap<(Signal, Duration), Instant>,
    thresholds_met: Vec<Threshold>,
    last_observations: Observations,
    transitions: BTreeMap<Condition, Time>,
    heartbeat: Option<Time>,
    evicted: BTreeMap<String, String>,
}

/// The eviction manager.
#[derive(Debug)]
pub struct EvictionManager {
    thresholds: Vec<Threshold>,
    transition_period: Duration,
    max_pod_grace_period: i64,
    state: Mutex<State>,
}

impl EvictionManager {
    /// A manager for the configured thresholds. The configuration was checked at start-up;
    /// should it still not parse, the manager watches nothing rather than guess.
    pub fn new(config: &EvictionConfig) -> Self {
        let thresholds = config.thresholds().unwrap_or_else(|(field, reason)| {
            tracing::error!(
                field,
                reason,
                "eviction thresholds do not parse; eviction is off"
            );
            Vec::new()
        });
        Self::with_thresholds(
            thresholds,
            config.pressure_transition_period,
            config.max_pod_grace_period,
        )
    }

    /// A manager for `thresholds` (tests).
    pub fn with_thresholds(
        thresholds: Vec<Threshold>,
        transition_period: Duration,
        max_pod_grace_period: i64,
    ) -> Self {
        let containerfs: Vec<&str> = thresholds
            .iter()
            .filter(|t| {
                matches!(
                    t.signal,
                    Signal::ContainerFsAvailable | Signal::ContainerFsInodesFree
                )
            })
            .map(|t| t.signal.name())
            .collect();
        if !containerfs.is_empty() {
            // Go ignores them too: they follow nodefs or imagefs.
            tracing::warn!(
                signals = ?containerfs,
                "eviction manager: containerfs thresholds are derived from nodefs and imagefs; ignoring"
            );
        }
        let thresholds = thresholds
            .into_iter()
            .filter(|t| {
                !matches!(
                    t.signal,
                    Signal::ContainerFsAvailable | Signal::ContainerFsInodesFree
                )
            })
            .collect();
        Self {
            thresholds,
            transition_period,
            max_pod_grace_period,
            state: Mutex::new(State {
                node_conditions: Vec::new(),
                conditions_last_observed: BTreeMap::new(),
                first_observed: HashMap::new(),
                thresholds_met: Vec::new(),
                last_observations: Observations::new(),
                transitions: BTreeMap::new(),
                heartbeat: None,
                evicted: BTreeMap::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thresholds watched.
    pub fn thresholds(&self) -> &[Threshold] {
        &self.thresholds
    }

    /// Whether the node is under `condition` now.
    pub fn has_condition(&self, condition: Condition) -> bool {
        self.state().node_conditions.contains(&condition)
    }

    /// The node's MemoryPressure, DiskPressure and PIDPressure conditions as the Go kubelet
    /// reports them on its Node; empty until the first pass.
    #[cfg(test)]
    pub fn conditions(&self) -> Vec<k8s_openapi::api::core::v1::NodeCondition> {
        let state = self.state();
        let Some(heartbeat) = state.heartbeat.clone() else {
            return Vec::new();
        };
        ALL_CONDITIONS
            .iter()
            .map(|c| {
                let pressure = state.node_conditions.contains(c);
                let (reason, message) = c.reason_and_message(pressure);
                k8s_openapi::api::core::v1::NodeCondition {
                    type_: c.name().to_string(),
                    status: if pressure { "True" } else { "False" }.to_string(),
                    reason: Some(reason.to_string()),
                    message: Some(message.to_string()),
                    last_heartbeat_time: Some(heartbeat.clone()),
                    last_transition_time: state.transitions.get(c).cloned(),
                }
            })
            .collect()
    }

    /// The signals as last observed, with their hard thresholds.
    #[cfg(test)]
    pub fn signals(&self) -> Vec<SignalReport> {
        let state = self.state();
        state
            .last_observations
            .iter()
            .map(|(signal, o)| SignalReport {
                signal: signal.name().to_string(),
                available: o.available,
                capacity: o.capacity,
                hard_threshold: self
                    .thresholds
                    .iter()
                    .find(|t| t.signal == *signal && t.is_hard())
                    .map(|t| t.value.quantity(o.capacity)),
            })
            .collect()
    }

    /// The message a pod was evicted with, if it was.
    pub fn evicted(&self, uid: &str) -> Option<String> {
        self.state().evicted.get(uid).cloned()
    }

    /// Forgets evicted pods `keep` says no to (gone from their source).
    pub fn forget_evicted(&self, keep: impl Fn(&str) -> bool) {
        self.state().evicted.retain(|uid, _| keep(uid));
    }

    /// Whether a new pod may start under the current pressure (Go's `Admit`): critical pods
    /// always; under memory pressure alone, pods other than BestEffort and those tolerating
    /// the memory-pressure taint; under any other pressure none. The refusal's message.
    #[cfg(test)]
    pub fn admit(&self, pod: &Pod) -> Result<(), String> {
        let conditions = self.state().node_conditions.clone();
        if conditions.is_empty() || crate::podspec::resources::is_critical_pod(pod) {
            return Ok(());
        }
        if conditions == [Condition::MemoryPressure] {
            let best_effort =
                crate::podspec::qos::qos_class(pod) == crate::podspec::qos::QosClass::BestEffort;
            let tolerates = pod
                .spec
                .iter()
                .flat_map(|s| s.tolerations.iter().flatten())
                .any(|t| {
                    let key_matches = match t.key.as_deref() {
                        None | Some("") => t.operator.as_deref() == Some("Exists"),
                        Some(k) => k == "node.kubernetes.io/memory-pressure",
                    };
                    let effect_matches = t
                        .effect
                        .as_deref()
                        .is_none_or(|e| e.is_empty() || e == "NoSchedule");
                    key_matches && effect_matches
                });
            if !best_effort || tolerates {
                return Ok(());
            }
        }
        let names: Vec<&str> = conditions.iter().map(|c| c.name()).collect();
        Err(format!("The node had condition: [{}]. ", names.join(" ")))
    }

    /// One pass over `summary`: updates the pressure conditions and, when a threshold is
    /// met past its grace period, evicts at most one of `active_pods`. Returns the UID of the
    /// pod evicted.
    #[cfg(test)]
    pub async fn synchronize(
        &self,
        summary: &Summary,
        active_pods: &[Pod],
        dedicated_image_fs: bool,
        now: Instant,
        terminator: &dyn PodTerminator,
    ) -> Option<String> {
        let reclaim = self.observe(summary, now)?;
        let active: Vec<_> = active_pods
            .iter()
            .cloned()
            .map(std::sync::Arc::new)
            .collect();
        self.reclaim(reclaim, summary, &active, dedicated_image_fs, terminator)
            .await
    }

    /// The first half of a pass: observes the node-level signals of `summary` (its pods are
    /// not needed) and updates the conditions; what to reclaim, if anything.
    pub fn observe(&self, summary: &Summary, now: Instant) -> Option<Reclaim> {
        if self.thresholds.is_empty() {
            return None;
        }
        let observations = observe(summary);
        let mut thresholds = self.update(observations.clone(), now)?;
        // Memory first, as Go's byEvictionPriority.
        thresholds.sort_by_key(|t| !t.signal.is_memory());
        Some(Reclaim {
            thresholds,
            observations,
        })
    }

    /// The second half: ranks `active_pods` on the pod stats of `summary` and evicts the
    /// first that may be. Returns its UID.
    pub async fn reclaim(
        &self,
        reclaim: Reclaim,
        summary: &Summary,
        active_pods: &[std::sync::Arc<Pod>],
        dedicated_image_fs: bool,
        terminator: &dyn PodTerminator,
    ) -> Option<String> {
        let Reclaim {
            thresholds,
            observations,
        } = reclaim;
        let threshold = *thresholds.first()?;
        let resource = threshold.signal.resource();
        tracing::info!(
            resource = resource.name(),
            "Eviction manager: attempting to reclaim"
        );
        tracing::info!(
            resource = resource.name(),
            "Eviction manager: must evict pod(s) to reclaim"
        );
        if active_pods.is_empty() {
            tracing::error!(
                "Eviction manager: eviction thresholds have been met, but no pods are active to evict"
            );
            return None;
        }
        let by_uid: HashMap<&str, &PodStats> = summary
            .pods
            .iter()
            .map(|p| (p.pod_ref.uid.as_str(), p))
            .collect();
        let stats = |p: &Pod| -> Option<&PodStats> {
            by_uid
                .get(p.metadata.uid.as_deref().unwrap_or_default())
                .copied()
        };
        let by = rank::rank_by(threshold.signal, dedicated_image_fs);
        let mut ranked: Vec<&Pod> = active_pods.iter().map(|p| &**p).collect();
        rank::rank(&mut ranked, by, &stats);
        let names: Vec<String> = ranked.iter().map(|p| crate::types::pod_name(p)).collect();
        tracing::info!(pods = ?names, "Eviction manager: pods ranked for eviction");
        for pod in ranked {
            let grace = if threshold.is_hard() {
                IMMEDIATE_GRACE_PERIOD
            } else {
                let own = crate::types::grace_period(pod);
                self.max_pod_grace_period.min(own).max(1)
            };
            let message =
                eviction_message(resource, pod, stats(pod), &thresholds, &observations, by);
            if self.evict_pod(pod, grace, &message, terminator).await {
                return pod.metadata.uid.clone();
            }
        }
        tracing::info!("Eviction manager: unable to evict any pods from the node");
        None
    }

    /// The bookkeeping of a pass; the thresholds to reclaim for (met past their grace period,
    /// on stats newer than the last pass's), if any.
    fn update(&self, observations: Observations, now: Instant) -> Option<Vec<Threshold>> {
        let mut state = self.state();
        let mut met = thresholds_met(&self.thresholds, &observations, false);
        if !state.thresholds_met.is_empty() {
            for t in thresholds_met(&state.thresholds_met, &observations, true) {
                if !met.contains(&t) {
                    met.push(t);
                }
            }
        }
        let first_observed: HashMap<(Signal, Duration), Instant> = met
            .iter()
            .map(|t| {
                let at = state.first_observed.get(&t.key()).copied().unwrap_or(now);
                (t.key(), at)
            })
            .collect();
        let mut observed_conditions: Vec<Condition> = Vec::new();
        for t in &met {
            let c = t.signal.condition();
            if !observed_conditions.contains(&c) {
                observed_conditions.push(c);
            }
        }
        for c in &observed_conditions {
            state.conditions_last_observed.insert(*c, now);
        }
        let transition = self.transition_period;
        let conditions: Vec<Condition> = ALL_CONDITIONS
            .into_iter()
            .filter(|c| {
                state
                    .conditions_last_observed
                    .get(c)
                    .is_some_and(|at| now.saturating_duration_since(*at) < transition)
            })
            .collect();
        let stamp = crate::status::now();
        for c in ALL_CONDITIONS {
            let (was, is) = (state.node_conditions.contains(&c), conditions.contains(&c));
            if was != is || !state.transitions.contains_key(&c) {
                state.transitions.insert(c, stamp.clone());
            }
            if was != is {
                let (reason, message) = c.reason_and_message(is);
                let signals: Vec<String> = met
                    .iter()
                    .filter(|t| t.signal.condition() == c)
                    .filter_map(|t| {
                        let o = observations.get(&t.signal)?;
                        let r = t.signal.resource();
                        Some(format!(
                            "{}: available {} < threshold {}",
                            t.signal,
                            format_quantity(o.available, r),
                            format_quantity(t.value.quantity(o.capacity), r)
                        ))
                    })
                    .collect();
                tracing::info!(
                    condition = c.name(),
                    status = if is { "True" } else { "False" },
                    reason,
                    signals = ?signals,
                    "Eviction manager: node condition changed: {message}"
                );
            }
        }
        state.heartbeat = Some(stamp);
        state.node_conditions = conditions;
        let grace_met: Vec<Threshold> = met
            .iter()
            .filter(|t| {
                let at = first_observed.get(&t.key()).copied().unwrap_or(now);
                let waited = now.saturating_duration_since(at);
                if waited < t.grace_period {
                    tracing::debug!(threshold = %t, ?waited, "Eviction manager: eviction criteria not yet met");
                    return false;
                }
                true
            })
            .copied()
            .collect();
        state.first_observed = first_observed;
        state.thresholds_met = grace_met.clone();
        let updated: Vec<Threshold> = grace_met
            .into_iter()
            .filter(|t| {
                let Some(o) = observations.get(&t.signal) else {
                    return false;
                };
                match (&o.time, state.last_observations.get(&t.signal)) {
                    (Some(time), Some(last)) => last.time.as_ref().is_none_or(|l| time > l),
                    _ => true,
                }
            })
            .collect();
        state.last_observations = observations;
        if updated.is_empty() {
            tracing::debug!("Eviction manager: no resources are starved");
            return None;
        }
        Some(updated)
    }

    async fn evict_pod(
        &self,
        pod: &Pod,
        grace: i64,
        message: &str,
        terminator: &dyn PodTerminator,
    ) -> bool {
        let name = crate::types::pod_name(pod);
        // Static and mirror pods are not re-admitted after an eviction, so they are never
        // evicted, nor are pods of system-critical priority.
        if crate::podspec::resources::is_critical_pod(pod) {
            tracing::error!(pod = %name, "Eviction manager: cannot evict a critical pod");
            return false;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        tracing::info!(pod = %name, uid, grace, message, "Evicting pod");
        self.state().evicted.insert(uid, message.to_string());
        match terminator.evict(pod, grace, message).await {
            Ok(()) => tracing::info!(pod = %name, "Eviction manager: pod is evicted successfully"),
            Err(e) => {
                tracing::error!(pod = %name, error = %e, "Eviction manager: pod failed to evict")
            }
        }
        true
    }
}

/// Go's eviction message: the resource, the threshold and what was available, and each
/// container using more than it requested.
pub fn eviction_message(
    resource: Resource,
    pod: &Pod,
    stats: Option<&PodStats>,
    thresholds: &[Threshold],
    observations: &Observations,
    by: RankBy,
) -> String {
    let mut message = format!("The node was low on resource: {}. ", resource.name());
    let met = thresholds
        .iter()
        .find(|t| t.signal.resource() == resource)
        .and_then(|t| Some((t, observations.get(&t.signal)?)));
    if let Some((t, o)) = met {
        message.push_str(&format!(
            "Threshold quantity: {}, available: {}. ",
            format_quantity(t.value.quantity(o.capacity), resource),
            format_quantity(o.available, resource)
        ));
    }
    let Some(stats) = stats else {
        return message;
    };
    let spec = pod.spec.as_ref();
    let containers = spec.into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    });
    let containers: Vec<_> = containers.collect();
    for cs in &stats.containers {
        let Some(c) = containers.iter().find(|c| c.name == cs.name) else {
            continue;
        };
        let usage = match (resource, by) {
            (Resource::EphemeralStorage, _) => {
                let root = cs.rootfs.as_ref().and_then(|f| f.used_bytes);
                let logs = cs.logs.as_ref().and_then(|f| f.used_bytes);
                root.zip(logs).map(|(r, l)| r.saturating_add(l))
            }
            (Resource::Memory, _) => cs.memory.as_ref().and_then(|m| m.working_set_bytes),
            _ => None,
        };
        let Some(usage) = usage.map(|u| i64::try_from(u).unwrap_or(i64::MAX)) else {
            continue;
        };
        let request_text = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource.name()))
            .map(|q| q.0.clone());
        let request = request_text
            .as_deref()
            .and_then(|t| crate::manifest::quantity::parse_quantity(t).ok())
            .map_or(0, |q| i64::try_from(q.value_ceil()).unwrap_or(i64::MAX));
        if usage > request {
            message.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of {}. ",
                c.name,
                format_quantity(usage, resource),
                request_text.unwrap_or_else(|| "0".into()),
                resource.name()
            ));
        }
    }
    message
}
