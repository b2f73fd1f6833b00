//! The client side of exec/attach and port-forward, over a connection the caller opened (plain,
//! TLS, with client certificates: the caller's IO): the HTTP/1.1 upgrade, then the streams.
//! For our tests and benchmarks, and for ferrolet's own use.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::handshake::{HEADER_PROTOCOL_VERSION, Version};
use super::port_forward::ForwardIo;
use super::remote_command::{CommandResult, channel};
use super::upgrade_io::{self, Prefixed, ResponseHead};
use super::ws::{ChannelDuplex, Framing, Mux};
use super::{StreamOptions, TerminalSize, resize, status};

mod spdy;
pub use spdy::PortForwarder;

/// Which transport the client upgrades to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `Upgrade: SPDY/3.1`.
    Spdy,
    /// `Upgrade: websocket`.
    WebSocket,
}

/// Where and how to ask for the upgrade.
#[derive(Debug, Clone)]
pub struct Target {
    /// SPDY or WebSocket.
    pub transport: Transport,
    /// Request method (WebSocket needs GET; kubectl uses POST for SPDY exec).
    pub method: String,
    /// Path and query, e.g. `/exec/abc?cmd=sh&stdout=true`.
    pub path_and_query: String,
    /// The Host header.
    pub host: String,
    /// Subprotocols to offer, most preferred first (empty: [`Target::default_protocols`]).
    pub protocols: Vec<String>,
    /// Extra headers (e.g. Authorization).
    pub headers: Vec<(String, String)>,
}

impl Target {
    /// A target with the default method and protocols.
    pub fn new(
        transport: Transport,
        path_and_query: impl Into<String>,
        host: impl Into<String>,
    ) -> Target {
        Target {
            transport,
            method: "GET".into(),
            path_and_query: path_and_query.into(),
            host: host.into(),
            protocols: Vec::new(),
            headers: Vec::new(),
        }
    }

    /// Offers these subprotocols instead of the defaults.
    pub fn with_protocols(mut self, protocols: &[&str]) -> Target {
        self.protocols = protocols.iter().map(|p| p.to_string()).collect();
        self
    }

    /// What the client offers by default for an endpoint.
    pub fn default_protocols(&self, port_forward: bool) -> Vec<String> {
        let list: &[&str] = match (self.transport, port_forward) {
            (Transport::Spdy, false) => &[
                "v5.channel.k8s.io",
                "v4.channel.k8s.io",
                "v3.channel.k8s.io",
                "v2.channel.k8s.io",
                "channel.k8s.io",
            ],
            (Transport::Spdy, true) => &["portforward.k8s.io"],
            (Transport::WebSocket, false) => &["v5.channel.k8s.io", "v4.channel.k8s.io"],
            (Transport::WebSocket, true) => &["v4.channel.k8s.io"],
        };
        list.iter().map(|p| p.to_string()).collect()
    }
}

/// What went wrong on the client side.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection failed.
    #[error("streaming client: {0}")]
    Io(#[from] io::Error),
    /// The server answered the upgrade with an error.
    #[error("upgrade refused: {status}: {body}")]
    Rejected {
        /// HTTP status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The server's answer broke the protocol.
    #[error("streaming protocol: {0}")]
    Protocol(String),
}

/// A running exec or attach, client side.
pub struct Exec {
    /// Standard input to the command (shut it down to send EOF: v5 and SPDY only).
    pub stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// The command's standard output (read it: unread output holds the others back).
    pub stdout: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// The command's standard error.
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// Sends terminal sizes (tty).
    pub resize: Option<mpsc::Sender<TerminalSize>>,
    protocol: String,
    result: JoinHandle<io::Result<Vec<u8>>>,
    v4: bool,
    /// Keeps the connection open while the caller has shut down its own streams.
    _connection: Connection,
}

enum Connection {
    WebSocket(#[allow(dead_code)] Mux),
    /// Closed (streams reset, GOAWAY) when the Exec is dropped, as client-go's `conn.Close()`.
    Spdy(#[allow(dead_code)] super::spdy_io::ConnectionGuard),
}

impl Exec {
    /// The subprotocol the server chose.
    pub fn protocol(&self) -> &str {
        &self.protocol
    }

    /// Waits for the result on the error stream: the exit code (0 on success) or the failure.
    pub async fn wait(self) -> Result<CommandResult, ClientError> {
        let bytes = self
            .result
            .await
            .map_err(|err| ClientError::Protocol(format!("error stream reader: {err}")))??;
        Ok(status::parse_error_stream(&bytes, self.v4))
    }
}

fn upgrade_headers(target: &Target, protocols: &[String], key: &str) -> Vec<(String, String)> {
    let mut headers = vec![("Host".to_string(), target.host.clone())];
    match target.transport {
        Transport::Spdy => {
            headers.push(("Connection".into(), "Upgrade".into()));
            headers.push(("Upgrade".into(), "SPDY/3.1".into()));
            for protocol in protocols {
                headers.push((HEADER_PROTOCOL_VERSION.into(), protocol.clone()));
            }
        }
        Transport::WebSocket => {
            headers.push(("Connection".into(), "Upgrade".into()));
            headers.push(("Upgrade".into(), "websocket".into()));
            headers.push(("Sec-WebSocket-Version".into(), "13".into()));
            headers.push(("Sec-WebSocket-Key".into(), key.into()));
            if !protocols.is_empty() {
                headers.push(("Sec-WebSocket-Protocol".into(), protocols.join(", ")));
            }
        }
    }
    headers.extend(target.headers.iter().cloned());
    headers
}

/// Performs the upgrade; returns the chosen protocol and the upgraded connection.
async fn upgrade<T>(
    io: T,
    target: &Target,
    port_forward: bool,
) -> Result<(String, Prefixed<T>), ClientError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let protocols = if target.protocols.is_empty() {
        target.default_protocols(port_forward)
    } else {
        target.protocols.clone()
    };
    let key = generate_key();
    let headers = upgrade_headers(target, &protocols, &key);
    let (head, io) =
        upgrade_io::request(io, &target.method, &target.path_and_query, &headers).await?;
    if head.status != 101 {
        return Err(rejected(&head));
    }
    let protocol = match target.transport {
        Transport::Spdy => head
            .header(HEADER_PROTOCOL_VERSION)
            .unwrap_or("")
            .to_string(),
        Transport::WebSocket => {
            if head.header("sec-websocket-accept")
                != Some(derive_accept_key(key.as_bytes()).as_str())
            {
                return Err(ClientError::Protocol("bad Sec-WebSocket-Accept".into()));
            }
            head.header("sec-websocket-protocol")
                .unwrap_or("")
                .to_string()
        }
    };
    Ok((protocol, io))
}

fn rejected(head: &ResponseHead) -> ClientError {
    ClientError::Rejected {
        status: head.status,
        body: String::from_utf8_lossy(&head.body_start).into_owned(),
    }
}

/// Starts an exec or attach over `io` (upgrade included).
pub async fn exec<T>(io: T, target: &Target, opts: StreamOptions) -> Result<Exec, ClientError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let opts = StreamOptions {
        stderr: opts.stderr && !opts.tty,
        ..opts
    };
    let (protocol, io) = upgrade(io, target, false).await?;
    match target.transport {
        Transport::WebSocket => Ok(exec_websocket(io, protocol, opts).await),
        Transport::Spdy => spdy::exec(io, protocol, opts).await,
    }
}

async fn exec_websocket<T>(io: T, protocol: String, opts: StreamOptions) -> Exec
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let version = Version::of(&protocol);
    let framing = Framing {
        base64: protocol.contains("base64."),
        close_signal: version == Version::V5,
        send_close_signal: version == Version::V5,
    };
    let readable = [channel::STDOUT, channel::STDERR, channel::ERROR];
    let (mux, mut readers) = Mux::start(io, Role::Client, framing, &readable).await;
    let resize = opts.tty.then(|| {
        let (tx, mut rx) = mpsc::channel::<TerminalSize>(4);
        let mut writer = mux.writer(channel::RESIZE);
        tokio::spawn(async move {
            while let Some(size) = rx.recv().await {
                if writer.write_all(&resize::encode(size)).await.is_err() {
                    break;
                }
            }
        });
        tx
    });
    let mut error = readers.remove(&channel::ERROR);
    let result = tokio::spawn(async move {
        let mut bytes = Vec::new();
        if let Some(error) = error.as_mut() {
            error.read_to_end(&mut bytes).await?;
        }
        Ok(bytes)
    });
    Exec {
        stdin: opts
            .stdin
            .then(|| Box::new(mux.writer(channel::STDIN)) as Box<dyn AsyncWrite + Send + Unpin>),
        stdout: readers
            .remove(&channel::STDOUT)
            .filter(|_| opts.stdout)
            .map(|r| Box::new(r) as Box<dyn AsyncRead + Send + Unpin>),
        stderr: readers
            .remove(&channel::STDERR)
            .filter(|_| opts.stderr)
            .map(|r| Box::new(r) as Box<dyn AsyncRead + Send + Unpin>),
        resize,
        protocol,
        result,
        v4: version >= Version::V4,
        _connection: Connection::WebSocket(mux),
    }
}

/// Opens a SPDY port-forward (`portforward.k8s.io`); each [`PortForwarder::connect`] then
/// forwards one connection, as client-go's port forwarder.
pub async fn port_forward_spdy<T>(io: T, target: &Target) -> Result<PortForwarder, ClientError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (protocol, io) = upgrade(io, target, true).await?;
    spdy::port_forwarder(io, &protocol)
}

/// One forwarded connection (WebSocket: one per port of the query; SPDY: one per
/// [`PortForwarder::connect`]).
pub struct ForwardedPort {
    /// The port.
    pub port: u16,
    /// The connection's bytes.
    pub data: Box<dyn ForwardIo>,
    /// The error text the server reports, if any (read to end).
    pub error: Box<dyn AsyncRead + Send + Unpin>,
}

/// Opens a WebSocket port-forward to `ports` (one connection each, as Go's WebSocket protocol:
/// put them in the query as `?port=80&port=443`).
pub async fn port_forward_websocket<T>(
    io: T,
    target: &Target,
    ports: &[u16],
) -> Result<Vec<ForwardedPort>, ClientError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (protocol, io) = upgrade(io, target, true).await?;
    let framing = Framing {
        base64: protocol.contains("base64."),
        close_signal: false,
        send_close_signal: false,
    };
    let channels: Vec<u8> = (0..ports.len() * 2).map(|c| c as u8).collect();
    let (mux, mut readers) = Mux::start(io, Role::Client, framing, &channels).await;
    let mut forwarded = Vec::with_capacity(ports.len());
    for (i, &port) in ports.iter().enumerate() {
        let (data, error) = ((2 * i) as u8, (2 * i + 1) as u8);
        let (Some(mut data_reader), Some(mut error_reader)) =
            (readers.remove(&data), readers.remove(&error))
        else {
            continue;
        };
        // Each channel opens with the port, little-endian.
        for reader in [&mut data_reader, &mut error_reader] {
            let mut prefix = [0u8; 2];
            reader.read_exact(&mut prefix).await?;
            if u16::from_le_bytes(prefix) != port {
                return Err(ClientError::Protocol(format!(
                    "channel {i} opened for port {}",
                    u16::from_le_bytes(prefix)
                )));
            }
        }
        forwarded.push(ForwardedPort {
            port,
            data: Box::new(ChannelDuplex {
                reader: data_reader,
                writer: mux.writer(data),
            }),
            error: Box::new(error_reader),
        });
    }
    Ok(forwarded)
}
