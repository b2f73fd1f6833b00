//! The test plugin against ferrolet_proto's clients and a stand-in kubelet registration
//! socket: registration, the calls, health updates, a kubelet restart and a stop.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrolet_proto::deviceplugin::{
    AllocateRequest, Answer, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, DevicePluginClient, DeviceSpec, Empty, HEALTHY,
    KUBELET_SOCKET, ListAndWatchResponse, PreStartContainerRequest, PreferredAllocationRequest,
    RegisterRequest, Registration, RegistrationServer, UNHEALTHY, VERSION,
};
use futures::StreamExt;
use tonic::Streaming;

use super::*;

const RESOURCE: &str = "example.com/resource";
const LIMIT: Duration = Duration::from_secs(10);

/// What a kubelet's registration socket does, as far as a plugin sees: it records each
/// request and, as Go's kubelet does before it answers, dials the plugin and asks its options.
#[derive(Clone, Default)]
struct Kubelet {
    dir: PathBuf,
    seen: Arc<Mutex<Vec<RegisterRequest>>>,
}

impl Registration for Kubelet {
    fn register(&self, request: RegisterRequest) -> Answer<Empty> {
        self.seen.lock().unwrap().push(request.clone());
        let socket = self.dir.join(&request.endpoint);
        Box::pin(async move {
            let channel = ferrolet_proto::transport::connect(&socket.display().to_string())
                .await
                .map_err(|e| tonic::Status::unknown(e.to_string()))?;
            DevicePluginClient::new(channel)
                .get_device_plugin_options()
                .await?;
            Ok(Empty {})
        })
    }
}

/// The stand-in kubelet's server on `<dir>/kubelet.sock`, aborted on drop.
struct Serving(tokio::task::JoinHandle<()>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn serve_kubelet(kubelet: &Kubelet) -> Serving {
    let path = kubelet.dir.join(KUBELET_SOCKET).display().to_string();
    let listener = ferrolet_proto::transport::bind(&path, 0o600).unwrap();
    let server = tonic::transport::Server::builder()
        .add_service(RegistrationServer::new(kubelet.clone()))
        .serve_with_incoming(ferrolet_proto::transport::incoming(listener, true));
    Serving(tokio::spawn(async move {
        let _ = server.await;
    }))
}

/// A kubelet restart as the plugin sees it: the old registration socket gone, every socket
/// in the directory removed (Go's cleanup at start), a new registration socket.
fn restart_kubelet(kubelet: &Kubelet, old: Serving) -> Serving {
    drop(old);
    for entry in std::fs::read_dir(&kubelet.dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    serve_kubelet(kubelet)
}

async fn client(plugin: &TestDevicePlugin) -> DevicePluginClient {
    let channel = ferrolet_proto::transport::connect(&plugin.socket().display().to_string())
        .await
        .unwrap();
    DevicePluginClient::new(channel)
}

async fn next(stream: &mut Streaming<ListAndWatchResponse>) -> Vec<(String, String)> {
    let update = tokio::time::timeout(LIMIT, stream.next())
        .await
        .expect("an update in time")
        .expect("the stream goes on")
        .unwrap();
    update
        .devices
        .into_iter()
        .map(|d| (d.id, d.health))
        .collect()
}

fn pair(id: &str, health: &str) -> (String, String) {
    (id.to_string(), health.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_answers_follows_a_restarted_kubelet_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet {
        dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    let marks = Arc::new(Mutex::new(Vec::new()));
    let seen = marks.clone();
    // Started before the kubelet: it waits for the registration socket.
    let plugin = TestDevicePlugin::builder(RESOURCE)
        .devices(&["dev-0", "dev-1"])
        .device_on_numa("dev-2", &[1])
        .pre_start_required(true)
        .get_preferred_allocation_available(true)
        .allocate_per_device(|id| ContainerAllocateResponse {
            envs: [(format!("DEV_{}", id.replace('-', "_")), id.to_string())].into(),
            devices: vec![DeviceSpec {
                container_path: format!("/dev/fake-{id}"),
                host_path: "/dev/null".into(),
                permissions: "rw".into(),
            }],
            ..Default::default()
        })
        .on_pre_start(move |ids| seen.lock().unwrap().push(ids.to_vec()))
        .start(dir.path())
        .unwrap();
    let mode = std::fs::metadata(plugin.socket()).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(plugin.calls().registrations, 0);
    let first = serve_kubelet(&kubelet);
    plugin.wait_registrations(1, LIMIT).await;
    let request = kubelet.seen.lock().unwrap()[0].clone();
    assert_eq!(request.version, VERSION);
    assert_eq!(request.endpoint, "example-com-resource.sock");
    assert_eq!(request.resource_name, RESOURCE);
    let options = request.options.unwrap();
    assert!(options.pre_start_required && options.get_preferred_allocation_available);
    assert_eq!(plugin.calls().options, 1, "the kubelet's dial-back");

    let mut c = client(&plugin).await;
    let mut stream = c.list_and_watch().await.unwrap();
    assert_eq!(
        next(&mut stream).await,
        [
            pair("dev-0", HEALTHY),
            pair("dev-1", HEALTHY),
            pair("dev-2", HEALTHY)
        ]
    );
    assert!(plugin.set_health("dev-1", false));
    assert!(!plugin.set_health("dev-9", false));
    assert_eq!(next(&mut stream).await[1], pair("dev-1", UNHEALTHY));
    let topology = plugin.devices()[2].topology.clone().unwrap();
    assert_eq!(topology.nodes[0].id, 1);

    let answer = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["dev-0".into(), "dev-2".into()],
            }],
        })
        .await
        .unwrap();
    let container = &answer.container_responses[0];
    assert_eq!(container.envs["DEV_dev_0"], "dev-0");
    assert_eq!(container.envs["DEV_dev_2"], "dev-2");
    assert_eq!(container.devices[1].container_path, "/dev/fake-dev-2");
    let refused = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["dev-7".into()],
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    let preferred = c
        .get_preferred_allocation(PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_ids: vec!["dev-0".into(), "dev-1".into(), "dev-2".into()],
                must_include_device_ids: vec!["dev-0".into()],
                allocation_size: 2,
            }],
        })
        .await
        .unwrap();
    assert_eq!(
        preferred.container_responses[0].device_ids,
        ["dev-0", "dev-2"]
    );
    c.pre_start_container(PreStartContainerRequest {
        devices_ids: vec!["dev-0".into()],
    })
    .await
    .unwrap();
    assert_eq!(*marks.lock().unwrap(), [vec!["dev-0".to_string()]]);
    let calls = plugin.calls();
    assert_eq!(calls.allocate.len(), 2);
    assert_eq!(calls.allocate[0], [vec!["dev-0", "dev-2"]]);
    assert_eq!(calls.pre_start, [vec!["dev-0"]]);
    assert_eq!(calls.preferred.len(), 1);
    assert_eq!(calls.list_and_watch, 1);

    // A new kubelet: the plugin serves on a fresh socket and registers again; the stream to
    // the old kubelet ends.
    let second = restart_kubelet(&kubelet, first);
    plugin.wait_registrations(2, LIMIT).await;
    let end = tokio::time::timeout(LIMIT, stream.next()).await.unwrap();
    assert!(end.as_ref().is_none_or(|r| r.is_err()), "{end:?}");
    assert_eq!(kubelet.seen.lock().unwrap().len(), 2);
    let mut c = client(&plugin).await;
    let mut stream = c.list_and_watch().await.unwrap();
    assert_eq!(next(&mut stream).await[1], pair("dev-1", UNHEALTHY));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        plugin.calls().registrations,
        2,
        "registered once per kubelet"
    );

    // Stopped: the stream ends, the socket goes, nothing registers any more.
    plugin.stop().await;
    let end = tokio::time::timeout(LIMIT, stream.next()).await.unwrap();
    assert!(end.as_ref().is_none_or(|r| r.is_err()), "{end:?}");
    assert!(!plugin.socket().exists());
    let third = restart_kubelet(&kubelet, second);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(plugin.calls().registrations, 2);
    plugin.stop().await;
    drop(third);
}

#[test]
fn the_default_preference_is_what_must_be_included_then_the_highest_ids() {
    let r = ContainerPreferredAllocationRequest {
        available_device_ids: ["a", "b", "c", "d"].map(String::from).to_vec(),
        must_include_device_ids: vec!["b".into()],
        allocation_size: 3,
    };
    assert_eq!(highest_first(&r), ["b", "d", "c"]);
    let none = ContainerPreferredAllocationRequest {
        allocation_size: -1,
        ..r
    };
    assert!(highest_first(&none).is_empty());
}

#[test]
fn per_device_answers_merge_into_the_containers() {
    let part = |k: &str| ContainerAllocateResponse {
        envs: [
            (k.to_string(), k.to_string()),
            ("SHARED".into(), k.to_string()),
        ]
        .into(),
        annotations: [(format!("a/{k}"), "1".to_string())].into(),
        ..Default::default()
    };
    let all = merged([part("x"), part("y")]);
    assert_eq!(all.envs.len(), 3);
    assert_eq!(all.envs["SHARED"], "y", "a later device's value wins");
    assert_eq!(all.annotations.len(), 2);
}
