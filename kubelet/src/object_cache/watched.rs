//! The Watch strategy's per-object state (Go's `objectCacheItem`): a watch task on one object
//! (`fieldSelector=metadata.name=<name>` in its namespace, which is what the Node authorizer
//! allows a node), the last state it saw, and whether the watch still runs. Readers wait for
//! the first listing; an immutable object's watch is stopped after a read and its value kept.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::watcher;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::kind::{CachedKind, resource_version};
use super::{ObjectKey, api_message};
use crate::kube_client::ApiHandle;
use crate::objects::ObjectChange;

/// First wait before a new connection after the list or watch failed.
const RETRY_MIN: Duration = Duration::from_millis(800);
/// Longest wait between connection attempts.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What a watch has seen of its object.
#[derive(Debug)]
pub(super) struct Slot<K> {
    /// A listing completed since the watch (re)started: reads may be served.
    pub synced: bool,
    /// A listing completed once: later differences are changes worth announcing.
    pub seen: bool,
    /// The object, `None` when the API has none.
    pub object: Option<Arc<K>>,
    /// Why the last list or watch failed, for a reader that gave up waiting.
    pub last_error: Option<String>,
}

impl<K> Default for Slot<K> {
    fn default() -> Self {
        Self {
            synced: false,
            seen: false,
            object: None,
            last_error: None,
        }
    }
}

/// What every watch task needs.
#[derive(Clone, Debug)]
pub(super) struct WatchContext {
    /// The API client handle (a new client on every reconnect).
    pub api: ApiHandle,
    /// Where changes are announced.
    pub changes: broadcast::Sender<ObjectChange>,
}

/// One watched object.
#[derive(Debug)]
pub(super) struct Watched<K> {
    state: watch::Sender<Slot<K>>,
    task: Option<JoinHandle<()>>,
    /// Seen `immutable: true` by a read: never watched again.
    pub immutable: bool,
    /// The last read, for stopping idle watches.
    pub last_access: Instant,
}

impl<K: CachedKind> Watched<K> {
    /// Starts watching `key`.
    pub fn start(ctx: &WatchContext, key: &ObjectKey) -> Self {
        let mut w = Self {
            state: watch::Sender::new(Slot::default()),
            task: None,
            immutable: false,
            last_access: Instant::now(),
        };
        w.ensure_running(ctx, key);
        w
    }

    /// Restarts the watch if it was stopped while idle (an immutable object stays unwatched).
    pub fn ensure_running(&mut self, ctx: &WatchContext, key: &ObjectKey) {
        if self.task.is_some() || self.immutable {
            return;
        }
        let tx = self.state.clone();
        self.task = Some(tokio::spawn(run(ctx.clone(), key.clone(), tx)));
    }

    /// A receiver of the object's state.
    pub fn subscribe(&self) -> watch::Receiver<Slot<K>> {
        self.state.subscribe()
    }

    /// Stops the watch; unless the object is immutable, the next read waits for a new listing.
    pub fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if !self.immutable {
            self.state.send_modify(|s| s.synced = false);
        }
    }

    /// Whether the watch runs, has listed, and nobody read it for `max_idle`.
    pub fn idle(&self, now: Instant, max_idle: Duration) -> bool {
        self.task.is_some()
            && self.state.borrow().synced
            && now.saturating_duration_since(self.last_access) > max_idle
    }

    /// Whether a watch task runs.
    #[cfg(test)]
    pub fn running(&self) -> bool {
        self.task.is_some()
    }
}

impl<K> Drop for Watched<K> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Lists and watches one object until aborted, reconnecting with back-off.
async fn run<K: CachedKind>(ctx: WatchContext, key: ObjectKey, tx: watch::Sender<Slot<K>>) {
    let mut retry = RETRY_MIN;
    loop {
        let api: kube::Api<K> = kube::Api::namespaced(ctx.api.client(), &key.namespace);
        let config = watcher::Config::default()
            .fields(&format!("metadata.name={}", key.name))
            .any_semantic();
        let mut stream = watcher::watcher(api, config).boxed();
        // The listing under way: its object, once complete, replaces the slot's.
        let mut listing: Option<Option<K>> = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    retry = RETRY_MIN;
                    match event {
                        watcher::Event::Init => listing = Some(None),
                        watcher::Event::InitApply(o) => listing = Some(Some(o)),
                        watcher::Event::InitDone => {
                            publish(&ctx, &key, &tx, listing.take().flatten(), true);
                        }
                        watcher::Event::Apply(o) => publish(&ctx, &key, &tx, Some(o), false),
                        watcher::Event::Delete(_) => publish(&ctx, &key, &tx, None, false),
                    }
                }
                // The API server's own watch errors (410 Gone among them): the watcher
                // re-lists by itself.
                Err(e @ watcher::Error::WatchError(_)) => {
                    tracing::debug!(kind = K::RESOURCE, namespace = %key.namespace, name = %key.name, error = %e, "watch restarted");
                }
                Err(e) => {
                    let message = watcher_message(&e);
                    tracing::warn!(kind = K::RESOURCE, namespace = %key.namespace, name = %key.name, error = %message, retry_in = ?retry, "listing or watching failed");
                    tx.send_modify(|s| s.last_error = Some(message));
                    break;
                }
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// Stores what the watch saw; announces it if it differs from what was known after a
/// completed listing (the first listing of an object is no change: nobody had read it).
fn publish<K: CachedKind>(
    ctx: &WatchContext,
    key: &ObjectKey,
    tx: &watch::Sender<Slot<K>>,
    object: Option<K>,
    listing: bool,
) {
    let object = object.map(Arc::new);
    let mut changed = false;
    tx.send_modify(|slot| {
        changed = slot.seen && !same(slot.object.as_deref(), object.as_deref());
        slot.object = object;
        if listing {
            slot.synced = true;
            slot.seen = true;
            slot.last_error = None;
        }
    });
    if changed {
        tracing::debug!(kind = K::RESOURCE, namespace = %key.namespace, name = %key.name, "changed");
        // Nobody subscribed is fine.
        let _ = ctx.changes.send(ObjectChange {
            kind: K::KIND,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        });
    }
}

/// Whether two states of the object are the same version (resourceVersion changes on every
/// write, deletion and re-creation included).
fn same<K: CachedKind>(a: Option<&K>, b: Option<&K>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => resource_version(a) == resource_version(b),
        _ => false,
    }
}

/// The API's message for a failed list or watch.
fn watcher_message(e: &watcher::Error) -> String {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => api_message(e),
        watcher::Error::WatchError(status) => status.message.clone(),
        other => other.to_string(),
    }
}
