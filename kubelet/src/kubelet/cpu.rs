//! The static CPU manager at the points Go's kubelet calls it: admission allocates each
//! container's CPUs (init containers first), a container is created with its cpuset and then
//! recorded, and a loop every `cpuManagerReconcilePeriod` drops the state of pods that are
//! gone (which returns their CPUs to the shared pool) and pushes changed cpusets to running
//! containers with UpdateContainerResources. The manager writes its state file, so it is
//! only locked in blocking tasks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ferrolet_proto::cri::{ContainerState, LinuxContainerResources};

use super::Kubelet;
use crate::admission::{Rejection, unexpected_admission_error};
use crate::cm::cpu_manager::{CpuManager, CpuManagerError, RunningContainer};
use crate::podspec::init_and_app_containers;
use crate::types::{Pod, RuntimePod, uid_of};

type Shared = Arc<Mutex<CpuManager>>;

/// Runs `f` on the manager in a blocking task; an error if the task panicked.
async fn with_manager<R: Send + 'static>(
    cpu: &Shared,
    f: impl FnOnce(&mut CpuManager) -> R + Send + 'static,
) -> Result<R, tokio::task::JoinError> {
    let cpu = cpu.clone();
    tokio::task::spawn_blocking(move || {
        let mut m = cpu.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut m)
    })
    .await
}

/// The running containers of the `active` pods in the runtime's view, as the reconcile
/// pass sees them: per container name only the newest counts (Go reads the pod status, which
/// shows the latest), and an exited one is skipped (it keeps its CPUs until its pod goes).
fn running_containers(active: &[Arc<Pod>], runtime: &[RuntimePod]) -> Vec<RunningContainer> {
    let wanted: BTreeMap<String, BTreeSet<&str>> = active
        .iter()
        .map(|p| {
            let names = p
                .spec
                .iter()
                .flat_map(init_and_app_containers)
                .map(|c| c.name.as_str());
            (uid_of(p), names.collect())
        })
        .collect();
    let mut running = Vec::new();
    for pod in runtime {
        let Some(names) = wanted.get(&pod.uid) else {
            continue;
        };
        let mut newest = pod.containers.iter().collect::<Vec<_>>();
        newest.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        let mut seen = BTreeSet::new();
        for c in newest {
            if !names.contains(c.name.as_str()) || !seen.insert(c.name.as_str()) {
                continue;
            }
            if c.state == ContainerState::ContainerRunning {
                running.push(RunningContainer {
                    pod_uid: pod.uid.clone(),
                    container_name: c.name.clone(),
                    container_id: c.id.clone(),
                });
            }
        }
    }
    running
}

/// What the CPU manager's stale check counts as active besides the admitted pods: the pods
/// between their allocation and their entry in `pods` (Go adds a pod to its pod manager
/// before admitting it), and the allocations made, so a pass that read the active pods
/// before an allocation does not drop the CPUs it gave.
#[derive(Debug, Default)]
pub(crate) struct CpuAdmissions {
    admitting: Mutex<Vec<Arc<Pod>>>,
    allocations: AtomicU64,
}

/// The active pods as one pass read them, and the allocations made before that.
struct ActivePods {
    pods: Vec<Arc<Pod>>,
    allocations: u64,
}

impl CpuAdmissions {
    /// The active pods: `listed` (the admitted ones) and those being admitted. The count is
    /// read first and `admitting` before `listed`: a pod leaves `admitting` only once it is
    /// listed, so every allocation counted belongs to a pod in the result.
    fn read(&self, listed: impl FnOnce() -> Vec<Arc<Pod>>) -> ActivePods {
        let allocations = self.allocations.load(Ordering::SeqCst);
        let mut pods = self
            .admitting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let listed = listed();
        pods.retain(|a| !listed.iter().any(|p| Arc::ptr_eq(p, a)));
        pods.extend(listed);
        ActivePods { pods, allocations }
    }

    /// `pod` counts as active from now until [`CpuAdmissions::done`].
    fn begin(&self, pod: &Arc<Pod>) {
        self.admitting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(pod.clone());
    }

    /// Pod `uid`, admitted or rejected, is in `pods` now.
    fn done(&self, uid: &str) {
        self.admitting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|p| uid_of(p) != uid);
    }

    /// Allocates the CPUs of `pod`'s init and then app containers; `m` is locked by the
    /// caller, as it is for [`CpuAdmissions::remove_stale_state`].
    fn allocate(&self, m: &mut CpuManager, pod: &Pod) -> Result<(), CpuManagerError> {
        self.allocations.fetch_add(1, Ordering::SeqCst);
        for c in pod.spec.iter().flat_map(init_and_app_containers) {
            m.allocate(pod, c)?;
        }
        Ok(())
    }

    /// Drops the state of the pods not in `active` unless an allocation was made since it
    /// was read: that pod is not in it, and the next pass checks again. Whether it checked.
    fn remove_stale_state(&self, m: &mut CpuManager, active: &ActivePods) -> bool {
        if self.allocations.load(Ordering::SeqCst) != active.allocations {
            return false;
        }
        m.remove_stale_state(active.pods.iter().map(AsRef::as_ref));
        true
    }
}

impl Kubelet {
    /// The pods whose containers keep their CPUs (Go's `GetActivePods`): admitted and not
    /// yet terminated (a finished one only while it is still being killed), and those being
    /// admitted.
    fn cpu_active_pods(&self) -> ActivePods {
        self.cpu_admissions.read(|| {
            self.pods
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .filter(|s| !s.rejected && !s.terminated)
                .filter(|s| {
                    s.terminating
                        || !s
                            .status
                            .phase
                            .as_deref()
                            .is_some_and(crate::status::phase::is_terminal)
                })
                .map(|s| s.pod.clone())
                .collect()
        })
    }

    /// A pod admitted (or rejected) is in `pods` now.
    pub(super) fn cpu_admission_done(&self, uid: &str) {
        self.cpu_admissions.done(uid);
    }

    /// Admission's CPU allocation (Go's topology manager admit handler with the `none`
    /// topology policy, calling the CPU manager's `Allocate` for each init and then app
    /// container); a failure rejects the pod with Go's `UnexpectedAdmissionError`. Stale
    /// state is dropped first once every source has been seen: before that a live pod may
    /// just not be listed yet and must not lose its CPUs (Go's `removeStaleState`).
    pub(super) async fn allocate_cpus(&self, pod: &Arc<Pod>) -> Result<(), Rejection> {
        let Some(cpu) = &self.cpu else {
            return Ok(());
        };
        // Active from now until it is in `pods`, so no reconcile pass drops what it gets.
        self.cpu_admissions.begin(pod);
        let active = self
            .sources_ready
            .load(Ordering::Relaxed)
            .then(|| self.cpu_active_pods());
        let (admissions, pod) = (self.cpu_admissions.clone(), pod.clone());
        let allocated = with_manager(cpu, move |m| {
            if let Some(active) = &active {
                admissions.remove_stale_state(m, active);
            }
            admissions.allocate(m, &pod)
        })
        .await;
        match allocated {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(unexpected_admission_error(&e)),
            Err(e) => Err(unexpected_admission_error(&e)),
        }
    }

    /// The cpuset a container of pod `uid` is created with, CRI's `cpuset_cpus`: its
    /// exclusive CPUs, else the shared pool (Go's `PreCreateContainer`). None without the
    /// static policy.
    pub(crate) async fn container_cpuset(&self, uid: &str, container: &str) -> Option<String> {
        let cpu = self.cpu.as_ref()?;
        let (uid, container) = (uid.to_string(), container.to_string());
        with_manager(cpu, move |m| {
            m.container_cpuset(&uid, &container).map(|s| s.to_string())
        })
        .await
        .ok()
        .flatten()
    }

    /// Records a container just created with [`Kubelet::container_cpuset`] (Go's
    /// `PreStartContainer` → `AddContainer`), so the reconcile loop knows what it was given.
    pub(crate) async fn cpu_container_created(&self, uid: &str, container: &str, id: &str) {
        let Some(cpu) = &self.cpu else {
            return;
        };
        let (uid, container, id) = (uid.to_string(), container.to_string(), id.to_string());
        let _ = with_manager(cpu, move |m| m.add_container(&uid, &container, &id)).await;
    }

    /// Starts the CPU manager's reconcile loop (Go's `reconcileState` every
    /// `cpuManagerReconcilePeriod`, the first at once); it ends with the runtime.
    pub(super) fn spawn_cpu_reconcile(self: &Arc<Self>) {
        let Some(cpu) = self.cpu.clone() else {
            return;
        };
        let period = self.config.cpu_manager_reconcile_period;
        tracing::info!(?period, "cpu manager: reconciling");
        let kubelet = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                kubelet.reconcile_cpus(&cpu).await;
            }
        });
    }

    /// One reconcile pass: stale state dropped (once the sources are ready), then every
    /// running container of an active pod given its cpuset where it differs from what it was
    /// last given; a failed update is retried next pass.
    async fn reconcile_cpus(&self, cpu: &Shared) {
        let active = self.cpu_active_pods();
        let running = running_containers(&active.pods, &self.pleg.all());
        // Before every source has been seen a live pod may not be listed yet.
        let stale_check = self.sources_ready.load(Ordering::Relaxed).then_some(active);
        let admissions = self.cpu_admissions.clone();
        let targets = with_manager(cpu, move |m| {
            if let Some(active) = &stale_check {
                admissions.remove_stale_state(m, active);
            }
            m.reconcile_targets(&running)
        })
        .await
        .unwrap_or_default();
        let mut failed = Vec::new();
        for (id, cpus) in targets {
            let linux = LinuxContainerResources {
                cpuset_cpus: cpus.to_string(),
                ..Default::default()
            };
            match self.cri.update_container_resources(&id, linux).await {
                Ok(()) => {
                    tracing::debug!(container_id = %id, cpuset = %cpus, "cpu manager: container cpuset updated")
                }
                Err(e) => {
                    tracing::warn!(container_id = %id, cpuset = %cpus, error = %e, "cpu manager: failed to update container");
                    failed.push(id);
                }
            }
        }
        if !failed.is_empty() {
            let _ = with_manager(cpu, move |m| {
                for id in &failed {
                    m.update_failed(id);
                }
            })
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::types::RuntimeContainer;

    fn pod(uid: &str, containers: &[&str]) -> Arc<Pod> {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "uid": uid},
            "spec": {
                "initContainers": [{"name": "init"}],
                "containers": containers.iter().map(|c| serde_json::json!({"name": c})).collect::<Vec<_>>(),
            },
        }))
        .unwrap();
        p.metadata.namespace = Some("default".into());
        Arc::new(p)
    }

    fn container(id: &str, name: &str, created_at: i64, state: ContainerState) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            name: name.into(),
            created_at,
            state,
            ..Default::default()
        }
    }

    #[test]
    fn reconcile_sees_the_newest_running_container_of_active_pods() {
        use ContainerState::{ContainerExited as Exited, ContainerRunning as Running};
        let runtime = vec![
            RuntimePod {
                uid: "a".into(),
                containers: vec![
                    container("init-1", "init", 1, Exited),
                    container("main-1", "main", 2, Exited),
                    container("main-2", "main", 3, Running),
                    // Restarted and exited since: its CPUs wait for the next start.
                    container("side-2", "side", 5, Exited),
                    container("side-1", "side", 4, Running),
                    // Not in the spec (an old spec's container): left alone.
                    container("old-1", "old", 1, Running),
                ],
                ..Default::default()
            },
            // A pod no longer active.
            RuntimePod {
                uid: "gone".into(),
                containers: vec![container("g-1", "main", 1, Running)],
                ..Default::default()
            },
        ];
        let running = running_containers(&[pod("a", &["main", "side"])], &runtime);
        let ids: Vec<(&str, &str)> = running
            .iter()
            .map(|r| (r.container_name.as_str(), r.container_id.as_str()))
            .collect();
        assert_eq!(ids, [("main", "main-2")]);
        assert!(running.iter().all(|r| r.pod_uid == "a"));
    }

    /// The race a reconcile pass and an admission ran: the pass read the active pods, the
    /// pod was allocated, then the pass dropped "stale" state; the pod's container was then
    /// created on the shared pool and never moved.
    #[test]
    fn a_pass_that_read_the_active_pods_before_an_allocation_keeps_its_cpus() {
        use crate::cm::cpu_manager::reservation::CpuReservation;
        use crate::cm::cpu_manager::static_policy::tests::fx_pod;
        use crate::cm::cpu_manager::topology::testutil::t2;
        use crate::cm::settings::CpuManagerPolicy;

        let dir = tempfile::tempdir().unwrap();
        let reserved = CpuReservation {
            milli_cpu: 1000,
            ..Default::default()
        };
        let mut m = CpuManager::new(CpuManagerPolicy::Static, t2(), &reserved, dir.path()).unwrap();
        let cpuset = |m: &CpuManager| m.container_cpuset("g", "main").unwrap().to_string();
        let admissions = CpuAdmissions::default();
        let pod = Arc::new(fx_pod("g", &[], &["main=1"]));

        let read_before = admissions.read(Vec::new);
        admissions.begin(&pod);
        admissions.allocate(&mut m, &pod).unwrap();
        assert_eq!(cpuset(&m), "1");
        let read_while_admitting = admissions.read(Vec::new);

        assert!(!admissions.remove_stale_state(&mut m, &read_before));
        assert_eq!(cpuset(&m), "1", "an allocation newer than the read is kept");
        assert!(admissions.remove_stale_state(&mut m, &read_while_admitting));
        assert_eq!(cpuset(&m), "1", "a pod being admitted is active");

        admissions.done("g");
        let listed = admissions.read(|| vec![pod.clone()]);
        assert_eq!(listed.pods.len(), 1);
        assert!(admissions.remove_stale_state(&mut m, &listed));
        assert_eq!(cpuset(&m), "1", "an admitted pod is active");

        let gone = admissions.read(Vec::new);
        assert!(admissions.remove_stale_state(&mut m, &gone));
        assert_eq!(cpuset(&m), "0-1", "a pod gone gives its CPUs back");
    }

    #[test]
    fn a_pod_admitting_and_listed_is_counted_once() {
        let admissions = CpuAdmissions::default();
        let p = pod("a", &["main"]);
        admissions.begin(&p);
        let active = admissions.read(|| vec![p.clone(), pod("b", &["main"])]);
        assert_eq!(active.pods.len(), 2);
        admissions.done("a");
        assert!(admissions.read(Vec::new).pods.is_empty());
    }
}
