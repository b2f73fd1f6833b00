//! Why the kubelet killed container instances (a failed liveness or startup probe, a failed
//! postStart hook, a changed spec), by pod and container id: the message the Go kubelet gives
//! such a kill (its `Killing` event), which the instance's terminated state shows when the
//! runtime reports no message of its own. Kept in memory: a restarted kubelet forgets them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

/// Kill messages per pod UID and container id.
#[derive(Debug, Default)]
pub struct KillNotes {
    notes: Mutex<HashMap<String, BTreeMap<String, String>>>,
}

impl KillNotes {
    /// No notes.
    #[cfg(test)]
    pub fn new() -> Self {
        Self::default()
    }

    fn notes(&self) -> MutexGuard<'_, HashMap<String, BTreeMap<String, String>>> {
        // Each change is one insert or remove: a panic elsewhere cannot leave it half-done.
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes why the pod's container instance was killed.
    pub fn record(&self, uid: &str, container_id: &str, message: &str) {
        self.notes()
            .entry(uid.to_string())
            .or_default()
            .insert(container_id.to_string(), message.to_string());
    }

    /// The pod's notes, by container id.
    pub fn of_pod(&self, uid: &str) -> BTreeMap<String, String> {
        self.notes().get(uid).cloned().unwrap_or_default()
    }

    /// Keeps only the pod's notes of instances `exists` still knows.
    pub fn retain(&self, uid: &str, exists: impl Fn(&str) -> bool) {
        let mut notes = self.notes();
        if let Some(pod) = notes.get_mut(uid) {
            pod.retain(|id, _| exists(id));
            if pod.is_empty() {
                notes.remove(uid);
            }
        }
    }

    /// Forgets the pod.
    pub fn forget_pod(&self, uid: &str) {
        self.notes().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_kept_per_pod_until_their_instances_go() {
        let notes = KillNotes::new();
        notes.record(
            "u1",
            "a",
            "Container main failed liveness probe, will be restarted",
        );
        notes.record("u1", "b", "FailedPostStartHook");
        notes.record("u2", "c", "x");
        assert_eq!(notes.of_pod("u1").len(), 2);
        notes.retain("u1", |id| id == "b");
        assert_eq!(
            notes.of_pod("u1"),
            BTreeMap::from([("b".to_string(), "FailedPostStartHook".to_string())])
        );
        notes.retain("u1", |_| false);
        assert!(notes.of_pod("u1").is_empty());
        notes.forget_pod("u2");
        assert!(notes.of_pod("u2").is_empty());
        notes.retain("nobody", |_| true);
    }
}
