//! What Kubernetes' streams over SPDY share on both sides: the header names, a stream handle that
//! reads as spdystream does (a reset or a lost connection is the end of the stream, not an
//! error) and half-closes instead of resetting when dropped (Go closes its streams), and a
//! connection handle that closes the connection when the session is dropped.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use http::{HeaderMap, HeaderValue};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::spdy::{Connection, SpdyStream};

/// The header naming a stream's role (`api.StreamType`).
pub(crate) const STREAM_TYPE: &str = "streamtype";
/// Port-forward: the port a stream pair is for.
pub(crate) const PORT: &str = "port";
/// Port-forward: the id pairing a data and an error stream.
pub(crate) const REQUEST_ID: &str = "requestid";

/// `streamType` values.
pub(crate) mod stream_type {
    pub(crate) const ERROR: &str = "error";
    pub(crate) const STDIN: &str = "stdin";
    pub(crate) const STDOUT: &str = "stdout";
    pub(crate) const STDERR: &str = "stderr";
    pub(crate) const RESIZE: &str = "resize";
    pub(crate) const DATA: &str = "data";
}

/// A header's value as text ("" when missing or not text), as Go's `Header.Get`.
pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Headers for a stream we open: `streamType` plus `extra`.
pub(crate) fn stream_headers(
    stream_type: &'static str,
    extra: &[(&'static str, String)],
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(STREAM_TYPE, HeaderValue::from_static(stream_type));
    for (name, value) in extra {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(*name, value);
        }
    }
    headers
}

/// A stream as the streaming protocols use it.
pub(crate) struct Stream {
    inner: SpdyStream,
}

impl Stream {
    pub(crate) fn new(inner: SpdyStream) -> Stream {
        Stream { inner }
    }

    /// The stream's own headers.
    pub(crate) fn headers(&self) -> &HeaderMap {
        self.inner.headers()
    }

    /// Aborts the stream (Go's `Reset`).
    pub(crate) fn reset(&self) {
        self.inner.reset(crate::spdy::RstStatus::CANCEL);
    }

    /// Queues our FIN now, without waiting for it to be written (Go's `Close`).
    pub(crate) fn half_close(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        let _ = Pin::new(&mut self.inner).poll_shutdown(&mut cx);
    }
}

/// A reset stream or a lost connection ends the stream: spdystream reads EOF then.
fn is_end(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
    )
}

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Err(err)) if is_end(&err) => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_shutdown(cx) {
            // Already gone: nothing left to close.
            Poll::Ready(Err(err)) if is_end(&err) => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Go closes its streams when done with them; dropping a SpdyStream would reset it.
        self.half_close();
    }
}

/// The connection of a session: closed (every stream reset, GOAWAY, transport shut) when
/// dropped, as Go's deferred `conn.Close()`.
pub(crate) struct ConnectionGuard {
    pub(crate) conn: Connection,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.conn.close();
    }
}
