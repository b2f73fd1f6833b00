//! The CPU manager as the kubelet drives it: start-up, admission, creation, reconcile,
//! restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::static_policy::tests::fx_pod;
use super::topology::testutil::*;
use super::*;

fn reserve(milli_cpu: i64) -> CpuReservation {
    CpuReservation {
        milli_cpu,
        cpus: CpuSet::new(),
    }
}

fn file(m: &CpuManager) -> String {
    std::fs::read_to_string(m.state_file()).unwrap()
}

fn app<'a>(p: &'a Pod, name: &str) -> &'a Container {
    let spec = p.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap()
}

fn running(pod: &str, name: &str, id: &str) -> RunningContainer {
    RunningContainer {
        pod_uid: pod.into(),
        container_name: name.into(),
        container_id: id.into(),
    }
}

#[test]
fn none_policy_pins_nothing_and_writes_gos_none_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = CpuManager::new(CpuManagerPolicy::None, t2(), &reserve(0), dir.path()).unwrap();
    assert_eq!(
        file(&m),
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#
    );
    let p = fx_pod("p", &[], &["c=1"]);
    assert_eq!(m.allocate(&p, app(&p, "c")).unwrap(), None);
    assert_eq!(m.container_cpuset("p", "c"), None);
    assert!(m.shared_pool().is_empty());
    assert!(m.allocatable_cpus().is_empty());
    assert!(m.reconcile_targets(&[running("p", "c", "id")]).is_empty());
}

#[test]
fn static_needs_a_reservation() {
    let dir = tempfile::tempdir().unwrap();
    let err = CpuManager::new(CpuManagerPolicy::Static, t2(), &reserve(0), dir.path()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "[cpumanager] unable to determine reserved CPU resources for static policy"
    );
    let err = CpuManager::new(CpuManagerPolicy::Static, t2(), &reserve(2500), dir.path())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "new static policy error: [cpumanager] unable to reserve the required amount of CPUs (size of  did not equal 3)"
    );
}

#[test]
fn admission_creation_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut m =
        CpuManager::new(CpuManagerPolicy::Static, t4ht(), &reserve(500), dir.path()).unwrap();
    assert_eq!(
        file(&m),
        r#"{"policyName":"static","defaultCpuSet":"0-3","checksum":611748604}"#
    );
    assert_eq!(m.allocatable_cpus().to_string(), "1-3");
    let a = fx_pod("pod-a", &["init=2"], &["app1=1", "app2=1"]);
    let shared = fx_pod("pod-s", &[], &["c=1,2"]);
    assert_eq!(
        m.allocate(&a, app(&a, "init"))
            .unwrap()
            .unwrap()
            .to_string(),
        "1,3"
    );
    assert_eq!(m.allocate(&shared, app(&shared, "c")).unwrap(), None);
    assert_eq!(
        m.container_cpuset("pod-a", "init").unwrap().to_string(),
        "1,3"
    );
    assert_eq!(m.container_cpuset("pod-s", "c").unwrap().to_string(), "0,2");
    assert_eq!(
        file(&m),
        r#"{"policyName":"static","defaultCpuSet":"0,2","entries":{"pod-a":{"init":"1,3"}},"checksum":2148913289}"#
    );

    // A restart restores the same state.
    drop(m);
    let mut m =
        CpuManager::new(CpuManagerPolicy::Static, t4ht(), &reserve(500), dir.path()).unwrap();
    assert_eq!(m.shared_pool().to_string(), "0,2");
    assert_eq!(
        m.exclusive_cpus("pod-a", "init").unwrap().to_string(),
        "1,3"
    );
    // Not enough CPUs: Go's error.
    let big = fx_pod("pod-big", &[], &["c=2"]);
    let err = m.allocate(&big, app(&big, "c")).unwrap_err().to_string();
    assert_eq!(err, "not enough cpus available to satisfy request");

    // Another policy, or a bigger reservation, refuses the file as Go does.
    let err = CpuManager::new(CpuManagerPolicy::None, t4ht(), &reserve(0), dir.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "could not restore state from checkpoint: configured policy \"none\" differs from state checkpoint policy \"static\", please drain this node"
        ),
        "{err}"
    );
    let err = CpuManager::new(CpuManagerPolicy::Static, t4ht(), &reserve(3000), dir.path())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        r#"not all reserved cpus: "0-2" are present in defaultCpuSet: "0,2""#
    );
}

#[test]
fn a_grown_reservation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut m =
        CpuManager::new(CpuManagerPolicy::Static, t2(), &reserve(1000), dir.path()).unwrap();
    let p = fx_pod("p", &[], &["c=1"]);
    assert_eq!(
        m.allocate(&p, app(&p, "c")).unwrap().unwrap().to_string(),
        "1"
    );
    drop(m);
    let err = CpuManager::new(CpuManagerPolicy::Static, t2(), &reserve(2000), dir.path())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        r#"not all reserved cpus: "0-1" are present in defaultCpuSet: "0""#
    );
}

#[test]
fn reconcile_pushes_changes_once_and_retries_failures() {
    let dir = tempfile::tempdir().unwrap();
    let mut m =
        CpuManager::new(CpuManagerPolicy::Static, t4ht(), &reserve(1000), dir.path()).unwrap();
    let g = fx_pod("g", &[], &["c=1"]);
    let s = fx_pod("s", &[], &["c=500m"]);
    m.allocate(&s, app(&s, "c")).unwrap();
    m.add_container("s", "c", "id-s");
    // A shared container is not recorded at start: the first round sets it (as Go).
    let all = [running("s", "c", "id-s")];
    assert_eq!(
        m.reconcile_targets(&all),
        vec![("id-s".to_string(), CpuSet::parse("0-3").unwrap())]
    );
    assert!(m.reconcile_targets(&all).is_empty());

    // An exclusive container started with its CPUs is not touched; the shared one shrinks.
    m.allocate(&g, app(&g, "c")).unwrap();
    m.add_container("g", "c", "id-g");
    let all = [running("s", "c", "id-s"), running("g", "c", "id-g")];
    assert_eq!(
        m.reconcile_targets(&all),
        vec![("id-s".to_string(), CpuSet::parse("0-1,3").unwrap())]
    );
    m.update_failed("id-s");
    assert_eq!(
        m.reconcile_targets(&all),
        vec![("id-s".to_string(), CpuSet::parse("0-1,3").unwrap())]
    );

    // The exclusive container goes: the shared one grows back.
    m.remove("g", "c");
    assert_eq!(m.shared_pool().to_string(), "0-3");
    assert_eq!(
        m.reconcile_targets(&[running("s", "c", "id-s")]),
        vec![("id-s".to_string(), CpuSet::parse("0-3").unwrap())]
    );
}

#[test]
fn stale_state_of_gone_pods_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let mut m =
        CpuManager::new(CpuManagerPolicy::Static, t4ht(), &reserve(1000), dir.path()).unwrap();
    let a = fx_pod("a", &[], &["c=1"]);
    let b = fx_pod("b", &[], &["c=1", "d=1"]);
    m.allocate(&a, app(&a, "c")).unwrap();
    m.allocate(&b, app(&b, "c")).unwrap();
    m.allocate(&b, app(&b, "d")).unwrap();
    assert_eq!(m.shared_pool().to_string(), "0");
    m.remove_stale_state([&b]);
    assert_eq!(m.exclusive_cpus("a", "c"), None);
    assert_eq!(m.shared_pool().to_string(), "0,2");
    let b_one = fx_pod("b", &[], &["c=1"]);
    m.remove_stale_state([&b_one]);
    assert_eq!(m.exclusive_cpus("b", "d"), None);
    assert!(m.exclusive_cpus("b", "c").is_some());
    assert!(file(&m).contains(r#""entries":{"b":{"c":"#));
}

#[test]
fn a_v1_file_is_migrated_with_the_initial_containers() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cpu_manager_state"),
        r#"{"policyName":"static","defaultCpuSet":"0,3","entries":{"cid-1":"1","cid-2":"2"},"checksum":1356566350}"#,
    )
    .unwrap();
    let containers: ContainerMap = [
        ("cid-1".into(), ("pod-x".into(), "c1".into())),
        ("cid-2".into(), ("pod-x".into(), "c2".into())),
    ]
    .into();
    let topo = t4ht();
    let m = CpuManager::with_initial_containers(
        CpuManagerPolicy::Static,
        topo,
        &reserve(1000),
        dir.path(),
        &containers,
    )
    .unwrap();
    assert_eq!(m.exclusive_cpus("pod-x", "c2").unwrap().to_string(), "2");
    assert_eq!(m.shared_pool().to_string(), "0,3");
}
