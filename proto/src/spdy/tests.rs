#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::frame::{Frame, FrameDecoder, FrameError, GoAwayStatus, RstStatus, Setting};
use super::header_block::{
    DICTIONARY, HeaderBlockError, HeaderDecoder, HeaderEncoder, decode_plain, encode_plain,
};
use super::{Config, Connection, Error, Incoming, Role, SpdyStream};

/// Frames written by moby/spdystream's Framer (the vendored copy in Kubernetes 1.28.7), one
/// connection's worth in order: `name hex`.
const GO_FRAMES: &str = include_str!("testdata/go_frames.txt");

fn go_frame(name: &str) -> BytesMut {
    let line = GO_FRAMES
        .lines()
        .find(|l| l.split(' ').next() == Some(name))
        .unwrap();
    let hex = line.split(' ').nth(1).unwrap();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    BytesMut::from(&bytes[..])
}

fn decode_one(mut buf: BytesMut) -> Frame {
    let frame = FrameDecoder::default().decode(&mut buf).unwrap().unwrap();
    assert!(buf.is_empty());
    frame
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

#[test]
fn dictionary_matches_spdystream_byte_for_byte() {
    assert_eq!(
        &DICTIONARY[..],
        &include_bytes!("testdata/go_dictionary.bin")[..]
    );
}

#[test]
fn go_frames_decode() {
    let mut hd = HeaderDecoder::new(64 * 1024);
    let Frame::SynStream {
        stream_id: 1,
        flags: 0,
        priority: 0,
        associated_to: 0,
        header_block,
        ..
    } = decode_one(go_frame("syn_stream_data"))
    else {
        panic!("not a SYN_STREAM")
    };
    let h = hd.decode(&header_block).unwrap();
    assert_eq!(
        h,
        headers(&[("streamtype", "data"), ("port", "8080"), ("requestid", "0")])
    );

    let Frame::SynStream {
        stream_id: 3,
        flags: super::FLAG_FIN,
        header_block,
        ..
    } = decode_one(go_frame("syn_stream_error"))
    else {
        panic!("not a SYN_STREAM with FIN")
    };
    let h = hd.decode(&header_block).unwrap();
    assert_eq!(
        h,
        headers(&[
            ("streamtype", "error"),
            ("port", "8080"),
            ("requestid", "0")
        ])
    );

    let Frame::SynReply {
        stream_id: 1,
        flags: 0,
        header_block,
    } = decode_one(go_frame("syn_reply"))
    else {
        panic!("not a SYN_REPLY")
    };
    assert!(hd.decode(&header_block).unwrap().is_empty());

    assert_eq!(
        decode_one(go_frame("data")),
        Frame::Data {
            stream_id: 1,
            flags: 0,
            payload: Bytes::from_static(b"hello")
        }
    );
    assert_eq!(
        decode_one(go_frame("data_fin")),
        Frame::Data {
            stream_id: 1,
            flags: super::FLAG_FIN,
            payload: Bytes::new()
        }
    );
    assert_eq!(
        decode_one(go_frame("rst_stream")),
        Frame::RstStream {
            stream_id: 3,
            status: RstStatus::CANCEL
        }
    );
    assert_eq!(decode_one(go_frame("ping")), Frame::Ping { id: 1 });
    assert_eq!(
        decode_one(go_frame("goaway")),
        Frame::GoAway {
            last_good_stream_id: 2,
            status: GoAwayStatus::OK
        }
    );
    assert_eq!(
        decode_one(go_frame("window_update")),
        Frame::WindowUpdate {
            stream_id: 1,
            delta: 65536
        }
    );
    assert_eq!(
        decode_one(go_frame("settings")),
        Frame::Settings {
            flags: 0,
            settings: vec![Setting {
                flags: 0,
                id: 7,
                value: 65536
            }]
        }
    );
    let Frame::Headers {
        stream_id: 1,
        header_block,
        ..
    } = decode_one(go_frame("headers_multi"))
    else {
        panic!("not HEADERS")
    };
    let h = hd.decode(&header_block).unwrap();
    let values: Vec<_> = h.get_all("x-multi").iter().collect();
    assert_eq!(values, ["a", "b"]);
}

#[test]
fn go_simple_frames_encode_identically() {
    for (name, frame) in [
        (
            "data",
            Frame::Data {
                stream_id: 1,
                flags: 0,
                payload: Bytes::from_static(b"hello"),
            },
        ),
        (
            "data_fin",
            Frame::Data {
                stream_id: 1,
                flags: super::FLAG_FIN,
                payload: Bytes::new(),
            },
        ),
        (
            "rst_stream",
            Frame::RstStream {
                stream_id: 3,
                status: RstStatus::CANCEL,
            },
        ),
        ("ping", Frame::Ping { id: 1 }),
        (
            "goaway",
            Frame::GoAway {
                last_good_stream_id: 2,
                status: GoAwayStatus::OK,
            },
        ),
        (
            "window_update",
            Frame::WindowUpdate {
                stream_id: 1,
                delta: 65536,
            },
        ),
        (
            "settings",
            Frame::Settings {
                flags: 0,
                settings: vec![Setting {
                    flags: 0,
                    id: 7,
                    value: 65536,
                }],
            },
        ),
    ] {
        let mut out = BytesMut::new();
        frame.encode(&mut out);
        assert_eq!(out, go_frame(name), "{name}");
    }
}

#[test]
fn every_frame_round_trips_even_byte_by_byte() {
    let block = Bytes::from_static(b"\x78\x01compressed-ish");
    let frames = vec![
        Frame::SynStream {
            stream_id: 5,
            associated_to: 3,
            priority: 7,
            slot: 0,
            flags: super::FLAG_FIN | super::FLAG_UNIDIRECTIONAL,
            header_block: block.clone(),
        },
        Frame::SynReply {
            stream_id: 5,
            flags: super::FLAG_FIN,
            header_block: block.clone(),
        },
        Frame::RstStream {
            stream_id: 7,
            status: RstStatus::REFUSED_STREAM,
        },
        Frame::Settings {
            flags: 1,
            settings: vec![
                Setting {
                    flags: 1,
                    id: 4,
                    value: 100,
                },
                Setting {
                    flags: 0,
                    id: 7,
                    value: 1 << 20,
                },
            ],
        },
        Frame::Ping { id: 0x7fff_ffff },
        Frame::GoAway {
            last_good_stream_id: 9,
            status: GoAwayStatus::INTERNAL_ERROR,
        },
        Frame::Headers {
            stream_id: 2,
            flags: 0,
            header_block: block,
        },
        Frame::WindowUpdate {
            stream_id: 0,
            delta: 0x7fff_ffff,
        },
        Frame::Data {
            stream_id: 0x7fff_ffff,
            flags: 0,
            payload: Bytes::from(vec![7u8; 70_000]),
        },
        Frame::Unknown {
            frame_type: 10,
            flags: 0,
            payload: Bytes::from_static(b"credential"),
        },
    ];
    let mut wire = BytesMut::new();
    for f in &frames {
        f.encode(&mut wire);
    }
    let mut dec = FrameDecoder::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for b in wire.iter() {
        buf.extend_from_slice(&[*b]);
        while let Some(f) = dec.decode(&mut buf).unwrap() {
            out.push(f);
        }
    }
    assert_eq!(out, frames);
}

#[test]
fn bad_frames_are_typed_errors() {
    let cases: Vec<(&[u8], FrameError)> = vec![
        (
            b"\x80\x02\x00\x01\x00\x00\x00\x00",
            FrameError::UnsupportedVersion(2),
        ),
        (
            b"\x80\x03\x00\x06\x00\x00\x00\x05\x00\x00\x00\x01\x00",
            FrameError::InvalidLength {
                frame: "PING",
                len: 5,
            },
        ),
        (
            b"\x80\x03\x00\x06\x00\x00\x00\x04\x00\x00\x00\x00",
            FrameError::ZeroStreamId("PING"),
        ),
        (
            b"\x80\x03\x00\x06\x01\x00\x00\x04\x00\x00\x00\x01",
            FrameError::InvalidFlags {
                frame: "PING",
                flags: 1,
            },
        ),
        (
            b"\x80\x03\x00\x03\x00\x00\x00\x08\x00\x00\x00\x01\x00\x00\x00\x00",
            FrameError::ZeroRstStatus(1),
        ),
        (
            b"\x00\x00\x00\x00\x00\x00\x00\x00",
            FrameError::ZeroStreamId("DATA"),
        ),
        (
            b"\x80\x03\x00\x01\x00\x00\x00\x04\x00\x00\x00\x01",
            FrameError::InvalidLength {
                frame: "SYN_STREAM",
                len: 4,
            },
        ),
        (
            b"\x80\x03\x00\x04\x00\x00\x00\x08\x00\x00\x00\x02\x00\x00\x00\x00",
            FrameError::InvalidLength {
                frame: "SETTINGS",
                len: 8,
            },
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(
            FrameDecoder::default().decode(&mut BytesMut::from(bytes)),
            Err(want)
        );
    }
    let mut big = BytesMut::from(&b"\x00\x00\x00\x01\x00\x01\x00\x01"[..]);
    assert_eq!(
        FrameDecoder::new(1024).decode(&mut big),
        Err(FrameError::TooLarge {
            len: 65537,
            max: 1024
        })
    );
}

#[test]
fn header_blocks_share_one_context_per_direction() {
    let mut enc = HeaderEncoder::new();
    let mut dec = HeaderDecoder::new(64 * 1024);
    let mut sizes = Vec::new();
    for i in 0..20 {
        let mut h = headers(&[("streamtype", "data"), ("port", "8080")]);
        h.insert("requestid", HeaderValue::from(i));
        h.append("x-multi", HeaderValue::from_static("one"));
        h.append("x-multi", HeaderValue::from_static("two"));
        let mut block = BytesMut::new();
        enc.encode(&h, &mut block).unwrap();
        sizes.push(block.len());
        assert_eq!(dec.decode(&block).unwrap(), h);
    }
    // Later blocks refer back to earlier ones: the context really is shared.
    assert!(sizes[19] < sizes[0], "{sizes:?}");
    // A second decoder that missed the first block cannot follow.
    let mut fresh = HeaderDecoder::new(64 * 1024);
    let mut block = BytesMut::new();
    enc.encode(&headers(&[("a", "b")]), &mut block).unwrap();
    assert!(fresh.decode(&block).is_err());
}

#[test]
fn our_blocks_follow_the_go_captured_context() {
    // Decode Go's first block, then check our plain form equals Go's inflated one.
    let mut hd = HeaderDecoder::new(64 * 1024);
    let Frame::SynStream { header_block, .. } = decode_one(go_frame("syn_stream_data")) else {
        panic!()
    };
    let h = hd.decode(&header_block).unwrap();
    let mut plain = Vec::new();
    encode_plain(&h, &mut plain);
    assert_eq!(decode_plain(&plain).unwrap(), h);
}

#[test]
fn header_block_limits_and_garbage() {
    let mut enc = HeaderEncoder::new();
    let mut block = BytesMut::new();
    let big = "x".repeat(10_000);
    let mut h = HeaderMap::new();
    h.insert("big", HeaderValue::from_str(&big).unwrap());
    enc.encode(&h, &mut block).unwrap();
    assert!(HeaderDecoder::new(1024).decode(&block).is_err());
    assert!(HeaderDecoder::new(1024).decode(b"not zlib at all").is_err());
    // Any limit, even one a block nears within its first 256 bytes, refuses instead of
    // panicking (found by the spdy_frames fuzz target: `clamp` with its minimum above its
    // maximum).
    for max in 1..1300 {
        assert!(matches!(
            HeaderDecoder::new(max).decode(&block),
            Err(HeaderBlockError::TooLarge(_))
        ));
    }
    assert!(decode_plain(b"\x00\x00\x00\x05\x00\x00").is_err());
    // More values than a header map holds, and a count hint past its capacity, are refused
    // rather than panicked on (found by the spdy_frames fuzz target).
    let mut many = 40_000u32.to_be_bytes().to_vec();
    for i in 0..40_000u32 {
        let name = format!("h{i}");
        many.extend_from_slice(&(name.len() as u32).to_be_bytes());
        many.extend_from_slice(name.as_bytes());
        many.extend_from_slice(&0u32.to_be_bytes());
    }
    assert!(matches!(
        decode_plain(&many),
        Err(HeaderBlockError::TooManyValues)
    ));
    let mut hint = (u32::MAX).to_be_bytes().to_vec();
    hint.extend(std::iter::repeat_n(0u8, 256 * 1024));
    assert!(decode_plain(&hint).is_err());
    assert!(decode_plain(b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00").is_err());
}

fn pair_with(config: Config) -> ((Connection, Incoming), (Connection, Incoming)) {
    let (a, b) = tokio::io::duplex(256 * 1024);
    (
        Connection::with_config(a, Role::Client, config.clone()),
        Connection::with_config(b, Role::Server, config),
    )
}

fn pair() -> ((Connection, Incoming), (Connection, Incoming)) {
    pair_with(Config::default())
}

async fn accept_and_reply(incoming: &mut Incoming) -> SpdyStream {
    let s = incoming.accept().await.unwrap();
    s.reply(HeaderMap::new(), false).unwrap();
    s
}

#[tokio::test]
async fn streams_both_ways_with_half_close() {
    let ((client, mut client_in), (server, mut server_in)) = pair();
    let open = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .open_stream(headers(&[("streamtype", "stdin")]), false)
                .await
                .unwrap()
        }
    });
    let mut s_side = server_in.accept().await.unwrap();
    assert_eq!(s_side.id(), 1);
    assert_eq!(s_side.headers().get("streamtype").unwrap(), "stdin");
    s_side.reply(HeaderMap::new(), false).unwrap();
    assert!(matches!(
        s_side.reply(HeaderMap::new(), false),
        Err(Error::AlreadyReplied)
    ));
    let mut c_side = open.await.unwrap();
    assert!(matches!(
        c_side.reply(HeaderMap::new(), false),
        Err(Error::NotIncoming)
    ));

    c_side.write_all(b"ping").await.unwrap();
    c_side.shutdown().await.unwrap();
    let mut got = Vec::new();
    s_side.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"ping");
    // Our half is still open after the peer's FIN.
    s_side.write_all(b"pong").await.unwrap();
    s_side.shutdown().await.unwrap();
    let mut got = Vec::new();
    c_side.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"pong");
    assert!(c_side.write_all(b"late").await.is_err());

    // And the server opens one (even id) to the client.
    let open = tokio::spawn({
        let server = server.clone();
        async move {
            server
                .open_stream(headers(&[("x", "y")]), true)
                .await
                .unwrap()
        }
    });
    let mut from_server = accept_and_reply(&mut client_in).await;
    assert_eq!(from_server.id(), 2);
    let _server_side = open.await.unwrap();
    let mut got = Vec::new();
    from_server.read_to_end(&mut got).await.unwrap();
    assert!(got.is_empty());

    assert!(server.ping().await.unwrap() < Duration::from_secs(5));
    assert!(client.ping().await.unwrap() < Duration::from_secs(5));
    client.close();
    tokio::time::timeout(Duration::from_secs(5), server.closed())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), client.closed())
        .await
        .unwrap();
    assert!(server_in.accept().await.is_none());
}

#[tokio::test]
async fn reset_both_ways() {
    let ((client, _client_in), (_server, mut server_in)) = pair();
    let open = tokio::spawn({
        let client = client.clone();
        async move { client.open_stream(HeaderMap::new(), false).await }
    });
    let mut s_side = accept_and_reply(&mut server_in).await;
    let mut c_side = open.await.unwrap().unwrap();
    c_side.write_all(b"before").await.unwrap();
    c_side.flush().await.unwrap();
    c_side.reset(RstStatus::CANCEL);
    // Data sent before the reset is still read, then the reset is an error.
    let mut buf = [0u8; 6];
    s_side.read_exact(&mut buf).await.unwrap();
    let err = s_side.read_u8().await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
    assert!(c_side.write_all(b"x").await.is_err());

    // A refused stream fails open_stream.
    let open = tokio::spawn({
        let client = client.clone();
        async move { client.open_stream(HeaderMap::new(), false).await }
    });
    let refused = server_in.accept().await.unwrap();
    refused.reset(RstStatus::REFUSED_STREAM);
    assert!(matches!(
        open.await.unwrap(),
        Err(Error::Reset(RstStatus::REFUSED_STREAM))
    ));

    // Dropping a stream before our FIN resets it for the peer.
    let open = tokio::spawn({
        let client = client.clone();
        async move { client.open_stream(HeaderMap::new(), false).await }
    });
    let mut s3 = accept_and_reply(&mut server_in).await;
    drop(open.await.unwrap().unwrap());
    assert_eq!(
        s3.read_u8().await.unwrap_err().kind(),
        std::io::ErrorKind::ConnectionReset
    );
}

async fn transfer(size: usize, config: Config) -> Duration {
    let ((client, _ci), (_server, mut server_in)) = pair_with(config);
    let open =
        tokio::spawn(async move { client.open_stream(HeaderMap::new(), false).await.unwrap() });
    let mut s_side = accept_and_reply(&mut server_in).await;
    let mut c_side = open.await.unwrap();
    let start = std::time::Instant::now();
    let writer = tokio::spawn(async move {
        let chunk: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
        let mut sent = 0;
        while sent < size {
            let n = chunk.len().min(size - sent);
            c_side.write_all(&chunk[..n]).await.unwrap();
            sent += n;
        }
        c_side.shutdown().await.unwrap();
        c_side
    });
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0usize;
    let mut sum = 0u64;
    loop {
        let n = s_side.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        for (i, b) in buf[..n].iter().enumerate() {
            assert_eq!(*b, ((got + i) % (256 * 1024) % 251) as u8);
        }
        sum += n as u64;
        got += n;
    }
    let elapsed = start.elapsed();
    writer.await.unwrap();
    assert_eq!(sum as usize, size);
    elapsed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_mib_through_one_stream() {
    let size = 64 << 20;
    let elapsed = transfer(size, Config::default()).await;
    eprintln!(
        "64 MiB in {elapsed:?}: {:.0} MB/s",
        size as f64 / 1e6 / elapsed.as_secs_f64()
    );
}

#[tokio::test]
async fn slow_reader_applies_back_pressure() {
    let config = Config {
        stream_receive_buffer: 64 * 1024,
        write_queue_limit: 64 * 1024,
        ..Config::default()
    };
    let ((client, _ci), (_server, mut server_in)) = pair_with(config);
    let open =
        tokio::spawn(async move { client.open_stream(HeaderMap::new(), false).await.unwrap() });
    let mut s_side = accept_and_reply(&mut server_in).await;
    let mut c_side = open.await.unwrap();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let w = written.clone();
    let writer = tokio::spawn(async move {
        let chunk = vec![1u8; 16 * 1024];
        loop {
            if c_side.write_all(&chunk).await.is_err() {
                break;
            }
            w.fetch_add(chunk.len(), std::sync::atomic::Ordering::SeqCst);
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stalled = written.load(std::sync::atomic::Ordering::SeqCst);
    // Receive buffer + duplex pipe + write queue + reader buffer, nothing more.
    assert!(stalled < 1024 * 1024, "writer ran ahead by {stalled} bytes");
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0;
    while read < 2 * stalled.max(1) {
        read += s_side.read(&mut buf).await.unwrap();
    }
    assert!(written.load(std::sync::atomic::Ordering::SeqCst) > stalled);
    writer.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_streams() {
    let ((client, _ci), (_server, mut server_in)) = pair();
    let echo = tokio::spawn(async move {
        while let Some(mut s) = server_in.accept().await {
            s.reply(HeaderMap::new(), false).unwrap();
            tokio::spawn(async move {
                let mut data = Vec::new();
                s.read_to_end(&mut data).await.unwrap();
                s.write_all(&data).await.unwrap();
                s.shutdown().await.unwrap();
            });
        }
    });
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = client
                .open_stream(headers(&[("streamtype", "data")]), false)
                .await
                .unwrap();
            let payload: Vec<u8> = (0..(i as usize * 997) % 100_000)
                .map(|j| (j as u32 ^ i) as u8)
                .collect();
            s.write_all(&payload).await.unwrap();
            s.shutdown().await.unwrap();
            let mut back = Vec::new();
            s.read_to_end(&mut back).await.unwrap();
            assert_eq!(back, payload);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Every stream finished both ways, so a graceful GOAWAY closes the connection at once.
    client.go_away();
    tokio::time::timeout(Duration::from_secs(5), client.closed())
        .await
        .unwrap();
    echo.await.unwrap();
}

#[tokio::test]
async fn go_away_lets_open_streams_finish() {
    let ((client, _ci), (server, mut server_in)) = pair();
    let open = tokio::spawn({
        let client = client.clone();
        async move { client.open_stream(HeaderMap::new(), false).await.unwrap() }
    });
    let mut s_side = accept_and_reply(&mut server_in).await;
    let mut c_side = open.await.unwrap();
    server.go_away();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(matches!(
        client.open_stream(HeaderMap::new(), false).await,
        Err(Error::GoingAway)
    ));
    assert!(!client.is_closed());
    c_side.write_all(b"still open").await.unwrap();
    c_side.shutdown().await.unwrap();
    let mut got = Vec::new();
    s_side.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"still open");
    s_side.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), client.closed())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), server.closed())
        .await
        .unwrap();
}

#[tokio::test]
async fn transport_loss_ends_everything() {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (client, _ci) = Connection::client(a);
    let mut raw_reader = b;
    let open = tokio::spawn({
        let client = client.clone();
        async move { client.open_stream(HeaderMap::new(), false).await }
    });
    let mut buf = [0u8; 256];
    let n = raw_reader.read(&mut buf).await.unwrap();
    assert!(n > 18, "SYN_STREAM expected");
    drop(raw_reader);
    assert!(matches!(open.await.unwrap(), Err(Error::Closed)));
    tokio::time::timeout(Duration::from_secs(5), client.closed())
        .await
        .unwrap();
    assert!(client.is_closed());
}

#[tokio::test]
async fn peer_pings_are_answered_and_garbage_ends_the_connection() {
    let (a, mut raw) = tokio::io::duplex(64 * 1024);
    let (server, _si) = Connection::server(a);
    let mut ping = BytesMut::new();
    Frame::Ping { id: 1 }.encode(&mut ping);
    Frame::WindowUpdate {
        stream_id: 1,
        delta: 10,
    }
    .encode(&mut ping);
    raw.write_all(&ping).await.unwrap();
    let mut buf = [0u8; 12];
    raw.read_exact(&mut buf).await.unwrap();
    assert_eq!(decode_one(BytesMut::from(&buf[..])), Frame::Ping { id: 1 });
    raw.write_all(b"\x80\x02\x00\x01\x00\x00\x00\x00")
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), server.closed())
        .await
        .unwrap();
    let mut rest = Vec::new();
    raw.read_to_end(&mut rest).await.unwrap();
    assert_eq!(
        decode_one(BytesMut::from(&rest[..])),
        Frame::GoAway {
            last_good_stream_id: 0,
            status: GoAwayStatus::PROTOCOL_ERROR
        }
    );
}

/// Live interoperability with a Go spdystream peer: `SPDY_GO_ECHO=127.0.0.1:port` names a Go
/// server that echoes every stream back and half-closes (a throwaway program, not in the repo).
#[tokio::test]
#[ignore = "needs a Go spdystream echo server in SPDY_GO_ECHO"]
async fn interop_with_go_echo_server() {
    let addr = std::env::var("SPDY_GO_ECHO").unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (client, _ci) = Connection::client(tcp);
    let mut tasks = Vec::new();
    for i in 0..8usize {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = headers(&[("streamtype", "data"), ("port", "8080")]);
            h.insert("requestid", HeaderValue::from(i));
            let mut s = client.open_stream(h, false).await.unwrap();
            let size = if i == 0 { 64 << 20 } else { 100_000 * i };
            let payload: Vec<u8> = (0..size).map(|j| (j % 253) as u8 ^ i as u8).collect();
            let (mut r, mut w) = tokio::io::split(s);
            let start = std::time::Instant::now();
            let send = tokio::spawn(async move {
                w.write_all(&payload).await.unwrap();
                w.shutdown().await.unwrap();
                (w, payload)
            });
            let mut back = Vec::new();
            r.read_to_end(&mut back).await.unwrap();
            let (w, payload) = send.await.unwrap();
            assert!(
                back == payload,
                "stream {i}: {} bytes back of {}",
                back.len(),
                payload.len()
            );
            s = r.unsplit(w);
            drop(s);
            if i == 0 {
                eprintln!("64 MiB echoed through Go in {:?}", start.elapsed());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!("ping to Go: {:?}", client.ping().await.unwrap());
    client.close();
    tokio::time::timeout(Duration::from_secs(5), client.closed())
        .await
        .unwrap();
}

/// Live interoperability the other way: `SPDY_GO_CLIENT=/path/to/binary` is a Go spdystream
/// client (a throwaway program, not in the repo) run as `binary client ADDR`: it opens eight
/// streams with Kubernetes' port-forward headers, streams data (64 MiB on one) and expects it
/// echoed back, pings, closes, and prints OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Go spdystream client in SPDY_GO_CLIENT"]
async fn interop_serving_go_client() {
    let bin = std::env::var("SPDY_GO_CLIENT").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let child = tokio::process::Command::new(bin)
        .arg("client")
        .arg(addr.to_string())
        .output();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (conn, mut incoming) = Connection::server(tcp);
        let mut seen = Vec::new();
        while let Some(s) = incoming.accept().await {
            assert_eq!(s.headers().get("streamtype").unwrap(), "data");
            seen.push(
                s.headers()
                    .get("requestid")
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned(),
            );
            s.reply(HeaderMap::new(), false).unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = tokio::io::split(s);
                tokio::io::copy(&mut r, &mut w).await.unwrap();
                w.shutdown().await.unwrap();
            });
        }
        conn.closed().await;
        seen
    });
    let out = child.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("OK"));
    let mut seen = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap();
    seen.sort();
    assert_eq!(seen, ["0", "1", "2", "3", "4", "5", "6", "7"]);
}
