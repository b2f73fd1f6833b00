//! A registered CSI driver's node identity in the API (Go's `nodeinfomanager`): the node's
//! `csi.volume.kubernetes.io/nodeid` annotation (driver → node id, JSON), its topology labels,
//! and the driver's entry in the node's `CSINode` (node id, topology keys, allocatable
//! volume count), which the scheduler and the external attacher read. The `CSINode` is
//! created when missing, owned by the Node so it goes with it.

use std::collections::BTreeMap;
use std::time::Duration;

use ferrolet_proto::csi::NodeGetInfoResponse;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::registration::NodeInfo;
use crate::kube_client::ApiHandle;

/// The node annotation mapping drivers to their ids for this node.
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";
/// Attempts at a `CSINode` update that met a concurrent one.
const UPDATE_ATTEMPTS: u32 = 5;

/// The annotation's value with `driver` → `node_id` set (`Some(None)`: `driver` removed and
/// the map empty, so the annotation goes); `None` when it already says so.
pub fn annotation_with(
    existing: Option<&str>,
    driver: &str,
    node_id: Option<&str>,
) -> Result<Option<Option<String>>, String> {
    let mut map: BTreeMap<String, String> = match existing {
        Some(text) if !text.is_empty() => serde_json::from_str(text).map_err(|e| {
            format!("failed to unmarshal annotation {NODE_ID_ANNOTATION:?} {text:?}: {e}")
        })?,
        _ => BTreeMap::new(),
    };
    let before = map.clone();
    match node_id {
        Some(id) => {
            map.insert(driver.to_string(), id.to_string());
        }
        None => {
            map.remove(driver);
        }
    }
    if map == before && existing.is_some_and(|t| !t.is_empty()) {
        return Ok(None);
    }
    if map.is_empty() {
        return Ok(if existing.is_some() { Some(None) } else { None });
    }
    serde_json::to_string(&map)
        .map(|s| Some(Some(s)))
        .map_err(|e| e.to_string())
}

/// The node labels a driver's topology adds; a label the node has with another value is a
/// collision Go refuses.
pub fn topology_labels(
    labels: &BTreeMap<String, String>,
    info: &NodeGetInfoResponse,
) -> Result<BTreeMap<String, String>, String> {
    let mut add = BTreeMap::new();
    for (k, v) in info
        .accessible_topology
        .as_ref()
        .map(|t| &t.segments)
        .into_iter()
        .flatten()
    {
        match labels.get(k) {
            Some(existing) if existing != v => {
                return Err(format!(
                    "detected topology value collision: driver reported {k:?}:{v:?} but existing \
                     label is {k:?}:{existing:?}"
                ));
            }
            Some(_) => {}
            None => {
                add.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(add)
}

/// `drivers` with `driver`'s entry made from `info` (replacing an older one), or removed
/// (`info` `None`); `None` when nothing changes.
pub fn drivers_with(
    drivers: &[CSINodeDriver],
    driver: &str,
    info: Option<&NodeGetInfoResponse>,
) -> Option<Vec<CSINodeDriver>> {
    let mut out: Vec<CSINodeDriver> = drivers
        .iter()
        .filter(|d| d.name != driver)
        .cloned()
        .collect();
    if let Some(info) = info {
        let keys: Vec<String> = info
            .accessible_topology
            .as_ref()
            .map(|t| t.segments.keys().cloned().collect())
            .unwrap_or_default();
        let count = i32::try_from(info.max_volumes_per_node).unwrap_or(i32::MAX);
        out.push(CSINodeDriver {
            name: driver.to_string(),
            node_id: info.node_id.clone(),
            topology_keys: Some(keys),
            allocatable: (count > 0).then_some(VolumeNodeResources { count: Some(count) }),
        });
    }
    (out != drivers).then_some(out)
}

/// [`NodeInfo`] through the API server.
pub struct ApiNodeInfo {
    api: ApiHandle,
}

impl ApiNodeInfo {
    /// Writes this node's (`api`'s node name) objects.
    pub fn new(api: ApiHandle) -> Self {
        Self { api }
    }

    async fn update_node(
        &self,
        driver: &str,
        info: Option<&NodeGetInfoResponse>,
    ) -> Result<(), String> {
        let nodes: Api<Node> = Api::all(self.api.client());
        let name = self.api.node_name();
        let node = nodes
            .get(name)
            .await
            .map_err(|e| format!("error getting node {name:?}: {e}"))?;
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let annotation = annotation_with(
            annotations.get(NODE_ID_ANNOTATION).map(String::as_str),
            driver,
            info.map(|i| i.node_id.as_str()),
        )?;
        let new_labels = match info {
            Some(i) => topology_labels(&labels, i)?,
            None => BTreeMap::new(),
        };
        if annotation.is_none() && new_labels.is_empty() {
            return Ok(());
        }
        let mut metadata = serde_json::Map::new();
        if let Some(value) = annotation {
            metadata.insert("annotations".into(), json!({ NODE_ID_ANNOTATION: value }));
        }
        if !new_labels.is_empty() {
            metadata.insert("labels".into(), json!(new_labels));
        }
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": metadata })),
            )
            .await
            .map(|_| ())
            .map_err(|e| format!("error updating node {name:?}: {e}"))
    }

    async fn update_csinode(
        &self,
        driver: &str,
        info: Option<&NodeGetInfoResponse>,
    ) -> Result<(), String> {
        let csinodes: Api<CSINode> = Api::all(self.api.client());
        let name = self.api.node_name();
        for attempt in 1..=UPDATE_ATTEMPTS {
            let existing = csinodes
                .get_opt(name)
                .await
                .map_err(|e| format!("error getting CSINode {name:?}: {e}"))?;
            let result = match existing {
                None => {
                    let Some(drivers) = drivers_with(&[], driver, info) else {
                        return Ok(());
                    };
                    let owner = self.node_owner().await?;
                    let object = CSINode {
                        metadata: ObjectMeta {
                            name: Some(name.to_string()),
                            owner_references: Some(vec![owner]),
                            ..Default::default()
                        },
                        spec: CSINodeSpec { drivers },
                    };
                    csinodes.create(&PostParams::default(), &object).await
                }
                Some(mut object) => {
                    let Some(drivers) = drivers_with(&object.spec.drivers, driver, info) else {
                        return Ok(());
                    };
                    object.spec.drivers = drivers;
                    csinodes
                        .replace(name, &PostParams::default(), &object)
                        .await
                }
            };
            match result {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < UPDATE_ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(format!("error updating CSINode {name:?}: {e}")),
            }
        }
        Err(format!(
            "error updating CSINode {name:?}: too many conflicts"
        ))
    }

    async fn node_owner(&self) -> Result<OwnerReference, String> {
        let nodes: Api<Node> = Api::all(self.api.client());
        let name = self.api.node_name();
        let node = nodes
            .get(name)
            .await
            .map_err(|e| format!("error getting node {name:?}: {e}"))?;
        Ok(OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: name.to_string(),
            uid: node.metadata.uid.unwrap_or_default(),
            ..Default::default()
        })
    }
}

impl NodeInfo for ApiNodeInfo {
    fn install<'a>(
        &'a self,
        driver: &'a str,
        info: &'a NodeGetInfoResponse,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.update_node(driver, Some(info)).await?;
            self.update_csinode(driver, Some(info)).await
        })
    }

    fn uninstall<'a>(&'a self, driver: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.update_csinode(driver, None).await?;
            self.update_node(driver, None).await
        })
    }
}

/// [`NodeInfo`] without an API server (standalone): there is no `CSINode` to write, and the
/// driver is still usable on this node.
pub struct Standalone;

impl NodeInfo for Standalone {
    fn install<'a>(
        &'a self,
        _: &'a str,
        _: &'a NodeGetInfoResponse,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn uninstall<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use ferrolet_proto::csi::Topology;

    use super::*;

    fn info(id: &str, max: i64, topology: &[(&str, &str)]) -> NodeGetInfoResponse {
        NodeGetInfoResponse {
            node_id: id.into(),
            max_volumes_per_node: max,
            accessible_topology: Some(Topology {
                segments: topology
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            }),
        }
    }

    #[test]
    fn the_annotation_maps_drivers_to_node_ids() {
        assert_eq!(
            annotation_with(None, "a.csi", Some("n1")).unwrap(),
            Some(Some(r#"{"a.csi":"n1"}"#.into()))
        );
        let both = r#"{"a.csi":"n1","b.csi":"x"}"#;
        assert_eq!(
            annotation_with(Some(both), "a.csi", Some("n1")).unwrap(),
            None
        );
        assert_eq!(
            annotation_with(Some(both), "a.csi", None).unwrap(),
            Some(Some(r#"{"b.csi":"x"}"#.into()))
        );
        assert_eq!(
            annotation_with(Some(r#"{"a.csi":"n1"}"#), "a.csi", None).unwrap(),
            Some(None)
        );
        assert_eq!(annotation_with(None, "a.csi", None).unwrap(), None);
        assert!(annotation_with(Some("{"), "a.csi", Some("n1")).is_err());
    }

    #[test]
    fn topology_becomes_labels_unless_it_collides() {
        let labels: BTreeMap<String, String> = [("zone".to_string(), "z1".to_string())].into();
        let add =
            topology_labels(&labels, &info("n1", 0, &[("zone", "z1"), ("rack", "r2")])).unwrap();
        assert_eq!(add, [("rack".to_string(), "r2".to_string())].into());
        assert_eq!(
            topology_labels(&labels, &info("n1", 0, &[("zone", "z9")])).unwrap_err(),
            "detected topology value collision: driver reported \"zone\":\"z9\" but existing \
             label is \"zone\":\"z1\""
        );
    }

    #[test]
    fn csinode_entries_are_replaced_and_removed() {
        let first = drivers_with(&[], "a.csi", Some(&info("n1", 4, &[("zone", "z1")]))).unwrap();
        assert_eq!(
            first,
            [CSINodeDriver {
                name: "a.csi".into(),
                node_id: "n1".into(),
                topology_keys: Some(vec!["zone".into()]),
                allocatable: Some(VolumeNodeResources { count: Some(4) }),
            }]
        );
        // Unchanged: nothing to write.
        assert_eq!(
            drivers_with(&first, "a.csi", Some(&info("n1", 4, &[("zone", "z1")]))),
            None
        );
        let other = drivers_with(&first, "b.csi", Some(&info("x", 0, &[]))).unwrap();
        assert_eq!(other.len(), 2);
        assert_eq!(other[1].allocatable, None);
        let removed = drivers_with(&other, "a.csi", None).unwrap();
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].name, "b.csi");
        assert_eq!(drivers_with(&removed, "a.csi", None), None);
    }
}
