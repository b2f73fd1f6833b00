//! Ephemeral containers (`kubectl debug`, issue #38) on a ferrolet node of the test API
//! server, over the real `ferrolet-cri`, containerd, runc and CNI: debug containers are added
//! to a running pod through the `pods/ephemeralcontainers` subresource with a real client
//! (strategic-merge PATCH as kubectl 1.28 sends it, PUT, JSON patch), and then run in the
//! pod's sandbox; their status shows in `ephemeralContainerStatuses`; their logs, exec and
//! attach work by name through the kubelet API; one with `targetContainerName` sees its
//! target's processes and one without does not; one that exits stays exited; the pod's own
//! containers are neither restarted nor replaced, nor are the debug containers by a restarted
//! ferrolet; events name `spec.ephemeralContainers{…}`;
//! the API refuses to change one; one whose target no longer runs is refused by the runtime
//! and waits in `CreateContainerError`; deleting the pod removes everything (the node's leak
//! checks). The scenario runs on ferrolet-cri and
//! on containerd's own CRI plugin (the reference for `NamespaceMode::Target`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::future::Future;
use std::time::Duration;

use ferrolet_integration::cluster::{ClusterNode, ClusterOptions, NAMESPACE, Prepared};
use ferrolet_integration::containerd_cri::ContainerdCriNode;
use ferrolet_integration::kubelet::{IDLE, KubeletNode, RuntimeNode, image};
use ferrolet_integration::pods::log_tail;
use ferrolet_integration::streaming::{TlsClient, finish, pem_blocks, query_escape, read_until};
use ferrolet_proto::streaming::StreamOptions;
use ferrolet_proto::streaming::client::{self, Exec, Transport};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// The process the target container runs, which only a debug container in its PID namespace
/// sees (`IDLE` sleeps this long).
const TARGET_PROCESS: &str = "sleep 100000";

/// How long a debug container may take to show up in the API as running.
const START_LIMIT: Duration = Duration::from_secs(60);

/// The pod to debug: `app` (the target) and `side`, both idling.
fn web() -> Value {
    let idle = |name: &str| json!({"name": name, "image": image("busybox"), "command": ["sh", "-c", IDLE]});
    json!({
        "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [idle("app"), idle("side")],
        },
    })
}

/// A debug container: busybox running `script`, with stdin open (for attach).
fn debug_container(name: &str, script: &str) -> Value {
    json!({
        "name": name,
        "image": image("busybox"),
        "command": ["sh", "-c", script],
        "stdin": true,
    })
}

/// The status of `name` in a status list of `pod` (`containerStatuses`,
/// `ephemeralContainerStatuses`).
fn status_of<'a>(pod: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    pod["status"][list]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
}

/// (containerID, restartCount) of each of the pod's own containers.
fn own_containers(pod: &Value) -> Vec<(String, i64)> {
    pod["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["containerID"].as_str().unwrap().to_string(),
                s["restartCount"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The node and what the test reaches it with.
struct Debugger<N: RuntimeNode> {
    node: ClusterNode<N>,
    pods: Api<Pod>,
    /// An admin (`system:masters`) at ferrolet's secure port, as the API server is.
    kubelet: TlsClient,
}

impl<N: RuntimeNode> Debugger<N> {
    /// A node whose secure port trusts the cluster's clients, its ferrolet started by
    /// `start` (on the runtime of the caller's choice).
    async fn start<F>(name: &str, start: impl FnOnce(Prepared) -> F) -> Self
    where
        F: Future<Output = (Prepared, KubeletNode<N>)>,
    {
        let prepared = Prepared::new(name, ClusterOptions::default()).await;
        prepared.trust_cluster_clients("AlwaysAllow");
        let (prepared, kubelet) = start(prepared).await;
        let node = prepared.into_node(kubelet);
        let client = node
            .api
            .kube_client("admin", &["system:masters"])
            .await
            .unwrap();
        let (cert, key) = node.api.client_cert("admin", &["system:masters"]).unwrap();
        let serving = std::fs::read(node.node.root_dir().join("pki/kubelet.crt")).unwrap();
        let identity = (
            pem_blocks(cert.as_bytes(), "CERTIFICATE"),
            pem_blocks(key.as_bytes(), "PRIVATE KEY").remove(0),
        );
        Debugger {
            node,
            pods: Api::namespaced(client, NAMESPACE),
            kubelet: TlsClient::new(&serving, Some(identity)),
        }
    }

    /// Waits until ephemeral container `name` of pod `web` satisfies `pred` in the API.
    async fn wait_ephemeral(&self, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let pod = self
            .node
            .wait_api_pod(
                "web",
                &format!("ephemeral container {name} {what}"),
                |p| status_of(p, "ephemeralContainerStatuses", name).is_some_and(&pred),
                START_LIMIT,
            )
            .await;
        status_of(&pod, "ephemeralContainerStatuses", name)
            .cloned()
            .unwrap()
    }

    /// Starts `kind` (`exec` or `attach`) on container `container` of `web` through the
    /// kubelet API with `query`.
    async fn stream(&self, kind: &str, container: &str, query: &str, o: StreamOptions) -> Exec {
        let path = format!("/{kind}/{NAMESPACE}/web/{container}?{query}");
        let (io, target) = self
            .kubelet
            .dial(self.node.node.secure_addr(), &path, Transport::Spdy)
            .await;
        client::exec(io, &target, o).await.unwrap_or_else(|e| {
            panic!(
                "{path}: {e}\nferrolet log tail:\n{}",
                log_tail(&self.node.node.kubelet_log(), 30)
            )
        })
    }

    /// Runs `script` in container `container` of `web` (`kubectl exec`): stdout, exit code.
    async fn exec(&self, container: &str, script: &str) -> (String, i32) {
        let query = ["sh", "-c", script]
            .iter()
            .map(|c| format!("command={}", query_escape(c)))
            .chain(["output=1".to_string(), "error=1".to_string()])
            .collect::<Vec<_>>()
            .join("&");
        let o = StreamOptions {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let (out, err, code) = finish(self.stream("exec", container, &query, o).await).await;
        assert!(err.is_empty(), "stderr of {script:?} in {container}: {err}");
        (out, code)
    }

    /// `kubectl logs web -c <container>` through the read-only port, polled until it has
    /// `line`.
    async fn wait_log_line(&self, container: &str, line: &str) -> String {
        let path = format!("/containerLogs/{NAMESPACE}/web/{container}");
        ferrolet_integration::cri::poll(
            &format!("{line:?} in the log of {container}"),
            START_LIMIT,
            || async {
                let r = self.node.node.get(&path).await?;
                match r.status {
                    200 if r.body.lines().any(|l| l == line) => Ok(r.body),
                    status => Err(format!("{status}: {}", r.body)),
                }
            },
        )
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_containers_run_once_by_name_in_their_targets_pid_namespace() {
    let d = Debugger::start("eph", |p| async {
        let kubelet = p.start_kubelet().await;
        (p, kubelet)
    })
    .await;
    scenario(d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_containers_on_containerd_cri() {
    let d = Debugger::start("eph-cd", |p| async {
        let kubelet = p
            .start_kubelet_on(ContainerdCriNode::start("eph-cd").await)
            .await;
        (p, kubelet)
    })
    .await;
    scenario(d).await;
}

async fn scenario<N: RuntimeNode>(d: Debugger<N>) {
    d.node.create_pod(web()).await;
    let before = d.node.wait_api_running("web").await;
    let own_before = own_containers(&before);
    let rv_before: u64 = before["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // kubectl debug web --image=busybox -i: a strategic-merge PATCH of the subresource.
    let script = "echo debug-started; while read l; do echo got:$l; done";
    let patch = json!({"spec": {"ephemeralContainers": [debug_container("dbg", script)]}});
    let patched = d
        .pods
        .patch_ephemeral_containers("web", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    let rv_after: u64 = patched
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv_after > rv_before, "{rv_before} → {rv_after}");
    let dbg = &patched
        .spec
        .as_ref()
        .unwrap()
        .ephemeral_containers
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        dbg.termination_message_policy.as_deref(),
        Some("File"),
        "defaulted as the API server does: {dbg:?}"
    );

    let status = d
        .wait_ephemeral("dbg", "running", |s| s["state"]["running"].is_object())
        .await;
    assert_eq!(status["restartCount"], 0, "{status:#}");
    assert_eq!(status["image"], image("busybox"), "{status:#}");
    assert!(
        status["imageID"].as_str().is_some_and(|i| !i.is_empty()),
        "{status:#}"
    );
    assert!(
        status["containerID"]
            .as_str()
            .is_some_and(|i| i.contains("://")),
        "{status:#}"
    );
    assert_eq!(status["ready"], false, "{status:#}");

    // kubectl logs web -c dbg.
    d.wait_log_line("dbg", "debug-started").await;
    // Its events name it as Go's references do.
    let events = d.node.pod_events("web").await;
    assert!(
        events.iter().any(|e| e["reason"] == "Started"
            && e["involvedObject"]["fieldPath"] == "spec.ephemeralContainers{dbg}"),
        "{events:#?}"
    );

    // kubectl exec -it web -c dbg -- ps: its own PID namespace, without the pod's processes.
    let (ps, code) = d.exec("dbg", "ps").await;
    assert_eq!(code, 0, "{ps}");
    assert!(
        !ps.contains(TARGET_PROCESS),
        "the untargeted debug container sees the app's processes:\n{ps}"
    );

    // kubectl attach -i web -c dbg.
    let o = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let mut attached = d
        .stream("attach", "dbg", "input=1&output=1&error=1", o)
        .await;
    let mut stdin = attached.stdin.take().unwrap();
    let mut stdout = attached.stdout.take().unwrap();
    stdin.write_all(b"hello\n").await.unwrap();
    read_until(&mut stdout, "got:hello\n").await;
    drop((stdin, stdout, attached));

    // kubectl debug web --image=busybox --target=app, through PUT this time.
    let mut pod = d.pods.get_ephemeral_containers("web").await.unwrap();
    let keep_going = "trap 'exit 0' TERM; while true; do sleep 1; done";
    let mut tgt: k8s_openapi::api::core::v1::EphemeralContainer =
        serde_json::from_value(debug_container("tgt", keep_going)).unwrap();
    tgt.target_container_name = Some("app".into());
    let spec = pod.spec.as_mut().unwrap();
    spec.ephemeral_containers.as_mut().unwrap().push(tgt);
    d.pods
        .replace_ephemeral_containers("web", &PostParams::default(), &pod)
        .await
        .unwrap();
    d.wait_ephemeral("tgt", "running", |s| s["state"]["running"].is_object())
        .await;
    let (ps, code) = d.exec("tgt", "ps; ls /proc").await;
    assert_eq!(code, 0, "{ps}");
    assert!(
        ps.contains(TARGET_PROCESS),
        "the debug container does not see its target's processes:\n{ps}"
    );

    // One that exits (added with a JSON patch) stays exited.
    let once = debug_container("once", "echo bye; exit 3");
    let add = json!([{"op": "add", "path": "/spec/ephemeralContainers/-", "value": once}]);
    let add: json_patch::Patch = serde_json::from_value(add).unwrap();
    d.pods
        .patch_ephemeral_containers("web", &PatchParams::default(), &Patch::Json::<()>(add))
        .await
        .unwrap();
    let ended = d
        .wait_ephemeral("once", "terminated", |s| {
            s["state"]["terminated"].is_object()
        })
        .await;
    assert_eq!(ended["state"]["terminated"]["exitCode"], 3, "{ended:#}");
    assert_eq!(ended["restartCount"], 0, "{ended:#}");
    d.wait_log_line("once", "bye").await;
    // A later debug container's start is a sync after `once` ended: it was left alone.
    let last = json!({"spec": {"ephemeralContainers": [debug_container("last", keep_going)]}});
    d.pods
        .patch_ephemeral_containers("web", &PatchParams::default(), &Patch::Strategic(last))
        .await
        .unwrap();
    d.wait_ephemeral("last", "running", |s| s["state"]["running"].is_object())
        .await;
    let pod = d.node.api_pod("web").await.unwrap();
    assert_eq!(
        status_of(&pod, "ephemeralContainerStatuses", "once"),
        Some(&ended),
        "{pod:#}"
    );
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let (_, containers) = d.node.node.runtime_objects(&uid).await;
    let mut names: Vec<&str> = containers
        .iter()
        .filter_map(|c| c.metadata.as_ref().map(|m| m.name.as_str()))
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["app", "dbg", "last", "once", "side", "tgt"]);

    // A restarted ferrolet reads them back from the runtime and starts none again: the
    // start of one more after the restart is a sync that saw them all.
    let debuggers_before = pod["status"]["ephemeralContainerStatuses"].clone();
    d.node.node.restart_kubelet().await;
    let after = json!({"spec": {"ephemeralContainers": [debug_container("after", keep_going)]}});
    d.pods
        .patch_ephemeral_containers("web", &PatchParams::default(), &Patch::Strategic(after))
        .await
        .unwrap();
    d.wait_ephemeral("after", "running", |s| s["state"]["running"].is_object())
        .await;
    let pod = d.node.api_pod("web").await.unwrap();
    for before in debuggers_before.as_array().unwrap() {
        let name = before["name"].as_str().unwrap();
        let now = status_of(&pod, "ephemeralContainerStatuses", name).unwrap();
        assert_eq!(now["containerID"], before["containerID"], "{name}: {pod:#}");
        assert_eq!(now["state"], before["state"], "{name}: {pod:#}");
    }
    let (_, containers) = d.node.node.runtime_objects(&uid).await;
    let mut names: Vec<&str> = containers
        .iter()
        .filter_map(|c| c.metadata.as_ref().map(|m| m.name.as_str()))
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["after", "app", "dbg", "last", "once", "side", "tgt"]
    );

    // The pod's own containers went on as they were.
    assert_eq!(own_containers(&pod), own_before, "{pod:#}");
    assert_eq!(pod["status"]["phase"], "Running");

    // An existing ephemeral container cannot be changed.
    let change =
        json!({"spec": {"ephemeralContainers": [{"name": "dbg", "image": image("httpd")}]}});
    let refused = d
        .pods
        .patch_ephemeral_containers("web", &PatchParams::default(), &Patch::Strategic(change))
        .await
        .unwrap_err();
    match refused {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
            assert!(
                s.message.starts_with(
                    "Pod \"web\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg\" may not be changed"
                ),
                "{}",
                s.message
            );
        }
        other => panic!("expected the API to refuse: {other:?}"),
    }

    // A target that no longer runs: the runtime refuses the debug container, which waits
    // with why (the sync fails and tries again, as Go's), and nothing is left of it.
    let mut done = web();
    done["metadata"]["name"] = json!("done");
    done["spec"]["restartPolicy"] = json!("Never");
    done["spec"]["containers"][0]["command"] = json!(["true"]);
    d.node.create_pod(done).await;
    d.node
        .wait_api_pod(
            "done",
            "with app exited",
            |p| {
                status_of(p, "containerStatuses", "app")
                    .is_some_and(|s| s["state"]["terminated"].is_object())
                    && status_of(p, "containerStatuses", "side")
                        .is_some_and(|s| s["state"]["running"].is_object())
            },
            START_LIMIT,
        )
        .await;
    let mut late = debug_container("late", keep_going);
    late["targetContainerName"] = json!("app");
    let patch = json!({"spec": {"ephemeralContainers": [late]}});
    d.pods
        .patch_ephemeral_containers("done", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    let refused = d
        .node
        .wait_api_pod(
            "done",
            "late waiting for a CreateContainerError",
            |p| {
                status_of(p, "ephemeralContainerStatuses", "late")
                    .is_some_and(|s| s["state"]["waiting"]["reason"] == "CreateContainerError")
            },
            START_LIMIT,
        )
        .await;
    let uid_done = refused["metadata"]["uid"].as_str().unwrap();
    let (_, containers) = d.node.node.runtime_objects(uid_done).await;
    assert!(
        containers
            .iter()
            .all(|c| c.metadata.as_ref().is_some_and(|m| m.name != "late")),
        "{containers:?}"
    );
    d.node.delete_pod("done").await;

    // Deleting the pod takes the debug containers with it (and the teardown checks leaks).
    d.node.delete_pod("web").await;
    d.node
        .wait_api_pod_gone("web", Duration::from_secs(60))
        .await;
    ferrolet_integration::cri::poll("the pod's runtime objects gone", START_LIMIT, || async {
        match d.node.node.runtime_objects(&uid).await {
            (sandboxes, containers) if sandboxes.is_empty() && containers.is_empty() => Ok(()),
            left => Err(format!("left: {left:?}")),
        }
    })
    .await;
    d.node.teardown().await;
}
