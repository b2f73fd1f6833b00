//! In-place pod resize at the points Go's kubelet handles it (`handlePodResourcesResize`,
//! `computePodResizeAction`, `doPodResizeAction`, the status's resize fields): admission
//! records a new pod's allocation; each sync first judges a changed spec and then runs the pod
//! as allocated; the running containers whose applied resources differ are updated in place
//! (or restarted, per `resizePolicy`) with the pod cgroup written before them when it grows
//! and after them when it shrinks; the status shows the allocation and what the runtime
//! applied, and the resize ends once the runtime reports the allocation.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;

use ferrolet_proto::cri::ContainerState;
use k8s_openapi::api::core::v1::PodStatus;

use super::Kubelet;
use crate::allocation::actuation::{self, Applied, Resource, Step};
use crate::allocation::decision::{self, Verdict};
use crate::allocation::{AllocationError, AllocationManager, ResizeState};
use crate::cm::ResourceConfig;
use crate::status::phase;
use crate::types::{Pod, RuntimePod, pod_name, uid_of};

/// What a sync does to the running containers for a resize.
#[derive(Clone, Debug, Default)]
pub(crate) struct ResizePlan {
    /// Instances whose resize policy restarts them.
    pub restarts: BTreeSet<String>,
    /// Instances updated in place, decreases first (Go's order).
    updates: Vec<ContainerUpdate>,
}

/// One running container to update in place, and which way each resource goes.
#[derive(Clone, Debug)]
struct ContainerUpdate {
    name: String,
    id: String,
    applied: Applied,
    memory: Option<Ordering>,
    cpu: Option<Ordering>,
}

impl Kubelet {
    /// The allocation manager, when in-place resize is on.
    pub(crate) fn allocations(&self) -> Option<&Arc<AllocationManager>> {
        self.allocation.get()
    }

    /// Runs `f` on the allocation manager off the runtime (it fsyncs its checkpoint).
    async fn change_allocations(
        &self,
        f: impl FnOnce(&AllocationManager) -> Result<(), AllocationError> + Send + 'static,
    ) {
        let Some(manager) = self.allocations().cloned() else {
            return;
        };
        match tokio::task::spawn_blocking(move || f(&manager)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "writing the pods' allocations"),
            Err(e) => tracing::error!(error = %e, "writing the pods' allocations"),
        }
    }

    /// `pod` as allocated (its spec's resources replaced by its allocation, if it has one).
    pub(crate) fn as_allocated(&self, pod: &Arc<Pod>) -> Arc<Pod> {
        let allocation = self.allocations().and_then(|m| m.get(&uid_of(pod)));
        allocation
            .and_then(|a| decision::with_allocation(pod, &a.containers))
            .map_or_else(|| pod.clone(), Arc::new)
    }

    /// The other admitted, running pods, as allocated (what a resize or admission must fit
    /// beside).
    pub(crate) fn allocated_others(&self, uid: &str) -> Vec<Arc<Pod>> {
        let pods: Vec<Arc<Pod>> = self
            .pods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(other, s)| *other != uid && !s.rejected && !s.terminating)
            .filter(|(_, s)| !s.status.phase.as_deref().is_some_and(phase::is_terminal))
            .map(|(_, s)| s.pod.clone())
            .collect();
        pods.iter().map(|p| self.as_allocated(p)).collect()
    }

    /// After admission: a pod seen for the first time is allocated what its spec asks (one
    /// already allocated, after a restart, keeps its allocation, as Go's `AddPod`).
    pub(crate) async fn record_allocation(&self, pod: &Pod) {
        let uid = uid_of(pod);
        if self.allocations().is_none_or(|m| m.get(&uid).is_some()) {
            return;
        }
        let containers = decision::requested(pod);
        self.change_allocations(move |m| m.set_containers(&uid, containers))
            .await;
    }

    /// Go's `handlePodResourcesResize`: a spec whose resources differ from the allocation is
    /// judged (allocated, `Deferred` or `Infeasible`); the pod comes back as allocated.
    pub(crate) async fn handle_resize(&self, pod: &Arc<Pod>) -> Arc<Pod> {
        let Some(manager) = self.allocations().cloned() else {
            return pod.clone();
        };
        let uid = uid_of(pod);
        let Some(allocation) = manager.get(&uid) else {
            // Admitted before in-place resize was on: allocated as it runs.
            self.record_allocation(pod).await;
            return pod.clone();
        };
        let desired = decision::requested(pod);
        let same = desired.len() == allocation.containers.len()
            && desired.iter().all(|(name, r)| {
                allocation
                    .containers
                    .get(name)
                    .is_some_and(|a| decision::same_resources(a, r))
            });
        if same {
            // The spec went back to the allocation: nothing is pending any more.
            if matches!(
                allocation.resize,
                Some(ResizeState::Deferred { .. } | ResizeState::Infeasible { .. })
            ) {
                self.change_allocations(move |m| m.set_resize(&uid, None))
                    .await;
            }
            return self.as_allocated(pod);
        }
        // One judgement at a time, so two resizes never both take the same room.
        let _judging = self.resize_lock.lock().await;
        let others = self.allocated_others(&uid);
        let others: Vec<&Pod> = others.iter().map(|p| p.as_ref()).collect();
        let verdict = decision::judge(pod, &self.node_info(), &others, self.cpu.is_some());
        let (containers, resize) = match verdict {
            Verdict::Allocate => {
                tracing::info!(pod = %pod_name(pod), "resize allocated");
                (Some(desired), ResizeState::InProgress { error: None })
            }
            Verdict::Deferred(message) => (None, ResizeState::Deferred { message }),
            Verdict::Infeasible(message) => (None, ResizeState::Infeasible { message }),
        };
        let id = uid.clone();
        self.change_allocations(move |m| {
            if let Some(containers) = containers {
                m.set_containers(&id, containers)?;
            }
            m.set_resize(&id, Some(resize))
        })
        .await;
        self.as_allocated(pod)
    }

    /// What the running containers of `pod` (as allocated) need, from what the runtime
    /// reports applied (Go's `computePodResizeAction`); nothing when resize is off.
    pub(crate) fn resize_plan(&self, pod: &Pod, runtime: &RuntimePod) -> Option<ResizePlan> {
        self.allocations()?;
        let sandbox = runtime.sandboxes.first().filter(|s| s.ready)?;
        let mut plan = ResizePlan::default();
        for c in decision::resizable(pod) {
            let Some(rc) = runtime
                .containers
                .iter()
                .filter(|rc| rc.sandbox_id == sandbox.id && rc.name == c.name)
                .max_by_key(|rc| rc.created_at)
                .filter(|rc| rc.state == ContainerState::ContainerRunning)
            else {
                continue;
            };
            let Some(applied) = Applied::reported(rc.resources.as_ref()) else {
                continue;
            };
            match actuation::step(c, &applied) {
                Step::Keep => {}
                Step::Restart => {
                    plan.restarts.insert(rc.id.clone());
                }
                Step::Update { memory, cpu } => plan.updates.push(ContainerUpdate {
                    name: c.name.clone(),
                    id: rc.id.clone(),
                    applied,
                    memory,
                    cpu,
                }),
            }
        }
        Some(plan)
    }

    /// Carries a plan's updates out (Go's `doPodResizeAction`): memory, then CPU, each with
    /// the pod cgroup grown before the containers and shrunk after them; a pod memory limit
    /// below what the pod uses is not attempted. A failure stops the resize until the next
    /// sync and shows in its `PodResizeInProgress` condition.
    pub(crate) async fn do_resize(&self, pod: &Pod, plan: &ResizePlan) {
        if plan.updates.is_empty() && plan.restarts.is_empty() {
            return;
        }
        let uid = uid_of(pod);
        let result = self.resize_in_order(pod, plan).await;
        self.pleg
            .mark_stale(plan.updates.iter().map(|u| u.id.clone()));
        let error = result.err();
        if let Some(e) = &error {
            tracing::warn!(pod = %pod_name(pod), error = %e, "resize failed");
        }
        self.change_allocations(move |m| match m.get(&uid).and_then(|a| a.resize) {
            Some(ResizeState::InProgress { .. }) | None => {
                m.set_resize(&uid, Some(ResizeState::InProgress { error }))
            }
            Some(_) => Ok(()),
        })
        .await;
    }

    async fn resize_in_order(&self, pod: &Pod, plan: &ResizePlan) -> Result<(), String> {
        let pod_cgroup = self.pod_cgroup_resize(pod).await?;
        let mut updates = plan.updates.clone();
        let restarting = !plan.restarts.is_empty();
        // Memory.
        if restarting || updates.iter().any(|u| u.memory.is_some()) {
            if let Some((wanted, current)) = &pod_cgroup
                && let Some(limit) = wanted.memory
                && current.memory_usage >= u64::try_from(limit).unwrap_or(0)
            {
                return Err(format!(
                    "aborting attempt to set pod memory limit less than current memory usage for pod {}",
                    pod.metadata.name.as_deref().unwrap_or_default()
                ));
            }
            let grows = pod_cgroup.as_ref().and_then(|(wanted, current)| {
                let key = |m: Option<i64>| m.unwrap_or(i64::MAX);
                let w = wanted.memory?;
                Some((w, key(Some(w)).cmp(&key(current.memory_limit))))
            });
            let memory_only = |m: i64| ResourceConfig {
                memory: Some(m),
                ..Default::default()
            };
            if let Some((m, Ordering::Greater)) = grows {
                self.write_pod_cgroup(pod, memory_only(m)).await?;
            }
            updates.sort_by_key(|u| u.memory != Some(Ordering::Less));
            for u in updates.iter_mut().filter(|u| u.memory.is_some()) {
                self.update_container(pod, u, Resource::Memory).await?;
                u.applied.memory_limit = self.wanted_of(pod, &u.name).memory_limit;
            }
            if let Some((m, Ordering::Less)) = grows {
                self.write_pod_cgroup(pod, memory_only(m)).await?;
            }
        }
        // CPU.
        if restarting || updates.iter().any(|u| u.cpu.is_some()) {
            let (quota, shares) = match &pod_cgroup {
                Some((wanted, current)) => {
                    let key = |q: Option<i64>| q.filter(|q| *q > 0).unwrap_or(i64::MAX);
                    let quota = wanted
                        .cpu_quota
                        .map(|q| (q, key(Some(q)).cmp(&key(current.cpu_quota))));
                    let shares = wanted
                        .cpu_shares
                        .map(|s| (s, s.cmp(&current.cpu_shares.unwrap_or(s))));
                    (quota, shares)
                }
                None => (None, None),
            };
            let quota_only = |q: i64| ResourceConfig {
                cpu_quota: Some(q),
                cpu_period: pod_cgroup.as_ref().and_then(|(w, _)| w.cpu_period),
                ..Default::default()
            };
            let shares_only = |s: u64| ResourceConfig {
                cpu_shares: Some(s),
                ..Default::default()
            };
            if let Some((q, Ordering::Greater)) = quota {
                self.write_pod_cgroup(pod, quota_only(q)).await?;
            }
            if let Some((s, Ordering::Greater)) = shares {
                self.write_pod_cgroup(pod, shares_only(s)).await?;
            }
            updates.sort_by_key(|u| u.cpu != Some(Ordering::Less));
            for u in updates.iter().filter(|u| u.cpu.is_some()) {
                self.update_container(pod, u, Resource::Cpu).await?;
            }
            if let Some((q, Ordering::Less)) = quota {
                self.write_pod_cgroup(pod, quota_only(q)).await?;
            }
            if let Some((s, Ordering::Less)) = shares {
                self.write_pod_cgroup(pod, shares_only(s)).await?;
            }
        }
        Ok(())
    }

    /// What the pod cgroup should be given and what it has (None without pod cgroups).
    async fn pod_cgroup_resize(
        &self,
        pod: &Pod,
    ) -> Result<Option<(ResourceConfig, crate::cm::cgroup::Current)>, String> {
        let Some(cm) = self.cm.clone() else {
            return Ok(None);
        };
        let pod = pod.clone();
        tokio::task::spawn_blocking(move || {
            let wanted = cm.pod_resource_config(&pod)?;
            let current = cm.pod_cgroup_current(&pod)?;
            Ok::<_, crate::cm::CmError>(Some((wanted, current)))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
    }

    async fn write_pod_cgroup(&self, pod: &Pod, config: ResourceConfig) -> Result<(), String> {
        let Some(cm) = self.cm.clone() else {
            return Ok(());
        };
        let pod = pod.clone();
        tokio::task::spawn_blocking(move || cm.set_pod_cgroup(&pod, &config))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("setting the pod cgroup: {e}"))
    }

    fn wanted_of(&self, pod: &Pod, name: &str) -> Applied {
        decision::resizable(pod)
            .find(|c| c.name == name)
            .map(Applied::wanted)
            .unwrap_or_default()
    }

    /// UpdateContainerResources with `resource` at its allocation and the other as applied.
    async fn update_container(
        &self,
        pod: &Pod,
        u: &ContainerUpdate,
        resource: Resource,
    ) -> Result<(), String> {
        let Some(c) = decision::resizable(pod).find(|c| c.name == u.name) else {
            return Ok(());
        };
        let full = crate::podspec::resources::linux_resources(pod, c, &self.node)
            .map_err(|e| e.to_string())?;
        let request = actuation::partial_update(&full, &u.applied, resource);
        tracing::info!(container = %u.name, id = %u.id, ?resource, "updating container resources");
        self.cri
            .update_container_resources(&u.id, request)
            .await
            .map_err(|e| format!("updating container {} resources: {e}", u.name))
    }

    /// Lays the allocation onto `status` (see `allocation::status`), first ending a resize
    /// the runtime now reports done.
    pub(crate) async fn resize_status(
        &self,
        pod: &Pod,
        runtime: &RuntimePod,
        status: &mut PodStatus,
        previous: Option<&PodStatus>,
    ) {
        let Some(manager) = self.allocations() else {
            return;
        };
        let uid = uid_of(pod);
        let Some(mut allocation) = manager.get(&uid) else {
            return;
        };
        if matches!(allocation.resize, Some(ResizeState::InProgress { .. }))
            && self.actuated(pod, runtime)
        {
            tracing::info!(pod = %pod_name(pod), "resize done");
            allocation.resize = None;
            let id = uid.clone();
            self.change_allocations(move |m| m.set_resize(&id, None))
                .await;
        }
        crate::allocation::status::decorate(status, &allocation, runtime, previous);
    }

    /// Whether every running resizable container has its allocation applied.
    fn actuated(&self, pod: &Pod, runtime: &RuntimePod) -> bool {
        self.resize_plan(pod, runtime)
            .is_some_and(|p| p.updates.is_empty() && p.restarts.is_empty())
    }
}
