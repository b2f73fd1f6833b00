//! The manager against an in-process plugin on a real socket.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;

use ferrolet_proto::deviceplugin::*;
use tokio::sync::Notify;

use super::*;

struct Plugin {
    ids: Vec<String>,
    allocated: Mutex<Vec<Vec<String>>>,
    updates: tokio::sync::broadcast::Sender<Vec<Device>>,
    /// Set: the stream ends, as a killed plugin's does.
    gone: Arc<std::sync::atomic::AtomicBool>,
}

struct Served(Arc<Plugin>);

impl DevicePlugin for Served {
    fn get_device_plugin_options(&self) -> Answer<DevicePluginOptions> {
        Box::pin(async { Ok(DevicePluginOptions::default()) })
    }

    fn list_and_watch(&self) -> Answer<DeviceStream> {
        let first: Vec<Device> = self
            .0
            .ids
            .iter()
            .map(|id| Device {
                id: id.clone(),
                health: HEALTHY.into(),
                topology: None,
            })
            .collect();
        let mut rx = self.0.updates.subscribe();
        let gone = self.0.gone.clone();
        Box::pin(async move { Ok(async_stream(first, gone, move || rx.try_recv().ok())) })
    }

    fn get_preferred_allocation(
        &self,
        _: PreferredAllocationRequest,
    ) -> Answer<PreferredAllocationResponse> {
        Box::pin(async { Ok(PreferredAllocationResponse::default()) })
    }

    fn allocate(&self, request: AllocateRequest) -> Answer<AllocateResponse> {
        let ids = request.container_requests[0].devices_ids.clone();
        self.0.allocated.lock().unwrap().push(ids.clone());
        Box::pin(async move {
            Ok(AllocateResponse {
                container_responses: vec![ContainerAllocateResponse {
                    envs: [("DEVS".to_string(), ids.join(","))].into(),
                    ..Default::default()
                }],
            })
        })
    }

    fn pre_start_container(
        &self,
        _: PreStartContainerRequest,
    ) -> Answer<PreStartContainerResponse> {
        Box::pin(async { Ok(PreStartContainerResponse {}) })
    }
}

/// The first list, then whatever `next` yields, polled every 20 ms.
fn async_stream(
    first: Vec<Device>,
    gone: Arc<std::sync::atomic::AtomicBool>,
    mut next: impl FnMut() -> Option<Vec<Device>> + Send + 'static,
) -> DeviceStream {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        if tx
            .send(Ok(ListAndWatchResponse { devices: first }))
            .await
            .is_err()
        {
            return;
        }
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            if let Some(devices) = next()
                && tx.send(Ok(ListAndWatchResponse { devices })).await.is_err()
            {
                return;
            }
            if tx.is_closed() || gone.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
        }
    });
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

fn pod(uid: &str, init: Option<u32>, app: u32) -> Pod {
    let container = |name: &str, n: u32| {
        serde_json::json!({"name": name, "image": "busybox",
            "resources": {"limits": {"example.com/dev": n.to_string()}, "requests": {"example.com/dev": n.to_string()}}})
    };
    let mut spec = serde_json::json!({"containers": [container("app", app)]});
    if let Some(n) = init {
        spec["initContainers"] = serde_json::json!([container("init", n)]);
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "spec": spec,
    }))
    .unwrap()
}

async fn setup() -> (
    tempfile::TempDir,
    Arc<DeviceManager>,
    Arc<Plugin>,
    tokio::task::JoinHandle<()>,
) {
    let root = tempfile::tempdir().unwrap();
    let m = DeviceManager::new(
        root.path(),
        Duration::from_millis(200),
        Arc::new(Notify::new()),
    );
    registration::start(m.clone()).await.unwrap();
    let (updates, _) = tokio::sync::broadcast::channel(8);
    let plugin = Arc::new(Plugin {
        ids: vec!["d0".into(), "d1".into(), "d2".into()],
        allocated: Mutex::default(),
        updates,
        gone: Arc::default(),
    });
    let sock = m.dir().join("test.sock");
    let listener = ferrolet_proto::transport::bind(&sock.display().to_string(), 0o600).unwrap();
    let server = tonic::transport::Server::builder()
        .add_service(DevicePluginServer::new(Served(plugin.clone())))
        .serve_with_incoming(ferrolet_proto::transport::incoming(listener, true));
    let task = tokio::spawn(async move {
        let _ = server.await;
    });
    let channel =
        ferrolet_proto::transport::connect(&m.dir().join(KUBELET_SOCKET).display().to_string())
            .await
            .unwrap();
    RegistrationClient::new(channel)
        .register(RegisterRequest {
            version: VERSION.into(),
            endpoint: "test.sock".into(),
            resource_name: "example.com/dev".into(),
            options: None,
        })
        .await
        .unwrap();
    for _ in 0..100 {
        if m.capacity().await.capacity.get("example.com/dev") == Some(&3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (root, m, plugin, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocation_capacity_reuse_and_checkpoint() {
    let (root, m, plugin, task) = setup().await;
    let cap = m.capacity().await;
    assert_eq!(
        (
            cap.capacity["example.com/dev"],
            cap.allocatable["example.com/dev"]
        ),
        (3, 3)
    );

    let active = BTreeSet::new();
    let ctx = AdmitContext {
        active: Some(&active),
    };
    // The init container's device goes to the app container too.
    let a = pod("a", Some(1), 2);
    m.allocate(&a, &ctx).await.unwrap();
    let init = m
        .lock()
        .pod_devices
        .container_devices("a", "init", "example.com/dev")
        .unwrap();
    let app = m
        .lock()
        .pod_devices
        .container_devices("a", "app", "example.com/dev")
        .unwrap();
    assert!(init.is_subset(&app), "{init:?} {app:?}");
    let opts = m
        .run_container_options(&a, &a.spec.as_ref().unwrap().containers[0], true)
        .await
        .unwrap();
    assert_eq!(opts.envs[0].0, "DEVS");

    // One device left: a pod asking for two is refused in Go's words.
    let active: BTreeSet<String> = ["a".to_string()].into();
    let ctx = AdmitContext {
        active: Some(&active),
    };
    let err = m.allocate(&pod("b", None, 2), &ctx).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "requested number of devices unavailable for example.com/dev. Requested: 2, Available: 1"
    );
    assert!(!m.lock().pod_devices.has_pod("b"));
    assert_eq!(plugin.allocated.lock().unwrap().len(), 2);

    // A second manager reads the same allocations from the checkpoint.
    let again = DeviceManager::new(
        root.path(),
        Duration::from_millis(200),
        Arc::new(Notify::new()),
    );
    assert_eq!(
        again
            .lock()
            .pod_devices
            .container_devices("a", "app", "example.com/dev"),
        Some(app.clone())
    );
    // Unregistered until its plugin comes back: capacity 0, then dropped after the grace.
    let cap = again.capacity().await;
    assert_eq!(cap.capacity["example.com/dev"], 0);

    // The plugin goes away: nothing allocatable at once, removed after the grace period.
    plugin.gone.store(true, std::sync::atomic::Ordering::SeqCst);
    for _ in 0..100 {
        if m.capacity().await.allocatable.get("example.com/dev") == Some(&0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cap = m.capacity().await;
    assert_eq!(
        (
            cap.capacity["example.com/dev"],
            cap.allocatable["example.com/dev"]
        ),
        (3, 0)
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    let cap = m.capacity().await;
    assert_eq!(cap.removed, ["example.com/dev"]);
    assert!(cap.capacity.is_empty());
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_found_by_the_watcher_register_and_go() {
    use crate::plugin_manager::PluginHandler;
    let (_root, m, plugin, task) = setup().await;
    let handler = watcher::WatcherHandler::new(m.clone());
    assert_eq!(
        handler.validate("example.com/w", "/x.sock", &["v1alpha".into()]),
        Err("manager version, v1beta1, is not compatible with plugin version [\"v1alpha\"]".into())
    );
    assert_eq!(
        handler.validate("gpu", "/x.sock", &[VERSION.into()]),
        Err("invalid name of device plugin socket: the ResourceName \"gpu\" is invalid".into())
    );
    handler
        .validate("example.com/w", "/x.sock", &[VERSION.into()])
        .unwrap();
    // The same plugin's socket, announced under a second resource through the watcher.
    let socket = m.dir().join("test.sock").display().to_string();
    handler
        .register("example.com/w", &socket, &[VERSION.into()])
        .await
        .unwrap();
    let mut cap = m.capacity().await;
    for _ in 0..100 {
        if cap.allocatable.get("example.com/w") == Some(&3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        cap = m.capacity().await;
    }
    assert_eq!(cap.allocatable["example.com/w"], 3);
    // Its registration socket gone: unhealthy at once, the other resource untouched.
    handler.deregister("example.com/w").await;
    let cap = m.capacity().await;
    assert_eq!(
        (
            cap.capacity["example.com/w"],
            cap.allocatable["example.com/w"]
        ),
        (3, 0)
    );
    assert_eq!(cap.allocatable["example.com/dev"], 3);
    drop(plugin);
    task.abort();
}
