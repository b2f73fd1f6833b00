//! The pod's QoS class (Guaranteed, Burstable, BestEffort), computed as the Go kubelet's
//! `ComputePodQOS` does from the containers' cpu and memory requests and limits.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::manifest::quantity::{ParsedQuantity, parse_quantity};
use crate::types::Pod;

/// A pod's quality-of-service class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QosClass {
    /// Every container has equal cpu and memory requests and limits.
    Guaranteed,
    /// Some requests or limits, not Guaranteed.
    Burstable,
    /// No cpu or memory requests or limits at all.
    BestEffort,
}

impl QosClass {
    /// The API's spelling (`status.qosClass`).
    #[cfg(test)]
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }

    /// From the API's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Guaranteed" => Some(QosClass::Guaranteed),
            "Burstable" => Some(QosClass::Burstable),
            "BestEffort" => Some(QosClass::BestEffort),
            _ => None,
        }
    }
}

/// The resources QoS looks at.
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// The pod's QoS class: `status.qosClass` when the pod carries one (Go's `GetPodQOS`), else
/// computed from the app and init containers.
pub fn qos_class(pod: &Pod) -> QosClass {
    if let Some(q) = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .and_then(QosClass::parse)
    {
        return q;
    }
    let Some(spec) = pod.spec.as_ref() else {
        return QosClass::BestEffort;
    };
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    compute(containers)
}

/// Go's `ComputePodQOS` over these containers.
fn compute<'a>(containers: impl Iterator<Item = &'a Container>) -> QosClass {
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    for c in containers {
        for name in QOS_RESOURCES {
            if let Some(q) = effective_request(c, name).filter(|q| q.nanos() > 0) {
                *requests.entry(name).or_default() += q.nanos();
            }
        }
        let mut limits_found = 0;
        for name in QOS_RESOURCES {
            if let Some(q) = limit(c, name).filter(|q| q.nanos() > 0) {
                limits_found += 1;
                *limits.entry(name).or_default() += q.nanos();
            }
        }
        if limits_found != QOS_RESOURCES.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed
        && requests.iter().all(|(name, r)| limits.get(name) == Some(r))
        && requests.len() == limits.len()
    {
        return QosClass::Guaranteed;
    }
    QosClass::Burstable
}

fn parsed(map: Option<&BTreeMap<String, Quantity>>, name: &str) -> Option<ParsedQuantity> {
    // An unparsable quantity is validation's to report; here it counts as absent.
    map.and_then(|m| m.get(name))
        .and_then(|q| parse_quantity(&q.0).ok())
}

/// A container's limit for a resource.
pub(crate) fn limit(c: &Container, name: &str) -> Option<ParsedQuantity> {
    parsed(c.resources.as_ref().and_then(|r| r.limits.as_ref()), name)
}

/// A container's request for a resource, defaulting to its limit as the API server's
/// defaulting does (so an undefaulted manifest behaves like a defaulted one).
pub(crate) fn effective_request(c: &Container, name: &str) -> Option<ParsedQuantity> {
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    match requests.and_then(|m| m.get(name)) {
        Some(q) => parse_quantity(&q.0).ok(),
        None => limit(c, name),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::podspec::testutil::pod;

    fn pod_with(resources: &[&str]) -> Pod {
        let containers: Vec<String> = resources
            .iter()
            .enumerate()
            .map(|(i, r)| format!("  - name: c{i}\n    image: busybox\n    resources: {r}\n"))
            .collect();
        pod(&format!(
            "metadata: {{name: p, uid: u}}\nspec:\n  containers:\n{}",
            containers.concat()
        ))
    }

    #[test]
    fn classes_follow_go() {
        let table: &[(&[&str], QosClass)] = &[
            (&["{}"], QosClass::BestEffort),
            (&["{}", "{}"], QosClass::BestEffort),
            (
                &["{limits: {cpu: 100m, memory: 64Mi}}"],
                QosClass::Guaranteed,
            ),
            (
                &["{requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 100m, memory: 64Mi}}"],
                QosClass::Guaranteed,
            ),
            // Equal after parsing, spelled differently.
            (
                &["{requests: {cpu: '0.1', memory: 1Gi}, limits: {cpu: 100m, memory: 1024Mi}}"],
                QosClass::Guaranteed,
            ),
            (
                &["{requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 200m, memory: 64Mi}}"],
                QosClass::Burstable,
            ),
            (&["{requests: {cpu: 100m}}"], QosClass::Burstable),
            (&["{limits: {memory: 64Mi}}"], QosClass::Burstable),
            (
                &["{limits: {cpu: 100m, memory: 64Mi}}", "{}"],
                QosClass::Burstable,
            ),
            (
                &[
                    "{limits: {cpu: 100m, memory: 64Mi}}",
                    "{limits: {cpu: 1, memory: 1Gi}}",
                ],
                QosClass::Guaranteed,
            ),
            // Zero requests do not count; other resources are ignored.
            (&["{requests: {cpu: '0'}}"], QosClass::BestEffort),
            (
                &["{requests: {ephemeral-storage: 1Gi}}"],
                QosClass::BestEffort,
            ),
        ];
        for (resources, want) in table {
            assert_eq!(qos_class(&pod_with(resources)), *want, "{resources:?}");
        }
    }

    #[test]
    fn init_containers_count() {
        let p = pod("metadata: {name: p, uid: u}
spec:
  initContainers: [{name: i, image: x}]
  containers: [{name: c, image: x, resources: {limits: {cpu: 1, memory: 1Gi}}}]");
        assert_eq!(qos_class(&p), QosClass::Burstable);
    }

    #[test]
    fn status_wins() {
        let p = pod("metadata: {name: p, uid: u}
spec: {containers: [{name: c, image: x}]}
status: {qosClass: Guaranteed}");
        assert_eq!(qos_class(&p), QosClass::Guaranteed);
        assert_eq!(QosClass::Burstable.as_str(), "Burstable");
    }
}
