//! Per-pod start timelines (issue #20): for every start of a pod, the moments the work on it
//! really happened, from its source seeing it to its Running status being visible.
//!
//! A *start* is a pod's first start, a new incarnation under the same name (a new UID, such as
//! an edited static pod), or a restart of its containers or sandbox once an earlier start has
//! finished. Each holds [`Mark`]s, kept in time order; a phase's duration is the time from the
//! mark before it, so the durations of a start add up to its wall time by construction.
//!
//! The [`Timeline`] keeps the last [`Limits::pods`] pods by name (the least recently started
//! is evicted), [`Limits::starts_per_pod`] starts of each and at most [`MARKS_PER_START`]
//! marks a start, so its memory is bounded however many pods start. Recording takes one
//! mutex for microseconds and allocates only when a start begins. [`render`] is the JSON the
//! API serves and the table `ferrolet trace pod` prints.

pub mod render;

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ferrolet_proto::cri::ContainerState;
use serde::{Deserialize, Serialize};

use crate::types::{Pod, RuntimePod};

/// Pods whose timelines are kept by default.
pub const DEFAULT_PODS: usize = 256;
/// Starts kept per pod (the newest).
pub const STARTS_PER_POD: usize = 4;
/// Marks kept per start; later ones are counted as dropped (a pod with dozens of containers).
pub const MARKS_PER_START: usize = 64;

/// What happened at a mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The pod's source first reported it (`kubernetes.io/config.seen`).
    Seen,
    /// Admission let it in.
    Admitted,
    /// A pod worker started the sync that (re)starts it.
    WorkerStarted,
    /// Its volumes were set up.
    VolumesReady,
    /// RunPodSandbox returned.
    SandboxReady,
    /// A container's image is being pulled.
    ImagePulling,
    /// A container's image is present (pulled, or there already).
    ImageReady,
    /// CreateContainer returned.
    ContainerCreated,
    /// StartContainer returned.
    ContainerStarted,
    /// The PLEG saw an init container exit.
    ContainerExited,
    /// The PLEG first saw every app container running.
    RunningSeen,
    /// The status showing every container running is what `/pods` (and the status manager)
    /// serve.
    StatusVisible,
}

impl Phase {
    /// The name in JSON and in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Seen => "seen",
            Phase::Admitted => "admitted",
            Phase::WorkerStarted => "worker_started",
            Phase::VolumesReady => "volumes_ready",
            Phase::SandboxReady => "sandbox_ready",
            Phase::ImagePulling => "image_pulling",
            Phase::ImageReady => "image_ready",
            Phase::ContainerCreated => "container_created",
            Phase::ContainerStarted => "container_started",
            Phase::ContainerExited => "container_exited",
            Phase::RunningSeen => "running_seen",
            Phase::StatusVisible => "status_visible",
        }
    }
}

/// Why a start began.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The pod (or a new incarnation of its name) was admitted.
    Created,
    /// Containers were restarted in the running sandbox.
    Restarted,
    /// A new sandbox was made for it.
    SandboxRecreated,
}

impl Trigger {
    /// The name in JSON and in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Created => "created",
            Trigger::Restarted => "restarted",
            Trigger::SandboxRecreated => "sandbox_recreated",
        }
    }
}

/// Nanoseconds since the Unix epoch on a clock that never goes backwards: the wall clock read
/// once, then the monotonic clock's progress, so marks taken now and marks converted from an
/// [`Instant`] ([`at`]) order and subtract consistently.
pub fn now() -> i64 {
    at(Instant::now())
}

/// `instant` on the [`now`] clock.
pub fn at(instant: Instant) -> i64 {
    static ANCHOR: LazyLock<(Instant, i64)> = LazyLock::new(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or_default();
        (Instant::now(), wall)
    });
    let (base, wall) = *ANCHOR;
    let delta = match instant.checked_duration_since(base) {
        Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        None => -i64::try_from((base - instant).as_nanos()).unwrap_or(i64::MAX),
    };
    wall.saturating_add(delta)
}

/// One moment of a start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// What happened.
    pub phase: Phase,
    /// Index of the container in the start's names, when it is about one.
    container: Option<u16>,
    /// When, on the [`now`] clock.
    pub at: i64,
}

/// The runtime's own account of a RunPodSandbox it served, milliseconds (ferrolet-cri's
/// verbose PodSandboxStatus `startTimings`; the network and the pause container are set up at
/// once, so those two overlap; a sandbox without a pause process has no pause time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxTimings {
    /// The sandbox's files (hostname, hosts, resolv.conf, shm).
    #[serde(default)]
    pub files_ms: f64,
    /// Making the network namespace (and, without a pause, the pinned IPC and UTS ones).
    #[serde(default)]
    pub netns_ms: f64,
    /// Loopback up and the CNI ADD of the plugin chain.
    #[serde(default)]
    pub cni_add_ms: f64,
    /// The pause container: snapshot, record, task created and started; `None` for a
    /// sandbox without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_ms: Option<f64>,
}

/// One start of a pod.
#[derive(Clone, Debug)]
pub struct Start {
    /// The pod's UID for this start.
    pub uid: Box<str>,
    /// 1 for the first start of the name, counting on across incarnations.
    pub number: u32,
    /// Why it began.
    pub trigger: Trigger,
    /// Init container names, then app container names.
    containers: Box<[Box<str>]>,
    /// How many of `containers` are init containers.
    init: usize,
    /// In time order.
    marks: Vec<Mark>,
    /// Marks not kept because the start had [`MARKS_PER_START`] already.
    pub dropped: u32,
    /// Its status was visible with every container running: later marks go to a new start.
    pub finished: bool,
    /// What the runtime reported of the sandbox this start made.
    pub sandbox: Option<SandboxTimings>,
}

impl Start {
    fn new(id: &PodId<'_>, number: u32, trigger: Trigger, containers: &Containers<'_>) -> Self {
        let names: Box<[Box<str>]> = containers
            .init
            .iter()
            .chain(containers.app)
            .map(|n| Box::<str>::from(*n))
            .collect();
        Self {
            uid: id.uid.into(),
            number,
            trigger,
            containers: names,
            init: containers.init.len(),
            marks: Vec::with_capacity(12),
            dropped: 0,
            finished: false,
            sandbox: None,
        }
    }

    /// The marks in time order, each with its container's name.
    pub fn marks(&self) -> impl Iterator<Item = (Mark, Option<&str>)> + '_ {
        self.marks.iter().map(|m| {
            let name = m
                .container
                .and_then(|i| self.containers.get(usize::from(i)))
                .map(|n| &**n);
            (*m, name)
        })
    }

    /// When its first mark was taken.
    pub fn first_at(&self) -> Option<i64> {
        self.marks.first().map(|m| m.at)
    }

    fn index_of(&self, container: &str) -> Option<u16> {
        let i = self.containers.iter().position(|n| &**n == container)?;
        u16::try_from(i).ok()
    }

    fn app(&self) -> &[Box<str>] {
        self.containers.get(self.init..).unwrap_or_default()
    }

    fn has(&self, phase: Phase, container: Option<u16>) -> bool {
        self.marks
            .iter()
            .any(|m| m.phase == phase && m.container == container)
    }

    /// Adds a mark unless one of the same phase and container is there (a phase happens once
    /// per start; repeats while a start is not finished are retries); keeps the time order.
    fn add(&mut self, phase: Phase, container: Option<u16>, at: i64) -> bool {
        if self.has(phase, container) {
            return false;
        }
        if self.marks.len() >= MARKS_PER_START {
            self.dropped = self.dropped.saturating_add(1);
            return false;
        }
        let pos = self
            .marks
            .iter()
            .rposition(|m| m.at <= at)
            .map_or(0, |i| i + 1);
        self.marks.insert(
            pos,
            Mark {
                phase,
                container,
                at,
            },
        );
        true
    }

    /// The pulls of this start: from the first pull's start to the last pull's end (Go's
    /// `firstStartedPulling` and `lastFinishedPulling`).
    pub fn pull_window(&self) -> Option<(i64, i64)> {
        let first = self
            .marks
            .iter()
            .find(|m| m.phase == Phase::ImagePulling)?
            .at;
        let pulled: Vec<Option<u16>> = self
            .marks
            .iter()
            .filter(|m| m.phase == Phase::ImagePulling)
            .map(|m| m.container)
            .collect();
        let last = self
            .marks
            .iter()
            .filter(|m| m.phase == Phase::ImageReady && pulled.contains(&m.container))
            .map(|m| m.at)
            .max()?;
        Some((first, last.max(first)))
    }

    /// Whether this start made the pod's sandbox (not one adopted after a kubelet restart).
    pub fn made_sandbox(&self) -> bool {
        self.has(Phase::SandboxReady, None)
    }

    /// Approximate heap and inline bytes it holds.
    #[cfg(test)]
    fn approx_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.uid.len()
            + self
                .containers
                .iter()
                .map(|n| n.len() + std::mem::size_of::<Box<str>>())
                .sum::<usize>()
            + self.marks.capacity() * std::mem::size_of::<Mark>()
    }
}

/// Which pod a record is about.
#[derive(Clone, Copy, Debug)]
pub struct PodId<'a> {
    /// Its UID.
    pub uid: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
}

impl<'a> PodId<'a> {
    /// The id of `pod`.
    pub fn of(pod: &'a Pod) -> Self {
        let m = &pod.metadata;
        Self {
            uid: m.uid.as_deref().unwrap_or_default(),
            namespace: m.namespace.as_deref().unwrap_or("default"),
            name: m.name.as_deref().unwrap_or_default(),
        }
    }
}

/// A start's container names.
#[derive(Clone, Copy, Debug, Default)]
pub struct Containers<'a> {
    /// Init containers, in order.
    pub init: &'a [&'a str],
    /// App containers.
    pub app: &'a [&'a str],
}

/// How much the [`Timeline`] keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Pods (by namespace and name).
    pub pods: usize,
    /// Starts per pod.
    pub starts_per_pod: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            pods: DEFAULT_PODS,
            starts_per_pod: STARTS_PER_POD,
        }
    }
}

/// The starts of one pod name.
#[derive(Debug, Default)]
struct History {
    starts: VecDeque<Start>,
    /// The number of the last start made.
    last_number: u32,
    /// When a start was last made, in the store's sequence: the least recent is evicted.
    last_active: u64,
}

#[derive(Debug, Default)]
struct Inner {
    /// Namespace → name → history (two levels, so lookups borrow and never allocate).
    pods: HashMap<String, HashMap<String, History>>,
    count: usize,
    seq: u64,
}

impl Inner {
    fn history(&mut self, namespace: &str, name: &str) -> Option<&mut History> {
        self.pods.get_mut(namespace)?.get_mut(name)
    }

    /// The newest start of `id`'s name if it is `id`'s incarnation.
    fn current(&mut self, id: &PodId<'_>) -> Option<&mut Start> {
        let start = self.history(id.namespace, id.name)?.starts.back_mut()?;
        (&*start.uid == id.uid).then_some(start)
    }

    /// The history of `id`'s name, made (evicting the least recently started) if needed.
    fn history_or_new(&mut self, id: &PodId<'_>, limits: Limits) -> &mut History {
        let exists = self
            .pods
            .get(id.namespace)
            .is_some_and(|n| n.contains_key(id.name));
        if !exists {
            while self.count >= limits.pods && self.evict_oldest() {}
            self.count += 1;
        }
        self.pods
            .entry(id.namespace.to_string())
            .or_default()
            .entry(id.name.to_string())
            .or_default()
    }

    fn evict_oldest(&mut self) -> bool {
        let oldest = self
            .pods
            .iter()
            .flat_map(|(ns, names)| names.iter().map(move |(n, h)| (h.last_active, ns, n)))
            .min_by_key(|(active, _, _)| *active)
            .map(|(_, ns, n)| (ns.clone(), n.clone()));
        let Some((ns, name)) = oldest else {
            return false;
        };
        if let Some(names) = self.pods.get_mut(&ns) {
            names.remove(&name);
            if names.is_empty() {
                self.pods.remove(&ns);
            }
        }
        self.count = self.count.saturating_sub(1);
        true
    }

    fn push(&mut self, id: &PodId<'_>, trigger: Trigger, containers: &Containers<'_>, l: Limits) {
        if l.pods == 0 {
            return;
        }
        self.seq += 1;
        let seq = self.seq;
        let history = self.history_or_new(id, l);
        history.last_number = history.last_number.saturating_add(1);
        history.last_active = seq;
        let start = Start::new(id, history.last_number, trigger, containers);
        history.starts.push_back(start);
        while history.starts.len() > l.starts_per_pod.max(1) {
            history.starts.pop_front();
        }
    }
}

/// The starts of the last pods; cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct Timeline {
    inner: Mutex<Inner>,
    limits: Limits,
}

impl Timeline {
    /// An empty store keeping `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            limits,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every change is applied whole under the lock; a panic elsewhere leaves it usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Begins a start of a newly admitted pod (or a new incarnation of its name): `seen` is
    /// when its source first reported it, `admitted` when admission let it in.
    pub fn admitted(&self, id: PodId<'_>, containers: Containers<'_>, seen: i64, admitted: i64) {
        let mut inner = self.lock();
        inner.push(&id, Trigger::Created, &containers, self.limits);
        if let Some(start) = inner.current(&id) {
            start.add(Phase::Seen, None, seen.min(admitted));
            start.add(Phase::Admitted, None, admitted);
        }
    }

    /// Begins a restart of `id` by the sync a pod worker began at `picked_up`, if its newest
    /// start has finished (one that has not keeps collecting its marks); whether it began.
    pub fn restarted(
        &self,
        id: PodId<'_>,
        trigger: Trigger,
        containers: Containers<'_>,
        picked_up: i64,
    ) -> bool {
        let mut inner = self.lock();
        if !inner.current(&id).is_some_and(|s| s.finished) {
            return false;
        }
        inner.push(&id, trigger, &containers, self.limits);
        inner
            .current(&id)
            .is_some_and(|s| s.add(Phase::WorkerStarted, None, picked_up))
    }

    /// Marks `phase` (of `container`, if any) at `at` in `id`'s unfinished newest start;
    /// whether it was recorded (not when there is no such start, or the phase is there).
    pub fn mark(&self, id: PodId<'_>, phase: Phase, container: Option<&str>, at: i64) -> bool {
        let mut inner = self.lock();
        let Some(start) = inner.current(&id).filter(|s| !s.finished) else {
            return false;
        };
        let index = match container {
            Some(name) => match start.index_of(name) {
                Some(i) => Some(i),
                None => return false,
            },
            None => None,
        };
        start.add(phase, index, at)
    }

    /// Keeps the runtime's account of the sandbox made by `id`'s current start (finished or
    /// not: it arrives after the sandbox, off the start's path); false when that start made
    /// no sandbox or is gone.
    pub fn sandbox_timings(&self, id: PodId<'_>, timings: SandboxTimings) -> bool {
        let mut inner = self.lock();
        match inner.current(&id).filter(|s| s.made_sandbox()) {
            Some(start) => {
                start.sandbox = Some(timings);
                true
            }
            None => false,
        }
    }

    /// Marks the status showing every container running as visible, which finishes the
    /// start; the finished start (for the start metrics) when this was its first such status.
    pub fn status_visible(&self, id: PodId<'_>, at: i64) -> Option<Start> {
        let mut inner = self.lock();
        let start = inner.current(&id).filter(|s| !s.finished)?;
        start.add(Phase::StatusVisible, None, at);
        start.finished = true;
        Some(start.clone())
    }

    /// What the runtime showed of `pod` at `at` (a PLEG relist, or the view a sync or a
    /// status was made from): exited init containers, and whether every app container now
    /// runs.
    pub fn runtime_seen(&self, pod: &RuntimePod, at: i64) {
        let id = PodId {
            uid: &pod.uid,
            namespace: &pod.namespace,
            name: &pod.name,
        };
        let mut inner = self.lock();
        let Some(start) = inner.current(&id).filter(|s| !s.finished) else {
            return;
        };
        let newest_state = |name: &str| {
            pod.containers
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.state)
        };
        for i in 0..start.init {
            let Ok(index) = u16::try_from(i) else { break };
            let exited = start
                .containers
                .get(i)
                .is_some_and(|name| newest_state(name) == Some(ContainerState::ContainerExited));
            if exited && start.has(Phase::ContainerStarted, Some(index)) {
                start.add(Phase::ContainerExited, Some(index), at);
            }
        }
        // Not while a container this start created has not had its StartContainer return
        // (a relist may see it running first): its start is part of getting there.
        let in_flight = start.marks.iter().any(|m| {
            m.phase == Phase::ContainerCreated && !start.has(Phase::ContainerStarted, m.container)
        });
        let app = start.app();
        let all_running = !in_flight
            && !app.is_empty()
            && app
                .iter()
                .all(|name| newest_state(name) == Some(ContainerState::ContainerRunning));
        if all_running {
            start.add(Phase::RunningSeen, None, at);
        }
    }

    /// The starts kept of pod `namespace/name`, oldest first.
    pub fn starts(&self, namespace: &str, name: &str) -> Option<Vec<Start>> {
        let mut inner = self.lock();
        let history = inner.history(namespace, name)?;
        Some(history.starts.iter().cloned().collect())
    }

    /// How many pods and starts are kept.
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        let starts = inner
            .pods
            .values()
            .flat_map(|n| n.values())
            .map(|h| h.starts.len())
            .sum();
        (inner.count, starts)
    }

    /// Approximately the bytes it holds.
    #[cfg(test)]
    pub fn approx_bytes(&self) -> usize {
        let inner = self.lock();
        inner
            .pods
            .iter()
            .map(|(ns, names)| {
                ns.len()
                    + names
                        .iter()
                        .map(|(n, h)| {
                            n.len()
                                + std::mem::size_of::<History>()
                                + h.starts.iter().map(Start::approx_bytes).sum::<usize>()
                        })
                        .sum::<usize>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests;
