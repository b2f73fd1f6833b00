//! One SPDY stream: its receive buffer (filled by the reader task, bounded: a full buffer
//! stops the reader), its half-close and reset state, and the `AsyncRead`/`AsyncWrite`
//! handle the application holds.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::HeaderMap;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use super::connection::{ConnShared, Error, Outgoing, lock};
use super::frame::{FLAG_FIN, Frame, HEADER_LEN, RstStatus, data_header};

/// Why a stream's reads and writes stopped.
#[derive(Debug, Clone, Copy)]
enum Reset {
    ByPeer(RstStatus),
    Locally(RstStatus),
}

struct StreamState {
    recv: VecDeque<Bytes>,
    recv_len: usize,
    remote_fin: bool,
    local_fin: bool,
    /// Incoming: we sent SYN_REPLY. Outgoing: the peer did.
    replied: bool,
    reset: Option<Reset>,
    conn_closed: bool,
    /// The handle is gone after our FIN: data still arriving is dropped.
    detached: bool,
    reply_tx: Option<oneshot::Sender<Result<(), Error>>>,
    read_waker: Option<Waker>,
    room_waker: Option<Waker>,
}

/// The part of a stream the reader task and the handle share.
pub(crate) struct StreamShared {
    pub(crate) id: u32,
    incoming: bool,
    state: Mutex<StreamState>,
}

fn wake(w: &mut Option<Waker>) {
    if let Some(w) = w.take() {
        w.wake();
    }
}

impl StreamShared {
    pub(crate) fn new(
        id: u32,
        incoming: bool,
        local_fin: bool,
        remote_fin: bool,
        reply_tx: Option<oneshot::Sender<Result<(), Error>>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            id,
            incoming,
            state: Mutex::new(StreamState {
                recv: VecDeque::new(),
                recv_len: 0,
                remote_fin,
                local_fin,
                replied: false,
                reset: None,
                conn_closed: false,
                detached: false,
                reply_tx,
                read_waker: None,
                room_waker: None,
            }),
        })
    }

    /// Hands data (and the peer's FIN) to the reader; true when the buffer is now full and the
    /// reader task must wait for room.
    pub(crate) fn deliver(&self, payload: Bytes, fin: bool, limit: usize) -> bool {
        let mut st = lock(&self.state);
        if fin {
            st.remote_fin = true;
        }
        if st.detached || st.reset.is_some() || st.remote_fin && !fin {
            return false;
        }
        if !payload.is_empty() {
            st.recv_len += payload.len();
            st.recv.push_back(payload);
        }
        wake(&mut st.read_waker);
        st.recv_len >= limit
    }

    /// Ready once the reader has room again (or nobody will read).
    pub(crate) fn poll_room(&self, cx: &mut Context<'_>, limit: usize) -> Poll<()> {
        let mut st = lock(&self.state);
        if st.recv_len < limit || st.detached || st.reset.is_some() || st.conn_closed {
            return Poll::Ready(());
        }
        st.room_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Both halves are closed.
    pub(crate) fn finished(&self) -> bool {
        let st = lock(&self.state);
        st.local_fin && st.remote_fin
    }

    /// The peer's SYN_REPLY arrived.
    pub(crate) fn replied(&self, fin: bool) {
        let mut st = lock(&self.state);
        if !st.replied && !self.incoming {
            st.replied = true;
            if let Some(tx) = st.reply_tx.take() {
                let _ = tx.send(Ok(()));
            }
        }
        if fin {
            st.remote_fin = true;
            wake(&mut st.read_waker);
        }
    }

    pub(crate) fn reset_by_peer(&self, status: RstStatus) {
        let mut st = lock(&self.state);
        st.reset = Some(Reset::ByPeer(status));
        if let Some(tx) = st.reply_tx.take() {
            let _ = tx.send(Err(Error::Reset(status)));
        }
        wake(&mut st.read_waker);
        wake(&mut st.room_waker);
    }

    /// Marks the stream reset by us; false when there is nothing left to reset.
    pub(crate) fn reset_locally(&self, status: RstStatus) -> bool {
        let mut st = lock(&self.state);
        if st.reset.is_some() || st.conn_closed || st.local_fin && st.remote_fin {
            return false;
        }
        st.reset = Some(Reset::Locally(status));
        st.recv.clear();
        st.recv_len = 0;
        if let Some(tx) = st.reply_tx.take() {
            let _ = tx.send(Err(Error::Reset(status)));
        }
        wake(&mut st.read_waker);
        wake(&mut st.room_waker);
        true
    }

    pub(crate) fn connection_closed(&self) {
        let mut st = lock(&self.state);
        st.conn_closed = true;
        if let Some(tx) = st.reply_tx.take() {
            let _ = tx.send(Err(Error::Closed));
        }
        wake(&mut st.read_waker);
        wake(&mut st.room_waker);
    }
}

/// A stream of a [`super::Connection`]: read what the peer sends (EOF at its FIN, an error at
/// RST_STREAM or when the connection is lost), write DATA frames; `shutdown` sends our FIN.
/// Dropping it before our FIN resets the stream (CANCEL).
pub struct SpdyStream {
    shared: Arc<StreamShared>,
    conn: Arc<ConnShared>,
    headers: HeaderMap,
    /// Sequence number of the last frame we queued, for `poll_flush`.
    last_seq: u64,
    fin_queued: bool,
}

impl std::fmt::Debug for SpdyStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpdyStream").field("id", &self.shared.id).field("headers", &self.headers).finish()
    }
}

fn reset_error(reset: Reset) -> io::Error {
    match reset {
        Reset::ByPeer(status) => io::Error::new(io::ErrorKind::ConnectionReset, format!("SPDY stream reset by peer: {status}")),
        Reset::Locally(status) => io::Error::new(io::ErrorKind::ConnectionReset, format!("SPDY stream reset: {status}")),
    }
}

fn closed_error() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "SPDY connection closed")
}

impl SpdyStream {
    pub(crate) fn new(shared: Arc<StreamShared>, conn: Arc<ConnShared>, headers: HeaderMap) -> Self {
        Self { shared, conn, headers, last_seq: 0, fin_queued: false }
    }

    /// The stream id (odd: opened by the client, even: by the server).
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// The headers of the SYN_STREAM that opened this stream (ours or the peer's).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// Accepts a peer-opened stream (SYN_REPLY); `fin` if we will never write on it. Writing
    /// or shutting down first replies with no headers, as Kubernetes' replies are empty.
    pub fn reply(&self, headers: HeaderMap, fin: bool) -> Result<(), Error> {
        if !self.shared.incoming {
            return Err(Error::NotIncoming);
        }
        let finished = {
            let mut st = lock(&self.shared.state);
            if st.replied {
                return Err(Error::AlreadyReplied);
            }
            if let Some(Reset::ByPeer(status) | Reset::Locally(status)) = st.reset {
                return Err(Error::Reset(status));
            }
            if st.conn_closed {
                return Err(Error::Closed);
            }
            st.replied = true;
            st.local_fin |= fin;
            st.local_fin && st.remote_fin
        };
        let flags = if fin { FLAG_FIN } else { 0 };
        self.conn.send(Outgoing::Syn { stream_id: self.shared.id, flags, headers, reply: true });
        if finished {
            self.conn.remove_stream(self.shared.id);
        }
        Ok(())
    }

    /// Aborts the stream (RST_STREAM with `status`, e.g. [`RstStatus::CANCEL`]); reads and
    /// writes fail from now on.
    pub fn reset(&self, status: RstStatus) {
        if self.shared.reset_locally(status) {
            self.conn.send(Outgoing::Control(Frame::RstStream { stream_id: self.shared.id, status }));
            self.conn.remove_stream(self.shared.id);
        }
    }

    /// Checks the stream may be written on; replies first to a peer's stream not yet answered.
    fn writable(&self) -> io::Result<bool> {
        let mut st = lock(&self.shared.state);
        if let Some(reset) = st.reset {
            return Err(reset_error(reset));
        }
        if st.conn_closed {
            return Err(closed_error());
        }
        if st.local_fin {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "SPDY stream already half-closed"));
        }
        let reply = self.shared.incoming && !st.replied;
        st.replied = true;
        Ok(reply)
    }

    fn auto_reply(&self, reply: bool) {
        if reply {
            self.conn.send(Outgoing::Syn { stream_id: self.shared.id, flags: 0, headers: HeaderMap::new(), reply: true });
        }
    }
}

impl AsyncRead for SpdyStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let limit = self.conn.config.stream_receive_buffer;
        let mut st = lock(&self.shared.state);
        let mut copied = 0;
        while buf.remaining() > 0 {
            let Some(front) = st.recv.front_mut() else { break };
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front[..n]);
            front.advance(n);
            if front.is_empty() {
                st.recv.pop_front();
            }
            st.recv_len -= n;
            copied += n;
        }
        if copied > 0 {
            if st.recv_len < limit {
                wake(&mut st.room_waker);
            }
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if let Some(reset) = st.reset {
            return Poll::Ready(Err(reset_error(reset)));
        }
        if st.remote_fin {
            return Poll::Ready(Ok(()));
        }
        if st.conn_closed {
            return Poll::Ready(Err(closed_error()));
        }
        st.read_waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl AsyncWrite for SpdyStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let limit = self.conn.config.write_queue_limit;
        let n = {
            let mut st = lock(&self.conn.state);
            if st.closed {
                return Poll::Ready(Err(closed_error()));
            }
            if st.queued_bytes >= limit {
                st.room_waiters.push(cx.waker().clone());
                return Poll::Pending;
            }
            let n = buf.len().min(limit - st.queued_bytes);
            // Reserved now, so concurrent writers cannot overshoot the limit while we copy.
            st.queued_bytes += n;
            n
        };
        let reply = match self.writable() {
            Ok(reply) => reply,
            Err(e) => {
                lock(&self.conn.state).queued_bytes -= n;
                return Poll::Ready(Err(e));
            }
        };
        self.auto_reply(reply);
        let chunk = self.conn.config.max_data_payload.max(1);
        let mut frames = BytesMut::with_capacity(n + n.div_ceil(chunk) * HEADER_LEN);
        for part in buf[..n].chunks(chunk) {
            frames.put_slice(&data_header(self.shared.id, 0, part.len()));
            frames.put_slice(part);
        }
        let seq = {
            let mut st = lock(&self.conn.state);
            st.queued_bytes -= n;
            if st.closed {
                return Poll::Ready(Err(closed_error()));
            }
            self.conn.push(&mut st, Outgoing::Data(frames.freeze()))
        };
        self.last_seq = seq;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = lock(&self.conn.state);
        if st.written_seq >= self.last_seq {
            return Poll::Ready(Ok(()));
        }
        if st.closed {
            return Poll::Ready(Err(closed_error()));
        }
        st.flush_waiters.push(cx.waker().clone());
        Poll::Pending
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.fin_queued {
            let (reply, finished, send_fin) = {
                let mut st = lock(&self.shared.state);
                if let Some(reset) = st.reset {
                    return Poll::Ready(Err(reset_error(reset)));
                }
                if st.conn_closed {
                    return Poll::Ready(Err(closed_error()));
                }
                let reply = self.shared.incoming && !st.replied;
                st.replied = true;
                let send_fin = !st.local_fin;
                st.local_fin = true;
                (reply, st.remote_fin, send_fin)
            };
            self.fin_queued = true;
            if send_fin {
                // The FIN rides on the reply when we have not replied yet.
                let seq = if reply {
                    self.conn.send(Outgoing::Syn { stream_id: self.shared.id, flags: FLAG_FIN, headers: HeaderMap::new(), reply: true })
                } else {
                    self.conn.send(Outgoing::Data(Bytes::copy_from_slice(&data_header(self.shared.id, FLAG_FIN, 0))))
                };
                self.last_seq = seq;
            }
            if finished {
                self.conn.remove_stream(self.shared.id);
            }
        }
        self.poll_flush(cx)
    }
}

impl Drop for SpdyStream {
    fn drop(&mut self) {
        let reset = {
            let mut st = lock(&self.shared.state);
            if st.reset.is_some() || st.conn_closed || st.local_fin && st.remote_fin {
                false
            } else if st.local_fin {
                st.detached = true;
                st.recv.clear();
                st.recv_len = 0;
                wake(&mut st.room_waker);
                false
            } else {
                true
            }
        };
        if reset {
            self.reset(RstStatus::CANCEL);
        }
    }
}
