//! The server side of exec and attach: the client's stdin/stdout/stderr/resize streams and the
//! error stream the result goes to, over SPDY (one stream per `streamType`) or WebSocket (one
//! channel per stream), as Go's kubelet streaming server sets them up.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_util::sync::CancellationToken;

use super::handshake::{Negotiated, Transport, Version};
use super::ws::{Framing, Mux};
use super::{StreamError, StreamOptions, TerminalSize, resize, spdy_streams, status};

/// WebSocket channel numbers of the remotecommand protocols.
pub mod channel {
    /// Standard input (client → server).
    pub const STDIN: u8 = 0;
    /// Standard output.
    pub const STDOUT: u8 = 1;
    /// Standard error.
    pub const STDERR: u8 = 2;
    /// The error stream (the result).
    pub const ERROR: u8 = 3;
    /// Terminal resize messages (client → server).
    pub const RESIZE: u8 = 4;
    /// v5's close signal.
    pub const CLOSE: u8 = 255;
}

/// How long `finish` waits for the client to acknowledge the end before dropping the connection.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How a command ended, for the error stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandResult {
    /// The command exited with this code (0: success).
    Exited(i32),
    /// The command exited with this code; the message names the command as containerd does
    /// (`error executing command [sh -c ...], exit code 3`).
    CommandExited {
        /// The command line.
        command: Vec<String>,
        /// Its exit code.
        code: i32,
    },
    /// The command could not be run (Go's InternalError status).
    Failed(String),
}

pub(crate) enum Session {
    WebSocket(Mux),
    Spdy(spdy_streams::Session),
}

/// An exec or attach session's streams, server side.
pub struct RemoteCommand {
    /// What the client types; EOF when the client closes it.
    pub stdin: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// Standard output to the client.
    pub stdout: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Standard error to the client (None with tty).
    pub stderr: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Terminal sizes the client sends (tty only; v3+ over SPDY).
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
    pub(crate) error: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub(crate) v4: bool,
    pub(crate) gone: CancellationToken,
    pub(crate) session: Session,
}

impl RemoteCommand {
    /// Resolves when the client has gone away (connection closed/reset): the server then
    /// kills what it runs.
    pub fn closed(&self) -> impl Future<Output = ()> + Send + 'static {
        self.gone.clone().cancelled_owned()
    }

    /// Reports the result on the error stream (v4+: metav1.Status JSON, NonZeroExitCode with
    /// the ExitCode cause; v1–v3: plain text) and closes the connection cleanly.
    pub async fn finish(mut self, result: CommandResult) {
        // Output written before the result must reach the client first: flush what we hold.
        for writer in [self.stdout.as_mut(), self.stderr.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = writer.flush().await;
        }
        if let Some(mut error) = self.error.take() {
            if let Some(bytes) = status::error_stream_bytes(&result, self.v4) {
                let _ = error.write_all(&bytes).await;
            }
            let _ = error.shutdown().await;
        }
        match self.session {
            Session::WebSocket(mux) => {
                mux.close().await;
                let _ = tokio::time::timeout(CLOSE_GRACE, self.gone.cancelled()).await;
                self.gone.cancel();
            }
            Session::Spdy(session) => session.finish(CLOSE_GRACE).await,
        }
    }
}

impl Negotiated {
    /// Server side of exec/attach over the upgraded connection; waits for the client's
    /// streams (SPDY: stream-creation timeout 30 s as Go).
    pub async fn remote_command<T>(
        self,
        io: T,
        opts: StreamOptions,
    ) -> Result<RemoteCommand, StreamError>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let opts = StreamOptions {
            stderr: opts.stderr && !opts.tty,
            ..opts
        };
        match &self.transport {
            Transport::WebSocket { base64, .. } => {
                let framing = Framing {
                    base64: *base64,
                    close_signal: self.version() == Version::V5,
                    send_close_signal: false,
                };
                Ok(websocket(io, framing, self.version(), opts).await)
            }
            Transport::Spdy => {
                spdy_streams::remote_command(
                    io,
                    self.version(),
                    opts,
                    super::STREAM_CREATION_TIMEOUT,
                )
                .await
            }
        }
    }
}

async fn websocket<T>(
    io: T,
    framing: Framing,
    version: Version,
    opts: StreamOptions,
) -> RemoteCommand
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut readable = vec![channel::RESIZE];
    if opts.stdin {
        readable.push(channel::STDIN);
    }
    let (mux, mut readers) = Mux::start(io, Role::Server, framing, &readable).await;
    // Go sends an empty message on the lowest writable channel: "connection established".
    let ready = if opts.stdout {
        channel::STDOUT
    } else if opts.stderr {
        channel::STDERR
    } else {
        channel::ERROR
    };
    let _ = mux.send(ready, Bytes::new()).await;
    let stdin = readers
        .remove(&channel::STDIN)
        .map(|r| Box::new(r) as Box<dyn AsyncRead + Send + Unpin>);
    let resize = match readers.remove(&channel::RESIZE) {
        Some(reader) if opts.tty => Some(resize::spawn_decoder(reader)),
        _ => None,
    };
    RemoteCommand {
        stdin,
        stdout: opts
            .stdout
            .then(|| Box::new(mux.writer(channel::STDOUT)) as Box<dyn AsyncWrite + Send + Unpin>),
        stderr: opts
            .stderr
            .then(|| Box::new(mux.writer(channel::STDERR)) as Box<dyn AsyncWrite + Send + Unpin>),
        resize,
        error: Some(Box::new(mux.writer(channel::ERROR))),
        v4: version >= Version::V4,
        gone: mux.gone(),
        session: Session::WebSocket(mux),
    }
}
