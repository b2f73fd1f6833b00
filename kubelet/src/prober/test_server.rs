//! A scripted HTTP/1.1 server on a loopback port for the probe and hook tests: it records each
//! request's head and answers by path.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A running server; stops when dropped.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Every request head received, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// The request heads so far.
    pub fn heads(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// The answer to a path: status, extra header lines, body; `None` hangs up without answering
/// after a long sleep (a server that never answers).
fn answer(path: &str, port: u16) -> Option<(u16, String, String)> {
    let plain = |status: u16, body: &str| Some((status, String::new(), body.to_string()));
    let moved = |to: String| Some((302, format!("Location: {to}\r\n"), "moved".to_string()));
    match path {
        "/ok" | "/" => plain(200, "fine"),
        "/created" => plain(201, ""),
        "/missing" => plain(404, "secret body"),
        "/error" => plain(500, "boom"),
        "/big" => plain(200, &"b".repeat(20 * 1024)),
        "/redirect-local" => moved("/ok".into()),
        "/redirect-to-missing" => moved("/missing".into()),
        "/redirect-away" => moved(format!("http://127.0.0.2:{port}/ok")),
        "/loop" => moved("/loop".into()),
        "/slow" => None,
        p if p.starts_with("/ok?") => plain(200, "query"),
        _ => plain(404, "no such path"),
    }
}

/// Starts a server on 127.0.0.1 (reachable as 127.0.0.2 too: the whole of 127/8 is loopback,
/// the server binds the wildcard address of it).
pub async fn start() -> TestServer {
    let listener = TcpListener::bind(("0.0.0.0", 0))
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                if let Ok(mut s) = seen.lock() {
                    s.push(head);
                }
                let Some((status, extra, body)) = answer(&path, port) else {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    return;
                };
                let reply = format!(
                    "HTTP/1.1 {status} X\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    TestServer {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        requests,
        task,
    }
}
