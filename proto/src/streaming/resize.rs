//! Terminal resize messages: a stream of JSON objects (`{"Width":80,"Height":24}`), decoded as
//! Go's json.Decoder does (values back to back, whatever the message boundaries).

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use super::TerminalSize;

/// The most bytes held while a value is incomplete. A size message is about 30 bytes; a peer
/// that sends this many without finishing one is not sending sizes. Without a bound a client
/// could grow the buffer for as long as its connection lasts (one unterminated JSON string),
/// and since every read parses what is held again, at quadratic cost.
pub(crate) const MAX_PENDING: usize = 4096;

/// Decodes resize messages from `stream` until it ends or holds something that is not one.
pub(crate) fn spawn_decoder<R>(mut stream: R) -> mpsc::Receiver<TerminalSize>
where
    R: AsyncRead + Send + Unpin + 'static,
{
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let mut decoder = Decoder::default();
        let mut chunk = [0u8; 1024];
        loop {
            let n = match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let (sizes, broken) = decoder.push(&chunk[..n]);
            for size in sizes {
                if tx.send(size).await.is_err() {
                    return;
                }
            }
            if broken {
                return;
            }
        }
    });
    rx
}

/// The resize stream's reading state: the bytes of a value not yet complete.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    pending: Vec<u8>,
}

impl Decoder {
    /// Takes the next bytes read: the sizes they complete, and whether the stream is broken
    /// (something that can never be a size, or a value longer than [`MAX_PENDING`]).
    pub(crate) fn push(&mut self, bytes: &[u8]) -> (Vec<TerminalSize>, bool) {
        self.pending.extend_from_slice(bytes);
        let (sizes, consumed, broken) = decode(&self.pending);
        self.pending.drain(..consumed);
        (sizes, broken || self.pending.len() > MAX_PENDING)
    }

    /// How many bytes are held for an incomplete value.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn held(&self) -> usize {
        self.pending.len()
    }
}

/// Decodes the complete values in `bytes`: the sizes, how many bytes they took, and whether what
/// follows can never be one.
pub(crate) fn decode(bytes: &[u8]) -> (Vec<TerminalSize>, usize, bool) {
    let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<TerminalSize>();
    let mut sizes = Vec::new();
    loop {
        match values.next() {
            Some(Ok(size)) => sizes.push(size),
            Some(Err(err)) if err.is_eof() => return (sizes, values.byte_offset(), false),
            Some(Err(_)) => return (sizes, values.byte_offset(), true),
            None => return (sizes, values.byte_offset(), false),
        }
    }
}

/// The message a client sends for a size (Go's json.Encoder: with a newline).
pub(crate) fn encode(size: TerminalSize) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&size).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}
