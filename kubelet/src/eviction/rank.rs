//! Which pod goes first, as the Go kubelet ranks pods for eviction: under memory pressure
//! pods using more than they requested first, then lower priority, then the biggest use
//! above request; under disk pressure the same with the usage of the filesystem under
//! pressure; under pid pressure by priority, then process count. Pods without stats go
//! first.

use std::cmp::Ordering;

use k8s_openapi::api::core::v1::{Container, Volume};

use super::signals::Resource;
use crate::manifest::quantity::parse_quantity;
use crate::stats::types::{FsStats, PodStats};
use crate::types::Pod;

/// Which parts of a pod's disk use count against a filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsStatsType {
    /// Writable layers.
    Root,
    /// Container logs.
    Logs,
    /// Local volumes (emptyDir on disk, hostPath, configMap, …).
    LocalVolumes,
    /// Images (counted by the runtime, not per pod).
    Images,
}

/// Usage a pod is ranked on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankBy {
    /// Memory working set against the memory request.
    Memory,
    /// Disk bytes (of the listed parts) against the ephemeral-storage request.
    Disk(&'static [FsStatsType]),
    /// Inodes of the listed parts.
    Inodes(&'static [FsStatsType]),
    /// Process count.
    Pids,
}

/// Without a dedicated image filesystem, every disk signal measures everything.
pub const ALL_FS: &[FsStatsType] = &[
    FsStatsType::Images,
    FsStatsType::Root,
    FsStatsType::Logs,
    FsStatsType::LocalVolumes,
];
/// With one, nodefs pressure measures logs and local volumes…
pub const NODE_FS: &[FsStatsType] = &[FsStatsType::Logs, FsStatsType::LocalVolumes];
/// …and imagefs pressure writable layers (and images).
pub const IMAGE_FS: &[FsStatsType] = &[FsStatsType::Root, FsStatsType::Images];

/// How pods are ranked for a signal's resource (Go's `buildSignalToRankFunc` without a
/// split container filesystem).
pub fn rank_by(signal: super::signals::Signal, dedicated_image_fs: bool) -> RankBy {
    use super::signals::Signal::*;
    let parts = |image_side: bool| match (dedicated_image_fs, image_side) {
        (false, _) => ALL_FS,
        (true, false) => NODE_FS,
        (true, true) => IMAGE_FS,
    };
    match signal {
        MemoryAvailable | AllocatableMemoryAvailable => RankBy::Memory,
        PidAvailable => RankBy::Pids,
        NodeFsAvailable => RankBy::Disk(parts(false)),
        NodeFsInodesFree => RankBy::Inodes(parts(false)),
        ImageFsAvailable | ContainerFsAvailable => RankBy::Disk(parts(true)),
        ImageFsInodesFree | ContainerFsInodesFree => RankBy::Inodes(parts(true)),
    }
}

/// A pod's priority (0 when unset).
pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

fn container_request(c: &Container, resource: &str) -> i128 {
    crate::podspec::qos::effective_request(c, resource).map_or(0, |q| q.value_ceil())
}

/// The pod's request of `resource` (Go's `GetResourceRequestQuantity`): the app containers'
/// and sidecars' requests added up, or the largest init container's (with the sidecars
/// started before it) if more, plus the pod overhead.
pub fn pod_request(pod: &Pod, resource: &str) -> i128 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let mut total: i128 = spec
        .containers
        .iter()
        .map(|c| container_request(c, resource))
        .sum();
    let (mut sidecars, mut init_max) = (0i128, 0i128);
    for c in spec.init_containers.iter().flatten() {
        let r = container_request(c, resource);
        if c.restart_policy.as_deref() == Some("Always") {
            total += r;
            sidecars += r;
            init_max = init_max.max(sidecars);
        } else {
            init_max = init_max.max(r + sidecars);
        }
    }
    let overhead = spec
        .overhead
        .as_ref()
        .and_then(|o| o.get(resource))
        .and_then(|q| parse_quantity(&q.0).ok())
        .map_or(0, |q| q.value_ceil());
    total.max(init_max) + overhead
}

/// Whether a volume is local storage of the pod (Go's `localVolumeNames`: hostPath and
/// local ephemeral volumes).
fn is_local_volume(v: &Volume) -> bool {
    let disk_empty_dir = v
        .empty_dir
        .as_ref()
        .is_some_and(|e| e.medium.as_deref().unwrap_or_default().is_empty());
    v.host_path.is_some()
        || disk_empty_dir
        || v.config_map.is_some()
        || v.downward_api.is_some()
        || v.git_repo.is_some()
}

fn used(fs: Option<&FsStats>, inodes: bool) -> i128 {
    fs.and_then(|f| if inodes { f.inodes_used } else { f.used_bytes })
        .map_or(0, i128::from)
}

/// A pod's disk bytes or inodes over the `parts` measured (Go's `podDiskUsage`).
pub fn pod_disk_usage(stats: &PodStats, pod: &Pod, parts: &[FsStatsType], inodes: bool) -> i128 {
    let mut total = 0;
    for c in &stats.containers {
        if parts.contains(&FsStatsType::Root) {
            total += used(c.rootfs.as_ref(), inodes);
        }
        if parts.contains(&FsStatsType::Logs) {
            total += used(c.logs.as_ref(), inodes);
        }
    }
    if parts.contains(&FsStatsType::LocalVolumes) {
        let local = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter(|v| is_local_volume(v));
        for v in local {
            if let Some(vs) = stats.volume_stats.iter().find(|s| s.name == v.name) {
                total += used(Some(&vs.fs), inodes);
            }
        }
    }
    total
}

/// A pod's memory working set.
pub fn memory_usage(stats: &PodStats) -> i128 {
    stats
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes)
        .map_or(0, i128::from)
}

/// Orders `true` before `false` (Go's `cmpBool`).
fn true_first(a: bool, b: bool) -> Ordering {
    b.cmp(&a)
}

/// Sorts `pods` so the first is the one to evict. `stats` finds a pod's stats.
pub fn rank<'a>(pods: &mut [&'a Pod], by: RankBy, stats: &dyn Fn(&Pod) -> Option<&'a PodStats>) {
    // (usage, the request it may exceed, the request it is ranked above); Go compares
    // inodes against no request but ranks them above the ephemeral-storage request.
    let uses = |p: &Pod, s: &PodStats| -> (i128, i128, i128) {
        match by {
            RankBy::Memory => {
                let request = pod_request(p, Resource::Memory.name());
                (memory_usage(s), request, request)
            }
            RankBy::Disk(parts) => {
                let request = pod_request(p, Resource::EphemeralStorage.name());
                (pod_disk_usage(s, p, parts, false), request, request)
            }
            RankBy::Inodes(parts) => (
                pod_disk_usage(s, p, parts, true),
                0,
                pod_request(p, Resource::EphemeralStorage.name()),
            ),
            RankBy::Pids => (
                s.process_stats
                    .as_ref()
                    .and_then(|p| p.process_count)
                    .map_or(0, i128::from),
                0,
                0,
            ),
        }
    };
    pods.sort_by(|a, b| {
        let (sa, sb) = (stats(a), stats(b));
        match (sa, sb) {
            (Some(sa), Some(sb)) => {
                let ((ua, ea, ra), (ub, eb, rb)) = (uses(a, sa), uses(b, sb));
                let exceeds = if by == RankBy::Pids {
                    Ordering::Equal
                } else {
                    true_first(ua > ea, ub > eb)
                };
                exceeds
                    .then_with(|| priority(a).cmp(&priority(b)))
                    .then_with(|| (ub - rb).cmp(&(ua - ra)))
            }
            // Pods without stats go first; among them, lower priority first.
            _ => true_first(sa.is_none(), sb.is_none()).then_with(|| priority(a).cmp(&priority(b))),
        }
    });
}
