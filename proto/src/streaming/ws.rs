//! The WebSocket channel protocol (wsstream): each message starts with its channel number, one
//! byte in binary mode, one ASCII digit before a base64 payload in the `base64.*` variants; v5
//! adds the close signal (channel 255, then the closed channel's number). One task reads and
//! routes messages to per-channel readers, one writes what the channel writers queue, in order.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use base64::Engine as _;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_util::sync::{CancellationToken, PollSender};

/// The v5 close signal's channel.
pub(crate) const CLOSE_CHANNEL: u8 = 255;
/// The largest payload one write turns into one message.
const MAX_MESSAGE: usize = 32 * 1024;
/// Messages buffered per reading channel (head-of-line blocking beyond, as Go's pipes).
const READ_QUEUE: usize = 16;

/// How the channels are framed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Framing {
    pub base64: bool,
    /// v5: honour the close signal.
    pub close_signal: bool,
    /// v5 client: send it when a writer shuts down. Go's servers never send it (client-go
    /// logs "Unknown stream id 255" when one does); a server's end of output is its
    /// connection's end.
    pub send_close_signal: bool,
}

/// A Close frame with status 1000: Go's client (gorilla) takes anything else, even a frame
/// without a status, for an error ("close 1005 (no status)").
fn normal_close() -> Message {
    Message::Close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
        code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
        reason: "".into(),
    }))
}

enum Outgoing {
    Data(u8, Bytes),
    CloseChannel(u8),
    Close(oneshot::Sender<()>),
}

/// A running multiplexer: hands out channel writers; readers were chosen at start.
#[derive(Clone)]
pub(crate) struct Mux {
    out: mpsc::Sender<Outgoing>,
    framing: Framing,
    gone: CancellationToken,
}

impl Mux {
    /// Starts the reader and writer tasks over an upgraded connection. `readable` are the
    /// channels whose data is delivered; messages for others are dropped (Go's ignore channels).
    pub(crate) async fn start<T>(
        io: T,
        role: Role,
        framing: Framing,
        readable: &[u8],
    ) -> (Mux, HashMap<u8, ChannelReader>)
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let ws = WebSocketStream::from_raw_socket(io, role, None).await;
        let (sink, stream) = ws.split();
        let gone = CancellationToken::new();
        let mut routes = HashMap::new();
        let mut readers = HashMap::new();
        for &channel in readable {
            let (tx, rx) = mpsc::channel(READ_QUEUE);
            routes.insert(channel, tx);
            readers.insert(
                channel,
                ChannelReader {
                    rx,
                    current: Bytes::new(),
                },
            );
        }
        let (out, out_rx) = mpsc::channel(READ_QUEUE);
        tokio::spawn(read_loop(stream, routes, framing, gone.clone()));
        tokio::spawn(write_loop(sink, out_rx, framing, gone.clone()));
        (Mux { out, framing, gone }, readers)
    }

    /// A writer for one channel.
    pub(crate) fn writer(&self, channel: u8) -> ChannelWriter {
        ChannelWriter {
            channel,
            out: PollSender::new(self.out.clone()),
            close_signal: self.framing.send_close_signal,
            closed: false,
        }
    }

    /// Queues one message on a channel (possibly empty: Go's "connection ready" message).
    pub(crate) async fn send(&self, channel: u8, data: Bytes) -> io::Result<()> {
        self.out
            .send(Outgoing::Data(channel, data))
            .await
            .map_err(|_| broken())
    }

    /// Resolves once the peer has gone (connection closed or failed).
    pub(crate) fn gone(&self) -> CancellationToken {
        self.gone.clone()
    }

    /// Sends a Close frame after everything queued, and waits until it is out.
    pub(crate) async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.out.send(Outgoing::Close(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "streaming connection closed")
}

async fn read_loop<S>(
    mut stream: S,
    mut routes: HashMap<u8, mpsc::Sender<Bytes>>,
    framing: Framing,
    gone: CancellationToken,
) where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            () = gone.cancelled() => break,
        };
        let payload: Bytes = match message {
            Some(Ok(Message::Binary(data))) => data,
            Some(Ok(Message::Text(text))) => Bytes::from(text.as_str().to_owned()),
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
            Some(Ok(_)) => continue,
        };
        let Some((channel, data)) = decode(&payload, framing.base64) else {
            continue;
        };
        if channel == CLOSE_CHANNEL && framing.close_signal {
            if let Some(closed) = data.first() {
                routes.remove(closed);
            }
            continue;
        }
        if data.is_empty() {
            continue;
        }
        if let Some(route) = routes.get(&channel) {
            let delivered = tokio::select! {
                sent = route.send(data) => sent.is_ok(),
                () = gone.cancelled() => break,
            };
            if !delivered {
                // Nobody reads this channel any more: drop its data, as Go's closed pipes do.
                routes.remove(&channel);
            }
        }
    }
    gone.cancel();
}

pub(crate) fn decode(payload: &Bytes, base64: bool) -> Option<(u8, Bytes)> {
    let (&first, _) = payload.split_first()?;
    if !base64 {
        return Some((first, payload.slice(1..)));
    }
    let channel = first.wrapping_sub(b'0');
    if channel == CLOSE_CHANNEL.wrapping_sub(b'0') {
        return None;
    }
    let data = base64::engine::general_purpose::STANDARD
        .decode(&payload[1..])
        .ok()?;
    Some((channel, Bytes::from(data)))
}

fn encode(channel: u8, data: &[u8], base64: bool) -> Message {
    if base64 {
        let mut text = String::with_capacity(1 + data.len() * 4 / 3 + 4);
        text.push(char::from(b'0'.wrapping_add(channel)));
        base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
        Message::text(text)
    } else {
        let mut frame = Vec::with_capacity(data.len() + 1);
        frame.push(channel);
        frame.extend_from_slice(data);
        Message::binary(frame)
    }
}

async fn write_loop<S>(
    mut sink: S,
    mut out: mpsc::Receiver<Outgoing>,
    framing: Framing,
    gone: CancellationToken,
) where
    S: futures::Sink<Message, Error = tokio_tungstenite::tungstenite::Error> + Unpin,
{
    loop {
        let next = tokio::select! {
            next = out.recv() => next,
            () = gone.cancelled() => None,
        };
        let sent = match next {
            Some(Outgoing::Data(channel, data)) => {
                sink.send(encode(channel, &data, framing.base64)).await
            }
            Some(Outgoing::CloseChannel(channel)) => {
                sink.send(encode(CLOSE_CHANNEL, &[channel], false)).await
            }
            Some(Outgoing::Close(done)) => {
                let _ = sink.send(normal_close()).await;
                let _ = sink.close().await;
                let _ = done.send(());
                break;
            }
            None => {
                // Every writer is gone: end the connection.
                let _ = sink.send(normal_close()).await;
                let _ = sink.close().await;
                break;
            }
        };
        if sent.is_err() {
            break;
        }
    }
    // Anyone still queueing learns the connection is over.
    out.close();
    gone.cancel();
}

/// Reads one channel's data; EOF when the peer closes it (v5) or the connection ends.
pub(crate) struct ChannelReader {
    rx: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl AsyncRead for ChannelReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        while self.current.is_empty() {
            match ready!(self.rx.poll_recv(cx)) {
                Some(data) => self.current = data,
                None => return Poll::Ready(Ok(())),
            }
        }
        let n = self.current.len().min(buf.remaining());
        buf.put_slice(&self.current.split_to(n));
        Poll::Ready(Ok(()))
    }
}

/// Writes one channel: each write is a message; shutdown sends v5's close signal.
pub(crate) struct ChannelWriter {
    channel: u8,
    out: PollSender<Outgoing>,
    close_signal: bool,
    closed: bool,
}

impl AsyncWrite for ChannelWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.closed {
            return Poll::Ready(Err(broken()));
        }
        ready!(self.out.poll_reserve(cx)).map_err(|_| broken())?;
        let n = buf.len().min(MAX_MESSAGE);
        let channel = self.channel;
        self.out
            .send_item(Outgoing::Data(channel, Bytes::copy_from_slice(&buf[..n])))
            .map_err(|_| broken())?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.closed {
            return Poll::Ready(Ok(()));
        }
        if self.close_signal {
            if ready!(self.out.poll_reserve(cx)).is_err() {
                self.closed = true;
                return Poll::Ready(Ok(()));
            }
            let channel = self.channel;
            let _ = self.out.send_item(Outgoing::CloseChannel(channel));
        }
        self.closed = true;
        self.out.close();
        Poll::Ready(Ok(()))
    }
}

/// A channel's reader and writer as one duplex stream (a forwarded port's data channel).
pub(crate) struct ChannelDuplex {
    pub(crate) reader: ChannelReader,
    pub(crate) writer: ChannelWriter,
}

impl AsyncRead for ChannelDuplex {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.reader).poll_read(cx, buf)
    }
}

impl AsyncWrite for ChannelDuplex {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.writer).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.writer).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.writer).poll_shutdown(cx)
    }
}
