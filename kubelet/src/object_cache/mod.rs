//! The secret and configMap managers (Go's `pkg/kubelet/secret`, `pkg/kubelet/configmap` on
//! `util/manager`): pods' secrets and configMaps read from the API server through
//! [`ObjectCache`], the cluster's [`ObjectSource`], with the configured strategy
//! (`configMapAndSecretChangeDetectionStrategy`):
//!
//! - [`Strategy::Watch`] (default): one watch per referenced object ([`watched`]), started
//!   when the first registered pod refers to it and stopped with the last; reads come from
//!   what the watch saw, waiting (bounded) for its first listing. An object read as
//!   `immutable: true` is not watched any more (its value is kept). A watch nobody read for
//!   five resync periods is stopped and restarted by the next read (Go's idle recycling).
//! - [`Strategy::Cache`]: a GET cached for a TTL ([`ttl`]; Go's default one minute; the
//!   node's `node.alpha.kubernetes.io/ttl` annotation is not read).
//! - [`Strategy::Get`]: a GET per read, registered or not (Go's "simple" managers).
//!
//! Go has no further strategy: an unknown one is a configuration error, and without an API
//! server there is no manager at all ([`crate::objects::NoApi`]).
//!
//! [`ObjectSource::changes`] announces, with the Watch strategy, every change a watch sees
//! after its object's first listing (created, updated, deleted, or different after a
//! re-list); the first listing is no change, since nobody can have read the object before.
//! The other strategies announce nothing: their readers see changes when they read.

mod kind;
#[cfg(test)]
mod tests;
mod ttl;
mod watched;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use tokio::sync::broadcast;

use crate::kube_client::ApiHandle;
use crate::objects::{ObjectChange, ObjectError, ObjectSource};
use crate::types::{Pod, uid_of};
use crate::volume::{VolumeReferences as PodReferences, pod_references};
use kind::CachedKind;
use ttl::TtlSlot;
use watched::{WatchContext, Watched};

/// How often idle watches are looked for (Go: every minute).
const IDLE_SWEEP_PERIOD: Duration = Duration::from_secs(60);
/// Go's lower bound on how long an unread watch is kept.
const MIN_IDLE_TIME: Duration = Duration::from_secs(60);
/// Change notices buffered for a slow subscriber before it lags.
const CHANGES_CAPACITY: usize = 256;

/// How the managers learn of changes (`configMapAndSecretChangeDetectionStrategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// A GET per read.
    Get,
    /// GETs cached for [`CacheOptions::ttl`].
    Cache,
    /// A watch per referenced object.
    #[default]
    Watch,
}

/// The object cache's settings.
#[derive(Clone, Copy, Debug)]
pub struct CacheOptions {
    /// The strategy.
    pub strategy: Strategy,
    /// Cache: how long a GET's answer is used (Go: one minute).
    pub ttl: Duration,
    /// Watch: how long a read waits for the watch's first listing (Go: one second; longer
    /// here so a pod's first sync does not fail while its watches are still listing).
    pub sync_timeout: Duration,
    /// Watch: the kubelet's resync period (`syncFrequency`); a watch nobody read for five
    /// of them (at least a minute) is stopped until the next read.
    pub resync_interval: Duration,
}

impl Default for CacheOptions {
    fn default() -> Self {
        Self {
            strategy: Strategy::Watch,
            ttl: Duration::from_secs(60),
            sync_timeout: Duration::from_secs(10),
            resync_interval: Duration::from_secs(60),
        }
    }
}

/// An object's place: namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ObjectKey {
    namespace: String,
    name: String,
}

/// The API's message for a failed request (a Status's message, else the error).
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// What the registered pods refer to: the cache's reference counts.
#[derive(Debug)]
struct Registration {
    namespace: String,
    refs: PodReferences,
}

/// The cluster's secrets and configMaps, as the configured strategy keeps them.
#[derive(Debug)]
pub struct ObjectCache {
    secrets: KindCache<Secret>,
    config_maps: KindCache<ConfigMap>,
    /// Registered pods by UID.
    pods: Mutex<HashMap<String, Registration>>,
    changes: broadcast::Sender<ObjectChange>,
}

impl ObjectCache {
    /// A cache reading through `api`; with the Watch strategy, also starts the idle-watch
    /// sweep, which ends with the cache.
    pub fn new(api: ApiHandle, options: CacheOptions) -> Arc<Self> {
        let changes = broadcast::channel(CHANGES_CAPACITY).0;
        let ctx = WatchContext {
            api,
            changes: changes.clone(),
        };
        let cache = Arc::new(Self {
            secrets: KindCache::new(ctx.clone(), options),
            config_maps: KindCache::new(ctx, options),
            pods: Mutex::new(HashMap::new()),
            changes,
        });
        if options.strategy == Strategy::Watch {
            let max_idle = (options.resync_interval * 5).max(MIN_IDLE_TIME);
            tokio::spawn(sweep_idle(Arc::downgrade(&cache), max_idle));
        }
        cache
    }

    fn pods(&self) -> std::sync::MutexGuard<'_, HashMap<String, Registration>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `new`'s references before dropping `old`'s, so an object both refer to keeps its
    /// watch.
    fn swap_references(&self, new: Option<&Registration>, old: Option<&Registration>) {
        if let Some(r) = new {
            for name in &r.refs.secrets {
                self.secrets.add_ref(&r.namespace, name);
            }
            for name in &r.refs.config_maps {
                self.config_maps.add_ref(&r.namespace, name);
            }
        }
        if let Some(r) = old {
            for name in &r.refs.secrets {
                self.secrets.remove_ref(&r.namespace, name);
            }
            for name in &r.refs.config_maps {
                self.config_maps.remove_ref(&r.namespace, name);
            }
        }
    }

    /// The objects with a running watch, as `(kind, namespace, name)`.
    #[cfg(test)]
    fn watching(&self) -> Vec<(crate::objects::ObjectKind, String, String)> {
        let mut out = self.secrets.watching();
        out.extend(self.config_maps.watching());
        out.sort();
        out
    }
}

impl ObjectSource for ObjectCache {
    fn register_pod(&self, pod: &Pod) {
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let new = Registration {
            namespace,
            refs: pod_references(pod),
        };
        let mut pods = self.pods();
        let uid = uid_of(pod);
        if let Some(old) = pods.get(&uid)
            && old.namespace == new.namespace
            && old.refs == new.refs
        {
            return;
        }
        self.swap_references(Some(&new), pods.get(&uid));
        pods.insert(uid, new);
    }

    fn unregister_pod(&self, pod: &Pod) {
        let mut pods = self.pods();
        let old = pods.remove(&uid_of(pod));
        self.swap_references(None, old.as_ref());
    }

    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<Secret>>, ObjectError>> {
        Box::pin(self.secrets.get(namespace, name))
    }

    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<ConfigMap>>, ObjectError>> {
        Box::pin(self.config_maps.get(namespace, name))
    }

    fn changes(&self) -> broadcast::Receiver<ObjectChange> {
        self.changes.subscribe()
    }
}

/// Stops the watches nobody read for `max_idle`, every [`IDLE_SWEEP_PERIOD`], while the
/// cache lives.
async fn sweep_idle(cache: Weak<ObjectCache>, max_idle: Duration) {
    let mut tick = tokio::time::interval(IDLE_SWEEP_PERIOD);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(cache) = cache.upgrade() else { return };
        let now = Instant::now();
        cache.secrets.stop_idle(now, max_idle);
        cache.config_maps.stop_idle(now, max_idle);
    }
}

/// One registered object's state under the strategy.
#[derive(Debug)]
enum Backend<K> {
    /// Get: nothing kept.
    Plain,
    /// Cache: the last GET.
    Cached(Arc<TtlSlot<K>>),
    /// Watch: the watch and what it saw.
    Watched(Watched<K>),
}

/// One registered object: how many pods refer to it, and its state.
#[derive(Debug)]
struct Item<K> {
    refs: usize,
    backend: Backend<K>,
}

/// The cache of one kind.
#[derive(Debug)]
struct KindCache<K> {
    ctx: WatchContext,
    options: CacheOptions,
    items: Mutex<HashMap<ObjectKey, Item<K>>>,
}

impl<K: CachedKind> KindCache<K> {
    fn new(ctx: WatchContext, options: CacheOptions) -> Self {
        Self {
            ctx,
            options,
            items: Mutex::new(HashMap::new()),
        }
    }

    fn items(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Item<K>>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add_ref(&self, namespace: &str, name: &str) {
        let key = ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        };
        let mut items = self.items();
        match items.get_mut(&key) {
            Some(item) => {
                item.refs += 1;
                // Go drops a cached answer when another pod registers: its first read GETs.
                if let Backend::Cached(slot) = &mut item.backend {
                    *slot = Arc::default();
                }
            }
            None => {
                let backend = match self.options.strategy {
                    Strategy::Get => Backend::Plain,
                    Strategy::Cache => Backend::Cached(Arc::default()),
                    Strategy::Watch => Backend::Watched(Watched::start(&self.ctx, &key)),
                };
                items.insert(key, Item { refs: 1, backend });
            }
        }
    }

    fn remove_ref(&self, namespace: &str, name: &str) {
        let key = ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        };
        let mut items = self.items();
        if let Some(item) = items.get_mut(&key) {
            item.refs = item.refs.saturating_sub(1);
            if item.refs == 0 {
                // Dropping a watched item aborts its watch.
                items.remove(&key);
            }
        }
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, ObjectError> {
        let key = ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        };
        match self.options.strategy {
            Strategy::Get => self.fetch(&key, false).await.map(|o| o.map(Arc::new)),
            Strategy::Cache => {
                let slot = match self.items().get(&key).map(|i| &i.backend) {
                    Some(Backend::Cached(slot)) => slot.clone(),
                    _ => return Err(not_registered(&key)),
                };
                slot.get(self.options.ttl, |refresh| self.fetch(&key, refresh))
                    .await
            }
            Strategy::Watch => self.read_watched(&key).await,
        }
    }

    /// One GET (from the API server's cache when `any_version`); not found is `None`.
    async fn fetch(&self, key: &ObjectKey, any_version: bool) -> Result<Option<K>, ObjectError> {
        let api: kube::Api<K> = kube::Api::namespaced(self.ctx.api.client(), &key.namespace);
        let params = if any_version {
            kube::api::GetParams::any()
        } else {
            kube::api::GetParams::default()
        };
        match api.get_with(&key.name, &params).await {
            Ok(object) => Ok(Some(object)),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(e) => Err(ObjectError::Api(api_message(&e))),
        }
    }

    async fn read_watched(&self, key: &ObjectKey) -> Result<Option<Arc<K>>, ObjectError> {
        let mut state = {
            let mut items = self.items();
            let Some(Backend::Watched(w)) = items.get_mut(key).map(|i| &mut i.backend) else {
                return Err(not_registered(key));
            };
            w.last_access = Instant::now();
            w.ensure_running(&self.ctx, key);
            w.subscribe()
        };
        let waited =
            tokio::time::timeout(self.options.sync_timeout, state.wait_for(|s| s.synced)).await;
        let waited = waited.map(|r| r.map(|slot| slot.object.clone()));
        let object = match waited {
            Ok(Ok(object)) => object,
            // The last pod referring to it went away meanwhile.
            Ok(Err(_)) => return Err(not_registered(key)),
            Err(_) => {
                let why = state
                    .borrow()
                    .last_error
                    .as_ref()
                    .map(|e| format!(" (last error: {e})"))
                    .unwrap_or_default();
                return Err(ObjectError::Api(format!(
                    "failed to sync {} cache: timed out waiting for the condition{why}",
                    K::RESOURCE
                )));
            }
        };
        if object.as_ref().is_some_and(|o| o.is_immutable())
            && let Some(Backend::Watched(w)) = self.items().get_mut(key).map(|i| &mut i.backend)
            && !w.immutable
        {
            w.immutable = true;
            w.stop();
            tracing::debug!(kind = K::RESOURCE, namespace = %key.namespace, name = %key.name, "stopped watching: the object is immutable");
        }
        Ok(object)
    }

    fn stop_idle(&self, now: Instant, max_idle: Duration) {
        for (key, item) in self.items().iter_mut() {
            if let Backend::Watched(w) = &mut item.backend
                && w.idle(now, max_idle)
            {
                w.stop();
                tracing::debug!(kind = K::RESOURCE, namespace = %key.namespace, name = %key.name, ?max_idle, "stopped an unread watch");
            }
        }
    }

    #[cfg(test)]
    fn watching(&self) -> Vec<(crate::objects::ObjectKind, String, String)> {
        self.items()
            .iter()
            .filter(|(_, i)| matches!(&i.backend, Backend::Watched(w) if w.running()))
            .map(|(k, _)| (K::KIND, k.namespace.clone(), k.name.clone()))
            .collect()
    }
}

fn not_registered(key: &ObjectKey) -> ObjectError {
    ObjectError::NotRegistered {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    }
}
