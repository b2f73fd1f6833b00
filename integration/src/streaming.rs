//! What the streaming tests (exec, attach, port-forward, directly against a CRI streaming
//! server or through ferrolet's secure port) share, over the repo's own client
//! (`ferrolet_proto::streaming::client`) on either transport: connections (plain or TLS with a
//! client certificate), reading a session's streams and result, feeding stdin through a
//! command whichever protocol was chosen, ranged HTTP GETs over forwarded connections (the
//! 64 MiB transfer), and counting a process's open fds (the disconnect leak check).

use std::sync::Arc;
use std::time::Duration;

use ferrolet_proto::streaming::CommandResult;
use ferrolet_proto::streaming::client::{self, ClientError, Exec, ForwardedPort, Transport};
use futures::future::BoxFuture;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pods::LONG;

/// A connection the streaming client can run over: plain TCP or TLS.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// A boxed [`Io`].
pub type BoxIo = Box<dyn Io>;

/// A reader of one of a session's streams.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;

/// Opens a new connection and the request to upgrade it (a fresh streaming URL from the
/// runtime, or the same kubelet path again): each call is one session.
pub type Opener<'a> = Box<dyn Fn() -> BoxFuture<'a, (BoxIo, client::Target)> + Send + Sync + 'a>;

/// The transports every scenario runs over.
pub const TRANSPORTS: [Transport; 2] = [Transport::Spdy, Transport::WebSocket];

/// `http://host:port/path?query` → (`host:port`, `/path?query`).
///
/// # Panics
/// If `url` is not an http URL with a path.
pub fn split_url(url: &str) -> (String, String) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not an http URL: {url}"));
    let i = rest.find('/').unwrap_or_else(|| panic!("no path in {url}"));
    (rest[..i].to_string(), rest[i..].to_string())
}

/// A plain connection to a runtime's streaming `url` (plus `query`) and the target for it.
///
/// # Panics
/// If the connection fails.
pub async fn dial_url(url: &str, query: &str, transport: Transport) -> (BoxIo, client::Target) {
    let (host, path) = split_url(url);
    let tcp = TcpStream::connect(&host)
        .await
        .unwrap_or_else(|e| panic!("connecting to {host}: {e}"));
    let target = client::Target::new(transport, format!("{path}{query}"), host);
    (Box::new(tcp), target)
}

/// A TLS client to ferrolet's secure port: trusts only its serving certificate, presents a
/// client certificate (or none: anonymous).
#[derive(Clone)]
pub struct TlsClient {
    connector: tokio_rustls::TlsConnector,
}

impl TlsClient {
    /// Trusts the PEM certificates in `serving_cert_pem`; presents `identity` (a DER
    /// certificate chain and its PKCS#8 key) if given.
    ///
    /// # Panics
    /// If the certificates or key are unusable.
    pub fn new(serving_cert_pem: &[u8], identity: Option<(Vec<Vec<u8>>, Vec<u8>)>) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        for cert in pem_certificates(serving_cert_pem) {
            roots
                .add(cert)
                .unwrap_or_else(|e| panic!("trusting the serving certificate: {e}"));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|e| panic!("TLS versions: {e}"))
            .with_root_certificates(roots);
        let config = match identity {
            Some((chain, key)) => builder
                .with_client_auth_cert(
                    chain.into_iter().map(CertificateDer::from).collect(),
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
                )
                .unwrap_or_else(|e| panic!("client certificate: {e}")),
            None => builder.with_no_client_auth(),
        };
        Self {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        }
    }

    /// A TLS connection to `addr` (verified as the IP it is) and the target for `path`.
    ///
    /// # Panics
    /// If the connection or the handshake fails.
    pub async fn dial(
        &self,
        addr: std::net::SocketAddr,
        path_and_query: &str,
        transport: Transport,
    ) -> (BoxIo, client::Target) {
        self.try_dial(addr, path_and_query, transport)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`TlsClient::dial`], saying why it failed instead of panicking.
    pub async fn try_dial(
        &self,
        addr: std::net::SocketAddr,
        path_and_query: &str,
        transport: Transport,
    ) -> Result<(BoxIo, client::Target), String> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let tls = self
            .connector
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await
            .map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
        let mut target = client::Target::new(transport, path_and_query, addr.to_string());
        // kubectl speaks SPDY exec and port-forward with POST; WebSocket needs GET.
        if transport == Transport::Spdy {
            target.method = "POST".into();
        }
        Ok((Box::new(tls), target))
    }
}

/// Percent-encodes a query value: everything but RFC 3986's unreserved characters.
pub fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The DER bodies of the PEM blocks labelled `label` (`CERTIFICATE`, `PRIVATE KEY`).
pub fn pem_blocks(pem: &[u8], label: &str) -> Vec<Vec<u8>> {
    use base64::Engine;
    let text = String::from_utf8_lossy(pem);
    let (begin, end) = (
        format!("-----BEGIN {label}-----"),
        format!("-----END {label}-----"),
    );
    let mut blocks = Vec::new();
    let mut body = None::<String>;
    for line in text.lines().map(str::trim) {
        if line == begin {
            body = Some(String::new());
        } else if line == end {
            if let Some(b) = body.take()
                && let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b.as_bytes())
            {
                blocks.push(der);
            }
        } else if let Some(b) = body.as_mut() {
            b.push_str(line);
        }
    }
    blocks
}

/// The DER certificates in a PEM text.
fn pem_certificates(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    pem_blocks(pem, "CERTIFICATE")
        .into_iter()
        .map(CertificateDer::from)
        .collect()
}

/// All of a stream, as text ("" without the stream).
///
/// # Panics
/// If reading fails or takes longer than [`LONG`].
pub async fn read_all(r: Option<Reader>) -> String {
    let mut s = String::new();
    if let Some(mut r) = r {
        tokio::time::timeout(LONG, r.read_to_string(&mut s))
            .await
            .unwrap_or_else(|_| panic!("stream not ended within {LONG:?}; so far {s:?}"))
            .unwrap_or_else(|e| panic!("reading a stream: {e}"));
    }
    s
}

/// The exit code of a result.
///
/// # Panics
/// If the command failed to run.
pub fn exit_code(r: &CommandResult) -> i32 {
    match r {
        CommandResult::Exited(c) => *c,
        CommandResult::CommandExited { code, .. } => *code,
        CommandResult::Failed(m) => panic!("the command failed: {m}"),
    }
}

/// Reads stdout and stderr to their ends, then the result: (stdout, stderr, exit code).
///
/// # Panics
/// If a stream or the result cannot be read.
pub async fn finish(mut e: Exec) -> (String, String, i32) {
    let (out, err) = tokio::join!(read_all(e.stdout.take()), read_all(e.stderr.take()));
    let result = tokio::time::timeout(LONG, e.wait())
        .await
        .unwrap_or_else(|_| panic!("no result within {LONG:?} (out {out:?}, err {err:?})"))
        .unwrap_or_else(|err| panic!("reading the result: {err}"));
    (out, err, exit_code(&result))
}

/// Whether the session can tell the command its stdin ended: SPDY half-closes the stream,
/// WebSocket needs `v5.channel.k8s.io`'s close signal (v4, the newest containerd 1.6's
/// streaming server speaks, has none).
pub fn can_close_stdin(transport: Transport, e: &Exec) -> bool {
    transport == Transport::Spdy || e.protocol() == "v5.channel.k8s.io"
}

/// Pipes `data` through a running `cat`: writes it, sends EOF where the protocol can, and
/// returns what came back and, when EOF could be sent, the exit code (`cat` then ends); where
/// it cannot, reads back exactly as many bytes and leaves the session to the caller's drop.
///
/// # Panics
/// If a stream fails or stalls for [`LONG`].
pub async fn pipe_through_cat(
    transport: Transport,
    mut e: Exec,
    data: &str,
) -> (String, Option<i32>) {
    let closes = can_close_stdin(transport, &e);
    let Some(mut stdin) = e.stdin.take() else {
        panic!("the session has no stdin");
    };
    let send = async {
        stdin
            .write_all(data.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("writing stdin: {e}"));
        if closes {
            stdin
                .shutdown()
                .await
                .unwrap_or_else(|e| panic!("closing stdin: {e}"));
        }
        stdin
    };
    if closes {
        let (_stdin, (out, err, code)) = tokio::join!(send, finish(e));
        assert_eq!(err, "", "cat wrote to stderr");
        (out, Some(code))
    } else {
        let Some(mut stdout) = e.stdout.take() else {
            panic!("the session has no stdout");
        };
        let read = async {
            let mut buf = vec![0; data.len()];
            tokio::time::timeout(LONG, stdout.read_exact(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("cat's output not back within {LONG:?}"))
                .unwrap_or_else(|e| panic!("reading cat's output: {e}"));
            String::from_utf8_lossy(&buf).into_owned()
        };
        let (_stdin, out) = tokio::join!(send, read);
        (out, None)
    }
}

/// Reads `r` until what came ends with `needle`.
///
/// # Panics
/// If the stream ends or stalls for [`LONG`] first.
pub async fn read_until(r: &mut Reader, needle: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(needle.as_bytes()) {
        let n = tokio::time::timeout(LONG, r.read(&mut buf))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{needle:?} not read within {LONG:?}; got {:?}",
                    String::from_utf8_lossy(&got)
                )
            })
            .unwrap_or_else(|e| panic!("reading: {e}"));
        assert_ne!(
            n,
            0,
            "the stream ended before {needle:?}: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Asserts that an upgrade was refused with `status` and, when given, a body that contains
/// `body` (the client hands over the body's start as sent: chunked, it is framed).
///
/// # Panics
/// If it was not.
pub fn assert_rejected<T>(r: Result<T, ClientError>, status: u16, body: Option<&str>) {
    match r {
        Err(ClientError::Rejected { status: s, body: b }) => {
            assert_eq!(s, status, "refused with {s}: {b}");
            if let Some(body) = body {
                assert!(b.contains(body), "refused with {s}: {b:?}");
            }
        }
        Err(e) => panic!("expected {status}, got {e}"),
        Ok(_) => panic!("expected {status}, got a session"),
    }
}

/// `GET path` with `Range: bytes=start-end` (inclusive) over a forwarded connection: the body,
/// whose length the 206's Content-Length gives (WebSocket v4 has no half-close to end it by).
///
/// # Panics
/// If the answer is not a 206 of that range or the transfer stalls for [`LONG`].
pub async fn ranged_get(port: &mut ForwardedPort, path: &str, start: u64, end: u64) -> Vec<u8> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: x\r\nRange: bytes={start}-{end}\r\n\r\n");
    port.data
        .write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("sending the request: {e}"));
    let transfer = async {
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        let (head_len, length) = loop {
            let n = port
                .data
                .read(&mut chunk)
                .await
                .unwrap_or_else(|e| panic!("reading the answer: {e}"));
            if n == 0 {
                let mut error = String::new();
                let _ = tokio::time::timeout(
                    Duration::from_secs(2),
                    port.error.read_to_string(&mut error),
                )
                .await;
                panic!(
                    "the connection ended in the head: {:?} (error stream: {error:?})",
                    String::from_utf8_lossy(&buf)
                );
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..i]).into_owned();
                assert!(head.starts_with("HTTP/1.1 206"), "{head}");
                let length: u64 = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or_else(|| panic!("no Content-Length: {head}"));
                break (i + 4, length);
            }
        };
        assert_eq!(length, end - start + 1);
        let mut body = buf.split_off(head_len);
        let want = usize::try_from(length).unwrap_or(usize::MAX);
        while body.len() < want {
            let n = port
                .data
                .read(&mut chunk)
                .await
                .unwrap_or_else(|e| panic!("reading the body: {e}"));
            assert_ne!(n, 0, "the body ended at {} of {want} bytes", body.len());
            body.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(body.len(), want, "more than Content-Length");
        body
    };
    tokio::time::timeout(Duration::from_secs(240), transfer)
        .await
        .unwrap_or_else(|_| panic!("{path} bytes {start}-{end} not transferred within 240 s"))
}

/// Forwarded connections to `port`, `n` of them at once: over SPDY all on one session (a fresh
/// request id each, as kubectl port-forward does), over WebSocket one session each (the
/// protocol fixes a session's connections when it opens).
///
/// # Panics
/// If a session or connection cannot be opened.
pub async fn forwarded_connections(
    transport: Transport,
    open: &Opener<'_>,
    port: u16,
    n: usize,
) -> (Vec<ForwardedPort>, Option<client::PortForwarder>) {
    match transport {
        Transport::Spdy => {
            let (io, target) = open().await;
            let forwarder = client::port_forward_spdy(io, &target)
                .await
                .unwrap_or_else(|e| panic!("SPDY port-forward: {e}"));
            let conns = futures::future::join_all((0..n).map(|_| forwarder.connect(port))).await;
            let conns = conns
                .into_iter()
                .map(|c| c.unwrap_or_else(|e| panic!("forwarding a connection: {e}")))
                .collect();
            (conns, Some(forwarder))
        }
        Transport::WebSocket => {
            let sessions = futures::future::join_all((0..n).map(|_| async {
                let (io, target) = open().await;
                client::port_forward_websocket(io, &target, &[port])
                    .await
                    .unwrap_or_else(|e| panic!("WebSocket port-forward: {e}"))
            }))
            .await;
            let conns = sessions.into_iter().flatten().collect::<Vec<_>>();
            assert_eq!(conns.len(), n, "a session without its connection");
            (conns, None)
        }
    }
}

/// Fetches `path` (of `size` bytes) in `n` equal ranges, each over its own forwarded
/// connection, all at once; the file reassembled.
///
/// # Panics
/// As [`forwarded_connections`] and [`ranged_get`].
pub async fn fetch_in_ranges(
    transport: Transport,
    open: &Opener<'_>,
    port: u16,
    path: &str,
    size: u64,
    n: u64,
) -> Vec<u8> {
    let count = usize::try_from(n).unwrap_or(1);
    let (conns, _forwarder) = forwarded_connections(transport, open, port, count).await;
    let part = size / n;
    let parts = futures::future::join_all(conns.into_iter().zip(0..n).map(|(mut c, i)| {
        let path = path.to_string();
        async move {
            let end = if i == n - 1 { size } else { (i + 1) * part };
            ranged_get(&mut c, &path, i * part, end - 1).await
        }
    }))
    .await;
    parts.concat()
}

/// Hex SHA-256 of `bytes`, as `sha256sum` prints it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Open fds of `pid`.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// Open fds of `pid` with their targets, for a failure message.
pub fn fd_list(pid: u32) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut fds: Vec<String> = rd
        .flatten()
        .map(|e| {
            let target = std::fs::read_link(e.path())
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            format!("{} -> {target}", e.file_name().to_string_lossy())
        })
        .collect();
    fds.sort();
    fds
}
