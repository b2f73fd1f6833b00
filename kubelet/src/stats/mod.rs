//! The Summary API (`/stats/summary`): node and pod resource usage in the Go kubelet's
//! `stats/v1alpha1` shape, from CRI (`ListPodSandboxStats`, `ListContainerStats`,
//! `ImageFsInfo`) and the host (`/proc`, cgroupfs, statvfs, du), as the Go kubelet's
//! cadvisor-less CRI stats provider gathers it.
//!
//! - [`types`]: the API types; [`pods`]: pod and container entries.
//! - [`cgroup`]: cgroup counters (v1 and v2); [`host`]: node facts; [`rates`]: CPU rates.
//! - [`http`]: the `/stats/summary` handler.
//!
//! The eviction manager reads the same summary for its signals.

pub mod cgroup;
pub mod host;
pub mod pods;
pub mod rates;
pub mod types;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ferrolet_proto::cri;
use futures::future::BoxFuture;

use self::cgroup::{Hierarchy, cgroup_of_process};
use self::host::{DiskUsage, FsInfo};
use self::pods::{PodContext, Probe, time_from_ns};
use self::rates::CpuRates;
use self::types::{
    ContainerStats, FsStats, NetworkStats, NodeStats, RlimitStats, RuntimeStats,
    SYSTEM_CONTAINER_KUBELET, SYSTEM_CONTAINER_PODS, Summary,
};
use crate::cri::Cri;
use crate::types::{Pod, RuntimePod};

/// How long a directory's measured usage is reused: walking trees is the costly part of a
/// summary (the Go kubelet re-measures volumes once a minute).
const DU_MAX_AGE: Duration = Duration::from_secs(10);

/// Why a summary could not be made.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// A CRI call failed.
    #[error("{call}: {source}")]
    Cri {
        /// The call.
        call: &'static str,
        /// Why.
        #[source]
        source: crate::cri::CriError,
    },
    /// The runtime reports no image filesystem.
    #[error("failed to get imageFs stats: imageFs information is unavailable")]
    NoImageFs,
    /// The blocking part panicked or was cancelled.
    #[error("collecting host stats: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// What the summary asks of the runtime; [`Cri`] in the kubelet, fakes in tests.
pub trait StatsSource: Send + Sync {
    /// Every pod sandbox's stats; `None` when the runtime does not implement the call.
    fn list_pod_sandbox_stats(
        &self,
    ) -> BoxFuture<'_, Result<Option<Vec<cri::PodSandboxStats>>, StatsError>>;
    /// Every container's stats.
    fn list_container_stats(&self) -> BoxFuture<'_, Result<Vec<cri::ContainerStats>, StatsError>>;
    /// The image (and container) filesystems.
    fn image_fs_info(&self) -> BoxFuture<'_, Result<cri::ImageFsInfoResponse, StatsError>>;
}

/// The CRI client with a timeout on each stats call.
pub struct CriStatsSource {
    cri: Cri,
    timeout: Duration,
}

impl CriStatsSource {
    /// Stats calls on `cri`, each bounded by `timeout` (`runtimeRequestTimeout`).
    pub fn new(cri: Cri, timeout: Duration) -> Self {
        Self { cri, timeout }
    }
}

async fn bounded<T>(
    call: &'static str,
    timeout: Duration,
    fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, StatsError> {
    let source = match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(resp)) => return Ok(resp.into_inner()),
        Ok(Err(status)) => crate::cri::CriError::Call {
            method: call,
            status,
        },
        Err(_) => crate::cri::CriError::Timeout {
            method: call,
            timeout,
        },
    };
    Err(StatsError::Cri { call, source })
}

impl StatsSource for CriStatsSource {
    fn list_pod_sandbox_stats(
        &self,
    ) -> BoxFuture<'_, Result<Option<Vec<cri::PodSandboxStats>>, StatsError>> {
        Box::pin(async move {
            let mut client = self.cri.runtime();
            let req = cri::ListPodSandboxStatsRequest::default();
            match bounded(
                "ListPodSandboxStats",
                self.timeout,
                client.list_pod_sandbox_stats(req),
            )
            .await
            {
                Ok(r) => Ok(Some(r.stats)),
                Err(StatsError::Cri { source, .. })
                    if source.code() == Some(tonic::Code::Unimplemented) =>
                {
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        })
    }

    fn list_container_stats(&self) -> BoxFuture<'_, Result<Vec<cri::ContainerStats>, StatsError>> {
        Box::pin(async move {
            let mut client = self.cri.runtime();
            let req = cri::ListContainerStatsRequest::default();
            bounded(
                "ListContainerStats",
                self.timeout,
                client.list_container_stats(req),
            )
            .await
            .map(|r| r.stats)
        })
    }

    fn image_fs_info(&self) -> BoxFuture<'_, Result<cri::ImageFsInfoResponse, StatsError>> {
        Box::pin(async move {
            let mut client = self.cri.images();
            bounded(
                "ImageFsInfo",
                self.timeout,
                client.image_fs_info(cri::ImageFsInfoRequest::default()),
            )
            .await
        })
    }
}

/// Node-wide settings the summary needs.
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// The node's name.
    pub node_name: String,
    /// `--root-dir`: its filesystem is nodefs.
    pub root_dir: PathBuf,
    /// `podLogsDir`.
    pub pod_logs_dir: PathBuf,
    /// `cgroupRoot`: pods live under `<cgroupRoot>/kubepods`.
    pub cgroup_root: String,
    /// The systemd cgroup driver lays the kubelet's cgroups out (`kubepods.slice`...).
    pub systemd_cgroups: bool,
    /// Memory capacity in bytes (MemTotal).
    pub memory_capacity: u64,
}

/// Builds summaries; keeps the previous CPU samples and recent directory usages.
pub struct StatsProvider {
    source: Arc<dyn StatsSource>,
    settings: NodeSettings,
    cgroups: Hierarchy,
    rates: CpuRates,
    du: Mutex<HashMap<PathBuf, (Instant, DiskUsage)>>,
    dedicated_image_fs: Mutex<Option<bool>>,
}

/// How much a summary covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything (`/stats/summary`).
    Full,
    /// CPU and memory of the node, system containers, pods and containers
    /// (`?only_cpu_and_memory=true`).
    CpuAndMemory,
    /// Node-wide stats and no pods: what the eviction signals need.
    Node,
}

/// The pods a summary covers: what the runtime runs, and the specs of the desired pods.
#[derive(Clone, Debug, Default)]
pub struct SummaryInput {
    /// The runtime's pods (from the PLEG's cache).
    pub runtime_pods: Vec<RuntimePod>,
    /// The desired pods: volumes and cgroups come from their specs.
    pub pods: Vec<std::sync::Arc<Pod>>,
    /// The persistent volumes' usage (the volume manager's readings).
    pub persistent_volumes: Vec<crate::volume_manager::usage::VolumeUsage>,
}

/// What the runtime said, gathered before the blocking part.
struct CriData {
    sandbox_stats: Option<BTreeMap<String, cri::PodSandboxStats>>,
    container_stats: BTreeMap<String, cri::ContainerStats>,
    image_fs: Option<cri::ImageFsInfoResponse>,
}

impl StatsProvider {
    /// A provider reading the runtime through `source` and the host's cgroupfs.
    pub fn new(source: Arc<dyn StatsSource>, settings: NodeSettings) -> Self {
        Self::with_cgroupfs(source, settings, Hierarchy::detect())
    }

    /// A provider on a given cgroupfs (tests).
    pub fn with_cgroupfs(
        source: Arc<dyn StatsSource>,
        settings: NodeSettings,
        cgroups: Hierarchy,
    ) -> Self {
        Self {
            source,
            settings,
            cgroups,
            rates: CpuRates::default(),
            du: Mutex::new(HashMap::new()),
            dedicated_image_fs: Mutex::new(None),
        }
    }

    /// Whether the image filesystem is another device than the root dir's, once a summary
    /// has seen it.
    pub fn dedicated_image_fs(&self) -> Option<bool> {
        *self
            .dedicated_image_fs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The summary of `scope`: node-wide stats and one entry per pod sandbox the runtime
    /// has.
    pub async fn summary(
        self: &Arc<Self>,
        mut input: SummaryInput,
        scope: Scope,
    ) -> Result<Summary, StatsError> {
        let cpu_and_memory_only = scope == Scope::CpuAndMemory;
        let (sandbox_stats, container_stats) = if scope == Scope::Node {
            input.runtime_pods.clear();
            (None, Vec::new())
        } else {
            let sandbox_stats = self.source.list_pod_sandbox_stats().await?;
            let container_stats = if sandbox_stats.is_none() {
                self.source.list_container_stats().await?
            } else {
                Vec::new()
            };
            (sandbox_stats, container_stats)
        };
        let image_fs = if cpu_and_memory_only {
            None
        } else {
            let info = self.source.image_fs_info().await?;
            if info.image_filesystems.is_empty() {
                return Err(StatsError::NoImageFs);
            }
            Some(info)
        };
        let data = CriData {
            sandbox_stats: sandbox_stats.map(|all| {
                all.into_iter()
                    .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
                    .collect()
            }),
            container_stats: container_stats
                .into_iter()
                .filter_map(|c| Some((c.attributes.as_ref()?.id.clone(), c)))
                .collect(),
            image_fs,
        };
        let this = self.clone();
        Ok(tokio::task::spawn_blocking(move || this.assemble(input, data, scope)).await?)
    }

    /// The blocking part: host readings and the pods' entries.
    fn assemble(&self, input: SummaryInput, data: CriData, scope: Scope) -> Summary {
        let cpu_and_memory_only = scope == Scope::CpuAndMemory;
        let now_ns = now_ns();
        let settings = &self.settings;
        let root_fs = if cpu_and_memory_only {
            None
        } else {
            host::fs_info(&settings.root_dir).ok()
        };
        let image_fs_entry = data
            .image_fs
            .as_ref()
            .and_then(|i| i.image_filesystems.first());
        let container_fs_entry = data
            .image_fs
            .as_ref()
            .and_then(|i| i.container_filesystems.first())
            .or(image_fs_entry);
        let image_fs_info = image_fs_entry.and_then(|e| self.fs_of(e));
        let mountpoint = |e: &cri::FilesystemUsage| e.fs_id.as_ref().map(|f| f.mountpoint.clone());
        // One statvfs per filesystem, so both entries of one filesystem agree.
        let container_fs_info = match container_fs_entry {
            Some(e) if image_fs_entry.map(mountpoint) == Some(mountpoint(e)) => image_fs_info,
            Some(e) => self.fs_of(e),
            None => None,
        };
        if let Some(e) = image_fs_entry {
            self.note_image_fs_device(e);
        }
        let du = |p: &Path| Some(self.disk_usage(p));
        let fs = |p: &Path| host::fs_info(p).ok();
        let cgroup = |cg: &str| cgroup::read(&self.cgroups, cg, now_ns);
        // Only pressure is taken from a container's cgroup, and v1 has none.
        let container_cgroup = |pod: &str, id: &str| {
            if !self.cgroups.is_unified() {
                return None;
            }
            cgroup::read(&self.cgroups, &self.cgroups.child_with(pod, id)?, now_ns)
        };
        let top_files = |p: &Path| host::top_level_files_usage(p);
        let probe = Probe {
            fs: &fs,
            du: &du,
            top_files: &top_files,
            cgroup: &cgroup,
            container_cgroup: &container_cgroup,
            now_ns,
        };
        let ctx = PodContext {
            root_dir: &settings.root_dir,
            pod_logs_dir: &settings.pod_logs_dir,
            cgroup_root: &settings.cgroup_root,
            systemd_cgroups: settings.systemd_cgroups,
            sandbox_stats: data.sandbox_stats.as_ref(),
            container_stats: &data.container_stats,
            root_fs,
            image_fs: image_fs_info,
            cpu_and_memory_only,
        };
        let specs: HashMap<&str, &Pod> = input
            .pods
            .iter()
            .filter_map(|p| Some((p.metadata.uid.as_deref()?, &**p)))
            .collect();
        let mut pods: Vec<_> = input
            .runtime_pods
            .iter()
            .filter_map(|rp| {
                pods::pod_stats(
                    rp,
                    specs.get(rp.uid.as_str()).copied(),
                    &ctx,
                    &probe,
                    &self.rates,
                )
            })
            .collect();
        if !cpu_and_memory_only {
            for pod in &mut pods {
                pod.volume_stats.extend(
                    input
                        .persistent_volumes
                        .iter()
                        .filter(|u| u.uid == pod.pod_ref.uid)
                        .map(|u| pods::persistent_volume_stats(u, now_ns)),
                );
            }
        }
        pods.sort_by(|a, b| {
            (&a.pod_ref.namespace, &a.pod_ref.name).cmp(&(&b.pod_ref.namespace, &b.pod_ref.name))
        });
        let mut node = self.node_stats(now_ns, cpu_and_memory_only);
        if !cpu_and_memory_only {
            node.fs = root_fs.map(|info| node_fs(info, now_ns));
            node.runtime = Some(RuntimeStats {
                image_fs: image_fs_entry.map(|e| runtime_fs(e, image_fs_info, now_ns)),
                container_fs: container_fs_entry.map(|e| runtime_fs(e, container_fs_info, now_ns)),
            });
        }
        if scope == Scope::Full {
            self.forget_stale(&input.runtime_pods);
        }
        Summary { node, pods }
    }

    /// Node CPU, memory, system containers; plus network and pid limits unless only CPU and
    /// memory are asked for.
    fn node_stats(&self, now_ns: i64, cpu_and_memory_only: bool) -> NodeStats {
        let settings = &self.settings;
        let reading = host::node_reading(&self.cgroups, now_ns);
        let start_time = host::boot_time()
            .and_then(|s| s.checked_mul(1_000_000_000))
            .map_or_else(|| time_from_ns(now_ns), time_from_ns);
        let mut node = NodeStats {
            node_name: settings.node_name.clone(),
            system_containers: self.system_containers(now_ns),
            start_time,
            cpu: pods::cpu_from_cgroup(&reading, "node", &self.rates),
            memory: pods::memory_from_cgroup(
                &reading,
                Some(settings.memory_capacity).filter(|c| *c > 0),
            ),
            io: pods::io_from_cgroup(&reading),
            network: None,
            fs: None,
            runtime: None,
            rlimit: None,
        };
        // The node's memory is bounded by the machine, whatever the root cgroup says.
        if let Some(m) = node.memory.as_mut()
            && settings.memory_capacity > 0
        {
            m.available_bytes = m
                .working_set_bytes
                .map(|ws| settings.memory_capacity.saturating_sub(ws));
        }
        if cpu_and_memory_only {
            return node;
        }
        node.network = host::host_network().map(|(default, interfaces)| NetworkStats {
            time: time_from_ns(now_ns),
            default_interface: default,
            interfaces,
        });
        let (max_pid, procs) = host::pid_limits();
        node.rlimit = Some(RlimitStats {
            time: time_from_ns(now_ns),
            max_pid,
            num_of_running_processes: procs,
        });
        node
    }

    /// The kubelet's own cgroup and the pods' (`<cgroupRoot>/kubepods`), CPU and memory only.
    fn system_containers(&self, now_ns: i64) -> Vec<ContainerStats> {
        let mut out = Vec::new();
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| cgroup_of_process(&t, self.cgroups.is_unified(), "memory"));
        let root = self.settings.cgroup_root.trim_end_matches('/');
        let mut pods_cgroup = format!("{root}/kubepods");
        if self.settings.systemd_cgroups {
            pods_cgroup = crate::podspec::sandbox::systemd_cgroup(&pods_cgroup);
        }
        let capacity = Some(self.settings.memory_capacity).filter(|c| *c > 0);
        for (name, cgroup, capacity) in [
            (SYSTEM_CONTAINER_KUBELET, own, None),
            (SYSTEM_CONTAINER_PODS, Some(pods_cgroup), capacity),
        ] {
            let Some(cgroup) = cgroup else { continue };
            let Some(reading) = cgroup::read(&self.cgroups, &cgroup, now_ns) else {
                continue;
            };
            let created = self.cgroups.created(&cgroup).unwrap_or(now_ns);
            out.push(ContainerStats {
                name: name.to_string(),
                start_time: time_from_ns(created),
                cpu: pods::cpu_from_cgroup(&reading, &format!("sys/{name}"), &self.rates),
                memory: pods::memory_from_cgroup(&reading, capacity),
                io: pods::io_from_cgroup(&reading),
                rootfs: None,
                logs: None,
            });
        }
        out
    }

    /// statvfs of the filesystem a runtime filesystem entry names.
    fn fs_of(&self, entry: &cri::FilesystemUsage) -> Option<FsInfo> {
        let mountpoint = entry.fs_id.as_ref()?.mountpoint.as_str();
        if mountpoint.is_empty() {
            return None;
        }
        host::fs_info(Path::new(mountpoint)).ok()
    }

    fn note_image_fs_device(&self, entry: &cri::FilesystemUsage) {
        use std::os::unix::fs::MetadataExt;
        let Some(mountpoint) = entry.fs_id.as_ref().map(|f| f.mountpoint.as_str()) else {
            return;
        };
        let dev = |p: &Path| std::fs::metadata(p).ok().map(|m| m.dev());
        if let (Some(image), Some(root)) =
            (dev(Path::new(mountpoint)), dev(&self.settings.root_dir))
        {
            *self
                .dedicated_image_fs
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(image != root);
        }
    }

    /// du of `path`, measured at most every [`DU_MAX_AGE`].
    fn disk_usage(&self, path: &Path) -> DiskUsage {
        let now = Instant::now();
        if let Some((at, usage)) = self
            .du
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path)
            && now.duration_since(*at) < DU_MAX_AGE
        {
            return *usage;
        }
        let usage = host::disk_usage(path).unwrap_or_else(|e| {
            tracing::debug!(path = %path.display(), error = %e, "measuring disk usage");
            DiskUsage::default()
        });
        self.du
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_path_buf(), (now, usage));
        usage
    }

    /// Drops CPU baselines and du results of containers and pods the runtime no longer has.
    fn forget_stale(&self, runtime_pods: &[RuntimePod]) {
        let mut live: HashSet<String> = HashSet::new();
        for p in runtime_pods {
            live.insert(format!("pod/{}", p.uid));
            live.extend(p.containers.iter().map(|c| c.id.clone()));
        }
        self.rates
            .retain(|k| k == "node" || k.starts_with("sys/") || live.contains(k));
        let cutoff = Instant::now().checked_sub(DU_MAX_AGE * 6);
        self.du
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, (at, _)| cutoff.is_none_or(|c| *at >= c));
    }
}

/// nodefs: the root dir's filesystem.
fn node_fs(info: FsInfo, now_ns: i64) -> FsStats {
    FsStats {
        time: time_from_ns(now_ns),
        available_bytes: Some(info.available),
        capacity_bytes: Some(info.capacity),
        used_bytes: Some(info.used),
        inodes_free: Some(info.inodes_free),
        inodes: Some(info.inodes),
        inodes_used: Some(info.inodes.saturating_sub(info.inodes_free)),
    }
}

/// A runtime filesystem: the runtime's usage on the capacity of the filesystem it names.
fn runtime_fs(entry: &cri::FilesystemUsage, info: Option<FsInfo>, now_ns: i64) -> FsStats {
    let time = if entry.timestamp > 0 {
        entry.timestamp
    } else {
        now_ns
    };
    FsStats {
        time: time_from_ns(time),
        available_bytes: info.map(|i| i.available),
        capacity_bytes: info.map(|i| i.capacity),
        used_bytes: Some(entry.used_bytes.as_ref().map_or(0, |v| v.value)),
        inodes_free: info.map(|i| i.inodes_free),
        inodes: info.map(|i| i.inodes),
        inodes_used: entry.inodes_used.as_ref().map(|v| v.value),
    }
}

/// Nanoseconds since the epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
