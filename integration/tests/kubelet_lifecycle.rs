//! `ferrolet` pod lifecycle end to end (issue #6 acceptance): an edited manifest is a new pod
//! (new UID, new containers, the old ones gone); a removed manifest stops its pod within the
//! pod's grace period (a container trapping SIGTERM exits at once, one ignoring it is killed
//! when the grace period ends) and leaves nothing in CRI; `ferrolet` killed and restarted
//! adopts the running containers without restarting them; `ferrolet-cri` killed and
//! restarted leaves the pods running and ferrolet carries on.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, container_id, container_status, image, is_ready, is_running, pod_ip,
    pod_uid, restart_count, sh, started_at,
};
use ferrolet_integration::pods::{LONG, http_get};
use serde_json::Value;

const HTTPD_BODY: &str = "ferrolet httpd ok\n";

/// A busybox pod `name` whose one container `main` runs `script`, stopped within `grace` s.
fn busybox_pod(name: &str, grace: u32, script: &str) -> String {
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: {name}
        spec:
          terminationGracePeriodSeconds: {grace}
          containers:
          - name: main
            image: {image}
            command: {command}
        "#,
        image = image("busybox"),
        command = sh(script),
    )
}

/// Every container status of `pod` as (name, id, startedAt, restartCount).
fn instances(pod: &Value) -> Vec<(String, String, String, i64)> {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                container_id(c).to_string(),
                started_at(c).to_string(),
                restart_count(c),
            )
        })
        .collect()
}

/// The ids of the sandboxes and containers CRI has for `uid`.
async fn runtime_ids(node: &KubeletNode, uid: &str) -> BTreeSet<String> {
    let (sandboxes, containers) = node.runtime_objects(uid).await;
    sandboxes
        .into_iter()
        .map(|s| s.id)
        .chain(containers.into_iter().map(|c| c.id))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_manifest_recreates_the_pod_and_a_removed_one_stops_it() {
    let node = KubeletNode::start("edit").await;
    let versioned = |v: &str| busybox_pod("edit", 5, &format!("echo version {v}; {IDLE}"));

    // Editing a manifest replaces the pod: new UID, new container, the old ones removed.
    node.write_manifest("edit.yaml", &versioned("one"));
    let first = node.wait_running("edit").await;
    node.wait_log_line("edit", "main", "version one").await;
    let first_uid = pod_uid(&first).to_string();
    let first_ids = runtime_ids(&node, &first_uid).await;
    assert_eq!(
        first_ids.len(),
        2,
        "one sandbox, one container: {first_ids:?}"
    );
    let first_container = container_id(container_status(&first, "main").unwrap()).to_string();
    node.write_manifest("edit.yaml", &versioned("two"));
    let second = node
        .wait_pod(
            "edit",
            |p| {
                pod_uid(p) != first_uid
                    && container_status(p, "main").is_some_and(|c| is_running(c) && is_ready(c))
            },
            LONG,
        )
        .await;
    let second_uid = pod_uid(&second).to_string();
    let second_container = container_id(container_status(&second, "main").unwrap()).to_string();
    assert_ne!(second_container, first_container);
    let log = node.wait_log_line("edit", "main", "version two").await;
    assert_eq!(log, "version two\n");
    ferrolet_integration::cri::poll("the old pod to leave CRI", LONG, || async {
        let left = runtime_ids(&node, &first_uid).await;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("left: {left:?}"))
        }
    })
    .await;
    let second_ids = runtime_ids(&node, &second_uid).await;
    assert!(
        second_ids.is_disjoint(&first_ids),
        "{second_ids:?} vs {first_ids:?}"
    );

    // Removing manifests stops the pods within their grace periods.
    let out = node.host_dir().join("out");
    let trapping = format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: trapping
        spec:
          terminationGracePeriodSeconds: 60
          containers:
          - name: main
            image: {image}
            command: {command}
            volumeMounts:
            - {{name: out, mountPath: /out}}
          volumes:
          - name: out
            hostPath:
              path: {path}
              type: DirectoryOrCreate
        "#,
        image = image("busybox"),
        command =
            sh("trap 'echo term > /out/trapped; exit 0' TERM; echo ready; sleep 100000 & wait"),
        path = Value::from(out.display().to_string()),
    );
    node.write_manifest("trapping.yaml", &trapping);
    node.write_manifest(
        "stubborn.yaml",
        &busybox_pod(
            "stubborn",
            3,
            "trap '' TERM; echo ready; while true; do sleep 1; done",
        ),
    );
    let mut uids = BTreeMap::new();
    for name in ["trapping", "stubborn"] {
        let pod = node.wait_running(name).await;
        // "ready" comes after the trap is set.
        node.wait_log_line(name, "main", "ready").await;
        uids.insert(name, pod_uid(&pod).to_string());
    }
    node.remove_manifest("trapping.yaml");
    node.remove_manifest("stubborn.yaml");
    let removed = Instant::now();
    let mut gone_after = BTreeMap::new();
    while gone_after.len() < uids.len() {
        for (name, uid) in &uids {
            if !gone_after.contains_key(name) && runtime_ids(&node, uid).await.is_empty() {
                gone_after.insert(*name, removed.elapsed());
            }
        }
        assert!(
            removed.elapsed() < Duration::from_secs(90),
            "pods still in CRI 90 s after their manifests went: gone so far {gone_after:?}\n\
             ferrolet log tail:\n{}",
            ferrolet_integration::pods::log_tail(&node.kubelet_log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let trapped = std::fs::read_to_string(out.join("trapped")).unwrap_or_default();
    assert_eq!(trapped, "term\n", "the trapping container got SIGTERM");
    assert!(
        gone_after["trapping"] < Duration::from_secs(30),
        "a container exiting on SIGTERM took {:?} to go (grace period 60 s)",
        gone_after["trapping"]
    );
    assert!(
        gone_after["stubborn"] >= Duration::from_millis(2500),
        "a container ignoring SIGTERM went after {:?}, before its 3 s grace period",
        gone_after["stubborn"]
    );
    assert!(
        gone_after["stubborn"] < Duration::from_secs(30),
        "a container ignoring SIGTERM was killed only after {:?} (grace period 3 s)",
        gone_after["stubborn"]
    );
    for name in ["trapping", "stubborn"] {
        node.wait_pod_gone(name, LONG).await;
    }
    // The edited pod beside them is untouched.
    let edit = node.wait_running("edit").await;
    assert_eq!(pod_uid(&edit), second_uid);
    assert_eq!(instances(&edit), instances(&second));

    node.teardown().await;
}

/// A static pod's manifest put back while the pod is being stopped (the same content, so the
/// same UID): once the stop is done the pod runs again, in a new container, and stays running
/// (it was lost before: the stop's clean-up dropped the pod the source had just added back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_put_back_while_its_pod_stops_starts_it_again() {
    let node = KubeletNode::start("comeback").await;
    // SIGTERM takes it 2 s to act on, so the manifest comes back during the stop.
    let manifest = busybox_pod(
        "comeback",
        30,
        "trap 'sleep 2; exit 0' TERM; echo ready; while true; do sleep 1 & wait; done",
    );
    node.write_manifest("comeback.yaml", &manifest);
    let first = node.wait_running("comeback").await;
    node.wait_log_line("comeback", "main", "ready").await;
    let uid = pod_uid(&first).to_string();
    let first_id = container_id(container_status(&first, "main").unwrap()).to_string();

    node.remove_manifest("comeback.yaml");
    tokio::time::sleep(Duration::from_millis(700)).await;
    node.write_manifest("comeback.yaml", &manifest);

    let again = node
        .wait_pod(
            "comeback",
            |p| {
                p["status"]["phase"] == "Running"
                    && container_status(p, "main")
                        .is_some_and(|c| is_running(c) && container_id(c) != first_id)
            },
            LONG,
        )
        .await;
    assert_eq!(pod_uid(&again), uid, "the same pod, started again");
    let second_id = container_id(container_status(&again, "main").unwrap()).to_string();
    // It stays: housekeeping does not take it for a stray, no late kill stops it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = node.wait_running("comeback").await;
    assert_eq!(
        container_id(container_status(&later, "main").unwrap()),
        second_id,
        "{later}"
    );
    let (sandboxes, containers) = node.runtime_objects(&uid).await;
    assert!(
        containers.iter().any(|c| c.id == second_id),
        "{containers:?}"
    );
    assert!(!sandboxes.is_empty());
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_of_ferrolet_and_ferrolet_cri_leave_running_pods_alone() {
    let node = KubeletNode::start("restart").await;
    node.write_manifest(
        "steady.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: steady
            spec:
              terminationGracePeriodSeconds: 5
              containers:
              - name: idle
                image: {busybox}
                command: {idle}
              - name: httpd
                image: {httpd}
            "#,
            busybox = image("busybox"),
            idle = sh(IDLE),
            httpd = image("httpd"),
        ),
    );
    let before = node.wait_running("steady").await;
    let uid = pod_uid(&before).to_string();
    let ip: Ipv4Addr = pod_ip(&before).parse().unwrap();
    let ids = runtime_ids(&node, &uid).await;
    assert_eq!(ids.len(), 3, "one sandbox, two containers: {ids:?}");
    let running = instances(&before);
    assert_eq!(running.len(), 2, "{before:#}");
    assert!(
        running
            .iter()
            .all(|(_, id, started, restarts)| !id.is_empty()
                && !started.is_empty()
                && *restarts == 0),
        "{running:?}"
    );

    // ferrolet crashes and comes back: it adopts the containers, restarts none.
    let old_pid = node.kubelet_pid();
    node.kill_kubelet();
    assert_eq!(
        http_get(SocketAddr::from((ip, 8080)), LONG)
            .await
            .as_deref(),
        Ok(HTTPD_BODY),
        "the pod serves while ferrolet is down"
    );
    node.restart_kubelet().await;
    assert_ne!(node.kubelet_pid(), old_pid);
    let after = node.wait_running("steady").await;
    assert_eq!(pod_uid(&after), uid);
    assert_eq!(
        instances(&after),
        running,
        "containers after a ferrolet restart"
    );
    assert_eq!(runtime_ids(&node, &uid).await, ids);
    // Past a full resync (syncFrequency 10 s), still nothing restarted.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let later = node.wait_running("steady").await;
    assert_eq!(instances(&later), running, "containers a resync later");
    assert_eq!(runtime_ids(&node, &uid).await, ids);

    // ferrolet-cri crashes and comes back: the pod keeps running, ferrolet carries on.
    node.restart_cri();
    assert_eq!(
        http_get(SocketAddr::from((ip, 8080)), LONG)
            .await
            .as_deref(),
        Ok(HTTPD_BODY),
        "the pod serves after ferrolet-cri's restart"
    );
    node.write_manifest("after.yaml", &busybox_pod("after", 5, IDLE));
    node.wait_running("after").await;
    let steady = node.wait_running("steady").await;
    assert_eq!(
        instances(&steady),
        running,
        "containers after a ferrolet-cri restart"
    );
    assert_eq!(runtime_ids(&node, &uid).await, ids);

    node.teardown().await;
}
