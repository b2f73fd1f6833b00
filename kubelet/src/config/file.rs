//! The KubeletConfiguration file (`kubelet.config.k8s.io/v1beta1`, YAML or JSON): the fields
//! ferrolet uses are read with the Go kubelet's names and value forms; other fields of the
//! real schema are accepted, and named in one "not implemented" warning when set to other than
//! their Go default; anything else is an unknown field (one warning each, as the Go
//! kubelet's lenient decoding warns), while a bad value is refused with its field named.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

use super::{ChangeDetection, Config, ConfigError, LogFormat, container_manager, node, serving};
use crate::manifest::quantity::parse_quantity;
use ferrolet_proto::go_duration::parse_duration;

/// The only group/version and kind accepted.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The kind accepted.
pub const KIND: &str = "KubeletConfiguration";

/// Fields of the Go kubelet's KubeletConfiguration that ferrolet does not act on, each with
/// its Go default ("" = the zero value): accepted so that a file written for the Go kubelet
/// still loads, and named in the start-up warning when set to anything but the default (a
/// zero value is the default too, as Go's defaulting fills zero values in).
const IGNORED_FIELDS: &[(&str, &str)] = &[
    ("tlsCipherSuites", ""),
    ("tlsCurvePreferences", ""),
    ("tlsMinVersion", ""),
    ("registryPullQPS", "5"),
    ("registryBurst", "10"),
    (
        "imagePullCredentialsVerificationPolicy",
        "NeverVerifyPreloadedImages",
    ),
    ("preloadedImagesVerificationAllowlist", ""),
    ("eventRecordQPS", "50"),
    ("eventBurst", "100"),
    ("enableDebuggingHandlers", "true"),
    ("enableContentionProfiling", "false"),
    ("oomScoreAdj", "-999"),
    // No streaming endpoints: no idle streams to time out.
    ("streamingConnectionIdleTimeout", "4h0m0s"),
    ("imageMaximumGCAge", ""),
    ("volumeStatsAggPeriod", "1m0s"),
    ("kubeletCgroups", ""),
    ("systemCgroups", ""),
    ("singleProcessOOMKill", ""),
    ("cpuManagerPolicyOptions", ""),
    ("draManagerReconcilePeriod", ""),
    ("memoryManagerPolicy", "None"),
    ("topologyManagerPolicy", "none"),
    ("topologyManagerScope", "container"),
    ("topologyManagerPolicyOptions", ""),
    ("hairpinMode", "promiscuous-bridge"),
    ("podCIDR", ""),
    ("runOnce", "false"),
    ("maxOpenFiles", "1000000"),
    ("contentType", "application/vnd.kubernetes.protobuf"),
    ("kubeAPIQPS", "50"),
    ("kubeAPIBurst", "100"),
    ("maxParallelImagePulls", ""),
    ("podsPerCore", ""),
    ("enableControllerAttachDetach", "true"),
    ("protectKernelDefaults", "false"),
    ("makeIPTablesUtilChains", "true"),
    ("iptablesMasqueradeBit", "14"),
    ("iptablesDropBit", "15"),
    ("failSwapOn", "true"),
    ("memorySwap", ""),
    ("containerLogMaxWorkers", "1"),
    ("containerLogMonitorInterval", "10s"),
    ("showHiddenMetricsForVersion", ""),
    ("allowedUnsafeSysctls", ""),
    ("kernelMemcgNotification", "false"),
    ("enableSystemLogHandler", "true"),
    ("enableSystemLogQuery", "false"),
    ("shutdownGracePeriod", ""),
    ("shutdownGracePeriodCriticalPods", ""),
    ("shutdownGracePeriodByPodPriority", ""),
    ("crashLoopBackOff", ""),
    ("reservedMemory", ""),
    ("enableProfilingHandler", "true"),
    ("enableDebugFlagsHandler", "true"),
    ("seccompDefault", "false"),
    ("memoryReservationPolicy", ""),
    ("tracing", ""),
    ("localStorageCapacityIsolation", "true"),
    ("userNamespaces", ""),
    ("podHousekeepingPeriod", ""),
];

/// Fields of `logging` (component-base LoggingConfiguration) other than format/verbosity,
/// with their defaults as [`IGNORED_FIELDS`].
const IGNORED_LOGGING_FIELDS: &[(&str, &str)] =
    &[("flushFrequency", "5s"), ("vmodule", ""), ("options", "")];

/// What reading the file has to say: one warning per unknown field, and the fields set that
/// ferrolet does not implement (gathered into one warning by [`super::Config::load`]).
#[derive(Debug, Default)]
pub(super) struct Notes {
    /// Unknown fields and the like, one line each.
    pub warnings: Vec<String>,
    /// Fields of the schema set to something ferrolet does not do.
    pub ignored: Vec<String>,
}

/// Whether `v` asks for nothing but the Go default `default` ("" = the zero value).
fn is_default(v: &Value, default: &str) -> bool {
    let zero = |v: &Value| match v {
        Value::Null => true,
        Value::Bool(b) => !*b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => {
            s.is_empty()
                || parse_duration(s).is_ok_and(|d| d.is_zero())
                || parse_quantity(s).is_ok_and(|q| q.nanos() == 0)
        }
        Value::Sequence(items) => items.is_empty(),
        Value::Mapping(_) | Value::Tagged(_) => false,
    };
    match v {
        Value::Bool(b) => b.to_string() == default || (default.is_empty() && !*b),
        Value::String(s) => {
            zero(v)
                || s == default
                || parse_duration(s)
                    .ok()
                    .zip(parse_duration(default).ok())
                    .is_some_and(|(a, b)| a == b)
        }
        Value::Number(n) => zero(v) || n.to_string() == default,
        Value::Sequence(items) => {
            let strings: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            zero(v) || strings.is_some_and(|s| format!("[{}]", s.join(",")) == default)
        }
        // An object is the default when everything in it is.
        Value::Mapping(m) => m.values().all(|v| is_default(v, "")),
        Value::Null => true,
        Value::Tagged(_) => false,
    }
}

pub(super) fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// Reads `text` (the file at `path`) over `config`; returns what it has to say.
pub(super) fn apply(config: &mut Config, path: &Path, text: &str) -> Result<Notes, ConfigError> {
    let parse_err = |reason: String| ConfigError::Parse {
        path: path.to_path_buf(),
        reason,
    };
    crate::yaml::check_flow_depth(text.as_bytes()).map_err(|e| parse_err(e.to_string()))?;
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| parse_err(e.to_string()))?;
    let map = match doc {
        Value::Mapping(m) => m,
        Value::Null => return Err(parse_err("the file is empty".into())),
        _ => return Err(parse_err("not a KubeletConfiguration object".into())),
    };
    let api_version = get_str(&map, "apiVersion")?.unwrap_or_default();
    if api_version != API_VERSION {
        return Err(invalid(
            "apiVersion",
            format!("{api_version:?} is not {API_VERSION:?}"),
        ));
    }
    let kind = get_str(&map, "kind")?.unwrap_or_default();
    if kind != KIND {
        return Err(invalid("kind", format!("{kind:?} is not {KIND:?}")));
    }
    let mut notes = Notes::default();
    let (mut report_frequency_set, mut update_frequency_set) = (false, false);
    for (k, v) in &map {
        let Some(key) = k.as_str() else {
            notes.warnings.push(format!(
                "{}: a non-string key {k:?} (ignored)",
                path.display()
            ));
            continue;
        };
        match key {
            "nodeStatusReportFrequency" => report_frequency_set = duration(key, v)?.is_some(),
            "nodeStatusUpdateFrequency" => update_frequency_set = duration(key, v)?.is_some(),
            _ => {}
        }
        if field(config, key, v)? {
            continue;
        }
        if key == "logging" {
            logging(config, path, v, &mut notes)?;
        } else if key == "authentication" {
            serving::authentication(config, path, v, &mut notes.warnings)?;
        } else if key == "authorization" {
            serving::authorization(config, path, v, &mut notes.warnings)?;
        } else if key == "featureGates" {
            config.feature_gates = container_manager::feature_gates(key, v)?;
            notes.ignored.extend(
                config
                    .feature_gates
                    .iter()
                    .filter(|(gate, on)| {
                        **on && !container_manager::HONOURED_FEATURE_GATES.contains(&gate.as_str())
                    })
                    .map(|(gate, _)| format!("featureGates.{gate}")),
            );
        } else if let Some((_, default)) = IGNORED_FIELDS.iter().find(|(f, _)| *f == key) {
            if !is_default(v, default) {
                notes.ignored.push(key.to_string());
            }
        } else {
            notes.warnings.push(format!(
                "{}: unknown field {key:?} (ignored)",
                path.display()
            ));
        }
    }
    // Go's defaulting: the report period follows an update period set without it.
    if !report_frequency_set && update_frequency_set {
        config.node_status_report_frequency = config.node_status_update_frequency;
    }
    Ok(notes)
}

/// Applies one top-level field; false when it is not one ferrolet reads.
fn field(c: &mut Config, key: &str, v: &Value) -> Result<bool, ConfigError> {
    match key {
        "apiVersion" | "kind" => {}
        "staticPodPath" => {
            c.static_pod_path = string(key, v)?.filter(|s| !s.is_empty()).map(PathBuf::from)
        }
        "staticPodURL" => c.static_pod_url = string(key, v)?.filter(|s| !s.is_empty()),
        "staticPodURLHeader" => c.static_pod_url_header = header_map(key, v)?,
        "fileCheckFrequency" => set(&mut c.file_check_frequency, duration(key, v)?),
        "httpCheckFrequency" => set(&mut c.http_check_frequency, duration(key, v)?),
        "syncFrequency" => set(&mut c.sync_frequency, duration(key, v)?),
        "runtimeRequestTimeout" => set(&mut c.runtime_request_timeout, duration(key, v)?),
        "containerRuntimeEndpoint" => set(&mut c.container_runtime_endpoint, nonempty(key, v)?),
        "imageServiceEndpoint" => {
            if let Some(s) = string(key, v)? {
                c.image_service_endpoint = s;
            }
        }
        "address" => set(&mut c.address, ip(key, v)?),
        "healthzBindAddress" => set(&mut c.healthz_bind_address, ip(key, v)?),
        "readOnlyPort" => set(&mut c.read_only_port, port(key, v)?),
        "healthzPort" => set(&mut c.healthz_port, port(key, v)?),
        "enableServer" => set(&mut c.enable_server, boolean(key, v)?),
        "port" => set(&mut c.port, port(key, v)?),
        "tlsCertFile" => c.tls_cert_file = nonempty(key, v)?.map(PathBuf::from),
        "tlsPrivateKeyFile" => c.tls_private_key_file = nonempty(key, v)?.map(PathBuf::from),
        "maxPods" => set(
            &mut c.max_pods,
            integer(key, v, 0, i64::from(i32::MAX))?.map(|n| n as u32),
        ),
        "clusterDNS" => c.cluster_dns = ip_list(key, v)?,
        "clusterDomain" => c.cluster_domain = string(key, v)?.unwrap_or_default(),
        // A pointer in Go: unset means the default, "" means no host DNS for pods.
        "resolvConf" => set(&mut c.resolv_conf, string(key, v)?.map(PathBuf::from)),
        "serializeImagePulls" => set(&mut c.serialize_image_pulls, boolean(key, v)?),
        "podLogsDir" => set(&mut c.pod_logs_dir, nonempty(key, v)?.map(PathBuf::from)),
        "containerLogMaxSize" => set(&mut c.container_log_max_size, size(key, v)?),
        "containerLogMaxFiles" => set(
            &mut c.container_log_max_files,
            integer(key, v, i64::from(i32::MIN), i64::from(i32::MAX))?
                .map(|n| {
                    u32::try_from(n)
                        .ok()
                        .filter(|n| *n > 1)
                        .ok_or_else(|| invalid(key, format!("{n}: must be greater than 1")))
                })
                .transpose()?,
        ),
        "cgroupRoot" => set(&mut c.cgroup_root, nonempty(key, v)?),
        // Range-checked with the flags' values in Config::check, in Go's words.
        "imageGCHighThresholdPercent" => set(
            &mut c.gc.image_gc_high_threshold_percent,
            integer(key, v, i64::from(i32::MIN), i64::from(i32::MAX))?.map(|n| n as i32),
        ),
        "imageGCLowThresholdPercent" => set(
            &mut c.gc.image_gc_low_threshold_percent,
            integer(key, v, i64::from(i32::MIN), i64::from(i32::MAX))?.map(|n| n as i32),
        ),
        "imageMinimumGCAge" => set(&mut c.gc.image_minimum_gc_age, duration(key, v)?),
        "registerNode" => set(&mut c.register_node, boolean(key, v)?),
        "registerWithTaints" => c.register_with_taints = taint_list(key, v)?,
        "rotateCertificates" => set(&mut c.rotate_certificates, boolean(key, v)?),
        "serverTLSBootstrap" => set(&mut c.server_tls_bootstrap, boolean(key, v)?),
        "nodeStatusUpdateFrequency" => set(&mut c.node_status_update_frequency, duration(key, v)?),
        "nodeStatusReportFrequency" => set(&mut c.node_status_report_frequency, duration(key, v)?),
        "nodeLeaseDurationSeconds" => set(
            &mut c.node_lease_duration_seconds,
            integer(key, v, 0, i64::from(i32::MAX))?
                .filter(|n| *n != 0)
                .map(|n| n as u32),
        ),
        "nodeStatusMaxImages" => set(
            &mut c.node_status_max_images,
            integer(key, v, i64::from(i32::MIN), i64::from(i32::MAX))?.map(|n| n as i32),
        ),
        "kubeReserved" => c.kube_reserved = string_map(key, v)?,
        "systemReserved" => c.system_reserved = string_map(key, v)?,
        "providerID" => c.provider_id = string(key, v)?.unwrap_or_default(),
        "configMapAndSecretChangeDetectionStrategy" => {
            if let Some(s) = nonempty(key, v)? {
                c.config_map_and_secret_change_detection_strategy = ChangeDetection::parse(&s)
                    .ok_or_else(|| {
                        invalid(
                            key,
                            format!("{s:?} is not one of \"Get\", \"Cache\", \"Watch\""),
                        )
                    })?;
            }
        }
        "volumePluginDir" => set(
            &mut c.volume_plugin_dir,
            nonempty(key, v)?.map(PathBuf::from),
        ),
        k if container_manager::FIELDS.contains(&k) => container_manager::apply_field(c, k, v)?,
        k if crate::eviction::config::FIELDS.contains(&k) => {
            crate::eviction::config::apply_field(&mut c.eviction, k, v)
                .map_err(|(field, reason)| invalid(&field, reason))?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn logging(c: &mut Config, path: &Path, v: &Value, notes: &mut Notes) -> Result<(), ConfigError> {
    let map = match v {
        Value::Null => return Ok(()),
        Value::Mapping(m) => m,
        _ => return Err(invalid("logging", "must be an object")),
    };
    for (k, v) in map {
        match k.as_str() {
            Some("format") => match string("logging.format", v)?.as_deref() {
                None | Some("") | Some("text") => c.log_format = LogFormat::Text,
                Some("json") => c.log_format = LogFormat::Json,
                Some(other) => {
                    return Err(invalid(
                        "logging.format",
                        format!("unsupported log format {other:?} (want \"text\" or \"json\")"),
                    ));
                }
            },
            Some("verbosity") => {
                if let Some(n) = integer("logging.verbosity", v, 0, i64::from(u8::MAX))? {
                    c.verbosity = n as u8;
                }
            }
            Some(k) => match IGNORED_LOGGING_FIELDS.iter().find(|(f, _)| *f == k) {
                Some((_, default)) => {
                    if !is_default(v, default) {
                        notes.ignored.push(format!("logging.{k}"));
                    }
                }
                None => notes.warnings.push(format!(
                    "{}: unknown field \"logging.{k}\" (ignored)",
                    path.display()
                )),
            },
            None => notes.warnings.push(format!(
                "{}: a non-string key in \"logging\" (ignored)",
                path.display()
            )),
        }
    }
    Ok(())
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

fn get_str(map: &Mapping, key: &str) -> Result<Option<String>, ConfigError> {
    match map.get(key) {
        None => Ok(None),
        Some(v) => string(key, v),
    }
}

pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "an object",
        Value::Tagged(_) => "a tagged value",
    }
}

/// A string; null is unset.
pub(super) fn string(key: &str, v: &Value) -> Result<Option<String>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(invalid(
            key,
            format!("must be a string, not {}", type_name(other)),
        )),
    }
}

/// A string where "" means the default (Go's zero value).
pub(super) fn nonempty(key: &str, v: &Value) -> Result<Option<String>, ConfigError> {
    Ok(string(key, v)?.filter(|s| !s.is_empty()))
}

/// A Go duration string; zero means the default, as Go's defaulting treats it.
pub(super) fn duration(key: &str, v: &Value) -> Result<Option<Duration>, ConfigError> {
    match string(key, v)? {
        None => Ok(None),
        Some(s) => {
            let d = parse_duration(&s).map_err(|e| invalid(key, e.to_string()))?;
            Ok(Some(d).filter(|d| !d.is_zero()))
        }
    }
}

pub(super) fn boolean(key: &str, v: &Value) -> Result<Option<bool>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        other => Err(invalid(
            key,
            format!("must be true or false, not {}", type_name(other)),
        )),
    }
}

/// A number.
pub(super) fn float(key: &str, v: &Value) -> Result<Option<f64>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| invalid(key, format!("{n} is not a number"))),
        other => Err(invalid(
            key,
            format!("must be a number, not {}", type_name(other)),
        )),
    }
}

/// An integer within `[min, max]`.
pub(super) fn integer(
    key: &str,
    v: &Value,
    min: i64,
    max: i64,
) -> Result<Option<i64>, ConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_i64() {
            Some(i) if (min..=max).contains(&i) => Ok(Some(i)),
            Some(i) => Err(invalid(
                key,
                format!("{i} must be between {min} and {max}, inclusive"),
            )),
            None => Err(invalid(key, format!("{n} is not an integer"))),
        },
        other => Err(invalid(
            key,
            format!("must be an integer, not {}", type_name(other)),
        )),
    }
}

/// A port, 0 meaning off.
fn port(key: &str, v: &Value) -> Result<Option<u16>, ConfigError> {
    Ok(integer(key, v, 0, 65535)?.map(|n| n as u16))
}

/// An IP address; "" is the default.
fn ip(key: &str, v: &Value) -> Result<Option<IpAddr>, ConfigError> {
    match nonempty(key, v)? {
        None => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| invalid(key, format!("{s:?} is not an IP address"))),
    }
}

fn ip_list(key: &str, v: &Value) -> Result<Vec<IpAddr>, ConfigError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Sequence(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let field = format!("{key}[{i}]");
                ip(&field, item)?.ok_or_else(|| invalid(&field, "an empty IP address"))
            })
            .collect(),
        other => Err(invalid(
            key,
            format!("must be a list of IP addresses, not {}", type_name(other)),
        )),
    }
}

/// A quantity of bytes (`10Mi`).
fn size(key: &str, v: &Value) -> Result<Option<u64>, ConfigError> {
    let Some(s) = nonempty(key, v)? else {
        return Ok(None);
    };
    let q = parse_quantity(&s).map_err(|e| invalid(key, format!("{s:?}: {e}")))?;
    u64::try_from(q.value_ceil())
        .map(Some)
        .map_err(|_| invalid(key, format!("{s:?} must be a non-negative size")))
}

/// `map[string][]string`, as Go's http.Header.
fn header_map(key: &str, v: &Value) -> Result<BTreeMap<String, Vec<String>>, ConfigError> {
    let entry = |name: &str| format!("{key}[{name}]");
    keyed_map(
        key,
        v,
        (
            "header names to lists of values",
            "header names must be strings",
        ),
        entry,
        |field, values| match values {
            Value::Null => Ok(Vec::new()),
            Value::Sequence(vs) => vs
                .iter()
                .map(|v| string(field, v).map(Option::unwrap_or_default))
                .collect(),
            other => Err(invalid(
                field,
                format!("must be a list of strings, not {}", type_name(other)),
            )),
        },
    )
}

/// `map[string]string` (`kubeReserved`, `systemReserved`, `qosReserved`); values checked by
/// the config check.
pub(super) fn string_map(key: &str, v: &Value) -> Result<BTreeMap<String, String>, ConfigError> {
    let entry = |name: &str| format!("{key}[{name}]");
    keyed_map(
        key,
        v,
        ("strings", "keys must be strings"),
        entry,
        |field, v| match v {
            Value::String(s) => Ok(s.clone()),
            // `pid: 100` is a number in YAML, a quantity string in Go's schema.
            Value::Number(n) => Ok(n.to_string()),
            other => Err(invalid(
                field,
                format!("must be a string, not {}", type_name(other)),
            )),
        },
    )
}

/// A YAML map with string keys (null: empty), each value read by `value` under the field
/// name `entry` gives it. `words` are (what the map holds, for "must be a map of …", and the
/// error for a key that is not a string).
pub(super) fn keyed_map<T>(
    key: &str,
    v: &Value,
    words: (&str, &str),
    entry: impl Fn(&str) -> String,
    value: impl Fn(&str, &Value) -> Result<T, ConfigError>,
) -> Result<BTreeMap<String, T>, ConfigError> {
    let (holds, bad_key) = words;
    let map = match v {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Mapping(m) => m,
        other => {
            return Err(invalid(
                key,
                format!("must be a map of {holds}, not {}", type_name(other)),
            ));
        }
    };
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let k = k.as_str().ok_or_else(|| invalid(key, bad_key))?;
        out.insert(k.to_string(), value(&entry(k), v)?);
    }
    Ok(out)
}

/// `registerWithTaints`: a list of `{key, value, effect}` objects.
fn taint_list(key: &str, v: &Value) -> Result<Vec<k8s_openapi::api::core::v1::Taint>, ConfigError> {
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Sequence(items) => items,
        other => {
            return Err(invalid(
                key,
                format!("must be a list of taints, not {}", type_name(other)),
            ));
        }
    };
    let mut specs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let field = format!("{key}[{i}]");
        let Value::Mapping(m) = item else {
            return Err(invalid(&field, "must be an object"));
        };
        let get = |k: &str| -> Result<String, ConfigError> {
            match m.get(k) {
                None => Ok(String::new()),
                Some(v) => Ok(string(&format!("{field}.{k}"), v)?.unwrap_or_default()),
            }
        };
        for k in m.keys() {
            let k = k.as_str().unwrap_or("?");
            if !matches!(k, "key" | "value" | "effect" | "timeAdded") {
                return Err(invalid(&field, format!("unknown field {k:?}")));
            }
        }
        let (k, value, effect) = (get("key")?, get("value")?, get("effect")?);
        specs.push(if value.is_empty() {
            format!("{k}:{effect}")
        } else {
            format!("{k}={value}:{effect}")
        });
    }
    node::taints(key, specs.iter().map(String::as_str))
}
