//! Reconstruction at start (Go's `reconstructVolumes`): the volumes found on disk under
//! `<root>/pods/<uid>/volumes/<plugin>/<name>` go into the actual state as they are, but
//! unconfirmed (Go's uncertain mounts). A pod the kubelet still wants keeps them: its next
//! set-up finds them in place (no second tmpfs, no rewrite of an unchanged payload; its
//! content is not lost) or mends what a reboot took (a tmpfs gone from under its mount
//! point). Those of pods no source wants are torn down once every source has spoken.
//!
//! CSI volumes are found by Go's `vol_data.json` files: a pod's published volume
//! (`kubernetes.io~csi/<name>/vol_data.json`, the target `mount` beside it) and the devices
//! staged on the node (`plugins/kubernetes.io/csi/<driver>/<sha>/vol_data.json`), so a
//! volume of a pod deleted while ferrolet was down is unpublished and unstaged through its
//! driver once the driver is registered.

use std::collections::BTreeSet;
use std::path::Path;

use super::actual::MountedVolume;
use super::csi_ops::{CsiMounted, Device};
use super::desired::VolumeKey;
use crate::csi::volume::{self as csi_volume, Lifecycle, load_volume_data};

/// The volumes on disk (blocking: run it in `spawn_blocking`). What cannot be read is left
/// out: housekeeping removes the pod directories of unknown pods anyway.
pub fn scan(root_dir: &Path) -> Vec<(VolumeKey, MountedVolume)> {
    let mut found = Vec::new();
    for uid in dir_names(&root_dir.join("pods")) {
        let volumes = crate::volume::pod_dir(root_dir, &uid).join("volumes");
        for plugin in dir_names(&volumes) {
            for name in dir_names(&volumes.join(&plugin)) {
                let dir = volumes.join(&plugin).join(&name);
                let mut volume = MountedVolume {
                    path: dir.clone(),
                    plugin: Some(plugin.clone()),
                    generation: None,
                    token_fingerprint: None,
                    read_only: false,
                    csi: None,
                    pvc: None,
                    block: false,
                    republish: false,
                };
                if plugin == csi_volume::POD_PLUGIN_DIR {
                    // Without its data the driver cannot be asked to unpublish: left for
                    // housekeeping, as Go leaves it.
                    let Ok(Some(data)) = load_volume_data(&dir) else {
                        continue;
                    };
                    let persistent = data.lifecycle != Lifecycle::Ephemeral.as_str();
                    volume.path = dir.join("mount");
                    volume.csi = Some(CsiMounted {
                        device: persistent
                            .then(|| csi_volume::unique_name(&data.driver, &data.handle)),
                        driver: data.driver,
                        handle: data.handle,
                        block_spec: None,
                    });
                }
                found.push((VolumeKey::new(&uid, &name), volume));
            }
        }
        found.extend(scan_block_links(root_dir, &uid));
    }
    found
}

/// Pod `uid`'s raw block volumes: the links in `pods/<uid>/volumeDevices/kubernetes.io~csi`,
/// with the data Go keeps in `plugins/kubernetes.io/csi/volumeDevices/<name>/data`.
fn scan_block_links(root_dir: &Path, uid: &str) -> Vec<(VolumeKey, MountedVolume)> {
    let dir = crate::volume::pod_dir(root_dir, uid)
        .join("volumeDevices")
        .join(csi_volume::POD_PLUGIN_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|spec| {
            let data_dir = csi_volume::block_volume_dir(root_dir, &spec).join("data");
            let data = load_volume_data(&data_dir).ok()??;
            let volume = MountedVolume {
                path: dir.join(&spec),
                plugin: Some(csi_volume::POD_PLUGIN_DIR.to_string()),
                generation: None,
                token_fingerprint: None,
                read_only: false,
                csi: Some(CsiMounted {
                    device: Some(csi_volume::unique_name(&data.driver, &data.handle)),
                    driver: data.driver,
                    handle: data.handle,
                    block_spec: Some(spec.clone()),
                }),
                pvc: None,
                block: true,
                republish: false,
            };
            Some((VolumeKey::new(uid, &spec), volume))
        })
        .collect()
}

/// The CSI devices staged (or given their global directory) on the node, by unique name,
/// with no users yet (blocking).
pub fn scan_devices(root_dir: &Path) -> Vec<(String, Device)> {
    let base = root_dir.join("plugins/kubernetes.io/csi");
    let mut found = Vec::new();
    for driver in dir_names(&base) {
        if driver == "volumeDevices" {
            continue;
        }
        for sha in dir_names(&base.join(&driver)) {
            let dir = base.join(&driver).join(&sha);
            let Ok(Some(data)) = load_volume_data(&dir) else {
                continue;
            };
            let device = Device {
                path: dir.join("globalmount"),
                driver: data.driver,
                handle: data.handle,
                users: BTreeSet::new(),
                confirmed: false,
                // Until its driver says otherwise: a device found on disk stays reported.
                attachable: true,
                block_spec: None,
            };
            found.push((
                csi_volume::unique_name(&device.driver, &device.handle),
                device,
            ));
        }
    }
    let block = csi_volume::block_dir(root_dir);
    for spec in dir_names(&block) {
        if spec == "staging" || spec == "publish" {
            continue;
        }
        let Ok(Some(data)) = load_volume_data(&block.join(&spec).join("data")) else {
            continue;
        };
        let device = Device {
            path: csi_volume::block_staging_path(root_dir, &spec),
            driver: data.driver,
            handle: data.handle,
            users: BTreeSet::new(),
            confirmed: false,
            attachable: true,
            block_spec: Some(spec),
        };
        found.push((
            csi_volume::unique_name(&device.driver, &device.handle),
            device,
        ));
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

    use std::path::PathBuf;

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

    #[test]
    fn csi_volumes_and_devices_are_found_by_their_vol_data() {
        use crate::csi::volume::{VolumeData, device_mount_path, save_volume_data};
        let root = tempfile::tempdir().unwrap();
        let csi = root.path().join("pods/u1/volumes/kubernetes.io~csi");
        let data = |spec: &str, handle: &str, lifecycle: &str| VolumeData {
            spec_name: spec.into(),
            handle: handle.into(),
            driver: "d".into(),
            node_name: "n".into(),
            attachment_id: String::new(),
            lifecycle: lifecycle.into(),
        };
        save_volume_data(&csi.join("pv-1"), &data("pv-1", "h1", "Persistent")).unwrap();
        save_volume_data(&csi.join("inline"), &data("inline", "csi-x", "Ephemeral")).unwrap();
        // No vol_data.json: the driver cannot be asked about it.
        std::fs::create_dir_all(csi.join("lost/mount")).unwrap();
        let global = device_mount_path(root.path(), "d", "h1");
        save_volume_data(
            global.parent().unwrap(),
            &VolumeData {
                handle: "h1".into(),
                driver: "d".into(),
                ..Default::default()
            },
        )
        .unwrap();

        let found = scan(root.path());
        let got: Vec<(String, PathBuf, Option<CsiMounted>)> = found
            .into_iter()
            .map(|(k, v)| (k.name, v.path, v.csi))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "inline".to_string(),
                    csi.join("inline/mount"),
                    Some(CsiMounted {
                        driver: "d".into(),
                        handle: "csi-x".into(),
                        device: None,
                        block_spec: None,
                    })
                ),
                (
                    "pv-1".to_string(),
                    csi.join("pv-1/mount"),
                    Some(CsiMounted {
                        driver: "d".into(),
                        handle: "h1".into(),
                        device: Some("kubernetes.io/csi/d^h1".into()),
                        block_spec: None,
                    })
                ),
            ]
        );
        let devices = scan_devices(root.path());
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0].0, "kubernetes.io/csi/d^h1");
        assert_eq!(devices[0].1.path, global);
        assert!(!devices[0].1.confirmed);
    }
}
