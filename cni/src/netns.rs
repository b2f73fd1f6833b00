//! Persistent named network namespaces, like `ip netns`: an empty file under a directory
//! (default `/var/run/netns`) with the namespace bind-mounted on it.
//!
//! Creation never moves a thread of this process into the new namespace for good: a
//! dedicated, short-lived std thread calls `unshare(CLONE_NEWNET)`, bind-mounts its own
//! `/proc/self/task/<tid>/ns/net` onto the file, and exits. The async wrappers run the
//! blocking parts off the runtime's worker threads.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::statfs::{NSFS_MAGIC, statfs};

use crate::error::{CniError, Result};

/// Default directory of named namespaces (iproute2's).
pub const DEFAULT_NETNS_DIR: &str = "/var/run/netns";

fn nix_io(context: String, e: Errno) -> CniError {
    CniError::io(context, std::io::Error::from(e))
}

/// Whether `path` is a live network-namespace file (an nsfs mount or `/proc/*/ns/net`).
pub fn is_netns(path: &Path) -> bool {
    statfs(path).is_ok_and(|s| s.filesystem_type() == NSFS_MAGIC)
}

/// `name` inside `dir`, or `name` itself when it is a path (contains `/`).
pub fn resolve(dir: &Path, name_or_path: &str) -> PathBuf {
    if name_or_path.contains('/') {
        PathBuf::from(name_or_path)
    } else {
        dir.join(name_or_path)
    }
}

fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(CniError::InvalidArgument {
            what: "netns name".into(),
            reason: format!("{name:?} must be a plain file name"),
        });
    }
    Ok(())
}

/// Create the named namespace `dir/name` (blocking; spawns and joins a helper thread).
pub fn create_blocking(dir: &Path, name: &str) -> Result<PathBuf> {
    validate_name(name)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| CniError::io(format!("creating {}", dir.display()), e))?;
    let path = dir.join(name);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&path)
        .map_err(|e| CniError::io(format!("creating netns file {}", path.display()), e))?;
    let target = path.clone();
    let joined = std::thread::Builder::new()
        .name("netns-create".into())
        .spawn(move || -> std::result::Result<(), (String, Errno)> {
            // This thread alone enters the new namespace, and it exits right after.
            unshare(CloneFlags::CLONE_NEWNET)
                .map_err(|e| ("unshare(CLONE_NEWNET)".to_string(), e))?;
            let src = format!("/proc/self/task/{}/ns/net", nix::unistd::gettid());
            mount(
                Some(src.as_str()),
                &target,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| (format!("bind-mounting {src} on {}", target.display()), e))
        })
        .map_err(|e| CniError::io("spawning netns helper thread", e))?
        .join();
    let res = match joined {
        Ok(Ok(())) => Ok(path.clone()),
        Ok(Err((what, e))) => Err(nix_io(what, e)),
        Err(_) => Err(CniError::io(
            "netns helper thread",
            std::io::Error::other("panicked"),
        )),
    };
    if res.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    res
}

/// Create the named namespace `dir/name`.
pub async fn create(dir: &Path, name: &str) -> Result<PathBuf> {
    let (dir, name) = (dir.to_path_buf(), name.to_string());
    tokio::task::spawn_blocking(move || create_blocking(&dir, &name))
        .await
        .map_err(|e| CniError::io("netns worker", std::io::Error::other(e)))?
}

/// Unmount and remove a namespace file. Absent or already-unmounted is fine.
pub fn delete_blocking(path: &Path) -> Result<()> {
    match umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(nix_io(format!("unmounting {}", path.display()), e)),
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CniError::io(format!("removing {}", path.display()), e)),
    }
}

/// Unmount and remove a namespace file.
pub async fn delete(path: &Path) -> Result<()> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || delete_blocking(&path))
        .await
        .map_err(|e| CniError::io("netns worker", std::io::Error::other(e)))?
}

/// Live namespaces in `dir`, sorted (entries that are not nsfs mounts are skipped).
pub fn list(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CniError::io(format!("reading {}", dir.display()), e)),
    };
    let mut out: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_netns(p))
        .collect();
    out.sort();
    Ok(out)
}

/// Move the *calling thread* into the namespace at `path` (for `exec`-style use right
/// before `execve`; never call this on a runtime worker thread).
pub fn enter_current_thread(path: &Path) -> Result<()> {
    if !is_netns(path) {
        return Err(CniError::InvalidArgument {
            what: "netns".into(),
            reason: format!("{} is not a network namespace", path.display()),
        });
    }
    let f = std::fs::File::open(path)
        .map_err(|e| CniError::io(format!("opening {}", path.display()), e))?;
    setns(&f, CloneFlags::CLONE_NEWNET).map_err(|e| nix_io(format!("setns({})", path.display()), e))
}

/// The inode of this process's current network namespace (to tell namespaces apart).
pub fn current_netns_inode() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn create_list_delete_without_leaking_threads() {
        if !is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let before = current_netns_inode().unwrap();
        let mut paths = Vec::new();
        for i in 0..5 {
            paths.push(create(d.path(), &format!("ns{i}")).await.unwrap());
        }
        assert!(
            create(d.path(), "ns0").await.is_err(),
            "duplicate name must fail"
        );
        assert!(create(d.path(), "a/b").await.is_err());
        assert_eq!(list(d.path()).unwrap(), paths);
        let ino = std::fs::metadata(&paths[0]).unwrap().ino();
        assert_ne!(ino, before);
        // No thread of this process is in any new namespace.
        for t in std::fs::read_dir("/proc/self/task").unwrap() {
            let t = t.unwrap().path();
            let ino = std::fs::metadata(t.join("ns/net")).map(|m| m.ino());
            if let Ok(ino) = ino {
                assert_eq!(ino, before, "thread {} left in another netns", t.display());
            }
        }
        assert!(is_netns(&paths[0]));
        assert!(!is_netns(d.path()));
        for p in &paths {
            delete(p).await.unwrap();
            delete(p).await.unwrap();
            assert!(!p.exists());
        }
        assert!(list(d.path()).unwrap().is_empty());
    }
}
