//! Issue #17 acceptance: the volumes and environment cluster pods use — the default
//! `kube-api-access` projected volume (a bound service-account token, the cluster CA, the
//! namespace), secret and configMap volumes that follow updates atomically, `env`/`envFrom`
//! from configMaps and secrets, a pod waiting for a missing secret, and the volume manager's
//! teardown and restart behaviour — on real containerd through ferrolet-cri, against the
//! in-memory test API server. Each test ends with the node's teardown and leak checks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use ferrolet_integration::apiserver::ApiServerOptions;
use ferrolet_integration::cluster::{ClusterNode, ClusterOptions, NAMESPACE};
use ferrolet_integration::kubelet::{IDLE, image};
use serde_json::{Value, json};

/// The projected volume the ServiceAccount admission plugin adds to every pod.
fn kube_api_access(expiration_seconds: i64) -> Value {
    json!({
        "name": "kube-api-access-x7k2p",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": expiration_seconds, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    })
}

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A one-container busybox pod running `script` with `volumes` mounted at `/v/<name>`.
fn pod_with(name: &str, script: &str, volumes: Vec<Value>) -> Value {
    let mounts: Vec<Value> = volumes
        .iter()
        .map(|v| {
            let n = v["name"].as_str().unwrap();
            let path = if n.starts_with("kube-api-access") {
                SA_DIR.to_string()
            } else {
                format!("/v/{n}")
            };
            json!({"name": n, "mountPath": path, "readOnly": true})
        })
        .collect();
    json!({
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "serviceAccountName": "default",
            "containers": [{
                "name": "main",
                "image": image("busybox"),
                "command": ["sh", "-c", script],
                "volumeMounts": mounts,
            }],
            "volumes": volumes,
        },
    })
}

async fn create_basics(node: &ClusterNode) {
    let api = &node.api;
    let _ = api
        .create(
            "serviceaccounts",
            NAMESPACE,
            json!({"metadata": {"name": "default"}}),
        )
        .await;
    api.create(
        "configmaps",
        NAMESPACE,
        json!({"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": node.api.ca_pem()}}),
    )
    .await
    .unwrap();
}

async fn main_container(node: &ClusterNode, uid: &str) -> String {
    let (_, containers) = node.node.runtime_objects(uid).await;
    containers
        .iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == "main"))
        .map(|c| c.id.clone())
        .unwrap_or_else(|| panic!("no main container for pod {uid}"))
}

async fn exec(node: &ClusterNode, id: &str, cmd: &[&str]) -> String {
    node.node.node.api().await.exec_ok(id, cmd).await
}

fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap().to_string()
}

/// The claims of a JWT, unverified.
fn claims(token: &str) -> Value {
    let payload = token
        .trim()
        .split('.')
        .nth(1)
        .expect("a JWT has three parts");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Mount points (with their mount ids) under `dir`, from the host's mountinfo.
fn mounts_under(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let point = PathBuf::from(f.get(4)?);
            point
                .starts_with(dir)
                .then(|| (point, f[0].parse().unwrap_or(0)))
        })
        .collect()
}

/// `..data` targets of every atomic-writer volume under `dir`.
fn data_links(dir: &Path) -> BTreeMap<PathBuf, PathBuf> {
    let mut out = BTreeMap::new();
    let Ok(plugins) = std::fs::read_dir(dir) else {
        return out;
    };
    for plugin in plugins.flatten() {
        for vol in std::fs::read_dir(plugin.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(target) = std::fs::read_link(vol.path().join("..data")) {
                out.insert(vol.path(), target);
            }
        }
    }
    out
}

async fn wait_for<T>(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_service_account_volume_has_a_bound_renewed_token_the_ca_and_the_namespace() {
    // Tokens as short as 12 s may be asked for (a real API server's minimum is 10 minutes),
    // so the renewal is seen within the test.
    let opts = ClusterOptions {
        api: ApiServerOptions {
            min_token_expiration: Duration::from_secs(10),
            ..Default::default()
        },
        ..Default::default()
    };
    let node = ClusterNode::start_with("vol-sa", opts).await;
    create_basics(&node).await;
    node.create_pod(pod_with("sa", IDLE, vec![kube_api_access(3607)]))
        .await;
    let p = node.wait_api_running("sa").await;
    let id = main_container(&node, &uid(&p)).await;

    let token = exec(&node, &id, &["cat", &format!("{SA_DIR}/token")]).await;
    let c = claims(&token);
    assert_eq!(c["kubernetes.io"]["pod"]["name"], "sa", "{c:#}");
    assert_eq!(c["kubernetes.io"]["pod"]["uid"], uid(&p).as_str(), "{c:#}");
    assert_eq!(c["kubernetes.io"]["namespace"], NAMESPACE);
    assert_eq!(
        c["sub"],
        format!("system:serviceaccount:{NAMESPACE}:default")
    );
    let ca = exec(&node, &id, &["cat", &format!("{SA_DIR}/ca.crt")]).await;
    assert_eq!(ca, node.api.ca_pem());
    let ns = exec(&node, &id, &["cat", &format!("{SA_DIR}/namespace")]).await;
    assert_eq!(ns, NAMESPACE);
    // The token is on a tmpfs, never on disk.
    let pod_dir = node.node.root_dir().join("pods").join(uid(&p));
    let mounts = mounts_under(&pod_dir.join("volumes"));
    assert!(
        mounts
            .keys()
            .any(|m| m.ends_with("kubernetes.io~projected/kube-api-access-x7k2p")),
        "projected volume not on a tmpfs: {mounts:?}"
    );

    // A token of 12 s: the kubelet renews it at 80 % of its life (less Go's jitter), and the
    // file follows before the old token expires.
    node.create_pod(pod_with("short", IDLE, vec![kube_api_access(12)]))
        .await;
    let p = node.wait_api_running("short").await;
    let id = main_container(&node, &uid(&p)).await;
    let first = exec(&node, &id, &["cat", &format!("{SA_DIR}/token")]).await;
    let first_exp = claims(&first)["exp"].as_i64().unwrap();
    let renewed = wait_for("a renewed token", Duration::from_secs(30), async || {
        let t = exec(&node, &id, &["cat", &format!("{SA_DIR}/token")]).await;
        (t != first).then_some(t)
    })
    .await;
    let now = jiff::Timestamp::now().as_second();
    assert!(
        now < first_exp,
        "the token was renewed only after the old one expired ({now} ≥ {first_exp})"
    );
    assert!(claims(&renewed)["exp"].as_i64().unwrap() > first_exp);
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_and_config_map_volumes_follow_updates_atomically() {
    let node = ClusterNode::start("vol-upd").await;
    let api = &node.api;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    api.create(
        "secrets",
        NAMESPACE,
        json!({"metadata": {"name": "creds"}, "data": {"user": b64("alice"), "pass": b64("s3cret"), "unused": b64("x")}}),
    )
    .await
    .unwrap();
    api.create(
        "configmaps",
        NAMESPACE,
        json!({"metadata": {"name": "settings"}, "data": {"a": "v1", "b": "v1"}}),
    )
    .await
    .unwrap();
    // A reader loop: a and b are always updated together. Reading both through one resolution
    // of `..data` (the directory the link named when the reader entered it) must never show
    // them differ, nor a value cut short. (A read whose directory was removed under it fails
    // and is skipped: the next round sees the new version.)
    let reader = "check() { [ \"$1\" = \"$2\" ] || echo \"$1/$2\" >> /tmp/mixed; \
                  case $1 in v[0-9]) : > /tmp/seen-$1 ;; *) echo \"torn $1\" >> /tmp/mixed ;; esac; }; \
                  while true; do (cd /v/cfg/..data 2>/dev/null && a=$(cat a 2>/dev/null) && \
                  b=$(cat b 2>/dev/null) && check \"$a\" \"$b\"); done";
    let pod = pod_with(
        "upd",
        reader,
        vec![
            json!({"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400,
                "items": [{"key": "user", "path": "id/user"}, {"key": "pass", "path": "pass", "mode": 0o440}]}}),
            json!({"name": "cfg", "configMap": {"name": "settings"}}),
        ],
    );
    node.create_pod(pod).await;
    let p = node.wait_api_running("upd").await;
    let id = main_container(&node, &uid(&p)).await;
    assert_eq!(exec(&node, &id, &["cat", "/v/sec/id/user"]).await, "alice");
    assert_eq!(exec(&node, &id, &["cat", "/v/sec/pass"]).await, "s3cret");
    assert_eq!(
        exec(
            &node,
            &id,
            &["stat", "-L", "-c", "%a", "/v/sec/id/user", "/v/sec/pass"]
        )
        .await,
        "400\n440\n"
    );
    let listing = exec(&node, &id, &["ls", "/v/sec"]).await;
    assert!(!listing.contains("unused"), "{listing}");

    for round in 2..=6 {
        let v = format!("v{round}");
        let mut cm = api.get("configmaps", NAMESPACE, "settings").await.unwrap();
        cm["data"] = json!({"a": v, "b": v});
        api.update("configmaps", NAMESPACE, "settings", cm)
            .await
            .unwrap();
        let started = Instant::now();
        wait_for(
            &format!("configMap update {v}"),
            Duration::from_secs(90),
            async || {
                let seen = exec(&node, &id, &["cat", "/v/cfg/a"]).await;
                (seen == v).then_some(())
            },
        )
        .await;
        eprintln!(
            "configMap {v} seen in the pod after {:?}",
            started.elapsed()
        );
    }
    let mut secret = api.get("secrets", NAMESPACE, "creds").await.unwrap();
    secret["data"]["pass"] = json!(b64("n3w"));
    api.update("secrets", NAMESPACE, "creds", secret)
        .await
        .unwrap();
    wait_for("secret update", Duration::from_secs(90), async || {
        (exec(&node, &id, &["cat", "/v/sec/pass"]).await == "n3w").then_some(())
    })
    .await;
    let mixed = exec(
        &node,
        &id,
        &["sh", "-c", "cat /tmp/mixed 2>/dev/null; true"],
    )
    .await;
    assert!(
        mixed.is_empty(),
        "a reader saw a half-written update: {mixed}"
    );
    // The reader really read along: it saw most of the versions go by.
    let seen = exec(&node, &id, &["sh", "-c", "ls /tmp | grep -c seen-"]).await;
    assert!(
        seen.trim().parse::<u32>().unwrap() >= 4,
        "versions seen: {seen}"
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_from_and_value_from_resolve_and_a_missing_secret_waits_then_starts() {
    let node = ClusterNode::start("vol-env").await;
    let api = &node.api;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    api.create(
        "configmaps",
        NAMESPACE,
        json!({"metadata": {"name": "app"}, "data": {"MODE": "fast", "LEVEL": "3"}}),
    )
    .await
    .unwrap();
    api.create(
        "secrets",
        NAMESPACE,
        // `1BAD` is no valid variable name without a prefix: skipped, with an event.
        json!({"metadata": {"name": "db"}, "data": {"PASSWORD": b64("pw"), "1BAD": b64("x")}}),
    )
    .await
    .unwrap();
    let mut pod = pod_with("env", IDLE, vec![]);
    pod["spec"]["containers"][0]["envFrom"] = json!([
        {"configMapRef": {"name": "app"}, "prefix": "APP_"},
        {"secretRef": {"name": "db"}},
        {"configMapRef": {"name": "absent", "optional": true}},
    ]);
    pod["spec"]["containers"][0]["env"] = json!([
        {"name": "ONE", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "LEVEL"}}},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "PASSWORD"}}},
        {"name": "COMBINED", "value": "$(APP_MODE)-$(ONE)"},
        {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": true}}},
    ]);
    node.create_pod(pod).await;
    let p = node.wait_api_running("env").await;
    let id = main_container(&node, &uid(&p)).await;
    let env = exec(&node, &id, &["env"]).await;
    for want in [
        "APP_MODE=fast",
        "APP_LEVEL=3",
        "PASSWORD=pw",
        "ONE=3",
        "PW=pw",
        "COMBINED=fast-3",
    ] {
        assert!(env.lines().any(|l| l == want), "{want} missing in:\n{env}");
    }
    assert!(!env.contains("1BAD"), "{env}");
    assert!(!env.lines().any(|l| l.starts_with("OPT=")), "{env}");
    let events = node.pod_events("env").await;
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "InvalidEnvironmentVariableNames"),
        "{events:#?}"
    );

    // A secret that does not exist yet: a volume waits in ContainerCreating, an env
    // reference in CreateContainerConfigError, each with the Go kubelet's message.
    let vol = pod_with(
        "waits-vol",
        IDLE,
        vec![json!({"name": "later", "secret": {"secretName": "later"}})],
    );
    node.create_pod(vol).await;
    let mut env_pod = pod_with("waits-env", IDLE, vec![]);
    env_pod["spec"]["containers"][0]["env"] =
        json!([{"name": "K", "valueFrom": {"secretKeyRef": {"name": "later2", "key": "k"}}}]);
    node.create_pod(env_pod).await;
    let waiting = |reason: &'static str| {
        move |p: &Value| p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == reason
    };
    node.wait_api_pod(
        "waits-env",
        "CreateContainerConfigError",
        waiting("CreateContainerConfigError"),
        Duration::from_secs(30),
    )
    .await;
    let p = node.api_pod("waits-env").await.unwrap();
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "secret \"later2\" not found",
        "{p:#}"
    );
    let events = wait_for("FailedMount", Duration::from_secs(30), async || {
        let ev = node.pod_events("waits-vol").await;
        ev.iter()
            .any(|e| e["reason"] == "FailedMount")
            .then_some(ev)
    })
    .await;
    let failed = events
        .iter()
        .find(|e| e["reason"] == "FailedMount")
        .unwrap();
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("secret \"later\" not found"),
        "{failed:#}"
    );
    let p = node.api_pod("waits-vol").await.unwrap();
    assert_eq!(p["status"]["phase"], "Pending", "{p:#}");

    api.create(
        "secrets",
        NAMESPACE,
        json!({"metadata": {"name": "later"}, "data": {"k": b64("v")}}),
    )
    .await
    .unwrap();
    api.create(
        "secrets",
        NAMESPACE,
        json!({"metadata": {"name": "later2"}, "data": {"k": b64("v2")}}),
    )
    .await
    .unwrap();
    let started = Instant::now();
    node.wait_api_running("waits-vol").await;
    node.wait_api_running("waits-env").await;
    eprintln!(
        "both waiting pods Running {:?} after their secrets appeared",
        started.elapsed()
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_ferrolet_remounts_nothing_needlessly_and_cleans_up_pods_deleted_meanwhile() {
    let node = ClusterNode::start("vol-kill").await;
    create_basics(&node).await;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    node.api
        .create(
            "secrets",
            NAMESPACE,
            json!({"metadata": {"name": "s"}, "data": {"k": b64("v")}}),
        )
        .await
        .unwrap();
    node.api
        .create(
            "configmaps",
            NAMESPACE,
            json!({"metadata": {"name": "c"}, "data": {"k": "v"}}),
        )
        .await
        .unwrap();
    let names: Vec<String> = (0..5).map(|i| format!("p{i}")).collect();
    for name in &names {
        node.create_pod(pod_with(
            name,
            IDLE,
            vec![
                kube_api_access(3607),
                json!({"name": "sec", "secret": {"secretName": "s"}}),
                json!({"name": "cfg", "configMap": {"name": "c"}}),
                json!({"name": "labels", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}),
            ],
        ))
        .await;
    }
    let mut uids = BTreeMap::new();
    for name in &names {
        uids.insert(name.clone(), uid(&node.wait_api_running(name).await));
    }
    let pods_dir = node.node.root_dir().join("pods");
    let mounts_before = mounts_under(&pods_dir);
    assert_eq!(
        mounts_before.len(),
        10,
        "2 tmpfs (projected, secret) per pod: {mounts_before:?}"
    );
    let links_before: BTreeMap<String, _> = uids
        .iter()
        .map(|(n, u)| (n.clone(), data_links(&pods_dir.join(u).join("volumes"))))
        .collect();
    for links in links_before.values() {
        assert_eq!(links.len(), 4, "{links:?}");
    }

    node.node.kill_kubelet();
    // Deleted while ferrolet is down: its volumes go when ferrolet is back.
    node.api.delete("pods", NAMESPACE, "p4").await.unwrap();
    node.node.restart_kubelet().await;
    node.wait_api_pod_gone("p4", Duration::from_secs(60)).await;
    let gone = pods_dir.join(&uids["p4"]);
    wait_for(
        "p4's pod dir removed",
        Duration::from_secs(60),
        async || (!gone.exists()).then_some(()),
    )
    .await;
    for name in &names[..4] {
        node.wait_api_running(name).await;
    }
    // A sync or two after the restart: still the same mounts and the same `..data` targets.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mounts_after = mounts_under(&pods_dir);
    let kept: BTreeMap<_, _> = mounts_before
        .iter()
        .filter(|(p, _)| !p.starts_with(&gone))
        .map(|(p, id)| (p.clone(), *id))
        .collect();
    assert_eq!(
        mounts_after, kept,
        "volumes were remounted after the restart"
    );
    // Nothing rewritten but the service-account volume: its token manager's cache died with
    // the process, so it asks for a new token and writes it (as the Go kubelet does).
    for name in &names[..4] {
        let links = data_links(&pods_dir.join(&uids[name]).join("volumes"));
        let unchanged = |l: &BTreeMap<PathBuf, PathBuf>| -> BTreeMap<PathBuf, PathBuf> {
            l.iter()
                .filter(|(p, _)| !p.ends_with("kubernetes.io~projected/kube-api-access-x7k2p"))
                .map(|(p, t)| (p.clone(), t.clone()))
                .collect()
        };
        assert_eq!(
            unchanged(&links),
            unchanged(&links_before[name]),
            "{name}'s volumes were rewritten"
        );
    }
    // The same pods and containers as before, nothing doubled.
    for name in &names[..4] {
        let (sandboxes, containers) = node.node.runtime_objects(&uids[name]).await;
        assert_eq!((sandboxes.len(), containers.len()), (1, 1), "{name}");
    }

    // Deleting every pod unmounts every volume and drops every object watch.
    for name in &names[..4] {
        node.delete_pod(name).await;
    }
    for name in &names[..4] {
        node.wait_api_pod_gone(name, Duration::from_secs(60)).await;
    }
    wait_for("pod dirs removed", Duration::from_secs(60), async || {
        let left: Vec<_> = std::fs::read_dir(&pods_dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        left.is_empty().then_some(())
    })
    .await;
    assert!(mounts_under(&pods_dir).is_empty());
    wait_for(
        "object watches stopped",
        Duration::from_secs(30),
        async || {
            let left: Vec<_> = node
                .api
                .active_watches()
                .into_iter()
                .filter(|w| w.resource == "secrets" || w.resource == "configmaps")
                .collect();
            left.is_empty().then_some(())
        },
    )
    .await;
    node.teardown().await;
}
