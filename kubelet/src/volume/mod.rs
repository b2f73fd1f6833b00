//! Pod volumes on the node, as the Go kubelet's volume manager sets them up for the volume
//! kinds a kubelet without an API server can serve: `emptyDir` (a directory, or a tmpfs for
//! `medium: Memory`) and `hostPath` (with its `type` checks). Also the mounts each container
//! gets ([`mounts`]), and the pod's directories' removal when it goes.
//!
//! Layout under the root dir, as Go's: `pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`,
//! `pods/<uid>/etc-hosts`, `pods/<uid>/containers/<name>/<id>` (termination logs).
//!
//! Everything here touches the filesystem, so it runs in `spawn_blocking`.

pub mod empty_dir;
pub mod host_path;
pub mod mounts;
// Stand-in for the per-volume API of wt-vol; delete this and the `pub use` below at the merge.
mod pending_api;

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Volume;

use crate::types::Pod;

pub use mounts::{MountContext, container_mounts_with};
pub use pending_api::{
    VolumeInputs, VolumeReferences, plugin_dir_name, references, requires_remount, setup_volume,
    teardown_volume, volume_path,
};

/// Why a pod's volumes or mounts could not be made or removed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A volume kind that needs an API server or a plugin we do not have.
    #[error(
        "MountVolume.SetUp failed for volume {volume:?} : {kind} volumes are not supported by ferrolet (it runs without an API server)"
    )]
    Unsupported {
        /// The volume's name.
        volume: String,
        /// Its kind as the API names it (`configMap`, `secret`, ...).
        kind: String,
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
}

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
    let kinds: [(&'static str, bool); 28] = [
        ("awsElasticBlockStore", v.aws_elastic_block_store.is_some()),
        ("azureDisk", v.azure_disk.is_some()),
        ("azureFile", v.azure_file.is_some()),
        ("cephfs", v.cephfs.is_some()),
        ("cinder", v.cinder.is_some()),
        ("configMap", v.config_map.is_some()),
        ("csi", v.csi.is_some()),
        ("downwardAPI", v.downward_api.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("fc", v.fc.is_some()),
        ("flexVolume", v.flex_volume.is_some()),
        ("flocker", v.flocker.is_some()),
        ("gcePersistentDisk", v.gce_persistent_disk.is_some()),
        ("gitRepo", v.git_repo.is_some()),
        ("glusterfs", v.glusterfs.is_some()),
        ("image", v.image.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("nfs", v.nfs.is_some()),
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("photonPersistentDisk", v.photon_persistent_disk.is_some()),
        ("portworxVolume", v.portworx_volume.is_some()),
        ("projected", v.projected.is_some()),
        ("quobyte", v.quobyte.is_some()),
        ("rbd", v.rbd.is_some()),
        ("scaleIO", v.scale_io.is_some()),
        ("secret", v.secret.is_some()),
        ("storageos", v.storageos.is_some()),
        ("vsphereVolume", v.vsphere_volume.is_some()),
    ];
    kinds.into_iter().find(|(_, set)| *set).map(|(k, _)| k)
}

/// Sets up every volume of a pod under `<root_dir>/pods/<uid>/volumes/<plugin>/<name>`:
/// emptyDir (a directory; `medium: Memory` a tmpfs), hostPath with its type check; other
/// kinds are refused. Idempotent: running it again for a pod already set up changes nothing.
// The kubelet sets volumes up one by one through the volume manager; tests use this.
#[cfg_attr(not(test), allow(dead_code))]
pub async fn setup(root_dir: &Path, pod: &Pod) -> Result<PodVolumes, VolumeError> {
    let root_dir = root_dir.to_path_buf();
    let pod = pod.clone();
    blocking(move || setup_blocking(&root_dir, &pod)).await
}

#[cfg_attr(not(test), allow(dead_code))]
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
    let pod_dir = pod_dir(root_dir, &uid);
    mkdir_all("", &pod_dir, 0o750)?;
    let mut out = PodVolumes::default();
    for v in volumes {
        let path = match (&v.host_path, &v.empty_dir) {
            (Some(hp), _) => host_path::setup(&v.name, hp)?,
            // No source at all is an emptyDir, the API's default.
            (None, ed) => {
                let dir = pod_dir.join("volumes").join(EMPTY_DIR_PLUGIN).join(&v.name);
                empty_dir::setup(&v.name, &dir, ed.as_ref(), pod)?;
                dir
            }
        };
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
    blocking(move || teardown_blocking(&dir)).await
}

fn teardown_blocking(dir: &Path) -> Result<(), VolumeError> {
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
    for m in mounted(&dir)? {
        empty_dir::unmount(&m)?;
    }
    if let Some(still) = mounted(&dir)?.into_iter().next() {
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
  - {name: cm, configMap: {name: x}}");
        let err = setup(root.path(), &p).await.unwrap_err();
        assert!(
            matches!(&err, VolumeError::Unsupported { volume, kind } if volume == "cm" && kind == "configMap"),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("configMap volumes are not supported")
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
}
