//! `/debug/pods/{namespace}/{name}/timeline`: a pod's start timeline as JSON
//! ([`crate::timeline::render::PodTimeline`]), on the read-only API and, authorized as `/pods`
//! is (`nodes/pods`, then `nodes/proxy`), on the secure one. 404 with a message when the
//! kubelet keeps no timeline of that pod.

use std::sync::Arc;

use hyper::{Method, Response, StatusCode};

use super::{ApiRequest, Body, Endpoint, json, text};
use crate::timeline::{Timeline, render};

/// Where the endpoint is registered.
pub const PATH: &str = "/debug/pods";

/// The endpoint, reading `timeline`.
pub fn endpoint(timeline: Arc<Timeline>) -> impl Endpoint {
    move |req: ApiRequest| {
        let timeline = timeline.clone();
        async move { serve(&timeline, &req) }
    }
}

/// `namespace` and `name` of a timeline path.
fn parse(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix(PATH)?.strip_prefix('/')?;
    let mut parts = rest.split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(ns), Some(name), Some("timeline"), None) if !ns.is_empty() && !name.is_empty() => {
            Some((ns, name))
        }
        _ => None,
    }
}

fn serve(timeline: &Timeline, req: &ApiRequest) -> Response<Body> {
    let Some((namespace, name)) = parse(&req.path) else {
        return text(
            StatusCode::NOT_FOUND,
            "404 page not found: want /debug/pods/<namespace>/<name>/timeline\n",
        );
    };
    if req.method != Method::GET && req.method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    }
    let Some(starts) = timeline.starts(namespace, name) else {
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "no start timeline of pod {namespace}/{name}: it has not started since \
                 ferrolet did, or it was evicted by newer pods (--pod-timeline-pods)\n"
            ),
        );
    };
    let view = render::view(namespace, name, &starts);
    match serde_json::to_vec(&view) {
        Ok(mut body) => {
            body.push(b'\n');
            json(body)
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::timeline::{Containers, Limits, PodId};
    use http_body_util::BodyExt;

    async fn get(timeline: &Arc<Timeline>, path: &str) -> (StatusCode, String) {
        let req = ApiRequest {
            method: Method::GET,
            path: path.into(),
            query: String::new(),
        };
        let resp = endpoint(timeline.clone()).serve(req).await;
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn serves_a_pods_timeline_and_404_without_one() {
        let timeline = Arc::new(Timeline::new(Limits::default()));
        let id = PodId {
            uid: "u1",
            namespace: "default",
            name: "web",
        };
        timeline.admitted(id, Containers::default(), 1_000, 2_000);
        let (status, body) = get(&timeline, "/debug/pods/default/web/timeline").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["name"], "web");
        assert_eq!(v["starts"][0]["uid"], "u1");
        assert_eq!(v["starts"][0]["marks"][1]["phase"], "admitted");
        assert_eq!(v["starts"][0]["marks"][1]["durationMs"], 0.001);
        let (status, body) = get(&timeline, "/debug/pods/default/nope/timeline").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            body.contains("no start timeline of pod default/nope"),
            "{body}"
        );
        for path in [
            "/debug/pods",
            "/debug/pods/default/web",
            "/debug/pods/default/web/timeline/x",
            "/debug/pods//web/timeline",
        ] {
            assert_eq!(
                get(&timeline, path).await.0,
                StatusCode::NOT_FOUND,
                "{path}"
            );
        }
    }
}
