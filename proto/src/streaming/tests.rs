#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use http::{Request, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::client::{self, Target, Transport};
use super::status::Status;
use super::*;

fn spdy_request(protocols: &[&str]) -> Request<()> {
    let mut builder = Request::post("/exec/x")
        .header("Connection", "Upgrade")
        .header("Upgrade", "SPDY/3.1");
    for p in protocols {
        builder = builder.header("X-Stream-Protocol-Version", *p);
    }
    builder.body(()).unwrap()
}

fn ws_request(protocol: Option<&str>) -> Request<()> {
    let mut builder = Request::get("/exec/x")
        .header("Connection", "keep-alive, Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==");
    if let Some(p) = protocol {
        builder = builder.header("Sec-WebSocket-Protocol", p);
    }
    builder.body(()).unwrap()
}

#[test]
fn spdy_negotiation_picks_the_clients_first_supported_protocol() {
    let n = negotiate(
        &spdy_request(&["v6.channel.k8s.io", "v4.channel.k8s.io, v3.channel.k8s.io"]),
        Endpoint::RemoteCommand,
    )
    .unwrap();
    assert_eq!(n.protocol(), "v4.channel.k8s.io");
    let response = n.response();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(response.headers()["connection"], "Upgrade");
    assert_eq!(response.headers()["upgrade"], "SPDY/3.1");
    assert_eq!(
        response.headers()["x-stream-protocol-version"],
        "v4.channel.k8s.io"
    );
    let n = negotiate(
        &spdy_request(&["portforward.k8s.io"]),
        Endpoint::PortForward,
    )
    .unwrap();
    assert_eq!(n.protocol(), "portforward.k8s.io");
}

#[test]
fn spdy_negotiation_errors_are_gos() {
    let err = negotiate(&spdy_request(&[]), Endpoint::RemoteCommand).unwrap_err();
    let response = err.response();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        response.body(),
        "unable to upgrade: X-Stream-Protocol-Version is required\n"
    );
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );

    let err = negotiate(
        &spdy_request(&["v9.channel.k8s.io", "x"]),
        Endpoint::PortForward,
    )
    .unwrap_err();
    let response = err.response();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        response.body(),
        "unable to upgrade: unable to negotiate protocol: client supports [v9.channel.k8s.io x], server accepts [portforward.k8s.io]\n"
    );
    let accepted: Vec<_> = response
        .headers()
        .get_all("x-accepted-stream-protocol-versions")
        .iter()
        .collect();
    assert_eq!(accepted, ["portforward.k8s.io"]);

    let request = Request::post("/")
        .header("X-Stream-Protocol-Version", "v4.channel.k8s.io")
        .body(())
        .unwrap();
    let err = negotiate(&request, Endpoint::RemoteCommand).unwrap_err();
    assert_eq!(err.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        err.to_string(),
        r#"unable to upgrade: missing upgrade headers in request: http.Header{"X-Stream-Protocol-Version":[]string{"v4.channel.k8s.io"}}"#
    );
}

#[test]
fn websocket_negotiation() {
    // RFC 6455's example key and accept value.
    let n = negotiate(
        &ws_request(Some("v4.base64.channel.k8s.io, v4.channel.k8s.io")),
        Endpoint::RemoteCommand,
    )
    .unwrap();
    assert_eq!(n.protocol(), "v4.base64.channel.k8s.io");
    assert!(n.is_websocket());
    let response = n.response();
    assert_eq!(
        response.headers()["sec-websocket-accept"],
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
    assert_eq!(
        response.headers()["sec-websocket-protocol"],
        "v4.base64.channel.k8s.io"
    );
    assert_eq!(response.headers()["upgrade"], "websocket");

    let n = negotiate(&ws_request(None), Endpoint::RemoteCommand).unwrap();
    assert_eq!(n.protocol(), "");
    assert!(
        n.response()
            .headers()
            .get("sec-websocket-protocol")
            .is_none()
    );

    let n = negotiate(
        &ws_request(Some("v5.channel.k8s.io")),
        Endpoint::RemoteCommand,
    )
    .unwrap();
    assert_eq!(n.protocol(), "v5.channel.k8s.io");
    // Go's kubelet speaks neither v3 nor v5 over WebSocket port-forward: 403, empty body.
    let err = negotiate(
        &ws_request(Some("v3.channel.k8s.io")),
        Endpoint::RemoteCommand,
    )
    .unwrap_err();
    assert_eq!(err.status(), StatusCode::FORBIDDEN);
    assert_eq!(err.response().body(), "");
    assert!(
        negotiate(
            &ws_request(Some("v5.channel.k8s.io")),
            Endpoint::PortForward
        )
        .is_err()
    );

    let mut bad_version = ws_request(None);
    bad_version
        .headers_mut()
        .insert("sec-websocket-version", "8".parse().unwrap());
    let err = negotiate(&bad_version, Endpoint::PortForward).unwrap_err();
    assert_eq!(err.status(), StatusCode::BAD_REQUEST);
    assert_eq!(err.response().body(), "missing or bad WebSocket Version");
    assert_eq!(err.response().headers()["sec-websocket-version"], "13");
}

#[test]
fn status_texts_are_gos() {
    assert_eq!(
        Status::for_result(&CommandResult::CommandExited {
            command: vec!["sh".into(), "-c".into(), "exit 3".into()],
            code: 3
        })
        .to_json(),
        r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
    );
    assert_eq!(
        Status::for_result(&CommandResult::Exited(0)).to_json(),
        r#"{"metadata":{},"status":"Success"}"#
    );
    assert_eq!(
        Status::for_result(&CommandResult::Failed("no such container".into())).to_json(),
        r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: error executing command in container: no such container","reason":"InternalError","details":{"causes":[{"message":"error executing command in container: no such container"}]},"code":500}"#
    );
    // Before v4: the message as text, nothing on success.
    assert_eq!(
        status::error_stream_bytes(&CommandResult::Exited(0), false),
        None
    );
    assert_eq!(
        status::error_stream_bytes(&CommandResult::Exited(2), false).unwrap(),
        b"command terminated with non-zero exit code: exit code 2"
    );
    let json = Status::for_result(&CommandResult::Exited(7)).to_json();
    assert_eq!(
        status::parse_error_stream(json.as_bytes(), true),
        CommandResult::Exited(7)
    );
    assert_eq!(
        status::parse_error_stream(b"", true),
        CommandResult::Exited(0)
    );
    assert_eq!(
        status::parse_error_stream(b"boom", false),
        CommandResult::Failed("boom".into())
    );
}

#[test]
fn resize_messages_decode_back_to_back() {
    let (sizes, used, broken) =
        resize::decode(b"{\"Width\":80,\"Height\":24}\n{\"width\":100,\"Height\":5}{\"Width\":1");
    assert_eq!(
        sizes,
        [
            TerminalSize {
                width: 80,
                height: 24
            },
            TerminalSize {
                width: 100,
                height: 5
            }
        ]
    );
    assert!(!broken);
    assert_eq!(used, 49);
    assert_eq!(
        resize::encode(TerminalSize {
            width: 3,
            height: 4
        }),
        b"{\"Width\":3,\"Height\":4}\n"
    );
    assert!(resize::decode(b"nope").2);
}

#[test]
fn a_resize_value_that_never_ends_is_refused_not_buffered() {
    let mut decoder = resize::Decoder::default();
    let (sizes, broken) = decoder.push(b"{\"Width\":80,\"Height\":24}{\"Width\":\"");
    assert_eq!(sizes.len(), 1);
    assert!(!broken);
    let mut broken = false;
    for _ in 0..=resize::MAX_PENDING / 1024 {
        broken = decoder.push(&[b'a'; 1024]).1;
    }
    assert!(broken, "an unterminated string is held without bound");
}

/// The server's half of an upgrade over a test pipe: reads the request head and answers.
pub(super) async fn accept_upgrade(
    mut io: DuplexStream,
    endpoint: Endpoint,
) -> (Negotiated, DuplexStream) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(io.read_u8().await.unwrap());
    }
    let text = String::from_utf8(head).unwrap();
    let mut lines = text.split("\r\n");
    let mut parts = lines.next().unwrap().split(' ');
    let mut builder = Request::builder()
        .method(parts.next().unwrap())
        .uri(parts.next().unwrap());
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').unwrap();
        builder = builder.header(name.trim(), value.trim());
    }
    let negotiated = negotiate(&builder.body(()).unwrap(), endpoint).unwrap();
    let response = negotiated.response();
    let mut answer = "HTTP/1.1 101 Switching Protocols\r\n".to_string();
    for (name, value) in response.headers() {
        answer.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
    }
    answer.push_str("\r\n");
    io.write_all(answer.as_bytes()).await.unwrap();
    (negotiated, io)
}

pub(super) async fn read_all(reader: Option<Box<dyn AsyncRead + Send + Unpin>>) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(mut reader) = reader {
        reader.read_to_end(&mut out).await.unwrap();
    }
    out
}

/// An exec-like server: echoes stdin to stdout, writes "err" to stderr, exits with `code`.
pub(super) async fn serve_echo(io: DuplexStream, opts: StreamOptions, code: i32) {
    let (negotiated, io) = accept_upgrade(io, Endpoint::RemoteCommand).await;
    let mut rc = negotiated.remote_command(io, opts).await.unwrap();
    if let Some(mut stderr) = rc.stderr.take() {
        stderr.write_all(b"err").await.unwrap();
    }
    if let (Some(mut stdin), Some(mut stdout)) = (rc.stdin.take(), rc.stdout.take()) {
        tokio::io::copy(&mut stdin, &mut stdout).await.unwrap();
        rc.stdout = Some(stdout);
    }
    rc.finish(CommandResult::Exited(code)).await;
}

async fn echo_round_trip(protocol: &str) {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let opts = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let server = tokio::spawn(serve_echo(server_io, opts, 3));
    let target =
        Target::new(Transport::WebSocket, "/exec/x?stdin=1", "node").with_protocols(&[protocol]);
    let mut exec = client::exec(client_io, &target, opts).await.unwrap();
    assert_eq!(exec.protocol(), protocol);
    let stdout = tokio::spawn(read_all(exec.stdout.take()));
    let stderr = tokio::spawn(read_all(exec.stderr.take()));
    let mut stdin = exec.stdin.take().unwrap();
    stdin.write_all(b"hello ").await.unwrap();
    stdin.write_all(b"world").await.unwrap();
    stdin.shutdown().await.unwrap();
    assert_eq!(exec.wait().await.unwrap(), CommandResult::Exited(3));
    assert_eq!(stdout.await.unwrap(), b"hello world");
    assert_eq!(stderr.await.unwrap(), b"err");
    server.await.unwrap();
}

#[tokio::test]
async fn websocket_v5_exec_echo_stderr_and_exit_code() {
    echo_round_trip("v5.channel.k8s.io").await;
}

#[tokio::test]
async fn websocket_v4_stdout_stderr_and_exit_code_without_stdin() {
    for protocol in [
        "v4.channel.k8s.io",
        "v4.base64.channel.k8s.io",
        "channel.k8s.io",
    ] {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let opts = StreamOptions {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let server = tokio::spawn(async move {
            let (negotiated, io) = accept_upgrade(server_io, Endpoint::RemoteCommand).await;
            let mut rc = negotiated.remote_command(io, opts).await.unwrap();
            rc.stdout
                .as_mut()
                .unwrap()
                .write_all(b"out\n")
                .await
                .unwrap();
            rc.stderr
                .as_mut()
                .unwrap()
                .write_all(b"err\n")
                .await
                .unwrap();
            rc.finish(CommandResult::Exited(3)).await;
        });
        let target =
            Target::new(Transport::WebSocket, "/exec/x", "node").with_protocols(&[protocol]);
        let mut exec = client::exec(client_io, &target, opts).await.unwrap();
        let stdout = tokio::spawn(read_all(exec.stdout.take()));
        let stderr = tokio::spawn(read_all(exec.stderr.take()));
        let result = exec.wait().await.unwrap();
        if protocol == "channel.k8s.io" {
            assert_eq!(
                result,
                CommandResult::Failed(
                    "command terminated with non-zero exit code: exit code 3".into()
                )
            );
        } else {
            assert_eq!(result, CommandResult::Exited(3), "{protocol}");
        }
        assert_eq!(stdout.await.unwrap(), b"out\n");
        assert_eq!(stderr.await.unwrap(), b"err\n");
        server.await.unwrap();
    }
}

#[tokio::test]
async fn websocket_tty_resize_is_delivered() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let opts = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: true,
    };
    let server = tokio::spawn(async move {
        let (negotiated, io) = accept_upgrade(server_io, Endpoint::RemoteCommand).await;
        let mut rc = negotiated.remote_command(io, opts).await.unwrap();
        assert!(rc.stderr.is_none(), "no stderr with a tty");
        let mut resize = rc.resize.take().unwrap();
        let first = resize.recv().await.unwrap();
        let second = resize.recv().await.unwrap();
        let text = format!(
            "{}x{} {}x{}",
            first.width, first.height, second.width, second.height
        );
        rc.stdout
            .as_mut()
            .unwrap()
            .write_all(text.as_bytes())
            .await
            .unwrap();
        rc.finish(CommandResult::Exited(0)).await;
    });
    let target = Target::new(Transport::WebSocket, "/exec/x", "node");
    let mut exec = client::exec(client_io, &target, opts).await.unwrap();
    assert!(exec.stderr.is_none());
    let stdout = tokio::spawn(read_all(exec.stdout.take()));
    let resize = exec.resize.take().unwrap();
    resize
        .send(TerminalSize {
            width: 80,
            height: 24,
        })
        .await
        .unwrap();
    resize
        .send(TerminalSize {
            width: 120,
            height: 40,
        })
        .await
        .unwrap();
    assert_eq!(exec.wait().await.unwrap(), CommandResult::Exited(0));
    assert_eq!(stdout.await.unwrap(), b"80x24 120x40");
    server.await.unwrap();
}

#[tokio::test]
async fn websocket_client_disconnect_resolves_closed() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let opts = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: false,
        tty: false,
    };
    let server = tokio::spawn(async move {
        let (negotiated, io) = accept_upgrade(server_io, Endpoint::RemoteCommand).await;
        let rc = negotiated.remote_command(io, opts).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), rc.closed())
            .await
            .expect("closed() resolves");
    });
    let target = Target::new(Transport::WebSocket, "/exec/x", "node");
    let exec = client::exec(client_io, &target, opts).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(exec);
    server.await.unwrap();
}

pub(super) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[1] ^ seed)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_port_forward_16_mib_on_4_connections() {
    const LEN: usize = 16 << 20;
    let mut tasks = Vec::new();
    for i in 0..4u16 {
        let port = 8080 + i;
        let (client_io, server_io) = tokio::io::duplex(256 * 1024);
        let server = tokio::spawn(async move {
            let (negotiated, io) = accept_upgrade(server_io, Endpoint::PortForward).await;
            let mut pf = negotiated.port_forward(io, vec![port]).await.unwrap();
            let request = pf.next().await.unwrap();
            assert_eq!(request.port, port);
            // An echo "container port".
            let (mut reader, mut writer) = tokio::io::split(request.data);
            let mut left = LEN;
            let mut buf = vec![0u8; 64 * 1024];
            while left > 0 {
                let n = reader.read(&mut buf).await.unwrap();
                assert!(n > 0);
                writer.write_all(&buf[..n]).await.unwrap();
                left -= n;
            }
        });
        let client = tokio::spawn(async move {
            let target = Target::new(
                Transport::WebSocket,
                format!("/portForward/x?port={port}"),
                "node",
            );
            let mut ports = client::port_forward_websocket(client_io, &target, &[port])
                .await
                .unwrap();
            let forwarded = ports.pop().unwrap();
            assert_eq!(forwarded.port, port);
            let payload = pattern(LEN, i as u8);
            let (mut reader, mut writer) = tokio::io::split(forwarded.data);
            let sent = payload.clone();
            let send = tokio::spawn(async move { writer.write_all(&sent).await.unwrap() });
            let mut back = vec![0u8; LEN];
            reader.read_exact(&mut back).await.unwrap();
            send.await.unwrap();
            assert!(back == payload, "payload intact on port {port}");
        });
        tasks.push(server);
        tasks.push(client);
    }
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test]
async fn websocket_port_forward_failure_reaches_the_error_channel() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        let (negotiated, io) = accept_upgrade(server_io, Endpoint::PortForward).await;
        let mut pf = negotiated.port_forward(io, vec![80, 81]).await.unwrap();
        let first = pf.next().await.unwrap();
        let second = pf.next().await.unwrap();
        assert_eq!((first.port, second.port), (80, 81));
        first
            .fail("error forwarding port 80 to pod x, uid y: connection refused")
            .await;
        drop(second);
    });
    let target = Target::new(
        Transport::WebSocket,
        "/portForward/x?port=80&port=81",
        "node",
    )
    .with_protocols(&["v4.base64.channel.k8s.io"]);
    let mut ports = client::port_forward_websocket(client_io, &target, &[80, 81])
        .await
        .unwrap();
    let mut first = ports.remove(0);
    let mut message = String::new();
    first.error.read_to_string(&mut message).await.unwrap();
    assert_eq!(
        message,
        "error forwarding port 80 to pod x, uid y: connection refused"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn upgrade_refusal_is_reported() {
    let (client_io, mut server_io) = tokio::io::duplex(4096);
    let server = tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        let _ = server_io.read(&mut buf).await.unwrap();
        server_io
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n\r\nnot found\n")
            .await
            .unwrap();
    });
    let target = Target::new(Transport::WebSocket, "/exec/x", "node");
    let opts = StreamOptions {
        stdout: true,
        ..StreamOptions::default()
    };
    match client::exec(client_io, &target, opts).await {
        Err(client::ClientError::Rejected { status, body }) => {
            assert_eq!(status, 404);
            assert_eq!(body, "not found\n");
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("upgrade accepted"),
    }
    server.await.unwrap();
}
