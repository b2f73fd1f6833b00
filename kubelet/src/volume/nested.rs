//! Mount points of volumes nested inside another volume's mount (a configMap at `/etc/app`
//! and an emptyDir at `/etc/app/data`), made in the outer volume's directory before the
//! container starts (Go's `MakeNestedMountpoints`): the runtime could not make them in a
//! read-only volume.

use std::path::Path;

use k8s_openapi::api::core::v1::VolumeMount;

use super::{VolumeError, mkdir_all};
use crate::types::Pod;

/// `/a/./b/` → `/a/b` (Go's `filepath.Clean` for the paths we compare).
fn clean(path: &str) -> String {
    let abs = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." if parts.last().is_some_and(|l| *l != "..") => {
                parts.pop();
            }
            ".." if abs => {}
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    match (abs, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// The mount points, relative to volume `name`'s mount, of the volumes mounted directly below
/// it in any container of the pod (a mount below one of those is theirs, not ours).
pub(crate) fn nested_mount_points(name: &str, pod: &Pod) -> Result<Vec<String>, String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Vec::new());
    };
    let containers = crate::podspec::init_and_app_containers(spec)
        .map(|c| c.volume_mounts.as_deref())
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|e| e.volume_mounts.as_deref()),
        );
    let mut out = Vec::new();
    for mounts in containers {
        let mounts: &[VolumeMount] = mounts.unwrap_or_default();
        let mut all: Vec<String> = mounts.iter().map(|m| clean(&m.mount_path)).collect();
        all.sort();
        for mine in mounts.iter().filter(|m| m.name == name) {
            let mine = clean(&mine.mount_path);
            if mine.starts_with("../") {
                return Err(format!("invalid container mount point {mine}"));
            }
            let prefix = format!("{}/", mine.trim_end_matches('/'));
            let mut taken: Vec<String> = Vec::new();
            for mp in &all {
                let Some(rel) = mp.strip_prefix(&prefix) else {
                    continue;
                };
                if taken.iter().any(|t| mp.starts_with(t.as_str())) {
                    continue;
                }
                taken.push(format!("{mp}/"));
                out.push(rel.to_string());
            }
        }
    }
    Ok(out)
}

/// Makes the nested mount points of volume `name` in its directory `dir`.
pub(crate) fn make_nested_mount_points(
    name: &str,
    dir: &Path,
    pod: &Pod,
) -> Result<(), VolumeError> {
    let invalid = |reason: String| VolumeError::Invalid {
        volume: name.into(),
        reason,
    };
    for rel in nested_mount_points(name, pod).map_err(invalid)? {
        // Never out of the volume, never into the atomic writer's reserved names.
        if rel.split('/').any(|p| p == "..") || rel.starts_with("..") {
            return Err(invalid(format!(
                "unable to create nested volume mountpoints: invalid path {rel:?}"
            )));
        }
        mkdir_all(name, &dir.join(rel), 0o755)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::volume::tests::pod;

    #[test]
    fn nested_points_are_the_direct_children() {
        let p = pod("metadata: {name: p, uid: u}
spec:
  containers:
  - name: a
    volumeMounts:
    - {name: cfg, mountPath: /etc/app/}
    - {name: data, mountPath: /etc/app/data}
    - {name: deeper, mountPath: /etc/app/data/x}
    - {name: other, mountPath: /etc/application}
  - name: b
    volumeMounts:
    - {name: cfg, mountPath: /cfg}
    - {name: logs, mountPath: /cfg/./logs}");
        assert_eq!(nested_mount_points("cfg", &p).unwrap(), ["data", "logs"]);
        assert!(nested_mount_points("data", &p).unwrap() == ["x"]);
        assert!(nested_mount_points("other", &p).unwrap().is_empty());
        assert_eq!(clean("a/../../b"), "../b");
        assert_eq!(clean("/a/../../b"), "/b");
    }
}
