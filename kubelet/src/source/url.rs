//! The manifest URL source: a GET (with the configured headers) every `httpCheckFrequency`;
//! when the body changed, its valid pods go out as a Reconcile. As in the Go kubelet, an
//! empty body means no pods, a failed request or an unparsable body keeps the previous set,
//! and failures are logged loudly only the first few times in a row.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::mpsc::Sender;
use tokio::task::JoinHandle;

use super::{HTTP_SOURCE, Problem, Problems, decode, dedupe, without_seen};
use crate::types::{Pod, PodOp, PodUpdate};

/// A request that takes longer is abandoned (and retried next period).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest manifest body read (the Go kubelet's `maxConfigLength`).
const MAX_BODY: usize = 10 << 20;
/// Failures in a row logged as warnings before they drop to debug.
const LOUD_FAILURES: u32 = 3;

/// Polls a manifest URL and sends its pods.
pub struct UrlSource {
    url: String,
    headers: BTreeMap<String, Vec<String>>,
    node_name: String,
    period: Duration,
    tx: Sender<PodUpdate>,
    problems: Problems,
}

/// Starts a [`UrlSource`]: polls `url` with `headers` every `period`; sends
/// `PodUpdate { op: Reconcile, source: "http" }` when the content changed; ends when the
/// receiver is gone.
pub fn spawn_url_source(
    url: String,
    headers: BTreeMap<String, Vec<String>>,
    node_name: String,
    period: Duration,
    tx: Sender<PodUpdate>,
) -> JoinHandle<()> {
    UrlSource::new(url, headers, node_name, period, tx).spawn()
}

/// Why one poll gave nothing to send.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("{url}: {status}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    #[error("{url}: the manifest is larger than {MAX_BODY} bytes")]
    TooLarge { url: String },
}

impl UrlSource {
    /// A source polling `url` every `period`.
    pub fn new(
        url: String,
        headers: BTreeMap<String, Vec<String>>,
        node_name: String,
        period: Duration,
        tx: Sender<PodUpdate>,
    ) -> Self {
        Self {
            url,
            headers,
            node_name,
            period: period.max(Duration::from_millis(10)),
            tx,
            problems: Problems::default(),
        }
    }

    /// The latest poll's problems (request failures, skipped pods).
    #[cfg(test)]
    pub fn problems(&self) -> Problems {
        self.problems.clone()
    }

    /// Runs the source on the current tokio runtime.
    pub fn spawn(self) -> JoinHandle<()> {
        tokio::spawn(self.run())
    }

    async fn run(self) {
        tracing::info!(url = %self.url, "watching the manifest URL");
        let client = match reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(url = %self.url, error = %e, "cannot make an HTTP client; the URL source is off");
                return;
            }
        };
        let headers = self.header_map();
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_body: Option<Vec<u8>> = None;
        let mut last_sent: Option<Vec<Pod>> = None;
        let mut failures = 0u32;
        loop {
            tick.tick().await;
            let body = match self.fetch(&client, &headers).await {
                Ok(b) => b,
                Err(e) => {
                    failures += 1;
                    if failures <= LOUD_FAILURES {
                        tracing::warn!(url = %self.url, error = %e, "failed to read pods from the URL");
                    } else {
                        tracing::debug!(url = %self.url, error = %e, "failed to read pods from the URL");
                    }
                    self.problems
                        .replace(HTTP_SOURCE, vec![self.problem(e.to_string())]);
                    continue;
                }
            };
            if failures > 0 {
                tracing::info!(url = %self.url, "read pods from the URL again");
                failures = 0;
            }
            // Unchanged content: nothing to do (its problems, if any, stand).
            if last_body.as_deref() == Some(body.as_slice()) {
                continue;
            }
            let (pods, problems) = if body.is_empty() {
                let p = self.problem("zero-length data received".into());
                (Some(Vec::new()), vec![p])
            } else {
                self.decode(body.clone()).await
            };
            last_body = Some(body);
            self.problems.replace(HTTP_SOURCE, problems);
            // An unparsable body keeps the previous set.
            let Some(pods) = pods else { continue };
            let stripped = without_seen(&pods);
            if last_sent.as_ref() == Some(&stripped) {
                continue;
            }
            let update = PodUpdate::new(PodOp::Reconcile, pods, HTTP_SOURCE);
            if self.tx.send(update).await.is_err() {
                return;
            }
            last_sent = Some(stripped);
        }
    }

    fn problem(&self, reason: String) -> Problem {
        Problem {
            origin: self.url.clone(),
            reason,
        }
    }

    /// The configured headers; a name or value HTTP cannot carry is logged and left out.
    fn header_map(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, values) in &self.headers {
            let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
                tracing::warn!(header = %name, "not a valid HTTP header name; not sent");
                continue;
            };
            for v in values {
                match HeaderValue::from_str(v) {
                    Ok(v) => {
                        map.append(name.clone(), v);
                    }
                    Err(_) => {
                        tracing::warn!(header = %name, "not a valid HTTP header value; not sent")
                    }
                }
            }
        }
        map
    }

    async fn fetch(
        &self,
        client: &reqwest::Client,
        headers: &HeaderMap,
    ) -> Result<Vec<u8>, FetchError> {
        let mut resp = client
            .get(&self.url)
            .headers(headers.clone())
            .send()
            .await?;
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(FetchError::TooLarge {
                    url: self.url.clone(),
                });
            }
            body.extend_from_slice(&chunk);
        }
        if resp.status() != reqwest::StatusCode::OK {
            return Err(FetchError::Status {
                url: self.url.clone(),
                status: resp.status(),
            });
        }
        Ok(body)
    }

    /// The body's valid pods (None when nothing in it parses), off the async threads.
    async fn decode(&self, body: Vec<u8>) -> (Option<Vec<Pod>>, Vec<Problem>) {
        let (url, node) = (self.url.clone(), self.node_name.clone());
        let job = tokio::task::spawn_blocking(move || {
            match decode(&body, HTTP_SOURCE, "url", &url, &node) {
                Ok((pods, mut problems)) => {
                    let pods = pods.into_iter().map(|p| (url.clone(), p)).collect();
                    let pods = dedupe(pods, &mut problems);
                    (Some(pods), problems)
                }
                Err(unparsable) => (None, vec![unparsable]),
            }
        });
        match job.await {
            Ok(r) => r,
            Err(e) => (None, vec![self.problem(format!("decoding panicked: {e}"))]),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::source::tests::{eventually, manifest};
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    /// What the test server answers, and the requests it saw.
    #[derive(Default)]
    struct Server {
        status: u16,
        body: String,
        requests: Vec<String>,
    }

    /// A one-connection-at-a-time HTTP/1.1 server answering from `state`.
    async fn serve(state: Arc<Mutex<Server>>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let (status, body) = {
                    let mut s = state.lock().unwrap();
                    s.requests.push(String::from_utf8_lossy(&req).into_owned());
                    (s.status, s.body.clone())
                };
                let reply = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            }
        });
        format!("http://{addr}/pods")
    }

    async fn next(rx: &mut mpsc::Receiver<PodUpdate>) -> PodUpdate {
        let u = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("an update in time")
            .unwrap();
        assert_eq!((u.op, u.source.as_str()), (PodOp::Reconcile, "http"));
        u
    }

    fn set(state: &Arc<Mutex<Server>>, status: u16, body: &str) {
        let mut s = state.lock().unwrap();
        s.status = status;
        s.body = body.to_string();
    }

    #[tokio::test]
    async fn polls_with_headers_and_sends_changes() {
        let state = Arc::new(Mutex::new(Server::default()));
        set(&state, 200, &manifest("web", "busybox:1"));
        let url = serve(state.clone()).await;
        let headers: BTreeMap<String, Vec<String>> = [(
            "X-Token".to_string(),
            vec!["a".to_string(), "b".to_string()],
        )]
        .into();
        let (tx, mut rx) = mpsc::channel(16);
        let source = UrlSource::new(
            url.clone(),
            headers,
            "node".into(),
            Duration::from_millis(50),
            tx,
        );
        let problems = source.problems();
        let task = source.spawn();

        let u = next(&mut rx).await;
        assert_eq!(u.pods.len(), 1);
        assert_eq!(u.pods[0].metadata.name.as_deref(), Some("web-node"));
        let ann = u.pods[0].metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[crate::types::labels::CONFIG_SOURCE], "http");
        {
            let s = state.lock().unwrap();
            let req = s.requests[0].to_lowercase();
            assert!(req.starts_with("get /pods http/1.1"), "{req}");
            assert!(
                req.contains("x-token: a\r\n") && req.contains("x-token: b\r\n"),
                "{req}"
            );
        }

        // Polls of unchanged content send nothing.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), rx.recv())
                .await
                .is_err()
        );

        // A failing server keeps the set; an unparsable body keeps it too.
        set(&state, 500, "oops");
        let failed = |what: &'static str| {
            let problems = problems.clone();
            move || {
                problems
                    .current()
                    .first()
                    .is_some_and(|p| p.reason.contains(what))
            }
        };
        eventually("the 500 reported", failed("500")).await;
        set(&state, 200, "kind: [");
        eventually("the bad YAML reported", failed("invalid YAML")).await;
        assert!(rx.try_recv().is_err(), "failures keep the set");

        // A list with one invalid pod: the valid one goes out.
        let list = format!(
            "apiVersion: v1\nkind: List\nitems:\n- {}\n- {}",
            manifest("a", "busybox:1").replace('\n', "\n  "),
            manifest("b", "").replace('\n', "\n  "),
        );
        set(&state, 200, &list);
        let u = next(&mut rx).await;
        let names: Vec<_> = u
            .pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a-node"]);
        assert!(problems.current()[0].reason.contains("invalid pod \"b\""));

        // An empty body means no pods.
        set(&state, 200, "");
        assert!(next(&mut rx).await.pods.is_empty());

        drop(rx);
        set(&state, 200, &manifest("again", "busybox:1"));
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("ends with its receiver")
            .unwrap();
    }
}
