//! The object cache against the in-memory test API server: which watches run, how many
//! requests each strategy makes, and what reads return.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use ferrolet_integration::apiserver::{ActiveWatch, ApiServerOptions, TestApiServer};
use serde_json::json;

use super::*;
use crate::objects::ObjectKind;

const NS: &str = "ns";

async fn server() -> TestApiServer {
    TestApiServer::start(ApiServerOptions::default())
        .await
        .unwrap()
}

async fn cache(server: &TestApiServer, options: CacheOptions) -> Arc<ObjectCache> {
    let client = server
        .kube_client("system:node:n1", &["system:nodes"])
        .await
        .unwrap();
    ObjectCache::new(ApiHandle::new(client, "n1"), options)
}

fn options(strategy: Strategy) -> CacheOptions {
    CacheOptions {
        strategy,
        ..CacheOptions::default()
    }
}

/// A pod of `uid` mounting `secrets` and reading `config_maps` into its environment.
fn pod(uid: &str, secrets: &[&str], config_maps: &[&str]) -> Pod {
    let volumes: Vec<_> = secrets
        .iter()
        .map(|s| json!({"name": format!("v-{s}"), "secret": {"secretName": s}}))
        .collect();
    let env_from: Vec<_> = config_maps
        .iter()
        .map(|c| json!({"configMapRef": {"name": c}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("pod-{uid}"), "namespace": NS, "uid": uid},
        "spec": {"volumes": volumes, "containers": [{"name": "c", "image": "i", "envFrom": env_from}]},
    }))
    .unwrap()
}

fn secret(name: &str, value: &str) -> serde_json::Value {
    json!({"metadata": {"name": name}, "data": {"k": base64(value)}})
}

fn base64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn secret_value(s: &Secret) -> String {
    String::from_utf8(s.data.as_ref().unwrap()["k"].0.clone()).unwrap()
}

fn watch_of(resource: &str, name: &str) -> ActiveWatch {
    ActiveWatch {
        resource: resource.into(),
        namespace: Some(NS.into()),
        field_selector: format!("metadata.name={name}"),
        label_selector: String::new(),
    }
}

/// Waits (up to 10 s) until the server serves exactly `want`.
async fn wait_watches(server: &TestApiServer, want: &[ActiveWatch]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = server.active_watches();
        if now == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "watches {now:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn counts(server: &TestApiServer) -> BTreeMap<String, u64> {
    server.request_counts()
}

fn count(server: &TestApiServer, verb: &str) -> u64 {
    counts(server).get(verb).copied().unwrap_or(0)
}

async fn next_change(rx: &mut broadcast::Receiver<ObjectChange>) -> ObjectChange {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a change within 10 s")
        .unwrap()
}

fn change(kind: ObjectKind, name: &str) -> ObjectChange {
    ObjectChange {
        kind,
        namespace: NS.into(),
        name: name.into(),
    }
}

#[tokio::test]
async fn watches_follow_registered_pods_and_serve_reads() {
    let server = server().await;
    server
        .create("secrets", NS, secret("s1", "one"))
        .await
        .unwrap();
    let cache = cache(&server, options(Strategy::Watch)).await;
    let mut changes = cache.changes();
    let p1 = pod("u1", &["s1"], &["cm1"]);
    cache.register_pod(&p1);
    wait_watches(
        &server,
        &[watch_of("configmaps", "cm1"), watch_of("secrets", "s1")],
    )
    .await;

    // Reads come from the watches: no GET.
    let before = counts(&server);
    let s = cache.secret(NS, "s1").await.unwrap().unwrap();
    assert_eq!(secret_value(&s), "one");
    assert_eq!(cache.config_map(NS, "cm1").await.unwrap(), None);
    assert_eq!(counts(&server), before, "reads served from the watch");

    // Changes are announced and read.
    server
        .update("secrets", NS, "s1", secret("s1", "two"))
        .await
        .unwrap();
    assert_eq!(
        next_change(&mut changes).await,
        change(ObjectKind::Secret, "s1")
    );
    let s = cache.secret(NS, "s1").await.unwrap().unwrap();
    assert_eq!(secret_value(&s), "two");
    // A missing object appears.
    server
        .create(
            "configmaps",
            NS,
            json!({"metadata": {"name": "cm1"}, "data": {"a": "b"}}),
        )
        .await
        .unwrap();
    assert_eq!(
        next_change(&mut changes).await,
        change(ObjectKind::ConfigMap, "cm1")
    );
    let cm = cache.config_map(NS, "cm1").await.unwrap().unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["a"], "b");
    // And goes.
    server.delete("secrets", NS, "s1").await.unwrap();
    assert_eq!(
        next_change(&mut changes).await,
        change(ObjectKind::Secret, "s1")
    );
    assert_eq!(cache.secret(NS, "s1").await.unwrap(), None);
    assert_eq!(
        count(&server, "get"),
        before.get("get").copied().unwrap_or(0)
    );

    // A second pod shares the secret's watch; the first pod's going stops only the
    // configMap's; the last pod's going stops everything.
    let p2 = pod("u2", &["s1"], &[]);
    cache.register_pod(&p2);
    cache.unregister_pod(&p1);
    wait_watches(&server, &[watch_of("secrets", "s1")]).await;
    assert_eq!(
        cache.watching(),
        [(ObjectKind::Secret, NS.to_string(), "s1".to_string())]
    );
    assert_eq!(
        cache.config_map(NS, "cm1").await,
        Err(ObjectError::NotRegistered {
            namespace: NS.into(),
            name: "cm1".into()
        })
    );
    cache.unregister_pod(&p2);
    wait_watches(&server, &[]).await;
    assert!(cache.watching().is_empty());
}

#[tokio::test]
async fn re_registering_replaces_references_and_a_read_waits_for_the_listing() {
    let server = server().await;
    server
        .create("secrets", NS, secret("s2", "two"))
        .await
        .unwrap();
    let cache = cache(&server, options(Strategy::Watch)).await;
    cache.register_pod(&pod("u1", &["s1"], &[]));
    wait_watches(&server, &[watch_of("secrets", "s1")]).await;
    // The same pod with a new spec: s1 dropped, s2 watched; read at once, before its list.
    cache.register_pod(&pod("u1", &["s2"], &[]));
    let s = cache.secret(NS, "s2").await.unwrap().unwrap();
    assert_eq!(secret_value(&s), "two");
    wait_watches(&server, &[watch_of("secrets", "s2")]).await;
    // Registering the same references again changes nothing.
    let lists = count(&server, "list");
    cache.register_pod(&pod("u1", &["s2"], &[]));
    cache.secret(NS, "s2").await.unwrap().unwrap();
    assert_eq!(count(&server, "list"), lists);
}

#[tokio::test]
async fn immutable_objects_are_not_watched_after_a_read() {
    let server = server().await;
    server
        .create(
            "configmaps",
            NS,
            json!({"metadata": {"name": "fixed"}, "immutable": true, "data": {"a": "1"}}),
        )
        .await
        .unwrap();
    let cache = cache(&server, options(Strategy::Watch)).await;
    cache.register_pod(&pod("u1", &[], &["fixed"]));
    let cm = cache.config_map(NS, "fixed").await.unwrap().unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["a"], "1");
    wait_watches(&server, &[]).await;
    assert!(cache.watching().is_empty());
    let before = counts(&server);
    let cm = cache.config_map(NS, "fixed").await.unwrap().unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["a"], "1");
    assert_eq!(counts(&server), before, "the kept value, no request");
    assert!(server.active_watches().is_empty());
}

#[tokio::test]
async fn idle_watches_stop_and_restart_on_the_next_read() {
    let server = server().await;
    server
        .create("secrets", NS, secret("s1", "one"))
        .await
        .unwrap();
    let cache = cache(&server, options(Strategy::Watch)).await;
    cache.register_pod(&pod("u1", &["s1"], &[]));
    cache.secret(NS, "s1").await.unwrap().unwrap();
    cache
        .secrets
        .stop_idle(Instant::now(), Duration::from_secs(60));
    assert_eq!(cache.watching().len(), 1, "read just now: not idle");
    cache.secrets.stop_idle(
        Instant::now() + Duration::from_secs(61),
        Duration::from_secs(60),
    );
    wait_watches(&server, &[]).await;
    // Changed while unwatched: the next read lists again and sees it.
    server
        .update("secrets", NS, "s1", secret("s1", "two"))
        .await
        .unwrap();
    let s = cache.secret(NS, "s1").await.unwrap().unwrap();
    assert_eq!(secret_value(&s), "two");
    wait_watches(&server, &[watch_of("secrets", "s1")]).await;
}

#[tokio::test]
async fn a_refused_list_fails_the_read_after_the_sync_timeout() {
    let server = server().await;
    server.set_authorizer(|r| r.resource != "secrets");
    let cache = cache(
        &server,
        CacheOptions {
            sync_timeout: Duration::from_millis(1500),
            ..options(Strategy::Watch)
        },
    )
    .await;
    cache.register_pod(&pod("u1", &["s1"], &[]));
    let Err(ObjectError::Api(message)) = cache.secret(NS, "s1").await else {
        panic!("expected a sync failure");
    };
    assert!(
        message.starts_with("failed to sync secret cache: timed out waiting for the condition"),
        "{message}"
    );
    assert!(message.contains("forbidden"), "{message}");
}

#[tokio::test]
async fn get_strategy_asks_on_every_read() {
    let server = server().await;
    server
        .create("secrets", NS, secret("s1", "one"))
        .await
        .unwrap();
    let cache = cache(&server, options(Strategy::Get)).await;
    cache.register_pod(&pod("u1", &["s1"], &[]));
    let gets = count(&server, "get");
    for _ in 0..3 {
        let s = cache.secret(NS, "s1").await.unwrap().unwrap();
        assert_eq!(secret_value(&s), "one");
    }
    // Registered or not, as Go's simple manager.
    assert_eq!(cache.secret(NS, "other").await.unwrap(), None);
    assert_eq!(count(&server, "get"), gets + 4);
    assert!(server.active_watches().is_empty());
    assert_eq!(count(&server, "watch"), 0);
}

#[tokio::test]
async fn cache_strategy_asks_once_per_ttl() {
    let server = server().await;
    server
        .create("secrets", NS, secret("s1", "one"))
        .await
        .unwrap();
    let cache = cache(
        &server,
        CacheOptions {
            ttl: Duration::from_millis(400),
            ..options(Strategy::Cache)
        },
    )
    .await;
    cache.register_pod(&pod("u1", &["s1", "missing"], &[]));
    let gets = count(&server, "get");
    assert_eq!(
        secret_value(&cache.secret(NS, "s1").await.unwrap().unwrap()),
        "one"
    );
    assert_eq!(cache.secret(NS, "missing").await.unwrap(), None);
    server
        .update("secrets", NS, "s1", secret("s1", "two"))
        .await
        .unwrap();
    assert_eq!(
        secret_value(&cache.secret(NS, "s1").await.unwrap().unwrap()),
        "one",
        "fresh for the TTL"
    );
    assert_eq!(cache.secret(NS, "missing").await.unwrap(), None);
    assert_eq!(count(&server, "get"), gets + 2);
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(
        secret_value(&cache.secret(NS, "s1").await.unwrap().unwrap()),
        "two"
    );
    assert_eq!(count(&server, "get"), gets + 3);
    // A failed refresh serves what was known; with nothing known the API's error comes back.
    server.set_authorizer(|r| r.resource != "secrets");
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(
        secret_value(&cache.secret(NS, "s1").await.unwrap().unwrap()),
        "two"
    );
    cache.register_pod(&pod("u2", &["s1"], &[]));
    let Err(ObjectError::Api(message)) = cache.secret(NS, "s1").await else {
        panic!("a registration drops the cached answer; the refused GET is the answer");
    };
    assert!(message.contains("forbidden"), "{message}");
    assert!(matches!(
        cache.secret(NS, "unregistered").await,
        Err(ObjectError::NotRegistered { .. })
    ));
    assert_eq!(count(&server, "watch"), 0);
}
