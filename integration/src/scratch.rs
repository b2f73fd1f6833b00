//! Scratch directories for tests, and the mount-table helpers they need to clean up.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Where every test's scratch space lives, so that a crashed run is easy to find and clean.
pub const SCRATCH_ROOT: &str = "/tmp/ferrolet-it";

/// A directory for one test; on drop, whatever is mounted under it is unmounted and the
/// directory is removed.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Creates `/tmp/ferrolet-it/<name>-<pid>-<n>`.
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = Path::new(SCRATCH_ROOT).join(format!("{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        if let Err(e) = std::fs::create_dir_all(&path) {
            panic!("creating scratch dir {}: {e}", path.display());
        }
        Self { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove_tree(&self.path);
    }
}

/// Unmounts everything under `dir`, then removes it; errors are reported, not raised, since
/// this runs during teardown.
pub fn remove_tree(dir: &Path) {
    if let Err(e) = unmount_all_under(dir) {
        eprintln!("scratch: unmounting under {}: {e}", dir.display());
    }
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("scratch: removing {}: {e}", dir.display());
    }
}

/// Mount points at or under `dir`, from this process's mount table.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mount_path(p)))
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// Unmounts every mount at or under `dir`, deepest first; lazily, so a busy mount cannot
/// make teardown hang.
pub fn unmount_all_under(dir: &Path) -> nix::Result<()> {
    let mut mounts = mounts_under(dir);
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    mounts.dedup();
    let mut result = Ok(());
    for m in mounts {
        match nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => result = Err(e),
        }
    }
    result
}

/// The kernel writes space, tab, newline and backslash in mount paths as octal escapes.
fn unescape_mount_path(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_octal_sequences() {
        assert_eq!(unescape_mount_path(r"/a\040b\134c"), r"/a b\c");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
        assert_eq!(unescape_mount_path(r"/end\04"), r"/end\04");
    }
}
