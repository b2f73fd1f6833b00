//! `ferrolet` as a node of a cluster (issue #16 acceptance), against the in-memory test API
//! server ([`ferrolet_integration::apiserver`]: real wire format over HTTPS with client
//! certificates) and the real `ferrolet-cri`, containerd, runc and CNI plugins: the node
//! registers and renews its lease; API pods run and report their status; deletions run
//! preStop hooks and end with the object gone; a pod that does not fit is rejected; static
//! pods get mirror pods; pull secrets come from the API; a crashed ferrolet and a lost API
//! server lose nothing; events are written and bounded. Each test has its own API server and
//! node, and ends with the node's teardown and leak checks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::time::{Duration, Instant};

use ferrolet_integration::cluster::{ClusterNode, ClusterOptions, NAMESPACE, Prepared};
use ferrolet_integration::kubelet::{IDLE, KubeletOptions, image, sh};
use ferrolet_integration::registry::{AUTH_REGISTRY, auth_credentials};
use ferrolet_integration::testimages::TAG;
use serde_json::{Value, json};

/// A one-container busybox pod running `script`.
fn busybox(name: &str, script: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main",
                "image": image("busybox"),
                "command": ["sh", "-c", script],
            }],
        },
    })
}

fn condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a str> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?["status"]
        .as_str()
}

fn main_status(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_registers_with_its_fields_and_renews_its_lease() {
    let node = ClusterNode::start("api-reg").await;
    let n = node
        .wait_node("Ready", |n| {
            n["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .await;
    let name = node.node_name.as_str();
    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], name, "{n:#}");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert!(labels["kubernetes.io/arch"].is_string());
    let status = &n["status"];
    for key in ["cpu", "memory", "pods", "ephemeral-storage"] {
        assert!(status["capacity"][key].is_string(), "capacity {key}: {n:#}");
        assert!(
            status["allocatable"][key].is_string(),
            "allocatable {key}: {n:#}"
        );
    }
    assert_eq!(status["capacity"]["pods"], "110");
    let addresses = status["addresses"].as_array().unwrap();
    assert!(addresses.iter().any(|a| a["type"] == "InternalIP"), "{n:#}");
    assert!(
        addresses
            .iter()
            .any(|a| a["type"] == "Hostname" && a["address"] == name)
    );
    let info = &status["nodeInfo"];
    for key in [
        "machineID",
        "bootID",
        "kernelVersion",
        "osImage",
        "kubeletVersion",
    ] {
        assert!(
            info[key].as_str().is_some_and(|v| !v.is_empty()),
            "nodeInfo.{key}: {n:#}"
        );
    }
    assert!(
        info["containerRuntimeVersion"]
            .as_str()
            .unwrap()
            .contains("://"),
        "{n:#}"
    );
    assert!(
        status["daemonEndpoints"]["kubeletEndpoint"]["Port"]
            .as_i64()
            .unwrap()
            > 0
    );
    // The pressure conditions are reported (their values are the machine's: a nearly full
    // disk here is DiskPressure, as the eviction manager sees it).
    for kind in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} condition: {n:#}"));
        assert!(c["status"] == "False" || c["status"] == "True", "{n:#}");
        assert!(
            c["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("Kubelet")),
            "{n:#}"
        );
    }

    // The lease: held by the node, owned by it, renewed every duration/4 (8 s here → 2 s).
    // The owner reference comes with the first renewal after the Node exists, as Go's.
    let deadline = Instant::now() + Duration::from_secs(10);
    let lease = loop {
        let lease = node.api.get("leases", "kube-node-lease", name).await;
        match lease {
            Ok(l) if l["metadata"]["ownerReferences"][0]["kind"] == "Node" => break l,
            other => assert!(
                Instant::now() < deadline,
                "lease without an owner: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(lease["spec"]["holderIdentity"], name);
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 8);
    assert_eq!(
        lease["metadata"]["ownerReferences"][0]["kind"], "Node",
        "{lease:#}"
    );
    assert_eq!(
        lease["metadata"]["ownerReferences"][0]["uid"],
        n["metadata"]["uid"]
    );
    let first = lease["spec"]["renewTime"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = node
            .api
            .get("leases", "kube-node-lease", name)
            .await
            .unwrap();
        if now["spec"]["renewTime"].as_str() != Some(first.as_str()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "lease not renewed within 10 s: {now:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_pod_runs_reports_status_and_probe_changes() {
    let node = ClusterNode::start("api-run").await;
    let mut pod = busybox("web", "touch /tmp/ready; while true; do sleep 1; done");
    pod["spec"]["containers"][0]["readinessProbe"] = json!({
        "exec": {"command": ["cat", "/tmp/ready"]},
        "periodSeconds": 1,
        "failureThreshold": 1,
    });
    pod["spec"]["containers"][0]["livenessProbe"] = json!({
        "exec": {"command": ["sh", "-c", "test ! -e /tmp/die"]},
        "periodSeconds": 1,
        "failureThreshold": 1,
    });
    node.create_pod(pod).await;
    let p = node.wait_api_running("web").await;
    let status = &p["status"];
    assert!(
        status["podIP"].as_str().is_some_and(|ip| !ip.is_empty()),
        "{p:#}"
    );
    assert_eq!(status["podIPs"][0]["ip"], status["podIP"]);
    assert!(
        status["hostIP"].as_str().is_some_and(|ip| !ip.is_empty()),
        "{p:#}"
    );
    assert!(status["startTime"].is_string());
    assert_eq!(status["qosClass"], "BestEffort");
    for kind in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert_eq!(condition(&p, kind), Some("True"), "{kind}: {p:#}");
    }
    let c = main_status(&p);
    assert!(c["containerID"].as_str().unwrap().contains("://"), "{p:#}");
    assert!(
        c["imageID"].as_str().is_some_and(|i| !i.is_empty()),
        "{p:#}"
    );
    assert_eq!(c["ready"], true);
    assert!(c["state"]["running"]["startedAt"].is_string());
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();

    // Readiness off, then on again: the API status follows.
    let (_, containers) = node.node.runtime_objects(&uid).await;
    let id = containers[0].id.clone();
    let api = node.node.node.api().await;
    api.exec_ok(&id, &["rm", "/tmp/ready"]).await;
    node.wait_api_pod(
        "web",
        "not Ready",
        |p| condition(p, "Ready") == Some("False"),
        Duration::from_secs(20),
    )
    .await;
    api.exec_ok(&id, &["touch", "/tmp/ready"]).await;
    node.wait_api_pod(
        "web",
        "Ready again",
        |p| condition(p, "Ready") == Some("True"),
        Duration::from_secs(20),
    )
    .await;
    // Liveness fails: the container restarts, the restart count shows in the API.
    api.exec_ok(&id, &["touch", "/tmp/die"]).await;
    let p = node
        .wait_api_pod(
            "web",
            "restarted once",
            |p| main_status(p)["restartCount"].as_i64() >= Some(1),
            Duration::from_secs(40),
        )
        .await;
    assert!(
        main_status(&p)["lastState"]["terminated"].is_object(),
        "{p:#}"
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_runs_its_prestop_hook_then_is_gone() {
    let node = ClusterNode::start("api-del").await;
    let host = node.node.host_dir();
    let mut pod = busybox("leaving", IDLE);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(20);
    pod["spec"]["volumes"] =
        json!([{"name": "out", "hostPath": {"path": host.display().to_string()}}]);
    pod["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "out", "mountPath": "/out"}]);
    pod["spec"]["containers"][0]["lifecycle"] = json!({
        "preStop": {"exec": {"command": ["sh", "-c", "echo bye > /out/prestop"]}},
    });
    node.create_pod(pod).await;
    node.wait_api_running("leaving").await;
    let started = Instant::now();
    let deleted = node.delete_pod("leaving").await;
    assert!(
        deleted["metadata"]["deletionTimestamp"].is_string(),
        "{deleted:#}"
    );
    node.wait_api_pod_gone("leaving", Duration::from_secs(20))
        .await;
    let took = started.elapsed();
    let hook = std::fs::read_to_string(host.join("prestop")).unwrap_or_default();
    assert_eq!(hook.trim(), "bye", "the preStop hook did not run");
    assert!(
        took < Duration::from_secs(20),
        "gone after {took:?}, beyond the grace period"
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_does_not_fit_is_failed_out_of_cpu_and_never_started() {
    let node = ClusterNode::start("api-fit").await;
    node.wait_node("registered", |_| true).await;
    let mut pod = busybox("huge", IDLE);
    pod["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1000"}});
    node.create_pod(pod).await;
    let p = node
        .wait_api_pod(
            "huge",
            "Failed",
            |p| p["status"]["phase"] == "Failed",
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(p["status"]["reason"], "OutOfcpu", "{p:#}");
    assert!(
        p["status"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("cpu"),
        "{p:#}"
    );
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let (sandboxes, containers) = node.node.runtime_objects(uid).await;
    assert!(
        sandboxes.is_empty() && containers.is_empty(),
        "a rejected pod was started"
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_has_a_mirror_pod_that_comes_back_when_deleted() {
    let node = ClusterNode::start("api-mirror").await;
    node.node.write_manifest(
        "static.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n    image: {}\n    command: {}\n",
            image("busybox"),
            sh(IDLE)
        ),
    );
    let mirror_name = format!("static-{}", node.node_name);
    let mirror = node.wait_api_running(&mirror_name).await;
    let annotations = &mirror["metadata"]["annotations"];
    assert!(
        annotations["kubernetes.io/config.mirror"].is_string(),
        "{mirror:#}"
    );
    assert_eq!(
        mirror["metadata"]["ownerReferences"][0]["kind"], "Node",
        "{mirror:#}"
    );
    let first_uid = mirror["metadata"]["uid"].as_str().unwrap().to_string();
    node.api
        .delete_with(
            "pods",
            NAMESPACE,
            &mirror_name,
            &ferrolet_integration::apiserver::DeleteOptions {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let again = node
        .wait_api_pod(
            &mirror_name,
            "recreated",
            |p| {
                p["metadata"]["uid"]
                    .as_str()
                    .is_some_and(|u| u != first_uid)
            },
            Duration::from_secs(30),
        )
        .await;
    assert!(again["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string());
    // The static pod itself never stopped: one sandbox, one container instance.
    let p = node.wait_api_running(&mirror_name).await;
    assert_eq!(main_status(&p)["restartCount"], 0, "{p:#}");
    node.node.remove_manifest("static.yaml");
    node.wait_api_pod_gone(&mirror_name, Duration::from_secs(30))
        .await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_secrets_come_from_the_api() {
    let node = ClusterNode::start("api-pull").await;
    let (user, password) = auth_credentials();
    let auth = base64(format!("{user}:{password}").as_bytes());
    let config = format!(r#"{{"auths": {{"{AUTH_REGISTRY}": {{"auth": "{auth}"}}}}}}"#);
    node.api
        .create(
            "secrets",
            NAMESPACE,
            json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "regcred", "namespace": NAMESPACE},
                "type": "kubernetes.io/dockerconfigjson",
                "data": {".dockerconfigjson": base64(config.as_bytes())},
            }),
        )
        .await
        .unwrap();
    let mut pod = busybox("private", IDLE);
    pod["spec"]["containers"][0]["image"] =
        json!(format!("{AUTH_REGISTRY}/ferrolet/busybox:{TAG}"));
    pod["spec"]["imagePullSecrets"] = json!([{"name": "regcred"}]);
    node.create_pod(pod).await;
    node.wait_api_running("private").await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_ferrolet_loses_and_doubles_nothing_even_with_a_deletion_pending() {
    let node = ClusterNode::start("api-kill").await;
    node.create_pod(busybox("stays", IDLE)).await;
    let mut slow = busybox("goes", IDLE);
    slow["spec"]["terminationGracePeriodSeconds"] = json!(30);
    // A preStop hook that outlives the crash below: the kill is still pending at the restart.
    slow["spec"]["containers"][0]["lifecycle"] =
        json!({"preStop": {"exec": {"command": ["sleep", "4"]}}});
    node.create_pod(slow).await;
    let stays = node.wait_api_running("stays").await;
    node.wait_api_running("goes").await;
    let before = main_status(&stays)["containerID"].clone();
    node.delete_pod("goes").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    node.node.kill_kubelet();
    node.node.restart_kubelet().await;
    node.wait_api_pod_gone("goes", Duration::from_secs(40))
        .await;
    let stays_uid = stays["metadata"]["uid"].as_str().unwrap();
    // Wait a few syncs: nothing restarts, nothing is created twice.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = node.wait_api_running("stays").await;
    assert_eq!(main_status(&after)["containerID"], before, "{after:#}");
    assert_eq!(main_status(&after)["restartCount"], 0);
    let (sandboxes, containers) = node.node.runtime_objects(stays_uid).await;
    assert_eq!(
        (sandboxes.len(), containers.len()),
        (1, 1),
        "{sandboxes:?} {containers:?}"
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_keep_running_while_the_api_server_is_away_and_statuses_catch_up() {
    let node = ClusterNode::start("api-away").await;
    // Exits after the outage began: its restart shows once the API is back.
    node.create_pod(busybox("steady", IDLE)).await;
    node.create_pod(busybox("flaky", "sleep 20; exit 3")).await;
    let steady = node.wait_api_running("steady").await;
    node.wait_api_running("flaky").await;
    let uid = steady["metadata"]["uid"].as_str().unwrap().to_string();
    node.api.pause().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (_, containers) = node.node.runtime_objects(&uid).await;
    assert!(
        containers
            .iter()
            .any(|c| c.state == ferrolet_proto::cri::ContainerState::ContainerRunning as i32),
        "steady stopped while the API server was away\nferrolet log:\n{}",
        node.node.kubelet_log()
    );
    node.api.resume().await.unwrap();
    node.wait_api_pod(
        "flaky",
        "restarted (seen after the outage)",
        |p| main_status(p)["restartCount"].as_i64() >= Some(1),
        Duration::from_secs(40),
    )
    .await;
    let n = node
        .wait_node("heartbeating again", |n| {
            n["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .await;
    assert!(n["status"]["nodeInfo"]["bootID"].is_string());
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_written_for_pull_start_and_crash_loop_and_stay_bounded() {
    let node = ClusterNode::start("api-events").await;
    node.create_pod(busybox("ok", IDLE)).await;
    node.create_pod(busybox("crashy", "exit 1")).await;
    node.wait_api_running("ok").await;
    let reasons = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = reasons(&node.pod_events("ok").await);
        let want = ["Pulled", "Created", "Started"];
        if want.iter().all(|w| got.iter().any(|g| g == w)) {
            break;
        }
        assert!(Instant::now() < deadline, "events of pod ok: {got:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A crash loop for a while: BackOff shows, and the events stay few (counted, not repeated).
    tokio::time::sleep(Duration::from_secs(45)).await;
    let events = node.pod_events("crashy").await;
    let got = reasons(&events);
    assert!(
        got.iter().any(|r| r == "BackOff"),
        "events of crashy: {got:?}"
    );
    assert!(
        events.len() <= 30,
        "{} events for one crash-looping pod: {got:?}",
        events.len()
    );
    let started = events.iter().find(|e| e["reason"] == "Started").unwrap();
    assert!(started["count"].as_i64().unwrap_or(1) >= 2, "{started:#}");
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_bootstrap_gets_a_node_certificate_through_an_approved_csr() {
    let prepared = Prepared::new(
        "api-boot",
        ClusterOptions {
            bootstrap_token: Some("abcdef.0123456789abcdef".into()),
            kubelet: KubeletOptions {
                extra_config: "rotateCertificates: true\n".into(),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    // ferrolet waits for its CSR's approval before it serves anything: approve it (as
    // `kubectl certificate approve` would) while the harness waits for healthz.
    let approve = async {
        let deadline = Instant::now() + Duration::from_secs(60);
        let csr = loop {
            let csrs = prepared
                .api
                .list("certificatesigningrequests", None)
                .await
                .unwrap();
            if let Some(csr) = csrs.into_iter().next() {
                break csr;
            }
            assert!(Instant::now() < deadline, "no CSR within 60 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(
            csr["spec"]["signerName"],
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        assert_eq!(
            csr["spec"]["username"], "system:bootstrap:ferrolet",
            "{csr:#}"
        );
        assert!(
            prepared
                .api
                .get("nodes", "", &prepared.node_name)
                .await
                .is_err(),
            "registered before approval"
        );
        prepared
            .api
            .approve_csr(csr["metadata"]["name"].as_str().unwrap())
            .await
            .unwrap();
    };
    let (kubelet, ()) = tokio::join!(prepared.start_kubelet(), approve);
    let node = prepared.into_node(kubelet);
    let n = node.wait_node("registered", |_| true).await;
    assert_eq!(n["metadata"]["name"], node.node_name.as_str());
    let current = node.node.root_dir().join("pki/kubelet-client-current.pem");
    assert!(current.exists(), "{} missing", current.display());
    assert!(node.kubeconfig.exists());
    node.create_pod(busybox("after-boot", IDLE)).await;
    node.wait_api_running("after-boot").await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_api_admits_only_whom_the_api_server_vouches_for() {
    let prepared = Prepared::new("api-authz", ClusterOptions::default()).await;
    // As kubeadm configures it: client certificates of the cluster CA, tokens reviewed
    // through TokenReview, every request authorized through SubjectAccessReview.
    prepared.trust_cluster_clients("Webhook");
    prepared
        .api
        .add_token("alice-token", "alice", &["developers"]);
    prepared.api.set_sar_policy(|r| {
        r.resource == "nodes"
            && (r.user == "alice" || r.groups.iter().any(|g| g == "system:masters"))
    });
    let kubelet = prepared.start_kubelet().await;
    let node = prepared.into_node(kubelet);
    let url = format!("https://{}/pods", node.node.secure_addr());
    let client = |identity: Option<(String, String)>| {
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .danger_accept_invalid_certs(true);
        if let Some((cert, key)) = identity {
            b = b.identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
        }
        b.build().unwrap()
    };
    let status = |req: reqwest::RequestBuilder| async move {
        req.send().await.map(|r| r.status().as_u16()).unwrap_or(0)
    };
    let other_node = node
        .api
        .client_cert("system:node:other-node", &["system:nodes"])
        .unwrap();
    let apiserver = node
        .api
        .client_cert("kube-apiserver-kubelet-client", &["system:masters"])
        .unwrap();
    // Another node's identity: authenticated, not authorized.
    assert_eq!(status(client(Some(other_node)).get(&url)).await, 403);
    // No credentials, anonymous off.
    assert_eq!(status(client(None).get(&url)).await, 401);
    // A token the TokenReview rejects.
    assert_eq!(
        status(client(None).get(&url).bearer_auth("forged")).await,
        401
    );
    // Whom the API server vouches for and authorizes.
    assert_eq!(
        status(client(None).get(&url).bearer_auth("alice-token")).await,
        200
    );
    assert_eq!(status(client(Some(apiserver)).get(&url)).await, 200);
    node.teardown().await;
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
