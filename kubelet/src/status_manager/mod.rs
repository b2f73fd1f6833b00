//! The status manager, as the Go kubelet's: the sync path hands it each pod's latest status
//! ([`StatusManager::set_pod_status`], never blocking, bursts coalesced), and one task writes
//! statuses to the API (`PATCH pods/<name>/status` with the pod's UID as precondition) when
//! they differ from what was last written, re-checking every pod every 10 s against the API.
//! A static pod's status goes to its mirror pod. Once a pod being deleted has stopped and been
//! cleaned up ([`StatusManager::terminated`]), its final status is written and the pod deleted
//! with grace period 0 and a UID precondition. The rules a status follows: [`rules`].

pub mod rules;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::PodStatus;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::kube_client::ApiHandle;
use crate::podspec::resources::is_static_pod;
use crate::source::MirrorTable;
use crate::types::{Pod, pod_name, uid_of};

/// How often every pod's status is checked against the API (Go's `syncPeriod`).
const SYNC_PERIOD: Duration = Duration::from_secs(10);
/// First wait after a failed write, doubled up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// One pod's status as the manager holds it.
#[derive(Clone, Debug)]
struct Entry {
    /// The pod, shared with the kubelet's state.
    pod: Arc<Pod>,
    status: PodStatus,
    /// The status last written (or found already in the API).
    sent: Option<PodStatus>,
    /// Stopped and cleaned up: may be deleted from the API once it has a deletionTimestamp.
    terminated: bool,
    /// When to try again after a failure, and the wait after the next one.
    retry: Option<(Instant, Duration)>,
    /// Checked against the API at the next pass even if unchanged (the periodic resync).
    recheck: bool,
    /// The pod's status as the API last showed it (its watch, or our own write): what the
    /// periodic check compares with. Kept apart from `pod`, whose copy a sync hands in may
    /// carry an older status.
    seen: Option<PodStatus>,
    /// `seen` and `status` were found to agree and neither changed since: the periodic check
    /// (a JSON merge per pod) can skip the pod.
    agreed: bool,
}

impl Entry {
    fn due(&self, now: Instant) -> bool {
        let waiting = self.retry.is_some_and(|(at, _)| at > now);
        let deletable = self.terminated && self.pod.metadata.deletion_timestamp.is_some();
        !waiting && (self.recheck || deletable || self.sent.as_ref() != Some(&self.status))
    }
}

struct Inner {
    api: ApiHandle,
    mirrors: MirrorTable,
    entries: Mutex<BTreeMap<String, Entry>>,
    wake: Notify,
}

/// The status manager; cheap to clone.
#[derive(Clone)]
pub struct StatusManager(Arc<Inner>);

/// What one sync of a pod came to.
enum Outcome {
    /// Written, or nothing to write: the status as ours, and as the API now has it.
    Synced(Box<PodStatus>, Box<PodStatus>),
    /// Gone from the API (or replaced by another pod of that name), or deleted by us.
    Forget,
    /// Nothing can be done yet (a static pod without its mirror).
    Wait,
}

impl StatusManager {
    /// A manager writing through `api`; static pods' statuses go to their mirrors in
    /// `mirrors`.
    pub fn new(api: ApiHandle, mirrors: MirrorTable) -> Self {
        Self(Arc::new(Inner {
            api,
            mirrors,
            entries: Mutex::new(BTreeMap::new()),
            wake: Notify::new(),
        }))
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.0.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The mirror pods the manager writes static pods' statuses to.
    pub fn mirror_table(&self) -> MirrorTable {
        self.0.mirrors.clone()
    }

    /// Takes `status` as pod `pod`'s newest (see [`rules::follow`]; refused, with a log line,
    /// if a terminated container would run again) and wakes the writer.
    pub fn set_pod_status(&self, pod: &Arc<Pod>, status: PodStatus) {
        let uid = uid_of(pod);
        let mut entries = self.entries();
        let old = entries
            .get(&uid)
            .map(|e| e.status.clone())
            .or_else(|| pod.status.clone());
        if let Some(old) = &old
            && let Err(e) = rules::check_transition(pod, old, &status)
        {
            tracing::error!(pod = %pod_name(pod), error = %e, "status update refused");
            return;
        }
        let status = rules::follow(old.as_ref(), status, &crate::status::now());
        match entries.get_mut(&uid) {
            Some(e) => {
                if !older(pod, &e.pod) {
                    e.pod = pod.clone();
                }
                e.status = status;
                e.agreed = false;
            }
            None => {
                entries.insert(
                    uid,
                    Entry {
                        pod: pod.clone(),
                        status,
                        sent: None,
                        terminated: false,
                        retry: None,
                        recheck: false,
                        seen: pod.status.clone(),
                        agreed: false,
                    },
                );
            }
        }
        drop(entries);
        self.0.wake.notify_one();
    }

    /// Pod `pod` has stopped and its volumes are cleaned up: once its API object is being
    /// deleted, its final status is written and the object deleted (Go's `canBeDeleted`).
    pub fn terminated(&self, pod: &Arc<Pod>) {
        if let Some(e) = self.entries().get_mut(&uid_of(pod)) {
            e.pod = pod.clone();
            e.terminated = true;
        }
        self.0.wake.notify_one();
    }

    /// Forgets pod `uid` (gone from the kubelet).
    pub fn remove(&self, uid: &str) {
        self.entries().remove(uid);
    }

    /// Starts the writer task.
    pub fn spawn(&self) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move { this.run().await })
    }

    async fn run(self) {
        let mut resync = tokio::time::interval(SYNC_PERIOD);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next_retry = self
                .entries()
                .values()
                .filter_map(|e| e.retry.map(|r| r.0))
                .min();
            tokio::select! {
                _ = self.0.wake.notified() => {}
                _ = resync.tick() => self.mark_drifted(),
                _ = sleep_until(next_retry) => {}
            }
            self.sync_due().await;
        }
    }

    /// The periodic check (Go's `syncBatch` → `needsReconcile`): pods whose status as the
    /// watch last showed it (the pod's own, a static pod's mirror's) is not what the manager
    /// holds are re-checked against the API.
    fn mark_drifted(&self) {
        let mut entries = self.entries();
        for e in entries.values_mut() {
            let is_static = is_static_pod(&e.pod);
            // A static pod's mirror changes without a pod_seen: always compared.
            if e.agreed && !is_static {
                continue;
            }
            let seen = if is_static {
                let name = pod_name(&e.pod);
                self.0.mirrors.get(&name).and_then(|m| m.status)
            } else {
                e.seen.clone()
            };
            let Some(mut seen) = seen else {
                e.recheck = true;
                continue;
            };
            rules::normalize(&mut seen);
            let merged = rules::merge_with_api(Some(&seen), e.status.clone());
            e.recheck = merged != seen;
            e.agreed = !e.recheck;
            if e.recheck {
                tracing::debug!(pod = %pod_name(&e.pod), fields = ?rules::differing_fields(&seen, &merged), "status differs from the API's");
            }
        }
    }

    /// Syncs every pod that is due, one after another.
    async fn sync_due(&self) {
        let now = Instant::now();
        let due: Vec<(String, Entry)> = self
            .entries()
            .iter()
            .filter(|(_, e)| e.due(now))
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        for (uid, entry) in due {
            let result = self.sync_one(&entry).await;
            let mut entries = self.entries();
            let Some(e) = entries.get_mut(&uid) else {
                continue;
            };
            e.recheck = false;
            match result {
                Ok(Outcome::Synced(sent, api)) => {
                    e.sent = Some(*sent);
                    // Until the watch shows our write, what we wrote is what the API has.
                    e.seen = Some(*api);
                    e.agreed = false;
                    e.retry = None;
                }
                Ok(Outcome::Wait) => {}
                Ok(Outcome::Forget) => {
                    entries.remove(&uid);
                }
                Err(err) => {
                    let wait = e.retry.map_or(RETRY_MIN, |(_, w)| w);
                    tracing::warn!(pod = %pod_name(&entry.pod), error = %err, retry_in = ?wait, "writing the pod status failed");
                    e.retry = Some((Instant::now() + wait, (wait * 2).min(RETRY_MAX)));
                }
            }
        }
    }

    /// Writes one pod's status if the API's differs; deletes the pod when it may be.
    async fn sync_one(&self, entry: &Entry) -> Result<Outcome, kube::Error> {
        let pod = &entry.pod;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.clone().unwrap_or_default();
        let is_static = is_static_pod(pod);
        let uid = if is_static {
            let Some(mirror) = self.0.mirrors.get(&pod_name(pod)) else {
                tracing::debug!(pod = %pod_name(pod), "static pod without a mirror pod; status not written");
                return Ok(Outcome::Wait);
            };
            uid_of(&mirror)
        } else {
            uid_of(pod)
        };
        let pods: kube::Api<Pod> = kube::Api::namespaced(self.0.api.client(), namespace);
        let Some(current) = pods.get_opt(&name).await? else {
            tracing::debug!(pod = %pod_name(pod), "pod gone from the API; status dropped");
            return Ok(Outcome::Forget);
        };
        if uid_of(&current) != uid {
            tracing::debug!(pod = %pod_name(pod), "pod replaced in the API; status dropped");
            return Ok(Outcome::Forget);
        }
        let mut api_status = current.status.clone();
        if let Some(s) = &mut api_status {
            rules::normalize(s);
        }
        let status = rules::merge_with_api(api_status.as_ref(), entry.status.clone());
        if api_status.as_ref() != Some(&status) {
            let body = rules::patch_body(&uid, api_status.as_ref(), &status);
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await?;
            tracing::debug!(pod = %pod_name(pod), phase = ?status.phase, "pod status written");
        }
        if entry.terminated && !is_static && current.metadata.deletion_timestamp.is_some() {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match pods.delete(&name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e),
            }
            tracing::info!(pod = %pod_name(pod), "pod fully terminated and removed from the API");
            return Ok(Outcome::Forget);
        }
        Ok(Outcome::Synced(
            Box::new(entry.status.clone()),
            Box::new(status),
        ))
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;

impl crate::status::sink::StatusSink for StatusManager {
    fn set_pod_status(&self, pod: &Arc<Pod>, status: &PodStatus) {
        StatusManager::set_pod_status(self, pod, status.clone());
    }

    fn pod_terminated(&self, pod: &Arc<Pod>, status: &PodStatus) {
        StatusManager::set_pod_status(self, pod, status.clone());
        self.terminated(pod);
    }

    fn pod_seen(&self, pod: &Arc<Pod>) {
        if let Some(e) = self.entries().get_mut(&uid_of(pod)) {
            e.seen = pod.status.clone();
            e.agreed = false;
            e.pod = pod.clone();
        }
    }

    fn pod_removed(&self, uid: &str) {
        self.remove(uid);
    }
}

/// Whether `a` is an older version of the object than `b` (resourceVersions are etcd
/// revisions in practice; anything else counts as not older).
fn older(a: &Pod, b: &Pod) -> bool {
    let rv = |p: &Pod| {
        p.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    matches!((rv(a), rv(b)), (Some(a), Some(b)) if a < b)
}
