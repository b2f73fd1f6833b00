//! Kubernetes streaming (exec, attach, port-forward) over SPDY/3.1 and WebSocket: the upgrade
//! handshake, the remotecommand and portforward subprotocols, server and client sides.
//!
//! - [`negotiate`] ([`handshake`]): picks SPDY or WebSocket and the subprotocol from the client's
//!   upgrade request, with Go's error answers; [`Negotiated::response`] is the 101 to send.
//! - [`Negotiated::remote_command`] / [`Negotiated::port_forward`]: the server side over the
//!   upgraded connection ([`remote_command`], [`port_forward`]).
//! - [`status`]: the error stream's texts (metav1.Status JSON from v4 on, plain text before).
//! - `spdy_streams`, `spdy_port_forward`: the server side over a SPDY connection (streams by
//!   `streamType`, port-forward pairs by `requestID`); `spdy_io`: what both sides share there.
//! - `ws`: the WebSocket channel multiplexer (one channel byte per message, base64 variants, the
//!   v5 close signal), shared by server and client; `resize`: terminal size messages.
//! - [`IdleTimeout`] ([`idle`]): a transport that ends after a period without traffic.
//! - [`client`]: the other side of both protocols over both transports.

pub mod client;
pub mod handshake;
pub mod idle;
pub mod port_forward;
pub mod remote_command;
mod resize;
mod spdy_io;
mod spdy_port_forward;
mod spdy_streams;
pub mod status;
mod upgrade_io;
mod ws;

#[cfg(test)]
mod spdy_tests;
#[cfg(test)]
mod tests;

pub use handshake::{Endpoint, HandshakeError, Negotiated, negotiate};
pub use idle::IdleTimeout;
pub use port_forward::{ForwardRequest, PortForward};
pub use remote_command::{CommandResult, RemoteCommand};

// What the fuzz targets reach below the public API (proto/src/fuzzing.rs).
#[cfg(feature = "fuzzing")]
pub(crate) use {
    resize::{Decoder as ResizeDecoder, MAX_PENDING as MAX_RESIZE_PENDING},
    ws::decode as decode_channel_message,
};

/// How long the server waits for the client to create its SPDY streams (Go's
/// `streamCreationTimeout` default).
pub const STREAM_CREATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Which standard streams an exec or attach asked for (the `stdin`, `stdout`, `stderr` and `tty`
/// query parameters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// The client sends standard input.
    pub stdin: bool,
    /// The client reads standard output.
    pub stdout: bool,
    /// The client reads standard error (never with `tty`).
    pub stderr: bool,
    /// A terminal: stderr is merged into stdout and the client may resize it.
    pub tty: bool,
}

/// A terminal size sent by the client (`{"Width":..,"Height":..}` on the resize stream).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TerminalSize {
    /// Columns.
    #[serde(rename = "Width", alias = "width", default)]
    pub width: u16,
    /// Rows.
    #[serde(rename = "Height", alias = "height", default)]
    pub height: u16,
}

/// Why a streaming session could not be set up or went wrong.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The connection failed.
    #[error("streaming connection: {0}")]
    Io(#[from] std::io::Error),
    /// The WebSocket layer failed.
    #[error("websocket: {0}")]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
    /// The SPDY layer failed.
    #[error("spdy: {0}")]
    Spdy(String),
    /// Go's text when the client does not create its streams in time.
    #[error("timed out waiting for client to create streams")]
    StreamCreationTimeout,
    /// The client went away before the session was set up.
    #[error("connection closed before the streams were set up")]
    Closed,
}
