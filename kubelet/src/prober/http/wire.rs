//! Plain-HTTP probes without a client library. Go's probes open one connection per run (no
//! keep-alives), and at hundreds of probes a second a general-purpose client's machinery (a
//! spawned connection task, pool bookkeeping, builders per request) costs more than the
//! exchange itself. This speaks just what a probe needs of HTTP/1.1: one GET, the status,
//! `Location`, and at most [`MAX_BODY`] bytes of a length-delimited, chunked or
//! close-delimited body; then the connection is reset rather than closed, so neither side
//! keeps it in TIME_WAIT ([`dial`]). HTTPS probes stay on the shared client.
//!
//! Kept over hyper 1's `client::conn::http1` (the same dialer, request, redirect rule, body
//! limit and verdict, the connection driven in the probe's own task) because it is cheaper:
//! `cargo bench -p ferrolet --bench probe_http -- 5000 9` (one process, loopback server,
//! alternating rounds, median of 9 rounds of 5000 probes, 2 shared cores, 2026-11-25):
//!
//! | client | µs/probe | allocations/probe | bytes allocated/probe |
//! | --- | --- | --- | --- |
//! | this module | 95.8 | 10 | 1557 |
//! | hyper `client::conn::http1` | 106.6 | 22 | 26442 |

use std::time::Duration;

use reqwest::Url;
use reqwest::header::HeaderMap;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{HttpGet, MAX_BODY, MAX_REDIRECTS, go_io_error, verdict};
use crate::prober::check::{Outcome, join_host_port};
use crate::prober::dial;

/// The most header bytes an answer may carry before it is refused (Go's default is 1 MiB;
/// a probe endpoint needs far less).
const MAX_HEAD: usize = 64 * 1024;
/// Room made for each read: a probe's answer is usually a few hundred bytes, and staying
/// under 1 KiB keeps the buffer in glibc's small bins (a larger request makes malloc
/// consolidate its free lists first, which showed in profiles).
const READ_CHUNK: usize = 960;

/// An answer: its status, where a redirect points, and the start of its body.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Answer {
    pub status: u16,
    pub location: Option<String>,
    pub body: Vec<u8>,
}

/// Why an exchange failed, worded as Go's client words it after `Get "<url>": `.
#[derive(Debug)]
enum WireError {
    Connect(String, std::io::Error),
    Io(std::io::Error),
    Malformed(&'static str),
}

impl WireError {
    fn describe(&self) -> String {
        match self {
            Self::Connect(addr, e) => format!("dial tcp {addr}: connect: {}", go_io_error(e)),
            Self::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => "EOF".into(),
            Self::Io(e) => go_io_error(e),
            Self::Malformed(what) => format!("net/http: {what}"),
        }
    }
}

/// Runs an HTTP probe over plain HTTP within `timeout` (redirects included), following
/// redirects on the same host as Go does; `None` when a redirect leaves plain HTTP, for the
/// caller to run the probe on the full client instead.
pub(super) async fn probe(req: &HttpGet, timeout: Duration) -> Option<(Outcome, String)> {
    match tokio::time::timeout(timeout, follow(req)).await {
        Ok(found) => found,
        Err(_) => Some((
            Outcome::Failure,
            format!(
                "Get {:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                req.url.as_str()
            ),
        )),
    }
}

async fn follow(req: &HttpGet) -> Option<(Outcome, String)> {
    let first_host = req.url.host_str().map(str::to_owned);
    let mut url = req.url.clone();
    for _ in 0..MAX_REDIRECTS {
        let answer = match exchange(&url, &req.headers).await {
            Ok(a) => a,
            Err(e) => {
                return Some((
                    Outcome::Failure,
                    format!("Get {:?}: {}", url.as_str(), e.describe()),
                ));
            }
        };
        let next = match (answer.status, &answer.location) {
            (301 | 302 | 303 | 307 | 308, Some(location)) => url.join(location).ok(),
            _ => None,
        };
        let Some(next) = next else {
            return Some(verdict(
                answer.status,
                &String::from_utf8_lossy(&answer.body),
            ));
        };
        if next.host_str() != first_host.as_deref() {
            // Go's ErrUseLastResponse: the redirect itself is the answer.
            return Some(verdict(
                answer.status,
                &String::from_utf8_lossy(&answer.body),
            ));
        }
        if next.scheme() != "http" {
            return None;
        }
        url = next;
    }
    Some((
        Outcome::Failure,
        format!(
            "Get {:?}: stopped after {MAX_REDIRECTS} redirects",
            url.as_str()
        ),
    ))
}

/// One GET on a fresh connection (reset, not closed, when dropped: see [`dial`]).
async fn exchange(url: &Url, headers: &HeaderMap) -> Result<Answer, WireError> {
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(80);
    let conn = dial::dial(host, port)
        .await
        .map_err(|e| WireError::Connect(join_host_port(host.trim_matches(['[', ']']), port), e))?;
    let mut stream = conn
        .send(&request(url, headers))
        .await
        .map_err(WireError::Io)?;
    read_answer(&mut stream).await
}

/// The request's bytes: the user's headers as given (a `Host` among them wins), then the
/// URL's authority as `Host`, and `Connection: close`.
fn request(url: &Url, headers: &HeaderMap) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(url.path().as_bytes());
    if let Some(q) = url.query() {
        out.push(b'?');
        out.extend_from_slice(q.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !headers.contains_key(reqwest::header::HOST) {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(url.host_str().unwrap_or_default().as_bytes());
        if let Some(port) = url.port() {
            out.extend_from_slice(format!(":{port}").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out
}

/// The fuzz targets' way in (`app::fuzzing::probe_http`): one answer read from `stream` and
/// judged as [`follow`] judges it, a redirect's `Location` resolved against a probe's URL.
#[cfg(feature = "fuzzing")]
pub(crate) async fn judge_answer<R: AsyncRead + Unpin>(stream: &mut R) {
    let Ok(answer) = read_answer(stream).await else {
        return;
    };
    assert!(
        answer.body.len() <= MAX_BODY,
        "read {} body bytes",
        answer.body.len()
    );
    if let (Ok(url), Some(location)) =
        (Url::parse("http://10.1.2.3:8080/healthz"), &answer.location)
    {
        let _ = url.join(location);
    }
    let _ = verdict(answer.status, &String::from_utf8_lossy(&answer.body));
}

/// Reads an answer's head and up to [`MAX_BODY`] bytes of its body (from any reader, so
/// the parser can be tested on bytes alone).
async fn read_answer<R: AsyncRead + Unpin>(stream: &mut R) -> Result<Answer, WireError> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return Err(WireError::Malformed(
                "server response headers exceeded the limit",
            ));
        }
        if read_more(stream, &mut buf).await? == 0 {
            return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| WireError::Malformed("malformed HTTP response"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(parse_status)
        .ok_or(WireError::Malformed("malformed HTTP response"))?;
    let (mut length, mut chunked, mut location) = (None, false, None);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("location") {
            location = Some(value.to_string());
        }
    }
    let mut rest = buf.split_off(head_end + 4);
    let body = if chunked {
        read_chunked(stream, rest).await?
    } else {
        let want = length.unwrap_or(usize::MAX).min(MAX_BODY);
        while rest.len() < want {
            if read_more(stream, &mut rest).await? == 0 {
                if length.is_some() {
                    return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
                break;
            }
        }
        rest.truncate(want);
        rest
    };
    Ok(Answer {
        status,
        location,
        body,
    })
}

/// A chunked body's data, up to [`MAX_BODY`] bytes; `pending` holds what was read already.
async fn read_chunked<R: AsyncRead + Unpin>(
    stream: &mut R,
    mut pending: Vec<u8>,
) -> Result<Vec<u8>, WireError> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(end) = find(&pending, b"\r\n") {
                break end;
            }
            if pending.len() > MAX_HEAD {
                return Err(WireError::Malformed("malformed chunked encoding"));
            }
            if read_more(stream, &mut pending).await? == 0 {
                return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        };
        let size_text = std::str::from_utf8(&pending[..line_end])
            .map_err(|_| WireError::Malformed("malformed chunked encoding"))?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| WireError::Malformed("malformed chunked encoding"))?;
        pending.drain(..line_end + 2);
        if size == 0 || body.len() >= MAX_BODY {
            break;
        }
        // The chunk and its CRLF; a size near usize::MAX (a pod may send ffffffffffffffff)
        // saturates, and the body limit below ends the read, as Go's LimitReader does.
        let framed = size.saturating_add(2);
        while pending.len() < framed && body.len() + pending.len() < MAX_BODY + 2 {
            if read_more(stream, &mut pending).await? == 0 {
                return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
        let take = size.min(pending.len());
        body.extend_from_slice(&pending[..take]);
        if body.len() >= MAX_BODY || pending.len() < framed {
            break;
        }
        pending.drain(..framed);
    }
    body.truncate(MAX_BODY);
    Ok(body)
}

/// Reads what has arrived into `buf`'s spare room (no buffer of its own: a probe's future
/// stays small).
async fn read_more<R: AsyncRead + Unpin>(
    stream: &mut R,
    buf: &mut Vec<u8>,
) -> Result<usize, WireError> {
    buf.reserve(READ_CHUNK);
    stream.read_buf(buf).await.map_err(WireError::Io)
}

/// `HTTP/1.x NNN reason` → NNN.
fn parse_status(line: &str) -> Option<u16> {
    let mut parts = line.split(' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// A server that answers one connection with `raw`, returning what it was sent.
    async fn serve_once(raw: &'static [u8]) -> (u16, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            while find(&got, b"\r\n\r\n").is_none() {
                let mut b = [0u8; 1024];
                let n = s.read(&mut b).await.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&b[..n]);
            }
            s.write_all(raw).await.unwrap();
            String::from_utf8(got).unwrap()
        });
        (port, task)
    }

    fn url(port: u16, path: &str) -> Url {
        Url::parse(&format!("http://127.0.0.1:{port}{path}")).unwrap()
    }

    #[tokio::test]
    async fn length_delimited_chunked_and_close_delimited_bodies() {
        let (port, _) = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA").await;
        let a = exchange(&url(port, "/a?b=c"), &HeaderMap::new())
            .await
            .unwrap();
        assert_eq!((a.status, a.body.as_slice()), (200, &b"hello"[..]));

        let (port, _) = serve_once(
            b"HTTP/1.1 503 Nope\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .await;
        let a = exchange(&url(port, "/"), &HeaderMap::new()).await.unwrap();
        assert_eq!((a.status, a.body.as_slice()), (503, &b"abcde"[..]));

        let (port, sent) = serve_once(b"HTTP/1.0 302 Found\r\nLocation: /next\r\n\r\nmoved").await;
        let a = exchange(&url(port, "/x?q=1"), &HeaderMap::new())
            .await
            .unwrap();
        assert_eq!(
            (a.status, a.location.as_deref(), a.body.as_slice()),
            (302, Some("/next"), &b"moved"[..])
        );
        let sent = sent.await.unwrap();
        assert!(sent.starts_with("GET /x?q=1 HTTP/1.1\r\n"), "{sent}");
        assert!(
            sent.contains(&format!("host: 127.0.0.1:{port}\r\n")),
            "{sent}"
        );
        assert!(sent.contains("connection: close\r\n"), "{sent}");
    }

    #[tokio::test]
    async fn bodies_are_cut_at_the_limit_and_garbage_is_refused() {
        static BIG: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
            let mut v = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
            v.extend(std::iter::repeat_n(b'x', MAX_BODY * 3));
            v
        });
        let (port, _) = serve_once(BIG.as_slice()).await;
        let a = exchange(&url(port, "/"), &HeaderMap::new()).await.unwrap();
        assert_eq!(a.body.len(), MAX_BODY);

        let (port, _) = serve_once(b"SSH-2.0-OpenSSH\r\n\r\n").await;
        let e = exchange(&url(port, "/"), &HeaderMap::new())
            .await
            .unwrap_err();
        assert_eq!(e.describe(), "net/http: malformed HTTP response");

        let (port, _) = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort").await;
        let e = exchange(&url(port, "/"), &HeaderMap::new())
            .await
            .unwrap_err();
        assert_eq!(e.describe(), "EOF");
    }

    #[tokio::test]
    async fn a_chunk_size_near_usize_max_is_read_to_the_limit_not_overflowed() {
        static HUGE_CHUNK: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
            let mut v = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            v.extend_from_slice(b"ffffffffffffffff\r\n");
            v.extend(std::iter::repeat_n(b'x', MAX_BODY * 2));
            v
        });
        let (port, _) = serve_once(HUGE_CHUNK.as_slice()).await;
        let a = exchange(&url(port, "/"), &HeaderMap::new()).await.unwrap();
        assert_eq!((a.status, a.body.len()), (200, MAX_BODY));
    }

    /// Parses `bytes` as an answer read off a connection.
    fn parse(bytes: &[u8]) -> Result<Answer, WireError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut reader = bytes;
        rt.block_on(read_answer(&mut reader))
    }

    #[test]
    fn a_chunk_size_of_ffffffffffffffff_ends_at_the_body_limit() {
        let mut raw =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n".to_vec();
        raw.extend(std::iter::repeat_n(b'x', MAX_BODY + 5));
        let a = parse(&raw).unwrap();
        assert_eq!((a.status, a.body.len()), (200, MAX_BODY));
        // Cut short of the limit, it is an early EOF rather than an overflow.
        raw.truncate(100);
        assert_eq!(parse(&raw).unwrap_err().describe(), "EOF");
    }

    /// A chunk size line: hex of any width (overflowing ones included), maybe an extension.
    fn chunk_size_line() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<u64>().prop_map(|n| format!("{n:x}")),
            (0usize..40).prop_map(|n| format!("{n:X};ext=1")),
            Just("ffffffffffffffff".to_string()),
            Just("10000000000000000".to_string()),
            "[0-9a-fA-F;= xg-]{0,20}",
        ]
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_an_answer_or_an_error(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = parse(&bytes);
        }

        #[test]
        fn any_head_then_bytes_is_an_answer_or_an_error(
            status in 0u16..1000,
            headers in proptest::collection::vec(("[A-Za-z-]{1,20}", "[ -~]{0,30}"), 0..6),
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            let mut raw = format!("HTTP/1.1 {status:03} X\r\n").into_bytes();
            for (name, value) in headers {
                raw.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
            }
            raw.extend_from_slice(b"\r\n");
            raw.extend_from_slice(&body);
            if let Ok(a) = parse(&raw) {
                proptest::prop_assert!(a.body.len() <= MAX_BODY);
            }
        }

        #[test]
        fn any_chunked_body_is_read_to_the_limit_or_refused(
            chunks in proptest::collection::vec((chunk_size_line(), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), proptest::prelude::any::<bool>()), 0..8),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let mut raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for (size, data, crlf) in chunks {
                raw.extend_from_slice(size.as_bytes());
                raw.extend_from_slice(b"\r\n");
                raw.extend_from_slice(&data);
                if crlf {
                    raw.extend_from_slice(b"\r\n");
                }
            }
            raw.extend_from_slice(&tail);
            if let Ok(a) = parse(&raw) {
                proptest::prop_assert!(a.body.len() <= MAX_BODY);
            }
        }

        #[test]
        fn well_formed_chunks_are_read_back(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 1..64), 0..8),
        ) {
            let mut raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for data in &chunks {
                raw.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                raw.extend_from_slice(data);
                raw.extend_from_slice(b"\r\n");
            }
            raw.extend_from_slice(b"0\r\n\r\n");
            let a = parse(&raw).unwrap();
            proptest::prop_assert_eq!(a.body, chunks.concat());
        }
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status("HTTP/1.1 204 No Content"), Some(204));
        assert_eq!(parse_status("HTTP/1.0 500"), Some(500));
        assert_eq!(parse_status("HTTP/2 200"), None);
        assert_eq!(parse_status("HTTP/1.1 20"), None);
    }
}
