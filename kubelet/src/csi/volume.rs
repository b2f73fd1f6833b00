//! A CSI volume as the node side sees it (Go's `csiMountMgr` and `csiAttacher` data): where it
//! is staged and published (Go's layout, so drivers and tools find what they expect), the
//! `vol_data.json` files beside those paths (how a restarted kubelet finds the driver and
//! handle again), the CSIDriver object's policy, and the requests made from them.
//!
//! - Staged (`NodeStageVolume`, drivers with `STAGE_UNSTAGE_VOLUME`):
//!   `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`, with
//!   `vol_data.json` (`volumeHandle`, `driverName`) in its parent.
//! - Published (`NodePublishVolume`): `<root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount`
//!   (`<name>`: the PV's, or an inline volume's), `vol_data.json` in its parent.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use ferrolet_proto::csi::VolumeCapability;
use ferrolet_proto::csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode};
use k8s_openapi::api::core::v1::{PersistentVolume, Volume};
use k8s_openapi::api::storage::v1::CSIDriver;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::client::Capabilities;
use crate::types::Pod;

/// Go's plugin directory of CSI volumes under a pod.
pub const POD_PLUGIN_DIR: &str = crate::volume::CSI_PLUGIN;
/// The file Go keeps beside a staged or published volume.
pub const VOL_DATA_FILE: &str = "vol_data.json";
/// The pod's service-account tokens in the volume context (a CSIDriver's `tokenRequests`).
pub const TOKENS_ATTRIBUTE: &str = "csi.storage.k8s.io/serviceAccount.tokens";

/// How the volume came to the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Lifecycle {
    /// A PersistentVolume's (bound through a claim).
    Persistent,
    /// Inline in the pod spec, living and dying with the pod.
    Ephemeral,
}

impl Lifecycle {
    /// Its name in the API (`volumeLifecycleModes`).
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Persistent => "Persistent",
            Lifecycle::Ephemeral => "Ephemeral",
        }
    }
}

/// A secret a driver call carries (`nodeStageSecretRef`, `nodePublishSecretRef`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Everything the node needs of one CSI volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsiVolume {
    /// The driver's name.
    pub driver: String,
    /// The driver's volume id (an inline volume's is made from the pod and volume).
    pub handle: String,
    /// The name in paths: the PV's, or the inline volume's.
    pub spec_name: String,
    /// Published read-only (the claim's or the source's `readOnly`).
    pub read_only: bool,
    /// The filesystem asked for ("" = the driver's choice).
    pub fs_type: String,
    /// The source's `volumeAttributes`.
    pub attributes: BTreeMap<String, String>,
    /// The PV's `mountOptions`.
    pub mount_options: Vec<String>,
    /// The PV's first access mode (`ReadWriteOnce` when none, as Go).
    pub access_mode: String,
    /// Secrets for `NodeStageVolume`.
    pub stage_secret: Option<SecretRef>,
    /// Secrets for `NodePublishVolume`.
    pub publish_secret: Option<SecretRef>,
    /// Persistent or inline.
    pub lifecycle: Lifecycle,
    /// Whether the PV's `volumeMode` is `Block`.
    pub block: bool,
}

impl CsiVolume {
    /// The CSI volume of a bound PV (`read_only`: the claim's), if its source is CSI.
    pub fn from_pv(pv: &PersistentVolume, read_only: bool) -> Option<Self> {
        let spec = pv.spec.as_ref()?;
        let csi = spec.csi.as_ref()?;
        let secret = |r: &Option<k8s_openapi::api::core::v1::SecretReference>| {
            r.as_ref().map(|r| SecretRef {
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
            })
        };
        Some(Self {
            driver: csi.driver.clone(),
            handle: csi.volume_handle.clone(),
            spec_name: pv.metadata.name.clone().unwrap_or_default(),
            read_only: read_only || csi.read_only.unwrap_or(false),
            fs_type: csi.fs_type.clone().unwrap_or_default(),
            attributes: csi.volume_attributes.clone().unwrap_or_default(),
            mount_options: spec.mount_options.clone().unwrap_or_default(),
            access_mode: spec
                .access_modes
                .as_ref()
                .and_then(|m| m.first().cloned())
                .unwrap_or_else(|| "ReadWriteOnce".into()),
            stage_secret: secret(&csi.node_stage_secret_ref),
            publish_secret: secret(&csi.node_publish_secret_ref),
            lifecycle: Lifecycle::Persistent,
            block: spec.volume_mode.as_deref() == Some("Block"),
        })
    }

    /// The CSI volume of an inline `csi:` source of pod `uid` (Go's `makeVolumeHandle`:
    /// `csi-<sha256(uid + name)>`).
    pub fn inline(pod: &Pod, volume: &Volume) -> Option<Self> {
        let csi = volume.csi.as_ref()?;
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let namespace = pod
            .metadata
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or("default");
        Some(Self {
            driver: csi.driver.clone(),
            handle: format!("csi-{}", sha256_hex(&format!("{uid}{}", volume.name))),
            spec_name: volume.name.clone(),
            read_only: csi.read_only.unwrap_or(false),
            fs_type: csi.fs_type.clone().unwrap_or_default(),
            attributes: csi.volume_attributes.clone().unwrap_or_default(),
            mount_options: Vec::new(),
            access_mode: "ReadWriteOnce".into(),
            stage_secret: None,
            publish_secret: csi.node_publish_secret_ref.as_ref().map(|r| SecretRef {
                namespace: namespace.to_string(),
                name: r.name.clone(),
            }),
            lifecycle: Lifecycle::Ephemeral,
            block: false,
        })
    }

    /// Go's unique volume name (`kubernetes.io/csi/<driver>^<handle>`), as node status lists
    /// it in `volumesInUse`.
    pub fn unique_name(&self) -> String {
        unique_name(&self.driver, &self.handle)
    }
}

/// `kubernetes.io/csi/<driver>^<handle>`.
pub fn unique_name(driver: &str, handle: &str) -> String {
    format!("kubernetes.io/csi/{driver}^{handle}")
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Where a volume is staged (Go's `makeDeviceMountPath`).
pub fn device_mount_path(root_dir: &Path, driver: &str, handle: &str) -> PathBuf {
    root_dir
        .join("plugins/kubernetes.io/csi")
        .join(driver)
        .join(sha256_hex(handle))
        .join("globalmount")
}

/// Where raw block volumes live (Go's `GetVolumeDevicePluginDir`):
/// `<root>/plugins/kubernetes.io/csi/volumeDevices`.
pub fn block_dir(root_dir: &Path) -> PathBuf {
    root_dir.join("plugins/kubernetes.io/csi/volumeDevices")
}

/// Where a block volume is staged (Go's `GetStagingPath`): `volumeDevices/staging/<name>`.
pub fn block_staging_path(root_dir: &Path, spec_name: &str) -> PathBuf {
    block_dir(root_dir).join("staging").join(spec_name)
}

/// Where a block volume is published for pod `uid` (Go's `getPublishPath`):
/// `volumeDevices/publish/<name>/<uid>`, a file the driver makes.
pub fn block_publish_path(root_dir: &Path, spec_name: &str, uid: &str) -> PathBuf {
    block_dir(root_dir)
        .join("publish")
        .join(spec_name)
        .join(uid)
}

/// A block volume's own directory (Go's `getVolumePluginDir`): `volumeDevices/<name>`, with
/// `data/vol_data.json` and the global map `dev/<uid>` links.
pub fn block_volume_dir(root_dir: &Path, spec_name: &str) -> PathBuf {
    block_dir(root_dir).join(spec_name)
}

/// The link a pod's container device is made from (Go's `GetPodDeviceMapPath`):
/// `pods/<uid>/volumeDevices/kubernetes.io~csi/<name>`.
pub fn pod_device_path(root_dir: &Path, uid: &str, spec_name: &str) -> PathBuf {
    crate::volume::pod_dir(root_dir, uid)
        .join("volumeDevices")
        .join(POD_PLUGIN_DIR)
        .join(spec_name)
}

/// Where a pod's volume is published.
pub fn pod_mount_path(root_dir: &Path, uid: &str, spec_name: &str) -> PathBuf {
    crate::volume::pod_dir(root_dir, uid)
        .join("volumes")
        .join(POD_PLUGIN_DIR)
        .join(spec_name)
        .join("mount")
}

/// The VolumeAttachment the attach/detach controller makes for a volume on a node (Go's
/// `getAttachmentName`).
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{handle}{driver}{node}")))
}

/// `vol_data.json`, with Go's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeData {
    /// The volume's name in paths (published volumes only).
    #[serde(
        rename = "specVolID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub spec_name: String,
    /// The driver's volume id.
    #[serde(rename = "volumeHandle")]
    pub handle: String,
    /// The driver.
    #[serde(rename = "driverName")]
    pub driver: String,
    /// The node (published volumes only).
    #[serde(rename = "nodeName", default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// The VolumeAttachment's name (published volumes only).
    #[serde(
        rename = "attachmentID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub attachment_id: String,
    /// `Persistent` or `Ephemeral` (published volumes only).
    #[serde(
        rename = "volumeLifecycleMode",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub lifecycle: String,
}

/// Writes `vol_data.json` into `dir` (made if missing).
pub fn save_volume_data(dir: &Path, data: &VolumeData) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)?;
    let text = serde_json::to_vec(data).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(VOL_DATA_FILE), text)
}

/// Reads `vol_data.json` from `dir`; `None` when there is none.
pub fn load_volume_data(dir: &Path) -> std::io::Result<Option<VolumeData>> {
    match std::fs::read(dir.join(VOL_DATA_FILE)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Go's `removeMountDir`: when `path` is not a mount point, removes it (only if empty),
/// the `vol_data.json` beside it and their parent (only if empty). A path still mounted is
/// left, and said so.
pub fn remove_mount_dir(path: &Path) -> std::io::Result<()> {
    if crate::volume::persistent::is_mount_point(path)? {
        return Err(std::io::Error::other(format!(
            "{} is still mounted",
            path.display()
        )));
    }
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        other => other,
    };
    gone(std::fs::remove_dir(path))?;
    if let Some(parent) = path.parent() {
        gone(std::fs::remove_file(parent.join(VOL_DATA_FILE)))?;
        gone(std::fs::remove_dir(parent))?;
    }
    Ok(())
}

/// A CSIDriver's `fsGroupPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FsGroupPolicy {
    /// Only for a volume with an fsType, mounted read-write once (the default).
    #[default]
    ReadWriteOnceWithFsType,
    /// Always.
    File,
    /// Never.
    None,
}

/// What the CSIDriver object says of its driver (Go's defaults when there is none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverPolicy {
    /// Volumes wait for a VolumeAttachment marked attached.
    pub attach_required: bool,
    /// The pod's name, namespace, UID and service account go into the volume context.
    pub pod_info_on_mount: bool,
    /// Whether the kubelet applies the fsGroup.
    pub fs_group_policy: FsGroupPolicy,
    /// `Persistent` and/or `Ephemeral`.
    pub lifecycle_modes: Vec<String>,
    /// Volumes are published again periodically.
    pub requires_republish: bool,
    /// Audiences (and lifetimes) of tokens the driver gets.
    pub token_requests: Vec<(String, Option<i64>)>,
}

impl DriverPolicy {
    /// From the CSIDriver object, if any.
    pub fn from_object(object: Option<&CSIDriver>) -> Self {
        let spec = object.map(|o| &o.spec);
        Self {
            attach_required: spec.and_then(|s| s.attach_required).unwrap_or(true),
            pod_info_on_mount: spec.and_then(|s| s.pod_info_on_mount).unwrap_or(false),
            fs_group_policy: match spec.and_then(|s| s.fs_group_policy.as_deref()) {
                Some("File") => FsGroupPolicy::File,
                Some("None") => FsGroupPolicy::None,
                _ => FsGroupPolicy::ReadWriteOnceWithFsType,
            },
            lifecycle_modes: spec
                .and_then(|s| s.volume_lifecycle_modes.clone())
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| vec!["Persistent".into()]),
            requires_republish: spec.and_then(|s| s.requires_republish).unwrap_or(false),
            token_requests: spec
                .and_then(|s| s.token_requests.as_ref())
                .map(|t| {
                    t.iter()
                        .map(|r| (r.audience.clone(), r.expiration_seconds))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Go's `supportsVolumeLifecycleMode`, with its message.
    pub fn check_lifecycle(&self, driver: &str, mode: Lifecycle) -> Result<(), String> {
        if self.lifecycle_modes.iter().any(|m| m == mode.as_str()) {
            return Ok(());
        }
        let quoted: Vec<String> = self
            .lifecycle_modes
            .iter()
            .map(|m| format!("{m:?}"))
            .collect();
        Err(format!(
            "volume mode {:?} not supported by driver {driver} (only supports [{}])",
            mode.as_str(),
            quoted.join(" ")
        ))
    }

    /// Go's `supportsFSGroup`: whether the kubelet gives the published volume to the fsGroup.
    pub fn applies_fs_group(&self, volume: &CsiVolume, fs_group: Option<u32>) -> bool {
        if fs_group.is_none() || volume.read_only {
            return false;
        }
        match self.fs_group_policy {
            FsGroupPolicy::None => false,
            FsGroupPolicy::File => true,
            FsGroupPolicy::ReadWriteOnceWithFsType => {
                !volume.fs_type.is_empty()
                    && (volume.lifecycle == Lifecycle::Ephemeral
                        || volume.access_mode == "ReadWriteOnce")
            }
        }
    }
}

/// Go's `asCSIAccessModeV1`.
fn access_mode(mode: &str, caps: &Capabilities) -> access_mode::Mode {
    use access_mode::Mode;
    match mode {
        "ReadWriteOnce" if caps.single_node_multi_writer => Mode::SingleNodeMultiWriter,
        "ReadWriteOnce" => Mode::SingleNodeWriter,
        "ReadOnlyMany" => Mode::MultiNodeReaderOnly,
        "ReadWriteMany" => Mode::MultiNodeMultiWriter,
        "ReadWriteOncePod" if caps.single_node_multi_writer => Mode::SingleNodeSingleWriter,
        "ReadWriteOncePod" => Mode::SingleNodeWriter,
        _ => Mode::Unknown,
    }
}

/// The `VolumeCapability` of a stage or publish call.
pub fn capability(
    volume: &CsiVolume,
    caps: &Capabilities,
    mount_group: Option<u32>,
) -> VolumeCapability {
    let access_type = if volume.block {
        AccessType::Block(Default::default())
    } else {
        AccessType::Mount(MountVolume {
            fs_type: volume.fs_type.clone(),
            mount_flags: volume.mount_options.clone(),
            volume_mount_group: mount_group.map(|g| g.to_string()).unwrap_or_default(),
        })
    };
    VolumeCapability {
        access_type: Some(access_type),
        access_mode: Some(AccessMode {
            mode: access_mode(&volume.access_mode, caps) as i32,
        }),
    }
}

/// Go's `getPodInfoAttrs`.
pub fn pod_info(pod: &Pod, lifecycle: Lifecycle) -> BTreeMap<String, String> {
    let m = &pod.metadata;
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_default();
    [
        ("pod.name", m.name.clone().unwrap_or_default()),
        ("pod.namespace", m.namespace.clone().unwrap_or_default()),
        ("pod.uid", m.uid.clone().unwrap_or_default()),
        ("serviceAccount.name", sa),
        ("ephemeral", (lifecycle == Lifecycle::Ephemeral).to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("csi.storage.k8s.io/{k}"), v))
    .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn yaml<T: serde::de::DeserializeOwned>(s: &str) -> T {
        serde_yaml_ng::from_str(s).unwrap()
    }

    #[test]
    fn paths_and_names_follow_go() {
        let root = Path::new("/var/lib/kubelet");
        // sha256("vol-1")
        let sha = hex::encode(Sha256::digest(b"vol-1"));
        assert_eq!(
            device_mount_path(root, "hostpath.csi.k8s.io", "vol-1"),
            PathBuf::from(format!(
                "/var/lib/kubelet/plugins/kubernetes.io/csi/hostpath.csi.k8s.io/{sha}/globalmount"
            ))
        );
        assert_eq!(
            pod_mount_path(root, "u1", "pvc-123"),
            Path::new("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-123/mount")
        );
        assert_eq!(
            attachment_name("vol-1", "d", "n1"),
            format!("csi-{}", hex::encode(Sha256::digest(b"vol-1dn1")))
        );
        assert_eq!(unique_name("d", "h"), "kubernetes.io/csi/d^h");
    }

    #[test]
    fn volume_data_uses_go_keys_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let data = VolumeData {
            spec_name: "pv1".into(),
            handle: "h".into(),
            driver: "d".into(),
            node_name: "n".into(),
            attachment_id: "csi-x".into(),
            lifecycle: "Persistent".into(),
        };
        save_volume_data(&dir.path().join("v"), &data).unwrap();
        let text = std::fs::read_to_string(dir.path().join("v/vol_data.json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"specVolID": "pv1", "volumeHandle": "h", "driverName": "d",
                "nodeName": "n", "attachmentID": "csi-x", "volumeLifecycleMode": "Persistent"})
        );
        assert_eq!(load_volume_data(&dir.path().join("v")).unwrap(), Some(data));
        assert_eq!(load_volume_data(dir.path()).unwrap(), None);
        // A device's: handle and driver only.
        let device = VolumeData {
            handle: "h".into(),
            driver: "d".into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&device).unwrap(),
            serde_json::json!({"volumeHandle": "h", "driverName": "d"})
        );
        // Removal: the mount dir, the file, the parent.
        std::fs::create_dir(dir.path().join("v/mount")).unwrap();
        remove_mount_dir(&dir.path().join("v/mount")).unwrap();
        assert!(!dir.path().join("v").exists());
        remove_mount_dir(&dir.path().join("v/mount")).unwrap();
    }

    #[test]
    fn volumes_from_pvs_and_inline_sources() {
        let pv: PersistentVolume = yaml(
            "metadata: {name: pvc-1}
spec:
  accessModes: [ReadWriteMany]
  mountOptions: [noatime]
  volumeMode: Filesystem
  csi: {driver: d, volumeHandle: h, fsType: ext4, volumeAttributes: {a: b}, nodePublishSecretRef: {name: s, namespace: ns}}",
        );
        let v = CsiVolume::from_pv(&pv, true).unwrap();
        assert_eq!(
            (
                v.spec_name.as_str(),
                v.handle.as_str(),
                v.read_only,
                v.access_mode.as_str()
            ),
            ("pvc-1", "h", true, "ReadWriteMany")
        );
        assert_eq!(v.publish_secret.as_ref().unwrap().name, "s");
        let cap = capability(&v, &Capabilities::default(), None);
        assert_eq!(
            cap.access_mode.unwrap().mode,
            access_mode::Mode::MultiNodeMultiWriter as i32
        );
        assert!(
            matches!(cap.access_type, Some(AccessType::Mount(m)) if m.fs_type == "ext4" && m.mount_flags == ["noatime"])
        );
        let hp: PersistentVolume = yaml("metadata: {name: x}\nspec: {hostPath: {path: /x}}");
        assert!(CsiVolume::from_pv(&hp, false).is_none());

        let pod: Pod = yaml(
            "metadata: {name: p, namespace: ns, uid: u1}
spec:
  serviceAccountName: sa
  containers: [{name: c}]
  volumes: [{name: inline, csi: {driver: d, volumeAttributes: {size: 1Mi}}}]",
        );
        let vol = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0].clone();
        let inline = CsiVolume::inline(&pod, &vol).unwrap();
        assert_eq!(
            inline.handle,
            format!("csi-{}", hex::encode(Sha256::digest(b"u1inline")))
        );
        assert_eq!(inline.lifecycle, Lifecycle::Ephemeral);
        let info = pod_info(&pod, Lifecycle::Ephemeral);
        assert_eq!(info["csi.storage.k8s.io/ephemeral"], "true");
        assert_eq!(info["csi.storage.k8s.io/serviceAccount.name"], "sa");
        assert_eq!(info["csi.storage.k8s.io/pod.uid"], "u1");
    }

    #[test]
    fn driver_policy_defaults_and_checks_follow_go() {
        let none = DriverPolicy::from_object(None);
        assert!(none.attach_required && !none.pod_info_on_mount);
        assert_eq!(
            none.check_lifecycle("d", Lifecycle::Ephemeral).unwrap_err(),
            "volume mode \"Ephemeral\" not supported by driver d (only supports [\"Persistent\"])"
        );
        let obj: CSIDriver = yaml(
            "metadata: {name: d}
spec: {attachRequired: false, podInfoOnMount: true, fsGroupPolicy: File, volumeLifecycleModes: [Persistent, Ephemeral]}",
        );
        let p = DriverPolicy::from_object(Some(&obj));
        assert!(!p.attach_required && p.pod_info_on_mount);
        assert!(p.check_lifecycle("d", Lifecycle::Ephemeral).is_ok());
        let pv: PersistentVolume = yaml(
            "metadata: {name: p}\nspec: {accessModes: [ReadWriteOnce], csi: {driver: d, volumeHandle: h}}",
        );
        let v = CsiVolume::from_pv(&pv, false).unwrap();
        assert!(p.applies_fs_group(&v, Some(1)));
        assert!(!p.applies_fs_group(&v, None));
        // The default policy needs an fsType.
        assert!(!none.applies_fs_group(&v, Some(1)));
        let with_fs = CsiVolume {
            fs_type: "ext4".into(),
            ..v.clone()
        };
        assert!(none.applies_fs_group(&with_fs, Some(1)));
        let ro = CsiVolume {
            read_only: true,
            ..with_fs
        };
        assert!(!none.applies_fs_group(&ro, Some(1)));
    }
}
