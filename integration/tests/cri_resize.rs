//! UpdateContainerResources as the Go kubelet's in-place resize sends it (issue #38), on
//! ferrolet-cri and on containerd's own CRI: a running container created with the kubelet's
//! resources gets new CPU and memory values, its cgroup follows, and ContainerStatus.resources
//! reports what is applied, the same on both runtimes (what `crictl inspect` shows).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use ferrolet_integration::cgroups;
use ferrolet_integration::containerd_cri::ContainerdCriNode;
use ferrolet_integration::cri::RuntimeApi;
use ferrolet_integration::pods::{ContainerBuilder, CriNode, PodCgroup};
use ferrolet_proto::cri::{
    LinuxContainerResources, PodSandboxConfig, UpdateContainerResourcesRequest,
};
use serde_json::Value;

/// What the Go kubelet 1.28 sends for requests = limits of `milli` CPU and `memory` bytes
/// (`generateLinuxContainerResources`; no swap, no unified keys on cgroup v1).
fn kubelet_resources(milli: i64, memory: i64) -> LinuxContainerResources {
    LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: milli * 100,
        cpu_shares: milli * 1024 / 1000,
        memory_limit_in_bytes: memory,
        oom_score_adj: -997,
        ..Default::default()
    }
}

/// Runs one container with 200m/64Mi, updates it to 500m/128Mi, and returns
/// ContainerStatus.resources (linux) before and after, checking the cgroup follows.
async fn resize_on(api: &RuntimeApi, pod: &PodSandboxConfig, busybox: &str) -> (Value, Value) {
    let pod_id = api.run_pod(pod).await.unwrap();
    let mut config = ContainerBuilder::new("resized", busybox)
        .shell("sleep 100000")
        .build();
    config.linux.get_or_insert_with(Default::default).resources =
        Some(kubelet_resources(200, 64 << 20));
    let id = api.run_container(&pod_id, pod, &config).await.unwrap();
    let report = |s: ferrolet_proto::cri::ContainerStatus| {
        let l = s.resources.and_then(|r| r.linux);
        serde_json::to_value(l.map(|l| {
            (
                l.cpu_period,
                l.cpu_quota,
                l.cpu_shares,
                l.memory_limit_in_bytes,
                l.oom_score_adj,
            )
        }))
        .unwrap()
    };
    let before = report(api.container_status(&id).await.unwrap());
    let mut client = api.client();
    client
        .update_container_resources(UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(kubelet_resources(500, 128 << 20)),
            ..Default::default()
        })
        .await
        .unwrap();
    let (status, info) = api.container_status_verbose(&id, true).await.unwrap();
    let after = report(status);
    // containerd's verbose info has the pid as ours does.
    let info: Value = serde_json::from_str(&info["info"]).unwrap();
    let pid = info["pid"].as_u64().unwrap() as u32;
    let cg = cgroups::of_process(pid, "memory").unwrap();
    assert_eq!(cgroups::memory_limit(&cg), Some(128 << 20), "{cg}");
    assert_eq!(
        cgroups::cpu_quota(&cg).map(|(q, _)| q),
        Some(50_000),
        "{cg}"
    );
    api.stop_pod(&pod_id).await.unwrap();
    api.remove_pod(&pod_id).await.unwrap();
    (before, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_container_resources_reports_the_same_as_containerd_cri() {
    let cgroup = PodCgroup::new("resize-ours");
    let node = CriNode::start("resize-ours").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("resize").cgroup_parent(&cgroup.path).build();
    let ours = resize_on(&api, &pod, &busybox.reference).await;
    node.teardown().await;
    drop(cgroup);

    let cgroup = PodCgroup::new("resize-cd");
    let node = ContainerdCriNode::start("resize-cd").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("resize").cgroup_parent(&cgroup.path).build();
    let theirs = resize_on(&api, &pod, &busybox.reference).await;
    node.teardown().await;
    drop(cgroup);

    println!("ferrolet-cri (period, quota, shares, memory, oom_score_adj): {ours:?}");
    println!("containerd's CRI: {theirs:?}");
    assert_eq!(
        ours.1.as_array().unwrap()[..4],
        serde_json::json!([100_000, 50_000, 512, 128 << 20])
            .as_array()
            .unwrap()[..],
        "what is applied after the update"
    );
    assert_eq!(
        ours, theirs,
        "ferrolet-cri reports what containerd's CRI reports"
    );
}
