//! Registry client tests.
//!
//! `env_*` tests run against the real registries `make env` starts on this machine:
//! 127.0.0.1:5000 (open) and 127.0.0.1:5001 (htpasswd basic auth). They fail, not skip,
//! when those are down. `fake_*` tests cover what those registries cannot show (bearer tokens,
//! indexes, redirects to storage, broken registries) with a tiny HTTP/1.1 responder on
//! 127.0.0.1:0 inside the test. Every request goes to loopback: a configured `server` keeps even
//! a failing docker.io mirror from falling back to the real Docker Hub.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use ferrolet_cri::reference::Reference;
use ferrolet_cri::registry::manifest::{
    DOCKER_CONFIG, DOCKER_LAYER_GZIP, DOCKER_MANIFEST, DOCKER_MANIFEST_LIST, OCI_CONFIG, OCI_INDEX,
    OCI_LAYER_GZIP, OCI_MANIFEST,
};
use ferrolet_cri::registry::{
    Credentials, Descriptor, DescriptorExt, HostsConfig, RegistryClient, RegistryError,
};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const OPEN: &str = "127.0.0.1:5000";
const AUTH: &str = "127.0.0.1:5001";
const ENV: &str = "/var/lib/ferrolet/env";

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// Fails the test with the fix when the env registries are not up.
fn require_env() {
    for addr in [OPEN, AUTH] {
        let sock: SocketAddr = addr.parse().unwrap();
        if std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(2)).is_err() {
            panic!("the test registry on {addr} is not reachable: run `make env`");
        }
    }
}

/// `name:1` → manifest digest, from the env's images.txt.
fn env_images() -> HashMap<String, String> {
    let text = std::fs::read_to_string(format!("{ENV}/images.txt"))
        .unwrap_or_else(|e| panic!("{ENV}/images.txt: {e}: run `make env`"));
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect()
}

fn env_credentials() -> Credentials {
    let text = std::fs::read_to_string(format!("{ENV}/registry-auth"))
        .unwrap_or_else(|e| panic!("{ENV}/registry-auth: {e}: run `make env`"));
    let (u, p) = text
        .trim()
        .split_once(':')
        .expect("registry-auth is user:password");
    Credentials {
        username: u.to_string(),
        password: p.to_string(),
        ..Default::default()
    }
}

fn client() -> RegistryClient {
    RegistryClient::new(HostsConfig::default()).unwrap()
}

fn reference(s: &str) -> Reference {
    Reference::parse(s).unwrap()
}

fn hosts(json: serde_json::Value) -> HostsConfig {
    serde_json::from_value(json).unwrap()
}

/// A loopback port nothing listens on (bound, then released).
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

async fn read_all(session: &ferrolet_cri::registry::Session, d: &Descriptor) -> Vec<u8> {
    let mut s = session.fetch_blob(d).await.unwrap();
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c.unwrap());
    }
    out
}

#[tokio::test]
async fn env_resolve_every_image_by_tag_and_digest() {
    require_env();
    let images = env_images();
    assert!(images.len() >= 6, "images.txt lists {images:?}");
    let client = client();
    for (name, digest) in &images {
        let by_tag = reference(&format!("{OPEN}/ferrolet/{name}"));
        let r = client.session(&by_tag, None).resolve().await.unwrap();
        assert_eq!(&r.manifest.digest_str(), digest, "{by_tag}");
        assert_eq!(r.manifest.digest_str(), sha256(&r.manifest_bytes));
        assert_eq!(r.manifest.size_i64(), r.manifest_bytes.len() as i64);
        assert_eq!(r.manifest.media_type_str(), OCI_MANIFEST);
        assert_eq!(r.config.media_type_str(), OCI_CONFIG);
        assert!(r.index.is_none());
        assert!(!r.layers.is_empty());

        let by_digest = by_tag.with_digest(digest).unwrap();
        let r2 = client.session(&by_digest, None).resolve().await.unwrap();
        assert_eq!(&r2.manifest.digest_str(), digest, "{by_digest}");
        assert_eq!(r2.manifest_bytes, r.manifest_bytes);
    }
    // The Docker-Hub-shaped path on the open registry.
    let r = client
        .session(&reference(&format!("{OPEN}/library/busybox:1")), None)
        .resolve()
        .await
        .unwrap();
    assert_eq!(r.manifest.digest_str(), images["busybox:1"]);
}

#[tokio::test]
async fn env_fetch_every_blob_of_layers() {
    require_env();
    let session = client().session(&reference(&format!("{OPEN}/ferrolet/layers:1")), None);
    let r = session.resolve().await.unwrap();
    assert_eq!(session.endpoint().as_deref(), Some(OPEN));
    assert!(r.layers.len() >= 2, "layers:1 has several layers");
    for d in std::iter::once(&r.config).chain(&r.layers) {
        let mut s = session.fetch_blob(d).await.unwrap();
        let progress = s.progress();
        assert_eq!(progress.total(), d.size_i64() as u64);
        let mut hasher = Sha256::new();
        let mut n = 0u64;
        while let Some(c) = s.next().await {
            let c = c.unwrap();
            n += c.len() as u64;
            hasher.update(&c);
        }
        assert_eq!(
            format!("sha256:{}", hex::encode(hasher.finalize())),
            d.digest_str()
        );
        assert_eq!(n, d.size_i64() as u64);
        assert_eq!(progress.received(), d.size_i64() as u64);
    }
    let config = session.fetch_blob_bytes(&r.config).await.unwrap();
    let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(config["os"], "linux");

    // Resuming: the registry honours Range, and the tail is exactly the blob's tail.
    let big = r.layers.iter().max_by_key(|d| d.size_i64()).unwrap();
    let whole = read_all(&session, big).await;
    let offset = whole.len() as u64 / 2;
    let mut s = session.fetch_blob_from(big, offset).await.unwrap();
    let mut tail = Vec::new();
    while let Some(c) = s.next().await {
        tail.extend_from_slice(&c.unwrap());
    }
    assert_eq!(tail, whole[offset as usize..]);
    assert_eq!(s.progress().received(), big.size_i64() as u64);
}

#[tokio::test]
async fn env_auth_registry() {
    require_env();
    let images = env_images();
    let client = client();
    let r = reference(&format!("{AUTH}/ferrolet/busybox:1"));

    let e = client.session(&r, None).resolve().await.unwrap_err();
    assert!(matches!(e, RegistryError::Unauthenticated { .. }), "{e:?}");
    assert_eq!(e.grpc_code(), tonic::Code::Unauthenticated);
    assert!(e.to_string().contains(AUTH), "{e}");

    let wrong = Credentials {
        username: env_credentials().username,
        password: "wrong-password".into(),
        ..Default::default()
    };
    let e = client.session(&r, Some(wrong)).resolve().await.unwrap_err();
    assert!(matches!(e, RegistryError::Unauthenticated { .. }), "{e:?}");
    assert!(e.to_string().contains(AUTH), "{e}");
    assert!(e.to_string().contains("rejected"), "{e}");

    let session = client.session(&r, Some(env_credentials()));
    let resolved = session.resolve().await.unwrap();
    assert_eq!(resolved.manifest.digest_str(), images["busybox:1"]);
    let config = read_all(&session, &resolved.config).await;
    assert_eq!(sha256(&config), resolved.config.digest_str());

    // The same credentials as CRI's `auth` field, and as the host's configured default.
    let c = env_credentials();
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", c.username, c.password));
    let auth_only = Credentials {
        auth: encoded,
        ..Default::default()
    };
    client.session(&r, Some(auth_only)).resolve().await.unwrap();
    let configured = RegistryClient::new(hosts(serde_json::json!({
        AUTH: {"username": c.username, "password": c.password}
    })))
    .unwrap();
    configured.session(&r, None).resolve().await.unwrap();
}

#[tokio::test]
async fn env_not_found_and_unavailable() {
    require_env();
    let client = client();
    for missing in [
        format!("{OPEN}/ferrolet/busybox:no-such-tag"),
        format!("{OPEN}/ferrolet/no-such-repo:1"),
        format!("{OPEN}/ferrolet/busybox@sha256:{}", "0".repeat(64)),
    ] {
        let e = client
            .session(&reference(&missing), None)
            .resolve()
            .await
            .unwrap_err();
        assert!(
            matches!(e, RegistryError::NotFound { .. }),
            "{missing}: {e:?}"
        );
        assert_eq!(e.grpc_code(), tonic::Code::NotFound);
        assert!(e.to_string().contains(&missing), "{e}");
    }

    let addr = format!("127.0.0.1:{}", dead_port());
    let e = client
        .session(&reference(&format!("{addr}/ferrolet/busybox:1")), None)
        .resolve()
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }), "{e:?}");
    assert_eq!(e.grpc_code(), tonic::Code::Unavailable);
    assert!(e.to_string().contains(&addr), "{e}");
}

#[tokio::test]
async fn env_docker_io_through_a_mirror() {
    require_env();
    let images = env_images();
    let dead = format!("http://127.0.0.1:{}", dead_port());
    // A dead mirror, then one that needs credentials we lack, then the open registry; the
    // host's own endpoint is pointed at a dead loopback port so nothing leaves the machine.
    let client = RegistryClient::new(hosts(serde_json::json!({
        "docker.io": {
            "mirrors": [dead, format!("http://{AUTH}"), format!("http://{OPEN}")],
            "server": dead,
        }
    })))
    .unwrap();
    let r = reference("busybox:1");
    assert_eq!(r.to_string(), "docker.io/library/busybox:1");
    let session = client.session(&r, None);
    let resolved = session.resolve().await.unwrap();
    assert_eq!(resolved.manifest.digest_str(), images["busybox:1"]);
    assert_eq!(session.endpoint().as_deref(), Some(OPEN));
    let layer = read_all(&session, &resolved.layers[0]).await;
    assert_eq!(sha256(&layer), resolved.layers[0].digest_str());

    // Every endpoint failing reports the host's own endpoint, the last one tried.
    let e = client
        .session(&reference("no-such-image:1"), None)
        .resolve()
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }), "{e:?}");
    assert!(
        e.to_string().contains(dead.trim_start_matches("http://")),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// A minimal fake registry: one request per connection, `Connection: close`.

#[derive(Debug, Clone)]
struct Req {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Req {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

#[derive(Clone)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn resp(status: u16, headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Resp {
    Resp {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: body.into(),
    }
}

type Handler = Arc<dyn Fn(&Req) -> Resp + Send + Sync>;
type Log = Arc<Mutex<Vec<Req>>>;

/// Binds 127.0.0.1:0 and returns the address and a request log; `handler` gets the address so
/// it can name itself in realms and redirects.
async fn fake(handler: impl Fn(SocketAddr) -> Handler) -> (SocketAddr, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handler = handler(addr);
    let log: Log = Arc::default();
    let l = log.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(serve_one(conn, handler.clone(), l.clone()));
        }
    });
    (addr, log)
}

async fn serve_one(mut conn: TcpStream, handler: Handler, log: Log) {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 4096];
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut req = Req {
        method: method.to_string(),
        target: target.to_string(),
        headers,
        body: buf[head_end + 4..].to_vec(),
    };
    let len: usize = req
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while req.body.len() < len {
        let mut chunk = [0u8; 4096];
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => req.body.extend_from_slice(&chunk[..n]),
        }
    }
    let r = handler(&req);
    log.lock().unwrap().push(req);
    let mut out = format!(
        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        r.body.len()
    );
    for (k, v) in &r.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let _ = conn.write_all(out.as_bytes()).await;
    let _ = conn.write_all(&r.body).await;
    let _ = conn.shutdown().await;
}

/// A fake image: an index with decoys around this node's platform, one manifest, a config
/// and a layer.
struct FakeImage {
    index: Vec<u8>,
    manifest: Vec<u8>,
    config: Vec<u8>,
    layer: Vec<u8>,
}

fn fake_image(
    list_type: &str,
    manifest_type: &str,
    config_type: &str,
    layer_type: &str,
) -> FakeImage {
    let config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#
            .to_vec();
    let layer: Vec<u8> = (0..50_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": manifest_type,
        "config": {"mediaType": config_type, "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": layer_type, "digest": sha256(&layer), "size": layer.len()}],
    }))
    .unwrap();
    let here = ferrolet_cri::registry::manifest::current_platform()
        .architecture()
        .to_string();
    let other = if here == "arm64" { "amd64" } else { "arm64" };
    let decoy = |d: char| format!("sha256:{}", d.to_string().repeat(64));
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": list_type,
        "manifests": [
            {"mediaType": manifest_type, "digest": decoy('a'), "size": 10,
             "platform": {"os": "linux", "architecture": other}},
            {"mediaType": manifest_type, "digest": decoy('b'), "size": 10,
             "platform": {"os": "linux", "architecture": here, "variant": "v3"}},
            {"mediaType": manifest_type, "digest": sha256(&manifest), "size": manifest.len(),
             "platform": {"os": "linux", "architecture": here}},
            {"mediaType": manifest_type, "digest": decoy('c'), "size": 10,
             "platform": {"os": "unknown", "architecture": "unknown"}},
        ],
    }))
    .unwrap();
    FakeImage {
        index,
        manifest,
        config,
        layer,
    }
}

const TOKEN: &str = "tok-123";
const REFRESH: &str = "refresh-456";

/// A bearer-protected registry serving `img` as `fake/multi:1`, whose token server accepts
/// anonymous GETs and refresh-token POSTs with [`REFRESH`], and which redirects the layer
/// blob to `storage`.
fn bearer_registry(
    img: Arc<FakeImage>,
    list_type: &'static str,
    storage: SocketAddr,
) -> impl Fn(SocketAddr) -> Handler {
    move |me| {
        let img = img.clone();
        Arc::new(move |req: &Req| {
            let path = req.path();
            if path == "/token" {
                let want_scope = "scope=repository%3Afake%2Fmulti%3Apull";
                return match req.method.as_str() {
                    "GET" if req.target.contains(want_scope) => resp(
                        200,
                        &[],
                        format!(r#"{{"token":"{TOKEN}","expires_in":300}}"#),
                    ),
                    "POST" => {
                        let form = String::from_utf8_lossy(&req.body);
                        if form.contains("grant_type=refresh_token")
                            && form.contains(&format!("refresh_token={REFRESH}"))
                        {
                            resp(200, &[], format!(r#"{{"access_token":"{TOKEN}"}}"#))
                        } else {
                            resp(401, &[], r#"{"error":"invalid_grant"}"#)
                        }
                    }
                    _ => resp(400, &[], "bad token request"),
                };
            }
            if req.header("authorization") != Some(&format!("Bearer {TOKEN}")) {
                let challenge = format!(
                    r#"Bearer realm="http://{me}/token",service="fake",scope="repository:fake/multi:pull""#
                );
                return resp(
                    401,
                    &[("WWW-Authenticate", &challenge)],
                    r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#,
                );
            }
            let manifest_type = if list_type == OCI_INDEX {
                OCI_MANIFEST
            } else {
                DOCKER_MANIFEST
            };
            match path {
                "/v2/fake/multi/manifests/1" => {
                    resp(200, &[("Content-Type", list_type)], img.index.clone())
                }
                p if p == format!("/v2/fake/multi/manifests/{}", sha256(&img.manifest)) => resp(
                    200,
                    &[("Content-Type", manifest_type)],
                    img.manifest.clone(),
                ),
                p if p == format!("/v2/fake/multi/blobs/{}", sha256(&img.config)) => {
                    resp(200, &[], img.config.clone())
                }
                p if p == format!("/v2/fake/multi/blobs/{}", sha256(&img.layer)) => {
                    let to = format!("http://{storage}/storage/layer?sig=1");
                    resp(307, &[("Location", &to)], "")
                }
                _ => resp(
                    404,
                    &[],
                    r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#,
                ),
            }
        })
    }
}

fn storage(img: Arc<FakeImage>) -> impl Fn(SocketAddr) -> Handler {
    move |_| {
        let img = img.clone();
        Arc::new(move |req: &Req| match req.path() {
            "/storage/layer" => resp(200, &[], img.layer.clone()),
            _ => resp(404, &[], ""),
        })
    }
}

#[tokio::test]
async fn fake_bearer_token_index_and_redirected_blob() {
    for (list, manifest, config, layer) in [
        (OCI_INDEX, OCI_MANIFEST, OCI_CONFIG, OCI_LAYER_GZIP),
        (
            DOCKER_MANIFEST_LIST,
            DOCKER_MANIFEST,
            DOCKER_CONFIG,
            DOCKER_LAYER_GZIP,
        ),
    ] {
        let img = Arc::new(fake_image(list, manifest, config, layer));
        let (store, store_log) = fake(storage(img.clone())).await;
        let (reg, reg_log) = fake(bearer_registry(img.clone(), list, store)).await;

        let session = client().session(&reference(&format!("{reg}/fake/multi:1")), None);
        let r = session.resolve().await.unwrap();
        let (index, index_bytes) = r.index.clone().expect("resolved through the index");
        assert_eq!(index.media_type_str(), list);
        assert_eq!(index.digest_str(), sha256(&img.index));
        assert_eq!(index_bytes.as_ref(), img.index.as_slice());
        assert_eq!(
            r.manifest.digest_str(),
            sha256(&img.manifest),
            "picked the variant-less entry"
        );
        assert_eq!(r.manifest.media_type_str(), manifest);
        assert_eq!(r.config.digest_str(), sha256(&img.config));
        assert_eq!(r.layers.len(), 1);
        assert_eq!(r.layers[0].media_type_str(), layer);

        assert_eq!(
            session.fetch_blob_bytes(&r.config).await.unwrap(),
            img.config
        );
        assert_eq!(read_all(&session, &r.layers[0]).await, img.layer);

        let reg_log = reg_log.lock().unwrap();
        let tokens = reg_log.iter().filter(|r| r.path() == "/token").count();
        assert_eq!(tokens, 1, "one token for the whole session: {reg_log:#?}");
        let store_log = store_log.lock().unwrap();
        assert_eq!(store_log.len(), 1);
        assert_eq!(
            store_log[0].header("authorization"),
            None,
            "the registry's token must not follow a redirect to another host"
        );
    }
}

#[tokio::test]
async fn fake_identity_token_and_registry_token() {
    let img = Arc::new(fake_image(
        OCI_INDEX,
        OCI_MANIFEST,
        OCI_CONFIG,
        OCI_LAYER_GZIP,
    ));
    let (store, _) = fake(storage(img.clone())).await;
    let (reg, log) = fake(bearer_registry(img.clone(), OCI_INDEX, store)).await;
    let r = reference(&format!("{reg}/fake/multi:1"));
    let client = client();

    let refresh = Credentials {
        identity_token: REFRESH.into(),
        ..Default::default()
    };
    client.session(&r, Some(refresh)).resolve().await.unwrap();
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|q| q.method == "POST" && q.path() == "/token"),
        "identity tokens are exchanged with a POST"
    );

    let bad = Credentials {
        identity_token: "stale".into(),
        ..Default::default()
    };
    let e = client.session(&r, Some(bad)).resolve().await.unwrap_err();
    assert!(matches!(e, RegistryError::Unauthenticated { .. }), "{e:?}");
    assert!(e.to_string().contains(&reg.to_string()), "{e}");

    // A registry token is used as the bearer token directly, without the token server.
    log.lock().unwrap().clear();
    let direct = Credentials {
        registry_token: TOKEN.into(),
        ..Default::default()
    };
    client.session(&r, Some(direct)).resolve().await.unwrap();
    assert!(!log.lock().unwrap().iter().any(|q| q.path() == "/token"));
}

/// A registry without auth serving fixed answers by path.
fn static_registry(routes: Vec<(String, Resp)>) -> impl Fn(SocketAddr) -> Handler {
    let routes = Arc::new(routes);
    move |_| {
        let routes = routes.clone();
        Arc::new(move |req: &Req| {
            routes
                .iter()
                .find(|(p, _)| p == req.path())
                .map(|(_, r)| r.clone())
                .unwrap_or_else(|| resp(404, &[], ""))
        })
    }
}

#[tokio::test]
async fn fake_broken_and_unsupported_registries() {
    let img = fake_image(OCI_INDEX, OCI_MANIFEST, OCI_CONFIG, OCI_LAYER_GZIP);
    let schema1 = br#"{"schemaVersion":1,"name":"x/y","tag":"1","fsLayers":[]}"#.to_vec();
    let only_arm = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": sha256(b"m"), "size": 1,
                       "platform": {"os": "linux", "architecture": "s390x"}}],
    }))
    .unwrap();
    let layer_digest = sha256(&img.layer);
    let short = img.layer[..1000].to_vec();
    let (addr, _) = fake(static_registry(vec![
        (
            "/v2/x/schema1/manifests/1".into(),
            resp(200, &[("Content-Type", "application/vnd.docker.distribution.manifest.v1+prettyjws")], schema1),
        ),
        (
            "/v2/x/arm/manifests/1".into(),
            resp(200, &[("Content-Type", OCI_INDEX)], only_arm),
        ),
        (
            // Answers a digest request with other bytes.
            format!("/v2/x/liar/manifests/{}", sha256(b"expected")),
            resp(200, &[("Content-Type", OCI_MANIFEST)], img.manifest.clone()),
        ),
        (
            "/v2/x/plain/manifests/1".into(),
            resp(200, &[("Content-Type", "application/json")], img.manifest.clone()),
        ),
        (format!("/v2/x/plain/blobs/{layer_digest}"), resp(200, &[], short)),
        (
            "/v2/x/denied/manifests/1".into(),
            resp(403, &[], r#"{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}"#),
        ),
        (
            "/v2/x/down/manifests/1".into(),
            resp(503, &[], "maintenance"),
        ),
    ]))
    .await;
    let client = client();
    let resolve = |r: String| {
        let s = client.session(&reference(&r), None);
        async move { s.resolve().await }
    };

    let e = resolve(format!("{addr}/x/schema1:1")).await.unwrap_err();
    assert!(matches!(e, RegistryError::Unsupported { .. }), "{e:?}");
    assert!(e.to_string().contains("schema1"), "{e}");

    let e = resolve(format!("{addr}/x/arm:1")).await.unwrap_err();
    assert!(
        matches!(e, RegistryError::NoMatchingPlatform { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("linux/s390x"), "{e}");

    let e = resolve(format!("{addr}/x/liar@{}", sha256(b"expected")))
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::Protocol { .. }), "{e:?}");
    assert!(e.to_string().contains("does not match"), "{e}");

    let e = resolve(format!("{addr}/x/denied:1")).await.unwrap_err();
    assert!(matches!(e, RegistryError::PermissionDenied { .. }), "{e:?}");
    assert_eq!(e.grpc_code(), tonic::Code::PermissionDenied);

    let e = resolve(format!("{addr}/x/down:1")).await.unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }), "{e:?}");
    assert!(e.to_string().contains(&addr.to_string()), "{e}");

    // A generic Content-Type is sniffed from the document; a truncated blob is an error.
    let s = client.session(&reference(&format!("{addr}/x/plain:1")), None);
    let r = s.resolve().await.unwrap();
    assert_eq!(r.manifest.media_type_str(), OCI_MANIFEST);
    assert_eq!(r.manifest.digest_str(), sha256(&img.manifest));
    let mut blob = s.fetch_blob(&r.layers[0]).await.unwrap();
    let mut last = None;
    while let Some(item) = blob.next().await {
        last = Some(item);
    }
    let e = last.unwrap().unwrap_err();
    assert!(e.to_string().contains("ended after 1000 of"), "{e}");
}
