//! Why container instances ended, as the kubelet saw it, by pod and container id: why the
//! kubelet killed one (a failed liveness or startup probe, a failed postStart hook, a changed
//! spec; the message of Go's `Killing` event, which the instance's terminated state shows when
//! the runtime reports no message of its own), and which ones the kernel OOM-killed (the OOM
//! watcher's attribution, which makes a runtime's `Error` with 137 read `OOMKilled`). Kept in
//! memory: a restarted kubelet forgets them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

/// Notes per pod UID and container id, dropped with the instances they are about.
#[derive(Debug)]
pub struct ContainerNotes<V> {
    notes: Mutex<HashMap<String, BTreeMap<String, V>>>,
}

impl<V> Default for ContainerNotes<V> {
    fn default() -> Self {
        Self {
            notes: Mutex::new(HashMap::new()),
        }
    }
}

/// Kill messages of the instances the kubelet killed.
pub type KillNotes = ContainerNotes<String>;

/// The instances the kernel OOM-killed.
pub type OomNotes = ContainerNotes<()>;

impl<V: Clone> ContainerNotes<V> {
    /// No notes.
    #[cfg(test)]
    pub fn new() -> Self {
        Self::default()
    }

    fn notes(&self) -> MutexGuard<'_, HashMap<String, BTreeMap<String, V>>> {
        // Each change is one insert or remove: a panic elsewhere cannot leave it half-done.
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes `value` about the pod's container instance.
    pub fn record(&self, uid: &str, container_id: &str, value: V) {
        self.notes()
            .entry(uid.to_string())
            .or_default()
            .insert(container_id.to_string(), value);
    }

    /// The pod's notes, by container id.
    pub fn of_pod(&self, uid: &str) -> BTreeMap<String, V> {
        self.notes().get(uid).cloned().unwrap_or_default()
    }

    /// The container ids the pod has notes about.
    pub fn ids_of_pod(&self, uid: &str) -> BTreeSet<String> {
        self.notes()
            .get(uid)
            .map(|pod| pod.keys().cloned().collect())
            .unwrap_or_default()
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

    /// Keeps only the pods `known` still knows.
    pub fn retain_pods(&self, known: impl Fn(&str) -> bool) {
        self.notes().retain(|uid, _| known(uid));
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
            "Container main failed liveness probe, will be restarted".into(),
        );
        notes.record("u1", "b", "FailedPostStartHook".into());
        notes.record("u2", "c", "x".into());
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

    #[test]
    fn oom_notes_go_with_their_pods() {
        let notes = OomNotes::new();
        notes.record("u1", "a", ());
        notes.record("u1", "b", ());
        notes.record("u2", "c", ());
        assert_eq!(
            notes.ids_of_pod("u1"),
            BTreeSet::from(["a".to_string(), "b".to_string()])
        );
        notes.retain_pods(|uid| uid == "u1");
        assert!(notes.ids_of_pod("u2").is_empty());
        assert_eq!(notes.ids_of_pod("u1").len(), 2);
    }
}
