//! The client's HTTP/1.1 upgrade over a caller's connection: writes the request, reads the
//! response head, and keeps whatever bytes followed it for the upgraded protocol.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// The largest response head we accept.
const MAX_HEAD: usize = 64 * 1024;

/// A response head: status and headers (names lowercase).
#[derive(Debug, Clone)]
pub(crate) struct ResponseHead {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body bytes already read, for error answers.
    pub body_start: Vec<u8>,
}

impl ResponseHead {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` with `headers` and reads the answer's head.
pub(crate) async fn request<T>(
    mut io: T,
    method: &str,
    path_and_query: &str,
    headers: &[(String, String)],
) -> io::Result<(ResponseHead, Prefixed<T>)>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = format!("{method} {path_and_query} HTTP/1.1\r\n");
    for (name, value) in headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    io.write_all(head.as_bytes()).await?;
    io.flush().await?;

    let mut buf = BytesMut::with_capacity(4096);
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "response head too large",
            ));
        }
        if io.read_buf(&mut buf).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the upgrade answer",
            ));
        }
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.advance(end + 4);
    let mut lines = text.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad status line"))?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let response = ResponseHead {
        status,
        headers,
        body_start: buf.to_vec(),
    };
    Ok((response, Prefixed { prefix: buf, io }))
}

/// A connection whose first bytes were already read: they come out first.
pub(crate) struct Prefixed<T> {
    prefix: BytesMut,
    io: T,
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Prefixed<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
