//! The prober manager, as the Go kubelet's `prober` package: a worker task per (pod,
//! container, probe kind) for every liveness, readiness and startup probe of the app
//! containers and sidecars, results cached per container instance, and every change sent to
//! the sync loop, which kills containers failing liveness or startup and recomputes the
//! containers' `started` and `ready`.
//!
//! Workers read the pod's last status (the sync records it here), so they probe the instance
//! the status shows. Parts: [`results`] (the cache and its updates), [`worker`] (one probe's
//! loop and thresholds), [`check`] (one run of a handler: [`exec`], [`http`], [`tcp`],
//! [`grpc`]; [`dial`] opens the network probes' connections).

pub mod check;
pub mod dial;
pub mod exec;
pub mod grpc;
pub mod http;
pub mod results;
pub mod tcp;
#[cfg(test)]
pub(crate) mod test_server;
pub mod worker;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, PodStatus, Probe};
use tokio::sync::{mpsc, watch};

use crate::cri::Cri;
use crate::events::EventRecorder;
use crate::types::Pod;
use check::{Checker, Probes};
use results::Results;
pub use results::{ProbeResult, ProbeUpdate};

/// The three probes a container may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    /// `livenessProbe`: failing it gets the container killed.
    Liveness,
    /// `readinessProbe`: the container's `ready`.
    Readiness,
    /// `startupProbe`: holds the others off until it succeeds; failing it kills.
    Startup,
}

impl ProbeKind {
    /// Every kind.
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Startup,
        ProbeKind::Readiness,
        ProbeKind::Liveness,
    ];

    /// The name messages use (`Liveness`, `Readiness`, `Startup`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    /// The container's probe of this kind.
    pub fn probe_of(self, c: &Container) -> Option<&Probe> {
        match self {
            ProbeKind::Liveness => c.liveness_probe.as_ref(),
            ProbeKind::Readiness => c.readiness_probe.as_ref(),
            ProbeKind::Startup => c.startup_probe.as_ref(),
        }
    }

    /// The result a new instance starts with: not ready, alive, start unknown.
    pub fn initial(self) -> ProbeResult {
        match self {
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Startup => ProbeResult::Unknown,
        }
    }
}

/// One worker's identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct WorkerKey {
    pub(crate) uid: String,
    pub(crate) container: String,
    pub(crate) kind: ProbeKind,
}

struct WorkerHandle {
    /// Tells this incarnation of the key apart from a later one.
    id: u64,
    stop: watch::Sender<bool>,
}

/// The prober manager.
pub struct Manager {
    /// Where the workers run.
    runtime: tokio::runtime::Handle,
    checker: Arc<dyn Checker>,
    results: Results,
    workers: Mutex<HashMap<WorkerKey, WorkerHandle>>,
    /// Each pod's last status, as the sync recorded it.
    statuses: Mutex<HashMap<String, Arc<PodStatus>>>,
    updates: Mutex<Option<mpsc::UnboundedReceiver<ProbeUpdate>>>,
    /// When the prober started: the origin of the workers' tick grid.
    started: Instant,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("workers", &self.worker_count())
            .finish_non_exhaustive()
    }
}

/// Locks a map; every change to it is one insert or remove, so a panic elsewhere cannot leave
/// it inconsistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The containers that get probe workers: app containers and sidecars (init containers with
/// `restartPolicy: Always`).
fn probed_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let app = spec.into_iter().flat_map(|s| s.containers.iter());
    let sidecars = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    app.chain(sidecars)
}

/// The probe workers' runtime: one thread, its own timers and reactor. Hundreds of probes a
/// second are hundreds of short tasks that each wait on a timer and a socket; on the
/// kubelet's multi-threaded runtime every one of their wake-ups may also wake an idle worker
/// thread to look for work to steal, which cost more than the probes' own code. The thread
/// lives as long as the process.
fn probe_runtime() -> std::io::Result<tokio::runtime::Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("probes".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}

impl Manager {
    /// A manager probing through `cri` (exec) and from the node (HTTP, TCP, gRPC), its
    /// workers on a thread of their own (see [`probe_runtime`]).
    pub fn new(cri: Cri) -> Arc<Self> {
        let runtime = probe_runtime().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "starting the probe thread; probes share the kubelet's runtime");
            tokio::runtime::Handle::current()
        });
        Self::on(runtime, Arc::new(Probes::new(cri)))
    }

    /// A manager running probes through `checker` on the current runtime.
    #[cfg(test)]
    pub fn with_checker(checker: Arc<dyn Checker>) -> Arc<Self> {
        Self::on(tokio::runtime::Handle::current(), checker)
    }

    fn on(runtime: tokio::runtime::Handle, checker: Arc<dyn Checker>) -> Arc<Self> {
        let (results, rx) = Results::new();
        Arc::new(Self {
            runtime,
            checker,
            results,
            workers: Mutex::new(HashMap::new()),
            statuses: Mutex::new(HashMap::new()),
            updates: Mutex::new(Some(rx)),
            started: Instant::now(),
            next_id: AtomicU64::new(1),
        })
    }

    /// The result changes, for the sync loop; a later call gets a closed channel.
    pub fn take_updates(&self) -> mpsc::UnboundedReceiver<ProbeUpdate> {
        lock(&self.updates).take().unwrap_or_else(|| {
            let (_, rx) = mpsc::unbounded_channel();
            rx
        })
    }

    /// Whether the manager started less than `period` ago.
    fn started_within(&self, period: Duration) -> bool {
        self.started.elapsed() < period
    }

    /// Starts the workers the pod's probes need and does not have yet (Go's `AddPod`;
    /// calling it on every sync is cheap); new workers record their events to `events`.
    pub fn add_pod(self: &Arc<Self>, pod: &Arc<Pod>, events: &Arc<dyn EventRecorder>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if uid.is_empty() {
            return;
        }
        let never_restarts =
            pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("Never");
        let mut workers = lock(&self.workers);
        for c in probed_containers(pod) {
            // The container's probe workers share one copy of it: a `Container` is 2 KiB
            // before its strings, and a copy per worker was a third of a worker's memory.
            let mut container: Option<Arc<Container>> = None;
            for kind in ProbeKind::ALL {
                let Some(probe) = kind.probe_of(c) else {
                    continue;
                };
                let key = WorkerKey {
                    uid: uid.clone(),
                    container: c.name.clone(),
                    kind,
                };
                if workers.contains_key(&key) {
                    continue;
                }
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let (stop, stop_rx) = watch::channel(false);
                workers.insert(key.clone(), WorkerHandle { id, stop });
                let pod = pod.clone();
                let timings = worker::Timings::of(probe);
                let worker = worker::Worker {
                    manager: self.clone(),
                    state: worker::WorkerState::new(kind, &c.name, timings, never_restarts),
                    key,
                    id,
                    pod,
                    container: container.get_or_insert_with(|| Arc::new(c.clone())).clone(),
                    probe: probe.clone(),
                    stop: stop_rx,
                    http: None,
                    events: events.clone(),
                };
                self.runtime.spawn(worker.run());
            }
        }
    }

    /// Stops the pod's workers and forgets its status (Go's `RemovePod`).
    pub fn remove_pod(&self, uid: &str) {
        let mut workers = lock(&self.workers);
        workers.retain(|key, handle| {
            if key.uid != uid {
                return true;
            }
            let _ = handle.stop.send(true);
            false
        });
        drop(workers);
        lock(&self.statuses).remove(uid);
    }

    /// Called by a worker as it ends: forgets it unless a newer worker took its key.
    fn remove_worker(&self, key: &WorkerKey, id: u64) {
        let mut workers = lock(&self.workers);
        if workers.get(key).is_some_and(|h| h.id == id) {
            workers.remove(key);
        }
    }

    /// Records the pod's newest status for its workers.
    pub fn set_status(&self, uid: &str, status: &PodStatus) {
        lock(&self.statuses).insert(uid.to_string(), Arc::new(status.clone()));
    }

    fn status(&self, uid: &str) -> Option<Arc<PodStatus>> {
        lock(&self.statuses).get(uid).cloned()
    }

    /// Whether the pod's container has a worker for `kind`.
    pub fn has_worker(&self, uid: &str, container: &str, kind: ProbeKind) -> bool {
        lock(&self.workers).contains_key(&WorkerKey {
            uid: uid.to_string(),
            container: container.to_string(),
            kind,
        })
    }

    /// How many workers run.
    pub fn worker_count(&self) -> usize {
        lock(&self.workers).len()
    }

    /// The cached result of `kind` for a container instance.
    pub fn result(&self, kind: ProbeKind, container_id: &str) -> Option<ProbeResult> {
        self.results.get(kind, container_id)
    }

    /// Whether a container instance has started and is ready, as Go's `UpdatePodStatus`: a
    /// running instance has started once its startup probe succeeded (at once without one);
    /// a started one is ready once its readiness probe succeeded (at once without one).
    pub fn health(
        &self,
        uid: &str,
        container: &str,
        container_id: &str,
        running: bool,
    ) -> (bool, bool) {
        if !running {
            return (false, false);
        }
        let started = match self.results.get(ProbeKind::Startup, container_id) {
            Some(r) => r == ProbeResult::Success,
            None => !self.has_worker(uid, container, ProbeKind::Startup),
        };
        if !started {
            return (false, false);
        }
        let ready = match self.results.get(ProbeKind::Readiness, container_id) {
            Some(ProbeResult::Success) => true,
            _ => !self.has_worker(uid, container, ProbeKind::Readiness),
        };
        (true, ready)
    }
}

#[cfg(test)]
mod tests;
