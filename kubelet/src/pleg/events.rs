//! Pod lifecycle events and how they come from comparing two relists, as the Go kubelet's
//! generic PLEG: a container's state as listed (running, exited, unknown, gone) changing
//! between relists makes an event; sandboxes changing (appearing, becoming ready or not,
//! going away) make a `SandboxChanged`.

use std::collections::{BTreeMap, BTreeSet};

use ferrolet_proto::cri::ContainerState;

use crate::types::RuntimePod;

/// What happened to a container or sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PodLifecycleEventType {
    /// A container is running now.
    ContainerStarted,
    /// A container exited (or vanished without being seen to exit).
    ContainerDied,
    /// A container is gone from the runtime.
    ContainerRemoved,
    /// A container moved to an unknown or created state (not sent, as in Go: unreliable).
    ContainerChanged,
    /// A sandbox appeared, changed readiness, or went away.
    SandboxChanged,
}

/// One event for one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodLifecycleEvent {
    /// Pod UID.
    pub uid: String,
    /// What happened.
    pub kind: PodLifecycleEventType,
    /// The container or sandbox id it happened to.
    pub id: String,
}

/// A container's state as the PLEG compares it (CRI's Created counts as unknown, as in Go).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Running,
    Exited,
    Unknown,
    Gone,
}

fn seen(state: ContainerState) -> Seen {
    match state {
        ContainerState::ContainerRunning => Seen::Running,
        ContainerState::ContainerExited => Seen::Exited,
        ContainerState::ContainerCreated | ContainerState::ContainerUnknown => Seen::Unknown,
    }
}

/// What a relist saw of one pod: container and sandbox states by id.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Listed {
    /// Container id → state as listed.
    pub containers: BTreeMap<String, ContainerState>,
    /// Sandbox id → ready as listed.
    pub sandboxes: BTreeMap<String, bool>,
}

impl Listed {
    /// The listed states of a pod as `ListContainers`/`ListPodSandbox` gave them.
    pub fn of(pod: &RuntimePod) -> Self {
        Self {
            containers: pod
                .containers
                .iter()
                .map(|c| (c.id.clone(), c.state))
                .collect(),
            sandboxes: pod
                .sandboxes
                .iter()
                .map(|s| (s.id.clone(), s.ready))
                .collect(),
        }
    }
}

fn event(uid: &str, kind: PodLifecycleEventType, id: &str) -> PodLifecycleEvent {
    PodLifecycleEvent {
        uid: uid.to_string(),
        kind,
        id: id.to_string(),
    }
}

/// Events for one container between two states (Go's `generateEvents`).
fn container_events(uid: &str, id: &str, old: Seen, new: Seen) -> Vec<PodLifecycleEvent> {
    use PodLifecycleEventType::*;
    if old == new {
        return Vec::new();
    }
    match new {
        Seen::Running => vec![event(uid, ContainerStarted, id)],
        Seen::Exited => vec![event(uid, ContainerDied, id)],
        Seen::Unknown => vec![event(uid, ContainerChanged, id)],
        // Gone without having been seen exited: it died too.
        Seen::Gone if old == Seen::Exited => vec![event(uid, ContainerRemoved, id)],
        Seen::Gone => vec![
            event(uid, ContainerDied, id),
            event(uid, ContainerRemoved, id),
        ],
    }
}

/// Events for one pod between the previous relist (`None`: not seen) and this one.
pub(crate) fn pod_events(
    uid: &str,
    old: Option<&Listed>,
    new: Option<&Listed>,
) -> Vec<PodLifecycleEvent> {
    let empty = Listed::default();
    let old = old.unwrap_or(&empty);
    let new = new.unwrap_or(&empty);
    let mut out = Vec::new();
    let ids: BTreeSet<&String> = old.containers.keys().chain(new.containers.keys()).collect();
    for id in ids {
        let before = old.containers.get(id).map_or(Seen::Gone, |s| seen(*s));
        let after = new.containers.get(id).map_or(Seen::Gone, |s| seen(*s));
        out.extend(container_events(uid, id, before, after));
    }
    let ids: BTreeSet<&String> = old.sandboxes.keys().chain(new.sandboxes.keys()).collect();
    for id in ids {
        if old.sandboxes.get(id) != new.sandboxes.get(id) {
            out.push(event(uid, PodLifecycleEventType::SandboxChanged, id));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::PodLifecycleEventType::*;
    use super::*;

    fn listed(containers: &[(&str, ContainerState)], sandboxes: &[(&str, bool)]) -> Listed {
        Listed {
            containers: containers
                .iter()
                .map(|(i, s)| (i.to_string(), *s))
                .collect(),
            sandboxes: sandboxes.iter().map(|(i, r)| (i.to_string(), *r)).collect(),
        }
    }

    fn kinds(events: &[PodLifecycleEvent]) -> Vec<(PodLifecycleEventType, &str)> {
        events.iter().map(|e| (e.kind, e.id.as_str())).collect()
    }

    #[test]
    fn transitions_make_go_events() {
        use ContainerState::*;
        let a = listed(&[("c1", ContainerCreated)], &[("s1", true)]);
        let b = listed(
            &[("c1", ContainerRunning), ("c2", ContainerExited)],
            &[("s1", true)],
        );
        let c = listed(&[("c2", ContainerExited)], &[("s1", false)]);
        let d = listed(&[], &[]);
        assert_eq!(
            kinds(&pod_events("u", None, Some(&a))),
            [(ContainerChanged, "c1"), (SandboxChanged, "s1")]
        );
        assert_eq!(
            kinds(&pod_events("u", Some(&a), Some(&b))),
            [(ContainerStarted, "c1"), (ContainerDied, "c2")]
        );
        assert_eq!(
            kinds(&pod_events("u", Some(&b), Some(&c))),
            [
                (ContainerDied, "c1"),
                (ContainerRemoved, "c1"),
                (SandboxChanged, "s1")
            ]
        );
        assert_eq!(
            kinds(&pod_events("u", Some(&c), Some(&d))),
            [(ContainerRemoved, "c2"), (SandboxChanged, "s1")]
        );
        assert_eq!(
            kinds(&pod_events("u", Some(&c), None)),
            kinds(&pod_events("u", Some(&c), Some(&d)))
        );
        assert!(pod_events("u", Some(&b), Some(&b)).is_empty());
        // Unknown ↔ Created are the same to the PLEG.
        let e = listed(&[("c1", ContainerUnknown)], &[("s1", true)]);
        assert!(pod_events("u", Some(&a), Some(&e)).is_empty());
    }
}
