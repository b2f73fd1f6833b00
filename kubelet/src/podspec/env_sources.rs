//! The secrets and configMaps a container's environment reads (`envFrom`,
//! `valueFrom.configMapKeyRef`, `valueFrom.secretKeyRef`): which ones to fetch
//! ([`env_references`]), the fetched objects ([`EnvObjects`]), and reading them with the Go
//! kubelet's rules and messages (`makeEnvironmentVariables`). Fetching is the caller's: this
//! module stays pure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret};

use crate::objects::{ObjectError, ObjectKind};

/// One object as its source answered: `Ok(None)` when the API has no such object.
pub type Fetched<T> = Result<Option<Arc<T>>, ObjectError>;

/// The objects a container's environment refers to, fetched beforehand, by name (all live in
/// the pod's namespace). A name the caller did not fetch reads as not registered.
#[derive(Clone, Debug, Default)]
pub struct EnvObjects {
    /// ConfigMaps by name.
    pub config_maps: BTreeMap<String, Fetched<ConfigMap>>,
    /// Secrets by name.
    pub secrets: BTreeMap<String, Fetched<Secret>>,
}

/// The names of the objects a container's environment refers to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvReferences {
    /// ConfigMaps (`envFrom[].configMapRef`, `env[].valueFrom.configMapKeyRef`).
    pub config_maps: BTreeSet<String>,
    /// Secrets (`envFrom[].secretRef`, `env[].valueFrom.secretKeyRef`).
    pub secrets: BTreeSet<String>,
}

/// The configMaps and secrets `container`'s environment reads, so the caller can fetch them
/// into an [`EnvObjects`].
pub fn env_references(container: &Container) -> EnvReferences {
    let mut refs = EnvReferences::default();
    for from in container.env_from.iter().flatten() {
        if let Some(cm) = &from.config_map_ref {
            refs.config_maps.insert(cm.name.clone());
        } else if let Some(s) = &from.secret_ref {
            refs.secrets.insert(s.name.clone());
        }
    }
    let sources = container.env.iter().flatten().filter_map(|v| {
        // A literal value wins over valueFrom in Go, so such a source is never read.
        let literal = v.value.as_deref().is_some_and(|s| !s.is_empty());
        v.value_from.as_ref().filter(|_| !literal)
    });
    for from in sources {
        if from.field_ref.is_some() || from.resource_field_ref.is_some() {
            continue;
        }
        if let Some(cm) = &from.config_map_key_ref {
            refs.config_maps.insert(cm.name.clone());
        } else if let Some(s) = &from.secret_key_ref {
            refs.secrets.insert(s.name.clone());
        }
    }
    refs
}

/// Keys of one `envFrom` source left out because they are not valid variable names; the
/// caller records them as the Go kubelet's `InvalidEnvironmentVariableNames` Warning event on
/// the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedKeys {
    /// Secret or ConfigMap.
    pub kind: ObjectKind,
    /// The pod's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The skipped keys (with the source's prefix), sorted.
    pub keys: Vec<String>,
}

impl SkippedKeys {
    /// The event's message, in the Go kubelet's words.
    pub fn message(&self) -> String {
        let kind = match self.kind {
            ObjectKind::ConfigMap => "configMap",
            ObjectKind::Secret => "secret",
        };
        format!(
            "Keys [{}] from the EnvFrom {kind} {}/{} were skipped since they are considered invalid environment variable names.",
            self.keys.join(", "),
            self.namespace,
            self.name
        )
    }
}

/// Whether `name` is a valid environment variable name (the API's `IsEnvVarName`:
/// `[-._a-zA-Z][-._a-zA-Z0-9]*`, and not `.`, `..` or `..`-prefixed).
///
/// The Go kubelet 1.28 and 1.29 skip `envFrom` keys failing it; from 1.30 (relaxed
/// environment variable validation) the kubelet passes every key on. We follow 1.28.
pub fn is_env_var_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || matches!(b, b'-' | b'.' | b'_'));
    first_ok
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        && name != "."
        && !name.starts_with("..")
}

/// What a container's environment reads from one object: its string data.
pub(super) enum Data<'a> {
    /// A configMap's `data` (its `binaryData` never reaches the environment, as in Go).
    ConfigMap(&'a ConfigMap),
    /// A secret's `data`, bytes read as text.
    Secret(&'a Secret),
}

impl Data<'_> {
    /// The value under `key`.
    pub(super) fn get(&self, key: &str) -> Option<String> {
        match self {
            Data::ConfigMap(cm) => cm.data.as_ref()?.get(key).cloned(),
            Data::Secret(s) => s.data.as_ref()?.get(key).map(|v| bytes_to_string(&v.0)),
        }
    }

    /// Every key and value, in key order.
    pub(super) fn entries(&self) -> Vec<(String, String)> {
        match self {
            Data::ConfigMap(cm) => cm
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            Data::Secret(s) => s
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), bytes_to_string(&v.0)))
                .collect(),
        }
    }
}

/// Go's `string(bytes)`: the bytes as they are. CRI's strings must be UTF-8 here, so a
/// secret value that is not UTF-8 has its invalid sequences replaced by U+FFFD.
fn bytes_to_string(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The object `kind`/`name` of namespace `namespace` as the environment reads it:
/// `Ok(None)` when it is missing and `optional` (the reference is skipped), `Err` with the Go
/// kubelet's message when it cannot be read.
pub(super) fn lookup<'a>(
    objects: &'a EnvObjects,
    kind: ObjectKind,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<Option<Data<'a>>, String> {
    let fetched = match kind {
        ObjectKind::ConfigMap => objects
            .config_maps
            .get(name)
            .map(|f| f.as_ref().map(|o| o.as_deref().map(Data::ConfigMap))),
        ObjectKind::Secret => objects
            .secrets
            .get(name)
            .map(|f| f.as_ref().map(|o| o.as_deref().map(Data::Secret))),
    };
    let (go_kind, resource) = match kind {
        ObjectKind::ConfigMap => ("configMap", "configmap"),
        ObjectKind::Secret => ("secret", "secret"),
    };
    match fetched {
        // Standalone: Go fails before looking at `optional`.
        Some(Err(ObjectError::NoApiServer)) => Err(format!(
            "couldn't get {go_kind} {namespace}/{name}, no kubeClient defined"
        )),
        Some(Err(e)) => Err(e.to_string()),
        Some(Ok(Some(data))) => Ok(Some(data)),
        // The watch-based cache's NotFound names the resource in the singular.
        Some(Ok(None)) if optional => Ok(None),
        Some(Ok(None)) => Err(format!("{resource} \"{name}\" not found")),
        None => Err(ObjectError::NotRegistered {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
        .to_string()),
    }
}

/// `couldn't find key KEY in ConfigMap NS/NAME` (or `Secret`), Go's missing-key message.
pub(super) fn missing_key(kind: ObjectKind, key: &str, namespace: &str, name: &str) -> String {
    let kind = match kind {
        ObjectKind::ConfigMap => "ConfigMap",
        ObjectKind::Secret => "Secret",
    };
    format!("couldn't find key {key} in {kind} {namespace}/{name}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::podspec::testutil::pod;

    #[test]
    fn env_var_names_follow_the_api() {
        for ok in [
            "A",
            "a_b",
            "_x",
            "-x",
            ".x",
            "my.env-name",
            "MY_ENV.NAME",
            "MyEnvName1",
            "p_1234",
        ] {
            assert!(is_env_var_name(ok), "{ok}");
        }
        for bad in [
            "", "1234", "1z", ".", "..", "..x", "a b", "a=b", "é", "a:b", "a$",
        ] {
            assert!(!is_env_var_name(bad), "{bad}");
        }
    }

    #[test]
    fn references_are_collected() {
        let p = pod("metadata: {name: p, uid: u}
spec:
  containers:
  - name: c
    image: x
    envFrom:
    - configMapRef: {name: cm1}
    - {prefix: P_, secretRef: {name: s1}}
    env:
    - {name: A, valueFrom: {configMapKeyRef: {name: cm2, key: k}}}
    - {name: B, valueFrom: {secretKeyRef: {name: s2, key: k, optional: true}}}
    - {name: C, valueFrom: {secretKeyRef: {name: s1, key: k}}}
    - {name: D, value: lit, valueFrom: {secretKeyRef: {name: never, key: k}}}
    - {name: E, valueFrom: {fieldRef: {fieldPath: metadata.name}}}");
        let refs = env_references(&p.spec.as_ref().unwrap().containers[0]);
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(refs.config_maps, set(&["cm1", "cm2"]));
        assert_eq!(refs.secrets, set(&["s1", "s2"]));
        let plain = pod("metadata: {name: p, uid: u}
spec: {containers: [{name: c, image: x, env: [{name: A, value: b}]}]}");
        let refs = env_references(&plain.spec.as_ref().unwrap().containers[0]);
        assert_eq!(refs, EnvReferences::default());
    }

    #[test]
    fn skipped_keys_message_is_gos() {
        let s = SkippedKeys {
            kind: ObjectKind::ConfigMap,
            namespace: "test".into(),
            name: "test-config-map".into(),
            keys: vec!["1234".into(), "1z".into()],
        };
        assert_eq!(
            s.message(),
            "Keys [1234, 1z] from the EnvFrom configMap test/test-config-map were skipped since they are considered invalid environment variable names."
        );
        let s = SkippedKeys {
            kind: ObjectKind::Secret,
            keys: vec!["a b".into()],
            ..s
        };
        assert!(
            s.message().contains("from the EnvFrom secret test/"),
            "{}",
            s.message()
        );
    }

    #[test]
    fn lookup_messages_are_gos() {
        let mut objects = EnvObjects::default();
        objects.config_maps.insert("gone".into(), Ok(None));
        objects.secrets.insert("gone".into(), Ok(None));
        objects.secrets.insert(
            "down".into(),
            Err(ObjectError::Api("connection refused".into())),
        );
        objects
            .config_maps
            .insert("alone".into(), Err(ObjectError::NoApiServer));
        let err = |kind, name: &str, optional| {
            lookup(&objects, kind, "ns", name, optional)
                .err()
                .unwrap_or_default()
        };
        assert_eq!(
            err(ObjectKind::ConfigMap, "gone", false),
            "configmap \"gone\" not found"
        );
        assert_eq!(
            err(ObjectKind::Secret, "gone", false),
            "secret \"gone\" not found"
        );
        assert!(matches!(
            lookup(&objects, ObjectKind::Secret, "ns", "gone", true),
            Ok(None)
        ));
        assert_eq!(err(ObjectKind::Secret, "down", true), "connection refused");
        assert_eq!(
            err(ObjectKind::ConfigMap, "alone", true),
            "couldn't get configMap ns/alone, no kubeClient defined"
        );
        assert_eq!(
            err(ObjectKind::Secret, "unfetched", false),
            "object ns/unfetched not registered"
        );
        assert_eq!(
            missing_key(ObjectKind::Secret, "k", "ns", "s"),
            "couldn't find key k in Secret ns/s"
        );
    }
}
