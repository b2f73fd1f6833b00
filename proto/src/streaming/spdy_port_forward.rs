//! The server side of port-forward over SPDY, as Go's kubelet `httpStreamHandler`: the client
//! opens an error and a data stream per connection it forwards, both with the same `requestID`
//! and `port` headers; a pair is handed out once complete, and a pair still incomplete after the
//! stream-creation timeout is dropped with Go's message on its error stream.

use std::collections::HashMap;
use std::time::Duration;

use http::HeaderMap;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::StreamError;
use super::port_forward::ForwardRequest;
use super::spdy_io::{PORT, REQUEST_ID, STREAM_TYPE, Stream, header, stream_type};
use crate::spdy::{Connection, Incoming, SpdyStream};

/// Completed stream pairs, in the order they completed.
pub(crate) struct PortForwardStreams {
    rx: mpsc::UnboundedReceiver<ForwardRequest>,
}

impl PortForwardStreams {
    pub(crate) async fn next(&mut self) -> Option<ForwardRequest> {
        self.rx.recv().await
    }
}

/// Starts pairing the client's streams; the token is cancelled once the connection is gone.
pub(crate) async fn port_forward<T>(
    io: T,
    timeout: Duration,
) -> Result<(PortForwardStreams, CancellationToken), StreamError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (conn, incoming) = Connection::server(io);
    let gone = CancellationToken::new();
    tokio::spawn({
        let closed = conn.closed();
        let gone = gone.clone();
        async move {
            closed.await;
            gone.cancel();
        }
    });
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(pair_streams(conn, incoming, tx, timeout));
    Ok((PortForwardStreams { rx }, gone))
}

/// Why Go's stream handler refuses a stream (it is then reset, unanswered).
fn validate(headers: &HeaderMap) -> Result<(), String> {
    let port = header(headers, PORT);
    if port.is_empty() {
        return Err(format!("{:?} header is required", "port"));
    }
    match port.parse::<u16>() {
        Err(err) => return Err(format!("unable to parse {port:?} as a port: {err}")),
        Ok(0) => return Err(format!("port {port:?} must be > 0")),
        Ok(_) => {}
    }
    match header(headers, STREAM_TYPE) {
        "" => Err(format!("{:?} header is required", "streamType")),
        stream_type::ERROR | stream_type::DATA => Ok(()),
        other => Err(format!("invalid stream type {other:?}")),
    }
}

/// Go's request id, and its fallback for clients that send none: the error stream's id, and
/// the data stream's id minus two (kubectl before 1.4 opened them back to back).
fn request_id(stream: &SpdyStream) -> String {
    let id = header(stream.headers(), REQUEST_ID);
    if !id.is_empty() {
        return id.to_string();
    }
    let stream_id = i64::from(stream.id());
    match header(stream.headers(), STREAM_TYPE) {
        stream_type::ERROR => stream_id.to_string(),
        stream_type::DATA => (stream_id - 2).to_string(),
        _ => String::new(),
    }
}

/// A pair being assembled; `serial` tells its timer from a later pair's with the same id.
struct Pair {
    serial: u64,
    error: Option<Stream>,
    data: Option<Stream>,
}

async fn pair_streams(
    conn: Connection,
    mut incoming: Incoming,
    requests: mpsc::UnboundedSender<ForwardRequest>,
    timeout: Duration,
) {
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut serial = 0u64;
    let (expired_tx, mut expired_rx) = mpsc::unbounded_channel::<(String, u64)>();
    loop {
        let stream = tokio::select! {
            stream = incoming.accept() => match stream {
                Some(stream) => stream,
                None => break,
            },
            Some((id, serial)) = expired_rx.recv() => {
                if pairs.get(&id).is_some_and(|p| p.serial == serial)
                    && let Some(mut pair) = pairs.remove(&id)
                    && let Some(error) = pair.error.as_mut()
                {
                    // Go prints its connection value here; ours has no such text.
                    let message =
                        format!("(conn=spdy, request={id}) timed out waiting for streams");
                    let _ = error.write_all(message.as_bytes()).await;
                }
                continue;
            }
            () = requests.closed() => {
                // Nobody takes requests any more: no new streams; the connection ends once
                // the requests already handed out are done.
                conn.go_away();
                break;
            }
        };
        if validate(stream.headers()).is_err() {
            stream.reset(crate::spdy::RstStatus::CANCEL);
            continue;
        }
        let _ = stream.reply(HeaderMap::new(), false);
        let id = request_id(&stream);
        let kind = header(stream.headers(), STREAM_TYPE).to_owned();
        let pair = pairs.entry(id.clone()).or_insert_with(|| {
            serial += 1;
            let expired = expired_tx.clone();
            let this = serial;
            let timer_id = id.clone();
            tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                let _ = expired.send((timer_id, this));
            });
            Pair {
                serial,
                error: None,
                data: None,
            }
        });
        let slot = if kind == stream_type::ERROR {
            &mut pair.error
        } else {
            &mut pair.data
        };
        if slot.is_some() {
            // The extra stream is dropped (half-closed); the pair's error stream says why.
            let message =
                format!("error processing stream for request {id}: {kind} stream already assigned");
            if let Some(error) = pair.error.as_mut() {
                let _ = error.write_all(message.as_bytes()).await;
            }
            continue;
        }
        *slot = Some(Stream::new(stream));
        if pair.error.is_some()
            && pair.data.is_some()
            && let Some(Pair {
                error: Some(error),
                data: Some(data),
                ..
            }) = pairs.remove(&id)
        {
            let port = header(data.headers(), PORT).parse().unwrap_or(0);
            let request = ForwardRequest::new(port, Box::new(data), Box::new(error));
            if requests.send(request).is_err() {
                conn.go_away();
                break;
            }
        }
    }
}
