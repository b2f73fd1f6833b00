//! KubeletConfiguration (`kubelet.config.k8s.io/v1beta1`) as one typed serde struct: every
//! field of the Go kubelet's v1beta1 type as of Kubernetes 1.32 (and the few later ones
//! ferrolet already accepted), with Go's JSON names and value forms, and Go's defaulting
//! ([`KubeletConfiguration::set_defaults`]) in one place.
//!
//! Go's pointers are `Option`s, omitted when unset; Go's `omitempty` scalars, strings, lists
//! and maps are plain values omitted when zero or empty; Go's struct values (durations, the
//! nested objects) are always written, as Go's `encoding/json` writes them. So the defaulted
//! struct serializes as the Go kubelet's `/configz` shows its configuration.
//!
//! What ferrolet does differently from Go's defaults (see [`KubeletConfiguration::set_defaults`]):
//! the runtime endpoint is ferrolet-cri's socket, webhook authentication is off and
//! authorization is `AlwaysAllow` (standalone mode has no API server to ask), and an explicit
//! `port: 0` or `maxPods: 0` is refused rather than defaulted.

use std::collections::BTreeMap;
use std::time::Duration;

use ferrolet_proto::go_duration::{format_duration, parse_duration};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

/// The only group/version accepted.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The kind accepted.
pub const KIND: &str = "KubeletConfiguration";

/// ferrolet-cri's socket: our default runtime (the Go kubelet defaults to containerd's).
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/ferrolet/cri.sock";
/// Go's default `volumePluginDir`.
pub const DEFAULT_VOLUME_PLUGIN_DIR: &str = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/";
/// Go's Linux default `evictionHard` (kept with the eviction manager, a lower layer).
pub use crate::eviction::config::DEFAULT_EVICTION_HARD;

/// A Go `metav1.Duration`: written and read as Go's duration strings (`1m0s`, `100ms`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct GoDuration(pub Duration);

impl GoDuration {
    /// `secs` seconds.
    pub const fn secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }

    /// Zero, the value Go's defaulting replaces.
    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
            .map(GoDuration)
            .map_err(de::Error::custom)
    }
}

/// component-base's `TimeOrMetaDuration` (`logging.flushFrequency`): a number of nanoseconds
/// or a duration string, written back the way it came (the defaults as a string).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeOrMetaDuration {
    /// The duration.
    pub duration: Duration,
    /// Written as a duration string rather than nanoseconds.
    pub serialize_as_string: bool,
}

impl Serialize for TimeOrMetaDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.serialize_as_string {
            s.serialize_str(&format_duration(self.duration))
        } else {
            s.serialize_u64(u64::try_from(self.duration.as_nanos()).unwrap_or(u64::MAX))
        }
    }
}

impl<'de> Deserialize<'de> for TimeOrMetaDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = TimeOrMetaDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a duration string or a number of nanoseconds")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(TimeOrMetaDuration {
                    duration: Duration::from_nanos(n),
                    serialize_as_string: false,
                })
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                u64::try_from(n)
                    .map_err(|_| E::custom(format!("{n}: a negative duration")))
                    .and_then(|n| self.visit_u64(n))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(TimeOrMetaDuration {
                    duration: parse_duration(s).map_err(E::custom)?,
                    serialize_as_string: true,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A string that YAML may have written as a number (`pid: 100` for a quantity, as in Go's
/// `resource.Quantity` and as ferrolet has always read `kubeReserved`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct LenientString(pub String);

impl<'de> Deserialize<'de> for LenientString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = LenientString;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(LenientString(s.to_string()))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(LenientString(n.to_string()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(LenientString(n.to_string()))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
                Ok(LenientString(n.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// `map[string]string` whose values may be YAML numbers (quantities).
fn lenient_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let m = Option::<BTreeMap<String, LenientString>>::deserialize(d)?.unwrap_or_default();
    Ok(m.into_iter().map(|(k, v)| (k, v.0)).collect())
}

/// An optional number, any YAML number form.
fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    struct V;
    impl<'de> de::Visitor<'de> for V {
        type Value = Option<f64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
            Ok(Some(n))
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
            Ok(Some(n as f64))
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
            Ok(Some(n as f64))
        }
    }
    d.deserialize_option(V)
}

/// Null is the zero value, as Go's decoding leaves a field it reads `null` for.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

/// The Go kubelet's KubeletConfiguration v1beta1 (1.32), field for field. Comments name
/// what ferrolet does with a field; [`super::file::NOT_IMPLEMENTED`] lists those it
/// accepts but does not act on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    /// Serve the secure API (`--enable-server`, true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_server: Option<bool>,
    /// Static pod manifests' directory or file (`--pod-manifest-path`).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub static_pod_path: String,
    /// Root of container logs (1.29+, /var/log/pods).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub pod_logs_dir: String,
    /// Period of the all-pods resync (1m).
    #[serde(default, deserialize_with = "nullable")]
    pub sync_frequency: GoDuration,
    /// Re-list period of the manifest directory (20s).
    #[serde(default, deserialize_with = "nullable")]
    pub file_check_frequency: GoDuration,
    /// Poll period of the manifest URL (20s).
    #[serde(default, deserialize_with = "nullable")]
    pub http_check_frequency: GoDuration,
    /// URL of static pod manifests.
    #[serde(rename = "staticPodURL", default, deserialize_with = "nullable")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub static_pod_url: String,
    /// Headers sent to `staticPodURL`.
    #[serde(rename = "staticPodURLHeader", default, deserialize_with = "nullable")]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub static_pod_url_header: BTreeMap<String, Vec<String>>,
    /// Bind address of the APIs (0.0.0.0).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub address: String,
    /// Secure API port (10250). An `int32` in Go, where 0 is the default; ferrolet keeps an
    /// explicit 0 to refuse it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Read-only API port; 0 = off.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i32"
    )]
    pub read_only_port: i32,
    /// Serving certificate chain.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub tls_cert_file: String,
    /// Serving key.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub tls_private_key_file: String,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tls_cipher_suites: Vec<String>,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub tls_min_version: String,
    /// Renew the client certificate.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub rotate_certificates: bool,
    /// Request the serving certificate by CSR.
    #[serde(rename = "serverTLSBootstrap", default, deserialize_with = "nullable")]
    #[serde(skip_serializing_if = "is_false")]
    pub server_tls_bootstrap: bool,
    /// Who may call the secure API.
    #[serde(default, deserialize_with = "nullable")]
    pub authentication: KubeletAuthentication,
    /// What callers may do.
    #[serde(default, deserialize_with = "nullable")]
    pub authorization: KubeletAuthorization,
    /// Not implemented (5).
    #[serde(
        rename = "registryPullQPS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub registry_pull_qps: Option<i32>,
    /// Not implemented (10).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i32"
    )]
    pub registry_burst: i32,
    /// Not implemented (1.33+).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub image_pull_credentials_verification_policy: String,
    /// Not implemented (1.33+).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub preloaded_images_verification_allowlist: Vec<String>,
    /// Not implemented (50).
    #[serde(
        rename = "eventRecordQPS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub event_record_qps: Option<i32>,
    /// Not implemented (100).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i32"
    )]
    pub event_burst: i32,
    /// Not implemented (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_debugging_handlers: Option<bool>,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub enable_contention_profiling: bool,
    /// Healthz port; 0 = off (10248).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthz_port: Option<i32>,
    /// Healthz bind address (127.0.0.1).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub healthz_bind_address: String,
    /// Not implemented (-999).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i32>,
    /// Cluster DNS domain.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_domain: String,
    /// Cluster DNS servers.
    #[serde(rename = "clusterDNS", default, deserialize_with = "nullable")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// Not implemented (4h).
    #[serde(default, deserialize_with = "nullable")]
    pub streaming_connection_idle_timeout: GoDuration,
    /// Node status period (10s).
    #[serde(default, deserialize_with = "nullable")]
    pub node_status_update_frequency: GoDuration,
    /// Longest time between unchanged node status posts (5m, or the update period).
    #[serde(default, deserialize_with = "nullable")]
    pub node_status_report_frequency: GoDuration,
    /// Node lease duration, seconds (40).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i32"
    )]
    pub node_lease_duration_seconds: i32,
    /// Age an unused image must reach before image GC (2m).
    #[serde(rename = "imageMinimumGCAge", default, deserialize_with = "nullable")]
    pub image_minimum_gc_age: GoDuration,
    /// Not implemented (1.29+; 0 = no maximum).
    #[serde(rename = "imageMaximumGCAge", default, deserialize_with = "nullable")]
    pub image_maximum_gc_age: GoDuration,
    /// Usage percent that starts image GC (85).
    #[serde(rename = "imageGCHighThresholdPercent", default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Usage percent image GC frees down to (80).
    #[serde(rename = "imageGCLowThresholdPercent", default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Not implemented (1m).
    #[serde(default, deserialize_with = "nullable")]
    pub volume_stats_agg_period: GoDuration,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub kubelet_cgroups: String,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub system_cgroups: String,
    /// Cgroup parent of pods ("/").
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub cgroup_root: String,
    /// Build the QoS and pod cgroup tree (true).
    #[serde(
        rename = "cgroupsPerQOS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cgroups_per_qos: Option<bool>,
    /// The cgroup driver (cgroupfs).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub cgroup_driver: String,
    /// The CPU manager's policy (none).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub cpu_manager_policy: String,
    /// Not implemented (1.32+; unset = decided by the cgroup version).
    #[serde(rename = "singleProcessOOMKill", default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub single_process_oom_kill: Option<bool>,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub cpu_manager_policy_options: BTreeMap<String, String>,
    /// How often the CPU manager reconciles (10s).
    #[serde(default, deserialize_with = "nullable")]
    pub cpu_manager_reconcile_period: GoDuration,
    /// Not implemented (None).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub memory_manager_policy: String,
    /// Not implemented (none).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub topology_manager_policy: String,
    /// Not implemented (container).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub topology_manager_scope: String,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub topology_manager_policy_options: BTreeMap<String, String>,
    /// Requests kept from lower QoS classes (`memory: 50%`).
    #[serde(
        default,
        deserialize_with = "lenient_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub qos_reserved: BTreeMap<String, String>,
    /// Timeout of CRI calls but pulls (2m).
    #[serde(default, deserialize_with = "nullable")]
    pub runtime_request_timeout: GoDuration,
    /// Not implemented (promiscuous-bridge).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub hairpin_mode: String,
    /// Most pods on the node (110). An `int32` in Go, where 0 is the default; ferrolet keeps
    /// an explicit 0 to refuse it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i32>,
    /// Not implemented.
    #[serde(rename = "podCIDR", default, deserialize_with = "nullable")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pod_cidr: String,
    /// Most processes per pod (-1: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_pids_limit: Option<i64>,
    /// The resolver configuration pods' DNS starts from; "" = none (/etc/resolv.conf).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolv_conf: Option<String>,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub run_once: bool,
    /// Enforce CPU limits with CFS quota (true).
    #[serde(
        rename = "cpuCFSQuota",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
    /// The CFS period (100ms); an explicit 0s stays.
    #[serde(
        rename = "cpuCFSQuotaPeriod",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota_period: Option<GoDuration>,
    /// Most images in the node status (50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_status_max_images: Option<i32>,
    /// Not implemented (1000000).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i64"
    )]
    pub max_open_files: i64,
    /// Not implemented (application/vnd.kubernetes.protobuf).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub content_type: String,
    /// Not implemented (50).
    #[serde(
        rename = "kubeAPIQPS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub kube_api_qps: Option<i32>,
    /// Not implemented (100).
    #[serde(rename = "kubeAPIBurst", default, deserialize_with = "nullable")]
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub kube_api_burst: i32,
    /// One image pull at a time (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serialize_image_pulls: Option<bool>,
    /// Not implemented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_image_pulls: Option<i32>,
    /// Hard eviction thresholds; unset = Go's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub eviction_soft: BTreeMap<String, String>,
    /// Grace periods of the soft thresholds.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// How long a pressure condition outlives its last observation (5m).
    #[serde(default, deserialize_with = "nullable")]
    pub eviction_pressure_transition_period: GoDuration,
    /// Longest grace period of a soft eviction; 0 or less = the pod's own.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i32"
    )]
    pub eviction_max_pod_grace_period: i32,
    /// Least reclaimed per signal.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    /// Fill signals missing from `evictionHard` with the defaults (1.34+; false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_default_eviction_settings: Option<bool>,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_zero_i32"
    )]
    pub pods_per_core: i32,
    /// Not implemented (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_controller_attach_detach: Option<bool>,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub protect_kernel_defaults: bool,
    /// Not implemented (true).
    #[serde(rename = "makeIPTablesUtilChains", default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub make_iptables_util_chains: Option<bool>,
    /// Not implemented (14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iptables_masquerade_bit: Option<i32>,
    /// Not implemented (15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iptables_drop_bit: Option<i32>,
    /// Feature gates; ferrolet acts on those in `HONOURED_FEATURE_GATES`.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub feature_gates: BTreeMap<String, bool>,
    /// Not implemented (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_swap_on: Option<bool>,
    /// Not implemented.
    #[serde(default, deserialize_with = "nullable")]
    pub memory_swap: MemorySwapConfiguration,
    /// Size at which a container log is rotated (10Mi).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub container_log_max_size: String,
    /// Log files kept per container (5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_log_max_files: Option<i32>,
    /// Not implemented (1.30+; 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_log_max_workers: Option<i32>,
    /// Not implemented (1.30+; 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_log_monitor_interval: Option<GoDuration>,
    /// How secret and config map volumes see changes (Watch).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub config_map_and_secret_change_detection_strategy: String,
    /// Resources reserved for the system.
    #[serde(
        default,
        deserialize_with = "lenient_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub system_reserved: BTreeMap<String, String>,
    /// Resources reserved for Kubernetes daemons.
    #[serde(
        default,
        deserialize_with = "lenient_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub kube_reserved: BTreeMap<String, String>,
    /// CPUs kept from pods.
    #[serde(rename = "reservedSystemCPUs", default, deserialize_with = "nullable")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reserved_system_cpus: String,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub show_hidden_metrics_for_version: String,
    /// The cgroup system-reserved is enforced on.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub system_reserved_cgroup: String,
    /// The cgroup kube-reserved is enforced on.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub kube_reserved_cgroup: String,
    /// What node allocatable is enforced on (`[pods]`; an explicit `[]` stays empty).
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub enforce_node_allocatable: Option<Vec<String>>,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Flexvolume plugins' directory; ferrolet has no flexvolume.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub volume_plugin_dir: String,
    /// The node's spec.providerID.
    #[serde(rename = "providerID", default, deserialize_with = "nullable")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub provider_id: String,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub kernel_memcg_notification: bool,
    /// Log format and verbosity (the rest is not implemented).
    #[serde(default, deserialize_with = "nullable")]
    pub logging: LoggingConfiguration,
    /// Not implemented (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_system_log_handler: Option<bool>,
    /// Not implemented (false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_system_log_query: Option<bool>,
    /// Not implemented.
    #[serde(default, deserialize_with = "nullable")]
    pub shutdown_grace_period: GoDuration,
    /// Not implemented.
    #[serde(default, deserialize_with = "nullable")]
    pub shutdown_grace_period_critical_pods: GoDuration,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub shutdown_grace_period_by_pod_priority: Vec<ShutdownGracePeriodByPodPriority>,
    /// Not implemented (1.32+).
    #[serde(default, deserialize_with = "nullable")]
    pub crash_loop_back_off: CrashLoopBackOffConfig,
    /// Not implemented.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub reserved_memory: Vec<MemoryReservation>,
    /// Not implemented (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_profiling_handler: Option<bool>,
    /// Not implemented (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_debug_flags_handler: Option<bool>,
    /// Not implemented (false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_default: Option<bool>,
    /// How far towards the memory limit `memory.high` sits under MemoryQoS (0.9; ferrolet
    /// takes an explicit 0 as unset, as it always has).
    #[serde(
        default,
        deserialize_with = "number",
        skip_serializing_if = "Option::is_none"
    )]
    pub memory_throttling_factor: Option<f64>,
    /// Taints the node registers with.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub register_with_taints: Vec<RegisterTaint>,
    /// Register the node (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register_node: Option<bool>,
    /// Not implemented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingConfiguration>,
    /// Not implemented (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_storage_capacity_isolation: Option<bool>,
    /// The CRI runtime endpoint (ferrolet: unix:///run/ferrolet/cri.sock). Never omitted, as
    /// in Go.
    #[serde(default, deserialize_with = "nullable")]
    pub container_runtime_endpoint: String,
    /// The CRI image endpoint; "" = the runtime's.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub image_service_endpoint: String,
    /// Refuse to start on cgroup v1 (1.31+; false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_cgroup_v1: Option<bool>,
    /// Not implemented (1.33+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_namespaces: Option<UserNamespaces>,
    /// Not implemented; a later field, accepted unchecked so that newer files load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_curve_preferences: Option<serde_json::Value>,
    /// Not implemented; a later field, accepted unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_reservation_policy: Option<serde_json::Value>,
    /// Not implemented; a later field, accepted unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_housekeeping_period: Option<serde_json::Value>,
    /// Not implemented; a later field, accepted unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dra_manager_reconcile_period: Option<serde_json::Value>,
}

fn is_none_or_empty<T>(v: &Option<Vec<T>>) -> bool {
    v.as_ref().is_none_or(Vec::is_empty)
}

/// `authentication`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletAuthentication {
    /// Client certificates.
    #[serde(default, deserialize_with = "nullable")]
    pub x509: KubeletX509Authentication,
    /// Bearer tokens by TokenReview.
    #[serde(default, deserialize_with = "nullable")]
    pub webhook: KubeletWebhookAuthentication,
    /// Requests without credentials.
    #[serde(default, deserialize_with = "nullable")]
    pub anonymous: KubeletAnonymousAuthentication,
}

/// `authentication.x509`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletX509Authentication {
    /// CA bundle that signs client certificates.
    #[serde(rename = "clientCAFile", default, deserialize_with = "nullable")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub client_ca_file: String,
}

/// `authentication.webhook`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletWebhookAuthentication {
    /// On (ferrolet: false; Go: true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long a review is reused (2m).
    #[serde(rename = "cacheTTL", default, deserialize_with = "nullable")]
    pub cache_ttl: GoDuration,
}

/// `authentication.anonymous`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletAnonymousAuthentication {
    /// On (false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `authorization`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletAuthorization {
    /// AlwaysAllow, Webhook, or ferrolet's Static (ferrolet: AlwaysAllow; Go: Webhook).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub mode: String,
    /// The webhook's caches.
    #[serde(default, deserialize_with = "nullable")]
    pub webhook: KubeletWebhookAuthorization,
}

/// `authorization.webhook`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletWebhookAuthorization {
    /// How long an allowed review is reused (5m).
    #[serde(rename = "cacheAuthorizedTTL", default, deserialize_with = "nullable")]
    pub cache_authorized_ttl: GoDuration,
    /// How long a denied review is reused (30s).
    #[serde(
        rename = "cacheUnauthorizedTTL",
        default,
        deserialize_with = "nullable"
    )]
    pub cache_unauthorized_ttl: GoDuration,
}

/// `memorySwap`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemorySwapConfiguration {
    /// NoSwap or LimitedSwap.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub swap_behavior: String,
}

/// `crashLoopBackOff` (1.32+).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CrashLoopBackOffConfig {
    /// The longest back-off between restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_container_restart_period: Option<GoDuration>,
}

/// One of `shutdownGracePeriodByPodPriority`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShutdownGracePeriodByPodPriority {
    /// The lowest priority of the class.
    #[serde(default)]
    pub priority: i32,
    /// The class's grace period.
    #[serde(default)]
    pub shutdown_grace_period_seconds: i64,
}

/// One of `reservedMemory`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryReservation {
    /// The NUMA node.
    #[serde(default)]
    pub numa_node: i32,
    /// Resource → quantity.
    #[serde(default, deserialize_with = "lenient_map")]
    pub limits: BTreeMap<String, String>,
}

/// One of `registerWithTaints` (core/v1 Taint).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterTaint {
    /// The key.
    #[serde(default, deserialize_with = "nullable")]
    pub key: String,
    /// The value.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub value: String,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    #[serde(default, deserialize_with = "nullable")]
    pub effect: String,
    /// Only for NoExecute taints; the kubelet does not set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<String>,
}

/// `tracing` (component-base TracingConfiguration).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TracingConfiguration {
    /// The collector's endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Spans sampled per million.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_rate_per_million: Option<i32>,
}

/// `userNamespaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserNamespaces {
    /// IDs per pod.
    #[serde(rename = "idsPerPod", default, skip_serializing_if = "Option::is_none")]
    pub ids_per_pod: Option<i64>,
}

/// `logging` (component-base LoggingConfiguration v1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggingConfiguration {
    /// text or json (text).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub format: String,
    /// Not implemented (5s).
    #[serde(default, deserialize_with = "nullable")]
    pub flush_frequency: TimeOrMetaDuration,
    /// Log verbosity.
    #[serde(default, deserialize_with = "nullable")]
    pub verbosity: u32,
    /// Not implemented.
    #[serde(default, skip_serializing_if = "VModule::is_empty")]
    pub vmodule: VModule,
    /// Not implemented.
    #[serde(default, deserialize_with = "nullable")]
    pub options: FormatOptions,
}

/// `logging.vmodule`: `[{filePattern, verbosity}]`, or the flag's `pattern=N,...` string.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct VModule(pub Vec<VModuleItem>);

impl VModule {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The flag's form, `pattern=N[,pattern=N...]`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut items = Vec::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (pattern, n) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} does not have the pattern=N format"))?;
            let verbosity = n
                .parse()
                .map_err(|_| format!("parsing verbosity in {part:?}: invalid syntax"))?;
            items.push(VModuleItem {
                file_pattern: pattern.to_string(),
                verbosity,
            });
        }
        Ok(Self(items))
    }
}

impl<'de> Deserialize<'de> for VModule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Items(Vec<VModuleItem>),
            Text(String),
        }
        match Option::<Form>::deserialize(d)? {
            None => Ok(Self::default()),
            Some(Form::Items(items)) => Ok(Self(items)),
            Some(Form::Text(s)) => Self::parse(&s).map_err(de::Error::custom),
        }
    }
}

/// One of `logging.vmodule`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VModuleItem {
    /// The file pattern.
    #[serde(default)]
    pub file_pattern: String,
    /// Its verbosity.
    #[serde(default)]
    pub verbosity: u32,
}

/// `logging.options`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormatOptions {
    /// The text format's (1.30+).
    #[serde(default, deserialize_with = "nullable")]
    pub text: StreamOptions,
    /// The JSON format's.
    #[serde(default, deserialize_with = "nullable")]
    pub json: StreamOptions,
}

/// `logging.options.text` and `.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamOptions {
    /// Errors to stderr, the rest to stdout.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub split_stream: bool,
    /// Info buffer size, a quantity (Go writes its zero value as "0").
    #[serde(default = "zero_quantity")]
    pub info_buffer_size: LenientString,
}

fn zero_quantity() -> LenientString {
    LenientString("0".into())
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self {
            split_stream: false,
            info_buffer_size: zero_quantity(),
        }
    }
}

fn default_duration(slot: &mut GoDuration, d: Duration) {
    if slot.is_zero() {
        *slot = GoDuration(d);
    }
}

fn default_string(slot: &mut String, s: &str) {
    if slot.is_empty() {
        *slot = s.to_string();
    }
}

fn default_int(slot: &mut i32, n: i32) {
    if *slot == 0 {
        *slot = n;
    }
}

impl KubeletConfiguration {
    /// The configuration of an empty file: every default set.
    pub fn defaulted() -> Self {
        let mut c = Self::default();
        c.set_defaults();
        c
    }

    /// Go's `SetDefaults_KubeletConfiguration` (pkg/kubelet/apis/config/v1beta1, with the
    /// fields of 1.29-1.32): fills the unset pointers and the zero values. Idempotent, so it
    /// runs again after the flags (a flag's zero value then means the default, as ferrolet's
    /// flags always had it). ferrolet's own defaults: `containerRuntimeEndpoint` (ferrolet-cri),
    /// `authentication.webhook.enabled` false and `authorization.mode` AlwaysAllow (Go: true
    /// and Webhook; the webhook modes need `--kubeconfig`), and `port`/`maxPods` only when
    /// unset (an explicit 0 is refused).
    pub fn set_defaults(&mut self) {
        let secs = Duration::from_secs;
        self.enable_server.get_or_insert(true);
        default_string(&mut self.pod_logs_dir, "/var/log/pods");
        default_duration(&mut self.sync_frequency, secs(60));
        default_duration(&mut self.file_check_frequency, secs(20));
        default_duration(&mut self.http_check_frequency, secs(20));
        default_string(&mut self.address, "0.0.0.0");
        self.port.get_or_insert(10250);
        let authn = &mut self.authentication;
        authn.anonymous.enabled.get_or_insert(false);
        authn.webhook.enabled.get_or_insert(false);
        default_duration(&mut authn.webhook.cache_ttl, secs(120));
        let authz = &mut self.authorization;
        default_string(&mut authz.mode, "AlwaysAllow");
        default_duration(&mut authz.webhook.cache_authorized_ttl, secs(300));
        default_duration(&mut authz.webhook.cache_unauthorized_ttl, secs(30));
        self.registry_pull_qps.get_or_insert(5);
        default_int(&mut self.registry_burst, 10);
        self.event_record_qps.get_or_insert(50);
        default_int(&mut self.event_burst, 100);
        self.enable_debugging_handlers.get_or_insert(true);
        self.healthz_port.get_or_insert(10248);
        default_string(&mut self.healthz_bind_address, "127.0.0.1");
        self.oom_score_adj.get_or_insert(-999);
        default_duration(&mut self.streaming_connection_idle_timeout, secs(4 * 3600));
        if self.node_status_report_frequency.is_zero() {
            self.node_status_report_frequency = if self.node_status_update_frequency.is_zero() {
                GoDuration::secs(300)
            } else {
                self.node_status_update_frequency
            };
        }
        default_duration(&mut self.node_status_update_frequency, secs(10));
        default_int(&mut self.node_lease_duration_seconds, 40);
        default_duration(&mut self.image_minimum_gc_age, secs(120));
        self.image_gc_high_threshold_percent.get_or_insert(85);
        self.image_gc_low_threshold_percent.get_or_insert(80);
        default_duration(&mut self.volume_stats_agg_period, secs(60));
        default_string(&mut self.cgroup_root, "/");
        self.cgroups_per_qos.get_or_insert(true);
        default_string(&mut self.cgroup_driver, "cgroupfs");
        default_string(&mut self.cpu_manager_policy, "none");
        default_duration(&mut self.cpu_manager_reconcile_period, secs(10));
        default_string(&mut self.memory_manager_policy, "None");
        default_string(&mut self.topology_manager_policy, "none");
        default_string(&mut self.topology_manager_scope, "container");
        default_duration(&mut self.runtime_request_timeout, secs(120));
        default_string(&mut self.hairpin_mode, "promiscuous-bridge");
        self.max_pods.get_or_insert(110);
        if self.pod_pids_limit.is_none_or(|n| n < 0) {
            self.pod_pids_limit = Some(-1);
        }
        self.resolv_conf
            .get_or_insert_with(|| "/etc/resolv.conf".into());
        self.cpu_cfs_quota.get_or_insert(true);
        self.cpu_cfs_quota_period
            .get_or_insert(GoDuration(Duration::from_millis(100)));
        self.node_status_max_images.get_or_insert(50);
        if self.max_open_files == 0 {
            self.max_open_files = 1_000_000;
        }
        default_string(
            &mut self.content_type,
            "application/vnd.kubernetes.protobuf",
        );
        self.kube_api_qps.get_or_insert(50);
        default_int(&mut self.kube_api_burst, 100);
        if self.serialize_image_pulls.is_none() {
            let parallel = self.max_parallel_image_pulls.is_some_and(|n| n >= 2);
            self.serialize_image_pulls = Some(!parallel);
        }
        self.eviction_hard.get_or_insert_with(|| {
            DEFAULT_EVICTION_HARD
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        });
        default_duration(&mut self.eviction_pressure_transition_period, secs(300));
        self.enable_controller_attach_detach.get_or_insert(true);
        self.make_iptables_util_chains.get_or_insert(true);
        self.iptables_masquerade_bit.get_or_insert(14);
        self.iptables_drop_bit.get_or_insert(15);
        self.fail_swap_on.get_or_insert(true);
        default_string(&mut self.container_log_max_size, "10Mi");
        self.container_log_max_files.get_or_insert(5);
        self.container_log_max_workers.get_or_insert(1);
        self.container_log_monitor_interval
            .get_or_insert(GoDuration::secs(10));
        default_string(
            &mut self.config_map_and_secret_change_detection_strategy,
            "Watch",
        );
        self.enforce_node_allocatable
            .get_or_insert_with(|| vec!["pods".into()]);
        default_string(&mut self.volume_plugin_dir, DEFAULT_VOLUME_PLUGIN_DIR);
        // component-base's SetRecommendedLoggingConfiguration.
        let logging = &mut self.logging;
        default_string(&mut logging.format, "text");
        if logging.flush_frequency.duration.is_zero() {
            logging.flush_frequency = TimeOrMetaDuration {
                duration: Duration::from_secs(5),
                serialize_as_string: true,
            };
        }
        for stream in [&mut logging.options.text, &mut logging.options.json] {
            if stream.info_buffer_size.0.is_empty() {
                stream.info_buffer_size = zero_quantity();
            }
        }
        self.enable_system_log_handler.get_or_insert(true);
        self.enable_system_log_query.get_or_insert(false);
        self.enable_profiling_handler.get_or_insert(true);
        self.enable_debug_flags_handler.get_or_insert(true);
        self.seccomp_default.get_or_insert(false);
        if self.memory_throttling_factor.is_none_or(|f| f == 0.0) {
            self.memory_throttling_factor = Some(0.9);
        }
        self.register_node.get_or_insert(true);
        self.local_storage_capacity_isolation.get_or_insert(true);
        default_string(
            &mut self.container_runtime_endpoint,
            DEFAULT_RUNTIME_ENDPOINT,
        );
        self.fail_cgroup_v1.get_or_insert(false);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_go_writes_them() {
        let d: GoDuration = serde_json::from_str("\"90s\"").unwrap();
        assert_eq!(d, GoDuration::secs(90));
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"1m30s\"");
        assert!(serde_json::from_str::<GoDuration>("20").is_err());
        let f: TimeOrMetaDuration = serde_json::from_str("0").unwrap();
        assert_eq!(serde_json::to_string(&f).unwrap(), "0");
        let f: TimeOrMetaDuration = serde_json::from_str("\"1s\"").unwrap();
        assert_eq!(serde_json::to_string(&f).unwrap(), "\"1s\"");
    }

    #[test]
    fn defaults_are_idempotent_and_round_trip() {
        let d = KubeletConfiguration::defaulted();
        let mut again = d.clone();
        again.set_defaults();
        assert_eq!(again, d);
        let json = serde_json::to_value(&d).unwrap();
        let back: KubeletConfiguration = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, d);
        assert_eq!(json["logging"]["flushFrequency"], "5s");
        assert_eq!(json["logging"]["options"]["json"]["infoBufferSize"], "0");
        assert_eq!(json["crashLoopBackOff"], serde_json::json!({}));
        assert_eq!(json["shutdownGracePeriod"], "0s");
        assert_eq!(json["containerRuntimeEndpoint"], DEFAULT_RUNTIME_ENDPOINT);
        assert!(json.get("readOnlyPort").is_none());
    }
}
