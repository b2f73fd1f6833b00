//! Pod admission, as the Go kubelet's predicate admit handler (`canAdmitPod` →
//! `generalFilter`): does the pod fit this node, given the pods already admitted? Pure: the
//! caller passes the node as it knows it ([`NodeInfo`]) and the admitted, non-terminal pods.
//!
//! Checks in Go's order, the first failure deciding the reason: resources ([`resources`]:
//! `OutOfpods`, `OutOfcpu`, `OutOfmemory`, `OutOfephemeral-storage`, `OutOf<scalar>`), then
//! `NodeAffinity`, `NodeName`, `NodePorts` and, except for static pods, untolerated
//! `NoExecute` taints (`TaintToleration`) ([`selection`]); then the OS checks. Critical pods
//! (static, mirror, or priority ≥ 2000000000) are admitted despite resource shortfalls: the Go
//! kubelet preempts other pods to make room for them (not done here: see [`Admitted`]).

pub mod resources;
pub mod selection;

use crate::podspec::resources::{is_critical_pod, is_static_pod};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::types::Pod;
use resources::Insufficient;

/// The node label and pod label of the operating system.
const OS_LABEL: &str = "kubernetes.io/os";

/// What admission knows of the node.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    /// The node's name.
    pub name: String,
    /// Allocatable resources (`pods` included), as the Node's `status.allocatable`.
    pub allocatable: BTreeMap<String, Quantity>,
    /// The node's labels.
    pub labels: BTreeMap<String, String>,
    /// The node's taints.
    pub taints: Vec<Taint>,
}

impl NodeInfo {
    /// From the Node object as registered.
    pub fn from_node(node: &Node) -> Self {
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            allocatable: node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.clone())
                .unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default(),
        }
    }
}

/// Why a pod was not admitted: the pod's status `reason` and `message` (phase Failed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Rejection {
    /// `OutOfcpu`, `NodeAffinity`, `TaintToleration`, ... as the Go kubelet's.
    pub reason: String,
    /// As the Go kubelet words it.
    pub message: String,
}

/// Go's rejection when a resource manager (the CPU manager here) cannot allocate what a pod
/// needs: reason `UnexpectedAdmissionError`, the error in Go's words around it.
pub fn unexpected_admission_error(error: &dyn std::fmt::Display) -> Rejection {
    Rejection {
        reason: "UnexpectedAdmissionError".into(),
        message: format!("Allocate failed due to {error}, which is unexpected"),
    }
}

/// An admitted pod, with the resources it lacked if it is critical (the Go kubelet would evict
/// pods to free them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admitted {
    /// Non-empty only for a critical pod admitted despite a shortfall.
    pub shortfall: Vec<Insufficient>,
}

/// A failed check, as Go's `PredicateFailureReason`s.
enum Failure {
    Resource(Insufficient),
    Predicate(&'static str),
}

impl Failure {
    fn rejection(&self) -> Rejection {
        match self {
            Failure::Resource(r) => Rejection {
                reason: format!("OutOf{}", r.resource),
                message: format!(
                    "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}",
                    r.resource, r.requested, r.used, r.capacity
                ),
            },
            Failure::Predicate(name) => Rejection {
                reason: (*name).to_string(),
                message: format!("Predicate {name} failed"),
            },
        }
    }
}

fn terminal(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// Admits `pod` onto `node`, where `admitted` are the pods already admitted (terminal ones
/// are left out here too); see the module doc.
pub fn admit<P: std::borrow::Borrow<Pod>>(
    pod: &Pod,
    node: &NodeInfo,
    admitted: &[P],
) -> Result<Admitted, Rejection> {
    let others: Vec<&Pod> = admitted
        .iter()
        .map(P::borrow)
        .filter(|p| !terminal(p))
        .collect();
    let alloc = resources::allocatable(&node.allocatable);
    let mut failures: Vec<Failure> = resources::fits(pod, &alloc, &others)
        .into_iter()
        .map(Failure::Resource)
        .collect();
    if !selection::affinity_matches(pod, &node.name, &node.labels) {
        failures.push(Failure::Predicate("NodeAffinity"));
    }
    let wanted_node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    if !wanted_node.is_empty() && wanted_node != node.name {
        failures.push(Failure::Predicate("NodeName"));
    }
    if !selection::ports_fit(pod, &others) {
        failures.push(Failure::Predicate("NodePorts"));
    }
    if !is_static_pod(pod) && selection::untolerated_no_execute(pod, &node.taints) {
        failures.push(Failure::Predicate("TaintToleration"));
    }

    let mut shortfall = Vec::new();
    if is_critical_pod(pod) {
        // Go's CriticalPodAdmissionHandler: resource failures are made up for by preemption.
        failures.retain(|f| match f {
            Failure::Resource(r) => {
                shortfall.push(r.clone());
                false
            }
            Failure::Predicate(_) => true,
        });
    }
    if let Some(first) = failures.first() {
        return Err(first.rejection());
    }

    let pod_os = pod.metadata.labels.as_ref().and_then(|l| l.get(OS_LABEL));
    let node_os = node
        .labels
        .get(OS_LABEL)
        .filter(|os| *os == std::env::consts::OS)
        .map_or(std::env::consts::OS, String::as_str);
    if pod_os.is_some_and(|os| os != node_os) {
        return Err(Rejection {
            reason: "PodOSSelectorNodeLabelDoesNotMatch".into(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .into(),
        });
    }
    let spec_os = pod
        .spec
        .as_ref()
        .and_then(|s| s.os.as_ref())
        .map(|o| o.name.as_str());
    if spec_os.is_some_and(|os| os != std::env::consts::OS) {
        return Err(Rejection {
            reason: "PodOSNotSupported".into(),
            message: "Failed to admit pod as the OS field doesn't match node OS".into(),
        });
    }
    Ok(Admitted { shortfall })
}

#[cfg(test)]
mod tests;
