//! The static policy against what Go's (Kubernetes 1.28.7) did in the same situations: the
//! expected values were printed by Go's `NewStaticPolicy`, `Start` and `Allocate` /
//! `RemoveContainer` over a checkpoint state, run from a test file added to the vendored
//! cpumanager package with `go test -overlay` (not kept in this repository).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::super::topology::testutil::*;
use super::*;
use crate::podspec::testutil::pod;

/// A pod whose containers are `name=cpu` (request = limit, memory 1Gi: Guaranteed when all
/// are) or `name=request,limit`.
pub(crate) fn fx_pod(uid: &str, init: &[&str], app: &[&str]) -> Pod {
    let container = |spec: &&str| {
        let (name, cpu) = spec.split_once('=').unwrap();
        let (req, lim) = cpu.split_once(',').unwrap_or((cpu, cpu));
        format!(
            "  - {{name: {name}, image: x, resources: {{requests: {{cpu: '{req}', memory: 1Gi}}, limits: {{cpu: '{lim}', memory: 1Gi}}}}}}\n"
        )
    };
    let mut yaml = format!("metadata: {{name: {uid}, uid: {uid}}}\nspec:\n");
    if !init.is_empty() {
        yaml.push_str("  initContainers:\n");
        yaml.extend(init.iter().map(container));
    }
    yaml.push_str("  containers:\n");
    yaml.extend(app.iter().map(container));
    pod(&yaml)
}

fn container<'a>(p: &'a Pod, name: &str) -> &'a Container {
    let spec = p.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap()
}

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

struct Run {
    policy: StaticPolicy,
    state: CpuState,
}

impl Run {
    fn new(topo: CpuTopology, reserved: usize) -> Self {
        let policy = StaticPolicy::new(topo, reserved, &CpuSet::new()).unwrap();
        let mut state = CpuState::default();
        policy.start(&mut state).unwrap();
        Self { policy, state }
    }

    /// Allocates and answers as the Go harness printed: "ok <exclusive>" or "ERR:<msg>", and
    /// the shared pool after.
    fn alloc(&mut self, p: &Pod, name: &str) -> (String, String) {
        let r = match self.policy.allocate(&mut self.state, p, container(p, name)) {
            Ok(Some(c)) => format!("ok {c}"),
            Ok(None) => "ok shared".into(),
            Err(e) => format!("ERR:{e}"),
        };
        (r, self.state.default_cpu_set.to_string())
    }

    fn remove(&mut self, p: &Pod, name: &str) -> String {
        let uid = p.metadata.uid.as_deref().unwrap();
        self.policy.remove_container(&mut self.state, uid, name);
        self.state.default_cpu_set.to_string()
    }

    fn file(&self) -> String {
        self.state.to_checkpoint("static").marshal()
    }
}

fn ok(cpus: &str, default: &str) -> (String, String) {
    (format!("ok {cpus}"), default.into())
}

const NOT_ENOUGH: &str = "ERR:not enough cpus available to satisfy request";

#[test]
fn init_containers_cpus_are_reused_as_go_does() {
    // Go: "t4ht reserved1 init reuse".
    let mut r = Run::new(t4ht(), 1);
    assert_eq!(
        r.file(),
        r#"{"policyName":"static","defaultCpuSet":"0-3","checksum":611748604}"#
    );
    let a = fx_pod("pod-a", &["init=2"], &["app1=1", "app2=1"]);
    assert_eq!(r.alloc(&a, "init"), ok("1,3", "0,2"));
    assert_eq!(
        r.file(),
        r#"{"policyName":"static","defaultCpuSet":"0,2","entries":{"pod-a":{"init":"1,3"}},"checksum":2148913289}"#
    );
    assert_eq!(r.alloc(&a, "app1"), ok("2", "0"));
    assert_eq!(r.alloc(&a, "app2"), ok("1", "0"));
    assert_eq!(
        r.file(),
        r#"{"policyName":"static","defaultCpuSet":"0","entries":{"pod-a":{"app1":"2","app2":"1","init":"1,3"}},"checksum":492983619}"#
    );
    let b = fx_pod("pod-b", &[], &["shared=500m", "whole=1"]);
    assert_eq!(r.alloc(&b, "shared"), ("ok shared".into(), "0".into()));
    assert_eq!(r.alloc(&b, "whole"), (NOT_ENOUGH.into(), "0".into()));
    let burst = fx_pod("pod-burst", &[], &["c=1,2"]);
    assert_eq!(r.alloc(&burst, "c"), ("ok shared".into(), "0".into()));
    // CPU 1 stays with app2 when init goes.
    assert_eq!(r.remove(&a, "init"), "0,3");
    assert_eq!(r.remove(&a, "app1"), "0,2-3");
    assert_eq!(
        r.file(),
        r#"{"policyName":"static","defaultCpuSet":"0,2-3","entries":{"pod-a":{"app2":"1"}},"checksum":927395101}"#
    );
    let big = fx_pod("pod-big", &[], &["c=3"]);
    assert_eq!(r.alloc(&big, "c"), (NOT_ENOUGH.into(), "0,2-3".into()));
    assert_eq!(r.remove(&a, "app2"), "0-3");
    assert_eq!(
        r.file(),
        r#"{"policyName":"static","defaultCpuSet":"0-3","checksum":611748604}"#
    );
    assert_eq!(r.alloc(&big, "c"), ok("1-3", "0"));
    // Again: already assigned, nothing changes.
    assert_eq!(r.alloc(&big, "c"), ok("1-3", "0"));
    assert_eq!(
        r.file(),
        r#"{"policyName":"static","defaultCpuSet":"0","entries":{"pod-big":{"c":"1-3"}},"checksum":1052626106}"#
    );
}

#[test]
fn two_sockets_two_init_containers_as_go() {
    // Go: "t8s2 reserved2 two inits".
    let mut r = Run::new(t8s2(), 2);
    assert_eq!(r.policy.reserved().to_string(), "0,4");
    let c = fx_pod("pod-c", &["i1=1", "i2=2"], &["a=1", "b=2"]);
    assert_eq!(r.alloc(&c, "i1"), ok("1", "0,2-7"));
    assert_eq!(r.alloc(&c, "i2"), ok("1,5", "0,2-4,6-7"));
    assert_eq!(r.alloc(&c, "a"), ok("1", "0,2-4,6-7"));
    assert_eq!(r.alloc(&c, "b"), ok("2,6", "0,3-4,7"));
    let d = fx_pod("pod-d", &[], &["x=4"]);
    assert_eq!(r.alloc(&d, "x"), (NOT_ENOUGH.into(), "0,3-4,7".into()));
    let e = fx_pod("pod-e", &[], &["y=1"]);
    assert_eq!(r.alloc(&e, "y"), ok("3", "0,4,7"));
    assert_eq!(
        r.file(),
        r#"{"policyName":"static","defaultCpuSet":"0,4,7","entries":{"pod-c":{"a":"1","b":"2,6","i1":"1","i2":"1,5"},"pod-e":{"y":"3"}},"checksum":2844640351}"#
    );
    assert_eq!(r.remove(&c, "b"), "0,2,4,6-7");
    // a's CPU is still held by the init containers' entries.
    assert_eq!(r.remove(&c, "a"), "0,2,4,6-7");
    assert_eq!(
        r.file(),
        r#"{"policyName":"static","defaultCpuSet":"0,2,4,6-7","entries":{"pod-c":{"i1":"1","i2":"1,5"},"pod-e":{"y":"3"}},"checksum":695292168}"#
    );
}

#[test]
fn two_cpus_as_go() {
    // Go: "t2 reserved1" (this machine's shape).
    let mut r = Run::new(t2(), 1);
    let p1 = fx_pod("p1", &[], &["c=1"]);
    let p2 = fx_pod("p2", &[], &["c=1"]);
    assert_eq!(r.alloc(&p1, "c"), ok("1", "0"));
    assert_eq!(
        r.file(),
        r#"{"policyName":"static","defaultCpuSet":"0","entries":{"p1":{"c":"1"}},"checksum":3259632767}"#
    );
    assert_eq!(r.alloc(&p2, "c"), (NOT_ENOUGH.into(), "0".into()));
    assert_eq!(r.remove(&p1, "c"), "0-1");
    assert_eq!(r.alloc(&p2, "c"), ok("1", "0"));
    assert_eq!(
        r.file(),
        r#"{"policyName":"static","defaultCpuSet":"0","entries":{"p2":{"c":"1"}},"checksum":2997512856}"#
    );
}

#[test]
fn reserved_cpus_as_go() {
    // Go's NewStaticPolicy(topology, n, empty set): n → reserved.
    let table: &[(&str, CpuTopology, &[&str])] = &[
        ("t2", t2(), &["", "0", "0-1"]),
        ("t4ht", t4ht(), &["", "0", "0,2", "0-2", "0-3"]),
        (
            "t8s2",
            t8s2(),
            &[
                "", "0", "0,4", "0-1,4", "0-1,4-5", "0-2,4-5", "0-2,4-6", "0-6", "0-7",
            ],
        ),
        (
            "t8s2noht",
            t8s2noht(),
            &["", "0", "0-1", "0-2", "0-3", "0-4", "0-5", "0-6", "0-7"],
        ),
        (
            "t8ht",
            t8ht(),
            &[
                "", "0", "0,4", "0-1,4", "0-1,4-5", "0-2,4-5", "0-2,4-6", "0-6", "0-7",
            ],
        ),
    ];
    for (name, topo, want) in table {
        for (n, w) in want.iter().enumerate() {
            let p = StaticPolicy::new(topo.clone(), n, &CpuSet::new()).unwrap();
            assert_eq!(p.reserved().to_string(), *w, "{name} {n}");
        }
        let n = want.len();
        let err = StaticPolicy::new(topo.clone(), n, &CpuSet::new()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "[cpumanager] unable to reserve the required amount of CPUs (size of  did not equal {n})"
            )
        );
    }
    let p = StaticPolicy::new(t4ht(), 2, &set("1,3")).unwrap();
    assert_eq!(p.reserved().to_string(), "1,3");
    assert_eq!(p.allocatable_cpus().to_string(), "0,2");
    let err = StaticPolicy::new(t4ht(), 2, &set("1")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "[cpumanager] unable to reserve the required amount of CPUs (size of 1 did not equal 2)"
    );
}

#[test]
fn restored_state_is_validated_as_go() {
    // Go's Start on t4ht with 1 reserved (CPU 0), messages as it printed them.
    let p = StaticPolicy::new(t4ht(), 1, &CpuSet::new()).unwrap();
    let check = |default: &str, entries: &[(&str, &str, &str)]| {
        let mut s = CpuState {
            default_cpu_set: set(default),
            ..CpuState::default()
        };
        for (pod, c, cpus) in entries {
            s.set_cpuset(pod, c, set(cpus));
        }
        let r = p.start(&mut s).map_err(|e| e.to_string());
        (r, s.default_cpu_set.to_string())
    };
    let err = |m: &str| Err(m.to_string());
    assert_eq!(
        check("", &[("p", "c", "1")]),
        (err("default cpuset cannot be empty"), "".into())
    );
    assert_eq!(
        check("1-3", &[]),
        (
            err(r#"not all reserved cpus: "0" are present in defaultCpuSet: "1-3""#),
            "1-3".into()
        )
    );
    assert_eq!(
        check("0-2", &[("p", "c", "2")]),
        (
            err(r#"pod: p, container: c cpuset: "2" overlaps with default cpuset "0-2""#),
            "0-2".into()
        )
    );
    assert_eq!(check("0-2", &[("p", "c", "3")]), (Ok(()), "0-2".into()));
    assert_eq!(
        check("0-1", &[("p", "c", "2")]),
        (
            err(r#"current set of available CPUs "0-3" doesn't match with CPUs in state "0-2""#),
            "0-1".into()
        )
    );
    assert_eq!(
        check("0-1", &[("p", "c", "2-4")]),
        (
            err(r#"current set of available CPUs "0-3" doesn't match with CPUs in state "0-4""#),
            "0-1".into()
        )
    );
    assert_eq!(check("0-3", &[]), (Ok(()), "0-3".into()));
    // First start: everything shared.
    assert_eq!(check("", &[]), (Ok(()), "0-3".into()));
}

#[test]
fn which_containers_get_exclusive_cpus() {
    let guaranteed = |cpu: &str| {
        let p = fx_pod("u", &[], &[&format!("c={cpu}")]);
        guaranteed_cpus(&p, container(&p, "c"))
    };
    assert_eq!(guaranteed("1"), 1);
    assert_eq!(guaranteed("2000m"), 2);
    assert_eq!(guaranteed("1500m"), 0);
    assert_eq!(guaranteed("1.0001"), 0);
    assert_eq!(guaranteed("100m"), 0);
    assert_eq!(guaranteed("0"), 0);
    // Burstable: request below the limit.
    let p = fx_pod("u", &[], &["c=1,2"]);
    assert_eq!(guaranteed_cpus(&p, container(&p, "c")), 0);
    // Limits only: the request defaults to the limit, as the API server's defaulting does.
    let p = pod("metadata: {name: u, uid: u}
spec:
  containers: [{name: c, image: x, resources: {limits: {cpu: 2, memory: 1Gi}}}]");
    assert_eq!(guaranteed_cpus(&p, container(&p, "c")), 2);
}
