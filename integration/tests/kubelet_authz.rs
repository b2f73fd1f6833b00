//! The kubelet API's authorization matrix (issue #33): every endpoint of the secure port ×
//! five callers, on a node configured as kubeadm configures it (client certificates of the
//! cluster CA, tokens through TokenReview, anonymous off, every request authorized through a
//! SubjectAccessReview to the API server), with the API server's RBAC played by a policy
//! that grants each caller what its name says. The table is the Go kubelet's
//! (`pkg/kubelet/server/auth.go`, with `KubeletFineGrainedAuthz`, on by default since 1.33):
//! each path maps to `nodes/<subresource>`, fine-grained ones falling back to `nodes/proxy`
//! for `/pods`, `/runningpods/`, `/healthz` and `/configz` only. The README's security
//! section shows the same table.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::sync::{Arc, Mutex};

use ferrolet_integration::apiserver::SarRequest;
use ferrolet_integration::cluster::{ClusterOptions, Prepared};

/// What a caller gets from an endpoint: refused before authorization (no credentials), denied
/// by it, or let through to the handler (whatever the handler then answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// 401.
    Unauthenticated,
    /// 403 with Go's `Forbidden (…)`.
    Denied,
    /// Any other status: the request reached its handler.
    Allowed,
}
use Outcome::{Allowed as A, Denied as D, Unauthenticated as U};

/// The callers, in the table's column order.
const CALLERS: [&str; 5] = [
    "anonymous",
    "node",
    "nodes/stats only",
    "nodes/proxy",
    "system:masters",
];

/// (method, path with `{pod}` for the test pod's name, the subresources asked in order,
/// the outcome per caller in [`CALLERS`] order).
type Row = (
    &'static str,
    &'static str,
    &'static [&'static str],
    [Outcome; 5],
);

/// The matrix.
const MATRIX: &[Row] = &[
    ("GET", "/pods", &["pods", "proxy"], [U, D, D, A, A]),
    ("GET", "/runningpods/", &["pods", "proxy"], [U, D, D, A, A]),
    ("GET", "/healthz", &["healthz", "proxy"], [U, D, D, A, A]),
    ("GET", "/configz", &["configz", "proxy"], [U, D, D, A, A]),
    (
        "GET",
        "/debug/pods/default/{pod}/timeline",
        &["pods", "proxy"],
        [U, D, D, A, A],
    ),
    ("GET", "/stats/summary", &["stats"], [U, D, A, D, A]),
    ("GET", "/stats/", &["stats"], [U, D, A, D, A]),
    ("GET", "/metrics", &["metrics"], [U, D, D, D, A]),
    ("GET", "/metrics/cadvisor", &["metrics"], [U, D, D, D, A]),
    ("GET", "/metrics/probes", &["metrics"], [U, D, D, D, A]),
    ("GET", "/metrics/resource", &["metrics"], [U, D, D, D, A]),
    ("GET", "/logs/", &["log"], [U, D, D, D, A]),
    (
        "GET",
        "/containerLogs/default/{pod}/main",
        &["proxy"],
        [U, D, D, A, A],
    ),
    (
        "POST",
        "/exec/default/{pod}/main?command=true&output=1",
        &["proxy"],
        [U, D, D, A, A],
    ),
    (
        "GET",
        "/exec/default/{pod}/main?command=true&output=1",
        &["proxy"],
        [U, D, D, A, A],
    ),
    (
        "POST",
        "/attach/default/{pod}/main?output=1",
        &["proxy"],
        [U, D, D, A, A],
    ),
    (
        "POST",
        "/portForward/default/{pod}",
        &["proxy"],
        [U, D, D, A, A],
    ),
    (
        "POST",
        "/run/default/{pod}/main?cmd=true",
        &["proxy"],
        [U, D, D, A, A],
    ),
    (
        "POST",
        "/checkpoint/default/{pod}/main",
        &["checkpoint"],
        [U, D, D, D, A],
    ),
    ("GET", "/spec/", &["proxy"], [U, D, D, A, A]),
    ("GET", "/nothing-here", &["proxy"], [U, D, D, A, A]),
];

/// The API verb of a method, as the kubelet sends it in its review.
fn verb(method: &str) -> &'static str {
    match method {
        "GET" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_each_caller_as_the_go_kubelet_does() {
    let prepared = Prepared::new("authz-matrix", ClusterOptions::default()).await;
    prepared.trust_cluster_clients("Webhook");
    // RBAC as a cluster would grant it: nodes/stats to the monitoring user, nodes/proxy to
    // the other, everything to system:masters, nothing of the kubelet API to a node.
    let reviews: Arc<Mutex<Vec<SarRequest>>> = Arc::default();
    let seen = reviews.clone();
    prepared.api.set_sar_policy(move |r| {
        seen.lock().unwrap().push(r.clone());
        r.resource == "nodes"
            && (r.groups.iter().any(|g| g == "system:masters")
                || (r.user == "stats-reader" && r.subresource == "stats")
                || (r.user == "proxy-user" && r.subresource == "proxy"))
    });
    let node_name = prepared.node_name.clone();
    let kubelet = prepared.start_kubelet().await;
    let node = prepared.into_node(kubelet);
    node.run_idle_pod("box").await;

    let identity = |user: &str, groups: &[&str]| {
        let (cert, key) = node.api.client_cert(user, groups).unwrap();
        Some(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap())
    };
    let callers = [
        None,
        identity(&format!("system:node:{node_name}"), &["system:nodes"]),
        identity("stats-reader", &[]),
        identity("proxy-user", &[]),
        identity("kube-apiserver-kubelet-client", &["system:masters"]),
    ];
    let clients: Vec<reqwest::Client> = callers
        .into_iter()
        .map(|id| {
            let mut b = reqwest::Client::builder()
                .use_rustls_tls()
                .danger_accept_invalid_certs(true)
                .timeout(std::time::Duration::from_secs(20));
            if let Some(id) = id {
                b = b.identity(id);
            }
            b.build().unwrap()
        })
        .collect();

    let mut failures = Vec::new();
    for (method, path, subresources, expected) in MATRIX {
        let path = path.replace("{pod}", "box");
        for (c, client) in clients.iter().enumerate() {
            let url = format!("https://{}{path}", node.node.secure_addr());
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            reviews.lock().unwrap().clear();
            let (status, body) = match client.request(method.clone(), &url).send().await {
                Ok(r) => {
                    let status = r.status().as_u16();
                    (status, r.text().await.unwrap_or_default())
                }
                Err(e) => (0, e.to_string()),
            };
            let got = match status {
                401 => U,
                403 => D,
                _ => A,
            };
            if got != expected[c] {
                failures.push(format!(
                    "{method} {path} as {}: {status} {body:?}, expected {:?}",
                    CALLERS[c], expected[c]
                ));
                continue;
            }
            if got == D {
                // Go's message names the user, the verb and every subresource asked.
                let want = format!(
                    "verb={}, resource=nodes, subresource(s)=[{}])",
                    verb(method.as_str()),
                    subresources.join(" ")
                );
                if !body.contains(&want) {
                    failures.push(format!(
                        "{method} {path} as {}: {body:?} lacks {want:?}",
                        CALLERS[c]
                    ));
                }
            }
            if got != U {
                // The reviews the kubelet asked for: the node by name, the method's verb, the
                // subresources in order (stopping at the first one allowed).
                let asked: Vec<String> = reviews
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|r| {
                        r.resource == "nodes"
                            && r.name == node_name
                            && r.verb == verb(method.as_str())
                    })
                    .map(|r| r.subresource.clone())
                    .collect();
                // Decisions are cached per subresource (a denied `proxy` from an earlier row is
                // not asked again), so what was asked is the table's list, in order, less what
                // was cached; an allowed request stops at the first subresource allowed.
                let mut rest = subresources.iter();
                let in_order = asked.iter().all(|a| rest.any(|s| s == a));
                if !in_order {
                    failures.push(format!(
                        "{method} {path} as {}: reviews for {asked:?}, expected (a part of) {subresources:?}",
                        CALLERS[c]
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} cell(s) differ from the Go kubelet's table:\n  - {}",
        failures.len(),
        failures.join("\n  - ")
    );
    node.teardown().await;
}

#[test]
fn the_matrix_covers_every_endpoint_the_issue_names() {
    for endpoint in [
        "/pods",
        "/runningpods",
        "/stats",
        "/metrics",
        "/logs",
        "/containerLogs",
        "/exec",
        "/attach",
        "/portForward",
        "/run",
        "/configz",
        "/debug",
        "/checkpoint",
        "/healthz",
    ] {
        assert!(
            MATRIX.iter().any(|(_, p, _, _)| p.starts_with(endpoint)),
            "{endpoint} missing"
        );
    }
}
