#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::config::EvictionConfig;
use super::manager::{EvictionManager, PodTerminator, eviction_message};
use super::rank::{self, RankBy};
use super::signals::*;
use super::*;
use crate::stats::pods::time_from_ns;
use crate::stats::types::*;
use crate::types::Pod;

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn find(ts: &[Threshold], s: Signal) -> Threshold {
    *ts.iter().find(|t| t.signal == s).unwrap()
}

#[test]
fn default_thresholds_are_go_s() {
    let ts = EvictionConfig::default().thresholds().unwrap();
    let names: Vec<&str> = ts.iter().map(|t| t.signal.name()).collect();
    assert_eq!(
        names,
        [
            "imagefs.available",
            "memory.available",
            "nodefs.available",
            "nodefs.inodesFree",
            "allocatableMemory.available"
        ]
    );
    assert_eq!(
        find(&ts, Signal::MemoryAvailable).value,
        ThresholdValue::Quantity(100 * MI)
    );
    assert_eq!(
        find(&ts, Signal::NodeFsAvailable).value,
        ThresholdValue::Percentage(0.1)
    );
    assert!(ts.iter().all(Threshold::is_hard));
    assert_eq!(
        find(&ts, Signal::NodeFsAvailable).to_string(),
        "threshold(signal=nodefs.available, operator=LessThan, value=10%, gracePeriod=0s)"
    );
    let c = EvictionConfig::default();
    assert_eq!(c.pressure_transition_period, Duration::from_secs(300));
}

#[test]
fn thresholds_parse_quantities_percentages_soft_and_reclaim() {
    let c = EvictionConfig {
        hard: Some(map(&[
            ("nodefs.available", "99%"),
            ("memory.available", "1Gi"),
        ])),
        soft: map(&[("memory.available", "2Gi")]),
        soft_grace_period: map(&[("memory.available", "1m30s")]),
        minimum_reclaim: map(&[("memory.available", "500Mi"), ("nodefs.available", "5%")]),
        ..Default::default()
    };
    let ts = c.thresholds().unwrap();
    // The configured map replaces the defaults: no imagefs threshold.
    assert!(ts.iter().all(|t| t.signal != Signal::ImageFsAvailable));
    let soft = ts
        .iter()
        .find(|t| t.signal == Signal::MemoryAvailable && !t.is_hard())
        .unwrap();
    assert_eq!(soft.grace_period, Duration::from_secs(90));
    assert_eq!(soft.value, ThresholdValue::Quantity(2 * GI));
    assert_eq!(soft.min_reclaim, Some(ThresholdValue::Quantity(500 * MI)));
    let nodefs = find(&ts, Signal::NodeFsAvailable);
    assert_eq!(nodefs.value.quantity(1000), 990);
    assert_eq!(nodefs.min_reclaim, Some(ThresholdValue::Percentage(0.05)));
    // Only the hard memory threshold is copied to allocatable memory.
    let alloc: Vec<_> = ts
        .iter()
        .filter(|t| t.signal == Signal::AllocatableMemoryAvailable)
        .collect();
    assert_eq!(alloc.len(), 1);
    assert!(alloc[0].is_hard());

    // 0% and 100% are ignored; merging fills in the defaults.
    let c = EvictionConfig {
        hard: Some(map(&[
            ("nodefs.available", "0%"),
            ("imagefs.available", "100%"),
        ])),
        ..Default::default()
    };
    assert!(c.thresholds().unwrap().is_empty());
    let c = EvictionConfig {
        hard: Some(map(&[("memory.available", "1Gi")])),
        merge_defaults: true,
        ..Default::default()
    };
    let ts = c.thresholds().unwrap();
    assert_eq!(
        find(&ts, Signal::MemoryAvailable).value,
        ThresholdValue::Quantity(GI)
    );
    assert_eq!(
        find(&ts, Signal::ImageFsAvailable).value,
        ThresholdValue::Percentage(0.15)
    );
}

#[test]
fn bad_thresholds_are_refused_with_the_field() {
    let bad = |c: EvictionConfig| c.thresholds().unwrap_err();
    let (field, reason) = bad(EvictionConfig {
        hard: Some(map(&[("disk.available", "1Gi")])),
        ..Default::default()
    });
    assert_eq!(
        (field.as_str(), reason.as_str()),
        ("evictionHard", "unsupported eviction signal disk.available")
    );
    let (field, reason) = bad(EvictionConfig {
        hard: Some(map(&[("nodefs.available", "120%")])),
        ..Default::default()
    });
    assert_eq!(field, "evictionHard[nodefs.available]");
    assert_eq!(
        reason,
        "eviction percentage threshold nodefs.available must be <= 100%: 120%"
    );
    let (_, reason) = bad(EvictionConfig {
        hard: Some(map(&[("memory.available", "0")])),
        ..Default::default()
    });
    assert_eq!(
        reason,
        "eviction threshold memory.available must be positive: 0"
    );
    let (field, _) = bad(EvictionConfig {
        hard: Some(map(&[("memory.available", "lots")])),
        ..Default::default()
    });
    assert_eq!(field, "evictionHard[memory.available]");
    let (field, reason) = bad(EvictionConfig {
        soft: map(&[("memory.available", "1Gi")]),
        ..Default::default()
    });
    assert_eq!(field, "evictionSoftGracePeriod");
    assert_eq!(
        reason,
        "grace period must be specified for the soft eviction threshold memory.available"
    );
    let (field, _) = bad(EvictionConfig {
        minimum_reclaim: map(&[("memory.available", "-1Gi")]),
        ..Default::default()
    });
    assert_eq!(field, "evictionMinimumReclaim[memory.available]");
}

#[test]
fn config_fields_read_from_yaml() {
    // Through the typed KubeletConfiguration (crate::config), as the file reads them.
    let load = |body: &str| {
        let yaml = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"
        );
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        let mut map = value.as_mapping().unwrap().clone();
        map.remove("apiVersion");
        map.remove("kind");
        let mut typed: crate::config::KubeletConfiguration =
            serde_yaml_ng::from_value(serde_yaml_ng::Value::Mapping(map))?;
        typed.set_defaults();
        Ok::<_, serde_yaml_ng::Error>(
            crate::config::Config::from_kubelet_config(typed)
                .unwrap()
                .eviction,
        )
    };
    let c = load(
        "evictionHard: {nodefs.available: '99%'}\nevictionPressureTransitionPeriod: 30s\n\
         evictionMaxPodGracePeriod: 20\nmergeDefaultEvictionSettings: true\n",
    )
    .unwrap();
    assert_eq!(c.hard, Some(map(&[("nodefs.available", "99%")])));
    assert_eq!(c.pressure_transition_period, Duration::from_secs(30));
    assert_eq!(c.max_pod_grace_period, 20);
    assert!(c.merge_defaults);
    assert!(load("evictionHard: {nodefs.available: 10}\n").is_err());
    assert!(load("evictionSoft: [a]\n").is_err());
    assert!(load("evictionPressureTransitionPeriod: soon\n").is_err());
    // null keeps the default (evictionHard: the defaults again).
    let c = load("evictionHard: null\n").unwrap();
    assert_eq!(
        c.effective_hard(),
        EvictionConfig::default().effective_hard()
    );
}

#[test]
fn quantities_print_as_go_prints_them() {
    assert_eq!(format_quantity(100 * MI, Resource::Memory), "100Mi");
    assert_eq!(
        format_quantity(3_500_000_000, Resource::Memory),
        "3500000000"
    );
    assert_eq!(format_quantity(1000, Resource::Memory), "1k");
    assert_eq!(format_quantity(5000, Resource::Inodes), "5k");
    assert_eq!(format_quantity(1500, Resource::Inodes), "1500");
    assert_eq!(format_quantity(0, Resource::EphemeralStorage), "0");
    // Single precision percentages, truncated.
    assert_eq!(
        ThresholdValue::Percentage(0.1).quantity(1_000_000_000),
        100_000_001
    );
    assert_eq!(ThresholdValue::Percentage(0.05).quantity(100), 5);
}

// ---------------------------------------------------------------------------------------------
// Observations.

const NOW: i64 = 1_714_557_600_000_000_000;

fn fs(available: u64, capacity: u64, inodes_free: u64, inodes: u64, at: i64) -> FsStats {
    FsStats {
        time: time_from_ns(at),
        available_bytes: Some(available),
        capacity_bytes: Some(capacity),
        used_bytes: Some(capacity - available),
        inodes_free: Some(inodes_free),
        inodes: Some(inodes),
        inodes_used: Some(inodes - inodes_free),
    }
}

fn memory(available: u64, ws: u64, at: i64) -> MemoryStats {
    MemoryStats {
        time: time_from_ns(at),
        available_bytes: Some(available),
        usage_bytes: Some(ws),
        working_set_bytes: Some(ws),
        rss_bytes: None,
        page_faults: None,
        major_page_faults: None,
        psi: None,
    }
}

fn summary(nodefs_available: u64, mem_available: u64, at: i64, pods: Vec<PodStats>) -> Summary {
    Summary {
        node: NodeStats {
            node_name: "n".into(),
            system_containers: vec![ContainerStats {
                name: SYSTEM_CONTAINER_PODS.into(),
                start_time: time_from_ns(at),
                cpu: None,
                memory: Some(memory(mem_available, 1000, at)),
                io: None,
                rootfs: None,
                logs: None,
            }],
            start_time: time_from_ns(at),
            cpu: None,
            memory: Some(memory(mem_available, 1000, at)),
            io: None,
            network: None,
            fs: Some(fs(nodefs_available, 1000, 90, 100, at)),
            runtime: Some(RuntimeStats {
                image_fs: Some(fs(nodefs_available, 1000, 90, 100, at)),
                container_fs: None,
            }),
            rlimit: Some(RlimitStats {
                time: time_from_ns(at),
                max_pid: Some(1000),
                num_of_running_processes: Some(100),
            }),
        },
        pods,
    }
}

#[test]
fn signals_are_observed_from_the_summary() {
    let obs = observe(&summary(400, 5000, NOW, Vec::new()));
    let get = |s| obs.get(&s).map(|o| (o.available, o.capacity));
    assert_eq!(get(Signal::MemoryAvailable), Some((5000, 6000)));
    assert_eq!(get(Signal::AllocatableMemoryAvailable), Some((5000, 6000)));
    assert_eq!(get(Signal::NodeFsAvailable), Some((400, 1000)));
    assert_eq!(get(Signal::NodeFsInodesFree), Some((90, 100)));
    assert_eq!(get(Signal::ImageFsAvailable), Some((400, 1000)));
    assert_eq!(get(Signal::PidAvailable), Some((900, 1000)));
    assert_eq!(get(Signal::ContainerFsAvailable), None);

    let ts = EvictionConfig {
        hard: Some(map(&[
            ("nodefs.available", "50%"),
            ("memory.available", "100"),
        ])),
        minimum_reclaim: map(&[("nodefs.available", "20%")]),
        ..Default::default()
    }
    .thresholds()
    .unwrap();
    let met = thresholds_met(&ts, &obs, false);
    assert_eq!(met.len(), 1);
    assert_eq!(met[0].signal, Signal::NodeFsAvailable);
    // 600 free: below 50% no more, but not yet 50% + 20%.
    let obs = observe(&summary(600, 5000, NOW, Vec::new()));
    assert!(thresholds_met(&ts, &obs, false).is_empty());
    assert_eq!(thresholds_met(&ts, &obs, true).len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Ranking.

fn pod(name: &str, yaml_spec: &str) -> Pod {
    serde_yaml_ng::from_str(&format!(
        "metadata: {{name: {name}, namespace: default, uid: {name}, annotations: {{kubernetes.io/config.source: api}}}}\nspec: {yaml_spec}"
    ))
    .unwrap()
}

fn stats(name: &str, ws: u64, rootfs: u64, logs: u64, volume: u64) -> PodStats {
    let fs_used = |used: u64| FsStats {
        used_bytes: Some(used),
        inodes_used: Some(used / 100),
        ..FsStats::empty(time_from_ns(NOW))
    };
    PodStats {
        pod_ref: PodReference {
            name: name.into(),
            namespace: "default".into(),
            uid: name.into(),
        },
        start_time: time_from_ns(NOW),
        containers: vec![ContainerStats {
            name: "c".into(),
            start_time: time_from_ns(NOW),
            cpu: None,
            memory: Some(memory(0, ws, NOW)),
            io: None,
            rootfs: Some(fs_used(rootfs)),
            logs: Some(fs_used(logs)),
        }],
        cpu: None,
        memory: Some(memory(0, ws, NOW)),
        io: None,
        network: None,
        volume_stats: vec![VolumeStats {
            fs: fs_used(volume),
            name: "data".into(),
            pvc_ref: None,
        }],
        ephemeral_storage: None,
        process_stats: Some(ProcessStats {
            process_count: Some(ws / 100),
        }),
    }
}

const REQ_100: &str = "{containers: [{name: c, image: x, resources: {requests: {memory: '100', ephemeral-storage: '100'}}}], volumes: [{name: data, emptyDir: {}}]}";
const NO_REQ: &str = "{containers: [{name: c, image: x}], volumes: [{name: data, emptyDir: {}}]}";

fn ranked(pods: &[Pod], all: &[PodStats], by: RankBy) -> Vec<String> {
    let mut refs: Vec<&Pod> = pods.iter().collect();
    let find = |p: &Pod| {
        all.iter()
            .find(|s| Some(s.pod_ref.uid.as_str()) == p.metadata.uid.as_deref())
    };
    rank::rank(&mut refs, by, &find);
    refs.iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

#[test]
fn memory_pressure_ranks_overuse_then_priority_then_usage() {
    let pods = vec![
        pod("within", REQ_100),
        pod("over-small", NO_REQ),
        pod("over-big", NO_REQ),
        pod(
            "over-important",
            &NO_REQ.replace("containers:", "priority: 1000, containers:"),
        ),
        pod("unknown", NO_REQ),
    ];
    let all = vec![
        stats("within", 90, 0, 0, 0),
        stats("over-small", 50, 0, 0, 0),
        stats("over-big", 500, 0, 0, 0),
        stats("over-important", 900, 0, 0, 0),
    ];
    assert_eq!(
        ranked(&pods, &all, RankBy::Memory),
        [
            "unknown",
            "over-big",
            "over-small",
            "over-important",
            "within"
        ]
    );
    // Pid pressure: priority, then process count.
    assert_eq!(
        ranked(&pods[..4], &all, RankBy::Pids),
        ["over-big", "within", "over-small", "over-important"]
    );
}

#[test]
fn disk_pressure_ranks_by_the_pressured_filesystem() {
    let pods = vec![
        pod("logs", NO_REQ),
        pod("layer", NO_REQ),
        pod("volume", REQ_100),
    ];
    let all = vec![
        stats("logs", 0, 10, 500, 0),
        stats("layer", 0, 800, 10, 0),
        stats("volume", 0, 0, 0, 1000),
    ];
    // One filesystem: everything counts; "volume" uses 1000 but requested 100.
    assert_eq!(
        ranked(&pods, &all, RankBy::Disk(rank::ALL_FS)),
        ["volume", "layer", "logs"]
    );
    // A dedicated image filesystem under pressure: writable layers only.
    assert_eq!(
        ranked(&pods, &all, RankBy::Disk(rank::IMAGE_FS)),
        ["layer", "logs", "volume"]
    );
    // nodefs then: logs and volumes.
    assert_eq!(
        ranked(&pods, &all, RankBy::Disk(rank::NODE_FS)),
        ["volume", "logs", "layer"]
    );
    assert_eq!(
        rank::rank_by(Signal::NodeFsAvailable, true),
        RankBy::Disk(rank::NODE_FS)
    );
    assert_eq!(
        rank::rank_by(Signal::ImageFsInodesFree, false),
        RankBy::Inodes(rank::ALL_FS)
    );
    assert_eq!(
        rank::rank_by(Signal::AllocatableMemoryAvailable, false),
        RankBy::Memory
    );
}

#[test]
fn pod_requests_add_up_as_go_s() {
    let p = pod(
        "p",
        "{initContainers: [{name: i, image: x, resources: {requests: {memory: 1Gi}}}, {name: s, image: x, restartPolicy: Always, resources: {requests: {memory: 100Mi}}}], containers: [{name: a, image: x, resources: {requests: {memory: 200Mi}}}, {name: b, image: x, resources: {limits: {memory: 300Mi}}}], overhead: {memory: 10Mi}}",
    );
    // max(200+300+100, 1024) + 10.
    assert_eq!(rank::pod_request(&p, "memory"), i128::from(1034 * MI));
}

// ---------------------------------------------------------------------------------------------
// The manager.

#[derive(Default)]
struct Recorder {
    evicted: Mutex<Vec<(String, i64, String)>>,
}

impl PodTerminator for Recorder {
    fn evict<'a>(
        &'a self,
        pod: &'a Pod,
        grace_secs: i64,
        message: &'a str,
    ) -> BoxFuture<'a, Result<(), String>> {
        self.evicted.lock().unwrap().push((
            pod.metadata.name.clone().unwrap_or_default(),
            grace_secs,
            message.to_string(),
        ));
        Box::pin(async { Ok(()) })
    }
}

fn static_pod(name: &str) -> Pod {
    let mut p = pod(name, NO_REQ);
    p.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/config.source".into(), "file".into());
    p
}

fn disk_manager() -> EvictionManager {
    let ts = EvictionConfig {
        hard: Some(map(&[("nodefs.available", "50%")])),
        ..Default::default()
    }
    .thresholds()
    .unwrap();
    EvictionManager::with_thresholds(ts, Duration::from_secs(60), 0)
}

fn condition(m: &EvictionManager, kind: &str) -> Option<(String, String)> {
    m.conditions()
        .into_iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status, c.reason.unwrap_or_default()))
}

#[tokio::test]
async fn disk_pressure_is_reported_and_static_pods_are_not_evicted() {
    let m = disk_manager();
    let rec = Recorder::default();
    let t0 = Instant::now();
    assert!(m.conditions().is_empty());
    // Plenty of space: no pressure.
    let ok = summary(900, 5000, NOW, Vec::new());
    let pods = vec![static_pod("web")];
    assert_eq!(m.synchronize(&ok, &pods, false, t0, &rec).await, None);
    assert_eq!(
        condition(&m, "DiskPressure"),
        Some(("False".into(), "KubeletHasNoDiskPressure".into()))
    );
    assert_eq!(
        condition(&m, "MemoryPressure"),
        Some(("False".into(), "KubeletHasSufficientMemory".into()))
    );
    // Low on disk: pressure, but the only pod is static (critical).
    let low = summary(
        100,
        5000,
        NOW + 10_000_000_000,
        vec![stats("web", 0, 10, 10, 0)],
    );
    assert_eq!(
        m.synchronize(&low, &pods, false, t0 + Duration::from_secs(10), &rec)
            .await,
        None
    );
    assert!(m.has_condition(Condition::DiskPressure));
    assert_eq!(
        condition(&m, "DiskPressure"),
        Some(("True".into(), "KubeletHasDiskPressure".into()))
    );
    assert!(rec.evicted.lock().unwrap().is_empty());
    let report = m.signals();
    let nodefs = report
        .iter()
        .find(|r| r.signal == "nodefs.available")
        .unwrap();
    assert_eq!((nodefs.available, nodefs.hard_threshold), (100, Some(500)));
    // Space back: the condition holds for the transition period, then clears.
    let back = summary(900, 5000, NOW + 20_000_000_000, Vec::new());
    m.synchronize(&back, &pods, false, t0 + Duration::from_secs(20), &rec)
        .await;
    assert!(m.has_condition(Condition::DiskPressure));
    m.synchronize(&back, &pods, false, t0 + Duration::from_secs(71), &rec)
        .await;
    assert!(!m.has_condition(Condition::DiskPressure));
}

#[tokio::test]
async fn one_pod_per_pass_is_evicted_in_rank_order() {
    let m = disk_manager();
    let rec = Recorder::default();
    let t0 = Instant::now();
    let pods = vec![
        static_pod("static"),
        pod("small", NO_REQ),
        pod("big", NO_REQ),
    ];
    let all = vec![
        stats("static", 0, 5000, 0, 0),
        stats("small", 0, 10, 10, 0),
        stats("big", 0, 300, 200, 0),
    ];
    let low = summary(100, 5000, NOW, all.clone());
    // The static pod uses most, but is critical: the next one goes, with a 1 s grace.
    assert_eq!(
        m.synchronize(&low, &pods, false, t0, &rec).await.as_deref(),
        Some("big")
    );
    assert_eq!(m.evicted("big").as_deref().map(|s| s.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: 500, available: 100. ")), Some(true));
    {
        let evicted = rec.evicted.lock().unwrap();
        assert_eq!(evicted.len(), 1);
        assert_eq!((evicted[0].0.as_str(), evicted[0].1), ("big", 1));
        assert!(evicted[0].2.contains("Container c was using 500, request is 0, has larger consumption of ephemeral-storage. "), "{}", evicted[0].2);
    }
    // The same stats again (nothing newer observed): no second eviction.
    let rest = vec![static_pod("static"), pod("small", NO_REQ)];
    assert_eq!(
        m.synchronize(&low, &rest, false, t0 + Duration::from_secs(10), &rec)
            .await,
        None
    );
    // Fresh stats, still low: the next pod.
    let low2 = summary(100, 5000, NOW + 10_000_000_000, all);
    assert_eq!(
        m.synchronize(&low2, &rest, false, t0 + Duration::from_secs(20), &rec)
            .await
            .as_deref(),
        Some("small")
    );
    m.forget_evicted(|uid| uid == "small");
    assert!(m.evicted("big").is_none() && m.evicted("small").is_some());
}

#[tokio::test]
async fn soft_thresholds_wait_for_their_grace_period() {
    let ts = EvictionConfig {
        hard: Some(BTreeMap::new()),
        soft: map(&[("memory.available", "5Ki")]),
        soft_grace_period: map(&[("memory.available", "30s")]),
        ..Default::default()
    }
    .thresholds()
    .unwrap();
    let m = EvictionManager::with_thresholds(ts, Duration::from_secs(60), 20);
    let rec = Recorder::default();
    let t0 = Instant::now();
    let mut p = pod("hog", NO_REQ);
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(45);
    let pods = vec![p];
    let low = |at: i64| summary(900, 1000, at, vec![stats("hog", 900, 0, 0, 0)]);
    assert_eq!(m.synchronize(&low(NOW), &pods, false, t0, &rec).await, None);
    assert!(m.has_condition(Condition::MemoryPressure));
    assert_eq!(
        m.synchronize(
            &low(NOW + 10_000_000_000),
            &pods,
            false,
            t0 + Duration::from_secs(10),
            &rec
        )
        .await,
        None
    );
    assert_eq!(
        m.synchronize(
            &low(NOW + 31_000_000_000),
            &pods,
            false,
            t0 + Duration::from_secs(31),
            &rec
        )
        .await
        .as_deref(),
        Some("hog")
    );
    // A soft eviction's grace: the pod's own, at most evictionMaxPodGracePeriod.
    let evicted = rec.evicted.lock().unwrap();
    assert_eq!(evicted[0].1, 20);
    assert!(evicted[0].2.starts_with("The node was low on resource: memory. Threshold quantity: 5Ki, available: 1k. Container c was using 900, request is 0"), "{}", evicted[0].2);
}

#[tokio::test]
async fn admission_under_pressure() {
    let m = disk_manager();
    assert!(m.admit(&pod("any", NO_REQ)).is_ok());
    let rec = Recorder::default();
    let low = summary(100, 5000, NOW, Vec::new());
    m.synchronize(&low, &[], false, Instant::now(), &rec).await;
    assert_eq!(
        m.admit(&pod("any", NO_REQ)).unwrap_err(),
        "The node had condition: [DiskPressure]. "
    );
    assert!(m.admit(&static_pod("s")).is_ok());
}

#[test]
fn eviction_messages_name_the_containers_over_their_requests() {
    let p = pod(
        "p",
        "{containers: [{name: c, image: x, resources: {requests: {memory: 64Mi}}}]}",
    );
    let s = stats("p", 128 << 20, 0, 0, 0);
    let ts = EvictionConfig::default().thresholds().unwrap();
    let obs = observe(&summary(900, 50 << 20, NOW, Vec::new()));
    let msg = eviction_message(Resource::Memory, &p, Some(&s), &ts, &obs, RankBy::Memory);
    assert_eq!(
        msg,
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
         Container c was using 128Mi, request is 64Mi, has larger consumption of memory. "
    );
}

#[test]
fn evicted_pods_are_failed_and_not_ready() {
    let mut status: k8s_openapi::api::core::v1::PodStatus = serde_json::from_value(serde_json::json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [{"name": "c", "image": "x", "imageID": "", "ready": true, "restartCount": 0,
            "containerID": "cri://1", "state": {"running": {"startedAt": "2024-05-01T10:00:00Z"}}}]
    }))
    .unwrap();
    let now = time_from_ns(NOW);
    evicted_status(&mut status, "low", &now);
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("Evicted"));
    assert_eq!(status.message.as_deref(), Some("low"));
    let conds = status.conditions.as_ref().unwrap();
    assert_eq!(
        conds.iter().find(|c| c.type_ == "Ready").unwrap().status,
        "False"
    );
    let dt = conds
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .unwrap();
    assert_eq!(
        (dt.status.as_str(), dt.reason.as_deref()),
        ("True", Some("TerminationByKubelet"))
    );
    let cs = &status.container_statuses.as_ref().unwrap()[0];
    assert!(!cs.ready);
    let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (137, Some("Error")));
}

#[test]
fn the_configuration_file_carries_the_eviction_fields() {
    use clap::Parser;
    use std::io::Write;
    let load = |body: &str| {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(
            f,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"
        )
        .unwrap();
        let path = f.path().to_str().unwrap().to_string();
        let flags = crate::config::Flags::try_parse_from([
            "ferrolet",
            "--hostname-override=node-a",
            "--config",
            path.as_str(),
        ])
        .unwrap();
        crate::config::Config::load(&flags)
    };
    let (c, warnings) = load(
        "evictionHard: {nodefs.available: '99%'}\nevictionPressureTransitionPeriod: 30s\n\
         evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m}\n\
         evictionMinimumReclaim: {memory.available: 100Mi}\nevictionMaxPodGracePeriod: 10\n",
    )
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.eviction.hard, Some(map(&[("nodefs.available", "99%")])));
    assert_eq!(
        c.eviction.pressure_transition_period,
        Duration::from_secs(30)
    );
    assert_eq!(c.eviction.max_pod_grace_period, 10);
    assert_eq!(c.eviction.thresholds().unwrap().len(), 2);
    match load("evictionHard: {nodefs.available: '200%'}\n") {
        Err(crate::config::ConfigError::Invalid { field, reason }) => {
            assert_eq!(field, "evictionHard[nodefs.available]");
            assert!(reason.contains("must be <= 100%"), "{reason}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    match load("evictionSoft: {memory.available: 1Gi}\n") {
        Err(crate::config::ConfigError::Invalid { field, .. }) => {
            assert_eq!(field, "evictionSoftGracePeriod");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}
