//! Webhook authentication and authorization of the secure API, as kubeadm clusters set them
//! up (`authentication.webhook.enabled`, `authorization.mode: Webhook`): a bearer token is
//! checked with a `TokenReview`, a request with a `SubjectAccessReview`, both created through
//! the API client and both cached as Go's delegating authenticator and authorizer cache them.
//!
//! The API calls sit behind [`ReviewClient`] so that the logic here is tested without a
//! server; [`KubeReviews`] is the real one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::auth::{ANONYMOUS_USER, AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP, User};
use crate::kube_client::ApiHandle;

/// Why a review could not be had (never cached: the next request asks again).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The API call failed.
    #[error("calling the API server: {0}")]
    Api(String),
    /// The reviewer answered with an error (`status.error`).
    #[error("{0}")]
    Rejected(String),
}

/// The resource a request is authorized against: `nodes/<subresource>` of this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeRequest<'a> {
    /// API verb (`get`, `create`, …).
    pub verb: &'a str,
    /// Subresource of `nodes` (`proxy`, `stats`, `log`, …).
    pub subresource: &'a str,
    /// The node's name.
    pub node: &'a str,
}

/// The two reviews the secure API asks of the API server.
pub trait ReviewClient: Send + Sync {
    /// `TokenReview` of `token` (no audiences): the user if authenticated, none if not.
    fn token_review<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<User>, ReviewError>>;
    /// `SubjectAccessReview` of `user` doing `request`: whether it is allowed.
    fn subject_access_review<'a>(
        &'a self,
        user: &'a User,
        request: NodeRequest<'a>,
    ) -> BoxFuture<'a, Result<bool, ReviewError>>;
}

/// [`ReviewClient`] over the kubelet's API client.
#[derive(Clone, Debug)]
pub struct KubeReviews {
    api: ApiHandle,
}

impl KubeReviews {
    /// Reviews through `api` (its current client at each call).
    pub fn new(api: ApiHandle) -> Self {
        Self { api }
    }
}

impl ReviewClient for KubeReviews {
    fn token_review<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
        Box::pin(async move {
            let reviews: Api<TokenReview> = Api::all(self.api.client());
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_string()),
                    audiences: None,
                },
                ..Default::default()
            };
            let answer = reviews
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| ReviewError::Api(e.to_string()))?;
            token_status(answer)
        })
    }

    fn subject_access_review<'a>(
        &'a self,
        user: &'a User,
        request: NodeRequest<'a>,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(async move {
            let reviews: Api<SubjectAccessReview> = Api::all(self.api.client());
            let answer = reviews
                .create(&PostParams::default(), &access_review(user, request))
                .await
                .map_err(|e| ReviewError::Api(e.to_string()))?;
            Ok(answer.status.is_some_and(|s| s.allowed))
        })
    }
}

/// The user a `TokenReview` answer names, none when not authenticated.
fn token_status(answer: TokenReview) -> Result<Option<User>, ReviewError> {
    let status = answer.status.unwrap_or_default();
    if status.authenticated == Some(true) {
        let info = status.user.unwrap_or_default();
        return Ok(Some(User {
            name: info.username.unwrap_or_default(),
            groups: info.groups.unwrap_or_default(),
        }));
    }
    match status.error.filter(|e| !e.is_empty()) {
        Some(e) => Err(ReviewError::Rejected(e)),
        None => Ok(None),
    }
}

/// The `SubjectAccessReview` of the Go kubelet's node attributes.
pub fn access_review(user: &User, request: NodeRequest<'_>) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(request.verb.to_string()),
                group: Some(String::new()),
                version: Some("v1".into()),
                resource: Some("nodes".into()),
                subresource: Some(request.subresource.to_string()),
                name: Some(request.node.to_string()),
                namespace: Some(String::new()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Most entries a cache holds; past it, expired ones go, then the soonest to expire.
const CACHE_CAPACITY: usize = 4096;

/// Answers kept for a while, by a digest of what was asked.
#[derive(Debug)]
pub struct TtlCache<V> {
    entries: HashMap<[u8; 32], (V, Instant)>,
    capacity: usize,
}

impl<V: Clone> TtlCache<V> {
    /// An empty cache of at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// The value of `key` if it has not expired at `now`.
    pub fn get(&mut self, key: &[u8; 32], now: Instant) -> Option<V> {
        match self.entries.get(key) {
            Some((v, until)) if now < *until => Some(v.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `ttl` from `now`; a zero TTL keeps nothing (Go: bypasses the cache).
    pub fn insert(&mut self, key: [u8; 32], value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (_, until)| now < *until);
            if self.entries.len() >= self.capacity
                && let Some(first) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(k, _)| *k)
            {
                self.entries.remove(&first);
            }
        }
        self.entries.insert(key, (value, now + ttl));
    }

    /// Entries held (expired ones included until looked up or pushed out).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// SHA-256 of the parts, each length-prefixed so that no two lists collide.
fn digest(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    h.finalize().into()
}

/// Bearer tokens checked by TokenReview, answers cached for `ttl` (authenticated or not, as
/// Go's `cacheTTL` for both; errors are not cached). The cache holds token digests only.
pub struct TokenAuthenticator {
    client: Arc<dyn ReviewClient>,
    ttl: Duration,
    cache: Mutex<TtlCache<Option<User>>>,
}

impl std::fmt::Debug for TokenAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAuthenticator")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl TokenAuthenticator {
    /// Reviews through `client`, cached for `ttl`.
    pub fn new(client: Arc<dyn ReviewClient>, ttl: Duration) -> Self {
        Self {
            client,
            ttl,
            cache: Mutex::new(TtlCache::new(CACHE_CAPACITY)),
        }
    }

    /// The user of `token` (with `system:authenticated` added, as Go's group adder does),
    /// none when the API server does not authenticate it.
    pub async fn authenticate(&self, token: &str) -> Result<Option<User>, ReviewError> {
        let key = digest(&["token", token]);
        if let Some(hit) = lock(&self.cache).get(&key, Instant::now()) {
            return Ok(hit);
        }
        let user = self
            .client
            .token_review(token)
            .await?
            .map(with_authenticated);
        lock(&self.cache).insert(key, user.clone(), self.ttl, Instant::now());
        Ok(user)
    }
}

/// Go's `AuthenticatedGroupAdder`: `system:authenticated` joins the groups unless the user
/// is anonymous or already in it (or in `system:unauthenticated`).
pub fn with_authenticated(mut user: User) -> User {
    let marked = user
        .groups
        .iter()
        .any(|g| g == AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP);
    if user.name != ANONYMOUS_USER && !marked {
        user.groups.push(AUTHENTICATED_GROUP.into());
    }
    user
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A request's decision by SubjectAccessReview, allowed answers cached for `allowed_ttl` and
/// denied ones for `denied_ttl` (`cacheAuthorizedTTL`, `cacheUnauthorizedTTL`).
pub struct WebhookAuthorizer {
    client: Arc<dyn ReviewClient>,
    node: String,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    cache: Mutex<TtlCache<bool>>,
}

impl std::fmt::Debug for WebhookAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookAuthorizer")
            .field("node", &self.node)
            .field("allowed_ttl", &self.allowed_ttl)
            .field("denied_ttl", &self.denied_ttl)
            .finish_non_exhaustive()
    }
}

impl WebhookAuthorizer {
    /// Reviews of requests on node `node` through `client`.
    pub fn new(
        client: Arc<dyn ReviewClient>,
        node: &str,
        allowed_ttl: Duration,
        denied_ttl: Duration,
    ) -> Self {
        Self {
            client,
            node: node.to_string(),
            allowed_ttl,
            denied_ttl,
            cache: Mutex::new(TtlCache::new(CACHE_CAPACITY)),
        }
    }

    /// Whether `user` may `verb` on `nodes/<subresource>` of this node.
    pub async fn allows(
        &self,
        user: &User,
        verb: &str,
        subresource: &str,
    ) -> Result<bool, ReviewError> {
        let mut parts = vec!["sar", user.name.as_str(), verb, subresource];
        parts.extend(user.groups.iter().map(String::as_str));
        let key = digest(&parts);
        if let Some(hit) = lock(&self.cache).get(&key, Instant::now()) {
            return Ok(hit);
        }
        let request = NodeRequest {
            verb,
            subresource,
            node: &self.node,
        };
        let allowed = self.client.subject_access_review(user, request).await?;
        let ttl = if allowed {
            self.allowed_ttl
        } else {
            self.denied_ttl
        };
        lock(&self.cache).insert(key, allowed, ttl, Instant::now());
        Ok(allowed)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A [`ReviewClient`] answering from tables, counting calls.
    #[derive(Default)]
    pub(crate) struct Reviews {
        /// token → user (absent: not authenticated; "error": an API error).
        pub tokens: HashMap<String, User>,
        /// (user, verb, subresource) allowed.
        pub allowed: Vec<(String, String, String)>,
        /// Users whose reviews fail.
        pub failing: Vec<String>,
        pub calls: AtomicUsize,
    }

    impl ReviewClient for Reviews {
        fn token_review<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if token == "error" {
                    return Err(ReviewError::Api("down".into()));
                }
                Ok(self.tokens.get(token).cloned())
            })
        }

        fn subject_access_review<'a>(
            &'a self,
            user: &'a User,
            request: NodeRequest<'a>,
        ) -> BoxFuture<'a, Result<bool, ReviewError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                assert_eq!(request.node, "node-a");
                if self.failing.contains(&user.name) {
                    return Err(ReviewError::Api("down".into()));
                }
                Ok(self.allowed.iter().any(|(u, v, s)| {
                    *u == user.name && v == request.verb && s == request.subresource
                }))
            })
        }
    }

    pub(crate) fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn cache_expires_at_its_ttl() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(2);
        c.insert([1; 32], "a", Duration::from_secs(10), t0);
        assert_eq!(c.get(&[1; 32], t0 + Duration::from_secs(9)), Some("a"));
        assert_eq!(c.get(&[1; 32], t0 + Duration::from_secs(10)), None);
        assert_eq!(c.len(), 0, "an expired entry goes when looked up");
        c.insert([2; 32], "b", Duration::ZERO, t0);
        assert_eq!(c.get(&[2; 32], t0), None, "a zero TTL caches nothing");
        // Full: the expired entry goes first, then the soonest to expire.
        c.insert([3; 32], "c", Duration::from_secs(1), t0);
        c.insert([4; 32], "d", Duration::from_secs(5), t0);
        c.insert(
            [5; 32],
            "e",
            Duration::from_secs(5),
            t0 + Duration::from_secs(2),
        );
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&[3; 32], t0 + Duration::from_secs(2)), None);
        c.insert(
            [6; 32],
            "f",
            Duration::from_secs(9),
            t0 + Duration::from_secs(2),
        );
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&[4; 32], t0 + Duration::from_secs(2)), None);
        assert_eq!(c.get(&[6; 32], t0 + Duration::from_secs(2)), Some("f"));
    }

    #[test]
    fn digests_keep_parts_apart() {
        assert_ne!(digest(&["ab", "c"]), digest(&["a", "bc"]));
        assert_eq!(digest(&["a"]), digest(&["a"]));
    }

    #[test]
    fn the_authenticated_group_is_added_once() {
        let u = with_authenticated(user("alice", &["dev"]));
        assert_eq!(u.groups, ["dev", AUTHENTICATED_GROUP]);
        let u = with_authenticated(user("bob", &[AUTHENTICATED_GROUP]));
        assert_eq!(u.groups, [AUTHENTICATED_GROUP]);
        let u = with_authenticated(User::anonymous());
        assert_eq!(u, User::anonymous());
    }

    #[test]
    fn token_answers() {
        use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};
        let answer = |status: TokenReviewStatus| TokenReview {
            status: Some(status),
            ..Default::default()
        };
        let ok = answer(TokenReviewStatus {
            authenticated: Some(true),
            user: Some(UserInfo {
                username: Some("system:serviceaccount:monitoring:prometheus".into()),
                groups: Some(vec!["system:serviceaccounts".into()]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let u = token_status(ok).unwrap().unwrap();
        assert_eq!(u.name, "system:serviceaccount:monitoring:prometheus");
        assert_eq!(
            token_status(answer(TokenReviewStatus::default())).unwrap(),
            None
        );
        let err = answer(TokenReviewStatus {
            error: Some("token expired".into()),
            ..Default::default()
        });
        assert!(matches!(token_status(err), Err(ReviewError::Rejected(_))));
    }

    #[test]
    fn access_reviews_carry_go_s_node_attributes() {
        let r = access_review(
            &user("alice", &["dev"]),
            NodeRequest {
                verb: "get",
                subresource: "log",
                node: "node-a",
            },
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["apiVersion"], "authorization.k8s.io/v1");
        assert_eq!(json["kind"], "SubjectAccessReview");
        assert_eq!(json["spec"]["user"], "alice");
        assert_eq!(json["spec"]["groups"][0], "dev");
        let attrs = &json["spec"]["resourceAttributes"];
        assert_eq!(attrs["verb"], "get");
        assert_eq!(attrs["resource"], "nodes");
        assert_eq!(attrs["subresource"], "log");
        assert_eq!(attrs["name"], "node-a");
        assert_eq!(attrs["version"], "v1");
    }

    #[tokio::test(start_paused = true)]
    async fn token_reviews_are_cached_for_the_ttl_and_errors_are_not() {
        let mut reviews = Reviews::default();
        reviews
            .tokens
            .insert("good".into(), user("alice", &["dev"]));
        let reviews = Arc::new(reviews);
        let authn = TokenAuthenticator::new(reviews.clone(), Duration::from_secs(120));
        let u = authn.authenticate("good").await.unwrap().unwrap();
        assert_eq!(u.groups, ["dev", AUTHENTICATED_GROUP]);
        assert_eq!(authn.authenticate("bad").await.unwrap(), None);
        authn.authenticate("good").await.unwrap();
        authn.authenticate("bad").await.unwrap();
        assert_eq!(
            reviews.calls.load(Ordering::SeqCst),
            2,
            "both answers cached"
        );
        assert!(authn.authenticate("error").await.is_err());
        assert!(authn.authenticate("error").await.is_err());
        assert_eq!(
            reviews.calls.load(Ordering::SeqCst),
            4,
            "errors are not cached"
        );
        tokio::time::advance(Duration::from_secs(121)).await;
        authn.authenticate("good").await.unwrap();
        assert_eq!(
            reviews.calls.load(Ordering::SeqCst),
            5,
            "expired: asked again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn access_reviews_are_cached_by_answer() {
        let mut reviews = Reviews::default();
        reviews
            .allowed
            .push(("alice".into(), "get".into(), "log".into()));
        reviews.failing.push("carol".into());
        let reviews = Arc::new(reviews);
        let authz = WebhookAuthorizer::new(
            reviews.clone(),
            "node-a",
            Duration::from_secs(300),
            Duration::from_secs(30),
        );
        let alice = user("alice", &[]);
        let calls = || reviews.calls.load(Ordering::SeqCst);
        assert!(authz.allows(&alice, "get", "log").await.unwrap());
        assert!(!authz.allows(&alice, "get", "proxy").await.unwrap());
        assert_eq!(calls(), 2);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(authz.allows(&alice, "get", "log").await.unwrap());
        assert_eq!(calls(), 2, "allowed: cached for 5m");
        assert!(!authz.allows(&alice, "get", "proxy").await.unwrap());
        assert_eq!(calls(), 3, "denied: cached for 30s only");
        // Another group set is another question.
        let in_x = user("alice", &["x"]);
        assert!(authz.allows(&in_x, "get", "log").await.unwrap());
        assert_eq!(calls(), 4);
        let carol = user("carol", &[]);
        assert!(authz.allows(&carol, "get", "log").await.is_err());
        assert!(authz.allows(&carol, "get", "log").await.is_err());
        assert_eq!(calls(), 6, "errors are not cached");
    }
}
