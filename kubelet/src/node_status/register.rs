//! Registration: the Node object this kubelet creates (Go's `initialNode`) and, when it already
//! exists, what to bring back to our values (Go's `tryRegisterWithAPIServer` reconciling the
//! default labels and the controller-managed attach/detach annotation).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};

use super::NodeStatusSettings;
use super::setters::go_arch;
use crate::kube_client::ApiHandle;

/// The annotation telling the attach/detach controller it manages this node's volumes.
pub const CONTROLLER_MANAGED_ATTACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";

/// The labels the kubelet owns, reset on an existing Node (Go's `updateDefaultLabels`).
pub const DEFAULT_LABELS: [&str; 12] = [
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// Registration retries: 100 ms doubling, at most 7 s (Go's `registerWithAPIServer`).
pub fn register_backoff(step: Duration) -> Duration {
    (step * 2).min(Duration::from_secs(7))
}

/// The Node to create: name, default labels overlaid by `--node-labels`, the attach/detach
/// annotation, `registerWithTaints`; the status is set separately.
pub fn initial_node(settings: &NodeStatusSettings) -> Node {
    let arch = go_arch();
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", settings.hostname.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", arch),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in &settings.node_labels {
        labels.insert(k.clone(), v.clone());
    }
    Node {
        metadata: ObjectMeta {
            name: Some(settings.node_name.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                CONTROLLER_MANAGED_ATTACH.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!settings.register_with_taints.is_empty())
                .then(|| settings.register_with_taints.clone()),
            ..Default::default()
        }),
        status: None,
    }
}

/// The merge patch bringing `existing`'s default labels and attach/detach annotation to
/// `initial`'s values; `None` when they already agree.
pub fn reconcile_patch(initial: &Node, existing: &Node) -> Option<serde_json::Value> {
    let empty = BTreeMap::new();
    let want = initial.metadata.labels.as_ref().unwrap_or(&empty);
    let have = existing.metadata.labels.as_ref().unwrap_or(&empty);
    let mut labels = serde_json::Map::new();
    for key in DEFAULT_LABELS {
        let Some(value) = want.get(key) else { continue };
        if have.get(key) != Some(value) {
            // Go deletes a label whose value would be empty.
            let v = if value.is_empty() {
                serde_json::Value::Null
            } else {
                value.clone().into()
            };
            labels.insert(key.into(), v);
        }
    }
    let want_cma = initial
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONTROLLER_MANAGED_ATTACH));
    let have_cma = existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONTROLLER_MANAGED_ATTACH));
    let mut annotations = serde_json::Map::new();
    if want_cma.map(String::as_str).unwrap_or("") != have_cma.map(String::as_str).unwrap_or("") {
        let v = want_cma.map_or(serde_json::Value::Null, |v| v.clone().into());
        annotations.insert(CONTROLLER_MANAGED_ATTACH.into(), v);
    }
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut meta = serde_json::Map::new();
    if !labels.is_empty() {
        meta.insert("labels".into(), labels.into());
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), annotations.into());
    }
    Some(serde_json::json!({ "metadata": meta }))
}

/// One registration attempt (Go's `tryRegisterWithAPIServer`): create, or on AlreadyExists get
/// and reconcile. Returns the Node as the API server has it.
pub async fn try_register(api: &ApiHandle, node: &Node) -> Result<Node, kube::Error> {
    let nodes: Api<Node> = Api::all(api.client());
    match nodes.create(&PostParams::default(), node).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let existing = nodes.get(name).await?;
            tracing::info!(node = name, "node was previously registered");
            match reconcile_patch(node, &existing) {
                Some(patch) => {
                    nodes
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                }
                None => Ok(existing),
            }
        }
        Err(e) => Err(e),
    }
}

/// Registers until it succeeds (Go's `registerWithAPIServer`), sleeping 100 ms doubling to 7 s
/// before each attempt.
pub async fn register(api: &ApiHandle, node: &Node) -> Node {
    let mut step = Duration::from_millis(100);
    loop {
        tokio::time::sleep(step).await;
        step = register_backoff(step);
        tracing::info!(node = api.node_name(), "attempting to register node");
        match try_register(api, node).await {
            Ok(n) => {
                tracing::info!(node = api.node_name(), "successfully registered node");
                return n;
            }
            Err(e) => {
                let error = crate::certificate::api_error_text(&e);
                tracing::error!(node = api.node_name(), %error, "unable to register node with API server")
            }
        }
    }
}
