//! The actual state of the world (Go's `actualStateOfWorld`): what is set up on this node, per
//! pod and volume: where it is, which generation of the desired state it was last written
//! for, and the fingerprint of the tokens it holds (a renewed token means writing it again).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::desired::VolumeKey;

/// A volume that is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountedVolume {
    /// Its host path.
    pub path: PathBuf,
    /// Its plugin directory (`kubernetes.io~empty-dir`, ...); `None` for a hostPath, which
    /// is the host's and never removed.
    pub plugin: Option<String>,
    /// The desired generation it was written for; `None` when rebuilt from disk at start and
    /// not yet set up again for a wanted volume (which finds it in place).
    pub generation: Option<u64>,
    /// A fingerprint of the tokens written into it, if any.
    pub token_fingerprint: Option<u64>,
    /// Whether containers must mount it read-only (a claim's `readOnly`).
    pub read_only: bool,
    /// What its teardown needs of a CSI volume.
    pub csi: Option<super::csi_ops::CsiMounted>,
    /// The claim (namespace, name) it came through, for its usage's `pvcRef`.
    pub pvc: Option<(String, String)>,
    /// A raw block volume: `path` is the link its containers' device is made from.
    pub block: bool,
    /// Published again on every sync of its pod (the CSIDriver's `requiresRepublish`).
    pub republish: bool,
}

impl MountedVolume {
    /// Whether it is known to be set up for a wanted volume (not just found on disk).
    pub fn confirmed(&self) -> bool {
        self.generation.is_some()
    }
}

/// Every volume set up, by pod.
#[derive(Debug, Default)]
pub struct ActualState {
    pods: BTreeMap<String, BTreeMap<String, MountedVolume>>,
}

impl ActualState {
    /// Records volume `key` as set up.
    pub fn mark_mounted(&mut self, key: &VolumeKey, volume: MountedVolume) {
        self.pods
            .entry(key.uid.clone())
            .or_default()
            .insert(key.name.clone(), volume);
    }

    /// Records volume `key` as gone.
    pub fn mark_unmounted(&mut self, key: &VolumeKey) {
        if let Some(volumes) = self.pods.get_mut(&key.uid) {
            volumes.remove(&key.name);
            if volumes.is_empty() {
                self.pods.remove(&key.uid);
            }
        }
    }

    /// Volume `key`, if set up.
    pub fn get(&self, key: &VolumeKey) -> Option<&MountedVolume> {
        self.pods.get(&key.uid).and_then(|v| v.get(&key.name))
    }

    /// Whether anything of pod `uid` is set up.
    pub fn has_pod(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// Pods with something set up.
    pub fn pods(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(String::as_str)
    }

    /// Forgets the other volumes of `key`'s pod found on disk at start (unconfirmed) at the
    /// same `path`: a PV-backed volume's directory is named by the PV, not by the pod's
    /// volume, so reconstruction keys it by the former. Their keys.
    pub fn forget_reconstructed_at(
        &mut self,
        key: &VolumeKey,
        path: &std::path::Path,
    ) -> Vec<VolumeKey> {
        let Some(volumes) = self.pods.get_mut(&key.uid) else {
            return Vec::new();
        };
        let twins: Vec<String> = volumes
            .iter()
            .filter(|(n, v)| **n != key.name && v.generation.is_none() && v.path == path)
            .map(|(n, _)| n.clone())
            .collect();
        for n in &twins {
            volumes.remove(n);
        }
        twins.iter().map(|n| VolumeKey::new(&key.uid, n)).collect()
    }

    /// Every volume set up.
    pub fn volumes(&self) -> impl Iterator<Item = (VolumeKey, &MountedVolume)> {
        self.pods.iter().flat_map(|(uid, volumes)| {
            volumes
                .iter()
                .map(move |(name, v)| (VolumeKey::new(uid, name), v))
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn mounted(path: &str) -> MountedVolume {
        MountedVolume {
            path: path.into(),
            plugin: Some("kubernetes.io~empty-dir".into()),
            generation: Some(1),
            token_fingerprint: None,
            read_only: false,
            csi: None,
            pvc: None,
            block: false,
            republish: false,
        }
    }

    #[test]
    fn bookkeeping_per_pod_and_volume() {
        let mut asw = ActualState::default();
        let a = VolumeKey::new("u1", "a");
        let b = VolumeKey::new("u1", "b");
        asw.mark_mounted(&a, mounted("/a"));
        asw.mark_mounted(&b, mounted("/b"));
        asw.mark_mounted(&VolumeKey::new("u2", "a"), mounted("/c"));
        assert_eq!(asw.get(&a).unwrap().path, PathBuf::from("/a"));
        assert_eq!(asw.volumes().count(), 3);
        assert_eq!(asw.pods().collect::<Vec<_>>(), ["u1", "u2"]);
        assert!(asw.get(&a).unwrap().confirmed());

        asw.mark_unmounted(&a);
        assert!(asw.has_pod("u1"));
        asw.mark_unmounted(&b);
        assert!(!asw.has_pod("u1"));
        assert!(asw.get(&a).is_none());
        // Idempotent.
        asw.mark_unmounted(&b);
        assert_eq!(asw.volumes().count(), 1);
    }
}
