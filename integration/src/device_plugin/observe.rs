//! What a kubelet shows of its devices, read the way the device tests compare it: Go's
//! checkpoint file (`kubelet_internal_checkpoint`) and the pod resources API, each put in a
//! stable order (Go writes both in map order).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrolet_proto::podresources::{
    ContainerDevices, POD_RESOURCES_DIR, PodResources, PodResourcesListerClient, SOCKET,
};
use serde_json::Value;

/// Devices as the pod resources API reports them: (id, its NUMA nodes), sorted.
pub type Devices = Vec<(String, Vec<i64>)>;

/// A pod's containers (in the pod's order) and their [`Devices`] of one resource.
pub type PodDevices = Vec<(String, Devices)>;

/// A checkpoint entry's devices: NUMA node (`-1` for none) → ids, sorted.
pub type PerNuma = Vec<(String, Vec<String>)>;

/// One entry of Go's checkpoint, its device lists sorted.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CheckpointEntry {
    /// `PodUID`.
    pub pod_uid: String,
    /// `ContainerName`.
    pub container: String,
    /// `ResourceName`.
    pub resource: String,
    /// `DeviceIDs`.
    pub devices: PerNuma,
    /// `AllocResp`: the plugin's Allocate answer, base64 of its protobuf.
    pub alloc_resp: String,
}

/// The checkpoint's path under a kubelet's `--root-dir`.
pub fn checkpoint_path(root_dir: &Path) -> PathBuf {
    super::plugin_dir(root_dir).join("kubelet_internal_checkpoint")
}

/// Reads the checkpoint: `{"Data": {"PodDeviceEntries": [...], "RegisteredDevices": {...}},
/// "Checksum": N}`, or why it is not that.
pub fn read_checkpoint(root_dir: &Path) -> Result<Value, String> {
    let path = checkpoint_path(root_dir);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    if !v["Checksum"].is_u64() || !v["Data"]["PodDeviceEntries"].is_array() {
        return Err(format!("not Go's checkpoint: {text}"));
    }
    Ok(v)
}

/// The checkpoint's entries, sorted.
pub fn checkpoint_entries(cp: &Value) -> Result<Vec<CheckpointEntry>, String> {
    let list = cp["Data"]["PodDeviceEntries"]
        .as_array()
        .ok_or_else(|| format!("no PodDeviceEntries: {cp}"))?;
    let mut out = Vec::new();
    for e in list {
        let per_numa = e["DeviceIDs"]
            .as_object()
            .ok_or_else(|| format!("DeviceIDs is not a map: {e}"))?;
        let mut devices = Vec::new();
        for (numa, ids) in per_numa {
            let mut ids: Vec<String> =
                serde_json::from_value(ids.clone()).map_err(|err| format!("{err}: {e}"))?;
            ids.sort();
            devices.push((numa.clone(), ids));
        }
        let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        out.push(CheckpointEntry {
            pod_uid: s("PodUID"),
            container: s("ContainerName"),
            resource: s("ResourceName"),
            devices,
            alloc_resp: s("AllocResp"),
        });
    }
    out.sort();
    Ok(out)
}

/// The checkpoint's `RegisteredDevices` of `resource`, sorted.
pub fn registered_devices(cp: &Value, resource: &str) -> Vec<String> {
    let mut ids: Vec<String> =
        serde_json::from_value(cp["Data"]["RegisteredDevices"][resource].clone())
            .unwrap_or_default();
    ids.sort();
    ids
}

/// The pod resources socket under a kubelet's `--root-dir`.
pub fn pod_resources_socket(root_dir: &Path) -> PathBuf {
    root_dir.join(POD_RESOURCES_DIR).join(SOCKET)
}

/// A client of the pod resources socket, once it answers (within `limit`); the socket must
/// be the kubelet's alone (mode 0600, as Go's).
pub async fn pod_resources_client(
    root_dir: &Path,
    limit: Duration,
) -> Result<PodResourcesListerClient, String> {
    let path = pod_resources_socket(root_dir);
    let deadline = Instant::now() + limit;
    let channel = loop {
        match ferrolet_proto::transport::connect(&path.display().to_string()).await {
            Ok(channel) => break channel,
            Err(e) if Instant::now() >= deadline => return Err(e.to_string()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let mode = std::fs::metadata(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .permissions()
        .mode()
        & 0o777;
    if mode != 0o600 {
        return Err(format!("{} has mode {mode:o}, not 600", path.display()));
    }
    Ok(PodResourcesListerClient::new(channel))
}

/// The devices of `resource` among `devices`, sorted, each with the NUMA nodes its entry
/// names.
pub fn resource_devices(devices: &[ContainerDevices], resource: &str) -> Devices {
    let mut out: Devices = devices
        .iter()
        .filter(|d| d.resource_name == resource)
        .flat_map(|d| {
            let numa: Vec<i64> = d
                .topology
                .iter()
                .flat_map(|t| t.nodes.iter().map(|n| n.id))
                .collect();
            d.device_ids
                .iter()
                .map(move |id| (id.clone(), numa.clone()))
        })
        .collect();
    out.sort();
    out
}

/// The ids alone.
pub fn ids_of(devices: &[(String, Vec<i64>)]) -> Vec<String> {
    devices.iter().map(|(id, _)| id.clone()).collect()
}

/// A pod's containers and their devices of `resource`.
pub fn pod_devices(pod: &PodResources, resource: &str) -> PodDevices {
    pod.containers
        .iter()
        .map(|c| (c.name.clone(), resource_devices(&c.devices, resource)))
        .collect()
}

/// Pod `namespace/name` in a `List` answer, as [`pod_devices`]; `None` if not listed.
pub fn listed(
    list: &[PodResources],
    namespace: &str,
    name: &str,
    resource: &str,
) -> Option<PodDevices> {
    list.iter()
        .find(|p| p.name == name && p.namespace == namespace)
        .map(|p| pod_devices(p, resource))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_entries_come_sorted_whatever_order_go_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = super::super::plugin_dir(dir.path());
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::write(
            checkpoint_path(dir.path()),
            r#"{"Data":{"PodDeviceEntries":[
                {"PodUID":"b","ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":["d2","d1"]},"AllocResp":"AQ=="},
                {"PodUID":"a","ContainerName":"c","ResourceName":"r","DeviceIDs":{"-1":["d3"]},"AllocResp":""}],
                "RegisteredDevices":{"r":["d3","d1","d2"]}},"Checksum":1}"#,
        )
        .unwrap();
        let cp = read_checkpoint(dir.path()).unwrap();
        let e = checkpoint_entries(&cp).unwrap();
        assert_eq!(e[0].pod_uid, "a");
        assert_eq!(
            e[1].devices,
            [("0".to_string(), vec!["d1".into(), "d2".into()])]
        );
        assert_eq!(e[1].alloc_resp, "AQ==");
        assert_eq!(registered_devices(&cp, "r"), ["d1", "d2", "d3"]);
        std::fs::write(checkpoint_path(dir.path()), r#"{"Data":{}}"#).unwrap();
        assert!(read_checkpoint(dir.path()).is_err());
    }
}
