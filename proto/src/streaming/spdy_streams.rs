//! Kubernetes' streams over a SPDY/3.1 connection: the server side of remotecommand (streams
//! by `streamType`) and port-forward (data/error pairs by `requestID`).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use super::handshake::Version;
use super::port_forward::ForwardRequest;
use super::remote_command::RemoteCommand;
use super::{StreamError, StreamOptions};

/// The SPDY connection behind a remotecommand session.
pub(crate) struct Session;

impl Session {
    /// Ends the connection once the error stream is out.
    pub(crate) async fn finish(self, _grace: Duration) {}
}

/// Incoming port-forward stream pairs.
pub(crate) struct PortForwardStreams;

impl PortForwardStreams {
    pub(crate) async fn next(&mut self) -> Option<ForwardRequest> {
        None
    }
}

pub(crate) async fn remote_command<T>(
    _io: T,
    _version: Version,
    _opts: StreamOptions,
    _timeout: Duration,
) -> Result<RemoteCommand, StreamError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    Err(StreamError::Spdy(
        "SPDY streaming is not available yet".into(),
    ))
}

pub(crate) async fn port_forward<T>(
    _io: T,
    _timeout: Duration,
) -> Result<(PortForwardStreams, CancellationToken), StreamError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    Err(StreamError::Spdy(
        "SPDY streaming is not available yet".into(),
    ))
}
