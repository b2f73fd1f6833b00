//! The registry v2 HTTP client: resolve a reference to an image manifest, stream blobs.
//!
//! Built on `reqwest` 0.12 with only `rustls-tls-native-roots` and `stream`: it shares
//! hyper, hyper-util and http with tonic (already in the tree), and gives us connection
//! pooling, redirects that drop `Authorization` when they leave the host (blob downloads are
//! often redirected to object storage), timeouts and TLS with the system's roots plus per-host
//! CAs. A hand-built hyper-util client would need all of that rewritten. rustls runs on the
//! `ring` provider: reqwest falls back to ring when no process-wide provider is installed, so
//! the server needs no start-up call, and aws-lc is never compiled. HTTP/1.1 only: parallel
//! layer downloads then use parallel connections instead of sharing one HTTP/2 window.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, RANGE, WWW_AUTHENTICATE};
use reqwest::{RequestBuilder, Response, StatusCode, Url};
use sha2::Digest as _;

use crate::reference::Reference;
use crate::registry::auth::parse_www_authenticate;
use crate::registry::auth::{Challenge, Credentials, TokenResponse, basic_header};
use crate::registry::error::RegistryError;
use crate::registry::hosts::{Endpoint, HostsConfig};
use crate::registry::manifest::{
    Descriptor, DescriptorExt, Kind, MANIFEST_ACCEPT, check_supported, current_platform,
    descriptor, detect_media_type, kind_of, parse_index, parse_manifest, platform_string,
    platforms_of, select_platform,
};

/// A TCP connect that takes longer than this means the registry is unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest silence on a connection (headers or body) before giving up; a stalled blob
/// download otherwise hangs a pull forever.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Whole-request limit for the small requests (manifests, tokens); blobs have none.
const SMALL_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// containerd's limit on a manifest; anything larger is not a manifest.
const MANIFEST_MAX: usize = 4 << 20;
/// Limit on token responses and error bodies.
const SMALL_BODY_MAX: usize = 1 << 20;
/// Limit for [`Session::fetch_blob_bytes`] (image configs are kilobytes; history can grow).
const BLOB_BYTES_MAX: u64 = 64 << 20;
/// Redirects followed per request (reqwest's default, stated here because blobs rely on it).
const MAX_REDIRECTS: usize = 10;
/// OAuth2 client id sent with refresh-token grants, as docker sends its own name.
const OAUTH_CLIENT_ID: &str = "ferrolet";

/// A registry client for all pulls of one process; cheap to clone.
#[derive(Clone)]
pub struct RegistryClient {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    hosts: HostsConfig,
    /// For hosts without TLS settings of their own.
    http: reqwest::Client,
    /// Hosts with `ca_file` or `skip_verify`, by domain as configured.
    tls: HashMap<String, reqwest::Client>,
}

fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .user_agent(concat!("ferrolet-cri/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS))
}

impl RegistryClient {
    /// Builds the HTTP clients for `hosts`; fails on a bad endpoint, CA file or TLS setup.
    pub fn new(hosts: HostsConfig) -> Result<Self, RegistryError> {
        hosts
            .validate()
            .map_err(|detail| RegistryError::Config { detail })?;
        let config = |detail: String| RegistryError::Config { detail };
        let http = builder()
            .build()
            .map_err(|e| config(format!("HTTP client: {e}")))?;
        let mut tls = HashMap::new();
        for (domain, cfg) in hosts.hosts.iter().filter(|(_, c)| c.custom_tls()) {
            let mut b = builder().danger_accept_invalid_certs(cfg.skip_verify);
            if let Some(path) = &cfg.ca_file {
                let pem = std::fs::read(path)
                    .map_err(|e| config(format!("{domain}: ca_file {}: {e}", path.display())))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| config(format!("{domain}: ca_file {}: {e}", path.display())))?;
                for c in certs {
                    b = b.add_root_certificate(c);
                }
            }
            let client = b
                .build()
                .map_err(|e| config(format!("{domain}: HTTP client: {e}")))?;
            tls.insert(domain.clone(), client);
        }
        Ok(Self {
            inner: Arc::new(ClientInner { hosts, http, tls }),
        })
    }

    /// Starts a pull of `reference`. `credentials` (from the CRI request) win over the host's
    /// configured defaults.
    pub fn session(&self, reference: &Reference, credentials: Option<Credentials>) -> Session {
        let hosts = &self.inner.hosts;
        let entry = hosts.entry(&reference.domain);
        let host_cfg = entry.map(|(_, c)| c);
        let http = entry
            .and_then(|(key, _)| self.inner.tls.get(key))
            .unwrap_or(&self.inner.http)
            .clone();
        let credentials = credentials
            .filter(|c| !c.is_empty())
            .or_else(|| host_cfg.and_then(|c| c.credentials()));
        Session {
            inner: Arc::new(SessionInner {
                http,
                reference: reference.clone(),
                endpoints: hosts.endpoints(&reference.domain),
                credentials,
                chosen: Mutex::new(None),
                auth: Mutex::new(HashMap::new()),
            }),
        }
    }
}

/// One pull's state: the endpoint that served the manifest and the `Authorization` each
/// endpoint accepted. Cheap to clone; clones share the state, so layers can be fetched from
/// several tasks.
#[derive(Clone)]
pub struct Session {
    inner: Arc<SessionInner>,
}

struct SessionInner {
    http: reqwest::Client,
    reference: Reference,
    endpoints: Result<Vec<Endpoint>, String>,
    credentials: Option<Credentials>,
    /// Index into `endpoints` of the one that resolved the manifest.
    chosen: Mutex<Option<usize>>,
    /// `Authorization` header value per endpoint index.
    auth: Mutex<HashMap<usize, String>>,
}

/// A reference resolved to one image manifest for this node's platform.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The image manifest (for an index: the chosen entry).
    pub manifest: Descriptor,
    /// The manifest's exact bytes (its digest is `manifest.digest`).
    pub manifest_bytes: Bytes,
    /// The image config blob.
    pub config: Descriptor,
    /// Layers, base first.
    pub layers: Vec<Descriptor>,
    /// The index or manifest list the reference named, when it named one.
    pub index: Option<(Descriptor, Bytes)>,
}

/// Lock a mutex whose data stays valid even if a holder panicked (plain maps and indexes).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `algorithm:hex` of `data`, for the algorithms references accept.
fn digest_of(algorithm: &str, data: &[u8]) -> Option<String> {
    let hex = match algorithm {
        "sha256" => hex::encode(sha2::Sha256::digest(data)),
        "sha384" => hex::encode(sha2::Sha384::digest(data)),
        "sha512" => hex::encode(sha2::Sha512::digest(data)),
        _ => return None,
    };
    Some(format!("{algorithm}:{hex}"))
}

/// The first entry of a registry's `{"errors":[{"code","message"}]}` body.
fn registry_error(body: &[u8]) -> (Option<String>, String) {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(default)]
        errors: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<Body>(body) {
        Ok(b) if !b.errors.is_empty() => {
            let e = &b.errors[0];
            (Some(e.code.clone()), format!("{} {}", e.code, e.message))
        }
        _ => (
            None,
            String::from_utf8_lossy(body)
                .trim()
                .chars()
                .take(200)
                .collect(),
        ),
    }
}

impl Session {
    /// The reference this session pulls.
    pub fn reference(&self) -> &Reference {
        &self.inner.reference
    }

    /// `host:port` of the endpoint that resolved the manifest, once [`Session::resolve`] has.
    pub fn endpoint(&self) -> Option<String> {
        let chosen = (*lock(&self.inner.chosen))?;
        let eps = self.inner.endpoints.as_ref().ok()?;
        eps.get(chosen).map(|e| e.address.clone())
    }

    fn registry(&self) -> &str {
        &self.inner.reference.domain
    }

    fn endpoints(&self) -> Result<&[Endpoint], RegistryError> {
        self.inner
            .endpoints
            .as_deref()
            .map_err(|detail| RegistryError::Config {
                detail: format!("{}: {detail}", self.registry()),
            })
    }

    fn protocol(&self, ep: &Endpoint, detail: impl std::fmt::Display) -> RegistryError {
        RegistryError::Protocol {
            registry: if ep.mirror {
                format!("{} (mirror {})", self.registry(), ep.address)
            } else {
                self.registry().to_string()
            },
            detail: detail.to_string(),
        }
    }

    /// Resolves the reference: fetches the manifest (through an index to this node's
    /// platform), checking digests. Tries each mirror in order, then the host itself.
    pub async fn resolve(&self) -> Result<Resolved, RegistryError> {
        let eps = self.endpoints()?;
        let mut last = None;
        for (i, ep) in eps.iter().enumerate() {
            match self.resolve_at(i, ep).await {
                Ok(r) => {
                    *lock(&self.inner.chosen) = Some(i);
                    return Ok(r);
                }
                Err(e) if ep.mirror => {
                    tracing::warn!(mirror = %ep.address, error = %e, "registry mirror failed; trying the next endpoint");
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        // The host's own endpoint is always last, so this is only reached with no endpoints.
        Err(last.unwrap_or_else(|| RegistryError::Config {
            detail: format!("{}: no endpoints", self.registry()),
        }))
    }

    async fn resolve_at(&self, idx: usize, ep: &Endpoint) -> Result<Resolved, RegistryError> {
        let r = &self.inner.reference;
        let (desc, bytes) = self
            .get_manifest(idx, ep, r.object(), r.digest.as_deref())
            .await?;
        match kind_of(desc.media_type_str()) {
            Some(Kind::Manifest) => self.finish(ep, desc, bytes, None),
            Some(Kind::Index) => {
                let entries = parse_index(&bytes).map_err(|d| self.protocol(ep, d))?;
                let want = current_platform();
                let Some(entry) = select_platform(&entries, &want) else {
                    return Err(RegistryError::NoMatchingPlatform {
                        reference: r.to_string(),
                        platform: platform_string(&want),
                        available: platforms_of(&entries).join(", "),
                    });
                };
                let child = entry;
                child.validate().map_err(|d| self.protocol(ep, d))?;
                let (cdesc, cbytes) = self
                    .get_manifest(idx, ep, child.digest_str(), Some(child.digest_str()))
                    .await?;
                if kind_of(cdesc.media_type_str()) != Some(Kind::Manifest) {
                    return Err(self.protocol(
                        ep,
                        format!(
                            "index entry {} for {} is {}, not an image manifest",
                            child.digest_str(),
                            platform_string(&want),
                            cdesc.media_type_str()
                        ),
                    ));
                }
                self.finish(ep, cdesc, cbytes, Some((desc, bytes)))
            }
            Some(Kind::Schema1) => Err(RegistryError::Unsupported {
                reference: r.to_string(),
                detail: "Docker schema1 manifests are deprecated and not supported; push the \
                         image again with a current client"
                    .to_string(),
            }),
            None => Err(RegistryError::Unsupported {
                reference: r.to_string(),
                detail: format!("unknown manifest media type {:?}", desc.media_type_str()),
            }),
        }
    }

    fn finish(
        &self,
        ep: &Endpoint,
        manifest: Descriptor,
        manifest_bytes: Bytes,
        index: Option<(Descriptor, Bytes)>,
    ) -> Result<Resolved, RegistryError> {
        let parsed = parse_manifest(&manifest_bytes).map_err(|d| self.protocol(ep, d))?;
        check_supported(&parsed).map_err(|detail| RegistryError::Unsupported {
            reference: self.inner.reference.to_string(),
            detail,
        })?;
        Ok(Resolved {
            manifest,
            manifest_bytes,
            config: parsed.config().clone(),
            layers: parsed.layers().clone(),
            index,
        })
    }

    /// GETs a manifest by tag or digest; with `expect` the body must hash to it, otherwise
    /// the digest is computed from the exact bytes received.
    async fn get_manifest(
        &self,
        idx: usize,
        ep: &Endpoint,
        object: &str,
        expect: Option<&str>,
    ) -> Result<(Descriptor, Bytes), RegistryError> {
        let r = &self.inner.reference;
        let url = ep
            .url(&format!("/v2/{}/manifests/{object}", r.repository))
            .map_err(|d| self.protocol(ep, d))?;
        let what = match expect {
            Some(d) if r.digest.as_deref() != Some(d) => format!("{}@{d}", r.name()),
            _ => r.to_string(),
        };
        let resp = self
            .send(idx, ep, || {
                self.inner
                    .http
                    .get(url.clone())
                    .header(ACCEPT, MANIFEST_ACCEPT)
                    .timeout(SMALL_REQUEST_TIMEOUT)
            })
            .await?;
        let resp = self.check(ep, resp, &what).await?;
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = self.read_limited(ep, resp, MANIFEST_MAX).await?;
        let digest = match expect {
            Some(want) => {
                let algorithm = want.split(':').next().unwrap_or("");
                let got = digest_of(algorithm, &body);
                if got.as_deref() != Some(want) {
                    return Err(self.protocol(
                        ep,
                        format!(
                            "manifest for {what} does not match its digest (got {})",
                            got.unwrap_or_default()
                        ),
                    ));
                }
                want.to_string()
            }
            None => digest_of("sha256", &body).unwrap_or_default(),
        };
        let media_type =
            detect_media_type(content_type.as_deref(), &body).map_err(|d| self.protocol(ep, d))?;
        let size = u64::try_from(body.len()).unwrap_or(u64::MAX);
        let desc = descriptor(&media_type, &digest, size).map_err(|d| self.protocol(ep, d))?;
        Ok((desc, Bytes::from(body)))
    }

    /// Streams a blob from the endpoint that resolved the manifest (or the first one, if
    /// [`Session::resolve`] was not called), moving on through later endpoints if a mirror
    /// fails. Redirects are followed; `Authorization` is not sent to another host.
    pub async fn fetch_blob(&self, desc: &Descriptor) -> Result<BlobStream, RegistryError> {
        self.fetch_blob_from(desc, 0).await
    }

    /// Like [`Session::fetch_blob`] but starting at byte `offset`, to resume an interrupted
    /// write. The stream yields only bytes from `offset` on, whether or not the registry
    /// honours `Range`.
    pub async fn fetch_blob_from(
        &self,
        desc: &Descriptor,
        offset: u64,
    ) -> Result<BlobStream, RegistryError> {
        let eps = self.endpoints()?;
        let start = (*lock(&self.inner.chosen)).unwrap_or(0);
        let mut last = None;
        for (i, ep) in eps.iter().enumerate().skip(start) {
            match self.blob_at(i, ep, desc, offset).await {
                Ok(s) => return Ok(s),
                Err(e) if ep.mirror => {
                    tracing::warn!(mirror = %ep.address, digest = %desc.digest_str(), error = %e, "registry mirror failed for a blob; trying the next endpoint");
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| RegistryError::Config {
            detail: format!("{}: no endpoints", self.registry()),
        }))
    }

    async fn blob_at(
        &self,
        idx: usize,
        ep: &Endpoint,
        desc: &Descriptor,
        offset: u64,
    ) -> Result<BlobStream, RegistryError> {
        desc.validate().map_err(|d| self.protocol(ep, d))?;
        let size = desc.size();
        let what = format!("{}@{}", self.inner.reference.name(), desc.digest_str());
        if offset > size {
            return Err(self.protocol(
                ep,
                format!("resume offset {offset} is past the end of {what} ({size} bytes)"),
            ));
        }
        let progress = Arc::new(AtomicU64::new(offset));
        let mut stream = BlobStream {
            body: Box::pin(futures::stream::empty()),
            address: ep.address.clone(),
            registry: self.registry().to_string(),
            digest: desc.digest_str().to_string(),
            size,
            offset,
            position: offset,
            skip: 0,
            progress,
            done: false,
        };
        if offset == size && offset > 0 {
            // Nothing left; a Range request would be answered 416.
            return Ok(stream);
        }
        let url = ep
            .url(&format!(
                "/v2/{}/blobs/{}",
                self.inner.reference.repository,
                desc.digest_str()
            ))
            .map_err(|d| self.protocol(ep, d))?;
        let resp = self
            .send(idx, ep, || {
                let rb = self.inner.http.get(url.clone());
                if offset > 0 {
                    rb.header(RANGE, format!("bytes={offset}-"))
                } else {
                    rb
                }
            })
            .await?;
        let resp = self.check(ep, resp, &what).await?;
        if offset > 0 && resp.status() != StatusCode::PARTIAL_CONTENT {
            // The registry ignored Range and sends the whole blob: drop what we already have.
            stream.skip = offset;
        }
        stream.body = Box::pin(resp.bytes_stream());
        Ok(stream)
    }

    /// Reads a small blob (an image config) whole and checks its digest.
    pub async fn fetch_blob_bytes(&self, desc: &Descriptor) -> Result<Bytes, RegistryError> {
        let size = desc.size();
        if size > BLOB_BYTES_MAX {
            return Err(RegistryError::Protocol {
                registry: self.registry().to_string(),
                detail: format!(
                    "{} is {size} bytes, over the {BLOB_BYTES_MAX}-byte limit for in-memory blobs",
                    desc.digest_str()
                ),
            });
        }
        let mut stream = self.fetch_blob(desc).await?;
        let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        while let Some(chunk) = stream.next().await {
            buf.extend_from_slice(&chunk?);
        }
        let algorithm = desc.digest_str().split(':').next().unwrap_or("");
        let got = digest_of(algorithm, &buf);
        if got.as_deref() != Some(desc.digest_str()) {
            return Err(RegistryError::Protocol {
                registry: self.registry().to_string(),
                detail: format!(
                    "blob {} does not match its digest (got {})",
                    desc.digest_str(),
                    got.unwrap_or_default()
                ),
            });
        }
        Ok(Bytes::from(buf))
    }

    /// Sends a request, answering one 401 challenge: the request is built again with the new
    /// `Authorization` and sent once more. A second 401 is returned for [`Session::check`].
    async fn send<F>(&self, idx: usize, ep: &Endpoint, make: F) -> Result<Response, RegistryError>
    where
        F: Fn() -> RequestBuilder,
    {
        let mut challenged = false;
        loop {
            let mut rb = make();
            let cached = lock(&self.inner.auth).get(&idx).cloned();
            if let Some(h) = cached {
                rb = rb.header(AUTHORIZATION, h);
            }
            let resp = rb
                .send()
                .await
                .map_err(|e| RegistryError::unavailable(&ep.address, e))?;
            if resp.status() != StatusCode::UNAUTHORIZED || challenged {
                return Ok(resp);
            }
            challenged = true;
            let challenges: Vec<Challenge> = resp
                .headers()
                .get_all(WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(parse_www_authenticate)
                .collect();
            let header = self.authorize(ep, &challenges).await?;
            lock(&self.inner.auth).insert(idx, header);
        }
    }

    fn unauthenticated(&self, ep: &Endpoint, detail: String) -> RegistryError {
        RegistryError::Unauthenticated {
            registry: self.registry().to_string(),
            detail: format!("{detail} (endpoint {})", ep.address),
        }
    }

    /// The `Authorization` value answering `challenges`: bearer (token server) if offered,
    /// else basic with the session's credentials.
    async fn authorize(
        &self,
        ep: &Endpoint,
        challenges: &[Challenge],
    ) -> Result<String, RegistryError> {
        let creds = self.inner.credentials.as_ref();
        if let Some(c) = challenges.iter().find(|c| c.scheme == "bearer") {
            if let Some(token) = creds
                .map(|c| c.registry_token.as_str())
                .filter(|t| !t.is_empty())
            {
                return Ok(format!("Bearer {token}"));
            }
            let token = self.fetch_token(ep, c).await?;
            return Ok(format!("Bearer {token}"));
        }
        if challenges.iter().any(|c| c.scheme == "basic") {
            let basic = match creds.map(Credentials::basic).transpose() {
                Ok(b) => b.flatten(),
                Err(d) => {
                    return Err(self.unauthenticated(ep, format!("unusable credentials: {d}")));
                }
            };
            return match basic {
                Some((u, p)) => Ok(basic_header(&u, &p)),
                None => Err(self.unauthenticated(
                    ep,
                    "basic authentication required and no user name or password was given"
                        .to_string(),
                )),
            };
        }
        Err(self.unauthenticated(
            ep,
            "answered 401 without a Basic or Bearer challenge".to_string(),
        ))
    }

    /// Gets a bearer token from the challenge's realm for pulling our repository: GET with
    /// basic credentials (or anonymous), or an OAuth2 refresh-token POST with an identity
    /// token.
    async fn fetch_token(&self, ep: &Endpoint, c: &Challenge) -> Result<String, RegistryError> {
        let realm = c
            .param("realm")
            .ok_or_else(|| self.protocol(ep, "Bearer challenge without a realm"))?;
        let realm_url = Url::parse(realm)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
            .ok_or_else(|| self.protocol(ep, format!("Bearer realm {realm:?} is not a URL")))?;
        let realm_addr = format!(
            "{}:{}",
            realm_url.host_str().unwrap_or_default(),
            realm_url.port_or_known_default().unwrap_or_default()
        );
        let mut scopes: Vec<String> = c
            .param("scope")
            .map(|s| {
                s.split(' ')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let ours = format!("repository:{}:pull", self.inner.reference.repository);
        if !scopes.contains(&ours) {
            scopes.push(ours);
        }
        let service = c.param("service");
        let creds = self.inner.credentials.as_ref();
        let http = &self.inner.http;
        let rb = match creds.filter(|c| !c.identity_token.is_empty()) {
            Some(creds) => {
                let scope = scopes.join(" ");
                let mut form = vec![
                    ("grant_type", "refresh_token"),
                    ("refresh_token", creds.identity_token.as_str()),
                    ("client_id", OAUTH_CLIENT_ID),
                    ("scope", scope.as_str()),
                ];
                if let Some(s) = service {
                    form.push(("service", s));
                }
                http.post(realm_url).form(&form)
            }
            None => {
                let mut query: Vec<(&str, &str)> =
                    scopes.iter().map(|s| ("scope", s.as_str())).collect();
                if let Some(s) = service {
                    query.push(("service", s));
                }
                let rb = http.get(realm_url).query(&query);
                let basic = match creds.map(Credentials::basic).transpose() {
                    Ok(b) => b.flatten(),
                    Err(d) => {
                        return Err(self.unauthenticated(ep, format!("unusable credentials: {d}")));
                    }
                };
                match basic {
                    Some((u, p)) => rb.basic_auth(u, Some(p)),
                    None => rb,
                }
            }
        };
        let resp = rb
            .timeout(SMALL_REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| RegistryError::unavailable(&realm_addr, e))?;
        let status = resp.status();
        if !status.is_success() {
            let body = read_body(resp, SMALL_BODY_MAX).await.unwrap_or_default();
            let (_, said) = registry_error(&body);
            let detail = format!("token server {realm_addr} answered {status}: {said}");
            return Err(match status.as_u16() {
                401 if creds.is_some() => {
                    self.unauthenticated(ep, format!("credentials rejected; {detail}"))
                }
                401 => self.unauthenticated(ep, format!("no credentials given; {detail}")),
                403 => RegistryError::PermissionDenied {
                    registry: self.registry().to_string(),
                    detail,
                },
                429 | 500..=599 => RegistryError::Unavailable {
                    address: realm_addr,
                    detail,
                    source: None,
                },
                _ => self.protocol(ep, detail),
            });
        }
        let body = self.read_limited(ep, resp, SMALL_BODY_MAX).await?;
        let token: TokenResponse = serde_json::from_slice(&body)
            .map_err(|e| self.protocol(ep, format!("token server {realm_addr}: bad JSON: {e}")))?;
        token
            .into_token()
            .ok_or_else(|| self.protocol(ep, format!("token server {realm_addr} sent no token")))
    }

    /// Turns a non-2xx answer into the matching error, using the registry's error code when
    /// it sent one.
    async fn check(
        &self,
        ep: &Endpoint,
        resp: Response,
        what: &str,
    ) -> Result<Response, RegistryError> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = read_body(resp, SMALL_BODY_MAX).await.unwrap_or_default();
        let (code, said) = registry_error(&body);
        let said = if said.is_empty() {
            status.to_string()
        } else {
            format!("{status}: {said}")
        };
        let detail = format!("{} answered {said}", ep.address);
        Err(match (status.as_u16(), code.as_deref()) {
            (403, _) | (_, Some("DENIED")) => RegistryError::PermissionDenied {
                registry: self.registry().to_string(),
                detail,
            },
            (401, _) | (_, Some("UNAUTHORIZED")) => {
                let why = if self.inner.credentials.is_some() {
                    "credentials rejected"
                } else {
                    "no credentials given"
                };
                self.unauthenticated(ep, format!("{why}; {said}"))
            }
            (404, _) | (_, Some("MANIFEST_UNKNOWN" | "NAME_UNKNOWN" | "BLOB_UNKNOWN")) => {
                RegistryError::NotFound {
                    reference: what.to_string(),
                    detail,
                }
            }
            (429 | 500..=599, _) | (_, Some("TOOMANYREQUESTS" | "UNAVAILABLE")) => {
                RegistryError::Unavailable {
                    address: ep.address.clone(),
                    detail,
                    source: None,
                }
            }
            _ => self.protocol(ep, format!("unexpected answer for {what}: {detail}")),
        })
    }

    async fn read_limited(
        &self,
        ep: &Endpoint,
        resp: Response,
        max: usize,
    ) -> Result<Vec<u8>, RegistryError> {
        match read_body(resp, max).await {
            Ok(b) => Ok(b),
            Err(ReadError::Http(e)) => Err(RegistryError::unavailable(&ep.address, e)),
            Err(ReadError::TooLarge) => {
                Err(self.protocol(ep, format!("response over {max} bytes")))
            }
        }
    }
}

enum ReadError {
    Http(reqwest::Error),
    TooLarge,
}

/// Reads a whole body, refusing more than `max` bytes.
async fn read_body(mut resp: Response, max: usize) -> Result<Vec<u8>, ReadError> {
    if resp.content_length().is_some_and(|l| l > max as u64) {
        return Err(ReadError::TooLarge);
    }
    let mut buf = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(ReadError::Http)? {
        if buf.len() + chunk.len() > max {
            return Err(ReadError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf)
}

/// A blob's bytes as they arrive, in chunks. Ends with an error if the registry sends more
/// or fewer bytes than the descriptor's size; digests are left to the content store, which
/// checks them anyway, so the bytes are not hashed twice.
pub struct BlobStream {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    address: String,
    registry: String,
    digest: String,
    size: u64,
    offset: u64,
    position: u64,
    /// Bytes still to drop because the registry ignored our `Range`.
    skip: u64,
    progress: Arc<AtomicU64>,
    done: bool,
}

impl std::fmt::Debug for BlobStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStream")
            .field("digest", &self.digest)
            .field("address", &self.address)
            .field("size", &self.size)
            .field("position", &self.position)
            .finish()
    }
}

/// A handle on a blob download's progress, readable from another task (for periodic logs).
#[derive(Debug, Clone)]
pub struct BlobProgress {
    received: Arc<AtomicU64>,
    total: u64,
}

impl BlobProgress {
    /// Bytes of the blob we have, counting a resume offset.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// The blob's size.
    pub fn total(&self) -> u64 {
        self.total
    }
}

impl BlobStream {
    /// A progress handle that stays valid while the stream is consumed elsewhere.
    pub fn progress(&self) -> BlobProgress {
        BlobProgress {
            received: self.progress.clone(),
            total: self.size,
        }
    }

    /// The blob's size from its descriptor.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The byte the stream starts at (non-zero when resuming).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// `host:port` the blob is read from (before any redirect).
    pub fn address(&self) -> &str {
        &self.address
    }

    fn fail(&mut self, e: RegistryError) -> Poll<Option<Result<Bytes, RegistryError>>> {
        self.done = true;
        Poll::Ready(Some(Err(e)))
    }
}

impl Stream for BlobStream {
    type Item = Result<Bytes, RegistryError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match ready!(this.body.as_mut().poll_next(cx)) {
                Some(Ok(mut chunk)) => {
                    if this.skip > 0 {
                        let n = usize::try_from(this.skip)
                            .unwrap_or(usize::MAX)
                            .min(chunk.len());
                        let _ = chunk.split_to(n);
                        this.skip -= n as u64;
                    }
                    if chunk.is_empty() {
                        continue;
                    }
                    // Saturating: an overflow is "longer than its size" as well.
                    let next = this
                        .position
                        .saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
                    if next > this.size {
                        let e = RegistryError::Protocol {
                            registry: this.registry.clone(),
                            detail: format!(
                                "blob {} from {} is longer than its {} bytes",
                                this.digest, this.address, this.size
                            ),
                        };
                        return this.fail(e);
                    }
                    this.position = next;
                    this.progress.store(next, Ordering::Relaxed);
                    return Poll::Ready(Some(Ok(chunk)));
                }
                Some(Err(e)) => {
                    let e = RegistryError::unavailable(&this.address, e);
                    return this.fail(e);
                }
                None if this.position != this.size => {
                    let e = RegistryError::Unavailable {
                        address: this.address.clone(),
                        detail: format!(
                            "blob {} ended after {} of {} bytes",
                            this.digest, this.position, this.size
                        ),
                        source: None,
                    };
                    return this.fail(e);
                }
                None => {
                    this.done = true;
                    return Poll::Ready(None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_error_bodies() {
        let (code, msg) = registry_error(
            br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{}}]}"#,
        );
        assert_eq!(code.as_deref(), Some("MANIFEST_UNKNOWN"));
        assert_eq!(msg, "MANIFEST_UNKNOWN manifest unknown");
        let (code, msg) = registry_error(b"<html>oops</html>");
        assert_eq!(code, None);
        assert_eq!(msg, "<html>oops</html>");
    }

    #[test]
    fn digests() {
        assert_eq!(
            digest_of("sha256", b"").as_deref(),
            Some("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        );
        assert!(digest_of("md5", b"").is_none());
    }
}
