//! The kubelet's side of node-pressure eviction: the manager's loop over the kubelet's pods
//! and summaries, and stopping an evicted pod ([`PodTerminator`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolet_proto::cri::ContainerState;
use futures::future::BoxFuture;

use super::Kubelet;
use crate::eviction::{CLEANUP_TIMEOUT, MONITORING_PERIOD, PodTerminator, evicted_status, manager};
use crate::types::{Pod, pod_name, uid_of};

impl Kubelet {
    /// Starts the eviction manager's loop; it ends with the runtime.
    pub fn spawn_eviction_manager(self: &Arc<Self>) {
        if self.eviction.thresholds().is_empty() {
            tracing::info!("eviction manager: no thresholds configured");
            return;
        }
        let thresholds: Vec<String> = self
            .eviction
            .thresholds()
            .iter()
            .map(ToString::to_string)
            .collect();
        tracing::info!(?thresholds, "eviction manager: starting");
        let kubelet = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(MONITORING_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                kubelet.eviction_pass().await;
            }
        });
    }

    /// One pass of the manager: the node-level signals first; pod stats only when a
    /// threshold calls for an eviction and a pod may be evicted (the ranking needs them).
    async fn eviction_pass(&self) {
        let failed = |e: crate::stats::StatsError| {
            tracing::warn!(error = %e, "Eviction manager: failed to get summary stats");
        };
        let node = match self.summary_of(crate::stats::Scope::Node).await {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        let states = self.pods();
        self.eviction
            .forget_evicted(|uid| states.iter().any(|s| uid_of(&s.pod) == uid));
        let Some(reclaim) = self.eviction.observe(&node, Instant::now()) else {
            return;
        };
        let active: Vec<Arc<Pod>> = states
            .into_iter()
            .filter(|s| !s.terminating && self.eviction.evicted(&uid_of(&s.pod)).is_none())
            .filter(|s| {
                !s.status
                    .phase
                    .as_deref()
                    .is_some_and(crate::status::phase::is_terminal)
            })
            .map(|s| s.pod)
            .collect();
        // Ranking needs pod stats only when some pod may be evicted at all: static pods
        // never are, so a standalone node under pressure costs no per-pod stats.
        let evictable = active
            .iter()
            .any(|p| !crate::podspec::resources::is_critical_pod(p));
        let summary = if evictable {
            match self.stats_summary(false).await {
                Ok(s) => s,
                Err(e) => return failed(e),
            }
        } else {
            node
        };
        let dedicated = self.stats.dedicated_image_fs().unwrap_or(false);
        let evicted = self
            .eviction
            .reclaim(reclaim, &summary, &active, dedicated, self)
            .await;
        if let Some(uid) = evicted {
            tracing::info!(
                uid,
                "Eviction manager: pods evicted, waiting for pod to be cleaned up"
            );
            let deadline = Instant::now() + CLEANUP_TIMEOUT;
            while Instant::now() < deadline && self.runs_anything(&uid) {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }

    /// Whether the runtime still runs a container or a ready sandbox of the pod.
    fn runs_anything(&self, uid: &str) -> bool {
        self.pleg.get(uid).is_some_and(|p| {
            p.sandboxes.iter().any(|s| s.ready)
                || p.containers
                    .iter()
                    .any(|c| c.state == ContainerState::ContainerRunning)
        })
    }

    /// For the pod workers: an evicted pod is not synced again; whatever of it still runs
    /// (a container a sync started while it was being evicted) is stopped. Whether the pod
    /// was evicted.
    pub async fn enforce_eviction(&self, uid: &str) -> bool {
        if self.eviction.evicted(uid).is_none() {
            return false;
        }
        if self.runs_anything(uid) {
            self.stop_pod(uid, manager::IMMEDIATE_GRACE_PERIOD).await;
        }
        true
    }

    /// Stops the pod's running containers and its sandboxes, and tears down its volumes
    /// (so an evicted pod's memory-backed emptyDirs give their memory back); its stopped
    /// containers stay, for their logs and status.
    async fn stop_pod(&self, uid: &str, grace: i64) {
        let runtime = match self.pleg.refresh(uid).await {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(uid, error = %e, "reading the pod to evict");
                return;
            }
        };
        let running = runtime
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning);
        futures::future::join_all(running.map(|c| async move {
            if let Err(e) = self.cri.stop_container(&c.id, grace).await {
                tracing::warn!(id = %c.id, error = %e, "stopping an evicted pod's container");
            }
        }))
        .await;
        for sb in &runtime.sandboxes {
            if let Err(e) = self.cri.stop_pod_sandbox(&sb.id).await {
                tracing::warn!(id = %sb.id, error = %e, "stopping an evicted pod's sandbox");
            }
        }
        if let Err(e) = self.release_volumes(uid).await {
            tracing::warn!(uid, error = %e, "removing an evicted pod's volumes");
        }
        let _ = self.pleg.refresh(uid).await;
    }
}

impl PodTerminator for Kubelet {
    fn evict<'a>(
        &'a self,
        pod: &'a Pod,
        grace_secs: i64,
        message: &'a str,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let uid = uid_of(pod);
            tracing::debug!(pod = %pod_name(pod), "stopping an evicted pod");
            // Go records it before the kill, so the event is there even if the kill fails.
            let object = crate::events::pod_ref(pod);
            let (kind, reason) = (
                crate::events::EventType::Warning,
                crate::events::reason::EVICTED,
            );
            self.events.record(&object, kind, reason, message);
            self.stop_pod(&uid, grace_secs).await;
            let now = crate::status::now();
            self.update_state(&uid, |s| evicted_status(&mut s.status, message, &now));
            if self.runs_anything(&uid) {
                return Err("containers still running after the stop".into());
            }
            Ok(())
        })
    }
}
