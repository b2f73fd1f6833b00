//! CSI volumes on a ferrolet node (issue #35), with the repo's spec-following test driver
//! (`ferrolet_integration::csi_driver`) registered through `plugins_registry`, against the
//! in-memory API server and real containerd: a claim's CSI volume waits for its
//! VolumeAttachment, is staged once at Go's global mount and published into each pod using
//! it (Go's paths and `vol_data.json`, the pod info the CSIDriver asks for), unpublished
//! with each pod and unstaged after the last; an inline ephemeral volume; a claim's
//! `readOnly`; a driver restarted under a running pod; and ferrolet killed while a pod it
//! published is deleted, which after the restart is unpublished and unstaged.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrolet_integration::apiserver::DeleteOptions;
use ferrolet_integration::cluster::{ClusterNode, NAMESPACE};
use ferrolet_integration::csi_driver::{DriverOptions, TestCsiDriver};
use ferrolet_integration::kubelet::{IDLE, image};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const DRIVER: &str = "csi.test.ferrolet.dev";

fn sha(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Starts the test driver on the node and waits until ferrolet has registered it.
async fn driver(node: &ClusterNode, state: &Path, stage: bool) -> TestCsiDriver {
    driver_with(node, state, stage, false).await
}

/// [`driver`], expanding volumes when `expand`.
async fn driver_with(node: &ClusterNode, state: &Path, stage: bool, expand: bool) -> TestCsiDriver {
    node.wait_node("registered", |_| true).await;
    let d = TestCsiDriver::start(
        &node.node.root_dir(),
        state,
        DriverOptions {
            name: DRIVER.into(),
            stage,
            node_id: node.node_name.clone(),
            topology: Default::default(),
            expand,
        },
    )
    .unwrap();
    node.wait_object_named(
        "csinodes.storage.k8s.io",
        &node.node_name,
        "listing the driver",
        |o| {
            o["spec"]["drivers"]
                .as_array()
                .is_some_and(|d| !d.is_empty())
        },
    )
    .await;
    d
}

async fn csi_driver_object(node: &ClusterNode, spec: Value) {
    node.api
        .create(
            "csidrivers.storage.k8s.io",
            "",
            json!({"metadata": {"name": DRIVER}, "spec": spec}),
        )
        .await
        .unwrap();
}

/// A claim bound to a CSI PV of volume `handle`.
async fn csi_claim(node: &ClusterNode, claim: &str, pv: &str, handle: &str, modes: &[&str]) {
    csi_claim_of_mode(node, claim, pv, handle, modes, "Filesystem").await;
}

/// [`csi_claim`] with the PV's `volumeMode`.
async fn csi_claim_of_mode(
    node: &ClusterNode,
    claim: &str,
    pv: &str,
    handle: &str,
    modes: &[&str],
    mode: &str,
) {
    let api = &node.api;
    let c = api
        .create(
            "persistentvolumeclaims",
            NAMESPACE,
            json!({"metadata": {"name": claim}, "spec": {"accessModes": modes, "volumeName": pv,
                   "resources": {"requests": {"storage": "1Mi"}}}}),
        )
        .await
        .unwrap();
    let mut p = api
        .create(
            "persistentvolumes",
            "",
            json!({"metadata": {"name": pv}, "spec": {
                "accessModes": modes, "capacity": {"storage": "1Mi"}, "volumeMode": mode,
                "claimRef": {"namespace": NAMESPACE, "name": claim, "uid": c["metadata"]["uid"]},
                "csi": {"driver": DRIVER, "volumeHandle": handle, "volumeAttributes": {"kind": "test"}}}}),
        )
        .await
        .unwrap();
    p["status"] = json!({"phase": "Bound"});
    api.update_status("persistentvolumes", "", pv, p)
        .await
        .unwrap();
    let mut c = api
        .get("persistentvolumeclaims", NAMESPACE, claim)
        .await
        .unwrap();
    c["status"] = json!({"phase": "Bound", "capacity": {"storage": "1Mi"}});
    api.update_status("persistentvolumeclaims", NAMESPACE, claim, c)
        .await
        .unwrap();
}

/// The attach/detach controller's part: the VolumeAttachment of `handle` on this node,
/// marked attached, and the volume in the Node's `status.volumesAttached`.
async fn attach(node: &ClusterNode, handle: &str, pv: &str) {
    let name = format!(
        "csi-{}",
        sha(&format!("{handle}{DRIVER}{}", node.node_name))
    );
    let mut va = node
        .api
        .create(
            "volumeattachments.storage.k8s.io",
            "",
            json!({"metadata": {"name": name}, "spec": {"attacher": DRIVER, "nodeName": node.node_name,
                   "source": {"persistentVolumeName": pv}}}),
        )
        .await
        .unwrap();
    va["status"] = json!({"attached": true, "attachmentMetadata": {"device": "test"}});
    node.api
        .update_status("volumeattachments.storage.k8s.io", "", &name, va)
        .await
        .unwrap();
    let unique = format!("kubernetes.io/csi/{DRIVER}^{handle}");
    node.api
        .patch(
            "nodes",
            "",
            &node.node_name,
            ferrolet_integration::apiserver::PatchType::Merge,
            &json!({"status": {"volumesAttached": [{"name": unique, "devicePath": ""}]}}),
            Some("status"),
        )
        .await
        .unwrap();
}

fn pod(name: &str, volumes: Vec<Value>, read_only: bool) -> Value {
    let mounts: Vec<Value> = volumes
        .iter()
        .map(|v| json!({"name": v["name"], "mountPath": format!("/v/{}", v["name"].as_str().unwrap()), "readOnly": read_only}))
        .collect();
    json!({
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "serviceAccountName": "builder",
            "securityContext": {"fsGroup": 2500},
            "containers": [{"name": "main", "image": image("busybox"), "command": ["sh", "-c", IDLE], "volumeMounts": mounts}],
            "volumes": volumes,
        },
    })
}

fn claim_volume(claim: &str, read_only: bool) -> Value {
    json!({"name": "data", "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}})
}

async fn sh(node: &ClusterNode, pod: &Value, script: &str) -> (i32, String) {
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let (_, containers) = node.node.runtime_objects(uid).await;
    let id = containers
        .iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == "main"))
        .map(|c| c.id.clone())
        .unwrap();
    node.node.node.api().await.sh(&id, script).await
}

fn mounted(path: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|p| Path::new(p) == path)
}

fn vol_data(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("vol_data.json")).unwrap()).unwrap()
}

async fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn methods(d: &TestCsiDriver, volume: &str) -> Vec<&'static str> {
    d.calls()
        .iter()
        .filter(|c| c.volume_id == volume)
        .map(|c| c.method)
        .collect()
}

fn global_dir(node: &ClusterNode, handle: &str) -> PathBuf {
    node.node
        .root_dir()
        .join("plugins/kubernetes.io/csi")
        .join(DRIVER)
        .join(sha(handle))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_csi_volume_is_attached_staged_once_published_per_pod_and_torn_down() {
    let node = ClusterNode::start("csi-vol").await;
    let state = tempfile::tempdir().unwrap();
    let d = driver(&node, state.path(), true).await;
    csi_driver_object(
        &node,
        json!({"attachRequired": true, "podInfoOnMount": true}),
    )
    .await;
    std::fs::write(
        d.create_volume("vol-1").unwrap().join("seed"),
        "on the volume",
    )
    .unwrap();
    csi_claim(&node, "shared", "pv-shared", "vol-1", &["ReadWriteMany"]).await;

    let first = node
        .create_pod(pod("first", vec![claim_volume("shared", false)], false))
        .await;
    // Waiting for the attach/detach controller: nothing is staged before it says attached.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(methods(&d, "vol-1").is_empty(), "{:?}", d.calls());
    attach(&node, "vol-1", "pv-shared").await;
    let first = {
        let _ = first;
        node.wait_api_running("first").await
    };
    let (code, out) = sh(&node, &first, "cat /v/data/seed && echo one > /v/data/one").await;
    assert_eq!((code, out.as_str()), (0, "on the volume"));
    assert_eq!(
        std::fs::read_to_string(d.volume_dir("vol-1").join("one")).unwrap(),
        "one\n"
    );

    // Go's layout: the global mount with the device's vol_data.json, the pod's target with
    // its own.
    let global = global_dir(&node, "vol-1");
    assert!(mounted(&global.join("globalmount")));
    assert_eq!(
        vol_data(&global),
        json!({"volumeHandle": "vol-1", "driverName": DRIVER})
    );
    let uid1 = first["metadata"]["uid"].as_str().unwrap().to_string();
    let target1 = node
        .node
        .root_dir()
        .join("pods")
        .join(&uid1)
        .join("volumes/kubernetes.io~csi/pv-shared");
    assert!(mounted(&target1.join("mount")));
    assert_eq!(
        vol_data(&target1),
        json!({"specVolID": "pv-shared", "volumeHandle": "vol-1", "driverName": DRIVER,
               "nodeName": node.node_name, "volumeLifecycleMode": "Persistent",
               "attachmentID": format!("csi-{}", sha(&format!("vol-1{DRIVER}{}", node.node_name)))})
    );
    let publish = d
        .calls()
        .into_iter()
        .find(|c| c.method == "NodePublishVolume")
        .unwrap();
    assert_eq!(publish.path, target1.join("mount").display().to_string());
    assert_eq!(publish.context["kind"], "test");
    assert_eq!(publish.context["csi.storage.k8s.io/pod.name"], "first");
    assert_eq!(publish.context["csi.storage.k8s.io/pod.uid"], uid1.as_str());
    assert_eq!(
        publish.context["csi.storage.k8s.io/serviceAccount.name"],
        "builder"
    );
    assert_eq!(publish.context["csi.storage.k8s.io/ephemeral"], "false");

    // Attachable (attachRequired): in the node's volumesInUse while staged.
    let unique = format!("kubernetes.io/csi/{DRIVER}^vol-1");
    node.wait_node("listing the volume in use", |n| {
        n["status"]["volumesInUse"] == json!([unique])
    })
    .await;

    // Its usage, from the driver's NodeGetVolumeStats: in the Summary with its claim, and in
    // the kubelet_volume_stats_* families.
    let volumes_of = |s: &Value| {
        s["pods"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["podRef"]["name"] == "first"))
            .map(|p| p["volume"].clone())
    };
    let summary = node
        .node
        .summary_until("with the first pod", |s| volumes_of(s).is_some())
        .await;
    let vols = volumes_of(&summary).unwrap();
    let claim_stats = vols
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["pvcRef"]["name"] == "shared")
        .unwrap_or_else(|| panic!("no claim volume in {vols:#}"));
    assert_eq!(claim_stats["name"], "data");
    assert_eq!(claim_stats["pvcRef"]["namespace"], NAMESPACE);
    assert!(
        claim_stats["capacityBytes"].as_u64().unwrap() > 0,
        "{claim_stats}"
    );
    assert!(
        claim_stats["inodesUsed"].as_u64().is_some(),
        "{claim_stats}"
    );
    let metrics = node.node.metrics().await;
    let used = metrics
        .family("kubelet_volume_stats_used_bytes")
        .unwrap()
        .with_labels(&[
            ("namespace", NAMESPACE),
            ("persistentvolumeclaim", "shared"),
        ]);
    assert_eq!(used.len(), 1, "{used:?}");

    // A second pod, read-only through its claim: published again, not staged again.
    node.create_pod(pod("second", vec![claim_volume("shared", true)], false))
        .await;
    let second = node.wait_api_running("second").await;
    let (code, out) = sh(&node, &second, "cat /v/data/one && touch /v/data/two").await;
    assert!(
        code != 0 && out.starts_with("one\n") && out.contains("Read-only file system"),
        "{code} {out}"
    );
    assert_eq!(
        methods(&d, "vol-1"),
        ["NodeStageVolume", "NodePublishVolume", "NodePublishVolume"]
    );
    assert!(
        d.calls()
            .iter()
            .any(|c| c.method == "NodePublishVolume" && c.readonly)
    );

    // The first pod goes: unpublished, still staged for the second.
    node.delete_pod("first").await;
    node.wait_api_pod_gone("first", Duration::from_secs(60))
        .await;
    wait_until("first's target gone", Duration::from_secs(20), || {
        !target1.exists()
    })
    .await;
    assert!(mounted(&global.join("globalmount")));
    // The second goes: unpublished, then unstaged; nothing of the volume is left on the node.
    node.delete_pod("second").await;
    node.wait_api_pod_gone("second", Duration::from_secs(60))
        .await;
    wait_until("unstaged", Duration::from_secs(20), || !global.exists()).await;
    assert_eq!(
        methods(&d, "vol-1"),
        [
            "NodeStageVolume",
            "NodePublishVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(d.volume_dir("vol-1").join("one")).unwrap(),
        "one\n"
    );
    node.wait_node("with no volume in use", |n| {
        n["status"]["volumesInUse"].is_null()
    })
    .await;
    node.teardown().await;
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_ephemeral_csi_volumes_live_with_their_pod_where_the_driver_allows_them() {
    let node = ClusterNode::start("csi-inline").await;
    let state = tempfile::tempdir().unwrap();
    let d = driver(&node, state.path(), false).await;
    let inline =
        json!({"name": "scratch", "csi": {"driver": DRIVER, "volumeAttributes": {"size": "1Mi"}}});

    // No CSIDriver object: Persistent only, as Go; the pod waits with Go's message.
    node.create_pod(pod("refused", vec![inline.clone()], false))
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let message = loop {
        let events = node.pod_events("refused").await;
        if let Some(e) = events.iter().find(|e| e["reason"] == "FailedMount") {
            break e["message"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no FailedMount: {events:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        message,
        format!(
            "MountVolume.SetUp failed for volume \"scratch\" : kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode \"Ephemeral\" not supported by driver {DRIVER} (only supports [\"Persistent\"])"
        )
    );
    node.api
        .delete_with(
            "pods",
            NAMESPACE,
            "refused",
            &DeleteOptions {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    csi_driver_object(&node, json!({"attachRequired": false, "podInfoOnMount": true, "volumeLifecycleModes": ["Ephemeral"], "fsGroupPolicy": "File"})).await;
    node.create_pod(pod("inline", vec![inline], false)).await;
    let p = node.wait_api_running("inline").await;
    assert_eq!(sh(&node, &p, "echo x > /v/scratch/f").await.0, 0);
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let handle = format!("csi-{}", sha(&format!("{uid}scratch")));
    assert!(d.volume_dir(&handle).join("f").exists());
    // fsGroupPolicy File: the kubelet gave the published volume to the pod's fsGroup (2500),
    // setgid, so what the container writes is the group's too.
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata(d.volume_dir(&handle)).unwrap();
    assert_eq!((root.gid(), root.mode() & 0o2070), (2500, 0o2070));
    assert_eq!(
        std::fs::metadata(d.volume_dir(&handle).join("f"))
            .unwrap()
            .gid(),
        2500
    );
    let publish = d
        .calls()
        .into_iter()
        .find(|c| c.volume_id == handle)
        .unwrap();
    assert_eq!(publish.context["csi.storage.k8s.io/ephemeral"], "true");
    assert_eq!(publish.context["size"], "1Mi");
    // Never staged; no global directory.
    assert_eq!(methods(&d, &handle), ["NodePublishVolume"]);
    assert!(
        !node
            .node
            .root_dir()
            .join("plugins/kubernetes.io/csi")
            .join(DRIVER)
            .exists()
    );
    node.delete_pod("inline").await;
    node.wait_api_pod_gone("inline", Duration::from_secs(60))
        .await;
    wait_until("inline volume gone", Duration::from_secs(20), || {
        !d.volume_dir(&handle).exists()
    })
    .await;
    assert_eq!(
        methods(&d, &handle),
        ["NodePublishVolume", "NodeUnpublishVolume"]
    );
    node.teardown().await;
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_of_the_driver_and_of_a_killed_ferrolet_keep_data_and_leak_nothing() {
    let node = ClusterNode::start("csi-restart").await;
    let state = tempfile::tempdir().unwrap();
    let d = driver(&node, state.path(), true).await;
    csi_driver_object(&node, json!({"attachRequired": false})).await;
    d.create_volume("vol-r").unwrap();
    csi_claim(&node, "keep", "pv-keep", "vol-r", &["ReadWriteOnce"]).await;
    node.create_pod(pod("keeper", vec![claim_volume("keep", false)], false))
        .await;
    let p = node.wait_api_running("keeper").await;
    assert_eq!(sh(&node, &p, "echo before > /v/data/f").await.0, 0);

    // The driver restarts under the running pod: the pod keeps its data and can write.
    d.stop();
    let d = driver(&node, state.path(), true).await;
    let (code, out) = sh(&node, &p, "cat /v/data/f && echo after >> /v/data/f").await;
    assert_eq!((code, out.as_str()), (0, "before\n"));
    assert_eq!(
        std::fs::read_to_string(d.volume_dir("vol-r").join("f")).unwrap(),
        "before\nafter\n"
    );

    // ferrolet is killed between publish and the pod's deletion (forced, so the API forgets
    // the pod while ferrolet is down); restarted, it finds the volume on disk and has the
    // driver unpublish and unstage it.
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let target = node
        .node
        .root_dir()
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~csi/pv-keep");
    let global = global_dir(&node, "vol-r");
    node.node.kill_kubelet();
    node.api
        .delete_with(
            "pods",
            NAMESPACE,
            "keeper",
            &DeleteOptions {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    node.node.restart_kubelet().await;
    wait_until(
        "unpublished and unstaged after the restart",
        Duration::from_secs(60),
        || !target.exists() && !global.exists(),
    )
    .await;
    let after: Vec<&str> = d
        .calls()
        .iter()
        .filter(|c| c.volume_id == "vol-r")
        .map(|c| c.method)
        .collect();
    assert_eq!(after, ["NodeUnpublishVolume", "NodeUnstageVolume"]);
    assert_eq!(
        std::fs::read_to_string(d.volume_dir("vol-r").join("f")).unwrap(),
        "before\nafter\n"
    );
    node.teardown().await;
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_block_claim_reaches_the_container_as_a_device() {
    let node = ClusterNode::start("csi-block").await;
    let state = tempfile::tempdir().unwrap();
    let d = driver(&node, state.path(), true).await;
    csi_driver_object(&node, json!({"attachRequired": false})).await;
    let disk = d.create_block_volume("blk-1", 4 << 20).unwrap();
    csi_claim_of_mode(&node, "raw", "pv-raw", "blk-1", &["ReadWriteOnce"], "Block").await;
    node.create_pod(json!({
        "metadata": {"name": "block", "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image("busybox"), "command": ["sh", "-c", IDLE],
                            "volumeDevices": [{"name": "data", "devicePath": "/dev/xvda"}]}],
            "volumes": [claim_volume("raw", false)],
        },
    }))
    .await;
    let p = node.wait_api_running("block").await;
    let (code, out) = sh(
        &node,
        &p,
        "[ -b /dev/xvda ] && printf hello-block > /dev/xvda && head -c 11 /dev/xvda",
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "hello-block"));

    // Go's layout: the pod's link to the publish file, the volume's data and global map.
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let root = node.node.root_dir();
    let block = root.join("plugins/kubernetes.io/csi/volumeDevices");
    let publish = block.join("publish/pv-raw").join(uid);
    let link = root
        .join("pods")
        .join(uid)
        .join("volumeDevices/kubernetes.io~csi/pv-raw");
    assert_eq!(std::fs::read_link(&link).unwrap(), publish);
    assert_eq!(
        std::fs::read_link(block.join("pv-raw/dev").join(uid)).unwrap(),
        publish
    );
    assert_eq!(
        vol_data(&block.join("pv-raw/data"))["volumeLifecycleMode"],
        "Persistent"
    );
    let stage = d
        .calls()
        .into_iter()
        .find(|c| c.method == "NodeStageVolume")
        .unwrap();
    assert_eq!(
        stage.path,
        block.join("staging/pv-raw").display().to_string()
    );
    assert_eq!(
        methods(&d, "blk-1"),
        ["NodeStageVolume", "NodePublishVolume"]
    );

    node.delete_pod("block").await;
    node.wait_api_pod_gone("block", Duration::from_secs(60))
        .await;
    wait_until("unstaged", Duration::from_secs(20), || {
        !block.join("staging/pv-raw").exists() && !block.join("pv-raw").exists()
    })
    .await;
    assert_eq!(
        methods(&d, "blk-1"),
        [
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume"
        ]
    );
    assert!(!link.exists() && !publish.exists());
    // What the container wrote is on the disk once the loop device is gone.
    let bytes = std::fs::read(&disk).unwrap();
    assert_eq!(&bytes[..11], b"hello-block");
    node.teardown().await;
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_the_resizer_grew_is_expanded_on_the_node_and_its_status_follows() {
    let node = ClusterNode::start("csi-grow").await;
    let state = tempfile::tempdir().unwrap();
    let d = driver_with(&node, state.path(), true, true).await;
    csi_driver_object(&node, json!({"attachRequired": false})).await;
    d.create_volume("vol-g").unwrap();
    csi_claim(&node, "grow", "pv-grow", "vol-g", &["ReadWriteOnce"]).await;
    node.create_pod(pod("grower", vec![claim_volume("grow", false)], false))
        .await;
    let p = node.wait_api_running("grower").await;
    assert!(!methods(&d, "vol-g").contains(&"NodeExpandVolume"));

    // The external resizer's part: the PV grown, the claim waiting for the node.
    let mut pv = node
        .api
        .get("persistentvolumes", "", "pv-grow")
        .await
        .unwrap();
    pv["spec"]["capacity"]["storage"] = json!("2Mi");
    node.api
        .update("persistentvolumes", "", "pv-grow", pv)
        .await
        .unwrap();
    let mut c = node
        .api
        .get("persistentvolumeclaims", NAMESPACE, "grow")
        .await
        .unwrap();
    c["status"]["conditions"] = json!([{"type": "FileSystemResizePending", "status": "True"}]);
    node.api
        .update_status("persistentvolumeclaims", NAMESPACE, "grow", c)
        .await
        .unwrap();
    // A sync of the pod (as the periodic resync would make one).
    node.api
        .patch(
            "pods",
            NAMESPACE,
            "grower",
            ferrolet_integration::apiserver::PatchType::Merge,
            &json!({"metadata": {"labels": {"resync": "1"}}}),
            None,
        )
        .await
        .unwrap();
    let claim = node
        .wait_object(
            "persistentvolumeclaims",
            NAMESPACE,
            "grow",
            "with the new capacity",
            |c| c["status"]["capacity"]["storage"] == "2Mi",
            Duration::from_secs(60),
        )
        .await;
    assert!(
        claim["status"]["conditions"]
            .as_array()
            .is_none_or(|c| c.is_empty()),
        "{claim:#}"
    );
    let expand = d
        .calls()
        .into_iter()
        .find(|c| c.method == "NodeExpandVolume")
        .unwrap();
    let uid = p["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        expand.path,
        node.node
            .root_dir()
            .join("pods")
            .join(uid)
            .join("volumes/kubernetes.io~csi/pv-grow/mount")
            .display()
            .to_string()
    );
    let events = node.pod_events("grower").await;
    let ok = events
        .iter()
        .find(|e| e["reason"] == "FileSystemResizeSuccessful")
        .unwrap();
    assert_eq!(
        ok["message"],
        format!(
            "MountVolume.NodeExpandVolume succeeded for volume \"pv-grow\" {}",
            node.node_name
        )
    );
    node.teardown().await;
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_gets_the_pods_tokens_and_republishes_on_every_sync_when_it_asks() {
    let node = ClusterNode::start("csi-tokens").await;
    let state = tempfile::tempdir().unwrap();
    let d = driver(&node, state.path(), false).await;
    node.api
        .create(
            "serviceaccounts",
            NAMESPACE,
            json!({"metadata": {"name": "builder"}}),
        )
        .await
        .unwrap();
    csi_driver_object(
        &node,
        json!({"attachRequired": false, "requiresRepublish": true,
               "tokenRequests": [{"audience": "csi.test", "expirationSeconds": 3600}]}),
    )
    .await;
    d.create_volume("vol-t").unwrap();
    csi_claim(&node, "tok", "pv-tok", "vol-t", &["ReadWriteOnce"]).await;
    node.create_pod(pod("tokens", vec![claim_volume("tok", false)], false))
        .await;
    node.wait_api_running("tokens").await;
    let publish = d
        .calls()
        .into_iter()
        .find(|c| c.method == "NodePublishVolume")
        .unwrap();
    let tokens: Value =
        serde_json::from_str(&publish.context["csi.storage.k8s.io/serviceAccount.tokens"]).unwrap();
    assert!(
        tokens["csi.test"]["token"]
            .as_str()
            .is_some_and(|t| t.split('.').count() == 3),
        "{tokens}"
    );
    assert!(
        tokens["csi.test"]["expirationTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{tokens}"
    );

    // requiresRepublish: a sync of the pod publishes the volume again.
    let before = methods(&d, "vol-t").len();
    node.api
        .patch(
            "pods",
            NAMESPACE,
            "tokens",
            ferrolet_integration::apiserver::PatchType::Merge,
            &json!({"metadata": {"labels": {"resync": "1"}}}),
            None,
        )
        .await
        .unwrap();
    wait_until("published again", Duration::from_secs(30), || {
        methods(&d, "vol-t").len() > before
    })
    .await;
    assert_eq!(methods(&d, "vol-t").last(), Some(&"NodePublishVolume"));
    node.teardown().await;
    drop(d);
}
