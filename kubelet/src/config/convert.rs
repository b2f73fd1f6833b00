//! The one conversion from the final (defaulted, flags laid over) [`KubeletConfiguration`]
//! into [`Config`]: value forms parsed (IPs, quantities, enums) with the field named when one
//! is refused. Settings that only flags carry (`--root-dir`, `--kubeconfig`, …) start at
//! their defaults; [`Config::apply_runtime_flags`](super::apply) sets them.

use std::net::IpAddr;
use std::path::PathBuf;

use super::file::invalid;
use super::v1beta1::KubeletConfiguration;
use super::{
    Authentication, Authorization, AuthorizationMode, ChangeDetection, CloudProvider, Config,
    ConfigError, DEFAULT_ROOT_DIR, LogFormat, container_manager, node,
};
use crate::manifest::quantity::parse_quantity;

/// A port (0 = off), as Go's validation ranges it.
fn port(field: &str, n: i32) -> Result<u16, ConfigError> {
    u16::try_from(n)
        .map_err(|_| invalid(field, format!("{n} must be between 0 and 65535, inclusive")))
}

fn ip(field: &str, s: &str) -> Result<IpAddr, ConfigError> {
    if s.is_empty() {
        return Err(invalid(field, "an empty IP address"));
    }
    s.parse()
        .map_err(|_| invalid(field, format!("{s:?} is not an IP address")))
}

fn nonempty_path(s: &str) -> Option<PathBuf> {
    Some(PathBuf::from(s)).filter(|p| !p.as_os_str().is_empty())
}

/// A quantity of bytes (`10Mi`).
fn size(field: &str, s: &str) -> Result<u64, ConfigError> {
    let q = parse_quantity(s).map_err(|e| invalid(field, format!("{s:?}: {e}")))?;
    u64::try_from(q.value_ceil())
        .map_err(|_| invalid(field, format!("{s:?} must be a non-negative size")))
}

pub(super) fn authorization_mode(field: &str, s: &str) -> Result<AuthorizationMode, ConfigError> {
    AuthorizationMode::parse(s).ok_or_else(|| {
        invalid(
            field,
            format!("unknown authorization mode {s:?} (want AlwaysAllow, Webhook or Static)"),
        )
    })
}

impl Config {
    /// The settings `kc` (defaulted) asks for; flag-only settings at their defaults.
    pub fn from_kubelet_config(kc: KubeletConfiguration) -> Result<Config, ConfigError> {
        let d = |g: super::v1beta1::GoDuration| g.0;
        let log_format = match kc.logging.format.as_str() {
            "" | "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(invalid(
                    "logging.format",
                    format!("unsupported log format {other:?} (want \"text\" or \"json\")"),
                ));
            }
        };
        let verbosity = u8::try_from(kc.logging.verbosity).map_err(|_| {
            invalid(
                "logging.verbosity",
                format!(
                    "{} must be between 0 and 255, inclusive",
                    kc.logging.verbosity
                ),
            )
        })?;
        let max_pods = kc.max_pods.unwrap_or(110);
        let max_pods = u32::try_from(max_pods).map_err(|_| {
            invalid(
                "maxPods",
                format!("{max_pods} must not be a negative number"),
            )
        })?;
        let files = kc.container_log_max_files.unwrap_or(5);
        let container_log_max_files =
            u32::try_from(files)
                .ok()
                .filter(|n| *n > 1)
                .ok_or_else(|| {
                    invalid(
                        "containerLogMaxFiles",
                        format!("{files}: must be greater than 1"),
                    )
                })?;
        let cluster_dns = kc
            .cluster_dns
            .iter()
            .enumerate()
            .map(|(i, s)| ip(&format!("clusterDNS[{i}]"), s))
            .collect::<Result<Vec<_>, _>>()?;
        let specs: Vec<String> = kc
            .register_with_taints
            .iter()
            .map(|t| {
                if t.value.is_empty() {
                    format!("{}:{}", t.key, t.effect)
                } else {
                    format!("{}={}:{}", t.key, t.value, t.effect)
                }
            })
            .collect();
        let register_with_taints =
            node::taints("registerWithTaints", specs.iter().map(String::as_str))?;
        let lease = kc.node_lease_duration_seconds;
        let node_lease_duration_seconds =
            u32::try_from(lease)
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    invalid(
                        "nodeLeaseDurationSeconds",
                        format!("{lease} must be greater than 0"),
                    )
                })?;
        let strategy = &kc.config_map_and_secret_change_detection_strategy;
        let config_map_and_secret_change_detection_strategy = if strategy.is_empty() {
            ChangeDetection::Watch
        } else {
            ChangeDetection::parse(strategy).ok_or_else(|| {
                invalid(
                    "configMapAndSecretChangeDetectionStrategy",
                    format!("{strategy:?} is not one of \"Get\", \"Cache\", \"Watch\""),
                )
            })?
        };
        let authn = &kc.authentication;
        let authz = &kc.authorization;
        let mode = if authz.mode.is_empty() {
            AuthorizationMode::AlwaysAllow
        } else {
            authorization_mode("authorization.mode", &authz.mode)?
        };
        let cpu_manager_policy = if kc.cpu_manager_policy.is_empty() {
            crate::cm::CpuManagerPolicy::None
        } else {
            container_manager::cpu_manager_policy(&kc.cpu_manager_policy)?
        };
        let gc = crate::gc::GcPolicy {
            image_gc_high_threshold_percent: kc.image_gc_high_threshold_percent.unwrap_or(85),
            image_gc_low_threshold_percent: kc.image_gc_low_threshold_percent.unwrap_or(80),
            image_minimum_gc_age: d(kc.image_minimum_gc_age),
            ..crate::gc::GcPolicy::default()
        };
        let eviction = crate::eviction::EvictionConfig {
            hard: kc.eviction_hard.clone(),
            soft: kc.eviction_soft.clone(),
            soft_grace_period: kc.eviction_soft_grace_period.clone(),
            minimum_reclaim: kc.eviction_minimum_reclaim.clone(),
            pressure_transition_period: d(kc.eviction_pressure_transition_period),
            max_pod_grace_period: i64::from(kc.eviction_max_pod_grace_period),
            merge_defaults: kc.merge_default_eviction_settings.unwrap_or(false),
        };
        Ok(Config {
            static_pod_path: nonempty_path(&kc.static_pod_path),
            static_pod_url: Some(kc.static_pod_url.clone()).filter(|u| !u.is_empty()),
            static_pod_url_header: kc.static_pod_url_header.clone(),
            file_check_frequency: d(kc.file_check_frequency),
            http_check_frequency: d(kc.http_check_frequency),
            sync_frequency: d(kc.sync_frequency),
            container_runtime_endpoint: kc.container_runtime_endpoint.clone(),
            image_service_endpoint: kc.image_service_endpoint.clone(),
            runtime_request_timeout: d(kc.runtime_request_timeout),
            address: ip("address", &kc.address)?,
            read_only_port: port("readOnlyPort", kc.read_only_port)?,
            healthz_port: port("healthzPort", kc.healthz_port.unwrap_or(10248))?,
            healthz_bind_address: ip("healthzBindAddress", &kc.healthz_bind_address)?,
            max_pods,
            cluster_dns,
            cluster_domain: kc.cluster_domain.clone(),
            resolv_conf: PathBuf::from(kc.resolv_conf.as_deref().unwrap_or("/etc/resolv.conf")),
            serialize_image_pulls: kc.serialize_image_pulls.unwrap_or(true),
            pod_logs_dir: PathBuf::from(&kc.pod_logs_dir),
            container_log_max_size: size("containerLogMaxSize", &kc.container_log_max_size)?,
            container_log_max_files,
            cgroup_root: kc.cgroup_root.clone(),
            cgroups_per_qos: kc.cgroups_per_qos.unwrap_or(true),
            cgroup_driver: kc.cgroup_driver.clone(),
            fail_cgroup_v1: kc.fail_cgroup_v1.unwrap_or(false),
            enforce_node_allocatable: kc.enforce_node_allocatable.clone().unwrap_or_default(),
            kube_reserved_cgroup: kc.kube_reserved_cgroup.clone(),
            system_reserved_cgroup: kc.system_reserved_cgroup.clone(),
            pod_pids_limit: kc.pod_pids_limit.unwrap_or(-1),
            qos_reserved: kc.qos_reserved.clone(),
            memory_throttling_factor: kc.memory_throttling_factor.unwrap_or(0.9),
            cpu_manager_policy,
            cpu_manager_reconcile_period: d(kc.cpu_manager_reconcile_period),
            reserved_system_cpus: kc.reserved_system_cpus.clone(),
            cpu_cfs_quota: kc.cpu_cfs_quota.unwrap_or(true),
            cpu_cfs_quota_period: kc.cpu_cfs_quota_period.map(d).unwrap_or_default(),
            feature_gates: kc.feature_gates.clone(),
            user_namespaces_ids_per_pod: kc.user_namespaces.as_ref().and_then(|u| u.ids_per_pod),
            hostname_override: None,
            node_name: String::new(),
            root_dir: PathBuf::from(DEFAULT_ROOT_DIR),
            verbosity,
            log_format,
            gc,
            enable_server: kc.enable_server.unwrap_or(true),
            port: port("port", kc.port.unwrap_or(10250))?,
            tls_cert_file: nonempty_path(&kc.tls_cert_file),
            tls_private_key_file: nonempty_path(&kc.tls_private_key_file),
            cert_dir: None,
            authentication: Authentication {
                client_ca_file: nonempty_path(&authn.x509.client_ca_file),
                anonymous: authn.anonymous.enabled.unwrap_or(false),
                webhook: authn.webhook.enabled.unwrap_or(false),
                webhook_cache_ttl: d(authn.webhook.cache_ttl),
            },
            authorization: Authorization {
                mode,
                policy_file: None,
                webhook_cache_authorized_ttl: d(authz.webhook.cache_authorized_ttl),
                webhook_cache_unauthorized_ttl: d(authz.webhook.cache_unauthorized_ttl),
            },
            eviction,
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            node_ips: Vec::new(),
            node_labels: Default::default(),
            register_node: kc.register_node.unwrap_or(true),
            register_with_taints,
            rotate_certificates: kc.rotate_certificates,
            server_tls_bootstrap: kc.server_tls_bootstrap,
            pod_infra_container_image: None,
            cloud_provider: CloudProvider::None,
            provider_id: kc.provider_id.clone(),
            node_status_update_frequency: d(kc.node_status_update_frequency),
            node_status_report_frequency: d(kc.node_status_report_frequency),
            node_lease_duration_seconds,
            node_status_max_images: kc.node_status_max_images.unwrap_or(50),
            kube_reserved: kc.kube_reserved.clone(),
            system_reserved: kc.system_reserved.clone(),
            config_map_and_secret_change_detection_strategy,
            volume_plugin_dir: PathBuf::from(&kc.volume_plugin_dir),
            pod_timeline_pods: crate::timeline::DEFAULT_PODS,
            device_plugin_stop_grace_period: crate::cm::devicemanager::DEFAULT_STOP_GRACE_PERIOD,
            fail_swap_on: kc.fail_swap_on.unwrap_or(true),
            kubelet_config: kc,
        })
    }
}
