//! The multiplexed connection: one reader task (frames in, header blocks inflated in order,
//! data handed to streams) and one writer task (a queue of frames out, header blocks deflated
//! in order), sharing a small state under a mutex that is never held across an await.

use std::collections::{HashMap, VecDeque};
use std::future::{Future, poll_fn};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, watch};

use super::frame::{FLAG_FIN, FLAG_UNIDIRECTIONAL, Frame, FrameDecoder, FrameError, GoAwayStatus, RstStatus};
use super::header_block::{HeaderBlockError, HeaderDecoder, HeaderEncoder};
use super::stream::{SpdyStream, StreamShared};

/// Limits of one connection; the defaults suit Kubernetes streaming.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest frame payload accepted from the peer (SPDY allows 16 MiB − 1; spdystream sends
    /// whatever one Write was given).
    pub max_frame_size: usize,
    /// Largest inflated header block accepted.
    pub max_header_block: usize,
    /// Unread bytes buffered per stream before the reader stops taking frames off the
    /// transport (back-pressure on the whole connection, as spdystream).
    pub stream_receive_buffer: usize,
    /// Data bytes queued for the writer before writers wait.
    pub write_queue_limit: usize,
    /// Largest DATA payload we send (kubectl's io.Copy writes 32 KiB).
    pub max_data_payload: usize,
    /// Peer-initiated streams queued until [`Incoming::accept`] takes them.
    pub accept_backlog: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_frame_size: super::frame::MAX_FRAME_LENGTH,
            max_header_block: 256 * 1024,
            stream_receive_buffer: 1024 * 1024,
            write_queue_limit: 1024 * 1024,
            max_data_payload: 32 * 1024,
            accept_backlog: 64,
        }
    }
}

/// Which end of the connection this is: clients open odd streams, servers even ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The side that sent the upgrade request.
    Client,
    /// The side that answered it.
    Server,
}

/// What can go wrong on a connection or a stream.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection is closed (transport gone or [`Connection::close`]).
    #[error("SPDY connection closed")]
    Closed,
    /// A GOAWAY was sent or received: no new streams.
    #[error("SPDY connection is going away")]
    GoingAway,
    /// The peer reset the stream (RST_STREAM).
    #[error("SPDY stream reset: {0}")]
    Reset(RstStatus),
    /// All 2^30 stream ids of this side are used.
    #[error("SPDY stream ids exhausted")]
    StreamIdsExhausted,
    /// `reply` on a stream that was already replied to.
    #[error("SPDY stream already replied")]
    AlreadyReplied,
    /// `reply` on a stream this side opened.
    #[error("SPDY reply on a locally opened stream")]
    NotIncoming,
    /// The transport failed.
    #[error("SPDY transport: {0}")]
    Io(#[from] io::Error),
    /// The peer sent a malformed frame.
    #[error("SPDY frame: {0}")]
    Frame(#[from] FrameError),
    /// The peer sent a bad header block.
    #[error("SPDY header block: {0}")]
    HeaderBlock(#[from] HeaderBlockError),
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A frame waiting for the writer.
pub(crate) enum Outgoing {
    /// Encoded DATA frames, written as they are.
    Data(Bytes),
    /// A control frame without a header block.
    Control(Frame),
    /// SYN_STREAM / SYN_REPLY: the header block is compressed by the writer, in wire order.
    Syn { stream_id: u32, flags: u8, headers: HeaderMap, reply: bool },
    /// Flush, close the transport's write side, stop.
    Shutdown,
}

/// Control frames count this much against the write queue.
const CONTROL_COST: usize = 64;

pub(crate) struct ConnState {
    pub(crate) streams: HashMap<u32, Arc<StreamShared>>,
    next_stream_id: u32,
    next_ping_id: u32,
    pings: HashMap<u32, oneshot::Sender<()>>,
    /// The highest stream id the peer opened (GOAWAY's last-good-stream-id).
    last_peer_stream: u32,
    going_away: bool,
    shutdown_queued: bool,
    pub(crate) closed: bool,
    queue: VecDeque<Outgoing>,
    pub(crate) queued_bytes: usize,
    /// Sequence number of the last item queued / written, for flushes.
    pub(crate) queued_seq: u64,
    pub(crate) written_seq: u64,
    writer_waker: Option<Waker>,
    pub(crate) room_waiters: Vec<Waker>,
    pub(crate) flush_waiters: Vec<Waker>,
}

pub(crate) struct ConnShared {
    pub(crate) config: Config,
    role: Role,
    pub(crate) state: Mutex<ConnState>,
    closed_tx: watch::Sender<bool>,
}

impl ConnShared {
    /// Queues an item and wakes the writer; returns its sequence number.
    pub(crate) fn push(&self, st: &mut ConnState, item: Outgoing) -> u64 {
        st.queued_bytes += match &item {
            Outgoing::Data(b) => b.len(),
            _ => CONTROL_COST,
        };
        st.queue.push_back(item);
        st.queued_seq += 1;
        if let Some(w) = st.writer_waker.take() {
            w.wake();
        }
        st.queued_seq
    }

    /// Queues a frame unless the connection is closed.
    pub(crate) fn send(&self, item: Outgoing) -> u64 {
        let mut st = lock(&self.state);
        if st.closed {
            return st.queued_seq;
        }
        self.push(&mut st, item)
    }

    /// Forgets a stream that is finished both ways (or reset); after a GOAWAY the last one
    /// to go closes the transport.
    pub(crate) fn remove_stream(&self, id: u32) {
        let mut st = lock(&self.state);
        st.streams.remove(&id);
        self.maybe_shutdown(&mut st);
    }

    fn maybe_shutdown(&self, st: &mut ConnState) {
        if st.going_away && st.streams.is_empty() && !st.shutdown_queued && !st.closed {
            st.shutdown_queued = true;
            self.push(st, Outgoing::Shutdown);
        }
    }

    /// Ends everything: streams see the close, waiters wake, `closed()` resolves.
    fn terminate(&self) {
        let (streams, pings) = {
            let mut st = lock(&self.state);
            if st.closed {
                return;
            }
            st.closed = true;
            let waiters: Vec<Waker> = st.room_waiters.drain(..).collect();
            for w in waiters.into_iter().chain(st.flush_waiters.drain(..)) {
                w.wake();
            }
            if let Some(w) = st.writer_waker.take() {
                w.wake();
            }
            (std::mem::take(&mut st.streams), std::mem::take(&mut st.pings))
        };
        drop(pings);
        for stream in streams.values() {
            stream.connection_closed();
        }
        self.closed_tx.send_replace(true);
    }
}

/// A SPDY/3.1 connection (cheap to clone: all clones drive the same connection).
#[derive(Clone)]
pub struct Connection {
    shared: Arc<ConnShared>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("role", &self.shared.role).finish_non_exhaustive()
    }
}

/// The streams the peer opens, in order.
#[derive(Debug)]
pub struct Incoming {
    rx: mpsc::Receiver<SpdyStream>,
}

impl Incoming {
    /// The next stream the peer opened; answer it with [`SpdyStream::reply`]. `None` once the
    /// connection is closed.
    pub async fn accept(&mut self) -> Option<SpdyStream> {
        self.rx.recv().await
    }
}

impl Connection {
    /// The client side over `io` (streams 1, 3, 5, …); must be called inside a tokio runtime.
    pub fn client<T>(io: T) -> (Connection, Incoming)
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        Self::with_config(io, Role::Client, Config::default())
    }

    /// The server side over `io` (streams 2, 4, 6, …); must be called inside a tokio runtime.
    pub fn server<T>(io: T) -> (Connection, Incoming)
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        Self::with_config(io, Role::Server, Config::default())
    }

    /// Either side with explicit limits; spawns the reader and the writer task.
    pub fn with_config<T>(io: T, role: Role, config: Config) -> (Connection, Incoming)
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let first = match role {
            Role::Client => 1,
            Role::Server => 2,
        };
        let (closed_tx, _) = watch::channel(false);
        let (accept_tx, accept_rx) = mpsc::channel(config.accept_backlog.max(1));
        let shared = Arc::new(ConnShared {
            role,
            state: Mutex::new(ConnState {
                streams: HashMap::new(),
                next_stream_id: first,
                next_ping_id: first,
                pings: HashMap::new(),
                last_peer_stream: 0,
                going_away: false,
                shutdown_queued: false,
                closed: false,
                queue: VecDeque::new(),
                queued_bytes: 0,
                queued_seq: 0,
                written_seq: 0,
                writer_waker: None,
                room_waiters: Vec::new(),
                flush_waiters: Vec::new(),
            }),
            closed_tx,
            config,
        });
        let (read, write) = tokio::io::split(io);
        tokio::spawn(writer_task(shared.clone(), write));
        tokio::spawn(reader_task(shared.clone(), read, accept_tx));
        (Connection { shared }, Incoming { rx: accept_rx })
    }

    /// Opens a stream (SYN_STREAM with `headers`; `fin` for a stream we never write on) and
    /// waits for the peer's SYN_REPLY, as spdystream's CreateStream + Wait.
    pub async fn open_stream(&self, headers: HeaderMap, fin: bool) -> Result<SpdyStream, Error> {
        let (tx, rx) = oneshot::channel();
        let stream = {
            let mut st = lock(&self.shared.state);
            if st.closed {
                return Err(Error::Closed);
            }
            if st.going_away {
                return Err(Error::GoingAway);
            }
            let id = st.next_stream_id;
            if id > 0x7fff_ffff {
                return Err(Error::StreamIdsExhausted);
            }
            st.next_stream_id += 2;
            let stream = StreamShared::new(id, false, fin, false, Some(tx));
            st.streams.insert(id, stream.clone());
            let flags = if fin { FLAG_FIN } else { 0 };
            self.shared.push(&mut st, Outgoing::Syn { stream_id: id, flags, headers: headers.clone(), reply: false });
            stream
        };
        // Made before waiting: if this future is dropped, the handle's drop resets the stream.
        let stream = SpdyStream::new(stream, self.shared.clone(), headers);
        match rx.await {
            Ok(Ok(())) => Ok(stream),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Closed),
        }
    }

    /// Sends a PING and waits for its echo.
    pub async fn ping(&self) -> Result<Duration, Error> {
        let (tx, rx) = oneshot::channel();
        let start = Instant::now();
        {
            let mut st = lock(&self.shared.state);
            if st.closed {
                return Err(Error::Closed);
            }
            let id = st.next_ping_id;
            st.next_ping_id = if id > 0x7fff_fffd { id - 0x7fff_fffc } else { id + 2 };
            st.pings.insert(id, tx);
            self.shared.push(&mut st, Outgoing::Control(Frame::Ping { id }));
        }
        rx.await.map_err(|_| Error::Closed)?;
        Ok(start.elapsed())
    }

    /// Graceful end: GOAWAY, no new streams either way; the transport closes once every open
    /// stream has finished.
    pub fn go_away(&self) {
        let mut st = lock(&self.shared.state);
        if st.closed || st.shutdown_queued {
            return;
        }
        if !st.going_away {
            st.going_away = true;
            let last_good_stream_id = st.last_peer_stream;
            self.shared.push(&mut st, Outgoing::Control(Frame::GoAway { last_good_stream_id, status: GoAwayStatus::OK }));
        }
        self.shared.maybe_shutdown(&mut st);
    }

    /// Closes everything now, as Kubernetes' connection Close: every open stream is reset
    /// (CANCEL), then GOAWAY, then the transport is shut down once the queue is written.
    pub fn close(&self) {
        let streams = {
            let mut st = lock(&self.shared.state);
            if st.closed || st.shutdown_queued {
                return;
            }
            let streams: Vec<_> = st.streams.drain().map(|(_, s)| s).collect();
            for s in &streams {
                if s.reset_locally(RstStatus::CANCEL) {
                    self.shared.push(&mut st, Outgoing::Control(Frame::RstStream { stream_id: s.id, status: RstStatus::CANCEL }));
                }
            }
            if !st.going_away {
                st.going_away = true;
                let last_good_stream_id = st.last_peer_stream;
                self.shared.push(&mut st, Outgoing::Control(Frame::GoAway { last_good_stream_id, status: GoAwayStatus::OK }));
            }
            self.shared.maybe_shutdown(&mut st);
            streams
        };
        drop(streams);
    }

    /// True once the connection is closed.
    pub fn is_closed(&self) -> bool {
        *self.shared.closed_tx.borrow()
    }

    /// Resolves once the connection is closed: the transport reached EOF or failed, or a
    /// close/GOAWAY finished; streams then read an error and writes fail.
    pub fn closed(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.shared.closed_tx.subscribe();
        async move {
            let _ = rx.wait_for(|closed| *closed).await;
        }
    }
}

async fn writer_task<T: AsyncWrite>(shared: Arc<ConnShared>, mut io: WriteHalf<T>) {
    let mut encoder = HeaderEncoder::new();
    let mut small = BytesMut::with_capacity(16 * 1024);
    loop {
        let (batch, seq, closed) = poll_fn(|cx| {
            let mut st = lock(&shared.state);
            if st.queue.is_empty() {
                if st.closed {
                    return Poll::Ready((VecDeque::new(), st.queued_seq, true));
                }
                st.writer_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            st.queued_bytes = 0;
            for w in st.room_waiters.drain(..) {
                w.wake();
            }
            Poll::Ready((std::mem::take(&mut st.queue), st.queued_seq, st.closed))
        })
        .await;
        let mut shutdown = closed;
        let result = write_batch(&mut io, &mut encoder, &mut small, batch, &mut shutdown).await;
        let result = match result {
            Ok(()) => io.flush().await,
            Err(e) => Err(e),
        };
        {
            let mut st = lock(&shared.state);
            st.written_seq = seq;
            for w in st.flush_waiters.drain(..) {
                w.wake();
            }
        }
        if result.is_err() || shutdown {
            let _ = io.shutdown().await;
            shared.terminate();
            return;
        }
    }
}

async fn write_batch<T: AsyncWrite>(
    io: &mut WriteHalf<T>,
    encoder: &mut HeaderEncoder,
    small: &mut BytesMut,
    batch: VecDeque<Outgoing>,
    shutdown: &mut bool,
) -> io::Result<()> {
    // Small frames are coalesced; big DATA buffers go out as they are (no copy).
    const COALESCE: usize = 8 * 1024;
    small.clear();
    for item in batch {
        match item {
            Outgoing::Data(bytes) if bytes.len() >= COALESCE => {
                if !small.is_empty() {
                    io.write_all(small).await?;
                    small.clear();
                }
                io.write_all(&bytes).await?;
            }
            Outgoing::Data(bytes) => small.extend_from_slice(&bytes),
            Outgoing::Control(frame) => frame.encode(small),
            Outgoing::Syn { stream_id, flags, headers, reply } => {
                let mut block = BytesMut::new();
                encoder.encode(&headers, &mut block).map_err(io::Error::other)?;
                let header_block = block.freeze();
                let frame = if reply {
                    Frame::SynReply { stream_id, flags, header_block }
                } else {
                    Frame::SynStream { stream_id, associated_to: 0, priority: 0, slot: 0, flags, header_block }
                };
                frame.encode(small);
            }
            Outgoing::Shutdown => {
                *shutdown = true;
                break;
            }
        }
        if small.len() >= COALESCE {
            io.write_all(small).await?;
            small.clear();
        }
    }
    if !small.is_empty() {
        io.write_all(small).await?;
        small.clear();
    }
    Ok(())
}

async fn reader_task<T: AsyncRead>(shared: Arc<ConnShared>, mut io: ReadHalf<T>, accept: mpsc::Sender<SpdyStream>) {
    let mut reader = Reader {
        decoder: FrameDecoder::new(shared.config.max_frame_size),
        headers: HeaderDecoder::new(shared.config.max_header_block),
        accept,
        shared: shared.clone(),
    };
    let mut closed = shared.closed_tx.subscribe();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let result: Result<(), Error> = async {
        loop {
            while let Some(frame) = reader.decoder.decode(&mut buf)? {
                reader.handle(frame).await?;
            }
            if buf.capacity() - buf.len() < 16 * 1024 {
                buf.reserve(64 * 1024);
            }
            tokio::select! {
                n = io.read_buf(&mut buf) => {
                    if n? == 0 {
                        return Ok(());
                    }
                }
                _ = closed.wait_for(|c| *c) => return Ok(()),
            }
        }
    }
    .await;
    if let Err(Error::Frame(_) | Error::HeaderBlock(_)) = &result {
        // A broken peer: tell it why before hanging up, as far as the writer still can.
        shared.send(Outgoing::Control(Frame::GoAway { last_good_stream_id: 0, status: GoAwayStatus::PROTOCOL_ERROR }));
        shared.send(Outgoing::Shutdown);
    }
    shared.terminate();
}

struct Reader {
    decoder: FrameDecoder,
    headers: HeaderDecoder,
    accept: mpsc::Sender<SpdyStream>,
    shared: Arc<ConnShared>,
}

impl Reader {
    fn stream(&self, id: u32) -> Option<Arc<StreamShared>> {
        lock(&self.shared.state).streams.get(&id).cloned()
    }

    async fn handle(&mut self, frame: Frame) -> Result<(), Error> {
        match frame {
            Frame::Data { stream_id, flags, payload } => {
                let Some(stream) = self.stream(stream_id) else { return Ok(()) };
                let fin = flags & FLAG_FIN != 0;
                if stream.deliver(payload, fin, self.shared.config.stream_receive_buffer) {
                    poll_fn(|cx| stream.poll_room(cx, self.shared.config.stream_receive_buffer)).await;
                }
                if fin && stream.finished() {
                    self.shared.remove_stream(stream_id);
                }
            }
            Frame::SynStream { stream_id, flags, header_block, .. } => {
                // Inflate first: the zlib context must see every block, even refused ones.
                let headers = self.headers.decode(&header_block)?;
                self.open_peer_stream(stream_id, flags, headers).await;
            }
            Frame::SynReply { stream_id, flags, header_block } => {
                self.headers.decode(&header_block)?;
                if let Some(stream) = self.stream(stream_id) {
                    stream.replied(flags & FLAG_FIN != 0);
                    if stream.finished() {
                        self.shared.remove_stream(stream_id);
                    }
                }
            }
            Frame::Headers { stream_id, flags, header_block } => {
                self.headers.decode(&header_block)?;
                if flags & FLAG_FIN != 0
                    && let Some(stream) = self.stream(stream_id)
                {
                    stream.deliver(Bytes::new(), true, usize::MAX);
                    if stream.finished() {
                        self.shared.remove_stream(stream_id);
                    }
                }
            }
            Frame::RstStream { stream_id, status } => {
                let stream = lock(&self.shared.state).streams.remove(&stream_id);
                if let Some(stream) = stream {
                    stream.reset_by_peer(status);
                    let mut st = lock(&self.shared.state);
                    self.shared.maybe_shutdown(&mut st);
                }
            }
            Frame::Ping { id } => {
                let mut st = lock(&self.shared.state);
                if id & 1 != st.next_ping_id & 1 {
                    self.shared.push(&mut st, Outgoing::Control(Frame::Ping { id }));
                } else if let Some(tx) = st.pings.remove(&id) {
                    let _ = tx.send(());
                }
            }
            Frame::GoAway { .. } => {
                let mut st = lock(&self.shared.state);
                st.going_away = true;
                self.shared.maybe_shutdown(&mut st);
            }
            // spdystream neither sends nor obeys these (see the module doc).
            Frame::Settings { .. } | Frame::WindowUpdate { .. } | Frame::Unknown { .. } => {}
        }
        // Pings and resets we answer are queued too: stop reading while the writer is behind.
        poll_fn(|cx| {
            let mut st = lock(&self.shared.state);
            if st.closed || st.queued_bytes < 2 * self.shared.config.write_queue_limit {
                return Poll::Ready(());
            }
            st.room_waiters.push(cx.waker().clone());
            Poll::Pending
        })
        .await;
        Ok(())
    }

    async fn open_peer_stream(&mut self, stream_id: u32, flags: u8, headers: HeaderMap) {
        let peer_parity = match self.shared.role {
            Role::Client => 0,
            Role::Server => 1,
        };
        let stream = {
            let mut st = lock(&self.shared.state);
            if stream_id & 1 != peer_parity || stream_id <= st.last_peer_stream {
                self.shared.push(&mut st, Outgoing::Control(Frame::RstStream { stream_id, status: RstStatus::PROTOCOL_ERROR }));
                return;
            }
            st.last_peer_stream = stream_id;
            if st.going_away {
                self.shared.push(&mut st, Outgoing::Control(Frame::RstStream { stream_id, status: RstStatus::REFUSED_STREAM }));
                return;
            }
            let stream = StreamShared::new(stream_id, true, flags & FLAG_UNIDIRECTIONAL != 0, flags & FLAG_FIN != 0, None);
            st.streams.insert(stream_id, stream.clone());
            stream
        };
        let handle = SpdyStream::new(stream, self.shared.clone(), headers);
        if self.accept.send(handle).await.is_err() {
            // Nobody accepts any more: the dropped handle refuses the stream.
        }
    }
}
