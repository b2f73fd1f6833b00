//! The client side over SPDY, as client-go: exec/attach creates its streams one after the other
//! in client-go's order (error, stdin, stdout, stderr, then resize for a tty from v3 on), each
//! answered before the next; port-forward opens an error stream (half-closed at once: the client
//! never writes on it) and a data stream per connection, with a fresh `requestID`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{ClientError, Connection, Exec, ForwardedPort};
use crate::spdy;
use crate::streaming::handshake::Version;
use crate::streaming::spdy_io::{
    ConnectionGuard, PORT, REQUEST_ID, Stream, stream_headers, stream_type,
};
use crate::streaming::{StreamOptions, TerminalSize, resize};

/// How long client-go waits for the server to answer a stream it creates.
const STREAM_REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The subprotocol port-forward needs.
const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";

async fn open(
    conn: &spdy::Connection,
    kind: &'static str,
    extra: &[(&'static str, String)],
) -> Result<Stream, ClientError> {
    let headers = stream_headers(kind, extra);
    match tokio::time::timeout(STREAM_REPLY_TIMEOUT, conn.open_stream(headers, false)).await {
        Ok(Ok(stream)) => Ok(Stream::new(stream)),
        Ok(Err(err)) => Err(ClientError::Protocol(format!(
            "creating the {kind} stream: {err}"
        ))),
        Err(_) => Err(ClientError::Protocol(format!(
            "timed out waiting for the server to answer the {kind} stream"
        ))),
    }
}

/// Exec or attach over an upgraded connection that negotiated `protocol`.
pub(super) async fn exec<T>(
    io: T,
    protocol: String,
    opts: StreamOptions,
) -> Result<Exec, ClientError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    // No protocol in the answer: client-go falls back to channel.k8s.io.
    let version = Version::of(&protocol);
    let (conn, incoming) = spdy::Connection::client(io);
    // The server opens no streams: refuse any.
    drop(incoming);
    let guard = ConnectionGuard { conn: conn.clone() };
    let mut error = open(&conn, stream_type::ERROR, &[]).await?;
    let stdin = match opts.stdin {
        true => Some(open(&conn, stream_type::STDIN, &[]).await?),
        false => None,
    };
    let stdout = match opts.stdout {
        true => Some(open(&conn, stream_type::STDOUT, &[]).await?),
        false => None,
    };
    let stderr = match opts.stderr && !opts.tty {
        true => Some(open(&conn, stream_type::STDERR, &[]).await?),
        false => None,
    };
    let resize = match opts.tty && version >= Version::V3 {
        true => Some(spawn_resize_writer(
            open(&conn, stream_type::RESIZE, &[]).await?,
        )),
        false => None,
    };
    let result = tokio::spawn(async move {
        let mut bytes = Vec::new();
        error.read_to_end(&mut bytes).await?;
        Ok(bytes)
    });
    Ok(Exec {
        stdin: stdin.map(|s| Box::new(s) as Box<dyn AsyncWrite + Send + Unpin>),
        stdout: stdout.map(|s| Box::new(s) as Box<dyn AsyncRead + Send + Unpin>),
        stderr: stderr.map(|s| Box::new(s) as Box<dyn AsyncRead + Send + Unpin>),
        resize,
        protocol,
        result,
        v4: version >= Version::V4,
        _connection: Connection::Spdy(guard),
    })
}

/// client-go's resize writer: one JSON object per size, newline-terminated.
fn spawn_resize_writer(mut stream: Stream) -> mpsc::Sender<TerminalSize> {
    let (tx, mut rx) = mpsc::channel::<TerminalSize>(4);
    tokio::spawn(async move {
        while let Some(size) = rx.recv().await {
            if stream.write_all(&resize::encode(size)).await.is_err() {
                break;
            }
        }
    });
    tx
}

/// A SPDY port-forward connection: each [`PortForwarder::connect`] forwards one connection.
pub struct PortForwarder {
    guard: ConnectionGuard,
    next_request: AtomicU64,
}

impl PortForwarder {
    /// Forwards a new connection to `port` (an error and a data stream with a fresh request id,
    /// as client-go's `handleConnection`); the error stream carries the server's failure text.
    pub async fn connect(&self, port: u16) -> Result<ForwardedPort, ClientError> {
        let request = self.next_request.fetch_add(1, Ordering::Relaxed);
        let extra = [(PORT, port.to_string()), (REQUEST_ID, request.to_string())];
        let mut error = open(&self.guard.conn, stream_type::ERROR, &extra).await?;
        // client-go never writes on the error stream.
        error.half_close();
        let data = open(&self.guard.conn, stream_type::DATA, &extra).await?;
        Ok(ForwardedPort {
            port,
            data: Box::new(data),
            error: Box::new(error),
        })
    }

    /// Resolves once the connection is gone.
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.guard.conn.closed()
    }
}

/// Port-forward over an upgraded connection that negotiated `protocol`.
pub(super) fn port_forwarder<T>(io: T, protocol: &str) -> Result<PortForwarder, ClientError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    if protocol != PORT_FORWARD_PROTOCOL {
        return Err(ClientError::Protocol(format!(
            "unable to negotiate protocol: client supports {:?}, server returned {protocol:?}",
            [PORT_FORWARD_PROTOCOL]
        )));
    }
    let (conn, incoming) = spdy::Connection::client(io);
    drop(incoming);
    Ok(PortForwarder {
        guard: ConnectionGuard { conn },
        next_request: AtomicU64::new(0),
    })
}
