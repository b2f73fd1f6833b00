#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use tempfile::TempDir;

use super::*;
use crate::cm::cgroup::Layout;

/// 2 CPUs, 8 GiB, pid max 4194304, no huge pages.
fn capacity() -> Capacity {
    Capacity {
        cpu_milli: 2000,
        memory: 8 << 30,
        hugepages: BTreeMap::new(),
        ephemeral_storage: None,
        pid_max: Some(4_194_304),
    }
}

fn v1() -> (TempDir, CgroupManager) {
    let tmp = tempfile::tempdir().unwrap();
    for h in ["cpu,cpuacct", "cpuset", "memory", "pids", "systemd"] {
        fs::create_dir(tmp.path().join(h)).unwrap();
    }
    fs::write(tmp.path().join("cpuset/cpuset.cpus"), "0-1\n").unwrap();
    fs::write(tmp.path().join("cpuset/cpuset.mems"), "0\n").unwrap();
    let layout = Layout::v1_at(
        tmp.path(),
        &["cpu,cpuacct", "cpuset", "memory", "pids", "systemd"],
    );
    (tmp, CgroupManager::new(layout))
}

fn v2() -> (TempDir, CgroupManager) {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(
        tmp.path().join("cgroup.controllers"),
        "cpuset cpu memory pids",
    )
    .unwrap();
    let cgroups = CgroupManager::new(Layout::v2_at(tmp.path()));
    (tmp, cgroups)
}

fn read(root: &Path, rel: &str) -> String {
    fs::read_to_string(root.join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .trim()
        .to_string()
}

fn pod(yaml: &str) -> Pod {
    serde_yaml_ng::from_str(yaml).unwrap()
}

const GUARANTEED: &str = "metadata: {name: g, namespace: default, uid: g1}
spec:
  overhead: {cpu: 100m, memory: 64Mi}
  containers:
  - {name: a, image: x, resources: {limits: {cpu: 500m, memory: 128Mi}}}
  - {name: b, image: x, resources: {limits: {cpu: 500m, memory: 128Mi}}}
";
const BURSTABLE: &str = "metadata: {name: b, namespace: default, uid: b1}
spec:
  containers:
  - {name: a, image: x, resources: {requests: {cpu: 500m}}}
";
const BEST_EFFORT: &str = "metadata: {name: e, namespace: default, uid: e1}
spec:
  containers:
  - {name: a, image: x}
";

fn settings(pids: i64) -> Settings {
    Settings {
        cgroup_root: "/".into(),
        pod_pids_limit: pids,
        kube_reserved: BTreeMap::from([("memory".into(), "512Mi".into())]),
        system_reserved: BTreeMap::from([("memory".into(), "512Mi".into())]),
        ..Settings::default()
    }
}

/// The tree Go builds, with Go 1.28.7's values (cm/pod_config.rs and cm/qos.rs prove them
/// against Go): the same ResourceConfigs land in v1 files and in v2 files.
#[test]
fn the_tree_on_v1_with_go_s_values() {
    let (tmp, cgroups) = v1();
    let cm = ContainerManager::start_on(settings(64), capacity(), cgroups, Vec::new()).unwrap();
    let r = tmp.path();
    // kubepods: 8 GiB − 512 MiB − 512 MiB, 2 CPUs of shares, the node's pids.
    assert_eq!(
        read(r, "memory/kubepods/memory.limit_in_bytes"),
        "7516192768"
    );
    assert_eq!(read(r, "cpu,cpuacct/kubepods/cpu.shares"), "2048");
    assert_eq!(read(r, "pids/kubepods/pids.max"), "4194304");
    assert_eq!(read(r, "cpu,cpuacct/kubepods/besteffort/cpu.shares"), "2");
    assert_eq!(read(r, "cpu,cpuacct/kubepods/burstable/cpu.shares"), "2");

    let (g, b, e) = (pod(GUARANTEED), pod(BURSTABLE), pod(BEST_EFFORT));
    let active = [&g, &b, &e];
    for p in active {
        assert!(cm.ensure_pod(p, &active).unwrap());
        assert!(!cm.ensure_pod(p, &active).unwrap(), "made twice");
    }
    // Guaranteed: summed limits plus overhead, right under kubepods.
    assert_eq!(
        read(r, "memory/kubepods/podg1/memory.limit_in_bytes"),
        "335544320"
    );
    assert_eq!(read(r, "cpu,cpuacct/kubepods/podg1/cpu.shares"), "1126");
    assert_eq!(
        read(r, "cpu,cpuacct/kubepods/podg1/cpu.cfs_quota_us"),
        "110000"
    );
    assert_eq!(
        read(r, "cpu,cpuacct/kubepods/podg1/cpu.cfs_period_us"),
        "100000"
    );
    assert_eq!(read(r, "pids/kubepods/podg1/pids.max"), "64");
    // Burstable: its request's shares, no quota, no memory limit; the QoS cgroup has the
    // Burstable pods' requests.
    assert_eq!(
        read(r, "cpu,cpuacct/kubepods/burstable/podb1/cpu.shares"),
        "512"
    );
    assert!(
        !r.join("memory/kubepods/burstable/podb1/memory.limit_in_bytes")
            .exists()
    );
    assert_eq!(read(r, "cpu,cpuacct/kubepods/burstable/cpu.shares"), "512");
    assert_eq!(
        read(r, "cpu,cpuacct/kubepods/besteffort/pode1/cpu.shares"),
        "2"
    );

    let mut uids: Vec<String> = cm
        .pod_cgroups()
        .unwrap()
        .into_iter()
        .map(|(u, _)| u)
        .collect();
    uids.sort();
    assert_eq!(uids, ["b1", "e1", "g1"]);
    for uid in ["g1", "b1", "e1", "g1"] {
        cm.destroy_pod(uid).unwrap();
    }
    assert!(cm.pod_cgroups().unwrap().is_empty());
    assert!(!r.join("memory/kubepods/podg1").exists());
    assert!(r.join("memory/kubepods/burstable").exists());
}

#[test]
fn the_same_tree_on_v2() {
    let (tmp, cgroups) = v2();
    let cm = ContainerManager::start_on(settings(64), capacity(), cgroups, Vec::new()).unwrap();
    let r = tmp.path();
    assert_eq!(read(r, "kubepods/memory.max"), "7516192768");
    // 2048 shares as a weight (runc's conversion).
    assert_eq!(read(r, "kubepods/cpu.weight"), "79");
    assert_eq!(read(r, "kubepods/pids.max"), "4194304");
    assert_eq!(read(r, "kubepods/besteffort/cpu.weight"), "1");
    let (g, b) = (pod(GUARANTEED), pod(BURSTABLE));
    let active = [&g, &b];
    cm.ensure_pod(&g, &active).unwrap();
    cm.ensure_pod(&b, &active).unwrap();
    assert_eq!(read(r, "kubepods/podg1/memory.max"), "335544320");
    assert_eq!(read(r, "kubepods/podg1/cpu.max"), "110000 100000");
    assert_eq!(read(r, "kubepods/podg1/cpu.weight"), "43");
    assert_eq!(read(r, "kubepods/podg1/pids.max"), "64");
    assert_eq!(read(r, "kubepods/burstable/cpu.weight"), "20");
    cm.destroy_pod("g1").unwrap();
    assert!(!r.join("kubepods/podg1").exists());
}

#[test]
fn a_missing_cgroup_root_or_reserved_cgroup_is_refused_in_go_s_words() {
    let (_tmp, cgroups) = v1();
    let s = Settings {
        cgroup_root: "/not-there".into(),
        ..Settings::default()
    };
    let err = ContainerManager::start_on(s, capacity(), cgroups, Vec::new()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: cgroup-root \"/not-there\" doesn't exist"
    );
    let (_tmp, cgroups) = v1();
    let s = Settings {
        enforce_node_allocatable: vec!["pods".into(), "kube-reserved".into()],
        kube_reserved_cgroup: "/kube.slice".into(),
        kube_reserved: BTreeMap::from([("cpu".into(), "100m".into())]),
        ..Settings::default()
    };
    let err = ContainerManager::start_on(s, capacity(), cgroups, Vec::new()).unwrap_err();
    assert!(err.to_string().contains("/kube.slice"), "{err}");
}
