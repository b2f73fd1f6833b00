//! Ephemeral containers in `compute_pod_actions`, after Go's `computePodActions` (its
//! `EphemeralContainersToStart`): started once in the kept sandbox, ahead of the init
//! containers, never restarted whatever the restart policy, never in a new sandbox.

use k8s_openapi::api::core::v1::EphemeralContainer;

use super::*;

/// `spec` with ephemeral container `name` (targeting `target` when given) added.
fn debugged(mut spec: PodSpec, name: &str, target: Option<&str>) -> PodSpec {
    spec.ephemeral_containers
        .get_or_insert_with(Vec::new)
        .push(EphemeralContainer {
            name: name.into(),
            image: Some("busybox".into()),
            target_container_name: target.map(str::to_string),
            ..Default::default()
        });
    spec
}

/// Ephemeral container `index` to start, joining `target` (name, its instance's id).
fn start_ephemeral(index: usize, target: Option<(&str, Option<&str>)>) -> ContainerAction {
    ContainerAction::StartEphemeral {
        index,
        target: target.map(|(name, id)| PidTarget {
            name: name.into(),
            id: id.map(str::to_string),
        }),
    }
}

/// An instance of ephemeral container `name` in `sandbox_id`.
fn ephemeral_instance(name: &str, sandbox_id: &str, state: ContainerStateArg) -> RuntimeContainer {
    // Ephemeral containers are never compared by hash: a stale one changes nothing.
    let mut rc = instance(&container(name), sandbox_id, 0, state.0, state.1);
    rc.hash = "stale".into();
    rc
}

pub(super) fn cases() -> Vec<Case> {
    let both_running = [("a", 0, RUNNING), ("b", 0, RUNNING)];
    vec![
        Case::new(
            "ephemeral: a new one starts in the running pod, nothing else changes",
            debugged(two("Always"), "dbg", None),
            run(keep(), 0, vec![start_ephemeral(0, None)]),
        )
        .with(&both_running),
        Case::new(
            "ephemeral: the target's running instance is the PID namespace to join",
            debugged(debugged(two("Always"), "d1", None), "d2", Some("b")),
            run(
                keep(),
                0,
                vec![start_ephemeral(1, Some(("b", Some("b-0"))))],
            ),
        )
        .with(&both_running)
        .raw(ephemeral_instance("d1", SB, RUNNING)),
        Case::new(
            "ephemeral: a target without an instance is named without an id",
            debugged(two("Always"), "dbg", Some("b")),
            run(
                keep(),
                0,
                vec![start_ephemeral(0, Some(("b", None))), start(B, 0)],
            ),
        )
        .with(&[("a", 0, RUNNING)]),
        Case::new(
            "ephemeral: an exited one is never restarted, even with Always",
            debugged(two("Always"), "dbg", None),
            run(keep(), 0, vec![]),
        )
        .with(&both_running)
        .raw(ephemeral_instance("dbg", SB, FAILED)),
        Case::new(
            "ephemeral: a running one is kept, neither hash-checked nor probed",
            debugged(two("Always"), "dbg", None),
            run(keep(), 0, vec![]),
        )
        .with(&both_running)
        .raw(ephemeral_instance("dbg", SB, RUNNING))
        .probe(ProbeKind::Liveness, "dbg-0", ProbeResult::Failure),
        Case::new(
            "ephemeral: one created but never started is left as it is",
            debugged(two("Always"), "dbg", None),
            run(keep(), 0, vec![]),
        )
        .with(&both_running)
        .raw(ephemeral_instance("dbg", SB, CREATED)),
        Case::new(
            "ephemeral: started ahead of the init containers while initializing",
            debugged(inits("Always"), "dbg", None),
            init_run(keep(), vec![start_ephemeral(0, None)], &["i2"]),
        )
        .with(&[("i1", 0, RUNNING)]),
        Case::new(
            "ephemeral: not in a new sandbox (the next sync starts it)",
            debugged(two("Always"), "dbg", None),
            run(
                SandboxAction::Create(SandboxReason::NotReady),
                1,
                vec![start(A, 0), start(B, 0)],
            ),
        )
        .sandboxes(vec![sandbox(SB, 0, false)]),
        Case::new(
            "ephemeral: one that ran in an old sandbox does not run again",
            debugged(two("Always"), "dbg", None),
            run(
                SandboxAction::Keep {
                    id: "sb2".into(),
                    ips: vec![IP.into()],
                },
                1,
                vec![],
            ),
        )
        .sandboxes(vec![sandbox("sb2", 1, true), sandbox(SB, 0, false)])
        .raw(instance(&container("a"), "sb2", 1, Running, 0))
        .raw(instance(&container("b"), "sb2", 1, Running, 0))
        .raw(ephemeral_instance("dbg", SB, FAILED)),
        Case::new(
            "ephemeral: a running one does not keep a finished pod",
            debugged(two("Never"), "dbg", None),
            finished(&[SB]),
        )
        .with(&[("a", 0, SUCCEEDED), ("b", 0, FAILED)])
        .raw(ephemeral_instance("dbg", SB, RUNNING)),
    ]
}
