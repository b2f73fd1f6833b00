#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use ferrolet_proto::cri;
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};

use super::cgroup::{self, CgroupReading, Hierarchy, MemoryUsage, Pressure, Psi};
use super::host::{self, DiskUsage, FsInfo};
use super::pods::{PodContext, Probe, pod_stats, stats_sandbox, time_from_ns};
use super::rates::CpuRates;
use super::types::*;
use super::*;
use crate::server::ApiRequest;
use crate::server::stats::{SummarySource, cpu_and_memory_only, respond};
use crate::types::{RuntimeContainer, RuntimeSandbox};

/// A summary as the Go kubelet serves it (hand-written from stats/v1alpha1 types.go, fields
/// in Go's order, every optional field present once).
const GO_SAMPLE: &str = r#"{"node":{"nodeName":"node-a","systemContainers":[{"name":"pods","startTime":"2024-05-01T09:00:00Z","cpu":{"time":"2024-05-01T10:00:00Z","usageNanoCores":1500000,"usageCoreNanoSeconds":90000000000},"memory":{"time":"2024-05-01T10:00:00Z","availableBytes":3000000000,"usageBytes":200000000,"workingSetBytes":150000000,"rssBytes":100000000,"pageFaults":1000,"majorPageFaults":3}}],"startTime":"2024-05-01T08:00:00Z","cpu":{"time":"2024-05-01T10:00:00Z","usageNanoCores":250000000,"usageCoreNanoSeconds":123456789000},"memory":{"time":"2024-05-01T10:00:00Z","availableBytes":3500000000,"usageBytes":900000000,"workingSetBytes":600000000,"rssBytes":300000000,"pageFaults":5000,"majorPageFaults":10},"network":{"time":"2024-05-01T10:00:00Z","name":"eth0","rxBytes":1000,"rxErrors":0,"txBytes":2000,"txErrors":0,"interfaces":[{"name":"eth0","rxBytes":1000,"rxErrors":0,"txBytes":2000,"txErrors":0}]},"fs":{"time":"2024-05-01T10:00:00Z","availableBytes":50000000000,"capacityBytes":100000000000,"usedBytes":45000000000,"inodesFree":6000000,"inodes":6500000,"inodesUsed":500000},"runtime":{"imageFs":{"time":"2024-05-01T10:00:00Z","availableBytes":50000000000,"capacityBytes":100000000000,"usedBytes":2000000000,"inodesFree":6000000,"inodes":6500000,"inodesUsed":40000},"containerFs":{"time":"2024-05-01T10:00:00Z","availableBytes":50000000000,"capacityBytes":100000000000,"usedBytes":2000000000,"inodesFree":6000000,"inodes":6500000,"inodesUsed":40000}},"rlimit":{"time":"2024-05-01T10:00:00Z","maxpid":4194304,"curproc":250}},"pods":[{"podRef":{"name":"web-node-a","namespace":"default","uid":"0b8a"},"startTime":"2024-05-01T09:30:00Z","containers":[{"name":"web","startTime":"2024-05-01T09:30:01Z","cpu":{"time":"2024-05-01T10:00:00Z","usageNanoCores":1000000,"usageCoreNanoSeconds":5000000000},"memory":{"time":"2024-05-01T10:00:00Z","usageBytes":70000000,"workingSetBytes":68000000,"rssBytes":1000000,"pageFaults":200,"majorPageFaults":0},"rootfs":{"time":"2024-05-01T10:00:00Z","availableBytes":50000000000,"capacityBytes":100000000000,"usedBytes":8192,"inodesFree":6000000,"inodes":6500000,"inodesUsed":3},"logs":{"time":"2024-05-01T10:00:00Z","availableBytes":50000000000,"capacityBytes":100000000000,"usedBytes":4096,"inodesFree":6000000,"inodes":6500000,"inodesUsed":2}}],"cpu":{"time":"2024-05-01T10:00:00Z","usageNanoCores":1000000,"usageCoreNanoSeconds":5100000000},"memory":{"time":"2024-05-01T10:00:00Z","usageBytes":71000000,"workingSetBytes":69000000,"rssBytes":1100000,"pageFaults":250,"majorPageFaults":0},"network":{"time":"2024-05-01T10:00:00Z","name":"eth0","rxBytes":500,"rxErrors":0,"txBytes":600,"txErrors":0,"interfaces":[{"name":"eth0","rxBytes":500,"rxErrors":0,"txBytes":600,"txErrors":0}]},"volume":[{"time":"2024-05-01T10:00:00Z","availableBytes":50000000000,"capacityBytes":100000000000,"usedBytes":67108864,"inodesFree":6000000,"inodes":6500000,"inodesUsed":2,"name":"data"}],"ephemeral-storage":{"time":"2024-05-01T10:00:00Z","availableBytes":50000000000,"capacityBytes":100000000000,"usedBytes":67121152,"inodesFree":6000000,"inodes":6500000,"inodesUsed":7},"process_stats":{"process_count":2}}]}"#;

#[test]
fn summary_json_is_go_s_shape() {
    let summary: Summary = serde_json::from_str(GO_SAMPLE).unwrap();
    assert_eq!(summary.node.node_name, "node-a");
    assert_eq!(
        summary.node.system_containers[0].name,
        SYSTEM_CONTAINER_PODS
    );
    let net = summary.node.network.as_ref().unwrap();
    assert_eq!(net.default_interface.name, "eth0");
    assert_eq!(net.default_interface.tx_bytes, Some(2000));
    let pod = &summary.pods[0];
    assert_eq!(pod.volume_stats[0].name, "data");
    assert_eq!(pod.volume_stats[0].fs.used_bytes, Some(64 << 20));
    assert_eq!(pod.process_stats.as_ref().unwrap().process_count, Some(2));
    assert_eq!(pod.ephemeral_storage.as_ref().unwrap().inodes_used, Some(7));
    assert_eq!(
        summary.node.rlimit.as_ref().unwrap().max_pid,
        Some(4_194_304)
    );
    // Byte for byte: same names, same order, nothing added.
    assert_eq!(serde_json::to_string(&summary).unwrap(), GO_SAMPLE);
}

#[test]
fn unknown_values_are_left_out() {
    let t = time_from_ns(1_714_557_600_000_000_000);
    let fs = FsStats::empty(t.clone());
    assert_eq!(
        serde_json::to_string(&fs).unwrap(),
        r#"{"time":"2024-05-01T10:00:00Z"}"#
    );
    let pod = PodStats {
        pod_ref: PodReference::default(),
        start_time: t,
        containers: Vec::new(),
        cpu: None,
        memory: None,
        io: None,
        network: None,
        volume_stats: Vec::new(),
        ephemeral_storage: None,
        process_stats: None,
    };
    assert_eq!(
        serde_json::to_string(&pod).unwrap(),
        r#"{"podRef":{"name":"","namespace":"","uid":""},"startTime":"2024-05-01T10:00:00Z","containers":[]}"#
    );
}

#[test]
fn cpu_rates_need_two_samples() {
    let rates = CpuRates::default();
    assert_eq!(rates.rate("c", 1_000_000_000, 5_000_000_000), None);
    // Half a core over two seconds.
    assert_eq!(
        rates.rate("c", 3_000_000_000, 6_000_000_000),
        Some(500_000_000)
    );
    // The same instant again: the same rate.
    assert_eq!(
        rates.rate("c", 3_000_000_000, 6_000_000_000),
        Some(500_000_000)
    );
    // A counter that went back (a new instance): no rate, and a new baseline.
    assert_eq!(rates.rate("c", 4_000_000_000, 1_000), None);
    assert_eq!(
        rates.rate("c", 5_000_000_000, 2_000_001_000),
        Some(2_000_000_000)
    );
    assert_eq!(rates.rate("other", 5_000_000_000, 1), None);
    assert_eq!(rates.len(), 2);
    rates.retain(|k| k == "c");
    assert_eq!(rates.len(), 1);
}

#[test]
fn host_files_parse() {
    let stat = "cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nbtime 1700000000\n";
    // (100+5+50+3+2+1) ticks at 100/s = 1.61 s.
    assert_eq!(host::proc_stat_cpu_ns(stat, 100), Some(1_610_000_000));
    let meminfo = "MemTotal:       4000 kB\nMemFree:        1000 kB\nInactive(file):  500 kB\nAnonPages:       700 kB\n";
    let m = host::meminfo_memory(meminfo).unwrap();
    assert_eq!(m.usage, 3000 * 1024);
    assert_eq!(m.working_set, 2500 * 1024);
    assert_eq!(m.rss, 700 * 1024);
    let dev = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n  eth0: 2940 16 3 0 0 0 0 0 1150 13 4 0 0 0 0 0\n";
    let ifaces = host::parse_net_dev(dev);
    assert_eq!(ifaces.len(), 2);
    assert_eq!(
        ifaces[1],
        InterfaceStats {
            name: "eth0".into(),
            rx_bytes: Some(2940),
            rx_errors: Some(3),
            tx_bytes: Some(1150),
            tx_errors: Some(4),
        }
    );
    let route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                 eth1\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                 eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
    assert_eq!(
        host::default_route_interface(route).as_deref(),
        Some("eth0")
    );
    assert_eq!(
        host::loadavg_tasks("0.02 0.09 0.78 1/108 29873\n"),
        Some(108)
    );
    assert_eq!(host::loadavg_tasks("garbage"), None);
}

#[test]
fn disk_usage_counts_blocks_and_hard_links_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("a"), vec![1u8; 64 * 1024]).unwrap();
    std::fs::hard_link(data.join("a"), data.join("b")).unwrap();
    std::fs::create_dir(data.join("sub")).unwrap();
    std::fs::write(data.join("sub/c"), b"x").unwrap();
    let usage = host::disk_usage(&data).unwrap();
    // d, a (once), sub, sub/c.
    assert_eq!(usage.inodes, 4);
    assert!(usage.bytes >= 64 * 1024, "{usage:?}");
    assert!(
        usage.bytes < 64 * 1024 * 2,
        "hard link counted twice: {usage:?}"
    );
    assert_eq!(
        host::disk_usage(&dir.path().join("missing")).unwrap(),
        DiskUsage::default()
    );
    let top = host::top_level_files_usage(&data);
    assert_eq!(top.inodes, 2);
    let fs = host::fs_info(dir.path()).unwrap();
    assert!(fs.capacity >= fs.available && fs.capacity >= fs.used && fs.inodes >= fs.inodes_free);
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_cgroup_reading_carries_its_time_and_the_root_reads_as_the_root() {
    let v1 = tempfile::tempdir().unwrap();
    let r = v1.path();
    write(r, "cpuacct/kubepods/pod1/cpuacct.usage", "5000\n");
    write(r, "memory/kubepods/pod1/memory.usage_in_bytes", "1000\n");
    write(r, "cpuacct/cpuacct.usage", "9000\n");
    let cg = Hierarchy::at(r, false);
    let reading = cgroup::read(&cg, "/kubepods/pod1", 7).unwrap();
    assert_eq!(
        (reading.timestamp_ns, reading.cpu_usage_ns),
        (7, Some(5000))
    );
    assert_eq!(reading.memory.unwrap().usage, 1000);
    assert_eq!(cgroup::read(&cg, "/", 8).unwrap().cpu_usage_ns, Some(9000));
    // Unknown to every controller, or unreadable: no reading.
    assert_eq!(cgroup::read(&cg, "/kubepods/none", 7), None);
    write(r, "memory/kubepods/pod1/memory.usage_in_bytes", "lots\n");
    assert_eq!(cgroup::read(&cg, "/kubepods/pod1", 7), None);
}

// ---------------------------------------------------------------------------------------------
// Pod entries.

const NOW: i64 = 1_714_557_600_000_000_000;

fn u(v: u64) -> Option<cri::UInt64Value> {
    Some(cri::UInt64Value { value: v })
}

fn cri_container(id: &str, cpu: u64, ws: u64, layer: u64) -> cri::ContainerStats {
    cri::ContainerStats {
        attributes: Some(cri::ContainerAttributes {
            id: id.into(),
            ..Default::default()
        }),
        cpu: Some(cri::CpuUsage {
            timestamp: NOW,
            usage_core_nano_seconds: u(cpu),
            usage_nano_cores: None,
        }),
        memory: Some(cri::MemoryUsage {
            timestamp: NOW,
            working_set_bytes: u(ws),
            usage_bytes: u(ws + 10),
            ..Default::default()
        }),
        writable_layer: Some(cri::FilesystemUsage {
            timestamp: NOW,
            fs_id: Some(cri::FilesystemIdentifier {
                mountpoint: "/snapshots".into(),
            }),
            used_bytes: u(layer),
            inodes_used: u(3),
        }),
        swap: None,
    }
}

fn runtime_pod() -> RuntimePod {
    let container = |id: &str, name: &str, sandbox: &str, state| RuntimeContainer {
        id: id.into(),
        sandbox_id: sandbox.into(),
        name: name.into(),
        state,
        created_at: NOW - 1_000_000_000,
        ..Default::default()
    };
    RuntimePod {
        uid: "uid1".into(),
        name: "web-node-a".into(),
        namespace: "default".into(),
        sandboxes: vec![
            RuntimeSandbox {
                id: "sb-old".into(),
                ready: false,
                created_at: NOW - 9_000_000_000,
                ..Default::default()
            },
            RuntimeSandbox {
                id: "sb".into(),
                ready: true,
                created_at: NOW - 5_000_000_000,
                ..Default::default()
            },
        ],
        containers: vec![
            container("c1", "web", "sb", cri::ContainerState::ContainerRunning),
            container("c2", "side", "sb", cri::ContainerState::ContainerRunning),
            container("c0", "web", "sb", cri::ContainerState::ContainerExited),
            container("cx", "web", "sb-old", cri::ContainerState::ContainerRunning),
        ],
    }
}

fn spec() -> Pod {
    serde_yaml_ng::from_str(
        "metadata: {name: web-node-a, namespace: default, uid: uid1}
spec:
  containers: [{name: web, image: x}, {name: side, image: x}]
  volumes:
  - {name: data, emptyDir: {}}
  - {name: mem, emptyDir: {medium: Memory}}
  - {name: host, hostPath: {path: /tmp}}",
    )
    .unwrap()
}

fn fake_fs(_: &Path) -> Option<FsInfo> {
    Some(FsInfo {
        capacity: 1000,
        available: 600,
        used: 400,
        inodes: 100,
        inodes_free: 90,
    })
}

/// du: 100 bytes and 1 inode for anything but the memory volume (1000 bytes).
fn fake_du(p: &Path) -> Option<DiskUsage> {
    let bytes = if p.ends_with("mem") { 1000 } else { 100 };
    Some(DiskUsage { bytes, inodes: 1 })
}

fn fake_top(_: &Path) -> DiskUsage {
    DiskUsage::default()
}

fn no_cgroup(_: &str) -> Option<CgroupReading> {
    None
}

fn no_container_cgroup(_: &str, _: &str) -> Option<CgroupReading> {
    None
}

/// Container `c1`'s cgroup, below the pod's, has pressure files; `c2`'s is not found.
fn container_pressure(pod: &str, id: &str) -> Option<CgroupReading> {
    assert_eq!(pod, "/k/kubepods/besteffort/poduid1");
    let psi = Psi {
        some: ferrolet_cgroups::usage::PsiLine {
            total: 99,
            ..Default::default()
        },
        full: Default::default(),
    };
    (id == "c1").then(|| CgroupReading {
        timestamp_ns: NOW,
        pressure: Pressure {
            cpu: Some(psi),
            memory: Some(psi),
            io: Some(psi),
        },
        ..Default::default()
    })
}

fn pod_cgroup(cg: &str) -> Option<CgroupReading> {
    assert_eq!(cg, "/k/kubepods/besteffort/poduid1");
    Some(CgroupReading {
        timestamp_ns: NOW,
        cpu_usage_ns: Some(777),
        memory: Some(MemoryUsage {
            usage: 5000,
            working_set: 4000,
            ..Default::default()
        }),
        pids: Some(4),
        ..Default::default()
    })
}

fn ctx<'a>(
    sandbox_stats: Option<&'a BTreeMap<String, cri::PodSandboxStats>>,
    container_stats: &'a BTreeMap<String, cri::ContainerStats>,
    only: bool,
) -> PodContext<'a> {
    PodContext {
        root_dir: Path::new("/root"),
        pod_logs_dir: Path::new("/logs"),
        cgroup_root: "/k",
        systemd_cgroups: false,
        sandbox_stats,
        container_stats,
        root_fs: fake_fs(Path::new("/")),
        image_fs: None,
        cpu_and_memory_only: only,
    }
}

#[test]
fn the_ready_sandbox_is_the_pod_s() {
    let pod = runtime_pod();
    assert_eq!(stats_sandbox(&pod).unwrap().id, "sb");
    let mut none_ready = pod.clone();
    none_ready
        .sandboxes
        .iter_mut()
        .for_each(|s| s.ready = false);
    assert_eq!(stats_sandbox(&none_ready).unwrap().id, "sb");
    none_ready.sandboxes.clear();
    let rates = CpuRates::default();
    let empty = BTreeMap::new();
    let probe = Probe {
        fs: &fake_fs,
        du: &fake_du,
        top_files: &fake_top,
        cgroup: &no_cgroup,
        container_cgroup: &no_container_cgroup,
        now_ns: NOW,
    };
    assert!(pod_stats(&none_ready, None, &ctx(None, &empty, false), &probe, &rates).is_none());
}

#[test]
fn pod_stats_from_sandbox_stats() {
    let rates = CpuRates::default();
    let mut sandbox = BTreeMap::new();
    sandbox.insert(
        "sb".to_string(),
        cri::PodSandboxStats {
            attributes: Some(cri::PodSandboxAttributes {
                id: "sb".into(),
                ..Default::default()
            }),
            linux: Some(cri::LinuxPodSandboxStats {
                cpu: Some(cri::CpuUsage {
                    timestamp: NOW,
                    usage_core_nano_seconds: u(3000),
                    usage_nano_cores: u(42),
                }),
                memory: Some(cri::MemoryUsage {
                    timestamp: NOW,
                    working_set_bytes: u(900),
                    ..Default::default()
                }),
                network: Some(cri::NetworkUsage {
                    timestamp: NOW,
                    default_interface: Some(cri::NetworkInterfaceUsage {
                        name: "eth0".into(),
                        rx_bytes: u(5),
                        ..Default::default()
                    }),
                    interfaces: Vec::new(),
                }),
                process: Some(cri::ProcessUsage {
                    timestamp: NOW,
                    process_count: u(2),
                }),
                containers: vec![
                    cri_container("c1", 1000, 300, 50),
                    cri_container("c2", 2000, 400, 60),
                ],
            }),
            windows: None,
        },
    );
    let empty = BTreeMap::new();
    let probe = Probe {
        fs: &fake_fs,
        du: &fake_du,
        top_files: &fake_top,
        cgroup: &no_cgroup,
        container_cgroup: &no_container_cgroup,
        now_ns: NOW,
    };
    let spec = spec();
    let stats = pod_stats(
        &runtime_pod(),
        Some(&spec),
        &ctx(Some(&sandbox), &empty, false),
        &probe,
        &rates,
    )
    .unwrap();
    assert_eq!(stats.pod_ref.uid, "uid1");
    assert_eq!(stats.start_time, time_from_ns(NOW - 5_000_000_000));
    // Running containers of the ready sandbox only, by name.
    let names: Vec<&str> = stats.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["side", "web"]);
    let web = &stats.containers[1];
    assert_eq!(
        web.cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(1000)
    );
    assert_eq!(web.memory.as_ref().unwrap().working_set_bytes, Some(300));
    let rootfs = web.rootfs.as_ref().unwrap();
    assert_eq!(
        (rootfs.used_bytes, rootfs.capacity_bytes),
        (Some(50), Some(1000))
    );
    assert_eq!(web.logs.as_ref().unwrap().used_bytes, Some(100));
    let cpu = stats.cpu.as_ref().unwrap();
    assert_eq!(
        (cpu.usage_core_nano_seconds, cpu.usage_nano_cores),
        (Some(3000), Some(42))
    );
    assert_eq!(stats.memory.as_ref().unwrap().working_set_bytes, Some(900));
    assert_eq!(
        stats.network.as_ref().unwrap().default_interface.rx_bytes,
        Some(5)
    );
    assert_eq!(stats.process_stats.as_ref().unwrap().process_count, Some(2));
    // With the container manager's pod cgroup readable, its CPU, memory and process count
    // win over the runtime's pod sandbox stats (Go's default CRI stats provider); the
    // network still comes from the runtime.
    let with_cgroup = Probe {
        cgroup: &pod_cgroup,
        ..probe
    };
    let from_cgroup = pod_stats(
        &runtime_pod(),
        Some(&spec),
        &ctx(Some(&sandbox), &empty, false),
        &with_cgroup,
        &rates,
    )
    .unwrap();
    assert_eq!(from_cgroup.process_stats.unwrap().process_count, Some(4));
    assert_eq!(from_cgroup.cpu.unwrap().usage_core_nano_seconds, Some(777));
    assert_eq!(from_cgroup.memory.unwrap().working_set_bytes, Some(4000));
    assert_eq!(
        from_cgroup.network.unwrap().default_interface.rx_bytes,
        Some(5)
    );
    // Both emptyDirs are listed; the hostPath is not.
    let vols: Vec<&str> = stats.volume_stats.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(vols, ["data", "mem"]);
    // Layers 50+60, logs 100+100, the disk emptyDir 100, etc-hosts 100; not the tmpfs.
    let eph = stats.ephemeral_storage.as_ref().unwrap();
    assert_eq!(eph.used_bytes, Some(510));
    assert_eq!(eph.inodes_used, Some(3 + 3 + 1 + 1 + 1 + 1));
    assert_eq!(eph.available_bytes, Some(600));
}

#[test]
fn without_sandbox_stats_the_pod_cgroup_or_the_containers_sum() {
    let rates = CpuRates::default();
    let mut containers = BTreeMap::new();
    containers.insert("c1".to_string(), cri_container("c1", 1000, 300, 50));
    containers.insert("c2".to_string(), cri_container("c2", 2000, 400, 60));
    let spec = spec();
    let probe = Probe {
        fs: &fake_fs,
        du: &fake_du,
        top_files: &fake_top,
        cgroup: &pod_cgroup,
        container_cgroup: &container_pressure,
        now_ns: NOW,
    };
    let stats = pod_stats(
        &runtime_pod(),
        Some(&spec),
        &ctx(None, &containers, false),
        &probe,
        &rates,
    )
    .unwrap();
    assert_eq!(
        stats.cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(777)
    );
    assert_eq!(stats.memory.as_ref().unwrap().working_set_bytes, Some(4000));
    assert_eq!(stats.process_stats.as_ref().unwrap().process_count, Some(4));
    assert!(stats.network.is_none());
    // A container's pressure is its own cgroup's; its CPU and memory stay the runtime's.
    let with_psi = |name: &str| {
        let c = stats.containers.iter().find(|c| c.name == name).unwrap();
        let cpu = c.cpu.as_ref().unwrap();
        (
            cpu.usage_core_nano_seconds,
            cpu.psi.as_ref().map(|p| p.some.total),
            c.memory
                .as_ref()
                .unwrap()
                .psi
                .as_ref()
                .map(|p| p.some.total),
            c.io.as_ref()
                .and_then(|io| io.psi.as_ref())
                .map(|p| p.some.total),
        )
    };
    assert_eq!(with_psi("web"), (Some(1000), Some(99), Some(99), Some(99)));
    assert_eq!(with_psi("side"), (Some(2000), None, None, None));

    // No cgroup either: the containers added up.
    let probe = Probe {
        cgroup: &no_cgroup,
        ..probe
    };
    let stats = pod_stats(
        &runtime_pod(),
        Some(&spec),
        &ctx(None, &containers, true),
        &probe,
        &rates,
    )
    .unwrap();
    assert_eq!(
        stats.cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(3000)
    );
    let mem = stats.memory.as_ref().unwrap();
    assert_eq!(
        (mem.working_set_bytes, mem.usage_bytes),
        (Some(700), Some(720))
    );
    // CPU and memory only: no filesystems, volumes or processes.
    assert!(
        stats
            .containers
            .iter()
            .all(|c| c.rootfs.is_none() && c.logs.is_none())
    );
    assert!(stats.volume_stats.is_empty() && stats.ephemeral_storage.is_none());
    assert!(stats.process_stats.is_none());
}

#[test]
fn a_container_without_samples_reports_zeros() {
    let rates = CpuRates::default();
    let c = pods::container_stats("web", NOW, "c1", None, NOW, &rates);
    assert_eq!(c.cpu.as_ref().unwrap().usage_core_nano_seconds, Some(0));
    assert_eq!(c.memory.as_ref().unwrap().working_set_bytes, Some(0));
    // Our own rate when the runtime gives none.
    let first = cri_container("c9", 1_000_000_000, 1, 1);
    let mut second = first.clone();
    if let Some(cpu) = second.cpu.as_mut() {
        cpu.timestamp = NOW + 1_000_000_000;
        cpu.usage_core_nano_seconds = u(1_250_000_000);
    }
    let a = pods::container_stats("x", NOW, "c9", Some(&first), NOW, &rates);
    assert_eq!(a.cpu.as_ref().unwrap().usage_nano_cores, None);
    let b = pods::container_stats("x", NOW, "c9", Some(&second), NOW, &rates);
    assert_eq!(b.cpu.as_ref().unwrap().usage_nano_cores, Some(250_000_000));
}

// ---------------------------------------------------------------------------------------------
// The provider end to end, on a fake runtime.

struct FakeRuntime {
    sandbox_stats: bool,
    image_fs_mountpoint: String,
}

impl StatsSource for FakeRuntime {
    fn list_pod_sandbox_stats(
        &self,
    ) -> BoxFuture<'_, Result<Option<Vec<cri::PodSandboxStats>>, StatsError>> {
        let stats = self.sandbox_stats.then(Vec::new);
        Box::pin(async move { Ok(stats) })
    }
    fn list_container_stats(&self) -> BoxFuture<'_, Result<Vec<cri::ContainerStats>, StatsError>> {
        Box::pin(async { Ok(vec![cri_container("c1", 1000, 300, 50)]) })
    }
    fn image_fs_info(&self) -> BoxFuture<'_, Result<cri::ImageFsInfoResponse, StatsError>> {
        let mountpoint = self.image_fs_mountpoint.clone();
        Box::pin(async move {
            Ok(cri::ImageFsInfoResponse {
                image_filesystems: vec![cri::FilesystemUsage {
                    timestamp: NOW,
                    fs_id: Some(cri::FilesystemIdentifier { mountpoint }),
                    used_bytes: u(12345),
                    inodes_used: u(67),
                }],
                container_filesystems: Vec::new(),
            })
        })
    }
}

fn provider(source: FakeRuntime, root: &Path, cgroups: &Path) -> Arc<StatsProvider> {
    Arc::new(StatsProvider::with_cgroupfs(
        Arc::new(source),
        NodeSettings {
            node_name: "node-a".into(),
            root_dir: root.to_path_buf(),
            pod_logs_dir: root.join("logs"),
            cgroup_root: "/k".into(),
            systemd_cgroups: false,
            memory_capacity: 10_000_000,
        },
        Hierarchy::at(cgroups, false),
    ))
}

#[tokio::test]
async fn the_summary_covers_node_runtime_and_pods() {
    let root = tempfile::tempdir().unwrap();
    let cgroups = tempfile::tempdir().unwrap();
    write(cgroups.path(), "cpuacct/k/kubepods/cpuacct.usage", "100\n");
    write(
        cgroups.path(),
        "memory/k/kubepods/memory.usage_in_bytes",
        "2000000\n",
    );
    write(
        cgroups.path(),
        "memory/k/kubepods/memory.stat",
        "total_inactive_file 1000000\n",
    );
    let source = FakeRuntime {
        sandbox_stats: false,
        image_fs_mountpoint: root.path().display().to_string(),
    };
    let p = provider(source, root.path(), cgroups.path());
    let mut pod = runtime_pod();
    pod.containers.retain(|c| c.id == "c1");
    let claim = crate::volume_manager::usage::VolumeUsage {
        uid: pod.uid.clone(),
        name: "data".into(),
        pvc: Some(("ns".into(), "claim".into())),
        capacity_bytes: 1000,
        available_bytes: 600,
        used_bytes: 400,
        inodes: 10,
        inodes_free: 7,
        inodes_used: 3,
    };
    let input = SummaryInput {
        runtime_pods: vec![pod],
        pods: vec![spec().into()],
        persistent_volumes: vec![claim],
    };
    let summary = p.summary(input.clone(), Scope::Full).await.unwrap();
    // The claim's volume, with its pvcRef, beside the pod's ephemeral ones.
    let pv = summary.pods[0]
        .volume_stats
        .iter()
        .find(|v| v.name == "data" && v.pvc_ref.is_some())
        .unwrap();
    assert_eq!(pv.pvc_ref.as_ref().unwrap().name, "claim");
    assert_eq!(
        (pv.fs.used_bytes, pv.fs.capacity_bytes, pv.fs.inodes_used),
        (Some(400), Some(1000), Some(3))
    );
    let node = &summary.node;
    assert_eq!(node.node_name, "node-a");
    let fs = node.fs.as_ref().unwrap();
    let info = host::fs_info(root.path()).unwrap();
    assert_eq!(fs.capacity_bytes, Some(info.capacity));
    assert_eq!(fs.inodes, Some(info.inodes));
    let image = node.runtime.as_ref().unwrap().image_fs.as_ref().unwrap();
    assert_eq!(
        (image.used_bytes, image.inodes_used),
        (Some(12345), Some(67))
    );
    assert_eq!(image.capacity_bytes, Some(info.capacity));
    // No container filesystem of its own: the image filesystem's figures.
    assert_eq!(
        node.runtime.as_ref().unwrap().container_fs.as_ref(),
        Some(image)
    );
    assert_eq!(p.dedicated_image_fs(), Some(false));
    let pods_container = node
        .system_containers
        .iter()
        .find(|c| c.name == SYSTEM_CONTAINER_PODS)
        .unwrap();
    let mem = pods_container.memory.as_ref().unwrap();
    assert_eq!(mem.working_set_bytes, Some(1_000_000));
    assert_eq!(mem.available_bytes, Some(9_000_000));
    assert!(node.rlimit.is_some() && node.memory.is_some());
    assert_eq!(summary.pods.len(), 1);
    assert_eq!(summary.pods[0].containers[0].name, "web");

    // CPU and memory only: no filesystems at all.
    let small = p.summary(input.clone(), Scope::CpuAndMemory).await.unwrap();
    assert!(
        small.node.fs.is_none() && small.node.runtime.is_none() && small.node.network.is_none()
    );
    assert!(small.pods[0].volume_stats.is_empty());
    // The node alone: filesystems but no pods.
    let node = p.summary(input, Scope::Node).await.unwrap();
    assert!(node.pods.is_empty() && node.node.fs.is_some() && node.node.runtime.is_some());
}

#[tokio::test]
async fn a_runtime_without_an_image_fs_fails_the_summary() {
    struct NoImageFs;
    impl StatsSource for NoImageFs {
        fn list_pod_sandbox_stats(
            &self,
        ) -> BoxFuture<'_, Result<Option<Vec<cri::PodSandboxStats>>, StatsError>> {
            Box::pin(async { Ok(Some(Vec::new())) })
        }
        fn list_container_stats(
            &self,
        ) -> BoxFuture<'_, Result<Vec<cri::ContainerStats>, StatsError>> {
            Box::pin(async { Ok(Vec::new()) })
        }
        fn image_fs_info(&self) -> BoxFuture<'_, Result<cri::ImageFsInfoResponse, StatsError>> {
            Box::pin(async { Ok(cri::ImageFsInfoResponse::default()) })
        }
    }
    let root = tempfile::tempdir().unwrap();
    let p = Arc::new(StatsProvider::with_cgroupfs(
        Arc::new(NoImageFs),
        NodeSettings {
            node_name: "n".into(),
            root_dir: root.path().into(),
            pod_logs_dir: root.path().into(),
            cgroup_root: "/".into(),
            systemd_cgroups: false,
            memory_capacity: 0,
        },
        Hierarchy::at(root.path(), false),
    ));
    let err = p
        .summary(SummaryInput::default(), Scope::Full)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to get imageFs stats: imageFs information is unavailable"
    );
    // CPU and memory alone do not need it.
    assert!(
        p.summary(SummaryInput::default(), Scope::CpuAndMemory)
            .await
            .is_ok()
    );
}

// ---------------------------------------------------------------------------------------------
// The endpoint.

struct FixedSummary(Option<Summary>);

impl SummarySource for FixedSummary {
    fn summary(&self, only: bool) -> BoxFuture<'_, Result<Summary, StatsError>> {
        let result = match &self.0 {
            Some(s) => {
                let mut s = s.clone();
                if only {
                    s.node.fs = None;
                }
                Ok(s)
            }
            None => Err(StatsError::NoImageFs),
        };
        Box::pin(async move { result })
    }
}

fn request(method: Method, path: &str, query: &str) -> ApiRequest {
    ApiRequest {
        method,
        path: path.into(),
        query: query.into(),
    }
}

async fn body_of(resp: hyper::Response<crate::server::Body>) -> (StatusCode, String) {
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn the_endpoint_answers_as_go_s_handler() {
    assert!(cpu_and_memory_only("only_cpu_and_memory=true"));
    assert!(!cpu_and_memory_only("only_cpu_and_memory=false"));
    assert!(!cpu_and_memory_only(
        "only_cpu_and_memory=true&only_cpu_and_memory=true"
    ));
    assert!(!cpu_and_memory_only(""));

    let sample: Summary = serde_json::from_str(GO_SAMPLE).unwrap();
    let fixed = FixedSummary(Some(sample));
    let (status, body) =
        body_of(respond(&fixed, &request(Method::GET, "/stats/summary", "")).await).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, GO_SAMPLE);
    let (status, body) = body_of(
        respond(
            &fixed,
            &request(Method::POST, "/stats/summary", "only_cpu_and_memory=true"),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v["node"].get("fs").is_none());
    let (status, _) =
        body_of(respond(&fixed, &request(Method::GET, "/stats/summary/x", "")).await).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) =
        body_of(respond(&fixed, &request(Method::DELETE, "/stats/summary", "")).await).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, body) = body_of(
        respond(
            &FixedSummary(None),
            &request(Method::GET, "/stats/summary", ""),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        body,
        "Internal Error: failed to get imageFs stats: imageFs information is unavailable\n"
    );
}

#[test]
fn pressure_goes_out_as_go_s_psi() {
    let psi = Psi {
        some: ferrolet_cgroups::usage::PsiLine {
            total: 1234,
            avg10: 1.5,
            avg60: 0.25,
            avg300: 0.0,
        },
        full: Default::default(),
    };
    let reading = CgroupReading {
        timestamp_ns: NOW,
        cpu_usage_ns: Some(1),
        memory: Some(MemoryUsage::default()),
        pressure: Pressure {
            cpu: Some(psi),
            memory: None,
            io: Some(psi),
        },
        ..Default::default()
    };
    let cpu = pods::cpu_from_cgroup(&reading, "k", &CpuRates::default()).unwrap();
    assert_eq!(
        serde_json::to_value(&cpu).unwrap()["psi"],
        serde_json::json!({
            "full": {"total": 0, "avg10": 0.0, "avg60": 0.0, "avg300": 0.0},
            "some": {"total": 1234, "avg10": 1.5, "avg60": 0.25, "avg300": 0.0}
        })
    );
    // No memory pressure read: no `psi` key at all.
    let memory = pods::memory_from_cgroup(&reading, None).unwrap();
    assert!(serde_json::to_value(&memory).unwrap().get("psi").is_none());
    let io = serde_json::to_value(pods::io_from_cgroup(&reading).unwrap()).unwrap();
    assert_eq!(io["psi"]["some"]["total"], 1234);
    assert_eq!(io["time"], "2024-05-01T10:00:00Z");
    assert_eq!(pods::io_from_cgroup(&CgroupReading::default()), None);
}
