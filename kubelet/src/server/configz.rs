//! `/configz`: the effective configuration as the Go kubelet shows it,
//! `{"kubeletconfig": {…}}`: the final KubeletConfiguration (the file defaulted, the flags
//! laid over it) that [`Config`] keeps, serialized as Go's v1beta1 writes it (durations as
//! `1m0s`, `omitempty` as in Go), without `kind`/`apiVersion` (Go's converted object has
//! none); the serving certificate and key in use (a self-signed pair's paths, as the Go
//! kubelet shows them); and beside it ferrolet's `"cgroups"` object.

use serde::Serialize;

use super::tls::ServingFiles;
use crate::config::{Config, KubeletConfiguration};

/// The body's shape.
#[derive(Serialize)]
struct Body<'a> {
    kubeletconfig: &'a KubeletConfiguration,
    cgroups: Cgroups<'a>,
}

/// Beside Go's object: what the node's cgroups are and the driver making them.
#[derive(Serialize)]
struct Cgroups<'a> {
    version: &'a str,
    driver: &'a str,
}

/// The `/configz` body for `config`, with the serving files actually in use (a self-signed
/// pair shows its paths, as the Go kubelet's does).
pub fn configz(config: &Config, serving: Option<&ServingFiles>) -> Vec<u8> {
    let mut kc = config.kubelet_config.clone();
    if let Some(s) = serving {
        kc.tls_cert_file = s.cert_file.display().to_string();
        kc.tls_private_key_file = s.key_file.display().to_string();
    }
    let version = crate::cm::cgroup::Layout::detect()
        .map(|l| l.mode().as_str())
        .unwrap_or("unknown");
    let body = Body {
        kubeletconfig: &kc,
        cgroups: Cgroups {
            version,
            driver: &config.cgroup_driver,
        },
    };
    let mut out = serde_json::to_vec(&body).unwrap_or_default();
    out.push(b'\n');
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::v1beta1::GoDuration;
    use serde_json::{Value, json};
    use std::path::PathBuf;
    use std::time::Duration;

    /// The settings of a KubeletConfiguration `tweak` sets up, defaulted.
    fn config(tweak: impl FnOnce(&mut KubeletConfiguration)) -> Config {
        let mut kc = KubeletConfiguration::default();
        tweak(&mut kc);
        kc.set_defaults();
        Config::from_kubelet_config(kc).unwrap()
    }

    fn kc(config: &Config) -> Value {
        let v: Value = serde_json::from_slice(&configz(config, None)).unwrap();
        v["kubeletconfig"].clone()
    }

    #[test]
    fn the_effective_configuration() {
        let config = config(|kc| kc.static_pod_path = "/etc/pods".into());
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
        assert_eq!(kc["tlsPrivateKeyFile"], "/var/lib/k/pki/kubelet.key");
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
        // Every defaulted field, as Go's /configz has them.
        assert_eq!(kc["streamingConnectionIdleTimeout"], "4h0m0s");
        assert_eq!(kc["eventRecordQPS"], 50);
        assert_eq!(kc["failSwapOn"], true);
        assert_eq!(kc["memorySwap"], json!({}));
        assert_eq!(kc["shutdownGracePeriod"], "0s");
        assert_eq!(kc["logging"]["flushFrequency"], "5s");
        assert_eq!(
            kc["containerRuntimeEndpoint"],
            "unix:///run/ferrolet/cri.sock"
        );
        assert_eq!(v["cgroups"]["driver"], "cgroupfs");
        // Without a self-signed pair: the configured files, here none.
        let plain = self::kc(&config);
        assert!(plain.get("tlsCertFile").is_none());
    }

    #[test]
    fn the_container_manager_s_fields() {
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
        let config = config(|kc| {
            kc.cgroups_per_qos = Some(false);
            kc.enforce_node_allocatable = Some(Vec::new());
            kc.kube_reserved_cgroup = "/kube".into();
            kc.system_reserved_cgroup = "/system".into();
            kc.pod_pids_limit = Some(1024);
            kc.qos_reserved = map("memory", "50%");
            kc.kube_reserved = map("cpu", "500m");
            kc.system_reserved = map("memory", "1Gi");
            kc.cpu_manager_policy = "static".into();
            kc.cpu_manager_reconcile_period = GoDuration::secs(90);
            kc.reserved_system_cpus = "0-1".into();
            kc.cpu_cfs_quota = Some(false);
            kc.cpu_cfs_quota_period = Some(GoDuration(Duration::from_micros(1500)));
            kc.feature_gates = [("CustomCPUCFSQuotaPeriod".to_string(), true)].into();
        });
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
