//! A raw HTTP/2 client for tests: it writes frames and HPACK blocks as a test spells them,
//! including what well-behaved clients such as tonic's never send (a socket path or nothing as
//! `:authority`, header blocks split over CONTINUATION frames, padded and prioritised HEADERS),
//! so our servers are tested against what other gRPC libraries put on the wire.

use std::io;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// HTTP/2 frame types this client writes or reads.
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// One frame as read from the server.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// How a header block is laid out in frames.
#[derive(Debug, Clone, Default)]
pub struct BlockShape {
    /// Padding bytes on the HEADERS frame (PADDED flag when non-zero).
    pub padding: u8,
    /// Priority fields on the HEADERS frame (PRIORITY flag).
    pub priority: Option<[u8; 5]>,
    /// Into how many frames the block is cut: the HEADERS frame and `pieces - 1` CONTINUATIONs.
    pub pieces: usize,
}

/// What came back on one stream.
#[derive(Debug, Clone, Default)]
pub struct Response {
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub data: Vec<u8>,
    pub trailers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The error code of an RST_STREAM for this stream.
    pub reset: Option<u32>,
    /// The error code of a GOAWAY that ended the connection.
    pub goaway: Option<u32>,
}

impl Response {
    /// The value of a header or trailer field.
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .chain(&self.trailers)
            .find(|(n, _)| n == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    /// The gRPC status of the call (`grpc-status`), if it got that far.
    pub fn grpc_status(&self) -> Option<u32> {
        std::str::from_utf8(self.field("grpc-status")?)
            .ok()?
            .parse()
            .ok()
    }

    /// The first gRPC message of the response body (without its 5-byte prefix).
    pub fn grpc_message(&self) -> Option<&[u8]> {
        let len = u32::from_be_bytes(self.data.get(1..5)?.try_into().ok()?) as usize;
        self.data.get(5..5 + len)
    }
}

/// A client connection that speaks HTTP/2 frame by frame.
pub struct RawH2Client<S> {
    io: S,
    encoder: httlib_hpack::Encoder<'static>,
    decoder: crate::transport::hpack::Decoder,
    read: BytesMut,
    next_stream: u32,
}

impl<S: AsyncRead + AsyncWrite + Unpin> RawH2Client<S> {
    /// Sends the connection preface and our (empty) SETTINGS.
    pub async fn handshake(mut io: S) -> io::Result<Self> {
        io.write_all(PREFACE).await?;
        let mut client = Self {
            io,
            encoder: httlib_hpack::Encoder::default(),
            decoder: crate::transport::hpack::Decoder::new(
                crate::transport::hpack::DEFAULT_TABLE_SIZE,
            ),
            read: BytesMut::new(),
            next_stream: 1,
        };
        client.send_frame(kind::SETTINGS, 0, 0, &[]).await?;
        Ok(client)
    }

    /// A new client-initiated stream id.
    pub fn new_stream(&mut self) -> u32 {
        let id = self.next_stream;
        self.next_stream += 2;
        id
    }

    /// Encodes header fields with this connection's encoder, as real clients do (see
    /// [`encode_block`]), so later blocks refer back to earlier ones.
    pub fn encode(&mut self, fields: &[(&[u8], &[u8])]) -> io::Result<Vec<u8>> {
        encode_block(&mut self.encoder, fields)
    }

    /// Writes one frame.
    pub async fn send_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
    ) -> io::Result<()> {
        if payload.len() >= 1 << 24 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame too long",
            ));
        }
        self.io
            .write_all(&frame(kind, flags, stream, payload))
            .await
    }

    /// Writes a header block on `stream` laid out as `shape` says.
    pub async fn send_block(
        &mut self,
        stream: u32,
        block: &[u8],
        end_stream: bool,
        shape: &BlockShape,
    ) -> io::Result<()> {
        let pieces = shape.pieces.max(1);
        let size = block.len().div_ceil(pieces).max(1);
        let mut chunks: Vec<&[u8]> = block.chunks(size).collect();
        chunks.resize(pieces, &[]);
        let mut flags = if end_stream { END_STREAM } else { 0 };
        let mut payload = Vec::new();
        if shape.padding > 0 {
            flags |= PADDED;
            payload.push(shape.padding);
        }
        if let Some(priority) = shape.priority {
            flags |= PRIORITY;
            payload.extend_from_slice(&priority);
        }
        payload.extend_from_slice(chunks[0]);
        payload.resize(payload.len() + usize::from(shape.padding), 0);
        if pieces == 1 {
            flags |= END_HEADERS;
        }
        self.send_frame(kind::HEADERS, flags, stream, &payload)
            .await?;
        for (i, chunk) in chunks.iter().enumerate().skip(1) {
            let flags = if i + 1 == pieces { END_HEADERS } else { 0 };
            self.send_frame(kind::CONTINUATION, flags, stream, chunk)
                .await?;
        }
        Ok(())
    }

    /// Sends a unary gRPC call: `fields` as the header block (shaped), then `message` in one
    /// DATA frame that ends the stream. Returns the stream id.
    pub async fn send_grpc(
        &mut self,
        block: &[u8],
        shape: &BlockShape,
        message: &[u8],
    ) -> io::Result<u32> {
        let stream = self.new_stream();
        self.send_block(stream, block, false, shape).await?;
        self.send_frame(kind::DATA, END_STREAM, stream, &grpc_frame(message))
            .await?;
        Ok(stream)
    }

    /// Reads one frame.
    pub async fn read_frame(&mut self) -> io::Result<Frame> {
        loop {
            if self.read.len() >= 9 {
                let len = usize::from(self.read[0]) << 16
                    | usize::from(self.read[1]) << 8
                    | usize::from(self.read[2]);
                if self.read.len() >= 9 + len {
                    let head = self.read.split_to(9);
                    let payload = self.read.split_to(len).to_vec();
                    let stream =
                        u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                    return Ok(Frame {
                        kind: head[3],
                        flags: head[4],
                        stream,
                        payload,
                    });
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.io.read(&mut chunk).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            self.read.extend_from_slice(&chunk[..n]);
        }
    }

    /// Writes a control reply (an ACK, flow-control credit). A server that already closed its
    /// side may still have sent frames worth reading, such as the GOAWAY saying why, so a
    /// failed write is left for the next read to report.
    async fn reply(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let _ = self.send_frame(kind, flags, stream, payload).await;
    }

    /// Reads frames until `stream` ends (END_STREAM, RST_STREAM or GOAWAY), answering SETTINGS
    /// and PING and returning flow-control credit for every DATA byte.
    pub async fn response(&mut self, stream: u32) -> io::Result<Response> {
        let mut response = Response::default();
        let mut block = Vec::new();
        loop {
            let frame = self.read_frame().await?;
            match frame.kind {
                kind::SETTINGS if frame.flags & ACK == 0 => {
                    self.reply(kind::SETTINGS, ACK, 0, &[]).await;
                }
                kind::PING if frame.flags & ACK == 0 => {
                    self.reply(kind::PING, ACK, 0, &frame.payload).await;
                }
                kind::GOAWAY => {
                    response.goaway = frame
                        .payload
                        .get(4..8)
                        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                    return Ok(response);
                }
                kind::RST_STREAM if frame.stream == stream => {
                    response.reset = frame
                        .payload
                        .get(..4)
                        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                    return Ok(response);
                }
                kind::DATA => {
                    let credit = u32::try_from(frame.payload.len()).unwrap_or(0);
                    if credit > 0 {
                        let credit = credit.to_be_bytes();
                        self.reply(kind::WINDOW_UPDATE, 0, 0, &credit).await;
                        if frame.flags & END_STREAM == 0 {
                            self.reply(kind::WINDOW_UPDATE, 0, frame.stream, &credit)
                                .await;
                        }
                    }
                    if frame.stream == stream {
                        response.data.extend_from_slice(unpadded(&frame)?);
                        if frame.flags & END_STREAM != 0 {
                            return Ok(response);
                        }
                    }
                }
                kind::HEADERS | kind::CONTINUATION => {
                    let fragment = if frame.kind == kind::HEADERS {
                        unpadded(&frame)?
                    } else {
                        &frame.payload
                    };
                    block.extend_from_slice(fragment);
                    if frame.flags & END_HEADERS == 0 {
                        continue;
                    }
                    // Every block is decoded, whatever its stream, to keep the table in step.
                    let fields = decode_block(&mut self.decoder, &block)?;
                    block.clear();
                    if frame.stream != stream {
                        continue;
                    }
                    if response.headers.is_empty() {
                        response.headers = fields;
                    } else {
                        response.trailers = fields;
                    }
                    if frame.flags & END_STREAM != 0 {
                        return Ok(response);
                    }
                }
                _ => {}
            }
        }
    }
}

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = crate::transport::authority::PREFACE;

/// One frame's bytes: the 9-byte head, then `payload` (under 16 MiB).
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut frame = Vec::with_capacity(9 + payload.len());
    frame.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Frames a message as gRPC does: uncompressed flag, big-endian length, bytes.
pub fn grpc_frame(message: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    framed
}

/// How [`encode_block`] encodes a field: Huffman-coded name and value, indexed into the
/// table, as an index where the table has it (what grpc-go and h2 clients do).
const CLIENT_FLAGS: u8 = httlib_hpack::Encoder::HUFFMAN_NAME
    | httlib_hpack::Encoder::HUFFMAN_VALUE
    | httlib_hpack::Encoder::WITH_INDEXING
    | httlib_hpack::Encoder::BEST_FORMAT;

fn hpack_error(e: impl std::fmt::Debug) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("HPACK: {e:?}"))
}

/// Encodes fields as a client's encoder does: Huffman-coded, indexed into its dynamic table.
pub fn encode_block(
    encoder: &mut httlib_hpack::Encoder<'_>,
    fields: &[(&[u8], &[u8])],
) -> io::Result<Vec<u8>> {
    let mut block = Vec::new();
    for (name, value) in fields {
        encoder
            .encode((name.to_vec(), value.to_vec(), CLIENT_FLAGS), &mut block)
            .map_err(hpack_error)?;
    }
    Ok(block)
}

/// Resizes `encoder`'s table; returns the size update instruction (RFC 7541 §6.3) that must
/// open the next block.
pub fn resize_table(encoder: &mut httlib_hpack::Encoder<'_>, size: u32) -> io::Result<Vec<u8>> {
    let mut instruction = Vec::new();
    encoder
        .update_max_dynamic_size(size, &mut instruction)
        .map_err(hpack_error)?;
    Ok(instruction)
}

/// Decodes a header block into (name, value) pairs (with the decoder our servers use).
fn decode_block(
    decoder: &mut crate::transport::hpack::Decoder,
    block: &[u8],
) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut fields = Vec::new();
    decoder
        .decode(block, |n, v, _| fields.push((n.to_vec(), v.to_vec())))
        .map_err(hpack_error)?;
    Ok(fields)
}

/// The request fields of a gRPC call to `path` with the given `:authority` (none if `None`).
pub fn grpc_request_fields<'a>(
    path: &'a [u8],
    authority: Option<&'a [u8]>,
) -> Vec<(&'a [u8], &'a [u8])> {
    let mut fields: Vec<(&[u8], &[u8])> = vec![
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path),
    ];
    if let Some(authority) = authority {
        fields.push((b":authority", authority));
    }
    fields.push((b"content-type", b"application/grpc"));
    fields.push((b"te", b"trailers"));
    fields
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// A DATA or HEADERS frame's payload without its padding and priority fields.
fn unpadded(frame: &Frame) -> io::Result<&[u8]> {
    crate::transport::authority::headers_fragment(frame.flags, &frame.payload)
        .map(|(_, fragment)| fragment)
        .ok_or_else(|| invalid("padding or priority overruns the frame"))
}
