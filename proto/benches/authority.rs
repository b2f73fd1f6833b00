//! What `AuthorityRewrite` costs per request: `cargo bench -p ferrolet-proto --bench authority`.
//!
//! 1. The rewrite alone: a stream of gRPC requests as a Go client encodes them (indexed into
//!    its HPACK table, the socket path as `:authority`, a small DATA frame each) read through
//!    the adapter with the rewrite on and off; the difference per request is its CPU cost.
//! 2. Round trips: sequential unary requests on one unix-socket connection to the real h2
//!    server (what tonic runs on) that answers at once, the cheapest RPC there is, so the
//!    rewrite's share is as large as it can get. Blocks of requests alternate between a
//!    connection with the rewrite and one without, so drift falls on both; p50s are compared.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark reports failure by panicking

use std::time::{Duration, Instant};

use ferrolet_proto::raw_h2::{PREFACE, frame};
use ferrolet_proto::transport::AuthorityRewrite;
use tokio::io::AsyncReadExt;

/// `n` requests as one connection's client-to-server bytes.
fn request_stream(n: u32) -> Vec<u8> {
    let mut encoder = httlib_hpack::Encoder::default();
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    for i in 0..n {
        let timeout = format!("{}m", 1999 - i % 7);
        let fields: [(&[u8], &[u8]); 8] = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/runtime.v1.RuntimeService/ContainerStatus"),
            (b":authority", b"/var/run/ferrolet/cri.sock"),
            (b"content-type", b"application/grpc"),
            (b"user-agent", b"grpc-go/1.58.3"),
            (b"te", b"trailers"),
            (b"grpc-timeout", timeout.as_bytes()),
        ];
        let block = ferrolet_proto::raw_h2::encode_block(&mut encoder, &fields).expect("encode");
        let stream = 1 + 2 * i;
        bytes.extend(frame(0x1, 0x4, stream, &block));
        bytes.extend(frame(0x0, 0x1, stream, &[0, 0, 0, 0, 0]));
    }
    bytes
}

/// Reads `input` through the adapter; the time it took.
async fn read_through(input: &[u8], rewrite: bool) -> Duration {
    let start = Instant::now();
    let mut adapter = AuthorityRewrite::new(input, rewrite);
    let mut out = Vec::with_capacity(input.len() * 2);
    adapter.read_to_end(&mut out).await.expect("in-memory read");
    std::hint::black_box(out);
    start.elapsed()
}

async fn rewrite_alone() -> f64 {
    const N: u32 = 20_000;
    let input = request_stream(N);
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..15 {
        off.push(read_through(&input, false).await);
        on.push(read_through(&input, true).await);
    }
    let per_request = |d: &mut Vec<Duration>| {
        d.sort();
        d[d.len() / 2].as_secs_f64() * 1e6 / f64::from(N)
    };
    let (on, off) = (per_request(&mut on), per_request(&mut off));
    println!("rewrite alone, {N} requests per pass, median of 15 passes:");
    println!("  rewrite on   {on:8.3} µs per request");
    println!("  rewrite off  {off:8.3} µs per request");
    println!("  cost         {:8.3} µs per request", on - off);
    on - off
}

/// A server that answers every request with an empty 200 and END_STREAM.
async fn serve(listener: tokio::net::UnixListener, rewrite: bool) {
    while let Ok((io, _)) = listener.accept().await {
        tokio::spawn(async move {
            let Ok(mut conn) = h2::server::handshake(AuthorityRewrite::new(io, rewrite)).await
            else {
                return;
            };
            while let Some(Ok((_, mut respond))) = conn.accept().await {
                if let Ok(response) = http::Response::builder().status(200).body(()) {
                    let _ = respond.send_response(response, true);
                }
            }
        });
    }
}

async fn client(path: &std::path::Path) -> h2::client::SendRequest<bytes::Bytes> {
    let io = tokio::net::UnixStream::connect(path)
        .await
        .expect("connect");
    let (send, conn) = h2::client::handshake(io).await.expect("handshake");
    tokio::spawn(conn);
    send
}

async fn round_trip(send: &mut h2::client::SendRequest<bytes::Bytes>) -> Duration {
    let request = http::Request::builder()
        .method("POST")
        .uri("http://localhost/runtime.v1.RuntimeService/Version")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    let start = Instant::now();
    let (response, _) = send.send_request(request, true).expect("send");
    response.await.expect("response");
    start.elapsed()
}

async fn round_trips(dir: &std::path::Path) -> (f64, f64) {
    let mut sockets = Vec::new();
    for rewrite in [true, false] {
        let path = dir.join(format!("rewrite-{rewrite}.sock"));
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        tokio::spawn(serve(listener, rewrite));
        sockets.push(path);
    }
    let mut on_client = client(&sockets[0]).await;
    let mut off_client = client(&sockets[1]).await;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for round in 0..40 {
        for _ in 0..500 {
            let (a, b) = if round % 2 == 0 {
                (
                    round_trip(&mut on_client).await,
                    round_trip(&mut off_client).await,
                )
            } else {
                let b = round_trip(&mut off_client).await;
                (round_trip(&mut on_client).await, b)
            };
            on.push(a);
            off.push(b);
        }
    }
    let p50 = |d: &mut Vec<Duration>| {
        d.sort();
        d[d.len() / 2].as_secs_f64() * 1e6
    };
    (p50(&mut on), p50(&mut off))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let cost = rewrite_alone().await;
        let dir = tempfile::tempdir().expect("temp dir");
        let (on, off) = round_trips(dir.path()).await;
        println!("round trips on one unix-socket connection to h2, 20000 each, interleaved:");
        println!("  rewrite on   p50 {on:8.1} µs");
        println!("  rewrite off  p50 {off:8.1} µs");
        println!("  ratio        {:8.3}", on / off);
        println!(
            "rewrite cost per request as a share of that p50: {:.2}%",
            100.0 * cost / off
        );
    });
}
