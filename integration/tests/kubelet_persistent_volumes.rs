//! Claims on a ferrolet node (issue #35): `persistentVolumeClaim` and generic `ephemeral`
//! volumes resolved through the API to their bound PersistentVolume as the Go kubelet's
//! populator does (waiting, with its messages, while the claim is unbound), `hostPath` and
//! `local` PVs (a local PV's node affinity checked against the node, a mismatch failing the
//! mount as Go), the claim's `readOnly` honoured, `fsGroup` with both change policies; on real
//! containerd through ferrolet-cri against the in-memory API server, ending with the node's
//! teardown and leak checks (the local volumes' binds gone, their data kept).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use ferrolet_integration::cluster::{ClusterNode, NAMESPACE};
use ferrolet_integration::kubelet::{IDLE, image};
use serde_json::{Value, json};

/// Creates claim `name` and PersistentVolume `pv` with `source` (plus `extra` spec fields),
/// bound to each other as the PV controller binds them; `bound: false` leaves the claim
/// Pending with no volume.
async fn claim_and_volume(node: &ClusterNode, name: &str, pv: &str, source: Value, bound: bool) {
    let api = &node.api;
    let mut claim = json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
    });
    if bound {
        claim["spec"]["volumeName"] = json!(pv);
    }
    let claim = api
        .create("persistentvolumeclaims", NAMESPACE, claim)
        .await
        .unwrap();
    bind(node, &claim, pv, source, bound).await;
}

/// Makes PV `pv` for `claim` and, when `bound`, moves both to Bound.
async fn bind(node: &ClusterNode, claim: &Value, pv: &str, source: Value, bound: bool) {
    let api = &node.api;
    let name = claim["metadata"]["name"].as_str().unwrap();
    let mut spec = json!({
        "capacity": {"storage": "1Mi"},
        "accessModes": ["ReadWriteOnce"],
        "claimRef": {"namespace": NAMESPACE, "name": name, "uid": claim["metadata"]["uid"]},
    });
    for (k, v) in source.as_object().unwrap() {
        spec[k] = v.clone();
    }
    let pv_obj = api
        .create(
            "persistentvolumes",
            "",
            json!({"metadata": {"name": pv}, "spec": spec}),
        )
        .await
        .unwrap();
    if !bound {
        return;
    }
    let mut pv_obj = pv_obj;
    pv_obj["status"] = json!({"phase": "Bound"});
    api.update_status("persistentvolumes", "", pv, pv_obj)
        .await
        .unwrap();
    let mut claim = api
        .get("persistentvolumeclaims", NAMESPACE, name)
        .await
        .unwrap();
    claim["spec"]["volumeName"] = json!(pv);
    let mut claim = api
        .update("persistentvolumeclaims", NAMESPACE, name, claim)
        .await
        .unwrap();
    claim["status"] = json!({"phase": "Bound"});
    api.update_status("persistentvolumeclaims", NAMESPACE, name, claim)
        .await
        .unwrap();
}

/// A busybox pod idling with `volumes`, each mounted at `/v/<name>` (read-only where the
/// volume's name says `ro`).
fn pod(name: &str, volumes: Vec<Value>, security: Value) -> Value {
    let mounts: Vec<Value> = volumes
        .iter()
        .map(|v| {
            let n = v["name"].as_str().unwrap();
            json!({"name": n, "mountPath": format!("/v/{n}")})
        })
        .collect();
    json!({
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": security,
            "containers": [{
                "name": "main",
                "image": image("busybox"),
                "command": ["sh", "-c", IDLE],
                "volumeMounts": mounts,
            }],
            "volumes": volumes,
        },
    })
}

fn claim_volume(name: &str, claim: &str, read_only: bool) -> Value {
    json!({"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}})
}

async fn main_container(node: &ClusterNode, uid: &str) -> String {
    let (_, containers) = node.node.runtime_objects(uid).await;
    containers
        .iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == "main"))
        .map(|c| c.id.clone())
        .unwrap_or_else(|| panic!("no main container for pod {uid}"))
}

/// Runs `script` in the pod's main container: its exit code, stdout and stderr.
async fn sh(node: &ClusterNode, pod: &Value, script: &str) -> (i32, String) {
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let id = main_container(node, uid).await;
    node.node.node.api().await.sh(&id, script).await
}

/// Waits for a FailedMount event of pod `name` containing `text`.
async fn failed_mount(node: &ClusterNode, name: &str, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = node.pod_events(name).await;
        if let Some(e) = events.iter().find(|e| {
            e["reason"] == "FailedMount" && e["message"].as_str().is_some_and(|m| m.contains(text))
        }) {
            return e["message"].as_str().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no FailedMount event with {text:?} for {name}: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn gid(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().gid()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_bind_pods_to_host_path_and_local_volumes_as_the_go_kubelet() {
    let node = ClusterNode::start("pv-claims").await;
    let disks = tempfile::tempdir().unwrap();
    let hostname = node
        .wait_node("labelled", |n| {
            n["metadata"]["labels"]["kubernetes.io/hostname"].is_string()
        })
        .await["metadata"]["labels"]["kubernetes.io/hostname"]
        .as_str()
        .unwrap()
        .to_string();
    let affinity = |host: &str| {
        json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}})
    };

    // A hostPath PV, written through one claim and read-only through a second pod.
    let hp = disks.path().join("hp");
    claim_and_volume(
        &node,
        "hp-claim",
        "hp-pv",
        json!({"hostPath": {"path": hp, "type": "DirectoryOrCreate"}}),
        true,
    )
    .await;
    // A local PV for this node (fsGroup, walked), another with OnRootMismatch, and one for
    // another node.
    let local = disks.path().join("local");
    std::fs::create_dir(&local).unwrap();
    std::fs::write(local.join("seed"), "from the disk").unwrap();
    claim_and_volume(
        &node,
        "local-claim",
        "local-pv",
        json!({"local": {"path": local}, "nodeAffinity": affinity(&hostname)}),
        true,
    )
    .await;
    let lazy = disks.path().join("lazy");
    std::fs::create_dir_all(lazy.join("deep")).unwrap();
    std::fs::write(lazy.join("deep/old"), "").unwrap();
    // The root already belongs to the group, group-writable and setgid: OnRootMismatch walks
    // no further.
    std::os::unix::fs::chown(&lazy, None, Some(4000)).unwrap();
    std::fs::set_permissions(&lazy, std::os::unix::fs::PermissionsExt::from_mode(0o2770)).unwrap();
    claim_and_volume(
        &node,
        "lazy-claim",
        "lazy-pv",
        json!({"local": {"path": lazy}, "nodeAffinity": affinity(&hostname)}),
        true,
    )
    .await;
    let far = disks.path().join("far");
    std::fs::create_dir(&far).unwrap();
    claim_and_volume(
        &node,
        "far-claim",
        "far-pv",
        json!({"local": {"path": far}, "nodeAffinity": affinity("another-node")}),
        true,
    )
    .await;

    node.create_pod(pod(
        "writer",
        vec![
            claim_volume("hp", "hp-claim", false),
            claim_volume("local", "local-claim", false),
        ],
        json!({"fsGroup": 3000}),
    ))
    .await;
    node.create_pod(pod(
        "reader",
        vec![claim_volume("hp", "hp-claim", true)],
        json!({}),
    ))
    .await;
    node.create_pod(pod(
        "lazy",
        vec![claim_volume("lazy", "lazy-claim", false)],
        json!({"fsGroup": 4000, "fsGroupChangePolicy": "OnRootMismatch"}),
    ))
    .await;
    node.create_pod(pod(
        "far",
        vec![claim_volume("far", "far-claim", false)],
        json!({}),
    ))
    .await;

    let writer = node.wait_api_running("writer").await;
    let (code, out) = sh(
        &node,
        &writer,
        "echo hello > /v/hp/hello && cat /v/local/seed && echo new > /v/local/new",
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "from the disk"));
    assert_eq!(
        std::fs::read_to_string(hp.join("hello")).unwrap(),
        "hello\n"
    );
    assert_eq!(std::fs::read_to_string(local.join("new")).unwrap(), "new\n");
    // The local volume is bound under the pod by the PV's name, and given to the fsGroup.
    let uid = writer["metadata"]["uid"].as_str().unwrap();
    let bind = node
        .node
        .root_dir()
        .join("pods")
        .join(uid)
        .join("volumes/kubernetes.io~local-volume/local-pv");
    assert_eq!(
        std::fs::read_to_string(bind.join("seed")).unwrap(),
        "from the disk"
    );
    assert_eq!(gid(&local.join("seed")), 3000);

    // The local volume's usage (statfs, as Go's) in the Summary with its claim; a hostPath
    // has none, as in Go.
    let writer_of = |s: &Value| {
        s["pods"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["podRef"]["name"] == "writer"))
            .cloned()
    };
    let summary = node
        .node
        .summary_until("with the writer", |s| writer_of(s).is_some())
        .await;
    let writer_stats = writer_of(&summary).unwrap();
    let claims: Vec<&Value> = writer_stats["volume"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["pvcRef"].is_object())
        .collect();
    assert_eq!(claims.len(), 1, "{writer_stats:#}");
    assert_eq!(claims[0]["pvcRef"]["name"], "local-claim");
    assert!(claims[0]["capacityBytes"].as_u64().unwrap() > 0);

    let reader = node.wait_api_running("reader").await;
    let (code, out) = sh(&node, &reader, "cat /v/hp/hello && touch /v/hp/nope").await;
    assert_ne!(code, 0, "a write to a readOnly claim succeeded: {out}");
    assert!(
        out.starts_with("hello\n") && out.contains("Read-only file system"),
        "{out}"
    );
    assert!(!hp.join("nope").exists());

    node.wait_api_running("lazy").await;
    assert_eq!(
        gid(&lazy.join("deep/old")),
        0,
        "OnRootMismatch walked a volume whose root was right"
    );

    let message = failed_mount(&node, "far", "NodeAffinity").await;
    assert_eq!(
        message,
        "MountVolume.NodeAffinity check failed for volume \"far-pv\" : no matching NodeSelectorTerms"
    );
    let far_pod = node.api_pod("far").await.unwrap();
    assert_eq!(far_pod["status"]["phase"], "Pending", "{far_pod:#}");
    assert_eq!(
        far_pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ContainerCreating"
    );

    // Deleted: the bind goes, the disk keeps its data.
    node.delete_pod("writer").await;
    node.wait_api_pod_gone("writer", Duration::from_secs(60))
        .await;
    assert!(!bind.exists(), "{} left behind", bind.display());
    assert_eq!(std::fs::read_to_string(local.join("new")).unwrap(), "new\n");
    node.teardown().await;
    assert_eq!(std::fs::read_to_string(lazy.join("deep/old")).unwrap(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_and_ephemeral_claims_wait_for_their_volume_then_start() {
    let node = ClusterNode::start("pv-waits").await;
    let disks = tempfile::tempdir().unwrap();

    // A claim not bound yet: Go's populator message, then Running once it is bound.
    claim_and_volume(&node, "later", "later-pv", json!({}), false).await;
    node.create_pod(pod(
        "waits",
        vec![claim_volume("data", "later", false)],
        json!({}),
    ))
    .await;
    let message = failed_mount(&node, "waits", "PVC is not bound").await;
    assert_eq!(
        message,
        format!(
            "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC {NAMESPACE}/later: PVC is not bound"
        )
    );
    let claim = node
        .api
        .get("persistentvolumeclaims", NAMESPACE, "later")
        .await
        .unwrap();
    let data = disks.path().join("later");
    bind(
        &node,
        &claim,
        "later-bound-pv",
        json!({"hostPath": {"path": data, "type": "DirectoryOrCreate"}}),
        true,
    )
    .await;
    let started = Instant::now();
    let waits = node.wait_api_running("waits").await;
    eprintln!("Running {:?} after its claim was bound", started.elapsed());
    assert_eq!(sh(&node, &waits, "echo x > /v/data/f").await.0, 0);
    assert!(data.join("f").exists());

    // A generic ephemeral volume: the claim `<pod>-<volume>` the controller makes, owned by
    // the pod. One owned by another object is refused with Go's message.
    let eph = json!({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}}}});
    let created = node.create_pod(pod("eph", vec![eph], json!({}))).await;
    let owner = |uid: &Value| {
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "eph", "uid": uid,
                "controller": true, "blockOwnerDeletion": true}])
    };
    let claim = node
        .api
        .create(
            "persistentvolumeclaims",
            NAMESPACE,
            json!({"metadata": {"name": "eph-scratch", "ownerReferences": owner(&json!("someone-else"))},
                   "spec": {"accessModes": ["ReadWriteOnce"]}}),
        )
        .await
        .unwrap();
    let scratch = disks.path().join("scratch");
    bind(
        &node,
        &claim,
        "eph-pv",
        json!({"hostPath": {"path": scratch, "type": "DirectoryOrCreate"}}),
        true,
    )
    .await;
    let message = failed_mount(&node, "eph", "pod is not owner").await;
    assert!(
        message.ends_with(&format!(
            "PVC {NAMESPACE}/eph-scratch was not created for pod {NAMESPACE}/eph (pod is not owner)"
        )),
        "{message}"
    );
    let mut claim = node
        .api
        .get("persistentvolumeclaims", NAMESPACE, "eph-scratch")
        .await
        .unwrap();
    claim["metadata"]["ownerReferences"] = owner(&created["metadata"]["uid"]);
    node.api
        .update("persistentvolumeclaims", NAMESPACE, "eph-scratch", claim)
        .await
        .unwrap();
    let eph = node.wait_api_running("eph").await;
    assert_eq!(sh(&node, &eph, "echo y > /v/scratch/g").await.0, 0);
    assert!(scratch.join("g").exists());
    node.teardown().await;
}
