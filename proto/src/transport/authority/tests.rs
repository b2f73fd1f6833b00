use super::*;
use crate::raw_h2::{
    BlockShape, RawH2Client, Response, encode_block, frame, grpc_request_fields, resize_table,
};
use proptest::prelude::*;

// ---- the rewriter on its own: bytes in, bytes out ----

fn request_block(authority: &[u8]) -> Vec<u8> {
    let fields = grpc_request_fields(b"/x.Y/Z", Some(authority));
    encode_block(&mut httlib_hpack::Encoder::default(), &fields).unwrap()
}

fn rewrite_all(input: &[u8]) -> Vec<u8> {
    let mut rewriter = Rewriter::new(true);
    let mut input = BytesMut::from(input);
    let mut output = BytesMut::new();
    rewriter.process(&mut input, &mut output);
    rewriter.finish(&mut input, &mut output);
    output.to_vec()
}

fn rewrite_in_pieces(input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut rewriter = Rewriter::new(true);
    let mut pending = BytesMut::new();
    let mut output = BytesMut::new();
    let mut at = 0;
    for &cut in cuts.iter().chain([input.len()].iter()) {
        let cut = cut.clamp(at, input.len());
        pending.extend_from_slice(&input[at..cut]);
        rewriter.process(&mut pending, &mut output);
        at = cut;
    }
    rewriter.finish(&mut pending, &mut output);
    output.to_vec()
}

/// Splits the frames after the preface.
fn frames(bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut rest = bytes.strip_prefix(PREFACE).expect("preface");
    let mut out = Vec::new();
    while !rest.is_empty() {
        let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
        out.push((rest[3], rest[4], stream, rest[9..9 + len].to_vec()));
        rest = &rest[9 + len..];
    }
    out
}

/// Decodes one output header block with a fresh decoder: it must not lean on a dynamic table.
fn decode_fresh(block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut fields = Vec::new();
    Decoder::new(0)
        .decode(block, |n, v, _| fields.push((n.to_vec(), v.to_vec())))
        .expect("decodable block");
    fields
}

fn authority_of(fields: &[(Vec<u8>, Vec<u8>)]) -> Option<Vec<u8>> {
    fields
        .iter()
        .find(|(n, _)| n == b":authority")
        .map(|(_, v)| v.clone())
}

fn one_request(authority: &[u8]) -> Vec<u8> {
    let mut input = PREFACE.to_vec();
    input.extend(frame(0x4, 0, 0, &[]));
    input.extend(frame(HEADERS, END_HEADERS, 1, &request_block(authority)));
    input.extend(frame(0x0, END_STREAM, 1, b"\0\0\0\0\0"));
    input
}

#[test]
fn replaces_only_authorities_h2_refuses() {
    for (sent, seen) in [
        (&b"/run/x.sock"[..], &b"localhost"[..]),
        (b"%2Frun%2Fx.sock", b"localhost"),
        (b"", b"localhost"),
        (b"unix:/run/x.sock", b"localhost"),
        (b"\xff\xfe", b"localhost"),
        (b"localhost", b"localhost"),
        (b"localhost:1234", b"localhost:1234"),
        (b"[::1]:80", b"[::1]:80"),
    ] {
        let out = frames(&rewrite_all(&one_request(sent)));
        assert_eq!(out.len(), 3, "{sent:?}");
        let (kind, flags, stream, block) = &out[1];
        assert_eq!((*kind, *flags, *stream), (HEADERS, END_HEADERS, 1));
        let fields = decode_fresh(block);
        assert_eq!(authority_of(&fields).as_deref(), Some(seen), "{sent:?}");
        assert_eq!(fields.len(), 6);
        assert_eq!(fields[2], (b":path".to_vec(), b"/x.Y/Z".to_vec()));
        assert_eq!(out[2], (0x0, END_STREAM, 1, b"\0\0\0\0\0".to_vec()));
    }
}

#[test]
fn padding_priority_and_continuations_are_folded_into_one_frame() {
    let block = request_block(b"/run/x.sock");
    let (a, b) = block.split_at(3);
    let (b, c) = b.split_at(4);
    let mut payload = vec![7u8]; // pad length
    payload.extend_from_slice(&[0x80, 0, 0, 3, 200]); // exclusive dependency on 3, weight 200
    payload.extend_from_slice(a);
    payload.extend_from_slice(&[0; 7]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, PADDED | PRIORITY | END_STREAM, 5, &payload));
    input.extend(frame(CONTINUATION, 0, 5, b));
    input.extend(frame(CONTINUATION, END_HEADERS, 5, c));
    let out = frames(&rewrite_all(&input));
    assert_eq!(out.len(), 1);
    let (kind, flags, stream, payload) = &out[0];
    assert_eq!(
        (*kind, *flags, *stream),
        (HEADERS, PRIORITY | END_STREAM | END_HEADERS, 5)
    );
    assert_eq!(&payload[..5], &[0x80, 0, 0, 3, 200]);
    let fields = decode_fresh(&payload[5..]);
    assert_eq!(authority_of(&fields).as_deref(), Some(&b"localhost"[..]));
}

#[test]
fn a_block_larger_than_a_frame_leaves_in_continuations() {
    let big = vec![b'v'; 40_000];
    let fields = [
        (&b":method"[..], &b"POST"[..]),
        (b":path", b"/x"),
        (b":authority", b"/run/x.sock"),
        (b"x-big", &big),
    ];
    let block = encode_block(&mut httlib_hpack::Encoder::default(), &fields).unwrap();
    let mut input = PREFACE.to_vec();
    // A client may send the block in frames up to the size h2 allows; send it in three.
    let third = block.len() / 3;
    input.extend(frame(HEADERS, 0, 1, &block[..third]));
    input.extend(frame(CONTINUATION, 0, 1, &block[third..2 * third]));
    input.extend(frame(CONTINUATION, END_HEADERS, 1, &block[2 * third..]));
    let out = frames(&rewrite_all(&input));
    assert!(out.len() >= 3, "{}", out.len());
    assert_eq!(out[0].0, HEADERS);
    let mut joined = Vec::new();
    for (i, (kind, flags, stream, payload)) in out.iter().enumerate() {
        assert!(payload.len() <= MAX_FRAME_PAYLOAD);
        assert_eq!(*stream, 1);
        assert_eq!(*kind, if i == 0 { HEADERS } else { CONTINUATION });
        assert_eq!(flags & END_HEADERS != 0, i + 1 == out.len());
        joined.extend_from_slice(payload);
    }
    let decoded = decode_fresh(&joined);
    assert_eq!(authority_of(&decoded).as_deref(), Some(&b"localhost"[..]));
    assert_eq!(decoded[3].1, big);
}

#[test]
fn the_clients_dynamic_table_is_followed_across_blocks() {
    // The encoder indexes every new name, so the second and later blocks are mostly references
    // into the client's table, which only the rewriter's decoder holds.
    let mut encoder = httlib_hpack::Encoder::default();
    let mut input = PREFACE.to_vec();
    let values: Vec<String> = (0..200)
        .map(|i| format!("value-{i:03}-{}", "x".repeat(i % 90)))
        .collect();
    for (i, value) in values.iter().enumerate() {
        let name = format!("x-n{}", i % 40);
        let mut fields = grpc_request_fields(b"/x.Y/Z", Some(b"/run/x.sock"));
        fields.push((name.as_bytes(), value.as_bytes()));
        let mut block = Vec::new();
        if i == 100 {
            // A size update shrinks the table (evicting), then it grows back.
            block.extend(resize_table(&mut encoder, 256).unwrap());
        }
        if i == 150 {
            block.extend(resize_table(&mut encoder, 4096).unwrap());
        }
        block.extend(encode_block(&mut encoder, &fields).unwrap());
        input.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1 + 2 * i as u32,
            &block,
        ));
    }
    let out = frames(&rewrite_all(&input));
    assert_eq!(out.len(), values.len());
    for (i, (_, _, stream, block)) in out.iter().enumerate() {
        assert_eq!(*stream, 1 + 2 * i as u32);
        let fields = decode_fresh(block);
        assert_eq!(authority_of(&fields).as_deref(), Some(&b"localhost"[..]));
        assert_eq!(fields[6].0, format!("x-n{}", i % 40).into_bytes());
        assert_eq!(fields[6].1, values[i].as_bytes());
    }
}

#[test]
fn an_undecodable_block_becomes_one_h2_rejects_and_the_rest_passes() {
    let mut input = PREFACE.to_vec();
    // Index 70 refers to a dynamic table entry that does not exist.
    input.extend(frame(HEADERS, END_HEADERS, 1, &[0x80 | 70]));
    input.extend(frame(0x0, END_STREAM, 1, b"rest"));
    let out = frames(&rewrite_all(&input));
    assert_eq!(
        out[0],
        (HEADERS, END_HEADERS, 1, UNDECODABLE_BLOCK.to_vec())
    );
    assert_eq!(out[1], (0x0, END_STREAM, 1, b"rest".to_vec()));
}

#[test]
fn malformed_framing_is_handed_to_h2_as_it_came() {
    // Padding longer than the payload.
    let mut bad_padding = PREFACE.to_vec();
    bad_padding.extend(frame(HEADERS, PADDED | END_HEADERS, 1, &[9, 0x82]));
    assert_eq!(rewrite_all(&bad_padding), bad_padding);

    // A block interrupted by another frame.
    let block = request_block(b"/run/x.sock");
    let mut interrupted = PREFACE.to_vec();
    interrupted.extend(frame(HEADERS, 0, 1, &block[..4]));
    interrupted.extend(frame(0x6, 0, 0, &[0; 8]));
    interrupted.extend(frame(CONTINUATION, END_HEADERS, 1, &block[4..]));
    assert_eq!(rewrite_all(&interrupted), interrupted);

    // Not HTTP/2 at all.
    let http1 = b"GET / HTTP/1.1\r\nHost: /run/x.sock\r\n\r\n".to_vec();
    assert_eq!(rewrite_all(&http1), http1);

    // Cut off in the middle of a header frame.
    let mut truncated = PREFACE.to_vec();
    truncated.extend(frame(HEADERS, END_HEADERS, 1, &block));
    truncated.truncate(truncated.len() - 3);
    assert_eq!(rewrite_all(&truncated), truncated);
}

#[test]
fn an_oversized_block_is_refused_not_buffered() {
    let mut input = PREFACE.to_vec();
    let piece = vec![0u8; MAX_FRAME_PAYLOAD];
    for i in 0..(MAX_HEADER_BLOCK / MAX_FRAME_PAYLOAD + 2) {
        let kind = if i == 0 { HEADERS } else { CONTINUATION };
        input.extend(frame(kind, 0, 1, &piece));
    }
    let out = rewrite_all(&input);
    assert_eq!(out.len(), PREFACE.len() + 9 + UNDECODABLE_BLOCK.len());
    let out = frames(&out);
    assert_eq!(out, [(HEADERS, END_HEADERS, 1, UNDECODABLE_BLOCK.to_vec())]);
    // Nothing after it is passed on however the input arrives (found by the h2_authority fuzz
    // target: read in pieces, the frames after the oversized head used to pass through).
    let cuts: Vec<usize> = (1..input.len()).step_by(1000).collect();
    assert_eq!(rewrite_in_pieces(&input, &cuts), rewrite_all(&input));
}

#[test]
fn disabled_passes_everything_through() {
    let input = one_request(b"/run/x.sock");
    let mut rewriter = Rewriter::new(false);
    let mut pending = BytesMut::from(&input[..]);
    let mut output = BytesMut::new();
    rewriter.process(&mut pending, &mut output);
    assert_eq!(&output[..], &input[..]);
}

proptest! {
    #[test]
    fn any_split_of_the_input_gives_the_same_output(
        cuts in proptest::collection::vec(0usize..400, 0..12),
        authority in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut input = one_request(&authority);
        let block = request_block(b"/run/y.sock");
        input.extend(frame(HEADERS, 0, 3, &block[..2]));
        input.extend(frame(CONTINUATION, END_HEADERS | END_STREAM, 3, &block[2..]));
        let mut cuts = cuts;
        cuts.sort_unstable();
        prop_assert_eq!(rewrite_in_pieces(&input, &cuts), rewrite_all(&input));
    }

    #[test]
    fn arbitrary_frames_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut input = PREFACE.to_vec();
        input.extend_from_slice(&body);
        let _ = rewrite_all(&input);
        let mut headers = PREFACE.to_vec();
        headers.extend(frame(HEADERS, END_HEADERS, 1, &body));
        let _ = rewrite_all(&headers);
    }
}

// ---- end to end: a raw client, the adapter, and the real h2 server tonic runs on ----

/// A connection whose reads return at most one byte, so every frame reaches the adapter in
/// pieces.
struct OneByteReads(tokio::io::DuplexStream);

impl AsyncRead for OneByteReads {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut byte = [0u8; 1];
        let mut one = ReadBuf::new(&mut byte);
        let polled = Pin::new(&mut self.get_mut().0).poll_read(cx, &mut one);
        buf.put_slice(one.filled());
        polled
    }
}

impl AsyncWrite for OneByteReads {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, b)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// Serves HTTP/2 with h2 behind the adapter: each response carries the request's authority
/// (`x-authority`, `-` when absent) and its `x-echo` header, and echoes the body.
fn serve<IO>(io: IO) -> tokio::task::JoinHandle<()>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let Ok(mut conn) = h2::server::handshake(AuthorityRewrite::new(io, true)).await else {
            return;
        };
        while let Some(Ok((request, mut respond))) = conn.accept().await {
            tokio::spawn(async move {
                let authority = request
                    .uri()
                    .authority()
                    .map_or("-".to_string(), |a| a.to_string());
                let echo = request.headers().get("x-echo").cloned();
                let mut body = request.into_body();
                let mut received = Vec::new();
                while let Some(Ok(chunk)) = body.data().await {
                    let _ = body.flow_control().release_capacity(chunk.len());
                    received.extend_from_slice(&chunk);
                }
                let mut response = http::Response::builder()
                    .status(200)
                    .header("x-authority", authority);
                if let Some(echo) = echo {
                    response = response.header("x-echo", echo);
                }
                let Ok(response) = response.body(()) else {
                    return;
                };
                if let Ok(mut send) = respond.send_response(response, false) {
                    let _ = send.send_data(received.into(), true);
                }
            });
        }
    })
}

async fn adapted_client(one_byte_reads: bool) -> RawH2Client<tokio::io::DuplexStream> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    if one_byte_reads {
        serve(OneByteReads(server_io));
    } else {
        serve(server_io);
    }
    RawH2Client::handshake(client_io).await.expect("handshake")
}

async fn call(
    client: &mut RawH2Client<tokio::io::DuplexStream>,
    fields: &[(&[u8], &[u8])],
    shape: &BlockShape,
    body: &[u8],
) -> Response {
    let block = client.encode(fields).unwrap();
    let stream = client.send_grpc(&block, shape, body).await.expect("send");
    client.response(stream).await.expect("response")
}

fn field<'a>(response: &'a Response, name: &str) -> &'a [u8] {
    response.field(name).unwrap_or(b"<missing>")
}

#[tokio::test]
async fn h2_answers_whatever_authority_was_sent() {
    let mut client = adapted_client(false).await;
    for (sent, seen) in [
        (Some(&b"/run/x.sock"[..]), &b"localhost"[..]),
        (Some(b"%2Frun%2Fcontainerd%2Fcontainerd.sock"), b"localhost"),
        (Some(b""), b"localhost"),
        (Some(b"localhost"), b"localhost"),
        (None, b"-"),
    ] {
        let fields = grpc_request_fields(b"/x.Y/Z", sent);
        let response = call(&mut client, &fields, &BlockShape::default(), b"ping").await;
        assert_eq!(
            field(&response, ":status"),
            b"200",
            "{sent:?}: {response:?}"
        );
        assert_eq!(field(&response, "x-authority"), seen, "{sent:?}");
        assert_eq!(response.data, crate::raw_h2::grpc_frame(b"ping"));
    }
}

#[tokio::test]
async fn h2_without_the_adapter_refuses_a_socket_path() {
    // The reason the adapter exists: shown here so a change in h2 that makes it moot is noticed.
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(mut conn) = h2::server::handshake(server_io).await {
            while let Some(Ok(_)) = conn.accept().await {}
        }
    });
    let mut client = RawH2Client::handshake(client_io).await.expect("handshake");
    let fields = grpc_request_fields(b"/x.Y/Z", Some(b"/run/x.sock"));
    let response = call(&mut client, &fields, &BlockShape::default(), b"").await;
    assert_eq!(
        response.reset,
        Some(0x1),
        "PROTOCOL_ERROR expected: {response:?}"
    );
}

#[tokio::test]
async fn h2_takes_padded_prioritised_and_continued_blocks() {
    let mut client = adapted_client(false).await;
    let shapes = [
        BlockShape {
            pieces: 4,
            ..Default::default()
        },
        BlockShape {
            padding: 13,
            ..Default::default()
        },
        BlockShape {
            priority: Some([0, 0, 0, 0, 15]),
            ..Default::default()
        },
        BlockShape {
            padding: 255,
            priority: Some([0x80, 0, 0, 0, 255]),
            pieces: 3,
        },
        // More pieces than bytes: empty CONTINUATION frames are legal.
        BlockShape {
            pieces: 200,
            ..Default::default()
        },
    ];
    for shape in &shapes {
        let fields = grpc_request_fields(b"/x.Y/Z", Some(b"/run/x.sock"));
        let response = call(&mut client, &fields, shape, b"shaped").await;
        assert_eq!(
            field(&response, ":status"),
            b"200",
            "{shape:?}: {response:?}"
        );
        assert_eq!(field(&response, "x-authority"), b"localhost", "{shape:?}");
        assert_eq!(response.data, crate::raw_h2::grpc_frame(b"shaped"));
    }
}

#[tokio::test]
async fn a_thousand_requests_share_one_dynamic_table() {
    let mut client = adapted_client(false).await;
    let authorities: [&[u8]; 3] = [b"/run/x.sock", b"%2Frun%2Fx.sock", b"localhost:7"];
    for i in 0..1000usize {
        let echo = format!("echo-{i}-{}", "y".repeat(i % 200));
        let name = format!("x-meta-{}", i % 50);
        let mut fields = grpc_request_fields(b"/x.Y/Z", Some(authorities[i % 3]));
        fields.push((b"x-echo", echo.as_bytes()));
        fields.push((name.as_bytes(), b"constant"));
        let shape = BlockShape {
            pieces: 1 + i % 3,
            ..Default::default()
        };
        let response = call(&mut client, &fields, &shape, echo.as_bytes()).await;
        assert_eq!(
            field(&response, ":status"),
            b"200",
            "request {i}: {response:?}"
        );
        let expected: &[u8] = if i % 3 == 2 {
            b"localhost:7"
        } else {
            b"localhost"
        };
        assert_eq!(field(&response, "x-authority"), expected, "request {i}");
        assert_eq!(field(&response, "x-echo"), echo.as_bytes(), "request {i}");
        assert_eq!(response.data, crate::raw_h2::grpc_frame(echo.as_bytes()));
    }
}

#[tokio::test]
async fn one_byte_reads_and_large_bodies_pass_intact() {
    let mut client = adapted_client(true).await;
    let fields = grpc_request_fields(b"/x.Y/Z", Some(b"/run/x.sock"));
    let response = call(
        &mut client,
        &fields,
        &BlockShape {
            pieces: 2,
            ..Default::default()
        },
        b"slow",
    )
    .await;
    assert_eq!(field(&response, "x-authority"), b"localhost");
    assert_eq!(response.data, crate::raw_h2::grpc_frame(b"slow"));

    let mut client = adapted_client(false).await;
    let body: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
    let stream = client.new_stream();
    let block = client.encode(&fields).unwrap();
    client
        .send_block(stream, &block, false, &BlockShape::default())
        .await
        .unwrap();
    for (n, chunk) in body.chunks(16_000).enumerate() {
        let last = (n + 1) * 16_000 >= body.len();
        client
            .send_frame(0x0, u8::from(last), stream, chunk)
            .await
            .unwrap();
    }
    let response = client.response(stream).await.unwrap();
    assert_eq!(response.data, body);
}

/// Sends a one-field header block that refers to a dynamic table entry nobody made.
async fn send_undecodable(client: &mut RawH2Client<tokio::io::DuplexStream>) -> Response {
    let stream = client.new_stream();
    client
        .send_frame(HEADERS, END_HEADERS | END_STREAM, stream, &[0x80 | 90])
        .await
        .unwrap();
    client.response(stream).await.unwrap()
}

#[tokio::test]
async fn an_undecodable_block_closes_the_connection_as_h2_would() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(mut conn) = h2::server::handshake(server_io).await {
            while let Some(Ok(_)) = conn.accept().await {}
        }
    });
    let mut plain = RawH2Client::handshake(client_io).await.unwrap();
    let unadapted = send_undecodable(&mut plain).await;
    assert!(unadapted.goaway.is_some(), "{unadapted:?}");

    let mut client = adapted_client(false).await;
    let adapted = send_undecodable(&mut client).await;
    assert_eq!(adapted.goaway, unadapted.goaway, "{adapted:?}");
}
