//! Terminal resize messages: a stream of JSON objects (`{"Width":80,"Height":24}`), decoded as
//! Go's json.Decoder does (values back to back, whatever the message boundaries).

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use super::TerminalSize;

/// Decodes resize messages from `stream` until it ends or holds something that is not one.
pub(crate) fn spawn_decoder<R>(mut stream: R) -> mpsc::Receiver<TerminalSize>
where
    R: AsyncRead + Send + Unpin + 'static,
{
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let mut pending = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            let n = match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            pending.extend_from_slice(&chunk[..n]);
            let (sizes, consumed, broken) = decode(&pending);
            pending.drain(..consumed);
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
