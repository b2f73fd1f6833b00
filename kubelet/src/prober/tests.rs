//! The manager with a scripted checker: workers per probe, results following the checker,
//! updates, `started`/`ready`, and removal.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize};

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, ExecAction, PodSpec,
};

use super::check::{CheckError, Outcome, Target};
use super::*;
use crate::pleg::BoxFut;

/// Healthy while the switch is on; counts runs.
#[derive(Default)]
struct Scripted {
    healthy: AtomicBool,
    runs: AtomicUsize,
}

impl Checker for Scripted {
    fn check<'a>(
        &'a self,
        _probe: &'a Probe,
        target: Target<'a>,
    ) -> BoxFut<'a, Result<(Outcome, String), CheckError>> {
        Box::pin(async move {
            self.runs.fetch_add(1, Ordering::SeqCst);
            assert_eq!(target.pod_ip, "10.0.0.9");
            if self.healthy.load(Ordering::SeqCst) {
                Ok((Outcome::Success, String::new()))
            } else {
                Ok((Outcome::Failure, "not healthy".into()))
            }
        })
    }
}

fn probe() -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["true".into()]),
        }),
        period_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    }
}

fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.uid = Some("uid-1".into());
    pod.metadata.name = Some("p".into());
    pod.spec = Some(PodSpec {
        containers,
        init_containers: Some(init),
        ..Default::default()
    });
    pod
}

fn running(name: &str, id: &str, started: bool) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        container_id: Some(format!("cri://{id}")),
        started: Some(started),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning { started_at: None }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn status(statuses: Vec<ContainerStatus>) -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("10.0.0.9".into()),
        container_statuses: Some(statuses),
        ..Default::default()
    }
}

/// Polls until `f` holds (generous: workers probe every second after a jitter).
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn readiness_follows_the_probe_and_updates_are_sent() {
    let checker = Arc::new(Scripted::default());
    checker.healthy.store(true, Ordering::SeqCst);
    let manager = Manager::with_checker(checker.clone());
    let mut updates = manager.take_updates();
    let c = Container {
        name: "c".into(),
        readiness_probe: Some(probe()),
        ..Default::default()
    };
    let p = Arc::new(pod(vec![c], vec![]));
    manager.add_pod(&p, &log_events());
    manager.add_pod(&p, &log_events());
    assert_eq!(manager.worker_count(), 1);
    // Before the first status, nothing is ready (there is a readiness worker).
    assert_eq!(manager.health("uid-1", "c", "a", true), (true, false));
    manager.set_status("uid-1", &status(vec![running("c", "a", true)]));
    until("ready", || {
        manager.health("uid-1", "c", "a", true) == (true, true)
    })
    .await;
    checker.healthy.store(false, Ordering::SeqCst);
    until("unready", || {
        manager.health("uid-1", "c", "a", true) == (true, false)
    })
    .await;
    let mut seen = Vec::new();
    while let Ok(u) = updates.try_recv() {
        seen.push((u.kind, u.result, u.container_id));
    }
    assert_eq!(
        seen,
        [
            (ProbeKind::Readiness, ProbeResult::Failure, "a".to_string()),
            (ProbeKind::Readiness, ProbeResult::Success, "a".to_string()),
            (ProbeKind::Readiness, ProbeResult::Failure, "a".to_string()),
        ]
    );
    // A second taker gets a closed channel.
    assert!(manager.take_updates().recv().await.is_none());

    manager.remove_pod("uid-1");
    assert_eq!(manager.worker_count(), 0);
    until("the worker to forget its result", || {
        manager.result(ProbeKind::Readiness, "a").is_none()
    })
    .await;
    let runs = checker.runs.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        checker.runs.load(Ordering::SeqCst),
        runs,
        "probed after removal"
    );
}

#[tokio::test(start_paused = true)]
async fn a_liveness_failure_is_sent_once_and_probing_holds() {
    let checker = Arc::new(Scripted::default());
    let manager = Manager::with_checker(checker.clone());
    let mut updates = manager.take_updates();
    let c = Container {
        name: "c".into(),
        liveness_probe: Some(probe()),
        ..Default::default()
    };
    let events = Arc::new(crate::events::MemoryRecorder::default());
    let recorder: Arc<dyn crate::events::EventRecorder> = events.clone();
    manager.add_pod(&Arc::new(pod(vec![c], vec![])), &recorder);
    manager.set_status("uid-1", &status(vec![running("c", "a", true)]));
    until("liveness failure", || {
        manager.result(ProbeKind::Liveness, "a") == Some(ProbeResult::Failure)
    })
    .await;
    // Go's Unhealthy event for every failed run, about the container.
    {
        let recorded = events.events.lock().unwrap();
        assert!(!recorded.is_empty());
        for (_, field, kind, reason, message) in recorded.iter() {
            assert_eq!(field, "spec.containers{c}");
            assert_eq!(*kind, crate::events::EventType::Warning);
            assert_eq!(reason, "Unhealthy");
            assert!(message.starts_with("Liveness probe failed: "), "{message}");
        }
    }
    let first = updates.recv().await.unwrap();
    assert_eq!(
        (first.kind, first.result),
        (ProbeKind::Liveness, ProbeResult::Success)
    );
    assert!(!first.needs_sync());
    let failed = updates.recv().await.unwrap();
    assert_eq!(failed.result, ProbeResult::Failure);
    assert!(failed.needs_sync());
    let runs = checker.runs.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        checker.runs.load(Ordering::SeqCst),
        runs,
        "probed while on hold"
    );
    // A new instance is probed again.
    checker.healthy.store(true, Ordering::SeqCst);
    manager.set_status("uid-1", &status(vec![running("c", "b", true)]));
    until("the new instance probed", || {
        checker.runs.load(Ordering::SeqCst) > runs
    })
    .await;
    assert_eq!(manager.result(ProbeKind::Liveness, "a"), None);
    manager.remove_pod("uid-1");
}

#[tokio::test(start_paused = true)]
async fn started_waits_for_the_startup_probe() {
    let checker = Arc::new(Scripted::default());
    checker.healthy.store(true, Ordering::SeqCst);
    let manager = Manager::with_checker(checker.clone());
    let c = Container {
        name: "c".into(),
        startup_probe: Some(probe()),
        ..Default::default()
    };
    manager.add_pod(&Arc::new(pod(vec![c], vec![])), &log_events());
    assert_eq!(manager.health("uid-1", "c", "a", true), (false, false));
    manager.set_status("uid-1", &status(vec![running("c", "a", false)]));
    until("started", || {
        manager.health("uid-1", "c", "a", true) == (true, true)
    })
    .await;
    assert_eq!(manager.health("uid-1", "c", "a", false), (false, false));
    manager.remove_pod("uid-1");
}

#[tokio::test]
async fn workers_go_to_app_containers_and_sidecars_only() {
    let manager = Manager::with_checker(Arc::new(Scripted::default()));
    let probed = |name: &str| Container {
        name: name.into(),
        liveness_probe: Some(probe()),
        readiness_probe: Some(probe()),
        ..Default::default()
    };
    let mut sidecar = probed("side");
    sidecar.restart_policy = Some("Always".into());
    let plain = Container {
        name: "plain".into(),
        ..Default::default()
    };
    let p = Arc::new(pod(
        vec![probed("app"), plain],
        vec![probed("init"), sidecar],
    ));
    manager.add_pod(&p, &log_events());
    assert_eq!(manager.worker_count(), 4);
    assert!(manager.has_worker("uid-1", "side", ProbeKind::Liveness));
    assert!(!manager.has_worker("uid-1", "init", ProbeKind::Liveness));
    assert!(!manager.has_worker("uid-1", "app", ProbeKind::Startup));
    // Without probes a running container is started and ready at once.
    assert_eq!(manager.health("uid-1", "plain", "x", true), (true, true));
    assert_eq!(manager.health("uid-1", "plain", "x", false), (false, false));
    manager.remove_pod("uid-1");
    assert_eq!(manager.worker_count(), 0);
    // No UID, no workers.
    let mut anonymous = Arc::unwrap_or_clone(p);
    anonymous.metadata.uid = None;
    manager.add_pod(&Arc::new(anonymous), &log_events());
    assert_eq!(manager.worker_count(), 0);
}

fn log_events() -> Arc<dyn crate::events::EventRecorder> {
    Arc::new(crate::events::LogRecorder)
}
