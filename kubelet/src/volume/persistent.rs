//! The sources of PersistentVolumes a claim binds a pod to, as Go's plugins set them up:
//! `hostPath` (the path itself, after its `type` check; nothing is made under the pod) and
//! `local` (`pkg/volume/local`: the path bind-mounted at
//! `<root>/pods/<uid>/volumes/kubernetes.io~local-volume/<pv>`, read-only when the claim is,
//! then given to the pod's `fsGroup`). The claim's resolution and the local volume's node
//! affinity are checked before (they read the API: `volume_manager::claims`).

use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{LocalVolumeSource, PersistentVolume, PersistentVolumeSpec};
use nix::mount::MsFlags;

use super::ownership::{ChangePolicy, set_volume_ownership};
use super::{VolumeError, check_uid, mkdir_all, pod_dir};

/// Go's plugin directory of local volumes.
pub const LOCAL_PLUGIN: &str = "kubernetes.io~local-volume";

/// A persistent volume as a pod gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistentSetUp {
    /// Where it is on the host.
    pub path: PathBuf,
    /// Its plugin directory under the pod, `None` when nothing was made there (hostPath).
    pub plugin: Option<&'static str>,
    /// Whether containers must mount it read-only (the claim's `readOnly`).
    pub read_only: bool,
}

/// The pod-side facts a persistent volume's set-up needs.
#[derive(Clone, Copy, Debug)]
pub struct PodOwnership {
    /// The pod's `fsGroup`.
    pub fs_group: Option<u32>,
    /// Its `fsGroupChangePolicy`.
    pub policy: ChangePolicy,
}

/// The PV's name (Go names a PV-backed volume by it in paths and messages).
pub fn pv_name(pv: &PersistentVolume) -> &str {
    pv.metadata.name.as_deref().unwrap_or_default()
}

/// The PV's source kind as the API names it (`hostPath`, `local`, `csi`, `nfs`, ...).
pub fn source_kind(spec: &PersistentVolumeSpec) -> &'static str {
    let kinds: [(&'static str, bool); 20] = [
        ("hostPath", spec.host_path.is_some()),
        ("local", spec.local.is_some()),
        ("csi", spec.csi.is_some()),
        ("nfs", spec.nfs.is_some()),
        ("iscsi", spec.iscsi.is_some()),
        ("fc", spec.fc.is_some()),
        ("rbd", spec.rbd.is_some()),
        ("cephfs", spec.cephfs.is_some()),
        ("cinder", spec.cinder.is_some()),
        (
            "awsElasticBlockStore",
            spec.aws_elastic_block_store.is_some(),
        ),
        ("azureDisk", spec.azure_disk.is_some()),
        ("azureFile", spec.azure_file.is_some()),
        ("gcePersistentDisk", spec.gce_persistent_disk.is_some()),
        ("glusterfs", spec.glusterfs.is_some()),
        ("flexVolume", spec.flex_volume.is_some()),
        ("flocker", spec.flocker.is_some()),
        ("portworxVolume", spec.portworx_volume.is_some()),
        ("quobyte", spec.quobyte.is_some()),
        ("scaleIO", spec.scale_io.is_some()),
        ("vsphereVolume", spec.vsphere_volume.is_some()),
    ];
    kinds
        .into_iter()
        .find(|(_, set)| *set)
        .map_or("unknown", |(k, _)| k)
}

/// Sets up `pv` for pod `uid` (blocking; idempotent).
pub fn setup(
    root_dir: &Path,
    uid: &str,
    pv: &PersistentVolume,
    read_only: bool,
    ownership: PodOwnership,
) -> Result<PersistentSetUp, VolumeError> {
    check_uid(uid)?;
    let name = pv_name(pv);
    let spec = pv.spec.as_ref().ok_or_else(|| VolumeError::Invalid {
        volume: name.into(),
        reason: "the PersistentVolume has no spec".into(),
    })?;
    if let Some(hp) = &spec.host_path {
        let src = k8s_openapi::api::core::v1::HostPathVolumeSource {
            path: hp.path.clone(),
            type_: hp.type_.clone(),
        };
        let path = super::host_path::setup(name, &src)?;
        return Ok(PersistentSetUp {
            path,
            plugin: None,
            read_only,
        });
    }
    if let Some(local) = &spec.local {
        let dir = pod_dir(root_dir, uid)
            .join("volumes")
            .join(LOCAL_PLUGIN)
            .join(name);
        setup_local(name, local, &dir, read_only, ownership)?;
        return Ok(PersistentSetUp {
            path: dir,
            plugin: Some(LOCAL_PLUGIN),
            read_only,
        });
    }
    Err(VolumeError::Unsupported {
        volume: name.into(),
        kind: source_kind(spec).into(),
    })
}

/// Go's local `SetUpAt`: nothing to do when `dir` is already a mount point.
fn setup_local(
    name: &str,
    local: &LocalVolumeSource,
    dir: &Path,
    read_only: bool,
    ownership: PodOwnership,
) -> Result<(), VolumeError> {
    let source = Path::new(&local.path);
    let meta = std::fs::metadata(source).map_err(|e| VolumeError::io(name, source, e))?;
    if meta.file_type().is_block_device() {
        return Err(VolumeError::Invalid {
            volume: name.into(),
            reason: format!(
                "local volume path {} is a block device: ferrolet mounts local volumes that are directories",
                source.display()
            ),
        });
    }
    if is_mount_point(dir).map_err(|e| VolumeError::io(name, dir, e))? {
        return Ok(());
    }
    mkdir_all(name, dir, 0o750)?;
    if let Err(e) = bind(source, dir, read_only) {
        // Nothing may stay behind: the next attempt starts from scratch.
        let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir(dir);
        return Err(VolumeError::Mount {
            volume: name.into(),
            op: "bind-mounting the local volume on",
            path: dir.to_path_buf(),
            source: e,
        });
    }
    if !read_only {
        set_volume_ownership(name, dir, ownership.fs_group, ownership.policy, read_only)?;
    }
    Ok(())
}

fn bind(source: &Path, dir: &Path, read_only: bool) -> nix::Result<()> {
    nix::mount::mount(
        Some(source),
        dir,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )?;
    if read_only {
        // A bind takes its flags from a remount only.
        nix::mount::mount(
            None::<&str>,
            dir,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )?;
    }
    Ok(())
}

/// Whether `dir` is the root of a mount (its device differs from its parent's, or the mount
/// table names it: a bind of a directory of the same filesystem keeps the device).
pub(crate) fn is_mount_point(dir: &Path) -> std::io::Result<bool> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if let Some(parent) = dir.parent()
        && std::fs::metadata(parent)?.dev() != meta.dev()
    {
        return Ok(true);
    }
    let dir = std::fs::canonicalize(dir)?;
    Ok(super::empty_dir::mount_table()?
        .iter()
        .any(|m| m.mount_point == dir))
}

/// Tears a persistent volume's directory down (Go's `CleanupMountPoint`): unmounted, then
/// removed only if empty, so a volume's data is never deleted, whatever went wrong before.
/// Idempotent.
pub fn teardown(dir: &Path) -> Result<(), VolumeError> {
    loop {
        match is_mount_point(dir) {
            Ok(true) => super::empty_dir::unmount(dir)?,
            Ok(false) => break,
            Err(e) => return Err(VolumeError::io("", dir, e)),
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(VolumeError::io("", dir, e)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn pv(yaml: &str) -> PersistentVolume {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    const OWN: PodOwnership = PodOwnership {
        fs_group: Some(2345),
        policy: ChangePolicy::Always,
    };

    #[test]
    fn host_path_volumes_are_the_path_itself() {
        let root = tempfile::tempdir().unwrap();
        let host = root.path().join("data");
        let v = pv(&format!(
            "metadata: {{name: pv1}}\nspec: {{hostPath: {{path: {}, type: DirectoryOrCreate}}}}",
            host.display()
        ));
        let got = setup(root.path(), "u1", &v, true, OWN).unwrap();
        assert_eq!(
            got,
            PersistentSetUp {
                path: host.clone(),
                plugin: None,
                read_only: true
            }
        );
        assert!(host.is_dir());
        assert!(!root.path().join("pods").exists());
        let missing =
            pv("metadata: {name: pv2}\nspec: {hostPath: {path: /nonexistent/x, type: Directory}}");
        assert_eq!(
            setup(root.path(), "u1", &missing, false, OWN)
                .unwrap_err()
                .to_string(),
            "MountVolume.SetUp failed for volume \"pv2\" : path /nonexistent/x does not exist"
        );
        let nfs = pv("metadata: {name: pv3}\nspec: {nfs: {server: s, path: /x}}");
        assert_eq!(
            setup(root.path(), "u1", &nfs, false, OWN)
                .unwrap_err()
                .to_string(),
            "MountVolume.SetUp failed for volume \"pv3\" : nfs volumes are not supported by ferrolet"
        );
    }

    #[test]
    fn local_volumes_are_bound_idempotently_and_torn_down_without_their_data() {
        let root = tempfile::tempdir().unwrap();
        let disk = root.path().join("disk");
        std::fs::create_dir(&disk).unwrap();
        std::fs::write(disk.join("keep"), "data").unwrap();
        let v = pv(&format!(
            "metadata: {{name: local-pv}}\nspec: {{local: {{path: {}}}}}",
            disk.display()
        ));
        let got = setup(root.path(), "u1", &v, false, OWN).unwrap();
        let dir = root
            .path()
            .join("pods/u1/volumes/kubernetes.io~local-volume/local-pv");
        let result = std::panic::catch_unwind(|| {
            assert_eq!(got.path, dir);
            assert_eq!(got.plugin, Some(LOCAL_PLUGIN));
            assert!(is_mount_point(&dir).unwrap());
            assert_eq!(std::fs::read_to_string(dir.join("keep")).unwrap(), "data");
            // Given to the fsGroup through the bind.
            assert_eq!(std::fs::metadata(disk.join("keep")).unwrap().gid(), 2345);
            // Again: one mount, not two.
            setup(root.path(), "u1", &v, false, OWN).unwrap();
            let binds = crate::volume::empty_dir::mount_table()
                .unwrap()
                .iter()
                .filter(|m| m.mount_point == dir)
                .count();
            assert_eq!(binds, 1);
        });
        teardown(&dir).unwrap();
        result.unwrap();
        assert!(!dir.exists());
        assert_eq!(std::fs::read_to_string(disk.join("keep")).unwrap(), "data");
        teardown(&dir).unwrap();

        // Read-only: a write through the bind fails.
        let ro = setup(root.path(), "u2", &v, true, OWN).unwrap();
        let write = std::fs::write(ro.path.join("new"), "x");
        teardown(&ro.path).unwrap();
        assert_eq!(
            write.unwrap_err().raw_os_error(),
            Some(nix::Error::EROFS as i32)
        );
        // A missing path: nothing is made.
        let gone = pv("metadata: {name: gone}\nspec: {local: {path: /nonexistent/disk}}");
        let err = setup(root.path(), "u3", &gone, false, OWN)
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/disk"), "{err}");
        assert!(!root.path().join("pods/u3").exists());
    }

    #[test]
    fn teardown_never_removes_a_non_empty_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("v");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("f"), "x").unwrap();
        assert!(teardown(&dir).is_err());
        assert!(dir.join("f").exists());
    }
}
