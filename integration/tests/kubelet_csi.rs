//! CSI drivers on a ferrolet node (issue #35): a driver announcing itself with a registration
//! socket in `<root-dir>/plugins_registry/` is registered (its versions checked, its
//! `NodeGetInfo` asked), its node identity written to the API as Go's nodeinfomanager writes
//! it (the node's `CSINode` entry, owned by the Node, and its `csi.volume.kubernetes.io/nodeid`
//! annotation and topology labels), and removed from both when its socket goes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::Path;
use std::sync::{Arc, Mutex};

use ferrolet_integration::cluster::ClusterNode;
use ferrolet_proto::csi::{
    Answer, Node, NodeExpandVolumeRequest, NodeExpandVolumeResponse, NodeGetCapabilitiesResponse,
    NodeGetInfoResponse, NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse,
    NodePublishVolumeRequest, NodePublishVolumeResponse, NodeServer, NodeStageVolumeRequest,
    NodeStageVolumeResponse, NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse,
    NodeUnstageVolumeRequest, NodeUnstageVolumeResponse, Topology,
};
use ferrolet_proto::pluginregistration::{
    CSI_PLUGIN, PluginInfo, Registration, RegistrationServer, RegistrationStatus,
    RegistrationStatusResponse,
};
use serde_json::Value;
use tonic::Status;

const DRIVER: &str = "test.csi.ferrolet.dev";

/// The driver's Node service: only who the node is, for now.
struct Driver {
    node_id: String,
}

fn unimplemented<A: Send + 'static>() -> Answer<A> {
    Box::pin(async { Err(Status::unimplemented("")) })
}

impl Node for Driver {
    fn node_stage_volume(&self, _: NodeStageVolumeRequest) -> Answer<NodeStageVolumeResponse> {
        unimplemented()
    }
    fn node_unstage_volume(
        &self,
        _: NodeUnstageVolumeRequest,
    ) -> Answer<NodeUnstageVolumeResponse> {
        unimplemented()
    }
    fn node_publish_volume(
        &self,
        _: NodePublishVolumeRequest,
    ) -> Answer<NodePublishVolumeResponse> {
        unimplemented()
    }
    fn node_unpublish_volume(
        &self,
        _: NodeUnpublishVolumeRequest,
    ) -> Answer<NodeUnpublishVolumeResponse> {
        unimplemented()
    }
    fn node_get_volume_stats(
        &self,
        _: NodeGetVolumeStatsRequest,
    ) -> Answer<NodeGetVolumeStatsResponse> {
        unimplemented()
    }
    fn node_expand_volume(&self, _: NodeExpandVolumeRequest) -> Answer<NodeExpandVolumeResponse> {
        unimplemented()
    }
    fn node_get_capabilities(&self) -> Answer<NodeGetCapabilitiesResponse> {
        Box::pin(async { Ok(NodeGetCapabilitiesResponse::default()) })
    }
    fn node_get_info(&self) -> Answer<NodeGetInfoResponse> {
        let node_id = self.node_id.clone();
        Box::pin(async move {
            Ok(NodeGetInfoResponse {
                node_id: node_id.clone(),
                max_volumes_per_node: 16,
                accessible_topology: Some(Topology {
                    segments: [("topology.test.csi.ferrolet.dev/node".to_string(), node_id)].into(),
                }),
            })
        })
    }
}

/// The driver's registration socket (what node-driver-registrar serves).
struct Registrar {
    endpoint: String,
    told: Arc<Mutex<Vec<RegistrationStatus>>>,
}

impl Registration for Registrar {
    fn get_info(&self) -> Answer<PluginInfo> {
        let endpoint = self.endpoint.clone();
        Box::pin(async move {
            Ok(PluginInfo {
                r#type: CSI_PLUGIN.into(),
                name: DRIVER.into(),
                endpoint,
                supported_versions: vec!["1.0.0".into()],
            })
        })
    }

    fn notify_registration_status(
        &self,
        s: RegistrationStatus,
    ) -> Answer<RegistrationStatusResponse> {
        self.told.lock().unwrap().push(s);
        Box::pin(async { Ok(RegistrationStatusResponse {}) })
    }
}

/// Serves `router` on a unix socket at `socket` until the task is aborted.
fn serve(socket: &Path, router: tonic::service::Routes) -> tokio::task::JoinHandle<()> {
    let listener = ferrolet_proto::transport::bind(&socket.display().to_string(), 0o600).unwrap();
    let server = tonic::transport::Server::builder()
        .add_routes(router)
        .serve_with_incoming(ferrolet_proto::transport::incoming(listener, true));
    tokio::spawn(async move {
        let _ = server.await;
    })
}

fn csinode_drivers(obj: &Value) -> Vec<Value> {
    obj["spec"]["drivers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csi_driver_registers_and_its_node_info_follows_its_socket() {
    let node = ClusterNode::start("csi-reg").await;
    node.wait_node("registered", |_| true).await;
    let root = node.node.root_dir();
    let driver_socket = root.join("plugins/test.csi/csi.sock");
    std::fs::create_dir_all(driver_socket.parent().unwrap()).unwrap();
    let driver = serve(
        &driver_socket,
        tonic::service::Routes::new(NodeServer::new(Driver {
            node_id: node.node_name.clone(),
        })),
    );
    let registration = root.join("plugins_registry/test.csi-reg.sock");
    std::fs::create_dir_all(registration.parent().unwrap()).unwrap();
    let told = Arc::new(Mutex::new(Vec::new()));
    let registrar = serve(
        &registration,
        tonic::service::Routes::new(RegistrationServer::new(Registrar {
            endpoint: driver_socket.display().to_string(),
            told: told.clone(),
        })),
    );

    let csinode = node
        .wait_object_named(
            "csinodes.storage.k8s.io",
            &node.node_name,
            "listing the driver",
            |o| !csinode_drivers(o).is_empty(),
        )
        .await;
    assert_eq!(
        csinode_drivers(&csinode),
        [serde_json::json!({
            "name": DRIVER,
            "nodeID": node.node_name,
            "topologyKeys": ["topology.test.csi.ferrolet.dev/node"],
            "allocatable": {"count": 16},
        })]
    );
    assert_eq!(csinode["metadata"]["ownerReferences"][0]["kind"], "Node");
    let api_node = node
        .wait_node("annotated", |n| {
            n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"].is_string()
        })
        .await;
    let ids: Value = serde_json::from_str(
        api_node["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(ids, serde_json::json!({ DRIVER: node.node_name }));
    assert_eq!(
        api_node["metadata"]["labels"]["topology.test.csi.ferrolet.dev/node"],
        node.node_name.as_str()
    );
    assert_eq!(
        *told.lock().unwrap(),
        [RegistrationStatus {
            plugin_registered: true,
            error: String::new()
        }]
    );

    // The registrar goes (the driver's pod is deleted): the entry and annotation go too.
    registrar.abort();
    std::fs::remove_file(&registration).unwrap();
    node.wait_object_named(
        "csinodes.storage.k8s.io",
        &node.node_name,
        "without the driver",
        |o| csinode_drivers(o).is_empty(),
    )
    .await;
    node.wait_node("without the annotation", |n| {
        n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"].is_null()
    })
    .await;
    driver.abort();
    node.teardown().await;
}
