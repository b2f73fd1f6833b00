//! The server side of exec and attach over SPDY, as Go's kubelet streaming server: the client
//! opens one stream per `streamType` (error, stdin, stdout, stderr, resize); each is answered as
//! it arrives, and the session starts once the expected number has been answered (Go's
//! `waitForStreams`), or fails after the stream-creation timeout.

use std::time::Duration;

use http::HeaderMap;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use super::handshake::Version;
use super::remote_command::{self, RemoteCommand};
use super::spdy_io::{ConnectionGuard, STREAM_TYPE, Stream, header, stream_type};
use super::{StreamError, StreamOptions, resize};
use crate::spdy::Connection;

/// The SPDY connection behind a remotecommand session (closed when dropped).
pub(crate) struct Session {
    guard: ConnectionGuard,
}

impl Session {
    /// Ends the connection once the error stream is out, as Go's deferred `conn.Close()`: every
    /// stream still open is reset (the client reads what came before as the end), then GOAWAY.
    pub(crate) async fn finish(self, grace: Duration) {
        let closed = self.guard.conn.closed();
        self.guard.conn.close();
        let _ = tokio::time::timeout(grace, closed).await;
    }
}

/// The streams a client created, by type.
#[derive(Default)]
struct Streams {
    error: Option<Stream>,
    stdin: Option<Stream>,
    stdout: Option<Stream>,
    stderr: Option<Stream>,
    resize: Option<Stream>,
}

impl Streams {
    /// Where a stream of this type goes in this protocol version (None: not one of its types).
    fn slot(&mut self, kind: &str, version: Version) -> Option<&mut Option<Stream>> {
        match kind {
            stream_type::ERROR => Some(&mut self.error),
            stream_type::STDIN => Some(&mut self.stdin),
            stream_type::STDOUT => Some(&mut self.stdout),
            stream_type::STDERR => Some(&mut self.stderr),
            // v1 and v2 know no resize stream.
            stream_type::RESIZE if version >= Version::V3 => Some(&mut self.resize),
            _ => None,
        }
    }
}

/// How many streams Go waits for: the error stream, one per standard stream asked for, and
/// the resize stream for a tty from v3 on.
fn expected_streams(version: Version, opts: StreamOptions) -> usize {
    1 + usize::from(opts.stdin)
        + usize::from(opts.stdout)
        + usize::from(opts.stderr)
        + usize::from(opts.tty && version >= Version::V3)
}

pub(crate) async fn remote_command<T>(
    io: T,
    version: Version,
    opts: StreamOptions,
    timeout: Duration,
) -> Result<RemoteCommand, StreamError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (conn, mut incoming) = Connection::server(io);
    // Dropped on any early return: the connection closes, as Go's handler returning.
    let guard = ConnectionGuard { conn: conn.clone() };
    let expected = expected_streams(version, opts);
    let mut streams = Streams::default();
    let wait = async {
        let mut received = 0;
        while received < expected {
            let stream = incoming.accept().await.ok_or(StreamError::Closed)?;
            let kind = header(stream.headers(), STREAM_TYPE).to_owned();
            // Go answers every stream it is handed, known or not; a stream the client has
            // already reset still counts (its reply error is ignored there too).
            let _ = stream.reply(HeaderMap::new(), false);
            let stream = Stream::new(stream);
            if let Some(slot) = streams.slot(&kind, version) {
                // A second stream of a type replaces the first, as Go's assignment.
                *slot = Some(stream);
                received += 1;
            }
        }
        Ok::<(), StreamError>(())
    };
    match tokio::time::timeout(timeout, wait).await {
        Err(_) => return Err(StreamError::StreamCreationTimeout),
        Ok(result) => result?,
    }
    // Streams opened from now on are refused.
    drop(incoming);

    if version == Version::V1 {
        // What 1.0 kubelets did and Go keeps for channel.k8s.io: the error stream is reset once
        // the streams are there (so no result ever reaches a v1 client), stdin is half-closed.
        if let Some(error) = streams.error.take() {
            error.reset();
        }
        if let Some(stdin) = streams.stdin.as_mut() {
            stdin.half_close();
        }
    }

    let gone = CancellationToken::new();
    tokio::spawn({
        let closed = conn.closed();
        let gone = gone.clone();
        async move {
            closed.await;
            gone.cancel();
        }
    });
    Ok(RemoteCommand {
        stdin: streams
            .stdin
            .map(|s| Box::new(s) as Box<dyn AsyncRead + Send + Unpin>),
        stdout: streams
            .stdout
            .map(|s| Box::new(s) as Box<dyn AsyncWrite + Send + Unpin>),
        stderr: streams
            .stderr
            .map(|s| Box::new(s) as Box<dyn AsyncWrite + Send + Unpin>),
        // Go decodes resize messages whenever the client created the stream.
        resize: streams.resize.map(resize::spawn_decoder),
        error: streams
            .error
            .map(|s| Box::new(s) as Box<dyn AsyncWrite + Send + Unpin>),
        v4: version >= Version::V4,
        gone,
        session: remote_command::Session::Spdy(Session { guard }),
    })
}
