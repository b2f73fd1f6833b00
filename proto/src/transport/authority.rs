//! Accepting any `:authority` on our unix-socket gRPC servers.
//!
//! gRPC clients disagree on what a unix-socket request's `:authority` is: grpc-go up to the
//! version Kubernetes 1.28 vendors, grpc-java, C-core (Python `grpcio` ≥ 1.57 percent-encodes
//! it) and grpc-swift send the socket path, some send nothing at all, crictl sends `localhost`.
//! Go servers (containerd, CRI-O) take whatever comes; the `h2` crate under tonic rejects
//! anything that is not a valid URI authority with `RST_STREAM(PROTOCOL_ERROR)` before any
//! handler runs, and its maintainers declined to relax that (hyperium/h2#487,
//! hyperium/hyper#3750).
//!
//! So [`AuthorityRewrite`] sits between the accepted connection and h2 and edits the
//! client-to-server byte stream: every header block (a HEADERS frame and its CONTINUATION
//! frames) is HPACK-decoded with the client's dynamic table ([`super::hpack`]) and re-encoded as
//! literals without indexing (never-indexed ones stay never-indexed), with an `:authority` that h2 would reject replaced by `localhost`. Since h2 never
//! sees an indexing instruction, its decoder's dynamic table stays empty and in step with what
//! we send; the client's table lives only in our decoder. Every other frame passes through
//! untouched (DATA streams through without being gathered), and the server-to-client direction
//! is not looked at. Anything we cannot parse is handed to h2 as it came, so h2 reports the
//! protocol error itself; an undecodable header block becomes one h2 is sure to reject as a
//! compression error, as it would have rejected the original.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::hpack::Decoder;

/// The value an unacceptable `:authority` is replaced with: what crictl and tonic clients send.
const REPLACEMENT_AUTHORITY: &[u8] = b"localhost";

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const FRAME_HEAD_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
const PRIORITY_LEN: usize = 5;

/// The largest frame payload every HTTP/2 peer accepts (SETTINGS_MAX_FRAME_SIZE's floor), so
/// the frames we write never depend on what h2 advertised.
const MAX_FRAME_PAYLOAD: usize = 16_384;

/// Bound on one encoded header block (all its frames). Far above any gRPC request's; a peer
/// that sends more gets a compression error instead of unbounded buffering.
const MAX_HEADER_BLOCK: usize = 1 << 20;

/// Bound on the HPACK dynamic table a client may ask for. h2 advertises the protocol default
/// (4096); we allow more rather than fail a client h2 might one day be configured to accept.
const MAX_DYNAMIC_TABLE: usize = 64 * 1024;

/// A header block h2 is certain to reject with COMPRESSION_ERROR: an indexed field with index
/// 0, which RFC 7541 §6.1 makes a decoding error.
const UNDECODABLE_BLOCK: &[u8] = &[0x80];

/// Bytes read from the connection per read call.
const READ_CHUNK: usize = 16 * 1024;

/// Whether h2 accepts `value` as a request's `:authority`: exactly the check its server makes.
fn acceptable_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// Where the rewriter is in the client's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Inside the connection preface, this many bytes of it seen.
    Preface(usize),
    /// At a frame boundary.
    FrameHead,
    /// Inside the payload of a frame we pass on as it is: this many bytes left.
    Forward(usize),
    /// Everything from here on passes untouched: not HTTP/2 as we know it, so h2 judges it.
    Passthrough,
    /// Everything from here on is dropped: h2 was handed a header block it rejects in place of
    /// an oversized one, and ends the connection on it. Dropping the rest (rather than passing
    /// on whatever arrives later) keeps the output independent of how the input was read.
    Discard,
}

/// A HEADERS frame whose block continues in CONTINUATION frames.
#[derive(Debug)]
struct OpenBlock {
    stream: [u8; 4],
    flags: u8,
    priority: Option<[u8; PRIORITY_LEN]>,
}

/// The client-to-server stream editor: bytes in, bytes for h2 out. Pure (no I/O), so it is
/// tested on any split of the input.
pub(crate) struct Rewriter {
    state: State,
    decoder: Decoder,
    open: Option<OpenBlock>,
    /// The header block gathered so far (HEADERS + CONTINUATION fragments).
    block: Vec<u8>,
    /// The same frames as received, handed on unchanged if the stream turns out malformed.
    raw: Vec<u8>,
    /// Scratch for the re-encoded block.
    encoded: Vec<u8>,
}

impl Rewriter {
    /// A rewriter at the start of a connection; a disabled one passes everything through.
    pub(crate) fn new(enabled: bool) -> Self {
        let decoder = Decoder::new(MAX_DYNAMIC_TABLE);
        Self {
            state: if enabled {
                State::Preface(0)
            } else {
                State::Passthrough
            },
            decoder,
            open: None,
            block: Vec::new(),
            raw: Vec::new(),
            encoded: Vec::new(),
        }
    }

    /// Whether every further byte passes through unchanged.
    pub(crate) fn is_passthrough(&self) -> bool {
        self.state == State::Passthrough
    }

    /// Moves what can be decided from `input` to `output`, leaving an incomplete header frame
    /// (or frame head) in `input` for the next call.
    pub(crate) fn process(&mut self, input: &mut BytesMut, output: &mut BytesMut) {
        loop {
            match self.state {
                State::Discard => {
                    input.clear();
                    return;
                }
                State::Passthrough => {
                    output.extend_from_slice(&self.raw);
                    self.raw.clear();
                    output.extend_from_slice(input);
                    input.clear();
                    return;
                }
                State::Preface(seen) => {
                    let n = input.len().min(PREFACE.len() - seen);
                    if n == 0 {
                        return;
                    }
                    if input[..n] != PREFACE[seen..seen + n] {
                        self.state = State::Passthrough;
                        continue;
                    }
                    output.extend_from_slice(&input[..n]);
                    input.advance(n);
                    self.state = if seen + n == PREFACE.len() {
                        State::FrameHead
                    } else {
                        State::Preface(seen + n)
                    };
                }
                State::Forward(0) => self.state = State::FrameHead,
                State::Forward(remaining) => {
                    let n = input.len().min(remaining);
                    if n == 0 {
                        return;
                    }
                    output.extend_from_slice(&input[..n]);
                    input.advance(n);
                    self.state = if n == remaining {
                        State::FrameHead
                    } else {
                        State::Forward(remaining - n)
                    };
                }
                State::FrameHead => {
                    if input.len() < FRAME_HEAD_LEN {
                        return;
                    }
                    let len = usize::from(input[0]) << 16
                        | usize::from(input[1]) << 8
                        | usize::from(input[2]);
                    let kind = input[3];
                    let carries_block =
                        kind == HEADERS || (kind == CONTINUATION && self.open.is_some());
                    if self.open.is_some() && kind != CONTINUATION || kind == PUSH_PROMISE {
                        // A block interrupted by another frame, or a push from a client: both
                        // protocol errors, which h2 reports once it sees the frames as sent.
                        self.state = State::Passthrough;
                        continue;
                    }
                    if !carries_block {
                        output.extend_from_slice(&input[..FRAME_HEAD_LEN]);
                        input.advance(FRAME_HEAD_LEN);
                        self.state = State::Forward(len);
                        continue;
                    }
                    if self.raw.len() + FRAME_HEAD_LEN + len > MAX_HEADER_BLOCK {
                        self.fail_block(input, output);
                        continue;
                    }
                    let frame_len = FRAME_HEAD_LEN + len;
                    if input.len() < frame_len {
                        return;
                    }
                    // Read in place and advance: splitting the frame off would make `input` a
                    // shared buffer that the next read's reserve reallocates, a fresh allocation
                    // (and its page faults) per request, which once cost 30 µs a round trip.
                    self.header_frame(&input[..frame_len], output);
                    input.advance(frame_len);
                }
            }
        }
    }

    /// The client closed: whatever is held back (an unfinished frame or header block) goes to
    /// h2 as it came, which reports it.
    pub(crate) fn finish(&mut self, input: &mut BytesMut, output: &mut BytesMut) {
        if self.state != State::Discard {
            self.state = State::Passthrough;
        }
        self.process(input, output);
    }

    /// Takes one whole HEADERS or CONTINUATION frame of a header block.
    fn header_frame(&mut self, frame: &[u8], output: &mut BytesMut) {
        let (head, payload) = frame.split_at(FRAME_HEAD_LEN);
        let (kind, flags) = (head[3], head[4]);
        let stream = [head[5], head[6], head[7], head[8]];
        self.raw.extend_from_slice(frame);
        let fragment = if kind == HEADERS {
            let Some((priority, fragment)) = headers_fragment(flags, payload) else {
                self.state = State::Passthrough;
                return;
            };
            self.open = Some(OpenBlock {
                stream,
                flags,
                priority,
            });
            fragment
        } else {
            if self.open.as_ref().map(|o| o.stream) != Some(stream) {
                self.state = State::Passthrough;
                return;
            }
            payload
        };
        self.block.extend_from_slice(fragment);
        if flags & END_HEADERS != 0 {
            self.finish_block(output);
        }
    }

    /// Decodes the gathered block and writes it out re-encoded.
    fn finish_block(&mut self, output: &mut BytesMut) {
        let Some(open) = self.open.take() else {
            return;
        };
        self.encoded.clear();
        let encoded = &mut self.encoded;
        let decoded = self
            .decoder
            .decode(&self.block, |name, value, never_indexed| {
                let value = if name == b":authority" && !acceptable_authority(value) {
                    REPLACEMENT_AUTHORITY
                } else {
                    value
                };
                encode_literal(name, value, never_indexed, encoded);
            });
        let block: &[u8] = if decoded.is_ok() {
            &self.encoded
        } else {
            // The client's table and ours have parted: no later block can be trusted either.
            self.state = State::Passthrough;
            UNDECODABLE_BLOCK
        };
        write_header_frames(&open, block, output);
        self.block.clear();
        self.raw.clear();
    }

    /// A header block over the size bound: h2 gets one it rejects, then the rest unchanged.
    fn fail_block(&mut self, input: &mut BytesMut, output: &mut BytesMut) {
        let stream = self
            .open
            .take()
            .map(|o| o.stream)
            .unwrap_or([input[5], input[6], input[7], input[8]]);
        let open = OpenBlock {
            stream,
            flags: 0,
            priority: None,
        };
        write_header_frames(&open, UNDECODABLE_BLOCK, output);
        self.block.clear();
        self.raw.clear();
        // Whatever follows on this connection is moot: h2 closes it on the block above.
        self.state = State::Discard;
    }
}

/// Splits a HEADERS payload into its priority fields and block fragment, dropping padding (a
/// DATA payload too: it never carries the PRIORITY flag); `None` when the padding or priority
/// overruns the payload.
pub(crate) fn headers_fragment(
    flags: u8,
    payload: &[u8],
) -> Option<(Option<[u8; PRIORITY_LEN]>, &[u8])> {
    let (pad, rest) = if flags & PADDED != 0 {
        let (&pad, rest) = payload.split_first()?;
        (usize::from(pad), rest)
    } else {
        (0, payload)
    };
    let (priority, rest) = if flags & PRIORITY != 0 {
        let (fields, rest) = rest.split_first_chunk::<PRIORITY_LEN>()?;
        (Some(*fields), rest)
    } else {
        (None, rest)
    };
    let end = rest.len().checked_sub(pad)?;
    Some((priority, &rest[..end]))
}

/// Appends a literal header field without indexing (or never indexed), both strings raw
/// (RFC 7541 §6.2.2, §6.2.3).
fn encode_literal(name: &[u8], value: &[u8], never_indexed: bool, out: &mut Vec<u8>) {
    out.push(if never_indexed { 0x10 } else { 0x00 });
    for s in [name, value] {
        encode_length(s.len(), out);
        out.extend_from_slice(s);
    }
}

/// A string length as an HPACK integer with a 7-bit prefix, Huffman bit clear (RFC 7541 §5.1).
fn encode_length(mut n: usize, out: &mut Vec<u8>) {
    const PREFIX_MAX: usize = 0x7f;
    if n < PREFIX_MAX {
        out.push(n as u8);
        return;
    }
    out.push(PREFIX_MAX as u8);
    n -= PREFIX_MAX;
    while n >= 0x80 {
        out.push((n & 0x7f) as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Writes `block` as a HEADERS frame (keeping END_STREAM and the priority fields of the
/// original) followed by as many CONTINUATION frames as the frame size bound needs.
fn write_header_frames(open: &OpenBlock, block: &[u8], output: &mut BytesMut) {
    let prio_len = open.priority.map_or(0, |_| PRIORITY_LEN);
    let first = block.len().min(MAX_FRAME_PAYLOAD - prio_len);
    let (head, mut rest) = block.split_at(first);
    let mut flags = open.flags & (END_STREAM | PRIORITY);
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    write_frame_head(output, prio_len + head.len(), HEADERS, flags, open.stream);
    if let Some(priority) = open.priority {
        output.extend_from_slice(&priority);
    }
    output.extend_from_slice(head);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(MAX_FRAME_PAYLOAD));
        let flags = if tail.is_empty() { END_HEADERS } else { 0 };
        write_frame_head(output, chunk.len(), CONTINUATION, flags, open.stream);
        output.extend_from_slice(chunk);
        rest = tail;
    }
}

fn write_frame_head(output: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: [u8; 4]) {
    // len ≤ MAX_FRAME_PAYLOAD, so it fits the 24-bit length field.
    let len = (len as u32).to_be_bytes();
    output.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
    output.extend_from_slice(&stream);
}

/// An accepted connection whose requests h2 accepts whatever `:authority` the client sent
/// (see the module docs). Writes pass straight through.
pub struct AuthorityRewrite<IO> {
    io: IO,
    rewriter: Rewriter,
    /// Bytes read from the client not yet processed (an incomplete header frame).
    input: BytesMut,
    /// Processed bytes not yet handed to h2.
    output: BytesMut,
    eof: bool,
}

impl<IO> AuthorityRewrite<IO> {
    /// Wraps an accepted connection; with `enabled` false it is a plain pass-through (kept for
    /// measuring what the rewriting costs).
    pub fn new(io: IO, enabled: bool) -> Self {
        Self {
            io,
            rewriter: Rewriter::new(enabled),
            input: BytesMut::new(),
            output: BytesMut::new(),
            eof: false,
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for AuthorityRewrite<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.output.is_empty() {
                let n = buf.remaining().min(this.output.len());
                buf.put_slice(&this.output[..n]);
                this.output.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.rewriter.is_passthrough() && this.input.is_empty() {
                return Pin::new(&mut this.io).poll_read(cx, buf);
            }
            if this.eof {
                // A truncated frame at the end: h2 sees it as sent and reports it.
                this.rewriter.finish(&mut this.input, &mut this.output);
                if this.output.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.input.reserve(READ_CHUNK);
            match tokio_util::io::poll_read_buf(Pin::new(&mut this.io), cx, &mut this.input) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(0)) => this.eof = true,
                Poll::Ready(Ok(_)) => this.rewriter.process(&mut this.input, &mut this.output),
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for AuthorityRewrite<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<IO: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AuthorityRewrite<IO>
{
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests;
