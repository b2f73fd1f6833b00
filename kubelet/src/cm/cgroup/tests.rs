#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use tempfile::TempDir;

use super::*;

const HIERARCHIES: [&str; 6] = [
    "cpu,cpuacct",
    "cpuset",
    "memory",
    "pids",
    "hugetlb",
    "systemd",
];

/// A plain directory tree shaped as a v1 node with the root cpuset's CPUs and memory nodes.
fn v1_tree(hierarchies: &[&str]) -> (TempDir, CgroupManager) {
    let tmp = tempfile::tempdir().unwrap();
    for h in hierarchies {
        fs::create_dir(tmp.path().join(h)).unwrap();
    }
    if hierarchies.contains(&"cpuset") {
        fs::write(tmp.path().join("cpuset/cpuset.cpus"), "0-1\n").unwrap();
        fs::write(tmp.path().join("cpuset/cpuset.mems"), "0\n").unwrap();
    }
    let layout = Layout::v1_at(tmp.path(), hierarchies);
    (tmp, CgroupManager::new(layout))
}

/// A plain directory tree shaped as a v2 node with `controllers` at its root.
fn v2_tree(controllers: &str) -> (TempDir, CgroupManager) {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("cgroup.controllers"), controllers).unwrap();
    let layout = Layout::v2_at(tmp.path());
    (tmp, CgroupManager::new(layout))
}

fn config() -> ResourceConfig {
    ResourceConfig {
        memory: Some(1 << 30),
        memory_min: None,
        cpu_shares: Some(1024),
        cpu_quota: Some(50_000),
        cpu_period: Some(100_000),
        cpuset_cpus: Some("1".into()),
        pids_limit: Some(64),
        hugepage_limits: BTreeMap::from([(2 << 20, 4 << 20)]),
    }
}

fn pod() -> CgroupName {
    CgroupName::root()
        .join("kubepods")
        .unwrap()
        .join("pod1")
        .unwrap()
}

fn cat(dir: &Path, file: &str) -> String {
    fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
}

#[test]
fn v1_create_update_destroy() {
    let (tmp, m) = v1_tree(&HIERARCHIES);
    let root = tmp.path();
    let pod = pod();
    assert!(!m.exists(&pod));
    m.create(&pod, &config()).unwrap();
    assert!(m.exists(&pod));
    assert!(!m.exists(&CgroupName::from_cgroupfs("/kubepods/pod2")));

    let cpu = root.join("cpu,cpuacct/kubepods/pod1");
    assert_eq!(cat(&cpu, "cpu.shares"), "1024");
    assert_eq!(cat(&cpu, "cpu.cfs_period_us"), "100000");
    assert_eq!(cat(&cpu, "cpu.cfs_quota_us"), "50000");
    let memory = root.join("memory/kubepods/pod1");
    assert_eq!(cat(&memory, "memory.limit_in_bytes"), "1073741824");
    assert_eq!(cat(&root.join("pids/kubepods/pod1"), "pids.max"), "64");
    let hugetlb = root.join("hugetlb/kubepods/pod1");
    assert_eq!(cat(&hugetlb, "hugetlb.2MB.limit_in_bytes"), "4194304");
    // Each new cpuset level got its parent's CPUs and memory nodes; the pod then its own CPUs.
    let kubepods = root.join("cpuset/kubepods");
    assert_eq!(cat(&kubepods, "cpuset.cpus"), "0-1");
    assert_eq!(cat(&kubepods, "cpuset.mems"), "0");
    assert_eq!(cat(&kubepods.join("pod1"), "cpuset.cpus"), "1");
    assert_eq!(cat(&kubepods.join("pod1"), "cpuset.mems"), "0");
    assert!(root.join("systemd/kubepods/pod1").is_dir());

    // An update writes only what it sets.
    let shares = ResourceConfig {
        cpu_shares: Some(2),
        ..Default::default()
    };
    m.update(&pod, &shares).unwrap();
    assert_eq!(cat(&cpu, "cpu.shares"), "2");
    assert_eq!(cat(&cpu, "cpu.cfs_quota_us"), "50000");
    let unlimited = ResourceConfig {
        cpu_quota: Some(-1),
        pids_limit: Some(-1),
        ..Default::default()
    };
    m.update(&pod, &unlimited).unwrap();
    assert_eq!(cat(&cpu, "cpu.cfs_quota_us"), "-1");
    assert_eq!(cat(&root.join("pids/kubepods/pod1"), "pids.max"), "max");

    // A runtime's container cgroup below the pod, with processes in two hierarchies.
    let container = memory.join("ctr1");
    fs::create_dir(&container).unwrap();
    fs::write(container.join("cgroup.procs"), "123\n124\n").unwrap();
    fs::write(root.join("pids/kubepods/pod1/cgroup.procs"), "45\n123\n").unwrap();
    assert_eq!(m.pids(&pod), [45, 123, 124]);
    assert_eq!(
        m.children(&CgroupName::from_cgroupfs("/kubepods")),
        ["pod1"]
    );
    assert_eq!(m.children(&pod), ["ctr1"]);

    m.destroy(&pod).unwrap();
    for h in HIERARCHIES {
        assert!(!root.join(h).join("kubepods/pod1").exists(), "{h}");
        assert!(root.join(h).join("kubepods").is_dir(), "{h}");
    }
    assert!(!m.exists(&pod));
    assert!(m.pids(&pod).is_empty());
    m.destroy(&pod).unwrap();
    assert!(matches!(
        m.destroy(&CgroupName::root()),
        Err(CgroupError::DestroyRoot)
    ));
}

#[test]
fn v2_create_update_destroy() {
    let (tmp, m) = v2_tree("cpuset cpu io memory hugetlb pids rdma misc\n");
    let root = tmp.path();
    let pod = pod();
    assert!(!m.exists(&pod));
    m.create(&pod, &config()).unwrap();
    assert!(m.exists(&pod));

    let enabled = "+cpu +cpuset +memory +pids +hugetlb";
    assert_eq!(cat(root, "cgroup.subtree_control"), enabled);
    assert_eq!(
        cat(&root.join("kubepods"), "cgroup.subtree_control"),
        enabled
    );
    let dir = root.join("kubepods/pod1");
    assert!(!dir.join("cgroup.subtree_control").exists());
    assert_eq!(cat(&dir, "cpu.weight"), "39");
    assert_eq!(cat(&dir, "cpu.max"), "50000 100000");
    assert_eq!(cat(&dir, "memory.max"), "1073741824");
    assert_eq!(cat(&dir, "pids.max"), "64");
    assert_eq!(cat(&dir, "cpuset.cpus"), "1");
    assert_eq!(cat(&dir, "hugetlb.2MB.max"), "4194304");

    let unlimited = ResourceConfig {
        memory: Some(-1),
        cpu_quota: Some(-1),
        pids_limit: Some(-1),
        ..Default::default()
    };
    m.update(&pod, &unlimited).unwrap();
    assert_eq!(cat(&dir, "memory.max"), "max");
    assert_eq!(cat(&dir, "cpu.max"), "max 100000");
    assert!(!dir.join("memory.min").exists());
    let protected = ResourceConfig {
        memory_min: Some(64 << 20),
        ..Default::default()
    };
    m.update(&pod, &protected).unwrap();
    assert_eq!(cat(&dir, "memory.min"), "67108864");
    assert_eq!(cat(&dir, "pids.max"), "max");
    assert_eq!(cat(&dir, "cpu.weight"), "39");

    fs::create_dir(dir.join("ctr1")).unwrap();
    fs::write(dir.join("ctr1/cgroup.procs"), "7\n").unwrap();
    assert_eq!(m.pids(&pod), [7]);
    m.destroy(&pod).unwrap();
    assert!(!dir.exists());
    assert!(root.join("kubepods").is_dir());
    assert!(!m.exists(&pod));
}

#[test]
fn optional_hugetlb_is_skipped_required_controllers_are_not() {
    let (tmp, m) = v1_tree(&["cpu,cpuacct", "cpuset", "memory"]);
    let pod = pod();
    let err = m.create(&pod, &config()).unwrap_err();
    assert!(
        matches!(
            err,
            CgroupError::MissingController {
                controller: "pids",
                ..
            }
        ),
        "{err}"
    );
    let no_pids = ResourceConfig {
        pids_limit: None,
        ..config()
    };
    m.update(&pod, &no_pids).unwrap();
    assert_eq!(
        cat(
            &tmp.path().join("memory/kubepods/pod1"),
            "memory.limit_in_bytes"
        ),
        "1073741824"
    );

    let (tmp, m) = v2_tree("cpuset cpu memory pids");
    m.create(&pod, &config()).unwrap();
    assert_eq!(
        cat(tmp.path(), "cgroup.subtree_control"),
        "+cpu +cpuset +memory +pids"
    );
    assert!(!tmp.path().join("kubepods/pod1/hugetlb.2MB.max").exists());
    assert!(m.exists(&pod));
}

#[test]
fn node_hugepage_sizes_not_asked_for_are_limited_to_zero() {
    let (tmp, m) = v2_tree("cpuset cpu memory pids hugetlb");
    let m = m.with_hugepage_sizes(vec!["1GB".into(), "2MB".into()]);
    let pod = pod();
    m.create(&pod, &config()).unwrap();
    let dir = tmp.path().join("kubepods/pod1");
    assert_eq!(cat(&dir, "hugetlb.2MB.max"), "4194304");
    assert_eq!(cat(&dir, "hugetlb.1GB.max"), "0");
}

#[test]
fn v1_unlimited_memory_lifts_memsw_first() {
    let (tmp, m) = v1_tree(&HIERARCHIES);
    let pod = pod();
    m.create(&pod, &ResourceConfig::default()).unwrap();
    let memory = tmp.path().join("memory/kubepods/pod1");
    fs::write(memory.join("memory.memsw.limit_in_bytes"), "1073741824").unwrap();
    let unlimited = ResourceConfig {
        memory: Some(-1),
        ..Default::default()
    };
    m.update(&pod, &unlimited).unwrap();
    assert_eq!(cat(&memory, "memory.memsw.limit_in_bytes"), "-1");
    assert_eq!(cat(&memory, "memory.limit_in_bytes"), "-1");
}
