//! One probe's worker, as the Go kubelet's `prober/worker.go`: a task per (pod, container,
//! probe kind) that, every period, looks up the container in the pod's last status and probes
//! the running instance, turning runs into results through the success and failure
//! thresholds.
//!
//! The rules: a new instance starts from the kind's initial result (readiness Failure,
//! liveness Success, startup Unknown); a container that is not running reads as Failure (and
//! the worker ends when it will not run again); nothing is probed during `initialDelaySeconds`;
//! until the startup probe has succeeded only it runs, afterwards everything else; after a
//! liveness or startup failure the worker holds off until the container is replaced. A pod in
//! a terminal phase ends the worker.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodStatus, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::watch;

use super::check::{Target, check_with_retries};
use super::http::HttpGet;
use super::results::{ProbeResult, Results};
use super::{Manager, ProbeKind, WorkerKey};
use crate::events::{EventRecorder, EventType, container_ref, reason};
use crate::types::Pod;

/// A probe's timing settings, API defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// `initialDelaySeconds` (0).
    pub initial_delay_secs: i64,
    /// `periodSeconds` (10 s).
    pub period: Duration,
    /// `successThreshold` (1).
    pub success_threshold: u32,
    /// `failureThreshold` (3).
    pub failure_threshold: u32,
}

impl Timings {
    /// The timings of `probe`; unset or non-positive values take the API defaults.
    pub fn of(probe: &Probe) -> Self {
        let positive = |v: Option<i32>, default: u32| {
            v.and_then(|v| u32::try_from(v).ok())
                .filter(|v| *v > 0)
                .unwrap_or(default)
        };
        Self {
            initial_delay_secs: i64::from(probe.initial_delay_seconds.unwrap_or(0).max(0)),
            period: Duration::from_secs(u64::from(positive(probe.period_seconds, 10))),
            success_threshold: positive(probe.success_threshold, 1),
            failure_threshold: positive(probe.failure_threshold, 3),
        }
    }
}

/// What the worker should do this tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// End the worker.
    Stop,
    /// Nothing to probe now.
    Skip,
    /// Probe this instance.
    Probe {
        /// CRI id of the running instance.
        container_id: String,
        /// The pod's IP.
        pod_ip: String,
    },
}

/// The worker's memory between ticks: the instance it probes and the run of equal results.
#[derive(Clone, Debug)]
pub struct WorkerState {
    kind: ProbeKind,
    container: String,
    timings: Timings,
    /// The pod's restartPolicy is Never: an exited container is final.
    never_restarts: bool,
    container_id: String,
    last: Option<ProbeResult>,
    run: u32,
    on_hold: bool,
}

/// The container's status in the pod status: app containers first, then init containers,
/// only one the runtime has made (with a container id).
fn find_status<'a>(status: &'a PodStatus, name: &str) -> Option<&'a ContainerStatus> {
    let with_id = |list: &'a Option<Vec<ContainerStatus>>| {
        list.iter()
            .flatten()
            .find(|c| c.name == name && c.container_id.as_deref().is_some_and(|id| !id.is_empty()))
    };
    with_id(&status.container_statuses).or_else(|| with_id(&status.init_container_statuses))
}

/// A status's `<runtime>://<id>` container id without the scheme.
pub fn bare_id(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, id)| id)
}

impl WorkerState {
    /// A worker's state for `kind` of `container`, with `timings`.
    pub fn new(kind: ProbeKind, container: &str, timings: Timings, never_restarts: bool) -> Self {
        Self {
            kind,
            container: container.to_string(),
            timings,
            never_restarts,
            container_id: String::new(),
            last: None,
            run: 0,
            on_hold: false,
        }
    }

    /// The instance the worker last saw ("" before any).
    pub fn container_id(&self) -> &str {
        &self.container_id
    }

    /// Looks at the pod's status at `now`: whether and what to probe; updates `results` for a
    /// new or stopped instance.
    pub fn observe(
        &mut self,
        status: &PodStatus,
        now: &Time,
        results: &Results,
        uid: &str,
    ) -> Step {
        if matches!(status.phase.as_deref(), Some("Failed" | "Succeeded")) {
            return Step::Stop;
        }
        let Some(c) = find_status(status, &self.container) else {
            return Step::Skip;
        };
        let id = bare_id(c.container_id.as_deref().unwrap_or_default());
        if id != self.container_id {
            if !self.container_id.is_empty() {
                results.remove(self.kind, &self.container_id);
            }
            self.container_id = id.to_string();
            results.set(self.kind, id, self.kind.initial(), uid);
            self.on_hold = false;
        }
        if self.on_hold {
            return Step::Skip;
        }
        let state = c.state.as_ref();
        let Some(running) = state.and_then(|s| s.running.as_ref()) else {
            results.set(self.kind, id, ProbeResult::Failure, uid);
            let terminated = state.is_some_and(|s| s.terminated.is_some());
            return if terminated && self.never_restarts {
                Step::Stop
            } else {
                Step::Skip
            };
        };
        if let Some(started_at) = &running.started_at {
            let ran = now.0.duration_since(started_at.0).as_secs();
            if ran < self.timings.initial_delay_secs {
                return Step::Skip;
            }
        }
        let started = c.started == Some(true);
        // Startup probes run until the container has started, the others only afterwards.
        if started == (self.kind == ProbeKind::Startup) {
            return Step::Skip;
        }
        Step::Probe {
            container_id: id.to_string(),
            pod_ip: status.pod_ip.clone().unwrap_or_default(),
        }
    }

    /// Counts a run's result and, once its threshold is reached, caches it; the result
    /// cached, if it changed.
    pub fn record(
        &mut self,
        result: ProbeResult,
        results: &Results,
        uid: &str,
    ) -> Option<ProbeResult> {
        if self.last == Some(result) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(result);
            self.run = 1;
        }
        let threshold = match result {
            ProbeResult::Failure => self.timings.failure_threshold,
            ProbeResult::Success => self.timings.success_threshold,
            ProbeResult::Unknown => 1,
        };
        if self.run < threshold {
            return None;
        }
        let changed = results.set(self.kind, &self.container_id, result, uid);
        if result == ProbeResult::Failure && self.kind != ProbeKind::Readiness {
            // The container is going to be killed: probing it further is pointless (and an
            // exec into a dying container can go wrong); wait for its replacement.
            self.on_hold = true;
            self.run = 0;
        }
        changed.then_some(result)
    }
}

/// Probe ticks fall on a grid of this step, counted from the prober's start: each worker
/// keeps its period exactly and only its phase is rounded up, so workers whose ticks would
/// fall a few milliseconds apart share one timer wake-up. At hundreds of probes a second a
/// wake-up per probe was a good share of the kubelet's CPU.
pub const TICK_GRID: Duration = Duration::from_millis(100);

/// The first point of the `grid` from `origin` at or after `at`.
pub fn on_grid(
    origin: tokio::time::Instant,
    at: tokio::time::Instant,
    grid: Duration,
) -> tokio::time::Instant {
    let grid_nanos = grid.as_nanos().max(1);
    let steps = at
        .saturating_duration_since(origin)
        .as_nanos()
        .div_ceil(grid_nanos);
    let offset = u64::try_from(steps.saturating_mul(grid_nanos)).unwrap_or(u64::MAX);
    origin + Duration::from_nanos(offset)
}

/// A random part of `period` (uniform in [0, period)), so probes of pods started together
/// spread out.
pub fn jitter(period: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded randomly per process and per instance: enough randomness here.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    hasher.write_u32(nanos);
    let bits = hasher.finish() >> 11;
    // 53 random bits as a fraction in [0, 1).
    let fraction = bits as f64 / (1u64 << 53) as f64;
    period.mul_f64(fraction)
}

/// A running worker's inputs.
pub(crate) struct Worker {
    pub(crate) manager: Arc<Manager>,
    pub(crate) key: WorkerKey,
    pub(crate) id: u64,
    pub(crate) pod: Arc<Pod>,
    pub(crate) container: Arc<Container>,
    pub(crate) probe: Probe,
    pub(crate) state: WorkerState,
    pub(crate) stop: watch::Receiver<bool>,
    /// An httpGet probe's request and the pod IP it was built for: the same from run to
    /// run until the pod IP changes, so it is built once (parsing URLs and headers at every
    /// run showed in profiles at hundreds of probes a second).
    pub(crate) http: Option<(String, HttpGet)>,
    /// Where `Unhealthy` and `ProbeWarning` go.
    pub(crate) events: Arc<dyn EventRecorder>,
}

impl Worker {
    /// Probes every period until stopped, the pod ends, or the container will not run again.
    pub(crate) async fn run(mut self) {
        let period = self.state.timings.period;
        // Right after a kubelet start every pod's workers start at once: spread them.
        if self.manager.started_within(period) {
            tokio::select! {
                () = tokio::time::sleep(jitter(period)) => {}
                _ = self.stop.changed() => {
                    self.finish();
                    return;
                }
            }
        }
        let origin = tokio::time::Instant::from_std(self.manager.started);
        let first = on_grid(origin, tokio::time::Instant::now() + period, TICK_GRID);
        let mut ticker = tokio::time::interval_at(first, period);
        // As Go's ticker: a slow run drops the ticks it overran, and the rest stay on the grid.
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            if *self.stop.borrow() || !self.probe_once().await {
                break;
            }
            tokio::select! {
                _ = ticker.tick() => {}
                changed = self.stop.changed() => {
                    if changed.is_err() || *self.stop.borrow() {
                        break;
                    }
                }
            }
        }
        self.finish();
    }

    fn event(&self, kind: EventType, why: &str, message: &str) {
        let object = container_ref(&self.pod, &self.container.name);
        self.events.record(&object, kind, why, message);
    }

    fn finish(&self) {
        crate::metrics::forget_probe_of(self.key.kind.as_str(), &self.pod, &self.container.name);
        if !self.state.container_id().is_empty() {
            self.manager
                .results
                .remove(self.key.kind, self.state.container_id());
        }
        self.manager.remove_worker(&self.key, self.id);
    }

    /// One tick; whether to go on.
    async fn probe_once(&mut self) -> bool {
        let uid = self.key.uid.clone();
        let Some(status) = self.manager.status(&uid) else {
            // Not synced yet (or gone): wait.
            return true;
        };
        let now = crate::status::now();
        let (container_id, pod_ip) =
            match self
                .state
                .observe(&status, &now, &self.manager.results, &uid)
            {
                Step::Stop => return false,
                Step::Skip => return true,
                Step::Probe {
                    container_id,
                    pod_ip,
                } => (container_id, pod_ip),
            };
        if let Some(get) = &self.probe.http_get
            && self.http.as_ref().is_none_or(|(ip, _)| *ip != pod_ip)
        {
            // A request that cannot be built is left to the check, which reports why.
            self.http = HttpGet::new(get, &self.container, &pod_ip, "probe")
                .ok()
                .map(|req| (pod_ip.clone(), req));
        }
        let target = Target {
            container: &self.container,
            container_id: &container_id,
            pod_ip: &pod_ip,
            http: self.http.as_ref().map(|(_, req)| req),
        };
        let kind = self.key.kind.as_str();
        let container = self.container.name.as_str();
        let started = std::time::Instant::now();
        let (outcome, output) =
            match check_with_retries(self.manager.checker.as_ref(), &self.probe, target).await {
                Ok(found) => found,
                Err(e) => {
                    // As Go: a probe that could not run says nothing about the container
                    // (but the event tells).
                    tracing::debug!(probe = kind, container, error = %e, "probe errored");
                    let message = format!("{kind} probe errored: {e}");
                    self.event(EventType::Warning, reason::UNHEALTHY, &message);
                    return true;
                }
            };
        let result = match outcome {
            super::check::Outcome::Success => ProbeResult::Success,
            super::check::Outcome::Warning => {
                tracing::debug!(probe = kind, container, "{kind} probe warning: {output}");
                let message = format!("{kind} probe warning: {output}");
                self.event(EventType::Warning, reason::PROBE_WARNING, &message);
                ProbeResult::Success
            }
            super::check::Outcome::Failure => {
                tracing::debug!(probe = kind, container, "{kind} probe failed: {output}");
                // As Go: every failed run, not only the one crossing the threshold.
                let message = format!("{kind} probe failed: {output}");
                self.event(EventType::Warning, reason::UNHEALTHY, &message);
                ProbeResult::Failure
            }
        };
        crate::metrics::observe_probe(
            kind,
            result == ProbeResult::Success,
            &self.pod,
            container,
            started,
        );
        match self.state.record(result, &self.manager.results, &uid) {
            Some(ProbeResult::Failure) => {
                // An event-like line, as Go's Unhealthy event.
                tracing::warn!(
                    pod = %crate::types::pod_name(&self.pod),
                    container,
                    reason = "Unhealthy",
                    "{kind} probe failed: {output}"
                );
            }
            Some(r) => {
                tracing::info!(pod = %crate::types::pod_name(&self.pod), container, result = ?r, "{kind} probe result changed");
            }
            None => {}
        }
        true
    }
}

#[cfg(test)]
mod tests;
