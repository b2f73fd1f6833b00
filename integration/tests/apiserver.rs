//! The in-memory API server against the kubelet's real client: kube-rs through a kubeconfig
//! the server wrote. Needs neither root nor containerd.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::time::Duration;

use base64::Engine;
use ferrolet_integration::apiserver::{ApiServerOptions, PatchType, TestApiServer};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, Config};
use serde_json::json;

async fn server(options: ApiServerOptions) -> TestApiServer {
    let _ = rustls::crypto::ring::default_provider().install_default();
    TestApiServer::start(options).await.unwrap()
}

async fn client_from(path: &std::path::Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// A client authenticated by a client certificate for `user` in `groups`.
async fn client(server: &TestApiServer, user: &str, groups: &[&str]) -> Client {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path, user, groups).unwrap();
    client_from(&path).await
}

async fn token_client(server: &TestApiServer, token: &str) -> Client {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bootstrap-kubeconfig");
    server.write_token_kubeconfig(&path, token).unwrap();
    client_from(&path).await
}

async fn anonymous_client(server: &TestApiServer) -> Client {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let ca = CertificateDer::from_pem_slice(server.ca_pem().as_bytes()).unwrap();
    let mut config = Config::new(server.url().parse().unwrap());
    config.root_cert = Some(vec![ca.to_vec()]);
    Client::try_from(config).unwrap()
}

fn pod(name: &str, app: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": spec,
    }))
    .unwrap()
}

fn api_code(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn names(pods: &[Pod]) -> Vec<String> {
    let mut n: Vec<String> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    n.sort();
    n
}

#[tokio::test]
async fn crud_selectors_patches_conflicts_and_graceful_delete() {
    let server = server(ApiServerOptions::default()).await;
    let client = client(&server, "kubernetes-admin", &["system:masters"]).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();

    let web = pods
        .create(&pp, &pod("web", "web", Some("n1")))
        .await
        .unwrap();
    let meta = &web.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    let rv: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();
    assert!(rv > 0);
    assert_eq!(
        web.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );
    pods.create(&pp, &pod("db", "db", None)).await.unwrap();
    assert_eq!(
        api_code(
            pods.create(&pp, &pod("web", "web", None))
                .await
                .unwrap_err()
        ),
        (409, "AlreadyExists".into())
    );

    // generateName, and a body namespace that disagrees with the URL.
    let mut generated = pod("", "gen", None);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let generated = pods.create(&pp, &generated).await.unwrap();
    assert!(
        generated
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("gen-")
    );
    let mut elsewhere = pod("x", "x", None);
    elsewhere.metadata.namespace = Some("other".into());
    assert_eq!(
        api_code(pods.create(&pp, &elsewhere).await.unwrap_err()).0,
        400
    );
    let mut nameless = pod("", "x", None);
    nameless.metadata.name = None;
    assert_eq!(
        api_code(pods.create(&pp, &nameless).await.unwrap_err()),
        (422, "Invalid".into())
    );

    let got = pods.get("web").await.unwrap();
    assert_eq!(got.metadata.uid, web.metadata.uid);
    assert_eq!(
        api_code(pods.get("nope").await.unwrap_err()),
        (404, "NotFound".into())
    );

    // Selectors, label and field; a cluster-wide list.
    let list = |l: &str, f: &str| {
        let pods = pods.clone();
        let lp = ListParams::default().labels(l).fields(f);
        async move { names(&pods.list(&lp).await.unwrap().items) }
    };
    assert_eq!(list("app in (web, db)", "").await, ["db", "web"]);
    assert_eq!(list("app=web", "").await, ["web"]);
    assert_eq!(list("app!=web,app!=gen", "").await, ["db"]);
    assert_eq!(list("", "spec.nodeName=n1").await, ["web"]);
    assert_eq!(
        list("app", "metadata.name!=web,status.phase=Pending")
            .await
            .len(),
        2
    );
    assert_eq!(list("!app", "").await.len(), 0);
    let all: Api<Pod> = Api::all(client.clone());
    let listed = all.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(listed.items.len(), 3);
    assert!(
        listed
            .metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= rv
    );

    // Status through the status subresource: merge, then strategic merging conditions by type.
    let status = json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}});
    pods.patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let strategic = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}],
        "podIPs": [{"ip": "10.0.0.5"}]}});
    let patched = pods
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(&strategic),
        )
        .await
        .unwrap();
    let st = patched.status.unwrap();
    assert_eq!(st.phase.as_deref(), Some("Running"));
    let conditions: Vec<(String, String)> = st
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conditions,
        [
            ("Ready".into(), "True".into()),
            ("PodScheduled".into(), "True".into())
        ]
    );
    // The main resource ignores status.
    let relabelled = pods
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"labels": {"tier": "fe"}}, "status": {"phase": "Failed"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(relabelled.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(relabelled.metadata.labels.unwrap()["tier"], "fe");
    // JSON patch; server-side apply is not served.
    let jp: json_patch::Patch = serde_json::from_value(
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]),
    )
    .unwrap();
    let annotated = pods
        .patch("web", &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .unwrap();
    assert_eq!(annotated.metadata.annotations.unwrap()["a"], "b");
    let apply = pods
        .patch(
            "web",
            &PatchParams::apply("test"),
            &Patch::Apply(&json!({"metadata": {"name": "web"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(apply), (415, "UnsupportedMediaType".into()));

    // Optimistic concurrency: a replace with a stale resourceVersion is a Conflict.
    let stale = web.clone();
    assert_eq!(
        api_code(pods.replace("web", &pp, &stale).await.unwrap_err()),
        (409, "Conflict".into())
    );
    let mut fresh = pods.get("web").await.unwrap();
    fresh
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("v".into(), "2".into());
    let replaced = pods.replace("web", &pp, &fresh).await.unwrap();
    assert_ne!(
        replaced.metadata.resource_version,
        fresh.metadata.resource_version
    );
    assert_eq!(replaced.status.unwrap().phase.as_deref(), Some("Running"));

    // Graceful delete of a running pod on a node; preconditions.
    let wrong_uid = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    assert_eq!(
        api_code(pods.delete("web", &wrong_uid).await.unwrap_err()),
        (409, "Conflict".into())
    );
    let right_uid = DeleteParams {
        preconditions: Some(Preconditions {
            uid: web.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let deleting = pods
        .delete("web", &right_uid)
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(30));
    let still = pods.get("web").await.unwrap();
    assert_eq!(still.metadata.deletion_grace_period_seconds, Some(30));
    // A second delete shortens the grace; 0 removes it (as the kubelet's final delete).
    let shorter = pods
        .delete("web", &DeleteParams::default().grace_period(5))
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(shorter.metadata.deletion_grace_period_seconds, Some(5));
    pods.delete("web", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(api_code(pods.get("web").await.unwrap_err()).0, 404);
    // Unscheduled pods go at once.
    pods.delete("db", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(pods.get("db").await.unwrap_err()).0, 404);

    // Finalizers hold an object until an update empties them.
    server
        .create(
            "configmaps",
            "default",
            json!({"metadata": {"name": "cm", "finalizers": ["test/hold"]}, "data": {"k": "v"}}),
        )
        .await
        .unwrap();
    let held = server.delete("configmaps", "default", "cm").await.unwrap();
    assert!(held.pointer("/metadata/deletionTimestamp").is_some());
    server
        .patch(
            "configmaps",
            "default",
            "cm",
            PatchType::Merge,
            &json!({"metadata": {"finalizers": null}}),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        server
            .get("configmaps", "default", "cm")
            .await
            .unwrap_err()
            .code,
        404
    );

    let counts = server.request_counts();
    assert!(
        counts["create"] >= 6 && counts["list"] >= 7 && counts["patch"] >= 5,
        "{counts:?}"
    );
    assert!(server.request_count() >= counts.values().sum::<u64>());
}

/// Events from a kube-rs watcher, forwarded to a channel.
fn spawn_watcher(
    api: Api<Pod>,
    config: watcher::Config,
) -> tokio::sync::mpsc::UnboundedReceiver<watcher::Event<Pod>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            // Errors (a paused server) are retried by the next poll, as a reflector does.
            if let Ok(event) = event
                && tx.send(event).is_err()
            {
                return;
            }
        }
    });
    rx
}

async fn wait_for(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<watcher::Event<Pod>>,
    what: &str,
    pred: impl Fn(&watcher::Event<Pod>) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let event = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
            .unwrap();
        if pred(&event) {
            return;
        }
    }
}

fn is_apply(e: &watcher::Event<Pod>, name: &str, check: impl Fn(&Pod) -> bool) -> bool {
    match e {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
            p.metadata.name.as_deref() == Some(name) && check(p)
        }
        _ => false,
    }
}

#[tokio::test]
async fn watcher_follows_changes_and_relists_after_410() {
    // No bookmarks during this test: a bookmark would move the watcher past the expiry.
    let server = server(ApiServerOptions {
        bookmark_interval: Duration::from_secs(600),
        ..ApiServerOptions::default()
    })
    .await;
    let client = client(&server, "system:node:n1", &["system:nodes"]).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut rx = spawn_watcher(pods.clone(), watcher::Config::default().timeout(1));
    wait_for(&mut rx, "InitDone", |e| {
        matches!(e, watcher::Event::InitDone)
    })
    .await;

    pods.create(&PostParams::default(), &pod("a", "web", None))
        .await
        .unwrap();
    wait_for(&mut rx, "ADDED a", |e| is_apply(e, "a", |_| true)).await;
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    wait_for(&mut rx, "MODIFIED a", |e| {
        is_apply(e, "a", |p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("x"))
        })
    })
    .await;
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    wait_for(
        &mut rx,
        "DELETED a",
        |e| matches!(e, watcher::Event::Delete(p) if p.metadata.name.as_deref() == Some("a")),
    )
    .await;

    // The watch times out every second; resuming from a compacted RV gets 410 and a relist.
    server.expire_history().await;
    wait_for(&mut rx, "a relist (Init)", |e| {
        matches!(e, watcher::Event::Init)
    })
    .await;
    wait_for(&mut rx, "InitDone after relist", |e| {
        matches!(e, watcher::Event::InitDone)
    })
    .await;
    server
        .create(
            "pods",
            "default",
            json!({"metadata": {"name": "b"}, "spec": {"containers": []}}),
        )
        .await
        .unwrap();
    wait_for(&mut rx, "ADDED b after the relist", |e| {
        is_apply(e, "b", |_| true)
    })
    .await;

    // Through a pause the watcher errors, then recovers on the same port with the same state.
    server.pause().await;
    assert!(pods.get("b").await.is_err());
    server
        .create(
            "pods",
            "default",
            json!({"metadata": {"name": "c"}, "spec": {"containers": []}}),
        )
        .await
        .unwrap();
    server.resume().await.unwrap();
    assert!(pods.get("b").await.is_ok());
    wait_for(&mut rx, "ADDED c after resume", |e| {
        is_apply(e, "c", |_| true)
    })
    .await;
}

async fn next_event(
    stream: &mut (impl futures::Stream<Item = Result<WatchEvent<Pod>, kube::Error>> + Unpin),
) -> WatchEvent<Pod> {
    tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn raw_watch_bookmarks_selector_transitions_and_expired() {
    let server = server(ApiServerOptions {
        bookmark_interval: Duration::from_millis(200),
        ..ApiServerOptions::default()
    })
    .await;
    let client = client(&server, "kubernetes-admin", &["system:masters"]).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("a", "web", None))
        .await
        .unwrap();

    let wp = WatchParams::default().labels("app=web").timeout(10);
    let mut stream = pods.watch(&wp, "0").await.unwrap().boxed();
    assert!(
        matches!(next_event(&mut stream).await, WatchEvent::Added(p) if p.metadata.name.as_deref() == Some("a"))
    );
    let WatchEvent::Bookmark(b) = next_event(&mut stream).await else {
        panic!("expected a bookmark")
    };
    assert!(b.metadata.resource_version.parse::<u64>().unwrap() > 0);
    // Leaving the selection is a DELETED for this watcher.
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    loop {
        match next_event(&mut stream).await {
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Deleted(p) => {
                assert_eq!(p.metadata.labels.unwrap()["app"], "db");
                break;
            }
            other => panic!("expected DELETED, got {other:?}"),
        }
    }

    // A resourceVersion older than the history: one ERROR event with a 410 Expired Status.
    server.expire_history().await;
    let mut expired = pods
        .watch(&WatchParams::default(), "2")
        .await
        .unwrap()
        .boxed();
    match expired.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status.message.starts_with("too old resource version: 2 ("),
                "{}",
                status.message
            );
        }
        other => panic!("expected ERROR, got {other:?}"),
    }
    assert!(expired.try_next().await.unwrap().is_none());
}

#[tokio::test]
async fn token_and_subject_access_reviews() {
    let server = server(ApiServerOptions::default()).await;
    server.add_token(
        "abcdef.0123456789abcdef",
        "system:bootstrap:abcdef",
        &["system:bootstrappers"],
    );
    let admin = client(&server, "kubernetes-admin", &["system:masters"]).await;
    let reviews: Api<TokenReview> = Api::all(admin.clone());
    let review = |token: &str| TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.into()),
            ..TokenReviewSpec::default()
        },
        ..TokenReview::default()
    };
    let ok = reviews
        .create(&PostParams::default(), &review("abcdef.0123456789abcdef"))
        .await
        .unwrap();
    let status = ok.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    let user = status.user.unwrap();
    assert_eq!(user.username.as_deref(), Some("system:bootstrap:abcdef"));
    assert!(
        user.groups
            .unwrap()
            .contains(&"system:bootstrappers".to_string())
    );
    let bad = reviews
        .create(&PostParams::default(), &review("nope"))
        .await
        .unwrap();
    assert_eq!(bad.status.unwrap().authenticated, Some(false));

    let sars: Api<SubjectAccessReview> = Api::all(admin);
    let sar = |user: &str, groups: &[&str], verb: &str| SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some("nodes".into()),
                subresource: Some("proxy".into()),
                name: Some("n1".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let allowed = |r: SubjectAccessReview| r.status.unwrap().allowed;
    let pp = PostParams::default();
    assert!(allowed(
        sars.create(&pp, &sar("admin", &["system:masters"], "get"))
            .await
            .unwrap()
    ));
    assert!(!allowed(
        sars.create(&pp, &sar("alice", &[], "get")).await.unwrap()
    ));
    server.set_sar_policy(|r| {
        r.user == "alice" && r.verb == "get" && r.resource == "nodes" && r.subresource == "proxy"
    });
    assert!(allowed(
        sars.create(&pp, &sar("alice", &[], "get")).await.unwrap()
    ));
    assert!(!allowed(
        sars.create(&pp, &sar("alice", &[], "create"))
            .await
            .unwrap()
    ));
}

/// How many objects `api` lists.
async fn count<K>(api: &Api<K>) -> usize
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default()).await.unwrap().items.len()
}

/// The storage kinds the volume manager reads: claims and volumes start Pending and move on
/// through their status subresource only; classes, CSI drivers and nodes are cluster-scoped;
/// a VolumeAttachment is attached only when its status says so.
#[tokio::test]
async fn storage_objects_follow_the_real_server() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass, VolumeAttachment};
    let server = server(ApiServerOptions::default()).await;
    let client = client(&server, "kubernetes-admin", &["system:masters"]).await;
    let pp = PostParams::default();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv-1"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "hostPath": {"path": "/tmp/pv-1"}},
        "status": {"phase": "Bound"}
    }))
    .unwrap();
    let created = pvs.create(&pp, &pv).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1",
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    let created = claims.create(&pp, &claim).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    // The main resource ignores status; the status subresource sets it.
    let mut bound = claims.get("data").await.unwrap();
    bound.status.as_mut().unwrap().phase = Some("Bound".into());
    let replaced = claims.replace("data", &pp, &bound).await.unwrap();
    assert_eq!(replaced.status.unwrap().phase.as_deref(), Some("Pending"));
    let patched = claims
        .patch_status(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.unwrap().phase.as_deref(), Some("Bound"));
    let elsewhere: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "other");
    assert_eq!(api_code(elsewhere.get("data").await.unwrap_err()).0, 404);

    let classes: Api<StorageClass> = Api::all(client.clone());
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "hostpath"}, "provisioner": "hostpath.csi.k8s.io",
        "volumeBindingMode": "WaitForFirstConsumer"
    }))
    .unwrap();
    classes.create(&pp, &class).await.unwrap();
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    let driver: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": "hostpath.csi.k8s.io"},
        "spec": {"attachRequired": false, "podInfoOnMount": true,
                 "volumeLifecycleModes": ["Persistent", "Ephemeral"]}
    }))
    .unwrap();
    drivers.create(&pp, &driver).await.unwrap();
    let nodes: Api<CSINode> = Api::all(client.clone());
    let node: CSINode = serde_json::from_value(json!({
        "metadata": {"name": "n1"},
        "spec": {"drivers": [{"name": "hostpath.csi.k8s.io", "nodeID": "n1",
                              "topologyKeys": ["topology.hostpath.csi/node"]}]}
    }))
    .unwrap();
    nodes.create(&pp, &node).await.unwrap();
    assert_eq!(nodes.get("n1").await.unwrap().spec.drivers[0].node_id, "n1");
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let attachment: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": "csi-123"},
        "spec": {"attacher": "hostpath.csi.k8s.io", "nodeName": "n1",
                 "source": {"persistentVolumeName": "pv-1"}},
        "status": {"attached": true}
    }))
    .unwrap();
    let created = attachments.create(&pp, &attachment).await.unwrap();
    assert!(!created.status.unwrap().attached);
    let attached = attachments
        .patch_status(
            "csi-123",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"attached": true}})),
        )
        .await
        .unwrap();
    assert!(attached.status.unwrap().attached);
    assert_eq!(
        (
            count(&pvs).await,
            count(&classes).await,
            count(&drivers).await
        ),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn csr_approval_signs_with_the_ca() {
    let server = server(ApiServerOptions::default()).await;
    let node = client(&server, "system:node:n1", &["system:nodes"]).await;
    let csrs: Api<CertificateSigningRequest> = Api::all(node);

    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:node:n1");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let request = params.serialize_request(&key).unwrap().pem().unwrap();
    let csr = CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            generate_name: Some("csr-".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.into_bytes()),
            signer_name: "kubernetes.io/kube-apiserver-client-kubelet".into(),
            expiration_seconds: Some(3600),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
    let created = csrs.create(&PostParams::default(), &csr).await.unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert_eq!(created.spec.username.as_deref(), Some("system:node:n1"));
    assert!(
        created
            .spec
            .groups
            .unwrap()
            .contains(&"system:nodes".to_string())
    );
    assert!(created.status.unwrap_or_default().certificate.is_none());

    server.approve_csr(&name).await.unwrap();
    let signed = csrs.get(&name).await.unwrap();
    let status = signed.status.unwrap();
    assert!(
        status
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Approved" && c.status == "True")
    );
    let pem = String::from_utf8(status.certificate.unwrap().0).unwrap();

    let ca_der = rustls::pki_types::pem::PemObject::from_pem_slice(server.ca_pem().as_bytes())
        .map(|c: rustls::pki_types::CertificateDer<'static>| c.to_vec())
        .unwrap();
    let cert_der = rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes())
        .map(|c: rustls::pki_types::CertificateDer<'static>| c.to_vec())
        .unwrap();
    let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&cert_der).unwrap();
    cert.verify_signature(Some(ca.public_key())).unwrap();
    assert_eq!(cert.issuer(), ca.subject());
    assert_eq!(
        cert.subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap(),
        "system:node:n1"
    );
    let lifetime = cert.validity().not_after.timestamp() - jiff::Timestamp::now().as_second();
    assert!((3500..=3600).contains(&lifetime), "lifetime {lifetime}");

    // Denied CSRs stay unsigned; auto-approval with a short signing duration.
    let mut second = csr.clone();
    second.metadata.generate_name = Some("csr-".into());
    let denied = csrs.create(&PostParams::default(), &second).await.unwrap();
    let denied = server
        .deny_csr(denied.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert!(denied.pointer("/status/certificate").is_none());

    let auto = server_with_auto_approval().await;
    let node = client(&auto, "system:node:n2", &["system:nodes"]).await;
    let created = Api::<CertificateSigningRequest>::all(node)
        .create(&PostParams::default(), &csr)
        .await
        .unwrap();
    let signed = auto
        .get(
            "certificatesigningrequests",
            "",
            created.metadata.name.as_deref().unwrap(),
        )
        .await
        .unwrap();
    let b64 = signed
        .pointer("/status/certificate")
        .unwrap()
        .as_str()
        .unwrap();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let der: rustls::pki_types::CertificateDer<'static> =
        rustls::pki_types::pem::PemObject::from_pem_slice(&pem).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let lifetime = cert.validity().not_after.timestamp() - jiff::Timestamp::now().as_second();
    assert!((0..=60).contains(&lifetime), "lifetime {lifetime}");
}

async fn server_with_auto_approval() -> TestApiServer {
    server(ApiServerOptions {
        auto_approve_csrs: true,
        csr_signing_duration: Duration::from_secs(60),
        ..ApiServerOptions::default()
    })
    .await
}

#[tokio::test]
async fn anonymous_is_forbidden_and_bad_tokens_unauthorized() {
    let server = server(ApiServerOptions::default()).await;
    let anonymous = anonymous_client(&server).await;
    let pods: Api<Pod> = Api::namespaced(anonymous.clone(), "default");
    assert_eq!(
        api_code(pods.list(&ListParams::default()).await.unwrap_err()),
        (403, "Forbidden".into())
    );
    // Health and version stay public.
    let version = anonymous.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, "v1.33.0");

    let bad = token_client(&server, "bogus").await;
    let pods: Api<Pod> = Api::namespaced(bad, "default");
    assert_eq!(
        api_code(pods.list(&ListParams::default()).await.unwrap_err()),
        (401, "Unauthorized".into())
    );

    server.add_token("good", "system:bootstrap:good", &["system:bootstrappers"]);
    let good = token_client(&server, "good").await;
    let pods: Api<Pod> = Api::namespaced(good, "default");
    assert!(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // A custom authorizer denies even authenticated users.
    server.set_authorizer(|r| r.verb != "delete");
    let admin = client(&server, "kubernetes-admin", &["system:masters"]).await;
    let pods: Api<Pod> = Api::namespaced(admin, "default");
    pods.create(&PostParams::default(), &pod("p", "x", None))
        .await
        .unwrap();
    assert_eq!(
        api_code(
            pods.delete("p", &DeleteParams::default())
                .await
                .unwrap_err()
        )
        .0,
        403
    );
}

fn token_request(
    audiences: &[&str],
    expiration: i64,
    pod: Option<(&str, &str)>,
) -> k8s_openapi::api::authentication::v1::TokenRequest {
    use k8s_openapi::api::authentication::v1::{
        BoundObjectReference, TokenRequest, TokenRequestSpec,
    };
    TokenRequest {
        spec: TokenRequestSpec {
            audiences: audiences.iter().map(|a| a.to_string()).collect(),
            expiration_seconds: Some(expiration),
            bound_object_ref: pod.map(|(name, uid)| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
            }),
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn token_requests_issue_pod_bound_jwts() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let server = server(ApiServerOptions::default()).await;
    server
        .create(
            "serviceaccounts",
            "ns1",
            json!({"metadata": {"name": "sa1"}}),
        )
        .await
        .unwrap();
    let p = server
        .create(
            "pods",
            "ns1",
            json!({"metadata": {"name": "p1"}, "spec": {"serviceAccountName": "sa1", "nodeName": "n1",
                "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await
        .unwrap();
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let node = client(&server, "system:node:n1", &["system:nodes"]).await;
    let sas: Api<ServiceAccount> = Api::namespaced(node, "ns1");
    let pp = PostParams::default();
    let before = server.request_counts().get("create").copied().unwrap_or(0);

    let answer = sas
        .create_token_request("sa1", &pp, &token_request(&[], 3600, Some(("p1", &uid))))
        .await
        .unwrap();
    assert_eq!(server.request_counts()["create"], before + 1);
    assert_eq!(
        answer.spec.audiences,
        ["https://kubernetes.default.svc.cluster.local"]
    );
    let status = answer.status.unwrap();
    let claims = server
        .verify_token(&status.token)
        .expect("a token the server signed");
    assert_eq!(claims["sub"], "system:serviceaccount:ns1:sa1");
    assert_eq!(
        claims["aud"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    assert_eq!(
        claims["iss"],
        "https://kubernetes.default.svc.cluster.local"
    );
    let k = &claims["kubernetes.io"];
    assert_eq!(k["namespace"], "ns1");
    assert_eq!(k["pod"], json!({"name": "p1", "uid": uid}));
    assert_eq!(k["serviceaccount"]["name"], "sa1");
    let (iat, exp) = (
        claims["iat"].as_i64().unwrap(),
        claims["exp"].as_i64().unwrap(),
    );
    assert_eq!(exp - iat, 3600);
    assert_eq!(claims["nbf"].as_i64(), Some(iat));
    assert_eq!(status.expiration_timestamp.0.as_second(), exp);
    // The header names the algorithm and key.
    let header: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(status.token.split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["alg"], "ES256");
    assert!(header["kid"].as_str().is_some_and(|k| !k.is_empty()));
    let mut forged = status.token.clone();
    forged.push('A');
    assert!(server.verify_token(&forged).is_none());

    // Requested audiences are the token's; the kubelet's default 3607 s lives a year, its
    // status still says 3607 s.
    let vault = sas
        .create_token_request("sa1", &pp, &token_request(&["vault"], 600, None))
        .await
        .unwrap();
    let claims = server.verify_token(&vault.status.unwrap().token).unwrap();
    assert_eq!(claims["aud"], json!(["vault"]));
    assert!(claims["kubernetes.io"].get("pod").is_none());
    let extended = sas
        .create_token_request("sa1", &pp, &token_request(&[], 3607, Some(("p1", &uid))))
        .await
        .unwrap();
    let st = extended.status.unwrap();
    let claims = server.verify_token(&st.token).unwrap();
    let iat = claims["iat"].as_i64().unwrap();
    assert_eq!(claims["exp"].as_i64().unwrap() - iat, 365 * 24 * 3600);
    assert_eq!(
        claims["kubernetes.io"]["warnafter"].as_i64(),
        Some(iat + 3607)
    );
    assert_eq!(st.expiration_timestamp.0.as_second(), iat + 3607);

    // kube-apiserver's refusals.
    let err = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("{other}"),
    };
    let e = sas
        .create_token_request("nope", &pp, &token_request(&[], 3600, None))
        .await
        .unwrap_err();
    assert_eq!(err(e), (404, "serviceaccounts \"nope\" not found".into()));
    let e = sas
        .create_token_request("sa1", &pp, &token_request(&[], 3600, Some(("gone", "u"))))
        .await
        .unwrap_err();
    assert_eq!(err(e), (404, "pods \"gone\" not found".into()));
    let e = sas
        .create_token_request(
            "sa1",
            &pp,
            &token_request(&[], 3600, Some(("p1", "other-uid"))),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err(e),
        (
            409,
            "Operation cannot be fulfilled on Pod \"p1\": the UID in the bound object reference (other-uid) does not match the UID in record. The object might have been deleted and then recreated".into()
        )
    );
    let e = sas
        .create_token_request("sa1", &pp, &token_request(&[], 599, None))
        .await
        .unwrap_err();
    assert_eq!(
        err(e),
        (
            422,
            "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes".into()
        )
    );
    server
        .create(
            "serviceaccounts",
            "ns1",
            json!({"metadata": {"name": "other"}}),
        )
        .await
        .unwrap();
    let e = sas
        .create_token_request("other", &pp, &token_request(&[], 3600, Some(("p1", &uid))))
        .await
        .unwrap_err();
    assert_eq!(
        err(e),
        (
            400,
            "cannot bind token for serviceaccount \"other\" to pod running with different serviceaccount name.".into()
        )
    );
    // Only create: a GET of the subresource is not allowed.
    let e = sas.get_subresource("token", "sa1").await.unwrap_err();
    assert_eq!(err(e).0, 405);
}

#[tokio::test]
async fn short_tokens_when_allowed_and_active_watches_listed() {
    use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
    let server = server(ApiServerOptions {
        min_token_expiration: Duration::from_secs(1),
        ..ApiServerOptions::default()
    })
    .await;
    server
        .create(
            "serviceaccounts",
            "default",
            json!({"metadata": {"name": "default"}}),
        )
        .await
        .unwrap();
    let admin = client(&server, "kubernetes-admin", &["system:masters"]).await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    let short = sas
        .create_token_request(
            "default",
            &PostParams::default(),
            &token_request(&[], 10, None),
        )
        .await
        .unwrap();
    let claims = server.verify_token(&short.status.unwrap().token).unwrap();
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        10
    );

    assert!(server.active_watches().is_empty());
    let cms: Api<ConfigMap> = Api::namespaced(admin, "default");
    let config = watcher::Config::default().fields("metadata.name=cm1");
    let task = tokio::spawn(async move {
        let mut stream = watcher(cms, config).boxed();
        while stream.next().await.is_some() {}
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.active_watches().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no watch started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let watches = server.active_watches();
    assert_eq!(watches.len(), 1);
    assert_eq!(watches[0].resource, "configmaps");
    assert_eq!(watches[0].namespace.as_deref(), Some("default"));
    assert_eq!(watches[0].field_selector, "metadata.name=cm1");
    task.abort();
    while !server.active_watches().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watch outlived its client"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
