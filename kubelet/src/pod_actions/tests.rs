//! Table tests of `compute_pod_actions`, after the Go kubelet's `TestComputePodActions`,
//! `…WithInitContainers` and `…WithRestartableInitContainers` (ephemeral containers in
//! [`ephemeral`]), plus the crash-loop back-off, which Go checks in `SyncPod` and we decide
//! up front.

use std::time::{Duration, Instant};

use ferrolet_proto::cri::ContainerState::{
    ContainerCreated as Created, ContainerExited as Exited, ContainerRunning as Running,
    ContainerUnknown as Unknown,
};
use k8s_openapi::api::core::v1::Probe;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::types::RuntimeSandbox;

mod ephemeral;

const UID: &str = "uid1";
const SB: &str = "sb1";
const IP: &str = "10.0.0.1";
/// The pod's grace period in every case.
const GRACE: i64 = 30;

/// One table row: a pod, what the runtime has of it, probe results, back-off history, and
/// the actions expected.
struct Case {
    name: &'static str,
    spec: PodSpec,
    sandboxes: Vec<RuntimeSandbox>,
    containers: Vec<RuntimeContainer>,
    probes: Vec<(ProbeKind, &'static str, ProbeResult)>,
    /// Failures recorded in the back-off: (container, seconds before `now`), oldest first.
    failures: Vec<(&'static str, f64)>,
    want: PodActions,
}

impl Case {
    fn new(name: &'static str, spec: PodSpec, want: PodActions) -> Self {
        Self {
            name,
            spec,
            sandboxes: vec![sandbox(SB, 0, true)],
            containers: Vec::new(),
            probes: Vec::new(),
            failures: Vec::new(),
            want,
        }
    }

    fn sandboxes(mut self, sandboxes: Vec<RuntimeSandbox>) -> Self {
        self.sandboxes = sandboxes;
        self
    }

    /// Instances of the pod's containers (by name) in the given states, in sandbox `SB`.
    fn with(mut self, instances: &[(&str, u32, ContainerStateArg)]) -> Self {
        for &(name, attempt, (state, exit)) in instances {
            let spec = find(&self.spec, name);
            self.containers
                .push(instance(&spec, SB, attempt, state, exit));
        }
        self
    }

    fn raw(mut self, rc: RuntimeContainer) -> Self {
        self.containers.push(rc);
        self
    }

    fn probe(mut self, kind: ProbeKind, id: &'static str, result: ProbeResult) -> Self {
        self.probes.push((kind, id, result));
        self
    }

    fn failed(mut self, container: &'static str, secs_ago: f64) -> Self {
        self.failures.push((container, secs_ago));
        self
    }

    /// Runs the case at `now`, with the back-off history laid out before it.
    fn run(&self, now: Instant) -> PodActions {
        let backoff = Backoff::crash_loop();
        for &(name, ago) in &self.failures {
            backoff.next(&backoff_key(UID, name), now - Duration::from_secs_f64(ago));
        }
        let mut probes = ProbeVerdicts::default();
        for &(kind, id, result) in &self.probes {
            probes.set(kind, id, result);
        }
        let runtime = RuntimePod {
            uid: UID.into(),
            name: "p".into(),
            namespace: "default".into(),
            sandboxes: self.sandboxes.clone(),
            containers: self.containers.clone(),
        };
        let input = PodInputs {
            uid: UID,
            spec: &self.spec,
            grace: GRACE,
            runtime: &runtime,
            backoff: &backoff,
            probes: &probes,
            in_place_resize: None,
        };
        compute_pod_actions(&input, now)
    }
}

type ContainerStateArg = (ContainerState, i32);
const RUNNING: ContainerStateArg = (Running, 0);
const SUCCEEDED: ContainerStateArg = (Exited, 0);
const FAILED: ContainerStateArg = (Exited, 1);
const CREATED: ContainerStateArg = (Created, 0);
const UNKNOWN: ContainerStateArg = (Unknown, 0);

fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox".into()),
        ..Default::default()
    }
}

fn sidecar(name: &str) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..container(name)
    }
}

fn with_startup_probe(c: Container) -> Container {
    Container {
        startup_probe: Some(Probe::default()),
        ..c
    }
}

fn with_liveness_grace(c: Container, grace: i64) -> Container {
    Container {
        liveness_probe: Some(Probe {
            termination_grace_period_seconds: Some(grace),
            ..Default::default()
        }),
        ..c
    }
}

fn pod(policy: &str, init: Vec<Container>, apps: Vec<Container>) -> PodSpec {
    PodSpec {
        restart_policy: Some(policy.into()),
        init_containers: (!init.is_empty()).then_some(init),
        containers: apps,
        ..Default::default()
    }
}

/// Two app containers, `a` and `b`.
fn two(policy: &str) -> PodSpec {
    pod(policy, vec![], vec![container("a"), container("b")])
}

/// Init containers `i1`, `i2`, then app container `a`.
fn inits(policy: &str) -> PodSpec {
    pod(
        policy,
        vec![container("i1"), container("i2")],
        vec![container("a")],
    )
}

/// Sidecar `sc` (optionally with a startup probe), init container `i2`, app container `a`.
fn with_sidecar(policy: &str, startup_probe: bool) -> PodSpec {
    let sc = if startup_probe {
        with_startup_probe(sidecar("sc"))
    } else {
        sidecar("sc")
    };
    pod(policy, vec![sc, container("i2")], vec![container("a")])
}

fn find(spec: &PodSpec, name: &str) -> Container {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn sandbox(id: &str, attempt: u32, ready: bool) -> RuntimeSandbox {
    RuntimeSandbox {
        id: id.into(),
        attempt,
        ready,
        created_at: i64::from(attempt) + 1,
        ip: IP.into(),
        additional_ips: Vec::new(),
    }
}

/// An instance with id `<name>-<attempt>` and the spec's hash.
fn instance(
    spec: &Container,
    sandbox_id: &str,
    attempt: u32,
    state: ContainerState,
    exit_code: i32,
) -> RuntimeContainer {
    RuntimeContainer {
        id: format!("{}-{attempt}", spec.name),
        sandbox_id: sandbox_id.into(),
        name: spec.name.clone(),
        attempt,
        hash: podspec::container_hash(spec),
        state,
        created_at: i64::from(attempt) + 1,
        exit_code,
        ..Default::default()
    }
}

fn run(sandbox: SandboxAction, attempt: u32, steps: Vec<ContainerAction>) -> PodActions {
    PodActions::Run(RunActions {
        sandbox,
        attempt,
        steps,
        initializing: None,
    })
}

/// Initialization not done: `later` init containers (and the app containers) held back.
fn init_run(sandbox: SandboxAction, steps: Vec<ContainerAction>, later: &[&str]) -> PodActions {
    let attempt = match sandbox {
        SandboxAction::Create(SandboxReason::NotReady) => 1,
        _ => 0,
    };
    PodActions::Run(RunActions {
        sandbox,
        attempt,
        steps,
        initializing: Some(later.iter().map(|s| s.to_string()).collect()),
    })
}

fn keep() -> SandboxAction {
    SandboxAction::Keep {
        id: SB.into(),
        ips: vec![IP.into()],
    }
}

fn finished(stop: &[&str]) -> PodActions {
    PodActions::Finished {
        stop_sandboxes: stop.iter().map(|s| s.to_string()).collect(),
    }
}

const A: ContainerRef = ContainerRef::App(0);
const B: ContainerRef = ContainerRef::App(1);
const I1: ContainerRef = ContainerRef::Init(0);
const I2: ContainerRef = ContainerRef::Init(1);

fn start(container: ContainerRef, restart_count: u32) -> ContainerAction {
    ContainerAction::Start {
        container,
        restart_count,
        backoff: false,
    }
}

/// A restart under the back-off.
fn restart(container: ContainerRef, restart_count: u32) -> ContainerAction {
    ContainerAction::Start {
        container,
        restart_count,
        backoff: true,
    }
}

fn kill(
    container: ContainerRef,
    id: &str,
    grace: i64,
    reason: KillReason,
    message: &str,
) -> ContainerAction {
    ContainerAction::Kill {
        container,
        id: id.into(),
        grace,
        reason,
        message: message.into(),
    }
}

fn back_off(container: ContainerRef, name: &str, secs: u64) -> ContainerAction {
    ContainerAction::Wait {
        container,
        waiting: Waiting {
            reason: "CrashLoopBackOff".into(),
            message: format!("back-off {secs}s restarting failed container={name} pod={UID}"),
        },
    }
}

fn check(cases: Vec<Case>) {
    // Far enough from the clock's start that back-off history can lie before it.
    let now = Instant::now() + Duration::from_secs(3600);
    let mut failed = Vec::new();
    for case in &cases {
        let got = case.run(now);
        if got != case.want {
            failed.push(format!(
                "{}:\n  want {:?}\n   got {:?}",
                case.name, case.want, got
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Which sandbox a pod gets, and the restart counts in a new one.
fn sandbox_cases() -> Vec<Case> {
    let create = |reason| SandboxAction::Create(reason);
    vec![
        Case::new(
            "new pod: first sandbox, every container",
            two("Always"),
            run(
                create(SandboxReason::FirstSandbox),
                0,
                vec![start(A, 0), start(B, 0)],
            ),
        )
        .sandboxes(vec![]),
        Case::new(
            "everything running: nothing to do",
            two("Always"),
            run(keep(), 0, vec![]),
        )
        .with(&[("a", 0, RUNNING), ("b", 0, RUNNING)]),
        Case::new(
            "sandbox not ready, Always: new sandbox, every container afresh",
            two("Always"),
            run(
                create(SandboxReason::NotReady),
                1,
                vec![start(A, 1), start(B, 1)],
            ),
        )
        .sandboxes(vec![sandbox(SB, 0, false)])
        .with(&[("a", 0, RUNNING), ("b", 0, RUNNING)]),
        Case::new(
            "sandbox not ready, OnFailure, one succeeded: every container afresh",
            two("OnFailure"),
            run(
                create(SandboxReason::NotReady),
                1,
                vec![start(A, 1), start(B, 1)],
            ),
        )
        .sandboxes(vec![sandbox(SB, 0, false)])
        .with(&[("a", 0, SUCCEEDED), ("b", 0, RUNNING)]),
        Case::new(
            "sandbox not ready, Never, no container ever made: new sandbox",
            two("Never"),
            run(
                create(SandboxReason::NotReady),
                3,
                vec![start(A, 0), start(B, 0)],
            ),
        )
        .sandboxes(vec![sandbox(SB, 2, false)]),
        Case::new(
            "newest sandbox not ready though an older one is: new sandbox",
            two("Always"),
            run(
                create(SandboxReason::NotReady),
                2,
                vec![start(A, 0), start(B, 0)],
            ),
        )
        .sandboxes(vec![sandbox("sb2", 1, false), sandbox(SB, 0, true)]),
        Case::new(
            "restart counts continue from instances in older sandboxes",
            two("Always"),
            run(keep(), 1, vec![start(A, 3), start(B, 0)]),
        )
        .sandboxes(vec![sandbox(SB, 1, true), sandbox("sb0", 0, false)])
        .raw(instance(&container("a"), "sb0", 2, Exited, 1)),
    ]
}

/// Pods done for good lose their sandbox and nothing else.
fn finished_cases() -> Vec<Case> {
    vec![
        Case::new(
            "sandbox not ready, Never, every container exited: finished, no new sandbox",
            two("Never"),
            finished(&[]),
        )
        .sandboxes(vec![sandbox(SB, 1, false)])
        .with(&[("a", 0, SUCCEEDED), ("b", 0, FAILED)]),
        Case::new(
            "sandbox not ready, OnFailure, every container succeeded: finished",
            two("OnFailure"),
            finished(&[]),
        )
        .sandboxes(vec![sandbox(SB, 1, false)])
        .with(&[("a", 0, SUCCEEDED), ("b", 0, SUCCEEDED)]),
        Case::new(
            "Never, every container exited: finished, the ready sandbox stops",
            two("Never"),
            finished(&[SB]),
        )
        .with(&[("a", 0, SUCCEEDED), ("b", 0, FAILED)]),
        Case::new(
            "OnFailure, every container succeeded: finished, the ready sandbox stops",
            two("OnFailure"),
            finished(&[SB]),
        )
        .with(&[("a", 0, SUCCEEDED), ("b", 0, SUCCEEDED)]),
    ]
}

/// Exited app containers under each restart policy and exit code.
fn restart_policy_cases() -> Vec<Case> {
    let with_b_running = |name, policy, a: ContainerStateArg, want| {
        Case::new(name, two(policy), run(keep(), 0, want)).with(&[("a", 0, a), ("b", 0, RUNNING)])
    };
    vec![
        with_b_running(
            "Always, exit 0: restarted",
            "Always",
            SUCCEEDED,
            vec![restart(A, 1)],
        ),
        with_b_running(
            "Always, exit 1: restarted",
            "Always",
            FAILED,
            vec![restart(A, 1)],
        ),
        with_b_running(
            "OnFailure, exit 0: left alone",
            "OnFailure",
            SUCCEEDED,
            vec![],
        ),
        with_b_running(
            "OnFailure, exit 1: restarted",
            "OnFailure",
            FAILED,
            vec![restart(A, 1)],
        ),
        with_b_running("Never, exit 0: left alone", "Never", SUCCEEDED, vec![]),
        with_b_running("Never, exit 1: left alone", "Never", FAILED, vec![]),
        with_b_running(
            "created but never started: removed and started afresh (even under Never)",
            "Never",
            CREATED,
            vec![
                ContainerAction::Remove {
                    container: A,
                    id: "a-0".into(),
                },
                start(A, 1),
            ],
        ),
        with_b_running(
            "unknown state, Always: restarted",
            "Always",
            UNKNOWN,
            vec![restart(A, 1)],
        ),
        with_b_running("unknown state, Never: left alone", "Never", UNKNOWN, vec![]),
    ]
}

/// Running containers whose spec changed are replaced.
fn spec_change_cases() -> Vec<Case> {
    vec![
        Case::new(
            "spec hash changed: killed with the pod's grace and replaced, outside the back-off",
            two("Never"),
            run(
                keep(),
                0,
                vec![
                    kill(
                        B,
                        "b-0",
                        GRACE,
                        KillReason::SpecChanged,
                        "Container b definition changed, will be restarted",
                    ),
                    start(B, 1),
                ],
            ),
        )
        .with(&[("a", 0, RUNNING)])
        .raw(RuntimeContainer {
            hash: "0123456789abcdef".into(),
            ..instance(&container("b"), SB, 0, Running, 0)
        })
        .failed("b", 1.0),
        Case::new(
            "no hash on the instance (not ours): left alone",
            two("Always"),
            run(keep(), 0, vec![]),
        )
        .with(&[("a", 0, RUNNING)])
        .raw(RuntimeContainer {
            hash: String::new(),
            ..instance(&container("b"), SB, 0, Running, 0)
        }),
    ]
}

/// Running app containers whose liveness or startup probe failed.
fn probe_cases() -> Vec<Case> {
    let live_a = pod(
        "Always",
        vec![],
        vec![with_liveness_grace(container("a"), 1), container("b")],
    );
    let both_running = [("a", 0, RUNNING), ("b", 0, RUNNING)];
    vec![
        Case::new(
            "liveness failed, Always: killed and restarted",
            two("Always"),
            run(
                keep(),
                0,
                vec![
                    kill(
                        B,
                        "b-0",
                        GRACE,
                        KillReason::Liveness,
                        "Container b failed liveness probe, will be restarted",
                    ),
                    restart(B, 1),
                ],
            ),
        )
        .with(&both_running)
        .probe(ProbeKind::Liveness, "b-0", ProbeResult::Failure),
        Case::new(
            "liveness failed: the probe's own grace period",
            live_a,
            run(
                keep(),
                0,
                vec![
                    kill(
                        A,
                        "a-0",
                        1,
                        KillReason::Liveness,
                        "Container a failed liveness probe, will be restarted",
                    ),
                    restart(A, 1),
                ],
            ),
        )
        .with(&both_running)
        .probe(ProbeKind::Liveness, "a-0", ProbeResult::Failure),
        Case::new(
            "startup failed, OnFailure: killed and restarted",
            two("OnFailure"),
            run(
                keep(),
                0,
                vec![
                    kill(
                        B,
                        "b-0",
                        GRACE,
                        KillReason::Startup,
                        "Container b failed startup probe, will be restarted",
                    ),
                    restart(B, 1),
                ],
            ),
        )
        .with(&both_running)
        .probe(ProbeKind::Startup, "b-0", ProbeResult::Failure),
    ]
}

/// Probe failures under Never and the back-off, and results that kill nothing.
fn probe_policy_cases() -> Vec<Case> {
    let both_running = [("a", 0, RUNNING), ("b", 0, RUNNING)];
    vec![
        Case::new(
            "liveness failed, Never: killed, not restarted",
            two("Never"),
            run(
                keep(),
                0,
                vec![kill(
                    B,
                    "b-0",
                    GRACE,
                    KillReason::Liveness,
                    "Container b failed liveness probe",
                )],
            ),
        )
        .with(&both_running)
        .probe(ProbeKind::Liveness, "b-0", ProbeResult::Failure),
        Case::new(
            "liveness failed within the back-off: killed, then waits",
            two("Always"),
            run(
                keep(),
                0,
                vec![
                    kill(
                        B,
                        "b-0",
                        GRACE,
                        KillReason::Liveness,
                        "Container b failed liveness probe, will be restarted",
                    ),
                    back_off(B, "b", 7),
                ],
            ),
        )
        .with(&both_running)
        .probe(ProbeKind::Liveness, "b-0", ProbeResult::Failure)
        .failed("b", 3.0),
        Case::new(
            "liveness passing, startup unknown, readiness irrelevant: left alone",
            two("Always"),
            run(keep(), 0, vec![]),
        )
        .with(&both_running)
        .probe(ProbeKind::Liveness, "a-0", ProbeResult::Success)
        .probe(ProbeKind::Startup, "b-0", ProbeResult::Unknown)
        .probe(ProbeKind::Readiness, "b-0", ProbeResult::Failure),
    ]
}

/// The crash-loop back-off's windows.
fn backoff_cases() -> Vec<Case> {
    let a_exited = |name, failures: &[f64], want| {
        let mut case = Case::new(name, two("Always"), run(keep(), 0, want))
            .with(&[("a", 0, FAILED), ("b", 0, RUNNING)]);
        for &ago in failures {
            case = case.failed("a", ago);
        }
        case
    };
    vec![
        a_exited(
            "in the back-off: waits with the time left",
            &[4.0],
            vec![back_off(A, "a", 6)],
        ),
        a_exited(
            "back-off window over: restarted",
            &[11.0],
            vec![restart(A, 1)],
        ),
        a_exited(
            "second failure doubles the window",
            &[60.0, 5.0],
            vec![back_off(A, "a", 15)],
        ),
        a_exited(
            "under a second left reads as 1 s",
            &[9.5],
            vec![back_off(A, "a", 1)],
        ),
        a_exited(
            "a stale entry (over 10 min) does not hold it",
            &[601.0],
            vec![restart(A, 1)],
        ),
    ]
}

/// Regular init containers, one at a time.
fn init_cases() -> Vec<Case> {
    vec![
        Case::new(
            "no init container started: the first starts, the rest wait",
            inits("Always"),
            init_run(keep(), vec![start(I1, 0)], &[]),
        ),
        Case::new(
            "init container running: nothing starts, later ones wait",
            inits("Always"),
            init_run(keep(), vec![], &["i2"]),
        )
        .with(&[("i1", 0, RUNNING)]),
        Case::new(
            "first init container done: the next starts",
            inits("Always"),
            init_run(keep(), vec![start(I2, 0)], &[]),
        )
        .with(&[("i1", 0, SUCCEEDED)]),
        Case::new(
            "initialization done: the app containers start",
            inits("Always"),
            run(keep(), 0, vec![start(A, 0)]),
        )
        .with(&[("i1", 0, SUCCEEDED), ("i2", 0, SUCCEEDED)]),
        Case::new(
            "init container failed, Always: restarted",
            inits("Always"),
            init_run(keep(), vec![restart(I2, 1)], &[]),
        )
        .with(&[("i1", 0, SUCCEEDED), ("i2", 0, FAILED)]),
        Case::new(
            "init container failed, OnFailure: restarted",
            inits("OnFailure"),
            init_run(keep(), vec![restart(I2, 1)], &[]),
        )
        .with(&[("i1", 0, SUCCEEDED), ("i2", 0, FAILED)]),
        Case::new(
            "init container failed, Never: the pod is finished",
            inits("Never"),
            finished(&[SB]),
        )
        .with(&[("i1", 0, SUCCEEDED), ("i2", 0, FAILED)]),
        Case::new(
            "init container failed within the back-off: waits, the apps too",
            inits("Always"),
            init_run(keep(), vec![back_off(I1, "i1", 8)], &[]),
        )
        .with(&[("i1", 0, FAILED)])
        .failed("i1", 2.0),
    ]
}

/// Init containers when the sandbox is gone, and a half-made init container.
fn init_sandbox_cases() -> Vec<Case> {
    let create = SandboxAction::Create(SandboxReason::NotReady);
    vec![
        Case::new(
            "sandbox dead: new sandbox, the first init container again",
            inits("Always"),
            init_run(create.clone(), vec![start(I1, 1)], &[]),
        )
        .sandboxes(vec![sandbox(SB, 0, false)])
        .with(&[
            ("i1", 0, SUCCEEDED),
            ("i2", 0, SUCCEEDED),
            ("a", 0, RUNNING),
        ]),
        Case::new(
            "sandbox dead, Never, init container failed: finished",
            inits("Never"),
            finished(&[]),
        )
        .sandboxes(vec![sandbox(SB, 0, false)])
        .with(&[("i1", 0, FAILED)]),
        Case::new(
            "sandbox dead, OnFailure, init container failed: new sandbox, first init container",
            inits("OnFailure"),
            init_run(create, vec![start(I1, 1)], &[]),
        )
        .sandboxes(vec![sandbox(SB, 0, false)])
        .with(&[("i1", 0, FAILED)]),
        // A created-but-never-started init container has exit code 0, which reads as done:
        // the pass goes on to the next one (today's behaviour; Go restarts it).
        Case::new(
            "init container created, never started: passed over",
            inits("Always"),
            init_run(keep(), vec![start(I2, 0)], &[]),
        )
        .with(&[("i1", 0, CREATED)]),
    ]
}

/// The sidecar of [`with_sidecar`].
const SC: ContainerRef = ContainerRef::Init(0);

/// The sidecar killed for failing its `what` probe.
fn kill_sc(reason: KillReason, what: &str) -> ContainerAction {
    let message = format!("Init container sc failed {what} probe");
    kill(SC, "sc-0", GRACE, reason, &message)
}

/// Sidecars starting, and holding the next init container back until they have started.
fn sidecar_cases() -> Vec<Case> {
    vec![
        Case::new(
            "sidecar not started: it starts and the next init container with it",
            with_sidecar("Always", false),
            init_run(keep(), vec![start(SC, 0), start(I2, 0)], &[]),
        ),
        Case::new(
            "sidecar running without a startup probe: the next init container starts",
            with_sidecar("Always", false),
            init_run(keep(), vec![start(I2, 0)], &[]),
        )
        .with(&[("sc", 0, RUNNING)]),
        Case::new(
            "sidecar's startup probe not passed yet: the next init container waits",
            with_sidecar("Always", true),
            init_run(keep(), vec![], &["i2"]),
        )
        .with(&[("sc", 0, RUNNING)])
        .probe(ProbeKind::Startup, "sc-0", ProbeResult::Unknown),
        Case::new(
            "sidecar's startup probe passed: the next init container starts",
            with_sidecar("Always", true),
            init_run(keep(), vec![start(I2, 0)], &[]),
        )
        .with(&[("sc", 0, RUNNING)])
        .probe(ProbeKind::Startup, "sc-0", ProbeResult::Success),
    ]
}

/// Sidecars that exited or failed a probe: restarted whatever the pod's policy.
fn sidecar_restart_cases() -> Vec<Case> {
    vec![
        Case::new(
            "sidecar exited 0, pod Never: restarted all the same",
            with_sidecar("Never", false),
            init_run(keep(), vec![restart(SC, 1)], &[]),
        )
        .with(&[("sc", 0, SUCCEEDED), ("i2", 0, RUNNING)]),
        Case::new(
            "sidecar exited 1: restarted, initialization goes on",
            with_sidecar("Always", false),
            run(keep(), 0, vec![restart(SC, 1), start(A, 0)]),
        )
        .with(&[("sc", 0, FAILED), ("i2", 0, SUCCEEDED)]),
        Case::new(
            "sidecar's liveness failed: killed (no 'will be restarted') and restarted",
            with_sidecar("Always", false),
            run(
                keep(),
                0,
                vec![kill_sc(KillReason::Liveness, "liveness"), restart(SC, 1)],
            ),
        )
        .with(&[("sc", 0, RUNNING), ("i2", 0, SUCCEEDED), ("a", 0, RUNNING)])
        .probe(ProbeKind::Liveness, "sc-0", ProbeResult::Failure),
        Case::new(
            "sidecar's startup probe failed: killed and restarted",
            with_sidecar("Always", true),
            init_run(
                keep(),
                vec![
                    kill_sc(KillReason::Startup, "startup"),
                    restart(SC, 1),
                    start(I2, 0),
                ],
                &[],
            ),
        )
        .with(&[("sc", 0, RUNNING)])
        .probe(ProbeKind::Startup, "sc-0", ProbeResult::Failure),
        Case::new(
            "sidecar exited within the back-off: waits, and holds the rest",
            with_sidecar("Always", false),
            init_run(keep(), vec![back_off(SC, "sc", 10)], &[]),
        )
        .with(&[("sc", 0, FAILED), ("i2", 0, SUCCEEDED), ("a", 0, RUNNING)])
        .failed("sc", 0.0),
        Case::new(
            "initialized with the sidecar running: app containers run alongside",
            with_sidecar("Always", true),
            run(keep(), 0, vec![]),
        )
        .with(&[("sc", 0, RUNNING), ("i2", 0, SUCCEEDED), ("a", 0, RUNNING)])
        .probe(ProbeKind::Startup, "sc-0", ProbeResult::Success),
    ]
}

/// Every table, with the number of rows the issue asks for at least.
fn all_cases() -> Vec<Case> {
    let mut cases = sandbox_cases();
    cases.extend(finished_cases());
    cases.extend(spec_change_cases());
    cases.extend(probe_policy_cases());
    cases.extend(init_sandbox_cases());
    cases.extend(restart_policy_cases());
    cases.extend(probe_cases());
    cases.extend(backoff_cases());
    cases.extend(init_cases());
    cases.extend(sidecar_cases());
    cases.extend(sidecar_restart_cases());
    cases.extend(ephemeral::cases());
    cases
}

#[test]
fn compute_pod_actions_table() {
    let cases = all_cases();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    // Shown with `--nocapture`: the issue asks for the count.
    println!("compute_pod_actions: {} table cases", cases.len());
    check(cases);
}

#[test]
fn case_names_are_unique() {
    let cases = all_cases();
    let mut names: Vec<_> = cases.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases.len());
}

/// The back-off judged on the tokio clock: waiting while the window is open, a restart once
/// it has closed, with no sleeping.
#[tokio::test(start_paused = true)]
async fn back_off_closes_as_time_passes() {
    let case = Case::new("", two("Always"), run(keep(), 0, vec![]))
        .with(&[("a", 0, FAILED), ("b", 0, RUNNING)]);
    let backoff = Backoff::crash_loop();
    backoff.next(
        &backoff_key(UID, "a"),
        tokio::time::Instant::now().into_std(),
    );
    let runtime = RuntimePod {
        sandboxes: case.sandboxes.clone(),
        containers: case.containers.clone(),
        ..Default::default()
    };
    let probes = ProbeVerdicts::default();
    let input = PodInputs {
        uid: UID,
        spec: &case.spec,
        grace: GRACE,
        runtime: &runtime,
        backoff: &backoff,
        probes: &probes,
        in_place_resize: None,
    };
    let at = |_: ()| compute_pod_actions(&input, tokio::time::Instant::now().into_std());
    tokio::time::advance(Duration::from_secs(3)).await;
    assert_eq!(at(()), run(keep(), 0, vec![back_off(A, "a", 7)]));
    tokio::time::advance(Duration::from_secs(7)).await;
    assert_eq!(at(()), run(keep(), 0, vec![restart(A, 1)]));
}

#[test]
fn steps_name_containers_of_the_spec() {
    let spec = with_sidecar("Always", false);
    assert_eq!(
        ContainerRef::Init(1).spec(&spec).map(|c| c.name.as_str()),
        Some("i2")
    );
    assert_eq!(
        ContainerRef::App(0).spec(&spec).map(|c| c.name.as_str()),
        Some("a")
    );
    assert!(ContainerRef::App(1).spec(&spec).is_none());
    assert!(ContainerRef::Init(0).spec(&two("Always")).is_none());
}

#[test]
fn with_in_place_resize_a_change_of_resources_alone_replaces_nothing() {
    let spec = two("Always");
    let mut before = container("b");
    before.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
        limits: Some([("cpu".to_string(), Quantity("1".into()))].into()),
        ..Default::default()
    });
    let mut b = instance(&before, SB, 0, Running, 0);
    b.annotations.insert(
        crate::types::labels::CONTAINER_HASH_WITHOUT_RESOURCES.into(),
        podspec::hash::container_hash_without_resources(&before),
    );
    let runtime = RuntimePod {
        sandboxes: vec![sandbox(SB, 0, true)],
        containers: vec![instance(&container("a"), SB, 0, Running, 0), b],
        ..Default::default()
    };
    let backoff = Backoff::crash_loop();
    let probes = ProbeVerdicts::default();
    let none = BTreeSet::new();
    let restart_b = BTreeSet::from(["b-0".to_string()]);
    let actions = |resize: Option<&BTreeSet<String>>| {
        let input = PodInputs {
            uid: UID,
            spec: &spec,
            grace: GRACE,
            runtime: &runtime,
            backoff: &backoff,
            probes: &probes,
            in_place_resize: resize,
        };
        compute_pod_actions(&input, Instant::now())
    };
    assert_eq!(actions(Some(&none)), run(keep(), 0, vec![]));
    // Without the gate the whole spec's hash decides, as before.
    let replaced = kill(
        B,
        "b-0",
        GRACE,
        KillReason::SpecChanged,
        "Container b definition changed, will be restarted",
    );
    assert_eq!(actions(None), run(keep(), 0, vec![replaced, start(B, 1)]));
    // RestartContainer: killed and started again.
    let resized = kill(
        B,
        "b-0",
        GRACE,
        KillReason::ResizeRestart,
        "Container b resize requires restart",
    );
    assert_eq!(
        actions(Some(&restart_b)),
        run(keep(), 0, vec![resized, start(B, 1)])
    );
}

#[test]
fn a_sidecar_restarts_for_its_resize_policy() {
    let spec = with_sidecar("Always", false);
    let containers = vec![
        instance(&find(&spec, "sc"), SB, 0, Running, 0),
        instance(&find(&spec, "i2"), SB, 0, Exited, 0),
        instance(&find(&spec, "a"), SB, 0, Running, 0),
    ];
    let runtime = RuntimePod {
        sandboxes: vec![sandbox(SB, 0, true)],
        containers,
        ..Default::default()
    };
    let backoff = Backoff::crash_loop();
    let probes = ProbeVerdicts::default();
    let restarts = BTreeSet::from(["sc-0".to_string()]);
    let input = PodInputs {
        uid: UID,
        spec: &spec,
        grace: GRACE,
        runtime: &runtime,
        backoff: &backoff,
        probes: &probes,
        in_place_resize: Some(&restarts),
    };
    let message = "Container sc resize requires restart";
    assert_eq!(
        compute_pod_actions(&input, Instant::now()),
        run(
            keep(),
            0,
            vec![
                kill(SC, "sc-0", GRACE, KillReason::ResizeRestart, message),
                start(SC, 1),
            ]
        )
    );
}
