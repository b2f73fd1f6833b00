//! The server side of port-forward: over SPDY a data and an error stream per `requestID` (Go's
//! httpStreamHandler), over WebSocket channels 2i (data) and 2i+1 (error) for the i-th port of
//! the query, each opened by the port number (two bytes, little-endian) as Go's wsstream
//! port-forward handler does.

use std::collections::VecDeque;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_util::sync::CancellationToken;

use super::handshake::{Negotiated, Transport};
use super::ws::{ChannelDuplex, Framing, Mux};
use super::{StreamError, spdy_port_forward};

/// A forwarded connection's byte stream.
pub trait ForwardIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> ForwardIo for T {}

/// The forwarding requests of one port-forward connection.
pub struct PortForward {
    pending: VecDeque<ForwardRequest>,
    source: Source,
    gone: CancellationToken,
}

enum Source {
    /// WebSocket: every request exists from the start; the mux lives as long as its channels.
    WebSocket,
    Spdy(spdy_port_forward::PortForwardStreams),
}

/// One request to forward a connection to `port`.
pub struct ForwardRequest {
    /// The port in the pod's network namespace.
    pub port: u16,
    /// The client's byte stream: copy it to and from the port's connection.
    pub data: Box<dyn ForwardIo>,
    pub(crate) error: Box<dyn AsyncWrite + Send + Unpin>,
}

impl std::fmt::Debug for ForwardRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardRequest")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl ForwardRequest {
    /// Reports a failure (e.g. connection refused) on its error stream. Go's kubelet writes
    /// `error forwarding port {port} to pod {pod}, uid {uid}: {err}`: pass that whole text.
    pub async fn fail(mut self, message: &str) {
        let _ = self.error.write_all(message.as_bytes()).await;
        let _ = self.error.shutdown().await;
        let _ = self.data.shutdown().await;
    }

    pub(crate) fn new(
        port: u16,
        data: Box<dyn ForwardIo>,
        error: Box<dyn AsyncWrite + Send + Unpin>,
    ) -> ForwardRequest {
        ForwardRequest { port, data, error }
    }
}

impl PortForward {
    /// The next forwarding request (SPDY: a data+error stream pair with one requestID;
    /// WebSocket: one per port, at the start). None once the client has gone.
    pub async fn next(&mut self) -> Option<ForwardRequest> {
        if let Some(request) = self.pending.pop_front() {
            return Some(request);
        }
        match &mut self.source {
            Source::WebSocket => {
                self.gone.cancelled().await;
                None
            }
            Source::Spdy(streams) => streams.next().await,
        }
    }

    /// Resolves when the client has gone away.
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.gone.clone().cancelled_owned()
    }
}

impl Negotiated {
    /// Server side of port-forward; `ports` from the query (WebSocket needs them; SPDY
    /// takes them from each stream's `port` header).
    pub async fn port_forward<T>(self, io: T, ports: Vec<u16>) -> Result<PortForward, StreamError>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        match &self.transport {
            Transport::WebSocket { base64, .. } => {
                let framing = Framing {
                    base64: *base64,
                    close_signal: false,
                    send_close_signal: false,
                };
                Ok(websocket(io, framing, ports).await)
            }
            Transport::Spdy => {
                let (streams, gone) =
                    spdy_port_forward::port_forward(io, super::STREAM_CREATION_TIMEOUT).await?;
                Ok(PortForward {
                    pending: VecDeque::new(),
                    source: Source::Spdy(streams),
                    gone,
                })
            }
        }
    }
}

async fn websocket<T>(io: T, framing: Framing, ports: Vec<u16>) -> PortForward
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let data_channels: Vec<u8> = (0..ports.len()).map(|i| (2 * i) as u8).collect();
    let (mux, mut readers) = Mux::start(io, Role::Server, framing, &data_channels).await;
    let mut pending = VecDeque::new();
    for (i, port) in ports.into_iter().enumerate() {
        let data = (2 * i) as u8;
        let error = data + 1;
        let prefix = Bytes::copy_from_slice(&port.to_le_bytes());
        let _ = mux.send(data, prefix.clone()).await;
        let _ = mux.send(error, prefix).await;
        let Some(reader) = readers.remove(&data) else {
            continue;
        };
        let duplex = ChannelDuplex {
            reader,
            writer: mux.writer(data),
        };
        pending.push_back(ForwardRequest::new(
            port,
            Box::new(duplex),
            Box::new(mux.writer(error)),
        ));
    }
    let gone = mux.gone();
    // The connection ends once every request's channels are dropped (Go closes it when all its
    // port handlers return).
    drop(mux);
    PortForward {
        pending,
        source: Source::WebSocket,
        gone,
    }
}
