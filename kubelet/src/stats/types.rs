//! The Summary API (`stats/v1alpha1`) as serde types: the JSON the Go kubelet serves at
//! `/stats/summary`, field for field (camelCase names, RFC 3339 times in whole seconds,
//! unknown values left out).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// Name of the system container of the kubelet itself.
pub const SYSTEM_CONTAINER_KUBELET: &str = "kubelet";
/// Name of the system container holding every pod (`<cgroupRoot>/kubepods`).
pub const SYSTEM_CONTAINER_PODS: &str = "pods";

/// The node and its pods.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Node-wide stats.
    pub node: NodeStats,
    /// One entry per pod.
    pub pods: Vec<PodStats>,
}

/// Node-level stats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// Raw cgroups of system daemons (`kubelet`, `runtime`, `misc`, `pods`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    /// When collection of node-wide stats began (the node's boot).
    pub start_time: Time,
    /// CPU of the whole node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the whole node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// IO pressure (cgroup v2 with PSI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    /// The node's network interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// The filesystem of the kubelet's root dir (nodefs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    /// The container runtime's filesystems.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    /// Process id limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

/// Process id limits of the OS.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RlimitStats {
    /// When read.
    pub time: Time,
    /// `kernel.pid_max`.
    #[serde(rename = "maxpid", default, skip_serializing_if = "Option::is_none")]
    pub max_pid: Option<i64>,
    /// Tasks on the node now.
    #[serde(rename = "curproc", default, skip_serializing_if = "Option::is_none")]
    pub num_of_running_processes: Option<i64>,
}

/// The container runtime's filesystems.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    /// Where images live; `usedBytes` is what images take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
    /// Where writable layers live; `usedBytes` is what they take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_fs: Option<FsStats>,
}

/// Process counts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// Processes in the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

/// Pod-level stats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// Which pod.
    pub pod_ref: PodReference,
    /// When its sandbox was made.
    pub start_time: Time,
    /// Its running containers.
    pub containers: Vec<ContainerStats>,
    /// CPU of the pod's cgroup (containers and overhead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the pod's cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// IO pressure (cgroup v2 with PSI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    /// The pod's network namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// Its volumes.
    #[serde(rename = "volume", default, skip_serializing_if = "Vec::is_empty")]
    pub volume_stats: Vec<VolumeStats>,
    /// Writable layers, logs and local ephemeral volumes together.
    #[serde(
        rename = "ephemeral-storage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ephemeral_storage: Option<FsStats>,
    /// Its processes.
    #[serde(
        rename = "process_stats",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub process_stats: Option<ProcessStats>,
}

/// Container-level stats (also system containers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// The container's name in its pod (or the system container's name).
    pub name: String,
    /// When it was created.
    pub start_time: Time,
    /// Its CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Its memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// IO pressure (cgroup v2 with PSI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    /// Its writable layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// Its log files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

/// A pod's identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReference {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID.
    pub uid: String,
}

/// One network interface's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    /// Interface name.
    pub name: String,
    /// Bytes received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    /// Receive errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    /// Bytes sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    /// Transmit errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// Network counters: the default interface inline, and every interface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkStats {
    /// When read.
    pub time: Time,
    /// The default interface.
    #[serde(flatten)]
    pub default_interface: InterfaceStats,
    /// All interfaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// CPU usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When sampled.
    pub time: Time,
    /// Billionths of a core in use, averaged since the previous sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// CPU time used since creation, in nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
    /// CPU pressure (cgroup v2 with PSI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// IO stats: its pressure (Go 1.34's `IOStats`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IoStats {
    /// When sampled.
    pub time: Time,
    /// IO pressure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// One resource's pressure stall information.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PsiStats {
    /// Time every non-idle task stalled at once.
    pub full: PsiData,
    /// Time at least one task stalled.
    pub some: PsiData,
}

/// One line of a pressure file.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PsiData {
    /// Stall time, cumulative, in the kernel's microseconds (as Go passes it on).
    pub total: u64,
    /// Percent of the last 10 s stalled.
    pub avg10: f64,
    /// Percent of the last 60 s stalled.
    pub avg60: f64,
    /// Percent of the last 300 s stalled.
    pub avg300: f64,
}

/// Memory usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When sampled.
    pub time: Time,
    /// Limit minus working set; left out when unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// All memory charged, page cache included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// Usage minus inactive file pages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// Anonymous memory and swap cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Minor page faults, cumulative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    /// Major page faults, cumulative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
    /// Memory pressure (cgroup v2 with PSI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// A volume's filesystem usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    /// Usage; `usedBytes` is what the volume holds.
    #[serde(flatten)]
    pub fs: FsStats,
    /// The volume's name in the pod spec.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The claim behind it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
}

/// A persistent volume claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PvcReference {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
}

/// Filesystem usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    /// When read.
    pub time: Time,
    /// Bytes free for unprivileged users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Size of the filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Bytes used by what this entry describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Free inodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    /// Inodes of the filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    /// Inodes used by what this entry describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

impl FsStats {
    /// Only a time: nothing known yet.
    pub fn empty(time: Time) -> Self {
        Self {
            time,
            available_bytes: None,
            capacity_bytes: None,
            used_bytes: None,
            inodes_free: None,
            inodes: None,
            inodes_used: None,
        }
    }
}
