//! SPDY/3.1 as Kubernetes speaks it (`Upgrade: SPDY/3.1`, moby/spdystream): frames, zlib
//! header blocks with the SPDY/3 dictionary, and a multiplexed async connection for both the
//! client and the server side.
//!
//! - [`frame`]: the frames and an incremental decoder.
//! - [`header_block`]: name/value header blocks and their per-direction zlib contexts.
//! - [`Connection`] / [`Incoming`] / [`SpdyStream`]: one reader and one writer task per
//!   connection; streams are `AsyncRead + AsyncWrite`.
//!
//! Flow control follows spdystream, the only peer Kubernetes has: it never sends WINDOW_UPDATE
//! and ignores the ones it gets, so neither do we. Back-pressure instead comes from bounded
//! buffers: a stream whose reader falls behind stops the connection's reader task (and so,
//! through the transport, the peer), as spdystream's unbuffered channels do; writers wait
//! while the write queue is full.

mod connection;
pub mod frame;
pub mod header_block;
mod stream;

pub use connection::{Config, Connection, Error, Incoming};
pub use frame::{FLAG_FIN, FLAG_UNIDIRECTIONAL, GoAwayStatus, RstStatus};
pub use header_block::HeaderBlockError;
pub use http::HeaderMap;
pub use stream::SpdyStream;
