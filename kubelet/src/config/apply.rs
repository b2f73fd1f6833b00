//! The flags given, laid over the settings: those that are KubeletConfiguration fields over
//! the typed struct ([`typed_flags`]), before the one conversion into [`Config`]; the others
//! (`--root-dir`, `--kubeconfig`, …) over the converted settings
//! ([`Config::apply_runtime_flags`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::container_manager::{QOS_RESERVED, cpu_manager_policy};
use super::convert::authorization_mode;
use super::file::{self, invalid};
use super::flags::{GO_FLAGS, GoFlagKind};
use super::v1beta1::{GoDuration, KubeletConfiguration, RegisterTaint};
use super::{
    CloudProvider, Config, ConfigError, DEFAULT_VOLUME_PLUGIN_DIR, Flags, LogFormat, header_flags,
    node,
};

fn set<T: Clone>(slot: &mut T, v: &Option<T>) {
    if let Some(v) = v {
        *slot = v.clone();
    }
}

fn path_string(p: &Path) -> String {
    p.display().to_string()
}

/// Lays the flags given that are KubeletConfiguration fields over `kc`; returns the flags
/// given that ferrolet does not implement.
pub(super) fn typed_flags(
    kc: &mut KubeletConfiguration,
    f: &Flags,
) -> Result<Vec<String>, ConfigError> {
    if let Some(p) = &f.pod_manifest_path {
        kc.static_pod_path = path_string(p);
    }
    set(&mut kc.static_pod_url, &f.manifest_url);
    if !f.manifest_url_header.is_empty() {
        kc.static_pod_url_header = header_flags(&f.manifest_url_header)?;
    }
    set(
        &mut kc.container_runtime_endpoint,
        &f.container_runtime_endpoint,
    );
    set(&mut kc.image_service_endpoint, &f.image_service_endpoint);
    if let Some(p) = f.read_only_port {
        kc.read_only_port = i32::from(p);
    }
    if let Some(p) = f.healthz_port {
        kc.healthz_port = Some(i32::from(p));
    }
    if let Some(ip) = f.healthz_bind_address {
        kc.healthz_bind_address = ip.to_string();
    }
    if let Some(ip) = f.address {
        kc.address = ip.to_string();
    }
    if let Some(n) = f.max_pods {
        kc.max_pods = Some(i32::try_from(n).map_err(|_| {
            invalid(
                "maxPods (--max-pods)",
                format!("{n} must be at most {}", i32::MAX),
            )
        })?);
    }
    if !f.cluster_dns.is_empty() {
        kc.cluster_dns = f.cluster_dns.iter().map(ToString::to_string).collect();
    }
    set(&mut kc.cluster_domain, &f.cluster_domain);
    if let Some(p) = &f.resolv_conf {
        kc.resolv_conf = Some(path_string(p));
    }
    set(&mut kc.cgroup_root, &f.cgroup_root);
    for (slot, v) in [
        (&mut kc.file_check_frequency, f.file_check_frequency),
        (&mut kc.http_check_frequency, f.http_check_frequency),
        (&mut kc.sync_frequency, f.sync_frequency),
        (&mut kc.runtime_request_timeout, f.runtime_request_timeout),
        (
            &mut kc.node_status_update_frequency,
            f.node_status_update_frequency,
        ),
        (
            &mut kc.image_minimum_gc_age,
            f.gc.minimum_image_ttl_duration,
        ),
        (
            &mut kc.cpu_manager_reconcile_period,
            f.cm.cpu_manager_reconcile_period,
        ),
    ] {
        if let Some(d) = v {
            *slot = GoDuration(d);
        }
    }
    if let Some(v) = f.v {
        kc.logging.verbosity = u32::from(v);
    }
    if let Some(format) = f.log_format {
        kc.logging.format = match format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
        .into();
    }
    if f.gc.image_gc_high_threshold.is_some() {
        kc.image_gc_high_threshold_percent = f.gc.image_gc_high_threshold;
    }
    if f.gc.image_gc_low_threshold.is_some() {
        kc.image_gc_low_threshold_percent = f.gc.image_gc_low_threshold;
    }
    container_manager_flags(kc, f)?;
    serving_flags(kc, f)?;
    let mut ignored = node_flags(kc, f)?;
    ignored.extend(go_flags(kc, &f.go.given)?);
    Ok(ignored)
}

/// The container manager's flags.
fn container_manager_flags(kc: &mut KubeletConfiguration, f: &Flags) -> Result<(), ConfigError> {
    let cm = &f.cm;
    if cm.cgroups_per_qos.is_some() {
        kc.cgroups_per_qos = cm.cgroups_per_qos;
    }
    set(&mut kc.cgroup_driver, &cm.cgroup_driver);
    if !cm.enforce_node_allocatable.is_empty() {
        // As Go's string-slice flag: comma-separated, repeatable, "" for an empty list.
        kc.enforce_node_allocatable = Some(
            cm.enforce_node_allocatable
                .iter()
                .filter(|v| !v.is_empty())
                .flat_map(|v| v.split(','))
                .map(String::from)
                .collect(),
        );
    }
    set(&mut kc.kube_reserved_cgroup, &cm.kube_reserved_cgroup);
    set(&mut kc.system_reserved_cgroup, &cm.system_reserved_cgroup);
    if cm.pod_max_pids.is_some() {
        kc.pod_pids_limit = cm.pod_max_pids;
    }
    if !cm.qos_reserved.is_empty() {
        kc.qos_reserved = node::pairs(QOS_RESERVED, &cm.qos_reserved)?;
    }
    if let Some(p) = &cm.cpu_manager_policy {
        cpu_manager_policy(p)?;
        kc.cpu_manager_policy = p.clone();
    }
    set(&mut kc.reserved_system_cpus, &cm.reserved_cpus);
    if cm.cpu_cfs_quota.is_some() {
        kc.cpu_cfs_quota = cm.cpu_cfs_quota;
    }
    if let Some(d) = cm.cpu_cfs_quota_period {
        kc.cpu_cfs_quota_period = Some(GoDuration(d));
    }
    Ok(())
}

/// The secure API's flags.
fn serving_flags(kc: &mut KubeletConfiguration, f: &Flags) -> Result<(), ConfigError> {
    if let Some(p) = f.port {
        kc.port = Some(i32::from(p));
    }
    if let Some(p) = &f.tls_cert_file {
        kc.tls_cert_file = path_string(p);
    }
    if let Some(p) = &f.tls_private_key_file {
        kc.tls_private_key_file = path_string(p);
    }
    if let Some(p) = &f.client_ca_file {
        kc.authentication.x509.client_ca_file = path_string(p);
    }
    if f.anonymous_auth.is_some() {
        kc.authentication.anonymous.enabled = f.anonymous_auth;
    }
    if f.authentication_token_webhook.is_some() {
        kc.authentication.webhook.enabled = f.authentication_token_webhook;
    }
    if let Some(m) = f.authorization_mode.as_deref().filter(|m| !m.is_empty()) {
        authorization_mode("authorization.mode (--authorization-mode)", m)?;
        kc.authorization.mode = m.to_string();
    }
    Ok(())
}

/// The node's flags that are fields; returns `--volume-plugin-dir` when it asks for
/// flexvolume plugins ferrolet does not have.
fn node_flags(kc: &mut KubeletConfiguration, f: &Flags) -> Result<Vec<String>, ConfigError> {
    if f.register_node.is_some() {
        kc.register_node = f.register_node;
    }
    if let Some(t) = &f.register_with_taints {
        let specs = t.split(',').filter(|s| !s.is_empty());
        kc.register_with_taints = node::taints("--register-with-taints", specs)?
            .into_iter()
            .map(|t| RegisterTaint {
                key: t.key,
                value: t.value.unwrap_or_default(),
                effect: t.effect,
                time_added: None,
            })
            .collect();
    }
    set(&mut kc.rotate_certificates, &f.rotate_certificates);
    set(&mut kc.server_tls_bootstrap, &f.rotate_server_certificates);
    set(&mut kc.provider_id, &f.provider_id);
    if f.node_status_max_images.is_some() {
        kc.node_status_max_images = f.node_status_max_images;
    }
    if !f.kube_reserved.is_empty() {
        kc.kube_reserved = node::pairs("kubeReserved (--kube-reserved)", &f.kube_reserved)?;
    }
    if !f.system_reserved.is_empty() {
        kc.system_reserved = node::pairs("systemReserved (--system-reserved)", &f.system_reserved)?;
    }
    let mut ignored = Vec::new();
    if let Some(dir) = &f.volume_plugin_dir {
        kc.volume_plugin_dir = path_string(dir);
        if !dir.as_os_str().is_empty() && dir != Path::new(DEFAULT_VOLUME_PLUGIN_DIR) {
            ignored.push("--volume-plugin-dir".to_string());
        }
    }
    Ok(ignored)
}

/// Go's `strconv.ParseBool`.
fn go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `k<sep>v[,k<sep>v...]`, as Go's map flags split them.
fn pairs(flag: &str, value: &str, sep: char) -> Result<Vec<(String, String)>, ConfigError> {
    value
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.split_once(sep)
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| {
                    invalid(
                        &format!("--{flag}"),
                        format!("{p:?}: malformed pair, expect string{sep}string"),
                    )
                })
        })
        .collect()
}

/// The JSON a Go flag's value stands for in its field; `previous` is the field's value when
/// the flag was given before (repeated list and map flags accumulate, as Go's do).
fn flag_json(
    flag: &str,
    kind: GoFlagKind,
    value: &str,
    previous: Option<&Value>,
) -> Result<Value, ConfigError> {
    let bad = |why: &str| {
        invalid(
            &format!("--{flag}"),
            format!("invalid argument {value:?}: {why}"),
        )
    };
    let mut object = previous
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    Ok(match kind {
        GoFlagKind::Bool => {
            json!(go_bool(value).ok_or_else(|| bad("strconv.ParseBool: invalid syntax"))?)
        }
        GoFlagKind::Int => json!(
            value
                .parse::<i64>()
                .map_err(|_| bad("strconv.ParseInt: invalid syntax"))?
        ),
        GoFlagKind::Str | GoFlagKind::Duration => json!(value),
        GoFlagKind::List => {
            let mut items: Vec<Value> = previous
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            items.extend(value.split(',').filter(|s| !s.is_empty()).map(|s| json!(s)));
            Value::Array(items)
        }
        GoFlagKind::Map | GoFlagKind::LangleMap => {
            let sep = if kind == GoFlagKind::Map { '=' } else { '<' };
            for (k, v) in pairs(flag, value, sep)? {
                object.insert(k, json!(v));
            }
            Value::Object(object)
        }
        GoFlagKind::MapNoSplit => {
            let (k, v) = value
                .split_once('=')
                .ok_or_else(|| bad("malformed pair, expect string=string"))?;
            object.insert(k.trim().to_string(), json!(v.trim()));
            Value::Object(object)
        }
        GoFlagKind::Gates => {
            for (k, v) in pairs(flag, value, '=')? {
                let on = go_bool(&v).ok_or_else(|| bad(&format!("invalid value of {k}: {v}")))?;
                object.insert(k, json!(on));
            }
            Value::Object(object)
        }
    })
}

/// The field at a dotted path of a JSON object, created on the way.
fn field_mut<'v>(v: &'v mut Value, path: &str) -> Option<&'v mut Value> {
    path.split('.').try_fold(v, |v, k| {
        let object = v.as_object_mut()?;
        Some(object.entry(k).or_insert(Value::Null))
    })
}

/// The Go kubelet's flags ferrolet has no flag of its own for ([`GO_FLAGS`]), in the order
/// given: a field's flag sets the field through its JSON form (so the value is checked as the
/// file's is); returns those ferrolet does not implement.
fn go_flags(
    kc: &mut KubeletConfiguration,
    given: &[(String, String)],
) -> Result<Vec<String>, ConfigError> {
    let mut ignored: Vec<String> = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, value) in given {
        let Some(flag) = GO_FLAGS.iter().find(|g| g.name == name) else {
            continue;
        };
        if !flag.implemented && !ignored.iter().any(|i| i == &format!("--{name}")) {
            ignored.push(format!("--{name}"));
        }
        let Some(path) = flag.field else { continue };
        let mut whole = serde_json::to_value(&*kc).unwrap_or_default();
        let first = seen.insert(name.clone());
        let Some(slot) = field_mut(&mut whole, path) else {
            continue;
        };
        // Gates merge with the file's (Go keeps the file's gates the flag does not name);
        // other map and list flags replace the file's value, then accumulate.
        let previous = (!first || flag.kind == GoFlagKind::Gates).then_some(&*slot);
        *slot = flag_json(name, flag.kind, value, previous)?;
        let yaml = serde_yaml_ng::to_value(&whole)
            .map_err(|e| invalid(&format!("{path} (--{name})"), e.to_string()))?;
        *kc = file::from_value(yaml)
            .map(|(c, _)| c)
            .map_err(|e| match e {
                ConfigError::Invalid { field, reason } => {
                    invalid(&format!("{field} (--{name})"), reason)
                }
                other => other,
            })?;
    }
    Ok(ignored)
}

impl Config {
    /// Lays the flags that are not KubeletConfiguration fields over the converted settings;
    /// pushes their warnings.
    pub(super) fn apply_runtime_flags(
        &mut self,
        f: &Flags,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<String>, ConfigError> {
        let path = |p: &Option<PathBuf>| p.clone().filter(|p| !p.as_os_str().is_empty());
        set(&mut self.root_dir, &f.root_dir);
        if f.hostname_override.is_some() {
            self.hostname_override = f.hostname_override.clone();
        }
        // The container GC flags (the image GC ones are fields, already set).
        self.gc.apply_flags(&f.gc);
        if f.cert_dir.is_some() {
            self.cert_dir = path(&f.cert_dir);
        }
        if f.authorization_policy_file.is_some() {
            self.authorization.policy_file = path(&f.authorization_policy_file);
        }
        if f.kubeconfig.is_some() {
            self.kubeconfig = path(&f.kubeconfig);
        }
        if f.bootstrap_kubeconfig.is_some() {
            self.bootstrap_kubeconfig = path(&f.bootstrap_kubeconfig);
        }
        if let Some(ips) = &f.node_ip {
            let (ips, w) = node::node_ips(ips)?;
            self.node_ips = ips;
            warnings.extend(w);
        }
        if !f.node_labels.is_empty() {
            self.node_labels = node::pairs("--node-labels", &f.node_labels)?;
        }
        if f.pod_infra_container_image.is_some() {
            self.pod_infra_container_image = f
                .pod_infra_container_image
                .clone()
                .filter(|s| !s.is_empty());
        }
        if let Some(p) = &f.cloud_provider {
            self.cloud_provider = CloudProvider::parse(p).ok_or_else(|| {
                invalid(
                    "--cloud-provider",
                    format!(
                        "unknown cloud provider {p:?}: only \"\" and \"external\" are supported"
                    ),
                )
            })?;
        }
        set(&mut self.pod_timeline_pods, &f.pod_timeline_pods);
        set(
            &mut self.device_plugin_stop_grace_period,
            &f.device_plugin_stop_grace_period,
        );
        Ok(Vec::new())
    }
}
