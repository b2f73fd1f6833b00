//! A pod's IPC and UTS namespaces pinned on files, for sandboxes that run without a pause
//! process (CRI-O's "dropped infra container"): a pause process exists to hold the pod's
//! namespaces, and when the pod shares no PID namespace, bind-mounted namespace files hold
//! them as well; the pod then starts without a `runc create` + `start` of its own (about
//! 60–90 ms here).
//!
//! As for network namespaces (`ferrolet_cni::netns`), a dedicated short-lived thread calls
//! `unshare`, sets the pod's hostname in its new UTS namespace, bind-mounts its own
//! `/proc/self/task/<tid>/ns/*` files, and exits; no thread of ours stays in a pod namespace.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statfs::{NSFS_MAGIC, statfs};
use serde::{Deserialize, Serialize};

/// The pod's pinned namespaces; `None` where the pod uses the node's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedNamespaces {
    /// The pod's IPC namespace.
    pub ipc: Option<PathBuf>,
    /// The pod's UTS namespace (none with host networking, as with a pause process).
    pub uts: Option<PathBuf>,
}

/// Why namespaces could not be pinned or unpinned.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct PinError {
    /// What was being done.
    pub what: String,
    /// The failure.
    #[source]
    pub source: std::io::Error,
}

pub(super) fn pin_err(what: impl Into<String>, e: impl Into<std::io::Error>) -> PinError {
    PinError {
        what: what.into(),
        source: e.into(),
    }
}

/// Makes the empty file a namespace is bind-mounted on (its dir too), noted in `made` for
/// [`pin_or_undo`]'s rollback.
pub(super) fn pin_target(path: &Path, made: &mut Vec<PathBuf>) -> Result<(), PinError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| pin_err(format!("creating {}", dir.display()), e))?;
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(path)
        .map_err(|e| pin_err(format!("creating {}", path.display()), e))?;
    made.push(path.to_path_buf());
    Ok(())
}

/// Runs `pin` on a blocking thread; when it fails, the namespace files it noted in `made` are
/// removed again, so a failed pod start leaves no pinned namespace behind.
pub(super) async fn pin_or_undo(
    pin: impl FnOnce(&mut Vec<PathBuf>) -> Result<(), PinError> + Send + 'static,
) -> Result<(), PinError> {
    tokio::task::spawn_blocking(move || {
        let mut made = Vec::new();
        let res = pin(&mut made);
        if res.is_err() {
            for path in made {
                unpin(&path).unwrap_or_else(
                    |e| tracing::warn!(error = %e, "removing a half-made namespace file"),
                );
            }
        }
        res
    })
    .await
    .map_err(|e| pin_err("namespace worker", std::io::Error::other(e)))?
}

impl PinnedNamespaces {
    /// Where a sandbox's namespaces go: `<dir>/ipc` and `<dir>/uts`, each only if the pod
    /// gets its own.
    pub fn paths(dir: &Path, own_ipc: bool, own_uts: bool) -> Self {
        Self {
            ipc: own_ipc.then(|| dir.join("ipc")),
            uts: own_uts.then(|| dir.join("uts")),
        }
    }

    pub(super) fn each(&self) -> impl Iterator<Item = (&PathBuf, CloneFlags, &'static str)> {
        [
            (&self.ipc, CloneFlags::CLONE_NEWIPC, "ipc"),
            (&self.uts, CloneFlags::CLONE_NEWUTS, "uts"),
        ]
        .into_iter()
        .filter_map(|(p, flag, kind)| p.as_ref().map(|p| (p, flag, kind)))
    }

    /// Makes the namespaces and pins them; a non-empty `hostname` is set in the new UTS
    /// namespace (empty: it keeps the node's, as a pause process without one would). On
    /// failure, the files this call made are removed again.
    pub async fn create(&self, hostname: &str) -> Result<(), PinError> {
        let (this, hostname) = (self.clone(), hostname.to_string());
        pin_or_undo(move |made| this.create_blocking(hostname, made)).await
    }

    fn create_blocking(&self, hostname: String, made: &mut Vec<PathBuf>) -> Result<(), PinError> {
        let mut flags = CloneFlags::empty();
        for (path, flag, _) in self.each() {
            pin_target(path, made)?;
            flags |= flag;
        }
        if flags.is_empty() {
            return Ok(());
        }
        let targets: Vec<(PathBuf, &'static str)> =
            self.each().map(|(p, _, kind)| (p.clone(), kind)).collect();
        std::thread::Builder::new()
            .name("ns-pin".into())
            .spawn(move || -> Result<(), PinError> {
                // This thread alone enters the new namespaces, and it exits right after.
                unshare(flags).map_err(|e| pin_err(format!("unshare({flags:?})"), e))?;
                if !hostname.is_empty() && flags.contains(CloneFlags::CLONE_NEWUTS) {
                    nix::unistd::sethostname(&hostname)
                        .map_err(|e| pin_err(format!("setting the hostname {hostname:?}"), e))?;
                }
                let tid = nix::unistd::gettid();
                for (target, kind) in &targets {
                    let src = format!("/proc/self/task/{tid}/ns/{kind}");
                    mount(
                        Some(src.as_str()),
                        target,
                        None::<&str>,
                        MsFlags::MS_BIND,
                        None::<&str>,
                    )
                    .map_err(|e| {
                        pin_err(format!("bind-mounting {src} on {}", target.display()), e)
                    })?;
                }
                Ok(())
            })
            .map_err(|e| pin_err("spawning the namespace thread", e))?
            .join()
            .unwrap_or_else(|_| {
                Err(pin_err(
                    "namespace thread",
                    std::io::Error::other("panicked"),
                ))
            })
    }

    /// Whether every namespace is still pinned (after a reboot, or a removal, they are not).
    pub fn live(&self) -> bool {
        self.each().all(|(p, _, _)| is_pinned(p))
    }

    /// Unpins and removes the files; what is gone already is fine. A namespace lives on
    /// while a process is still in it.
    pub async fn remove(&self) -> Result<(), PinError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.try_remove())
            .await
            .map_err(|e| pin_err("namespace worker", std::io::Error::other(e)))?
    }

    fn try_remove(&self) -> Result<(), PinError> {
        self.each().try_for_each(|(path, _, _)| unpin(path))
    }
}

/// Whether a namespace is bind-mounted at `path`.
pub(super) fn is_pinned(path: &Path) -> bool {
    statfs(path).is_ok_and(|s| s.filesystem_type() == NSFS_MAGIC)
}

/// Unmounts and removes one namespace file; absent or already unmounted is fine. The netns
/// helper does exactly this for any namespace file.
pub(super) fn unpin(path: &Path) -> Result<(), PinError> {
    ferrolet_cni::netns::delete_blocking(path).map_err(|e| {
        pin_err(
            format!("unpinning {}", path.display()),
            std::io::Error::other(e),
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn only_the_pods_own_namespaces_get_paths() {
        let p = PinnedNamespaces::paths(Path::new("/s/sb"), true, false);
        assert_eq!(p.ipc.as_deref(), Some(Path::new("/s/sb/ipc")));
        assert_eq!(p.uts, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pin_set_the_hostname_and_remove_twice() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let p = PinnedNamespaces::paths(&d.path().join("ns"), true, true);
        p.create("pinned-pod").await.unwrap();
        assert!(p.live());
        for (path, kind) in [(&p.ipc, "ipc"), (&p.uts, "uts")] {
            let ino = std::fs::metadata(path.as_ref().unwrap()).unwrap().ino();
            let ours = std::fs::metadata(format!("/proc/self/ns/{kind}"))
                .unwrap()
                .ino();
            assert_ne!(ino, ours, "{kind} is a new namespace");
            // No thread of ours stayed in it.
            for t in std::fs::read_dir("/proc/self/task").unwrap() {
                let t = t.unwrap().path().join("ns").join(kind);
                // A thread that exited since the listing is in no namespace.
                if let Ok(m) = std::fs::metadata(t) {
                    assert_ne!(m.ino(), ino);
                }
            }
        }
        // The hostname is the UTS namespace's, read from inside it.
        let uts = p.uts.clone().unwrap();
        let name = std::thread::spawn(move || {
            let f = std::fs::File::open(uts).unwrap();
            nix::sched::setns(&f, CloneFlags::CLONE_NEWUTS).unwrap();
            nix::unistd::gethostname().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(name, "pinned-pod");
        // A second pin on the same files is refused and leaves the first alone.
        assert!(p.create("").await.is_err());
        assert!(p.live());
        p.remove().await.unwrap();
        p.remove().await.unwrap();
        assert!(!p.live());
        assert!(!p.ipc.unwrap().exists() && !p.uts.unwrap().exists());
    }
}
