//! Device plugins on a ferrolet node (issue #37), with the repo's spec-following test plugin
//! (`ferrolet_integration::device_plugin`) registering on `<root-dir>/device-plugins/
//! kubelet.sock`, against the in-memory API server and real containerd, as the Go kubelet
//! 1.28 behaves: registration (and Go's refusals) puts the devices in the Node's capacity
//! and allocatable; a pod's container gets what `Allocate` answered (env under the pod's own,
//! mounts, device nodes, annotations, CDI devices resolved by ferrolet-cri); an unhealthy
//! device leaves allocatable and is never given out; a pod that does not fit is Failed with
//! Go's `UnexpectedAdmissionError`; a SIGKILLed ferrolet keeps every allocation (Go's
//! checkpoint) and the plugin registers again; a killed plugin's devices leave allocatable at
//! once and capacity after the stop grace period; the pod resources API; init containers'
//! devices reused by app containers, PreStartContainer and GetPreferredAllocation; a plugin
//! registering through the plugin watcher instead, gone with its registration socket. Each test
//! ends with its pods deleted, the pod resources API empty, the plugin's socket gone and the
//! node's teardown and leak checks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use ferrolet_integration::apiserver::DeleteOptions;
use ferrolet_integration::cluster::{ClusterNode, ClusterOptions, NAMESPACE};
use ferrolet_integration::cri::poll;
use ferrolet_integration::device_plugin::observe::{
    self, CheckpointEntry, Devices, PerNuma, PodDevices, checkpoint_entries, ids_of, pod_devices,
    pod_resources_client, read_checkpoint, registered_devices, resource_devices,
};
use ferrolet_integration::device_plugin::{
    DEFAULT_ENV, PluginBuilder, TestDevicePlugin, merged, plugin_dir,
};
use ferrolet_integration::kubelet::{IDLE, KubeletOptions, image};
use ferrolet_integration::pods::NodeOptions;
use ferrolet_integration::scratch::Scratch;
use ferrolet_proto::deviceplugin::{
    CdiDevice, ContainerAllocateResponse, DeviceSpec, KUBELET_SOCKET, Mount, RegisterRequest,
    RegistrationClient, VERSION,
};
use ferrolet_proto::podresources::{
    GetPodResourcesRequest, PodResources, PodResourcesListerClient,
};
use serde_json::{Value, json};

const RESOURCE: &str = "example.com/resource";
const LIMIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The node, the plugin and pods.

/// A cluster node with extra ferrolet flags and ferrolet-cri config; returns once registered.
async fn node_with(name: &str, args: &[&str], cri_config: &str) -> ClusterNode {
    let opts = ClusterOptions {
        kubelet: KubeletOptions {
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            cri: NodeOptions {
                extra_config: cri_config.to_string(),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let node = ClusterNode::start_with(name, opts).await;
    node.wait_node("registered", |_| true).await;
    node
}

async fn node(name: &str) -> ClusterNode {
    node_with(name, &[], "").await
}

/// Starts `builder`'s plugin in the node's device plugin directory and waits until ferrolet
/// has accepted its registration.
async fn plugin(node: &ClusterNode, builder: PluginBuilder) -> TestDevicePlugin {
    let p = builder.start(&plugin_dir(&node.node.root_dir())).unwrap();
    p.wait_registrations(1, LIMIT).await;
    p
}

/// Waits until the Node reports `capacity` and `allocatable` of [`RESOURCE`].
async fn wait_devices(node: &ClusterNode, capacity: &str, allocatable: &str) -> Value {
    node.wait_node(
        &format!("{RESOURCE} capacity {capacity}, allocatable {allocatable}"),
        |n| {
            n["status"]["capacity"][RESOURCE] == capacity
                && n["status"]["allocatable"][RESOURCE] == allocatable
        },
    )
    .await
}

/// A busybox pod whose container `main` runs `script` with `count` of [`RESOURCE`] (requests
/// as the API server defaults them from limits).
fn device_pod(name: &str, count: u32, script: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [container("main", count, script)],
        },
    })
}

fn container(name: &str, count: u32, script: &str) -> Value {
    let mut c = json!({"name": name, "image": image("busybox"), "command": ["sh", "-c", script]});
    if count > 0 {
        let n = count.to_string();
        c["resources"] = json!({"limits": {RESOURCE: n}, "requests": {RESOURCE: n}});
    }
    c
}

fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap().to_string()
}

/// Runs `script` in container `name` of `pod`: exit code and output.
async fn exec(node: &ClusterNode, pod: &Value, name: &str, script: &str) -> (i32, String) {
    let id = container_id(node, pod, name).await;
    node.node.node.api().await.sh(&id, script).await
}

/// [`exec`] that must succeed; its output, trimmed.
async fn exec_ok(node: &ClusterNode, pod: &Value, name: &str, script: &str) -> String {
    let (code, out) = exec(node, pod, name, script).await;
    assert_eq!(code, 0, "{script}: {out}");
    out.trim().to_string()
}

/// The CRI id of container `name` of `pod` (the only one of that name).
async fn container_id(node: &ClusterNode, pod: &Value, name: &str) -> String {
    let (_, containers) = node.node.runtime_objects(&uid(pod)).await;
    let found: Vec<_> = containers
        .iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
        .collect();
    assert_eq!(found.len(), 1, "containers named {name}: {containers:?}");
    found[0].id.clone()
}

/// Waits until pod `name` is Failed, rejected at admission with Go's words for
/// `requested` devices of which `available` are free; checks nothing of it ran and Go's
/// Warning event.
async fn assert_rejected(node: &ClusterNode, name: &str, requested: u32, available: u32) {
    let p = node
        .wait_api_pod(
            name,
            "Failed",
            |p| p["status"]["phase"] == "Failed",
            Duration::from_secs(30),
        )
        .await;
    let why = format!(
        "Allocate failed due to requested number of devices unavailable for {RESOURCE}. \
         Requested: {requested}, Available: {available}, which is unexpected"
    );
    assert_eq!(p["status"]["reason"], "UnexpectedAdmissionError", "{p:#}");
    assert_eq!(
        p["status"]["message"],
        format!("Pod was rejected: {why}"),
        "{p:#}"
    );
    let (sandboxes, containers) = node.node.runtime_objects(&uid(&p)).await;
    assert!(
        sandboxes.is_empty() && containers.is_empty(),
        "a rejected pod was started"
    );
    let event = poll("the rejection's event", Duration::from_secs(10), || async {
        let events = node.pod_events(name).await;
        events
            .iter()
            .find(|e| e["reason"] == "UnexpectedAdmissionError")
            .cloned()
            .ok_or_else(|| format!("{events:#?}"))
    })
    .await;
    assert_eq!(event["type"], "Warning", "{event:#}");
    assert_eq!(event["message"], why.as_str(), "{event:#}");
}

/// The device ids a container's env names ([`DEFAULT_ENV`], sorted).
async fn env_devices(node: &ClusterNode, pod: &Value, name: &str) -> Vec<String> {
    let out = exec_ok(node, pod, name, &format!("echo ${DEFAULT_ENV}")).await;
    out.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn sorted(ids: &[String]) -> Vec<String> {
    let mut v = ids.to_vec();
    v.sort();
    v
}

fn strings(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// Every Allocate call's containers, each container's ids sorted.
fn allocations(p: &TestDevicePlugin) -> Vec<Vec<Vec<String>>> {
    p.calls()
        .allocate
        .iter()
        .map(|call| call.iter().map(|ids| sorted(ids)).collect())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The kubelet's files and sockets.

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn checkpoint(node: &ClusterNode) -> Value {
    read_checkpoint(&node.node.root_dir()).unwrap()
}

fn entries(cp: &Value) -> Vec<CheckpointEntry> {
    checkpoint_entries(cp).unwrap()
}

async fn pod_resources(node: &ClusterNode) -> PodResourcesListerClient {
    pod_resources_client(&node.node.root_dir(), LIMIT)
        .await
        .unwrap()
}

/// Pod `name`'s containers and their devices of [`RESOURCE`] in a List answer.
fn listed(list: &[PodResources], name: &str) -> Option<PodDevices> {
    observe::listed(list, NAMESPACE, name, RESOURCE)
}

/// The devices of [`RESOURCE`] GetAllocatableResources answers (with their NUMA nodes).
async fn allocatable(client: &mut PodResourcesListerClient) -> Devices {
    let answer = client.get_allocatable_resources().await.unwrap();
    resource_devices(&answer.devices, RESOURCE)
}

/// Deletes every pod, waits until they are gone and the pod resources API lists none, stops
/// the plugin (its socket must go) and tears the node down with its leak checks.
async fn finish(node: ClusterNode, plugins: Vec<TestDevicePlugin>) {
    let pods = node.api.list("pods", Some(NAMESPACE)).await.unwrap();
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let grace = DeleteOptions {
            grace_period_seconds: Some(1),
            ..Default::default()
        };
        let _ = node.api.delete_with("pods", NAMESPACE, name, &grace).await;
    }
    for pod in &pods {
        node.wait_api_pod_gone(pod["metadata"]["name"].as_str().unwrap(), LIMIT)
            .await;
    }
    let client = pod_resources(&node).await;
    poll("no pod in the pod resources API", LIMIT, || async {
        let list = client.clone().list().await.map_err(|e| e.to_string())?;
        if list.pod_resources.is_empty() {
            Ok(())
        } else {
            Err(format!("{list:?}"))
        }
    })
    .await;
    // All stopped before any is checked: a plugin started again may use an earlier one's path.
    for p in &plugins {
        p.stop().await;
    }
    for p in &plugins {
        assert!(
            !p.socket().exists(),
            "{} outlived its plugin",
            p.socket().display()
        );
    }
    node.teardown().await;
}

// ---------------------------------------------------------------------------------------------
// a. Registration.

/// A `Register` call as a plugin makes it; the kubelet's error message, if any.
async fn register(node: &ClusterNode, version: &str, resource: &str) -> Option<String> {
    let sock = plugin_dir(&node.node.root_dir()).join(KUBELET_SOCKET);
    let channel = ferrolet_proto::transport::connect(&sock.display().to_string())
        .await
        .unwrap();
    let request = RegisterRequest {
        version: version.into(),
        endpoint: "nothing.sock".into(),
        resource_name: resource.into(),
        options: None,
    };
    RegistrationClient::new(channel)
        .register(request)
        .await
        .err()
        .map(|s| s.message().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_plugins_devices_are_the_nodes_capacity_and_allocatable() {
    let node = node("dev-reg").await;
    let sock = plugin_dir(&node.node.root_dir()).join(KUBELET_SOCKET);
    poll("kubelet.sock", LIMIT, || async {
        sock.exists().then_some(()).ok_or("absent".to_string())
    })
    .await;
    assert_eq!(mode(&sock), 0o600);

    // Go's refusals, word for word (1.28's errUnsupportedVersion says "version is").
    assert_eq!(
        register(&node, "v1alpha1", "example.com/other")
            .await
            .as_deref(),
        Some(
            r#"requested API version "v1alpha1" is not supported by kubelet. Supported version is ["v1beta1"]"#
        )
    );
    assert_eq!(
        register(&node, VERSION, "fake-resource").await.as_deref(),
        Some(r#"the ResourceName "fake-resource" is invalid"#)
    );

    let p = plugin(
        &node,
        TestDevicePlugin::builder(RESOURCE).devices(&["dev0", "dev1", "dev2"]),
    )
    .await;
    let n = wait_devices(&node, "3", "3").await;
    for refused in ["example.com/other", "fake-resource"] {
        assert!(n["status"]["capacity"][refused].is_null(), "{n:#}");
    }
    let calls = p.calls();
    assert_eq!(calls.registrations, 1);
    assert!(calls.options >= 1 && calls.list_and_watch >= 1, "{calls:?}");

    let m = node.node.metrics().await;
    let family = m
        .family("kubelet_device_plugin_registration_total")
        .expect("kubelet_device_plugin_registration_total");
    assert_eq!(family.kind, "counter");
    let ours = family.with_labels(&[("resource_name", RESOURCE)]);
    assert_eq!(ours.len(), 1, "{family:?}");
    assert_eq!(ours[0].value, 1.0);
    finish(node, vec![p]).await;
}

// ---------------------------------------------------------------------------------------------
// b. What Allocate answered reaches the container.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_gets_the_plugins_env_mounts_device_nodes_and_annotations() {
    let node = node("dev-run").await;
    let data = node.node.host_dir().join("plugin-data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("hello"), "hello from the plugin").unwrap();
    let host = data.display().to_string();
    let builder = TestDevicePlugin::builder(RESOURCE)
        .devices(&["dev0", "dev1"])
        .allocate(move |ids| {
            let ids = sorted(ids);
            let nodes = ids.iter().map(|id| ContainerAllocateResponse {
                devices: vec![DeviceSpec {
                    container_path: format!("/dev/fake-{id}"),
                    host_path: "/dev/null".into(),
                    permissions: "rw".into(),
                }],
                ..Default::default()
            });
            let common = ContainerAllocateResponse {
                envs: [
                    (DEFAULT_ENV.to_string(), ids.join(",")),
                    ("SHARED".to_string(), "plugin".to_string()),
                ]
                .into(),
                mounts: vec![Mount {
                    container_path: "/plugin-data".into(),
                    host_path: host.clone(),
                    read_only: true,
                }],
                annotations: [("example.com/devices".to_string(), ids.join(","))].into(),
                ..Default::default()
            };
            merged(std::iter::once(common).chain(nodes))
        });
    let p = plugin(&node, builder).await;
    wait_devices(&node, "2", "2").await;
    let mut pod = device_pod("runner", 2, IDLE);
    pod["spec"]["containers"][0]["env"] = json!([{"name": "SHARED", "value": "pod"}]);
    node.create_pod(pod).await;
    let pod = node.wait_api_running("runner").await;

    assert_eq!(allocations(&p), [[strings(&["dev0", "dev1"])]]);
    assert_eq!(env_devices(&node, &pod, "main").await, ["dev0", "dev1"]);
    assert_eq!(
        exec_ok(&node, &pod, "main", "echo $SHARED").await,
        "pod",
        "the pod's env wins"
    );
    assert_eq!(
        exec_ok(&node, &pod, "main", "cat /plugin-data/hello").await,
        "hello from the plugin"
    );
    let (code, _) = exec(&node, &pod, "main", "touch /plugin-data/x").await;
    assert_ne!(code, 0, "a read-only mount was writable");
    for id in ["dev0", "dev1"] {
        let dev = format!("/dev/fake-{id}");
        let script = format!("[ -c {dev} ] && stat -c %t:%T {dev} && echo written > {dev}");
        assert_eq!(exec_ok(&node, &pod, "main", &script).await, "1:3", "{dev}");
    }
    let id = container_id(&node, &pod, "main").await;
    let status = node
        .node
        .node
        .api()
        .await
        .container_status(&id)
        .await
        .unwrap();
    assert_eq!(
        status
            .annotations
            .get("example.com/devices")
            .map(String::as_str),
        Some("dev0,dev1"),
        "{:?}",
        status.annotations
    );

    // Go's checkpoint holds the allocation, devices without topology under NUMA node -1.
    let cp = checkpoint(&node);
    let e = entries(&cp);
    assert_eq!(e.len(), 1, "{cp:#}");
    assert_eq!(
        (e[0].pod_uid.as_str(), e[0].container.as_str()),
        (uid(&pod).as_str(), "main")
    );
    assert_eq!(e[0].resource, RESOURCE);
    assert_eq!(
        e[0].devices,
        [("-1".to_string(), strings(&["dev0", "dev1"]))]
    );
    assert!(!e[0].alloc_resp.is_empty(), "no AllocResp: {cp:#}");
    // Allocation is not subtracted from allocatable, as Go's.
    wait_devices(&node, "2", "2").await;

    let m = node.node.metrics().await;
    let family = m
        .family("kubelet_device_plugin_alloc_duration_seconds")
        .expect("kubelet_device_plugin_alloc_duration_seconds");
    assert_eq!(family.kind, "histogram");
    let count = family
        .with_labels(&[("resource_name", RESOURCE)])
        .into_iter()
        .find(|s| s.name.ends_with("_count"))
        .map(|s| s.value);
    assert_eq!(count, Some(1.0), "{family:?}");
    finish(node, vec![p]).await;
}

/// A CDI spec of kind `example.com/fake` defining `dev0` and `dev1`: an env var and a device
/// node each, and an env var for any of them.
fn cdi_spec() -> Value {
    let device = |id: &str| {
        json!({"name": id, "containerEdits": {
            "env": [format!("FAKE_CDI_{id}=present")],
            "deviceNodes": [{"path": format!("/dev/cdi-{id}"), "hostPath": "/dev/null"}],
        }})
    };
    json!({
        "cdiVersion": "0.6.0",
        "kind": "example.com/fake",
        "devices": [device("dev0"), device("dev1")],
        "containerEdits": {"env": ["FAKE_CDI=common"]},
    })
}

/// The CDI part of b, apart so the rest runs without the runtime's CDI support: the plugin
/// names CDI devices, ferrolet passes them as CRI `cdi_devices`, ferrolet-cri resolves them
/// against the spec dir it is configured with (`enable_cdi`, `cdi_spec_dirs`, containerd's
/// names; branch `cdi`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_cdi_devices_are_resolved_by_the_runtime() {
    let specs = Scratch::new("cdi-specs");
    std::fs::write(
        specs.path().join("fake.json"),
        serde_json::to_vec(&cdi_spec()).unwrap(),
    )
    .unwrap();
    let config = format!(
        "enable_cdi = true\ncdi_spec_dirs = [{}]\n",
        Value::String(specs.path().display().to_string())
    );
    let node = node_with("dev-cdi", &[], &config).await;
    let builder = TestDevicePlugin::builder(RESOURCE)
        .devices(&["dev0", "dev1"])
        .allocate_per_device(|id| ContainerAllocateResponse {
            envs: [(DEFAULT_ENV.to_string(), id.to_string())].into(),
            cdi_devices: vec![CdiDevice {
                name: format!("example.com/fake={id}"),
            }],
            ..Default::default()
        });
    let p = plugin(&node, builder).await;
    wait_devices(&node, "2", "2").await;
    node.create_pod(device_pod("cdi", 1, IDLE)).await;
    let pod = node.wait_api_running("cdi").await;
    let [id] = &env_devices(&node, &pod, "main").await[..] else {
        panic!("not one device");
    };
    let other = if id == "dev0" { "dev1" } else { "dev0" };
    let script = format!(
        "echo $FAKE_CDI $FAKE_CDI_{id} ${{FAKE_CDI_{other}:-unset}} && [ -c /dev/cdi-{id} ] && \
         [ ! -e /dev/cdi-{other} ] && stat -c %t:%T /dev/cdi-{id}"
    );
    assert_eq!(
        exec_ok(&node, &pod, "main", &script).await,
        "common present unset\n1:3"
    );
    finish(node, vec![p]).await;
    drop(specs);
}

// ---------------------------------------------------------------------------------------------
// c, d. Health and admission.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_device_leaves_allocatable_and_is_not_given_to_a_new_pod() {
    let node = node("dev-health").await;
    let p = plugin(
        &node,
        TestDevicePlugin::builder(RESOURCE).devices(&["dev0", "dev1"]),
    )
    .await;
    wait_devices(&node, "2", "2").await;
    assert!(p.set_health("dev0", false));
    wait_devices(&node, "2", "1").await;

    // Two asked, one healthy: refused, nothing allocated.
    node.create_pod(device_pod("two", 2, IDLE)).await;
    assert_rejected(&node, "two", 2, 1).await;
    assert!(p.calls().allocate.is_empty(), "{:?}", p.calls());
    // One asked: the healthy one.
    node.create_pod(device_pod("one", 1, IDLE)).await;
    let pod = node.wait_api_running("one").await;
    assert_eq!(env_devices(&node, &pod, "main").await, ["dev1"]);
    assert_eq!(allocations(&p), [[strings(&["dev1"])]]);
    let mut client = pod_resources(&node).await;
    assert_eq!(ids_of(&allocatable(&mut client).await), ["dev1"]);

    // Healthy again: back in allocatable.
    assert!(p.set_health("dev0", true));
    wait_devices(&node, "2", "2").await;
    assert_eq!(ids_of(&allocatable(&mut client).await), ["dev0", "dev1"]);
    finish(node, vec![p]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_does_not_fit_is_failed_and_a_deleted_pods_device_is_given_again() {
    let node = node("dev-fit").await;
    let p = plugin(
        &node,
        TestDevicePlugin::builder(RESOURCE).devices(&["dev0", "dev1"]),
    )
    .await;
    wait_devices(&node, "2", "2").await;
    node.create_pod(device_pod("first", 1, IDLE)).await;
    node.create_pod(device_pod("second", 1, IDLE)).await;
    let first = node.wait_api_running("first").await;
    let second = node.wait_api_running("second").await;
    let a = env_devices(&node, &first, "main").await;
    let b = env_devices(&node, &second, "main").await;
    assert_eq!(sorted(&[a.clone(), b.clone()].concat()), ["dev0", "dev1"]);

    node.create_pod(device_pod("third", 1, IDLE)).await;
    assert_rejected(&node, "third", 1, 0).await;
    assert_eq!(p.calls().allocate.len(), 2);

    // The first pod goes: its device is free for the next pod, and the checkpoint forgets it.
    node.delete_pod("first").await;
    node.wait_api_pod_gone("first", LIMIT).await;
    node.create_pod(device_pod("fourth", 1, IDLE)).await;
    let fourth = node.wait_api_running("fourth").await;
    assert_eq!(env_devices(&node, &fourth, "main").await, a);
    let owners: BTreeSet<String> = entries(&checkpoint(&node))
        .into_iter()
        .map(|e| e.pod_uid)
        .collect();
    assert_eq!(owners, [uid(&second), uid(&fourth)].into());
    finish(node, vec![p]).await;
}

// ---------------------------------------------------------------------------------------------
// e, f. Restarts and a killed plugin.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_ferrolet_keeps_every_allocation_and_the_plugin_registers_again() {
    let node = node("dev-kill").await;
    let p = plugin(
        &node,
        TestDevicePlugin::builder(RESOURCE).devices(&["dev0", "dev1"]),
    )
    .await;
    wait_devices(&node, "2", "2").await;
    node.create_pod(device_pod("held", 1, IDLE)).await;
    let held = node.wait_api_running("held").await;
    let device = env_devices(&node, &held, "main").await;
    let id = container_id(&node, &held, "main").await;
    let before = entries(&checkpoint(&node));
    assert_eq!(before.len(), 1);
    let mut client = pod_resources(&node).await;
    let listed_before = listed(&client.list().await.unwrap().pod_resources, "held").unwrap();
    assert_eq!(ids_of(&listed_before[0].1), device);

    node.node.kill_kubelet();
    node.node.restart_kubelet().await;
    // The new kubelet removed the plugin's socket at its start; the plugin saw kubelet.sock
    // come back, served again and registered again.
    p.wait_registrations(2, LIMIT).await;
    assert!(p.socket().exists());
    let mut client = pod_resources(&node).await;
    poll("both devices allocatable again", LIMIT, || {
        let mut client = client.clone();
        async move {
            let ids = ids_of(&allocatable(&mut client).await);
            (ids == ["dev0", "dev1"])
                .then_some(())
                .ok_or(format!("{ids:?}"))
        }
    })
    .await;
    wait_devices(&node, "2", "2").await;

    // Nothing was allocated again, nothing restarted, every record as it was.
    let cp = checkpoint(&node);
    assert_eq!(entries(&cp), before, "{cp:#}");
    assert_eq!(
        registered_devices(&cp, RESOURCE),
        ["dev0", "dev1"],
        "{cp:#}"
    );
    let listed_after = listed(&client.list().await.unwrap().pod_resources, "held").unwrap();
    assert_eq!(listed_after, listed_before);
    assert_eq!(container_id(&node, &held, "main").await, id);
    let now = node.wait_api_running("held").await;
    assert_eq!(now["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(p.calls().allocate.len(), 1, "{:?}", p.calls());

    // The held device is not given out again: the next pod gets the other, a third none.
    node.create_pod(device_pod("next", 1, IDLE)).await;
    let next = node.wait_api_running("next").await;
    let other = env_devices(&node, &next, "main").await;
    assert_ne!(other, device);
    node.create_pod(device_pod("third", 1, IDLE)).await;
    assert_rejected(&node, "third", 1, 0).await;
    finish(node, vec![p]).await;
}

/// ferrolet's grace period for a plugin gone (Go's is a fixed 5 minutes).
const GRACE: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_plugins_devices_leave_allocatable_at_once_and_capacity_after_the_grace() {
    let node = node_with("dev-gone", &["--device-plugin-stop-grace-period", "8s"], "").await;
    let builder = TestDevicePlugin::builder(RESOURCE).devices(&["dev0", "dev1"]);
    let p = plugin(&node, builder.clone()).await;
    wait_devices(&node, "2", "2").await;

    let stopped = Instant::now();
    p.stop().await;
    assert!(!p.socket().exists());
    // Allocatable drops with the stream; capacity stays until the grace period is over.
    let mut unhealthy_at = None;
    let gone_at = loop {
        let n = node.api.get("nodes", "", &node.node_name).await.unwrap();
        let (cap, alloc) = (
            &n["status"]["capacity"][RESOURCE],
            &n["status"]["allocatable"][RESOURCE],
        );
        if cap == "2" && alloc == "0" && unhealthy_at.is_none() {
            unhealthy_at = Some(stopped.elapsed());
        }
        if cap == "0" && alloc == "0" {
            break stopped.elapsed();
        }
        assert!(
            stopped.elapsed() < GRACE + LIMIT,
            "capacity {cap}, allocatable {alloc} long after the plugin stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let unhealthy_at = unhealthy_at.expect("allocatable 0 with capacity 2 never seen");
    assert!(
        unhealthy_at < GRACE,
        "allocatable dropped after {unhealthy_at:?}"
    );
    assert!(gone_at >= GRACE, "capacity dropped after {gone_at:?}");
    eprintln!("allocatable 0 after {unhealthy_at:?}, capacity 0 after {gone_at:?}");

    // The plugin comes back: so do its devices.
    let again = plugin(&node, builder).await;
    wait_devices(&node, "2", "2").await;
    finish(node, vec![p, again]).await;
}

// ---------------------------------------------------------------------------------------------
// g. The pod resources API.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_resources_lists_what_runs_and_what_can_be_allocated() {
    let node = node("dev-podres").await;
    let builder = TestDevicePlugin::builder(RESOURCE)
        .device_on_numa("dev0", &[0])
        .device_on_numa("dev1", &[0])
        .device("dev2");
    let p = plugin(&node, builder).await;
    wait_devices(&node, "3", "3").await;
    assert!(p.set_health("dev2", false));
    wait_devices(&node, "3", "2").await;
    let mut client = pod_resources(&node).await;
    assert_eq!(
        allocatable(&mut client).await,
        [("dev0".to_string(), vec![0]), ("dev1".to_string(), vec![0])]
    );

    node.create_pod(json!({
        "metadata": {"name": "gpu", "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [container("a", 1, IDLE), container("b", 0, IDLE)],
        },
    }))
    .await;
    node.create_pod(device_pod("plain", 0, IDLE)).await;
    let gpu = node.wait_api_running("gpu").await;
    node.wait_api_running("plain").await;
    let [device] = &env_devices(&node, &gpu, "a").await[..] else {
        panic!("not one device");
    };

    let list = client.list().await.unwrap().pod_resources;
    let want = vec![
        ("a".to_string(), vec![(device.clone(), vec![0])]),
        ("b".to_string(), vec![]),
    ];
    assert_eq!(listed(&list, "gpu"), Some(want.clone()), "{list:#?}");
    assert_eq!(
        listed(&list, "plain"),
        Some(vec![("main".to_string(), vec![])])
    );
    // Allocatable is what is healthy, whoever holds it.
    assert_eq!(ids_of(&allocatable(&mut client).await), ["dev0", "dev1"]);

    let got = client
        .get(GetPodResourcesRequest {
            pod_name: "gpu".into(),
            pod_namespace: NAMESPACE.into(),
        })
        .await
        .unwrap()
        .pod_resources
        .unwrap();
    assert_eq!(
        (got.name.as_str(), got.namespace.as_str()),
        ("gpu", NAMESPACE)
    );
    assert_eq!(pod_devices(&got, RESOURCE), want);
    let missing = client
        .get(GetPodResourcesRequest {
            pod_name: "nobody".into(),
            pod_namespace: NAMESPACE.into(),
        })
        .await
        .unwrap_err();
    assert!(missing.message().contains("not found"), "{missing:?}");

    node.delete_pod("gpu").await;
    node.wait_api_pod_gone("gpu", LIMIT).await;
    let list = client.list().await.unwrap().pod_resources;
    assert!(listed(&list, "gpu").is_none(), "{list:#?}");
    finish(node, vec![p]).await;
}

// ---------------------------------------------------------------------------------------------
// h. Init containers, PreStartContainer, GetPreferredAllocation.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_devices_are_reused_prestart_comes_first_and_preferences_are_followed() {
    let node = node("dev-init").await;
    // PreStartContainer leaves a line per call in a dir the plugin mounts into its
    // containers, so a container sees which calls came before it started.
    let marks = node.node.host_dir().join("prestart");
    std::fs::create_dir_all(&marks).unwrap();
    let log = marks.join("calls");
    std::fs::write(&log, "").unwrap();
    let host = marks.display().to_string();
    let builder = TestDevicePlugin::builder(RESOURCE)
        .devices(&["dev0", "dev1", "dev2", "dev3"])
        .pre_start_required(true)
        .get_preferred_allocation_available(true)
        .on_pre_start(move |ids| {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            writeln!(f, "{}", sorted(ids).join(",")).unwrap();
        })
        .allocate(move |ids| ContainerAllocateResponse {
            envs: [(DEFAULT_ENV.to_string(), sorted(ids).join(","))].into(),
            mounts: vec![Mount {
                container_path: "/prestart".into(),
                host_path: host.clone(),
                read_only: true,
            }],
            ..Default::default()
        });
    let p = plugin(&node, builder).await;
    wait_devices(&node, "4", "4").await;

    let save = format!("echo ${DEFAULT_ENV} > /shared/init && cp /prestart/calls /shared/at-init");
    node.create_pod(json!({
        "metadata": {"name": "inits", "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": [with_shared(container("init", 2, &save))],
            "containers": [with_shared(container(
                "main",
                2,
                &format!("cp /prestart/calls /shared/at-main; {IDLE}"),
            ))],
        },
    }))
    .await;
    let pod = node.wait_api_running("inits").await;
    let preferred = strings(&["dev2", "dev3"]);

    // The plugin's preference (its highest ids) was asked once, for the init container, and
    // followed; the app container reused the init container's devices.
    let calls = p.calls();
    assert_eq!(calls.preferred.len(), 1, "{calls:?}");
    let asked = &calls.preferred[0].container_requests;
    assert_eq!(asked.len(), 1);
    assert_eq!(
        sorted(&asked[0].available_device_ids),
        ["dev0", "dev1", "dev2", "dev3"]
    );
    assert!(asked[0].must_include_device_ids.is_empty(), "{asked:?}");
    assert_eq!(asked[0].allocation_size, 2);
    assert_eq!(
        exec_ok(&node, &pod, "main", "cat /shared/init").await,
        preferred.join(",")
    );
    assert_eq!(env_devices(&node, &pod, "main").await, preferred);
    assert_eq!(
        allocations(&p),
        [[preferred.clone()], [preferred.clone()]],
        "one Allocate per container"
    );
    // PreStartContainer with each container's devices, each before that container started.
    let pre: Vec<Vec<String>> = calls.pre_start.iter().map(|ids| sorted(ids)).collect();
    assert_eq!(pre, [preferred.clone(), preferred.clone()]);
    let line = preferred.join(",");
    assert_eq!(
        exec_ok(&node, &pod, "main", "cat /shared/at-init").await,
        line
    );
    assert_eq!(
        exec_ok(&node, &pod, "main", "cat /shared/at-main").await,
        format!("{line}\n{line}")
    );

    // The pod resources API lists the app containers (Go 1.28 leaves init containers out).
    let mut client = pod_resources(&node).await;
    let list = client.list().await.unwrap().pod_resources;
    let devices = |ids: &[String]| {
        ids.iter()
            .map(|id| (id.clone(), vec![]))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        listed(&list, "inits"),
        Some(vec![("main".to_string(), devices(&preferred))])
    );
    let cp = entries(&checkpoint(&node));
    let held: Vec<(&str, &PerNuma)> = cp
        .iter()
        .map(|e| (e.container.as_str(), &e.devices))
        .collect();
    let both = vec![("-1".to_string(), preferred.clone())];
    assert_eq!(held, [("init", &both), ("main", &both)]);

    // A second pod is offered only what is free.
    node.create_pod(device_pod("rest", 2, IDLE)).await;
    let rest = node.wait_api_running("rest").await;
    assert_eq!(env_devices(&node, &rest, "main").await, ["dev0", "dev1"]);
    let calls = p.calls();
    assert_eq!(calls.preferred.len(), 2, "{calls:?}");
    let asked = &calls.preferred[1].container_requests[0];
    assert_eq!(sorted(&asked.available_device_ids), ["dev0", "dev1"]);
    finish(node, vec![p]).await;
}

fn with_shared(mut c: Value) -> Value {
    c["volumeMounts"] = json!([{"name": "shared", "mountPath": "/shared"}]);
    c
}

// ---------------------------------------------------------------------------------------------
// i. Registration through the plugin watcher.

/// A plugin's `pluginregistration` socket announcing it as a `DevicePlugin` (what a plugin
/// registering through `<root-dir>/plugins_registry` serves), with what the kubelet told it.
struct WatcherRegistration {
    endpoint: String,
    told: std::sync::Arc<
        std::sync::Mutex<Vec<ferrolet_proto::pluginregistration::RegistrationStatus>>,
    >,
}

impl ferrolet_proto::pluginregistration::Registration for WatcherRegistration {
    fn get_info(
        &self,
    ) -> ferrolet_proto::pluginregistration::Answer<ferrolet_proto::pluginregistration::PluginInfo>
    {
        let info = ferrolet_proto::pluginregistration::PluginInfo {
            r#type: ferrolet_proto::pluginregistration::DEVICE_PLUGIN.into(),
            name: RESOURCE.into(),
            endpoint: self.endpoint.clone(),
            supported_versions: vec![VERSION.into()],
        };
        Box::pin(async move { Ok(info) })
    }

    fn notify_registration_status(
        &self,
        s: ferrolet_proto::pluginregistration::RegistrationStatus,
    ) -> ferrolet_proto::pluginregistration::Answer<
        ferrolet_proto::pluginregistration::RegistrationStatusResponse,
    > {
        self.told.lock().unwrap().push(s);
        Box::pin(async { Ok(ferrolet_proto::pluginregistration::RegistrationStatusResponse {}) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_found_by_the_plugin_watcher_registers_and_goes_with_its_socket() {
    let node = node("dev-watcher").await;
    // The plugin serves outside the device plugin directory: no kubelet.sock appears there,
    // so it is known only through its registration socket.
    let dir = node.node.root_dir().join("plugins").join("dev-watcher");
    let p = PluginBuilder::new(RESOURCE)
        .devices(&["dev0", "dev1"])
        .start(&dir)
        .unwrap();
    let told = std::sync::Arc::default();
    let registrar = WatcherRegistration {
        endpoint: p.socket().display().to_string(),
        told: std::sync::Arc::clone(&told),
    };
    let reg_socket = node
        .node
        .root_dir()
        .join("plugins_registry")
        .join("dev-watcher-reg.sock");
    let listener =
        ferrolet_proto::transport::bind(&reg_socket.display().to_string(), 0o600).unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ferrolet_proto::pluginregistration::RegistrationServer::new(
                registrar,
            ))
            .serve_with_incoming(ferrolet_proto::transport::incoming(listener, true)),
    );
    wait_devices(&node, "2", "2").await;
    poll(
        "the kubelet told the plugin it is registered",
        LIMIT,
        || async {
            let told = told.lock().unwrap();
            match told.first() {
                Some(s) if s.plugin_registered => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(p.calls().list_and_watch, 1, "{:?}", p.calls());

    // Its registration socket gone: the plugin is gone, its devices leave allocatable.
    server.abort();
    std::fs::remove_file(&reg_socket).unwrap();
    wait_devices(&node, "2", "0").await;
    finish(node, vec![p]).await;
}
