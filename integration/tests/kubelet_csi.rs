//! CSI drivers on a ferrolet node (issue #35): a driver announcing itself with a registration
//! socket in `<root-dir>/plugins_registry/` is registered (its versions checked, its
//! `NodeGetInfo` asked), its node identity written to the API as Go's nodeinfomanager writes
//! it (the node's `CSINode` entry, owned by the Node, and its `csi.volume.kubernetes.io/nodeid`
//! annotation and topology labels), and removed from both when its socket goes. The driver
//! is the repo's test driver (`ferrolet_integration::csi_driver`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use ferrolet_integration::cluster::ClusterNode;
use ferrolet_integration::csi_driver::{DriverOptions, TestCsiDriver};
use ferrolet_proto::pluginregistration::RegistrationStatus;
use serde_json::Value;

const DRIVER: &str = "test.csi.ferrolet.dev";
const TOPOLOGY_KEY: &str = "topology.test.csi.ferrolet.dev/node";

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
    let state = tempfile::tempdir().unwrap();
    let driver = TestCsiDriver::start(
        &node.node.root_dir(),
        state.path(),
        DriverOptions {
            name: DRIVER.into(),
            stage: true,
            node_id: node.node_name.clone(),
            topology: [(TOPOLOGY_KEY.to_string(), node.node_name.clone())].into(),
            expand: false,
        },
    )
    .unwrap();

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
            "topologyKeys": [TOPOLOGY_KEY],
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
        api_node["metadata"]["labels"][TOPOLOGY_KEY],
        node.node_name.as_str()
    );
    assert_eq!(
        driver.registration_statuses(),
        [RegistrationStatus {
            plugin_registered: true,
            error: String::new()
        }]
    );

    // The driver's pod is deleted (its sockets go): the entry and annotation go too.
    driver.stop();
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
    node.teardown().await;
}
