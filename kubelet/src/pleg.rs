//! The pod lifecycle event generator and the runtime pod cache, as the Go kubelet's generic
//! PLEG with its evented mode:
//!
//! - a relist lists every sandbox and container, compares their states with the previous
//!   relist and makes [`PodLifecycleEvent`]s;
//! - the cache holds the newest [`RuntimePod`] of each UID with the statuses only the
//!   per-object calls know (IPs, times, exit codes); a relist asks for the status of a
//!   container or sandbox only when it is new or its listed state changed, so a quiet node
//!   costs two list calls per relist however many pods it runs;
//! - [`Pleg::spawn`] relists every period and, when the runtime serves GetContainerEvents,
//!   relists at once the pods a burst of runtime events names; [`Pleg::refresh`] gives the
//!   sync loop a view of one pod at least as new as its own changes. Those two list one pod
//!   (the runtime filters by its UID label): during a burst of N pod starts, relisting every
//!   pod on each event or sync costed ferrolet and the runtime O(N²) decoding.

mod events;
mod source;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::cri::{Cri, CriError};
use crate::types::RuntimePod;
use events::Listed;
pub use events::{PodLifecycleEvent, PodLifecycleEventType};
pub use source::{BoxFut, RuntimeSource, fill_container};

pub use crate::metrics::RelistStats;

/// How long without a successful relist makes the PLEG unhealthy (Go's `RelistThreshold`).
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// Status calls a relist makes at once.
const STATUS_CONCURRENCY: usize = 16;
/// Longest wait between attempts to subscribe to runtime events after a broken stream.
const MAX_RESUBSCRIBE: Duration = Duration::from_secs(30);

/// One pod in the cache.
#[derive(Debug)]
struct Record {
    /// The pod as served, statuses filled in.
    pod: RuntimePod,
    /// The states the relist that filled it listed (events compare these, not the fuller
    /// states from status calls, so every listed change makes exactly one event).
    listed: Listed,
    /// When the runtime last confirmed it.
    read_at: Instant,
    /// When the list call that confirmed it started.
    listed_at: Instant,
}

#[derive(Debug, Default)]
struct State {
    records: HashMap<String, Record>,
    /// Pods whose status calls failed: inspected again on the next relist.
    reinspect: HashSet<String>,
    /// Containers whose status (their resources) changed without a state change: read again
    /// on the next relist of their pod.
    stale: HashSet<String>,
    stats: RelistStats,
}

/// A status call a relist has to make.
enum Todo {
    Sandbox {
        uid: String,
        index: usize,
        id: String,
    },
    Container {
        uid: String,
        index: usize,
        id: String,
    },
}

/// The PLEG and runtime pod cache.
pub struct Pleg {
    source: Arc<dyn RuntimeSource>,
    state: Mutex<State>,
    /// Relists run one at a time.
    relist_lock: tokio::sync::Mutex<()>,
    /// Where events go once [`Pleg::spawn`] ran.
    tx: Mutex<Option<mpsc::Sender<PodLifecycleEvent>>>,
    /// Pods runtime events named since the relist loop last looked; `None` in the set's
    /// place asks for a full relist (an event naming no pod, a new subscription).
    named: Mutex<Option<BTreeSet<String>>>,
    /// Told what a relist saw of pods whose containers started or exited.
    timeline: Option<Arc<crate::timeline::Timeline>>,
}

impl std::fmt::Debug for Pleg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pleg")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Pleg {
    /// A PLEG on a CRI runtime; nothing is cached until the first relist.
    pub fn new(cri: Cri) -> Self {
        Self::with_source(Arc::new(cri))
    }

    /// A PLEG on any [`RuntimeSource`] (tests script one).
    pub fn with_source(source: Arc<dyn RuntimeSource>) -> Self {
        Self {
            source,
            state: Mutex::new(State::default()),
            relist_lock: tokio::sync::Mutex::new(()),
            tx: Mutex::new(None),
            named: Mutex::new(Some(BTreeSet::new())),
            timeline: None,
        }
    }

    /// Tells `timeline` what each relist saw of pods whose containers started or exited (an
    /// init container's exit, every app container running).
    pub fn with_timeline(mut self, timeline: Arc<crate::timeline::Timeline>) -> Self {
        self.timeline = Some(timeline);
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is applied whole under the lock; a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached runtime pod (None if the runtime has nothing for the uid).
    pub fn get(&self, uid: &str) -> Option<RuntimePod> {
        self.state().records.get(uid).map(|r| r.pod.clone())
    }

    /// The cached runtime pod with when the runtime last confirmed it.
    #[cfg(test)]
    pub fn get_with_time(&self, uid: &str) -> Option<(RuntimePod, Instant)> {
        self.state()
            .records
            .get(uid)
            .map(|r| (r.pod.clone(), r.read_at))
    }

    /// Every cached pod.
    pub fn all(&self) -> Vec<RuntimePod> {
        self.state()
            .records
            .values()
            .map(|r| r.pod.clone())
            .collect()
    }

    /// Relist timings and mode.
    pub fn stats(&self) -> RelistStats {
        self.state().stats
    }

    /// When the last successful relist started.
    pub fn last_relist(&self) -> Option<Instant> {
        self.stats().last_relist
    }

    /// Whether relists succeed often enough (Go's PLEG health check, 3 minutes).
    pub fn healthy(&self) -> Result<(), String> {
        match self.last_relist() {
            None => Err("pleg has yet to be successful".into()),
            Some(at) if at.elapsed() > RELIST_THRESHOLD => Err(format!(
                "pleg was last seen active {:?} ago; threshold is {RELIST_THRESHOLD:?}",
                at.elapsed()
            )),
            Some(_) => Ok(()),
        }
    }

    /// One relist; returns its events (also `ContainerChanged` ones, which are not sent) and
    /// sends the others to the channel given to [`Pleg::spawn`], if any.
    pub async fn relist(&self) -> Result<Vec<PodLifecycleEvent>, CriError> {
        let _one = self.relist_lock.lock().await;
        self.relist_locked(None).await
    }

    /// Relists pod `uid` alone: its events, sent as a relist's are.
    pub async fn relist_pod(&self, uid: &str) -> Result<Vec<PodLifecycleEvent>, CriError> {
        let _one = self.relist_lock.lock().await;
        self.relist_locked(Some(uid)).await
    }

    /// Forces a relist of pod `uid` (after the sync loop changed something) and waits for it;
    /// any relist of it that started after the call does as well, so concurrent callers
    /// share one.
    pub async fn refresh(&self, uid: &str) -> Result<Option<RuntimePod>, CriError> {
        let asked = Instant::now();
        let _one = self.relist_lock.lock().await;
        let fresh = self.last_relist().is_some_and(|at| at >= asked)
            || self
                .state()
                .records
                .get(uid)
                .is_some_and(|r| r.listed_at >= asked);
        if !fresh {
            self.relist_locked(Some(uid)).await?;
        }
        Ok(self.get(uid))
    }

    /// Runs: relists every `period`, and at once on each burst of runtime events while the
    /// runtime serves GetContainerEvents (periodic relists go on regardless, the safety net);
    /// sends events to `tx`. Ends when `tx`'s receiver is dropped.
    pub fn spawn(
        self: Arc<Self>,
        period: Duration,
        tx: mpsc::Sender<PodLifecycleEvent>,
    ) -> JoinHandle<()> {
        *self.tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx.clone());
        let wake = Arc::new(Notify::new());
        let watcher = tokio::spawn(self.clone().watch_events(wake.clone()));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period.max(Duration::from_millis(10)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let full = tokio::select! {
                    _ = tick.tick() => true,
                    () = wake.notified() => false,
                    () = tx.closed() => break,
                };
                let named = self.take_named();
                let result = match named {
                    Some(uids) if !full => self.relist_pods(&uids).await,
                    _ => self.relist().await.map(drop),
                };
                if let Err(e) = result {
                    tracing::warn!(error = %e, "PLEG: relist failed");
                }
            }
            watcher.abort();
        })
    }

    /// Relists each of `uids` alone, in turn.
    async fn relist_pods(&self, uids: &BTreeSet<String>) -> Result<(), CriError> {
        for uid in uids {
            self.relist_pod(uid).await?;
        }
        Ok(())
    }

    /// Notes that a runtime event named pod `uid` (None: no pod, or possibly any).
    fn name_pod(&self, uid: Option<String>) {
        let mut named = self.named.lock().unwrap_or_else(|p| p.into_inner());
        match (named.as_mut(), uid) {
            (Some(set), Some(uid)) => {
                set.insert(uid);
            }
            _ => *named = None,
        }
    }

    /// The pods named since the last call (None: relist them all), starting a new set.
    fn take_named(&self) -> Option<BTreeSet<String>> {
        let mut named = self.named.lock().unwrap_or_else(|p| p.into_inner());
        named.replace(BTreeSet::new())
    }

    /// Follows the runtime's container events, waking the relist loop on each; gives up for
    /// good on a runtime without them, resubscribes (with back-off) after a broken stream.
    async fn watch_events(self: Arc<Self>, wake: Arc<Notify>) {
        let mut delay = Duration::from_secs(1);
        loop {
            match self.source.events().await {
                Ok(mut stream) => {
                    tracing::info!("PLEG: following the runtime's container events");
                    self.set_evented(true);
                    delay = Duration::from_secs(1);
                    // Anything may have happened while not subscribed.
                    self.name_pod(None);
                    wake.notify_one();
                    while let Some(item) = stream.next().await {
                        match item {
                            Ok(uid) => self.name_pod(uid),
                            Err(e) => {
                                tracing::warn!(error = %e, "PLEG: container event stream broke");
                                break;
                            }
                        }
                        wake.notify_one();
                    }
                    self.set_evented(false);
                }
                Err(e) if e.code() == Some(tonic::Code::Unimplemented) => {
                    tracing::info!(
                        "PLEG: the runtime has no container events; relisting periodically"
                    );
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "PLEG: subscribing to container events"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(MAX_RESUBSCRIBE);
        }
    }

    /// Has the next relist of these containers' pod read their statuses again: their
    /// resources changed (UpdateContainerResources) though their state did not.
    pub fn mark_stale(&self, ids: impl IntoIterator<Item = String>) {
        self.state().stale.extend(ids);
    }

    fn set_evented(&self, on: bool) {
        self.state().stats.evented = on;
    }

    /// A relist of every pod, or of pod `only` (which leaves the others and the relist
    /// statistics as they are).
    async fn relist_locked(&self, only: Option<&str>) -> Result<Vec<PodLifecycleEvent>, CriError> {
        let started = Instant::now();
        let pods = match only {
            None => self.source.list().await?,
            Some(uid) => self.source.list_pod(uid.to_string()).await?,
        };

        // Plan under the lock: events, and which pods need status calls.
        let mut events: BTreeMap<String, Vec<PodLifecycleEvent>> = BTreeMap::new();
        let mut candidates: BTreeMap<String, (RuntimePod, Listed)> = BTreeMap::new();
        let mut todos = Vec::new();
        let mut unchanged = Vec::new();
        let mut gone = Vec::new();
        {
            let state = self.state();
            let listed_uids: HashSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
            for uid in state.records.keys() {
                if only.is_none_or(|o| o == uid) && !listed_uids.contains(uid.as_str()) {
                    gone.push(uid.clone());
                }
            }
            for uid in &gone {
                let old = state.records.get(uid).map(|r| &r.listed);
                events.insert(uid.clone(), events::pod_events(uid, old, None));
            }
            for mut pod in pods {
                let uid = pod.uid.clone();
                let listed = Listed::of(&pod);
                let record = state.records.get(&uid);
                let pod_events = events::pod_events(&uid, record.map(|r| &r.listed), Some(&listed));
                let stale = pod.containers.iter().any(|c| state.stale.contains(&c.id));
                if record.is_some()
                    && pod_events.is_empty()
                    && !state.reinspect.contains(&uid)
                    && !stale
                {
                    unchanged.push(uid);
                    continue;
                }
                plan(&mut pod, record, &state.stale, &mut todos);
                events.insert(uid.clone(), pod_events);
                candidates.insert(uid, (pod, listed));
            }
        }

        // Status calls, without the lock, a few at a time.
        let source = &self.source;
        let results: Vec<(Todo, Result<StatusResult, CriError>)> = futures::stream::iter(todos)
            .map(|todo| async move {
                let result = match &todo {
                    Todo::Sandbox { id, .. } => source
                        .sandbox_status(id.clone())
                        .await
                        .map(|s| StatusResult::Sandbox(Box::new(s))),
                    Todo::Container { id, .. } => source
                        .container_status(id.clone())
                        .await
                        .map(|s| StatusResult::Container(Box::new(s))),
                };
                (todo, result)
            })
            .buffer_unordered(STATUS_CONCURRENCY)
            .collect()
            .await;
        let mut failed: HashSet<String> = HashSet::new();
        for (todo, result) in results {
            let (uid, index) = match &todo {
                Todo::Sandbox { uid, index, .. } | Todo::Container { uid, index, .. } => {
                    (uid.clone(), *index)
                }
            };
            let Some((pod, _)) = candidates.get_mut(&uid) else {
                continue;
            };
            match result {
                Ok(StatusResult::Sandbox(status)) => {
                    if let Some(sb) = pod.sandboxes.get_mut(index) {
                        let net = status.network.unwrap_or_default();
                        // An exited sandbox may no longer report the address it had: keep it.
                        if !net.ip.is_empty() {
                            sb.ip = net.ip;
                            sb.additional_ips =
                                net.additional_ips.into_iter().map(|ip| ip.ip).collect();
                        }
                    }
                }
                Ok(StatusResult::Container(status)) => {
                    self.state().stale.remove(&status.id);
                    if let Some(c) = pod.containers.get_mut(index) {
                        fill_container(c, *status).await;
                    }
                }
                // Removed between the list and the status call: the next relist sees it gone.
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    tracing::debug!(uid, error = %e, "PLEG: status call failed; will inspect the pod again");
                    failed.insert(uid);
                }
            }
        }

        // Apply.
        let now = Instant::now();
        let mut out = Vec::new();
        {
            let mut state = self.state();
            for uid in gone {
                if let Some(r) = state.records.remove(&uid) {
                    for c in &r.pod.containers {
                        state.stale.remove(&c.id);
                    }
                }
                state.reinspect.remove(&uid);
                out.extend(events.remove(&uid).unwrap_or_default());
            }
            for uid in unchanged {
                if let Some(r) = state.records.get_mut(&uid) {
                    r.read_at = now;
                    r.listed_at = started;
                }
            }
            for (uid, (pod, listed)) in candidates {
                if failed.contains(&uid) {
                    // As Go: keep the old record so the same events come again next time.
                    state.reinspect.insert(uid);
                    continue;
                }
                state.reinspect.remove(&uid);
                let pod_events = events.remove(&uid).unwrap_or_default();
                if let Some(timeline) = &self.timeline
                    && pod_events.iter().any(|e| {
                        matches!(
                            e.kind,
                            PodLifecycleEventType::ContainerStarted
                                | PodLifecycleEventType::ContainerDied
                        )
                    })
                {
                    timeline.runtime_seen(&pod, crate::timeline::at(now));
                }
                out.extend(pod_events);
                state.records.insert(
                    uid,
                    Record {
                        pod,
                        listed,
                        read_at: now,
                        listed_at: started,
                    },
                );
            }
            // Only a relist of every pod counts for the statistics (PLEG health, metrics).
            if only.is_none() {
                let stats = &mut state.stats;
                stats.last_interval = stats
                    .last_relist
                    .map(|prev| started.saturating_duration_since(prev));
                stats.last_relist = Some(started);
                stats.last_duration = Some(now.saturating_duration_since(started));
                stats.relists += 1;
                crate::metrics::record_relist(state.stats, state.records.values().map(|r| &r.pod));
            }
        }
        self.send(&out);
        Ok(out)
    }

    fn send(&self, events: &[PodLifecycleEvent]) {
        let Some(tx) = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return;
        };
        for e in events {
            // Not reliable enough to act on, as in Go.
            if e.kind == PodLifecycleEventType::ContainerChanged {
                continue;
            }
            match tx.try_send(e.clone()) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // The periodic resync picks the pod up anyway.
                    tracing::warn!(uid = %e.uid, "PLEG: event channel is full, dropping an event");
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
    }
}

/// A status call's answer.
enum StatusResult {
    Sandbox(Box<ferrolet_proto::cri::PodSandboxStatus>),
    Container(Box<ferrolet_proto::cri::ContainerStatus>),
}

/// Fills `pod` from its cached record where the listed state did not change and lists the
/// status calls needed for the rest: every new or changed container, and the newest sandbox
/// when it is new or changed (only its addresses matter).
fn plan(
    pod: &mut RuntimePod,
    record: Option<&Record>,
    stale: &HashSet<String>,
    todos: &mut Vec<Todo>,
) {
    let newest_sandbox = pod
        .sandboxes
        .iter()
        .enumerate()
        .max_by_key(|(_, s)| s.created_at)
        .map(|(i, _)| i);
    for (index, sb) in pod.sandboxes.iter_mut().enumerate() {
        let cached = record.and_then(|r| r.pod.sandboxes.iter().find(|s| s.id == sb.id));
        if let Some(c) = cached {
            sb.ip = c.ip.clone();
            sb.additional_ips = c.additional_ips.clone();
        }
        let same = record.is_some_and(|r| r.listed.sandboxes.get(&sb.id) == Some(&sb.ready));
        if Some(index) == newest_sandbox && !(same && cached.is_some()) {
            todos.push(Todo::Sandbox {
                uid: pod.uid.clone(),
                index,
                id: sb.id.clone(),
            });
        }
    }
    for (index, c) in pod.containers.iter_mut().enumerate() {
        let same = record.is_some_and(|r| r.listed.containers.get(&c.id) == Some(&c.state));
        let cached = record.and_then(|r| r.pod.containers.iter().find(|x| x.id == c.id));
        match cached {
            Some(old) if same && !stale.contains(&c.id) => {
                c.state = old.state;
                c.started_at = old.started_at;
                c.finished_at = old.finished_at;
                c.exit_code = old.exit_code;
                c.reason = old.reason.clone();
                c.message = old.message.clone();
                c.log_path = old.log_path.clone();
                c.image_ref = old.image_ref.clone();
                c.image = old.image.clone();
                c.resources = old.resources.clone();
            }
            _ => todos.push(Todo::Container {
                uid: pod.uid.clone(),
                index,
                id: c.id.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests;
