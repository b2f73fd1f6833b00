//! The token manager (Go's `pkg/kubelet/token`): bound service-account tokens from the
//! TokenRequest API (`serviceaccounts/<name>/token`), cached by their full request and asked
//! for again once 80% of their lifetime has passed or they are older than 24 hours (each less
//! a jitter of up to 10 s, as Go's, so that pods started together do not refresh together).
//! A failed refresh keeps serving the cached token until it expires. A pod's tokens are
//! dropped when it is forgotten, and expired ones every minute.

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1 as authn;
use k8s_openapi::api::core::v1::ServiceAccount;

use crate::kube_client::ApiHandle;
use crate::objects::{ObjectError, TokenRequestSpec, TokenSource};

/// A token is asked for again once it is this old, whatever its lifetime.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// How often expired tokens are dropped.
const GC_PERIOD: Duration = Duration::from_secs(60);
/// Refreshes come up to this much early, at random.
const MAX_JITTER_SECS: u64 = 10;

/// The time now; a test moves it.
pub(crate) type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// A token the API issued.
#[derive(Clone, Debug)]
struct Issued {
    token: String,
    /// `status.expirationTimestamp`.
    expires: SystemTime,
    /// The lifetime the API granted (`spec.expirationSeconds` of its answer).
    lifetime: Duration,
}

/// The cluster's [`TokenSource`].
pub struct TokenManager {
    api: ApiHandle,
    cache: Mutex<HashMap<TokenRequestSpec, Issued>>,
    clock: Clock,
}

impl std::fmt::Debug for TokenManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenManager")
            .field("cached", &self.cache().len())
            .finish_non_exhaustive()
    }
}

impl TokenManager {
    /// A manager asking through `api`; its cleanup of expired tokens ends with it.
    pub fn new(api: ApiHandle) -> Arc<Self> {
        Self::with_clock(api, Arc::new(SystemTime::now))
    }

    /// A manager on `clock`.
    pub(crate) fn with_clock(api: ApiHandle, clock: Clock) -> Arc<Self> {
        let manager = Arc::new(Self {
            api,
            cache: Mutex::new(HashMap::new()),
            clock,
        });
        tokio::spawn(cleanup(Arc::downgrade(&manager)));
        manager
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<TokenRequestSpec, Issued>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `t` is due for a refresh at `now` (80% of its lifetime, or 24 h, less jitter).
    fn requires_refresh(t: &Issued, now: SystemTime) -> bool {
        let jitter = Duration::from_secs(jitter_secs());
        let issued = t.expires.checked_sub(t.lifetime).unwrap_or(t.expires);
        if now > issued + MAX_TTL.saturating_sub(jitter) {
            return true;
        }
        // Go's integer arithmetic: a fifth of the lifetime in whole seconds.
        let margin = Duration::from_secs(t.lifetime.as_secs() * 20 / 100) + jitter;
        now > t
            .expires
            .checked_sub(margin)
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// Asks the TokenRequest API for a token.
    async fn request(&self, spec: &TokenRequestSpec) -> Result<Issued, String> {
        let request = authn::TokenRequest {
            spec: authn::TokenRequestSpec {
                audiences: spec
                    .audience
                    .iter()
                    .filter(|a| !a.is_empty())
                    .cloned()
                    .collect(),
                expiration_seconds: Some(spec.expiration_seconds),
                bound_object_ref: Some(authn::BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(spec.pod_name.clone()),
                    uid: Some(spec.pod_uid.clone()),
                }),
            },
            ..Default::default()
        };
        let api: kube::Api<ServiceAccount> =
            kube::Api::namespaced(self.api.client(), &spec.namespace);
        let answer = api
            .create_token_request(&spec.service_account, &Default::default(), &request)
            .await
            .map_err(|e| api_message(&e))?;
        let status = answer
            .status
            .ok_or_else(|| "the TokenRequest answer has no status".to_string())?;
        let lifetime = answer
            .spec
            .expiration_seconds
            .unwrap_or(spec.expiration_seconds);
        Ok(Issued {
            token: status.token,
            expires: SystemTime::from(status.expiration_timestamp.0),
            lifetime: Duration::from_secs(u64::try_from(lifetime).unwrap_or(0)),
        })
    }

    async fn token_for(&self, spec: &TokenRequestSpec) -> Result<String, ObjectError> {
        let cached = self.cache().get(spec).cloned();
        let now = (self.clock)();
        if let Some(t) = &cached
            && !Self::requires_refresh(t, now)
        {
            return Ok(t.token.clone());
        }
        match (self.request(spec).await, cached) {
            (Ok(issued), _) => {
                let token = issued.token.clone();
                self.cache().insert(spec.clone(), issued);
                Ok(token)
            }
            (Err(e), None) => Err(ObjectError::Api(format!("failed to fetch token: {e}"))),
            (Err(e), Some(t)) if (self.clock)() > t.expires => Err(ObjectError::Api(format!(
                "token for service account {}/{} of pod {} expired and refresh failed: {e}",
                spec.namespace, spec.service_account, spec.pod_name
            ))),
            (Err(e), Some(t)) => {
                tracing::warn!(namespace = %spec.namespace, service_account = %spec.service_account, pod = %spec.pod_name, error = %e, "couldn't update token");
                Ok(t.token)
            }
        }
    }

    /// Drops the tokens that have expired.
    fn drop_expired(&self) {
        let now = (self.clock)();
        self.cache().retain(|_, t| now <= t.expires);
    }
}

impl TokenSource for TokenManager {
    fn token<'a>(
        &'a self,
        spec: &'a TokenRequestSpec,
    ) -> BoxFuture<'a, Result<String, ObjectError>> {
        Box::pin(self.token_for(spec))
    }

    fn forget_pod(&self, uid: &str) {
        self.cache().retain(|spec, _| spec.pod_uid != uid);
    }
}

/// The API's message for a failed request (a Status's message, else the error).
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Drops expired tokens every [`GC_PERIOD`] while the manager lives.
async fn cleanup(manager: Weak<TokenManager>) {
    let mut tick = tokio::time::interval(GC_PERIOD);
    loop {
        tick.tick().await;
        let Some(manager) = manager.upgrade() else {
            return;
        };
        manager.drop_expired();
    }
}

/// Whole seconds in `0..MAX_JITTER_SECS`, at random (std's per-process random hash keys
/// are random enough to spread refreshes; no generator crate needed).
fn jitter_secs() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    h.finish() % MAX_JITTER_SECS
}
