#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ferrolet_proto::containerd::types::Metric;
use prost::Message;

use super::cgroupfs::read_sample;
use super::metrics::*;
use super::net::{parse_net_dev, to_cri};
use super::*;
use ferrolet_proto::cgroup_metrics::*;

fn metric(type_url: &str, value: Vec<u8>) -> Metric {
    Metric {
        timestamp: Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 5,
        }),
        id: "c1".into(),
        data: Some(prost_types::Any {
            type_url: type_url.into(),
            value,
        }),
    }
}

fn v1() -> V1Metrics {
    V1Metrics {
        pids: Some(PidsStat {
            current: 3,
            ..Default::default()
        }),
        cpu: Some(V1Cpu {
            usage: Some(V1CpuUsage {
                total: 123_456_789,
                ..Default::default()
            }),
            ..Default::default()
        }),
        memory: Some(V1Memory {
            total_rss: 4096,
            total_pg_fault: 77,
            total_pg_maj_fault: 2,
            total_inactive_file: 1000,
            usage: Some(MemoryEntry {
                limit: 16 << 20,
                usage: 5000,
                ..Default::default()
            }),
            swap: Some(MemoryEntry {
                limit: 32 << 20,
                usage: 5600,
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

#[test]
fn decodes_v1() {
    let m = metric(V1_TYPE, v1().encode_to_vec());
    let s = decode(&m).unwrap();
    assert_eq!(
        s,
        Sample {
            timestamp_ns: 1_700_000_000_000_000_005,
            cpu_usage_ns: 123_456_789,
            memory_usage: 5000,
            memory_limit: Some(16 << 20),
            working_set: 4000,
            rss: 4096,
            page_faults: 77,
            major_page_faults: 2,
            swap_usage: Some(600),
        }
    );
    assert_eq!(process_count(&m), Some(3));
}

#[test]
fn v1_unlimited_no_swap_accounting_and_big_inactive_file() {
    let mut m = v1();
    let memory = m.memory.as_mut().unwrap();
    memory.usage = Some(MemoryEntry {
        limit: 9_223_372_036_854_771_712, // the kernel's "unlimited"
        usage: 500,
        ..Default::default()
    });
    memory.swap = None;
    let s = decode(&metric(V1_TYPE, m.encode_to_vec())).unwrap();
    assert_eq!(s.memory_limit, None);
    assert_eq!(s.working_set, 0, "inactive_file above usage clamps to 0");
    assert_eq!(s.swap_usage, None);
}

#[test]
fn decodes_v2_with_prefixed_url() {
    let m = V2Metrics {
        pids: Some(PidsStat {
            current: 1,
            ..Default::default()
        }),
        cpu: Some(V2Cpu {
            usage_usec: 2500,
            ..Default::default()
        }),
        memory: Some(V2Memory {
            anon: 300,
            inactive_file: 200,
            pgfault: 10,
            pgmajfault: 1,
            usage: 1200,
            usage_limit: u64::MAX,
            swap_usage: 64,
            ..Default::default()
        }),
        ..Default::default()
    };
    let m = metric(
        "type.googleapis.com/io.containerd.cgroups.v2.Metrics",
        m.encode_to_vec(),
    );
    let s = decode(&m).unwrap();
    assert_eq!(s.cpu_usage_ns, 2_500_000);
    assert_eq!(s.memory_usage, 1200);
    assert_eq!(s.memory_limit, None);
    assert_eq!(s.working_set, 1000);
    assert_eq!(s.rss, 300);
    assert_eq!((s.page_faults, s.major_page_faults), (10, 1));
    assert_eq!(s.swap_usage, Some(64));
    assert_eq!(process_count(&m), Some(1));
}

#[test]
fn decode_errors() {
    let err = decode(&metric("io.containerd.windows.Stats", vec![])).unwrap_err();
    assert!(
        err.to_string().contains("io.containerd.windows.Stats"),
        "{err}"
    );
    let err = decode(&metric(V1_TYPE, vec![0xff, 0xff])).unwrap_err();
    assert!(matches!(err, StatsError::Decode { .. }), "{err}");
    let mut m = metric(V1_TYPE, vec![]);
    m.data = None;
    assert!(matches!(decode(&m), Err(StatsError::NoData { .. })));
    assert_eq!(process_count(&m), None);
}

#[test]
fn nano_cores_from_two_samples() {
    let rates = CpuRates::default();
    let at = |ts: i64, cpu: u64| Sample {
        timestamp_ns: ts,
        cpu_usage_ns: cpu,
        ..Default::default()
    };
    assert_eq!(rates.nano_cores("a", &at(1_000_000_000, 0)), None);
    // Half a core over two seconds.
    assert_eq!(
        rates.nano_cores("a", &at(3_000_000_000, 1_000_000_000)),
        Some(500_000_000)
    );
    // Same timestamp again: no rate, baseline kept.
    assert_eq!(
        rates.nano_cores("a", &at(3_000_000_000, 1_000_000_000)),
        None
    );
    assert_eq!(
        rates.nano_cores("a", &at(4_000_000_000, 3_000_000_000)),
        Some(2_000_000_000)
    );
    // Counter went backwards: no rate, then measured from the new value.
    assert_eq!(rates.nano_cores("a", &at(5_000_000_000, 10)), None);
    assert_eq!(
        rates.nano_cores("a", &at(6_000_000_000, 100_000_010)),
        Some(100_000_000)
    );
    // Other ids are independent; forget starts over.
    assert_eq!(rates.nano_cores("b", &at(6_000_000_000, 5)), None);
    rates.forget("a");
    assert_eq!(rates.nano_cores("a", &at(7_000_000_000, 200_000_000)), None);
}

#[test]
fn container_stats_maps_sample() {
    let sample = decode(&metric(V1_TYPE, v1().encode_to_vec())).unwrap();
    let attributes = cri::ContainerAttributes {
        id: "c1".into(),
        ..Default::default()
    };
    let layer = cri::FilesystemUsage {
        timestamp: 9,
        ..Default::default()
    };
    let cs = container_stats(
        attributes.clone(),
        Some(&sample),
        Some(42),
        Some(layer.clone()),
    );
    assert_eq!(cs.attributes.as_ref().unwrap().id, "c1");
    let cpu = cs.cpu.unwrap();
    assert_eq!(cpu.timestamp, sample.timestamp_ns);
    assert_eq!(cpu.usage_core_nano_seconds.unwrap().value, 123_456_789);
    assert_eq!(cpu.usage_nano_cores.unwrap().value, 42);
    let mem = cs.memory.unwrap();
    assert_eq!(mem.timestamp, sample.timestamp_ns);
    assert_eq!(mem.working_set_bytes.unwrap().value, 4000);
    assert_eq!(mem.available_bytes.unwrap().value, (16 << 20) - 4000);
    assert_eq!(mem.usage_bytes.unwrap().value, 5000);
    assert_eq!(mem.rss_bytes.unwrap().value, 4096);
    assert_eq!(mem.page_faults.unwrap().value, 77);
    assert_eq!(mem.major_page_faults.unwrap().value, 2);
    assert_eq!(cs.swap.unwrap().swap_usage_bytes.unwrap().value, 600);
    assert_eq!(cs.writable_layer, Some(layer));

    let unlimited = Sample {
        memory_limit: None,
        ..sample
    };
    let cs = container_stats(attributes.clone(), Some(&unlimited), None, None);
    assert_eq!(cs.memory.unwrap().available_bytes.unwrap().value, 0);
    assert_eq!(cs.cpu.unwrap().usage_nano_cores, None);

    let cs = container_stats(attributes, None, None, None);
    assert!(cs.cpu.is_none() && cs.memory.is_none() && cs.swap.is_none());
}

#[test]
fn pod_sandbox_stats_assembles() {
    let sample = Sample {
        timestamp_ns: 77,
        cpu_usage_ns: 5,
        memory_usage: 10,
        working_set: 8,
        memory_limit: Some(100),
        ..Default::default()
    };
    let child = container_stats(cri::ContainerAttributes::default(), None, None, None);
    let network = to_cri(parse_net_dev(FIXTURE), 77);
    let ps = pod_sandbox_stats(
        cri::PodSandboxAttributes {
            id: "p1".into(),
            ..Default::default()
        },
        Some(&sample),
        Some(3),
        Some(network.clone()),
        Some(4),
        vec![child.clone()],
    );
    assert_eq!(ps.attributes.unwrap().id, "p1");
    let linux = ps.linux.unwrap();
    assert_eq!(linux.cpu.unwrap().usage_nano_cores.unwrap().value, 3);
    assert_eq!(linux.memory.unwrap().available_bytes.unwrap().value, 92);
    assert_eq!(linux.network, Some(network));
    let process = linux.process.unwrap();
    assert_eq!(
        (process.timestamp, process.process_count.unwrap().value),
        (77, 4)
    );
    assert_eq!(linux.containers, vec![child]);
}

const FIXTURE: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1234      10    0    0    0     0          0         0     1234      10    0    0    0     0       0          0
  eth1:     100       2    0    0    0     0          0         0      200       3    0    0    0     0       0          0
  eth0:2160877480   10564    7    0    0     0          0         0   686321    8167    9    0    0     0       0          0
";

#[test]
fn parses_net_dev() {
    let rows = parse_net_dev(FIXTURE);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[2].name, "eth0");
    assert_eq!(
        (
            rows[2].rx_bytes,
            rows[2].rx_errors,
            rows[2].tx_bytes,
            rows[2].tx_errors
        ),
        (2_160_877_480, 7, 686_321, 9)
    );
    let usage = to_cri(rows, 5);
    assert_eq!(usage.timestamp, 5);
    let names: Vec<_> = usage.interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["eth1", "eth0"], "loopback is left out");
    let default = usage.default_interface.unwrap();
    assert_eq!(default.name, "eth0");
    assert_eq!(default.rx_bytes.unwrap().value, 2_160_877_480);

    // Without eth0 the first interface is the default; with none there is no default.
    let usage = to_cri(parse_net_dev(&FIXTURE.replace("eth0", "net9")), 5);
    assert_eq!(usage.default_interface.unwrap().name, "eth1");
    assert_eq!(
        to_cri(parse_net_dev("garbage\n  x: 1 2\n"), 5).default_interface,
        None
    );
}

#[tokio::test]
async fn reads_this_hosts_net_dev() {
    // The live file must parse the same way (it always has a loopback row).
    let text = std::fs::read_to_string("/proc/self/net/dev").unwrap();
    assert!(parse_net_dev(&text).iter().any(|r| r.name == "lo"));
    let usage = network_usage(std::process::id(), 1).await.unwrap();
    assert_eq!(usage.timestamp, 1);
    assert!(network_usage(u32::MAX, 1).await.is_none());
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn pod_samples_come_from_the_cgroup_files() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    write(r, "cpuacct/kubepods/pod1/cpuacct.usage", "4000457548170\n");
    write(r, "memory/kubepods/pod1/memory.usage_in_bytes", "8192\n");
    write(
        r,
        "memory/kubepods/pod1/memory.limit_in_bytes",
        "9223372036854771712\n",
    );
    write(
        r,
        "memory/kubepods/pod1/memory.stat",
        "cache 100\nrss 50\ntotal_rss 4096\ntotal_pgfault 9\ntotal_pgmajfault 1\ntotal_inactive_file 192\n",
    );
    write(
        r,
        "memory/kubepods/pod1/memory.memsw.usage_in_bytes",
        "10000\n",
    );
    let s = read_sample(r, "/kubepods/pod1", 11).unwrap();
    assert_eq!(
        s,
        Sample {
            timestamp_ns: 11,
            cpu_usage_ns: 4_000_457_548_170,
            memory_usage: 8192,
            memory_limit: None,
            working_set: 8000,
            rss: 4096,
            page_faults: 9,
            major_page_faults: 1,
            swap_usage: Some(1808),
        }
    );
    assert!(matches!(
        read_sample(r, "/kubepods/../../etc", 0),
        Err(StatsError::Cgroup(_))
    ));
    let err = read_sample(r, "/nope", 0).unwrap_err();
    assert!(matches!(err, StatsError::NoCounters { .. }), "{err}");
    write(r, "memory/kubepods/pod1/memory.usage_in_bytes", "lots\n");
    let err = read_sample(r, "/kubepods/pod1", 0).unwrap_err();
    assert!(err.to_string().contains("memory.usage_in_bytes"), "{err}");

    let v2 = tempfile::tempdir().unwrap();
    let r = v2.path();
    write(r, "cgroup.controllers", "cpu memory pids\n");
    write(r, "kubepods/pod1/cpu.stat", "usage_usec 1500\n");
    write(r, "kubepods/pod1/memory.current", "1048576\n");
    write(r, "kubepods/pod1/memory.max", "max\n");
    write(
        r,
        "kubepods/pod1/memory.stat",
        "anon 4096\ninactive_file 1024\n",
    );
    let s = read_sample(r, "/kubepods/pod1", 0).unwrap();
    assert_eq!(
        (s.cpu_usage_ns, s.working_set, s.memory_limit, s.swap_usage),
        (1_500_000, 1_048_576 - 1024, None, Some(0))
    );
}
