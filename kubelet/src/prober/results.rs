//! The probe result cache, as the Go kubelet's `prober/results` managers: the newest result of
//! each probe kind per container id, with an update sent whenever a result changes (the sync
//! loop acts on those).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::mpsc;

use super::ProbeKind;

/// A probe's cached result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeResult {
    /// Not known yet (a startup probe before its first run).
    Unknown,
    /// The probe passed (reached its success threshold).
    Success,
    /// The probe failed (reached its failure threshold), or the container is not running.
    Failure,
}

/// A changed result, as the sync loop receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeUpdate {
    /// The pod.
    pub pod_uid: String,
    /// The container instance (CRI id).
    pub container_id: String,
    /// Which probe.
    pub kind: ProbeKind,
    /// Its new result.
    pub result: ProbeResult,
}

impl ProbeUpdate {
    /// Whether the pod needs a sync for it, as the Go kubelet's sync loop decides: liveness
    /// only when it fails, readiness and startup on every change.
    pub fn needs_sync(&self) -> bool {
        self.kind != ProbeKind::Liveness || self.result == ProbeResult::Failure
    }
}

/// Results of every probe kind, by container id.
#[derive(Debug)]
pub struct Results {
    map: Mutex<HashMap<(ProbeKind, String), ProbeResult>>,
    tx: mpsc::UnboundedSender<ProbeUpdate>,
}

impl Results {
    /// An empty cache and the receiving end of its updates.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<ProbeUpdate>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let results = Self {
            map: Mutex::new(HashMap::new()),
            tx,
        };
        (results, rx)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(ProbeKind, String), ProbeResult>> {
        // Every change is one insert or remove: a panic elsewhere cannot leave it half-done.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached result of `kind` for a container instance.
    pub fn get(&self, kind: ProbeKind, container_id: &str) -> Option<ProbeResult> {
        self.map().get(&(kind, container_id.to_string())).copied()
    }

    /// Caches a result; when it differs from the cached one (or there was none), sends an
    /// update and returns true.
    pub fn set(
        &self,
        kind: ProbeKind,
        container_id: &str,
        result: ProbeResult,
        pod_uid: &str,
    ) -> bool {
        let previous = self.map().insert((kind, container_id.to_string()), result);
        if previous == Some(result) {
            return false;
        }
        // Nobody listening (a kubelet shutting down, or tests) is fine: the cache is the truth.
        let _ = self.tx.send(ProbeUpdate {
            pod_uid: pod_uid.to_string(),
            container_id: container_id.to_string(),
            kind,
            result,
        });
        true
    }

    /// Forgets the result of `kind` for a container instance.
    pub fn remove(&self, kind: ProbeKind, container_id: &str) {
        self.map().remove(&(kind, container_id.to_string()));
    }

    /// How many results are cached.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether nothing is cached.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_changes_are_sent() {
        let (results, mut rx) = Results::new();
        assert_eq!(results.get(ProbeKind::Readiness, "c1"), None);
        assert!(results.set(ProbeKind::Readiness, "c1", ProbeResult::Failure, "u"));
        assert!(!results.set(ProbeKind::Readiness, "c1", ProbeResult::Failure, "u"));
        assert!(results.set(ProbeKind::Readiness, "c1", ProbeResult::Success, "u"));
        // Kinds are kept apart.
        assert!(results.set(ProbeKind::Liveness, "c1", ProbeResult::Success, "u"));
        assert_eq!(
            results.get(ProbeKind::Readiness, "c1"),
            Some(ProbeResult::Success)
        );
        let mut seen = Vec::new();
        while let Ok(u) = rx.try_recv() {
            seen.push((u.kind, u.result, u.container_id, u.pod_uid));
        }
        assert_eq!(
            seen,
            [
                (
                    ProbeKind::Readiness,
                    ProbeResult::Failure,
                    "c1".into(),
                    "u".into()
                ),
                (
                    ProbeKind::Readiness,
                    ProbeResult::Success,
                    "c1".into(),
                    "u".into()
                ),
                (
                    ProbeKind::Liveness,
                    ProbeResult::Success,
                    "c1".into(),
                    "u".into()
                ),
            ]
        );
        results.remove(ProbeKind::Readiness, "c1");
        assert_eq!(results.get(ProbeKind::Readiness, "c1"), None);
        assert_eq!(results.len(), 1);
        // A removed result set again is a change again.
        assert!(results.set(ProbeKind::Readiness, "c1", ProbeResult::Success, "u"));
    }

    #[test]
    fn a_closed_receiver_does_not_stop_the_cache() {
        let (results, rx) = Results::new();
        drop(rx);
        assert!(results.set(ProbeKind::Startup, "c", ProbeResult::Unknown, "u"));
        assert_eq!(
            results.get(ProbeKind::Startup, "c"),
            Some(ProbeResult::Unknown)
        );
    }

    #[test]
    fn syncs_follow_the_go_sync_loop() {
        let update = |kind, result| ProbeUpdate {
            pod_uid: "u".into(),
            container_id: "c".into(),
            kind,
            result,
        };
        assert!(!update(ProbeKind::Liveness, ProbeResult::Success).needs_sync());
        assert!(update(ProbeKind::Liveness, ProbeResult::Failure).needs_sync());
        assert!(update(ProbeKind::Readiness, ProbeResult::Success).needs_sync());
        assert!(update(ProbeKind::Startup, ProbeResult::Failure).needs_sync());
    }
}
