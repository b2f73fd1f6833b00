#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cmp::Ordering;
use std::collections::BTreeMap;

use ferrolet_proto::cri;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::actuation::{self, Applied, Resource, Step};
use super::decision::{self, Verdict};
use super::status::{cpu_quantity, memory_quantity, running_resources};
use super::*;
use crate::admission::NodeInfo;
use crate::podspec::testutil::pod;

fn pod_with(name: &str, cpu: &str, memory: &str, extra: &str) -> crate::types::Pod {
    pod(&format!(
        "metadata: {{name: {name}, uid: {name}}}\nspec:\n  containers:\n  - name: c\n    image: x\n    resources: {{requests: {{cpu: '{cpu}', memory: '{memory}'}}, limits: {{cpu: '{cpu}', memory: '{memory}'}}}}\n{extra}"
    ))
}

fn node(cpu: &str, memory: &str) -> NodeInfo {
    NodeInfo {
        name: "n".into(),
        allocatable: [("cpu", cpu), ("memory", memory), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.into())))
            .collect(),
        ..Default::default()
    }
}

#[test]
fn a_resize_fits_waits_or_never_fits_as_go_judges() {
    let n = node("2", "4Gi");
    let other = pod_with("other", "500m", "1Gi", "");
    let others = [&other];
    let fits = pod_with("p", "1", "1Gi", "");
    assert_eq!(
        decision::judge(&fits, &n, &others, false),
        Verdict::Allocate
    );
    let not_now = pod_with("p", "1800m", "1Gi", "");
    match decision::judge(&not_now, &n, &others, false) {
        Verdict::Deferred(m) => assert_eq!(
            m,
            "Node didn't have enough resource: cpu, requested: 1800, used: 500, capacity: 2000"
        ),
        v => panic!("{v:?}"),
    }
    // Alone it would fit: once the other pod goes, the same resize is allocated.
    assert_eq!(decision::judge(&not_now, &n, &[], false), Verdict::Allocate);
    let never = pod_with("p", "3", "1Gi", "");
    assert_eq!(
        decision::judge(&never, &n, &[], false),
        Verdict::Infeasible(
            "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000".into()
        )
    );
    let too_much_memory = pod_with("p", "3", "5Gi", "");
    assert_eq!(
        decision::judge(&too_much_memory, &n, &[], false),
        Verdict::Infeasible(
            "Node didn't have enough capacity: memory, requested: 5368709120, capacity: 4294967296"
                .into()
        )
    );
    // Guaranteed pods under the static CPU manager keep their exclusive CPUs.
    assert_eq!(
        decision::judge(&fits, &n, &[], true),
        Verdict::Infeasible(decision::STATIC_CPU_MANAGER.into())
    );
}

#[test]
fn the_pod_runs_as_allocated() {
    let spec = pod_with("p", "1", "1Gi", "");
    let allocated = decision::requested(&pod_with("p", "500m", "512Mi", ""));
    let as_allocated = decision::with_allocation(&spec, &allocated).unwrap();
    assert_eq!(decision::requested(&as_allocated), allocated);
    // Equal by value, not by spelling.
    let same = decision::requested(&pod_with("p", "1000m", "1024Mi", ""));
    assert!(decision::with_allocation(&spec, &same).is_none());
}

fn applied(shares: i64, quota: i64, memory: i64) -> Applied {
    Applied::reported(Some(&cri::ContainerResources {
        linux: Some(cri::LinuxContainerResources {
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: 100_000,
            memory_limit_in_bytes: memory,
            ..Default::default()
        }),
        windows: None,
    }))
    .unwrap()
}

#[test]
fn running_containers_are_updated_or_restarted_per_resize_policy() {
    let p = pod_with("p", "1", "256Mi", "");
    let c = &p.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        actuation::step(c, &applied(1024, 100_000, 256 << 20)),
        Step::Keep
    );
    assert_eq!(
        actuation::step(c, &applied(512, 50_000, 128 << 20)),
        Step::Update {
            memory: Some(Ordering::Greater),
            cpu: Some(Ordering::Greater)
        }
    );
    assert_eq!(
        actuation::step(c, &applied(1024, 100_000, 512 << 20)),
        Step::Update {
            memory: Some(Ordering::Less),
            cpu: None
        }
    );
    let restart = pod_with(
        "p",
        "1",
        "256Mi",
        "    resizePolicy: [{resourceName: memory, restartPolicy: RestartContainer}]",
    );
    let c = &restart.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        actuation::step(c, &applied(1024, 100_000, 128 << 20)),
        Step::Restart
    );
    // CPU alone keeps NotRequired.
    assert_eq!(
        actuation::step(c, &applied(512, 50_000, 256 << 20)),
        Step::Update {
            memory: None,
            cpu: Some(Ordering::Greater)
        }
    );
    // Each step changes its own resource only.
    let full = cri::LinuxContainerResources {
        cpu_shares: 1024,
        cpu_quota: 100_000,
        cpu_period: 100_000,
        memory_limit_in_bytes: 256 << 20,
        ..Default::default()
    };
    let now = applied(512, 50_000, 128 << 20);
    let memory = actuation::partial_update(&full, &now, Resource::Memory);
    assert_eq!(
        (
            memory.cpu_shares,
            memory.cpu_quota,
            memory.memory_limit_in_bytes
        ),
        (512, 50_000, 256 << 20)
    );
    let cpu = actuation::partial_update(&full, &now, Resource::Cpu);
    assert_eq!(
        (cpu.cpu_shares, cpu.cpu_quota, cpu.memory_limit_in_bytes),
        (1024, 100_000, 128 << 20)
    );
}

#[test]
fn status_shows_what_the_runtime_applied_and_the_resize() {
    assert_eq!(cpu_quantity(1500).0, "1500m");
    assert_eq!(cpu_quantity(2000).0, "2");
    assert_eq!(memory_quantity(128 << 20).0, "128Mi");
    assert_eq!(memory_quantity(100_000_000).0, "100000000");
    let allocated = decision::requested(&pod_with("p", "500m", "128Mi", ""));
    let r = running_resources(&allocated["c"], &applied(512, 50_000, 128 << 20));
    let list = |l: &Option<BTreeMap<String, Quantity>>| {
        l.as_ref()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={}", v.0))
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(list(&r.limits), "cpu=500m,memory=128Mi");
    assert_eq!(list(&r.requests), "cpu=500m,memory=128Mi");

    let mut status = k8s_openapi::api::core::v1::PodStatus::default();
    let allocation = PodAllocation {
        containers: allocated,
        resize: Some(ResizeState::Deferred {
            message: "no room".into(),
        }),
    };
    super::status::decorate(&mut status, &allocation, &Default::default(), None);
    assert_eq!(status.resize.as_deref(), Some("Deferred"));
    let c = &status.conditions.as_ref().unwrap()[0];
    assert_eq!(
        (
            c.type_.as_str(),
            c.status.as_str(),
            c.reason.as_deref(),
            c.message.as_deref()
        ),
        (
            "PodResizePending",
            "True",
            Some("Deferred"),
            Some("no room")
        )
    );
    let done = PodAllocation {
        resize: None,
        ..allocation
    };
    super::status::decorate(&mut status, &done, &Default::default(), None);
    assert_eq!((status.resize, status.conditions), (None, None));
}

#[test]
fn allocations_survive_a_restart_and_go_with_their_pod() {
    let dir = tempfile::tempdir().unwrap();
    let m = AllocationManager::load(dir.path()).unwrap();
    let containers = decision::requested(&pod_with("p", "1", "1Gi", ""));
    m.set_containers("p", containers.clone()).unwrap();
    m.set_resize("p", Some(ResizeState::InProgress { error: None }))
        .unwrap();
    let again = AllocationManager::load(dir.path()).unwrap();
    let got = again.get("p").unwrap();
    assert_eq!(got.containers, containers);
    assert_eq!(got.resize, Some(ResizeState::InProgress { error: None }));
    again.retain(|uid| uid != "p").unwrap();
    assert!(
        AllocationManager::load(dir.path())
            .unwrap()
            .get("p")
            .is_none()
    );
    // A damaged file is refused, naming it.
    std::fs::write(
        dir.path().join(CHECKPOINT_FILE),
        "{\"data\":{},\"checksum\":1}",
    )
    .unwrap();
    let err = AllocationManager::load(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains(CHECKPOINT_FILE) && err.contains("corrupt"),
        "{err}"
    );
}
