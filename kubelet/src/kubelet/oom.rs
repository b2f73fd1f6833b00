//! The OOM watcher wired to the kubelet, as Go's `oomWatcher.Start` at kubelet start: every
//! kernel OOM kill read from `/dev/kmsg` is counted (`kubelet_oom_events_total{scope}`); one
//! whose victim ran in a container of this node's pods marks that instance, so that the
//! runtime's `Error` with 137 reads `OOMKilled` (Go relies on the runtime alone, which may
//! miss a kill made for the pod's limit or the machine's), and the pod is synced for its
//! status; one outside every container here while the machine ran out is Go's `SystemOOM`
//! event on the Node.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::Kubelet;
use crate::events::{EventRecorder, EventType, node_ref, reason};
use crate::status::killed::OomNotes;
use crate::types::RuntimePod;
use ferrolet_cgroups::oom::{self, OomKill, OomScope};

/// Where the kernel's log is read.
const KMSG: &str = "/dev/kmsg";

/// What one OOM kill means to this node.
#[derive(Debug, PartialEq, Eq)]
struct Verdict {
    /// The limit reached, for the metric.
    scope: OomScope,
    /// The victim's pod UID and container id, when it ran in one of this node's containers.
    victim: Option<(String, String)>,
    /// Whether it is Go's `SystemOOM`: the machine ran out (or the victim ran in the root
    /// cgroup) and the victim was in none of this node's containers.
    system_oom: bool,
}

/// The pod UID and container id of the kill's victim when it ran in a container of this
/// node: the cgroupfs layout names both (`…/pod<uid>/<container id>`) for a pod the kubelet
/// `knows`; else (no pod cgroups with `cgroupsPerQOS: false`, or a pod only the runtime
/// still has) the victim cgroup's name is looked up among the runtime's containers.
fn victim_of(
    kill: &OomKill,
    knows: impl Fn(&str) -> bool,
    runtime: impl FnOnce() -> Vec<RuntimePod>,
) -> Option<(String, String)> {
    if let Some((id, uid)) = kill.container()
        && knows(&uid)
    {
        return Some((uid, id));
    }
    let name = kill.victim_cgroup_name()?;
    runtime()
        .into_iter()
        .find(|p| p.containers.iter().any(|c| c.id == name))
        .map(|p| (p.uid, name.to_string()))
}

fn verdict(kill: &OomKill, victim: Option<(String, String)>) -> Verdict {
    let scope = kill.scope(victim.is_some());
    let system_oom = victim.is_none() && (kill.is_global() || kill.in_root_cgroup());
    Verdict {
        scope,
        victim,
        system_oom,
    }
}

impl Kubelet {
    /// Starts the OOM watcher when `/dev/kmsg` can be read (otherwise says so once and goes
    /// on without it); returns the pods whose status a kill changed, for a sync.
    pub(super) fn spawn_oom_watcher(self: &Arc<Self>) -> mpsc::Receiver<String> {
        let (tx, rx) = mpsc::channel(64);
        let kubelet = self.clone();
        tokio::spawn(async move {
            let mut kills = match oom::watch(Path::new(KMSG)).await {
                Ok(kills) => kills,
                Err(e) => {
                    tracing::warn!(path = KMSG, error = %e, "OOM watcher not started: OOM kills are neither counted nor attributed");
                    return;
                }
            };
            let scopes: Vec<&str> = OomScope::ALL.iter().map(|s| s.as_str()).collect();
            crate::metrics::oom_events_watched(&scopes);
            tracing::info!(path = KMSG, "OOM watcher started");
            while let Some(kill) = kills.recv().await {
                if let Some(uid) = kubelet.on_oom_kill(&kill)
                    && tx.send(uid).await.is_err()
                {
                    return;
                }
            }
            tracing::error!("Unexpectedly stopped receiving OOM notifications");
        });
        rx
    }

    /// Counts, attributes and reports one kill; the UID of a pod whose status it changes.
    fn on_oom_kill(&self, kill: &OomKill) -> Option<String> {
        let seams = OomSeams {
            node_name: &self.node.node_name,
            events: self.events.as_ref(),
            notes: &self.oom_killed,
            knows: &|uid| self.knows(uid),
        };
        handle_kill(kill, &seams, || self.pleg.all())
    }
}

/// What handling a kill touches besides the runtime's pods.
struct OomSeams<'a> {
    node_name: &'a str,
    events: &'a dyn EventRecorder,
    notes: &'a OomNotes,
    /// Whether the kubelet knows a pod UID.
    knows: &'a dyn Fn(&str) -> bool,
}

fn handle_kill(
    kill: &OomKill,
    seams: &OomSeams<'_>,
    runtime: impl FnOnce() -> Vec<RuntimePod>,
) -> Option<String> {
    let victim = victim_of(kill, seams.knows, runtime);
    let verdict = verdict(kill, victim);
    crate::metrics::oom_event(verdict.scope.as_str());
    if verdict.system_oom {
        tracing::info!(process = %kill.process, pid = kill.pid, task_memcg = %kill.task_memcg, "system OOM");
        seams.events.record(
            &node_ref(seams.node_name),
            EventType::Warning,
            reason::SYSTEM_OOM,
            &kill.system_oom_message(),
        );
    }
    let Some((uid, id)) = verdict.victim else {
        tracing::debug!(process = %kill.process, pid = kill.pid, oom_memcg = %kill.oom_memcg, task_memcg = %kill.task_memcg, "OOM kill outside this node's containers");
        return None;
    };
    tracing::info!(
        uid,
        container = id,
        process = %kill.process,
        pid = kill.pid,
        oom_memcg = %kill.oom_memcg,
        scope = verdict.scope.as_str(),
        "OOM kill in a container"
    );
    // Only pods it knows: their notes go with them (KillPod, housekeeping).
    if !(seams.knows)(&uid) {
        return None;
    }
    seams.notes.record(&uid, &id, ());
    Some(uid)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::types::RuntimeContainer;

    fn kill(oom_memcg: &str, task_memcg: &str) -> OomKill {
        OomKill {
            pid: 4321,
            process: "sh".into(),
            oom_memcg: oom_memcg.into(),
            task_memcg: task_memcg.into(),
            constraint: if oom_memcg.is_empty() {
                "CONSTRAINT_NONE".into()
            } else {
                "CONSTRAINT_MEMCG".into()
            },
        }
    }

    fn runtime() -> Vec<RuntimePod> {
        vec![RuntimePod {
            uid: "u1".into(),
            containers: vec![RuntimeContainer {
                id: "c1".into(),
                ..Default::default()
            }],
            ..Default::default()
        }]
    }

    fn judge(k: &OomKill) -> Verdict {
        verdict(k, victim_of(k, |uid| uid == "u1", runtime))
    }

    #[test]
    fn a_pod_level_kill_marks_the_victim_s_container() {
        let pod = "/r/kubepods/burstable/podu1";
        let v = judge(&kill(pod, &format!("{pod}/c1")));
        assert_eq!(v.scope, OomScope::Pod);
        assert_eq!(v.victim, Some(("u1".into(), "c1".into())));
        assert!(!v.system_oom);
    }

    #[test]
    fn a_container_level_kill_and_one_without_pod_cgroups() {
        let c = "/r/kubepods/podu1/c1";
        let v = judge(&kill(c, c));
        assert_eq!((v.scope, v.victim.is_some()), (OomScope::Container, true));
        // cgroupsPerQOS off: found by container id among the runtime's containers.
        let v = judge(&kill("/r/c1", "/r/c1"));
        assert_eq!(v.victim, Some(("u1".into(), "c1".into())));
        assert_eq!(v.scope, OomScope::Container);
    }

    #[test]
    fn kills_elsewhere_are_other_and_machine_wide_ones_system() {
        // Another node's pod (unknown UID, container not in this runtime).
        let other = "/other/kubepods/podu9/c9";
        let v = judge(&kill(other, other));
        assert_eq!(
            v,
            Verdict {
                scope: OomScope::Other,
                victim: None,
                system_oom: false
            }
        );
        // A service at its own limit.
        let v = judge(&kill("/system.slice/x.service", "/system.slice/x.service"));
        assert_eq!((v.scope, v.system_oom), (OomScope::Other, false));
        // The machine ran out: a victim outside this node's containers is a SystemOOM…
        for victim in ["/", "/system.slice/x.service", other] {
            let v = judge(&kill("", victim));
            assert_eq!(
                (v.scope, v.system_oom),
                (OomScope::System, true),
                "{victim}"
            );
        }
        // …one in a container here is that container's OOM kill instead.
        let v = judge(&kill("", "/r/kubepods/podu1/c1"));
        assert_eq!(v.scope, OomScope::System);
        assert!(!v.system_oom);
        assert_eq!(v.victim, Some(("u1".into(), "c1".into())));
    }

    #[test]
    fn handling_marks_known_pods_and_reports_system_ooms_on_the_node() {
        let events = crate::events::MemoryRecorder::default();
        let notes = OomNotes::default();
        let seams = OomSeams {
            node_name: "node-a",
            events: &events,
            notes: &notes,
            knows: &|uid| uid == "u1",
        };
        let m = crate::metrics::global();
        let before = |scope: &str| m.oom_events.get(&[scope]);
        let (pods, systems) = (before("pod"), before("system"));

        let pod = "/r/kubepods/burstable/podu1";
        let got = handle_kill(&kill(pod, &format!("{pod}/c1")), &seams, runtime);
        assert_eq!(got.as_deref(), Some("u1"));
        assert_eq!(
            notes.ids_of_pod("u1").into_iter().collect::<Vec<_>>(),
            ["c1"]
        );
        // A container the runtime still has, of a pod the kubelet no longer knows: counted,
        // not noted.
        let gone = || {
            let mut pods = runtime();
            pods[0].uid = "u2".into();
            pods
        };
        assert_eq!(handle_kill(&kill("/r/c1", "/r/c1"), &seams, gone), None);
        assert!(notes.ids_of_pod("u2").is_empty());
        assert!(events.events.lock().unwrap().is_empty());

        let hog = OomKill {
            process: "hog".into(),
            pid: 77,
            ..kill("", "/")
        };
        assert_eq!(handle_kill(&hog, &seams, runtime), None);
        assert_eq!(
            events.events.lock().unwrap().as_slice(),
            [(
                "node-a".to_string(),
                String::new(),
                EventType::Warning,
                "SystemOOM".to_string(),
                "System OOM encountered, victim process: hog, pid: 77".to_string()
            )]
        );
        // Other tests count too: at least these.
        assert!(m.oom_events.get(&["pod"]) >= pods + 1.0);
        assert!(m.oom_events.get(&["system"]) >= systems + 1.0);
    }
}
