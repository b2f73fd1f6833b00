//! Reading files out of snapshot mounts (an image's `/etc/passwd` and `/etc/group`, which
//! decide a container's uid and groups), and the sandbox's tmpfs mounts.
//!
//! Reading avoids mounting when it can: an overlay snapshot is a stack of plain directories
//! and a bind snapshot is one, so the files are looked up layer by layer (honouring whiteouts
//! and opaque directories). Only what that cannot answer (a symlink that must resolve in the
//! merged view, an unknown mount type) is mounted read-only in a temporary directory.

use std::collections::VecDeque;
use std::ffi::{CString, OsString};
use std::io::{ErrorKind, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use ferrolet_proto::containerd::types::Mount;
use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};

/// An image's user and group databases.
#[derive(Clone, Debug, Default)]
pub struct EtcFiles {
    /// `/etc/passwd`, or empty when the image has none.
    pub passwd: String,
    /// `/etc/group`, or empty when the image has none.
    pub group: String,
}

/// What can go wrong reading or mounting.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The snapshot has no mounts to read.
    #[error("the snapshot has no mounts")]
    NoMounts,
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
    /// A mount syscall failed.
    #[error("{op} {path:?}: {source}")]
    Sys {
        /// What was being done.
        op: &'static str,
        /// Where.
        path: PathBuf,
        /// The errno.
        #[source]
        source: Errno,
    },
    /// A user database is implausibly large.
    #[error("{path:?} is larger than {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// A mount we cannot reproduce.
    #[error("unsupported mount: {0}")]
    Unsupported(String),
    /// The blocking task died.
    #[error("blocking mount task failed: {0}")]
    Join(String),
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MountError {
    let path = path.to_path_buf();
    move |source| MountError::Io { op, path, source }
}

fn sys(op: &'static str, path: &Path) -> impl FnOnce(Errno) -> MountError {
    let path = path.to_path_buf();
    move |source| MountError::Sys { op, path, source }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, MountError> + Send + 'static,
) -> Result<T, MountError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| MountError::Join(e.to_string()))?
}

/// Larger user databases are not plausible and would only cost memory.
const MAX_DB_SIZE: u64 = 16 << 20;

/// Symlink hops allowed in one lookup (the kernel's limit).
const MAX_SYMLINKS: usize = 40;

/// Reads etc/passwd and etc/group from a snapshot's mounts (containerd `types::Mount` list from Snapshots.Prepare/Mounts). Fast path without mounting: for an overlay mount read from upperdir then each lowerdir in order (stop at a whiteout), for a bind mount from its source; fall back to a temporary read-only mount (under a temp dir, unmounted after, in spawn_blocking) for anything else or when a candidate is a symlink. Missing files → empty strings.
pub async fn read_etc(mounts: &[Mount]) -> Result<EtcFiles, MountError> {
    let mounts = mounts.to_vec();
    blocking(move || read_etc_blocking(&mounts)).await
}

const DATABASES: [&str; 2] = ["passwd", "group"];

fn read_etc_blocking(mounts: &[Mount]) -> Result<EtcFiles, MountError> {
    let [only] = mounts else {
        return if mounts.is_empty() {
            Err(MountError::NoMounts)
        } else {
            via_temp_mount(mounts)
        };
    };
    if is_bind(only) {
        return read_from_root(Path::new(&only.source));
    }
    if only.r#type == "overlay" {
        let layers = overlay_layers(only);
        let mut found = Vec::with_capacity(DATABASES.len());
        for db in DATABASES {
            match lookup_in_layers(&layers, &["etc", db])? {
                Lookup::File(path) => found.push(read_limited(&path)?),
                Lookup::Absent => found.push(String::new()),
                Lookup::NeedsMount => return via_temp_mount(mounts),
            }
        }
        let [passwd, group] = <[String; 2]>::try_from(found)
            .map_err(|_| MountError::Unsupported("internal: database count".into()))?;
        return Ok(EtcFiles { passwd, group });
    }
    via_temp_mount(mounts)
}

fn is_bind(m: &Mount) -> bool {
    m.r#type == "bind" || m.options.iter().any(|o| o == "bind" || o == "rbind")
}

/// An overlay's directories, top first: upperdir, then each lowerdir in order.
fn overlay_layers(m: &Mount) -> Vec<PathBuf> {
    let mut layers = Vec::new();
    if let Some(upper) = m.options.iter().find_map(|o| o.strip_prefix("upperdir=")) {
        layers.push(PathBuf::from(upper));
    }
    if let Some(lower) = m.options.iter().find_map(|o| o.strip_prefix("lowerdir=")) {
        layers.extend(
            lower
                .split(':')
                .filter(|l| !l.is_empty())
                .map(PathBuf::from),
        );
    }
    layers
}

/// Where a path resolves in a stack of overlay layers.
#[derive(Debug, PartialEq)]
enum Lookup {
    /// A regular file.
    File(PathBuf),
    /// Not there (never was, whited out, hidden by an opaque directory, or not a file).
    Absent,
    /// A symlink on the way: only the merged view can resolve it.
    NeedsMount,
}

/// overlayfs's whiteout: a 0:0 character device.
fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// Whether overlayfs hides the lower layers' contents of `dir`.
fn is_opaque(dir: &Path) -> bool {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    ["trusted.overlay.opaque", "user.overlay.opaque"]
        .iter()
        .any(|name| {
            let Ok(name) = CString::new(*name) else {
                return false;
            };
            let mut value = [0u8; 4];
            // SAFETY: both strings are NUL-terminated and outlive the call; the buffer pointer
            // and length describe `value`, which the kernel writes at most `value.len()` bytes to.
            let n = unsafe {
                libc::lgetxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    value.as_mut_ptr().cast(),
                    value.len(),
                )
            };
            n == 1 && value[0] == b'y'
        })
}

fn lookup_in_layers(layers: &[PathBuf], components: &[&str]) -> Result<Lookup, MountError> {
    'layers: for layer in layers {
        let mut path = layer.clone();
        for (i, c) in components.iter().enumerate() {
            let parent = path.clone();
            path.push(c);
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e)
                    if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory =>
                {
                    if i > 0 && is_opaque(&parent) {
                        return Ok(Lookup::Absent);
                    }
                    continue 'layers;
                }
                Err(e) => return Err(io("looking up", &path)(e)),
            };
            if is_whiteout(&meta) {
                return Ok(Lookup::Absent);
            }
            if meta.file_type().is_symlink() {
                return Ok(Lookup::NeedsMount);
            }
            if i + 1 == components.len() {
                return Ok(if meta.is_file() {
                    Lookup::File(path)
                } else {
                    Lookup::Absent
                });
            }
            if !meta.is_dir() {
                // A file here shadows any directory of that name below.
                return Ok(Lookup::Absent);
            }
        }
    }
    Ok(Lookup::Absent)
}

/// Resolves `rel` inside `root` the way the container will see it: symlinks, absolute ones
/// included, stay under `root`. `None` when it does not exist.
fn resolve_in_root(root: &Path, rel: &Path) -> Result<Option<PathBuf>, MountError> {
    let components = |p: &Path| -> VecDeque<OsString> {
        p.components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some(OsString::from("..")),
                _ => None,
            })
            .collect()
    };
    let mut todo = components(rel);
    let mut resolved: Vec<OsString> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        if c == ".." {
            resolved.pop();
            continue;
        }
        let mut path = root.to_path_buf();
        path.extend(&resolved);
        path.push(&c);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                return Ok(None);
            }
            Err(e) => return Err(io("looking up", &path)(e)),
        };
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > MAX_SYMLINKS {
                return Ok(None);
            }
            let target = std::fs::read_link(&path).map_err(io("reading link", &path))?;
            if target.is_absolute() {
                resolved.clear();
            }
            let mut next = components(&target);
            next.extend(todo.drain(..));
            todo = next;
            continue;
        }
        if !todo.is_empty() && !meta.is_dir() {
            return Ok(None);
        }
        resolved.push(c);
    }
    let mut path = root.to_path_buf();
    path.extend(&resolved);
    Ok(Some(path))
}

/// A user database's text; a missing file or a non-file reads as empty.
fn read_limited(path: &Path) -> Result<String, MountError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(io("opening", path)(e)),
    };
    let meta = file.metadata().map_err(io("checking", path))?;
    if !meta.is_file() {
        return Ok(String::new());
    }
    let mut buf = Vec::new();
    file.take(MAX_DB_SIZE + 1)
        .read_to_end(&mut buf)
        .map_err(io("reading", path))?;
    if buf.len() as u64 > MAX_DB_SIZE {
        return Err(MountError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_DB_SIZE,
        });
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn read_from_root(root: &Path) -> Result<EtcFiles, MountError> {
    let read = |db: &str| -> Result<String, MountError> {
        match resolve_in_root(root, &Path::new("etc").join(db))? {
            Some(path) => read_limited(&path),
            None => Ok(String::new()),
        }
    };
    Ok(EtcFiles {
        passwd: read("passwd")?,
        group: read("group")?,
    })
}

/// Flags and data for mounting `m` read-only. An overlay loses its upper and work dirs (its
/// upper becomes the top lower), so nothing can be written through it.
fn readonly_mount_args(m: &Mount) -> (MsFlags, String) {
    let mut flags = MsFlags::empty();
    let mut data: Vec<String> = Vec::new();
    let mut upper = None;
    for o in &m.options {
        match o.as_str() {
            "ro" | "rw" => {}
            "bind" => flags |= MsFlags::MS_BIND,
            "rbind" => flags |= MsFlags::MS_BIND | MsFlags::MS_REC,
            "nosuid" => flags |= MsFlags::MS_NOSUID,
            "nodev" => flags |= MsFlags::MS_NODEV,
            "noexec" => flags |= MsFlags::MS_NOEXEC,
            "noatime" => flags |= MsFlags::MS_NOATIME,
            "relatime" => flags |= MsFlags::MS_RELATIME,
            "suid" | "dev" | "exec" | "atime" | "defaults" | "async" => {}
            o if m.r#type == "overlay" && o.starts_with("workdir=") => {}
            o if m.r#type == "overlay" && o.starts_with("upperdir=") => {
                upper = o.strip_prefix("upperdir=").map(str::to_string);
            }
            o => data.push(o.to_string()),
        }
    }
    if let Some(upper) = upper {
        for d in &mut data {
            if let Some(lower) = d.strip_prefix("lowerdir=") {
                *d = format!("lowerdir={upper}:{lower}");
            }
        }
    }
    // A bind mount ignores MS_RDONLY until a remount; we only ever read through it anyway.
    if !flags.contains(MsFlags::MS_BIND) {
        flags |= MsFlags::MS_RDONLY;
    }
    (flags, data.join(","))
}

/// Mounts the snapshot read-only under a temporary directory, reads, and unmounts.
fn via_temp_mount(mounts: &[Mount]) -> Result<EtcFiles, MountError> {
    // Kept rather than auto-deleted: a recursive delete of a directory whose unmount failed
    // would delete the snapshot's files. It is removed (non-recursively) once empty.
    let root = tempfile::Builder::new()
        .prefix("ferrolet-etc-")
        .tempdir()
        .map_err(io(
            "creating a temporary mount point in",
            &std::env::temp_dir(),
        ))?
        .keep();
    let mut mounted: Vec<PathBuf> = Vec::new();
    let result = (|| {
        for m in mounts {
            let target = root.join(m.target.trim_start_matches('/'));
            let (flags, data) = readonly_mount_args(m);
            // The kernel takes one page of mount data; longer lowerdir lists need containerd's
            // relative-path trick, which snapshots we read never need.
            if data.len() >= 4096 {
                return Err(MountError::Unsupported(format!(
                    "{} mount options exceed a page",
                    m.r#type
                )));
            }
            let typ = (!m.r#type.is_empty() && m.r#type != "bind").then_some(m.r#type.as_str());
            let data = (!data.is_empty()).then_some(data.as_str());
            nix::mount::mount(Some(m.source.as_str()), &target, typ, flags, data)
                .map_err(sys("mounting the snapshot at", &target))?;
            mounted.push(target);
        }
        read_from_root(&root)
    })();
    let mut clean = true;
    for target in mounted.iter().rev() {
        if let Err(e) = nix::mount::umount2(target, MntFlags::MNT_DETACH) {
            clean = false;
            tracing::warn!(path = %target.display(), error = %e, "unmounting a temporary snapshot mount");
        }
    }
    if clean && let Err(e) = std::fs::remove_dir(&root) {
        tracing::warn!(path = %root.display(), error = %e, "removing a temporary mount point");
    }
    result
}

/// Whether `path` is the root of a mount (its device differs from its parent's).
fn is_mount_point(path: &Path) -> Result<bool, MountError> {
    let meta = std::fs::metadata(path).map_err(io("checking", path))?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    let parent_meta = std::fs::metadata(parent).map_err(io("checking", parent))?;
    Ok(meta.dev() != parent_meta.dev())
}

/// Mounts a tmpfs for a sandbox's /dev/shm (mode 1777, nosuid,nodev,noexec, size bytes) at `path` (creating the dir).
pub async fn mount_shm(path: &Path, size: u64) -> Result<(), MountError> {
    let path = path.to_path_buf();
    blocking(move || {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .map_err(io("creating", &path))?;
        // A retried RunPodSandbox must not stack a second tmpfs.
        if is_mount_point(&path)? {
            return Ok(());
        }
        let data = format!("mode=1777,size={size}");
        nix::mount::mount(
            Some("shm"),
            &path,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some(data.as_str()),
        )
        .map_err(sys("mounting shm tmpfs at", &path))
    })
    .await
}

/// Unmounts (lazily) if mounted; not mounted or missing is success.
pub async fn unmount(path: &Path) -> Result<(), MountError> {
    let path = path.to_path_buf();
    blocking(move || {
        // Stacked mounts come off one per call; the bound only guards against a loop.
        for _ in 0..64 {
            match nix::mount::umount2(&path, MntFlags::MNT_DETACH) {
                Ok(()) => continue,
                Err(Errno::EINVAL | Errno::ENOENT | Errno::ENOTDIR) => return Ok(()),
                Err(e) => return Err(sys("unmounting", &path)(e)),
            }
        }
        Err(MountError::Unsupported(format!(
            "{} still mounted after 64 unmounts",
            path.display()
        )))
    })
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::symlink;

    use super::*;

    fn whiteout(path: &Path) {
        nix::sys::stat::mknod(
            path,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o000),
            0,
        )
        .unwrap();
    }

    fn set_opaque(dir: &Path) {
        let path = CString::new(dir.as_os_str().as_bytes()).unwrap();
        let name = CString::new("trusted.overlay.opaque").unwrap();
        // SAFETY: valid NUL-terminated strings and a one-byte value buffer.
        let rc =
            unsafe { libc::lsetxattr(path.as_ptr(), name.as_ptr(), b"y".as_ptr().cast(), 1, 0) };
        assert_eq!(rc, 0, "lsetxattr: {}", std::io::Error::last_os_error());
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn overlay(upper: Option<&Path>, lowers: &[&Path]) -> Mount {
        let mut options = vec!["index=off".to_string()];
        if let Some(u) = upper {
            options.push(format!("upperdir={}", u.display()));
            options.push(format!("workdir={}", u.with_extension("work").display()));
        }
        let lower: Vec<String> = lowers.iter().map(|l| l.display().to_string()).collect();
        options.push(format!("lowerdir={}", lower.join(":")));
        Mount {
            r#type: "overlay".into(),
            source: "overlay".into(),
            target: String::new(),
            options,
        }
    }

    #[tokio::test]
    async fn overlay_layers_with_whiteouts() {
        let tmp = tempfile::tempdir().unwrap();
        let (up, l1, l2) = (
            tmp.path().join("up"),
            tmp.path().join("l1"),
            tmp.path().join("l2"),
        );
        for d in [&up, &l1, &l2] {
            std::fs::create_dir_all(d.join("etc")).unwrap();
        }
        std::fs::create_dir_all(up.with_extension("work")).unwrap();
        write(&l2.join("etc/passwd"), "root:x:0:0::/:/bin/sh\n");
        write(&l2.join("etc/group"), "root:x:0:\n");
        write(&l1.join("etc/passwd"), "app:x:1000:1000::/:/bin/sh\n");
        // The top lower layer deleted /etc/group.
        whiteout(&l1.join("etc/group"));

        let etc = read_etc(&[overlay(Some(&up), &[&l1, &l2])]).await.unwrap();
        assert_eq!(etc.passwd, "app:x:1000:1000::/:/bin/sh\n");
        assert_eq!(etc.group, "");

        // Upper wins over everything.
        write(&up.join("etc/group"), "g:x:5:\n");
        let etc = read_etc(&[overlay(Some(&up), &[&l1, &l2])]).await.unwrap();
        assert_eq!(etc.group, "g:x:5:\n");

        // A view (no upper) reads the lowers alone.
        let etc = read_etc(&[overlay(None, &[&l2])]).await.unwrap();
        assert_eq!(etc.passwd, "root:x:0:0::/:/bin/sh\n");
    }

    #[tokio::test]
    async fn opaque_and_shadowing_directories_hide_lower_layers() {
        let tmp = tempfile::tempdir().unwrap();
        let (l1, l2) = (tmp.path().join("l1"), tmp.path().join("l2"));
        write(&l2.join("etc/passwd"), "root:x:0:0::/:/bin/sh\n");
        std::fs::create_dir_all(l1.join("etc")).unwrap();
        set_opaque(&l1.join("etc"));
        let etc = read_etc(&[overlay(None, &[&l1, &l2])]).await.unwrap();
        assert_eq!(etc.passwd, "", "an opaque /etc hides the lower one");

        let l0 = tmp.path().join("l0");
        write(&l0.join("etc"), "not a directory");
        let etc = read_etc(&[overlay(None, &[&l0, &l2])]).await.unwrap();
        assert_eq!(etc.passwd, "");

        let lw = tmp.path().join("lw");
        std::fs::create_dir_all(&lw).unwrap();
        whiteout(&lw.join("etc"));
        let etc = read_etc(&[overlay(None, &[&lw, &l2])]).await.unwrap();
        assert_eq!(etc.passwd, "");
    }

    #[tokio::test]
    async fn symlinks_in_layers_fall_back_to_a_real_mount() {
        let tmp = tempfile::tempdir().unwrap();
        let (l1, l2) = (tmp.path().join("l1"), tmp.path().join("l2"));
        // /etc/passwd -> /usr/lib/passwd, the target in a lower layer.
        write(&l2.join("usr/lib/passwd"), "lib:x:7:7::/:/bin/sh\n");
        write(&l2.join("etc/group"), "root:x:0:\n");
        std::fs::create_dir_all(l1.join("etc")).unwrap();
        symlink("/usr/lib/passwd", l1.join("etc/passwd")).unwrap();
        let mounts = [overlay(None, &[&l1, &l2])];
        let layers = overlay_layers(&mounts[0]);
        assert_eq!(
            lookup_in_layers(&layers, &["etc", "passwd"]).unwrap(),
            Lookup::NeedsMount
        );
        let etc = read_etc(&mounts).await.unwrap();
        assert_eq!(etc.passwd, "lib:x:7:7::/:/bin/sh\n");
        assert_eq!(etc.group, "root:x:0:\n");
        // Nothing left mounted under the temp dir.
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mountinfo.contains("ferrolet-etc-"), "{mountinfo}");
        let leftovers = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("ferrolet-etc-"))
            .count();
        assert_eq!(leftovers, 0);
    }

    #[tokio::test]
    async fn bind_snapshots_resolve_symlinks_inside_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("fs");
        write(&root.join("usr/share/passwd"), "s:x:3:3::/:/bin/sh\n");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        // An absolute link must resolve in the image, never on the host.
        symlink("/usr/share/passwd", root.join("etc/passwd")).unwrap();
        symlink("../../../../../../etc/hostname", root.join("etc/group")).unwrap();
        let bind = Mount {
            r#type: "bind".into(),
            source: root.display().to_string(),
            target: String::new(),
            options: vec!["rbind".into(), "ro".into()],
        };
        let etc = read_etc(&[bind]).await.unwrap();
        assert_eq!(etc.passwd, "s:x:3:3::/:/bin/sh\n");
        assert_eq!(etc.group, "", "a link escaping the root stays inside it");

        let empty = tmp.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let bind = Mount {
            r#type: "bind".into(),
            source: empty.display().to_string(),
            target: String::new(),
            options: vec!["rbind".into()],
        };
        let etc = read_etc(&[bind]).await.unwrap();
        assert_eq!((etc.passwd.as_str(), etc.group.as_str()), ("", ""));
        assert!(matches!(read_etc(&[]).await, Err(MountError::NoMounts)));
    }

    #[test]
    fn symlink_loops_end() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("etc")).unwrap();
        symlink("passwd", tmp.path().join("etc/passwd")).unwrap();
        assert_eq!(
            resolve_in_root(tmp.path(), Path::new("etc/passwd")).unwrap(),
            None
        );
    }

    #[test]
    fn readonly_overlay_args() {
        let m = overlay(Some(Path::new("/u")), &[Path::new("/a"), Path::new("/b")]);
        let (flags, data) = readonly_mount_args(&m);
        assert!(flags.contains(MsFlags::MS_RDONLY));
        assert_eq!(data, "index=off,lowerdir=/u:/a:/b");
    }

    #[tokio::test]
    async fn shm_mounts_and_unmounts() {
        let tmp = tempfile::tempdir().unwrap();
        let shm = tmp.path().join("sandboxes/x/shm");
        mount_shm(&shm, 64 << 20).await.unwrap();
        // Idempotent: no second tmpfs on top.
        mount_shm(&shm, 64 << 20).await.unwrap();
        let line = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&*shm.to_string_lossy()))
            .map(str::to_string)
            .collect::<Vec<_>>();
        assert_eq!(line.len(), 1, "{line:?}");
        assert!(
            line[0].contains("nosuid") && line[0].contains("nodev") && line[0].contains("noexec")
        );
        assert!(
            line[0].contains("tmpfs") && line[0].contains("size=65536k"),
            "{}",
            line[0]
        );
        let meta = std::fs::metadata(&shm).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o1777);

        unmount(&shm).await.unwrap();
        assert!(!is_mount_point(&shm).unwrap());
        // Unmounting again, or a path that does not exist, is fine.
        unmount(&shm).await.unwrap();
        unmount(&tmp.path().join("missing")).await.unwrap();
    }
}
