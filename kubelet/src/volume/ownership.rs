//! A volume given to the pod's `fsGroup` (Go's `SetVolumeOwnership`): every file and directory
//! group-owned by it and group-readable (and writable unless the volume is read-only),
//! directories setgid so new files inherit the group. With `fsGroupChangePolicy:
//! OnRootMismatch` the walk is skipped when the volume's root already looks done, which is
//! what makes large volumes start fast.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use super::VolumeError;

/// Group read-write (Go's `rwMask`).
const RW_MASK: u32 = 0o660;
/// Group read (Go's `roMask`).
const RO_MASK: u32 = 0o440;
/// Group and owner execute, for directories (Go's `execMask`).
const EXEC_MASK: u32 = 0o110;
const SETGID: u32 = 0o2000;
/// After this long a walk is reported as slow, as Go warns.
const SLOW_WALK: Duration = Duration::from_secs(30);

/// The pod's `fsGroupChangePolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChangePolicy {
    /// Walk the whole volume every time (the API's default).
    #[default]
    Always,
    /// Walk only when the root's group or permissions are not the expected ones.
    OnRootMismatch,
}

impl ChangePolicy {
    /// The policy of a pod's security context value (`None`/unknown → `Always`, as Go).
    pub fn from_api(value: Option<&str>) -> Self {
        match value {
            Some("OnRootMismatch") => ChangePolicy::OnRootMismatch,
            _ => ChangePolicy::Always,
        }
    }
}

/// What the walk did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No `fsGroup`, or `OnRootMismatch` found the root already right.
    Skipped,
    /// This many entries were visited.
    Walked(usize),
}

/// Gives `dir` (a volume's mount point, blocking) to `fs_group` by `policy`. Individual
/// entries that cannot be changed are logged and passed over, as Go does; only an unreadable
/// directory fails the walk.
pub fn set_volume_ownership(
    volume: &str,
    dir: &Path,
    fs_group: Option<u32>,
    policy: ChangePolicy,
    read_only: bool,
) -> Result<Outcome, VolumeError> {
    let Some(gid) = fs_group else {
        return Ok(Outcome::Skipped);
    };
    if policy == ChangePolicy::OnRootMismatch && !requires_change(dir, gid, read_only) {
        tracing::debug!(volume, path = %dir.display(), "fsGroup: the volume's root is already right; not walking it");
        return Ok(Outcome::Skipped);
    }
    let started = Instant::now();
    let mut visited = 0;
    let mut warned = false;
    let root_dev = std::fs::symlink_metadata(dir)
        .map_err(|e| VolumeError::io(volume, dir, e))?
        .dev();
    walk(volume, dir, root_dev, &mut |path, meta| {
        visited += 1;
        change(path, meta, gid, read_only);
        if !warned && started.elapsed() > SLOW_WALK {
            warned = true;
            tracing::warn!(volume, path = %dir.display(), "setting the volume's ownership for fsGroup is slow: the volume has many files (fsGroupChangePolicy: OnRootMismatch avoids it)");
        }
    })?;
    Ok(Outcome::Walked(visited))
}

/// Go's `requiresPermissionChange`.
fn requires_change(dir: &Path, gid: u32, read_only: bool) -> bool {
    let Ok(meta) = std::fs::metadata(dir) else {
        return true;
    };
    if meta.gid() != gid {
        return true;
    }
    let mut wanted = if read_only { RO_MASK } else { RW_MASK };
    if meta.is_dir() {
        wanted |= SETGID | EXEC_MASK;
    }
    meta.mode() & wanted != wanted
}

/// Go's `changeFilePermission`: symlinks get the group only (a chmod would reach their
/// target).
fn change(path: &Path, meta: &std::fs::Metadata, gid: u32, read_only: bool) {
    if let Err(e) = std::os::unix::fs::lchown(path, None, Some(gid)) {
        tracing::warn!(path = %path.display(), error = %e, "fsGroup: lchown failed");
    }
    if meta.file_type().is_symlink() {
        return;
    }
    let mut mask = if read_only { RO_MASK } else { RW_MASK };
    if meta.is_dir() {
        mask |= SETGID | EXEC_MASK;
    }
    let mode = (meta.mode() & 0o7777) | mask;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        tracing::warn!(path = %path.display(), error = %e, "fsGroup: chmod failed");
    }
}

/// Children first, the directory itself last (Go's `walkDeep`); never follows symlinks nor
/// crosses into another filesystem mounted inside the volume.
fn walk(
    volume: &str,
    dir: &Path,
    dev: u64,
    visit: &mut dyn FnMut(&Path, &std::fs::Metadata),
) -> Result<(), VolumeError> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| VolumeError::io(volume, dir, e))?;
    if meta.is_dir() && meta.dev() == dev {
        let entries = std::fs::read_dir(dir).map_err(|e| VolumeError::io(volume, dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| VolumeError::io(volume, dir, e))?;
            let path = entry.path();
            let child =
                std::fs::symlink_metadata(&path).map_err(|e| VolumeError::io(volume, &path, e))?;
            if child.is_dir() {
                walk(volume, &path, dev, visit)?;
            } else {
                visit(&path, &child);
            }
        }
    }
    visit(dir, &meta);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn mode(p: &Path) -> (u32, u32) {
        let m = std::fs::symlink_metadata(p).unwrap();
        (m.gid(), m.mode() & 0o7777)
    }

    #[test]
    fn walks_everything_and_on_root_mismatch_skips_a_done_root() {
        let root = tempfile::tempdir().unwrap();
        let v = root.path().join("v");
        std::fs::create_dir_all(v.join("sub")).unwrap();
        std::fs::write(v.join("sub/f"), "x").unwrap();
        std::fs::set_permissions(v.join("sub/f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", v.join("link")).unwrap();
        let passwd = mode(Path::new("/etc/passwd"));

        assert_eq!(
            set_volume_ownership("v", &v, None, ChangePolicy::Always, false).unwrap(),
            Outcome::Skipped
        );
        let out = set_volume_ownership("v", &v, Some(3456), ChangePolicy::Always, false).unwrap();
        assert_eq!(out, Outcome::Walked(4));
        assert_eq!(mode(&v), (3456, 0o2770));
        assert_eq!(mode(&v.join("sub")), (3456, 0o2775));
        assert_eq!(mode(&v.join("sub/f")), (3456, 0o660));
        assert_eq!(mode(&v.join("link")).0, 3456);
        // The link's target is never changed.
        assert_eq!(mode(Path::new("/etc/passwd")), passwd);

        // The root is right: OnRootMismatch does not look further, Always does.
        std::os::unix::fs::lchown(v.join("sub/f"), None, Some(0)).unwrap();
        let skipped =
            set_volume_ownership("v", &v, Some(3456), ChangePolicy::OnRootMismatch, false);
        assert_eq!(skipped.unwrap(), Outcome::Skipped);
        assert_eq!(mode(&v.join("sub/f")).0, 0);
        // Another group: the root mismatches, so the walk runs.
        let walked = set_volume_ownership("v", &v, Some(4567), ChangePolicy::OnRootMismatch, false);
        assert_eq!(walked.unwrap(), Outcome::Walked(4));
        assert_eq!(mode(&v.join("sub/f")), (4567, 0o660));
        // Read-only volumes are made group-readable only.
        std::fs::write(v.join("g"), "").unwrap();
        std::fs::set_permissions(v.join("g"), std::fs::Permissions::from_mode(0o600)).unwrap();
        set_volume_ownership("v", &v, Some(4567), ChangePolicy::Always, true).unwrap();
        assert_eq!(mode(&v.join("g")), (4567, 0o640));
        assert_eq!(
            ChangePolicy::from_api(Some("OnRootMismatch")),
            ChangePolicy::OnRootMismatch
        );
        assert_eq!(ChangePolicy::from_api(Some("Always")), ChangePolicy::Always);
        assert_eq!(ChangePolicy::from_api(None), ChangePolicy::Always);
    }
}
