//! `hostUsers: false` static pods through ferrolet and ferrolet-cri (issue #38): each pod gets
//! its own 65536-id range (kept in `<root-dir>/pods/<uid>/userns`, Go's JSON), its
//! containers see it in `/proc/self/uid_map`, its volumes (emptyDir on disk, emptyDir in
//! memory, downwardAPI: static pods cannot have secrets, the memory emptyDir is the same
//! tmpfs a secret volume is) read and write as the pod's root with the files on the host
//! root's, the ranges survive a restart of ferrolet, and a deleted pod's range is free again.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::os::unix::fs::MetadataExt;

use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, container_id, container_status, image, pod_uid, restart_count, sh,
};
use ferrolet_integration::pods::LONG;
use serde_json::Value;

const L: u64 = 65536;

fn manifest(name: &str) -> String {
    let script = sh(&format!(
        "echo pod > /data/f && echo mem > /mem/f && chown 1000:1000 /data/f; {IDLE}"
    ));
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: {name}
          labels: {{app: userns}}
        spec:
          hostUsers: false
          containers:
          - name: main
            image: {busybox}
            command: {script}
            volumeMounts:
            - {{name: data, mountPath: /data}}
            - {{name: mem, mountPath: /mem}}
            - {{name: info, mountPath: /info}}
          volumes:
          - name: data
            emptyDir: {{}}
          - name: mem
            emptyDir: {{medium: Memory, sizeLimit: 8Mi}}
          - name: info
            downwardAPI:
              items:
              - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
        "#,
        busybox = image("busybox"),
    )
}

/// The pod's range as its file says: (first host id, length), uids and gids the same.
fn range_file(node: &KubeletNode, uid: &str) -> (u64, u64) {
    let path = node.root_dir().join("pods").join(uid).join("userns");
    let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(v["uidMappings"], v["gidMappings"], "{v}");
    let m = &v["uidMappings"][0];
    assert_eq!(m["containerId"], 0, "{v}");
    (m["hostId"].as_u64().unwrap(), m["length"].as_u64().unwrap())
}

/// The running container's uid_map as (first host id, length).
async fn uid_map(node: &KubeletNode, id: &str) -> (u64, u64) {
    let api = node.node.api().await;
    let text = api.exec_ok(id, &["cat", "/proc/self/uid_map"]).await;
    let f: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(f.len(), 3, "{text:?}");
    assert_eq!(f[0], 0, "the pod's root is mapped: {text:?}");
    (f[1], f[2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_users_false_pods_get_their_own_ranges_volumes_and_keep_them() {
    let node = KubeletNode::start("userns").await;
    let mut pods = Vec::new();
    for name in ["ua", "ub"] {
        node.write_manifest(&format!("{name}.yaml"), &manifest(name));
        let pod = node.wait_running(&node.pod_name(name)).await;
        let uid = pod_uid(&pod).to_string();
        let id = container_id(container_status(&pod, "main").unwrap()).to_string();
        pods.push((name, uid, id));
    }
    let mut ranges = Vec::new();
    for (name, uid, id) in &pods {
        let (first, len) = range_file(&node, uid);
        assert_eq!(len, L);
        assert_ne!(first, 0);
        assert_eq!(
            uid_map(&node, id).await,
            (first, len),
            "{name}: the file's range"
        );
        let api = node.node.api().await;
        // Inside: the pod's root; its volumes' files are its root's (and the chown'd one
        // 1000's); the downwardAPI file reads.
        let (code, out) = api
            .sh(
                id,
                "id -u; stat -c '%u %g' /data/f /mem/f /info/labels; cat /info/labels; echo; \
                 grep ' /mem ' /proc/mounts | cut -d' ' -f3",
            )
            .await;
        assert_eq!(code, 0, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[..4], ["0", "1000 1000", "0 0", "0 0"], "{out}");
        assert!(out.contains("app=\"userns\""), "{out}");
        assert_eq!(lines.last().copied(), Some("tmpfs"), "{out}");
        // On the host: what the pod's root wrote is host root's.
        let vols = node
            .root_dir()
            .join("pods")
            .join(uid)
            .join("volumes/kubernetes.io~empty-dir");
        let data = std::fs::metadata(vols.join("data/f")).unwrap();
        assert_eq!((data.uid(), data.gid()), (1000, 1000));
        let mem = std::fs::metadata(vols.join("mem/f")).unwrap();
        assert_eq!((mem.uid(), mem.gid()), (0, 0));
        ranges.push(first);
    }
    assert!(
        ranges[0].abs_diff(ranges[1]) >= L,
        "two pods, two disjoint ranges: {ranges:?}"
    );

    // A restart of ferrolet: the same ranges in the files and in the running containers,
    // which are left alone, and a new pod gets none of them.
    node.restart_kubelet().await;
    for ((name, uid, id), first) in pods.iter().zip(&ranges) {
        let pod = node.wait_running(&node.pod_name(name)).await;
        let status = container_status(&pod, "main").unwrap();
        assert_eq!(container_id(status), id, "{name} kept its container");
        assert_eq!(restart_count(status), 0);
        assert_eq!(range_file(&node, uid), (*first, L));
        assert_eq!(uid_map(&node, id).await, (*first, L));
    }
    node.write_manifest("uc.yaml", &manifest("uc"));
    let pod = node.wait_running(&node.pod_name("uc")).await;
    let (c_first, _) = range_file(&node, pod_uid(&pod));
    assert!(!ranges.contains(&c_first), "{c_first} is taken: {ranges:?}");

    // Deleting a pod frees its range: the lowest free one, which the next pod gets.
    let lowest = *ranges.iter().min().unwrap();
    let (gone_name, gone_uid) = pods
        .iter()
        .find(|(_, uid, _)| range_file(&node, uid).0 == lowest)
        .map(|(n, u, _)| (*n, u.clone()))
        .unwrap();
    node.remove_manifest(&format!("{gone_name}.yaml"));
    node.wait_pod_gone(&node.pod_name(gone_name), LONG).await;
    let dir = node.root_dir().join("pods").join(&gone_uid);
    ferrolet_integration::cri::poll("the deleted pod's dir to go", LONG, || {
        let left = dir.exists();
        async move {
            if left {
                Err("still there".to_string())
            } else {
                Ok(())
            }
        }
    })
    .await;
    node.write_manifest("ud.yaml", &manifest("ud"));
    let pod = node.wait_running(&node.pod_name("ud")).await;
    assert_eq!(
        range_file(&node, pod_uid(&pod)).0,
        lowest,
        "the freed range is reused"
    );
    node.teardown().await;
}

/// On containerd's own CRI with this machine's runc 1.1.5 the runtime reports no user
/// namespace support (containerd 1.6 has no runtime handlers in its Status; 2.x wants a runc
/// that idmaps mounts), so ferrolet refuses the pod as Go does: no sandbox, no range taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_without_user_namespaces_gets_no_host_users_false_pod() {
    let node = KubeletNode::start_on_containerd("userns-cd").await;
    node.write_manifest("ux.yaml", &manifest("ux"));
    let pod = node.wait_pod("ux", |p| !pod_uid(p).is_empty(), LONG).await;
    let uid = pod_uid(&pod).to_string();
    ferrolet_integration::cri::poll("the refusal in ferrolet's log", LONG, || {
        let log = node.kubelet_log();
        async move {
            if log.contains(
                "can't set `spec.hostUsers: false`, runtime does not support user namespaces",
            ) {
                Ok(())
            } else {
                Err("not logged yet".to_string())
            }
        }
    })
    .await;
    let (sandboxes, containers) = node.runtime_objects(&uid).await;
    assert!(sandboxes.is_empty() && containers.is_empty());
    assert!(
        !node
            .root_dir()
            .join("pods")
            .join(&uid)
            .join("userns")
            .exists()
    );
    let pod = node.pod("ux").await.unwrap();
    assert_eq!(pod["status"]["phase"], "Pending", "{pod}");
    node.teardown().await;
}

/// In a cluster (the test API server): the Node says the runtime handler supports user
/// namespaces, and a `hostUsers: false` pod reads its secret volume (a tmpfs written by the
/// kubelet as host root) as its root; deleting it in the API frees its range with its dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_pod_reads_its_secret_as_its_root_and_the_node_says_userns() {
    use ferrolet_integration::cluster::{ClusterNode, NAMESPACE};
    use serde_json::json;

    let node = ClusterNode::start("userns-cl").await;
    let status = node
        .wait_node("runtimeHandlers with userNamespaces", |n| {
            n["status"]["runtimeHandlers"]
                .as_array()
                .is_some_and(|hs| hs.iter().any(|h| h["name"] == ""))
        })
        .await;
    let handlers = &status["status"]["runtimeHandlers"];
    assert_eq!(
        handlers[0]["features"]["userNamespaces"], true,
        "{handlers}"
    );
    node.api
        .create(
            "secrets",
            NAMESPACE,
            json!({"metadata": {"name": "creds"}, "data": {"password": "czNjcmV0"}}),
        )
        .await
        .unwrap();
    node.create_pod(json!({
        "metadata": {"name": "sec", "namespace": NAMESPACE},
        "spec": {
            "hostUsers": false,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"fsGroup": 2000},
            "containers": [{
                "name": "main",
                "image": image("busybox"),
                "command": ["sh", "-c", IDLE],
                "volumeMounts": [
                    {"name": "creds", "mountPath": "/creds", "readOnly": true},
                    {"name": "scratch", "mountPath": "/scratch"},
                ],
            }],
            "volumes": [
                {"name": "creds", "secret": {"secretName": "creds"}},
                {"name": "scratch", "emptyDir": {}},
            ],
        },
    }))
    .await;
    let pod = node.wait_api_running("sec").await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let (first, len) = range_file(&node.node, &uid);
    let status = container_status(&pod, "main").unwrap();
    let id = container_id(status).to_string();
    assert_eq!(uid_map(&node.node, &id).await, (first, len));
    let api = node.node.node.api().await;
    // The secret's file: the kubelet's (host root, the fsGroup's group) read as the pod's
    // root and group 2000; the scratch emptyDir is writable by the pod's root.
    let (code, out) = api
        .sh(
            &id,
            "cat /creds/password; echo; stat -L -c '%u %g' /creds/password; \
             echo w > /scratch/f && stat -c '%u' /scratch/f",
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "s3cret\n0 2000\n0\n"), "{out}");
    let dir = node.node.root_dir().join("pods").join(&uid);
    node.delete_pod("sec").await;
    node.wait_api_pod_gone("sec", LONG).await;
    ferrolet_integration::cri::poll("the deleted pod's dir to go", LONG, || {
        let left = dir.exists();
        async move {
            if left {
                Err("still there".to_string())
            } else {
                Ok(())
            }
        }
    })
    .await;
    node.teardown().await;
}
