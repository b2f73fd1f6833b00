//! `emptyDir` volumes, as Go's `pkg/volume/emptydir`: a world-writable directory under the pod
//! dir, or for `medium: Memory` a tmpfs mounted there, sized to the smallest of the node's
//! allocatable memory, the pod's memory limit and the volume's `sizeLimit`. Also the mount
//! table reading and unmounting teardown uses.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::EmptyDirVolumeSource;
use nix::mount::{MntFlags, MsFlags};

use super::{VolumeError, mkdir_all};
use crate::manifest::quantity::parse_quantity;
use crate::podspec::pod_resources::pod_memory_limit;
use crate::podspec::resources::allocatable_memory;
use crate::types::Pod;

/// An emptyDir's mode: anyone in the pod may write it, whatever user its containers run as.
const EMPTY_DIR_MODE: u32 = 0o777;

/// One line of the mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Its filesystem type (`tmpfs`, `ext4`, ...).
    pub fs_type: String,
}

/// This process's mount table (`/proc/self/mountinfo`).
pub fn mount_table() -> std::io::Result<Vec<MountEntry>> {
    Ok(parse_mountinfo(&std::fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

/// Parses mountinfo: the mount point is the fifth field (octal-escaped), the filesystem type
/// the first after the ` - ` separator.
fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split(' ').nth(4)?;
            let fs_type = right.split(' ').next()?;
            Some(MountEntry {
                mount_point: PathBuf::from(unescape_octal(mount_point)),
                fs_type: fs_type.to_string(),
            })
        })
        .collect()
}

/// `\040` → space, as the kernel escapes mount points.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                let v = (d[0] - b'0') as u32 * 64 + (d[1] - b'0') as u32 * 8 + (d[2] - b'0') as u32;
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a tmpfs is mounted exactly at `dir`.
fn is_tmpfs_mount(dir: &Path) -> std::io::Result<bool> {
    let dir = std::fs::canonicalize(dir)?;
    Ok(mount_table()?
        .iter()
        .any(|m| m.mount_point == dir && m.fs_type == "tmpfs"))
}

/// Detaches whatever is mounted at `path`; nothing mounted (or no path) is fine.
pub(crate) fn unmount(path: &Path) -> Result<(), VolumeError> {
    match nix::mount::umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => Ok(()),
        Err(source) => Err(VolumeError::Mount {
            volume: String::new(),
            op: "unmounting",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The tmpfs size in bytes for a memory-backed emptyDir (Go's
/// `calculateEmptyDirMemorySize`): the node's allocatable memory, lowered to the pod's memory
/// limit and then to `sizeLimit` when those are positive and smaller. None: no size option.
pub fn tmpfs_size(pod: &Pod, size_limit: Option<i128>, memory_capacity: u64) -> Option<i128> {
    let mut size = i128::from(allocatable_memory(memory_capacity));
    // A pod with an unreadable limit gets no container either; its size does not matter.
    let pod_limit = pod_memory_limit(pod).ok().flatten().map(i128::from);
    if let Some(limit) = pod_limit.filter(|l| *l > 0 && *l <= size) {
        size = limit;
    }
    if let Some(limit) = size_limit.filter(|l| *l > 0 && *l <= size) {
        size = limit;
    }
    (size > 0).then_some(size)
}

/// Sets up one emptyDir at `dir`.
pub(crate) fn setup(
    volume: &str,
    dir: &Path,
    src: Option<&EmptyDirVolumeSource>,
    pod: &Pod,
) -> Result<(), VolumeError> {
    let medium = src.and_then(|s| s.medium.as_deref()).unwrap_or("");
    let fs_group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group);
    match medium {
        "" => {
            // Set up once (Go keeps a ready marker): what the pod does to its volume's
            // mode afterwards is its business.
            if setup_dir(volume, dir)?
                && let Some(gid) = fs_group
            {
                apply_fs_group(volume, dir, gid)?;
            }
            Ok(())
        }
        "Memory" => {
            setup_dir(volume, dir)?;
            if is_tmpfs_mount(dir).map_err(|e| VolumeError::io(volume, dir, e))? {
                // Already in the desired state.
                return Ok(());
            }
            let size_limit = match src.and_then(|s| s.size_limit.as_ref()) {
                Some(q) => Some(
                    parse_quantity(&q.0)
                        .map_err(|e| VolumeError::Invalid {
                            volume: volume.into(),
                            reason: format!("sizeLimit {:?}: {e}", q.0),
                        })?
                        .value_ceil(),
                ),
                None => None,
            };
            let size = tmpfs_size(pod, size_limit, crate::node::memory_capacity());
            let options = size.map(|s| format!("size={s}"));
            tracing::debug!(volume, dir = %dir.display(), ?options, "mounting tmpfs");
            nix::mount::mount(
                Some("tmpfs"),
                dir,
                Some("tmpfs"),
                MsFlags::empty(),
                options.as_deref(),
            )
            .map_err(|source| VolumeError::Mount {
                volume: volume.into(),
                op: "mounting tmpfs on",
                path: dir.to_path_buf(),
                source,
            })?;
            if let Some(gid) = fs_group {
                apply_fs_group(volume, dir, gid)?;
            }
            Ok(())
        }
        m if m.starts_with("HugePages") => Err(VolumeError::Unsupported {
            volume: volume.into(),
            kind: format!("emptyDir with medium {m}"),
        }),
        other => Err(VolumeError::Invalid {
            volume: volume.into(),
            reason: format!("unknown storage medium {other:?}"),
        }),
    }
}

/// Makes the directory 0777 whatever our umask (Go's `setupDir`) if it is not there yet;
/// true when it made it.
fn setup_dir(volume: &str, dir: &Path) -> Result<bool, VolumeError> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => return Ok(false),
        Ok(_) => {
            return Err(VolumeError::io(
                volume,
                dir,
                std::io::Error::new(ErrorKind::AlreadyExists, "exists and is not a directory"),
            ));
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(VolumeError::io(volume, dir, e)),
    }
    mkdir_all(volume, dir, EMPTY_DIR_MODE)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(EMPTY_DIR_MODE))
        .map_err(|e| VolumeError::io(volume, dir, e))?;
    Ok(true)
}

/// Gives a new volume to the pod's `fsGroup` (Go's `SetVolumeOwnership` on an empty volume):
/// group-owned, group read-write, setgid so new files inherit the group.
fn apply_fs_group(volume: &str, dir: &Path, gid: i64) -> Result<(), VolumeError> {
    let gid = u32::try_from(gid).map_err(|_| VolumeError::Invalid {
        volume: volume.into(),
        reason: format!("fsGroup {gid} is out of range"),
    })?;
    std::os::unix::fs::lchown(dir, None, Some(gid)).map_err(|e| VolumeError::io(volume, dir, e))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| VolumeError::io(volume, dir, e))?;
    let mode = (meta.permissions().mode() & 0o7777) | 0o770 | 0o2000;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| VolumeError::io(volume, dir, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::volume::tests::pod;
    use crate::volume::{setup as setup_volumes, teardown};

    #[test]
    fn mountinfo_parsing() {
        let text = "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
36 22 0:30 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/my\\040vol rw - tmpfs tmpfs rw,size=1024k
37 22 0:31 / /opt\\134x rw master:2 - nfs srv:/x rw
";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].mount_point, PathBuf::from("/"));
        assert_eq!(m[0].fs_type, "ext4");
        assert_eq!(
            m[1].mount_point,
            PathBuf::from("/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/my vol")
        );
        assert_eq!(m[1].fs_type, "tmpfs");
        assert_eq!(m[2].mount_point, PathBuf::from("/opt\\x"));
        assert_eq!(unescape_octal("a\\0"), "a\\0");
    }

    #[test]
    fn tmpfs_sizes() {
        let gi: u64 = 1 << 30;
        let alloc = i128::from(allocatable_memory(8 * gi));
        let best_effort = pod("metadata: {name: p, uid: u}\nspec: {containers: [{name: c}]}");
        assert_eq!(tmpfs_size(&best_effort, None, 8 * gi), Some(alloc));
        assert_eq!(
            tmpfs_size(&best_effort, Some(16 << 20), 8 * gi),
            Some(16 << 20)
        );
        // A sizeLimit above what the pod may use is ignored.
        assert_eq!(
            tmpfs_size(&best_effort, Some(100 << 30), 8 * gi),
            Some(alloc)
        );
        let limited = pod("metadata: {name: p, uid: u}
spec: {containers: [{name: c, resources: {limits: {memory: 256Mi}}}]}");
        assert_eq!(tmpfs_size(&limited, None, 8 * gi), Some(256 << 20));
        assert_eq!(
            tmpfs_size(&limited, Some(512 << 20), 8 * gi),
            Some(256 << 20)
        );
        assert_eq!(tmpfs_size(&limited, Some(64 << 20), 8 * gi), Some(64 << 20));
        assert_eq!(tmpfs_size(&best_effort, None, 0), None);
    }

    #[tokio::test]
    async fn disk_empty_dir_is_world_writable_and_grouped() {
        let root = tempfile::tempdir().unwrap();
        let p = pod("metadata: {name: p, uid: ed1}
spec:
  securityContext: {fsGroup: 2345}
  containers: [{name: c}]
  volumes: [{name: v, emptyDir: {}}]");
        let v = setup_volumes(root.path(), &p).await.unwrap();
        let meta = std::fs::metadata(&v.dirs["v"]).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o2777);
        assert_eq!(meta.gid(), 2345);
        // The pod's own changes survive setting up again.
        std::fs::set_permissions(&v.dirs["v"], std::fs::Permissions::from_mode(0o700)).unwrap();
        setup_volumes(root.path(), &p).await.unwrap();
        let meta = std::fs::metadata(&v.dirs["v"]).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
        teardown(root.path(), "ed1").await.unwrap();
    }

    #[tokio::test]
    async fn memory_empty_dir_is_a_sized_tmpfs() {
        let root = tempfile::tempdir().unwrap();
        let p = pod("metadata: {name: p, uid: ed2}
spec:
  containers: [{name: c}]
  volumes: [{name: mem, emptyDir: {medium: Memory, sizeLimit: 16Mi}}]");
        let v = setup_volumes(root.path(), &p).await.unwrap();
        let dir = std::fs::canonicalize(&v.dirs["mem"]).unwrap();
        let count = || {
            mount_table()
                .unwrap()
                .iter()
                .filter(|m| m.mount_point == dir && m.fs_type == "tmpfs")
                .count()
        };
        let result = std::panic::catch_unwind(|| {
            assert_eq!(count(), 1);
            let st = nix::sys::statvfs::statvfs(&dir).unwrap();
            let size = st.blocks() * st.fragment_size();
            assert_eq!(size, 16 << 20);
        });
        // Set up again: no second mount.
        let again = setup_volumes(root.path(), &p).await;
        let mounts_after_again = count();
        teardown(root.path(), "ed2").await.unwrap();
        assert_eq!(count(), 0);
        assert!(!root.path().join("pods/ed2").exists());
        result.unwrap();
        again.unwrap();
        assert_eq!(mounts_after_again, 1);
    }

    #[tokio::test]
    async fn unknown_media_are_refused() {
        let root = tempfile::tempdir().unwrap();
        for (medium, want) in [
            (
                "HugePages",
                "emptyDir with medium HugePages volumes are not supported",
            ),
            ("Floppy", "unknown storage medium \"Floppy\""),
        ] {
            let p = pod(&format!(
                "metadata: {{name: p, uid: ed3}}
spec:
  containers: [{{name: c}}]
  volumes: [{{name: v, emptyDir: {{medium: {medium}}}}}]"
            ));
            let err = setup_volumes(root.path(), &p)
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
