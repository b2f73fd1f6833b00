//! Pod status scenarios: what the Go kubelet shows for the same runtime state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use ferrolet_proto::cri::ContainerState as CriState;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStatus, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::types::{RuntimeContainer, RuntimeSandbox, labels};

mod ephemeral;

const SEC: i64 = 1_000_000_000;

fn t(secs: i64) -> Time {
    Time(jiff::Timestamp::from_second(1_700_000_000 + secs).unwrap())
}

fn c(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(format!("127.0.0.1:5000/ferrolet/{name}:1")),
        ..Default::default()
    }
}

fn pod(containers: &[&str], init: &[&str], policy: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some("web-node1".into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some("uid-1".into());
    p.spec = Some(PodSpec {
        containers: containers.iter().map(|n| c(n)).collect(),
        init_containers: (!init.is_empty()).then(|| init.iter().map(|n| c(n)).collect()),
        restart_policy: Some(policy.into()),
        ..Default::default()
    });
    p
}

fn sandbox(ready: bool, ip: &str) -> RuntimeSandbox {
    RuntimeSandbox {
        id: "sb1".into(),
        attempt: 0,
        ready,
        created_at: 1,
        ip: ip.into(),
        additional_ips: Vec::new(),
    }
}

/// A runtime container created at `created` seconds; exited ones end 5 s later.
fn rc(
    name: &str,
    id: &str,
    state: CriState,
    created: i64,
    exit: i32,
    attempt: u32,
) -> RuntimeContainer {
    let base = 1_700_000_000 * SEC;
    let mut annotations = BTreeMap::new();
    annotations.insert(labels::RESTART_COUNT.to_string(), attempt.to_string());
    RuntimeContainer {
        id: id.into(),
        sandbox_id: "sb1".into(),
        name: name.into(),
        attempt,
        state,
        created_at: base + created * SEC,
        started_at: if state == CriState::ContainerCreated {
            0
        } else {
            base + (created + 1) * SEC
        },
        finished_at: if state == CriState::ContainerExited {
            base + (created + 5) * SEC
        } else {
            0
        },
        exit_code: exit,
        reason: match (state, exit) {
            (CriState::ContainerExited, 0) => "Completed".into(),
            (CriState::ContainerExited, _) => "Error".into(),
            _ => String::new(),
        },
        image: format!("127.0.0.1:5000/ferrolet/{name}:1"),
        image_ref: format!("127.0.0.1:5000/ferrolet/{name}@sha256:{}", "a".repeat(64)),
        annotations,
        ..Default::default()
    }
}

fn runtime(sandboxes: Vec<RuntimeSandbox>, containers: Vec<RuntimeContainer>) -> RuntimePod {
    RuntimePod {
        uid: "uid-1".into(),
        name: "web-node1".into(),
        namespace: "default".into(),
        sandboxes,
        containers,
    }
}

struct Ctx {
    waiting: BTreeMap<String, Waiting>,
    ready: BTreeMap<String, bool>,
    started: BTreeMap<String, bool>,
    killed: BTreeMap<String, String>,
    oom_killed: BTreeSet<String>,
    previous: Option<PodStatus>,
}

impl Ctx {
    fn new() -> Self {
        Self {
            waiting: BTreeMap::new(),
            ready: BTreeMap::new(),
            started: BTreeMap::new(),
            killed: BTreeMap::new(),
            oom_killed: BTreeSet::new(),
            previous: None,
        }
    }

    fn wait(mut self, name: &str, reason: &str, message: &str) -> Self {
        self.waiting.insert(
            name.into(),
            Waiting {
                reason: reason.into(),
                message: message.into(),
            },
        );
        self
    }

    fn status(&self, pod: &Pod, rt: &RuntimePod, now: i64) -> PodStatus {
        let ctx = StatusContext {
            host_ip: "192.168.1.10",
            waiting: &self.waiting,
            ready: &self.ready,
            started: &self.started,
            killed: &self.killed,
            oom_killed: &self.oom_killed,
            start_time: Some(t(0)),
            previous: self.previous.as_ref(),
            runtime_name: "containerd",
        };
        pod_status_at(pod, rt, &ctx, t(now))
    }
}

fn cond<'a>(s: &'a PodStatus, type_: &str) -> &'a PodCondition {
    s.conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

fn cs<'a>(s: &'a PodStatus, name: &str) -> &'a ContainerStatus {
    s.container_statuses
        .iter()
        .flatten()
        .chain(s.init_container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no status for {name}"))
}

fn waiting_reason(s: &ContainerStatus) -> Option<&str> {
    s.state.as_ref()?.waiting.as_ref()?.reason.as_deref()
}

#[test]
fn running_pod_is_running_and_ready() {
    let p = pod(&["app"], &[], "Always");
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![rc("app", "c1", CriState::ContainerRunning, 10, 0, 0)],
    );
    let s = Ctx::new().status(&p, &rt, 20);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    for type_ in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        assert_eq!(cond(&s, type_).status, "True", "{type_}");
        assert_eq!(cond(&s, type_).last_transition_time, Some(t(20)));
    }
    let types: Vec<_> = s
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(
        types,
        [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
    let app = cs(&s, "app");
    assert_eq!(app.container_id.as_deref(), Some("containerd://c1"));
    assert_eq!(app.image, "127.0.0.1:5000/ferrolet/app:1");
    assert!(app.image_id.contains("@sha256:"));
    assert!(app.ready);
    assert_eq!(app.started, Some(true));
    assert_eq!(app.restart_count, 0);
    let running = app.state.as_ref().unwrap().running.as_ref().unwrap();
    assert_eq!(running.started_at, Some(t(11)));
    assert_eq!(app.last_state, Some(Default::default()));
    assert_eq!(s.pod_ip.as_deref(), Some("10.88.0.5"));
    assert_eq!(s.pod_ips.as_ref().unwrap()[0].ip, "10.88.0.5");
    assert_eq!(s.host_ip.as_deref(), Some("192.168.1.10"));
    assert_eq!(s.host_ips.as_ref().unwrap()[0].ip, "192.168.1.10");
    assert_eq!(s.start_time, Some(t(0)));
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    assert!(s.init_container_statuses.is_none());

    // The JSON as clients see it: Go's field names.
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(
        json["containerStatuses"][0]["containerID"],
        "containerd://c1"
    );
    assert_eq!(
        json["containerStatuses"][0]["lastState"],
        serde_json::json!({})
    );
    assert_eq!(json["qosClass"], "BestEffort");
}

#[test]
fn not_ready_container_makes_the_pod_unready() {
    let p = pod(&["a", "b"], &[], "Always");
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![
            rc("a", "c1", CriState::ContainerRunning, 10, 0, 0),
            rc("b", "c2", CriState::ContainerRunning, 10, 0, 0),
        ],
    );
    let mut ctx = Ctx::new();
    ctx.ready.insert("b".into(), false);
    let s = ctx.status(&p, &rt, 20);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    let ready = cond(&s, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("containers with unready status: [b]")
    );
    assert!(!cs(&s, "b").ready);
    assert_eq!(cs(&s, "b").started, Some(true));
}

#[test]
fn pending_pod_shows_creating_then_the_sync_loops_reason() {
    let p = pod(&["web", "api"], &[], "Always");
    let rt = runtime(vec![], vec![]);
    let s = Ctx::new().status(&p, &rt, 1);
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(waiting_reason(cs(&s, "web")), Some("ContainerCreating"));
    assert_eq!(cs(&s, "web").started, Some(false));
    assert_eq!(cs(&s, "web").container_id, None);
    assert_eq!(cond(&s, "PodReadyToStartContainers").status, "False");
    let ready = cond(&s, "ContainersReady");
    // Spec order, as Go lists them.
    assert_eq!(
        ready.message.as_deref(),
        Some("containers with unready status: [web api]")
    );
    assert_eq!(s.pod_ip, None);
    assert_eq!(s.pod_ips, None);
    // App container statuses come sorted by name.
    let names: Vec<_> = s
        .container_statuses
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["api", "web"]);

    let ctx = Ctx::new().wait("web", "ErrImagePull", "pulling image: not found");
    let s = ctx.status(&p, &runtime(vec![sandbox(true, "10.88.0.9")], vec![]), 2);
    let web = cs(&s, "web")
        .state
        .as_ref()
        .unwrap()
        .waiting
        .as_ref()
        .unwrap();
    assert_eq!(web.reason.as_deref(), Some("ErrImagePull"));
    assert_eq!(web.message.as_deref(), Some("pulling image: not found"));
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(cond(&s, "PodReadyToStartContainers").status, "True");
}

#[test]
fn running_init_container_keeps_the_pod_initializing() {
    let p = pod(&["app"], &["setup", "migrate"], "Always");
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![rc("setup", "i1", CriState::ContainerRunning, 10, 0, 0)],
    );
    let s = Ctx::new().status(&p, &rt, 20);
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let init = cond(&s, "Initialized");
    assert_eq!(init.status, "False");
    assert_eq!(init.reason.as_deref(), Some("ContainersNotInitialized"));
    assert_eq!(
        init.message.as_deref(),
        Some("containers with incomplete status: [setup migrate]")
    );
    assert_eq!(waiting_reason(cs(&s, "app")), Some("PodInitializing"));
    assert_eq!(waiting_reason(cs(&s, "migrate")), Some("PodInitializing"));
    // Init statuses keep the spec's order.
    let names: Vec<_> = s
        .init_container_statuses
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["setup", "migrate"]);
    assert!(
        !cs(&s, "setup").ready,
        "a running regular init container is not ready"
    );
}

#[test]
fn finished_init_containers_let_the_pod_run() {
    let p = pod(&["app"], &["setup"], "Always");
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![
            rc("setup", "i1", CriState::ContainerExited, 10, 0, 0),
            rc("app", "c1", CriState::ContainerRunning, 20, 0, 0),
        ],
    );
    let s = Ctx::new().status(&p, &rt, 30);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Initialized").status, "True");
    assert_eq!(cond(&s, "Ready").status, "True");
    let setup = cs(&s, "setup");
    assert!(setup.ready);
    let term = setup.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(term.reason.as_deref(), Some("Completed"));
    assert_eq!(term.container_id.as_deref(), Some("containerd://i1"));
    assert_eq!(term.finished_at, Some(t(15)));

    // The runtime forgot the init container (garbage collected): it must have succeeded.
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![rc("app", "c1", CriState::ContainerRunning, 20, 0, 0)],
    );
    let s = Ctx::new().status(&p, &rt, 30);
    let term = cs(&s, "setup")
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(term.exit_code, 0);
    assert_eq!(term.reason.as_deref(), Some("Completed"));
    assert_eq!(s.phase.as_deref(), Some("Running"));
}

#[test]
fn failed_init_container_under_never_fails_the_pod() {
    let p = pod(&["app"], &["setup"], "Never");
    let rt = runtime(
        vec![sandbox(false, "")],
        vec![rc("setup", "i1", CriState::ContainerExited, 10, 3, 0)],
    );
    let s = Ctx::new().status(&p, &rt, 30);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    let term = cs(&s, "setup")
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(term.exit_code, 3);
    assert_eq!(term.reason.as_deref(), Some("Error"));
    assert_eq!(
        cond(&s, "ContainersReady").reason.as_deref(),
        Some("PodFailed")
    );
    assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodFailed"));
    assert_eq!(cond(&s, "Initialized").status, "False");

    // Under OnFailure the init container is retried: Pending, in back-off.
    let p = pod(&["app"], &["setup"], "OnFailure");
    let ctx = Ctx::new().wait(
        "setup",
        "CrashLoopBackOff",
        "back-off 10s restarting failed container=setup",
    );
    let s = ctx.status(&p, &rt, 30);
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let setup = cs(&s, "setup");
    assert_eq!(waiting_reason(setup), Some("CrashLoopBackOff"));
    assert_eq!(
        setup
            .last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        3
    );
}

#[test]
fn crash_loop_shows_back_off_last_state_and_restart_count() {
    let p = pod(&["app"], &[], "OnFailure");
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![
            rc("app", "c3", CriState::ContainerExited, 30, 1, 2),
            rc("app", "c2", CriState::ContainerExited, 15, 1, 1),
            rc("app", "c1", CriState::ContainerExited, 0, 1, 0),
        ],
    );
    let ctx = Ctx::new().wait(
        "app",
        "CrashLoopBackOff",
        "back-off 20s restarting failed container=app pod=uid-1",
    );
    let s = ctx.status(&p, &rt, 40);
    let app = cs(&s, "app");
    assert_eq!(app.restart_count, 2);
    assert_eq!(waiting_reason(app), Some("CrashLoopBackOff"));
    let last = app
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(
        last.container_id.as_deref(),
        Some("containerd://c3"),
        "the newest run"
    );
    assert_eq!(last.exit_code, 1);
    // Still going to be restarted: Running (Go: OnFailure with a failure is restarting).
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Ready").status, "False");

    // Between runs, with no reason recorded: terminated now, the run before as last state.
    let s = Ctx::new().status(&p, &rt, 40);
    let app = cs(&s, "app");
    assert_eq!(
        app.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .container_id
            .as_deref(),
        Some("containerd://c3")
    );
    assert_eq!(
        app.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .container_id
            .as_deref(),
        Some("containerd://c2")
    );

    // Restarted: running, with the crash as last state.
    let mut rt2 = rt.clone();
    rt2.containers
        .insert(0, rc("app", "c4", CriState::ContainerRunning, 50, 0, 3));
    let s = Ctx::new().status(&p, &rt2, 52);
    let app = cs(&s, "app");
    assert_eq!(app.restart_count, 3);
    assert!(app.state.as_ref().unwrap().running.is_some());
    assert_eq!(
        app.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .container_id
            .as_deref(),
        Some("containerd://c3")
    );
    assert_eq!(s.phase.as_deref(), Some("Running"));
}

#[test]
fn completed_pods_succeed_or_fail_per_restart_policy() {
    let rt = |code| {
        runtime(
            vec![sandbox(false, "10.88.0.5")],
            vec![rc("job", "c1", CriState::ContainerExited, 10, code, 0)],
        )
    };
    let never = pod(&["job"], &[], "Never");
    let s = Ctx::new().status(&never, &rt(0), 20);
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
    assert_eq!(
        cond(&s, "ContainersReady").reason.as_deref(),
        Some("PodCompleted")
    );
    assert_eq!(
        cond(&s, "Initialized").reason.as_deref(),
        Some("PodCompleted")
    );
    assert_eq!(cond(&s, "Initialized").status, "True");
    let term = cs(&s, "job")
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .unwrap();
    assert_eq!(term.reason.as_deref(), Some("Completed"));
    // The exited sandbox still reports its address.
    assert_eq!(s.pod_ip.as_deref(), Some("10.88.0.5"));

    let s = Ctx::new().status(&never, &rt(1), 20);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(
        cs(&s, "job")
            .state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("Error")
    );

    let on_failure = pod(&["job"], &[], "OnFailure");
    assert_eq!(
        Ctx::new().status(&on_failure, &rt(0), 20).phase.as_deref(),
        Some("Succeeded")
    );
    assert_eq!(
        Ctx::new().status(&on_failure, &rt(1), 20).phase.as_deref(),
        Some("Running")
    );
    let always = pod(&["job"], &[], "Always");
    assert_eq!(
        Ctx::new().status(&always, &rt(0), 20).phase.as_deref(),
        Some("Running")
    );

    // The sync loop's leftover reason is ignored for a container that will not restart.
    let ctx = Ctx::new().wait("job", "ContainerCreating", "");
    let s = ctx.status(&never, &rt(0), 20);
    assert!(cs(&s, "job").state.as_ref().unwrap().terminated.is_some());
}

#[test]
fn transition_times_survive_while_status_is_unchanged() {
    let p = pod(&["app"], &[], "Always");
    let pending = runtime(vec![sandbox(true, "10.88.0.5")], vec![]);
    let running = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![rc("app", "c1", CriState::ContainerRunning, 10, 0, 0)],
    );
    let mut ctx = Ctx::new();
    let s1 = ctx.status(&p, &pending, 5);
    ctx.previous = Some(s1.clone());
    let s2 = ctx.status(&p, &pending, 8);
    assert_eq!(cond(&s2, "Ready").last_transition_time, Some(t(5)));
    ctx.previous = Some(s2);
    let s3 = ctx.status(&p, &running, 12);
    assert_eq!(
        cond(&s3, "Ready").last_transition_time,
        Some(t(12)),
        "False → True"
    );
    assert_eq!(
        cond(&s3, "PodScheduled").last_transition_time,
        Some(t(5)),
        "unchanged"
    );
    assert_eq!(
        cond(&s3, "PodReadyToStartContainers").last_transition_time,
        Some(t(5))
    );
    // The first start time sticks.
    assert_eq!(s3.start_time, Some(t(0)));
}

#[test]
fn terminal_phase_sticks_and_vanished_containers_are_accounted() {
    let p = pod(&["job"], &[], "Never");
    let done = runtime(
        vec![sandbox(false, "10.88.0.5")],
        vec![rc("job", "c1", CriState::ContainerExited, 10, 0, 0)],
    );
    let mut ctx = Ctx::new();
    let s1 = ctx.status(&p, &done, 20);
    assert_eq!(s1.phase.as_deref(), Some("Succeeded"));
    ctx.previous = Some(s1);
    // Everything removed from the runtime: still Succeeded, the old terminated state kept,
    // and the old address.
    let gone = runtime(vec![], vec![]);
    let s2 = ctx.status(&p, &gone, 30);
    assert_eq!(s2.phase.as_deref(), Some("Succeeded"));
    assert_eq!(
        cs(&s2, "job")
            .state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .container_id
            .as_deref(),
        Some("containerd://c1")
    );
    assert_eq!(s2.pod_ip.as_deref(), Some("10.88.0.5"));

    // A running container that vanished ended in an unknown way; the restart is counted.
    let p = pod(&["app"], &[], "Always");
    let mut ctx = Ctx::new();
    let running = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![rc("app", "c1", CriState::ContainerRunning, 10, 0, 0)],
    );
    ctx.previous = Some(ctx.status(&p, &running, 12));
    let s = ctx.status(&p, &runtime(vec![sandbox(true, "10.88.0.5")], vec![]), 20);
    let app = cs(&s, "app");
    assert_eq!(app.restart_count, 1);
    assert_eq!(waiting_reason(app), Some("ContainerCreating"));
    let last = app
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(last.reason.as_deref(), Some("ContainerStatusUnknown"));
    assert_eq!(last.exit_code, 137);
    assert_eq!(
        s.phase.as_deref(),
        Some("Running"),
        "stopped with a last state, not Pending"
    );

    // The runtime reports it in an unknown state: terminated, restart counted.
    let mut unknown = running.clone();
    unknown.containers[0].state = CriState::ContainerUnknown;
    let s = ctx.status(&p, &unknown, 20);
    let app = cs(&s, "app");
    assert_eq!(app.restart_count, 1);
    assert_eq!(
        app.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("ContainerStatusUnknown")
    );
}

#[test]
fn created_container_waits_and_image_ids_show_the_spec_image() {
    let p = pod(&["app"], &[], "Always");
    let mut created = rc("app", "c1", CriState::ContainerCreated, 10, 0, 0);
    created.image = format!("sha256:{}", "b".repeat(64));
    let rt = runtime(vec![sandbox(true, "10.88.0.5")], vec![created]);
    let s = Ctx::new().status(&p, &rt, 12);
    let app = cs(&s, "app");
    assert_eq!(app.image, "127.0.0.1:5000/ferrolet/app:1");
    assert_eq!(
        app.state.as_ref().unwrap().waiting,
        Some(Default::default())
    );
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let s = Ctx::new()
        .wait("app", "RunContainerError", "boom")
        .status(&p, &rt, 12);
    assert_eq!(waiting_reason(cs(&s, "app")), Some("RunContainerError"));
}

#[test]
fn sidecars_count_as_app_containers_for_readiness() {
    let mut p = pod(&["app"], &["proxy"], "Always");
    p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].restart_policy =
        Some("Always".into());
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![
            rc("proxy", "s1", CriState::ContainerRunning, 10, 0, 0),
            rc("app", "c1", CriState::ContainerRunning, 20, 0, 0),
        ],
    );
    let mut ctx = Ctx::new();
    let s = ctx.status(&p, &rt, 30);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Initialized").status, "True");
    assert!(cs(&s, "proxy").ready);
    ctx.ready.insert("proxy".into(), false);
    let s = ctx.status(&p, &rt, 30);
    assert_eq!(
        cond(&s, "ContainersReady").message.as_deref(),
        Some("containers with unready status: [proxy]")
    );

    // Only the sidecar runs: initialized (started), app waits.
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![rc("proxy", "s1", CriState::ContainerRunning, 10, 0, 0)],
    );
    let s = Ctx::new().status(&p, &rt, 30);
    assert_eq!(cond(&s, "Initialized").status, "True");
    assert_eq!(s.phase.as_deref(), Some("Pending"));
}

#[test]
fn addresses_family_order_and_host_network() {
    let p = pod(&["app"], &[], "Always");
    let mut sb = sandbox(true, "fd00::5");
    sb.additional_ips = vec!["10.88.0.5".into(), "10.88.0.6".into()];
    let rt = runtime(vec![sb], vec![]);
    let s = Ctx::new().status(&p, &rt, 1);
    assert_eq!(
        s.pod_ip.as_deref(),
        Some("10.88.0.5"),
        "the node's family first"
    );
    let ips: Vec<_> = s.pod_ips.unwrap().into_iter().map(|i| i.ip).collect();
    assert_eq!(ips, ["10.88.0.5", "fd00::5"]);

    let mut host = pod(&["app"], &[], "Always");
    host.spec.as_mut().unwrap().host_network = Some(true);
    let s = Ctx::new().status(&host, &runtime(vec![sandbox(true, "")], vec![]), 1);
    assert_eq!(s.pod_ip.as_deref(), Some("192.168.1.10"));
    assert_eq!(cond(&s, "PodReadyToStartContainers").status, "True");
}

#[test]
fn foreign_conditions_and_reasons_are_kept() {
    let mut p = pod(&["app"], &[], "Always");
    p.status = Some(PodStatus {
        conditions: Some(vec![PodCondition {
            type_: "example.com/Gate".into(),
            status: "False".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    p.spec.as_mut().unwrap().readiness_gates =
        Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
            condition_type: "example.com/Gate".into(),
        }]);
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![rc("app", "c1", CriState::ContainerRunning, 10, 0, 0)],
    );
    let mut ctx = Ctx::new();
    ctx.previous = Some(PodStatus {
        phase: Some("Running".into()),
        reason: Some("Because".into()),
        ..Default::default()
    });
    let s = ctx.status(&p, &rt, 20);
    assert_eq!(s.conditions.as_ref().unwrap()[0].type_, "example.com/Gate");
    let ready = cond(&s, "Ready");
    assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("the status of pod readiness gate \"example.com/Gate\" is not \"True\", but False")
    );
    assert_eq!(cond(&s, "ContainersReady").status, "True");
    assert_eq!(
        s.reason.as_deref(),
        Some("Because"),
        "same phase keeps the reason"
    );
}

#[test]
fn a_container_not_started_is_neither_started_nor_ready() {
    let p = pod(&["app"], &[], "Always");
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![rc("app", "c1", CriState::ContainerRunning, 10, 0, 0)],
    );
    let mut ctx = Ctx::new();
    ctx.started.insert("app".into(), false);
    // Readiness not known yet either way: not started wins.
    ctx.ready.insert("app".into(), true);
    let s = ctx.status(&p, &rt, 20);
    let app = cs(&s, "app");
    assert_eq!(app.started, Some(false));
    assert!(!app.ready);
    assert!(app.state.as_ref().unwrap().running.is_some());
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "ContainersReady").status, "False");
    assert_eq!(cond(&s, "Ready").status, "False");

    ctx.started.insert("app".into(), true);
    let s = ctx.status(&p, &rt, 21);
    assert_eq!(cs(&s, "app").started, Some(true));
    assert!(cs(&s, "app").ready);
    assert_eq!(cond(&s, "Ready").status, "True");
}

#[test]
fn a_killed_instance_shows_why_unless_the_runtime_says_more() {
    let p = pod(&["app"], &[], "Always");
    let mut killed = rc("app", "c1", CriState::ContainerExited, 0, 137, 0);
    killed.reason = "Error".into();
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![
            rc("app", "c2", CriState::ContainerRunning, 20, 0, 1),
            killed.clone(),
        ],
    );
    let mut ctx = Ctx::new();
    ctx.killed.insert(
        "c1".into(),
        "Container app failed liveness probe, will be restarted".into(),
    );
    let s = ctx.status(&p, &rt, 30);
    let app = cs(&s, "app");
    assert_eq!(app.restart_count, 1);
    let last = app
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(
        (
            last.exit_code,
            last.reason.as_deref(),
            last.message.as_deref()
        ),
        (
            137,
            Some("Error"),
            Some("Container app failed liveness probe, will be restarted")
        )
    );

    // A termination message the container left wins.
    let mut with_message = killed;
    with_message.message = "bye".into();
    let rt = runtime(vec![sandbox(true, "10.88.0.5")], vec![with_message]);
    let s = ctx.status(&p, &rt, 30);
    let state = cs(&s, "app").state.as_ref().unwrap();
    assert_eq!(
        state.terminated.as_ref().unwrap().message.as_deref(),
        Some("bye")
    );
}

#[test]
fn an_instance_the_oom_watcher_saw_killed_reads_oom_killed() {
    let p = pod(&["app"], &[], "Always");
    // The runtime missed the OOM kill of the older instance (exit 137, Error); the newest one
    // ended with 137 too, but no OOM kill was seen for it; a third exited 1.
    let old = rc("app", "c1", CriState::ContainerExited, 0, 137, 0);
    let newer = rc("app", "c2", CriState::ContainerExited, 20, 137, 1);
    let rt = runtime(vec![sandbox(true, "10.88.0.5")], vec![newer, old.clone()]);
    let mut ctx = Ctx::new();
    ctx.oom_killed.insert("c1".into());
    let s = ctx.status(&p, &rt, 30);
    let app = cs(&s, "app");
    let reason = |st: &Option<ContainerState>| {
        st.as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.reason.clone())
    };
    assert_eq!(reason(&app.last_state).as_deref(), Some("OOMKilled"));
    assert_eq!(reason(&app.state).as_deref(), Some("Error"));

    // A runtime that reports no reason at all: the same.
    let mut bare = old.clone();
    bare.reason.clear();
    let rt = runtime(vec![sandbox(true, "10.88.0.5")], vec![bare]);
    let s = ctx.status(&p, &rt, 30);
    assert_eq!(reason(&cs(&s, "app").state).as_deref(), Some("OOMKilled"));

    // Another exit code, or a reason of the runtime's own, is kept.
    for (exit, why) in [
        (1, "Error"),
        (137, "ContainerStatusUnknown"),
        (0, "Completed"),
    ] {
        let mut other = old.clone();
        other.exit_code = exit;
        other.reason = why.into();
        let rt = runtime(vec![sandbox(true, "10.88.0.5")], vec![other]);
        let s = ctx.status(&p, &rt, 30);
        assert_eq!(reason(&cs(&s, "app").state).as_deref(), Some(why), "{exit}");
    }
}
