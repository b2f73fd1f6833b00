//! Reading the KubeletConfiguration file (YAML or JSON) into [`KubeletConfiguration`]: its
//! `apiVersion` and `kind` checked, each unknown field warned about once by its full path (as
//! the Go kubelet's lenient decoding warns), a bad value refused with its field named, and the
//! fields of the schema that ferrolet does not act on named when set to other than their
//! default.

use std::path::Path;

use serde_yaml_ng::Value;

use super::ConfigError;
use super::container_manager::HONOURED_FEATURE_GATES;
use super::v1beta1::{API_VERSION, KIND, KubeletConfiguration};

/// Fields (dotted paths) of the schema that ferrolet accepts but does not act on, in Go's
/// order: each is named in the start-up warning when the file sets it to other than its
/// default (after Go's defaulting, so a zero value that Go fills in is the default too).
pub(super) const NOT_IMPLEMENTED: &[&str] = &[
    "tlsCipherSuites",
    "tlsMinVersion",
    "tlsCurvePreferences",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "eventRecordQPS",
    "eventBurst",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "oomScoreAdj",
    // No streaming connections of our own to time out.
    "streamingConnectionIdleTimeout",
    "imageMaximumGCAge",
    "volumeStatsAggPeriod",
    "kubeletCgroups",
    "systemCgroups",
    "singleProcessOOMKill",
    "cpuManagerPolicyOptions",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "hairpinMode",
    "podCIDR",
    "runOnce",
    "maxOpenFiles",
    "contentType",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "maxParallelImagePulls",
    "podsPerCore",
    "enableControllerAttachDetach",
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "memorySwap",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "showHiddenMetricsForVersion",
    "allowedUnsafeSysctls",
    "volumePluginDir",
    "kernelMemcgNotification",
    "logging.flushFrequency",
    "logging.vmodule",
    "logging.options",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "reservedMemory",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "seccompDefault",
    "tracing",
    "localStorageCapacityIsolation",
    "memoryReservationPolicy",
    "podHousekeepingPeriod",
    "draManagerReconcilePeriod",
];

/// Map fields whose entries an error names as `field[key]` (their keys are data, not field
/// names: `evictionHard[nodefs.available]`).
const KEYED_MAPS: &[&str] = &[
    "staticPodURLHeader",
    "kubeReserved",
    "systemReserved",
    "qosReserved",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMinimumReclaim",
    "cpuManagerPolicyOptions",
    "topologyManagerPolicyOptions",
];

/// A file read: its configuration (not defaulted), one warning per unknown field, and the
/// fields it sets that ferrolet does not implement.
#[derive(Debug)]
pub(super) struct Decoded {
    /// The file's configuration, as written.
    pub config: KubeletConfiguration,
    /// Unknown fields and the like, one line each.
    pub warnings: Vec<String>,
    /// Fields set to something ferrolet does not do.
    pub not_implemented: Vec<String>,
}

pub(super) fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// Appends `key` to a field path: `[key]` inside [`KEYED_MAPS`], `.key` elsewhere.
fn push_key(out: &mut String, key: &str) {
    if out.is_empty() {
        out.push_str(key);
    } else if KEYED_MAPS.contains(&out.as_str()) {
        out.push_str(&format!("[{key}]"));
    } else {
        out.push('.');
        out.push_str(key);
    }
}

/// The field a decoding error is in.
fn error_path(path: &serde_path_to_error::Path) -> String {
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            serde_path_to_error::Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            serde_path_to_error::Segment::Map { key } => push_key(&mut out, key),
            serde_path_to_error::Segment::Enum { .. } | serde_path_to_error::Segment::Unknown => {}
        }
    }
    out
}

/// The field an ignored value was at.
fn ignored_path(path: &serde_ignored::Path) -> String {
    use serde_ignored::Path as P;
    match path {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        P::Map { parent, key } => {
            let mut out = ignored_path(parent);
            push_key(&mut out, key);
            out
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            ignored_path(parent)
        }
    }
}

/// Typed decoding of a YAML value: the configuration and the paths of the fields it ignored;
/// an error names its field.
pub(super) fn from_value(value: Value) -> Result<(KubeletConfiguration, Vec<String>), ConfigError> {
    let mut unknown = Vec::new();
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(value, &mut track);
    let decoded: Result<KubeletConfiguration, _> =
        serde_ignored::deserialize(de, |p| unknown.push(ignored_path(&p)));
    match decoded {
        Ok(c) => Ok((c, unknown)),
        Err(e) => {
            let field = error_path(&track.path());
            let field = if field.is_empty() {
                "(the file)".to_string()
            } else {
                field
            };
            Err(invalid(&field, e.to_string()))
        }
    }
}

/// The field at a dotted path of a JSON object.
fn lookup<'v>(v: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// The fields of [`NOT_IMPLEMENTED`] that `config` (defaulted) sets to other than the
/// default, and the feature gates it turns on that ferrolet does not act on.
pub(super) fn not_implemented(config: &KubeletConfiguration) -> Vec<String> {
    let ours = serde_json::to_value(config).unwrap_or_default();
    let defaults = serde_json::to_value(KubeletConfiguration::defaulted()).unwrap_or_default();
    let mut out: Vec<String> = NOT_IMPLEMENTED
        .iter()
        .filter(|f| lookup(&ours, f) != lookup(&defaults, f))
        .map(|f| f.to_string())
        .collect();
    out.extend(
        config
            .feature_gates
            .iter()
            .filter(|(gate, on)| **on && !HONOURED_FEATURE_GATES.contains(&gate.as_str()))
            .map(|(gate, _)| format!("featureGates.{gate}")),
    );
    out
}

/// Reads `text` (the file at `path`).
pub(super) fn decode(path: &Path, text: &str) -> Result<Decoded, ConfigError> {
    let parse_err = |reason: String| ConfigError::Parse {
        path: path.to_path_buf(),
        reason,
    };
    crate::yaml::check_flow_depth(text.as_bytes()).map_err(|e| parse_err(e.to_string()))?;
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| parse_err(e.to_string()))?;
    let mut map = match doc {
        Value::Mapping(m) => m,
        Value::Null => return Err(parse_err("the file is empty".into())),
        _ => return Err(parse_err("not a KubeletConfiguration object".into())),
    };
    let header = |key: &str| -> Result<String, ConfigError> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(invalid(key, "must be a string")),
        }
    };
    let api_version = header("apiVersion")?;
    if api_version != API_VERSION {
        return Err(invalid(
            "apiVersion",
            format!("{api_version:?} is not {API_VERSION:?}"),
        ));
    }
    let kind = header("kind")?;
    if kind != KIND {
        return Err(invalid("kind", format!("{kind:?} is not {KIND:?}")));
    }
    let mut warnings = Vec::new();
    // A key that is not a string names no field (and serde would read a number as a field's
    // index). `retain` keeps the file's order, which the warnings follow.
    map.retain(|k, _| {
        if matches!(k.as_str(), Some("apiVersion" | "kind")) {
            return false;
        }
        let keep = k.is_string();
        if !keep {
            warnings.push(format!(
                "{}: a non-string key {k:?} (ignored)",
                path.display()
            ));
        }
        keep
    });
    let (config, unknown) = from_value(Value::Mapping(map))?;
    warnings.extend(
        unknown
            .iter()
            .map(|f| format!("{}: unknown field {f:?} (ignored)", path.display())),
    );
    let mut defaulted = config.clone();
    defaulted.set_defaults();
    Ok(Decoded {
        not_implemented: not_implemented(&defaulted),
        config,
        warnings,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_not_implemented_name_is_a_field() {
        for name in NOT_IMPLEMENTED {
            // Each set to null decodes as a known field: no unknown-field warning.
            let (top, rest) = name.split_once('.').unwrap_or((name, ""));
            let yaml = if rest.is_empty() {
                format!("{top}: null\n")
            } else {
                format!("{top}: {{{rest}: null}}\n")
            };
            let value: Value = serde_yaml_ng::from_str(&yaml).unwrap();
            let (_, unknown) = from_value(value).unwrap();
            assert!(unknown.is_empty(), "{name}: {unknown:?}");
        }
    }

    #[test]
    fn paths_name_fields_list_items_and_map_entries() {
        let err = |yaml: &str| match from_value(serde_yaml_ng::from_str(yaml).unwrap()) {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(err("clusterDNS: [a, 1]"), "clusterDNS[1]");
        assert_eq!(
            err("evictionHard: {memory.available: [1]}"),
            "evictionHard[memory.available]"
        );
        assert_eq!(err("featureGates: {A: maybe}"), "featureGates.A");
        assert_eq!(
            err("authentication: {webhook: {cacheTTL: 5}}"),
            "authentication.webhook.cacheTTL"
        );
        let (_, unknown) = from_value(
            serde_yaml_ng::from_str(
                "authentication: {x509: {bogus: 1}}\nregisterWithTaints: [{key: a, effect: NoSchedule, x: 1}]\nlogging: {foo: 1}",
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            unknown,
            [
                "authentication.x509.bogus",
                "registerWithTaints[0].x",
                "logging.foo"
            ]
        );
    }
}
