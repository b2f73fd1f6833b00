//! ferrolet-cri under faults of its clients and of containerd: a client that goes away in the
//! middle of RunPodSandbox (a kubelet killed, a deadline passed) leaves a sandbox it can find
//! or nothing; a teardown step that containerd cannot do (it is restarting) fails the call,
//! which a retry finishes; a rollback that containerd cannot finish is finished by the
//! sweeper; and the sweeper leaves alone what is not ferrolet-cri's.
//!
//! These tests kill this binary's containerd, so they take turns ([`SERIAL`]).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::HashMap;
use std::time::Duration;

use ferrolet_integration::containerd::ContainerdDown;
use ferrolet_integration::cri::poll;
use ferrolet_integration::network::TestNetwork;
use ferrolet_integration::pods::{ContainerBuilder, CriNode, LONG, NodeOptions};
use ferrolet_proto::containerd::services::v1::container::Runtime;
use ferrolet_proto::containerd::services::v1::snapshots::{
    PrepareSnapshotRequest, RemoveSnapshotRequest,
};
use ferrolet_proto::containerd::services::v1::{
    Container as Record, CreateContainerRequest, CreateRequest as CreateLeaseRequest,
    DeleteContainerRequest, DeleteRequest as DeleteLeaseRequest, ListContainersRequest,
    ListRequest as ListLeasesRequest,
};
use ferrolet_proto::cri::{ContainerState, PodSandboxState};
use serde_json::json;
use tonic::Code;

/// Tests that kill containerd must not overlap with any other test of this binary.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A first-in-chain plugin whose first ADD writes its pid to `stalled` beside it and waits for
/// a `released` file there, then succeeds (`stall-then-pass`) or fails (`stall-then-fail`);
/// every later ADD, and every DEL, passes at once.
fn stalling_plugin(then: &str) -> String {
    let outcome = match then {
        "pass" => "echo '{\"cniVersion\":\"1.0.0\"}'\nexit 0",
        _ => {
            "echo '{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"stalled then failed\"}'\nexit 1"
        }
    };
    format!(
        "#!/bin/sh\ncat >/dev/null\nd=$(dirname \"$0\")\n\
         if [ \"$CNI_COMMAND\" != ADD ] || [ -e \"$d/stalled\" ]; then echo '{{\"cniVersion\":\"1.0.0\"}}'; exit 0; fi\n\
         echo $$ > \"$d/stalled\"\nwhile [ ! -e \"$d/released\" ]; do sleep 0.05; done\n{outcome}\n"
    )
}

async fn stalling_node(name: &str, then: &'static str) -> CriNode {
    CriNode::start_with(
        name,
        NodeOptions {
            plugins: Some(Box::new(move |net: &TestNetwork| {
                net.fake_plugin("stalling", &stalling_plugin(then));
                vec![json!({"type": "stalling"}), net.bridge_plugin()]
            })),
            // A sweep soon after a failed teardown, and the periodic ones often.
            extra_config: String::new(),
        },
    )
    .await
}

async fn wait_stalled(node: &CriNode) {
    let marker = node.net.fake_bin_dir.join("stalled");
    poll("the CNI chain to stall", LONG, || {
        let marker = marker.clone();
        async move {
            if marker.exists() {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        }
    })
    .await;
}

fn release(node: &CriNode) {
    std::fs::write(node.net.fake_bin_dir.join("released"), "").unwrap();
}

/// Polls until nothing of the node's pods is left (the sweeper works on its own time).
async fn wait_no_leaks(node: &CriNode, limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let leaks = node.pod_leaks().await;
        if leaks.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} leak(s) after {limit:?}:\n  - {}\nferrolet-cri log tail:\n{}",
            leaks.len(),
            leaks.join("\n  - "),
            ferrolet_integration::pods::log_tail(&node.cri.log_text(), 40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_run_pod_sandbox_finds_its_sandbox_listed() {
    let _turn = SERIAL.lock().await;
    let node = stalling_node("clientgone", "pass").await;
    let api = node.api().await;
    let pod = node.pod("clientgone").build();
    let first = {
        let (api, pod) = (api.clone(), pod.clone());
        tokio::spawn(async move {
            tokio::time::timeout(Duration::from_secs(2), api.run_pod(&pod)).await
        })
    };
    wait_stalled(&node).await;
    // The client gives up while CNI ADD runs: tonic cancels its stream, as when a kubelet
    // dies or its runtimeRequestTimeout passes.
    assert!(
        first.await.unwrap().is_err(),
        "the first call's client timed out"
    );
    release(&node);
    // The call ran to its end: the kubelet that comes back finds the sandbox.
    let sandbox = poll("the sandbox to be listed ready", LONG, || async {
        let pods = api.list_pods(None).await.map_err(|e| e.to_string())?;
        match pods.as_slice() {
            [p] if p.state == PodSandboxState::SandboxReady as i32 => Ok(p.clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    node.track_ids([sandbox.id.clone()]);
    // Its name stays reserved for it, as containerd's CRI keeps it.
    let again = api.run_pod(&pod).await.unwrap_err();
    assert_eq!(again.code(), Code::AlreadyExists, "{again}");
    assert!(again.message().contains(&sandbox.id), "{again}");
    for _ in 0..2 {
        api.stop_pod(&sandbox.id).await.unwrap();
        api.remove_pod(&sandbox.id).await.unwrap();
    }
    node.assert_no_pod_leaks().await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_while_containerd_is_down_fail_and_their_retries_leave_nothing() {
    let _turn = SERIAL.lock().await;
    let node = CriNode::start("cddown").await;
    let image = node.pull("busybox").await;
    let api = node.api().await;
    let pod = node.pod("cddown").build();
    let sandbox = api.run_pod(&pod).await.unwrap();
    let exited = api
        .run_container(
            &sandbox,
            &pod,
            &ContainerBuilder::new("exits", &image.reference)
                .shell("exit 3")
                .build(),
        )
        .await
        .unwrap();
    let running = api
        .run_container(
            &sandbox,
            &pod,
            &ContainerBuilder::new("runs", &image.reference)
                .shell("trap 'exit 0' TERM; sleep 100000 & wait")
                .build(),
        )
        .await
        .unwrap();
    assert_eq!(api.wait_exited(&exited, LONG).await.exit_code, 3);

    let down = ContainerdDown::killed();
    // Each removal needs containerd: it fails, says why, and the object stays listed.
    let err = api.remove_container(&exited).await.unwrap_err();
    println!("RemoveContainer with containerd down: {err}");
    assert!(err.message().contains(&exited), "{err}");
    let err = api.remove_pod(&sandbox).await.unwrap_err();
    println!("RemovePodSandbox with containerd down: {err}");
    let listed = api.list_containers(None).await.unwrap();
    assert_eq!(listed.len(), 2, "both containers still listed: {listed:?}");
    assert_eq!(api.list_pods(None).await.unwrap().len(), 1);
    drop(down);

    // Once containerd is back, the retries finish the job.
    poll("RemoveContainer to succeed again", LONG, || async {
        api.remove_container(&exited)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    api.remove_container(&exited).await.unwrap();
    let state = api.container_status(&running).await.unwrap().state;
    assert_eq!(state, ContainerState::ContainerRunning as i32);
    for _ in 0..2 {
        api.stop_pod(&sandbox).await.unwrap();
        api.remove_pod(&sandbox).await.unwrap();
    }
    assert!(api.list_containers(None).await.unwrap().is_empty());
    node.assert_no_pod_leaks().await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_containerd_could_not_finish_is_finished_by_the_sweeper() {
    let _turn = SERIAL.lock().await;
    let node = stalling_node("sweeprollback", "fail").await;
    let api = node.api().await;
    let pod = node.pod("sweeprollback").build();
    let run = {
        let (api, pod) = (api.clone(), pod.clone());
        tokio::spawn(async move { api.run_pod(&pod).await })
    };
    wait_stalled(&node).await;
    // The sandbox's containerd record is made beside CNI ADD.
    node.wait_containerd_records(1).await;
    // ADD fails while containerd is down: the rollback cannot delete the record.
    let down = ContainerdDown::killed();
    release(&node);
    let err = run.await.unwrap().unwrap_err();
    assert!(err.message().contains("stalled then failed"), "{err}");
    assert!(
        api.list_pods(None).await.unwrap().is_empty(),
        "nothing listed"
    );
    drop(down);
    // The sweeper finishes the teardown from the sandbox's record.
    wait_no_leaks(&node, LONG).await;
    // The name was released with the failed attempt: the next one runs.
    let sandbox = api.run_pod(&pod).await.unwrap();
    api.stop_pod(&sandbox).await.unwrap();
    api.remove_pod(&sandbox).await.unwrap();
    node.assert_no_pod_leaks().await;
    let log = node.cri.log_text();
    assert!(
        log.contains("sweeper: removed what nobody owned"),
        "the sweeper said what it removed:\n{}",
        ferrolet_integration::pods::log_tail(&log, 40)
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_leaves_what_is_not_ferrolet_cris() {
    let _turn = SERIAL.lock().await;
    let node = CriNode::start_with(
        "sweepothers",
        NodeOptions {
            extra_config: "sweep_interval_secs = 1\n".into(),
            ..Default::default()
        },
    )
    .await;
    let image = node.pull("busybox").await;
    let cd = node.ns.client.clone();
    // Another client of the namespace (containerd's own CRI, ctr) made these: a record with
    // the CRI kind label but not our metadata, an unlabelled snapshot with an id-like key, a
    // lease of its own.
    let key = "f".repeat(64);
    let chain_id = image_chain_id(&node, &image.reference).await;
    cd.leases()
        .create(CreateLeaseRequest {
            id: "someone-else".into(),
            labels: HashMap::new(),
        })
        .await
        .unwrap();
    // Held by its lease, as any client holds what it is making (containerd's GC would
    // otherwise collect an unreferenced snapshot by itself).
    cd.with_lease("someone-else")
        .unwrap()
        .snapshots()
        .prepare(PrepareSnapshotRequest {
            snapshotter: "overlayfs".into(),
            key: key.clone(),
            parent: chain_id,
            labels: HashMap::new(),
        })
        .await
        .unwrap();
    cd.containers()
        .create(CreateContainerRequest {
            container: Some(Record {
                id: "e".repeat(64),
                labels: HashMap::from([("io.cri-containerd.kind".into(), "container".into())]),
                image: image.reference.clone(),
                runtime: Some(Runtime {
                    name: "io.containerd.runc.v2".into(),
                    options: None,
                }),
                spec: Some(ferrolet_proto::prost_types::Any {
                    type_url: "types.containerd.io/opencontainers/runtime-spec/1/Spec".into(),
                    value: b"{}".to_vec(),
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    // Sweeps at start-up and every second: give it a restart and a few periods.
    node.cri.restart_after_kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let records = cd
        .containers()
        .list(ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(records.len(), 1, "the other client's record stays");
    let leases = cd
        .leases()
        .list(ListLeasesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .leases;
    assert!(leases.iter().any(|l| l.id == "someone-else"), "{leases:?}");
    cd.snapshots()
        .remove(RemoveSnapshotRequest {
            snapshotter: "overlayfs".into(),
            key: key.clone(),
        })
        .await
        .expect("the other client's snapshot stays");
    cd.containers()
        .delete(DeleteContainerRequest { id: "e".repeat(64) })
        .await
        .unwrap();
    cd.leases()
        .delete(DeleteLeaseRequest {
            id: "someone-else".into(),
            sync: false,
        })
        .await
        .unwrap();
    node.assert_no_pod_leaks().await;
    node.teardown().await;
}

/// The chain id of an image the node pulled (its top layer's committed snapshot).
async fn image_chain_id(node: &CriNode, reference: &str) -> String {
    let mut images = node.images().await;
    let status = images
        .image_status(ferrolet_proto::cri::ImageStatusRequest {
            image: Some(ferrolet_integration::pods::image_spec(reference)),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(&status.info["info"]).unwrap();
    info["chainID"].as_str().unwrap().to_string()
}
