//! Exec, attach and port-forward over SPDY end to end (our client against our server over an
//! in-memory pipe), and the server's answers to clients that do not behave.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::client::{self, Target, Transport};
use super::handshake::Version;
use super::tests::{accept_upgrade, pattern, read_all, serve_echo};
use super::*;
use crate::spdy;

const ALL_STREAMS: StreamOptions = StreamOptions {
    stdin: true,
    stdout: true,
    stderr: true,
    tty: false,
};

fn spdy_target(path: &str, protocols: &[&str]) -> Target {
    let target = Target::new(Transport::Spdy, path, "node");
    if protocols.is_empty() {
        target
    } else {
        target.with_protocols(protocols)
    }
}

/// Echo through a `cat`-like server loop: stdin back on stdout, "err" on stderr, exit 3.
async fn spdy_echo(protocol: &str) -> CommandResult {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(serve_echo(server_io, ALL_STREAMS, 3));
    let target = spdy_target("/exec/x?stdin=1", &[protocol]);
    let mut exec = client::exec(client_io, &target, ALL_STREAMS).await.unwrap();
    assert_eq!(exec.protocol(), protocol);
    let stdout = tokio::spawn(read_all(exec.stdout.take()));
    let stderr = tokio::spawn(read_all(exec.stderr.take()));
    let mut stdin = exec.stdin.take().unwrap();
    stdin.write_all(b"hello ").await.unwrap();
    stdin.write_all(b"world").await.unwrap();
    // The half-close is the command's stdin EOF: the server's copy loop ends on it.
    stdin.shutdown().await.unwrap();
    let result = exec.wait().await.unwrap();
    assert_eq!(stdout.await.unwrap(), b"hello world", "{protocol}");
    assert_eq!(stderr.await.unwrap(), b"err", "{protocol}");
    server.await.unwrap();
    result
}

#[tokio::test]
async fn spdy_exec_echo_stderr_and_exit_code_on_every_version() {
    // v4 and v5 carry the exit code in a Status.
    assert_eq!(
        spdy_echo("v5.channel.k8s.io").await,
        CommandResult::Exited(3)
    );
    assert_eq!(
        spdy_echo("v4.channel.k8s.io").await,
        CommandResult::Exited(3)
    );
    // v2 and v3: the status message as text.
    for protocol in ["v3.channel.k8s.io", "v2.channel.k8s.io"] {
        assert_eq!(
            spdy_echo(protocol).await,
            CommandResult::Failed("command terminated with non-zero exit code: exit code 3".into())
        );
    }
    // channel.k8s.io: Go resets the error stream once the streams are there: no result.
    assert_eq!(spdy_echo("channel.k8s.io").await, CommandResult::Exited(0));
}

#[tokio::test]
async fn spdy_negotiation_prefers_v5_and_falls_back_to_the_clients_list() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let opts = StreamOptions {
        stdout: true,
        ..StreamOptions::default()
    };
    let server = tokio::spawn(async move {
        let (negotiated, io) = accept_upgrade(server_io, Endpoint::RemoteCommand).await;
        assert_eq!(negotiated.protocol(), "v5.channel.k8s.io");
        let mut rc = negotiated.remote_command(io, opts).await.unwrap();
        assert!(rc.stdin.is_none() && rc.stderr.is_none() && rc.resize.is_none());
        rc.stdout.as_mut().unwrap().write_all(b"out").await.unwrap();
        rc.finish(CommandResult::Exited(0)).await;
    });
    // The default list (client-go's): v5 first.
    let mut exec = client::exec(client_io, &spdy_target("/exec/x", &[]), opts)
        .await
        .unwrap();
    assert_eq!(exec.protocol(), "v5.channel.k8s.io");
    assert!(exec.stdin.is_none() && exec.stderr.is_none());
    let stdout = tokio::spawn(read_all(exec.stdout.take()));
    assert_eq!(exec.wait().await.unwrap(), CommandResult::Exited(0));
    assert_eq!(stdout.await.unwrap(), b"out");
    server.await.unwrap();

    // An unsupported first choice: the next one the server knows.
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        let (negotiated, io) = accept_upgrade(server_io, Endpoint::RemoteCommand).await;
        let rc = negotiated.remote_command(io, opts).await.unwrap();
        rc.finish(CommandResult::Failed("no such container".into()))
            .await;
    });
    let target = spdy_target("/exec/x", &["v9.channel.k8s.io", "v3.channel.k8s.io"]);
    let mut exec = client::exec(client_io, &target, opts).await.unwrap();
    assert_eq!(exec.protocol(), "v3.channel.k8s.io");
    let stdout = tokio::spawn(read_all(exec.stdout.take()));
    assert_eq!(
        exec.wait().await.unwrap(),
        CommandResult::Failed(
            "Internal error occurred: error executing command in container: no such container"
                .into()
        )
    );
    assert_eq!(stdout.await.unwrap(), b"");
    server.await.unwrap();
}

async fn tty_session(protocol: &str) -> (Option<TerminalSize>, Vec<u8>) {
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
        let mut text = String::new();
        let mut seen = None;
        if let Some(mut resize) = rc.resize.take() {
            let first = resize.recv().await.unwrap();
            let second = resize.recv().await.unwrap();
            seen = Some(second);
            text = format!(
                "{}x{} {}x{}",
                first.width, first.height, second.width, second.height
            );
        }
        rc.stdout
            .as_mut()
            .unwrap()
            .write_all(text.as_bytes())
            .await
            .unwrap();
        rc.finish(CommandResult::Exited(0)).await;
        seen
    });
    let target = spdy_target("/exec/x?tty=1", &[protocol]);
    let mut exec = client::exec(client_io, &target, opts).await.unwrap();
    assert!(exec.stderr.is_none());
    let stdout = tokio::spawn(read_all(exec.stdout.take()));
    if let Some(resize) = exec.resize.take() {
        for (width, height) in [(80, 24), (120, 40)] {
            resize.send(TerminalSize { width, height }).await.unwrap();
        }
    }
    assert_eq!(exec.wait().await.unwrap(), CommandResult::Exited(0));
    let out = stdout.await.unwrap();
    (server.await.unwrap(), out)
}

#[tokio::test]
async fn spdy_tty_resize_is_delivered_from_v3_on() {
    for protocol in [
        "v5.channel.k8s.io",
        "v4.channel.k8s.io",
        "v3.channel.k8s.io",
    ] {
        let (seen, out) = tty_session(protocol).await;
        assert_eq!(
            seen,
            Some(TerminalSize {
                width: 120,
                height: 40
            }),
            "{protocol}"
        );
        assert_eq!(out, b"80x24 120x40", "{protocol}");
    }
    // v2 has no resize stream: neither side expects one.
    let (seen, out) = tty_session("v2.channel.k8s.io").await;
    assert_eq!(seen, None);
    assert_eq!(out, b"");
}

#[tokio::test]
async fn spdy_client_disconnect_resolves_closed() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let opts = StreamOptions {
        stdin: true,
        stdout: true,
        ..StreamOptions::default()
    };
    let server = tokio::spawn(async move {
        let (negotiated, io) = accept_upgrade(server_io, Endpoint::RemoteCommand).await;
        let mut rc = negotiated.remote_command(io, opts).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), rc.closed())
            .await
            .expect("closed() resolves");
        // What the client had sent is still read; then EOF, not an error.
        let mut stdin = Vec::new();
        rc.stdin
            .take()
            .unwrap()
            .read_to_end(&mut stdin)
            .await
            .unwrap();
        assert_eq!(stdin, b"partial");
        // Writing now fails, and finishing returns.
        assert!(rc.stdout.as_mut().unwrap().write_all(b"x").await.is_err());
        rc.finish(CommandResult::Exited(0)).await;
    });
    let mut exec = client::exec(client_io, &spdy_target("/exec/x", &[]), opts)
        .await
        .unwrap();
    exec.stdin
        .as_mut()
        .unwrap()
        .write_all(b"partial")
        .await
        .unwrap();
    exec.stdin.as_mut().unwrap().flush().await.unwrap();
    drop(exec);
    server.await.unwrap();
}

#[tokio::test]
async fn spdy_transport_loss_resolves_closed() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let opts = StreamOptions {
        stdout: true,
        ..StreamOptions::default()
    };
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        let (negotiated, io) = accept_upgrade(server_io, Endpoint::RemoteCommand).await;
        let rc = negotiated.remote_command(io, opts).await.unwrap();
        ready_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), rc.closed())
            .await
            .expect("closed() resolves");
    });
    // A client that vanishes without a word: the pipe just ends (a proxy we abort).
    let (upgraded, _head) = raw_upgrade(client_io, "/exec/x", "v4.channel.k8s.io").await;
    let (conn_io, proxy_io) = tokio::io::duplex(64 * 1024);
    let proxy = tokio::spawn(async move {
        let (mut a, mut b) = (upgraded, proxy_io);
        let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
    });
    let (conn, _incoming) = spdy::Connection::client(conn_io);
    let _error = open_raw(&conn, &[("streamtype", "error")]).await.unwrap();
    let _stdout = open_raw(&conn, &[("streamtype", "stdout")]).await.unwrap();
    ready_rx.await.unwrap();
    proxy.abort();
    server.await.unwrap();
}

/// An upgrade by hand, for clients that misbehave: returns the upgraded pipe.
async fn raw_upgrade(
    io: DuplexStream,
    path: &str,
    protocol: &str,
) -> (
    super::upgrade_io::Prefixed<DuplexStream>,
    super::upgrade_io::ResponseHead,
) {
    let headers = vec![
        ("Host".to_string(), "node".to_string()),
        ("Connection".to_string(), "Upgrade".to_string()),
        ("Upgrade".to_string(), "SPDY/3.1".to_string()),
        (
            "X-Stream-Protocol-Version".to_string(),
            protocol.to_string(),
        ),
    ];
    let (head, io) = super::upgrade_io::request(io, "POST", path, &headers)
        .await
        .unwrap();
    assert_eq!(head.status, 101);
    (io, head)
}

async fn open_raw(
    conn: &spdy::Connection,
    headers: &[(&'static str, &str)],
) -> Result<spdy::SpdyStream, spdy::Error> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(*name, HeaderValue::from_str(value).unwrap());
    }
    conn.open_stream(map, false).await
}

#[tokio::test]
async fn spdy_stream_creation_timeout_is_gos() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        spdy_streams::remote_command(
            server_io,
            Version::V4,
            ALL_STREAMS,
            Duration::from_millis(200),
        )
        .await
    });
    let (conn, _incoming) = spdy::Connection::client(client_io);
    // Only two of the four streams; an unknown type is answered but does not count.
    let _error = open_raw(&conn, &[("streamtype", "error")]).await.unwrap();
    let _odd = open_raw(&conn, &[("streamtype", "video")]).await.unwrap();
    let _stdout = open_raw(&conn, &[("streamtype", "stdout")]).await.unwrap();
    let err = server.await.unwrap().err().expect("times out");
    assert!(matches!(err, StreamError::StreamCreationTimeout));
    assert_eq!(
        err.to_string(),
        "timed out waiting for client to create streams"
    );
    // The server hung up.
    tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .unwrap();
}

#[tokio::test]
async fn spdy_v2_ignores_a_resize_stream_and_v1_half_closes_stdin() {
    // v2: a resize stream is answered but not counted; the session starts with the others.
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let opts = StreamOptions {
        stdin: true,
        stdout: true,
        tty: true,
        ..StreamOptions::default()
    };
    let server = tokio::spawn(async move {
        spdy_streams::remote_command(server_io, Version::V2, opts, Duration::from_secs(5)).await
    });
    let (conn, _incoming) = spdy::Connection::client(client_io);
    let _resize = open_raw(&conn, &[("streamtype", "resize")]).await.unwrap();
    let _error = open_raw(&conn, &[("streamtype", "error")]).await.unwrap();
    let _stdin = open_raw(&conn, &[("streamtype", "stdin")]).await.unwrap();
    let _stdout = open_raw(&conn, &[("streamtype", "stdout")]).await.unwrap();
    let rc = server.await.unwrap().unwrap();
    assert!(rc.resize.is_none() && rc.stdin.is_some() && rc.stdout.is_some());
    drop(rc);

    // v1: the server half-closes stdin and resets the error stream at once.
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let opts = StreamOptions {
        stdin: true,
        stdout: true,
        ..StreamOptions::default()
    };
    let server = tokio::spawn(async move {
        spdy_streams::remote_command(server_io, Version::V1, opts, Duration::from_secs(5)).await
    });
    let (conn, _incoming) = spdy::Connection::client(client_io);
    let mut error = open_raw(&conn, &[("streamtype", "error")]).await.unwrap();
    let mut stdin = open_raw(&conn, &[("streamtype", "stdin")]).await.unwrap();
    let _stdout = open_raw(&conn, &[("streamtype", "stdout")]).await.unwrap();
    let mut rc = server.await.unwrap().unwrap();
    let mut buf = Vec::new();
    // The server's half of stdin ends cleanly...
    stdin.read_to_end(&mut buf).await.unwrap();
    // ...while its error stream is reset.
    let err = error.read_to_end(&mut buf).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
    // The client's stdin still reaches the command.
    stdin.write_all(b"in").await.unwrap();
    stdin.shutdown().await.unwrap();
    let mut got = Vec::new();
    rc.stdin
        .as_mut()
        .unwrap()
        .read_to_end(&mut got)
        .await
        .unwrap();
    assert_eq!(got, b"in");
    rc.finish(CommandResult::Exited(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spdy_port_forward_16_mib_on_4_concurrent_connections() {
    const LEN: usize = 16 << 20;
    let (client_io, server_io) = tokio::io::duplex(256 * 1024);
    let server = tokio::spawn(async move {
        let (negotiated, io) = accept_upgrade(server_io, Endpoint::PortForward).await;
        assert_eq!(negotiated.protocol(), "portforward.k8s.io");
        let mut pf = negotiated.port_forward(io, Vec::new()).await.unwrap();
        let mut echoes = Vec::new();
        // An echo "container port" per request, as they come.
        while let Some(request) = pf.next().await {
            assert!((8080..8084).contains(&request.port));
            echoes.push(tokio::spawn(async move {
                let (mut reader, mut writer) = tokio::io::split(request.data);
                tokio::io::copy(&mut reader, &mut writer).await.unwrap();
                writer.shutdown().await.unwrap();
            }));
            if echoes.len() == 4 {
                break;
            }
        }
        for echo in echoes {
            echo.await.unwrap();
        }
        pf
    });
    let target = spdy_target("/portForward/x", &[]);
    let forwarder =
        std::sync::Arc::new(client::port_forward_spdy(client_io, &target).await.unwrap());
    let started = std::time::Instant::now();
    let mut clients = Vec::new();
    for i in 0..4u16 {
        let forwarder = forwarder.clone();
        clients.push(tokio::spawn(async move {
            let port = 8080 + i;
            let forwarded = forwarder.connect(port).await.unwrap();
            assert_eq!(forwarded.port, port);
            let payload = pattern(LEN, i as u8);
            let (mut reader, mut writer) = tokio::io::split(forwarded.data);
            let sent = payload.clone();
            let send = tokio::spawn(async move {
                writer.write_all(&sent).await.unwrap();
                writer.shutdown().await.unwrap();
            });
            let mut back = Vec::with_capacity(LEN);
            reader.read_to_end(&mut back).await.unwrap();
            send.await.unwrap();
            assert!(back == payload, "payload intact on port {port}");
            let mut error = String::new();
            let mut error_stream = forwarded.error;
            error_stream.read_to_string(&mut error).await.unwrap();
            assert_eq!(error, "", "no error on port {port}");
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let elapsed = started.elapsed();
    eprintln!(
        "spdy port-forward: 4 x 16 MiB echoed in {elapsed:?} ({:.0} MB/s each way)",
        (4 * LEN) as f64 / 1e6 / elapsed.as_secs_f64()
    );
    let _pf = server.await.unwrap();
}

#[tokio::test]
async fn spdy_port_forward_failure_reaches_the_error_stream() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        let (negotiated, io) = accept_upgrade(server_io, Endpoint::PortForward).await;
        let mut pf = negotiated.port_forward(io, Vec::new()).await.unwrap();
        let request = pf.next().await.unwrap();
        assert_eq!(request.port, 80);
        request
            .fail("error forwarding port 80 to pod x, uid y: connection refused")
            .await;
        // The client goes: no more requests.
        assert!(pf.next().await.is_none());
    });
    let forwarder = client::port_forward_spdy(client_io, &spdy_target("/portForward/x", &[]))
        .await
        .unwrap();
    let mut forwarded = forwarder.connect(80).await.unwrap();
    let mut message = String::new();
    forwarded.error.read_to_string(&mut message).await.unwrap();
    assert_eq!(
        message,
        "error forwarding port 80 to pod x, uid y: connection refused"
    );
    // The data stream is closed too.
    let mut rest = Vec::new();
    forwarded.data.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    drop(forwarded);
    drop(forwarder);
    server.await.unwrap();
}

#[tokio::test]
async fn spdy_port_forward_pairs_without_request_id_and_refuses_bad_streams() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        let (mut streams, _gone) =
            spdy_port_forward::port_forward(server_io, Duration::from_millis(300))
                .await
                .unwrap();
        let request = streams.next().await.unwrap();
        assert_eq!(request.port, 443);
        let mut data = request.data;
        data.write_all(b"paired").await.unwrap();
        data.shutdown().await.unwrap();
        // Keep the request until the client is done with it.
        streams.next().await.map(|r| r.port)
    });
    let (conn, _incoming) = spdy::Connection::client(client_io);
    // Refused (reset, no reply): no port, port 0, no type, an unknown type.
    for headers in [
        &[("streamtype", "data")][..],
        &[("streamtype", "data"), ("port", "0")][..],
        &[("port", "80")][..],
        &[("streamtype", "stdin"), ("port", "80")][..],
    ] {
        let err = open_raw(&conn, headers).await.unwrap_err();
        assert!(matches!(err, spdy::Error::Reset(_)), "{headers:?}: {err}");
    }
    // No requestID: the error stream's id pairs with the data stream's id minus two.
    let error = open_raw(&conn, &[("streamtype", "error"), ("port", "443")])
        .await
        .unwrap();
    let mut data = open_raw(&conn, &[("streamtype", "data"), ("port", "443")])
        .await
        .unwrap();
    assert_eq!(data.id(), error.id() + 2);
    let mut got = Vec::new();
    data.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"paired");

    // A lone error stream: Go's timeout message after the stream-creation timeout.
    let mut lone = open_raw(
        &conn,
        &[("streamtype", "error"), ("port", "80"), ("requestid", "7")],
    )
    .await
    .unwrap();
    let mut message = vec![0u8; 256];
    let n = lone.read(&mut message).await.unwrap();
    assert_eq!(
        std::str::from_utf8(&message[..n]).unwrap(),
        "(conn=spdy, request=7) timed out waiting for streams"
    );
    // A duplicate in a pair: Go's message on the pair's error stream.
    let mut first = open_raw(
        &conn,
        &[("streamtype", "error"), ("port", "80"), ("requestid", "8")],
    )
    .await
    .unwrap();
    let _second = open_raw(
        &conn,
        &[("streamtype", "error"), ("port", "80"), ("requestid", "8")],
    )
    .await
    .unwrap();
    let n = first.read(&mut message).await.unwrap();
    assert_eq!(
        std::str::from_utf8(&message[..n]).unwrap(),
        "error processing stream for request 8: error stream already assigned"
    );
    conn.close();
    assert_eq!(server.await.unwrap(), None);
}

/// Reads an HTTP/1.1 request head off `io`, as a request without body.
async fn read_request<T: tokio::io::AsyncRead + Unpin>(io: &mut T) -> http::Request<()> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(io.read_u8().await.unwrap());
    }
    let text = String::from_utf8(head).unwrap();
    let mut lines = text.split("\r\n");
    let mut parts = lines.next().unwrap().split(' ');
    let mut builder = http::Request::builder()
        .method(parts.next().unwrap())
        .uri(parts.next().unwrap());
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').unwrap();
        builder = builder.header(name.trim(), value.trim());
    }
    builder.body(()).unwrap()
}

/// One connection of the interop server: `/exec/x` echoes stdin with "err" on stderr and exit
/// code 3, `/exec/tty` writes the first terminal size, `/portForward/x` echoes every forwarded
/// connection except port 81's, which fails.
async fn serve_interop(mut tcp: tokio::net::TcpStream) {
    let request = read_request(&mut tcp).await;
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or("").to_string();
    let endpoint = if path.starts_with("/portForward") {
        Endpoint::PortForward
    } else {
        Endpoint::RemoteCommand
    };
    let negotiated = match negotiate(&request, endpoint) {
        Ok(negotiated) => negotiated,
        Err(err) => {
            let response = err.response();
            let answer = format!(
                "HTTP/1.1 {}\r\nContent-Length: {}\r\n\r\n{}",
                response.status(),
                response.body().len(),
                response.body()
            );
            tcp.write_all(answer.as_bytes()).await.unwrap();
            return;
        }
    };
    let mut answer = "HTTP/1.1 101 Switching Protocols\r\n".to_string();
    for (name, value) in negotiated.response().headers() {
        answer.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
    }
    answer.push_str("\r\n");
    tcp.write_all(answer.as_bytes()).await.unwrap();
    let flag = |name: &str| query.split('&').any(|kv| kv == format!("{name}=1"));
    let opts = StreamOptions {
        stdin: flag("stdin"),
        stdout: flag("stdout"),
        stderr: flag("stderr"),
        tty: flag("tty"),
    };
    match path.as_str() {
        "/exec/x" => {
            let mut rc = negotiated.remote_command(tcp, opts).await.unwrap();
            if let Some(mut stderr) = rc.stderr.take() {
                stderr.write_all(b"err").await.unwrap();
            }
            if let (Some(mut stdin), Some(mut stdout)) = (rc.stdin.take(), rc.stdout.take()) {
                tokio::io::copy(&mut stdin, &mut stdout).await.unwrap();
                rc.stdout = Some(stdout);
            }
            rc.finish(CommandResult::Exited(3)).await;
        }
        "/exec/tty" => {
            let mut rc = negotiated.remote_command(tcp, opts).await.unwrap();
            let size = rc.resize.as_mut().unwrap().recv().await.unwrap();
            let text = format!("{}x{}", size.width, size.height);
            let stdout = rc.stdout.as_mut().unwrap();
            stdout.write_all(text.as_bytes()).await.unwrap();
            rc.finish(CommandResult::Exited(0)).await;
        }
        _ => {
            let mut pf = negotiated.port_forward(tcp, Vec::new()).await.unwrap();
            while let Some(request) = pf.next().await {
                if request.port == 81 {
                    request
                        .fail("error forwarding port 81 to pod x, uid y: connection refused")
                        .await;
                    continue;
                }
                tokio::spawn(async move {
                    let (mut reader, mut writer) = tokio::io::split(request.data);
                    let _ = tokio::io::copy(&mut reader, &mut writer).await;
                    let _ = writer.shutdown().await;
                });
            }
        }
    }
}

/// Live interoperability with client-go: `STREAMING_GO_CLIENT=/path/to/binary` is a Go program
/// (throwaway, not in the repo) using client-go's SPDY executor (v4, v3, v2, v1; a tty with a
/// resize) and port forwarder (4 × 16 MiB echoed, a refused port) against this server, run as
/// `binary ADDR`; it prints what it saw and OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a client-go program in STREAMING_GO_CLIENT"]
async fn interop_serving_client_go() {
    let bin = std::env::var("STREAMING_GO_CLIENT").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            tcp.set_nodelay(true).unwrap();
            tokio::spawn(serve_interop(tcp));
        }
    });
    // The Go program's report goes straight to our output.
    let status = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(bin)
            .arg(addr.to_string())
            .kill_on_drop(true)
            .status(),
    )
    .await
    .expect("the Go client finishes")
    .unwrap();
    server.abort();
    assert!(status.success());
}
