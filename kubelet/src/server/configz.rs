//! `/configz`: the effective configuration as the Go kubelet shows it,
//! `{"kubeletconfig": {…}}` with KubeletConfiguration v1beta1 field names and value forms
//! (durations as `1m0s`, sizes as `10Mi`), without `kind`/`apiVersion` (Go's converted
//! object has none). It shows the fields ferrolet acts on: a field added to [`Config`]
//! belongs here too.

use serde_json::{Map, Value, json};

use super::tls::ServingFiles;
use crate::config::Config;
use ferrolet_proto::go_duration::format_duration as go_duration;

/// The `/configz` body for `config`, with the serving files actually in use (a self-signed
/// pair shows its paths, as the Go kubelet's does).
pub fn configz(config: &Config, serving: Option<&ServingFiles>) -> Vec<u8> {
    let mut kc = Map::new();
    let mut put = |k: &str, v: Value| {
        kc.insert(k.to_string(), v);
    };
    put("enableServer", json!(config.enable_server));
    if let Some(p) = &config.static_pod_path {
        put("staticPodPath", json!(p.display().to_string()));
    }
    put(
        "podLogsDir",
        json!(config.pod_logs_dir.display().to_string()),
    );
    put("syncFrequency", json!(go_duration(config.sync_frequency)));
    put(
        "fileCheckFrequency",
        json!(go_duration(config.file_check_frequency)),
    );
    put(
        "httpCheckFrequency",
        json!(go_duration(config.http_check_frequency)),
    );
    if let Some(u) = &config.static_pod_url {
        put("staticPodURL", json!(u));
    }
    if !config.static_pod_url_header.is_empty() {
        put("staticPodURLHeader", json!(config.static_pod_url_header));
    }
    put("address", json!(config.address.to_string()));
    put("port", json!(config.port));
    if config.read_only_port != 0 {
        put("readOnlyPort", json!(config.read_only_port));
    }
    let (cert, key) = match serving {
        Some(s) => (Some(&s.cert_file), Some(&s.key_file)),
        None => (
            config.tls_cert_file.as_ref(),
            config.tls_private_key_file.as_ref(),
        ),
    };
    if let Some(c) = cert {
        put("tlsCertFile", json!(c.display().to_string()));
    }
    if let Some(k) = key {
        put("tlsPrivateKeyFile", json!(k.display().to_string()));
    }
    let authn = &config.authentication;
    let mut x509 = Map::new();
    if let Some(ca) = &authn.client_ca_file {
        x509.insert("clientCAFile".into(), json!(ca.display().to_string()));
    }
    put(
        "authentication",
        json!({
            "x509": x509,
            "webhook": {"enabled": authn.webhook, "cacheTTL": go_duration(authn.webhook_cache_ttl)},
            "anonymous": {"enabled": authn.anonymous},
        }),
    );
    put(
        "authorization",
        json!({
            "mode": config.authorization.mode.as_str(),
            "webhook": {
                "cacheAuthorizedTTL": go_duration(config.authorization.webhook_cache_authorized_ttl),
                "cacheUnauthorizedTTL": go_duration(config.authorization.webhook_cache_unauthorized_ttl),
            },
        }),
    );
    if config.healthz_port != 0 {
        put("healthzPort", json!(config.healthz_port));
    }
    put(
        "healthzBindAddress",
        json!(config.healthz_bind_address.to_string()),
    );
    if !config.cluster_domain.is_empty() {
        put("clusterDomain", json!(config.cluster_domain));
    }
    if !config.cluster_dns.is_empty() {
        let dns: Vec<String> = config.cluster_dns.iter().map(|ip| ip.to_string()).collect();
        put("clusterDNS", json!(dns));
    }
    put(
        "runtimeRequestTimeout",
        json!(go_duration(config.runtime_request_timeout)),
    );
    put("maxPods", json!(config.max_pods));
    put(
        "resolvConf",
        json!(config.resolv_conf.display().to_string()),
    );
    put("cgroupRoot", json!(config.cgroup_root));
    container_manager(config, &mut put);
    put("serializeImagePulls", json!(config.serialize_image_pulls));
    put(
        "containerLogMaxSize",
        json!(go_quantity(config.container_log_max_size)),
    );
    put(
        "containerLogMaxFiles",
        json!(config.container_log_max_files),
    );
    put(
        "containerRuntimeEndpoint",
        json!(config.container_runtime_endpoint),
    );
    if !config.image_service_endpoint.is_empty() {
        put("imageServiceEndpoint", json!(config.image_service_endpoint));
    }
    let gc = &config.gc;
    put(
        "imageMinimumGCAge",
        json!(go_duration(gc.image_minimum_gc_age)),
    );
    put(
        "imageGCHighThresholdPercent",
        json!(gc.image_gc_high_threshold_percent),
    );
    put(
        "imageGCLowThresholdPercent",
        json!(gc.image_gc_low_threshold_percent),
    );
    let eviction = &config.eviction;
    put("evictionHard", json!(eviction.effective_hard()));
    if !eviction.soft.is_empty() {
        put("evictionSoft", json!(eviction.soft));
    }
    if !eviction.soft_grace_period.is_empty() {
        put("evictionSoftGracePeriod", json!(eviction.soft_grace_period));
    }
    if !eviction.minimum_reclaim.is_empty() {
        put("evictionMinimumReclaim", json!(eviction.minimum_reclaim));
    }
    put(
        "evictionPressureTransitionPeriod",
        json!(go_duration(eviction.pressure_transition_period)),
    );
    put(
        "evictionMaxPodGracePeriod",
        json!(eviction.max_pod_grace_period),
    );
    put(
        "logging",
        json!({
            "format": if config.log_format.is_json() { "json" } else { "text" },
            "verbosity": config.verbosity,
        }),
    );
    // Beside Go's object: what the node's cgroups are and the driver making them.
    let cgroups = json!({
        "version": crate::cm::cgroup::Layout::detect()
            .map(|l| l.mode().as_str())
            .unwrap_or("unknown"),
        "driver": config.cgroup_driver,
    });
    let mut out =
        serde_json::to_vec(&json!({ "kubeletconfig": kc, "cgroups": cgroups })).unwrap_or_default();
    out.push(b'\n');
    out
}

/// The container manager's fields, as Go's v1beta1 writes them: pointers (`cgroupsPerQOS`,
/// `podPidsLimit`, `cpuCFSQuota`, `cpuCFSQuotaPeriod`) and durations always, empty strings,
/// lists and maps not (`omitempty`).
fn container_manager(config: &Config, put: &mut impl FnMut(&str, Value)) {
    put("cgroupsPerQOS", json!(config.cgroups_per_qos));
    put("cgroupDriver", json!(config.cgroup_driver));
    put("failCgroupV1", json!(config.fail_cgroup_v1));
    put(
        "cpuManagerPolicy",
        json!(config.cpu_manager_policy.as_str()),
    );
    put(
        "cpuManagerReconcilePeriod",
        json!(go_duration(config.cpu_manager_reconcile_period)),
    );
    put("podPidsLimit", json!(config.pod_pids_limit));
    put("cpuCFSQuota", json!(config.cpu_cfs_quota));
    put(
        "cpuCFSQuotaPeriod",
        json!(go_duration(config.cpu_cfs_quota_period)),
    );
    put(
        "memoryThrottlingFactor",
        json!(config.memory_throttling_factor),
    );
    let maps = [
        ("qosReserved", &config.qos_reserved),
        ("kubeReserved", &config.kube_reserved),
        ("systemReserved", &config.system_reserved),
    ];
    for (key, map) in maps {
        if !map.is_empty() {
            put(key, json!(map));
        }
    }
    let strings = [
        ("reservedSystemCPUs", &config.reserved_system_cpus),
        ("kubeReservedCgroup", &config.kube_reserved_cgroup),
        ("systemReservedCgroup", &config.system_reserved_cgroup),
    ];
    for (key, s) in strings {
        if !s.is_empty() {
            put(key, json!(s));
        }
    }
    if !config.enforce_node_allocatable.is_empty() {
        put(
            "enforceNodeAllocatable",
            json!(config.enforce_node_allocatable),
        );
    }
    if !config.feature_gates.is_empty() {
        put("featureGates", json!(config.feature_gates));
    }
}

/// Bytes as a Kubernetes quantity: the largest binary suffix that divides it (`10Mi`), else
/// plain.
fn go_quantity(bytes: u64) -> String {
    const SUFFIXES: [(&str, u64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    SUFFIXES
        .iter()
        .find(|(_, unit)| bytes != 0 && bytes.is_multiple_of(*unit))
        .map(|(s, unit)| format!("{}{s}", bytes / unit))
        .unwrap_or_else(|| bytes.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    #[test]
    fn quantities() {
        assert_eq!(go_quantity(10 << 20), "10Mi");
        assert_eq!(go_quantity(1536), "1536");
        assert_eq!(go_quantity(2048), "2Ki");
        assert_eq!(go_quantity(1000), "1000");
        assert_eq!(go_quantity(0), "0");
    }

    #[test]
    fn the_effective_configuration() {
        let config = Config {
            static_pod_path: Some("/etc/pods".into()),
            node_name: "n1".into(),
            ..Config::default()
        };
        let serving = ServingFiles {
            cert_file: PathBuf::from("/var/lib/k/pki/kubelet.crt"),
            key_file: PathBuf::from("/var/lib/k/pki/kubelet.key"),
            self_signed: true,
        };
        let v: Value = serde_json::from_slice(&configz(&config, Some(&serving))).unwrap();
        let kc = &v["kubeletconfig"];
        assert!(kc.get("kind").is_none() && kc.get("apiVersion").is_none());
        assert_eq!(kc["enableServer"], true);
        assert_eq!(kc["port"], 10250);
        assert!(
            kc.get("readOnlyPort").is_none(),
            "0 is omitted, as Go's omitempty"
        );
        assert_eq!(kc["staticPodPath"], "/etc/pods");
        assert_eq!(kc["syncFrequency"], "1m0s");
        assert_eq!(kc["fileCheckFrequency"], "20s");
        assert_eq!(kc["runtimeRequestTimeout"], "2m0s");
        assert_eq!(kc["containerLogMaxSize"], "10Mi");
        assert_eq!(kc["containerLogMaxFiles"], 5);
        assert_eq!(kc["maxPods"], 110);
        assert_eq!(kc["address"], "0.0.0.0");
        assert_eq!(kc["tlsCertFile"], "/var/lib/k/pki/kubelet.crt");
        assert_eq!(kc["authentication"]["anonymous"]["enabled"], false);
        assert_eq!(kc["authentication"]["webhook"]["enabled"], false);
        assert_eq!(kc["authorization"]["mode"], "AlwaysAllow");
        assert_eq!(kc["healthzPort"], 10248);
        assert_eq!(kc["logging"]["format"], "text");
        assert_eq!(kc["imageGCHighThresholdPercent"], 85);
        assert_eq!(kc["imageGCLowThresholdPercent"], 80);
        assert_eq!(kc["imageMinimumGCAge"], "2m0s");
        assert_eq!(kc["evictionHard"]["memory.available"], "100Mi");
        assert_eq!(kc["evictionHard"]["imagefs.available"], "15%");
        assert_eq!(kc["evictionPressureTransitionPeriod"], "5m0s");
    }
    #[test]
    fn the_container_manager_s_fields() {
        let kc = |config: &Config| -> Value {
            let v: Value = serde_json::from_slice(&configz(config, None)).unwrap();
            v["kubeletconfig"].clone()
        };
        let d = kc(&Config::default());
        assert_eq!(d["cgroupRoot"], "/");
        assert_eq!(d["cgroupsPerQOS"], true);
        assert_eq!(d["cgroupDriver"], "cgroupfs");
        assert_eq!(d["enforceNodeAllocatable"], json!(["pods"]));
        assert_eq!(d["podPidsLimit"], -1);
        assert_eq!(d["cpuManagerPolicy"], "none");
        assert_eq!(d["cpuManagerReconcilePeriod"], "10s");
        assert_eq!(d["cpuCFSQuota"], true);
        assert_eq!(d["cpuCFSQuotaPeriod"], "100ms");
        assert_eq!(d["memoryThrottlingFactor"], 0.9);
        for omitted in [
            "qosReserved",
            "reservedSystemCPUs",
            "kubeReservedCgroup",
            "systemReservedCgroup",
            "kubeReserved",
            "systemReserved",
            "featureGates",
        ] {
            assert!(d.get(omitted).is_none(), "{omitted} is omitempty");
        }

        let map = |k: &str, v: &str| [(k.to_string(), v.to_string())].into();
        let config = Config {
            cgroups_per_qos: false,
            enforce_node_allocatable: Vec::new(),
            kube_reserved_cgroup: "/kube".into(),
            system_reserved_cgroup: "/system".into(),
            pod_pids_limit: 1024,
            qos_reserved: map("memory", "50%"),
            kube_reserved: map("cpu", "500m"),
            system_reserved: map("memory", "1Gi"),
            cpu_manager_policy: crate::cm::CpuManagerPolicy::Static,
            cpu_manager_reconcile_period: Duration::from_secs(90),
            reserved_system_cpus: "0-1".into(),
            cpu_cfs_quota: false,
            cpu_cfs_quota_period: Duration::from_micros(1500),
            feature_gates: [("CustomCPUCFSQuotaPeriod".to_string(), true)].into(),
            ..Config::default()
        };
        let c = kc(&config);
        assert_eq!(c["cgroupsPerQOS"], false);
        assert!(c.get("enforceNodeAllocatable").is_none(), "[] is omitempty");
        assert_eq!(c["kubeReservedCgroup"], "/kube");
        assert_eq!(c["systemReservedCgroup"], "/system");
        assert_eq!(c["podPidsLimit"], 1024);
        assert_eq!(c["qosReserved"], json!({"memory": "50%"}));
        assert_eq!(c["kubeReserved"], json!({"cpu": "500m"}));
        assert_eq!(c["systemReserved"], json!({"memory": "1Gi"}));
        assert_eq!(c["cpuManagerPolicy"], "static");
        assert_eq!(c["cpuManagerReconcilePeriod"], "1m30s");
        assert_eq!(c["reservedSystemCPUs"], "0-1");
        assert_eq!(c["cpuCFSQuota"], false);
        assert_eq!(c["cpuCFSQuotaPeriod"], "1.5ms");
        assert_eq!(c["featureGates"], json!({"CustomCPUCFSQuotaPeriod": true}));
    }
}
