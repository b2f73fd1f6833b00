//! A pod's shim through the faults a node meets, for each runtime type ferrolet-cri can run
//! pods under (the one parameter of every test): containerd stopped (SIGTERM, as systemd
//! stops it) and started again, ferrolet-cri restarted, and the pod's shim killed -9. After
//! the first two the pod's containers run on with the same pids and the same shim, an exit
//! during the outage is reported with its code, and an exec works; after the last, the
//! containers are reported exited, their processes are gone, and the pod is torn down. Every
//! test ends with the pod stopped and removed and nothing left: processes, shims and their
//! sockets, mounts, netns, containerd records and tasks.
//!
//! These tests stop this binary's containerd, so they take turns ([`SERIAL`]).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::PathBuf;

use ferrolet_integration::containerd::{ContainerdDown, containerd, containerd_version};
use ferrolet_integration::cri::{RuntimeApi, poll};
use ferrolet_integration::leak::{shim_pids, shim_socket};
use ferrolet_integration::pods::{
    ContainerBuilder, CriNode, LONG, NodeOptions, now_nanos, pids_with_cmdline,
};
use ferrolet_proto::containerd::services::v1::ListContainersRequest;
use ferrolet_proto::cri::{ContainerState, PodSandboxState};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Tests that stop containerd must not overlap with any other test of this binary.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// containerd's runc shim.
const GO_SHIM: &str = "io.containerd.runc.v2";
/// Ours.
const FERROLET_SHIM: &str = "io.containerd.ferrolet.v1";

/// What the waiter container runs: exits 7 once the test writes `/trigger/go`, not on a
/// timer, so a slow machine cannot make it exit before the fault.
const WAITER_SCRIPT: &str =
    "while [ ! -e /trigger/go ]; do sleep 0.1; done; touch /trigger/exiting; exit 7";

/// A pod of two long-running containers and a waiter, on a node whose default handler runs
/// `runtime_type`.
struct ShimPod {
    node: CriNode,
    api: RuntimeApi,
    pod_id: String,
    /// The long-running containers.
    runners: Vec<String>,
    /// Each runner's `sleep <marker>`, the process a test finds it by on the host.
    sleeps: Vec<String>,
    waiter: String,
    trigger: PathBuf,
}

impl ShimPod {
    async fn start(name: &str, runtime_type: &str) -> Self {
        let node = CriNode::start_with(
            name,
            NodeOptions {
                extra_config: format!("runtime_type = {runtime_type:?}\n"),
                ..Default::default()
            },
        )
        .await;
        let api = node.api().await;
        let busybox = node.pull("busybox").await;
        let trigger = node.scratch.path().join("trigger");
        std::fs::create_dir_all(&trigger).unwrap();
        let pod = node.pod(name).build();
        let pod_id = api.run_pod(&pod).await.unwrap();
        let mut runners = Vec::new();
        let mut sleeps = Vec::new();
        for k in 0..2 {
            let sleep = format!("sleep {}", node.marker(k));
            let runner = ContainerBuilder::new(&format!("runner{k}"), &busybox.reference)
                .shell(&format!("trap 'exit 0' TERM; {sleep} & wait"))
                .build();
            runners.push(api.run_container(&pod_id, &pod, &runner).await.unwrap());
            sleeps.push(sleep);
        }
        let waiter = ContainerBuilder::new("waiter", &busybox.reference)
            .shell(WAITER_SCRIPT)
            .mount(&trigger, "/trigger", false)
            .build();
        let waiter = api.run_container(&pod_id, &pod, &waiter).await.unwrap();
        let this = Self {
            node,
            api,
            pod_id,
            runners,
            sleeps,
            waiter,
            trigger,
        };
        this.assert_runtime_type(runtime_type).await;
        this
    }

    /// Every record is made with `runtime_type`, every verbose status says so, and the pod's
    /// containers share one shim, listening on the socket its sandbox id names.
    async fn assert_runtime_type(&self, runtime_type: &str) {
        let records = self
            .node
            .ns
            .client
            .containers()
            .list(ListContainersRequest::default())
            .await
            .unwrap()
            .into_inner()
            .containers;
        assert_eq!(records.len(), 4, "the sandbox's record and 3 containers'");
        for r in &records {
            let name = r.runtime.as_ref().map(|rt| rt.name.as_str());
            assert_eq!(name, Some(runtime_type), "record {}", r.id);
        }
        let (_, info) = self
            .api
            .container_status_verbose(&self.runners[0], true)
            .await
            .unwrap();
        assert_eq!(info_field(&info, "runtimeType"), runtime_type);
        let status = self
            .api
            .client()
            .pod_sandbox_status(ferrolet_proto::cri::PodSandboxStatusRequest {
                pod_sandbox_id: self.pod_id.clone(),
                verbose: true,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(info_field(&status.info, "runtimeType"), runtime_type);
        assert_eq!(self.shims().len(), 1, "one shim per pod");
        let socket = shim_socket(containerd().socket(), &self.node.ns.name, &self.pod_id);
        assert!(
            socket.exists(),
            "the pod's shim listens on {}",
            socket.display()
        );
    }

    /// Pids of the shims of the node's namespace.
    fn shims(&self) -> Vec<u32> {
        shim_pids(containerd().socket(), &self.node.ns.name)
    }

    /// The runners' pids, as ContainerStatus reports them (verbose).
    async fn runner_pids(&self) -> Vec<u64> {
        let mut pids = Vec::new();
        for id in &self.runners {
            let (status, info) = self.api.container_status_verbose(id, true).await.unwrap();
            assert_eq!(
                status.state,
                ContainerState::ContainerRunning as i32,
                "{id}"
            );
            let pid = info_json(&info)["pid"].as_u64().unwrap();
            assert!(pid > 0, "{id} has a pid");
            pids.push(pid);
        }
        pids
    }

    /// Tells the waiter to exit and waits until its process is gone; returns when it was told.
    async fn exit_waiter(&self) -> i64 {
        let told = now_nanos();
        std::fs::write(self.trigger.join("go"), "").unwrap();
        let cmdline = format!("sh -c {WAITER_SCRIPT}");
        poll("the waiter to exit", LONG, || async {
            let exiting = self.trigger.join("exiting").exists();
            let alive = pids_with_cmdline(&cmdline);
            if exiting && alive.is_empty() {
                Ok(())
            } else {
                Err(format!("exiting: {exiting}, pids {alive:?}"))
            }
        })
        .await;
        told
    }

    /// The waiter is reported exited with its own code, at a time after `told`.
    async fn assert_waiter_exited(&self, told: i64) {
        let s = self.api.wait_exited(&self.waiter, LONG).await;
        assert_eq!((s.exit_code, s.reason.as_str()), (7, "Error"), "{s:?}");
        assert_finished_after(&s, told);
    }

    /// The waiter, which exited while containerd 2.x was down, is reported exited with the
    /// code nobody knows any more: containerd 2.x, started again, deletes every task whose
    /// process has gone and that is no sandbox of its own sandbox store ("cleaning leaked shim
    /// process", core/runtime/v2/shim_load.go) before anyone can read its status; its own CRI
    /// then reports 255 too (internal/cri/server/restart.go). containerd 1.6 keeps the task.
    async fn assert_waiter_exited_over_a_containerd_restart(&self, told: i64) {
        if containerd_version().0 < 2 {
            return self.assert_waiter_exited(told).await;
        }
        let s = self.api.wait_exited(&self.waiter, LONG).await;
        assert_eq!(s.exit_code, 255, "{s:?}");
        assert!(s.message.contains("exit status is unknown"), "{s:?}");
        assert_finished_after(&s, told);
    }

    /// After a fault the pod lives on: the runners run with the pids they had, under the shim
    /// they had, and take an exec.
    async fn assert_lives_on(&self, pids: &[u64], shims: &[u32]) {
        let pod = poll("PodSandboxStatus after the fault", LONG, || async {
            self.api
                .pod_status(&self.pod_id)
                .await
                .map_err(|e| e.to_string())
        })
        .await;
        let state = pod.status.unwrap().state;
        assert_eq!(state, PodSandboxState::SandboxReady as i32);
        assert_eq!(
            self.runner_pids().await,
            pids,
            "the runners kept their pids"
        );
        assert_eq!(self.shims(), shims, "the same shim");
        for id in &self.runners {
            assert_eq!(self.api.exec_ok(id, &["echo", "after"]).await, "after\n");
        }
    }

    /// Stops and removes the pod; nothing of it may be left (shims and their sockets
    /// included), then the node goes.
    async fn teardown(self) {
        self.api.stop_pod(&self.pod_id).await.unwrap();
        self.api.remove_pod(&self.pod_id).await.unwrap();
        assert!(self.api.list_containers(None).await.unwrap().is_empty());
        for sleep in &self.sleeps {
            assert!(pids_with_cmdline(sleep).is_empty(), "{sleep} is gone");
        }
        self.node.assert_no_pod_leaks().await;
        self.node.teardown().await;
    }
}

/// A waiter told to exit at `told` finished after it.
fn assert_finished_after(s: &ferrolet_proto::cri::ContainerStatus, told: i64) {
    assert!(
        s.finished_at > told,
        "finished_at {} comes after the test told the waiter to exit at {told}",
        s.finished_at
    );
}

/// The verbose status's `info` JSON.
fn info_json(info: &std::collections::HashMap<String, String>) -> serde_json::Value {
    serde_json::from_str(&info["info"]).unwrap()
}

/// One string field of the verbose status's `info` JSON.
fn info_field(info: &std::collections::HashMap<String, String>, field: &str) -> String {
    info_json(info)[field]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// containerd stopped (SIGTERM) with a pod running, the waiter exiting meanwhile, and started
/// again on the same root, state and socket.
async fn a_containerd_restart_keeps_the_pod_running(runtime_type: &str) {
    let _turn = SERIAL.lock().await;
    let pod = ShimPod::start("shimcd", runtime_type).await;
    let pids = pod.runner_pids().await;
    let shims = pod.shims();

    let down = ContainerdDown::terminated();
    let told = pod.exit_waiter().await;
    drop(down);

    pod.assert_lives_on(&pids, &shims).await;
    pod.assert_waiter_exited_over_a_containerd_restart(told)
        .await;
    pod.teardown().await;
}

/// ferrolet-cri stopped (SIGTERM) with a pod running, the waiter exiting meanwhile, and
/// started again.
async fn a_ferrolet_cri_restart_keeps_the_pod_running(runtime_type: &str) {
    let _turn = SERIAL.lock().await;
    let mut pod = ShimPod::start("shimcri", runtime_type).await;
    let pids = pod.runner_pids().await;
    let shims = pod.shims();

    assert!(pod.node.cri.terminate(), "ferrolet-cri exits 0 on SIGTERM");
    let told = pod.exit_waiter().await;
    pod.node.cri.respawn();
    pod.api = pod.node.api().await;

    pod.assert_lives_on(&pids, &shims).await;
    pod.assert_waiter_exited(told).await;
    pod.teardown().await;
}

/// The pod's shim killed with SIGKILL, the waiter having exited before: the runners are
/// reported exited with the code containerd gives a dead shim's tasks, their processes are
/// gone, the waiter keeps its own code, and the pod is torn down without residue.
async fn a_killed_shim_s_containers_are_reported_exited(runtime_type: &str, exit_code: i32) {
    let _turn = SERIAL.lock().await;
    let pod = ShimPod::start("shimkill", runtime_type).await;
    let pids = pod.runner_pids().await;
    let told = pod.exit_waiter().await;
    pod.assert_waiter_exited(told).await;
    let shims = pod.shims();
    assert_eq!(shims.len(), 1, "one shim: {shims:?}");

    let killed_at = now_nanos();
    kill(Pid::from_raw(shims[0] as i32), Signal::SIGKILL).unwrap();
    for id in &pod.runners {
        let s = pod.api.wait_exited(id, LONG).await;
        println!(
            "{runtime_type}: a killed shim's container: exit code {}, reason {:?}",
            s.exit_code, s.reason
        );
        assert_eq!(s.exit_code, exit_code, "{s:?}");
        assert!(s.finished_at >= killed_at, "{s:?}");
    }
    poll("the runners' processes to go", LONG, || async {
        let alive: Vec<u64> = pids
            .iter()
            .copied()
            .filter(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
            .collect();
        let sleeping: Vec<&String> = pod
            .sleeps
            .iter()
            .filter(|s| !pids_with_cmdline(s).is_empty())
            .collect();
        if alive.is_empty() && sleeping.is_empty() {
            Ok(())
        } else {
            Err(format!("pids {alive:?}, {sleeping:?}"))
        }
    })
    .await;
    assert!(pod.shims().is_empty(), "no shim left");
    let waiter = pod.api.container_status(&pod.waiter).await.unwrap();
    assert_eq!(waiter.exit_code, 7, "{waiter:?}");
    pod.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_shim_a_containerd_restart_keeps_the_pod_running() {
    a_containerd_restart_keeps_the_pod_running(GO_SHIM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_shim_a_ferrolet_cri_restart_keeps_the_pod_running() {
    a_ferrolet_cri_restart_keeps_the_pod_running(GO_SHIM).await;
}

/// containerd cleans a dead Go shim's tasks up with the shim binary's `delete`, which reports
/// 128 + SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_shim_a_killed_shim_s_containers_are_reported_exited() {
    a_killed_shim_s_containers_are_reported_exited(GO_SHIM, 137).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferrolet_shim_a_containerd_restart_keeps_the_pod_running() {
    a_containerd_restart_keeps_the_pod_running(FERROLET_SHIM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferrolet_shim_a_ferrolet_cri_restart_keeps_the_pod_running() {
    a_ferrolet_cri_restart_keeps_the_pod_running(FERROLET_SHIM).await;
}

/// Ours reports a killed shim's tasks as the Go shim does: containerd runs its `delete`, which
/// answers 128 + SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferrolet_shim_a_killed_shim_s_containers_are_reported_exited() {
    a_killed_shim_s_containers_are_reported_exited(FERROLET_SHIM, 137).await;
}
