//! The streaming endpoints through the real secure server (TLS, client certificates, the
//! webhook authorizer on a table), a fake runtime that records its CRI requests and hands out
//! URLs of a fake streaming server on 127.0.0.1 (101 and echo, or an error answer).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::config::{AuthorizationMode, Config};
use crate::server::ExtraRoutes;
use crate::server::secure::SecureServer;
use crate::server::secure::tests::{ca, identity};
use crate::server::webhook::ReviewClient;
use crate::server::webhook::tests::{Reviews, user};
use crate::types::{RuntimeContainer, RuntimeSandbox};

// ---- the paths ----

#[test]
fn paths_as_go_s_routes() {
    let p = |m: Method, path: &str| parse_path(&m, path);
    assert_eq!(
        p(Method::POST, "/exec/ns/web/c").unwrap(),
        Target {
            kind: Kind::Exec,
            namespace: "ns".into(),
            pod: "web".into(),
            uid: None,
            container: "c".into()
        }
    );
    let t = p(Method::GET, "/attach/ns/web/u-1/c%2Dx").unwrap();
    assert_eq!((t.kind, t.uid.as_deref()), (Kind::Attach, Some("u-1")));
    assert_eq!(t.container, "c-x");
    let t = p(Method::GET, "/portForward/ns/web").unwrap();
    assert_eq!((t.kind, t.container.as_str()), (Kind::PortForward, ""));
    assert_eq!(
        p(Method::POST, "/portForward/ns/web/u").unwrap().uid,
        Some("u".into())
    );
    assert_eq!(p(Method::POST, "/run/ns/web/c").unwrap().kind, Kind::Run);
    let status = |m: Method, path: &str| p(m, path).unwrap_err().response().status().as_u16();
    assert_eq!(status(Method::GET, "/run/ns/web/c"), 405);
    assert_eq!(status(Method::PUT, "/exec/ns/web/c"), 405);
    assert_eq!(status(Method::GET, "/exec/ns/web"), 404);
    assert_eq!(status(Method::GET, "/exec/ns/web/u/c/x"), 404);
    assert_eq!(status(Method::GET, "/exec/ns//c"), 404);
    assert_eq!(status(Method::GET, "/portForward/ns/web/u/x"), 404);
    assert_eq!(status(Method::GET, "/exec"), 404);
}

// ---- the fakes ----

/// What the fake runtime was asked.
#[derive(Debug, PartialEq)]
enum Call {
    Exec(cri::ExecRequest),
    Attach(cri::AttachRequest),
    PortForward(cri::PortForwardRequest),
    Run(String, Vec<String>),
}

#[derive(Default)]
struct FakeRuntime {
    url: Mutex<String>,
    calls: Mutex<Vec<Call>>,
    error: Mutex<Option<tonic::Status>>,
    run: Mutex<cri::ExecSyncResponse>,
}

impl FakeRuntime {
    fn answer(&self, call: Call) -> Result<String, CriError> {
        self.calls.lock().unwrap().push(call);
        match self.error.lock().unwrap().clone() {
            Some(status) => Err(CriError::Call {
                method: "Exec",
                status,
            }),
            None => Ok(self.url.lock().unwrap().clone()),
        }
    }

    fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

impl StreamingRuntime for FakeRuntime {
    fn exec(&self, req: cri::ExecRequest) -> BoxFuture<'_, Result<String, CriError>> {
        let r = self.answer(Call::Exec(req));
        Box::pin(async move { r })
    }
    fn attach(&self, req: cri::AttachRequest) -> BoxFuture<'_, Result<String, CriError>> {
        let r = self.answer(Call::Attach(req));
        Box::pin(async move { r })
    }
    fn port_forward(
        &self,
        req: cri::PortForwardRequest,
    ) -> BoxFuture<'_, Result<String, CriError>> {
        let r = self.answer(Call::PortForward(req));
        Box::pin(async move { r })
    }
    fn run_in_container(
        &self,
        container_id: String,
        cmd: Vec<String>,
    ) -> BoxFuture<'_, Result<cri::ExecSyncResponse, CriError>> {
        let r = self
            .answer(Call::Run(container_id, cmd))
            .map(|_| self.run.lock().unwrap().clone());
        Box::pin(async move { r })
    }
}

/// Pod `default/web` (uid `u1`): containers `c` (running), `t` (a tty, running), `gone`
/// (exited); sandboxes `sb-new` (ready) and `sb-old`.
struct Node;

fn web() -> Pod {
    let container = |name: &str, tty: bool| Container {
        name: name.into(),
        tty: Some(tty),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![
                container("c", false),
                container("t", true),
                container("gone", false),
            ],
            ..Default::default()
        }),
        status: None,
    }
}

impl NodeView for Node {
    fn pods(&self) -> Vec<Pod> {
        vec![web()]
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
    fn mirror_pod_uid(&self, namespace: &str, name: &str) -> Option<String> {
        (namespace == "default" && name == "web").then(|| "mirror-u1".into())
    }
    fn runtime_pod(&self, namespace: &str, name: &str) -> Option<RuntimePod> {
        let container = |id: &str, name: &str, state| RuntimeContainer {
            id: id.into(),
            name: name.into(),
            state,
            ..Default::default()
        };
        let sandbox = |id: &str, ready| RuntimeSandbox {
            id: id.into(),
            ready,
            ..Default::default()
        };
        (namespace == "default" && name == "web").then(|| RuntimePod {
            uid: "u1".into(),
            name: "web".into(),
            namespace: "default".into(),
            sandboxes: vec![sandbox("sb-new", true), sandbox("sb-old", false)],
            containers: vec![
                container("cid-gone", "gone", ContainerState::ContainerExited),
                container("cid-c", "c", ContainerState::ContainerRunning),
                container("cid-t", "t", ContainerState::ContainerRunning),
            ],
        })
    }
}

/// How the fake streaming server answers.
#[derive(Clone, Copy)]
enum Mode {
    /// 101, then echoes until EOF, then sends `bye` and closes.
    Echo,
    /// This whole answer, then close.
    Answer(&'static str),
}

/// The fake streaming server: each request's head, and a notice when an echo connection
/// has seen its client's end.
struct Upstream {
    port: u16,
    heads: mpsc::UnboundedReceiver<String>,
    ended: mpsc::UnboundedReceiver<()>,
}

async fn upstream(mode: Mode) -> Upstream {
    upstream_over(mode, None).await
}

/// [`upstream`], over TLS with `acceptor` when given.
async fn upstream_over(mode: Mode, acceptor: Option<tokio_rustls::TlsAcceptor>) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (heads_tx, heads) = mpsc::unbounded_channel();
    let (ended_tx, ended) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (conn, _) = listener.accept().await.unwrap();
            let (heads_tx, ended_tx) = (heads_tx.clone(), ended_tx.clone());
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                match acceptor {
                    Some(a) => {
                        // An untrusting client ends the handshake.
                        let Ok(conn) = a.accept(conn).await else {
                            return;
                        };
                        answer(conn, mode, heads_tx, ended_tx).await;
                    }
                    None => answer(conn, mode, heads_tx, ended_tx).await,
                }
            });
        }
    });
    Upstream { port, heads, ended }
}

/// One connection of the fake streaming server.
async fn answer<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut conn: S,
    mode: Mode,
    heads_tx: mpsc::UnboundedSender<String>,
    ended_tx: mpsc::UnboundedSender<()>,
) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        if conn.read(&mut b).await.unwrap_or(0) == 0 {
            return;
        }
        head.push(b[0]);
    }
    let _ = heads_tx.send(String::from_utf8(head).unwrap());
    match mode {
        Mode::Answer(answer) => {
            conn.write_all(answer.as_bytes()).await.unwrap();
            let _ = conn.shutdown().await;
        }
        Mode::Echo => {
            conn.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
                  Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
            )
            .await
            .unwrap();
            let mut buf = vec![0u8; 16 << 10];
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) => {
                        // The client's half-close: answer after it, then close.
                        let _ = conn.write_all(b"bye").await;
                        let _ = conn.shutdown().await;
                        break;
                    }
                    Ok(n) => {
                        if conn.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = ended_tx.send(());
        }
    }
}

/// The secure server with client certificates from a test CA, bearer tokens and the webhook
/// authorizer (alice and bob may `create` and `get` `nodes/proxy`, mallory nothing), the
/// streaming endpoints on `runtime`.
struct Server {
    addr: SocketAddr,
    cert: PathBuf,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    runtime: Arc<FakeRuntime>,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

async fn server() -> Server {
    server_with(true, None).await
}

async fn server_with(streaming: bool, tls: Option<UpstreamTls>) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, issuer) = ca("clients");
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let mut config = Config {
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 0,
        root_dir: dir.path().join("root"),
        node_name: "node-a".into(),
        ..Config::default()
    };
    config.authentication.client_ca_file = Some(ca_file);
    config.authentication.webhook = true;
    config.authorization.mode = AuthorizationMode::Webhook;
    let mut reviews = Reviews::default();
    reviews.tokens.insert("bob-token".into(), user("bob", &[]));
    for who in ["alice", "bob"] {
        for verb in ["create", "get"] {
            reviews
                .allowed
                .push((who.into(), verb.into(), "proxy".into()));
        }
    }
    let reviews: Arc<dyn ReviewClient> = Arc::new(reviews);
    let mut secure = SecureServer::bind_with_reviews(&config, Some(reviews))
        .await
        .unwrap();
    let runtime = Arc::new(FakeRuntime::default());
    if streaming {
        let streaming = match tls {
            Some(tls) => Streaming::with_tls(runtime.clone(), tls),
            None => Streaming::new(runtime.clone()),
        };
        secure = secure.with_streaming(streaming);
    }
    let addr = secure.local_addr().unwrap();
    let cert = secure.serving_files().cert_file.clone();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(secure.serve(Arc::new(Node), ExtraRoutes::new(), async {
        let _ = rx.await;
    }));
    Server {
        addr,
        cert,
        issuer,
        runtime,
        stop: Some(tx),
        _dir: dir,
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
    }
}

impl Server {
    /// A client trusting the server, with a certificate for `cn` when given.
    fn client(&self, cn: Option<&str>) -> reqwest::Client {
        let pem = std::fs::read(&self.cert).unwrap();
        let mut b = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .use_rustls_tls();
        for cert in reqwest::Certificate::from_pem_bundle(&pem).unwrap() {
            b = b.add_root_certificate(cert);
        }
        if let Some(cn) = cn {
            b = b.identity(identity(&self.issuer, cn, "ops"));
        }
        b.build().unwrap()
    }

    fn alice(&self) -> reqwest::Client {
        self.client(Some("alice"))
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    /// The fake runtime hands out `url`.
    fn streams_to(&self, url: String) {
        *self.runtime.url.lock().unwrap() = url;
    }
}

/// A SPDY-style upgrade request (the headers client-go's SPDY executor sends).
fn spdy(client: &reqwest::Client, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
    client
        .request(method, url)
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .header("x-stream-protocol-version", "channel.k8s.io")
}

async fn status_and_body(req: reqwest::RequestBuilder) -> (u16, String) {
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

fn within<T>(
    f: impl std::future::Future<Output = T>,
) -> tokio::time::Timeout<impl std::future::Future<Output = T>> {
    tokio::time::timeout(Duration::from_secs(10), f)
}

// ---- the proxy ----

#[tokio::test]
async fn exec_is_proxied_byte_for_byte_both_ways_with_half_close() {
    let server = server().await;
    let mut up = upstream(Mode::Echo).await;
    server.streams_to(format!("http://127.0.0.1:{}/exec/tok1?x=1", up.port));
    let path = "/exec/default/web/c?command=sh&command=-c&command=cat&input=1&output=1&error=1";
    let resp = spdy(&server.alice(), reqwest::Method::POST, server.url(path))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 101);
    assert_eq!(
        resp.headers()["x-stream-protocol-version"],
        "v4.channel.k8s.io"
    );
    assert_eq!(resp.headers()["upgrade"], "SPDY/3.1");
    assert_eq!(
        server.runtime.take_calls(),
        [Call::Exec(cri::ExecRequest {
            container_id: "cid-c".into(),
            cmd: vec!["sh".into(), "-c".into(), "cat".into()],
            tty: false,
            stdin: true,
            stdout: true,
            stderr: true,
        })]
    );
    let head = up.heads.recv().await.unwrap();
    assert!(
        head.starts_with("POST /exec/tok1?x=1 HTTP/1.1\r\n"),
        "{head}"
    );
    let lower = head.to_ascii_lowercase();
    for want in [
        "connection: upgrade\r\n",
        "upgrade: spdy/3.1\r\n",
        "x-stream-protocol-version: v4.channel.k8s.io\r\n",
        "x-stream-protocol-version: channel.k8s.io\r\n",
        &format!("host: 127.0.0.1:{}\r\n", up.port),
        "x-forwarded-for: 127.0.0.1\r\n",
    ] {
        assert!(lower.contains(want), "{want:?} in {head}");
    }

    let mut stream = resp.upgrade().await.unwrap();
    // More than one read's worth each way, every byte value.
    let sent: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    let (mut rd, mut wr) = tokio::io::split(&mut stream);
    let writer = async {
        wr.write_all(&sent).await.unwrap();
        // Half-close: the runtime sees EOF, and can still answer.
        wr.shutdown().await.unwrap();
    };
    let reader = async {
        let mut got = Vec::new();
        rd.read_to_end(&mut got).await.unwrap();
        got
    };
    let ((), got) = within(async { tokio::join!(writer, reader) })
        .await
        .unwrap();
    assert_eq!(got.len(), sent.len() + 3);
    assert!(got[..sent.len()] == sent[..], "echoed bytes differ");
    assert_eq!(&got[sent.len()..], b"bye");
    within(up.ended.recv()).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_client_that_goes_away_closes_the_runtime_s_connection() {
    let server = server().await;
    let mut up = upstream(Mode::Echo).await;
    server.streams_to(format!("http://127.0.0.1:{}/exec/tok2", up.port));
    let resp = spdy(
        &server.alice(),
        reqwest::Method::POST,
        server.url("/exec/default/web/c?command=sleep&output=1"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 101);
    let mut stream = resp.upgrade().await.unwrap();
    stream.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    within(stream.read_exact(&mut buf)).await.unwrap().unwrap();
    assert_eq!(&buf, b"ping");
    drop(stream);
    within(up.ended.recv()).await.unwrap().unwrap();
}

#[tokio::test]
async fn answers_other_than_101_are_passed_on_or_refused_as_go() {
    let server = server().await;
    let exec = "/exec/default/web/c?command=ls&output=1";

    let up = upstream(Mode::Answer(
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n\
         X-Runtime: yes\r\nContent-Length: 15\r\n\r\ntoken not found",
    ))
    .await;
    server.streams_to(format!("http://127.0.0.1:{}/exec/expired", up.port));
    let resp = spdy(&server.alice(), reqwest::Method::POST, server.url(exec))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    assert_eq!(resp.headers()["x-runtime"], "yes");
    assert_eq!(resp.text().await.unwrap(), "token not found");

    let up = upstream(Mode::Answer(
        "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n\
         5\r\nfail \r\n3\r\nnow\r\n0\r\n\r\n",
    ))
    .await;
    server.streams_to(format!("http://127.0.0.1:{}/exec/x", up.port));
    let req = spdy(&server.alice(), reqwest::Method::POST, server.url(exec));
    assert_eq!(status_and_body(req).await, (500, "fail now".into()));

    let up = upstream(Mode::Answer(
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ))
    .await;
    server.streams_to(format!("http://127.0.0.1:{}/exec/x", up.port));
    let req = spdy(&server.alice(), reqwest::Method::POST, server.url(exec));
    assert_eq!(
        status_and_body(req).await,
        (500, "invalid upgrade response: status code 200\n".into())
    );

    // Not an upgrade: Go asks the runtime first, then refuses.
    let req = server.alice().post(server.url(exec));
    assert_eq!(
        status_and_body(req).await,
        (500, "Upgrade request required\n".into())
    );

    // Nobody listening at the URL.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    server.streams_to(format!("http://127.0.0.1:{port}/exec/x"));
    let req = spdy(&server.alice(), reqwest::Method::POST, server.url(exec));
    let (status, body) = status_and_body(req).await;
    assert_eq!(status, 500);
    assert!(
        body.starts_with(&format!(
            "error dialing backend: dial tcp 127.0.0.1:{port}: "
        )),
        "{body}"
    );

    server.streams_to("/exec/relative".into());
    let req = spdy(&server.alice(), reqwest::Method::POST, server.url(exec));
    let (status, body) = status_and_body(req).await;
    assert_eq!(status, 500);
    assert!(body.contains("names no host"), "{body}");
}

#[tokio::test]
async fn attach_takes_the_tty_from_the_spec() {
    let server = server().await;
    let mut up = upstream(Mode::Echo).await;
    server.streams_to(format!("http://127.0.0.1:{}/attach/tok", up.port));
    let resp = spdy(
        &server.alice(),
        reqwest::Method::GET,
        server.url("/attach/default/web/u1/t?input=1&output=1&error=1"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 101);
    assert_eq!(
        server.runtime.take_calls(),
        [Call::Attach(cri::AttachRequest {
            container_id: "cid-t".into(),
            stdin: true,
            tty: true,
            stdout: true,
            stderr: true,
        })]
    );
    assert!(
        up.heads
            .recv()
            .await
            .unwrap()
            .starts_with("GET /attach/tok HTTP/1.1\r\n")
    );

    // A uid that is not the pod's.
    let req = spdy(
        &server.alice(),
        reqwest::Method::POST,
        server.url("/attach/default/web/u2/t?output=1"),
    );
    assert_eq!(
        status_and_body(req).await,
        (500, "pod web_default not found".into())
    );
    let req = spdy(
        &server.alice(),
        reqwest::Method::POST,
        server.url("/attach/default/web/gone?output=1"),
    );
    assert_eq!(
        status_and_body(req).await,
        (500, "container gone not found in pod web_default".into())
    );
    assert!(server.runtime.take_calls().is_empty());
}

/// The API server knows a static pod by its mirror's UID: every endpoint takes it for the
/// pod's own, as Go's `TranslatePodUID`.
#[tokio::test]
async fn a_mirror_pod_s_uid_names_its_static_pod() {
    let server = server().await;
    let up = upstream(Mode::Echo).await;
    server.streams_to(format!("http://127.0.0.1:{}/tok", up.port));
    for path in [
        "/exec/default/web/mirror-u1/c?command=true&output=1",
        "/attach/default/web/mirror-u1/t?output=1",
        "/portForward/default/web/mirror-u1?port=80",
    ] {
        let resp = spdy(&server.alice(), reqwest::Method::POST, server.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 101, "{path}");
    }
    assert_eq!(server.runtime.take_calls().len(), 3);
    // Any other UID is still refused, exec included.
    let req = spdy(
        &server.alice(),
        reqwest::Method::POST,
        server.url("/exec/default/web/u2/c?command=true&output=1"),
    );
    assert_eq!(
        status_and_body(req).await,
        (500, "container not found (\"c\")".into())
    );
}

#[tokio::test]
async fn port_forward_passes_the_query_s_ports_over_websocket() {
    let server = server().await;
    let mut up = upstream(Mode::Echo).await;
    server.streams_to(format!("http://127.0.0.1:{}/portforward/tok", up.port));
    let resp = server
        .alice()
        .get(server.url("/portForward/default/web/u1?port=80&port=8080,9090"))
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("sec-websocket-protocol", "v4.channel.k8s.io")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 101);
    assert_eq!(
        server.runtime.take_calls(),
        [Call::PortForward(cri::PortForwardRequest {
            pod_sandbox_id: "sb-new".into(),
            port: vec![80, 8080, 9090],
        })]
    );
    let head = up.heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(
        head.contains("sec-websocket-key: dghlihnhbxbszsbub25jzq==\r\n"),
        "{head}"
    );
    assert!(
        head.contains("sec-websocket-protocol: v4.channel.k8s.io\r\n"),
        "{head}"
    );

    // SPDY: the ports come with the streams.
    let resp = spdy(
        &server.alice(),
        reqwest::Method::POST,
        server.url("/portForward/default/web?port=1"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 101);
    assert_eq!(
        server.runtime.take_calls(),
        [Call::PortForward(cri::PortForwardRequest {
            pod_sandbox_id: "sb-new".into(),
            port: vec![],
        })]
    );

    let ws = |path: &str| {
        server
            .alice()
            .get(server.url(path))
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
    };
    assert_eq!(
        status_and_body(ws("/portForward/default/web")).await,
        (400, r#"query parameter "port" is required"#.into())
    );
    assert_eq!(
        status_and_body(ws("/portForward/default/web/u9?port=80")).await,
        (404, "pod not found".into())
    );
    assert_eq!(
        status_and_body(ws("/portForward/default/nope?port=80")).await,
        (404, "pod does not exist".into())
    );
    assert!(server.runtime.take_calls().is_empty());
}

#[tokio::test]
async fn missing_pods_containers_and_runtime_errors_as_go() {
    let server = server().await;
    let call = |path: &str| spdy(&server.alice(), reqwest::Method::POST, server.url(path));
    assert_eq!(
        status_and_body(call("/exec/default/nope/c?output=1")).await,
        (404, "pod does not exist".into())
    );
    assert_eq!(
        status_and_body(call("/exec/default/web/nope?output=1")).await,
        (500, r#"container not found ("nope")"#.into())
    );
    assert_eq!(
        status_and_body(call("/exec/default/web/gone?output=1")).await,
        (500, r#"container not found ("gone")"#.into())
    );
    assert_eq!(
        status_and_body(call("/exec/default/web/c?output=true")).await,
        (
            400,
            "you must specify at least 1 of stdin, stdout, stderr".into()
        )
    );
    assert!(server.runtime.take_calls().is_empty());

    *server.runtime.error.lock().unwrap() =
        Some(tonic::Status::not_found("container \"cid-c\" not found"));
    assert_eq!(
        status_and_body(call("/exec/default/web/c?output=1")).await,
        (
            404,
            "rpc error: code = NotFound desc = container \"cid-c\" not found".into()
        )
    );
    *server.runtime.error.lock().unwrap() = Some(tonic::Status::resource_exhausted("busy"));
    let resp = call("/exec/default/web/c?output=1").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers()["retry-after"], "60");
    *server.runtime.error.lock().unwrap() = Some(tonic::Status::unknown("boom"));
    assert_eq!(
        status_and_body(call("/exec/default/web/c?output=1")).await,
        (500, "rpc error: code = Unknown desc = boom".into())
    );

    assert_eq!(
        status_and_body(call("/exec/default/web")).await,
        (404, "404: Page Not Found".into())
    );
}

#[tokio::test]
async fn run_answers_the_command_s_output() {
    let server = server().await;
    *server.runtime.run.lock().unwrap() = cri::ExecSyncResponse {
        stdout: b"hi\n".to_vec(),
        stderr: b"warn\n".to_vec(),
        exit_code: 0,
    };
    let resp = server
        .alice()
        .post(server.url("/run/default/web/c?cmd=echo+hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(resp.text().await.unwrap(), "hi\nwarn\n");
    assert_eq!(
        server.runtime.take_calls(),
        [Call::Run("cid-c".into(), vec!["echo".into(), "hi".into()])]
    );

    // The form body's cmd comes before the query's.
    let req = server
        .alice()
        .post(server.url("/run/default/web/u1/c?cmd=ignored"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("cmd=ls+-l");
    assert_eq!(status_and_body(req).await.0, 200);
    assert_eq!(
        server.runtime.take_calls(),
        [Call::Run("cid-c".into(), vec!["ls".into(), "-l".into()])]
    );

    *server.runtime.run.lock().unwrap() = cri::ExecSyncResponse {
        stdout: b"partial".to_vec(),
        stderr: b"oops".to_vec(),
        exit_code: 3,
    };
    let req = server
        .alice()
        .post(server.url("/run/default/web/c?cmd=false"));
    assert_eq!(
        status_and_body(req).await,
        (500, "command 'false' exited with 3: oops".into())
    );

    *server.runtime.run.lock().unwrap() = cri::ExecSyncResponse::default();
    let resp = server
        .alice()
        .post(server.url("/run/default/web/c?cmd=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers().get("content-type").is_none());
    assert_eq!(resp.text().await.unwrap(), "");

    let req = server
        .alice()
        .post(server.url("/run/default/nope/c?cmd=true"));
    assert_eq!(
        status_and_body(req).await,
        (404, "pod does not exist".into())
    );
    let req = server
        .alice()
        .post(server.url("/run/default/web/gone?cmd=true"));
    assert_eq!(
        status_and_body(req).await,
        (500, r#"container not found ("gone")"#.into())
    );
    let req = server
        .alice()
        .get(server.url("/run/default/web/c?cmd=true"));
    assert_eq!(
        status_and_body(req).await,
        (405, "405: Method Not Allowed".into())
    );
    *server.runtime.error.lock().unwrap() = Some(tonic::Status::not_found("no such container"));
    let req = server
        .alice()
        .post(server.url("/run/default/web/c?cmd=true"));
    assert_eq!(
        status_and_body(req).await,
        (
            500,
            "rpc error: code = NotFound desc = no such container".into()
        )
    );
}

// ---- authentication and authorization ----

#[tokio::test]
async fn streaming_needs_nodes_proxy() {
    let server = server().await;
    let mut up = upstream(Mode::Echo).await;
    server.streams_to(format!("http://127.0.0.1:{}/exec/tok", up.port));
    let exec = server.url("/exec/default/web/c?command=ls&output=1");

    let anonymous = server.client(None);
    let req = spdy(&anonymous, reqwest::Method::POST, exec.clone());
    assert_eq!(status_and_body(req).await, (401, "Unauthorized".into()));

    let mallory = server.client(Some("mallory"));
    let req = spdy(&mallory, reqwest::Method::POST, exec.clone());
    assert_eq!(
        status_and_body(req).await,
        (
            403,
            "Forbidden (user=mallory, verb=create, resource=nodes, subresource(s)=[proxy])".into()
        )
    );
    let req = mallory.post(server.url("/run/default/web/c?cmd=ls"));
    assert_eq!(status_and_body(req).await.0, 403);
    assert!(server.runtime.take_calls().is_empty());

    // A bearer token reaches the kubelet, not the runtime.
    let resp = spdy(&anonymous, reqwest::Method::POST, exec)
        .bearer_auth("bob-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 101);
    let head = up.heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(!head.contains("authorization"), "{head}");
    assert!(!head.contains("bob-token"), "{head}");
}

#[tokio::test]
async fn without_a_runtime_the_streaming_paths_answer_501() {
    let server = server_with(false, None).await;
    for (method, path) in [
        (reqwest::Method::POST, "/exec/default/web/c?output=1"),
        (reqwest::Method::GET, "/attach/default/web/c"),
        (reqwest::Method::GET, "/portForward/default/web"),
        (reqwest::Method::POST, "/run/default/web/c"),
    ] {
        let req = server.alice().request(method, server.url(path));
        let (status, body) = status_and_body(req).await;
        assert_eq!(status, 501, "{path}: {body}");
        assert!(body.contains("streaming endpoint"), "{path}: {body}");
    }
}

#[tokio::test]
async fn https_streaming_urls_are_verified() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (chain, key) =
        crate::server::tls::self_signed("runtime", &[IpAddr::V4(Ipv4Addr::LOCALHOST)], now)
            .unwrap();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain.as_bytes())
        .map(Result::unwrap)
        .collect();
    let provider = crate::server::tls::provider();
    let server_config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            certs.clone(),
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        )
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(certs);
    let client_config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tls = UpstreamTls::with_config(Arc::new(client_config));
    let server = server_with(true, Some(tls)).await;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let mut up = upstream_over(Mode::Echo, Some(acceptor)).await;
    server.streams_to(format!("https://127.0.0.1:{}/exec/tls", up.port));
    let resp = spdy(
        &server.alice(),
        reqwest::Method::POST,
        server.url("/exec/default/web/c?command=cat&input=1&output=1"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 101);
    assert!(
        up.heads
            .recv()
            .await
            .unwrap()
            .starts_with("POST /exec/tls HTTP/1.1")
    );
    let mut stream = resp.upgrade().await.unwrap();
    stream.write_all(b"over tls").await.unwrap();
    stream.shutdown().await.unwrap();
    let mut got = Vec::new();
    within(stream.read_to_end(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, b"over tlsbye");

    // A certificate the proxy does not trust: no stream.
    let server = server_with(true, None).await;
    server.streams_to(format!("https://127.0.0.1:{}/exec/tls", up.port));
    let req = spdy(
        &server.alice(),
        reqwest::Method::POST,
        server.url("/exec/default/web/c?command=cat&output=1"),
    );
    let (status, body) = status_and_body(req).await;
    assert_eq!(status, 500);
    assert!(body.starts_with("error dialing backend: "), "{body}");
}
