//! The secure API on 127.0.0.1:0 with a stub node, called over real TLS by reqwest: client
//! CAs, anonymous requests, authorization, the generated serving certificate, the routes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair,
};
use tokio::sync::oneshot;

use super::*;
use crate::server::ApiRequest;
use crate::types::Pod;

struct Stub;

impl NodeView for Stub {
    fn pods(&self) -> Vec<Pod> {
        Vec::new()
    }
    fn running_pods(&self) -> Vec<Pod> {
        Vec::new()
    }
    fn healthy(&self) -> Result<(), String> {
        Ok(())
    }
    fn container_log_path(&self, _: &str, _: &str, _: &str, _: bool) -> Option<PathBuf> {
        None
    }
}

/// A CA: its PEM and issuer.
pub(crate) fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    (pem, Issuer::new(params, key))
}

/// A client identity (certificate + key PEM) for `cn` in `org`, from `issuer`.
pub(crate) fn identity(issuer: &Issuer<'_, KeyPair>, cn: &str, org: &str) -> reqwest::Identity {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, org);
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    let pem = format!("{}{}", cert.pem(), key.serialize_pem());
    reqwest::Identity::from_pem(pem.as_bytes()).unwrap()
}

/// A running server and how to reach it.
struct Running {
    addr: SocketAddr,
    files: ServingFiles,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Running {
    /// A client trusting the server's certificate, with `id` as its certificate.
    fn client(&self, id: Option<reqwest::Identity>) -> reqwest::Client {
        let pem = std::fs::read(&self.files.cert_file).unwrap();
        let mut b = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .use_rustls_tls();
        for cert in reqwest::Certificate::from_pem_bundle(&pem).unwrap() {
            b = b.add_root_certificate(cert);
        }
        if let Some(id) = id {
            b = b.identity(id);
        }
        b.build().unwrap()
    }

    async fn get(&self, client: &reqwest::Client, path: &str) -> (u16, String) {
        self.call(client, reqwest::Method::GET, path).await
    }

    async fn call(
        &self,
        client: &reqwest::Client,
        method: reqwest::Method,
        path: &str,
    ) -> (u16, String) {
        let url = format!("https://127.0.0.1:{}{path}", self.addr.port());
        let resp = client.request(method, url).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }

    async fn stop(mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        self.task.await.unwrap().unwrap();
    }
}

/// The server on 127.0.0.1:0 with its root dir in a temp dir; `tweak` adjusts the config
/// (the temp dir is given to place files in).
async fn start(tweak: impl FnOnce(&mut Config, &Path), extra: ExtraRoutes) -> Running {
    start_with(tweak, extra, None).await
}

/// [`start`] with the webhook modes reviewing through `reviews`.
async fn start_with(
    tweak: impl FnOnce(&mut Config, &Path),
    extra: ExtraRoutes,
    reviews: Option<Arc<dyn ReviewClient>>,
) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 0,
        root_dir: dir.path().join("root"),
        node_name: "node-a".into(),
        ..Config::default()
    };
    tweak(&mut config, dir.path());
    let server = SecureServer::bind_with_reviews(&config, reviews)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let files = server.serving_files().clone();
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(server.serve(Arc::new(Stub), extra, async {
        let _ = rx.await;
    }));
    Running {
        addr,
        files,
        stop: Some(tx),
        task,
        _dir: dir,
    }
}

fn with_client_ca(ca_pem: &str) -> impl FnOnce(&mut Config, &Path) {
    let ca_pem = ca_pem.to_string();
    move |c: &mut Config, dir: &Path| {
        let path = dir.join("client-ca.crt");
        std::fs::write(&path, ca_pem).unwrap();
        c.authentication.client_ca_file = Some(path);
    }
}

#[tokio::test]
async fn client_certificates_and_anonymous_requests() {
    let (ca_pem, issuer) = ca("clients");
    let (_, other) = ca("another CA");
    let server = start(with_client_ca(&ca_pem), ExtraRoutes::new()).await;

    let anonymous = server.client(None);
    assert_eq!(
        server.get(&anonymous, "/pods").await,
        (401, "Unauthorized".into())
    );
    assert_eq!(server.get(&anonymous, "/nowhere").await.0, 401);

    let alice = server.client(Some(identity(&issuer, "alice", "ops")));
    let (status, body) = server.get(&alice, "/pods").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with(r#"{"kind":"PodList""#), "{body}");
    assert_eq!(server.get(&alice, "/healthz").await, (200, "ok".into()));
    assert_eq!(server.get(&alice, "/runningpods/").await.0, 200);
    assert_eq!(server.get(&alice, "/nowhere").await.0, 404);

    let mallory = server.client(Some(identity(&other, "mallory", "ops")));
    assert_eq!(
        server.get(&mallory, "/pods").await,
        (401, "Unauthorized".into())
    );
    server.stop().await;
}

#[tokio::test]
async fn anonymous_when_enabled() {
    let server = start(|c, _| c.authentication.anonymous = true, ExtraRoutes::new()).await;
    let client = server.client(None);
    assert_eq!(server.get(&client, "/healthz").await, (200, "ok".into()));
    server.stop().await;
}

#[tokio::test]
async fn static_policy_forbids_with_go_s_message() {
    let (ca_pem, issuer) = ca("clients");
    let policy = "rules:\n- users: [alice]\n  verbs: [get]\n  subresources: [healthz]\n";
    let server = start(
        |c, dir| {
            with_client_ca(&ca_pem)(c, dir);
            let path = dir.join("policy.yaml");
            std::fs::write(&path, policy).unwrap();
            c.authorization.mode = AuthorizationMode::Static;
            c.authorization.policy_file = Some(path);
        },
        ExtraRoutes::new(),
    )
    .await;
    let alice = server.client(Some(identity(&issuer, "alice", "ops")));
    assert_eq!(server.get(&alice, "/healthz").await, (200, "ok".into()));
    assert_eq!(
        server.get(&alice, "/pods").await,
        (
            403,
            "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])".into()
        )
    );
    server.stop().await;
}

#[tokio::test]
async fn configz_streaming_and_plugged_paths() {
    // An anonymous caller reaches an extra endpoint (the endpoint sees the request's path).
    let extra = ExtraRoutes::new().route("/metrics", |req: ApiRequest| async move {
        crate::server::text(StatusCode::OK, format!("metrics for {}", req.path))
    });
    // /configz shows the KubeletConfiguration the settings came from: set there too.
    let server = start(
        |c, _| {
            c.authentication.anonymous = true;
            c.kubelet_config.authentication.anonymous.enabled = Some(true);
            c.kubelet_config.port = Some(0);
        },
        extra,
    )
    .await;
    let client = server.client(None);

    let (status, body) = server.get(&client, "/configz").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kubeletconfig"]["port"], 0);
    assert_eq!(
        v["kubeletconfig"]["tlsCertFile"],
        server.files.cert_file.display().to_string()
    );
    assert_eq!(
        v["kubeletconfig"]["authentication"]["anonymous"]["enabled"],
        true
    );

    // No runtime given: the streaming endpoints answer 501 (streaming/tests.rs serves them).
    for (method, path) in [
        (reqwest::Method::GET, "/exec/default/p/c?command=ls"),
        (reqwest::Method::POST, "/exec/default/p/c"),
        (reqwest::Method::POST, "/attach/default/p/c"),
        (reqwest::Method::GET, "/portForward/default/p"),
        (reqwest::Method::POST, "/run/default/p/c"),
    ] {
        let (status, body) = server.call(&client, method, path).await;
        assert_eq!(status, 501, "{path}: {body}");
        assert!(body.contains("streaming"), "{path}: {body}");
    }
    // The Go kubelet (1.28) has no /cri/ either.
    assert_eq!(server.get(&client, "/cri/exec/abc").await.0, 404);

    assert_eq!(
        server.get(&client, "/metrics").await,
        (200, "metrics for /metrics".into())
    );
    let (status, body) = server.get(&client, "/stats/summary").await;
    assert_eq!(status, 501);
    assert!(body.contains("/stats/summary is not served yet"), "{body}");
    server.stop().await;
}

#[tokio::test]
async fn the_self_signed_certificate_is_made_once_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let tweak = |c: &mut Config, _: &Path| {
        c.root_dir = root.clone();
        c.authentication.anonymous = true;
    };
    let server = start(tweak, ExtraRoutes::new()).await;
    assert_eq!(server.files.cert_file, root.join("pki/kubelet.crt"));
    assert!(server.files.self_signed);
    let mode = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&server.files.key_file), 0o600);
    // The client verifies the server by the address it dials (127.0.0.1, in the SANs).
    let client = server.client(None);
    assert_eq!(server.get(&client, "/healthz").await.0, 200);
    let first = std::fs::read(&server.files.cert_file).unwrap();
    server.stop().await;

    let again = start(tweak, ExtraRoutes::new()).await;
    assert_eq!(std::fs::read(&again.files.cert_file).unwrap(), first);
    again.stop().await;

    // A key that does not fit is replaced, with the certificate.
    std::fs::write(
        root.join("pki/kubelet.key"),
        KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let third = start(tweak, ExtraRoutes::new()).await;
    assert_ne!(std::fs::read(&third.files.cert_file).unwrap(), first);
    let client = third.client(None);
    assert_eq!(third.get(&client, "/healthz").await.0, 200);
    third.stop().await;
}

#[tokio::test]
async fn configured_serving_files_are_used_and_checked() {
    let (cert, key) = tls::self_signed(
        "kubelet.example",
        &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        1_800_000_000,
    )
    .unwrap();
    let server = start(
        |c, dir| {
            let (cf, kf) = (dir.join("serving.crt"), dir.join("serving.key"));
            std::fs::write(&cf, &cert).unwrap();
            std::fs::write(&kf, &key).unwrap();
            c.tls_cert_file = Some(cf);
            c.tls_private_key_file = Some(kf);
            c.authentication.anonymous = true;
        },
        ExtraRoutes::new(),
    )
    .await;
    assert!(!server.files.self_signed);
    assert!(
        !server
            .files
            .cert_file
            .starts_with(server._dir.path().join("root"))
    );
    server.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let missing = Config {
        tls_cert_file: Some(dir.path().join("nope.crt")),
        tls_private_key_file: Some(dir.path().join("nope.key")),
        root_dir: dir.path().to_path_buf(),
        port: 0,
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        ..Config::default()
    };
    let err = SecureServer::bind(&missing).await.unwrap_err();
    assert!(err.to_string().contains("nope.crt"), "{err}");
}

#[tokio::test]
async fn a_reloading_certificate_is_swapped_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 0,
        root_dir: dir.path().join("root"),
        node_name: "node-a".into(),
        ..Config::default()
    };
    let serving = Arc::new(ReloadingCert::new());
    let server = SecureServer::bind_with(&config, Some(serving.clone()))
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let files = server.serving_files().clone();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(Arc::new(Stub), ExtraRoutes::default(), async {
        let _ = rx.await;
    }));
    let url = format!("https://127.0.0.1:{}/healthz", addr.port());
    let trusting = |pem: &[u8]| {
        let mut b = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .use_rustls_tls();
        for cert in reqwest::Certificate::from_pem_bundle(pem).unwrap() {
            b = b.add_root_certificate(cert);
        }
        b.build().unwrap()
    };

    // Until one is issued, the self-signed pair stands in.
    let self_signed = trusting(&std::fs::read(&files.cert_file).unwrap());
    self_signed.get(&url).send().await.unwrap();

    // An issued certificate (another CA) is presented from the next handshake on.
    let (ca_pem, issuer) = ca("cluster-ca");
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "system:node:node-a");
    params.subject_alt_names = vec![rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let pair = format!("{}{}", cert.pem(), key.serialize_pem());
    serving.set(crate::certificate::pem::certified_key(pair.as_bytes()).unwrap());
    trusting(ca_pem.as_bytes()).get(&url).send().await.unwrap();
    let fresh = trusting(&std::fs::read(&files.cert_file).unwrap());
    assert!(
        fresh.get(&url).send().await.is_err(),
        "no longer self-signed"
    );

    let _ = tx.send(());
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn webhook_modes_review_tokens_and_requests() {
    use crate::server::webhook::tests::{Reviews, user};
    let mut reviews = Reviews::default();
    reviews.tokens.insert("bob-token".into(), user("bob", &[]));
    reviews
        .tokens
        .insert("carol-token".into(), user("carol", &[]));
    reviews
        .allowed
        .push(("bob".into(), "get".into(), "proxy".into()));
    reviews.failing.push("carol".into());
    let webhook = |c: &mut Config, _: &Path| {
        c.authentication.webhook = true;
        c.authorization.mode = AuthorizationMode::Webhook;
    };
    let server = start_with(webhook, ExtraRoutes::default(), Some(Arc::new(reviews))).await;
    let client = server.client(None);
    let get = |token: Option<&'static str>, path: &'static str| {
        let url = format!("https://127.0.0.1:{}{path}", server.addr.port());
        let mut req = client.get(url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move {
            let resp = req.send().await.unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    assert_eq!(
        get(Some("bob-token"), "/pods").await.0,
        200,
        "pods, then proxy"
    );
    assert_eq!(
        get(Some("bob-token"), "/metrics").await,
        (
            403,
            "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[metrics])".into()
        )
    );
    assert_eq!(
        get(Some("nobody"), "/pods").await,
        (401, "Unauthorized".into())
    );
    assert_eq!(get(None, "/pods").await, (401, "Unauthorized".into()));
    assert_eq!(
        get(Some("carol-token"), "/pods").await,
        (
            500,
            "Authorization error (user=carol, verb=get, resource=nodes, subresource=pods)".into()
        )
    );
    server.stop().await;
}

#[tokio::test]
async fn webhook_modes_need_a_client() {
    for (authn, want) in [(true, "authentication"), (false, "authorization")] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            root_dir: dir.path().to_path_buf(),
            port: 0,
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            node_name: "node-a".into(),
            ..Config::default()
        };
        if authn {
            config.authentication.webhook = true;
        } else {
            config.authorization.mode = AuthorizationMode::Webhook;
        }
        let err = SecureServer::bind(&config).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("no client provided, cannot use webhook {want}")
        );
    }
}
