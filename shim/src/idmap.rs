//! Idmapped mounts for user-namespaced pods (kernel ≥ 5.12 for the syscalls, 5.19 for
//! overlayfs over idmapped layers; tmpfs from 6.3).
//!
//! An idmapped mount of a directory shows its on-disk ids through a user namespace's
//! mapping: with the pod's `0 <base> 65536`, a file the kubelet made as host root reads as
//! root inside the pod, and what the pod's root writes lands as host root, as containerd 2.x
//! does for CRI mounts that carry `uid_mappings`. We make them ourselves
//! (`open_tree(OPEN_TREE_CLONE)` + `mount_setattr(MOUNT_ATTR_IDMAP)` + `move_mount`) because
//! a bind of an idmapped mount keeps its mapping: runc 1.1 and crun 1.8, which cannot idmap,
//! then bind what we made.
//!
//! The rootfs: overlayfs cannot itself be idmapped, and an idmapped upper layer fails its
//! work dir (EOVERFLOW: overlayfs writes it as the mounter, host root, which the mapping does
//! not cover). So the image's layers (read-only, shared) are seen through one idmapped mount
//! of the snapshotter's directory, and the container's own upper layer is plain, its root
//! owned by the pod's root (what the pod writes is stored under its host ids, as containerd
//! 1.7's chowned snapshots are).

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ferrolet_proto::containerd::types::Mount;
use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};

/// What can go wrong making or removing idmapped mounts.
#[derive(Debug, thiserror::Error)]
pub enum IdmapError {
    /// A syscall failed.
    #[error("{op} {path:?}: {source}")]
    Sys {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The errno.
        #[source]
        source: Errno,
    },
    /// A file operation failed.
    #[error("{op} {path:?}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The snapshot's mounts are not what we can remap.
    #[error("{0}")]
    Unsupported(String),
}

impl IdmapError {
    /// Whether the kernel or file system refused the idmapping itself (not an I/O error).
    pub fn is_unsupported(&self) -> bool {
        matches!(self, IdmapError::Unsupported(_))
            || matches!(
                self,
                IdmapError::Sys {
                    source: Errno::EINVAL | Errno::ENOSYS | Errno::EPERM | Errno::EOPNOTSUPP,
                    ..
                }
            )
    }
}

fn sys(op: &'static str, path: &Path) -> impl FnOnce(Errno) -> IdmapError {
    let path = path.to_path_buf();
    move |source| IdmapError::Sys { op, path, source }
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> IdmapError {
    let path = path.to_path_buf();
    move |source| IdmapError::Io { op, path, source }
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// The kernel's `struct mount_attr` (MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn cpath(path: &Path) -> Result<CString, IdmapError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| IdmapError::Unsupported(format!("{} contains a NUL byte", path.display())))
}

/// A detached, recursive clone of the mount tree at `src`, idmapped through `userns`.
fn idmapped_tree(src: &Path, userns: &File) -> Result<OwnedFd, IdmapError> {
    let c = cpath(src)?;
    // SAFETY: plain syscalls on a NUL-terminated path and a struct that outlives the call;
    // the returned fd is owned by the OwnedFd from here on.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(sys("open_tree", src)(Errno::last()));
    }
    // SAFETY: open_tree returned a new fd we own.
    let tree = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let empty = c"";
    // SAFETY: see above.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc < 0 {
        return Err(sys("idmapping (mount_setattr)", src)(Errno::last()));
    }
    Ok(tree)
}

/// Attaches a detached tree at `dst`.
fn attach(tree: &OwnedFd, dst: &Path) -> Result<(), IdmapError> {
    let c = cpath(dst)?;
    let empty = c"";
    // SAFETY: see idmapped_tree.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc < 0 {
        return Err(sys("move_mount", dst)(Errno::last()));
    }
    Ok(())
}

/// Makes a mount point at `dst` of the kind `src` is (a directory, or an empty file).
fn mount_point_like(src: &Path, dst: &Path) -> Result<(), IdmapError> {
    let meta = std::fs::metadata(src).map_err(io("checking", src))?;
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    if meta.is_dir() {
        match std::fs::create_dir(dst) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(io("creating", dst)(e));
            }
            _ => {}
        }
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(dst)
            .map_err(io("creating", dst))?;
    }
    Ok(())
}

/// Mounts `src` (recursively) at `dst` idmapped through `userns`; blocking.
pub fn bind_idmapped(src: &Path, dst: &Path, userns: &File) -> Result<(), IdmapError> {
    let tree = idmapped_tree(src, userns)?;
    mount_point_like(src, dst)?;
    attach(&tree, dst)
}

/// Lets the pod's root reach `dir`: runc mounts a user-namespaced container's rootfs from
/// inside the user namespace, where the pod's root has only "other" rights on our
/// directories. Ours (from `state` down) are opened to traversal only (`o+x`: nothing becomes
/// listable, as containerd's 0711 state dirs); one above `state` that is closed is refused,
/// naming it, since it is not ours to change. Blocking.
pub fn make_traversable(state: &Path, dir: &Path) -> Result<(), IdmapError> {
    for a in dir.ancestors() {
        let meta = std::fs::metadata(a).map_err(io("reading", a))?;
        let mode = meta.permissions().mode() & 0o7777;
        if !meta.is_dir() || mode & 0o001 != 0 {
            continue;
        }
        if !a.starts_with(state) {
            return Err(IdmapError::Unsupported(format!(
                "{} (mode {mode:04o}) is closed to other users: the pod's root could not \
                 reach its rootfs below it",
                a.display()
            )));
        }
        std::fs::set_permissions(a, std::fs::Permissions::from_mode(mode | 0o011))
            .map_err(io("opening to traversal", a))?;
    }
    Ok(())
}

/// Mounts a container's rootfs at `target` from its snapshot's overlay mount: the lower
/// layers through an idmapped mount of their common directory at `layers`, (unmounted again
/// once overlayfs holds its own references), the upper layer as it is with its root owned by
/// `root` (the pod's root on the host). Blocking.
pub fn mount_rootfs(
    mounts: &[Mount],
    target: &Path,
    layers: &Path,
    userns: &File,
    root: (u32, u32),
) -> Result<(), IdmapError> {
    let [m] = mounts else {
        return Err(IdmapError::Unsupported(format!(
            "the snapshot has {} mounts; a user-namespaced rootfs needs one overlay mount",
            mounts.len()
        )));
    };
    if m.r#type != "overlay" {
        return Err(IdmapError::Unsupported(format!(
            "the snapshot's mount is {:?}, not overlay: a user-namespaced rootfs needs the \
             overlayfs snapshotter (idmapped lower layers)",
            m.r#type
        )));
    }
    let mut lowers = Vec::new();
    let mut upper = None;
    let mut rest = Vec::new();
    for opt in &m.options {
        if let Some(v) = opt.strip_prefix("lowerdir=") {
            lowers.extend(v.split(':').map(PathBuf::from));
        } else if let Some(v) = opt.strip_prefix("upperdir=") {
            upper = Some(PathBuf::from(v));
            rest.push(opt.clone());
        } else {
            rest.push(opt.clone());
        }
    }
    let common = common_parent(&lowers).ok_or_else(|| {
        IdmapError::Unsupported("the snapshot's overlay mount has no lower layers".into())
    })?;
    for dir in [target, layers] {
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    }
    if let Some(upper) = &upper {
        nix::unistd::chown(
            upper,
            Some(nix::unistd::Uid::from_raw(root.0)),
            Some(nix::unistd::Gid::from_raw(root.1)),
        )
        .map_err(sys("chown of the upper layer", upper))?;
    }
    let tree = idmapped_tree(&common, userns)?;
    attach(&tree, layers)?;
    let remapped: Vec<String> = lowers
        .iter()
        .map(|l| {
            let rel = l.strip_prefix(&common).unwrap_or(l);
            layers.join(rel).to_string_lossy().into_owned()
        })
        .collect();
    rest.push(format!("lowerdir={}", remapped.join(":")));
    let data = rest.join(",");
    let mounted = nix::mount::mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::empty(),
        Some(data.as_str()),
    )
    .map_err(sys("mounting the idmapped overlay at", target));
    // overlayfs keeps private clones of its layers: the idmapped view can go either way.
    let detached = nix::mount::umount2(layers, MntFlags::MNT_DETACH)
        .map_err(sys("unmounting the idmapped layers at", layers));
    mounted?;
    detached
}

/// The deepest directory every path is below.
fn common_parent(paths: &[PathBuf]) -> Option<PathBuf> {
    let first = paths.first()?;
    let mut common = first.parent()?.to_path_buf();
    for p in &paths[1..] {
        while !p.starts_with(&common) {
            common = common.parent()?.to_path_buf();
        }
    }
    Some(common)
}

/// Unmounts every mount at or below `dir` (deepest first, lazily); none is fine. Blocking.
pub fn unmount_under(dir: &Path) -> Result<(), IdmapError> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(io("reading", Path::new("/proc/self/mountinfo")))?;
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points.dedup();
    for p in points {
        match nix::mount::umount2(&p, MntFlags::MNT_DETACH) {
            Ok(()) | Err(Errno::EINVAL | Errno::ENOENT) => {}
            Err(e) => return Err(sys("unmounting", &p)(e)),
        }
    }
    Ok(())
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(v) = u8::from_str_radix(&field[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn our_closed_dirs_are_opened_to_traversal_and_others_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let set = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        // The FIFOs' 0700 `containers` dir, made before any user-namespaced pod came.
        let state = tmp.path().join("state");
        let dir = state.join("containers/c1/userns");
        std::fs::create_dir_all(&dir).unwrap();
        set(&state.join("containers"), 0o700);
        set(tmp.path(), 0o755);
        make_traversable(&state, &dir).unwrap();
        assert_eq!(mode(&state.join("containers")), 0o711);
        assert_eq!(mode(&dir), 0o755);
        // Above the state dir nothing is changed: the container is refused, naming the dir.
        set(tmp.path(), 0o700);
        let err = make_traversable(&state, &dir).unwrap_err();
        assert!(
            err.to_string().contains(&tmp.path().display().to_string()),
            "{err}"
        );
        assert!(err.is_unsupported());
        assert_eq!(mode(tmp.path()), 0o700);
    }

    #[test]
    fn layers_share_the_snapshotter_directory() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            common_parent(&[p("/s/snapshots/3/fs"), p("/s/snapshots/12/fs")]),
            Some(p("/s/snapshots"))
        );
        assert_eq!(
            common_parent(&[p("/s/snapshots/3/fs")]),
            Some(p("/s/snapshots/3"))
        );
        assert_eq!(common_parent(&[]), None);
        assert_eq!(unescape("/a\\040b/c"), p("/a b/c"));
    }

    #[test]
    fn only_one_overlay_mount_is_remapped() {
        let f = File::open("/").unwrap();
        let bind = Mount {
            r#type: "bind".into(),
            source: "/x".into(),
            target: String::new(),
            options: vec!["rbind".into()],
        };
        let err = mount_rootfs(&[bind], Path::new("/t"), Path::new("/l"), &f, (1, 1)).unwrap_err();
        assert!(err.is_unsupported());
        assert!(err.to_string().contains("overlayfs snapshotter"), "{err}");
        let err = mount_rootfs(&[], Path::new("/t"), Path::new("/l"), &f, (1, 1)).unwrap_err();
        assert!(err.to_string().contains("0 mounts"), "{err}");
    }
}
