//! A user-namespaced pod's namespaces (`hostUsers: false`), pinned on files as containerd
//! 2.x pins a pod's user namespace: the pod's containers must share one user namespace, and
//! a pinned one serves pods with and without a pause process alike (a pause joins it as the
//! containers do), and is there before the netns, which it must own.
//!
//! A thread cannot enter a new user namespace (`unshare(CLONE_NEWUSER)` refuses a
//! multi-threaded caller), so a forked child unshares the user namespace together with the
//! pod's network namespace and a pause-less pod's IPC and UTS namespaces (which it then
//! owns: the pod's root may mount sysfs, set its hostname and net sysctls, and runc need not
//! fall back to binding /sys), sets the hostname, and waits; we write its uid/gid maps,
//! bind-mount its namespace files and let it exit. The child only makes raw syscalls between
//! fork and exit.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use nix::mount::{MsFlags, mount};
use nix::sched::CloneFlags;
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, fork, pipe};
use serde::{Deserialize, Serialize};

use super::namespaces::{
    PinError, PinnedNamespaces, is_pinned, pin_err, pin_or_undo, pin_target, unpin,
};

/// One range of a user namespace's mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMap {
    /// First id inside the pod.
    pub container_id: u32,
    /// First id on the host.
    pub host_id: u32,
    /// How many.
    pub size: u32,
}

impl IdMap {
    /// The host id `id` (inside the pod) maps to.
    pub fn to_host(maps: &[IdMap], id: u32) -> Option<u32> {
        maps.iter().find_map(|m| {
            let off = id.checked_sub(m.container_id)?;
            (off < m.size).then(|| m.host_id + off)
        })
    }

    /// `/proc/<pid>/uid_map`'s text.
    pub fn map_text(maps: &[IdMap]) -> String {
        maps.iter()
            .map(|m| format!("{} {} {}\n", m.container_id, m.host_id, m.size))
            .collect()
    }
}

/// A pod's user namespace: its pin and mappings, and the netns made inside it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedUserns {
    /// The pinned user namespace.
    pub path: PathBuf,
    /// The pod's network namespace, made in the user namespace (`None`: host network).
    pub netns: Option<PathBuf>,
    /// The uid mapping.
    pub uids: Vec<IdMap>,
    /// The gid mapping.
    pub gids: Vec<IdMap>,
}

impl PinnedUserns {
    /// The host uid and gid of the pod's root.
    pub fn host_root(&self) -> (u32, u32) {
        (
            IdMap::to_host(&self.uids, 0).unwrap_or(u32::MAX),
            IdMap::to_host(&self.gids, 0).unwrap_or(u32::MAX),
        )
    }

    /// Makes the user namespace, the pod's netns and a pause-less pod's IPC and UTS
    /// namespaces (`ns`) inside it, and pins them; on failure, the files this call made are
    /// removed again.
    pub async fn create(
        &self,
        ns: Option<&PinnedNamespaces>,
        hostname: &str,
    ) -> Result<(), PinError> {
        let (this, ns, hostname) = (self.clone(), ns.cloned(), hostname.to_string());
        pin_or_undo(move |made| this.create_blocking(ns.as_ref(), &hostname, made)).await
    }

    /// Whether the user namespace is still pinned.
    pub fn live(&self) -> bool {
        is_pinned(&self.path)
    }

    /// Unpins the user namespace (gone already is fine). The netns goes with the network's
    /// teardown, after CNI DEL has run in it, and the IPC/UTS pins with theirs.
    pub async fn remove(&self) -> Result<(), PinError> {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || unpin(&path))
            .await
            .map_err(|e| pin_err("namespace worker", std::io::Error::other(e)))?
    }

    fn create_blocking(
        &self,
        ns: Option<&PinnedNamespaces>,
        hostname: &str,
        made: &mut Vec<PathBuf>,
    ) -> Result<(), PinError> {
        let mut targets: Vec<(PathBuf, &'static str)> = vec![(self.path.clone(), "user")];
        let mut flags = CloneFlags::CLONE_NEWUSER;
        if let Some(netns) = &self.netns {
            targets.push((netns.clone(), "net"));
            flags |= CloneFlags::CLONE_NEWNET;
        }
        for (path, flag, kind) in ns.into_iter().flat_map(PinnedNamespaces::each) {
            targets.push((path.clone(), kind));
            flags |= flag;
        }
        for (path, _) in &targets {
            pin_target(path, made)?;
        }
        let hostname = (flags.contains(CloneFlags::CLONE_NEWUTS) && !hostname.is_empty())
            .then(|| CString::new(hostname))
            .transpose()
            .map_err(|e| pin_err("the hostname", std::io::Error::other(e)))?;
        let child = Holder::spawn(flags, hostname)?;
        let pinned = (|| {
            let proc = PathBuf::from(format!("/proc/{}", child.pid));
            std::fs::write(proc.join("uid_map"), IdMap::map_text(&self.uids))
                .map_err(|e| pin_err("writing the pod's uid_map", e))?;
            std::fs::write(proc.join("gid_map"), IdMap::map_text(&self.gids))
                .map_err(|e| pin_err("writing the pod's gid_map", e))?;
            for (target, kind) in &targets {
                let src = proc.join("ns").join(kind);
                mount(
                    Some(&src),
                    target,
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
                .map_err(|e| {
                    pin_err(
                        format!("bind-mounting {} on {}", src.display(), target.display()),
                        e,
                    )
                })?;
            }
            Ok(())
        })();
        child.finish();
        pinned
    }
}

/// The forked child holding the new namespaces until they are pinned.
struct Holder {
    pid: Pid,
    /// Closing it lets the child exit.
    hold: Option<OwnedFd>,
}

impl Holder {
    fn spawn(flags: CloneFlags, hostname: Option<CString>) -> Result<Self, PinError> {
        let (ready_r, ready_w) = pipe().map_err(|e| pin_err("pipe", e))?;
        let (hold_r, hold_w) = pipe().map_err(|e| pin_err("pipe", e))?;
        // SAFETY: the child calls only async-signal-safe syscalls (unshare, sethostname,
        // write, read, _exit) on memory prepared before the fork.
        match unsafe { fork() }.map_err(|e| pin_err("fork", e))? {
            ForkResult::Child => {
                drop(ready_r);
                drop(hold_w);
                // SAFETY: raw syscalls on valid fds and buffers; the child never returns.
                unsafe {
                    let mut err: i32 = 0;
                    if libc::unshare(flags.bits()) != 0 {
                        err = *libc::__errno_location();
                    } else if let Some(h) = &hostname
                        && libc::sethostname(h.as_ptr(), h.as_bytes().len()) != 0
                    {
                        err = *libc::__errno_location();
                    }
                    let bytes = err.to_ne_bytes();
                    libc::write(ready_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                    let mut b = [0u8; 1];
                    while libc::read(hold_r.as_raw_fd(), b.as_mut_ptr().cast(), 1) > 0 {}
                    libc::_exit(if err == 0 { 0 } else { 1 });
                }
            }
            ForkResult::Parent { child } => {
                drop(ready_w);
                drop(hold_r);
                let holder = Holder {
                    pid: child,
                    hold: Some(hold_w),
                };
                let mut bytes = [0u8; 4];
                let n = nix::unistd::read(&ready_r, &mut bytes);
                match n {
                    Ok(4) if i32::from_ne_bytes(bytes) == 0 => Ok(holder),
                    Ok(4) => {
                        let errno = i32::from_ne_bytes(bytes);
                        holder.finish();
                        Err(pin_err(
                            format!(
                                "unsharing the pod's namespaces ({flags:?}) or setting its hostname"
                            ),
                            std::io::Error::from_raw_os_error(errno),
                        ))
                    }
                    other => {
                        holder.finish();
                        Err(pin_err(
                            "the namespace holder",
                            std::io::Error::other(format!("died before it was ready: {other:?}")),
                        ))
                    }
                }
            }
        }
    }

    /// Lets the child exit and reaps it.
    fn finish(mut self) {
        drop(self.hold.take());
        if let Err(e) = waitpid(self.pid, None) {
            tracing::warn!(pid = %self.pid, error = %e, "reaping the namespace holder");
        }
    }
}

/// Whether this node can run user-namespaced pods, probed once at start-up: a pinned user
/// namespace and an idmapped mount of a directory under the state dir.
#[derive(Clone, Debug)]
pub struct UsernsSupport(Result<(), String>);

/// The host ids the probe maps (the top of the id space, which no pod range reaches).
const PROBE_MAP: IdMap = IdMap {
    container_id: 0,
    host_id: u32::MAX - 65536,
    size: 65536,
};

impl UsernsSupport {
    /// Whether user-namespaced pods can run.
    pub fn supported(&self) -> bool {
        self.0.is_ok()
    }

    /// Why not ("" when they can).
    pub fn reason(&self) -> &str {
        self.0.as_ref().err().map_or("", String::as_str)
    }

    /// Tries it in `<state>/userns-probe` (removed again).
    pub async fn probe(state: &std::path::Path) -> Self {
        let dir = state.join("userns-probe");
        let res = tokio::task::spawn_blocking(move || {
            let res = Self::try_probe(&dir);
            if let Err(e) = crate::idmap::unmount_under(&dir) {
                tracing::warn!(error = %e, "unmounting the user namespace probe");
            } else if let Err(e) = std::fs::remove_dir_all(&dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(error = %e, "removing the user namespace probe");
            }
            res
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        if let Err(why) = &res {
            tracing::warn!(reason = %why, "user namespaces (hostUsers: false) are not supported on this node");
        }
        Self(res)
    }

    fn try_probe(dir: &std::path::Path) -> Result<(), String> {
        crate::idmap::unmount_under(dir).map_err(|e| e.to_string())?;
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.to_string()),
            _ => {}
        }
        let src = dir.join("src");
        std::fs::create_dir_all(&src).map_err(|e| e.to_string())?;
        let user = PinnedUserns {
            path: dir.join("user"),
            netns: None,
            uids: vec![PROBE_MAP],
            gids: vec![PROBE_MAP],
        };
        let mut made = Vec::new();
        user.create_blocking(None, "", &mut made)
            .map_err(|e| format!("making a user namespace: {e}"))?;
        let idmapped = std::fs::File::open(&user.path)
            .map_err(|e| e.to_string())
            .and_then(|f| {
                crate::idmap::bind_idmapped(&src, &dir.join("dst"), &f)
                    .map_err(|e| format!("idmapped mounts on {}: {e}", src.display()))
            });
        for p in made {
            let _ = unpin(&p);
        }
        idmapped
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    use super::*;

    #[test]
    fn maps_translate_ids() {
        let m = [IdMap {
            container_id: 0,
            host_id: 131072,
            size: 65536,
        }];
        assert_eq!(IdMap::to_host(&m, 0), Some(131072));
        assert_eq!(IdMap::to_host(&m, 65535), Some(196607));
        assert_eq!(IdMap::to_host(&m, 65536), None);
        assert_eq!(IdMap::map_text(&m), "0 131072 65536\n");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pods_user_namespace_owns_its_other_namespaces() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("ns");
        let p = PinnedNamespaces::paths(&dir, true, true);
        let map = vec![IdMap {
            container_id: 0,
            host_id: 4_000_000_000,
            size: 65536,
        }];
        let user = PinnedUserns {
            path: dir.join("user"),
            netns: Some(d.path().join("netns")),
            uids: map.clone(),
            gids: map,
        };
        user.create(Some(&p), "userns-pod").await.unwrap();
        assert!(p.live() && user.live());
        // The pod's IPC and UTS namespaces are the user namespace's.
        let owner = |path: &std::path::Path| {
            let f = std::fs::File::open(path).unwrap();
            // NS_GET_USERNS
            // SAFETY: an ioctl on an open nsfs file.
            let fd = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&f), 0xb701) };
            assert!(fd >= 0);
            let ino = std::fs::metadata(format!("/proc/self/fd/{fd}"))
                .unwrap()
                .ino();
            // SAFETY: closing the fd the ioctl gave us.
            unsafe { libc::close(fd) };
            ino
        };
        let user_ino = std::fs::metadata(&user.path).unwrap().ino();
        for ns in [
            p.ipc.as_ref().unwrap(),
            p.uts.as_ref().unwrap(),
            &d.path().join("netns"),
        ] {
            assert_eq!(
                owner(ns),
                user_ino,
                "{} is owned by the pod's userns",
                ns.display()
            );
        }
        assert_ne!(
            std::fs::metadata(&user.path).unwrap().ino(),
            std::fs::metadata("/proc/self/ns/user").unwrap().ino()
        );
        // The pinned user namespace keeps its mapping after the holder exited: a process
        // entering it reads it back.
        let path = user.path.clone();
        let text = std::thread::spawn(move || {
            let out = std::process::Command::new("nsenter")
                .arg(format!("--user={}", path.display()))
                .args(["cat", "/proc/self/uid_map"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .join()
        .unwrap();
        assert_eq!(
            text.split_whitespace().collect::<Vec<_>>(),
            ["0", "4000000000", "65536"]
        );
        assert_eq!(user.host_root(), (4_000_000_000, 4_000_000_000));
        p.remove().await.unwrap();
        user.remove().await.unwrap();
        user.remove().await.unwrap();
        assert!(!user.live());
        assert!(!Path::new(&user.path).exists());
        // The netns is the network's to remove.
        let netns = d.path().join("netns");
        assert!(netns.exists());
        crate::sandbox::namespaces::unpin(&netns).unwrap();
        assert!(!netns.exists());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idmapped_binds_and_rootfs_show_host_root_as_the_pods_root() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let base = 4_100_000_000;
        let map = vec![IdMap {
            container_id: 0,
            host_id: base,
            size: 65536,
        }];
        let user = PinnedUserns {
            path: d.path().join("user"),
            netns: None,
            uids: map.clone(),
            gids: map,
        };
        user.create(None, "").await.unwrap();
        let userns = std::fs::File::open(&user.path).unwrap();
        // A volume: on-disk root is the pod's root, seen from the host as the mapping's base.
        let vol = d.path().join("vol");
        std::fs::create_dir_all(&vol).unwrap();
        std::fs::write(vol.join("f"), "x").unwrap();
        let view = d.path().join("views/0");
        crate::idmap::bind_idmapped(&vol, &view, &userns).unwrap();
        assert_eq!(std::fs::metadata(view.join("f")).unwrap().uid(), base);
        // A rootfs: two layers under one snapshotter dir, an upper chowned to the pod's root.
        let snaps = d.path().join("snapshots");
        for dir in ["1/fs", "2/fs", "3/fs", "3/work"] {
            std::fs::create_dir_all(snaps.join(dir)).unwrap();
        }
        std::fs::write(snaps.join("1/fs/bin"), "x").unwrap();
        let opt = |k: &str, v: String| format!("{k}={v}");
        let mount = ferrolet_proto::containerd::types::Mount {
            r#type: "overlay".into(),
            source: "overlay".into(),
            target: String::new(),
            options: vec![
                "index=off".into(),
                opt("workdir", snaps.join("3/work").display().to_string()),
                opt("upperdir", snaps.join("3/fs").display().to_string()),
                opt(
                    "lowerdir",
                    format!(
                        "{}:{}",
                        snaps.join("2/fs").display(),
                        snaps.join("1/fs").display()
                    ),
                ),
            ],
        };
        let rootfs = d.path().join("userns/rootfs");
        crate::idmap::mount_rootfs(
            &[mount],
            &rootfs,
            &d.path().join("userns/layers"),
            &userns,
            user.host_root(),
        )
        .unwrap();
        assert_eq!(std::fs::metadata(rootfs.join("bin")).unwrap().uid(), base);
        assert_eq!(
            std::fs::metadata(&rootfs).unwrap().uid(),
            base,
            "the upper's root"
        );
        // Only the rootfs stays mounted (overlayfs holds its own clones of the layers).
        let mounted = |dir: &Path| {
            std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .lines()
                .filter(|l| {
                    l.split(' ')
                        .nth(4)
                        .is_some_and(|p| Path::new(p).starts_with(dir))
                })
                .count()
        };
        assert_eq!(mounted(&d.path().join("userns")), 1);
        crate::idmap::unmount_under(d.path()).unwrap();
        crate::idmap::unmount_under(d.path()).unwrap();
        assert_eq!(mounted(d.path()), 0);
        assert_eq!(
            std::fs::metadata(vol.join("f")).unwrap().uid(),
            0,
            "the disk is untouched"
        );
        user.remove().await.unwrap();
    }
}
