//! File operations on a cgroup directory, as runc's `cgroups` file helpers and `RemovePath`.
//!
//! On cgroupfs the kernel makes a cgroup's interface files with its directory and drops them
//! with it; files are never created or unlinked there. Elsewhere (a scratch tree in tests, told
//! apart by its statfs magic) we do what the kernel would: a write creates the file, and a
//! removal unlinks the directory's files before its rmdir. Real cgroupfs behaviour is thus
//! unchanged, and the same code runs against a plain directory tree.

use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use nix::sys::statfs::{CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, statfs};

use super::error::{CgroupError, io_error};

/// Lists the processes of a cgroup.
pub(super) const PROCS: &str = "cgroup.procs";

/// Whether `dir` is on a cgroup (v1 or v2) filesystem.
pub(super) fn is_cgroupfs(dir: &Path) -> bool {
    statfs(dir).is_ok_and(|s| {
        let t = s.filesystem_type();
        t == CGROUP_SUPER_MAGIC || t == CGROUP2_SUPER_MAGIC
    })
}

/// Writes `value` to `dir/file` in one write, as the kernel wants a cgroup value.
pub(super) fn write_raw(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    let path = dir.join(file);
    let open = |create| {
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .create(create)
            .open(&path)
    };
    let mut f = match open(false) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && dir.is_dir() && !is_cgroupfs(dir) => {
            open(true)?
        }
        r => r?,
    };
    f.write_all(value.as_bytes())
}

/// Writes `value` to `dir/file` of `cgroup`.
pub(super) fn write(cgroup: &str, dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
    write_raw(dir, file, value).map_err(|source| write_error(cgroup, dir, file, value, source))
}

/// The error of writing `value` to `dir/file`.
pub(super) fn write_error(
    cgroup: &str,
    dir: &Path,
    file: &str,
    value: &str,
    source: io::Error,
) -> CgroupError {
    CgroupError::Write {
        cgroup: cgroup.to_string(),
        path: dir.join(file),
        value: value.to_string(),
        source,
    }
}

/// The content of `dir/file`, None when it does not exist.
pub(super) fn read_opt(dir: &Path, file: &str) -> io::Result<Option<String>> {
    match fs::read_to_string(dir.join(file)) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The content of `dir/file` of `cgroup`.
pub(super) fn read(cgroup: &str, dir: &Path, file: &str) -> Result<String, CgroupError> {
    let path = dir.join(file);
    fs::read_to_string(&path).map_err(|e| io_error(cgroup, "read", path, e))
}

/// `dir/file` as one unsigned number (`max` is u64::MAX, as runc's GetCgroupParamUint).
pub(super) fn read_u64(cgroup: &str, dir: &Path, file: &str) -> Result<u64, CgroupError> {
    let text = read(cgroup, dir, file)?;
    let t = text.trim();
    if t == "max" {
        return Ok(u64::MAX);
    }
    t.parse().map_err(|_| CgroupError::Parse {
        cgroup: cgroup.to_string(),
        path: dir.join(file),
        content: t.to_string(),
    })
}

/// Makes `dir` and its missing parents.
pub(super) fn mkdir_all(cgroup: &str, dir: &Path) -> Result<(), CgroupError> {
    fs::create_dir_all(dir).map_err(|e| io_error(cgroup, "mkdir", dir.to_path_buf(), e))
}

/// Makes `dir` (its parent exists); true when it is new.
pub(super) fn mkdir(cgroup: &str, dir: &Path) -> Result<bool, CgroupError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_error(cgroup, "mkdir", dir.to_path_buf(), e)),
    }
}

/// Removes the cgroup `dir` and its sub-cgroups, deepest first; a missing one is removed
/// already (runc's RemovePath).
pub(super) fn remove_tree(dir: &Path) -> io::Result<()> {
    // The fast path: an empty cgroup goes with one rmdir.
    match fs::remove_dir(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let plain = !is_cgroupfs(dir);
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        } else if plain {
            fs::remove_file(entry.path())?;
        }
    }
    fs::remove_dir(dir).or_else(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            Ok(())
        } else {
            Err(e)
        }
    })
}

/// The processes listed in `dir/cgroup.procs`; none when the file is missing.
pub(super) fn procs(dir: &Path) -> io::Result<Vec<i32>> {
    let Some(text) = read_opt(dir, PROCS)? else {
        return Ok(Vec::new());
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unexpected line in {}: {l:?}", dir.join(PROCS).display()),
                )
            })
        })
        .collect()
}

/// Adds the processes of `dir` and of every cgroup below it to `out`; a cgroup that cannot be
/// read is skipped, as Go's Pids does.
pub(super) fn procs_below(dir: &Path, out: &mut BTreeSet<i32>) {
    let Ok(pids) = procs(dir) else {
        return;
    };
    out.extend(pids);
    for sub in sub_dirs(dir) {
        procs_below(&sub, out);
    }
}

/// The directories right below `dir` (none when it is missing).
pub(super) fn sub_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}
