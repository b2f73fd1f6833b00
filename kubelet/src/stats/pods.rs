//! Pod and container stats as the Go kubelet's CRI stats provider builds them: one entry per
//! pod (its ready sandbox, else its newest), its running containers, CPU, memory and
//! processes from the pod's cgroup (else the runtime's pod sandbox stats, else the sum of its
//! containers), writable layers and logs, emptyDir volumes and the pod's ephemeral storage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferrolet_proto::cri;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::cgroup::{CgroupReading, Psi};
use super::host::{DiskUsage, FsInfo};
use super::rates::CpuRates;
use super::types::{
    ContainerStats, CpuStats, FsStats, InterfaceStats, IoStats, MemoryStats, NetworkStats,
    PodReference, PodStats, ProcessStats, PsiData, PsiStats, VolumeStats,
};
use crate::types::{Pod, RuntimePod, RuntimeSandbox};

/// The filesystem and cgroup readings pod stats need; the provider reads the host, tests
/// pass fakes.
pub struct Probe<'a> {
    /// statvfs of the filesystem holding a path.
    pub fs: &'a dyn Fn(&Path) -> Option<FsInfo>,
    /// du of a path.
    pub du: &'a dyn Fn(&Path) -> Option<DiskUsage>,
    /// Only the regular files directly in a dir.
    pub top_files: &'a dyn Fn(&Path) -> DiskUsage,
    /// A cgroup's counters.
    pub cgroup: &'a dyn Fn(&str) -> Option<CgroupReading>,
    /// The counters of a container's cgroup, found below its pod's cgroup by the container's
    /// id (cgroup v2 only: what is taken from them is pressure, which v1 has not).
    pub container_cgroup: &'a dyn Fn(&str, &str) -> Option<CgroupReading>,
    /// Now, nanoseconds since the epoch.
    pub now_ns: i64,
}

/// Where a pod's files are and what the runtime reported, for one summary.
pub struct PodContext<'a> {
    /// The kubelet's root dir (`pods/<uid>/...`).
    pub root_dir: &'a Path,
    /// `podLogsDir`.
    pub pod_logs_dir: &'a Path,
    /// `cgroupRoot`.
    pub cgroup_root: &'a str,
    /// The systemd cgroup driver lays the pods' cgroups out.
    pub systemd_cgroups: bool,
    /// The runtime's pod sandbox stats by sandbox id; `None` when it does not implement them.
    pub sandbox_stats: Option<&'a BTreeMap<String, cri::PodSandboxStats>>,
    /// The runtime's container stats by container id (used without sandbox stats).
    pub container_stats: &'a BTreeMap<String, cri::ContainerStats>,
    /// The kubelet's root filesystem (capacity of logs, volumes, ephemeral storage).
    pub root_fs: Option<FsInfo>,
    /// The image filesystem (capacity of writable layers whose fs the runtime leaves unnamed).
    pub image_fs: Option<FsInfo>,
    /// Only CPU and memory (`only_cpu_and_memory=true`).
    pub cpu_and_memory_only: bool,
}

/// An API time from nanoseconds since the epoch.
pub fn time_from_ns(ns: i64) -> Time {
    Time(jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or_default())
}

/// The sandbox a pod's stats come from: its newest ready one, else its newest.
pub fn stats_sandbox(pod: &RuntimePod) -> Option<&RuntimeSandbox> {
    pod.sandboxes
        .iter()
        .filter(|s| s.ready)
        .max_by_key(|s| s.created_at)
        .or_else(|| pod.sandboxes.iter().max_by_key(|s| s.created_at))
}

/// A pod's stats entry; `None` when the runtime has no sandbox for it.
pub fn pod_stats(
    runtime: &RuntimePod,
    spec: Option<&Pod>,
    ctx: &PodContext<'_>,
    probe: &Probe<'_>,
    rates: &CpuRates,
) -> Option<PodStats> {
    let sandbox = stats_sandbox(runtime)?;
    let sandbox_stats = ctx
        .sandbox_stats
        .and_then(|m| m.get(&sandbox.id))
        .and_then(|s| s.linux.as_ref());
    let from_sandbox: BTreeMap<&str, &cri::ContainerStats> = sandbox_stats
        .map(|l| {
            l.containers
                .iter()
                .filter_map(|c| Some((c.attributes.as_ref()?.id.as_str(), c)))
                .collect()
        })
        .unwrap_or_default();
    let pod_log_dir = ctx.pod_logs_dir.join(format!(
        "{}_{}_{}",
        runtime.namespace, runtime.name, runtime.uid
    ));
    let mut running: Vec<_> = runtime
        .containers
        .iter()
        .filter(|c| c.sandbox_id == sandbox.id && c.state == cri::ContainerState::ContainerRunning)
        .collect();
    running.sort_by(|a, b| a.name.cmp(&b.name).then(a.created_at.cmp(&b.created_at)));
    let pod_cgroup = spec
        .map(|p| crate::podspec::sandbox::cgroup_parent(p, ctx.cgroup_root, ctx.systemd_cgroups));
    let mut containers = Vec::new();
    let mut raw_containers = Vec::new();
    for c in running {
        let raw = from_sandbox
            .get(c.id.as_str())
            .copied()
            .or_else(|| ctx.container_stats.get(&c.id));
        raw_containers.extend(raw);
        let mut stats = container_stats(&c.name, c.created_at, &c.id, raw, probe.now_ns, rates);
        // CRI 1.32 carries no pressure: Go 1.34 takes a container's from cadvisor, that is
        // from its cgroup.
        if let Some(r) = pod_cgroup
            .as_deref()
            .and_then(|cg| (probe.container_cgroup)(cg, &c.id))
        {
            add_pressure(&mut stats, &r);
        }
        if !ctx.cpu_and_memory_only {
            stats.rootfs = raw
                .and_then(|r| r.writable_layer.as_ref())
                .map(|w| writable_layer_stats(w, ctx, probe));
            stats.logs = Some(log_stats(&pod_log_dir.join(&c.name), ctx, probe));
        }
        containers.push(stats);
    }
    // As Go's default (CRI) stats provider: the pod's CPU and memory are its cgroup's (the
    // container manager's pod cgroup, which holds the sandbox and every container); the
    // runtime's pod sandbox stats only where that cgroup cannot be read (`cgroupsPerQOS:
    // false`), then the containers added up.
    let reading = pod_cgroup.as_deref().and_then(|cg| (probe.cgroup)(cg));
    let key = format!("pod/{}", runtime.uid);
    let cpu = reading
        .as_ref()
        .and_then(|r| cpu_from_cgroup(r, &key, rates))
        .or_else(|| {
            sandbox_stats
                .and_then(|l| l.cpu.as_ref())
                .map(|c| cpu_from_cri(c, &key, rates))
        })
        .or_else(|| sum_cpu(&containers));
    let memory = reading
        .as_ref()
        .and_then(|r| memory_from_cgroup(r, None))
        .or_else(|| {
            sandbox_stats
                .and_then(|l| l.memory.as_ref())
                .map(memory_from_cri)
        })
        .or_else(|| sum_memory(&containers));
    let mut pod = PodStats {
        pod_ref: PodReference {
            name: runtime.name.clone(),
            namespace: runtime.namespace.clone(),
            uid: runtime.uid.clone(),
        },
        start_time: time_from_ns(sandbox.created_at),
        containers,
        cpu,
        memory,
        io: reading.as_ref().and_then(io_from_cgroup),
        network: None,
        volume_stats: Vec::new(),
        ephemeral_storage: None,
        process_stats: None,
    };
    if ctx.cpu_and_memory_only {
        return Some(pod);
    }
    pod.network = sandbox_stats
        .and_then(|l| l.network.as_ref())
        .map(network_from_cri);
    let processes = reading.as_ref().and_then(|r| r.pids).or_else(|| {
        sandbox_stats
            .and_then(|l| l.process.as_ref())
            .and_then(|p| p.process_count.as_ref())
            .map(|v| v.value)
    });
    pod.process_stats = processes.map(|n| ProcessStats {
        process_count: Some(n),
    });
    let volumes = spec
        .map(|p| volume_stats(p, ctx, probe))
        .unwrap_or_default();
    pod.ephemeral_storage = Some(ephemeral_storage(
        &pod,
        &volumes,
        spec,
        ctx,
        probe,
        &pod_log_dir,
    ));
    pod.volume_stats = volumes.into_iter().map(|(_, v)| v).collect();
    Some(pod)
}

/// A container's CPU and memory from the runtime (zeros when it reported none yet, as Go).
pub fn container_stats(
    name: &str,
    created_at: i64,
    id: &str,
    raw: Option<&cri::ContainerStats>,
    now_ns: i64,
    rates: &CpuRates,
) -> ContainerStats {
    let now = time_from_ns(now_ns);
    let cpu = match raw.and_then(|r| r.cpu.as_ref()) {
        Some(c) => cpu_from_cri(c, id, rates),
        None => CpuStats {
            time: now.clone(),
            usage_nano_cores: Some(0),
            usage_core_nano_seconds: Some(0),
            psi: None,
        },
    };
    let memory = match raw.and_then(|r| r.memory.as_ref()) {
        Some(m) => memory_from_cri(m),
        None => MemoryStats {
            time: now,
            available_bytes: None,
            usage_bytes: None,
            working_set_bytes: Some(0),
            rss_bytes: None,
            page_faults: None,
            major_page_faults: None,
            psi: None,
        },
    };
    ContainerStats {
        name: name.to_string(),
        start_time: time_from_ns(created_at),
        cpu: Some(cpu),
        memory: Some(memory),
        io: None,
        rootfs: None,
        logs: None,
    }
}

/// CPU from a CRI sample; the rate is the runtime's when it gives one, else ours.
pub fn cpu_from_cri(c: &cri::CpuUsage, key: &str, rates: &CpuRates) -> CpuStats {
    let usage = c.usage_core_nano_seconds.as_ref().map(|v| v.value);
    let ours = usage.and_then(|u| rates.rate(key, c.timestamp, u));
    CpuStats {
        time: time_from_ns(c.timestamp),
        usage_nano_cores: c.usage_nano_cores.as_ref().map(|v| v.value).or(ours),
        usage_core_nano_seconds: usage,
        psi: None,
    }
}

/// Memory from a CRI sample, every field the runtime set.
pub fn memory_from_cri(m: &cri::MemoryUsage) -> MemoryStats {
    let v = |x: &Option<cri::UInt64Value>| x.as_ref().map(|v| v.value);
    MemoryStats {
        time: time_from_ns(m.timestamp),
        available_bytes: v(&m.available_bytes),
        usage_bytes: v(&m.usage_bytes),
        working_set_bytes: v(&m.working_set_bytes),
        rss_bytes: v(&m.rss_bytes),
        page_faults: v(&m.page_faults),
        major_page_faults: v(&m.major_page_faults),
        psi: None,
    }
}

/// CPU of a cgroup reading, with the rate from the previous reading of `key`.
pub fn cpu_from_cgroup(r: &CgroupReading, key: &str, rates: &CpuRates) -> Option<CpuStats> {
    let usage = r.cpu_usage_ns?;
    Some(CpuStats {
        time: time_from_ns(r.timestamp_ns),
        usage_nano_cores: rates.rate(key, r.timestamp_ns, usage),
        usage_core_nano_seconds: Some(usage),
        psi: r.pressure.cpu.map(psi_stats),
    })
}

/// IO of a cgroup reading: its pressure, when the kernel reports it.
pub fn io_from_cgroup(r: &CgroupReading) -> Option<IoStats> {
    let psi = r.pressure.io?;
    Some(IoStats {
        time: time_from_ns(r.timestamp_ns),
        psi: Some(psi_stats(psi)),
    })
}

/// A container's pressure, from a reading of its cgroup.
fn add_pressure(stats: &mut ContainerStats, r: &CgroupReading) {
    if let Some(cpu) = stats.cpu.as_mut() {
        cpu.psi = r.pressure.cpu.map(psi_stats);
    }
    if let Some(memory) = stats.memory.as_mut() {
        memory.psi = r.pressure.memory.map(psi_stats);
    }
    stats.io = io_from_cgroup(r);
}

fn psi_stats(p: Psi) -> PsiStats {
    let data = |l: ferrolet_cgroups::usage::PsiLine| PsiData {
        total: l.total,
        avg10: l.avg10,
        avg60: l.avg60,
        avg300: l.avg300,
    };
    PsiStats {
        full: data(p.full),
        some: data(p.some),
    }
}

/// Memory of a cgroup reading; `availableBytes` is the limit (or `capacity` for an unlimited
/// cgroup, when given) less the working set.
pub fn memory_from_cgroup(r: &CgroupReading, capacity: Option<u64>) -> Option<MemoryStats> {
    let m = r.memory?;
    Some(MemoryStats {
        time: time_from_ns(r.timestamp_ns),
        available_bytes: m
            .limit
            .or(capacity)
            .map(|l| l.saturating_sub(m.working_set)),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: Some(m.rss),
        page_faults: Some(m.page_faults),
        major_page_faults: Some(m.major_page_faults),
        psi: r.pressure.memory.map(psi_stats),
    })
}

/// The containers' CPU added up (no containers: nothing).
fn sum_cpu(containers: &[ContainerStats]) -> Option<CpuStats> {
    let cpus: Vec<&CpuStats> = containers.iter().filter_map(|c| c.cpu.as_ref()).collect();
    let time = cpus.iter().map(|c| c.time.clone()).max()?;
    let sum = |f: fn(&CpuStats) -> Option<u64>| -> Option<u64> {
        cpus.iter()
            .try_fold(0u64, |acc, c| Some(acc.saturating_add(f(c)?)))
    };
    Some(CpuStats {
        time,
        usage_nano_cores: sum(|c| c.usage_nano_cores),
        usage_core_nano_seconds: sum(|c| c.usage_core_nano_seconds),
        psi: None,
    })
}

/// The containers' memory added up; `availableBytes` only when every container has one.
fn sum_memory(containers: &[ContainerStats]) -> Option<MemoryStats> {
    let mems: Vec<&MemoryStats> = containers
        .iter()
        .filter_map(|c| c.memory.as_ref())
        .collect();
    let time = mems.iter().map(|m| m.time.clone()).max()?;
    let sum = |f: fn(&MemoryStats) -> Option<u64>| -> Option<u64> {
        mems.iter()
            .try_fold(0u64, |acc, m| Some(acc.saturating_add(f(m)?)))
    };
    Some(MemoryStats {
        time,
        available_bytes: sum(|m| m.available_bytes),
        usage_bytes: sum(|m| m.usage_bytes),
        working_set_bytes: sum(|m| m.working_set_bytes),
        rss_bytes: sum(|m| m.rss_bytes),
        page_faults: sum(|m| m.page_faults),
        major_page_faults: sum(|m| m.major_page_faults),
        psi: None,
    })
}

/// A CRI interface's counters.
fn interface_from_cri(i: &cri::NetworkInterfaceUsage) -> InterfaceStats {
    let v = |x: &Option<cri::UInt64Value>| x.as_ref().map(|v| v.value);
    InterfaceStats {
        name: i.name.clone(),
        rx_bytes: v(&i.rx_bytes),
        rx_errors: v(&i.rx_errors),
        tx_bytes: v(&i.tx_bytes),
        tx_errors: v(&i.tx_errors),
    }
}

/// A pod's network from its sandbox stats.
pub fn network_from_cri(n: &cri::NetworkUsage) -> NetworkStats {
    NetworkStats {
        time: time_from_ns(n.timestamp),
        default_interface: n
            .default_interface
            .as_ref()
            .map(interface_from_cri)
            .unwrap_or_default(),
        interfaces: n.interfaces.iter().map(interface_from_cri).collect(),
    }
}

/// Capacity fields of a filesystem.
fn with_capacity(mut fs: FsStats, info: Option<FsInfo>) -> FsStats {
    if let Some(info) = info {
        fs.available_bytes = Some(info.available);
        fs.capacity_bytes = Some(info.capacity);
        fs.inodes_free = Some(info.inodes_free);
        fs.inodes = Some(info.inodes);
    }
    fs
}

/// A writable layer: the runtime's usage on its filesystem's capacity.
fn writable_layer_stats(
    w: &cri::FilesystemUsage,
    ctx: &PodContext<'_>,
    probe: &Probe<'_>,
) -> FsStats {
    let mountpoint = w
        .fs_id
        .as_ref()
        .map(|f| f.mountpoint.as_str())
        .filter(|m| !m.is_empty());
    let info = match mountpoint {
        Some(m) => (probe.fs)(Path::new(m)).or(ctx.image_fs),
        None => ctx.image_fs,
    };
    let mut fs = FsStats::empty(time_from_ns(if w.timestamp > 0 {
        w.timestamp
    } else {
        probe.now_ns
    }));
    fs.used_bytes = Some(w.used_bytes.as_ref().map_or(0, |v| v.value));
    fs.inodes_used = w.inodes_used.as_ref().map(|v| v.value);
    with_capacity(fs, info)
}

/// A container's log dir: its files on the root filesystem.
fn log_stats(dir: &Path, ctx: &PodContext<'_>, probe: &Probe<'_>) -> FsStats {
    let usage = (probe.du)(dir).unwrap_or_default();
    let mut fs = FsStats::empty(time_from_ns(probe.now_ns));
    fs.used_bytes = Some(usage.bytes);
    fs.inodes_used = Some(usage.inodes);
    with_capacity(fs, ctx.root_fs)
}

/// A pod's emptyDir volumes (the only kind with a usage to report here), each with whether
/// it is local ephemeral storage (on disk, not `medium: Memory`).
fn volume_stats(pod: &Pod, ctx: &PodContext<'_>, probe: &Probe<'_>) -> Vec<(bool, VolumeStats)> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let dir = crate::volume::pod_dir(ctx.root_dir, uid)
        .join("volumes")
        .join(crate::volume::EMPTY_DIR_PLUGIN);
    let mut out = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let Some(empty_dir) = &v.empty_dir else {
            continue;
        };
        let path: PathBuf = dir.join(&v.name);
        let usage = (probe.du)(&path).unwrap_or_default();
        let mut fs = FsStats::empty(time_from_ns(probe.now_ns));
        fs.used_bytes = Some(usage.bytes);
        fs.inodes_used = Some(usage.inodes);
        let on_disk = empty_dir.medium.as_deref().unwrap_or_default() != "Memory";
        out.push((
            on_disk,
            VolumeStats {
                fs: with_capacity(fs, (probe.fs)(&path)),
                name: v.name.clone(),
                pvc_ref: None,
            },
        ));
    }
    out
}

/// A persistent volume's entry (Go's volume stats with a `pvcRef`; not ephemeral storage).
pub fn persistent_volume_stats(
    u: &crate::volume_manager::usage::VolumeUsage,
    now_ns: i64,
) -> VolumeStats {
    let mut fs = FsStats::empty(time_from_ns(now_ns));
    fs.capacity_bytes = Some(u.capacity_bytes);
    fs.available_bytes = Some(u.available_bytes);
    fs.used_bytes = Some(u.used_bytes);
    fs.inodes = Some(u.inodes);
    fs.inodes_free = Some(u.inodes_free);
    fs.inodes_used = Some(u.inodes_used);
    VolumeStats {
        fs,
        name: u.name.clone(),
        pvc_ref: u
            .pvc
            .as_ref()
            .map(|(namespace, name)| super::types::PvcReference {
                name: name.clone(),
                namespace: namespace.clone(),
            }),
    }
}

/// The pod's ephemeral storage, as Go's `calcEphemeralStorage`: writable layers, container
/// logs, on-disk emptyDirs, the pod's own log files and its `etc-hosts`, on the root
/// filesystem's capacity.
fn ephemeral_storage(
    pod: &PodStats,
    volumes: &[(bool, VolumeStats)],
    spec: Option<&Pod>,
    ctx: &PodContext<'_>,
    probe: &Probe<'_>,
    pod_log_dir: &Path,
) -> FsStats {
    let (mut bytes, mut inodes) = (0u64, 0u64);
    let mut add = |fs: Option<&FsStats>| {
        if let Some(fs) = fs {
            bytes += fs.used_bytes.unwrap_or(0);
            inodes += fs.inodes_used.unwrap_or(0);
        }
    };
    for c in &pod.containers {
        add(c.rootfs.as_ref());
        add(c.logs.as_ref());
    }
    for (on_disk, v) in volumes {
        if *on_disk {
            add(Some(&v.fs));
        }
    }
    let pod_logs = (probe.top_files)(pod_log_dir);
    let etc_hosts = spec
        .and_then(|p| p.metadata.uid.as_deref())
        .map(|uid| crate::volume::pod_dir(ctx.root_dir, uid).join("etc-hosts"))
        .and_then(|p| (probe.du)(&p))
        .unwrap_or_default();
    bytes += pod_logs.bytes + etc_hosts.bytes;
    inodes += pod_logs.inodes + etc_hosts.inodes;
    let mut fs = FsStats::empty(time_from_ns(probe.now_ns));
    fs.used_bytes = Some(bytes);
    fs.inodes_used = Some(inodes);
    with_capacity(fs, ctx.root_fs)
}
