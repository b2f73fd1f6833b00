//! `ephemeralContainerStatuses`, as Go's `generateAPIPodStatus` converts them: app-container
//! rules (sorted by name, waiting with the sync's reason until started), never restarted (an
//! ended one stays terminated), never ready nor `started`, and no say in the pod's phase or
//! readiness.

use k8s_openapi::api::core::v1::EphemeralContainer;

use super::*;

/// `p` with ephemeral containers `names` added.
fn debugged(mut p: Pod, names: &[&str]) -> Pod {
    let spec = p.spec.as_mut().unwrap();
    spec.ephemeral_containers = Some(
        names
            .iter()
            .map(|n| EphemeralContainer {
                name: n.to_string(),
                image: Some(format!("127.0.0.1:5000/ferrolet/{n}:1")),
                target_container_name: Some("app".into()),
                ..Default::default()
            })
            .collect(),
    );
    p
}

fn ephemeral<'a>(s: &'a PodStatus, name: &str) -> &'a ContainerStatus {
    s.ephemeral_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no ephemeral status for {name}: {s:#?}"))
}

#[test]
fn ephemeral_containers_report_as_go_converts_them() {
    let p = debugged(pod(&["app"], &[], "Always"), &["new", "dbg", "done"]);
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![
            rc("app", "c1", CriState::ContainerRunning, 10, 0, 0),
            rc("dbg", "e1", CriState::ContainerRunning, 20, 0, 0),
            rc("done", "e2", CriState::ContainerExited, 20, 3, 0),
        ],
    );
    // The sync loop's reasons: `new` could not start; `done` is never started again, so
    // a reason for it changes nothing.
    let ctx = Ctx::new()
        .wait("new", "ErrImagePull", "no such image")
        .wait("done", "CreateContainerError", "stale");
    let s = ctx.status(&p, &rt, 30);

    let names: Vec<_> = s
        .ephemeral_container_statuses
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["dbg", "done", "new"]);
    let dbg = ephemeral(&s, "dbg");
    assert!(dbg.state.as_ref().unwrap().running.is_some(), "{dbg:?}");
    assert_eq!(dbg.container_id.as_deref(), Some("containerd://e1"));
    assert_eq!(dbg.image, "127.0.0.1:5000/ferrolet/dbg:1");
    assert!(dbg.image_id.ends_with(&"a".repeat(64)), "{dbg:?}");
    assert_eq!(dbg.restart_count, 0);
    assert!(!dbg.ready);
    assert_eq!(dbg.started, None);

    let done = ephemeral(&s, "done");
    let ended = done.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (ended.exit_code, ended.reason.as_deref()),
        (3, Some("Error"))
    );
    assert_eq!(ended.container_id.as_deref(), Some("containerd://e2"));
    assert_eq!(done.restart_count, 0);

    assert_eq!(waiting_reason(ephemeral(&s, "new")), Some("ErrImagePull"));

    // The pod is what its own containers make it.
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Ready").status, "True");
    assert_eq!(cond(&s, "ContainersReady").status, "True");
    assert_eq!(s.container_statuses.as_ref().unwrap().len(), 1);

    // Garbage-collected later: the previous status keeps how it ended.
    let mut later = Ctx::new();
    later.previous = Some(s.clone());
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![
            rc("app", "c1", CriState::ContainerRunning, 10, 0, 0),
            rc("dbg", "e1", CriState::ContainerRunning, 20, 0, 0),
        ],
    );
    let s2 = later.status(&p, &rt, 40);
    assert_eq!(ephemeral(&s2, "done"), done);
}

#[test]
fn a_pod_without_ephemeral_containers_reports_none() {
    let p = pod(&["app"], &[], "Always");
    let rt = runtime(
        vec![sandbox(true, "10.88.0.5")],
        vec![rc("app", "c1", CriState::ContainerRunning, 10, 0, 0)],
    );
    let s = Ctx::new().status(&p, &rt, 20);
    assert_eq!(s.ephemeral_container_statuses, None);
}
