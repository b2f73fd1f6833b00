//! Eviction signals and thresholds as the Go kubelet defines them: the signals
//! (`memory.available`, `nodefs.available`, …), what each observes in the summary, the
//! resource it reclaims and the node condition it drives, and thresholds (a quantity or a
//! percentage of capacity, with a grace period and a minimum reclaim).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::stats::types::{FsStats, SYSTEM_CONTAINER_PODS, Summary};

/// An eviction signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// `memory.available`: node memory capacity less its working set.
    MemoryAvailable,
    /// `allocatableMemory.available`: what pods may still use.
    AllocatableMemoryAvailable,
    /// `nodefs.available`: free bytes of the kubelet's filesystem.
    NodeFsAvailable,
    /// `nodefs.inodesFree`.
    NodeFsInodesFree,
    /// `imagefs.available`: free bytes of the runtime's image filesystem.
    ImageFsAvailable,
    /// `imagefs.inodesFree`.
    ImageFsInodesFree,
    /// `containerfs.available`: free bytes of the writable layers' filesystem.
    ContainerFsAvailable,
    /// `containerfs.inodesFree`.
    ContainerFsInodesFree,
    /// `pid.available`: pids left.
    PidAvailable,
}

/// Every signal, in the order reports list them.
pub const ALL_SIGNALS: [Signal; 9] = [
    Signal::MemoryAvailable,
    Signal::AllocatableMemoryAvailable,
    Signal::NodeFsAvailable,
    Signal::NodeFsInodesFree,
    Signal::ImageFsAvailable,
    Signal::ImageFsInodesFree,
    Signal::ContainerFsAvailable,
    Signal::ContainerFsInodesFree,
    Signal::PidAvailable,
];

/// What a signal's pressure is relieved by reclaiming.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    /// `memory`.
    Memory,
    /// `ephemeral-storage`.
    EphemeralStorage,
    /// `inodes`.
    Inodes,
    /// `pids`.
    Pids,
}

impl Resource {
    /// The resource name in messages (`memory`, `ephemeral-storage`, …).
    pub fn name(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }

    /// Whether quantities of it print in binary units (bytes) rather than decimal (counts).
    pub fn is_bytes(self) -> bool {
        matches!(self, Resource::Memory | Resource::EphemeralStorage)
    }
}

/// A node condition driven by signals.
// The variants are the Kubernetes condition names, each ending in `Pressure`.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    /// `MemoryPressure`.
    MemoryPressure,
    /// `DiskPressure`.
    DiskPressure,
    /// `PIDPressure`.
    PidPressure,
}

/// The conditions in the order the node reports them.
pub const ALL_CONDITIONS: [Condition; 3] = [
    Condition::MemoryPressure,
    Condition::DiskPressure,
    Condition::PidPressure,
];

impl Condition {
    /// The condition type (`MemoryPressure`, …).
    pub fn name(self) -> &'static str {
        match self {
            Condition::MemoryPressure => "MemoryPressure",
            Condition::DiskPressure => "DiskPressure",
            Condition::PidPressure => "PIDPressure",
        }
    }

    /// The Go kubelet's reason and message for the condition being true or false.
    pub fn reason_and_message(self, pressure: bool) -> (&'static str, &'static str) {
        match (self, pressure) {
            (Condition::MemoryPressure, true) => (
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
            ),
            (Condition::MemoryPressure, false) => (
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            (Condition::DiskPressure, true) => {
                ("KubeletHasDiskPressure", "kubelet has disk pressure")
            }
            (Condition::DiskPressure, false) => {
                ("KubeletHasNoDiskPressure", "kubelet has no disk pressure")
            }
            (Condition::PidPressure, true) => (
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
            ),
            (Condition::PidPressure, false) => (
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
        }
    }
}

impl Signal {
    /// The signal's name in configuration (`memory.available`, …).
    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The signal a configuration name means.
    pub fn parse(name: &str) -> Option<Signal> {
        ALL_SIGNALS.into_iter().find(|s| s.name() == name)
    }

    /// What is reclaimed to relieve it.
    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                Resource::EphemeralStorage
            }
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }

    /// The node condition it drives.
    pub fn condition(self) -> Condition {
        match self.resource() {
            Resource::Memory => Condition::MemoryPressure,
            Resource::EphemeralStorage | Resource::Inodes => Condition::DiskPressure,
            Resource::Pids => Condition::PidPressure,
        }
    }

    /// Memory signals are reclaimed before any other.
    pub fn is_memory(self) -> bool {
        self.resource() == Resource::Memory
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A threshold's value: an absolute quantity or a fraction of capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThresholdValue {
    /// Bytes, inodes or pids.
    Quantity(i64),
    /// A fraction of capacity (0.1 for `10%`), single precision as Go keeps it.
    Percentage(f32),
}

impl ThresholdValue {
    /// The quantity this value means on a resource of `capacity` (Go's
    /// `GetThresholdQuantity`: a percentage of capacity, truncated).
    pub fn quantity(self, capacity: i64) -> i64 {
        match self {
            ThresholdValue::Quantity(q) => q,
            ThresholdValue::Percentage(p) => (capacity as f64 * f64::from(p)) as i64,
        }
    }
}

/// A threshold on one signal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    /// The signal.
    pub signal: Signal,
    /// Met when the signal's available amount falls below this.
    pub value: ThresholdValue,
    /// How long it must stay met before pods are evicted; zero for a hard threshold.
    pub grace_period: Duration,
    /// How much beyond the threshold to reclaim before the threshold counts as resolved.
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// Hard: acted on at once.
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }

    /// Identity of a threshold in the manager's bookkeeping (one hard and one soft threshold
    /// per signal at most).
    pub fn key(&self) -> (Signal, Duration) {
        (self.signal, self.grace_period)
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = match self.value {
            ThresholdValue::Quantity(q) => format_quantity(q, self.signal.resource()),
            ThresholdValue::Percentage(p) => format!("{}%", p * 100.0),
        };
        // Go prints a zero duration as "0s".
        let grace = if self.grace_period.is_zero() {
            "0s".to_string()
        } else {
            format!("{:?}", self.grace_period)
        };
        write!(
            f,
            "threshold(signal={}, operator=LessThan, value={value}, gracePeriod={grace})",
            self.signal
        )
    }
}

/// What one signal observes now.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// The amount available.
    pub available: i64,
    /// The total it is a part of.
    pub capacity: i64,
    /// When the underlying stats were taken.
    pub time: Option<Time>,
}

/// Every signal's observation.
pub type Observations = BTreeMap<Signal, Observation>;

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn fs_observations(fs: Option<&FsStats>, bytes: Signal, inodes: Signal, out: &mut Observations) {
    let Some(fs) = fs else { return };
    if let (Some(available), Some(capacity)) = (fs.available_bytes, fs.capacity_bytes) {
        out.insert(
            bytes,
            Observation {
                available: to_i64(available),
                capacity: to_i64(capacity),
                time: Some(fs.time.clone()),
            },
        );
    }
    if let (Some(free), Some(total)) = (fs.inodes_free, fs.inodes) {
        out.insert(
            inodes,
            Observation {
                available: to_i64(free),
                capacity: to_i64(total),
                time: Some(fs.time.clone()),
            },
        );
    }
}

/// The signals a summary observes (Go's `makeSignalObservations`).
pub fn observe(summary: &Summary) -> Observations {
    let mut out = Observations::new();
    let node = &summary.node;
    let memory_of = |m: Option<&crate::stats::types::MemoryStats>| {
        let m = m?;
        let (available, ws) = (m.available_bytes?, m.working_set_bytes?);
        Some(Observation {
            available: to_i64(available),
            capacity: to_i64(available.saturating_add(ws)),
            time: Some(m.time.clone()),
        })
    };
    if let Some(o) = memory_of(node.memory.as_ref()) {
        out.insert(Signal::MemoryAvailable, o);
    }
    let pods = node
        .system_containers
        .iter()
        .find(|c| c.name == SYSTEM_CONTAINER_PODS);
    if let Some(o) = memory_of(pods.and_then(|c| c.memory.as_ref())) {
        out.insert(Signal::AllocatableMemoryAvailable, o);
    }
    fs_observations(
        node.fs.as_ref(),
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        &mut out,
    );
    if let Some(runtime) = &node.runtime {
        fs_observations(
            runtime.image_fs.as_ref(),
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
            &mut out,
        );
        fs_observations(
            runtime.container_fs.as_ref(),
            Signal::ContainerFsAvailable,
            Signal::ContainerFsInodesFree,
            &mut out,
        );
    }
    if let Some(r) = &node.rlimit
        && let (Some(max), Some(current)) = (r.max_pid, r.num_of_running_processes)
    {
        out.insert(
            Signal::PidAvailable,
            Observation {
                available: max.saturating_sub(current),
                capacity: max,
                time: Some(r.time.clone()),
            },
        );
    }
    out
}

/// The thresholds whose signal's available amount is below them (Go's `thresholdsMet`);
/// with `enforce_min_reclaim`, below them plus their minimum reclaim. Thresholds without an
/// observation are skipped.
pub fn thresholds_met(
    thresholds: &[Threshold],
    observations: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(observed) = observations.get(&t.signal) else {
                tracing::debug!(signal = %t.signal, "eviction manager: no observation found for eviction signal");
                return false;
            };
            let mut quantity = t.value.quantity(observed.capacity);
            if enforce_min_reclaim && let Some(min) = t.min_reclaim {
                quantity = quantity.saturating_add(min.quantity(observed.capacity));
            }
            quantity > observed.available
        })
        .copied()
        .collect()
}

/// A quantity as Go's `resource.Quantity` prints it: bytes in the largest binary unit that
/// divides them (`100Mi`), counts in the largest decimal one (`5k`).
pub fn format_quantity(value: i64, resource: Resource) -> String {
    // Go prints small byte counts in decimal units too (1000 bytes is "1k").
    let (base, suffixes): (i64, &[&str]) = if resource.is_bytes() && value.abs() >= 1024 {
        (1024, &["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
    } else {
        (1000, &["k", "M", "G", "T", "P", "E"])
    };
    if value == 0 {
        return "0".into();
    }
    let mut v = value;
    let mut unit = "";
    for s in suffixes {
        if v % base != 0 {
            break;
        }
        v /= base;
        unit = s;
    }
    format!("{v}{unit}")
}
