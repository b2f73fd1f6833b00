use std::sync::Mutex;

use prost::Message;

use std::sync::Arc;

use super::*;

/// A driver that records what it is asked to publish.
#[derive(Default)]
struct Driver {
    published: Arc<Mutex<Vec<(String, String, bool)>>>,
}

fn answer<A: Send + 'static>(a: Result<A, Status>) -> Answer<A> {
    Box::pin(async move { a })
}

impl Node for Driver {
    fn node_stage_volume(&self, _: NodeStageVolumeRequest) -> Answer<NodeStageVolumeResponse> {
        answer(Ok(NodeStageVolumeResponse {}))
    }
    fn node_unstage_volume(
        &self,
        _: NodeUnstageVolumeRequest,
    ) -> Answer<NodeUnstageVolumeResponse> {
        answer(Ok(NodeUnstageVolumeResponse {}))
    }
    fn node_publish_volume(
        &self,
        r: NodePublishVolumeRequest,
    ) -> Answer<NodePublishVolumeResponse> {
        if r.volume_capability.is_none() {
            return answer(Err(Status::invalid_argument("volume capability missing")));
        }
        self.published
            .lock()
            .unwrap()
            .push((r.volume_id, r.target_path, r.readonly));
        answer(Ok(NodePublishVolumeResponse {}))
    }
    fn node_unpublish_volume(
        &self,
        _: NodeUnpublishVolumeRequest,
    ) -> Answer<NodeUnpublishVolumeResponse> {
        answer(Ok(NodeUnpublishVolumeResponse {}))
    }
    fn node_get_volume_stats(
        &self,
        _: NodeGetVolumeStatsRequest,
    ) -> Answer<NodeGetVolumeStatsResponse> {
        answer(Err(Status::not_found("no such volume")))
    }
    fn node_expand_volume(&self, _: NodeExpandVolumeRequest) -> Answer<NodeExpandVolumeResponse> {
        answer(Err(Status::unimplemented("")))
    }
    fn node_get_capabilities(&self) -> Answer<NodeGetCapabilitiesResponse> {
        let rpc = |t: node_service_capability::rpc::Type| NodeServiceCapability {
            r#type: Some(node_service_capability::Type::Rpc(
                node_service_capability::Rpc { r#type: t as i32 },
            )),
        };
        answer(Ok(NodeGetCapabilitiesResponse {
            capabilities: vec![
                rpc(node_service_capability::rpc::Type::StageUnstageVolume),
                rpc(node_service_capability::rpc::Type::GetVolumeStats),
            ],
        }))
    }
    fn node_get_info(&self) -> Answer<NodeGetInfoResponse> {
        answer(Ok(NodeGetInfoResponse {
            node_id: "n1".into(),
            max_volumes_per_node: 8,
            accessible_topology: Some(Topology {
                segments: [("topology.test.csi/node".to_string(), "n1".to_string())].into(),
            }),
        }))
    }
}

fn mount_capability() -> VolumeCapability {
    VolumeCapability {
        access_type: Some(volume_capability::AccessType::Mount(
            volume_capability::MountVolume::default(),
        )),
        access_mode: Some(volume_capability::AccessMode {
            mode: volume_capability::access_mode::Mode::SingleNodeWriter as i32,
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_answers_over_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("csi.sock");
    let listener = crate::transport::bind(&sock.display().to_string(), 0o600).unwrap();
    let driver = Driver::default();
    let published = driver.published.clone();
    let task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(NodeServer::new(driver))
            .serve_with_incoming(crate::transport::incoming(listener, true)),
    );
    let channel = crate::transport::connect(&sock.display().to_string())
        .await
        .unwrap();
    let mut client = NodeClient::new(channel);
    let info = client.node_get_info().await.unwrap();
    assert_eq!(
        (info.node_id.as_str(), info.max_volumes_per_node),
        ("n1", 8)
    );
    assert_eq!(
        info.accessible_topology.unwrap().segments["topology.test.csi/node"],
        "n1"
    );
    let caps = client.node_get_capabilities().await.unwrap();
    assert_eq!(caps.capabilities.len(), 2);
    client
        .node_publish_volume(NodePublishVolumeRequest {
            volume_id: "vol-1".into(),
            target_path: "/pods/u/volumes/kubernetes.io~csi/data/mount".into(),
            volume_capability: Some(mount_capability()),
            readonly: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        *published.lock().unwrap(),
        [(
            "vol-1".to_string(),
            "/pods/u/volumes/kubernetes.io~csi/data/mount".to_string(),
            true
        )]
    );
    let err = client
        .node_publish_volume(NodePublishVolumeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = client
        .node_get_volume_stats(NodeGetVolumeStatsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    task.abort();
}

#[test]
fn secrets_are_never_printed() {
    let r = NodePublishVolumeRequest {
        volume_id: "vol-1".into(),
        secrets: [("password".to_string(), "hunter2".to_string())].into(),
        ..Default::default()
    };
    let shown = format!("{r:?}");
    assert!(
        shown.contains("vol-1") && shown.contains("password"),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");
    let s = NodeStageVolumeRequest {
        secrets: [("token".to_string(), "s3cr3t".to_string())].into(),
        ..Default::default()
    };
    assert!(!format!("{s:?}").contains("s3cr3t"));
}

#[test]
fn field_numbers_are_the_specs() {
    let r = NodePublishVolumeRequest {
        volume_id: "v".into(),
        target_path: "t".into(),
        readonly: true,
        ..Default::default()
    };
    // volume_id = 1, target_path = 4, readonly = 6.
    assert_eq!(r.encode_to_vec(), [0x0a, 1, b'v', 0x22, 1, b't', 0x30, 1]);
    let info = NodeGetInfoResponse {
        node_id: "n".into(),
        max_volumes_per_node: 3,
        accessible_topology: None,
    };
    assert_eq!(info.encode_to_vec(), [0x0a, 1, b'n', 0x10, 3]);
    let cap = mount_capability();
    // mount = 2 (empty message), access_mode = 3 { mode = 1 }.
    assert_eq!(cap.encode_to_vec(), [0x12, 0, 0x1a, 2, 0x08, 1]);
}
