//! Writes the seeds of the `spdy_session` and `ws_session` targets: real sessions of the
//! crate's streaming client (exec and attach with stdin, tty and resizes; port-forward) against
//! the real server side over an in-memory pipe, each seed being what the client sent after the
//! upgrade request, behind the first byte the target reads (subprotocol, endpoint, streams).
//!
//! `cargo run -p ferrolet-fuzz --features proto --example capture_sessions` (rewrites
//! `fuzz/corpus/{spdy,ws}_session/capture-*`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use ferrolet_proto::streaming::client::{self, Target, Transport};
use ferrolet_proto::streaming::handshake::{
    SPDY_PORT_FORWARD_PROTOCOLS, SPDY_REMOTE_COMMAND_PROTOCOLS, WS_PORT_FORWARD_PROTOCOLS,
    WS_REMOTE_COMMAND_PROTOCOLS,
};
use ferrolet_proto::streaming::{CommandResult, Endpoint, StreamOptions, TerminalSize, negotiate};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};

/// The server's connection, keeping a copy of every byte read from the client.
struct Recorder {
    io: DuplexStream,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl AsyncRead for Recorder {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let new = buf.filled()[before..].to_vec();
        self.seen.lock().unwrap().extend_from_slice(&new);
        polled
    }
}

impl AsyncWrite for Recorder {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Reads the upgrade request (byte by byte, so nothing after its head is taken) and answers it.
async fn accept(
    io: &mut DuplexStream,
    endpoint: Endpoint,
) -> ferrolet_proto::streaming::Negotiated {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(io.read_u8().await.unwrap());
    }
    let head = String::from_utf8(head).unwrap();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap().split(' ');
    let mut request = http::Request::builder()
        .method(request_line.next().unwrap())
        .uri(request_line.next().unwrap());
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').unwrap();
        request = request.header(name.trim(), value.trim());
    }
    let negotiated = negotiate(&request.body(()).unwrap(), endpoint).unwrap();
    let response = negotiated.response();
    let mut out = String::from("HTTP/1.1 101 Switching Protocols\r\n");
    for (name, value) in response.headers() {
        out.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
    }
    out.push_str("\r\n");
    io.write_all(out.as_bytes()).await.unwrap();
    negotiated
}

async fn serve(
    mut io: DuplexStream,
    endpoint: Endpoint,
    opts: StreamOptions,
    ports: Vec<u16>,
) -> Vec<u8> {
    let negotiated = accept(&mut io, endpoint).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let io = Recorder {
        io,
        seen: seen.clone(),
    };
    match endpoint {
        Endpoint::RemoteCommand => {
            let mut command = negotiated.remote_command(io, opts).await.unwrap();
            let stdin = command.stdin.take();
            let resize = command.resize.take();
            let read = async {
                if let Some(mut stdin) = stdin {
                    let _ = tokio::io::copy(&mut stdin, &mut tokio::io::sink()).await;
                }
            };
            let sizes = async {
                if let Some(mut sizes) = resize {
                    while sizes.recv().await.is_some() {}
                }
            };
            let write = async {
                if let Some(out) = command.stdout.as_mut() {
                    let _ = out.write_all(b"hello\n").await;
                }
            };
            // Before v5 a WebSocket client cannot close stdin alone, and resizes come until the
            // connection ends: stop reading after a while, as a command that exits does.
            let inputs = async { tokio::join!(read, sizes) };
            let _ = tokio::join!(
                tokio::time::timeout(Duration::from_millis(200), inputs),
                write
            );
            command.finish(CommandResult::Exited(3)).await;
        }
        Endpoint::PortForward => {
            let mut forward = negotiated.port_forward(io, ports).await.unwrap();
            let mut echoes = Vec::new();
            while let Some(request) = forward.next().await {
                echoes.push(tokio::spawn(async move {
                    let mut data = request.data;
                    let mut buf = vec![0u8; 4096];
                    // A WebSocket client cannot half-close a channel: stop after a while.
                    let echo = async {
                        while let Ok(n @ 1..) = data.read(&mut buf).await {
                            if data.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    let _ = tokio::time::timeout(Duration::from_millis(200), echo).await;
                    let _ = data.shutdown().await;
                }));
            }
            for echo in echoes {
                let _ = echo.await;
            }
        }
    }
    seen.lock().unwrap().clone()
}

async fn exec(io: DuplexStream, transport: Transport, protocol: &str, opts: StreamOptions) {
    let target =
        Target::new(transport, "/exec/token", "127.0.0.1:10010").with_protocols(&[protocol]);
    let mut exec = client::exec(io, &target, opts).await.unwrap();
    if let Some(resize) = exec.resize.take() {
        for (width, height) in [(80, 24), (132, 43)] {
            let _ = resize.send(TerminalSize { width, height }).await;
        }
    }
    if let Some(mut stdin) = exec.stdin.take() {
        let _ = stdin.write_all(b"ls -l /\n").await;
        let _ = stdin.write_all(b"exit 3\n").await;
        let _ = stdin.shutdown().await;
    }
    let mut stdout = exec.stdout.take();
    let mut stderr = exec.stderr.take();
    let out = async {
        if let Some(s) = stdout.as_mut() {
            let _ = tokio::io::copy(s, &mut tokio::io::sink()).await;
        }
    };
    let err = async {
        if let Some(s) = stderr.as_mut() {
            let _ = tokio::io::copy(s, &mut tokio::io::sink()).await;
        }
    };
    tokio::join!(out, err);
    let _ = exec.wait().await;
}

async fn forward(io: DuplexStream, transport: Transport, protocol: &str, ports: &[u16]) {
    let target =
        Target::new(transport, "/portforward/token", "127.0.0.1:10010").with_protocols(&[protocol]);
    // The SPDY forwarder's connection must outlive the exchanges; dropping it ends the session.
    let (connections, forwarder) = match transport {
        Transport::Spdy => {
            let forwarder = client::port_forward_spdy(io, &target).await.unwrap();
            let mut connections = Vec::new();
            for &port in ports {
                connections.push(forwarder.connect(port).await.unwrap());
            }
            (connections, Some(forwarder))
        }
        Transport::WebSocket => (
            client::port_forward_websocket(io, &target, ports)
                .await
                .unwrap(),
            None,
        ),
    };
    for mut connection in connections {
        let _ = connection.data.write_all(b"GET / HTTP/1.0\r\n\r\n").await;
        let _ = connection.data.shutdown().await;
        let mut sink = tokio::io::sink();
        let copy = tokio::io::copy(&mut connection.data, &mut sink);
        let _ = tokio::time::timeout(Duration::from_millis(400), copy).await;
    }
    drop(forwarder);
}

fn mode(index: usize, port_forward: bool, opts: StreamOptions) -> u8 {
    index as u8
        | u8::from(port_forward) << 3
        | u8::from(opts.stdin) << 4
        | u8::from(opts.stdout) << 5
        | u8::from(opts.stderr) << 6
        | u8::from(opts.tty) << 7
}

async fn capture(
    dir: &Path,
    name: &str,
    mode: u8,
    run: impl AsyncFnOnce(DuplexStream),
    server: impl AsyncFnOnce(DuplexStream) -> Vec<u8>,
) {
    let (client_io, server_io) = tokio::io::duplex(256 * 1024);
    let (_, seen) = tokio::join!(run(client_io), server(server_io));
    let mut seed = vec![mode];
    seed.extend_from_slice(&seen);
    std::fs::write(dir.join(format!("capture-{name}")), seed).unwrap();
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let shell = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: false,
        tty: true,
    };
    let command = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let output = StreamOptions {
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
    };
    for (transport, dir, remote, forward_protocols) in [
        (
            Transport::Spdy,
            "spdy_session",
            &SPDY_REMOTE_COMMAND_PROTOCOLS[..],
            &SPDY_PORT_FORWARD_PROTOCOLS[..],
        ),
        (
            Transport::WebSocket,
            "ws_session",
            &WS_REMOTE_COMMAND_PROTOCOLS[..],
            &WS_PORT_FORWARD_PROTOCOLS[..],
        ),
    ] {
        let dir = root.join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (index, protocol) in remote.iter().enumerate() {
            if protocol.is_empty() {
                continue;
            }
            for (label, opts) in [("shell", shell), ("command", command), ("output", output)] {
                capture(
                    &dir,
                    &format!("exec-{protocol}-{label}"),
                    mode(index, false, opts),
                    async |io| exec(io, transport, protocol, opts).await,
                    async |io| serve(io, Endpoint::RemoteCommand, opts, Vec::new()).await,
                )
                .await;
            }
        }
        for (index, protocol) in forward_protocols.iter().enumerate() {
            if protocol.is_empty() {
                continue;
            }
            // Two ports (bit 4): what the WebSocket target then expects in its query.
            let two = StreamOptions {
                stdin: true,
                ..StreamOptions::default()
            };
            capture(
                &dir,
                &format!("portforward-{protocol}"),
                mode(index, true, two),
                async |io| forward(io, transport, protocol, &[8080, 9090]).await,
                async |io| serve(io, Endpoint::PortForward, two, vec![8080, 9090]).await,
            )
            .await;
        }
    }
}
