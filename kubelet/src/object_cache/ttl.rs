//! The Cache strategy's per-object state (Go's `objectStore` item): the last GET's answer,
//! fresh for a TTL. A failed refresh serves what was known before (found or not found); only
//! with nothing known is the error returned. An answer older than the one held (a lower
//! resourceVersion, from a lagging API server cache) is not taken.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use super::kind::{CachedKind, resource_version};
use crate::objects::ObjectError;

/// One object's cached GET.
#[derive(Debug)]
pub(super) struct TtlSlot<K> {
    known: Mutex<Option<Known<K>>>,
}

#[derive(Debug)]
struct Known<K> {
    /// The object, `None` when the API said it does not exist.
    object: Option<Arc<K>>,
    fetched: Instant,
}

impl<K> Default for TtlSlot<K> {
    fn default() -> Self {
        Self {
            known: Mutex::new(None),
        }
    }
}

impl<K: CachedKind> TtlSlot<K> {
    /// The object, from the cache while younger than `ttl`, else from `fetch` (one fetch at a
    /// time per object: concurrent readers wait for it and share its answer). `fetch` is told
    /// whether an object is held: a refresh may then be served from the API server's cache
    /// (Go's `FromApiserverCache`).
    pub async fn get<F, Fut>(&self, ttl: Duration, fetch: F) -> Result<Option<Arc<K>>, ObjectError>
    where
        F: FnOnce(bool) -> Fut,
        Fut: std::future::Future<Output = Result<Option<K>, ObjectError>>,
    {
        let mut known = self.known.lock().await;
        if let Some(k) = known.as_ref()
            && k.fetched.elapsed() < ttl
        {
            return Ok(k.object.clone());
        }
        let refresh = known.as_ref().is_some_and(|k| k.object.is_some());
        match fetch(refresh).await {
            Ok(object) => {
                let older = match (known.as_ref().and_then(|k| k.object.as_deref()), &object) {
                    (Some(held), Some(new)) => rv_number(new) < rv_number(held),
                    _ => false,
                };
                if !older {
                    *known = Some(Known {
                        object: object.map(Arc::new),
                        fetched: Instant::now(),
                    });
                }
            }
            Err(e) if known.is_none() => return Err(e),
            Err(e) => {
                tracing::debug!(kind = K::RESOURCE, error = %e, "refresh failed; serving the cached answer");
            }
        }
        Ok(known.as_ref().and_then(|k| k.object.clone()))
    }
}

/// A resourceVersion as the number the API server makes it (0 if it is not one).
fn rv_number<K: CachedKind>(o: &K) -> u64 {
    resource_version(o)
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}
