//! The merge of all sources into one stream, as the Go kubelet's PodConfig does: each
//! source's pods are kept apart, keyed by UID; a source's full set (Reconcile) becomes Add for
//! new pods, Update for changed ones, Remove for gone ones and Reconcile for the unchanged;
//! incremental Add/Update/Remove from a source apply as such.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::types::{Pod, PodOp, PodUpdate, labels};

/// Annotations the kubelet itself sets; they never make a pod "changed".
const LOCAL_ANNOTATIONS: &[&str] = &[
    labels::CONFIG_SOURCE,
    labels::CONFIG_MIRROR,
    labels::CONFIG_SEEN,
];

/// Merges per-source updates into one stream of Add/Update/Remove/Reconcile.
#[derive(Debug, Default)]
pub struct PodConfig {
    /// source → UID → pod (the copy the kubelet's state shares).
    sources: BTreeMap<String, BTreeMap<String, Arc<Pod>>>,
    /// Sources that have sent a full set.
    seen: BTreeSet<String>,
}

/// What one update did, gathered per kind.
#[derive(Default)]
struct Changes {
    add: Vec<Arc<Pod>>,
    update: Vec<Arc<Pod>>,
    remove: Vec<Arc<Pod>>,
    reconcile: Vec<Arc<Pod>>,
}

impl PodConfig {
    /// No pods, no sources seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one source's update; returns the changes in the Go kubelet's order (Remove,
    /// Add, Update, Reconcile), empty kinds left out. Pods of other sources are untouched.
    pub fn apply(&mut self, update: PodUpdate) -> Vec<PodUpdate> {
        let source = update.source.clone();
        let pods = usable(&source, update.pods);
        let current = self.sources.entry(source.clone()).or_default();
        let mut changes = Changes::default();
        match update.op {
            PodOp::Reconcile => {
                self.seen.insert(source.clone());
                let mut old = std::mem::take(current);
                for pod in pods {
                    let uid = uid_of(&pod);
                    let kept = match old.remove(&uid) {
                        Some(existing) => merge(existing, pod, &mut changes, true),
                        None => added(pod, &mut changes),
                    };
                    current.insert(uid, kept);
                }
                changes.remove.extend(old.into_values());
            }
            PodOp::Add | PodOp::Update => {
                for pod in pods {
                    let uid = uid_of(&pod);
                    let kept = match current.remove(&uid) {
                        Some(existing) => merge(existing, pod, &mut changes, false),
                        None => added(pod, &mut changes),
                    };
                    current.insert(uid, kept);
                }
            }
            PodOp::Remove => {
                for pod in pods {
                    if let Some(existing) = current.remove(&uid_of(&pod)) {
                        changes.remove.push(existing);
                    }
                }
            }
        }
        [
            (PodOp::Remove, changes.remove),
            (PodOp::Add, changes.add),
            (PodOp::Update, changes.update),
            (PodOp::Reconcile, changes.reconcile),
        ]
        .into_iter()
        .filter(|(_, pods)| !pods.is_empty())
        .map(|(op, pods)| PodUpdate {
            op,
            pods,
            source: source.clone(),
        })
        .collect()
    }

    /// Every source's pods (by source, then UID).
    #[cfg(test)]
    pub fn pods(&self) -> Vec<Pod> {
        self.sources
            .values()
            .flat_map(|pods| pods.values().map(|p| Pod::clone(p)))
            .collect()
    }

    /// Whether `source` has sent its full set at least once (until then, the kubelet must not
    /// treat that source's running pods as unwanted).
    pub fn seen(&self, source: &str) -> bool {
        self.seen.contains(source)
    }

    /// Whether every one of `sources` has been seen.
    pub fn seen_all(&self, sources: &[&str]) -> bool {
        sources.iter().all(|s| self.seen(s))
    }
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The pods that can be tracked: with a UID, first of their namespace/name in this update;
/// each annotated with its source.
fn usable(source: &str, pods: Vec<Arc<Pod>>) -> Vec<Arc<Pod>> {
    let mut names = BTreeSet::new();
    let mut uids = BTreeSet::new();
    let mut out = Vec::new();
    for mut pod in pods {
        let uid = uid_of(&pod);
        let name = super::full_name(&pod);
        if uid.is_empty() {
            tracing::warn!(source, pod = %name, "pod without a UID; ignored");
            continue;
        }
        if !names.insert(name.clone()) || !uids.insert(uid) {
            tracing::warn!(source, pod = %name, "duplicate pod in one update; ignored");
            continue;
        }
        // A source's pods are its own (one reference): no copy is made here.
        Arc::make_mut(&mut pod)
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(labels::CONFIG_SOURCE.into(), source.into());
        out.push(pod);
    }
    out
}

/// A pod seen for the first time: stamped with when, unless its source already did.
fn added(mut pod: Arc<Pod>, changes: &mut Changes) -> Arc<Pod> {
    let annotations = Arc::make_mut(&mut pod)
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    if !annotations.contains_key(labels::CONFIG_SEEN) {
        annotations.insert(
            labels::CONFIG_SEEN.into(),
            crate::manifest::now_rfc3339_nano(),
        );
    }
    changes.add.push(pod.clone());
    pod
}

/// A pod already known: Update if it changed (keeping when it was first seen), else the
/// known pod with the new status, as a Reconcile when the source re-listed it.
fn merge(existing: Arc<Pod>, mut new: Arc<Pod>, changes: &mut Changes, relisted: bool) -> Arc<Pod> {
    if differs(&existing, &new) {
        if let Some(seen) = existing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::CONFIG_SEEN))
        {
            Arc::make_mut(&mut new)
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(labels::CONFIG_SEEN.into(), seen.clone());
        }
        changes.update.push(new.clone());
        return new;
    }
    let status_changed = existing.status != new.status;
    let mut kept = existing;
    // The newer object's version goes with its status: whoever compares copies by
    // resourceVersion (the status manager) must not take this one for the older. The known
    // copy is shared, so it is copied only when either differs.
    if status_changed || kept.metadata.resource_version != new.metadata.resource_version {
        let new = Arc::unwrap_or_clone(new);
        let k = Arc::make_mut(&mut kept);
        k.status = new.status;
        k.metadata.resource_version = new.metadata.resource_version;
    }
    if relisted || status_changed {
        changes.reconcile.push(kept.clone());
    }
    kept
}

/// Spec, labels, deletion and non-local annotations: what makes a pod changed.
fn differs(a: &Pod, b: &Pod) -> bool {
    a.spec != b.spec
        || a.metadata.labels.as_ref().filter(|l| !l.is_empty())
            != b.metadata.labels.as_ref().filter(|l| !l.is_empty())
        || a.metadata.deletion_timestamp != b.metadata.deletion_timestamp
        || a.metadata.deletion_grace_period_seconds != b.metadata.deletion_grace_period_seconds
        || external_annotations(a) != external_annotations(b)
}

fn external_annotations(p: &Pod) -> BTreeMap<&str, &str> {
    p.metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !LOCAL_ANNOTATIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};

    fn pod(name: &str, uid: &str, image: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(uid.into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    fn set(source: &str, pods: Vec<Pod>) -> PodUpdate {
        PodUpdate::new(PodOp::Reconcile, pods, source)
    }

    /// (op, sorted UIDs) per emitted update.
    fn summary(out: &[PodUpdate]) -> Vec<(PodOp, Vec<String>)> {
        out.iter()
            .map(|u| {
                let mut uids: Vec<String> = u.pods.iter().map(|p| uid_of(p)).collect();
                uids.sort();
                (u.op, uids)
            })
            .collect()
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn sets_become_diffs() {
        let mut c = PodConfig::new();
        assert!(!c.seen("file"));
        let out = c.apply(set(
            "file",
            vec![pod("a", "1", "x:1"), pod("b", "2", "x:1")],
        ));
        assert_eq!(summary(&out), [(PodOp::Add, s(&["1", "2"]))]);
        assert!(c.seen("file") && !c.seen_all(&["file", "http"]));
        let seen_of =
            |p: &Pod| p.metadata.annotations.as_ref().unwrap()[labels::CONFIG_SEEN].clone();
        let (a_seen, b_seen) = (seen_of(&out[0].pods[0]), seen_of(&out[0].pods[1]));
        assert_eq!(
            out[0].pods[0].metadata.annotations.as_ref().unwrap()[labels::CONFIG_SOURCE],
            "file"
        );

        // b changed in place (same UID), a re-listed unchanged (a new seen stamp is no
        // change), c new; nothing removed.
        let mut a = pod("a", "1", "x:1");
        a.metadata.annotations =
            Some([(labels::CONFIG_SEEN.to_string(), "later".to_string())].into());
        let out = c.apply(set(
            "file",
            vec![a, pod("b", "2", "x:2"), pod("c", "3", "x:1")],
        ));
        assert_eq!(
            summary(&out),
            [
                (PodOp::Add, s(&["3"])),
                (PodOp::Update, s(&["2"])),
                (PodOp::Reconcile, s(&["1"]))
            ]
        );
        assert_eq!(
            seen_of(&out[2].pods[0]),
            a_seen,
            "first-seen is kept on a re-list"
        );
        assert_eq!(
            seen_of(&out[1].pods[0]),
            b_seen,
            "first-seen is kept on an update"
        );

        // a gone.
        let out = c.apply(set(
            "file",
            vec![pod("b", "2", "x:2"), pod("c", "3", "x:1")],
        ));
        assert_eq!(
            summary(&out),
            [
                (PodOp::Remove, s(&["1"])),
                (PodOp::Reconcile, s(&["2", "3"]))
            ]
        );
        assert_eq!(c.pods().len(), 2);

        // An empty set removes all.
        let out = c.apply(set("file", vec![]));
        assert_eq!(summary(&out), [(PodOp::Remove, s(&["2", "3"]))]);
        assert!(c.pods().is_empty());
        assert!(c.apply(set("file", vec![])).is_empty());
    }

    #[test]
    fn sources_are_kept_apart() {
        let mut c = PodConfig::new();
        c.apply(set("file", vec![pod("a", "1", "x:1")]));
        let out = c.apply(set("http", vec![pod("b", "2", "x:1")]));
        assert_eq!(summary(&out), [(PodOp::Add, s(&["2"]))]);
        // The URL source emptying itself leaves the file's pods alone.
        let out = c.apply(set("http", vec![]));
        assert_eq!(summary(&out), [(PodOp::Remove, s(&["2"]))]);
        assert_eq!(c.pods().len(), 1);
        assert!(c.seen_all(&["file", "http"]));
    }

    #[test]
    fn incremental_ops_and_status() {
        let mut c = PodConfig::new();
        let add = |pods| PodUpdate::new(PodOp::Add, pods, "api");
        assert_eq!(
            summary(&c.apply(add(vec![pod("a", "1", "x:1")]))),
            [(PodOp::Add, s(&["1"]))]
        );
        assert!(!c.seen("api"), "incremental updates are not a full set");
        // The same pod again: nothing; with a new status: a Reconcile.
        assert!(c.apply(add(vec![pod("a", "1", "x:1")])).is_empty());
        let mut with_status = pod("a", "1", "x:1");
        with_status.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let out = c.apply(PodUpdate::new(PodOp::Update, vec![with_status], "api"));
        assert_eq!(summary(&out), [(PodOp::Reconcile, s(&["1"]))]);
        // A label change is an update.
        let mut labelled = pod("a", "1", "x:1");
        labelled.metadata.labels = Some([("k".to_string(), "v".to_string())].into());
        let out = c.apply(PodUpdate::new(PodOp::Update, vec![labelled], "api"));
        assert_eq!(summary(&out), [(PodOp::Update, s(&["1"]))]);
        let out = c.apply(PodUpdate::new(
            PodOp::Remove,
            vec![pod("a", "1", "x:1"), pod("z", "9", "x")],
            "api",
        ));
        assert_eq!(summary(&out), [(PodOp::Remove, s(&["1"]))]);
    }

    #[test]
    fn api_updates_as_go_s_check_and_update_pod() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let base = || pod("a", "1", "x:1");
        let deleting = || {
            let mut p = base();
            p.metadata.deletion_timestamp = Some(Time("2024-01-01T00:00:00Z".parse().unwrap()));
            p.metadata.deletion_grace_period_seconds = Some(30);
            p
        };
        let cases: Vec<(&str, Pod, Option<PodOp>)> = vec![
            ("same pod", base(), None),
            (
                "only the resourceVersion and managed fields",
                {
                    let mut p = base();
                    p.metadata.resource_version = Some("99".into());
                    p.metadata.generation = Some(2);
                    p
                },
                None,
            ),
            (
                "only the status (our own write)",
                {
                    let mut p = base();
                    p.status = Some(PodStatus {
                        phase: Some("Running".into()),
                        ..Default::default()
                    });
                    p
                },
                Some(PodOp::Reconcile),
            ),
            ("deletionTimestamp set", deleting(), Some(PodOp::Update)),
            (
                "an annotation",
                {
                    let mut p = base();
                    p.metadata.annotations = Some([("k".to_string(), "v".to_string())].into());
                    p
                },
                Some(PodOp::Update),
            ),
            ("the spec", pod("a", "1", "x:2"), Some(PodOp::Update)),
        ];
        for (what, new, want) in cases {
            let mut c = PodConfig::new();
            c.apply(set("api", vec![base()]));
            let out = c.apply(PodUpdate::new(PodOp::Update, vec![new], "api"));
            assert_eq!(out.iter().map(|u| u.op).next(), want, "{what}");
        }
        // A shorter grace period on a pod already being deleted is an update too.
        let mut c = PodConfig::new();
        c.apply(set("api", vec![deleting()]));
        let mut shorter = deleting();
        shorter.metadata.deletion_grace_period_seconds = Some(0);
        let out = c.apply(PodUpdate::new(PodOp::Update, vec![shorter], "api"));
        assert_eq!(summary(&out), [(PodOp::Update, s(&["1"]))]);
        assert_eq!(
            out[0].pods[0].metadata.deletion_grace_period_seconds,
            Some(0)
        );
    }

    #[test]
    fn unusable_pods_are_dropped() {
        let mut c = PodConfig::new();
        let no_uid = pod("a", "", "x:1");
        let dup_name = pod("b", "3", "x:1");
        let out = c.apply(set("file", vec![no_uid, pod("b", "2", "x:1"), dup_name]));
        assert_eq!(summary(&out), [(PodOp::Add, s(&["2"]))]);
    }
}
