//! ferrolet-cri killed with SIGKILL and started again: every pod and container comes back
//! with the same ids, states, IPs and log paths, an exit during the outage is reported with
//! its real code and time, logs keep flowing into the same files, and the network set up
//! before the crash is torn down after it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::BTreeMap;
use std::path::Path;

use ferrolet_integration::cri::poll;
use ferrolet_integration::leak::LeakChecker;
use ferrolet_integration::pods::{
    ContainerBuilder, CriNode, LONG, log_file, now_nanos, pids_with_cmdline, read_log,
};
use ferrolet_proto::cri::{ContainerState, PodSandboxState};

/// The numbers the counter container printed, in log order.
fn counter_values(path: &Path) -> Vec<u64> {
    read_log(path)
        .iter()
        .filter(|l| l.stream == "stdout" && !l.partial)
        .filter_map(|l| l.message.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_ferrolet_cri_recovers_pods_containers_exits_and_logs() {
    let node = CriNode::start("recovery").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let trigger = node.scratch.path().join("trigger");
    std::fs::create_dir_all(&trigger).unwrap();
    let pod = node.pod("recovery").label("app", "recovery").build();
    let pod_id = api.run_pod(&pod).await.unwrap();

    let counter = ContainerBuilder::new("counter", &busybox.reference)
        .shell("i=0; while :; do echo $i; i=$((i+1)); sleep 0.1; done")
        .build();
    let counter_id = api.run_container(&pod_id, &pod, &counter).await.unwrap();
    // Exits with 7 once the test says so (while ferrolet-cri is down), not on a timer, so a
    // slow machine cannot make it exit before the crash.
    let waiter_script =
        "while [ ! -e /trigger/go ]; do sleep 0.1; done; touch /trigger/exiting; exit 7";
    let waiter = ContainerBuilder::new("waiter", &busybox.reference)
        .shell(waiter_script)
        .mount(&trigger, "/trigger", false)
        .build();
    let waiter_id = api.run_container(&pod_id, &pod, &waiter).await.unwrap();
    let counter_log = log_file(&pod, "counter.log");
    poll("the counter to print", LONG, || async {
        let n = counter_values(&counter_log).len();
        if n >= 3 {
            Ok(())
        } else {
            Err(format!("{n} lines"))
        }
    })
    .await;

    let pod_before = api.pod_status(&pod_id).await.unwrap().status.unwrap();
    let mut before = BTreeMap::new();
    for id in [&counter_id, &waiter_id] {
        before.insert(id.clone(), api.container_status(id).await.unwrap());
    }
    let listed_pods: Vec<String> = api
        .list_pods(None)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    let mut listed_containers: Vec<String> = api
        .list_containers(None)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    listed_containers.sort();

    // Crash; the waiter exits while nobody watches.
    let killed_at = now_nanos();
    node.cri.kill();
    let last_before = counter_values(&counter_log).last().copied().unwrap();
    std::fs::write(trigger.join("go"), "").unwrap();
    let waiter_cmdline = format!("sh -c {waiter_script}");
    poll("the waiter to exit during the outage", LONG, || async {
        let exiting = trigger.join("exiting").exists();
        let alive = pids_with_cmdline(&waiter_cmdline);
        if exiting && alive.is_empty() {
            Ok(())
        } else {
            Err(format!("exiting: {exiting}, pids {alive:?}"))
        }
    })
    .await;
    node.cri.respawn();
    let api = node.api().await;

    // Same objects, same facts (the first call may have to wait for start-up to finish).
    let listed: Vec<String> = poll("ListPodSandbox after the restart", LONG, || async {
        api.list_pods(None).await.map_err(|e| e.to_string())
    })
    .await
    .into_iter()
    .map(|p| p.id)
    .collect();
    assert_eq!(listed, listed_pods);
    let mut listed: Vec<String> = api
        .list_containers(None)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    listed.sort();
    assert_eq!(listed, listed_containers);
    let pod_after = api.pod_status(&pod_id).await.unwrap().status.unwrap();
    assert_eq!(pod_after.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(pod_after.network, pod_before.network, "same IPs");
    assert_eq!(pod_after.created_at, pod_before.created_at);
    assert_eq!(pod_after.metadata, pod_before.metadata);
    assert_eq!(pod_after.labels, pod_before.labels);

    let counter_after = api.container_status(&counter_id).await.unwrap();
    let counter_before = &before[&counter_id];
    assert_eq!(counter_after.state, ContainerState::ContainerRunning as i32);
    assert_eq!(
        (
            counter_after.created_at,
            counter_after.started_at,
            &counter_after.log_path
        ),
        (
            counter_before.created_at,
            counter_before.started_at,
            &counter_before.log_path
        )
    );
    assert_eq!(counter_after.image_ref, counter_before.image_ref);

    let waiter_after = api.container_status(&waiter_id).await.unwrap();
    let waiter_before = &before[&waiter_id];
    assert_eq!(
        waiter_after.state,
        ContainerState::ContainerExited as i32,
        "{waiter_after:?}"
    );
    assert_eq!(
        (waiter_after.exit_code, waiter_after.reason.as_str()),
        (7, "Error")
    );
    assert!(
        waiter_after.finished_at > killed_at,
        "finished_at {} is the real exit time, after the kill at {killed_at}",
        waiter_after.finished_at
    );
    assert_eq!(
        (waiter_after.started_at, &waiter_after.log_path),
        (waiter_before.started_at, &waiter_before.log_path)
    );

    // The counter's output keeps flowing into the same file, in order.
    let target = last_before + 20;
    let values = poll(
        "the counter to keep logging after the restart",
        LONG,
        || async {
            let v = counter_values(&counter_log);
            match v.last() {
                Some(&n) if n >= target => Ok(v),
                last => Err(format!("last value {last:?}, want {target}")),
            }
        },
    )
    .await;
    assert!(
        values.windows(2).all(|w| w[1] > w[0]),
        "counter values out of order: {values:?}"
    );
    // The container is reachable again.
    assert_eq!(api.exec_ok(&counter_id, &["echo", "back"]).await, "back\n");

    // The network set up before the crash comes down through the CNI cache.
    api.stop_pod(&pod_id).await.unwrap();
    let stopped = api.container_status(&counter_id).await.unwrap();
    assert_eq!(stopped.state, ContainerState::ContainerExited as i32);
    LeakChecker::new()
        .bridge(&node.net.bridge)
        .ipam_dir(&node.net.ipam_dir)
        .cni_cache_dir(&node.net.cache_dir)
        .netns_dir(&node.net.netns_dir)
        .assert_clean()
        .await;
    node.teardown().await;
}
