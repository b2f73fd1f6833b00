//! CRI `LinuxContainerResources` ↔ OCI `linux.resources`, updates to a stored spec, the
//! oom_score_adj clamp, and the RDT/blockio classes asked for by annotation.
//!
//! Zero means "not set" in CRI, so a zero field never overwrites a value already in the spec:
//! that is how containerd applies both CreateContainer and UpdateContainerResources.
//!
//! What the node cannot enforce is handled as containerd 1.6/1.7 handles it (`WithResources`
//! with `tolerate_missing_hugetlb_controller = true`, `disable_hugetlb_controller = false`):
//! - huge page limits without the hugetlb controller: dropped (logged once at start-up by
//!   [`CgroupSupport::node`], not per container);
//! - memory+swap without swap accounting: not set, whether implied (= the memory limit) or
//!   asked for (`memory_swap_limit_in_bytes`), as containerd ≥ 1.6.22/1.7.3 does (earlier
//!   releases, Debian's 1.6.20 among them, passed an asked-for one on, and runc failed on the
//!   missing `memory.memsw.limit_in_bytes`);
//! - everything else (cpu, cpuset, memory, `unified`) is passed to runc as asked, which
//!   refuses what the node lacks when the task is created (`unified` on a v1 or hybrid node:
//!   "cannot use unified on cgroup v1"; cpuset without a cpuset hierarchy: "cannot set cpuset
//!   limit"), exactly as under containerd. The Go kubelet sends neither on such nodes: it
//!   fills `unified` only on cgroup v2, and cpusets only with the static CPU manager, which
//!   needs the controller itself.

use std::collections::HashMap;

use ferrolet_proto::cri;
use oci_spec::runtime::{LinuxCpu, LinuxHugepageLimit, LinuxMemory, LinuxResources, Spec};

use super::OciError;
use super::cgroups::CgroupSupport;

const FIELD: &str = "linux.resources";

/// CRI resources as OCI linux resources (shares/quota/period/cpuset/mems, memory limit (+swap
/// = limit like containerd, where swap is accounted), hugepages where hugetlb is available,
/// unified), for a node with `cgroups`; oom_score_adj is applied to the process separately.
pub fn linux_resources(
    res: &cri::LinuxContainerResources,
    cgroups: &CgroupSupport,
) -> Result<LinuxResources, OciError> {
    let mut out = LinuxResources::default();
    merge(&mut out, res, cgroups)?;
    Ok(out)
}

/// Applies UpdateContainerResources (or CreateContainer's resources) to a spec: resources
/// for a node with `cgroups`, and oom_score_adj, clamped.
pub fn update_resources(
    spec: &mut Spec,
    res: &cri::LinuxContainerResources,
    min_oom_score_adj: i32,
    cgroups: &CgroupSupport,
) -> Result<(), OciError> {
    // Validate everything before touching the spec, so a refused update changes nothing.
    let adj = (res.oom_score_adj != 0)
        .then(|| clamp_oom_score_adj(res.oom_score_adj, min_oom_score_adj))
        .transpose()?;
    let mut resources = spec
        .linux()
        .as_ref()
        .and_then(|l| l.resources().clone())
        .unwrap_or_default();
    merge(&mut resources, res, cgroups)?;
    let Some(linux) = spec.linux_mut() else {
        return Err(OciError::Internal(
            "stored spec has no linux section".into(),
        ));
    };
    linux.set_resources(Some(resources));
    if let (Some(adj), Some(p)) = (adj, spec.process_mut()) {
        p.set_oom_score_adj(Some(adj));
    }
    Ok(())
}

/// The CRI view of a spec's resources (for ContainerStatus.resources).
pub fn cri_resources(spec: &Spec) -> Option<cri::LinuxContainerResources> {
    let r = spec.linux().as_ref()?.resources().as_ref()?;
    let cpu = r.cpu().clone().unwrap_or_default();
    let mem = r.memory().unwrap_or_default();
    Some(cri::LinuxContainerResources {
        cpu_period: cpu
            .period()
            .map_or(0, |p| i64::try_from(p).unwrap_or(i64::MAX)),
        cpu_quota: cpu.quota().unwrap_or(0),
        cpu_shares: cpu
            .shares()
            .map_or(0, |s| i64::try_from(s).unwrap_or(i64::MAX)),
        memory_limit_in_bytes: mem.limit().unwrap_or(0),
        oom_score_adj: spec
            .process()
            .as_ref()
            .and_then(|p| p.oom_score_adj())
            .map_or(0, i64::from),
        cpuset_cpus: cpu.cpus().clone().unwrap_or_default(),
        cpuset_mems: cpu.mems().clone().unwrap_or_default(),
        hugepage_limits: r
            .hugepage_limits()
            .iter()
            .flatten()
            .map(|h| cri::HugepageLimit {
                page_size: h.page_size().clone(),
                limit: u64::try_from(h.limit()).unwrap_or(0),
            })
            .collect(),
        unified: r.unified().clone().unwrap_or_default(),
        memory_swap_limit_in_bytes: mem.swap().unwrap_or(0),
    })
}

/// A requested oom_score_adj, raised to at least what this process may set.
pub(crate) fn clamp_oom_score_adj(requested: i64, min: i32) -> Result<i32, OciError> {
    let adj = i32::try_from(requested)
        .ok()
        .filter(|a| (-1000..=1000).contains(a))
        .ok_or_else(|| {
            OciError::invalid(
                format!("{FIELD}.oom_score_adj"),
                requested.to_string(),
                "must be between -1000 and 1000",
            )
        })?;
    Ok(adj.max(min))
}

/// Sets every non-zero field of `res` that the node can take on `out`.
fn merge(
    out: &mut LinuxResources,
    res: &cri::LinuxContainerResources,
    cgroups: &CgroupSupport,
) -> Result<(), OciError> {
    let mut cpu = out.cpu().clone().unwrap_or_default();
    let mut mem = out.memory().unwrap_or_default();
    merge_cpu(&mut cpu, res)?;
    merge_memory(&mut mem, res, cgroups.swap_accounting)?;
    if cpu != LinuxCpu::default() {
        out.set_cpu(Some(cpu));
    }
    if mem != LinuxMemory::default() {
        out.set_memory(Some(mem));
    }
    merge_hugepages(out, &res.hugepage_limits, cgroups.has("hugetlb"))?;
    // Passed as asked on every node, as containerd does (see the module doc).
    if !res.unified.is_empty() {
        if let Some((k, _)) = res.unified.iter().find(|(k, _)| k.trim().is_empty()) {
            return Err(OciError::invalid(
                format!("{FIELD}.unified"),
                k,
                "keys must name a cgroup v2 file",
            ));
        }
        let mut unified: HashMap<String, String> = out.unified().clone().unwrap_or_default();
        unified.extend(res.unified.iter().map(|(k, v)| (k.clone(), v.clone())));
        out.set_unified(Some(unified));
    }
    Ok(())
}

fn merge_cpu(cpu: &mut LinuxCpu, res: &cri::LinuxContainerResources) -> Result<(), OciError> {
    let invalid = |name: &str, v: i64, why: &str| {
        OciError::invalid(format!("{FIELD}.{name}"), v.to_string(), why)
    };
    if res.cpu_period != 0 {
        let p = u64::try_from(res.cpu_period)
            .map_err(|_| invalid("cpu_period", res.cpu_period, "must be positive"))?;
        cpu.set_period(Some(p));
    }
    if res.cpu_quota != 0 {
        // -1 is the kernel's "no limit".
        if res.cpu_quota < -1 {
            return Err(invalid(
                "cpu_quota",
                res.cpu_quota,
                "must be positive or -1",
            ));
        }
        cpu.set_quota(Some(res.cpu_quota));
    }
    if res.cpu_shares != 0 {
        let s = u64::try_from(res.cpu_shares)
            .map_err(|_| invalid("cpu_shares", res.cpu_shares, "must be positive"))?;
        cpu.set_shares(Some(s));
    }
    if !res.cpuset_cpus.is_empty() {
        check_cpuset(&res.cpuset_cpus, "cpuset_cpus")?;
        cpu.set_cpus(Some(res.cpuset_cpus.clone()));
    }
    if !res.cpuset_mems.is_empty() {
        check_cpuset(&res.cpuset_mems, "cpuset_mems")?;
        cpu.set_mems(Some(res.cpuset_mems.clone()));
    }
    Ok(())
}

/// The memory limit, and memory+swap where swap is accounted (`swap_accounting`): runc fails
/// to write `memory.memsw.limit_in_bytes` where it is not.
fn merge_memory(
    mem: &mut LinuxMemory,
    res: &cri::LinuxContainerResources,
    swap_accounting: bool,
) -> Result<(), OciError> {
    let limit = res.memory_limit_in_bytes;
    let swap = res.memory_swap_limit_in_bytes;
    if limit < 0 {
        return Err(OciError::invalid(
            format!("{FIELD}.memory_limit_in_bytes"),
            limit.to_string(),
            "must not be negative",
        ));
    }
    if swap < -1 {
        return Err(OciError::invalid(
            format!("{FIELD}.memory_swap_limit_in_bytes"),
            swap.to_string(),
            "must be positive or -1",
        ));
    }
    if limit != 0 {
        mem.set_limit(Some(limit));
        // Memory+swap equal to memory keeps the container from swapping unless asked to.
        if swap == 0 && swap_accounting {
            mem.set_swap(Some(limit));
        }
    }
    if swap != 0 && swap_accounting {
        mem.set_swap(Some(swap));
    }
    Ok(())
}

/// Huge page limits by page size, replacing a stored limit of the same size. Without the
/// hugetlb controller (`hugetlb`) they are dropped, as containerd's default
/// `tolerate_missing_hugetlb_controller` does: the Go kubelet sends a limit (0 unless asked)
/// for every page size the kernel has, whether or not the controller is there, and runc would
/// fail every container on them. The start-up line says so once; here only a non-zero limit,
/// which a pod really asked for, is worth a (debug) line.
fn merge_hugepages(
    out: &mut LinuxResources,
    limits: &[cri::HugepageLimit],
    hugetlb: bool,
) -> Result<(), OciError> {
    if limits.is_empty() {
        return Ok(());
    }
    if !hugetlb {
        if limits.iter().any(|l| l.limit != 0) {
            tracing::debug!(
                ?limits,
                "huge page limits dropped: no hugetlb controller on this node"
            );
        }
        return Ok(());
    }
    let mut all = out.hugepage_limits().clone().unwrap_or_default();
    for (i, l) in limits.iter().enumerate() {
        if l.page_size.trim().is_empty() {
            return Err(OciError::invalid(
                format!("{FIELD}.hugepage_limits[{i}].page_size"),
                &l.page_size,
                "must name a page size such as 2MB",
            ));
        }
        let limit = i64::try_from(l.limit).map_err(|_| {
            OciError::invalid(
                format!("{FIELD}.hugepage_limits[{i}].limit"),
                l.limit.to_string(),
                "too large",
            )
        })?;
        let mut h = LinuxHugepageLimit::default();
        h.set_page_size(l.page_size.clone()).set_limit(limit);
        match all.iter_mut().find(|e| e.page_size() == &l.page_size) {
            Some(existing) => *existing = h,
            None => all.push(h),
        }
    }
    out.set_hugepage_limits(Some(all));
    Ok(())
}

/// The annotations that ask for a resource class (goresctrl's keys, which containerd reads):
/// what, the container's own annotation, the pod's per-container prefix, the pod's.
const CLASS_ANNOTATIONS: [(&str, &str, &str, &str); 2] = [
    (
        "RDT",
        "io.kubernetes.cri.rdt-class",
        "rdt.resources.beta.kubernetes.io/container.",
        "rdt.resources.beta.kubernetes.io/pod",
    ),
    (
        "blockio",
        "io.kubernetes.cri.blockio-class",
        "blockio.resources.beta.kubernetes.io/container.",
        "blockio.resources.beta.kubernetes.io/pod",
    ),
];

/// Refuses a container whose annotations, or its pod's, ask for an RDT or blockio class.
/// ferrolet-cri configures neither, and containerd refuses such a container while they are
/// not configured (its defaults: no `rdt_config_file`/`blockio_config_file`,
/// `ignore_rdt_not_enabled_errors = false`), rather than run it without the cache or I/O
/// share it asked for. The class is looked up as goresctrl does: the container's annotation,
/// then the pod's for this container by name, then the pod's for all its containers.
pub(crate) fn check_resource_classes(
    container_name: &str,
    container_annotations: &HashMap<String, String>,
    pod_annotations: &HashMap<String, String>,
) -> Result<(), OciError> {
    for (what, own, per_container, pod) in CLASS_ANNOTATIONS {
        let per_container = format!("{per_container}{container_name}");
        let found = container_annotations
            .get(own)
            .map(|class| (format!("annotations[{own:?}]"), class))
            .or_else(|| {
                pod_annotations
                    .get(&per_container)
                    .map(|class| (format!("sandbox annotations[{per_container:?}]"), class))
            })
            .or_else(|| {
                pod_annotations
                    .get(pod)
                    .map(|class| (format!("sandbox annotations[{pod:?}]"), class))
            });
        if let Some((field, class)) = found {
            return Err(OciError::unsupported(
                field,
                class,
                format!("{what} classes are not enabled in ferrolet-cri, so none can be set"),
            ));
        }
    }
    Ok(())
}

/// `0-3,5,7-8` (the kernel's cpuset list format).
fn check_cpuset(list: &str, name: &str) -> Result<(), OciError> {
    let bad = |why: &str| OciError::invalid(format!("{FIELD}.{name}"), list, why);
    for part in list.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let lo: u32 = lo
            .trim()
            .parse()
            .map_err(|_| bad("expected a list like 0-3,5"))?;
        let hi: u32 = hi
            .trim()
            .parse()
            .map_err(|_| bad("expected a list like 0-3,5"))?;
        if lo > hi {
            return Err(bad("a range must not run backwards"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::cgroups::tests::{v1_with_hugetlb, v1_without_hugetlb, v1_without_swap, v2};
    use super::super::defaults::default_spec;
    use super::*;

    fn res() -> cri::LinuxContainerResources {
        cri::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit_in_bytes: 16 << 20,
            oom_score_adj: 500,
            cpuset_cpus: "0-1".into(),
            cpuset_mems: "0".into(),
            hugepage_limits: vec![],
            unified: HashMap::from([("memory.high".into(), "max".into())]),
            memory_swap_limit_in_bytes: 0,
        }
    }

    #[test]
    fn cri_resources_map_to_oci() {
        let r = linux_resources(&res(), &v1_with_hugetlb()).unwrap();
        let cpu = r.cpu().as_ref().unwrap();
        assert_eq!(cpu.period(), Some(100_000));
        assert_eq!(cpu.quota(), Some(50_000));
        assert_eq!(cpu.shares(), Some(512));
        assert_eq!(cpu.cpus().as_deref(), Some("0-1"));
        assert_eq!(cpu.mems().as_deref(), Some("0"));
        let mem = r.memory().unwrap();
        assert_eq!(mem.limit(), Some(16 << 20));
        assert_eq!(
            mem.swap(),
            Some(16 << 20),
            "memory+swap = memory: no swapping"
        );
        assert_eq!(r.unified().as_ref().unwrap()["memory.high"], "max");
        assert!(r.devices().is_none());
    }

    #[test]
    fn empty_resources_set_nothing() {
        for node in [v1_without_hugetlb(), v1_with_hugetlb(), v2()] {
            let r = linux_resources(&cri::LinuxContainerResources::default(), &node).unwrap();
            assert_eq!(r, LinuxResources::default());
        }
    }

    #[test]
    fn explicit_swap_wins_where_swap_is_accounted() {
        let unlimited = cri::LinuxContainerResources {
            memory_swap_limit_in_bytes: -1,
            ..res()
        };
        for node in [v1_without_hugetlb(), v2()] {
            let r = linux_resources(&unlimited, &node).unwrap();
            assert_eq!(r.memory().unwrap().swap(), Some(-1));
        }
        // Without swap accounting neither the asked-for nor the implied swap is set (runc
        // would fail on the missing memory.memsw files); the memory limit still is.
        let node = v1_without_swap();
        for asked in [unlimited, res()] {
            let mem = linux_resources(&asked, &node).unwrap().memory().unwrap();
            assert_eq!(mem.swap(), None);
            assert_eq!(mem.limit(), Some(16 << 20));
        }
    }

    #[test]
    fn bad_values_are_invalid_and_named() {
        let cases: Vec<(cri::LinuxContainerResources, &str)> = vec![
            (
                cri::LinuxContainerResources {
                    cpuset_cpus: "abc".into(),
                    ..res()
                },
                "linux.resources.cpuset_cpus \"abc\": expected a list like 0-3,5",
            ),
            (
                cri::LinuxContainerResources {
                    cpuset_mems: "3-1".into(),
                    ..res()
                },
                "linux.resources.cpuset_mems \"3-1\": a range must not run backwards",
            ),
            (
                cri::LinuxContainerResources {
                    cpu_shares: -2,
                    ..res()
                },
                "linux.resources.cpu_shares \"-2\": must be positive",
            ),
            (
                cri::LinuxContainerResources {
                    memory_limit_in_bytes: -5,
                    ..res()
                },
                "linux.resources.memory_limit_in_bytes \"-5\": must not be negative",
            ),
        ];
        for (r, want) in cases {
            let err = linux_resources(&r, &v2()).unwrap_err();
            assert_eq!(err.to_string(), want);
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
        }
        assert!(check_cpuset("0-3,5,7-8", "x").is_ok());
        assert!(check_cpuset("", "x").is_err());
    }

    #[test]
    fn oom_score_adj_is_clamped_up_to_our_own() {
        assert_eq!(clamp_oom_score_adj(-998, -500).unwrap(), -500);
        assert_eq!(clamp_oom_score_adj(1000, -500).unwrap(), 1000);
        assert_eq!(clamp_oom_score_adj(-998, -1000).unwrap(), -998);
        assert!(clamp_oom_score_adj(1001, 0).is_err());
        assert!(clamp_oom_score_adj(i64::MIN, 0).is_err());
    }

    #[test]
    fn updates_merge_into_the_stored_spec() {
        let node = v1_with_hugetlb();
        let mut spec = default_spec();
        update_resources(&mut spec, &res(), 0, &node).unwrap();
        assert_eq!(spec.process().as_ref().unwrap().oom_score_adj(), Some(500));
        let devices_before = spec
            .linux()
            .as_ref()
            .unwrap()
            .resources()
            .as_ref()
            .unwrap()
            .devices()
            .clone();
        assert!(devices_before.is_some(), "device rules survive updates");

        let update = cri::LinuxContainerResources {
            cpu_quota: 20_000,
            memory_limit_in_bytes: 32 << 20,
            oom_score_adj: -999,
            ..Default::default()
        };
        update_resources(&mut spec, &update, -10, &node).unwrap();
        let back = cri_resources(&spec).unwrap();
        assert_eq!(back.cpu_quota, 20_000);
        assert_eq!(back.cpu_period, 100_000, "zero fields keep their value");
        assert_eq!(back.cpu_shares, 512);
        assert_eq!(back.memory_limit_in_bytes, 32 << 20);
        assert_eq!(back.oom_score_adj, -10);
        assert_eq!(back.cpuset_cpus, "0-1");
        assert_eq!(back.unified["memory.high"], "max");
        let r = spec.linux().as_ref().unwrap().resources().as_ref().unwrap();
        assert_eq!(r.devices(), &devices_before);

        // A refused update leaves the spec alone.
        let before = spec.clone();
        let bad = cri::LinuxContainerResources {
            cpu_quota: 1,
            cpuset_cpus: "x".into(),
            ..Default::default()
        };
        assert!(update_resources(&mut spec, &bad, 0, &node).is_err());
        assert_eq!(spec, before);
    }

    #[test]
    fn hugepages_replace_by_size_where_hugetlb_is_mounted() {
        let mut out = LinuxResources::default();
        let two = |limit| cri::HugepageLimit {
            page_size: "2MB".into(),
            limit,
        };
        merge_hugepages(&mut out, &[two(1 << 21)], true).unwrap();
        merge_hugepages(&mut out, &[two(1 << 22)], true).unwrap();
        let h = out.hugepage_limits().as_ref().unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].limit(), 1 << 22);
        let err = merge_hugepages(
            &mut out,
            &[cri::HugepageLimit {
                page_size: String::new(),
                limit: 1,
            }],
            true,
        )
        .unwrap_err();
        assert!(err.to_string().contains("hugepage_limits[0].page_size"));
    }

    #[test]
    fn hugepages_are_dropped_without_hugetlb() {
        let mut out = LinuxResources::default();
        let kubelet = [
            cri::HugepageLimit {
                page_size: "2MB".into(),
                limit: 0,
            },
            cri::HugepageLimit {
                page_size: "1GB".into(),
                limit: 1 << 30,
            },
        ];
        merge_hugepages(&mut out, &kubelet, false).unwrap();
        assert!(out.hugepage_limits().is_none());
        // The decision is the node's: the same request keeps them where hugetlb is mounted.
        let asked = cri::LinuxContainerResources {
            hugepage_limits: kubelet.to_vec(),
            ..Default::default()
        };
        assert!(
            linux_resources(&asked, &v1_without_hugetlb())
                .unwrap()
                .hugepage_limits()
                .is_none()
        );
        for node in [v1_with_hugetlb(), v2()] {
            let r = linux_resources(&asked, &node).unwrap();
            assert_eq!(r.hugepage_limits().as_ref().unwrap().len(), 2);
        }
    }

    #[test]
    fn unified_and_cpusets_pass_through_as_containerd_passes_them() {
        // runc refuses `unified` on a v1 node and cpusets without a cpuset hierarchy when the
        // task is created; containerd passes both, and so do we.
        let node = v1_without_swap();
        let r = linux_resources(&res(), &node).unwrap();
        assert_eq!(r.unified().as_ref().unwrap()["memory.high"], "max");
        assert_eq!(r.cpu().as_ref().unwrap().cpus().as_deref(), Some("0-1"));
        let no_cpuset = CgroupSupport {
            controllers: node
                .controllers
                .iter()
                .filter(|c| *c != "cpuset")
                .cloned()
                .collect(),
            ..node
        };
        let r = linux_resources(&res(), &no_cpuset).unwrap();
        assert_eq!(r.cpu().as_ref().unwrap().mems().as_deref(), Some("0"));
    }

    #[test]
    fn resource_classes_are_refused_as_containerd_refuses_them_unconfigured() {
        let none = HashMap::new();
        assert!(check_resource_classes("app", &none, &none).is_ok());
        let one = |k: &str, v: &str| HashMap::from([(k.to_string(), v.to_string())]);
        let cases = [
            (
                one("io.kubernetes.cri.rdt-class", "gold"),
                none.clone(),
                "annotations[\"io.kubernetes.cri.rdt-class\"] \"gold\": RDT classes are not \
                 enabled in ferrolet-cri, so none can be set",
            ),
            (
                none.clone(),
                one("rdt.resources.beta.kubernetes.io/pod", "silver"),
                "sandbox annotations[\"rdt.resources.beta.kubernetes.io/pod\"] \"silver\": RDT \
                 classes are not enabled in ferrolet-cri, so none can be set",
            ),
            (
                none.clone(),
                one("blockio.resources.beta.kubernetes.io/container.app", "slow"),
                "sandbox annotations[\"blockio.resources.beta.kubernetes.io/container.app\"] \
                 \"slow\": blockio classes are not enabled in ferrolet-cri, so none can be set",
            ),
            (
                one("io.kubernetes.cri.blockio-class", "fast"),
                none.clone(),
                "annotations[\"io.kubernetes.cri.blockio-class\"] \"fast\": blockio classes \
                 are not enabled in ferrolet-cri, so none can be set",
            ),
        ];
        for (own, pod, want) in cases {
            let err = check_resource_classes("app", &own, &pod).unwrap_err();
            assert_eq!(err.to_string(), want);
            assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        }
        // Another container's per-container class is not this one's.
        let other = one("rdt.resources.beta.kubernetes.io/container.sidecar", "gold");
        assert!(check_resource_classes("app", &none, &other).is_ok());
    }

    #[test]
    fn cri_view_of_an_empty_spec() {
        let mut spec = default_spec();
        let r = cri_resources(&spec).unwrap();
        assert_eq!(r.cpu_shares, 0);
        spec.linux_mut().as_mut().unwrap().set_resources(None);
        assert!(cri_resources(&spec).is_none());
    }
}
