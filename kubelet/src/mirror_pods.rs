//! Mirror pods, as the Go kubelet's mirror client and its use in `syncPod` and housekeeping:
//! each static pod (from a file or URL) shows in the API as a mirror pod of the same name,
//! with the static pod's spec, `kubernetes.io/config.mirror: <config.hash>` and the Node as
//! controlling owner. A mirror that is being deleted or carries another hash (the static pod
//! changed) is deleted and created again; a mirror without a static pod (an orphan) is deleted.
//! [`MirrorPods::reconcile`] decides (pure), [`MirrorPods::apply`] carries it out.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, PostParams, Preconditions};

use crate::kube_client::ApiHandle;
use crate::types::{Pod, labels, pod_name, uid_of};

/// What must be done to one mirror pod.
#[derive(Clone, Debug, PartialEq)]
pub enum MirrorAction {
    /// Create this mirror pod.
    Create(Box<Pod>),
    /// Delete the mirror pod `namespace/name` if its UID is still `uid`.
    Delete {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its UID (the precondition).
        uid: String,
    },
}

/// Looks up the Node object's UID; `None` until the node is registered.
pub type NodeUid = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// The mirror pod logic of one node.
#[derive(Clone)]
pub struct MirrorPods {
    node_name: String,
    node_uid: NodeUid,
}

/// `namespace/name`.
fn full_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Whether `mirror` mirrors the current version of `static_pod` (Go's `IsMirrorPodOf`).
pub fn is_mirror_of(mirror: &Pod, static_pod: &Pod) -> bool {
    full_name(mirror) == full_name(static_pod)
        && annotation(mirror, labels::CONFIG_MIRROR).is_some()
        && annotation(mirror, labels::CONFIG_MIRROR) == annotation(static_pod, labels::CONFIG_HASH)
}

fn delete_of(mirror: &Pod) -> MirrorAction {
    MirrorAction::Delete {
        namespace: mirror
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: mirror.metadata.name.clone().unwrap_or_default(),
        uid: uid_of(mirror),
    }
}

impl MirrorPods {
    /// Mirror pods of node `node_name`, owned by the Node whose UID `node_uid` gives.
    pub fn new(node_name: &str, node_uid: NodeUid) -> Self {
        Self {
            node_name: node_name.into(),
            node_uid,
        }
    }

    /// The mirror pod of `static_pod` for the node with UID `node_uid` (Go's
    /// `CreateMirrorPod`): its spec and metadata, the mirror annotation set to its hash, the
    /// Node as controlling owner; the API server gives it its own UID.
    pub fn mirror_of(&self, static_pod: &Pod, node_uid: &str) -> Pod {
        let mut m = Pod {
            metadata: static_pod.metadata.clone(),
            spec: static_pod.spec.clone(),
            status: None,
        };
        let hash = annotation(static_pod, labels::CONFIG_HASH)
            .unwrap_or_default()
            .to_string();
        m.metadata.uid = None;
        m.metadata.resource_version = None;
        m.metadata.creation_timestamp = None;
        m.metadata.deletion_timestamp = None;
        m.metadata.managed_fields = None;
        m.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(labels::CONFIG_MIRROR.into(), hash);
        m.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.node_name.clone(),
            uid: node_uid.into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        if let Some(spec) = &mut m.spec {
            spec.node_name = Some(self.node_name.clone());
        }
        m
    }

    /// What to do so that `static_pods` (the static pods that should have a mirror) and the
    /// API's `mirrors` agree: deletions (stale, terminating, orphaned mirrors) first, then
    /// creations. Nothing is replaced or created before the node is registered (no Node UID).
    pub fn reconcile<P: std::borrow::Borrow<Pod>>(
        &self,
        static_pods: &[P],
        mirrors: &[Pod],
    ) -> Vec<MirrorAction> {
        let by_name: BTreeMap<String, &Pod> = mirrors.iter().map(|m| (full_name(m), m)).collect();
        let wanted: BTreeMap<String, &Pod> = static_pods
            .iter()
            .map(|p| (full_name(p.borrow()), p.borrow()))
            .collect();
        let node_uid = (self.node_uid)();
        let mut deletes = Vec::new();
        let mut creates = Vec::new();
        for (name, pod) in &wanted {
            let current = by_name.get(name);
            let stale = current
                .is_some_and(|m| m.metadata.deletion_timestamp.is_some() || !is_mirror_of(m, pod));
            // As Go's syncPod: nothing is replaced until the node is registered.
            let Some(uid) = &node_uid else { continue };
            if stale && let Some(m) = current {
                deletes.push(delete_of(m));
            }
            if current.is_none() || stale {
                creates.push(MirrorAction::Create(Box::new(self.mirror_of(pod, uid))));
            }
        }
        for (name, m) in &by_name {
            if !wanted.contains_key(name) && m.metadata.deletion_timestamp.is_none() {
                deletes.push(delete_of(m));
            }
        }
        deletes.extend(creates);
        deletes
    }

    /// Carries out `actions` through the API; failures are logged (the next round tries again).
    /// A mirror that already exists with the right hash counts as created; a mirror already
    /// gone as deleted.
    pub async fn apply(&self, api: &ApiHandle, actions: Vec<MirrorAction>) {
        let client = api.client();
        for action in actions {
            match action {
                MirrorAction::Delete {
                    namespace,
                    name,
                    uid,
                } => {
                    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), &namespace);
                    let params = DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(Preconditions {
                            uid: Some(uid),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    match pods.delete(&name, &params).await {
                        Ok(_) => {
                            tracing::info!(pod = %format!("{namespace}/{name}"), "mirror pod deleted")
                        }
                        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                        Err(e) => {
                            tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "deleting the mirror pod failed")
                        }
                    }
                }
                MirrorAction::Create(mirror) => {
                    let namespace = mirror.metadata.namespace.as_deref().unwrap_or("default");
                    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), namespace);
                    match pods.create(&PostParams::default(), &mirror).await {
                        Ok(_) => tracing::info!(pod = %pod_name(&mirror), "mirror pod created"),
                        Err(kube::Error::Api(s)) if s.code == 409 => {
                            // Ours already (created in an earlier round the watch has not
                            // shown yet), or a stale one the next round replaces.
                            let name = mirror.metadata.name.as_deref().unwrap_or_default();
                            let existing = pods.get_opt(name).await.ok().flatten();
                            let want = annotation(&mirror, labels::CONFIG_MIRROR);
                            if existing
                                .is_none_or(|e| annotation(&e, labels::CONFIG_MIRROR) != want)
                            {
                                tracing::warn!(pod = %pod_name(&mirror), "a different pod holds the mirror pod's name");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(pod = %pod_name(&mirror), error = %e, "creating the mirror pod failed")
                        }
                    }
                }
            }
        }
    }

    /// One round: reconcile, then apply.
    pub async fn sync<P: std::borrow::Borrow<Pod> + Sync>(
        &self,
        api: &ApiHandle,
        static_pods: &[P],
        mirrors: &[Pod],
    ) {
        let actions = self.reconcile(static_pods, mirrors);
        if !actions.is_empty() {
            self.apply(api, actions).await;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn static_pod(name: &str, hash: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("kube-system".into());
        p.metadata.uid = Some(hash.into());
        p.metadata.annotations = Some(
            [
                (labels::CONFIG_HASH.to_string(), hash.to_string()),
                (labels::CONFIG_SOURCE.to_string(), "file".to_string()),
            ]
            .into(),
        );
        p.spec = Some(PodSpec::default());
        p
    }

    fn mirror(name: &str, hash: &str, uid: &str) -> Pod {
        let mut p = static_pod(name, hash);
        p.metadata.uid = Some(uid.into());
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(labels::CONFIG_MIRROR.into(), hash.into());
        p
    }

    fn manager(uid: Option<&str>) -> MirrorPods {
        let uid = uid.map(String::from);
        MirrorPods::new("n1", Arc::new(move || uid.clone()))
    }

    /// `create name` / `delete name uid`.
    fn summary(actions: &[MirrorAction]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                MirrorAction::Create(p) => {
                    format!("create {}", p.metadata.name.as_deref().unwrap())
                }
                MirrorAction::Delete { name, uid, .. } => format!("delete {name} {uid}"),
            })
            .collect()
    }

    #[test]
    fn reconcile_decisions() {
        let mut terminating = mirror("sched", "h3", "m3");
        terminating.metadata.deletion_timestamp =
            Some(Time("2024-01-01T00:00:00Z".parse().unwrap()));
        let mut terminating_orphan = mirror("old", "h9", "m9");
        terminating_orphan.metadata.deletion_timestamp =
            terminating.metadata.deletion_timestamp.clone();
        type Case = (&'static str, Vec<Pod>, Vec<Pod>, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            (
                "missing",
                vec![static_pod("etcd", "h1")],
                vec![],
                vec!["create etcd"],
            ),
            (
                "up to date",
                vec![static_pod("etcd", "h1")],
                vec![mirror("etcd", "h1", "m1")],
                vec![],
            ),
            (
                "static pod changed",
                vec![static_pod("etcd", "h2")],
                vec![mirror("etcd", "h1", "m1")],
                vec!["delete etcd m1", "create etcd"],
            ),
            (
                "mirror being deleted",
                vec![static_pod("sched", "h3")],
                vec![terminating],
                vec!["delete sched m3", "create sched"],
            ),
            (
                "orphans",
                vec![],
                vec![mirror("gone", "h4", "m4"), terminating_orphan],
                vec!["delete gone m4"],
            ),
        ];
        for (what, statics, mirrors, want) in cases {
            let got = manager(Some("node-uid")).reconcile(&statics, &mirrors);
            assert_eq!(summary(&got), want, "{what}");
        }
        // Before the node is registered: orphans go, nothing is replaced or created.
        let got = manager(None).reconcile(
            &[static_pod("etcd", "h2")],
            &[mirror("etcd", "h1", "m1"), mirror("gone", "h4", "m4")],
        );
        assert_eq!(summary(&got), ["delete gone m4"]);
    }

    #[test]
    fn the_mirror_pod() {
        let m = manager(Some("node-uid")).mirror_of(&static_pod("etcd", "h1"), "node-uid");
        assert_eq!(m.metadata.uid, None);
        let ann = m.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[labels::CONFIG_MIRROR], "h1");
        assert_eq!(ann[labels::CONFIG_HASH], "h1");
        let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str()
            ),
            ("v1", "Node", "n1", "node-uid")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(m.spec.unwrap().node_name.as_deref(), Some("n1"));
        assert!(is_mirror_of(
            &mirror("etcd", "h1", "x"),
            &static_pod("etcd", "h1")
        ));
        assert!(!is_mirror_of(
            &mirror("etcd", "h1", "x"),
            &static_pod("etcd", "h2")
        ));
    }
}
