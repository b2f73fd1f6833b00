//! Pod volumes on the node, as the Go kubelet's volume plugins set them up: `emptyDir` (a
//! directory, or a tmpfs for `medium: Memory`), `hostPath` (with its `type` checks), and the
//! kinds whose content is projected from the API or the pod itself through the
//! [`atomic_writer`]: `secret` and `projected` (on a tmpfs, never on disk), `configMap` and
//! `downwardAPI` (on disk). Also the mounts each container gets ([`mounts`]), and the pod's
//! directories' removal when it goes.
//!
//! The projected kinds read what the volume manager fetched beforehand ([`VolumeInputs`]; the
//! payload builders in [`secret`], [`config_map`], [`downward_api`], [`projected`] are pure),
//! so nothing here waits on the API.
//!
//! Layout under the root dir, as Go's: `pods/<uid>/volumes/<plugin>/<name>` with `<plugin>`
//! `kubernetes.io~empty-dir`, `~secret`, `~configmap`, `~downward-api`, `~projected` or
//! `~local-volume` (named by the PersistentVolume, [`persistent`]),
//! `pods/<uid>/etc-hosts`, `pods/<uid>/containers/<name>/<id>` (termination logs).
//!
//! Everything here touches the filesystem, so it runs in `spawn_blocking`.

pub mod atomic_writer;
pub mod config_map;
pub mod downward_api;
pub mod empty_dir;
pub mod host_path;
pub mod inputs;
pub mod mounts;
mod nested;
pub mod ownership;
#[cfg(test)]
mod payload_tests;
pub mod persistent;
pub mod projected;
pub mod projection;
pub mod secret;

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Volume};

use crate::podspec::NodeContext;
use crate::types::Pod;

pub use atomic_writer::{WriteError, WriteOutcome};
pub use inputs::VolumeInputs;
pub use inputs::{VolumeReferences, pod_references, references};
pub use mounts::{MountContext, container_mounts_with};
pub use projection::ProjectionError;

/// Why a pod's volumes or mounts could not be made or removed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A volume kind ferrolet has no plugin for.
    #[error(
        "MountVolume.SetUp failed for volume {volume:?} : {kind} volumes are not supported by ferrolet"
    )]
    Unsupported {
        /// The volume's name.
        volume: String,
        /// Its kind as the API names it (`configMap`, `secret`, ...).
        kind: String,
    },
    /// A secret, configMap, downwardAPI or projected volume's content could not be made.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {source}")]
    Projection {
        /// The volume's name.
        volume: String,
        /// Why, in Go's words.
        #[source]
        source: ProjectionError,
    },
    /// The atomic writer could not project the content.
    #[error("MountVolume.SetUp failed for volume {volume:?} : {source}")]
    Write {
        /// The volume's name.
        volume: String,
        /// What failed.
        #[source]
        source: WriteError,
    },
    /// A `hostPath` that is not what its `type` demands.
    #[error(
        "MountVolume.SetUp failed for volume {volume:?} : {}",
        host_path::type_message(path, expected, found)
    )]
    HostPathType {
        /// The volume's name.
        volume: String,
        /// The host path.
        path: PathBuf,
        /// What the type demands (`directory`, `file`, `socket file`, ...).
        expected: String,
        /// What is there (`missing`, `directory`, `file`, ...).
        found: String,
    },
    /// A filesystem operation failed.
    #[error("{}{}: {source}", volume_prefix(volume), path.display())]
    Io {
        /// The volume's name ("" for the pod's own files).
        volume: String,
        /// The path operated on.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Mounting or unmounting failed.
    #[error("{}{op} {}: {source}", volume_prefix(volume), path.display())]
    Mount {
        /// The volume's name ("" at teardown).
        volume: String,
        /// `mounting tmpfs on`, `unmounting`, ...
        op: &'static str,
        /// The mount point.
        path: PathBuf,
        /// The error.
        #[source]
        source: nix::Error,
    },
    /// A `subPath` that cannot be used.
    #[error("volume {volume:?} of container {container:?}: {reason}")]
    SubPath {
        /// The volume's name.
        volume: String,
        /// The container's name.
        container: String,
        /// What is wrong (Go's words).
        reason: String,
    },
    /// A volumeMount naming a volume the pod does not have (or that was not set up).
    #[error("cannot find volume {volume:?} to mount into container {container:?}")]
    NotFound {
        /// The volume's name.
        volume: String,
        /// The container's name.
        container: String,
    },
    /// A volume or mount setting we refuse.
    #[error("volume {volume:?}: {reason}")]
    Invalid {
        /// The volume's name.
        volume: String,
        /// What is wrong.
        reason: String,
    },
    /// The pod has no UID (or one unfit for a directory name).
    #[error("pod UID {uid:?} cannot name a pod directory")]
    BadUid {
        /// The UID.
        uid: String,
    },
    /// The blocking task died.
    #[error("volume task failed: {0}")]
    Task(String),
}

/// Go's event prefix for volume errors.
fn volume_prefix(volume: &str) -> String {
    if volume.is_empty() {
        String::new()
    } else {
        format!("MountVolume.SetUp failed for volume {volume:?} : ")
    }
}

impl VolumeError {
    /// An [`VolumeError::Io`].
    pub(crate) fn io(volume: &str, path: &Path, source: std::io::Error) -> Self {
        VolumeError::Io {
            volume: volume.to_string(),
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Where each volume of a pod lives on the host; made before the containers start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodVolumes {
    /// Volume name → host path (an emptyDir's directory, a hostPath's path).
    pub dirs: BTreeMap<String, PathBuf>,
    /// Volumes containers must mount read-only whatever their mounts say (a claim's
    /// `readOnly`; Go's mounter attribute).
    pub read_only: std::collections::BTreeSet<String>,
    /// Raw block volumes: name → the link to the device (`volumeDevices`).
    pub devices: BTreeMap<String, PathBuf>,
}

/// The CRI devices of a container's `volumeDevices` (Go's `makeBlockVolumes`): each block
/// volume's link as the host path (the runtime resolves it), `mrw`, or `r` when the volume
/// is read-only. A volume that is not set up as a device is left out, as Go does.
pub fn container_devices(
    container: &k8s_openapi::api::core::v1::Container,
    volumes: &PodVolumes,
) -> Vec<ferrolet_proto::cri::Device> {
    container
        .volume_devices
        .iter()
        .flatten()
        .filter_map(|d| {
            let link = volumes.devices.get(&d.name)?;
            let permissions = if volumes.read_only.contains(&d.name) {
                "r"
            } else {
                "mrw"
            };
            Some(ferrolet_proto::cri::Device {
                container_path: d.device_path.clone(),
                host_path: link.to_string_lossy().into_owned(),
                permissions: permissions.into(),
            })
        })
        .collect()
}

/// Go's plugin directory name of CSI volumes (published through the driver: `csi`).
pub const CSI_PLUGIN: &str = "kubernetes.io~csi";

/// Go's plugin directory name for emptyDir.
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";

/// `<root_dir>/pods/<uid>`.
pub fn pod_dir(root_dir: &Path, uid: &str) -> PathBuf {
    root_dir.join("pods").join(uid)
}

/// A UID usable as one path component (never `..` or with a slash).
fn check_uid(uid: &str) -> Result<(), VolumeError> {
    if uid.is_empty() || uid == "." || uid == ".." || uid.contains(['/', '\0']) {
        return Err(VolumeError::BadUid { uid: uid.into() });
    }
    Ok(())
}

/// Runs blocking filesystem work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, VolumeError> + Send + 'static,
) -> Result<T, VolumeError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| VolumeError::Task(e.to_string()))?
}

/// Makes a directory and its parents with `mode` (for those it creates).
pub(crate) fn mkdir_all(volume: &str, path: &Path, mode: u32) -> Result<(), VolumeError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(|e| VolumeError::io(volume, path, e))
}

/// The volume kinds we cannot serve, by their API names.
fn unsupported_kind(v: &Volume) -> Option<&'static str> {
    let kinds: [(&'static str, bool); 20] = [
        ("awsElasticBlockStore", v.aws_elastic_block_store.is_some()),
        ("azureDisk", v.azure_disk.is_some()),
        ("azureFile", v.azure_file.is_some()),
        ("cephfs", v.cephfs.is_some()),
        ("cinder", v.cinder.is_some()),
        ("fc", v.fc.is_some()),
        ("flexVolume", v.flex_volume.is_some()),
        ("flocker", v.flocker.is_some()),
        ("gcePersistentDisk", v.gce_persistent_disk.is_some()),
        ("gitRepo", v.git_repo.is_some()),
        ("glusterfs", v.glusterfs.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("nfs", v.nfs.is_some()),
        ("photonPersistentDisk", v.photon_persistent_disk.is_some()),
        ("portworxVolume", v.portworx_volume.is_some()),
        ("quobyte", v.quobyte.is_some()),
        ("rbd", v.rbd.is_some()),
        ("scaleIO", v.scale_io.is_some()),
        ("storageos", v.storageos.is_some()),
        ("vsphereVolume", v.vsphere_volume.is_some()),
    ];
    kinds.into_iter().find(|(_, set)| *set).map(|(k, _)| k)
}

/// Whether the volume is a claim's (`persistentVolumeClaim`, or `ephemeral`, whose claim the
/// ephemeral controller makes): it is set up from the bound PersistentVolume
/// ([`persistent::setup`]), never through [`setup_volume`].
pub fn is_claim(v: &Volume) -> bool {
    v.persistent_volume_claim.is_some() || v.ephemeral.is_some()
}

/// Whether the volume is an image volume (`image`): the runtime mounts the image itself
/// (CRI `Mount.image`), so nothing of it is made on the node, as Go's stub `kubernetes.io/image`
/// plugin makes nothing.
pub fn is_image(v: &Volume) -> bool {
    v.image.is_some()
}

/// Go's plugin dir name for a volume's kind (`kubernetes.io~empty-dir`, `kubernetes.io~secret`,
/// `kubernetes.io~configmap`, `kubernetes.io~downward-api`, `kubernetes.io~projected`); None
/// for hostPath (not under the pod dir), claims (their PersistentVolume's plugin decides),
/// image volumes (the runtime's) and the kinds ferrolet cannot serve.
pub fn plugin_dir_name(volume: &Volume) -> Option<&'static str> {
    if volume.host_path.is_some()
        || is_claim(volume)
        || is_image(volume)
        || unsupported_kind(volume).is_some()
    {
        None
    } else if volume.secret.is_some() {
        Some(secret::PLUGIN)
    } else if volume.config_map.is_some() {
        Some(config_map::PLUGIN)
    } else if volume.downward_api.is_some() {
        Some(downward_api::PLUGIN)
    } else if volume.projected.is_some() {
        Some(projected::PLUGIN)
    } else if volume.csi.is_some() {
        Some(CSI_PLUGIN)
    } else {
        // No source at all is an emptyDir, the API's default.
        Some(EMPTY_DIR_PLUGIN)
    }
}

/// Where the volume lives on the host: `<root>/pods/<uid>/volumes/<plugin>/<name>`, or the
/// hostPath's path. (A kind ferrolet cannot serve gets `<root>/pods/<uid>/volumes/<name>`,
/// where nothing is ever made.)
pub fn volume_path(root_dir: &Path, uid: &str, volume: &Volume) -> PathBuf {
    if let Some(hp) = &volume.host_path {
        return PathBuf::from(&hp.path);
    }
    let volumes = pod_dir(root_dir, uid).join("volumes");
    if volume.csi.is_some() {
        // Published by the driver at `mount`, beside Go's `vol_data.json`.
        return volumes.join(CSI_PLUGIN).join(&volume.name).join("mount");
    }
    match plugin_dir_name(volume) {
        Some(plugin) => volumes.join(plugin).join(&volume.name),
        None => volumes.join(&volume.name),
    }
}

/// Whether the volume's content follows API objects/pod metadata and must be re-set-up
/// periodically (secret, configMap, downwardAPI, projected).
pub fn requires_remount(volume: &Volume) -> bool {
    is_projected_kind(volume)
}

/// The kinds written by the atomic writer (secret, configMap, downwardAPI, projected): their
/// content is refreshed, and containers always mount them read-only (Go's `ReadOnly`
/// attribute).
pub(crate) fn is_projected_kind(volume: &Volume) -> bool {
    volume.secret.is_some()
        || volume.config_map.is_some()
        || volume.downward_api.is_some()
        || volume.projected.is_some()
}

/// The pod's `fsGroup` as a gid.
pub(crate) fn fs_group(volume: &str, pod: &Pod) -> Result<Option<u32>, VolumeError> {
    let gid = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group);
    gid.map(|g| {
        u32::try_from(g).map_err(|_| VolumeError::Invalid {
            volume: volume.into(),
            reason: format!("fsGroup {g} is out of range"),
        })
    })
    .transpose()
}

/// Sets up one volume (blocking; idempotent; for the projected kinds writes the payload through
/// the atomic writer — a no-op when unchanged). Returns the host path. Unsupported kinds →
/// [`VolumeError::Unsupported`]. A projected kind's content is built before anything is made,
/// so a missing secret leaves nothing behind; a failed update leaves the previous content.
pub fn setup_volume(
    root_dir: &Path,
    pod: &Pod,
    volume: &Volume,
    inputs: &VolumeInputs,
    node: &NodeContext,
) -> Result<PathBuf, VolumeError> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    check_uid(uid)?;
    let name = volume.name.as_str();
    if let Some(kind) = unsupported_kind(volume) {
        return Err(VolumeError::Unsupported {
            volume: name.into(),
            kind: kind.into(),
        });
    }
    if let Some(hp) = &volume.host_path {
        return host_path::setup(name, hp);
    }
    if is_claim(volume) || volume.csi.is_some() || is_image(volume) {
        return Err(VolumeError::Invalid {
            volume: name.into(),
            reason: "claims, CSI and image volumes are set up through their driver, bound \
                     PersistentVolume or the runtime"
                .into(),
        });
    }
    let dir = volume_path(root_dir, uid, volume);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    // Secrets and tokens go on a tmpfs (Go wraps an emptyDir of medium Memory).
    let (payload, in_memory) = if let Some(s) = &volume.secret {
        (secret::payload(namespace, s, inputs), true)
    } else if let Some(c) = &volume.config_map {
        (config_map::payload(namespace, c, inputs), false)
    } else if let Some(d) = &volume.downward_api {
        (downward_api::payload(pod, d, node), false)
    } else if let Some(p) = &volume.projected {
        (projected::payload(pod, name, p, inputs, node), true)
    } else {
        mkdir_all("", &pod_dir(root_dir, uid), 0o750)?;
        empty_dir::setup(name, &dir, volume.empty_dir.as_ref(), pod)?;
        return Ok(dir);
    };
    let payload = payload.map_err(|source| VolumeError::Projection {
        volume: name.into(),
        source,
    })?;
    let fs_group = fs_group(name, pod)?;
    mkdir_all("", &pod_dir(root_dir, uid), 0o750)?;
    let wrapper = EmptyDirVolumeSource {
        medium: in_memory.then(|| "Memory".to_string()),
        ..Default::default()
    };
    empty_dir::setup(name, &dir, Some(&wrapper), pod)?;
    nested::make_nested_mount_points(name, &dir, pod)?;
    let outcome =
        atomic_writer::write(&dir, &payload, fs_group).map_err(|source| VolumeError::Write {
            volume: name.into(),
            source,
        })?;
    if outcome == WriteOutcome::Written {
        // Paths and sizes only: the content may be a secret.
        tracing::debug!(
            volume = name,
            pod = uid,
            files = payload.len(),
            "volume content written"
        );
    }
    Ok(dir)
}

/// Tears down one volume dir under the pod dir: unmount if a mount point (tmpfs), remove
/// (never following symlinks). Idempotent. Not for hostPath: a path that is not
/// `.../volumes/<plugin>/<name>` is refused.
pub fn teardown_volume(path: &Path) -> Result<(), VolumeError> {
    let plugin = path.parent();
    let under_volumes = plugin
        .and_then(Path::file_name)
        .is_some_and(|p| p.to_string_lossy().starts_with("kubernetes.io~"))
        && plugin
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .is_some_and(|v| v == "volumes");
    if !under_volumes {
        return Err(VolumeError::Invalid {
            volume: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            reason: format!(
                "{} is not a volume directory under a pod directory",
                path.display()
            ),
        });
    }
    unmount_and_remove(path)
}

/// Sets up every volume of a pod under `<root_dir>/pods/<uid>/volumes/<plugin>/<name>` (see
/// [`setup_volume`]) with no API server to read from: secret, configMap and token sources fail
/// as in a standalone Go kubelet; downwardAPI works. Kinds we cannot serve are refused before
/// anything is made. Idempotent. (The kubelet sets volumes up one by one through the volume
/// manager; the tests here use this.)
#[cfg(test)]
pub async fn setup(root_dir: &Path, pod: &Pod) -> Result<PodVolumes, VolumeError> {
    let root_dir = root_dir.to_path_buf();
    let pod = pod.clone();
    blocking(move || setup_blocking(&root_dir, &pod)).await
}

#[cfg(test)]
fn setup_blocking(root_dir: &Path, pod: &Pod) -> Result<PodVolumes, VolumeError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    check_uid(&uid)?;
    let volumes: &[Volume] = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    // Refuse what we cannot serve before making anything.
    for v in volumes {
        if let Some(kind) = unsupported_kind(v) {
            return Err(VolumeError::Unsupported {
                volume: v.name.clone(),
                kind: kind.into(),
            });
        }
    }
    mkdir_all("", &pod_dir(root_dir, &uid), 0o750)?;
    let inputs = VolumeInputs::standalone(pod);
    // Only the downward API's resource defaults read the node context.
    let node = NodeContext {
        node_name: String::new(),
        host_ip: String::new(),
        cluster_dns: Vec::new(),
        cluster_domain: String::new(),
        resolv_conf: PathBuf::new(),
        pod_logs_dir: PathBuf::new(),
        cgroup_root: String::new(),
        cgroups_per_qos: true,
        systemd_cgroups: false,
        memory_capacity: crate::node::memory_capacity(),
        memory_qos: None,
        seccomp_profile_root: PathBuf::new(),
    };
    let mut out = PodVolumes::default();
    for v in volumes {
        let path = setup_volume(root_dir, pod, v, &inputs, &node)?;
        out.dirs.insert(v.name.clone(), path);
    }
    Ok(out)
}

/// Unmounts whatever is mounted under `<root_dir>/pods/<uid>` (tmpfs volumes) and removes
/// the directory; idempotent. Never follows symlinks nor crosses into a mount, so a hostPath
/// (never under the pod dir) or anything a container linked to is left alone.
pub async fn teardown(root_dir: &Path, uid: &str) -> Result<(), VolumeError> {
    check_uid(uid)?;
    let dir = pod_dir(root_dir, uid);
    blocking(move || unmount_and_remove(&dir)).await
}

/// Unmounts everything mounted at or below `dir` (deepest first), then removes it without
/// following symlinks; a missing `dir` is fine.
fn unmount_and_remove(dir: &Path) -> Result<(), VolumeError> {
    let dir = match std::fs::canonicalize(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(VolumeError::io("", dir, e)),
    };
    let mounted = |dir: &Path| -> Result<Vec<PathBuf>, VolumeError> {
        let all = empty_dir::mount_table().map_err(|e| VolumeError::io("", dir, e))?;
        let mut under: Vec<PathBuf> = all
            .into_iter()
            .map(|m| m.mount_point)
            .filter(|p| p.starts_with(dir))
            .collect();
        // Deepest first, so nested mounts go before their parents.
        under.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        under.dedup();
        Ok(under)
    };
    let found = mounted(&dir)?;
    for m in &found {
        empty_dir::unmount(m)?;
    }
    // Read again only when something was unmounted: reading the node's mount table is the
    // costly part of tearing a pod down (every container's rootfs is in it).
    let still = if found.is_empty() {
        None
    } else {
        mounted(&dir)?.into_iter().next()
    };
    if let Some(still) = still {
        return Err(VolumeError::Mount {
            volume: String::new(),
            op: "still mounted after unmounting",
            path: still,
            source: nix::Error::EBUSY,
        });
    }
    // std's remove_dir_all does not follow symlinks (it works with openat/unlinkat).
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(VolumeError::io("", &dir, e)),
    }
}

/// UIDs with a pod directory on disk (housekeeping tears down those of no desired pod).
pub async fn pod_dirs(root_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(mut entries) = tokio::fs::read_dir(root_dir.join("pods")).await else {
        return out;
    };
    while let Ok(Some(e)) = entries.next_entry().await {
        let is_dir = e.file_type().await.is_ok_and(|t| t.is_dir());
        if let (true, Ok(name)) = (is_dir, e.file_name().into_string()) {
            out.push(name);
        }
    }
    out.sort();
    out
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A pod from YAML.
    pub fn pod(yaml: &str) -> Pod {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[tokio::test]
    async fn unsupported_kinds_are_refused_before_anything_is_made() {
        let root = tempfile::tempdir().unwrap();
        let p = pod("metadata: {name: p, uid: u1}
spec:
  containers: [{name: c}]
  volumes:
  - {name: a, emptyDir: {}}
  - {name: share, nfs: {server: s, path: /x}}");
        let err = setup(root.path(), &p).await.unwrap_err();
        assert!(
            matches!(&err, VolumeError::Unsupported { volume, kind } if volume == "share" && kind == "nfs"),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "MountVolume.SetUp failed for volume \"share\" : nfs volumes are not supported by ferrolet"
        );
        assert!(!root.path().join("pods/u1").exists());
    }

    #[tokio::test]
    async fn setup_is_idempotent_and_teardown_removes_everything() {
        let root = tempfile::tempdir().unwrap();
        let host = root.path().join("host");
        let p = pod(&format!(
            "metadata: {{name: p, uid: u2}}
spec:
  containers: [{{name: c}}]
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  - {{name: nosource}}
  - {{name: data, hostPath: {{path: {}, type: DirectoryOrCreate}}}}",
            host.display()
        ));
        let v = setup(root.path(), &p).await.unwrap();
        let scratch = root
            .path()
            .join("pods/u2/volumes/kubernetes.io~empty-dir/scratch");
        assert_eq!(v.dirs["scratch"], scratch);
        assert!(v.dirs["nosource"].ends_with("kubernetes.io~empty-dir/nosource"));
        assert_eq!(v.dirs["data"], host);
        std::fs::write(scratch.join("keep"), "x").unwrap();
        std::fs::write(host.join("hostfile"), "x").unwrap();
        // Again: same answer, content kept.
        assert_eq!(setup(root.path(), &p).await.unwrap(), v);
        assert!(scratch.join("keep").exists());
        assert_eq!(pod_dirs(root.path()).await, ["u2"]);

        // A symlink to the host path inside the emptyDir is removed, not followed.
        std::os::unix::fs::symlink(&host, scratch.join("link")).unwrap();
        teardown(root.path(), "u2").await.unwrap();
        assert!(!root.path().join("pods/u2").exists());
        assert!(host.join("hostfile").exists());
        assert!(pod_dirs(root.path()).await.is_empty());
        // Idempotent.
        teardown(root.path(), "u2").await.unwrap();
    }

    #[tokio::test]
    async fn bad_uids_are_refused() {
        let root = tempfile::tempdir().unwrap();
        for uid in ["", "..", "a/b"] {
            assert!(matches!(
                teardown(root.path(), uid).await,
                Err(VolumeError::BadUid { .. })
            ));
        }
        let p = pod("metadata: {name: p}\nspec: {containers: [{name: c}]}");
        assert!(matches!(
            setup(root.path(), &p).await,
            Err(VolumeError::BadUid { .. })
        ));
    }

    fn is_mount_point(dir: &Path) -> bool {
        let dir = std::fs::canonicalize(dir).unwrap();
        empty_dir::mount_table()
            .unwrap()
            .iter()
            .any(|m| m.mount_point == dir)
    }

    fn tmpfs_count(dir: &Path) -> usize {
        let dir = std::fs::canonicalize(dir).unwrap();
        empty_dir::mount_table()
            .unwrap()
            .iter()
            .filter(|m| m.mount_point == dir && m.fs_type == "tmpfs")
            .count()
    }

    fn node() -> NodeContext {
        crate::podspec::testutil::node()
    }

    const PROJECTED_POD: &str = r#"
metadata: {name: p, namespace: ns, uid: pv1}
spec:
  securityContext: {fsGroup: 2000}
  containers:
  - name: c
    volumeMounts: [{name: conf, mountPath: /etc/app}, {name: down, mountPath: /etc/app/meta}, {name: sec, mountPath: /s, readOnly: false}]
  volumes:
  - {name: sec, secret: {secretName: s, defaultMode: 256}}
  - {name: conf, configMap: {name: cm}}
  - {name: down, downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}}
  - {name: host, hostPath: {path: /tmp}}
"#;

    fn projected_inputs(value: &str) -> VolumeInputs {
        use k8s_openapi::ByteString;
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        let mut i = VolumeInputs::default();
        i.set_secret(
            "s",
            Ok(Some(std::sync::Arc::new(Secret {
                data: Some([("key".to_string(), ByteString(value.as_bytes().to_vec()))].into()),
                ..Default::default()
            }))),
        );
        i.set_config_map(
            "cm",
            Ok(Some(std::sync::Arc::new(ConfigMap {
                data: Some([("key".to_string(), value.to_string())].into()),
                ..Default::default()
            }))),
        );
        i
    }

    #[test]
    fn plugin_dirs_and_paths_follow_go() {
        let p = pod(PROJECTED_POD);
        let vols = p.spec.as_ref().unwrap().volumes.clone().unwrap();
        let root = Path::new("/var/lib/kubelet");
        let names: Vec<Option<&str>> = vols.iter().map(plugin_dir_name).collect();
        assert_eq!(
            names,
            [
                Some("kubernetes.io~secret"),
                Some("kubernetes.io~configmap"),
                Some("kubernetes.io~downward-api"),
                None
            ]
        );
        assert_eq!(
            volume_path(root, "pv1", &vols[0]),
            Path::new("/var/lib/kubelet/pods/pv1/volumes/kubernetes.io~secret/sec")
        );
        assert_eq!(volume_path(root, "pv1", &vols[3]), Path::new("/tmp"));
        let requires: Vec<bool> = vols.iter().map(requires_remount).collect();
        assert_eq!(requires, [true, true, true, false]);
        let ed: Volume = serde_yaml_ng::from_str("{name: e}").unwrap();
        assert_eq!(plugin_dir_name(&ed), Some(EMPTY_DIR_PLUGIN));
        assert!(!requires_remount(&ed));
        let pj: Volume = serde_yaml_ng::from_str("{name: e, projected: {}}").unwrap();
        assert_eq!(plugin_dir_name(&pj), Some("kubernetes.io~projected"));
    }

    #[test]
    fn projected_kinds_set_up_idempotently_and_tear_down() {
        let root = tempfile::tempdir().unwrap();
        let p = pod(PROJECTED_POD);
        let vols = p.spec.as_ref().unwrap().volumes.clone().unwrap();
        let (sec, conf, down) = (&vols[0], &vols[1], &vols[2]);

        // A missing secret: nothing is made.
        let err = setup_volume(root.path(), &p, sec, &VolumeInputs::default(), &node())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "MountVolume.SetUp failed for volume \"sec\" : secret ns/s was not read"
            ),
            "{err}"
        );
        assert!(!root.path().join("pods/pv1").exists());

        let inputs = projected_inputs("v1");
        let sec_dir = setup_volume(root.path(), &p, sec, &inputs, &node()).unwrap();
        let conf_dir = setup_volume(root.path(), &p, conf, &inputs, &node()).unwrap();
        let down_dir = setup_volume(root.path(), &p, down, &inputs, &node()).unwrap();
        let result = std::panic::catch_unwind(|| {
            assert_eq!(sec_dir, volume_path(root.path(), "pv1", sec));
            // The secret on a tmpfs, the configMap and downward API on disk.
            assert_eq!(tmpfs_count(&sec_dir), 1);
            assert!(!is_mount_point(&conf_dir));
            assert!(!is_mount_point(&down_dir));
            assert_eq!(std::fs::read_to_string(sec_dir.join("key")).unwrap(), "v1");
            assert_eq!(std::fs::read_to_string(conf_dir.join("key")).unwrap(), "v1");
            assert_eq!(std::fs::read_to_string(down_dir.join("name")).unwrap(), "p");
            // The downward API volume's mount point inside the configMap's.
            assert!(conf_dir.join("meta").is_dir());
            // fsGroup: group-owned, group-readable.
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(sec_dir.join("key")).unwrap();
            assert_eq!((m.gid(), m.mode() & 0o7777), (2000, 0o440));

            // Again: no remount, no rewrite.
            let before = std::fs::read_link(sec_dir.join("..data")).unwrap();
            let ino = std::fs::metadata(conf_dir.join("key")).unwrap().ino();
            setup_volume(root.path(), &p, sec, &inputs, &node()).unwrap();
            setup_volume(root.path(), &p, conf, &inputs, &node()).unwrap();
            assert_eq!(tmpfs_count(&sec_dir), 1);
            assert_eq!(std::fs::read_link(sec_dir.join("..data")).unwrap(), before);
            assert_eq!(std::fs::metadata(conf_dir.join("key")).unwrap().ino(), ino);

            // An update is written, still on the same tmpfs.
            let v2 = projected_inputs("v2");
            setup_volume(root.path(), &p, sec, &v2, &node()).unwrap();
            assert_eq!(std::fs::read_to_string(sec_dir.join("key")).unwrap(), "v2");
            assert_ne!(std::fs::read_link(sec_dir.join("..data")).unwrap(), before);
            assert_eq!(tmpfs_count(&sec_dir), 1);

            // A failed update leaves the content in place.
            let gone = VolumeInputs {
                secrets: [("s".to_string(), None)].into(),
                ..Default::default()
            };
            assert!(setup_volume(root.path(), &p, sec, &gone, &node()).is_err());
            assert_eq!(std::fs::read_to_string(sec_dir.join("key")).unwrap(), "v2");
        });
        let torn = [&sec_dir, &conf_dir, &down_dir].map(|d| teardown_volume(d));
        result.unwrap();
        for t in torn {
            t.unwrap();
        }
        assert_eq!(tmpfs_count(&root.path().join("pods")), 0);
        assert!(!sec_dir.exists() && !conf_dir.exists() && !down_dir.exists());
        // Idempotent; hostPaths and other paths are refused.
        teardown_volume(&sec_dir).unwrap();
        assert!(matches!(
            teardown_volume(Path::new("/tmp")),
            Err(VolumeError::Invalid { .. })
        ));
        unmount_and_remove(&pod_dir(root.path(), "pv1")).unwrap();
    }

    #[tokio::test]
    async fn pod_setup_serves_downward_api_standalone_and_refuses_secrets_as_go() {
        let root = tempfile::tempdir().unwrap();
        let p = pod("metadata: {name: p, namespace: ns, uid: sa1}
spec:
  containers: [{name: c}]
  volumes:
  - {name: d, downwardAPI: {items: [{path: ns, fieldRef: {fieldPath: metadata.namespace}}]}}
  - {name: kube-api-access, projected: {sources: [{downwardAPI: {items: [{path: namespace, fieldRef: {fieldPath: metadata.namespace}}]}}]}}");
        let v = setup(root.path(), &p).await.unwrap();
        let result = std::panic::catch_unwind(|| {
            assert_eq!(
                std::fs::read_to_string(v.dirs["d"].join("ns")).unwrap(),
                "ns"
            );
            let pj = &v.dirs["kube-api-access"];
            assert_eq!(std::fs::read_to_string(pj.join("namespace")).unwrap(), "ns");
            assert_eq!(tmpfs_count(pj), 1);
        });
        teardown(root.path(), "sa1").await.unwrap();
        result.unwrap();
        assert!(!root.path().join("pods/sa1").exists());

        let s = pod("metadata: {name: p, namespace: ns, uid: sa2}
spec:
  containers: [{name: c}]
  volumes: [{name: sec, secret: {secretName: s}}]");
        let err = setup(root.path(), &s).await.unwrap_err().to_string();
        assert_eq!(
            err,
            "MountVolume.SetUp failed for volume \"sec\" : not supported due to running kubelet in standalone mode"
        );
        teardown(root.path(), "sa2").await.unwrap();
    }

    #[test]
    fn block_volumes_become_devices_read_only_where_the_claim_is() {
        let p = pod("metadata: {name: p, uid: u1}
spec:
  containers:
  - name: c
    volumeDevices: [{name: raw, devicePath: /dev/xvda}, {name: ro, devicePath: /dev/xvdb}, {name: missing, devicePath: /dev/xvdc}]");
        let volumes = PodVolumes {
            devices: [("raw", "/l/raw"), ("ro", "/l/ro")]
                .map(|(n, l)| (n.to_string(), PathBuf::from(l)))
                .into(),
            read_only: ["ro".to_string()].into(),
            ..Default::default()
        };
        let c = &p.spec.as_ref().unwrap().containers[0];
        let got: Vec<(String, String, String)> = container_devices(c, &volumes)
            .into_iter()
            .map(|d| (d.container_path, d.host_path, d.permissions))
            .collect();
        assert_eq!(
            got,
            [
                ("/dev/xvda".into(), "/l/raw".into(), "mrw".into()),
                ("/dev/xvdb".into(), "/l/ro".into(), "r".into())
            ]
        );
    }

    #[tokio::test]
    async fn projected_kinds_are_mounted_read_only() {
        let root = tempfile::tempdir().unwrap();
        let p = pod(PROJECTED_POD);
        let volumes = PodVolumes {
            dirs: ["sec", "conf", "down"]
                .map(|n| (n.to_string(), root.path().join(n)))
                .into(),
            ..Default::default()
        };
        let c = &p.spec.as_ref().unwrap().containers[0];
        let mounts = mounts::container_mounts(root.path(), &p, c, &volumes, "")
            .await
            .unwrap();
        let ro: Vec<(&str, bool)> = mounts
            .iter()
            .filter(|m| m.container_path != "/dev/termination-log")
            .map(|m| (m.container_path.as_str(), m.readonly))
            .collect();
        assert_eq!(
            ro,
            [("/etc/app", true), ("/etc/app/meta", true), ("/s", true)]
        );
    }
}
