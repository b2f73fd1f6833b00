use std::path::Path;

use ferrolet_proto::csi::{
    Answer, Node, NodeExpandVolumeRequest, NodeExpandVolumeResponse, NodeGetCapabilitiesResponse,
    NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse, NodePublishVolumeRequest,
    NodePublishVolumeResponse, NodeServer, NodeStageVolumeRequest, NodeStageVolumeResponse,
    NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse, NodeUnstageVolumeRequest,
    NodeUnstageVolumeResponse, Topology,
};
use tonic::Status;

use super::*;

/// A driver whose Node service only knows who the node is (or fails to say).
struct InfoOnly {
    node_id: Option<&'static str>,
}

fn unimplemented<A: Send + 'static>() -> Answer<A> {
    Box::pin(async { Err(Status::unimplemented("")) })
}

impl Node for InfoOnly {
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
        unimplemented()
    }
    fn node_get_info(&self) -> Answer<NodeGetInfoResponse> {
        let id = self.node_id;
        Box::pin(async move {
            match id {
                Some(id) => Ok(NodeGetInfoResponse {
                    node_id: id.into(),
                    max_volumes_per_node: 4,
                    accessible_topology: Some(Topology {
                        segments: [("topology.test.csi/node".to_string(), id.to_string())].into(),
                    }),
                }),
                None => Err(Status::unavailable("driver not ready")),
            }
        })
    }
}

fn serve(socket: &Path, node_id: Option<&'static str>) -> tokio::task::JoinHandle<()> {
    let listener = ferrolet_proto::transport::bind(&socket.display().to_string(), 0o600).unwrap();
    let server = tonic::transport::Server::builder()
        .add_service(NodeServer::new(InfoOnly { node_id }))
        .serve_with_incoming(ferrolet_proto::transport::incoming(listener, true));
    tokio::spawn(async move {
        let _ = server.await;
    })
}

/// Records installs and uninstalls.
#[derive(Default)]
struct Recorded(Mutex<Vec<String>>);

impl NodeInfo for Recorded {
    fn install<'a>(
        &'a self,
        driver: &'a str,
        info: &'a NodeGetInfoResponse,
    ) -> BoxFuture<'a, Result<(), String>> {
        self.0.lock().unwrap().push(format!(
            "install {driver} {} {}",
            info.node_id, info.max_volumes_per_node
        ));
        Box::pin(async { Ok(()) })
    }

    fn uninstall<'a>(&'a self, driver: &'a str) -> BoxFuture<'a, Result<(), String>> {
        self.0.lock().unwrap().push(format!("uninstall {driver}"));
        Box::pin(async { Ok(()) })
    }
}

fn versions(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_registers_with_its_node_info_and_deregisters() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    let task = serve(&socket, Some("node-a"));
    let drivers = Drivers::default();
    let recorded = Arc::new(Recorded::default());
    let handler = CsiRegistration::new(drivers.clone(), recorded.clone());
    let endpoint = socket.display().to_string();
    let v = versions(&["1.0.0", "1.5.0"]);
    handler.validate("test.csi", &endpoint, &v).unwrap();
    handler.register("test.csi", &endpoint, &v).await.unwrap();
    assert_eq!(
        drivers.get("test.csi"),
        Some(Driver {
            endpoint: endpoint.clone(),
            version: super::super::version::parse_generic("1.5.0").unwrap()
        })
    );
    // The same name again needs a higher version.
    assert_eq!(
        handler.validate("test.csi", &endpoint, &v).unwrap_err(),
        "kubernetes.io/csi: ValidatePlugin for CSI driver \"test.csi\" failed. Another driver \
         with the same name is already registered with a higher supported version: \"1.5.0\""
    );
    handler.deregister("test.csi").await;
    assert!(drivers.names().is_empty());
    assert_eq!(
        *recorded.0.lock().unwrap(),
        ["install test.csi node-a 4", "uninstall test.csi"]
    );
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_versions_and_a_failing_node_get_info_leave_nothing_registered() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    let task = serve(&socket, None);
    let drivers = Drivers::default();
    let recorded = Arc::new(Recorded::default());
    let handler = CsiRegistration::new(drivers.clone(), recorded.clone());
    let endpoint = socket.display().to_string();
    assert_eq!(
        handler.validate("test.csi", &endpoint, &[]).unwrap_err(),
        "kubernetes.io/csi: ValidatePlugin for CSI driver \"test.csi\" failed. Plugin returned \
         an empty list for supported versions"
    );
    assert_eq!(
        handler
            .validate("test.csi", &endpoint, &versions(&["0.3.0", "2.0.0"]))
            .unwrap_err(),
        "kubernetes.io/csi: ValidatePlugin for CSI driver \"test.csi\" failed. None of the \
         versions specified [\"0.3.0\" \"2.0.0\"] are supported. err=highest supported version \
         reported is 0.3.0, must be v1.x"
    );
    let err = handler
        .register("test.csi", &endpoint, &versions(&["1.0.0"]))
        .await
        .unwrap_err();
    assert!(err.contains("driver not ready"), "{err}");
    assert!(drivers.names().is_empty());
    assert_eq!(*recorded.0.lock().unwrap(), ["uninstall test.csi"]);
    task.abort();
}
