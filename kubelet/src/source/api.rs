//! The API server source (the Go kubelet's `kubetypes.ApiserverSource`): the pods bound to
//! this node (`spec.nodeName=<node>`), listed and watched through `kube::runtime::watcher`
//! (which resumes from the last resourceVersion, asks for bookmarks and re-lists on 410 Gone).
//!
//! A listing goes out as one Reconcile (Go's `SET`), a watched change as an Update (the merge
//! in [`super::PodConfig`] turns an unknown UID into an Add, an only-status change into a
//! Reconcile, a new `deletionTimestamp` into an Update), a deletion as a Remove. Mirror pods
//! (annotation `kubernetes.io/config.mirror`) are never desired pods: they go to the shared
//! [`MirrorTable`], which the mirror pod manager and the status manager read.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::watcher;
use tokio::sync::mpsc::Sender;
use tokio::task::JoinHandle;

use crate::kube_client::ApiHandle;
use crate::types::{Pod, PodOp, PodUpdate, labels, uid_of};

/// `kubernetes.io/config.source` of pods from the API server.
pub const API_SOURCE: &str = "api";

/// First wait before a new connection after the list or watch failed.
const RETRY_MIN: Duration = Duration::from_millis(800);
/// Longest wait between connection attempts.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The mirror pods of this node as the API shows them, by full name (`namespace/name`);
/// shared, cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct MirrorTable(Arc<RwLock<BTreeMap<String, Pod>>>);

impl MirrorTable {
    /// The mirror pod named `namespace/name`, if the API has one.
    pub fn get(&self, full_name: &str) -> Option<Pod> {
        self.read().get(full_name).cloned()
    }

    /// Every mirror pod known.
    pub fn all(&self) -> Vec<Pod> {
        self.read().values().cloned().collect()
    }

    /// Replaces the whole table (after a listing).
    pub fn replace(&self, pods: Vec<Pod>) {
        let mut t = self.0.write().unwrap_or_else(|p| p.into_inner());
        *t = pods
            .into_iter()
            .map(|p| (super::full_name(&p), p))
            .collect();
    }

    /// Adds or replaces one mirror pod.
    pub fn upsert(&self, pod: Pod) {
        let mut t = self.0.write().unwrap_or_else(|p| p.into_inner());
        t.insert(super::full_name(&pod), pod);
    }

    /// Forgets a mirror pod, unless the name already belongs to a newer one (other UID).
    pub fn remove(&self, pod: &Pod) {
        let mut t = self.0.write().unwrap_or_else(|p| p.into_inner());
        let name = super::full_name(pod);
        if t.get(&name).is_some_and(|p| uid_of(p) == uid_of(pod)) {
            t.remove(&name);
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Pod>> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether `pod` is a static pod's mirror.
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(labels::CONFIG_MIRROR))
}

/// Turns watcher events into pod updates: buffers a listing until it is complete, keeps mirror
/// pods out (in the table instead) and stamps the source.
#[derive(Debug, Default)]
pub struct EventMapper {
    /// The listing under way (between `Init` and `InitDone`).
    listing: Option<Vec<Pod>>,
    mirrors: MirrorTable,
}

impl EventMapper {
    /// A mapper filling `mirrors`.
    pub fn new(mirrors: MirrorTable) -> Self {
        Self {
            listing: None,
            mirrors,
        }
    }

    /// The update one watcher event makes, if any.
    pub fn map(&mut self, event: watcher::Event<Pod>) -> Option<PodUpdate> {
        // The kubelet never reads managedFields, and a real API server's are kilobytes per
        // pod, kept in every copy of it (as much as a third of ferrolet's heap at 100 pods).
        let event = event.modify(|pod| pod.metadata.managed_fields = None);
        match event {
            watcher::Event::Init => {
                self.listing = Some(Vec::new());
                None
            }
            watcher::Event::InitApply(pod) => {
                self.listing.get_or_insert_with(Vec::new).push(pod);
                None
            }
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let (mirrors, pods): (Vec<Pod>, Vec<Pod>) =
                    listed.into_iter().partition(is_mirror_pod);
                self.mirrors.replace(mirrors);
                Some(update(PodOp::Reconcile, pods))
            }
            watcher::Event::Apply(pod) if is_mirror_pod(&pod) => {
                self.mirrors.upsert(pod);
                None
            }
            watcher::Event::Delete(pod) if is_mirror_pod(&pod) => {
                self.mirrors.remove(&pod);
                None
            }
            watcher::Event::Apply(pod) => Some(update(PodOp::Update, vec![pod])),
            watcher::Event::Delete(pod) => Some(update(PodOp::Remove, vec![pod])),
        }
    }
}

/// An update of the API source, its pods stamped with it.
fn update(op: PodOp, mut pods: Vec<Pod>) -> PodUpdate {
    for p in &mut pods {
        p.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(labels::CONFIG_SOURCE.into(), API_SOURCE.into());
    }
    PodUpdate::new(op, pods, API_SOURCE)
}

/// The watcher's settings: this node's pods, with bookmarks.
fn watch_config(node_name: &str) -> watcher::Config {
    watcher::Config::default()
        .fields(&format!("spec.nodeName={node_name}"))
        .any_semantic()
}

/// Starts the API source: sends this node's pods to `tx` (see the module doc), mirror pods to
/// `mirrors`; ends when the receiver is gone.
pub fn spawn_api_source(
    api: ApiHandle,
    node_name: String,
    tx: Sender<PodUpdate>,
    mirrors: MirrorTable,
) -> JoinHandle<()> {
    tokio::spawn(run(api, node_name, tx, mirrors))
}

async fn run(api: ApiHandle, node_name: String, tx: Sender<PodUpdate>, mirrors: MirrorTable) {
    let mut retry = RETRY_MIN;
    loop {
        // A new client on every (re)connect: the certificate may have rotated.
        let pods: kube::Api<Pod> = kube::Api::all(api.client());
        let mut stream = watcher::watcher(pods, watch_config(&node_name)).boxed();
        let mut mapper = EventMapper::new(mirrors.clone());
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    retry = RETRY_MIN;
                    if let Some(update) = mapper.map(event)
                        && tx.send(update).await.is_err()
                    {
                        return;
                    }
                }
                // The API server's own watch errors (410 Gone among them): the watcher
                // re-lists by itself.
                Err(e @ watcher::Error::WatchError(_)) => {
                    tracing::info!(error = %e, "pod watch restarted");
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?retry, "listing or watching pods failed");
                    break;
                }
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str, mirror: bool) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(uid.into());
        if mirror {
            p.metadata.annotations =
                Some([(labels::CONFIG_MIRROR.to_string(), "hash".to_string())].into());
        }
        p
    }

    fn uids(u: &PodUpdate) -> Vec<String> {
        u.pods.iter().map(|p| uid_of(p)).collect()
    }

    #[test]
    fn listing_is_one_reconcile_without_mirrors() {
        let table = MirrorTable::default();
        table.upsert(pod("stale", "0", true));
        let mut m = EventMapper::new(table.clone());
        assert!(m.map(watcher::Event::Init).is_none());
        assert!(
            m.map(watcher::Event::InitApply(pod("a", "1", false)))
                .is_none()
        );
        assert!(
            m.map(watcher::Event::InitApply(pod("etcd-n", "2", true)))
                .is_none()
        );
        let u = m.map(watcher::Event::InitDone).unwrap();
        assert_eq!(u.op, PodOp::Reconcile);
        assert_eq!(u.source, "api");
        assert_eq!(uids(&u), ["1"]);
        assert_eq!(
            u.pods[0].metadata.annotations.as_ref().unwrap()[labels::CONFIG_SOURCE],
            "api"
        );
        assert_eq!(uid_of(&table.get("default/etcd-n").unwrap()), "2");
        assert!(table.get("default/stale").is_none(), "a listing replaces");
    }

    #[test]
    fn an_empty_listing_still_reconciles() {
        let mut m = EventMapper::default();
        m.map(watcher::Event::Init);
        let u = m.map(watcher::Event::InitDone).unwrap();
        assert_eq!((u.op, u.pods.len()), (PodOp::Reconcile, 0));
    }

    #[test]
    fn watched_changes() {
        let table = MirrorTable::default();
        let mut m = EventMapper::new(table.clone());
        let mut with_fields = pod("a", "1", false);
        with_fields.metadata.managed_fields = Some(vec![Default::default()]);
        let u = m.map(watcher::Event::Apply(with_fields)).unwrap();
        assert!(u.pods[0].metadata.managed_fields.is_none());
        assert_eq!((u.op, uids(&u)), (PodOp::Update, vec!["1".to_string()]));
        let u = m.map(watcher::Event::Delete(pod("a", "1", false))).unwrap();
        assert_eq!((u.op, uids(&u)), (PodOp::Remove, vec!["1".to_string()]));

        assert!(m.map(watcher::Event::Apply(pod("s", "7", true))).is_none());
        assert_eq!(table.all().len(), 1);
        // The deletion of an older mirror of the same name leaves the newer one.
        assert!(m.map(watcher::Event::Delete(pod("s", "6", true))).is_none());
        assert_eq!(table.all().len(), 1);
        assert!(m.map(watcher::Event::Delete(pod("s", "7", true))).is_none());
        assert!(table.all().is_empty());
    }
}
