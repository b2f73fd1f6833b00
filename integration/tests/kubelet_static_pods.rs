//! `ferrolet` in standalone mode (issue #6 acceptance): static pods from a manifest directory
//! driven through the real `ferrolet-cri`, containerd, runc and CNI plugins (and the main
//! scenarios again through containerd's own CRI plugin, the reference), observed through
//! ferrolet's read-only API (`/pods`, `/containerLogs`, `/healthz`) and through CRI. Each test
//! has its own node (manifest/root/log dirs, cgroup root, ports, containerd namespace, CNI
//! network) and ends with the node's teardown and leak checks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use ferrolet_integration::cgroups;
use ferrolet_integration::cri::poll;
use ferrolet_integration::kubelet::{
    CONTAINER_NAME_LABEL, IDLE, KubeletNode, POD_NAMESPACE, RuntimeNode, container_id,
    container_status, host_ip, http_request, image, init_container_status, is_ready, is_running,
    last_terminated, pod_condition, pod_ip, pod_names, pod_phase, pod_uid, restart_count,
    rfc3339_seconds, sh, started_at, terminated, waiting_reason,
};
use ferrolet_integration::pods::{LONG, http_get, pids_with_cmdline};
use ferrolet_proto::cri::{ContainerState, PodSandboxState};
use serde_json::Value;

const HTTPD_BODY: &str = "ferrolet httpd ok\n";
const HTTPD_CMDLINE: &str = "/bin/busybox httpd -f -p 8080 -h /www";

/// A one-container busybox pod running `script`, with `restartPolicy` and extra spec lines.
fn busybox_pod(name: &str, restart_policy: &str, script: &str) -> String {
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: {name}
        spec:
          restartPolicy: {restart_policy}
          terminationGracePeriodSeconds: 5
          containers:
          - name: main
            image: {image}
            command: {command}
        "#,
        image = image("busybox"),
        command = sh(script),
    )
}

fn exit_code(t: Option<&Value>) -> Option<i64> {
    t.and_then(|t| t["exitCode"].as_i64())
}

fn reason(t: Option<&Value>) -> Option<&str> {
    t.and_then(|t| t["reason"].as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_httpd_static_pod_runs_serves_and_reports_ready() {
    httpd_pod_scenario(KubeletNode::start("web").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_httpd_static_pod_runs_serves_and_reports_ready_on_containerd_cri() {
    httpd_pod_scenario(KubeletNode::start_on_containerd("cd-web").await).await;
}

/// The main scenario: an httpd static pod runs, serves on its pod IP and a hostPort, and
/// `/pods` reports it Running and Ready.
async fn httpd_pod_scenario<N: RuntimeNode>(node: KubeletNode<N>) {
    let host_port = node.node.host_port(0);
    node.write_manifest(
        "web.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: web
              labels:
                app: web
            spec:
              terminationGracePeriodSeconds: 5
              containers:
              - name: httpd
                image: {image}
                ports:
                - containerPort: 8080
                  hostPort: {host_port}
            "#,
            image = image("httpd"),
        ),
    );
    let pod = node.wait_running("web").await;
    let full_name = node.pod_name("web");
    assert_eq!(pod["metadata"]["name"], full_name.as_str());
    assert_eq!(pod["metadata"]["namespace"], POD_NAMESPACE);
    let uid = pod_uid(&pod).to_string();
    assert!(!uid.is_empty(), "{pod}");
    for kind in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert_eq!(pod_condition(&pod, kind), Some("True"), "{kind}: {pod:#}");
    }
    let ip: Ipv4Addr = pod_ip(&pod)
        .parse()
        .unwrap_or_else(|e| panic!("podIP {:?}: {e}", pod_ip(&pod)));
    assert_eq!(&ip.octets()[..3], &[10, 199, node.node.net().octet], "{ip}");
    assert!(!host_ip(&pod).is_empty(), "hostIP: {pod:#}");
    let httpd = container_status(&pod, "httpd").unwrap_or_else(|| panic!("{pod:#}"));
    assert!(is_ready(httpd), "{httpd}");
    assert!(is_running(httpd), "{httpd}");
    assert_eq!(restart_count(httpd), 0, "{httpd}");
    assert!(rfc3339_seconds(started_at(httpd)).is_some(), "{httpd}");
    let httpd_id = container_id(httpd).to_string();
    assert!(!httpd_id.is_empty(), "{httpd}");

    // httpd answers on the pod IP and through the hostPort (loopback and the bridge).
    let direct = http_get(SocketAddr::from((ip, 8080)), LONG).await;
    assert_eq!(direct.as_deref(), Ok(HTTPD_BODY), "pod IP");
    for host in [Ipv4Addr::LOCALHOST, node.node.net().gateway] {
        let mapped = http_get(SocketAddr::from((host, host_port)), LONG).await;
        assert_eq!(mapped.as_deref(), Ok(HTTPD_BODY), "hostPort via {host}");
    }

    // Health on the read-only port and on the healthz port.
    for addr in [node.read_only_addr(), node.healthz_addr()] {
        let r = http_request(addr, "/healthz").await.unwrap();
        assert_eq!(
            (r.status, r.body.as_str()),
            (200, "ok"),
            "/healthz on {addr}"
        );
    }

    // What runs, as ferrolet-cri sees it: one ready sandbox named after the static pod and
    // the one container /pods names.
    let (sandboxes, containers) = node.runtime_objects(&uid).await;
    assert_eq!(sandboxes.len(), 1, "{sandboxes:?}");
    assert_eq!(sandboxes[0].state, PodSandboxState::SandboxReady as i32);
    let meta = sandboxes[0].metadata.clone().unwrap_or_default();
    assert_eq!(
        (
            meta.name.as_str(),
            meta.namespace.as_str(),
            meta.uid.as_str()
        ),
        (full_name.as_str(), POD_NAMESPACE, uid.as_str())
    );
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(containers[0].id, httpd_id);
    assert_eq!(containers[0].state, ContainerState::ContainerRunning as i32);
    assert_eq!(
        containers[0]
            .labels
            .get(CONTAINER_NAME_LABEL)
            .map(String::as_str),
        Some("httpd")
    );

    // The log goes where podLogsDir says, as the Go kubelet lays it out.
    let log = node
        .pod_logs_dir()
        .join(format!("{POD_NAMESPACE}_{full_name}_{uid}"))
        .join("httpd")
        .join("0.log");
    assert!(log.is_file(), "{} missing", log.display());

    // The container runs under cgroupRoot.
    let cgroups: Vec<String> = pids_with_cmdline(HTTPD_CMDLINE)
        .into_iter()
        .filter_map(|pid| cgroups::of_process(pid, "memory"))
        .collect();
    assert!(
        cgroups
            .iter()
            .any(|cg| cg.starts_with(&ferrolet_integration::cgroups::node_path(&node.cgroup_root))),
        "no {HTTPD_CMDLINE:?} process under {}: {cgroups:?}",
        node.cgroup_root
    );

    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_first_and_a_failing_one_fails_the_pod() {
    init_containers_scenario(KubeletNode::start("init").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_first_and_a_failing_one_fails_the_pod_on_containerd_cri() {
    init_containers_scenario(KubeletNode::start_on_containerd("cd-init").await).await;
}

/// Init containers run in order before the app; a failing one under `Never` fails the pod.
async fn init_containers_scenario<N: RuntimeNode>(node: KubeletNode<N>) {
    let busybox = image("busybox");
    node.write_manifest(
        "init.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: init
            spec:
              initContainers:
              - name: prepare
                image: {busybox}
                command: {prepare}
                volumeMounts:
                - name: work
                  mountPath: /work
              containers:
              - name: app
                image: {busybox}
                command: {app}
                volumeMounts:
                - name: work
                  mountPath: /work
              volumes:
              - name: work
                emptyDir: {{}}
            "#,
            prepare = sh("echo init-ran; echo prepared-by-init > /work/msg"),
            app = sh(&format!("cat /work/msg; echo app-second-line; {IDLE}")),
        ),
    );
    node.write_manifest(
        "init-fails.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: init-fails
            spec:
              restartPolicy: Never
              initContainers:
              - name: setup
                image: {busybox}
                command: {setup}
              containers:
              - name: never
                image: {busybox}
                command: {never}
            "#,
            setup = sh("echo setting up; exit 3"),
            never = sh("echo the app must not run"),
        ),
    );

    // The app reads what the init container wrote into the shared emptyDir.
    let pod = node.wait_running("init").await;
    assert_eq!(pod_condition(&pod, "Initialized"), Some("True"), "{pod:#}");
    let prepare = init_container_status(&pod, "prepare").unwrap_or_else(|| panic!("{pod:#}"));
    assert_eq!(exit_code(terminated(prepare)), Some(0), "{prepare}");
    assert_eq!(reason(terminated(prepare)), Some("Completed"), "{prepare}");
    assert_eq!(restart_count(prepare), 0, "{prepare}");
    let app = container_status(&pod, "app").unwrap_or_else(|| panic!("{pod:#}"));
    assert!(is_running(app) && is_ready(app), "{app}");
    let log = node.wait_log_line("init", "app", "app-second-line").await;
    assert_eq!(log, "prepared-by-init\napp-second-line\n");
    let tail = node
        .container_logs_with("init", "app", "tailLines=1")
        .await
        .unwrap();
    assert_eq!(tail, "app-second-line\n");
    let init_log = node.container_logs("init", "prepare").await.unwrap();
    assert_eq!(init_log, "init-ran\n");

    // A failing init container under restartPolicy Never fails the pod; the app never runs.
    let failed = node.wait_phase("init-fails", "Failed").await;
    let setup = init_container_status(&failed, "setup").unwrap_or_else(|| panic!("{failed:#}"));
    assert_eq!(exit_code(terminated(setup)), Some(3), "{setup}");
    assert_eq!(reason(terminated(setup)), Some("Error"), "{setup}");
    assert_eq!(restart_count(setup), 0, "{setup}");
    assert_ne!(
        pod_condition(&failed, "Initialized"),
        Some("True"),
        "{failed:#}"
    );
    assert_ne!(pod_condition(&failed, "Ready"), Some("True"), "{failed:#}");
    let never = container_status(&failed, "never").unwrap_or_else(|| panic!("{failed:#}"));
    assert!(
        !is_running(never) && terminated(never).is_none(),
        "the app container ran: {never}"
    );
    let (_, containers) = node.runtime_objects(pod_uid(&failed)).await;
    let names: Vec<&str> = containers
        .iter()
        .filter_map(|c| c.labels.get(CONTAINER_NAME_LABEL).map(String::as_str))
        .collect();
    assert_eq!(names, ["setup"], "one run of the init container, no app");

    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policies_decide_restarts_and_phases() {
    restart_policies_scenario(KubeletNode::start("restarts").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policies_decide_restarts_and_phases_on_containerd_cri() {
    restart_policies_scenario(KubeletNode::start_on_containerd("cd-restarts").await).await;
}

/// OnFailure restarts with back-off; Never ends Failed or Succeeded.
async fn restart_policies_scenario<N: RuntimeNode>(node: KubeletNode<N>) {
    node.write_manifest("crash.yaml", &busybox_pod("crash", "OnFailure", "exit 1"));
    node.write_manifest("fail.yaml", &busybox_pod("fail", "Never", "exit 1"));
    node.write_manifest("done.yaml", &busybox_pod("done", "Never", "exit 0"));

    let failed = node.wait_phase("fail", "Failed").await;
    let main = container_status(&failed, "main").unwrap_or_else(|| panic!("{failed:#}"));
    assert_eq!(exit_code(terminated(main)), Some(1), "{main}");
    assert_eq!(reason(terminated(main)), Some("Error"), "{main}");
    assert_eq!(restart_count(main), 0, "{main}");
    assert!(!is_ready(main), "{main}");

    let done = node.wait_phase("done", "Succeeded").await;
    let main = container_status(&done, "main").unwrap_or_else(|| panic!("{done:#}"));
    assert_eq!(exit_code(terminated(main)), Some(0), "{main}");
    assert_eq!(reason(terminated(main)), Some("Completed"), "{main}");
    assert_eq!(restart_count(main), 0, "{main}");

    // OnFailure + exit 1: restarted, CrashLoopBackOff while it waits. As in the Go kubelet
    // the first restart comes at once and the back-off (10 s, then 20 s) starts with the
    // second; every instance seen (start → finish) is recorded to find that pause.
    let mut saw_back_off = false;
    let mut instances: BTreeMap<i64, i64> = BTreeMap::new();
    let longest_pause = |runs: &BTreeMap<i64, i64>| {
        let runs: Vec<(i64, i64)> = runs.iter().map(|(s, f)| (*s, *f)).collect();
        runs.windows(2).map(|w| w[1].0 - w[0].1).max().unwrap_or(0)
    };
    let crash = node
        .wait_pod(
            "crash",
            |p| {
                let Some(c) = container_status(p, "main") else {
                    return false;
                };
                saw_back_off |= waiting_reason(c) == Some("CrashLoopBackOff");
                for t in [terminated(c), last_terminated(c)].into_iter().flatten() {
                    let start = t["startedAt"].as_str().and_then(rfc3339_seconds);
                    let finish = t["finishedAt"].as_str().and_then(rfc3339_seconds);
                    if let (Some(start), Some(finish)) = (start, finish) {
                        instances.insert(start, finish);
                    }
                }
                restart_count(c) >= 2
                    && saw_back_off
                    && (longest_pause(&instances) >= 5 || instances.len() >= 4)
            },
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(pod_phase(&crash), "Running", "{crash:#}");
    let main = container_status(&crash, "main").unwrap_or_else(|| panic!("{crash:#}"));
    assert_eq!(exit_code(last_terminated(main)), Some(1), "{main}");
    assert!(
        longest_pause(&instances) >= 5,
        "no pause of the back-off's length between two runs (start, finish): {instances:?}"
    );

    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_manifests_are_reported_and_skipped() {
    let node = KubeletNode::start("invalid").await;
    node.write_manifest(
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: broken\nspec: [\n",
    );
    node.write_manifest(
        "nocontainers.yaml",
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: nocontainers
        spec:
          containers: []
        "#,
    );
    node.write_manifest("good.yaml", &busybox_pod("good", "Always", IDLE));

    let good = node.wait_running("good").await;
    let good_uid = pod_uid(&good).to_string();
    let manifests = node.manifest_dir();
    for file in ["broken.yaml", "nocontainers.yaml"] {
        let path = manifests.join(file).display().to_string();
        poll(&format!("ferrolet's log to name {path}"), LONG, || async {
            if node.kubelet_log().contains(&path) {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        })
        .await;
    }
    assert_eq!(pod_names(&node.pods().await), [node.pod_name("good")]);

    // A fixed manifest is picked up; the pod beside it is untouched.
    node.write_manifest("broken.yaml", &busybox_pod("broken", "Always", IDLE));
    node.wait_running("broken").await;
    let good = node.wait_running("good").await;
    assert_eq!(pod_uid(&good), good_uid);
    let mut names = pod_names(&node.pods().await);
    names.sort();
    assert_eq!(names, [node.pod_name("broken"), node.pod_name("good")]);

    node.teardown().await;
}
