//! ttrpc, the RPC containerd speaks to its shims: gRPC's protobuf messages without HTTP/2.
//!
//! Each message is a frame: a 10-byte header (payload length and stream id, big-endian u32s;
//! a type byte; a flags byte) and a protobuf payload. A client sends a [`Request`] on a new odd
//! stream id; the server answers with one [`Response`] on the same id, in any order.

use prost::Message;

pub use containerd_client::google::rpc::Status;

/// Bytes in a frame header.
pub const HEADER_LEN: usize = 10;
/// The largest payload either side accepts (ttrpc's `messageLengthMax`).
pub const MAX_PAYLOAD: usize = 4 << 20;
/// Frame type of a request.
pub const TYPE_REQUEST: u8 = 1;
/// Frame type of a response.
pub const TYPE_RESPONSE: u8 = 2;

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload bytes after the header.
    pub length: u32,
    /// The call this frame belongs to.
    pub stream_id: u32,
    /// [`TYPE_REQUEST`], [`TYPE_RESPONSE`] or a type this side does not speak.
    pub kind: u8,
    /// Stream flags (unused by unary calls).
    pub flags: u8,
}

impl FrameHeader {
    /// Reads a header from its 10 bytes.
    pub fn decode(bytes: &[u8; HEADER_LEN]) -> Self {
        Self {
            length: u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            stream_id: u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            kind: bytes[8],
            flags: bytes[9],
        }
    }

    /// The header's 10 bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0; HEADER_LEN];
        out[..4].copy_from_slice(&self.length.to_be_bytes());
        out[4..8].copy_from_slice(&self.stream_id.to_be_bytes());
        out[8] = self.kind;
        out[9] = self.flags;
        out
    }
}

/// A whole frame (header and payload) carrying `message`.
pub fn frame(stream_id: u32, kind: u8, message: &impl Message) -> Vec<u8> {
    let len = message.encoded_len();
    let mut out = Vec::with_capacity(HEADER_LEN + len);
    out.extend_from_slice(
        &FrameHeader {
            length: u32::try_from(len).unwrap_or(u32::MAX),
            stream_id,
            kind,
            flags: 0,
        }
        .encode(),
    );
    // Encoding into a Vec cannot run out of room.
    let _ = message.encode(&mut out);
    out
}

/// A call: which method of which service, its encoded argument and metadata.
#[derive(Clone, PartialEq, Message)]
pub struct Request {
    /// Fully qualified service name (`containerd.task.v2.Task`).
    #[prost(string, tag = "1")]
    pub service: String,
    /// Method name (`Create`).
    #[prost(string, tag = "2")]
    pub method: String,
    /// The encoded request message.
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    /// The caller's deadline, nanoseconds from now; 0 for none.
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
    /// Call metadata (containerd's namespace travels here).
    #[prost(message, repeated, tag = "5")]
    pub metadata: Vec<KeyValue>,
}

/// One metadata entry.
#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    /// Key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A call's outcome: a status (code 0 for success) and the encoded response message.
#[derive(Clone, PartialEq, Message)]
pub struct Response {
    /// gRPC status; absent or code 0 on success.
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    /// The encoded response message.
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// Metadata key containerd puts the namespace under on ttrpc calls.
pub const NAMESPACE_KEY: &str = "containerd-namespace-ttrpc";

/// containerd's event service for shims, and its one method.
pub const EVENTS_SERVICE: &str = "containerd.services.events.ttrpc.v1.Events";
/// The method shims publish with.
pub const EVENTS_FORWARD: &str = "Forward";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_big_endian() {
        let h = FrameHeader {
            length: 0x0102_0304,
            stream_id: 7,
            kind: TYPE_RESPONSE,
            flags: 0,
        };
        let bytes = h.encode();
        assert_eq!(bytes, [1, 2, 3, 4, 0, 0, 0, 7, 2, 0]);
        assert_eq!(FrameHeader::decode(&bytes), h);
    }

    #[test]
    fn frame_carries_the_message_length() {
        let req = Request {
            service: "s".into(),
            method: "m".into(),
            ..Default::default()
        };
        let f = frame(1, TYPE_REQUEST, &req);
        let mut head = [0; HEADER_LEN];
        head.copy_from_slice(&f[..HEADER_LEN]);
        let h = FrameHeader::decode(&head);
        assert_eq!(h.length as usize, f.len() - HEADER_LEN);
        assert_eq!(Request::decode(&f[HEADER_LEN..]).unwrap(), req);
    }
}
