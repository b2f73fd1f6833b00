//! Publishes task events to containerd over ttrpc (`Events.Forward` on containerd's ttrpc
//! socket), one call at a time so containerd sees them in order. Events wait in a queue while
//! containerd is away (restarting) and are sent when it is back: none is dropped for that.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferrolet_proto::containerd::services::v1::ForwardRequest;
use ferrolet_proto::containerd::types::Envelope;
use ferrolet_proto::ttrpc::{self, FrameHeader, KeyValue, Request, Response};
use mio::net::UnixStream;
use mio::{Interest, Registry, Token};
use prost::Message;

/// The publisher's poll token.
pub const TOKEN: Token = Token(2);
/// Past this many queued events the oldest are dropped (with a log line each): containerd
/// has been away for very long, and memory is the pod's.
const MAX_QUEUE: usize = 4096;
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The event publisher.
pub struct Publisher {
    socket: PathBuf,
    namespace: String,
    queue: VecDeque<Vec<u8>>,
    conn: Option<UnixStream>,
    in_flight: Option<u32>,
    next_stream: u32,
    rbuf: Vec<u8>,
    backoff: Duration,
    retry_at: Option<Instant>,
}

impl Publisher {
    /// A publisher to containerd's ttrpc socket for `namespace`.
    pub fn new(socket: PathBuf, namespace: String) -> Self {
        Self {
            socket,
            namespace,
            queue: VecDeque::new(),
            conn: None,
            in_flight: None,
            next_stream: 1,
            rbuf: Vec::new(),
            backoff: Duration::from_millis(50),
            retry_at: None,
        }
    }

    /// Queues `event` on `topic` and sends what it can.
    pub fn publish(&mut self, registry: &Registry, topic: &str, event: prost_types::Any) {
        crate::log::debug("publishing", &[("topic", topic)]);
        let forward = ForwardRequest {
            envelope: Some(Envelope {
                timestamp: Some(crate::time::now()),
                namespace: self.namespace.clone(),
                topic: topic.to_string(),
                event: Some(event),
            }),
        };
        if self.queue.len() >= MAX_QUEUE {
            self.queue.pop_front();
            crate::log::error(
                "event queue full; dropped the oldest event",
                &[("topic", topic)],
            );
        }
        self.queue.push_back(forward.encode_to_vec());
        self.pump(registry);
    }

    /// Whether everything queued has been delivered.
    pub fn idle(&self) -> bool {
        self.queue.is_empty()
    }

    /// When the loop should wake to retry, if it should.
    pub fn deadline(&self) -> Option<Instant> {
        self.retry_at
    }

    /// Called on the publisher socket's readiness and on the retry deadline.
    pub fn pump(&mut self, registry: &Registry) {
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        self.retry_at = None;
        if self.conn.is_some() && self.read_responses().is_err() {
            self.disconnect(registry);
            return;
        }
        if self.in_flight.is_some() || self.queue.is_empty() {
            return;
        }
        if self.conn.is_none() && self.connect(registry).is_err() {
            self.schedule_retry();
            return;
        }
        if self.send_head().is_err() {
            self.disconnect(registry);
        }
    }

    fn connect(&mut self, registry: &Registry) -> std::io::Result<()> {
        let std = std::os::unix::net::UnixStream::connect(&self.socket)?;
        std.set_nonblocking(true)?;
        let mut conn = UnixStream::from_std(std);
        registry.register(&mut conn, TOKEN, Interest::READABLE)?;
        self.conn = Some(conn);
        self.rbuf.clear();
        Ok(())
    }

    fn send_head(&mut self) -> std::io::Result<()> {
        let (Some(conn), Some(payload)) = (self.conn.as_mut(), self.queue.front()) else {
            return Ok(());
        };
        let stream = self.next_stream;
        self.next_stream = self.next_stream.wrapping_add(2) | 1;
        let request = Request {
            service: ttrpc::EVENTS_SERVICE.to_string(),
            method: ttrpc::EVENTS_FORWARD.to_string(),
            payload: payload.clone(),
            timeout_nano: 0,
            metadata: vec![KeyValue {
                key: ttrpc::NAMESPACE_KEY.to_string(),
                value: self.namespace.clone(),
            }],
        };
        let frame = ttrpc::frame(stream, ttrpc::TYPE_REQUEST, &request);
        // A frame of a few hundred bytes into an empty socket buffer: written whole or the
        // connection is broken.
        let mut written = 0;
        while written < frame.len() {
            match conn.write(&frame[written..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock && written == 0 => {
                    self.schedule_retry();
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        self.in_flight = Some(stream);
        Ok(())
    }

    fn read_responses(&mut self) -> std::io::Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let mut chunk = [0u8; 1024];
        loop {
            match conn.read(&mut chunk) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        while self.rbuf.len() >= ttrpc::HEADER_LEN {
            let mut head = [0u8; ttrpc::HEADER_LEN];
            head.copy_from_slice(&self.rbuf[..ttrpc::HEADER_LEN]);
            let h = FrameHeader::decode(&head);
            let end = ttrpc::HEADER_LEN + h.length as usize;
            if h.length as usize > ttrpc::MAX_PAYLOAD {
                return Err(ErrorKind::InvalidData.into());
            }
            if self.rbuf.len() < end {
                break;
            }
            let body: Vec<u8> = self.rbuf.drain(..end).skip(ttrpc::HEADER_LEN).collect();
            if h.kind != ttrpc::TYPE_RESPONSE || Some(h.stream_id) != self.in_flight {
                continue;
            }
            self.in_flight = None;
            self.backoff = Duration::from_millis(50);
            let status = Response::decode(body.as_slice())
                .ok()
                .and_then(|r| r.status)
                .filter(|s| s.code != 0);
            // Delivered, or refused for good (containerd answered): either way it is done.
            if let Some(s) = status {
                crate::log::error("containerd refused an event", &[("error", &s.message)]);
            }
            self.queue.pop_front();
        }
        if self.in_flight.is_none() && !self.queue.is_empty() {
            self.send_head()?;
        }
        Ok(())
    }

    fn disconnect(&mut self, registry: &Registry) {
        if let Some(mut conn) = self.conn.take() {
            let _ = registry.deregister(&mut conn);
        }
        self.in_flight = None;
        self.schedule_retry();
    }

    fn schedule_retry(&mut self) {
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }
}
