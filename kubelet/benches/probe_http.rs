//! Plain-HTTP probe cost: ferrolet's hand-written HTTP/1.1 exchange (`prober::http::probe`,
//! which runs `http::wire` for `http://` URLs) against the same exchange on hyper 1's
//! `client::conn::http1`, in one process against one loopback server, in alternating rounds
//! so both see the same machine. Reports µs per probe (median round) and heap allocations
//! and bytes per probe, counted on the probing thread only (the server runs on its own).
//! Never asserts timings.
//!
//! `cargo bench -p ferrolet --bench probe_http [-- <probes per round> <rounds>]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferrolet::bench_support::{HttpGet, MAX_BODY, Outcome, dial, http};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Counts the allocations of threads that opted in.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn note(size: usize) {
    if COUNTED.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(size as u64, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What the server answers: a small body with its length, as a health endpoint does.
const ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nok";

/// Serves [`ANSWER`] to every request, on a thread and runtime of its own.
fn start_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    let mut got = Vec::with_capacity(512);
                    let mut buf = [0u8; 512];
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = s.write_all(ANSWER).await;
                });
            }
        });
    });
    port
}

/// The probe of a pod's `httpGet: {path: /healthz, port}`, as the prober builds it.
fn request(port: u16) -> HttpGet {
    let action = HTTPGetAction {
        path: Some("/healthz".into()),
        port: IntOrString::Int(i32::from(port)),
        ..Default::default()
    };
    HttpGet::new(&action, &Container::default(), "127.0.0.1", "probe").unwrap()
}

/// The same probe on hyper's HTTP/1.1 client connection: the same dialer (reset on close),
/// request head, redirect rule, body limit, timeout and verdict as `wire`; errors are
/// worded loosely (the success path is what is measured).
async fn hyper_probe(req: &HttpGet, timeout: Duration) -> (Outcome, String) {
    match tokio::time::timeout(timeout, hyper_follow(req)).await {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => (Outcome::Failure, format!("Get {:?}: {e}", req.url.as_str())),
        Err(_) => (Outcome::Failure, "timeout".into()),
    }
}

async fn hyper_follow(req: &HttpGet) -> Result<(Outcome, String), String> {
    let first_host = req.url.host_str().map(str::to_owned);
    let mut url = req.url.clone();
    for _ in 0..10 {
        let (status, location, body) = hyper_exchange(&url, req).await?;
        let next = match (status, &location) {
            (301 | 302 | 303 | 307 | 308, Some(l)) => url.join(l).ok(),
            _ => None,
        };
        match next {
            Some(next) if next.host_str() == first_host.as_deref() && next.scheme() == "http" => {
                url = next;
            }
            _ => return Ok(http::verdict(status, &String::from_utf8_lossy(&body))),
        }
    }
    Err("stopped after 10 redirects".into())
}

type Exchanged = (u16, Option<String>, Vec<u8>);

async fn hyper_exchange(url: &reqwest::Url, req: &HttpGet) -> Result<Exchanged, String> {
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(80);
    let stream = dial::dial(host, port)
        .await
        .map_err(|e| e.to_string())?
        .send(&[])
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let mut target = url.path().to_string();
    if let Some(q) = url.query() {
        target.push('?');
        target.push_str(q);
    }
    let mut builder = hyper::Request::get(target);
    if !req.headers.contains_key(hyper::header::HOST) {
        let authority = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        builder = builder.header(hyper::header::HOST, authority);
    }
    for (name, value) in &req.headers {
        builder = builder.header(name, value);
    }
    let request = builder
        .header(hyper::header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let exchange = async {
        let resp = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let location = resp
            .headers()
            .get(hyper::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body_stream = resp.into_body();
        let mut body = Vec::new();
        while body.len() < MAX_BODY {
            match body_stream.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        body.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Err(e.to_string()),
                None => break,
            }
        }
        body.truncate(MAX_BODY);
        Ok((status, location, body))
    };
    // The connection is driven in this task rather than spawned: a probe is one exchange.
    let mut conn = pin!(conn);
    let mut exchange = pin!(exchange);
    let mut conn_done = false;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = exchange.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        if !conn_done && conn.as_mut().poll(cx).is_ready() {
            conn_done = true;
            // The exchange now has its answer or its error; poll it again.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    })
    .await
}

/// One round: `n` probes in a row; µs per probe, allocations and bytes per probe.
async fn round<F, Fut>(n: u32, mut probe: F) -> (f64, f64, f64)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = (Outcome, String)>,
{
    let (a0, b0) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let started = Instant::now();
    for _ in 0..n {
        let (outcome, body) = probe().await;
        assert_eq!((outcome, body.as_str()), (Outcome::Success, "ok"));
    }
    let us = started.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let allocs = (ALLOCS.load(Ordering::Relaxed) - a0) as f64 / f64::from(n);
    let bytes = (BYTES.load(Ordering::Relaxed) - b0) as f64 / f64::from(n);
    (us, allocs, bytes)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; numbers are ours.
    let nums: Vec<u32> = std::env::args().filter_map(|a| a.parse().ok()).collect();
    let per_round = nums.first().copied().unwrap_or(2000);
    let rounds = nums.get(1).copied().unwrap_or(7);
    let port = start_server();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let req = request(port);
    let client = http::client().unwrap();
    let timeout = Duration::from_secs(1);
    COUNTED.with(|c| c.set(true));
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    rt.block_on(async {
        // Warm-up: connection paths, lazy statics, the allocator's caches.
        round(200, || http::probe(&client, &req, timeout)).await;
        round(200, || hyper_probe(&req, timeout)).await;
        for _ in 0..rounds {
            ours.push(round(per_round, || http::probe(&client, &req, timeout)).await);
            theirs.push(round(per_round, || hyper_probe(&req, timeout)).await);
        }
    });
    println!("{per_round} probes a round, {rounds} rounds, median round:");
    for (name, runs) in [
        ("wire (hand-written)", ours),
        ("hyper client::conn::http1", theirs),
    ] {
        let us = median(runs.iter().map(|r| r.0).collect());
        let allocs = median(runs.iter().map(|r| r.1).collect());
        let bytes = median(runs.iter().map(|r| r.2).collect());
        println!("{name:>28}: {us:7.1} µs/probe, {allocs:5.1} allocs/probe, {bytes:7.0} B/probe");
    }
}
