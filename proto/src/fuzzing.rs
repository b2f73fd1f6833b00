//! Entry points for the fuzz targets under `fuzz/` (feature `fuzzing`, off by default; not an
//! API). Each takes arbitrary bytes, feeds them to one reader of network input the way this
//! crate does, and discards the result: the targets look for panics, hangs and runaway
//! allocations, and a few check invariants the parsers promise (stated where they are checked).
//!
//! Where a parser has settings or state (chunk boundaries, a table size, a protocol version),
//! the input's first byte chooses them, so one corpus explores them all.

use std::time::Duration;

use bytes::BytesMut;
use http::Request;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::spdy::frame::{Frame, FrameDecoder};
use crate::spdy::header_block::{HeaderDecoder, decode_plain};
use crate::streaming::handshake::{
    SPDY_PORT_FORWARD_PROTOCOLS, SPDY_REMOTE_COMMAND_PROTOCOLS, WS_PORT_FORWARD_PROTOCOLS,
    WS_REMOTE_COMMAND_PROTOCOLS,
};
use crate::streaming::{
    CommandResult, Endpoint, MAX_RESIZE_PENDING, RemoteCommand, ResizeDecoder, StreamOptions,
    decode_channel_message, negotiate, status,
};
use crate::transport::authority::Rewriter;
use crate::transport::hpack::Decoder;

/// How long a session may run (in the paused clock of its runtime) after the client's bytes
/// have all been delivered and its side closed. Every timer the streaming code sets is far
/// shorter (stream creation 30 s, close grace 5 s), so a session still running then would run
/// for ever: a bug.
const SESSION_LIMIT: Duration = Duration::from_secs(3600);

/// The byte stream a client sends to a unix-socket gRPC server, through [`Rewriter`] (the
/// `:authority` adapter, with its HPACK decoder); or, when the first byte is odd, header
/// blocks straight into the HPACK [`Decoder`].
///
/// Rewriter mode: the first byte's upper bits give the read size the stream is cut into; the
/// output must not depend on the cuts (as the adapter promises), so it is checked against a
/// run over the whole input at once.
///
/// HPACK mode: the second byte scales the table size limit; then length-prefixed (one byte)
/// blocks, decoded in order on one decoder, as a connection's blocks are.
pub fn h2_authority(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let chunk = usize::from(mode >> 1) + 1;
        let whole = rewrite(rest, rest.len().max(1));
        let cut = rewrite(rest, chunk);
        assert!(
            whole == cut,
            "the rewriter's output depends on how its input was cut ({chunk}-byte reads)"
        );
        return;
    }
    let Some((&limit, mut blocks)) = rest.split_first() else {
        return;
    };
    let mut decoder = Decoder::new(usize::from(limit) * 512);
    while let Some((&len, tail)) = blocks.split_first() {
        let (block, tail) = tail.split_at(usize::from(len).min(tail.len()));
        blocks = tail;
        if decoder.decode(block, |_, _, _| {}).is_err() {
            return;
        }
    }
}

fn rewrite(stream: &[u8], chunk: usize) -> Vec<u8> {
    let mut rewriter = Rewriter::new(true);
    let (mut input, mut output) = (BytesMut::new(), BytesMut::new());
    for piece in stream.chunks(chunk) {
        input.extend_from_slice(piece);
        rewriter.process(&mut input, &mut output);
    }
    rewriter.finish(&mut input, &mut output);
    output.to_vec()
}

/// The bytes a SPDY/3.1 peer sends, through the connection's frame decoder and its header
/// block decoder (zlib with the SPDY dictionary), frame by frame as the connection's reader
/// takes them. The first byte: bits 0-1 the inflated header block limit (the connection's
/// 256 KiB, or a small one), bit 2 header blocks read uncompressed ([`decode_plain`], to
/// reach the name/value parser without zlib in the way), bits 3-7 the read size. Each frame
/// must also come back unchanged from its own encoding.
pub fn spdy_frames(data: &[u8]) {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let max_header_block = match mode & 3 {
        0 => 256 * 1024,
        1 => 100,
        2 => 1000,
        _ => 4096,
    };
    let plain = mode & 4 != 0;
    let chunk = usize::from(mode >> 3) * 8 + 1;
    let mut frames = FrameDecoder::default();
    let mut headers = HeaderDecoder::new(max_header_block);
    let mut buf = BytesMut::new();
    for piece in stream.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            let frame = match frames.decode(&mut buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                // The connection ends on a bad frame or header block.
                Err(_) => return,
            };
            let mut encoded = BytesMut::new();
            frame.encode(&mut encoded);
            let again = FrameDecoder::default().decode(&mut encoded);
            assert!(
                matches!(&again, Ok(Some(f)) if *f == frame) && encoded.is_empty(),
                "{frame:?} does not survive its encoding: {again:?}"
            );
            let block = match &frame {
                Frame::SynStream { header_block, .. }
                | Frame::SynReply { header_block, .. }
                | Frame::Headers { header_block, .. } => header_block,
                _ => continue,
            };
            let decoded = if plain {
                decode_plain(block).map(drop)
            } else {
                headers.decode(block).map(drop)
            };
            if decoded.is_err() {
                return;
            }
        }
    }
}

/// A server-side exec, attach or port-forward session over SPDY/3.1, as the runtime's
/// streaming server runs one after the upgrade: the input is what the client sends after the
/// 101, then it closes its side. The first byte picks the subprotocol (bits 0-2), the endpoint
/// (bit 3: port-forward) and the streams asked for (bits 4-7: stdin, stdout, stderr, tty).
pub fn spdy_session(data: &[u8]) {
    session(data, false);
}

/// The same over WebSocket (tungstenite's framing under our channel multiplexer, binary or
/// base64, v5's close signal, resize messages; port-forward's channel pairs). For
/// port-forward, bit 4 of the first byte asks for two ports instead of one.
pub fn ws_session(data: &[u8]) {
    session(data, true);
}

fn session(data: &[u8], websocket: bool) {
    let Some((&mode, input)) = data.split_first() else {
        return;
    };
    let endpoint = if mode & 0x08 != 0 {
        Endpoint::PortForward
    } else {
        Endpoint::RemoteCommand
    };
    let protocols: &[&str] = match (websocket, endpoint) {
        (false, Endpoint::RemoteCommand) => &SPDY_REMOTE_COMMAND_PROTOCOLS,
        (false, Endpoint::PortForward) => &SPDY_PORT_FORWARD_PROTOCOLS,
        (true, Endpoint::RemoteCommand) => &WS_REMOTE_COMMAND_PROTOCOLS,
        (true, Endpoint::PortForward) => &WS_PORT_FORWARD_PROTOCOLS,
    };
    let protocol = protocols[usize::from(mode & 7) % protocols.len()];
    let request = if websocket {
        Request::get("/")
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", protocol)
            .body(())
    } else {
        Request::post("/")
            .header("connection", "Upgrade")
            .header("upgrade", "SPDY/3.1")
            .header("x-stream-protocol-version", protocol)
            .body(())
    };
    let Ok(request) = request else {
        return;
    };
    let Ok(negotiated) = negotiate(&request, endpoint) else {
        return;
    };
    let opts = StreamOptions {
        stdin: mode & 0x10 != 0,
        stdout: mode & 0x20 != 0,
        stderr: mode & 0x40 != 0,
        tty: mode & 0x80 != 0,
    };
    let ports = if mode & 0x10 != 0 {
        vec![8080, 9090]
    } else {
        vec![8080]
    };
    // A paused clock that skips ahead whenever every task waits: timeouts fire at once, and a
    // session that never ends shows as SESSION_LIMIT passing.
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    else {
        return;
    };
    let input = input.to_vec();
    runtime.block_on(async move {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (mut from_server, mut to_server) = tokio::io::split(client);
        let client = tokio::spawn(async move {
            let _ = to_server.write_all(&input).await;
            let _ = to_server.shutdown().await;
            // Keep the write half: dropping it would close the whole duplex, reads included.
            to_server
        });
        let sink = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from_server, &mut tokio::io::sink()).await;
        });
        let serve = async {
            match endpoint {
                Endpoint::RemoteCommand => {
                    if let Ok(command) = negotiated.remote_command(server, opts).await {
                        remote_command(command).await;
                    }
                }
                Endpoint::PortForward => {
                    if let Ok(mut forward) = negotiated.port_forward(server, ports).await {
                        while let Some(request) = forward.next().await {
                            let mut data = request.data;
                            let _ = echo(&mut data).await;
                            let _ = data.shutdown().await;
                        }
                    }
                }
            }
        };
        let ended = tokio::time::timeout(SESSION_LIMIT, serve).await;
        assert!(
            ended.is_ok(),
            "the session outlived its client by {SESSION_LIMIT:?}"
        );
        let _ = client.await;
        sink.abort();
    });
}

/// Runs a command session to its end: stdin and the resize messages read to their end while
/// output is written, then the result.
async fn remote_command(mut command: RemoteCommand) {
    let stdin = command.stdin.take();
    let resize = command.resize.take();
    let read_stdin = async {
        if let Some(mut stdin) = stdin {
            let _ = tokio::io::copy(&mut stdin, &mut tokio::io::sink()).await;
        }
    };
    let read_resize = async {
        if let Some(mut sizes) = resize {
            while sizes.recv().await.is_some() {}
        }
    };
    let write = async {
        for out in [command.stdout.as_mut(), command.stderr.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = out.write_all(b"output\n").await;
        }
    };
    tokio::join!(read_stdin, read_resize, write);
    command.finish(CommandResult::Exited(3)).await;
}

/// Copies a forwarded connection's bytes back to it, as a port that echoes.
async fn echo<T: AsyncRead + AsyncWrite + Unpin>(io: &mut T) -> std::io::Result<()> {
    let mut buf = [0u8; 4096];
    loop {
        let n = io.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        io.write_all(&buf[..n]).await?;
    }
}

/// The streaming protocols' message parsers that need no connection; the first byte picks:
/// 0 WebSocket channel messages (binary), 1 the same base64-encoded, 2 terminal resize
/// messages read in pieces as the resize stream delivers them, 3 an upgrade request's headers
/// (`name: value` lines) through the negotiation for both endpoints, 4 and 5 the error
/// stream's text as a v4 and a v1 client reads it.
pub fn stream_protocol(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 6 {
        0 | 1 => {
            let _ = decode_channel_message(&bytes::Bytes::copy_from_slice(rest), mode % 6 == 1);
        }
        2 => {
            let mut decoder = ResizeDecoder::default();
            for piece in rest.chunks(usize::from(mode >> 3) + 1) {
                if decoder.push(piece).1 {
                    return;
                }
                // A stream still read holds at most one incomplete value, of bounded size.
                assert!(
                    decoder.held() <= MAX_RESIZE_PENDING,
                    "the resize decoder holds {} bytes",
                    decoder.held()
                );
            }
        }
        3 => {
            let mut request = Request::get("/");
            for line in String::from_utf8_lossy(rest).split('\n') {
                if let Some((name, value)) = line.split_once(':') {
                    request = request.header(name.trim(), value.trim());
                }
            }
            if let Ok(request) = request.body(()) {
                for endpoint in [Endpoint::RemoteCommand, Endpoint::PortForward] {
                    match negotiate(&request, endpoint) {
                        Ok(negotiated) => drop(negotiated.response()),
                        Err(refused) => drop(refused.response()),
                    }
                }
            }
        }
        n => {
            let _ = status::parse_error_stream(rest, n == 4);
        }
    }
}

/// Go's duration syntax (configuration files and flags of both binaries); what parses must
/// print as a duration that parses back to the same value.
pub fn go_duration(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = crate::go_duration::parse_duration(text) {
        let printed = crate::go_duration::format_duration(d);
        let again = crate::go_duration::parse_duration(&printed);
        assert!(
            again.as_ref().ok() == Some(&d),
            "{text:?} parses as {d:?}, printed {printed:?}, which parses as {again:?}"
        );
    }
}
