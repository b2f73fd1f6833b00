//! The invariants a node keeps whatever happens to it, checked continuously while the soak
//! runs; each violation is recorded once per check and object, with the first evidence.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use ferrolet_proto::cri::{ContainerState, PodSandboxState};
use serde_json::Value;

use super::Soak;
use super::workload::Source;

/// The checks, as the report names them.
pub const CHECKS: [&str; 8] = [
    "converges",
    "one-sandbox-per-pod",
    "restart-counts-never-decrease",
    "no-container-of-a-deleted-pod",
    "terminal-stays-terminal",
    "daemons-stay-up",
    "nothing-leaked",
    "clean-shutdown",
];

/// A check that failed, and its first evidence.
#[derive(Clone, Debug)]
pub struct Violation {
    /// Which check.
    pub check: &'static str,
    /// Which object.
    pub object: String,
    /// When, from the soak's start.
    pub at: Duration,
    /// What was seen.
    pub evidence: String,
}

/// How long a deleted pod's containers may run on after its deletion and after the last
/// fault healed (grace periods are 1 s; a kubelet restart re-lists within seconds).
const DELETION_BOUND: Duration = Duration::from_secs(90);

/// What the observer remembers between ticks.
#[derive(Default)]
pub struct Memory {
    /// (pod, uid, container) → the highest restart count seen.
    restarts: HashMap<(String, String, String), u64>,
    /// pod → the terminal phase it reached.
    terminal: HashMap<String, String>,
    /// How many times each check ran.
    pub runs: BTreeMap<&'static str, u64>,
}

impl Soak {
    /// Records a violation (once per check and object).
    pub fn violate(&self, check: &'static str, object: &str, evidence: String) {
        let mut v = self.violations.lock().unwrap_or_else(|p| p.into_inner());
        if v.iter().any(|x| x.check == check && x.object == object) {
            return;
        }
        self.log(&format!("VIOLATION {check} {object}: {evidence}"));
        v.push(Violation {
            check,
            object: object.to_string(),
            at: self.started.elapsed(),
            evidence,
        });
    }

    /// One round of the continuous checks.
    pub async fn observe(&self, memory: &mut Memory) {
        self.watch_daemons().await;
        memory
            .runs
            .entry("daemons-stay-up")
            .and_modify(|n| *n += 1)
            .or_insert(1);
        let (sandboxes, containers) = match self.cluster.node.node.try_api().await {
            Ok(api) => (
                api.list_pods(None).await.ok(),
                api.list_containers(None).await.ok(),
            ),
            Err(_) => (None, None),
        };
        let node_pods = self.cluster.node.try_pods().await.ok();
        let api_pods = self
            .cluster
            .api
            .list("pods", Some(super::workload::NAMESPACE))
            .await
            .ok();
        if let (Some(sandboxes), Some(containers)) = (&sandboxes, &containers) {
            self.cluster.node.node.track_ids(
                sandboxes
                    .iter()
                    .map(|s| s.id.clone())
                    .chain(containers.iter().map(|c| c.id.clone())),
            );
        }

        // Never two ready sandboxes for one pod.
        if let Some(sandboxes) = &sandboxes {
            *memory.runs.entry("one-sandbox-per-pod").or_default() += 1;
            let mut ready: HashMap<&str, Vec<&str>> = HashMap::new();
            for s in sandboxes
                .iter()
                .filter(|s| s.state == PodSandboxState::SandboxReady as i32)
            {
                let uid = s.labels.get(UID_LABEL).map_or("", String::as_str);
                ready.entry(uid).or_default().push(&s.id);
            }
            for (uid, ids) in ready.into_iter().filter(|(_, ids)| ids.len() > 1) {
                self.violate(
                    "one-sandbox-per-pod",
                    uid,
                    format!("{} ready sandboxes: {ids:?}", ids.len()),
                );
            }
        }

        // Statuses: restart counts and terminal phases, from where each pod's truth is.
        let mut statuses: Vec<&Value> = Vec::new();
        let static_names: Vec<String> = self
            .book()
            .pods
            .values()
            .filter(|p| p.source == Source::Static)
            .map(|p| p.name.clone())
            .collect();
        if let Some(list) = &node_pods {
            statuses.extend(list["items"].as_array().into_iter().flatten().filter(|p| {
                static_names
                    .iter()
                    .any(|n| p["metadata"]["name"] == n.as_str())
            }));
        }
        if let Some(list) = &api_pods {
            statuses.extend(
                list.iter().filter(|p| {
                    p["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_null()
                }),
            );
        }
        *memory
            .runs
            .entry("restart-counts-never-decrease")
            .or_default() += 1;
        *memory.runs.entry("terminal-stays-terminal").or_default() += 1;
        for pod in statuses {
            self.check_status(memory, pod);
            self.mark_reached(pod);
        }

        // No container of a deleted pod runs on; pods with nothing left are gone.
        if let (Some(sandboxes), Some(containers), Some(node_pods), Some(api_pods)) =
            (&sandboxes, &containers, &node_pods, &api_pods)
        {
            *memory
                .runs
                .entry("no-container-of-a-deleted-pod")
                .or_default() += 1;
            let quiet_since = self.quiet_since();
            let going = self.book().going();
            for pod in going {
                let name_of = |labels: &HashMap<String, String>| {
                    labels.get(NAME_LABEL).map_or("", String::as_str) == pod.name
                };
                let running: Vec<&str> = containers
                    .iter()
                    .filter(|c| name_of(&c.labels))
                    .filter(|c| c.state == ContainerState::ContainerRunning as i32)
                    .map(|c| c.id.as_str())
                    .collect();
                let deleted = pod.deleted.unwrap_or(pod.created);
                let bound = deleted.max(quiet_since) + DELETION_BOUND;
                if !running.is_empty() && Instant::now() > bound {
                    self.violate(
                        "no-container-of-a-deleted-pod",
                        &pod.name,
                        format!(
                            "running {:?} {:?} after its deletion",
                            running,
                            deleted.elapsed()
                        ),
                    );
                }
                let listed = |items: &[Value]| {
                    items
                        .iter()
                        .any(|p| p["metadata"]["name"] == pod.name.as_str())
                };
                let in_node = node_pods["items"]
                    .as_array()
                    .is_some_and(|items| listed(items));
                let in_api = pod.source == Source::Api && listed(api_pods);
                let in_cri = sandboxes.iter().any(|s| name_of(&s.labels))
                    || containers.iter().any(|c| name_of(&c.labels));
                if !in_node && !in_api && !in_cri {
                    self.mark_gone(&pod.name);
                }
            }
        }
    }

    fn check_status(&self, memory: &mut Memory, pod: &Value) {
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let phase = pod["status"]["phase"].as_str().unwrap_or("");
        for key in ["initContainerStatuses", "containerStatuses"] {
            for c in pod["status"][key].as_array().into_iter().flatten() {
                let container = c["name"].as_str().unwrap_or("").to_string();
                let count = c["restartCount"].as_u64().unwrap_or(0);
                let max = memory
                    .restarts
                    .entry((name.clone(), uid.clone(), container.clone()))
                    .or_insert(count);
                if count < *max {
                    self.violate(
                        "restart-counts-never-decrease",
                        &format!("{name}/{container}"),
                        format!("restartCount {count} after {max}"),
                    );
                }
                *max = (*max).max(count);
            }
        }
        match (memory.terminal.get(&name), phase) {
            (None, "Succeeded" | "Failed") => {
                memory.terminal.insert(name, phase.to_string());
            }
            (Some(was), "Running" | "Pending") => {
                let was = was.clone();
                self.violate(
                    "terminal-stays-terminal",
                    &name,
                    format!("phase {phase} after {was}"),
                );
            }
            _ => {}
        }
    }

    /// A daemon that exited by itself (no fault of ours killed it) is a violation; its
    /// supervisor starts it again.
    async fn watch_daemons(&self) {
        if self.fault_active() {
            return;
        }
        if let Some(status) = self.cluster.node.kubelet_exited() {
            let tail = crate::pods::log_tail(&self.cluster.node.kubelet_log(), 20);
            self.violate(
                "daemons-stay-up",
                "ferrolet",
                format!("exited with {status}:\n{tail}"),
            );
            self.restart_kubelet().await;
        }
        if let Some(status) = self.cluster.node.node.cri.exited() {
            let tail = crate::pods::log_tail(&self.cluster.node.node.cri.log_text(), 20);
            self.violate(
                "daemons-stay-up",
                "ferrolet-cri",
                format!("exited with {status}:\n{tail}"),
            );
            self.restart_runtime().await;
        }
    }
}

/// The CRI label with a pod's UID.
const UID_LABEL: &str = "io.kubernetes.pod.uid";
/// The CRI label with a pod's name.
const NAME_LABEL: &str = "io.kubernetes.pod.name";
