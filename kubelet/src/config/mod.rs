//! The kubelet's settings: a KubeletConfiguration file (`kubelet.config.k8s.io/v1beta1`, the
//! Go kubelet's field names and defaults) overridden by flags, checked once at start-up.
//!
//! - [`v1beta1`]: KubeletConfiguration as one typed serde struct, every field of Go's
//!   v1beta1 type, with Go's defaulting ([`KubeletConfiguration::set_defaults`]) in one
//!   place. `/configz` serializes it.
//! - `file`: reading the `--config` file into it (YAML or JSON; unknown fields warned about
//!   by path, fields ferrolet does not act on named in one warning).
//! - `flags` and `apply`: the flags (the Go kubelet's names); those that are fields of the
//!   configuration are laid over the typed struct, Go's precedence (file, then the flags
//!   given); every other Go kubelet flag is accepted and named as not implemented.
//! - `convert`: the one conversion from the final typed struct into [`Config`], the settings
//!   the rest of the crate reads (which keeps the typed struct it came from).
//! - `container_manager`, `serving`, `node`: the checks of those settings, in Go's words.

mod apply;
mod container_manager;
mod convert;
mod file;
mod flags;
mod node;
mod serving;
pub mod v1beta1;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

pub use container_manager::{CmFlags, SYSTEMD};
pub use flags::{CheckArgs, Command, Flags, LogFormat, TraceCommand, TracePod};
pub use node::{ChangeDetection, CloudProvider, TAINT_EXTERNAL_CLOUD_PROVIDER};
pub use serving::{Authentication, Authorization, AuthorizationMode};

use crate::manifest::names;

/// Why the kubelet cannot start with these settings.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file cannot be read.
    #[error("reading the configuration file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The configuration file is not YAML/JSON, or not an object.
    #[error("parsing the configuration file {path}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A field has a value the kubelet refuses.
    #[error("invalid configuration: {field}: {reason}")]
    Invalid {
        /// The field, as the file names it (`maxPods`, `logging.format`).
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The host name (the default node name) cannot be read.
    #[error("reading the host name: {0}")]
    Hostname(std::io::Error),
}

/// The kubelet's settings: KubeletConfiguration (kubelet.config.k8s.io/v1beta1, YAML, same
/// field names and defaults as the Go kubelet) overridden by flags.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Directory (or file) of static pod manifests (`staticPodPath`).
    pub static_pod_path: Option<PathBuf>,
    /// URL of static pod manifests (`staticPodURL`).
    pub static_pod_url: Option<String>,
    /// Headers sent to `static_pod_url` (`staticPodURLHeader`).
    pub static_pod_url_header: BTreeMap<String, Vec<String>>,
    /// Re-list period of the manifest directory (`fileCheckFrequency`, 20s).
    pub file_check_frequency: Duration,
    /// Poll period of the manifest URL (`httpCheckFrequency`, 20s).
    pub http_check_frequency: Duration,
    /// Period of the all-pods resync (`syncFrequency`, 1m).
    pub sync_frequency: Duration,
    /// CRI runtime endpoint (`containerRuntimeEndpoint`).
    pub container_runtime_endpoint: String,
    /// CRI image endpoint; "" = the runtime's (`imageServiceEndpoint`).
    pub image_service_endpoint: String,
    /// Timeout of CRI calls other than pulls (`runtimeRequestTimeout`, 2m).
    pub runtime_request_timeout: Duration,
    /// Bind address of the read-only API (`address`, 0.0.0.0).
    pub address: IpAddr,
    /// Read-only API port, 0 = off (`readOnlyPort`, 0).
    pub read_only_port: u16,
    /// Healthz port, 0 = off (`healthzPort`, 10248).
    pub healthz_port: u16,
    /// Healthz bind address (`healthzBindAddress`, 127.0.0.1).
    pub healthz_bind_address: IpAddr,
    /// Most pods this node runs (`maxPods`, 110).
    pub max_pods: u32,
    /// Cluster DNS servers (`clusterDNS`).
    pub cluster_dns: Vec<IpAddr>,
    /// Cluster DNS domain (`clusterDomain`).
    pub cluster_domain: String,
    /// Resolver configuration pods' DNS starts from; empty = none (`resolvConf`).
    pub resolv_conf: PathBuf,
    /// One image pull at a time (`serializeImagePulls`, true).
    pub serialize_image_pulls: bool,
    /// Root of container logs (`podLogsDir`, /var/log/pods).
    pub pod_logs_dir: PathBuf,
    /// Size at which a container log is rotated, bytes (`containerLogMaxSize`, 10Mi).
    pub container_log_max_size: u64,
    /// Log files kept per container (`containerLogMaxFiles`, 5).
    pub container_log_max_files: u32,
    /// Cgroup parent of pods (`cgroupRoot`, "/").
    pub cgroup_root: String,
    /// Build the QoS and pod cgroup tree (`cgroupsPerQOS`, `--cgroups-per-qos`, true).
    pub cgroups_per_qos: bool,
    /// The cgroup driver (`cgroupDriver`, `--cgroup-driver`, cgroupfs): `cgroupfs` or
    /// `systemd`.
    pub cgroup_driver: String,
    /// Refuse to start on a cgroup v1 host (`failCgroupV1`, false); otherwise v1 is warned
    /// about at start-up, as the Go kubelet 1.31+ does.
    pub fail_cgroup_v1: bool,
    /// What node allocatable is enforced on (`enforceNodeAllocatable`,
    /// `--enforce-node-allocatable`, `[pods]`): `pods`, `kube-reserved`, `system-reserved`,
    /// or `none`; an empty list enforces nothing.
    pub enforce_node_allocatable: Vec<String>,
    /// The cgroup kube-reserved is enforced on (`kubeReservedCgroup`, `--kube-reserved-cgroup`).
    pub kube_reserved_cgroup: String,
    /// The cgroup system-reserved is enforced on (`systemReservedCgroup`,
    /// `--system-reserved-cgroup`).
    pub system_reserved_cgroup: String,
    /// Most processes per pod (`podPidsLimit`, `--pod-max-pids`, -1: none).
    pub pod_pids_limit: i64,
    /// Requests kept from lower QoS classes, resource → percentage (`qosReserved`,
    /// `--qos-reserved`; only `memory`, as `50%`; acted on under the `QOSReserved` gate).
    pub qos_reserved: BTreeMap<String, String>,
    /// How far towards the memory limit `memory.high` sits, under the `MemoryQoS` gate on
    /// cgroup v2 (`memoryThrottlingFactor`, (0, 1]).
    pub memory_throttling_factor: f64,
    /// The CPU manager's policy (`cpuManagerPolicy`, `--cpu-manager-policy`, none).
    pub cpu_manager_policy: crate::cm::CpuManagerPolicy,
    /// How often the CPU manager reconciles (`cpuManagerReconcilePeriod`,
    /// `--cpu-manager-reconcile-period`, 10s).
    pub cpu_manager_reconcile_period: Duration,
    /// CPUs kept from pods, a kernel CPU list such as `0-1,4` (`reservedSystemCPUs`,
    /// `--reserved-cpus`); it replaces the CPUs of `kubeReserved` + `systemReserved`.
    pub reserved_system_cpus: String,
    /// Enforce CPU limits with CFS quota (`cpuCFSQuota`, `--cpu-cfs-quota`, true).
    pub cpu_cfs_quota: bool,
    /// The CFS period (`cpuCFSQuotaPeriod`, `--cpu-cfs-quota-period`, 100ms); another value
    /// needs the `CustomCPUCFSQuotaPeriod` gate, as in Go.
    pub cpu_cfs_quota_period: Duration,
    /// Feature gates given in the file (`featureGates`); ferrolet acts on those named in
    /// [`container_manager::HONOURED_FEATURE_GATES`].
    pub feature_gates: BTreeMap<String, bool>,
    /// `userNamespaces.idsPerPod`: host ids per user-namespaced pod (Go's 65536 when unset).
    pub user_namespaces_ids_per_pod: Option<i64>,
    /// `--hostname-override`, as given.
    pub hostname_override: Option<String>,
    /// The node name: the override or the host's name, trimmed and lowercased.
    pub node_name: String,
    /// Pod dirs and volumes (`--root-dir`, /var/lib/kubelet).
    pub root_dir: PathBuf,
    /// Log verbosity (`logging.verbosity`, `-v`).
    pub verbosity: u8,
    /// Log format (`logging.format`, `--log-format`).
    pub log_format: LogFormat,
    /// Container and image garbage collection (`imageGC*`, `imageMinimumGCAge`, GC flags).
    pub gc: crate::gc::GcPolicy,
    /// Whether the secure API is served (`enableServer`, true).
    pub enable_server: bool,
    /// Port of the secure API, bound to `address` (`port`, 10250).
    pub port: u16,
    /// Serving certificate chain, PEM (`tlsCertFile`); none = a self-signed one in
    /// [`Config::cert_dir`].
    pub tls_cert_file: Option<PathBuf>,
    /// Serving key, PEM (`tlsPrivateKeyFile`).
    pub tls_private_key_file: Option<PathBuf>,
    /// `--cert-dir` as given; see [`Config::cert_dir`].
    pub cert_dir: Option<PathBuf>,
    /// Who may call the secure API (`authentication`).
    pub authentication: Authentication,
    /// What callers of the secure API may do (`authorization`).
    pub authorization: Authorization,
    /// Node-pressure eviction (`evictionHard`, `evictionSoft`, …).
    pub eviction: crate::eviction::EvictionConfig,
    /// `--kubeconfig`: how to reach the API server; none = standalone mode.
    pub kubeconfig: Option<PathBuf>,
    /// `--bootstrap-kubeconfig`: credentials to request a client certificate with while
    /// `kubeconfig` does not exist yet.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--node-ip`: one IP or a dual-stack pair; empty = the host's default.
    pub node_ips: Vec<IpAddr>,
    /// `--node-labels`: labels the node registers with (checked as Go does).
    pub node_labels: BTreeMap<String, String>,
    /// Register the node with the API server (`registerNode`, `--register-node`, true).
    pub register_node: bool,
    /// Taints the node registers with (`registerWithTaints`, `--register-with-taints`); see
    /// [`Config::registration_taints`] for the full set.
    pub register_with_taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// Renew the client certificate (`rotateCertificates`, `--rotate-certificates`, false).
    pub rotate_certificates: bool,
    /// Request the serving certificate by CSR (`serverTLSBootstrap`,
    /// `--rotate-server-certificates`, false).
    pub server_tls_bootstrap: bool,
    /// `--pod-infra-container-image`: the sandbox image, which image GC must keep.
    pub pod_infra_container_image: Option<String>,
    /// `--cloud-provider` ("" or "external").
    pub cloud_provider: CloudProvider,
    /// The node's spec.providerID (`providerID`, `--provider-id`, "").
    pub provider_id: String,
    /// Period of node status computation and change posting (`nodeStatusUpdateFrequency`,
    /// 10s).
    pub node_status_update_frequency: Duration,
    /// Longest time between node status posts without changes (`nodeStatusReportFrequency`,
    /// 5m, or `nodeStatusUpdateFrequency` when only that one is set).
    pub node_status_report_frequency: Duration,
    /// Node lease duration, seconds (`nodeLeaseDurationSeconds`, 40).
    pub node_lease_duration_seconds: u32,
    /// Most images in the node status, -1 = no limit (`nodeStatusMaxImages`, 50).
    pub node_status_max_images: i32,
    /// Resources reserved for Kubernetes daemons, name → quantity (`kubeReserved`).
    pub kube_reserved: BTreeMap<String, String>,
    /// Resources reserved for the system, name → quantity (`systemReserved`).
    pub system_reserved: BTreeMap<String, String>,
    /// How secret and config map volumes see changes
    /// (`configMapAndSecretChangeDetectionStrategy`, Watch).
    pub config_map_and_secret_change_detection_strategy: ChangeDetection,
    /// Flexvolume plugin dir (`volumePluginDir`); ferrolet has no flexvolume support, so a
    /// value other than the default is reported as not implemented.
    pub volume_plugin_dir: PathBuf,
    /// Pods whose start timelines are kept (`--pod-timeline-pods`, ferrolet's own, 256).
    pub pod_timeline_pods: usize,
    /// How long a gone device plugin's resource stays in the capacity
    /// (`--device-plugin-stop-grace-period`, ferrolet's own; Go's fixed 5 minutes).
    pub device_plugin_stop_grace_period: Duration,
    /// Refuse to start while swap is on (`failSwapOn`, `--fail-swap-on`, true), as Go.
    pub fail_swap_on: bool,
    /// The KubeletConfiguration these settings came from, defaulted and with the flags laid
    /// over it: what `/configz` shows.
    pub kubelet_config: KubeletConfiguration,
}

pub use v1beta1::{DEFAULT_VOLUME_PLUGIN_DIR, KubeletConfiguration};

/// Default `--root-dir`: the Go kubelet's, since a drop-in kubelet must find what is laid out
/// for one there (kubeadm's `config.yaml` and `kubeadm reset`'s clean-up, CSI drivers'
/// `plugins_registry/`, device plugins' sockets).
pub const DEFAULT_ROOT_DIR: &str = "/var/lib/kubelet";

impl Default for Config {
    /// The settings of an empty KubeletConfiguration ([`KubeletConfiguration::set_defaults`],
    /// Go's defaults but for ferrolet's own, named there) and of no flags; no node name.
    fn default() -> Self {
        Self::from_kubelet_config(KubeletConfiguration::defaulted())
            .unwrap_or_else(|e| panic!("the default KubeletConfiguration is refused: {e}"))
    }
}

impl Config {
    /// Defaults, then the `--config` file, then the flags given (Go's precedence); resolves
    /// the node name and checks every value. Returns the settings and the warnings: one per
    /// unknown field (a typo, most likely), then one line naming every flag and field that
    /// was set but that ferrolet does not implement. Synchronous: it runs before the async
    /// runtime exists.
    pub fn load(flags: &Flags) -> Result<(Config, Vec<String>), ConfigError> {
        let mut typed = KubeletConfiguration::default();
        let (mut warnings, mut file_not_implemented) = (Vec::new(), Vec::new());
        if let Some(path) = &flags.config {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            let decoded = file::decode(path, &text)?;
            typed = decoded.config;
            warnings = decoded.warnings;
            file_not_implemented = decoded.not_implemented;
        }
        // Go defaults the file as it decodes it, then lays the flags given over it; defaulting
        // again fills in what a flag set to its zero value.
        typed.set_defaults();
        let mut ignored = apply::typed_flags(&mut typed, flags)?;
        typed.set_defaults();
        let mut config = Config::from_kubelet_config(typed)?;
        ignored.extend(config.apply_runtime_flags(flags, &mut warnings)?);
        config.node_name = node_name(config.hostname_override.as_deref())?;
        config.check()?;
        if !file_not_implemented.is_empty()
            && let Some(path) = &flags.config
        {
            ignored.push(format!(
                "{}: {}",
                path.display(),
                file_not_implemented.join(", ")
            ));
        }
        if !ignored.is_empty() {
            warnings.push(format!(
                "not implemented by ferrolet (ignored): {}",
                ignored.join(", ")
            ));
        }
        Ok((config, warnings))
    }

    /// The fuzz targets' way in (`app::fuzzing::kubelet_config`): a `--config` file's text
    /// over the defaults, then the checks [`Config::load`] makes (no flags, no node name).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn read_file_for_fuzzing(text: &str) {
        let path = Path::new("/etc/kubernetes/kubelet-config.yaml");
        if let Ok(decoded) = file::decode(path, text) {
            let mut typed = decoded.config;
            typed.set_defaults();
            if let Ok(config) = Config::from_kubelet_config(typed) {
                let _ = config.check();
            }
        }
    }

    /// API-server mode: a `--kubeconfig` is given (else standalone, as the Go kubelet).
    pub fn api_server_mode(&self) -> bool {
        self.kubeconfig.is_some()
    }

    /// The taints the node registers with: `registerWithTaints`, plus the external cloud
    /// provider's `uninitialized` taint under `--cloud-provider=external`, as Go adds it.
    pub fn registration_taints(&self) -> Vec<k8s_openapi::api::core::v1::Taint> {
        let mut taints = self.register_with_taints.clone();
        if self.cloud_provider == CloudProvider::External {
            taints.push(k8s_openapi::api::core::v1::Taint {
                key: TAINT_EXTERNAL_CLOUD_PROVIDER.into(),
                value: Some("true".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            });
        }
        taints
    }

    /// The start-up checks: values every part relies on.
    fn check(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: String| ConfigError::Invalid {
            field: field.into(),
            reason,
        };
        if self.max_pods == 0 {
            return Err(invalid("maxPods", "must be greater than 0".into()));
        }
        if self.container_log_max_files <= 1 {
            return Err(invalid(
                "containerLogMaxFiles",
                "must be greater than 1".into(),
            ));
        }
        if self.container_runtime_endpoint.is_empty() {
            return Err(invalid(
                "containerRuntimeEndpoint",
                "was not specified or empty".into(),
            ));
        }
        let logs = &self.pod_logs_dir;
        if !logs.is_absolute() {
            return Err(invalid(
                "podLogsDir",
                format!("pod logs path {logs:?} must be absolute path"),
            ));
        }
        if !is_clean(logs) {
            return Err(invalid(
                "podLogsDir",
                format!("pod logs path {logs:?} must be normalized"),
            ));
        }
        if !logs.to_string_lossy().is_ascii() {
            return Err(invalid(
                "podLogsDir",
                format!("pod logs path {logs:?} must contain ASCII characters only"),
            ));
        }
        if let Some(url) = &self.static_pod_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(invalid(
                "staticPodURL",
                format!("{url:?} is not an http:// or https:// URL"),
            ));
        }
        self.gc
            .validate()
            .map_err(|(field, reason)| ConfigError::Invalid { field, reason })?;
        if !self.root_dir.is_absolute() {
            return Err(invalid(
                "rootDir (--root-dir)",
                format!("{:?} must be an absolute path", self.root_dir),
            ));
        }
        serving::check(self)?;
        self.check_node()?;
        self.check_cm()?;
        self.eviction
            .validate()
            .map_err(|(field, reason)| ConfigError::Invalid { field, reason })?;
        Ok(())
    }
}

impl Config {
    /// The checks of API-server mode and node registration, in Go's words.
    fn check_node(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: &str| ConfigError::Invalid {
            field: field.into(),
            reason: reason.into(),
        };
        if self.bootstrap_kubeconfig.is_some() && self.kubeconfig.is_none() {
            return Err(invalid(
                "--bootstrap-kubeconfig",
                "needs --kubeconfig (where the kubelet writes the client configuration it \
                 bootstraps)",
            ));
        }
        node::check_node_labels(&self.node_labels)?;
        node::check_reserved("kubeReserved (--kube-reserved)", &self.kube_reserved)?;
        node::check_reserved("systemReserved (--system-reserved)", &self.system_reserved)?;
        if self.node_status_max_images < -1 {
            return Err(invalid(
                "nodeStatusMaxImages (--node-status-max-images)",
                "must be -1 or greater",
            ));
        }
        if self.node_lease_duration_seconds == 0 {
            return Err(invalid(
                "nodeLeaseDurationSeconds",
                "must be greater than 0",
            ));
        }
        Ok(())
    }
}

/// `a:1,b:2` (repeatable) → {a: [1], b: [2]}; values of one name accumulate in order.
fn header_flags(values: &[String]) -> Result<BTreeMap<String, Vec<String>>, ConfigError> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pair in values.iter().flat_map(|v| v.split(',')) {
        let (k, v) = pair.split_once(':').ok_or_else(|| ConfigError::Invalid {
            field: "staticPodURLHeader (--manifest-url-header)".into(),
            reason: format!("{pair:?} is not key:value"),
        })?;
        let k = k.trim();
        if k.is_empty() {
            return Err(ConfigError::Invalid {
                field: "staticPodURLHeader (--manifest-url-header)".into(),
                reason: format!("{pair:?} has an empty key"),
            });
        }
        out.entry(k.to_string()).or_default().push(v.to_string());
    }
    Ok(out)
}

/// No `.`, `..`, doubled or trailing slashes: the path as Go's `filepath.Clean` leaves it.
fn is_clean(p: &Path) -> bool {
    let s = p.to_string_lossy();
    if s == "/" {
        return true;
    }
    !s.ends_with('/')
        && !s.contains("//")
        && p.components()
            .all(|c| !matches!(c, Component::CurDir | Component::ParentDir))
        && !s.split('/').any(|part| part == ".")
}

/// The node name: the override, else the host name; trimmed, lowercased, and a valid DNS
/// subdomain (static pod names are `<name>-<node>`).
fn node_name(override_name: Option<&str>) -> Result<String, ConfigError> {
    let (raw, field) = match override_name {
        Some(n) => (n.to_string(), "hostnameOverride (--hostname-override)"),
        None => (
            std::fs::read_to_string("/proc/sys/kernel/hostname").map_err(ConfigError::Hostname)?,
            "the host name",
        ),
    };
    let name = raw.trim().to_lowercase();
    if name.is_empty() {
        return Err(ConfigError::Invalid {
            field: field.into(),
            reason: "empty hostname is invalid".into(),
        });
    }
    let errs = names::dns1123_subdomain(&name);
    if let Some(e) = errs.first() {
        return Err(ConfigError::Invalid {
            field: field.into(),
            reason: format!("{name:?}: {e}"),
        });
    }
    Ok(name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::io::Write;

    fn flags(args: &[&str]) -> Flags {
        let mut all = vec!["ferrolet", "--hostname-override=Node-A"];
        all.extend_from_slice(args);
        Flags::try_parse_from(all).unwrap()
    }

    fn with_file(yaml: &str, args: &[&str]) -> Result<(Config, Vec<String>), ConfigError> {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(yaml.as_bytes()).unwrap();
        let path = f.path().to_str().unwrap().to_string();
        let mut all = vec!["--config", path.as_str()];
        all.extend_from_slice(args);
        Config::load(&flags(&all))
    }

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    /// The map fields' shape errors, one parser behind all three.
    #[test]
    fn map_fields_name_what_they_hold() {
        let err = |yaml: &str| {
            with_file(&format!("{HEAD}{yaml}\n"), &[])
                .unwrap_err()
                .to_string()
        };
        // serde's words since the typed KubeletConfiguration (the field still named).
        assert!(
            err("kubeReserved: [1]")
                .contains("kubeReserved: invalid type: sequence, expected a map")
        );
        assert!(
            err("kubeReserved: {1: x}")
                .contains("kubeReserved: invalid type: integer `1`, expected a string")
        );
        assert!(err("kubeReserved: {memory: [1]}").contains("kubeReserved[memory]: "));
        assert!(
            err("staticPodURLHeader: 1")
                .contains("staticPodURLHeader: invalid type: integer `1`, expected a map")
        );
        assert!(
            err("staticPodURLHeader: {A: 1}")
                .contains("staticPodURLHeader[A]: invalid type: integer `1`, expected a sequence")
        );
        assert!(
            err("featureGates: 1")
                .contains("featureGates: invalid type: integer `1`, expected a map")
        );
        assert!(err("featureGates: {QOSReserved: 2}").contains("featureGates.QOSReserved: "));
    }

    fn invalid_field(r: Result<(Config, Vec<String>), ConfigError>) -> String {
        match r {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_go_s() {
        let (c, warnings) = Config::load(&flags(&[])).unwrap();
        assert!(warnings.is_empty());
        let expected = Config {
            hostname_override: Some("Node-A".into()),
            node_name: "node-a".into(),
            ..Config::default()
        };
        assert_eq!(c, expected);
        assert_eq!(c.file_check_frequency, Duration::from_secs(20));
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.runtime_request_timeout, Duration::from_secs(120));
        assert_eq!(c.address.to_string(), "0.0.0.0");
        assert_eq!(c.healthz_port, 10248);
        assert_eq!(c.max_pods, 110);
        assert_eq!(c.container_log_max_size, 10 << 20);
        assert_eq!(c.container_log_max_files, 5);
        assert_eq!(
            c.container_runtime_endpoint,
            "unix:///run/ferrolet/cri.sock"
        );
        assert_eq!(c.root_dir, PathBuf::from("/var/lib/kubelet"));
    }

    #[test]
    fn host_name_is_the_default_node_name() {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let host = host.trim().to_lowercase();
        let loaded = Config::load(&Flags::default());
        if names::dns1123_subdomain(&host).is_empty() {
            let (c, _) = loaded.unwrap();
            assert_eq!(c.node_name, host);
            assert_eq!(c.hostname_override, None);
        } else {
            // A host name that cannot name pods is refused, naming where it came from.
            assert_eq!(invalid_field(loaded), "the host name");
        }
    }

    #[test]
    fn file_then_flags() {
        let yaml = format!(
            "{HEAD}staticPodPath: /etc/pods\nstaticPodURL: http://127.0.0.1:8000/pods\nstaticPodURLHeader: {{X-A: [a, b]}}\n\
             fileCheckFrequency: 5s\nhttpCheckFrequency: 1m30s\nsyncFrequency: 2m0s\nruntimeRequestTimeout: 0s\n\
             containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\naddress: 127.0.0.1\nreadOnlyPort: 10255\n\
             healthzPort: 0\nmaxPods: 30\nclusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\nresolvConf: \"\"\n\
             serializeImagePulls: false\npodLogsDir: /tmp/logs\ncontainerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\n\
             cgroupRoot: /kubepods\nlogging: {{format: json, verbosity: 3}}\n"
        );
        let (c, warnings) = with_file(&yaml, &["--max-pods=50", "-v", "5"]).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(c.static_pod_path, Some("/etc/pods".into()));
        assert_eq!(
            c.static_pod_url.as_deref(),
            Some("http://127.0.0.1:8000/pods")
        );
        assert_eq!(c.static_pod_url_header["X-A"], ["a", "b"]);
        assert_eq!(c.file_check_frequency, Duration::from_secs(5));
        assert_eq!(c.http_check_frequency, Duration::from_secs(90));
        assert_eq!(c.sync_frequency, Duration::from_secs(120));
        assert_eq!(
            c.runtime_request_timeout,
            Duration::from_secs(120),
            "0s = default"
        );
        assert_eq!(
            c.container_runtime_endpoint,
            "unix:///run/containerd/containerd.sock"
        );
        assert_eq!(c.address.to_string(), "127.0.0.1");
        assert_eq!((c.read_only_port, c.healthz_port), (10255, 0));
        assert_eq!(c.max_pods, 50, "the flag wins");
        assert_eq!(c.cluster_dns, vec!["10.96.0.10".parse::<IpAddr>().unwrap()]);
        assert_eq!(c.cluster_domain, "cluster.local");
        assert_eq!(c.resolv_conf, PathBuf::new());
        assert!(!c.serialize_image_pulls);
        assert_eq!(c.pod_logs_dir, PathBuf::from("/tmp/logs"));
        assert_eq!(
            (c.container_log_max_size, c.container_log_max_files),
            (1 << 20, 3)
        );
        assert_eq!(c.cgroup_root, "/kubepods");
        assert_eq!((c.log_format, c.verbosity), (LogFormat::Json, 5));
    }

    #[test]
    fn flags_not_given_leave_the_file_alone() {
        let yaml = format!(
            "{HEAD}containerRuntimeEndpoint: unix:///run/file.sock\nreadOnlyPort: 10255\n\
             healthzPort: 0\naddress: 127.0.0.1\nport: 10260\nsyncFrequency: 30s\n"
        );
        let (c, _) = with_file(&yaml, &[]).unwrap();
        assert_eq!(c.container_runtime_endpoint, "unix:///run/file.sock");
        assert_eq!(
            (c.read_only_port, c.healthz_port, c.port),
            (10255, 0, 10260)
        );
        assert_eq!(c.address.to_string(), "127.0.0.1");
        assert_eq!(c.sync_frequency, Duration::from_secs(30));
        assert_eq!(c.root_dir, PathBuf::from(DEFAULT_ROOT_DIR), "the default");

        let (c, _) = with_file(
            &yaml,
            &[
                "--container-runtime-endpoint=unix:///run/flag.sock",
                "--read-only-port=0",
                "--port=10270",
            ],
        )
        .unwrap();
        assert_eq!(c.container_runtime_endpoint, "unix:///run/flag.sock");
        assert_eq!((c.read_only_port, c.port), (0, 10270), "the flags win");
        assert_eq!(
            c.healthz_port, 0,
            "the file still speaks where no flag does"
        );
        assert_eq!(c.sync_frequency, Duration::from_secs(30));
    }

    #[test]
    fn header_flags_accumulate_and_replace_the_file() {
        let yaml = format!("{HEAD}staticPodURLHeader: {{X-File: [f]}}\n");
        let (c, _) = with_file(
            &yaml,
            &[
                "--manifest-url-header",
                "a:hello,b:again",
                "--manifest-url-header",
                "b:beautiful:x",
            ],
        )
        .unwrap();
        let want: BTreeMap<String, Vec<String>> = [
            ("a".to_string(), vec!["hello".to_string()]),
            (
                "b".to_string(),
                vec!["again".to_string(), "beautiful:x".to_string()],
            ),
        ]
        .into();
        assert_eq!(c.static_pod_url_header, want);
        assert_eq!(
            invalid_field(Config::load(&flags(&["--manifest-url-header", "nocolon"]))),
            "staticPodURLHeader (--manifest-url-header)"
        );
    }

    #[test]
    fn unknown_fields_warn_and_not_implemented_ones_share_one_line() {
        let yaml = format!(
            "{HEAD}eventRecordQPS: 5\nfancyNewThing: 1\nhairpinMode: hairpin-veth\nfailSwapOn: true\n\
             topologyManagerPolicy: none\nmemorySwap: {{}}\nlogging: {{flushFrequency: 1s, vmodule: \"\", colour: red}}\n"
        );
        let (_, warnings) = with_file(&yaml, &["--volume-plugin-dir=/opt/flex"]).unwrap();
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[0].ends_with("unknown field \"fancyNewThing\" (ignored)"));
        assert!(warnings[1].ends_with("unknown field \"logging.colour\" (ignored)"));
        let last = &warnings[2];
        assert!(
            last.starts_with("not implemented by ferrolet (ignored): --volume-plugin-dir, /"),
            "{last}"
        );
        // Set to their Go defaults (failSwapOn, topologyManagerPolicy, memorySwap, vmodule),
        // fields ask for nothing ferrolet misses.
        assert!(
            last.ends_with(": eventRecordQPS, hairpinMode, logging.flushFrequency"),
            "{last}"
        );
        // Nothing set that ferrolet lacks: no such line.
        let (_, warnings) = with_file(&format!("{HEAD}cgroupDriver: cgroupfs\n"), &[]).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    /// The file `kubeadm init` (1.28) writes to /var/lib/kubelet/config.yaml, verbatim.
    const KUBEADM_1_28: &str = r#"apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"#;

    #[test]
    fn kubeadm_s_files_load_with_the_cgroupfs_driver() {
        // The flags kubeadm's drop-in passes.
        let args = [
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
            "--pod-infra-container-image=registry.k8s.io/pause:3.9",
            "--node-ip=192.168.1.10",
            "--node-labels=node.kubernetes.io/exclude-from-external-load-balancers=,tier=a",
            "--register-with-taints=node-role.kubernetes.io/control-plane:NoSchedule",
        ];
        // kubeadm's own default driver is systemd, which ferrolet takes where systemd runs
        // and refuses elsewhere.
        if std::path::Path::new("/run/systemd/system").is_dir() {
            assert_eq!(
                with_file(KUBEADM_1_28, &args).unwrap().0.cgroup_driver,
                "systemd"
            );
        } else {
            assert_eq!(
                invalid_field(with_file(KUBEADM_1_28, &args)),
                "cgroupDriver (--cgroup-driver)"
            );
        }
        let kubeadm = KUBEADM_1_28.replace("cgroupDriver: systemd", "cgroupDriver: cgroupfs");
        let (c, warnings) = with_file(&kubeadm, &args).unwrap();
        assert!(c.api_server_mode());
        assert_eq!(
            c.bootstrap_kubeconfig,
            Some("/etc/kubernetes/bootstrap-kubelet.conf".into())
        );
        let authn = &c.authentication;
        assert!(authn.webhook && !authn.anonymous);
        assert_eq!(authn.webhook_cache_ttl, Duration::from_secs(120), "0s = 2m");
        assert_eq!(
            authn.client_ca_file,
            Some("/etc/kubernetes/pki/ca.crt".into())
        );
        let authz = &c.authorization;
        assert_eq!(authz.mode, AuthorizationMode::Webhook);
        assert_eq!(authz.webhook_cache_authorized_ttl, Duration::from_secs(300));
        assert_eq!(
            authz.webhook_cache_unauthorized_ttl,
            Duration::from_secs(30)
        );
        assert!(c.rotate_certificates && c.register_node && !c.server_tls_bootstrap);
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(10));
        assert_eq!(c.node_status_report_frequency, Duration::from_secs(300));
        assert_eq!(
            (c.node_lease_duration_seconds, c.node_status_max_images),
            (40, 50)
        );
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        assert_eq!(c.file_check_frequency, Duration::from_secs(20));
        assert_eq!(c.gc.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(c.static_pod_path, Some("/etc/kubernetes/manifests".into()));
        assert_eq!(
            c.container_runtime_endpoint,
            "unix:///var/run/containerd/containerd.sock"
        );
        assert_eq!(
            c.pod_infra_container_image.as_deref(),
            Some("registry.k8s.io/pause:3.9")
        );
        assert_eq!(c.node_ips, ["192.168.1.10".parse::<IpAddr>().unwrap()]);
        assert_eq!(c.node_labels.len(), 2);
        assert_eq!(c.register_with_taints.len(), 1);
        assert_eq!(c.cluster_domain, "cluster.local");
        // `cpuManagerReconcilePeriod: 0s` is the default.
        assert_eq!(c.cpu_manager_reconcile_period, Duration::from_secs(10));
        // Nothing asked for that ferrolet does not do.
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn node_settings_from_file_and_flags() {
        let yaml = format!(
            "{HEAD}registerNode: false\nregisterWithTaints: [{{key: a, value: b, effect: NoSchedule}}, {{key: c, effect: NoExecute}}]\n\
             serverTLSBootstrap: true\nnodeStatusUpdateFrequency: 20s\nnodeLeaseDurationSeconds: 60\nnodeStatusMaxImages: -1\n\
             kubeReserved: {{cpu: 100m, memory: 1Gi, pid: 100}}\nsystemReserved: {{memory: 512Mi}}\nproviderID: aws:///i-1\n\
             configMapAndSecretChangeDetectionStrategy: Cache\nvolumePluginDir: /usr/libexec/kubernetes/kubelet-plugins/volume/exec/\n"
        );
        let (c, warnings) = with_file(&yaml, &[]).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(!c.register_node && c.server_tls_bootstrap);
        let taints: Vec<(&str, Option<&str>, &str)> = c
            .register_with_taints
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
            .collect();
        assert_eq!(
            taints,
            [("a", Some("b"), "NoSchedule"), ("c", None, "NoExecute")]
        );
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(20));
        assert_eq!(
            c.node_status_report_frequency,
            Duration::from_secs(20),
            "the report period follows an update period set alone, as Go's defaulting"
        );
        assert_eq!(
            (c.node_lease_duration_seconds, c.node_status_max_images),
            (60, -1)
        );
        assert_eq!(c.kube_reserved["pid"], "100");
        assert_eq!(c.system_reserved["memory"], "512Mi");
        assert_eq!(c.provider_id, "aws:///i-1");
        assert_eq!(
            c.config_map_and_secret_change_detection_strategy,
            ChangeDetection::Cache
        );
        assert!(!c.api_server_mode(), "no --kubeconfig: standalone");

        let (c, _) = with_file(
            &yaml,
            &[
                "--register-node",
                "--register-with-taints=x=y:PreferNoSchedule",
                "--node-status-update-frequency=30s",
                "--node-status-max-images=10",
                "--kube-reserved=cpu=1",
                "--provider-id=gce://p/z/n",
                "--cloud-provider=external",
                "--rotate-certificates",
                "--node-ip=10.0.0.1,fd00::1",
            ],
        )
        .unwrap();
        assert!(c.register_node && c.rotate_certificates);
        assert_eq!(c.register_with_taints.len(), 1);
        let all = c.registration_taints();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].key, TAINT_EXTERNAL_CLOUD_PROVIDER);
        assert_eq!(
            (all[1].value.as_deref(), all[1].effect.as_str()),
            (Some("true"), "NoSchedule")
        );
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(30));
        assert_eq!(c.node_status_max_images, 10);
        assert_eq!(c.kube_reserved.len(), 1, "the flag replaces the file's map");
        assert_eq!(c.provider_id, "gce://p/z/n");
        assert_eq!(c.node_ips.len(), 2);

        let (c, _) = Config::load(&flags(&[])).unwrap();
        assert_eq!(c.node_status_report_frequency, Duration::from_secs(300));
        assert!(c.registration_taints().is_empty());
    }

    #[test]
    fn node_settings_refused() {
        for (yaml, args, want) in [
            (
                "",
                &["--bootstrap-kubeconfig=/b"][..],
                "--bootstrap-kubeconfig",
            ),
            ("", &["--node-labels=kubernetes.io/role=x"], "--node-labels"),
            ("", &["--node-labels=novalue"], "--node-labels"),
            (
                "",
                &["--register-with-taints=a=b"],
                "--register-with-taints",
            ),
            ("", &["--cloud-provider=aws"], "--cloud-provider"),
            ("", &["--node-ip=10.0.0.1,10.0.0.2"], "--node-ip"),
            (
                "",
                &["--kube-reserved=gpu=1"],
                "kubeReserved (--kube-reserved)",
            ),
            (
                "",
                &["--node-status-max-images=-2"],
                "nodeStatusMaxImages (--node-status-max-images)",
            ),
            (
                "systemReserved: {cpu: -1}\n",
                &[],
                "systemReserved (--system-reserved)",
            ),
            (
                "registerWithTaints: [{key: a, effect: Never}]\n",
                &[],
                "registerWithTaints",
            ),
            ("registerNode: maybe\n", &[], "registerNode"),
            (
                "nodeLeaseDurationSeconds: -1\n",
                &[],
                "nodeLeaseDurationSeconds",
            ),
            (
                "configMapAndSecretChangeDetectionStrategy: Poll\n",
                &[],
                "configMapAndSecretChangeDetectionStrategy",
            ),
            (
                "nodeStatusUpdateFrequency: often\n",
                &[],
                "nodeStatusUpdateFrequency",
            ),
        ] {
            assert_eq!(
                invalid_field(with_file(&format!("{HEAD}{yaml}"), args)),
                want,
                "{yaml} {args:?}"
            );
        }
    }

    #[test]
    fn invalid_values_are_named() {
        let cases = [
            ("fileCheckFrequency: 20x\n", "fileCheckFrequency"),
            ("syncFrequency: -1s\n", "syncFrequency"),
            ("syncFrequency: 20\n", "syncFrequency"),
            ("containerLogMaxSize: 10Zi\n", "containerLogMaxSize"),
            ("containerLogMaxSize: -1\n", "containerLogMaxSize"),
            ("containerLogMaxFiles: 1\n", "containerLogMaxFiles"),
            ("maxPods: 0\n", "maxPods"),
            ("maxPods: -3\n", "maxPods"),
            ("maxPods: many\n", "maxPods"),
            ("readOnlyPort: 70000\n", "readOnlyPort"),
            ("address: localhost\n", "address"),
            ("clusterDNS: [10.0.0.1, dns]\n", "clusterDNS[1]"),
            ("serializeImagePulls: sometimes\n", "serializeImagePulls"),
            ("podLogsDir: logs\n", "podLogsDir"),
            ("podLogsDir: /var/log/../pods\n", "podLogsDir"),
            ("staticPodURL: ftp://x\n", "staticPodURL"),
            ("logging: {format: xml}\n", "logging.format"),
            ("staticPodURLHeader: {X: v}\n", "staticPodURLHeader[X]"),
        ];
        for (line, field) in cases {
            assert_eq!(
                invalid_field(with_file(&format!("{HEAD}{line}"), &[])),
                field,
                "{line}"
            );
        }
        let wrong_version =
            "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n";
        assert_eq!(invalid_field(with_file(wrong_version, &[])), "apiVersion");
        let wrong_kind = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n";
        assert_eq!(invalid_field(with_file(wrong_kind, &[])), "kind");
        assert_eq!(invalid_field(with_file("maxPods: 3\n", &[])), "apiVersion");
        assert_eq!(
            invalid_field(Config::load(&flags(&["--max-pods=0"]))),
            "maxPods"
        );
        let bad_name = Flags::try_parse_from(["ferrolet", "--hostname-override=bad_name"]).unwrap();
        assert_eq!(
            invalid_field(Config::load(&bad_name)),
            "hostnameOverride (--hostname-override)"
        );
    }

    #[test]
    fn unreadable_and_unparsable_files() {
        let missing = flags(&["--config", "/nonexistent/kubelet.yaml"]);
        assert!(matches!(
            Config::load(&missing),
            Err(ConfigError::Read { .. })
        ));
        assert!(matches!(
            with_file("a: [1, 2", &[]),
            Err(ConfigError::Parse { .. })
        ));
        assert!(matches!(with_file("", &[]), Err(ConfigError::Parse { .. })));
        assert!(matches!(
            with_file("- 1\n", &[]),
            Err(ConfigError::Parse { .. })
        ));
    }

    /// The file `kubeadm init` (1.32) writes: 1.28's plus `crashLoopBackOff: {}`, the text
    /// logging options, and the runtime endpoint in the file rather than a flag.
    const KUBEADM_1_32: &str = r#"apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///var/run/containerd/containerd.sock
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
resolvConf: /run/systemd/resolve/resolv.conf
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"#;

    /// Every leaf of `file` (objects walked, lists and empty objects compared whole), by
    /// dotted path.
    fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
        match v.as_object() {
            Some(m) if !m.is_empty() => {
                for (k, v) in m {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(&path, v, out);
                }
            }
            _ => out.push((prefix.to_string(), v.clone())),
        }
    }

    #[test]
    fn kubeadm_s_files_come_back_out_of_configz() {
        // What Go's defaulting puts in place of the zero values kubeadm writes, as the Go
        // kubelet's /configz shows them.
        let defaulted: BTreeMap<&str, serde_json::Value> = [
            ("authentication.webhook.cacheTTL", "2m0s"),
            ("authorization.webhook.cacheAuthorizedTTL", "5m0s"),
            ("authorization.webhook.cacheUnauthorizedTTL", "30s"),
            ("cpuManagerReconcilePeriod", "10s"),
            ("evictionPressureTransitionPeriod", "5m0s"),
            ("fileCheckFrequency", "20s"),
            ("httpCheckFrequency", "20s"),
            ("imageMinimumGCAge", "2m0s"),
            ("logging.flushFrequency", "5s"),
            ("nodeStatusReportFrequency", "5m0s"),
            ("nodeStatusUpdateFrequency", "10s"),
            ("runtimeRequestTimeout", "2m0s"),
            ("streamingConnectionIdleTimeout", "4h0m0s"),
            ("syncFrequency", "1m0s"),
            ("volumeStatsAggPeriod", "1m0s"),
            // kubeadm 1.28 leaves it to the flag.
            (
                "containerRuntimeEndpoint",
                "unix:///var/run/containerd/containerd.sock",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k, serde_json::json!(v)))
        .collect();
        let systemd = std::path::Path::new("/run/systemd/system").is_dir();
        for (version, file, args) in [
            (
                "1.28",
                KUBEADM_1_28,
                &[
                    "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
                    "--pod-infra-container-image=registry.k8s.io/pause:3.9",
                ][..],
            ),
            (
                "1.32",
                KUBEADM_1_32,
                &["--pod-infra-container-image=registry.k8s.io/pause:3.10"][..],
            ),
        ] {
            let file = if systemd {
                file.to_string()
            } else {
                file.replace("cgroupDriver: systemd", "cgroupDriver: cgroupfs")
            };
            let all = [
                &[
                    "--kubeconfig=/etc/kubernetes/kubelet.conf",
                    "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                ][..],
                args,
            ]
            .concat();
            let (config, warnings) = with_file(&file, &all).unwrap();
            assert!(warnings.is_empty(), "{version}: {warnings:?}");
            let configz: serde_json::Value =
                serde_json::from_slice(&crate::server::configz::configz(&config, None)).unwrap();
            let shown = &configz["kubeletconfig"];
            let written: serde_json::Value = serde_yaml_ng::from_str(&file).unwrap();
            let mut fields = Vec::new();
            leaves("", &written, &mut fields);
            assert!(fields.len() > 30, "{version}: {fields:?}");
            for (path, value) in fields {
                if path == "apiVersion" || path == "kind" {
                    continue;
                }
                let got = path.split('.').try_fold(shown, |v, k| v.get(k));
                let want = defaulted.get(path.as_str()).unwrap_or(&value);
                assert_eq!(got, Some(want), "{version}: {path}");
            }
        }
    }

    #[test]
    fn go_s_other_flags_set_their_fields_and_the_rest_are_named_once() {
        let yaml = format!("{HEAD}featureGates: {{QOSReserved: true, MemoryQoS: false}}\n");
        let (c, warnings) = with_file(
            &yaml,
            &[
                "--fail-swap-on=false",
                "--eviction-hard=memory.available<1Gi,nodefs.available<5%",
                "--eviction-hard",
                "imagefs.available<20%",
                "--eviction-max-pod-grace-period",
                "30",
                "--feature-gates=MemoryQoS=true",
                "--serialize-image-pulls=false",
                "--container-log-max-files=3",
                "--enable-server=false",
                "--cloud-config=/etc/cloud.conf",
                "--housekeeping-interval",
                "10s",
                "--fail-swap-on",
                "--event-qps=0",
            ],
        )
        .unwrap();
        assert_eq!(
            c.eviction.hard,
            Some(
                [
                    ("memory.available", "1Gi"),
                    ("nodefs.available", "5%"),
                    ("imagefs.available", "20%")
                ]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
            ),
            "the flag replaces the defaults, repeated it accumulates"
        );
        assert_eq!(c.eviction.max_pod_grace_period, 30);
        assert!(
            c.feature_gate("QOSReserved") && c.feature_gate("MemoryQoS"),
            "merged with the file's"
        );
        assert!(!c.serialize_image_pulls && !c.enable_server);
        assert_eq!(c.container_log_max_files, 3);
        // The typed configuration (and so /configz) has them too.
        assert_eq!(
            c.kubelet_config.fail_swap_on,
            Some(true),
            "the last one given"
        );
        assert!(c.fail_swap_on);
        assert_eq!(c.kubelet_config.event_record_qps, Some(0));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(
            warnings[0],
            "not implemented by ferrolet (ignored): --cloud-config, --housekeeping-interval, \
             --event-qps"
        );
        // Bad values name the flag (and the field where there is one).
        assert_eq!(
            invalid_field(Config::load(&flags(&["--container-log-max-files=x"]))),
            "--container-log-max-files"
        );
        assert_eq!(
            invalid_field(Config::load(&flags(&[
                "--eviction-pressure-transition-period=soon"
            ]))),
            "evictionPressureTransitionPeriod (--eviction-pressure-transition-period)"
        );
        assert_eq!(
            invalid_field(Config::load(&flags(&[
                "--eviction-hard=memory.available<-1"
            ]))),
            "evictionHard[memory.available]"
        );
    }
}
