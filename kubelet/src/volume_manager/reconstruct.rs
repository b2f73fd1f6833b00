//! Reconstruction at start (Go's `reconstructVolumes`): the volumes found on disk under
//! `<root>/pods/<uid>/volumes/<plugin>/<name>` go into the actual state as they are, but
//! unconfirmed (Go's uncertain mounts). A pod the kubelet still wants keeps them: its next
//! set-up finds them in place (no second tmpfs, no rewrite of an unchanged payload; its
//! content is not lost) or mends what a reboot took (a tmpfs gone from under its mount
//! point). Those of pods no source wants are torn down once every source has spoken.

use std::path::Path;

use super::actual::MountedVolume;
use super::desired::VolumeKey;

/// The volumes on disk (blocking: run it in `spawn_blocking`). What cannot be read is left
/// out: housekeeping removes the pod directories of unknown pods anyway.
pub fn scan(root_dir: &Path) -> Vec<(VolumeKey, MountedVolume)> {
    let mut found = Vec::new();
    for uid in dir_names(&root_dir.join("pods")) {
        let volumes = crate::volume::pod_dir(root_dir, &uid).join("volumes");
        for plugin in dir_names(&volumes) {
            for name in dir_names(&volumes.join(&plugin)) {
                let volume = MountedVolume {
                    path: volumes.join(&plugin).join(&name),
                    plugin: Some(plugin.clone()),
                    generation: None,
                    token_fingerprint: None,
                    read_only: false,
                };
                found.push((VolumeKey::new(&uid, &name), volume));
            }
        }
    }
    found
}

/// The names of the directories in `dir` (not following symlinks), sorted.
fn dir_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n != "." && n != "..")
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn finds_every_volume_dir_and_skips_the_rest() {
        let root = tempfile::tempdir().unwrap();
        let vols = root.path().join("pods/u1/volumes");
        std::fs::create_dir_all(vols.join("kubernetes.io~empty-dir/scratch")).unwrap();
        std::fs::create_dir_all(vols.join("kubernetes.io~secret/creds")).unwrap();
        std::fs::write(vols.join("kubernetes.io~secret/not-a-volume"), "").unwrap();
        std::fs::create_dir_all(root.path().join("pods/u2/containers/c")).unwrap();
        std::fs::write(root.path().join("pods/u2/etc-hosts"), "").unwrap();
        let found = scan(root.path());
        let keys: Vec<(String, String, String)> = found
            .iter()
            .map(|(k, v)| (k.uid.clone(), k.name.clone(), v.plugin.clone().unwrap()))
            .collect();
        assert_eq!(
            keys,
            [
                (
                    "u1".into(),
                    "scratch".into(),
                    "kubernetes.io~empty-dir".into()
                ),
                ("u1".into(), "creds".into(), "kubernetes.io~secret".into()),
            ]
        );
        assert_eq!(found[1].1.path, vols.join("kubernetes.io~secret/creds"));
        assert!(found.iter().all(|(_, v)| v.generation.is_none()));
        assert!(scan(&root.path().join("missing")).is_empty());
    }
}
