//! The streaming idle timeout (containerd's `stream_idle_timeout`, 4 h by default): an
//! upgraded connection across which nothing has moved, either way, for that long is ended,
//! as spdystream's idle-aware framer and the WebSocket handler's read/write deadlines end it.
//! It sits under the protocol: the first read after the deadline fails with `TimedOut`, so
//! the SPDY or WebSocket reader closes the connection and the session sees its client gone.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A transport that fails once it has been idle for its timeout.
#[derive(Debug)]
pub struct IdleTimeout<T> {
    inner: T,
    timeout: Duration,
    last_activity: Instant,
    // Armed for the earliest possible expiry and only moved when it fires: resetting a timer
    // on every frame would cost more than the frames. None: no timeout.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<T> IdleTimeout<T> {
    /// `inner`, ended after `timeout` without traffic (never when `None`).
    pub fn new(inner: T, timeout: Option<Duration>) -> Self {
        let now = Instant::now();
        Self {
            inner,
            timeout: timeout.unwrap_or_default(),
            last_activity: now,
            timer: timeout.map(|t| Box::pin(tokio::time::sleep_until(now + t))),
        }
    }

    /// True when the deadline passed; otherwise re-arms the timer for the real deadline.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(timer) = self.timer.as_mut() else {
            return false;
        };
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            let deadline = self.last_activity + self.timeout;
            if Instant::now() >= deadline {
                return true;
            }
            timer.as_mut().reset(deadline);
        }
    }
}

fn timed_out(timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("streaming connection idle for {timeout:?}"),
    )
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleTimeout<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.last_activity = Instant::now();
                }
                Poll::Ready(r)
            }
            Poll::Pending if this.poll_expired(cx) => Poll::Ready(Err(timed_out(this.timeout))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        if n > 0 {
            this.last_activity = Instant::now();
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_times_out() {
        let (a, _b) = tokio::io::duplex(64);
        let mut a = IdleTimeout::new(a, Some(Duration::from_secs(10)));
        let start = Instant::now();
        let err = a.read_u8().await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn no_timeout_waits_for_the_peer() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut a = IdleTimeout::new(a, None);
        let peer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(10 * 3600)).await;
            b.write_all(b"z").await.unwrap();
            b
        });
        assert_eq!(a.read_u8().await.unwrap(), b'z');
        drop(peer.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn traffic_either_way_moves_the_deadline() {
        let (a, mut b) = tokio::io::duplex(64);
        let a = IdleTimeout::new(a, Some(Duration::from_secs(10)));
        let (mut ra, mut wa) = tokio::io::split(a);
        let start = Instant::now();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                match ra.read_u8().await {
                    Ok(x) => got.push(x),
                    Err(e) => return (got, e.kind()),
                }
            }
        });
        // Peer writes at 8 s, we write at 16 s: the deadline becomes 26 s.
        tokio::time::sleep(Duration::from_secs(8)).await;
        b.write_all(b"x").await.unwrap();
        tokio::time::sleep(Duration::from_secs(8)).await;
        wa.write_all(b"y").await.unwrap();
        let (got, kind) = reader.await.unwrap();
        assert_eq!(got, b"x");
        assert_eq!(kind, io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(26));
        let mut y = [0u8; 1];
        b.read_exact(&mut y).await.unwrap();
        assert_eq!(&y, b"y");
    }
}
