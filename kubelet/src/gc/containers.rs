//! Container garbage collection, as the Go kubelet's `kuberuntime_gc.go`: dead containers
//! beyond `maxPerPodContainer` per (pod, container name) and beyond `maxContainers` in all,
//! oldest first, once older than `minAge`, keeping the newest dead instance of each so that
//! `previous` logs and `lastState` still work; every dead container of a deleted pod; then
//! sandboxes that are not ready and hold no container (all of a deleted pod's, all but the
//! newest of a live pod's); then the log dirs of deleted pods.
//!
//! The planning functions are pure (they take the runtime's view and answer what to
//! remove); [`collect`] runs them against the runtime.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use ferrolet_proto::cri::ContainerState;

use crate::cri::{Cri, CriError};
use crate::types::{RuntimePod, labels};

/// The container GC policy (Go's `ContainerGCPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerGcPolicy {
    /// Dead instances kept per (pod, container name); negative = no limit.
    pub max_per_pod_container: i32,
    /// Dead containers kept in all; negative = no limit.
    pub max_containers: i32,
    /// How old (since creation) a dead container must be before it may go.
    pub min_age: Duration,
}

/// A container the GC considers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcContainer {
    /// CRI id.
    pub id: String,
    /// Owning pod's UID.
    pub pod_uid: String,
    /// Container name in the pod.
    pub name: String,
    /// Its sandbox.
    pub sandbox_id: String,
    /// CRI state.
    pub state: ContainerState,
    /// Creation time, nanoseconds since the epoch.
    pub created_at: i64,
    /// CRI metadata attempt (breaks creation-time ties).
    pub attempt: u32,
    /// Grace period to stop it with, when its state is unknown (it may still run).
    pub grace_secs: i64,
}

/// A sandbox the GC considers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcSandbox {
    /// CRI id.
    pub id: String,
    /// Owning pod's UID.
    pub pod_uid: String,
    /// Ready (its pause process runs).
    pub ready: bool,
    /// Creation time, nanoseconds since the epoch.
    pub created_at: i64,
    /// CRI metadata attempt.
    pub attempt: u32,
}

/// Go's floor on the grace period of a kill (`minimumGracePeriodInSeconds`).
const MIN_GRACE_SECS: i64 = 2;

/// Flattens the runtime's pods into what the GC looks at.
pub fn from_runtime(pods: &[RuntimePod]) -> (Vec<GcContainer>, Vec<GcSandbox>) {
    let mut containers = Vec::new();
    let mut sandboxes = Vec::new();
    for pod in pods {
        for c in &pod.containers {
            let grace = c
                .annotations
                .get(labels::GRACE_PERIOD)
                .and_then(|g| g.parse::<i64>().ok())
                .unwrap_or(30)
                .max(MIN_GRACE_SECS);
            containers.push(GcContainer {
                id: c.id.clone(),
                pod_uid: pod.uid.clone(),
                name: c.name.clone(),
                sandbox_id: c.sandbox_id.clone(),
                state: c.state,
                created_at: c.created_at,
                attempt: c.attempt,
                grace_secs: grace,
            });
        }
        for s in &pod.sandboxes {
            sandboxes.push(GcSandbox {
                id: s.id.clone(),
                pod_uid: pod.uid.clone(),
                ready: s.ready,
                created_at: s.created_at,
                attempt: s.attempt,
            });
        }
    }
    (containers, sandboxes)
}

/// Which dead containers go (oldest first within each group), given the time `now_ns`
/// (nanoseconds since the epoch), whether every pod source has spoken, and which pods are
/// deleted. Running containers, and dead ones younger than `min_age`, are never chosen.
pub fn plan_containers(
    containers: &[GcContainer],
    policy: &ContainerGcPolicy,
    now_ns: i64,
    sources_ready: bool,
    is_deleted: &dyn Fn(&str) -> bool,
) -> Vec<GcContainer> {
    let min_age_ns = i64::try_from(policy.min_age.as_nanos()).unwrap_or(i64::MAX);
    let newest_gc_time = now_ns.saturating_sub(min_age_ns);
    // Evict units: (pod UID, container name) → evictable instances, newest first.
    let mut units: BTreeMap<(String, String), Vec<GcContainer>> = BTreeMap::new();
    for c in containers {
        if c.state == ContainerState::ContainerRunning || c.created_at > newest_gc_time {
            continue;
        }
        units
            .entry((c.pod_uid.clone(), c.name.clone()))
            .or_default()
            .push(c.clone());
    }
    for unit in units.values_mut() {
        unit.sort_by(newest_first);
    }
    let mut removed = Vec::new();
    if sources_ready {
        units.retain(|(uid, _), unit| {
            if is_deleted(uid) {
                removed.append(unit);
                false
            } else {
                true
            }
        });
    }
    if policy.max_per_pod_container >= 0 {
        keep_newest_per_unit(
            &mut units,
            policy.max_per_pod_container as usize,
            &mut removed,
        );
    }
    let total: usize = units.values().map(Vec::len).sum();
    if policy.max_containers >= 0 && total > policy.max_containers as usize && !units.is_empty() {
        let max = policy.max_containers as usize;
        // An equal share per unit first (at least one each), then the oldest overall.
        let share = (max / units.len()).max(1);
        keep_newest_per_unit(&mut units, share, &mut removed);
        let total: usize = units.values().map(Vec::len).sum();
        if total > max {
            let mut all: Vec<GcContainer> = units.into_values().flatten().collect();
            all.sort_by(newest_first);
            removed.extend(all.drain(max..));
        }
    }
    removed
}

/// Which sandboxes go: not ready and holding none of `containers` (the ones left after the
/// container pass); all such of a deleted pod, all but the newest sandbox of a live one.
pub fn plan_sandboxes(
    sandboxes: &[GcSandbox],
    containers: &[GcContainer],
    is_deleted: &dyn Fn(&str) -> bool,
) -> Vec<GcSandbox> {
    let holding: HashSet<&str> = containers.iter().map(|c| c.sandbox_id.as_str()).collect();
    let mut by_pod: BTreeMap<&str, Vec<&GcSandbox>> = BTreeMap::new();
    for s in sandboxes {
        by_pod.entry(s.pod_uid.as_str()).or_default().push(s);
    }
    let mut removed = Vec::new();
    for (uid, mut list) in by_pod {
        list.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.attempt.cmp(&a.attempt))
        });
        // A live pod keeps its newest sandbox whatever its state (the next sync needs it
        // to count attempts); a deleted pod keeps none.
        let skip = usize::from(!is_deleted(uid));
        removed.extend(
            list.into_iter()
                .skip(skip)
                .filter(|s| !s.ready && !holding.contains(s.id.as_str()))
                .cloned(),
        );
    }
    removed
}

fn newest_first(a: &GcContainer, b: &GcContainer) -> std::cmp::Ordering {
    b.created_at
        .cmp(&a.created_at)
        .then(b.attempt.cmp(&a.attempt))
}

fn keep_newest_per_unit(
    units: &mut BTreeMap<(String, String), Vec<GcContainer>>,
    keep: usize,
    removed: &mut Vec<GcContainer>,
) {
    for unit in units.values_mut() {
        if unit.len() > keep {
            removed.extend(unit.drain(keep..));
        }
    }
}

/// The pod UID of a pod log dir name (`<namespace>_<name>_<uid>`); None for other names.
pub fn log_dir_uid(name: &str) -> Option<&str> {
    let mut parts = name.splitn(3, '_');
    let (ns, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    (!ns.is_empty() && !pod.is_empty() && !uid.is_empty() && !uid.contains('_')).then_some(uid)
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerGcReport {
    /// Containers removed.
    pub containers: usize,
    /// Sandboxes removed.
    pub sandboxes: usize,
    /// Pod log dirs removed.
    pub log_dirs: usize,
}

/// What the GC asks of the kubelet about pods.
pub trait PodStates: Send + Sync {
    /// Whether every pod source has listed its pods once (until then nothing is deleted).
    fn sources_ready(&self) -> bool;
    /// Whether the pod is gone for good: no source wants it and no worker is busy with it.
    fn is_deleted(&self, uid: &str) -> bool;
}

/// One container GC pass against the runtime: containers, then sandboxes (from a fresh
/// list, so those emptied by the first step go too), then pod log dirs under `pod_logs_dir`.
/// Errors of single removals are logged and skipped; listing errors end the pass.
pub async fn collect(
    cri: &Cri,
    policy: &ContainerGcPolicy,
    pods: &dyn PodStates,
    pod_logs_dir: &std::path::Path,
) -> Result<ContainerGcReport, CriError> {
    let mut report = ContainerGcReport::default();
    let ready = pods.sources_ready();
    let is_deleted = |uid: &str| ready && pods.is_deleted(uid);
    let (containers, _) = from_runtime(&cri.runtime_pods().await?);
    let doomed = plan_containers(&containers, policy, now_ns(), ready, &is_deleted);
    for c in &doomed {
        if c.state == ContainerState::ContainerUnknown {
            // It may still run: stop it first, as Go's GC does.
            if let Err(e) = cri.stop_container(&c.id, c.grace_secs).await
                && !e.is_not_found()
            {
                tracing::warn!(id = %c.id, error = %e, "container GC: stopping a container in unknown state");
                continue;
            }
        }
        // As the Go kubelet: the log goes first, then the container.
        if let Err(e) = remove_container_log(cri, &c.id).await {
            if e.is_not_found() {
                continue;
            }
            tracing::warn!(id = %c.id, error = %e, "container GC: reading a dead container's log path");
        }
        match cri.remove_container(&c.id).await {
            Ok(()) => report.containers += 1,
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                tracing::warn!(id = %c.id, error = %e, "container GC: removing a dead container")
            }
        }
    }
    let runtime = cri.runtime_pods().await?;
    let (containers, sandboxes) = from_runtime(&runtime);
    for s in plan_sandboxes(&sandboxes, &containers, &is_deleted) {
        // Normally stopped already; a sandbox that is not may still hold a network.
        if let Err(e) = cri.stop_pod_sandbox(&s.id).await
            && !e.is_not_found()
        {
            tracing::warn!(id = %s.id, error = %e, "container GC: stopping a sandbox before removal");
            continue;
        }
        match cri.remove_pod_sandbox(&s.id).await {
            Ok(()) => report.sandboxes += 1,
            Err(e) if e.is_not_found() => {}
            Err(e) => tracing::warn!(id = %s.id, error = %e, "container GC: removing a sandbox"),
        }
    }
    if ready {
        let in_runtime: HashSet<&str> = runtime.iter().map(|p| p.uid.as_str()).collect();
        report.log_dirs = evict_pod_log_dirs(pod_logs_dir, &|uid| {
            is_deleted(uid) && !in_runtime.contains(uid)
        })
        .await;
    }
    Ok(report)
}

/// Removes a container's log file and its rotated files (`<log path>*`, as Go's log manager
/// cleans them).
async fn remove_container_log(cri: &Cri, id: &str) -> Result<(), CriError> {
    let status = cri.container_status(id).await?;
    if status.log_path.is_empty() {
        return Ok(());
    }
    let path = std::path::Path::new(&status.log_path);
    let (Some(dir), Some(base)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Ok(());
    };
    for file in log_files(dir, base).await {
        if let Err(e) = tokio::fs::remove_file(&file).await
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(file = %file.display(), error = %e, "container GC: removing a container log");
        }
    }
    Ok(())
}

/// The files in `dir` whose names start with `base` (the log and its rotations).
async fn log_files(dir: &std::path::Path, base: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(mut rd) = tokio::fs::read_dir(dir).await else {
        return out;
    };
    while let Ok(Some(entry)) = rd.next_entry().await {
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(base))
        {
            out.push(entry.path());
        }
    }
    out.sort();
    out
}

/// Removes the log dirs of deleted pods (those the kill did not get to, e.g. a pod removed
/// while the kubelet was down and its runtime pod already gone); returns how many.
async fn evict_pod_log_dirs(dir: &std::path::Path, gone: &(dyn Fn(&str) -> bool + Sync)) -> usize {
    let Ok(mut rd) = tokio::fs::read_dir(dir).await else {
        return 0;
    };
    let mut removed = 0;
    while let Ok(Some(entry)) = rd.next_entry().await {
        let name = entry.file_name();
        let Some(uid) = name.to_str().and_then(log_dir_uid) else {
            continue;
        };
        if !gone(uid) {
            continue;
        }
        match tokio::fs::remove_dir_all(entry.path()).await {
            Ok(()) => {
                tracing::info!(dir = %entry.path().display(), "container GC: removed the log dir of a deleted pod");
                removed += 1;
            }
            Err(e) => {
                tracing::warn!(dir = %entry.path().display(), error = %e, "container GC: removing a pod log dir")
            }
        }
    }
    removed
}

/// Nanoseconds since the epoch, as CRI times are.
fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::types::{RuntimeContainer, RuntimeSandbox};

    const S: i64 = 1_000_000_000;
    const NOW: i64 = 1_000 * S;

    fn dead(id: &str, uid: &str, name: &str, created_s: i64) -> GcContainer {
        GcContainer {
            id: id.into(),
            pod_uid: uid.into(),
            name: name.into(),
            sandbox_id: format!("sb-{uid}"),
            state: ContainerState::ContainerExited,
            created_at: created_s * S,
            attempt: 0,
            grace_secs: 30,
        }
    }

    fn policy(per: i32, max: i32, min_age_s: u64) -> ContainerGcPolicy {
        ContainerGcPolicy {
            max_per_pod_container: per,
            max_containers: max,
            min_age: Duration::from_secs(min_age_s),
        }
    }

    fn ids(v: &[GcContainer]) -> Vec<&str> {
        let mut ids: Vec<&str> = v.iter().map(|c| c.id.as_str()).collect();
        ids.sort_unstable();
        ids
    }

    fn none(_: &str) -> bool {
        false
    }

    #[test]
    fn keeps_the_newest_dead_instance_per_container() {
        let mut running = dead("run", "p", "app", 900);
        running.state = ContainerState::ContainerRunning;
        let all = vec![
            dead("a1", "p", "app", 100),
            dead("a2", "p", "app", 300),
            dead("a3", "p", "app", 200),
            running,
            dead("s1", "p", "side", 100),
            dead("q1", "q", "app", 50),
            dead("q2", "q", "app", 60),
        ];
        let out = plan_containers(&all, &policy(1, -1, 0), NOW, true, &none);
        // Newest dead of each unit stays (a2, s1, q2); the running one is never a candidate.
        assert_eq!(ids(&out), ["a1", "a3", "q1"]);
        let out = plan_containers(&all, &policy(2, -1, 0), NOW, true, &none);
        assert_eq!(ids(&out), ["a1"]);
        // Negative: no per-container limit.
        assert!(plan_containers(&all, &policy(-1, -1, 0), NOW, true, &none).is_empty());
        // Zero: every dead instance goes.
        let out = plan_containers(&all, &policy(0, -1, 0), NOW, true, &none);
        assert_eq!(ids(&out), ["a1", "a2", "a3", "q1", "q2", "s1"]);
    }

    #[test]
    fn young_containers_wait_for_min_age() {
        let all = vec![
            dead("old", "p", "app", 100),
            dead("mid", "p", "app", 950),
            dead("new", "p", "app", 990),
        ];
        // Min age 60 s: "mid" is 50 s old, so only "old" is evictable; kept as the newest
        // evictable instance unless nothing is to be kept.
        assert_eq!(
            ids(&plan_containers(&all, &policy(0, -1, 60), NOW, true, &none)),
            ["old"]
        );
        assert!(plan_containers(&all, &policy(1, -1, 60), NOW, true, &none).is_empty());
        assert_eq!(
            ids(&plan_containers(&all, &policy(1, -1, 5), NOW, true, &none)),
            ["mid", "old"]
        );
    }

    #[test]
    fn deleted_pods_lose_every_dead_container_once_sources_are_ready() {
        let all = vec![
            dead("g1", "gone", "app", 100),
            dead("g2", "gone", "app", 200),
            dead("k1", "kept", "app", 100),
        ];
        let deleted = |uid: &str| uid == "gone";
        assert_eq!(
            ids(&plan_containers(
                &all,
                &policy(1, -1, 0),
                NOW,
                true,
                &deleted
            )),
            ["g1", "g2"]
        );
        // Before every source has spoken, a pod not listed yet is not deleted.
        assert_eq!(
            ids(&plan_containers(
                &all,
                &policy(1, -1, 0),
                NOW,
                false,
                &deleted
            )),
            ["g1"]
        );
    }

    #[test]
    fn max_containers_spreads_then_takes_the_oldest() {
        let all = vec![
            dead("a1", "p", "a", 100),
            dead("a2", "p", "a", 200),
            dead("a3", "p", "a", 300),
            dead("b1", "p", "b", 150),
            dead("b2", "p", "b", 250),
            dead("c1", "q", "c", 50),
        ];
        // 6 dead, at most 3: one per unit (a3, b2, c1) is exactly 3.
        assert_eq!(
            ids(&plan_containers(&all, &policy(-1, 3, 0), NOW, true, &none)),
            ["a1", "a2", "b1"]
        );
        // At most 2 over 3 units: one each is still 3, so the oldest of those (c1) goes too.
        assert_eq!(
            ids(&plan_containers(&all, &policy(-1, 2, 0), NOW, true, &none)),
            ["a1", "a2", "b1", "c1"]
        );
        // At most 4: share is 1 (4 / 3), leaving 3 <= 4.
        assert_eq!(
            ids(&plan_containers(&all, &policy(-1, 4, 0), NOW, true, &none)),
            ["a1", "a2", "b1"]
        );
        // Under the limit: nothing.
        assert!(plan_containers(&all, &policy(-1, 6, 0), NOW, true, &none).is_empty());
    }

    #[test]
    fn creation_time_ties_are_broken_by_attempt() {
        let mut a = dead("a", "p", "app", 100);
        a.attempt = 1;
        let mut b = dead("b", "p", "app", 100);
        b.attempt = 2;
        assert_eq!(
            ids(&plan_containers(
                &[a, b],
                &policy(1, -1, 0),
                NOW,
                true,
                &none
            )),
            ["a"]
        );
    }

    #[test]
    fn sandboxes_go_when_not_ready_empty_and_not_the_newest_of_a_live_pod() {
        let sb = |id: &str, uid: &str, ready: bool, created_s: i64| GcSandbox {
            id: id.into(),
            pod_uid: uid.into(),
            ready,
            created_at: created_s * S,
            attempt: 0,
        };
        let sandboxes = vec![
            sb("live-old", "live", false, 100),
            sb("live-old-busy", "live", false, 150),
            sb("live-new", "live", false, 200),
            sb("gone-1", "gone", false, 100),
            sb("gone-2", "gone", true, 200),
            sb("gone-3", "gone", false, 300),
        ];
        let mut c = dead("c", "live", "app", 100);
        c.sandbox_id = "live-old-busy".into();
        let deleted = |uid: &str| uid == "gone";
        let mut out: Vec<String> = plan_sandboxes(&sandboxes, &[c], &deleted)
            .into_iter()
            .map(|s| s.id)
            .collect();
        out.sort();
        // live-new is kept as the newest; live-old-busy holds a container; gone-2 is ready.
        assert_eq!(out, ["gone-1", "gone-3", "live-old"]);
    }

    #[test]
    fn runtime_pods_flatten_with_grace_periods() {
        let pod = RuntimePod {
            uid: "u".into(),
            sandboxes: vec![RuntimeSandbox {
                id: "s".into(),
                ready: true,
                created_at: 5,
                attempt: 1,
                ..Default::default()
            }],
            containers: vec![
                RuntimeContainer {
                    id: "c".into(),
                    sandbox_id: "s".into(),
                    name: "app".into(),
                    state: ContainerState::ContainerUnknown,
                    created_at: 7,
                    annotations: [(labels::GRACE_PERIOD.to_string(), "0".to_string())].into(),
                    ..Default::default()
                },
                RuntimeContainer {
                    id: "d".into(),
                    sandbox_id: "s".into(),
                    name: "side".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let (containers, sandboxes) = from_runtime(&[pod]);
        assert_eq!(containers.len(), 2);
        assert_eq!(containers[0].pod_uid, "u");
        assert_eq!(containers[0].grace_secs, MIN_GRACE_SECS, "floored");
        assert_eq!(containers[1].grace_secs, 30, "default");
        assert_eq!(sandboxes[0].id, "s");
        assert!(sandboxes[0].ready);
    }

    #[test]
    fn log_dir_names() {
        assert_eq!(log_dir_uid("default_web-node_1234-abcd"), Some("1234-abcd"));
        assert_eq!(log_dir_uid("kube-system_a_b_c"), None);
        assert_eq!(log_dir_uid("nouid"), None);
        assert_eq!(log_dir_uid("ns__uid"), None);
    }

    #[tokio::test]
    async fn a_log_is_found_with_its_rotations_only() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "1.log",
            "1.log.20240501-100000.000000000",
            "1.log.20240501-100000.000000000.gz",
            "10.log",
            "2.log",
        ] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let names: Vec<String> = log_files(dir.path(), "1.log")
            .await
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "1.log",
                "1.log.20240501-100000.000000000",
                "1.log.20240501-100000.000000000.gz"
            ]
        );
        assert!(
            log_files(&dir.path().join("missing"), "1.log")
                .await
                .is_empty()
        );
    }

    #[tokio::test]
    async fn log_dirs_of_deleted_pods_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["default_a_gone", "default_b_kept", "not-a-pod-dir"] {
            std::fs::create_dir_all(dir.path().join(name).join("c")).unwrap();
        }
        let n = evict_pod_log_dirs(dir.path(), &|uid| uid == "gone").await;
        assert_eq!(n, 1);
        assert!(!dir.path().join("default_a_gone").exists());
        assert!(dir.path().join("default_b_kept").exists());
        assert!(dir.path().join("not-a-pod-dir").exists());
        assert_eq!(
            evict_pod_log_dirs(&dir.path().join("missing"), &|_| true).await,
            0
        );
    }
}
