//! Whether a pod may run on this node by its labels, fields and taints: `nodeSelector` and
//! required node affinity (Go's `GetRequiredNodeAffinity(pod).Match(node)`), host ports
//! (`nodeports.Fits`) and `NoExecute` taints (`FindMatchingUntoleratedTaint`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration,
};

use crate::types::Pod;

/// Whether the pod's `nodeSelector` and required node affinity match a node with `labels`
/// named `node_name`.
pub fn affinity_matches(pod: &Pod, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    if !selector_ok {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    required.is_none_or(|sel| selector_matches(sel, node_name, labels))
}

/// Whether a required node selector (a pod's affinity, a PersistentVolume's node affinity)
/// matches a node with `labels` named `node_name`: its terms are ORed, and a term without any
/// requirement matches nothing.
pub fn selector_matches(
    selector: &NodeSelector,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector
        .node_selector_terms
        .iter()
        .any(|t| term_matches(t, node_name, labels))
}

fn term_matches(t: &NodeSelectorTerm, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let name_field: BTreeMap<String, String> =
        [("metadata.name".to_string(), node_name.to_string())].into();
    exprs.iter().all(|r| requirement_matches(r, labels))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, &name_field))
}

fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let value = labels.get(&r.key);
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), [bound]) = (value, values) else {
                return false;
            };
            let (Ok(have), Ok(bound)) = (have.parse::<i64>(), bound.parse::<i64>()) else {
                return false;
            };
            if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// `(ip, protocol, port)` of the host ports the pod's app containers ask for, defaults
/// filled in (`0.0.0.0`, `TCP`).
fn host_ports(pod: &Pod) -> Vec<(String, String, i32)> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|hp| *hp > 0)?;
            let ip = p.host_ip.clone().filter(|ip| !ip.is_empty());
            let proto = p.protocol.clone().filter(|pr| !pr.is_empty());
            Some((
                ip.unwrap_or_else(|| "0.0.0.0".into()),
                proto.unwrap_or_else(|| "TCP".into()),
                port,
            ))
        })
        .collect()
}

/// Whether none of the pod's host ports is taken by the admitted pods: `0.0.0.0` conflicts
/// with any address, any address with `0.0.0.0`.
pub fn ports_fit(pod: &Pod, admitted: &[&Pod]) -> bool {
    let used: BTreeSet<(String, String, i32)> =
        admitted.iter().flat_map(|p| host_ports(p)).collect();
    host_ports(pod).iter().all(|(ip, proto, port)| {
        !used.iter().any(|(uip, uproto, uport)| {
            uproto == proto && uport == port && (ip == "0.0.0.0" || uip == "0.0.0.0" || uip == ip)
        })
    })
}

/// Whether `t` tolerates `taint` (Go's `Toleration.ToleratesTaint`).
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or_default() {
        "Exists" => true,
        "" | "Equal" => {
            t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// Whether some `NoExecute` taint of the node is not tolerated by the pod.
pub fn untolerated_no_execute(pod: &Pod, taints: &[Taint]) -> bool {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}
