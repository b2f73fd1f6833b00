//! A call that outlives its client's deadline (the `grpc-timeout` header) is answered
//! `DEADLINE_EXCEEDED`, as grpc-go servers (containerd's CRI) answer it.
//!
//! tonic's server enforces the header too, but outside the layers we can add, and answers
//! `CANCELLED` ("Timeout expired"); Go clients that check the code, such as critest's "public
//! image should timeout if requested", then fail whenever the server's timer fires before the
//! client's own. Ours is set [`EARLY`] before tonic's so that it is the one that answers.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderMap;

/// How much earlier than tonic's timer ours fires (tokio's timers tick in milliseconds, and
/// tonic's started first).
pub const EARLY: Duration = Duration::from_millis(1);

/// The client's time limit from a `grpc-timeout` header: at most 8 digits and a unit (H, M,
/// S, m, u, n); `None` when absent or malformed (then the call has no limit, as in tonic).
pub fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Adds [`Deadline`] to a tonic server.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// Answers `DEADLINE_EXCEEDED` once the client's `grpc-timeout` (less [`EARLY`]) has passed;
/// the call itself is dropped then, as tonic would drop it.
#[derive(Clone, Debug)]
pub struct Deadline<S> {
    inner: S,
}

impl<S, B, ResBody> tower::Service<http::Request<B>> for Deadline<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let limit = grpc_timeout(req.headers());
        let call = self.inner.call(req);
        Box::pin(async move {
            let Some(limit) = limit else {
                return call.await;
            };
            match tokio::time::timeout(limit.saturating_sub(EARLY), call).await {
                Ok(answer) => answer,
                Err(_) => Ok(tonic::Status::deadline_exceeded(format!(
                    "the call outlived the client's deadline ({limit:?})"
                ))
                .into_http()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::convert::Infallible;

    use tower::{Layer, Service};

    use super::*;

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("grpc-timeout", v.parse().unwrap());
        h
    }

    #[test]
    fn parses_every_unit_and_refuses_the_rest() {
        let t = |v| grpc_timeout(&headers(v));
        assert_eq!(t("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(t("3M"), Some(Duration::from_secs(180)));
        assert_eq!(t("5S"), Some(Duration::from_secs(5)));
        assert_eq!(t("999m"), Some(Duration::from_millis(999)));
        assert_eq!(t("7u"), Some(Duration::from_micros(7)));
        assert_eq!(t("12345678n"), Some(Duration::from_nanos(12_345_678)));
        for bad in ["", "S", "123456789S", "5x", "-5S", "5 S", "5"] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
        assert_eq!(grpc_timeout(&HeaderMap::new()), None);
    }

    fn request(timeout: Option<&str>) -> http::Request<()> {
        let mut b = http::Request::builder();
        if let Some(t) = timeout {
            b = b.header("grpc-timeout", t);
        }
        b.body(()).unwrap()
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_answered_deadline_exceeded() {
        let slow = tower::service_fn(|_req: http::Request<()>| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, Infallible>(http::Response::new("done".to_string()))
        });
        let mut svc = DeadlineLayer.layer(slow);
        let answer = svc.call(request(Some("10m"))).await.unwrap();
        let status = tonic::Status::from_header_map(answer.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        // In time, or without a deadline, the call's own answer.
        for t in [Some("1S"), None] {
            let answer = svc.call(request(t)).await.unwrap();
            assert_eq!(answer.body(), "done");
            assert!(tonic::Status::from_header_map(answer.headers()).is_none());
        }
    }
}
