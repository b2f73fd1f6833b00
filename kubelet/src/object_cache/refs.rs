//! The secrets and configMaps a pod refers to (Go's `VisitPodSecretNames` and
//! `VisitPodConfigmapNames`): exactly the objects the Node authorizer lets this node read for
//! it, so exactly the ones the cache may watch.
//!
//! `crate::volume` is getting its own reference walk for mounting; the two are to be merged.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, PodSpec, Volume};

use crate::types::Pod;

/// The names a pod refers to, per kind, in the pod's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodReferences {
    /// Secret names.
    pub secrets: BTreeSet<String>,
    /// ConfigMap names.
    pub config_maps: BTreeSet<String>,
}

impl PodReferences {
    fn secret(&mut self, name: Option<&String>) {
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            self.secrets.insert(n.clone());
        }
    }

    fn config_map(&mut self, name: Option<&String>) {
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            self.config_maps.insert(n.clone());
        }
    }
}

/// What `pod` refers to: volumes (secret, configMap, projected sources, and the secret refs of
/// the other volume plugins), `env` and `envFrom` of every container, and imagePullSecrets.
pub fn pod_references(pod: &Pod) -> PodReferences {
    let mut refs = PodReferences::default();
    let Some(spec) = &pod.spec else { return refs };
    for s in spec.image_pull_secrets.iter().flatten() {
        refs.secret(Some(&s.name));
    }
    for volume in spec.volumes.iter().flatten() {
        volume_references(volume, &mut refs);
    }
    env_references(spec, &mut refs);
    refs
}

fn volume_references(v: &Volume, refs: &mut PodReferences) {
    if let Some(s) = &v.secret {
        refs.secret(s.secret_name.as_ref());
    }
    if let Some(c) = &v.config_map {
        refs.config_map(Some(&c.name));
    }
    for source in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
        if let Some(s) = &source.secret {
            refs.secret(Some(&s.name));
        }
        if let Some(c) = &source.config_map {
            refs.config_map(Some(&c.name));
        }
    }
    // Plugins ferrolet does not mount still name secrets the Go kubelet registers (and the
    // Node authorizer allows); listed for parity.
    if let Some(a) = &v.azure_file {
        refs.secret(Some(&a.secret_name));
    }
    let refs_of = [
        v.cephfs.as_ref().and_then(|c| c.secret_ref.as_ref()),
        v.cinder.as_ref().and_then(|c| c.secret_ref.as_ref()),
        v.flex_volume.as_ref().and_then(|f| f.secret_ref.as_ref()),
        v.rbd.as_ref().and_then(|r| r.secret_ref.as_ref()),
        v.iscsi.as_ref().and_then(|i| i.secret_ref.as_ref()),
        v.csi
            .as_ref()
            .and_then(|c| c.node_publish_secret_ref.as_ref()),
    ];
    for r in refs_of.into_iter().flatten() {
        refs.secret(Some(&r.name));
    }
    if let Some(r) = v.storageos.as_ref().and_then(|s| s.secret_ref.as_ref()) {
        refs.secret(Some(&r.name));
    }
    if let Some(s) = &v.scale_io {
        refs.secret(Some(&s.secret_ref.name));
    }
}

fn env_references(spec: &PodSpec, refs: &mut PodReferences) {
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| (c.env.as_deref(), c.env_from.as_deref()));
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| (c.env.as_deref(), c.env_from.as_deref()));
    for (env, env_from) in containers.chain(ephemeral) {
        for e in env_from.unwrap_or_default() {
            env_from_references(e, refs);
        }
        for e in env.unwrap_or_default() {
            env_var_references(e, refs);
        }
    }
}

fn env_from_references(e: &EnvFromSource, refs: &mut PodReferences) {
    if let Some(s) = &e.secret_ref {
        refs.secret(Some(&s.name));
    }
    if let Some(c) = &e.config_map_ref {
        refs.config_map(Some(&c.name));
    }
}

fn env_var_references(e: &EnvVar, refs: &mut PodReferences) {
    let Some(from) = &e.value_from else { return };
    if let Some(s) = &from.secret_key_ref {
        refs.secret(Some(&s.name));
    }
    if let Some(c) = &from.config_map_key_ref {
        refs.config_map(Some(&c.name));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn names(set: &BTreeSet<String>) -> Vec<&str> {
        set.iter().map(String::as_str).collect()
    }

    #[test]
    fn every_kind_of_reference() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "imagePullSecrets": [{"name": "pull"}, {"name": ""}],
                "volumes": [
                    {"name": "a", "secret": {"secretName": "vol-secret"}},
                    {"name": "b", "configMap": {"name": "vol-cm"}},
                    {"name": "c", "projected": {"sources": [
                        {"secret": {"name": "proj-secret"}},
                        {"configMap": {"name": "proj-cm"}},
                        {"serviceAccountToken": {"path": "token"}},
                    ]}},
                    {"name": "d", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "csi-secret"}}},
                    {"name": "e", "emptyDir": {}},
                ],
                "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-secret"}}]}],
                "containers": [{"name": "c", "env": [
                    {"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
                    {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
                    {"name": "C", "value": "plain"},
                ], "envFrom": [{"configMapRef": {"name": "from-cm"}, "prefix": "X_"}]}],
                "ephemeralContainers": [{"name": "dbg", "envFrom": [{"secretRef": {"name": "eph-secret"}}]}],
            }
        }))
        .unwrap();
        let refs = pod_references(&pod);
        assert_eq!(
            names(&refs.secrets),
            [
                "csi-secret",
                "env-secret",
                "eph-secret",
                "init-secret",
                "proj-secret",
                "pull",
                "vol-secret"
            ]
        );
        assert_eq!(
            names(&refs.config_maps),
            ["env-cm", "from-cm", "proj-cm", "vol-cm"]
        );
        assert_eq!(pod_references(&Pod::default()), PodReferences::default());
    }
}
