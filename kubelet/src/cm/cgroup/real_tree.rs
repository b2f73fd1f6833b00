//! One round trip on this node's real cgroup tree, by hand as root:
//! `cargo test -p ferrolet --lib cm::cgroup::real_tree -- --ignored --nocapture`.
//! It works under `/ferrolet-scratch-cgroup` and leaves nothing behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

use super::*;

fn cat(m: &CgroupManager, controller: &str, name: &CgroupName, file: &str) -> String {
    let path = m.dir(controller, name).unwrap().join(file);
    let out = Command::new("cat").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    println!("$ cat {}\n{text}", path.display());
    text
}

fn join(m: &CgroupManager, name: &CgroupName, pid: u32) {
    for c in ["memory", "cpu", "pids"] {
        let dir = m.dir(c, name).unwrap();
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

#[test]
#[ignore = "needs root on a cgroup v1 or hybrid node; writes under /sys/fs/cgroup"]
fn real_tree_round_trip() {
    let layout = Layout::detect().unwrap();
    println!(
        "layout: {} at {}",
        layout.mode().as_str(),
        layout.root().display()
    );
    layout.validate_required_controllers().unwrap();
    let m = CgroupManager::new(layout);
    let top = CgroupName::root().join("ferrolet-scratch-cgroup").unwrap();
    let pod = top.join("pod-test").unwrap();
    let container = pod.join("ctr").unwrap();
    let config = ResourceConfig {
        memory: Some(64 << 20),
        cpu_shares: Some(512),
        cpu_quota: Some(50_000),
        cpu_period: Some(100_000),
        pids_limit: Some(64),
        ..Default::default()
    };
    m.create(&pod, &config).unwrap();
    m.create(&container, &ResourceConfig::default()).unwrap();
    assert!(m.exists(&pod) && m.exists(&container));
    assert_eq!(cat(&m, "memory", &pod, "memory.limit_in_bytes"), "67108864");
    assert_eq!(cat(&m, "cpu", &pod, "cpu.shares"), "512");
    assert_eq!(cat(&m, "cpu", &pod, "cpu.cfs_period_us"), "100000");
    assert_eq!(cat(&m, "cpu", &pod, "cpu.cfs_quota_us"), "50000");
    assert_eq!(cat(&m, "pids", &pod, "pids.max"), "64");
    let cpus = cat(&m, "cpuset", &pod, "cpuset.cpus");
    assert!(!cpus.is_empty());
    assert!(!cat(&m, "cpuset", &container, "cpuset.mems").is_empty());

    let spawn = || {
        Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (spawn(), spawn());
    join(&m, &pod, a.id());
    join(&m, &container, b.id());
    let pids = m.pids(&pod);
    println!("pids({pod}) = {pids:?} (sleeps {} and {})", a.id(), b.id());
    let mut expected = vec![a.id() as i32, b.id() as i32];
    expected.sort();
    assert_eq!(pids, expected);
    assert_eq!(m.children(&pod), ["ctr"]);

    let out = Command::new("find")
        .args([
            "/sys/fs/cgroup",
            "-maxdepth",
            "2",
            "-name",
            "ferrolet-scratch-cgroup",
        ])
        .output()
        .unwrap();
    let made = String::from_utf8_lossy(&out.stdout);
    println!("$ find /sys/fs/cgroup -maxdepth 2 -name ferrolet-scratch-cgroup\n{made}");
    assert_eq!(made.lines().count(), m.layout().hierarchies().len());

    for c in [&mut a, &mut b] {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    assert!(m.pids(&pod).is_empty());
    m.destroy(&top).unwrap();
    assert!(!m.exists(&pod));
    let out = Command::new("find")
        .args(["/sys/fs/cgroup", "-name", "ferrolet-scratch-cgroup*"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&out.stdout);
    println!("$ find /sys/fs/cgroup -name 'ferrolet-scratch-cgroup*'\n{left}(end)");
    assert!(left.trim().is_empty());
}
