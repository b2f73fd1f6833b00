//! The static CPU manager (issue #19) on real cgroups, through ferrolet-cri and through
//! containerd's own CRI plugin, on this 2-CPU machine with CPU 0 reserved: a Guaranteed
//! `cpu: 1` container runs on CPU 1 alone (its cgroup's `cpuset.cpus` and the kernel's
//! `Cpus_allowed_list`), the Burstable and BestEffort containers on the shared pool "0" (the
//! one started before it shrunk by the reconcile loop), a second `cpu: 1` pod is refused
//! with Go's `UnexpectedAdmissionError`, `<root>/cpu_manager_state` holds the assignment in
//! Go's JSON and survives a SIGKILL and restart of ferrolet unchanged, and deleting the
//! Guaranteed pod returns CPU 1 to the shared pool: the file's entries go and the other
//! containers are widened back to "0-1". A state file another policy wrote stops the start
//! with Go's message. In-place resize (issue #38): a Guaranteed pod is refused as Go 1.33
//! refuses it under this policy (`Infeasible`), a Burstable one resizes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::Path;
use std::time::Duration;

use ferrolet_integration::cgroups;
use ferrolet_integration::cri::poll;
use ferrolet_integration::kubelet::{
    KubeletNode, RuntimeNode, pod_phase, pod_uid, resources_pod, run_ferrolet_to_exit,
};
use ferrolet_integration::pods::{CriNode, LONG, pids_with_cmdline};
use ferrolet_integration::scratch::Scratch;
use serde_json::Value;

const CONFIG: &str = "cpuManagerPolicy: static
reservedSystemCPUs: \"0\"
cpuManagerReconcilePeriod: 1s
";

const PINNED: &str = "{requests: {cpu: 1, memory: 64Mi}, limits: {cpu: 1, memory: 64Mi}}";

/// The one process running `cmdline`.
fn pid_of(cmdline: &str) -> u32 {
    let pids = pids_with_cmdline(cmdline);
    assert_eq!(pids.len(), 1, "{cmdline}: {pids:?}");
    pids[0]
}

/// The cpuset cgroup of `pid` and its CPUs.
fn cpuset_of(pid: u32) -> (String, String) {
    let cgroup =
        cgroups::of_process(pid, "cpuset").unwrap_or_else(|| panic!("no cpuset cgroup for {pid}"));
    let cpus = cgroups::cpuset_cpus(&cgroup);
    (cgroup, cpus)
}

/// `pid`'s cgroup in `controller`'s hierarchy.
fn cgroup_of(pid: u32, controller: &str) -> String {
    cgroups::of_process(pid, controller).unwrap()
}

/// The CPUs the kernel lets `pid` run on.
fn allowed_cpus(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

/// Polls until the process running `cmdline` has cpuset `want` and may run on those CPUs
/// alone; returns its cgroup.
async fn wait_cpuset(cmdline: &str, want: &str) -> String {
    poll(&format!("{cmdline} on cpuset {want}"), LONG, || async {
        let pids = pids_with_cmdline(cmdline);
        let [pid] = pids[..] else {
            return Err(format!("processes {pids:?}"));
        };
        let (cgroup, cpus) = cpuset_of(pid);
        let allowed = allowed_cpus(pid);
        if cpus == want && allowed == want {
            Ok(cgroup)
        } else {
            Err(format!(
                "cpuset.cpus {cpus:?}, Cpus_allowed_list {allowed:?} in {cgroup}"
            ))
        }
    })
    .await
}

fn state_file(root: &Path) -> String {
    std::fs::read_to_string(root.join("cpu_manager_state")).unwrap()
}

/// The state file as Go writes it: the fields in Go's order, the checksum a number.
fn assert_go_state(text: &str, default: &str, entries: Option<&str>) {
    let json: Value = serde_json::from_str(text).unwrap();
    let entries = entries.map_or(String::new(), |e| format!(r#","entries":{e}"#));
    let head =
        format!(r#"{{"policyName":"static","defaultCpuSet":"{default}"{entries},"checksum":"#);
    assert!(text.starts_with(&head), "{text}\nwanted it to start {head}");
    assert!(json["checksum"].is_u64(), "{text}");
    assert_eq!(text, format!("{head}{}}}", json["checksum"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_policy_pins_a_guaranteed_container_and_survives_a_restart() {
    let node = KubeletNode::start_with_config("cpuman", CONFIG).await;
    scenario(node, 340_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_policy_pins_a_guaranteed_container_and_survives_a_restart_on_containerd_cri() {
    let node = KubeletNode::start_on_containerd_with_config("cd-cpuman", CONFIG).await;
    scenario(node, 350_000).await;
}

async fn scenario<N: RuntimeNode>(node: KubeletNode<N>, base: u32) {
    assert_eq!(
        std::thread::available_parallelism().unwrap().get(),
        2,
        "this test expects the 2-CPU VM"
    );
    let marker = |k: u32| format!("sleep {}", base + k);
    let root = node.root_dir();
    // Go writes the file at start-up: everything shared, nothing assigned.
    assert_go_state(&state_file(&root), "0-1", None);

    // A BestEffort pod first: it starts on every CPU, then shrinks once CPU 1 is taken.
    node.write_manifest("e.yaml", &resources_pod("besteffort", "{}", &marker(0)));
    node.wait_running("besteffort").await;
    wait_cpuset(&marker(0), "0-1").await;
    node.write_manifest("g.yaml", &resources_pod("pinned", PINNED, &marker(1)));
    node.write_manifest(
        "b.yaml",
        &resources_pod("burstable", "{requests: {cpu: 100m}}", &marker(2)),
    );
    let pinned = node.wait_running("pinned").await;
    let uid = pod_uid(&pinned).to_string();
    node.wait_running("burstable").await;
    let kubepods = format!("{}/kubepods", node.cgroup_root);
    let g_cgroup = wait_cpuset(&marker(1), "1").await;
    assert!(
        g_cgroup.starts_with(&format!(
            "{}/",
            cgroups::node_path(&format!("{kubepods}/pod{uid}"))
        )),
        "the pinned container's cgroup {g_cgroup} is not under its pod's"
    );
    let e_cgroup = wait_cpuset(&marker(0), "0").await;
    let b_cgroup = wait_cpuset(&marker(2), "0").await;
    println!("cpusets: pinned {g_cgroup} = 1, besteffort {e_cgroup} = 0, burstable {b_cgroup} = 0");
    let state = state_file(&root);
    println!("state file: {state}");
    assert_go_state(&state, "0", Some(&format!(r#"{{"{uid}":{{"main":"1"}}}}"#)));

    // No CPU left to give: a second Guaranteed pod is refused as Go refuses it.
    node.write_manifest("g2.yaml", &resources_pod("pinned-too", PINNED, &marker(3)));
    let refused = node
        .wait_pod("pinned-too", |p| pod_phase(p) == "Failed", LONG)
        .await;
    assert_eq!(refused["status"]["reason"], "UnexpectedAdmissionError");
    assert_eq!(
        refused["status"]["message"],
        "Pod was rejected: Allocate failed due to not enough cpus available to satisfy request, which is unexpected"
    );
    assert!(pids_with_cmdline(&marker(3)).is_empty());
    node.remove_manifest("g2.yaml");
    node.wait_pod_gone("pinned-too", LONG).await;
    assert_eq!(state_file(&root), state, "a refused pod changed the state");

    // ferrolet dies and comes back: the same file, the containers untouched and pinned.
    let pids: Vec<u32> = (0..3).map(|k| pid_of(&marker(k))).collect();
    node.kill_kubelet();
    node.restart_kubelet().await;
    node.wait_running("pinned").await;
    // A few reconcile passes after the restart.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        state_file(&root),
        state,
        "the state changed across the restart"
    );
    let after: Vec<u32> = (0..3).map(|k| pid_of(&marker(k))).collect();
    assert_eq!(after, pids, "containers were restarted");
    assert_eq!(wait_cpuset(&marker(1), "1").await, g_cgroup);
    wait_cpuset(&marker(0), "0").await;
    wait_cpuset(&marker(2), "0").await;
    // The restart's reconcile pass sent every container its cpuset alone: the rest of its
    // resources are as they were created.
    let pid = pid_of(&marker(1));
    assert_eq!(
        cgroups::memory_limit(&cgroup_of(pid, "memory")),
        Some(64 << 20)
    );
    assert_eq!(
        cgroups::cpu_quota(&cgroup_of(pid, "cpu")),
        Some((100_000, 100_000))
    );
    assert_eq!(
        cgroups::cpu_weight(&cgroup_of(pid, "cpu")),
        cgroups::weight_of_shares(1024)
    );

    // Deleting the Guaranteed pod gives CPU 1 back to everyone else.
    node.remove_manifest("g.yaml");
    node.wait_pod_gone("pinned", LONG).await;
    poll("CPU 1 back in the shared pool", LONG, || async {
        let text = state_file(&root);
        if text.starts_with(r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":"#) {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    let freed = state_file(&root);
    println!("state file after the deletion: {freed}");
    assert_go_state(&freed, "0-1", None);
    wait_cpuset(&marker(0), "0-1").await;
    wait_cpuset(&marker(2), "0-1").await;
    let log = node.kubelet_log();
    assert!(
        !log.contains("cpu manager: failed to update container"),
        "an update failed:\n{log}"
    );
    node.teardown().await;
}

/// ferrolet with `cpuManagerPolicy: static` on a root dir whose state file the `none` policy
/// wrote (a policy switched without draining): it refuses to start, with Go's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_of_another_policy_is_refused() {
    let cri = CriNode::start("cpuman-refused").await;
    let scratch = Scratch::new("kubelet-cpuman-refused");
    let root = scratch.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let state = root.join("cpu_manager_state");
    // What Go (and ferrolet) write with the `none` policy.
    std::fs::write(
        &state,
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#,
    )
    .unwrap();
    let config = scratch.path().join("config.yaml");
    // The runtime's cgroup driver (the test node's is systemd), or the driver check stops the
    // start before the CPU manager's.
    let driver = cgroups::driver_name();
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         cgroupDriver: {driver}\n\
         cgroupsPerQOS: false\n\
         enforceNodeAllocatable: []\n\
         enableServer: false\n\
         healthzPort: 0\n\
         readOnlyPort: 0\n\
         cpuManagerPolicy: static\n\
         reservedSystemCPUs: \"0\"\n"
        ),
    )
    .unwrap();
    let (status, text) = run_ferrolet_to_exit(
        &config,
        &root,
        &cri.cri.endpoint(),
        &scratch.path().join("ferrolet.log"),
    )
    .await;
    assert!(!status.success(), "ferrolet started:\n{text}");
    let want = format!(
        "start cpu manager error: could not restore state from checkpoint: configured policy \
         \"static\" differs from state checkpoint policy \"none\", please drain this node and \
         delete the CPU manager checkpoint file {state:?} before restarting Kubelet"
    );
    assert!(text.contains(&want), "no {want:?} in:\n{text}");
    println!("refused: {want}");
    // The file stays as it was, for the operator to act on.
    assert_eq!(
        std::fs::read_to_string(&state).unwrap(),
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#
    );
    cri.teardown().await;
}

/// In-place resize (issue #38) under the static policy, as Go 1.33: a Guaranteed pod cannot
/// resize (its exclusive CPUs would not follow), `Infeasible` with Go's message, and keeps
/// its CPU; a Burstable pod beside it resizes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guaranteed_pod_does_not_resize_under_the_static_policy() {
    use ferrolet_integration::apiserver::PatchType;
    use ferrolet_integration::cluster::{ClusterNode, ClusterOptions, NAMESPACE};
    use ferrolet_integration::kubelet::{KubeletOptions, image};
    use serde_json::json;

    let node = ClusterNode::start_with(
        "cpuman-resize",
        ClusterOptions {
            kubelet: KubeletOptions {
                extra_config: CONFIG.into(),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    let pod = |name: &str, requests: Value, limits: Value| {
        json!({
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "main",
                    "image": image("busybox"),
                    "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
                    "resources": {"requests": requests, "limits": limits},
                }],
            },
        })
    };
    let pinned = json!({"cpu": "1", "memory": "64Mi"});
    node.create_pod(pod("pinned", pinned.clone(), pinned)).await;
    node.create_pod(pod(
        "shared",
        json!({"cpu": "100m", "memory": "32Mi"}),
        json!({"cpu": "200m", "memory": "64Mi"}),
    ))
    .await;
    node.wait_api_running("pinned").await;
    node.wait_api_running("shared").await;
    let patch = |cpu: &str, memory: &str| {
        json!([{"op": "replace", "path": "/spec/containers/0/resources", "value": {
            "requests": {"cpu": cpu, "memory": memory},
            "limits": {"cpu": cpu, "memory": memory},
        }}])
    };
    node.api
        .patch(
            "pods",
            NAMESPACE,
            "pinned",
            PatchType::Json,
            &patch("1", "96Mi"),
            None,
        )
        .await
        .unwrap();
    let refused = node
        .wait_api_pod(
            "pinned",
            "Infeasible",
            |p| {
                p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "PodResizePending"
                            && c["reason"] == "Infeasible"
                            && c["message"]
                                == "Resize is infeasible for Guaranteed Pods alongside CPU Manager static policy"
                    })
                })
            },
            Duration::from_secs(60),
        )
        .await;
    let s = &refused["status"]["containerStatuses"][0];
    assert_eq!(s["allocatedResources"]["memory"], "64Mi", "{refused:#}");
    assert_eq!(s["resources"]["limits"]["memory"], "64Mi", "{refused:#}");
    // The Burstable pod resizes in the shared pool.
    let shared = json!([{"op": "replace", "path": "/spec/containers/0/resources", "value": {
        "requests": {"cpu": "150m", "memory": "32Mi"},
        "limits": {"cpu": "300m", "memory": "64Mi"},
    }}]);
    node.api
        .patch("pods", NAMESPACE, "shared", PatchType::Json, &shared, None)
        .await
        .unwrap();
    node.wait_api_pod(
        "shared",
        "resized",
        |p| {
            let s = &p["status"]["containerStatuses"][0];
            s["resources"]["limits"]["cpu"] == "300m"
                && s["resources"]["requests"]["cpu"] == "150m"
                && p["status"]["resize"].is_null()
        },
        Duration::from_secs(60),
    )
    .await;
    node.teardown().await;
}
