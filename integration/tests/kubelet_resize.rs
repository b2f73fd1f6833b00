//! In-place pod resize (issue #38): a running API pod's CPU and memory change without a
//! restart through the test API server (Kubernetes 1.28's validation and `status.resize`),
//! ferrolet (allocation against the node, the pod cgroup and CRI UpdateContainerResources in
//! Go's order, the allocation checkpoint) and ferrolet-cri (ContainerStatus.resources read
//! back from the updated spec), on real containerd, runc and cgroups. Each test has its own
//! API server and node and ends with the node's teardown and leak checks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::time::Duration;

use ferrolet_integration::apiserver::{ApiServerOptions, PatchType, TestApiServer};
use ferrolet_integration::cgroups;
use ferrolet_integration::cluster::{ClusterNode, NAMESPACE};
use ferrolet_integration::kubelet::image;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// A Guaranteed one-container busybox pod `name` with `cpu` and `memory`, running `script`.
fn guaranteed(name: &str, cpu: &str, memory: &str, script: &str, policy: Value) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": image("busybox"),
                "command": ["sh", "-c", script],
                "resources": {
                    "requests": {"cpu": cpu, "memory": memory},
                    "limits": {"cpu": cpu, "memory": memory},
                },
                "resizePolicy": policy,
            }],
        },
    })
}

const IDLE: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// Patches pod `name`'s container `main` to `cpu` and `memory` (requests = limits).
async fn resize(node: &ClusterNode, name: &str, cpu: &str, memory: &str) -> Result<Value, String> {
    let patch = json!([{
        "op": "replace",
        "path": "/spec/containers/0/resources",
        "value": {
            "requests": {"cpu": cpu, "memory": memory},
            "limits": {"cpu": cpu, "memory": memory},
        },
    }]);
    node.api
        .patch("pods", NAMESPACE, name, PatchType::Json, &patch, None)
        .await
        .map_err(|e| e.to_string())
}

fn main_status(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

fn condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Whether the status shows `cpu`/`memory` applied and allocated, and no resize left.
fn resized_to(pod: &Value, cpu: &str, memory: &str) -> bool {
    let s = main_status(pod);
    s["resources"]["limits"]["cpu"] == cpu
        && s["resources"]["limits"]["memory"] == memory
        && s["resources"]["requests"]["cpu"] == cpu
        && s["allocatedResources"]["cpu"] == cpu
        && s["allocatedResources"]["memory"] == memory
        && pod["status"]["resize"].is_null()
        && condition(pod, "PodResizeInProgress").is_none()
        && condition(pod, "PodResizePending").is_none()
}

/// The CRI id of a status's container.
fn cri_id(status: &Value) -> String {
    status["containerID"]
        .as_str()
        .unwrap()
        .split_once("://")
        .unwrap()
        .1
        .to_string()
}

/// ContainerStatus.resources (linux) and the container's own cgroup (from its process).
async fn runtime_view(node: &ClusterNode, id: &str) -> (Value, String) {
    let api = node.node.node.api().await;
    let (status, info) = api.container_status_verbose(id, true).await.unwrap();
    let linux = status.resources.and_then(|r| r.linux).unwrap();
    let info: Value = serde_json::from_str(&info["info"]).unwrap();
    let pid = info["pid"].as_u64().unwrap() as u32;
    let cgroup = cgroups::of_process(pid, "memory").unwrap();
    (
        json!({
            "cpu_quota": linux.cpu_quota,
            "cpu_period": linux.cpu_period,
            "cpu_shares": linux.cpu_shares,
            "memory": linux.memory_limit_in_bytes,
        }),
        cgroup,
    )
}

/// A Guaranteed pod's cgroup.
fn pod_cgroup(node: &ClusterNode, pod: &Value) -> String {
    format!(
        "{}/kubepods/pod{}",
        node.node.cgroup_root,
        pod["metadata"]["uid"].as_str().unwrap()
    )
}

/// The checkpoint of allocations under the node's root dir.
fn checkpoint(node: &ClusterNode) -> String {
    std::fs::read_to_string(node.node.root_dir().join("allocated_pods_state")).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_container_resizes_in_place_and_keeps_it_across_a_restart() {
    let node = ClusterNode::start("resize-up").await;
    node.create_pod(guaranteed("web", "200m", "64Mi", IDLE, json!([])))
        .await;
    let before = node.wait_api_running("web").await;
    let id = cri_id(main_status(&before));
    assert!(resized_to(&before, "200m", "64Mi"), "{before:#}");
    let uid = before["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(checkpoint(&node).contains(&uid), "admission allocates");

    resize(&node, "web", "400m", "128Mi").await.unwrap();
    let after = node
        .wait_api_pod("web", "resized", |p| resized_to(p, "400m", "128Mi"), WAIT)
        .await;
    let s = main_status(&after);
    assert_eq!(s["restartCount"], 0, "{after:#}");
    assert_eq!(cri_id(s), id, "the same container: {after:#}");

    let (cri, container) = runtime_view(&node, &id).await;
    assert_eq!(cri["cpu_quota"], 40_000, "{cri}");
    assert_eq!(cri["cpu_shares"], 409, "{cri}");
    assert_eq!(cri["memory"], 128 << 20, "{cri}");
    let pod_cg = pod_cgroup(&node, &after);
    for cg in [container.as_str(), pod_cg.as_str()] {
        assert_eq!(cgroups::memory_limit(cg), Some(128 << 20), "{cg}");
        assert_eq!(cgroups::cpu_quota(cg).map(|(q, _)| q), Some(40_000), "{cg}");
    }
    assert_eq!(cgroups::cpu_weight(&pod_cg), cgroups::weight_of_shares(409));
    println!(
        "resized in place: {container} and {pod_cg} at quota 40000, memory {}; v2 = {}",
        128 << 20,
        cgroups::v2()
    );

    // kill -9 and back: the allocation is kept, nothing is re-applied or restarted.
    node.node.kill_kubelet();
    node.node.restart_kubelet().await;
    assert!(checkpoint(&node).contains("400m"), "{}", checkpoint(&node));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = node
        .wait_api_pod(
            "web",
            "still resized",
            |p| resized_to(p, "400m", "128Mi"),
            WAIT,
        )
        .await;
    assert_eq!(main_status(&again)["restartCount"], 0, "{again:#}");
    assert_eq!(cri_id(main_status(&again)), id);

    node.delete_pod("web").await;
    node.wait_api_pod_gone("web", WAIT).await;
    let deadline = std::time::Instant::now() + WAIT;
    while checkpoint(&node).contains(&uid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the allocation outlives its pod"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resizes_that_never_fit_are_infeasible_and_those_that_fit_later_are_deferred() {
    let node = ClusterNode::start("resize-fit").await;
    let n = node
        .wait_node("allocatable", |n| {
            n["status"]["allocatable"]["cpu"].is_string()
        })
        .await;
    let cpu = n["status"]["allocatable"]["cpu"]
        .as_str()
        .unwrap()
        .to_string();
    let alloc_milli: i64 = match cpu.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => cpu.parse::<i64>().unwrap() * 1000,
    };
    node.create_pod(guaranteed("a", "200m", "32Mi", IDLE, json!([])))
        .await;
    node.create_pod(guaranteed("b", "500m", "32Mi", IDLE, json!([])))
        .await;
    node.wait_api_running("a").await;
    node.wait_api_running("b").await;

    resize(&node, "a", "1000", "32Mi").await.unwrap();
    let infeasible = node
        .wait_api_pod(
            "a",
            "Infeasible",
            |p| condition(p, "PodResizePending").is_some_and(|c| c["reason"] == "Infeasible"),
            WAIT,
        )
        .await;
    let c = condition(&infeasible, "PodResizePending").unwrap();
    assert_eq!(
        c["message"],
        format!(
            "Node didn't have enough capacity: cpu, requested: 1000000, capacity: {alloc_milli}"
        ),
        "{infeasible:#}"
    );
    assert_eq!(infeasible["status"]["resize"], "Infeasible");
    assert_eq!(
        main_status(&infeasible)["allocatedResources"]["cpu"],
        "200m"
    );

    // Fits the node alone, not beside b.
    let target = format!("{}m", alloc_milli - 200);
    resize(&node, "a", &target, "32Mi").await.unwrap();
    let deferred = node
        .wait_api_pod(
            "a",
            "Deferred",
            |p| condition(p, "PodResizePending").is_some_and(|c| c["reason"] == "Deferred"),
            WAIT,
        )
        .await;
    let message = condition(&deferred, "PodResizePending").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with("Node didn't have enough resource: cpu, requested: "),
        "{message}"
    );
    assert_eq!(deferred["status"]["resize"], "Deferred");
    assert_eq!(main_status(&deferred)["resources"]["limits"]["cpu"], "200m");

    // b goes: the deferred resize is allocated and applied on a later sync.
    node.delete_pod("b").await;
    node.wait_api_pod_gone("b", WAIT).await;
    let done = node
        .wait_api_pod("a", "resized", |p| resized_to(p, &target, "32Mi"), WAIT)
        .await;
    assert_eq!(main_status(&done)["restartCount"], 0);
    println!("infeasible: {c}; deferred: {message}; applied {target} once b was gone");
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_container_policy_restarts_with_the_new_memory_limit() {
    let node = ClusterNode::start("resize-restart").await;
    let policy = json!([
        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "RestartContainer"},
    ]);
    node.create_pod(guaranteed("r", "100m", "64Mi", IDLE, policy))
        .await;
    let before = node.wait_api_running("r").await;
    let old = cri_id(main_status(&before));
    resize(&node, "r", "100m", "96Mi").await.unwrap();
    let after = node
        .wait_api_pod(
            "r",
            "restarted with 96Mi",
            |p| resized_to(p, "100m", "96Mi") && main_status(p)["restartCount"] == 1,
            WAIT,
        )
        .await;
    let id = cri_id(main_status(&after));
    assert_ne!(id, old, "a new container");
    let (cri, container) = runtime_view(&node, &id).await;
    assert_eq!(cri["memory"], 96 << 20, "{cri}");
    assert_eq!(cgroups::memory_limit(&container), Some(96 << 20));
    assert_eq!(
        cgroups::memory_limit(&pod_cgroup(&node, &after)),
        Some(96 << 20)
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_limit_below_usage_is_not_applied() {
    let node = ClusterNode::start("resize-below").await;
    // 48 MiB of tmpfs pages, charged to the container, then idle.
    let script = format!("dd if=/dev/zero of=/dev/shm/fill bs=1M count=48 2>/dev/null; {IDLE}");
    node.create_pod(guaranteed("m", "100m", "96Mi", &script, json!([])))
        .await;
    let before = node.wait_api_running("m").await;
    let id = cri_id(main_status(&before));
    let api = node.node.node.api().await;
    let deadline = std::time::Instant::now() + WAIT;
    while api.sh(&id, "wc -c < /dev/shm/fill").await.1.trim() != (48 << 20).to_string() {
        assert!(
            std::time::Instant::now() < deadline,
            "the container never filled its tmpfs"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    resize(&node, "m", "100m", "32Mi").await.unwrap();
    let refused = node
        .wait_api_pod(
            "m",
            "resize error",
            |p| condition(p, "PodResizeInProgress").is_some_and(|c| c["reason"] == "Error"),
            WAIT,
        )
        .await;
    let c = condition(&refused, "PodResizeInProgress").unwrap();
    assert_eq!(
        c["message"],
        "aborting attempt to set pod memory limit less than current memory usage for pod m",
        "{refused:#}"
    );
    assert_eq!(refused["status"]["resize"], "InProgress");
    let s = main_status(&refused);
    assert_eq!(s["restartCount"], 0);
    assert_eq!(s["resources"]["limits"]["memory"], "96Mi", "{refused:#}");
    assert_eq!(s["allocatedResources"]["memory"], "32Mi", "{refused:#}");
    let (cri, container) = runtime_view(&node, &id).await;
    assert_eq!(cri["memory"], 96 << 20, "{cri}");
    assert_eq!(cgroups::memory_limit(&container), Some(96 << 20));
    println!("refused: {c}");
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_takes_cpu_and_memory_changes_only_and_proposes_them() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let api = TestApiServer::start(ApiServerOptions::default())
        .await
        .unwrap();
    let mut pod = guaranteed("p", "100m", "64Mi", IDLE, json!([]));
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    api.create("pods", NAMESPACE, pod).await.unwrap();
    let status = json!({"status": {"phase": "Running", "containerStatuses": [{
        "name": "main", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "",
        "allocatedResources": {"cpu": "100m", "memory": "64Mi"},
    }]}});
    api.patch(
        "pods",
        NAMESPACE,
        "p",
        PatchType::Merge,
        &status,
        Some("status"),
    )
    .await
    .unwrap();
    let patch = |path: &str, value: Value| json!([{"op": "replace", "path": path, "value": value}]);

    // Requests below limits would make it Burstable.
    let qos = api
        .patch(
            "pods",
            NAMESPACE,
            "p",
            PatchType::Json,
            &patch("/spec/containers/0/resources/requests/cpu", json!("50m")),
            None,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        qos.contains(
            "Pod \"p\" is invalid: metadata: Invalid value: \"Burstable\": Pod QoS is immutable"
        ),
        "{qos}"
    );
    let other = api
        .patch(
            "pods",
            NAMESPACE,
            "p",
            PatchType::Json,
            &patch("/spec/containers/0/command", json!(["true"])),
            None,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        other.contains("spec: Forbidden: pod updates may not change fields other than")
            && other.contains("`spec.containers[*].resources` (for CPU/memory only)"),
        "{other}"
    );
    let ok = api
        .patch(
            "pods",
            NAMESPACE,
            "p",
            PatchType::Json,
            &patch(
                "/spec/containers/0/resources",
                json!({"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}),
            ),
            None,
        )
        .await
        .unwrap();
    assert_eq!(ok["status"]["resize"], "Proposed", "{ok:#}");
    // The kubelet's status fields round-trip.
    let kubelet = json!({"status": {"resize": "InProgress", "conditions": [
        {"type": "PodResizeInProgress", "status": "True"},
    ], "containerStatuses": [{
        "name": "main", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "",
        "allocatedResources": {"cpu": "200m", "memory": "64Mi"},
        "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}, "requests": {"cpu": "200m", "memory": "64Mi"}},
    }]}});
    let back = api
        .patch(
            "pods",
            NAMESPACE,
            "p",
            PatchType::Merge,
            &kubelet,
            Some("status"),
        )
        .await
        .unwrap();
    assert_eq!(back["status"]["resize"], "InProgress");
    assert_eq!(
        back["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"],
        "200m"
    );
}
