//! SPDY/3.1 frames on the wire: the eight control frames Kubernetes' peers exchange and DATA,
//! with an incremental decoder over a [`BytesMut`] (partial input is fine) and an encoder.
//!
//! Header blocks stay compressed at this layer ([`Bytes`]): their zlib context spans the whole
//! connection, so only the connection may inflate them, in frame order
//! ([`super::header_block`]).

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The protocol version in every control frame.
pub const VERSION: u16 = 3;
/// FLAG_FIN on control and data frames: the sender's half of the stream ends here.
pub const FLAG_FIN: u8 = 0x01;
/// FLAG_UNIDIRECTIONAL on SYN_STREAM: the receiver never sends on this stream.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// The largest length a frame header can carry (24 bits).
pub const MAX_FRAME_LENGTH: usize = (1 << 24) - 1;
/// Size of every frame's fixed header (control and data).
pub const HEADER_LEN: usize = 8;

const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_SETTINGS: u16 = 4;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const TYPE_WINDOW_UPDATE: u16 = 9;

/// An RST_STREAM status code (SPDY/3.1 §2.6.3); unknown codes are kept as they came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RstStatus(pub u32);

impl RstStatus {
    /// PROTOCOL_ERROR.
    pub const PROTOCOL_ERROR: Self = Self(1);
    /// INVALID_STREAM: a frame for a stream that is not active.
    pub const INVALID_STREAM: Self = Self(2);
    /// REFUSED_STREAM: the stream was refused before any processing.
    pub const REFUSED_STREAM: Self = Self(3);
    /// UNSUPPORTED_VERSION.
    pub const UNSUPPORTED_VERSION: Self = Self(4);
    /// CANCEL: the stream is no longer needed (what spdystream's Reset sends).
    pub const CANCEL: Self = Self(5);
    /// INTERNAL_ERROR.
    pub const INTERNAL_ERROR: Self = Self(6);
    /// FLOW_CONTROL_ERROR.
    pub const FLOW_CONTROL_ERROR: Self = Self(7);
    /// STREAM_IN_USE: a second SYN_REPLY.
    pub const STREAM_IN_USE: Self = Self(8);
    /// STREAM_ALREADY_CLOSED: data after FIN.
    pub const STREAM_ALREADY_CLOSED: Self = Self(9);
    /// FRAME_TOO_LARGE.
    pub const FRAME_TOO_LARGE: Self = Self(11);
}

impl std::fmt::Display for RstStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.0 {
            1 => "PROTOCOL_ERROR",
            2 => "INVALID_STREAM",
            3 => "REFUSED_STREAM",
            4 => "UNSUPPORTED_VERSION",
            5 => "CANCEL",
            6 => "INTERNAL_ERROR",
            7 => "FLOW_CONTROL_ERROR",
            8 => "STREAM_IN_USE",
            9 => "STREAM_ALREADY_CLOSED",
            10 => "INVALID_CREDENTIALS",
            11 => "FRAME_TOO_LARGE",
            other => return write!(f, "status {other}"),
        };
        f.write_str(name)
    }
}

/// A GOAWAY status code: 0 OK, 1 PROTOCOL_ERROR, 2 INTERNAL_ERROR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GoAwayStatus(pub u32);

impl GoAwayStatus {
    /// A normal shutdown (what spdystream's Close sends).
    pub const OK: Self = Self(0);
    /// The peer broke the protocol.
    pub const PROTOCOL_ERROR: Self = Self(1);
    /// This side failed.
    pub const INTERNAL_ERROR: Self = Self(2);
}

/// One SETTINGS entry: flags (8 bits), id (24 bits), value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// FLAG_SETTINGS_PERSIST_VALUE (1) / FLAG_SETTINGS_PERSISTED (2).
    pub flags: u8,
    /// The setting's id, e.g. 7 = SETTINGS_INITIAL_WINDOW_SIZE.
    pub id: u32,
    /// Its value.
    pub value: u32,
}

/// A decoded frame; header blocks are still compressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// SYN_STREAM: opens a stream.
    SynStream {
        /// The new stream's id (odd from clients, even from servers).
        stream_id: u32,
        /// The stream it is associated to (0: none).
        associated_to: u32,
        /// Priority 0 (highest) to 7.
        priority: u8,
        /// The credential slot (always 0 here).
        slot: u8,
        /// [`FLAG_FIN`] | [`FLAG_UNIDIRECTIONAL`].
        flags: u8,
        /// The compressed name/value header block.
        header_block: Bytes,
    },
    /// SYN_REPLY: accepts a stream.
    SynReply {
        /// The stream being accepted.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// The compressed name/value header block.
        header_block: Bytes,
    },
    /// RST_STREAM: aborts a stream.
    RstStream {
        /// The stream aborted.
        stream_id: u32,
        /// Why.
        status: RstStatus,
    },
    /// SETTINGS.
    Settings {
        /// FLAG_SETTINGS_CLEAR_SETTINGS (1).
        flags: u8,
        /// The entries.
        settings: Vec<Setting>,
    },
    /// PING: echoed back by the receiver when the id's parity is the peer's.
    Ping {
        /// Odd from clients, even from servers.
        id: u32,
    },
    /// GOAWAY: no new streams after `last_good_stream_id`.
    GoAway {
        /// The last stream id the sender accepted from us.
        last_good_stream_id: u32,
        /// Why.
        status: GoAwayStatus,
    },
    /// HEADERS: more headers on an open stream.
    Headers {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// The compressed name/value header block.
        header_block: Bytes,
    },
    /// WINDOW_UPDATE: the receiver consumed `delta` more bytes of the stream.
    WindowUpdate {
        /// The stream (0: the connection, SPDY/3.1).
        stream_id: u32,
        /// Bytes added to the send window (31 bits).
        delta: u32,
    },
    /// DATA.
    Data {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// The payload (zero-copy slice of the read buffer).
        payload: Bytes,
    },
    /// A control frame of a type we do not know, skipped as SPDY/3 requires.
    Unknown {
        /// Its type.
        frame_type: u16,
        /// Its flags.
        flags: u8,
        /// Its raw payload.
        payload: Bytes,
    },
}

/// A frame the decoder refused; any of these ends the connection (as in spdystream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A control frame of another SPDY version.
    #[error("unsupported SPDY version {0}")]
    UnsupportedVersion(u16),
    /// Longer than the configured maximum.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// The announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A control frame whose length does not fit its type.
    #[error("{frame} frame with invalid length {len}")]
    InvalidLength {
        /// The frame type's name.
        frame: &'static str,
        /// The announced length.
        len: usize,
    },
    /// Stream id 0 where a stream is required (or a zero PING id).
    #[error("{0} frame with stream id 0")]
    ZeroStreamId(&'static str),
    /// RST_STREAM with status 0.
    #[error("RST_STREAM with status 0 on stream {0}")]
    ZeroRstStatus(u32),
    /// Flags set where none are allowed.
    #[error("{frame} frame with invalid flags {flags:#x}")]
    InvalidFlags {
        /// The frame type's name.
        frame: &'static str,
        /// The flags.
        flags: u8,
    },
}

/// Reads frames out of a growing buffer; returns `Ok(None)` until a whole frame is there.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max_frame_size: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(MAX_FRAME_LENGTH)
    }
}

impl FrameDecoder {
    /// A decoder refusing frames whose payload is longer than `max_frame_size` bytes.
    pub fn new(max_frame_size: usize) -> Self {
        Self { max_frame_size: max_frame_size.min(MAX_FRAME_LENGTH) }
    }

    /// Takes the next whole frame off the front of `buf`; data payloads are split off without
    /// copying.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let first = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let flags = buf[4];
        let len = u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) as usize;
        if first & 0x8000_0000 != 0 {
            let version = ((first >> 16) & 0x7fff) as u16;
            if version != VERSION {
                return Err(FrameError::UnsupportedVersion(version));
            }
        }
        if len > self.max_frame_size {
            return Err(FrameError::TooLarge { len, max: self.max_frame_size });
        }
        if buf.len() < HEADER_LEN + len {
            buf.reserve(HEADER_LEN + len - buf.len());
            return Ok(None);
        }
        buf.advance(HEADER_LEN);
        let payload = buf.split_to(len).freeze();
        if first & 0x8000_0000 == 0 {
            let stream_id = first & 0x7fff_ffff;
            if stream_id == 0 {
                return Err(FrameError::ZeroStreamId("DATA"));
            }
            return Ok(Some(Frame::Data { stream_id, flags, payload }));
        }
        parse_control((first & 0xffff) as u16, flags, payload).map(Some)
    }
}

fn parse_control(frame_type: u16, flags: u8, mut p: Bytes) -> Result<Frame, FrameError> {
    let len = p.len();
    let need = |frame: &'static str, ok: bool| {
        if ok { Ok(()) } else { Err(FrameError::InvalidLength { frame, len }) }
    };
    let no_flags = |frame: &'static str| {
        if flags == 0 { Ok(()) } else { Err(FrameError::InvalidFlags { frame, flags }) }
    };
    let frame = match frame_type {
        TYPE_SYN_STREAM => {
            need("SYN_STREAM", len >= 10)?;
            let stream_id = p.get_u32() & 0x7fff_ffff;
            let associated_to = p.get_u32() & 0x7fff_ffff;
            let priority = p.get_u8() >> 5;
            let slot = p.get_u8();
            if stream_id == 0 {
                return Err(FrameError::ZeroStreamId("SYN_STREAM"));
            }
            Frame::SynStream { stream_id, associated_to, priority, slot, flags, header_block: p }
        }
        TYPE_SYN_REPLY | TYPE_HEADERS => {
            let name = if frame_type == TYPE_SYN_REPLY { "SYN_REPLY" } else { "HEADERS" };
            need(name, len >= 4)?;
            let stream_id = p.get_u32() & 0x7fff_ffff;
            if stream_id == 0 {
                return Err(FrameError::ZeroStreamId(name));
            }
            if frame_type == TYPE_SYN_REPLY {
                Frame::SynReply { stream_id, flags, header_block: p }
            } else {
                Frame::Headers { stream_id, flags, header_block: p }
            }
        }
        TYPE_RST_STREAM => {
            need("RST_STREAM", len == 8)?;
            let stream_id = p.get_u32() & 0x7fff_ffff;
            let status = p.get_u32();
            if stream_id == 0 {
                return Err(FrameError::ZeroStreamId("RST_STREAM"));
            }
            if status == 0 {
                return Err(FrameError::ZeroRstStatus(stream_id));
            }
            Frame::RstStream { stream_id, status: RstStatus(status) }
        }
        TYPE_SETTINGS => {
            need("SETTINGS", len >= 4)?;
            let count = p.get_u32() as usize;
            need("SETTINGS", count.checked_mul(8) == Some(len - 4))?;
            let settings = (0..count)
                .map(|_| {
                    let flag_id = p.get_u32();
                    Setting { flags: (flag_id >> 24) as u8, id: flag_id & 0xff_ffff, value: p.get_u32() }
                })
                .collect();
            Frame::Settings { flags, settings }
        }
        TYPE_PING => {
            need("PING", len == 4)?;
            no_flags("PING")?;
            let id = p.get_u32();
            if id == 0 {
                return Err(FrameError::ZeroStreamId("PING"));
            }
            Frame::Ping { id }
        }
        TYPE_GOAWAY => {
            need("GOAWAY", len == 8)?;
            no_flags("GOAWAY")?;
            let last_good_stream_id = p.get_u32() & 0x7fff_ffff;
            Frame::GoAway { last_good_stream_id, status: GoAwayStatus(p.get_u32()) }
        }
        TYPE_WINDOW_UPDATE => {
            need("WINDOW_UPDATE", len == 8)?;
            no_flags("WINDOW_UPDATE")?;
            let stream_id = p.get_u32() & 0x7fff_ffff;
            Frame::WindowUpdate { stream_id, delta: p.get_u32() & 0x7fff_ffff }
        }
        frame_type => Frame::Unknown { frame_type, flags, payload: p },
    };
    Ok(frame)
}

/// The 8-byte header of a DATA frame; the payload follows it.
pub fn data_header(stream_id: u32, flags: u8, len: usize) -> [u8; HEADER_LEN] {
    let mut h = [0; HEADER_LEN];
    h[..4].copy_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
    h[4..].copy_from_slice(&(((flags as u32) << 24) | (len as u32 & 0xff_ffff)).to_be_bytes());
    h
}

fn control_header(dst: &mut BytesMut, frame_type: u16, flags: u8, len: usize) {
    dst.put_u16(0x8000 | VERSION);
    dst.put_u16(frame_type);
    dst.put_u32(((flags as u32) << 24) | (len as u32 & 0xff_ffff));
}

impl Frame {
    /// Appends the frame's wire form to `dst` (header blocks as given: already compressed).
    pub fn encode(&self, dst: &mut BytesMut) {
        match self {
            Frame::SynStream { stream_id, associated_to, priority, slot, flags, header_block } => {
                control_header(dst, TYPE_SYN_STREAM, *flags, 10 + header_block.len());
                dst.put_u32(*stream_id & 0x7fff_ffff);
                dst.put_u32(*associated_to & 0x7fff_ffff);
                dst.put_u8((*priority & 0x07) << 5);
                dst.put_u8(*slot);
                dst.put_slice(header_block);
            }
            Frame::SynReply { stream_id, flags, header_block } => {
                control_header(dst, TYPE_SYN_REPLY, *flags, 4 + header_block.len());
                dst.put_u32(*stream_id & 0x7fff_ffff);
                dst.put_slice(header_block);
            }
            Frame::Headers { stream_id, flags, header_block } => {
                control_header(dst, TYPE_HEADERS, *flags, 4 + header_block.len());
                dst.put_u32(*stream_id & 0x7fff_ffff);
                dst.put_slice(header_block);
            }
            Frame::RstStream { stream_id, status } => {
                control_header(dst, TYPE_RST_STREAM, 0, 8);
                dst.put_u32(*stream_id & 0x7fff_ffff);
                dst.put_u32(status.0);
            }
            Frame::Settings { flags, settings } => {
                control_header(dst, TYPE_SETTINGS, *flags, 4 + 8 * settings.len());
                dst.put_u32(settings.len() as u32);
                for s in settings {
                    dst.put_u32(((s.flags as u32) << 24) | (s.id & 0xff_ffff));
                    dst.put_u32(s.value);
                }
            }
            Frame::Ping { id } => {
                control_header(dst, TYPE_PING, 0, 4);
                dst.put_u32(*id);
            }
            Frame::GoAway { last_good_stream_id, status } => {
                control_header(dst, TYPE_GOAWAY, 0, 8);
                dst.put_u32(*last_good_stream_id & 0x7fff_ffff);
                dst.put_u32(status.0);
            }
            Frame::WindowUpdate { stream_id, delta } => {
                control_header(dst, TYPE_WINDOW_UPDATE, 0, 8);
                dst.put_u32(*stream_id & 0x7fff_ffff);
                dst.put_u32(*delta & 0x7fff_ffff);
            }
            Frame::Data { stream_id, flags, payload } => {
                dst.put_slice(&data_header(*stream_id, *flags, payload.len()));
                dst.put_slice(payload);
            }
            Frame::Unknown { frame_type, flags, payload } => {
                control_header(dst, *frame_type, *flags, payload.len());
                dst.put_slice(payload);
            }
        }
    }
}
