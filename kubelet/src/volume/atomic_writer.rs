//! The Go kubelet's atomic writer (`pkg/volume/util/atomic_writer.go`): projects a set of files
//! into a volume directory so that a reader never sees a half-written update.
//!
//! The real files live in a timestamped directory (`..2026_01_02_15_04_05.123456789`); the
//! `..data` symlink points at it and is swapped with one `rename(2)`; each user-visible
//! top-level entry is a symlink `<name> -> ..data/<name>`. A reader that resolves `..data` once
//! (or opens one file) sees either the old or the new version, never a mix. Names starting
//! with `..` are reserved for the writer.
//!
//! The writer is not reentrant for one directory (the volume manager serializes setups of a
//! volume) and blocks (callers use `spawn_blocking`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The symlink to the current timestamped directory.
pub const DATA_DIR: &str = "..data";
/// The symlink made beside `..data` and renamed over it.
const NEW_DATA_DIR: &str = "..data_tmp";
/// Go's limits on a payload path.
const MAX_FILE_NAME_LENGTH: usize = 255;
const MAX_PATH_LENGTH: usize = 4096;
/// The timestamped directory's mode: group and others may walk to the files.
const TS_DIR_MODE: u32 = 0o755;

/// One file of a payload: its bytes, mode and (for service-account tokens) owner.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct FileProjection {
    /// The file's content.
    pub data: Vec<u8>,
    /// Its permission bits.
    pub mode: u32,
    /// The owner to give it, when the pod's containers share one `runAsUser`.
    pub fs_user: Option<i64>,
}

impl std::fmt::Debug for FileProjection {
    // Payloads carry secrets: never print their content.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileProjection")
            .field("data", &format_args!("<{} bytes>", self.data.len()))
            .field("mode", &format_args!("{:#o}", self.mode))
            .field("fs_user", &self.fs_user)
            .finish()
    }
}

/// Relative path in the volume → file.
pub type Payload = BTreeMap<String, FileProjection>;

/// Why a payload could not be projected.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A payload path the writer refuses (Go's `invalid path: ...` messages).
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// A filesystem operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path operated on.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What the writer did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The files on disk already matched the payload: nothing was rewritten.
    Unchanged,
    /// A new timestamped directory was written and published.
    Written,
}

/// Projects `payload` into `target_dir` (which must exist). With `fs_group`, every file and
/// directory of the new version is given to that group with group read (Go's
/// `SetVolumeOwnership` for read-only volumes: `| 0440`, directories also `| 0110` and setgid),
/// and so is `target_dir` itself. Nothing is rewritten when the current version already has
/// exactly these paths, contents, modes and owners.
pub fn write(
    target_dir: &Path,
    payload: &Payload,
    fs_group: Option<u32>,
) -> Result<WriteOutcome, WriteError> {
    let payload = validate_payload(payload)?;
    let data_dir = target_dir.join(DATA_DIR);
    let old_ts = match fs::read_link(&data_dir) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&data_dir)(e)),
    };
    // A crash can leave a `..data_tmp` or a timestamped directory that was never published.
    remove_stale(target_dir, old_ts.as_deref())?;

    let old_ts_path = old_ts.as_ref().map(|t| target_dir.join(t));
    let mut to_remove = BTreeSet::new();
    if let Some(old) = &old_ts_path {
        let existing = walk_relative(old)?;
        to_remove = existing
            .difference(&with_ancestors(payload.keys()))
            .cloned()
            .collect();
        if to_remove.is_empty() && !differs(&payload, old, fs_group)? {
            // A crash between the swap and the visible links could have left some missing.
            create_user_visible(target_dir, &payload)?;
            return Ok(WriteOutcome::Unchanged);
        }
    }

    let ts_dir = new_timestamp_dir(target_dir)?;
    let published = (|| {
        write_files(&ts_dir, &payload)?;
        if let Some(gid) = fs_group {
            set_group_ownership(target_dir, false, gid)?;
            set_group_ownership(&ts_dir, true, gid)?;
        }
        let tmp_link = target_dir.join(NEW_DATA_DIR);
        let ts_name = ts_dir.file_name().map(PathBuf::from).unwrap_or_default();
        std::os::unix::fs::symlink(&ts_name, &tmp_link).map_err(io_err(&tmp_link))?;
        fs::rename(&tmp_link, &data_dir).map_err(|e| {
            let _ = fs::remove_file(&tmp_link);
            io_err(&data_dir)(e)
        })
    })();
    if let Err(e) = published {
        let _ = fs::remove_dir_all(&ts_dir);
        return Err(e);
    }

    create_user_visible(target_dir, &payload)?;
    for p in to_remove.iter().filter(|p| !p.contains('/')) {
        let visible = target_dir.join(p);
        match fs::remove_file(&visible) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&visible)(e)),
        }
    }
    if let Some(old) = old_ts_path {
        match fs::remove_dir_all(&old) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&old)(e)),
        }
    }
    Ok(WriteOutcome::Written)
}

/// The payload with its paths cleaned (`./a//b` → `a/b`), refusing what Go refuses: empty,
/// absolute, too long, a `..` element or a first element starting with `..`. Also a path that
/// is both a file and another's directory.
fn validate_payload(payload: &Payload) -> Result<BTreeMap<String, &FileProjection>, WriteError> {
    let mut clean = BTreeMap::new();
    for (path, file) in payload {
        clean.insert(validate_path(path)?, file);
    }
    for path in clean.keys() {
        let mut parent = path.as_str();
        while let Some((p, _)) = parent.rsplit_once('/') {
            if clean.contains_key(p) {
                return Err(WriteError::InvalidPath(format!(
                    "{p} is both a file and the directory of {path}"
                )));
            }
            parent = p;
        }
    }
    Ok(clean)
}

/// One payload path, cleaned; Go's `validatePath` messages.
pub fn validate_path(path: &str) -> Result<String, WriteError> {
    let invalid = |m: String| Err(WriteError::InvalidPath(m));
    if path.is_empty() {
        return invalid(format!("must not be empty: {path:?}"));
    }
    if path.starts_with('/') {
        return invalid(format!("must be relative path: {path}"));
    }
    if path.len() > MAX_PATH_LENGTH {
        return invalid(format!(
            "must be less than or equal to {MAX_PATH_LENGTH} characters"
        ));
    }
    if path.contains('\0') {
        return invalid(format!("must not contain a NUL byte: {path:?}"));
    }
    let items: Vec<&str> = path.split('/').collect();
    for item in &items {
        if *item == ".." {
            return invalid(format!("must not contain '..': {path}"));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return invalid(format!(
                "filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"
            ));
        }
    }
    let parts: Vec<&str> = items
        .into_iter()
        .filter(|i| !i.is_empty() && *i != ".")
        .collect();
    match parts.first() {
        None => invalid(format!("must not be empty: {path:?}")),
        Some(first) if first.starts_with("..") => {
            invalid(format!("must not start with '..': {path}"))
        }
        Some(_) => Ok(parts.join("/")),
    }
}

/// Every path and its ancestor directories (`a/b/c` → `a`, `a/b`, `a/b/c`).
fn with_ancestors<'a>(paths: impl Iterator<Item = &'a String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for p in paths {
        let mut cur = p.as_str();
        out.insert(cur.to_string());
        while let Some((parent, _)) = cur.rsplit_once('/') {
            out.insert(parent.to_string());
            cur = parent;
        }
    }
    out
}

/// The paths under `dir` relative to it (files, directories, anything), not following links.
fn walk_relative(dir: &Path) -> Result<BTreeSet<String>, WriteError> {
    let mut out = BTreeSet::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((abs, rel)) = stack.pop() {
        let entries = match fs::read_dir(&abs) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound && rel.is_empty() => return Ok(out),
            Err(e) => return Err(io_err(&abs)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_err(&abs))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child_rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let is_dir = entry.file_type().map_err(io_err(&abs))?.is_dir();
            if is_dir {
                stack.push((entry.path(), child_rel.clone()));
            }
            out.insert(child_rel);
        }
    }
    Ok(out)
}

/// Whether any payload file is missing from `old_ts` or differs in content, mode or owner.
fn differs(
    payload: &BTreeMap<String, &FileProjection>,
    old_ts: &Path,
    fs_group: Option<u32>,
) -> Result<bool, WriteError> {
    for (path, file) in payload {
        let full = old_ts.join(path);
        let meta = match fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(io_err(&full)(e)),
        };
        let want_mode = file_mode(file, fs_group);
        let owner_differs = file.fs_user.is_some_and(|u| i64::from(meta.uid()) != u)
            || fs_group.is_some_and(|g| meta.gid() != g);
        if !meta.is_file()
            || meta.mode() & 0o7777 != want_mode
            || owner_differs
            || meta.len() != file.data.len() as u64
        {
            return Ok(true);
        }
        if fs::read(&full).map_err(io_err(&full))? != file.data {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The mode a file ends up with: its own, plus group read under an fsGroup.
fn file_mode(file: &FileProjection, fs_group: Option<u32>) -> u32 {
    let mode = file.mode & 0o7777;
    if fs_group.is_some() {
        mode | 0o440
    } else {
        mode
    }
}

/// Removes a leftover `..data_tmp` and timestamped directories `..data` does not point at.
fn remove_stale(target_dir: &Path, current: Option<&Path>) -> Result<(), WriteError> {
    let entries = fs::read_dir(target_dir).map_err(io_err(target_dir))?;
    for entry in entries {
        let entry = entry.map_err(io_err(target_dir))?;
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        let stale = name_str.starts_with(NEW_DATA_DIR)
            || (is_timestamp_dir_name(&name_str) && current != Some(Path::new(&name)));
        if !stale {
            continue;
        }
        let path = entry.path();
        let is_dir = entry.file_type().map_err(io_err(&path))?.is_dir();
        let removed = if is_dir {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        match removed {
            Ok(()) => {
                tracing::debug!(path = %path.display(), "removed a stale atomic-writer entry")
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
    Ok(())
}

/// `..YYYY_MM_DD_HH_MM_SS.<digits>`.
fn is_timestamp_dir_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("..") else {
        return false;
    };
    let Some((stamp, suffix)) = rest.split_once('.') else {
        return false;
    };
    let fields: Vec<&str> = stamp.split('_').collect();
    fields.len() == 6
        && fields
            .iter()
            .all(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        && !suffix.is_empty()
        && suffix.bytes().all(|b| b.is_ascii_digit())
}

/// Makes a new, unique `..<UTC timestamp>.<n>` directory with mode 0755 whatever the umask.
fn new_timestamp_dir(target_dir: &Path) -> Result<PathBuf, WriteError> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let now = jiff::Timestamp::now();
    let stamp = now.strftime("%Y_%m_%d_%H_%M_%S").to_string();
    let base = now.subsec_nanosecond().unsigned_abs();
    loop {
        let n = base.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed));
        let dir = target_dir.join(format!("..{stamp}.{n:09}"));
        match fs::create_dir(&dir) {
            Ok(()) => {
                fs::set_permissions(&dir, fs::Permissions::from_mode(TS_DIR_MODE))
                    .map_err(io_err(&dir))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(&dir)(e)),
        }
    }
}

/// Writes every file under `dir` with its mode (not masked by the umask) and owner.
fn write_files(dir: &Path, payload: &BTreeMap<String, &FileProjection>) -> Result<(), WriteError> {
    for (path, file) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent().filter(|p| *p != dir) {
            make_dirs(dir, parent)?;
        }
        let mode = file.mode & 0o7777;
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(mode)
            .open(&full)
            .map_err(io_err(&full))?;
        f.write_all(&file.data).map_err(io_err(&full))?;
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(io_err(&full))?;
        if let Some(uid) = file.fs_user {
            let uid = u32::try_from(uid).map_err(|_| {
                io_err(&full)(std::io::Error::new(
                    ErrorKind::InvalidInput,
                    format!("owner {uid} is out of range"),
                ))
            })?;
            std::os::unix::fs::fchown(&f, Some(uid), None).map_err(io_err(&full))?;
        }
    }
    Ok(())
}

/// Makes `path` and its parents below `base` with mode 0755.
fn make_dirs(base: &Path, path: &Path) -> Result<(), WriteError> {
    let Ok(rel) = path.strip_prefix(base) else {
        return Ok(());
    };
    let mut cur = base.to_path_buf();
    for c in rel.components() {
        cur.push(c);
        match fs::create_dir(&cur) {
            Ok(()) => fs::set_permissions(&cur, fs::Permissions::from_mode(TS_DIR_MODE))
                .map_err(io_err(&cur))?,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(&cur)(e)),
        }
    }
    Ok(())
}

/// Go's `SetVolumeOwnership` for a read-only volume over `path` (and, with `recursive`,
/// everything below it): group `gid`, group read on files, group read and search plus setgid
/// on directories. Symlinks get the group only.
fn set_group_ownership(path: &Path, recursive: bool, gid: u32) -> Result<(), WriteError> {
    let meta = fs::symlink_metadata(path).map_err(io_err(path))?;
    std::os::unix::fs::lchown(path, None, Some(gid)).map_err(io_err(path))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mut mode = meta.mode() & 0o7777 | 0o440;
    if meta.is_dir() {
        mode |= 0o110 | 0o2000;
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_err(path))?;
    if recursive && meta.is_dir() {
        for entry in fs::read_dir(path).map_err(io_err(path))? {
            let entry = entry.map_err(io_err(path))?;
            set_group_ownership(&entry.path(), true, gid)?;
        }
    }
    Ok(())
}

/// Links each top-level payload entry as `<name> -> ..data/<name>` if it is not already.
fn create_user_visible(
    target_dir: &Path,
    payload: &BTreeMap<String, &FileProjection>,
) -> Result<(), WriteError> {
    let tops: BTreeSet<&str> = payload
        .keys()
        .map(|p| p.split_once('/').map_or(p.as_str(), |(top, _)| top))
        .collect();
    for top in tops {
        let visible = target_dir.join(top);
        let want = Path::new(DATA_DIR).join(top);
        match fs::read_link(&visible) {
            Ok(t) if t == want => continue,
            // A link elsewhere is replaced in one rename; anything else is left as Go leaves it.
            Ok(_) => {
                let tmp = target_dir.join(format!("{NEW_DATA_DIR}.{top}"));
                let _ = fs::remove_file(&tmp);
                std::os::unix::fs::symlink(&want, &tmp).map_err(io_err(&tmp))?;
                fs::rename(&tmp, &visible).map_err(io_err(&visible))?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::os::unix::fs::symlink(&want, &visible).map_err(io_err(&visible))?;
            }
            Err(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use super::*;

    fn payload(files: &[(&str, &str, u32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    FileProjection {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                        fs_user: None,
                    },
                )
            })
            .collect()
    }

    fn data_target(dir: &Path) -> PathBuf {
        fs::read_link(dir.join(DATA_DIR)).unwrap()
    }

    /// The entries of `dir`, sorted.
    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn first_write_lays_out_links_and_modes() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let p = payload(&[
            ("a", "A", 0o644),
            ("sub/b", "B", 0o400),
            ("./c//d", "D", 0o600),
        ]);
        assert_eq!(write(dir, &p, None).unwrap(), WriteOutcome::Written);
        let ts = data_target(dir);
        let ts_name = ts.to_string_lossy().into_owned();
        assert!(is_timestamp_dir_name(&ts_name), "{ts_name}");
        assert_eq!(entries(dir), [ts_name.as_str(), "..data", "a", "c", "sub"]);
        for top in ["a", "c", "sub"] {
            assert_eq!(
                fs::read_link(dir.join(top)).unwrap(),
                Path::new("..data").join(top)
            );
        }
        assert_eq!(fs::read_to_string(dir.join("sub/b")).unwrap(), "B");
        assert_eq!(fs::read_to_string(dir.join("c/d")).unwrap(), "D");
        let mode = |p: &str| fs::metadata(dir.join(p)).unwrap().mode() & 0o7777;
        assert_eq!(mode("a"), 0o644);
        assert_eq!(mode("sub/b"), 0o400);
        assert_eq!(mode("c/d"), 0o600);
        assert_eq!(mode(&ts_name), 0o755);
    }

    #[test]
    fn changes_publish_a_new_version_and_unchanged_touches_nothing() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let v1 = payload(&[
            ("a", "one", 0o644),
            ("dir/b", "one", 0o644),
            ("gone", "x", 0o644),
        ]);
        write(dir, &v1, None).unwrap();
        let ts1 = data_target(dir);
        let inode = |p: &str| fs::metadata(dir.join(p)).unwrap().ino();
        let a_inode = inode("a");

        // Unchanged: same version, same files (nothing rewritten).
        assert_eq!(write(dir, &v1, None).unwrap(), WriteOutcome::Unchanged);
        assert_eq!(data_target(dir), ts1);
        assert_eq!(inode("a"), a_inode);

        // New content and a removed path.
        let v2 = payload(&[("a", "two", 0o644), ("dir/b", "two", 0o644)]);
        assert_eq!(write(dir, &v2, None).unwrap(), WriteOutcome::Written);
        let ts2 = data_target(dir);
        assert_ne!(ts1, ts2);
        assert!(!dir.join(&ts1).exists(), "old version removed");
        assert_eq!(entries(dir), [ts2.to_str().unwrap(), "..data", "a", "dir"]);
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "two");
        assert_eq!(fs::read_to_string(dir.join("dir/b")).unwrap(), "two");

        // A mode change alone is a change.
        let v3 = payload(&[("a", "two", 0o600), ("dir/b", "two", 0o644)]);
        assert_eq!(write(dir, &v3, None).unwrap(), WriteOutcome::Written);
        assert_eq!(fs::metadata(dir.join("a")).unwrap().mode() & 0o777, 0o600);

        // A path dropped from inside a directory that stays.
        let v4 = payload(&[("a", "two", 0o600), ("dir/c", "c", 0o644)]);
        write(dir, &v4, None).unwrap();
        assert!(!dir.join("dir/b").exists());
        assert!(dir.join("dir/c").exists());

        // Emptied.
        write(dir, &Payload::new(), None).unwrap();
        assert_eq!(entries(dir), [data_target(dir).to_str().unwrap(), "..data"]);
    }

    #[test]
    fn missing_visible_links_and_stale_versions_are_repaired_without_rewriting() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let p = payload(&[("a", "A", 0o644)]);
        write(dir, &p, None).unwrap();
        let ts = data_target(dir);
        // As if we had crashed after the swap, and during an earlier write.
        fs::remove_file(dir.join("a")).unwrap();
        fs::create_dir(dir.join("..2020_01_01_00_00_00.1")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.join(NEW_DATA_DIR)).unwrap();
        assert_eq!(write(dir, &p, None).unwrap(), WriteOutcome::Unchanged);
        assert_eq!(data_target(dir), ts);
        assert_eq!(entries(dir), [ts.to_str().unwrap(), "..data", "a"]);
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "A");
    }

    #[test]
    fn fs_group_gives_group_read_and_is_stable() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let p = payload(&[("token", "t", 0o600), ("d/x", "x", 0o400)]);
        assert_eq!(write(dir, &p, Some(1234)).unwrap(), WriteOutcome::Written);
        let meta = |p: &str| fs::metadata(dir.join(p)).unwrap();
        assert_eq!(meta("token").mode() & 0o7777, 0o640);
        assert_eq!(meta("token").gid(), 1234);
        assert_eq!(meta("d/x").mode() & 0o7777, 0o440);
        assert_eq!(meta("d").mode() & 0o7777, 0o2755);
        assert_eq!(meta("d").gid(), 1234);
        assert_eq!(meta(".").gid(), 1234);
        assert_ne!(meta(".").mode() & 0o2000, 0);
        assert_eq!(write(dir, &p, Some(1234)).unwrap(), WriteOutcome::Unchanged);
        // A new group is a change.
        assert_eq!(write(dir, &p, Some(99)).unwrap(), WriteOutcome::Written);
        assert_eq!(meta("token").gid(), 99);
    }

    #[test]
    fn owners_are_set_and_compared() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let mut p = payload(&[("token", "t", 0o600)]);
        p.get_mut("token").unwrap().fs_user = Some(4321);
        write(dir, &p, None).unwrap();
        assert_eq!(fs::metadata(dir.join("token")).unwrap().uid(), 4321);
        assert_eq!(write(dir, &p, None).unwrap(), WriteOutcome::Unchanged);
        p.get_mut("token").unwrap().fs_user = Some(4322);
        assert_eq!(write(dir, &p, None).unwrap(), WriteOutcome::Written);
        assert_eq!(fs::metadata(dir.join("token")).unwrap().uid(), 4322);
    }

    #[test]
    fn bad_paths_are_refused_and_nothing_is_written() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let long = "x".repeat(256);
        for (bad, want) in [
            ("", "invalid path: must not be empty: \"\""),
            (
                "/etc/passwd",
                "invalid path: must be relative path: /etc/passwd",
            ),
            ("a/../b", "invalid path: must not contain '..': a/../b"),
            ("..", "invalid path: must not contain '..': .."),
            ("..data", "invalid path: must not start with '..': ..data"),
            ("..a/b", "invalid path: must not start with '..': ..a/b"),
            (".", "invalid path: must not be empty: \".\""),
            (
                long.as_str(),
                "invalid path: filenames must be less than or equal to 255 characters",
            ),
        ] {
            let p = payload(&[("ok", "x", 0o644), (bad, "x", 0o644)]);
            let err = write(dir, &p, None).unwrap_err();
            assert_eq!(err.to_string(), want);
        }
        let err = write(
            dir,
            &payload(&[("a", "x", 0o644), ("a/b", "y", 0o644)]),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("both a file and the directory"), "{err}");
        assert!(entries(dir).is_empty());
    }

    #[test]
    fn a_concurrent_reader_never_sees_a_mix() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().to_path_buf();
        let version = |n: usize| {
            let body = n.to_string().repeat(4096);
            payload(&[("a", &body, 0o644), ("b", &body, 0o644)])
        };
        write(&dir, &version(1), None).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (dir, stop) = (dir.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut pairs, mut singles) = (0u32, 0u32);
                while !stop.load(Ordering::Relaxed) {
                    // One file through its visible link: whole, one version.
                    if let Ok(a) = fs::read_to_string(dir.join("a")) {
                        assert_eq!(a.len(), 4096);
                        assert!(a.bytes().all(|c| c == a.as_bytes()[0]), "torn file");
                        singles += 1;
                    }
                    // Two files through one resolution of ..data: the same version. (The
                    // version may be removed under us: then the read fails, it never mixes.)
                    let Ok(ts) = fs::read_link(dir.join(DATA_DIR)) else {
                        continue;
                    };
                    let (Ok(a), Ok(b)) = (
                        fs::read_to_string(dir.join(&ts).join("a")),
                        fs::read_to_string(dir.join(&ts).join("b")),
                    ) else {
                        continue;
                    };
                    assert_eq!(a, b, "mixed versions");
                    pairs += 1;
                }
                (pairs, singles)
            })
        };
        for n in 2..300 {
            write(&dir, &version(n % 10), None).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let (pairs, singles) = reader.join().unwrap();
        assert!(pairs > 0 && singles > 0, "{pairs} {singles}");
    }
}
