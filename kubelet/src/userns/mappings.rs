//! The per-pod file `<root-dir>/pods/<uid>/userns` (Go's JSON, field for field) and the
//! kubelet's own id range (`/etc/subuid`, `/etc/subgid`).

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::UsernsError;

/// The file's name in the pod's directory.
pub(super) const MAPPINGS_FILE: &str = "userns";

/// One range (Go's `idMapping`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct IdMapping {
    pub host_id: u32,
    pub container_id: u32,
    pub length: u32,
}

/// A pod's user namespace (Go's `userNamespace`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UserNamespace {
    pub uid_mappings: Vec<IdMapping>,
    pub gid_mappings: Vec<IdMapping>,
}

impl UserNamespace {
    /// One range from `first` for both uids and gids, the pod's root first.
    pub(super) fn single(first: u32, length: u32) -> Self {
        let m = IdMapping {
            host_id: first,
            container_id: 0,
            length,
        };
        Self {
            uid_mappings: vec![m],
            gid_mappings: vec![m],
        }
    }

    /// Go's `parseUserNsFileAndRecord` checks; the one range (first host id, length).
    pub(super) fn parse(uid: &str, content: &[u8]) -> Result<(u32, u32), UsernsError> {
        let bad = |why: &str| UsernsError::BadRecord {
            uid: uid.to_string(),
            why: why.to_string(),
        };
        let ns: UserNamespace =
            serde_json::from_slice(content).map_err(|e| UsernsError::BadRecord {
                uid: uid.to_string(),
                why: format!("invalid user namespace mappings file: {e}"),
            })?;
        if ns.uid_mappings.len() != 1 {
            return Err(bad(
                "invalid user namespace configuration: no more than one mapping allowed.",
            ));
        }
        if ns.uid_mappings.len() != ns.gid_mappings.len() {
            return Err(bad(
                "invalid user namespace configuration: GID and UID mappings should be identical.",
            ));
        }
        if ns.uid_mappings[0] != ns.gid_mappings[0] {
            return Err(bad(
                "invalid user namespace configuration: GID and UID mapping should be identical",
            ));
        }
        if ns.uid_mappings[0].container_id != 0 {
            return Err(bad(
                "invalid user namespace configuration: UID 0 must be mapped",
            ));
        }
        Ok((ns.uid_mappings[0].host_id, ns.uid_mappings[0].length))
    }
}

/// Reads the pod's file; `None` when it has none (a pod without a user namespace).
pub(super) fn read(pod_dir: &Path) -> Result<Option<Vec<u8>>, UsernsError> {
    let path = pod_dir.join(MAPPINGS_FILE);
    match std::fs::read(&path) {
        Ok(b) if b.is_empty() => Ok(None),
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(UsernsError::io("reading", &path, e)),
    }
}

/// Writes the pod's file atomically and durably (temporary file, fsync, rename, fsync of
/// the directory), as Go's file store plus its directory sync.
pub(super) fn write(pod_dir: &Path, ns: &UserNamespace) -> Result<(), UsernsError> {
    std::fs::create_dir_all(pod_dir).map_err(|e| UsernsError::io("creating", pod_dir, e))?;
    let data =
        serde_json::to_vec(ns).map_err(|e| UsernsError::io("encoding", pod_dir, e.into()))?;
    let path = pod_dir.join(MAPPINGS_FILE);
    let tmp = pod_dir.join(format!(".{MAPPINGS_FILE}.tmp"));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(pod_dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(|e| UsernsError::io("writing", &path, e))
}

/// Go's default when the kubelet has no subordinate ids: everything above the host's first
/// 65536 ids.
const DEFAULT_FIRST_ID: u32 = 1 << 16;
const DEFAULT_LEN: u32 = u32::MAX - DEFAULT_FIRST_ID + 1;

/// The `kubelet` entry of a subordinate-id file (`name:first:count`), if any.
fn sub_ids(text: &str) -> Result<Option<(u32, u32)>, String> {
    for line in text.lines() {
        let mut f = line.trim().split(':');
        if f.next() != Some("kubelet") {
            continue;
        }
        let (Some(first), Some(count), None) = (f.next(), f.next(), f.next()) else {
            return Err(format!("invalid line {line:?}"));
        };
        let parse = |s: &str| {
            s.parse::<u32>()
                .map_err(|e| format!("error parsing line {line:?}: {e}"))
        };
        return Ok(Some((parse(first)?, parse(count)?)));
    }
    Ok(None)
}

/// The kubelet's range (first id, count): the `kubelet` entries of `subuid` and `subgid`,
/// which must agree, or Go's default when neither file names it.
pub(super) fn kubelet_range(subuid: &Path, subgid: &Path) -> Result<(u32, u32), UsernsError> {
    let read = |p: &Path| -> Result<Option<(u32, u32)>, UsernsError> {
        match std::fs::read_to_string(p) {
            Ok(t) => {
                sub_ids(&t).map_err(|why| UsernsError::Config(format!("{}: {why}", p.display())))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(UsernsError::io("reading", p, e)),
        }
    };
    match (read(subuid)?, read(subgid)?) {
        (None, None) => Ok((DEFAULT_FIRST_ID, DEFAULT_LEN)),
        (Some(u), Some(g)) if u == g => Ok(u),
        (u, g) => Err(UsernsError::Config(format!(
            "the kubelet's subordinate ids differ between {} ({u:?}) and {} ({g:?}); \
             uids and gids must be the same range",
            subuid.display(),
            subgid.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_file_is_gos_json() {
        let ns = UserNamespace::single(131072, 65536);
        let text = serde_json::to_string(&ns).unwrap();
        assert_eq!(
            text,
            r#"{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}"#
        );
        assert_eq!(
            UserNamespace::parse("u", text.as_bytes()).unwrap(),
            (131072, 65536)
        );
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()).unwrap(), None);
        write(d.path(), &ns).unwrap();
        assert_eq!(read(d.path()).unwrap().unwrap(), text.as_bytes());
        let bad = r#"{"uidMappings":[{"hostId":1,"containerId":1,"length":1}],"gidMappings":[{"hostId":1,"containerId":1,"length":1}]}"#;
        let err = UserNamespace::parse("u", bad.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("UID 0 must be mapped"), "{err}");
        assert!(UserNamespace::parse("u", b"{").is_err());
    }

    #[test]
    fn the_kubelet_range_comes_from_subuid_and_subgid() {
        let d = tempfile::tempdir().unwrap();
        let (u, g) = (d.path().join("subuid"), d.path().join("subgid"));
        assert_eq!(kubelet_range(&u, &g).unwrap(), (65536, u32::MAX - 65535));
        std::fs::write(&u, "alice:100000:65536\nkubelet:655360:6553600\n").unwrap();
        assert!(kubelet_range(&u, &g).is_err(), "subgid lacks it");
        std::fs::write(&g, "kubelet:655360:6553600\n").unwrap();
        assert_eq!(kubelet_range(&u, &g).unwrap(), (655360, 6553600));
        std::fs::write(&g, "kubelet:x:1\n").unwrap();
        assert!(
            kubelet_range(&u, &g)
                .unwrap_err()
                .to_string()
                .contains("error parsing")
        );
    }
}
