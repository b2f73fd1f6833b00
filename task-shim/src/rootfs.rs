//! Mounting a task's rootfs (`CreateTaskRequest.rootfs`: the snapshot's mounts) at the
//! bundle's `rootfs`, as containerd's `mount.All`, and unmounting it with the task.

use std::path::{Path, PathBuf};

use ferrolet_proto::containerd::types::Mount;
use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};

/// A rootfs mount that failed.
#[derive(Debug, thiserror::Error)]
#[error("mounting {kind} at {target}: {source}")]
pub struct MountError {
    /// The mount's type.
    pub kind: String,
    /// Where.
    pub target: PathBuf,
    /// The errno.
    pub source: Errno,
}

/// The kernel takes one page of mount data.
const PAGE: usize = 4096;

/// Flags and fs data for `options`, as containerd's `parseMountOptions`.
fn parse_options(options: &[String]) -> (MsFlags, MsFlags, String) {
    // (option, clears instead of sets, flag)
    const FLAGS: &[(&str, bool, MsFlags)] = &[
        ("async", true, MsFlags::MS_SYNCHRONOUS),
        ("atime", true, MsFlags::MS_NOATIME),
        ("bind", false, MsFlags::MS_BIND),
        ("defaults", false, MsFlags::empty()),
        ("dev", true, MsFlags::MS_NODEV),
        ("diratime", true, MsFlags::MS_NODIRATIME),
        ("dirsync", false, MsFlags::MS_DIRSYNC),
        ("exec", true, MsFlags::MS_NOEXEC),
        ("mand", false, MsFlags::MS_MANDLOCK),
        ("noatime", false, MsFlags::MS_NOATIME),
        ("nodev", false, MsFlags::MS_NODEV),
        ("nodiratime", false, MsFlags::MS_NODIRATIME),
        ("noexec", false, MsFlags::MS_NOEXEC),
        ("nomand", true, MsFlags::MS_MANDLOCK),
        ("norelatime", true, MsFlags::MS_RELATIME),
        ("nostrictatime", true, MsFlags::MS_STRICTATIME),
        ("nosuid", false, MsFlags::MS_NOSUID),
        ("rbind", false, MsFlags::MS_BIND.union(MsFlags::MS_REC)),
        ("relatime", false, MsFlags::MS_RELATIME),
        ("remount", false, MsFlags::MS_REMOUNT),
        ("ro", false, MsFlags::MS_RDONLY),
        ("rw", true, MsFlags::MS_RDONLY),
        ("strictatime", false, MsFlags::MS_STRICTATIME),
        ("suid", true, MsFlags::MS_NOSUID),
        ("sync", false, MsFlags::MS_SYNCHRONOUS),
    ];
    const PROPAGATION: &[(&str, MsFlags)] = &[
        ("private", MsFlags::MS_PRIVATE),
        ("rprivate", MsFlags::MS_PRIVATE.union(MsFlags::MS_REC)),
        ("shared", MsFlags::MS_SHARED),
        ("rshared", MsFlags::MS_SHARED.union(MsFlags::MS_REC)),
        ("slave", MsFlags::MS_SLAVE),
        ("rslave", MsFlags::MS_SLAVE.union(MsFlags::MS_REC)),
        ("unbindable", MsFlags::MS_UNBINDABLE),
        ("runbindable", MsFlags::MS_UNBINDABLE.union(MsFlags::MS_REC)),
    ];
    let mut flags = MsFlags::empty();
    let mut propagation = MsFlags::empty();
    let mut data = Vec::new();
    for o in options {
        if let Some((_, clear, f)) = FLAGS.iter().find(|(n, _, _)| n == o) {
            if *clear {
                flags &= !*f;
            } else {
                flags |= *f;
            }
        } else if let Some((_, f)) = PROPAGATION.iter().find(|(n, _)| n == o) {
            propagation |= *f;
        } else {
            data.push(o.as_str());
        }
    }
    (flags, propagation, data.join(","))
}

/// Mounts each of `mounts` at `target`, in order; on a failure unmounts what was mounted.
pub fn mount_all(mounts: &[Mount], target: &Path) -> Result<(), MountError> {
    for m in mounts {
        if let Err(e) = mount_one(m, target) {
            let _ = unmount_all(target);
            return Err(e);
        }
    }
    Ok(())
}

fn mount_one(m: &Mount, target: &Path) -> Result<(), MountError> {
    let (flags, propagation, mut data) = parse_options(&m.options);
    let err = |source| MountError {
        kind: m.r#type.clone(),
        target: target.to_path_buf(),
        source,
    };
    let kind = if m.r#type.is_empty() || flags.contains(MsFlags::MS_BIND) {
        None
    } else {
        Some(m.r#type.as_str())
    };
    // Long overlay lowerdir lists: mount from their common parent with relative paths, as
    // containerd does, so the data fits the kernel's page.
    let mut chdir_back = None;
    if m.r#type == "overlay" && data.len() >= PAGE {
        let (dir, relative) = compact_lowerdirs(&data).ok_or_else(|| err(Errno::E2BIG))?;
        chdir_back = Some(std::env::current_dir().map_err(|_| err(Errno::ENOENT))?);
        std::env::set_current_dir(&dir).map_err(|_| err(Errno::ENOENT))?;
        data = relative;
    }
    let data_arg = (!data.is_empty()).then_some(data.as_str());
    let result = nix::mount::mount(Some(m.source.as_str()), target, kind, flags, data_arg);
    if let Some(back) = chdir_back {
        let _ = std::env::set_current_dir(back);
    }
    result.map_err(err)?;
    if !propagation.is_empty() {
        nix::mount::mount(
            None::<&str>,
            target,
            None::<&str>,
            propagation,
            None::<&str>,
        )
        .map_err(err)?;
    }
    // A bind mount ignores MS_RDONLY until remounted.
    if flags.contains(MsFlags::MS_BIND | MsFlags::MS_RDONLY) {
        nix::mount::mount(
            None::<&str>,
            target,
            None::<&str>,
            flags | MsFlags::MS_REMOUNT,
            None::<&str>,
        )
        .map_err(err)?;
    }
    Ok(())
}

/// The common parent of an overlay's lowerdirs and the data with them relative to it.
fn compact_lowerdirs(data: &str) -> Option<(PathBuf, String)> {
    let mut parts: Vec<String> = data.split(',').map(str::to_string).collect();
    let idx = parts.iter().position(|p| p.starts_with("lowerdir="))?;
    let lowers: Vec<&str> = parts[idx]["lowerdir=".len()..].split(':').collect();
    let first = Path::new(lowers.first()?);
    // Snapshot dirs are <root>/snapshots/<n>/fs: their common parent is <root>/snapshots.
    let common = first.parent()?.parent()?.to_path_buf();
    let relative: Option<Vec<String>> = lowers
        .iter()
        .map(|l| {
            Path::new(l)
                .strip_prefix(&common)
                .ok()
                .map(|p| p.display().to_string())
        })
        .collect();
    parts[idx] = format!("lowerdir={}", relative?.join(":"));
    let joined = parts.join(",");
    (joined.len() < PAGE).then_some((common, joined))
}

/// Unmounts everything at `target` (stacked mounts too), lazily.
pub fn unmount_all(target: &Path) -> Result<(), Errno> {
    loop {
        match nix::mount::umount2(target, MntFlags::MNT_DETACH) {
            Ok(()) => {}
            Err(Errno::EINVAL | Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_split_into_flags_propagation_and_data() {
        let (f, p, d) = parse_options(&opts(&[
            "rbind",
            "ro",
            "nosuid",
            "rprivate",
            "index=off",
            "lowerdir=/a:/b",
        ]));
        assert!(f.contains(
            MsFlags::MS_BIND | MsFlags::MS_REC | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID
        ));
        assert_eq!(p, MsFlags::MS_PRIVATE | MsFlags::MS_REC);
        assert_eq!(d, "index=off,lowerdir=/a:/b");
        let (f, _, _) = parse_options(&opts(&["ro", "rw"]));
        assert!(!f.contains(MsFlags::MS_RDONLY), "later rw clears ro");
    }

    #[test]
    fn long_lowerdirs_become_relative_to_the_snapshots_dir() {
        let lowers: Vec<String> = (0..200)
            .map(|i| {
                format!(
                    "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/{i}/fs"
                )
            })
            .collect();
        let data = format!(
            "index=off,workdir=/w,upperdir=/u,lowerdir={}",
            lowers.join(":")
        );
        assert!(data.len() > PAGE);
        let (dir, rel) = compact_lowerdirs(&data).unwrap();
        assert_eq!(
            dir,
            Path::new("/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots")
        );
        assert!(rel.contains("lowerdir=0/fs:1/fs:"), "{rel}");
        assert!(rel.starts_with("index=off,workdir=/w,upperdir=/u,"));
    }
}
