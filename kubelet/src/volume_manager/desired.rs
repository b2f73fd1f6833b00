//! The desired state of the world (Go's `desiredStateOfWorld`, filled by its populator): for
//! each pod the kubelet wants running, the volumes its containers use, what each refers to in
//! the API, and a generation. Whatever must be written again (a pod sync, a changed secret or
//! configMap, a renewed token, new labels) gets a fresh generation; the reconciler sets up
//! every volume whose actual generation is older.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Volume;

use crate::objects::{ObjectChange, ObjectKind};
use crate::types::Pod;
use crate::volume::VolumeReferences;

/// One volume of one pod.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VolumeKey {
    /// The pod's UID.
    pub uid: String,
    /// The volume's name in the pod spec.
    pub name: String,
}

impl VolumeKey {
    /// The key of `name` in pod `uid`.
    pub fn new(uid: &str, name: &str) -> Self {
        Self {
            uid: uid.to_string(),
            name: name.to_string(),
        }
    }
}

/// A volume a pod wants (its spec is the pod's own, [`DesiredPod::spec`]: a `Volume` is
/// over 3 KiB, and a copy per volume was the volume manager's largest memory cost).
#[derive(Clone, Debug)]
pub struct DesiredVolume {
    /// The secrets, configMaps and tokens it is made from.
    pub references: VolumeReferences,
    /// Whether its content follows its sources (secret, configMap, downwardAPI, projected).
    pub requires_remount: bool,
    /// Bumped whenever its content must be written again.
    pub generation: u64,
}

/// A pod whose volumes are wanted.
#[derive(Clone, Debug)]
pub struct DesiredPod {
    /// The pod as last given (labels and annotations feed the downward API).
    pub pod: Arc<Pod>,
    /// Its used volumes by name.
    pub volumes: BTreeMap<String, DesiredVolume>,
}

impl DesiredPod {
    /// The spec of its volume `name`.
    pub fn spec(&self, name: &str) -> Option<&Volume> {
        pod_volume(&self.pod, name)
    }
}

fn pod_volume<'a>(pod: &'a Pod, name: &str) -> Option<&'a Volume> {
    pod.spec
        .as_ref()?
        .volumes
        .as_ref()?
        .iter()
        .find(|v| v.name == name)
}

/// Every wanted pod's volumes.
#[derive(Debug, Default)]
pub struct DesiredState {
    pods: BTreeMap<String, DesiredPod>,
    /// The last generation handed out: every bump takes a new one, so a pod removed and added
    /// again never looks up to date against what was set up before.
    last_generation: u64,
}

/// The volumes some container of the pod mounts or uses as a device (Go's
/// `GetPodVolumeNames`): the others are never set up, as in Go.
pub fn used_volume_names(pod: &Pod) -> BTreeSet<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeSet::new();
    };
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let mut names = BTreeSet::new();
    for c in containers {
        names.extend(c.volume_mounts.iter().flatten().map(|m| m.name.clone()));
        names.extend(c.volume_devices.iter().flatten().map(|d| d.name.clone()));
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        names.extend(c.volume_mounts.iter().flatten().map(|m| m.name.clone()));
        names.extend(c.volume_devices.iter().flatten().map(|d| d.name.clone()));
    }
    names
}

/// Whether what the downward API shows of the pod differs.
fn downward_inputs_changed(old: &Pod, new: &Pod) -> bool {
    old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
        || old.spec.as_ref().map(|s| &s.containers) != new.spec.as_ref().map(|s| &s.containers)
}

impl DesiredState {
    fn next_generation(&mut self) -> u64 {
        self.last_generation += 1;
        self.last_generation
    }

    /// Adds pod `uid` or takes its new version: new volumes come in, volumes it no longer
    /// uses go, and remountable volumes get a new generation when their spec or the pod's
    /// labels, annotations or containers (downward API) changed. Whether anything changed
    /// for the reconciler.
    pub fn add_pod(&mut self, uid: &str, pod: &Arc<Pod>) -> bool {
        let used = used_volume_names(pod);
        let specs: Vec<&Volume> = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            // Image volumes are the runtime's: nothing of them is set up on the node.
            .filter(|v| used.contains(&v.name) && !crate::volume::is_image(v))
            .collect();
        let old = self.pods.remove(uid);
        let relabelled = old
            .as_ref()
            .is_some_and(|o| downward_inputs_changed(&o.pod, pod));
        let mut changed = old.is_none();
        let mut volumes = BTreeMap::new();
        for spec in specs {
            let references = crate::volume::references(pod, spec);
            let requires_remount = crate::volume::requires_remount(spec);
            let previous = old.as_ref().and_then(|o| {
                let v = o.volumes.get(&spec.name)?;
                Some((v, o.spec(&spec.name)?))
            });
            let generation = match previous {
                Some((p, old_spec))
                    if old_spec == spec
                        && p.references == references
                        && !(relabelled && requires_remount) =>
                {
                    p.generation
                }
                _ => {
                    changed = true;
                    self.next_generation()
                }
            };
            let volume = DesiredVolume {
                references,
                requires_remount,
                generation,
            };
            volumes.insert(spec.name.clone(), volume);
        }
        if let Some(o) = &old {
            changed |= o.volumes.keys().any(|n| !volumes.contains_key(n));
        }
        self.pods.insert(
            uid.to_string(),
            DesiredPod {
                pod: pod.clone(),
                volumes,
            },
        );
        changed
    }

    /// Drops pod `uid`; whether it was there.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        self.pods.remove(uid).is_some()
    }

    /// Whether pod `uid` is wanted.
    pub fn has_pod(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// Pod `uid`'s wanted volumes.
    pub fn pod(&self, uid: &str) -> Option<&DesiredPod> {
        self.pods.get(uid)
    }

    /// Whether volume `key` is wanted.
    pub fn contains(&self, key: &VolumeKey) -> bool {
        self.pods
            .get(&key.uid)
            .is_some_and(|p| p.volumes.contains_key(&key.name))
    }

    /// Every wanted volume with its pod.
    pub fn volumes(&self) -> impl Iterator<Item = (VolumeKey, &DesiredPod, &DesiredVolume)> {
        self.pods.iter().flat_map(|(uid, p)| {
            p.volumes
                .iter()
                .map(move |(name, v)| (VolumeKey::new(uid, name), p, v))
        })
    }

    /// New generations for the remountable volumes of pod `uid` (Go's `ReprocessPod` on
    /// every sync); the keys bumped.
    pub fn mark_remount(&mut self, uid: &str) -> Vec<VolumeKey> {
        self.bump_where(|key, _, v| key.uid == uid && v.requires_remount)
    }

    /// New generations for the volumes of pods in the object's namespace that refer to it.
    pub fn mark_object_changed(&mut self, change: &ObjectChange) -> Vec<VolumeKey> {
        self.bump_where(|_, pod, v| {
            pod.pod.metadata.namespace.as_deref().unwrap_or("default") == change.namespace
                && match change.kind {
                    ObjectKind::Secret => v.references.secrets.contains(&change.name),
                    ObjectKind::ConfigMap => v.references.config_maps.contains(&change.name),
                }
        })
    }

    /// New generations for every volume made from a secret or configMap (the change feed
    /// lagged: any of them may have changed).
    pub fn mark_all_objects_changed(&mut self) -> Vec<VolumeKey> {
        self.bump_where(|_, _, v| {
            !v.references.secrets.is_empty() || !v.references.config_maps.is_empty()
        })
    }

    /// A new generation for volume `key`, if wanted.
    pub fn bump(&mut self, key: &VolumeKey) -> bool {
        !self.bump_where(|k, _, _| k == key).is_empty()
    }

    fn bump_where(
        &mut self,
        pick: impl Fn(&VolumeKey, &DesiredPod, &DesiredVolume) -> bool,
    ) -> Vec<VolumeKey> {
        let keys: Vec<VolumeKey> = self
            .volumes()
            .filter(|(k, p, v)| pick(k, p, v))
            .map(|(k, _, _)| k)
            .collect();
        for key in &keys {
            let generation = self.next_generation();
            if let Some(v) = self
                .pods
                .get_mut(&key.uid)
                .and_then(|p| p.volumes.get_mut(&key.name))
            {
                v.generation = generation;
            }
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::volume::tests::pod;

    const POD: &str = "metadata: {name: p, namespace: ns, uid: u1, labels: {a: b}}
spec:
  containers:
  - name: c
    volumeMounts: [{name: scratch, mountPath: /s}, {name: cm, mountPath: /c}, {name: sec, mountPath: /x}]
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: cm, configMap: {name: conf}}
  - {name: sec, secret: {secretName: creds}}
  - {name: unused, emptyDir: {}}";

    fn generations(dsw: &DesiredState, uid: &str) -> BTreeMap<String, u64> {
        dsw.pod(uid)
            .unwrap()
            .volumes
            .iter()
            .map(|(n, v)| (n.clone(), v.generation))
            .collect()
    }

    #[test]
    fn only_used_volumes_are_wanted_with_their_references() {
        let mut dsw = DesiredState::default();
        assert!(dsw.add_pod("u1", &Arc::new(pod(POD))));
        let p = dsw.pod("u1").unwrap();
        let names: Vec<&str> = p.volumes.keys().map(String::as_str).collect();
        assert_eq!(names, ["cm", "scratch", "sec"]);
        assert!(p.volumes["cm"].references.config_maps.contains("conf"));
        assert!(p.volumes["sec"].references.secrets.contains("creds"));
        assert!(p.volumes["cm"].requires_remount && !p.volumes["scratch"].requires_remount);
        assert!(dsw.contains(&VolumeKey::new("u1", "scratch")));
        assert!(!dsw.contains(&VolumeKey::new("u1", "unused")));
        assert_eq!(dsw.volumes().count(), 3);
    }

    #[test]
    fn the_same_pod_again_changes_nothing_new_labels_remount() {
        let mut dsw = DesiredState::default();
        dsw.add_pod("u1", &Arc::new(pod(POD)));
        let before = generations(&dsw, "u1");
        assert!(!dsw.add_pod("u1", &Arc::new(pod(POD))));
        assert_eq!(generations(&dsw, "u1"), before);

        assert!(dsw.add_pod("u1", &Arc::new(pod(&POD.replace("{a: b}", "{a: c}")))));
        let after = generations(&dsw, "u1");
        assert_eq!(after["scratch"], before["scratch"]);
        assert!(after["cm"] > before["cm"] && after["sec"] > before["sec"]);
    }

    #[test]
    fn remount_marks_and_object_changes_bump_the_right_volumes() {
        let mut dsw = DesiredState::default();
        dsw.add_pod("u1", &Arc::new(pod(POD)));
        dsw.add_pod(
            "u2",
            &Arc::new(pod(&POD
                .replace("uid: u1", "uid: u2")
                .replace("ns,", "other,"))),
        );
        let mut bumped = dsw.mark_remount("u1");
        bumped.sort();
        assert_eq!(
            bumped,
            [VolumeKey::new("u1", "cm"), VolumeKey::new("u1", "sec")]
        );

        let change = ObjectChange {
            kind: ObjectKind::ConfigMap,
            namespace: "ns".into(),
            name: "conf".into(),
        };
        assert_eq!(
            dsw.mark_object_changed(&change),
            [VolumeKey::new("u1", "cm")]
        );
        let secret = ObjectChange {
            kind: ObjectKind::Secret,
            namespace: "other".into(),
            name: "conf".into(),
        };
        assert!(dsw.mark_object_changed(&secret).is_empty());
        assert_eq!(dsw.mark_all_objects_changed().len(), 4);
    }

    #[test]
    fn a_pod_added_again_gets_newer_generations() {
        let mut dsw = DesiredState::default();
        dsw.add_pod("u1", &Arc::new(pod(POD)));
        let before = generations(&dsw, "u1");
        assert!(dsw.remove_pod("u1"));
        assert!(!dsw.has_pod("u1"));
        dsw.add_pod("u1", &Arc::new(pod(POD)));
        let after = generations(&dsw, "u1");
        assert!(after.iter().all(|(n, g)| *g > before[n]));
    }
}
