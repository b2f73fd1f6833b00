//! Pod sources: a manifest directory (inotify plus a periodic re-list) and a manifest URL
//! (polled), each sending its full set of valid static pods as a Reconcile, and their merge
//! into one stream of Add/Update/Remove/Reconcile.
//!
//! [`api`]: the API server's pods for this node (API-server mode), mirror pods kept apart.
//!
//! A manifest that cannot be read, parsed or validated is reported (a warning in the log,
//! and in the source's [`Problems`]) and skipped; the other pods still go out.

pub mod api;
mod file;
mod merge;
mod url;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};

pub use api::{API_SOURCE, MirrorTable, spawn_api_source};
pub use file::spawn_file_source;
pub use merge::PodConfig;
pub use url::spawn_url_source;

use crate::manifest::{self, validate};
use crate::types::{Pod, labels};

/// `kubernetes.io/config.source` of pods from a manifest directory.
pub const FILE_SOURCE: &str = "file";
/// `kubernetes.io/config.source` of pods from a manifest URL.
pub const HTTP_SOURCE: &str = "http";

/// A manifest (or one pod in it) that was skipped, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// The file or URL.
    pub origin: String,
    /// Why: a read error, a parse error, or the validation errors as the API words them.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.reason)
    }
}

/// A source's current problems (replaced after every listing), shared with whoever wants to
/// show them.
#[derive(Clone, Debug, Default)]
pub struct Problems(Arc<Mutex<Vec<Problem>>>);

impl Problems {
    /// The problems of the latest listing.
    #[cfg(test)]
    pub fn current(&self) -> Vec<Problem> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the set; logs what is new (once, not at every re-list) and what cleared.
    fn replace(&self, source: &str, problems: Vec<Problem>) {
        let mut cur = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let old: BTreeSet<&Problem> = cur.iter().collect();
        let new: BTreeSet<&Problem> = problems.iter().collect();
        for p in new.difference(&old) {
            tracing::warn!(source, origin = %p.origin, reason = %p.reason, "skipping manifest");
        }
        for p in old.difference(&new) {
            tracing::info!(source, origin = %p.origin, "manifest problem cleared");
        }
        *cur = problems;
    }
}

/// The valid static pods of one manifest, each with its identity (see
/// [`manifest::static_pod`]), and the pods skipped; `Err` when nothing in it parses.
/// `origin` is the file or URL, `hash_prefix` `file` or `url`.
fn decode(
    bytes: &[u8],
    source: &str,
    hash_prefix: &str,
    origin: &str,
    node_name: &str,
) -> Result<(Vec<Pod>, Vec<Problem>), Problem> {
    let problem = |reason: String| Problem {
        origin: origin.to_string(),
        reason,
    };
    let parsed = manifest::parse(bytes).map_err(|e| problem(e.to_string()))?;
    let hash_input = format!("{hash_prefix}:{origin}");
    let mut pods = Vec::new();
    let mut problems = Vec::new();
    for pod in parsed {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let pod = manifest::static_pod(pod, source, node_name, hash_input.as_bytes());
        match validate::validate(&pod) {
            Ok(()) => pods.push(pod),
            Err(errs) => problems.push(problem(format!(
                "invalid pod {name:?}: {}",
                validate::summary(&errs)
            ))),
        }
    }
    Ok((pods, problems))
}

/// `namespace/name` (what must be unique among a source's pods).
fn full_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// Keeps the first pod of each full name (pods come in file order); later ones are problems,
/// as the Go kubelet reports them (`metadata.name: Duplicate value`).
fn dedupe(pods: Vec<(String, Pod)>, problems: &mut Vec<Problem>) -> Vec<Pod> {
    let mut names = BTreeSet::new();
    let mut out = Vec::new();
    for (origin, pod) in pods {
        let name = full_name(&pod);
        if names.insert(name) {
            out.push(pod);
        } else {
            problems.push(Problem {
                origin,
                reason: format!(
                    "metadata.name: Duplicate value: {:?}",
                    pod.metadata.name.as_deref().unwrap_or("")
                ),
            });
        }
    }
    out
}

/// The pods with their `config.seen` stamps removed: what "the set changed" compares.
fn without_seen(pods: &[Pod]) -> Vec<Pod> {
    pods.iter()
        .cloned()
        .map(|mut p| {
            if let Some(a) = &mut p.metadata.annotations {
                a.remove(labels::CONFIG_SEEN);
            }
            p
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;

    /// A valid pod manifest named `name` running `image`.
    pub(crate) fn manifest(name: &str, image: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers: [{{name: c, image: \"{image}\"}}]\n"
        )
    }

    /// Waits (up to 10 s, the machines are shared) until `f` holds.
    pub(crate) async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !f() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    #[test]
    fn decode_reports_and_skips_invalid_pods() {
        let two = format!(
            "{}---\n{}",
            manifest("good", "busybox:1"),
            manifest("bad", "")
        );
        let (pods, problems) =
            decode(two.as_bytes(), FILE_SOURCE, "file", "/p/two.yaml", "n").unwrap();
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].metadata.name.as_deref(), Some("good-n"));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].origin, "/p/two.yaml");
        assert!(
            problems[0]
                .reason
                .contains("invalid pod \"bad\": spec.containers[0].image: Required value"),
            "{problems:?}"
        );
        let problem = decode(b"{{{", FILE_SOURCE, "file", "/p/x", "n").unwrap_err();
        assert_eq!(problem.origin, "/p/x");
        assert!(problem.reason.starts_with("invalid JSON"), "{problem:?}");
    }

    #[test]
    fn duplicates_keep_the_first() {
        let (a, _) = decode(
            manifest("web", "busybox:1").as_bytes(),
            FILE_SOURCE,
            "file",
            "/p/a",
            "n",
        )
        .unwrap();
        let (b, _) = decode(
            manifest("web", "busybox:2").as_bytes(),
            FILE_SOURCE,
            "file",
            "/p/b",
            "n",
        )
        .unwrap();
        let mut problems = Vec::new();
        let pods = dedupe(
            vec![("/p/a".into(), a[0].clone()), ("/p/b".into(), b[0].clone())],
            &mut problems,
        );
        assert_eq!(pods, a);
        assert_eq!(problems[0].origin, "/p/b");
        assert!(problems[0].reason.contains("Duplicate value: \"web-n\""));
    }
}
