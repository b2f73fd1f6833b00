//! `ferrolet trace pod NAME`: fetches a pod's start timeline from a running ferrolet's
//! read-only API (`/debug/pods/<namespace>/<name>/timeline`) and prints it as a table (or, with
//! `--json`, as served). The secure port needs credentials this client does not carry: use
//! `curl --cert` there.

use crate::config::{TraceCommand, TracePod};
use crate::timeline::render::{PodTimeline, table};

/// Why a trace could not be shown.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The name or namespace cannot be a path segment.
    #[error("{0:?} is not a valid pod name or namespace")]
    BadName(String),
    /// The async runtime could not start.
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// ferrolet did not answer.
    #[error("GET {url}: {source}")]
    Http {
        /// What was asked.
        url: String,
        /// Why it failed.
        source: reqwest::Error,
    },
    /// ferrolet answered with an error (404: no timeline for the pod).
    #[error("GET {url}: {status}: {body}")]
    Status {
        /// What was asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// ferrolet's message.
        body: String,
    },
    /// The answer is not a timeline.
    #[error("GET {url}: not a pod timeline: {source}")]
    Decode {
        /// What was asked.
        url: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// Runs `ferrolet trace <what>`, printing its output.
pub fn run(what: &TraceCommand) -> Result<(), TraceError> {
    match what {
        TraceCommand::Pod(args) => {
            let out = pod(args)?;
            print!("{out}");
            Ok(())
        }
    }
}

/// What `trace pod` prints.
fn pod(args: &TracePod) -> Result<String, TraceError> {
    let url = timeline_url(&args.address, &args.namespace, &args.name)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(TraceError::Runtime)?;
    let body = runtime.block_on(fetch(&url))?;
    if args.json {
        return Ok(if body.ends_with('\n') {
            body
        } else {
            body + "\n"
        });
    }
    let timeline: PodTimeline =
        serde_json::from_str(&body).map_err(|source| TraceError::Decode { url, source })?;
    Ok(table(&timeline))
}

/// The timeline URL of pod `namespace/name` on the API at `address`.
pub fn timeline_url(address: &str, namespace: &str, name: &str) -> Result<String, TraceError> {
    for segment in [namespace, name] {
        let valid = !segment.is_empty()
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !valid {
            return Err(TraceError::BadName(segment.to_string()));
        }
    }
    let base = address.trim_end_matches('/');
    Ok(format!("{base}/debug/pods/{namespace}/{name}/timeline"))
}

async fn fetch(url: &str) -> Result<String, TraceError> {
    let http = |source| TraceError::Http {
        url: url.to_string(),
        source,
    };
    let response = reqwest::get(url).await.map_err(http)?;
    let status = response.status();
    let body = response.text().await.map_err(http)?;
    if !status.is_success() {
        return Err(TraceError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            body: body.trim_end().to_string(),
        });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_url_names_the_pod_and_refuses_what_is_not_a_name() {
        assert_eq!(
            timeline_url("http://127.0.0.1:10255/", "default", "web-node-1").unwrap(),
            "http://127.0.0.1:10255/debug/pods/default/web-node-1/timeline"
        );
        for (ns, name) in [("default", ""), ("a/b", "p"), ("default", "p?x"), ("", "p")] {
            assert!(
                timeline_url("http://h", ns, name).is_err(),
                "{ns:?} {name:?}"
            );
        }
    }
}
