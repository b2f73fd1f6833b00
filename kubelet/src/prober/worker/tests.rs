//! The worker's rules on made-up pod statuses: instances, thresholds, holds, delays, the
//! startup gate, terminal pods; and the jitter's bounds.
#![allow(clippy::unwrap_used)]

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
};

use super::*;

fn at(secs: i64) -> Time {
    Time(jiff::Timestamp::from_second(secs).unwrap())
}

/// A pod status with container `c` as instance `id`: running since `since` (seconds) and
/// started as given, or exited when `since` is None.
fn status(id: &str, since: Option<i64>, started: bool) -> PodStatus {
    let state = match since {
        Some(s) => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(at(s)),
            }),
            ..Default::default()
        },
        None => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                ..Default::default()
            }),
            ..Default::default()
        },
    };
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("10.0.0.7".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "c".into(),
            container_id: Some(format!("containerd://{id}")),
            started: Some(started),
            state: Some(state),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

fn timings(success: u32, failure: u32, delay: i64) -> Timings {
    Timings {
        initial_delay_secs: delay,
        period: Duration::from_secs(1),
        success_threshold: success,
        failure_threshold: failure,
    }
}

fn probe_step(id: &str) -> Step {
    Step::Probe {
        container_id: id.into(),
        pod_ip: "10.0.0.7".into(),
    }
}

#[test]
fn timings_take_the_api_defaults() {
    let t = Timings::of(&Probe::default());
    assert_eq!(t, timings(1, 3, 0).with_period(10));
    let t = Timings::of(&Probe {
        initial_delay_seconds: Some(5),
        period_seconds: Some(2),
        success_threshold: Some(2),
        failure_threshold: Some(0),
        ..Default::default()
    });
    assert_eq!(t, timings(2, 3, 5).with_period(2));
}

impl Timings {
    fn with_period(mut self, secs: u64) -> Self {
        self.period = Duration::from_secs(secs);
        self
    }
}

#[test]
fn readiness_starts_failed_and_follows_the_thresholds() {
    let (results, _rx) = Results::new();
    let mut w = WorkerState::new(ProbeKind::Readiness, "c", timings(2, 3, 0), false);
    let s = status("a", Some(100), true);
    assert_eq!(w.observe(&s, &at(101), &results, "u"), probe_step("a"));
    assert_eq!(
        results.get(ProbeKind::Readiness, "a"),
        Some(ProbeResult::Failure)
    );
    // Two successes in a row are needed.
    assert_eq!(w.record(ProbeResult::Success, &results, "u"), None);
    assert_eq!(
        w.record(ProbeResult::Success, &results, "u"),
        Some(ProbeResult::Success)
    );
    assert_eq!(w.record(ProbeResult::Success, &results, "u"), None);
    // Three failures in a row; a success in between starts the count again.
    assert_eq!(w.record(ProbeResult::Failure, &results, "u"), None);
    assert_eq!(w.record(ProbeResult::Failure, &results, "u"), None);
    assert_eq!(w.record(ProbeResult::Success, &results, "u"), None);
    assert_eq!(w.record(ProbeResult::Failure, &results, "u"), None);
    assert_eq!(w.record(ProbeResult::Failure, &results, "u"), None);
    assert_eq!(
        w.record(ProbeResult::Failure, &results, "u"),
        Some(ProbeResult::Failure)
    );
    // Readiness keeps probing after failures.
    assert_eq!(w.observe(&s, &at(110), &results, "u"), probe_step("a"));
}

#[test]
fn liveness_failures_hold_until_a_new_instance() {
    let (results, _rx) = Results::new();
    let mut w = WorkerState::new(ProbeKind::Liveness, "c", timings(1, 1, 0), false);
    let s = status("a", Some(100), true);
    assert_eq!(w.observe(&s, &at(101), &results, "u"), probe_step("a"));
    assert_eq!(
        results.get(ProbeKind::Liveness, "a"),
        Some(ProbeResult::Success)
    );
    assert_eq!(
        w.record(ProbeResult::Failure, &results, "u"),
        Some(ProbeResult::Failure)
    );
    assert_eq!(w.observe(&s, &at(102), &results, "u"), Step::Skip);
    // The replacement is probed, from the initial result; the old result is gone.
    let s = status("b", Some(103), true);
    assert_eq!(w.observe(&s, &at(104), &results, "u"), probe_step("b"));
    assert_eq!(results.get(ProbeKind::Liveness, "a"), None);
    assert_eq!(
        results.get(ProbeKind::Liveness, "b"),
        Some(ProbeResult::Success)
    );
    assert_eq!(w.container_id(), "b");
}

#[test]
fn nothing_is_probed_during_the_initial_delay() {
    let (results, _rx) = Results::new();
    let mut w = WorkerState::new(ProbeKind::Liveness, "c", timings(1, 3, 5), false);
    let s = status("a", Some(100), true);
    assert_eq!(w.observe(&s, &at(104), &results, "u"), Step::Skip);
    assert_eq!(w.observe(&s, &at(105), &results, "u"), probe_step("a"));
}

#[test]
fn the_startup_probe_gates_the_others() {
    let (results, _rx) = Results::new();
    let not_started = status("a", Some(100), false);
    let started = status("a", Some(100), true);
    let mut startup = WorkerState::new(ProbeKind::Startup, "c", timings(1, 3, 0), false);
    let mut liveness = WorkerState::new(ProbeKind::Liveness, "c", timings(1, 1, 0), false);
    let mut readiness = WorkerState::new(ProbeKind::Readiness, "c", timings(1, 1, 0), false);
    let now = at(150);
    assert_eq!(
        startup.observe(&not_started, &now, &results, "u"),
        probe_step("a")
    );
    assert_eq!(
        results.get(ProbeKind::Startup, "a"),
        Some(ProbeResult::Unknown)
    );
    assert_eq!(
        liveness.observe(&not_started, &now, &results, "u"),
        Step::Skip
    );
    assert_eq!(
        readiness.observe(&not_started, &now, &results, "u"),
        Step::Skip
    );
    // Once started, it is the other way round.
    assert_eq!(startup.observe(&started, &now, &results, "u"), Step::Skip);
    assert_eq!(
        liveness.observe(&started, &now, &results, "u"),
        probe_step("a")
    );
    assert_eq!(
        readiness.observe(&started, &now, &results, "u"),
        probe_step("a")
    );
}

#[test]
fn startup_failures_hold_too() {
    let (results, _rx) = Results::new();
    let mut w = WorkerState::new(ProbeKind::Startup, "c", timings(1, 2, 0), false);
    let s = status("a", Some(100), false);
    assert_eq!(w.observe(&s, &at(101), &results, "u"), probe_step("a"));
    assert_eq!(w.record(ProbeResult::Failure, &results, "u"), None);
    assert_eq!(
        w.record(ProbeResult::Failure, &results, "u"),
        Some(ProbeResult::Failure)
    );
    assert_eq!(w.observe(&s, &at(102), &results, "u"), Step::Skip);
}

#[test]
fn exited_containers_read_as_failed() {
    let (results, _rx) = Results::new();
    let mut w = WorkerState::new(ProbeKind::Readiness, "c", timings(1, 1, 0), false);
    let running = status("a", Some(100), true);
    assert_eq!(
        w.observe(&running, &at(101), &results, "u"),
        probe_step("a")
    );
    w.record(ProbeResult::Success, &results, "u");
    let exited = status("a", None, false);
    assert_eq!(w.observe(&exited, &at(102), &results, "u"), Step::Skip);
    assert_eq!(
        results.get(ProbeKind::Readiness, "a"),
        Some(ProbeResult::Failure)
    );
    // Under restartPolicy Never an exited container is final.
    let mut never = WorkerState::new(ProbeKind::Readiness, "c", timings(1, 1, 0), true);
    assert_eq!(never.observe(&exited, &at(102), &results, "u"), Step::Stop);
}

#[test]
fn terminal_pods_and_missing_containers() {
    let (results, _rx) = Results::new();
    let mut w = WorkerState::new(ProbeKind::Readiness, "c", timings(1, 1, 0), false);
    let mut s = status("a", Some(100), true);
    s.container_statuses = Some(vec![ContainerStatus {
        name: "c".into(),
        ..Default::default()
    }]);
    // No instance yet.
    assert_eq!(w.observe(&s, &at(101), &results, "u"), Step::Skip);
    assert!(results.is_empty());
    s.phase = Some("Succeeded".into());
    assert_eq!(w.observe(&s, &at(101), &results, "u"), Step::Stop);
}

#[test]
fn sidecars_are_found_among_init_containers() {
    let (results, _rx) = Results::new();
    let mut w = WorkerState::new(ProbeKind::Liveness, "c", timings(1, 1, 0), false);
    let mut s = status("a", Some(100), true);
    s.init_container_statuses = s.container_statuses.take();
    assert_eq!(w.observe(&s, &at(101), &results, "u"), probe_step("a"));
}

#[test]
fn the_jitter_stays_within_one_period() {
    let period = Duration::from_secs(2);
    let mut distinct = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let j = jitter(period);
        assert!(j < period, "{j:?}");
        distinct.insert(j);
    }
    // Spread, not a constant.
    assert!(distinct.len() > 100, "{}", distinct.len());
    assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
}

#[test]
fn ticks_round_up_onto_the_grid() {
    let origin = tokio::time::Instant::now();
    let grid = Duration::from_millis(100);
    let at = |ms: u64| origin + Duration::from_millis(ms);
    assert_eq!(on_grid(origin, at(0), grid), at(0));
    assert_eq!(on_grid(origin, at(1), grid), at(100));
    assert_eq!(on_grid(origin, at(100), grid), at(100));
    assert_eq!(on_grid(origin, at(1234), grid), at(1300));
    // Before the origin: the origin itself.
    assert_eq!(on_grid(at(500), at(100), grid), at(500));
}
