//! An in-memory Kubernetes API server for tests: real wire protocol (HTTPS with client
//! certificates and bearer tokens, JSON objects, `metav1.Status` errors, chunked watches with
//! bookmarks and 410 Expired), so the kubelet's unmodified kube-rs client talks to it as to a
//! real cluster. The test plays the scheduler and the controllers (it creates pods with
//! `spec.nodeName` set, approves CSRs); the server plays etcd, kube-apiserver and the CSR signer.
//!
//! - [`store`]: objects, the resourceVersion counter, history ring and write semantics.
//! - [`resources`]: the served resources.
//! - [`http`]: routing and handlers; [`watch`]: watch streams.
//! - [`patch`], [`selectors`]: PATCH bodies, label and field selectors.
//! - [`auth`]: users, tokens, authorizer, TokenReview and SubjectAccessReview.
//! - [`pki`]: the CA, certificates and CSR signing; [`status`]: `Status` errors.
//! - [`tokens`]: TokenRequest (`serviceaccounts/<name>/token`): signed, pod-bound JWTs.
//! - [`ephemeral`]: the `pods/ephemeralcontainers` subresource (`kubectl debug`).

pub mod auth;
pub mod ephemeral;
pub mod http;
pub mod patch;
pub mod pki;
pub mod pod_update;
pub mod resources;
pub mod selectors;
pub mod status;
pub mod store;
pub mod tokens;
pub mod watch;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex, RwLock};
use std::time::Duration;

use anyhow::{Context, Result};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Mutex;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

pub use auth::{Policy, SarRequest, UserInfo};
pub use patch::PatchType;
pub use status::ApiError;
pub use store::DeleteOptions;
pub use watch::ActiveWatch;

use store::{Requester, Store};

/// How to run the server.
#[derive(Debug, Clone)]
pub struct ApiServerOptions {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Changes kept for resuming watches; older resourceVersions get 410 Expired.
    pub history_size: usize,
    /// How often watches that asked for bookmarks get one (real servers: about a minute).
    pub bookmark_interval: Duration,
    /// Approve (and so sign) every CSR when it is created.
    pub auto_approve_csrs: bool,
    /// The signer's longest certificate lifetime (kube-controller-manager's
    /// `--cluster-signing-duration`); `spec.expirationSeconds` may only shorten it.
    pub csr_signing_duration: Duration,
    /// The shortest lifetime a TokenRequest may ask for (the real server: 10 minutes; tests
    /// of token refresh lower it).
    pub min_token_expiration: Duration,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        ApiServerOptions {
            port: 0,
            history_size: 1000,
            bookmark_interval: Duration::from_secs(1),
            auto_approve_csrs: false,
            csr_signing_duration: Duration::from_secs(365 * 86400),
            min_token_expiration: Duration::from_secs(600),
        }
    }
}

/// State every connection shares.
pub(crate) struct Shared {
    pub(crate) store: Mutex<Store>,
    pub(crate) pki: pki::Pki,
    pub(crate) auth: RwLock<auth::AuthConfig>,
    pub(crate) options: ApiServerOptions,
    pub(crate) tokens: tokens::TokenIssuer,
    total: AtomicU64,
    per_verb: SyncMutex<BTreeMap<String, u64>>,
    watches: SyncMutex<BTreeMap<u64, watch::ActiveWatch>>,
    next_watch: AtomicU64,
}

/// Keeps a watch in [`Shared`]'s list of active watches while it lives.
pub(crate) struct WatchGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.shared
            .watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl Shared {
    pub(crate) fn auth(&self) -> auth::AuthConfig {
        self.auth.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Notes a watch starting; it counts until the guard is dropped.
    pub(crate) fn watch_started(self: &Arc<Self>, p: &watch::WatchParams) -> WatchGuard {
        let id = self.next_watch.fetch_add(1, Ordering::Relaxed);
        self.watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, watch::ActiveWatch::of(p));
        WatchGuard {
            shared: self.clone(),
            id,
        }
    }

    pub(crate) fn count(&self, verb: &str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut counts = self.per_verb.lock().unwrap_or_else(|e| e.into_inner());
        *counts.entry(verb.to_string()).or_default() += 1;
    }

    /// Signs an approved CSR's request into `status.certificate` (the signer controller's job).
    pub(crate) async fn sign_if_approved(&self, name: &str) -> Result<(), ApiError> {
        let res = csr_resource()?;
        let mut store = self.store.lock().await;
        let csr = store.get(res, "", name)?;
        let approved = csr
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter().any(|c| c.get("type") == Some(&json!("Approved")))
                    && !c.iter().any(|c| c.get("type") == Some(&json!("Denied")))
            });
        if !approved || csr.pointer("/status/certificate").is_some() {
            return Ok(());
        }
        let signer = csr
            .pointer("/spec/signerName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if signer != pki::CLIENT_KUBELET_SIGNER && signer != pki::KUBELET_SERVING_SIGNER {
            // Another signer's CSR: nobody here signs it, as on a cluster without that signer.
            return Ok(());
        }
        let request = csr
            .pointer("/spec/request")
            .and_then(Value::as_str)
            .unwrap_or("");
        let pem = B64
            .decode(request)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| ApiError::bad_request("spec.request is not base64 PEM"))?;
        let mut lifetime = self.options.csr_signing_duration;
        if let Some(secs) = csr
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_u64)
        {
            lifetime = lifetime.min(Duration::from_secs(secs));
        }
        let mut updated = csr.clone();
        match self.pki.sign_csr(&pem, signer, lifetime) {
            Ok(cert) => {
                if let Some(Value::Object(status)) = updated.get_mut("status") {
                    status.insert("certificate".into(), json!(B64.encode(cert)));
                }
            }
            Err(e) => {
                // The real signer marks the CSR Failed when it cannot sign it.
                let failed = json!({"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                    "message": e.to_string(), "lastUpdateTime": store::now_rfc3339()});
                if let Some(Value::Array(c)) = updated.pointer_mut("/status/conditions") {
                    c.push(failed);
                }
            }
        }
        store.update(res, "", name, updated, Some("status"))?;
        Ok(())
    }

    /// Adds the Approved (or Denied) condition, as `kubectl certificate approve|deny`.
    pub(crate) async fn decide_csr(&self, name: &str, approve: bool) -> Result<Value, ApiError> {
        let res = csr_resource()?;
        {
            let mut store = self.store.lock().await;
            let mut csr = store.get(res, "", name)?;
            let (kind, reason, message) = if approve {
                (
                    "Approved",
                    "KubectlApprove",
                    "This CSR was approved by kubectl certificate approve.",
                )
            } else {
                (
                    "Denied",
                    "KubectlDeny",
                    "This CSR was denied by kubectl certificate deny.",
                )
            };
            let condition = json!({"type": kind, "status": "True", "reason": reason, "message": message,
                "lastUpdateTime": store::now_rfc3339(), "lastTransitionTime": store::now_rfc3339()});
            let status = csr
                .as_object_mut()
                .map(|m| m.entry("status").or_insert_with(|| json!({})));
            if let Some(Value::Object(status)) = status {
                let conditions = status.entry("conditions").or_insert_with(|| json!([]));
                if let Value::Array(c) = conditions {
                    c.retain(|c| c.get("type") != Some(&json!(kind)));
                    c.push(condition);
                }
            }
            store.update(res, "", name, csr, Some("approval"))?;
        }
        self.sign_if_approved(name).await?;
        self.store.lock().await.get(res, "", name)
    }
}

fn csr_resource() -> Result<&'static resources::ResourceType, ApiError> {
    resources::find("certificates.k8s.io", "v1", "certificatesigningrequests")
        .ok_or_else(|| ApiError::internal("no CSR resource"))
}

fn resource(name: &str) -> Result<&'static resources::ResourceType, ApiError> {
    resources::by_name(name).ok_or_else(|| ApiError::no_route(name))
}

/// A running in-memory API server. Stops on drop.
pub struct TestApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: TlsAcceptor,
    server: SyncMutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for TestApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApiServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn tls_config(pki: &pki::Pki) -> Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(pki.ca_der()))?;
    // Client certificates are optional: without one a request is anonymous (or uses a token).
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()?;
    let certs = CertificateDer::pem_slice_iter(pki.server_cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .context("reading the serving certificate")?;
    let key = PrivateKeyDer::from_pem_slice(pki.server_key_pem.as_bytes())
        .context("reading the serving key")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor, shared: Arc<Shared>) {
    // Connections live in this set: aborting the loop (pause, stop) drops them all.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(http::connection(stream, acceptor.clone(), shared.clone()));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

impl TestApiServer {
    /// Starts the server on the current tokio runtime.
    pub async fn start(options: ApiServerOptions) -> Result<TestApiServer> {
        // rustls needs a process default provider for the clients in the same test process.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let pki = pki::Pki::new()?;
        let acceptor = TlsAcceptor::from(tls_config(&pki)?);
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, options.port)))
            .await
            .context("binding the test API server")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(options.history_size)),
            pki,
            auth: RwLock::new(auth::AuthConfig::default()),
            options,
            tokens: tokens::TokenIssuer::new()?,
            total: AtomicU64::new(0),
            per_verb: SyncMutex::new(BTreeMap::new()),
            watches: SyncMutex::new(BTreeMap::new()),
            next_watch: AtomicU64::new(0),
        });
        let server = tokio::spawn(accept_loop(listener, acceptor.clone(), shared.clone()));
        Ok(TestApiServer {
            shared,
            addr,
            acceptor,
            server: SyncMutex::new(Some(server)),
        })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA certificate (PEM) that signs the serving and client certificates.
    pub fn ca_pem(&self) -> String {
        self.shared.pki.ca_pem()
    }

    /// A client certificate and key (PEM) for `user` in `groups` (at most two).
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<(String, String)> {
        self.shared.pki.client_cert(user, groups)
    }

    /// Writes a client-certificate kubeconfig (embedded data, as kubeadm writes them).
    pub fn write_kubeconfig(&self, path: &Path, user: &str, groups: &[&str]) -> Result<()> {
        let (cert, key) = self.client_cert(user, groups)?;
        let user_entry = json!({"client-certificate-data": B64.encode(cert), "client-key-data": B64.encode(key)});
        self.write_config(path, user, user_entry)
    }

    /// Writes a bearer-token kubeconfig (a bootstrap kubeconfig).
    pub fn write_token_kubeconfig(&self, path: &Path, token: &str) -> Result<()> {
        self.write_config(path, "tls-bootstrap-token-user", json!({"token": token}))
    }

    fn write_config(&self, path: &Path, user: &str, user_entry: Value) -> Result<()> {
        let context = format!("{user}@kubernetes");
        // JSON is YAML: kube-rs and client-go read it alike.
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubernetes", "cluster": {
                "server": self.url(),
                "certificate-authority-data": B64.encode(self.ca_pem()),
            }}],
            "users": [{"name": user, "user": user_entry}],
            "contexts": [{"name": context, "context": {"cluster": "kubernetes", "user": user}}],
            "current-context": context,
            "preferences": {},
        });
        std::fs::write(path, serde_json::to_vec_pretty(&config)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Makes `token` authenticate as `user` in `groups`.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        let info = UserInfo::authenticated(user, &groups);
        let mut auth = self.shared.auth.write().unwrap_or_else(|e| e.into_inner());
        auth.tokens.insert(token.to_string(), info);
    }

    /// Replaces the request authorizer (default: any authenticated user may do anything).
    pub fn set_authorizer(&self, policy: impl Fn(&SarRequest) -> bool + Send + Sync + 'static) {
        self.shared
            .auth
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .authorizer = Arc::new(policy);
    }

    /// Replaces the SubjectAccessReview policy (default: `system:masters` only).
    pub fn set_sar_policy(&self, policy: impl Fn(&SarRequest) -> bool + Send + Sync + 'static) {
        self.shared
            .auth
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .sar_policy = Arc::new(policy);
    }

    /// Creates an object of `resource` (`pods`, `leases`, `events.events.k8s.io`, …) in `ns`.
    pub async fn create(
        &self,
        resource_name: &str,
        ns: &str,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let res = resource(resource_name)?;
        let created = self.shared.store.lock().await.create(res, ns, obj, None)?;
        self.after_csr_write(res, &created).await?;
        Ok(created)
    }

    /// One object.
    pub async fn get(&self, resource_name: &str, ns: &str, name: &str) -> Result<Value, ApiError> {
        let res = resource(resource_name)?;
        self.shared.store.lock().await.get(res, ns, name)
    }

    /// The objects of `resource` in `ns` (all namespaces if `None`).
    pub async fn list(
        &self,
        resource_name: &str,
        ns: Option<&str>,
    ) -> Result<Vec<Value>, ApiError> {
        let res = resource(resource_name)?;
        Ok(self
            .shared
            .store
            .lock()
            .await
            .list(res, ns, &selectors::Selector::default()))
    }

    /// Replaces an object (its status is kept; see [`Self::update_status`]).
    pub async fn update(
        &self,
        resource_name: &str,
        ns: &str,
        name: &str,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let res = resource(resource_name)?;
        self.shared
            .store
            .lock()
            .await
            .update(res, ns, name, obj, None)
    }

    /// Replaces an object's status.
    pub async fn update_status(
        &self,
        resource_name: &str,
        ns: &str,
        name: &str,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let res = resource(resource_name)?;
        self.shared
            .store
            .lock()
            .await
            .update(res, ns, name, obj, Some("status"))
    }

    /// Patches an object (`sub`: None or `status`).
    pub async fn patch(
        &self,
        resource_name: &str,
        ns: &str,
        name: &str,
        kind: PatchType,
        patch: &Value,
        sub: Option<&str>,
    ) -> Result<Value, ApiError> {
        let res = resource(resource_name)?;
        self.shared
            .store
            .lock()
            .await
            .patch(res, ns, name, kind, patch, sub)
    }

    /// Deletes an object with default options (pods on a node: gracefully).
    pub async fn delete(
        &self,
        resource_name: &str,
        ns: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.delete_with(resource_name, ns, name, &DeleteOptions::default())
            .await
    }

    /// Deletes an object with `opts`.
    pub async fn delete_with(
        &self,
        resource_name: &str,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let res = resource(resource_name)?;
        self.shared.store.lock().await.delete(res, ns, name, opts)
    }

    /// The current resourceVersion.
    pub async fn resource_version(&self) -> u64 {
        self.shared.store.lock().await.resource_version()
    }

    /// Approves a CSR like `kubectl certificate approve`; the signer then signs it.
    pub async fn approve_csr(&self, name: &str) -> Result<Value, ApiError> {
        self.shared.decide_csr(name, true).await
    }

    /// Denies a CSR like `kubectl certificate deny`.
    pub async fn deny_csr(&self, name: &str) -> Result<Value, ApiError> {
        self.shared.decide_csr(name, false).await
    }

    async fn after_csr_write(
        &self,
        res: &resources::ResourceType,
        obj: &Value,
    ) -> Result<(), ApiError> {
        if res.plural == "certificatesigningrequests" && self.shared.options.auto_approve_csrs {
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            self.shared.decide_csr(name, true).await?;
        }
        Ok(())
    }

    /// Forgets the watch history: the next watch resuming from an older RV gets 410 Expired.
    pub async fn expire_history(&self) {
        self.shared.store.lock().await.expire_history();
    }

    /// Stops listening and drops every connection and watch; the state stays.
    pub async fn pause(&self) {
        let handle = self.server.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            handle.abort();
            // Wait until the listener and connections are really gone.
            let _ = handle.await;
        }
    }

    /// Listens again on the same port, with the same state.
    pub async fn resume(&self) -> Result<()> {
        if self
            .server
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            return Ok(());
        }
        let listener = TcpListener::bind(self.addr)
            .await
            .with_context(|| format!("binding {} again", self.addr))?;
        let handle = tokio::spawn(accept_loop(
            listener,
            self.acceptor.clone(),
            self.shared.clone(),
        ));
        *self.server.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        Ok(())
    }

    /// Requests served since start (every verb, non-resource paths included).
    pub fn request_count(&self) -> u64 {
        self.shared.total.load(Ordering::Relaxed)
    }

    /// Requests served per verb (get, list, watch, create, update, patch, delete, other).
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        self.shared
            .per_verb
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The watches being served now (sorted), e.g. to check that a client stopped one.
    pub fn active_watches(&self) -> Vec<ActiveWatch> {
        let mut watches: Vec<ActiveWatch> = self
            .shared
            .watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        watches.sort();
        watches
    }

    /// The claims of a service-account token this server issued (TokenRequest), if its
    /// signature is this server's; expiry is not checked.
    pub fn verify_token(&self, token: &str) -> Option<Value> {
        self.shared.tokens.verify(token)
    }

    /// A kube client authenticated by a client certificate for `user` in `groups` (at most
    /// two), as a kubeconfig the server writes would give.
    pub async fn kube_client(&self, user: &str, groups: &[&str]) -> Result<kube::Client> {
        let dir = tempfile::tempdir().context("a directory for the kubeconfig")?;
        let path = dir.path().join("kubeconfig");
        self.write_kubeconfig(&path, user, groups)?;
        let kubeconfig = kube::config::Kubeconfig::read_from(&path)?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Stops the server (also done on drop).
    pub async fn stop(self) {
        self.pause().await;
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        if let Some(handle) = self.server.lock().unwrap_or_else(|e| e.into_inner()).take() {
            handle.abort();
        }
    }
}

/// Who wrote: the requester fields the server fills in (CSR `spec.username`).
pub(crate) fn requester(user: &UserInfo) -> Requester {
    Requester {
        user: user.name.clone(),
        uid: user.uid.clone(),
        groups: user.groups.clone(),
    }
}
