//! Pod networking failures through ferrolet-cri: a failing CNI plugin rolls RunPodSandbox back
//! completely, a crash in the middle of CNI ADD leaves nothing once the pod is stopped and
//! removed, and Status reports NetworkReady only with a valid CNI config.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use ferrolet_integration::cri::poll;
use ferrolet_integration::network::TestNetwork;
use ferrolet_integration::pods::{CriNode, LONG, NodeOptions};
use ferrolet_proto::cri::PodSandboxState;
use serde_json::json;

/// A chained plugin that fails ADD with a CNI error (and lets DEL pass, as a plugin must).
const FAILING_PLUGIN: &str = "#!/bin/sh\ncat >/dev/null\n[ \"$CNI_COMMAND\" = ADD ] || exit 0\n\
echo '{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"resource busy\",\"details\":\"ferrolet test plugin\"}'\nexit 1\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_cni_plugin_fails_run_pod_sandbox_and_leaves_nothing() {
    let node = CriNode::start_with(
        "cnifail",
        NodeOptions {
            plugins: Some(Box::new(|net: &TestNetwork| {
                net.fake_plugin("failing", FAILING_PLUGIN);
                // After bridge and portmap have done their work, so there is something to
                // roll back: a veth, an IP, portmap rules.
                vec![
                    net.bridge_plugin(),
                    net.portmap_plugin(),
                    json!({"type": "failing"}),
                ]
            })),
            ..Default::default()
        },
    )
    .await;
    let api = node.api().await;
    let pod = node.pod("cnifail").port(8080, node.host_port(0)).build();
    for attempt in 0..2 {
        // The second time proves the name was released and the rollback repeats cleanly.
        let err = api.run_pod(&pod).await.unwrap_err();
        assert!(
            err.message().contains("resource busy"),
            "attempt {attempt}: the plugin's message is passed on: {err}"
        );
        assert!(
            api.list_pods(None).await.unwrap().is_empty(),
            "no sandbox listed"
        );
        node.assert_no_pod_leaks().await;
        // portmap's rules carry the network name in their comments.
        let rules = TestNetwork::iptables_lines(&format!("\"{}\"", node.net.name));
        assert!(rules.is_empty(), "portmap rules left: {rules:?}");
    }
    node.teardown().await;
}

/// A chained plugin whose ADD writes its pid to `$STALL_MARKER` and then hangs (the test
/// crashes ferrolet-cri meanwhile and kills it); DEL passes.
const STALLING_PLUGIN: &str = "#!/bin/sh\ncat >/dev/null\n[ \"$CNI_COMMAND\" = ADD ] || exit 0\n\
echo $$ > \"$(dirname \"$0\")/stalled\"\nexec sleep 600\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_cni_add_leaves_nothing_once_the_pod_is_stopped_and_removed() {
    let node = CriNode::start_with(
        "cnicrash",
        NodeOptions {
            plugins: Some(Box::new(|net: &TestNetwork| {
                net.fake_plugin("stalling", STALLING_PLUGIN);
                // bridge has reserved an IP and made a veth by the time the chain stalls.
                vec![net.bridge_plugin(), json!({"type": "stalling"})]
            })),
            ..Default::default()
        },
    )
    .await;
    let marker = node.net.fake_bin_dir.join("stalled");
    let api = node.api().await;
    let pod = node.pod("cnicrash").build();
    let run = tokio::spawn(async move { api.run_pod(&pod).await });
    let plugin_pid: i32 = poll("the CNI chain to stall", LONG, || {
        let marker = marker.clone();
        async move {
            let text = tokio::fs::read_to_string(&marker)
                .await
                .map_err(|e| e.to_string())?;
            text.trim().parse::<i32>().map_err(|e| e.to_string())
        }
    })
    .await;
    // The sandbox's containerd record is made beside CNI ADD: wait for it, so the crash comes
    // after ferrolet-cri has recorded a sandbox it will recover.
    node.wait_containerd_records(1).await;
    node.cri.kill();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(plugin_pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(run.await.unwrap().is_err(), "the interrupted call failed");
    let reserved = std::fs::read_dir(node.net.ipam_dir.join(&node.net.name))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("10.199."))
        .count();
    assert_eq!(reserved, 1, "bridge's ADD had reserved an address");

    node.cri.respawn();
    let api = node.api().await;
    let pods = api.list_pods(None).await.unwrap();
    assert_eq!(
        pods.len(),
        1,
        "the half-made sandbox is recovered: {pods:?}"
    );
    assert_eq!(pods[0].state, PodSandboxState::SandboxNotready as i32);
    for _ in 0..2 {
        api.stop_pod(&pods[0].id).await.unwrap();
        api.remove_pod(&pods[0].id).await.unwrap();
    }
    // The address, the veth, the netns and the records all went.
    node.assert_no_pod_leaks().await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_ready_follows_the_cni_config_dir() {
    let node = CriNode::start_with(
        "netready",
        NodeOptions {
            plugins: Some(Box::new(|_: &TestNetwork| Vec::new())),
            ..Default::default()
        },
    )
    .await;
    let api = node.api().await;
    let conditions = api.conditions().await.unwrap();
    let runtime = conditions
        .iter()
        .find(|c| c.r#type == "RuntimeReady")
        .unwrap();
    assert!(runtime.status, "{runtime:?}");
    let network = conditions
        .iter()
        .find(|c| c.r#type == "NetworkReady")
        .unwrap();
    assert!(!network.status, "no CNI config, yet {network:?}");
    assert!(
        !network.reason.is_empty() && !network.message.is_empty(),
        "a reason and a message say why: {network:?}"
    );
    let pod = node.pod("netready").build();
    let err = api.run_pod(&pod).await.unwrap_err();
    println!("RunPodSandbox without a network: {err}");
    node.assert_no_pod_leaks().await;

    // A network plugin installs its config after the node started (as a CNI DaemonSet
    // does): the runtime notices without a restart.
    node.net.write_conflist(vec![node.net.bridge_plugin()]);
    poll("NetworkReady once a config is there", LONG, || async {
        let conditions = api.conditions().await.map_err(|e| e.to_string())?;
        match conditions.iter().find(|c| c.r#type == "NetworkReady") {
            Some(c) if c.status => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // A pod of its own: whether a failed RunPodSandbox keeps its name is not this test's
    // business (the CNI failure test checks the rollback).
    let pod = node.pod("netready-later").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let status = api.pod_status(&pod_id).await.unwrap().status.unwrap();
    assert_eq!(status.state, PodSandboxState::SandboxReady as i32);
    assert!(!status.network.unwrap_or_default().ip.is_empty());

    // The kubelet hands over the pod CIDR; accepting it is enough here.
    api.client()
        .update_runtime_config(ferrolet_proto::cri::UpdateRuntimeConfigRequest {
            runtime_config: Some(ferrolet_proto::cri::RuntimeConfig {
                network_config: Some(ferrolet_proto::cri::NetworkConfig {
                    pod_cidr: node.net.subnet.clone(),
                }),
            }),
        })
        .await
        .unwrap();
    node.teardown().await;
}
