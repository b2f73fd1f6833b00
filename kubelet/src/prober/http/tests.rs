//! HTTP probes against the scripted loopback server (and a self-signed TLS one).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerPort, HTTPHeader};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::prober::test_server;

fn action(path: &str, port: u16) -> HTTPGetAction {
    HTTPGetAction {
        path: Some(path.into()),
        port: IntOrString::Int(i32::from(port)),
        ..Default::default()
    }
}

async fn run(path: &str, host: &str, port: u16) -> (Outcome, String) {
    let client = client().unwrap();
    let mut a = action(path, port);
    a.host = Some(host.into());
    let req = HttpGet::new(&a, &Container::default(), "192.0.2.1", "probe").unwrap();
    probe(&client, &req, Duration::from_secs(1)).await
}

#[tokio::test]
async fn status_codes_decide() {
    let server = test_server::start().await;
    let port = server.addr.port();
    assert_eq!(
        run("/ok", "127.0.0.1", port).await,
        (Outcome::Success, "fine".into())
    );
    assert_eq!(run("/created", "127.0.0.1", port).await.0, Outcome::Success);
    assert_eq!(
        run("/missing", "127.0.0.1", port).await,
        (
            Outcome::Failure,
            "HTTP probe failed with statuscode: 404".into()
        )
    );
    assert_eq!(
        run("/error", "127.0.0.1", port).await,
        (
            Outcome::Failure,
            "HTTP probe failed with statuscode: 500".into()
        )
    );
    // The query in the path is sent.
    assert_eq!(
        run("/ok?x=1", "127.0.0.1", port).await,
        (Outcome::Success, "query".into())
    );
    let big = run("/big", "127.0.0.1", port).await;
    assert_eq!((big.0, big.1.len()), (Outcome::Success, MAX_BODY));
}

#[tokio::test]
async fn redirects_are_followed_only_on_the_same_host() {
    let server = test_server::start().await;
    let port = server.addr.port();
    assert_eq!(
        run("/redirect-local", "127.0.0.1", port).await,
        (Outcome::Success, "fine".into())
    );
    assert_eq!(
        run("/redirect-to-missing", "127.0.0.1", port).await.0,
        Outcome::Failure
    );
    // Another host: the redirect is the answer, a success with a warning.
    assert_eq!(
        run("/redirect-away", "127.0.0.1", port).await,
        (
            Outcome::Warning,
            "Probe terminated redirects, Response body: moved".into()
        )
    );
    let looped = run("/loop", "127.0.0.1", port).await;
    assert_eq!(looped.0, Outcome::Failure);
    assert!(
        looped.1.contains("stopped after 10 redirects"),
        "{}",
        looped.1
    );
    // Ten requests in all, as Go's client makes.
    let loops = server
        .heads()
        .iter()
        .filter(|h| h.starts_with("GET /loop "))
        .count();
    assert_eq!(loops, 10);
}

#[tokio::test]
async fn refusals_and_timeouts_are_failures() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let refused = run("/ok", "127.0.0.1", port).await;
    assert_eq!(refused.0, Outcome::Failure);
    assert_eq!(
        refused.1,
        format!(
            "Get \"http://127.0.0.1:{port}/ok\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    let server = test_server::start().await;
    let slow = run("/slow", "127.0.0.1", server.addr.port()).await;
    assert_eq!(slow.0, Outcome::Failure);
    assert!(slow.1.contains("Client.Timeout exceeded"), "{}", slow.1);
}

#[tokio::test]
async fn requests_carry_the_go_headers_and_the_host_override() {
    let server = test_server::start().await;
    let port = server.addr.port();
    let client = client().unwrap();
    let container = Container {
        ports: Some(vec![ContainerPort {
            name: Some("web".into()),
            container_port: i32::from(port),
            ..Default::default()
        }]),
        ..Default::default()
    };
    // Host defaults to the pod IP; the port is found by name.
    let mut a = action("/ok", 0);
    a.port = IntOrString::String("web".into());
    a.http_headers = Some(vec![
        HTTPHeader {
            name: "X-Custom".into(),
            value: "one".into(),
        },
        HTTPHeader {
            name: "X-Custom".into(),
            value: "two".into(),
        },
        HTTPHeader {
            name: "Host".into(),
            value: "example.test".into(),
        },
    ]);
    let req = HttpGet::new(&a, &container, "127.0.0.1", "probe").unwrap();
    assert_eq!(req.url.as_str(), format!("http://127.0.0.1:{port}/ok"));
    assert_eq!(
        probe(&client, &req, Duration::from_secs(1)).await.0,
        Outcome::Success
    );
    let head = server.heads().pop().unwrap().to_ascii_lowercase();
    for want in [
        "user-agent: kube-probe/1.32",
        "accept: */*",
        "host: example.test",
        "x-custom: one",
        "x-custom: two",
    ] {
        assert!(head.contains(want), "{want:?} in {head}");
    }

    // A user agent of the user's own wins; hooks name themselves.
    let mut a = action("/ok", port);
    a.http_headers = Some(vec![HTTPHeader {
        name: "User-Agent".into(),
        value: "mine".into(),
    }]);
    let req = HttpGet::new(&a, &container, "127.0.0.1", "lifecycle").unwrap();
    get(&client, &req).await.unwrap();
    let head = server.heads().pop().unwrap().to_ascii_lowercase();
    assert!(head.contains("user-agent: mine"), "{head}");
    let req = HttpGet::new(&action("/ok", port), &container, "127.0.0.1", "lifecycle").unwrap();
    get(&client, &req).await.unwrap();
    let head = server.heads().pop().unwrap().to_ascii_lowercase();
    assert!(head.contains("user-agent: kube-lifecycle/1.32"), "{head}");
    assert!(head.contains(&format!("host: 127.0.0.1:{port}")), "{head}");
}

#[test]
fn urls_are_made_as_go_makes_them() {
    let c = Container::default();
    let url = |path: &str, scheme: Option<&str>, host: &str| {
        let mut a = action(path, 8080);
        a.scheme = scheme.map(str::to_string);
        HttpGet::new(&a, &c, host, "probe")
            .map(|r| r.url.to_string())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        url("/healthz", Some("HTTPS"), "10.0.0.1"),
        Ok("https://10.0.0.1:8080/healthz".into())
    );
    assert_eq!(
        url("healthz", None, "10.0.0.1"),
        Ok("http://10.0.0.1:8080/healthz".into())
    );
    assert_eq!(
        url("/a?b=c#frag", None, "fd00::1"),
        Ok("http://[fd00::1]:8080/a?b=c".into())
    );
    // A path cannot move the request to another host.
    assert_eq!(
        url("//evil/x", None, "10.0.0.1"),
        Ok("http://10.0.0.1:8080//evil/x".into())
    );
    let mut bad = action("/", 8080);
    bad.http_headers = Some(vec![HTTPHeader {
        name: "bad header".into(),
        value: "x".into(),
    }]);
    assert!(HttpGet::new(&bad, &c, "10.0.0.1", "probe").is_err());
    bad.http_headers = None;
    bad.port = IntOrString::String("nope".into());
    assert!(HttpGet::new(&bad, &c, "10.0.0.1", "probe").is_err());
}

#[test]
fn verdicts_follow_the_status_code() {
    assert_eq!(verdict(200, "b"), (Outcome::Success, "b".into()));
    assert_eq!(verdict(299, "").0, Outcome::Success);
    assert_eq!(verdict(301, "b").0, Outcome::Warning);
    assert_eq!(verdict(399, "").0, Outcome::Warning);
    assert_eq!(
        verdict(400, "body").1,
        "HTTP probe failed with statuscode: 400"
    );
    assert_eq!(verdict(199, "").0, Outcome::Failure);
}

/// A TLS server with a self-signed certificate for another name, answering 200.
async fn tls_server() -> u16 {
    let cert = rcgen::generate_simple_self_signed(vec!["not-this-host.test".to_string()]).unwrap();
    let chain = vec![cert.cert.der().clone()];
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let Ok(mut tls) = acceptor.accept(conn).await else {
                    return;
                };
                let mut buf = [0u8; 2048];
                let _ = tls.read(&mut buf).await;
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecure",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

#[tokio::test]
async fn https_does_not_verify_certificates() {
    let port = tls_server().await;
    let client = client().unwrap();
    let mut a = action("/", port);
    a.scheme = Some("HTTPS".into());
    let req = HttpGet::new(&a, &Container::default(), "127.0.0.1", "probe").unwrap();
    assert_eq!(
        probe(&client, &req, Duration::from_secs(2)).await,
        (Outcome::Success, "secure".into())
    );
}
