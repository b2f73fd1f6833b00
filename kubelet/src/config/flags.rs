//! Command-line flags, spelled as the Go kubelet's; a flag that is given wins over the
//! configuration file.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::duration::parse_duration_flag;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// JSON lines.
    pub fn is_json(self) -> bool {
        self == LogFormat::Json
    }
}

/// Flags (clap derive); every one optional so that only those given override the file.
#[derive(clap::Parser, Clone, Debug, Default, PartialEq)]
#[command(
    name = "ferrolet",
    version,
    about = "ferrolet: a Kubernetes node agent (kubelet) that drives pods through CRI"
)]
pub struct Flags {
    /// A KubeletConfiguration file (kubelet.config.k8s.io/v1beta1, YAML); flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory (or file) of static pod manifests (staticPodPath).
    #[arg(long, value_name = "PATH")]
    pub pod_manifest_path: Option<PathBuf>,
    /// URL of static pod manifests (staticPodURL).
    #[arg(long, value_name = "URL")]
    pub manifest_url: Option<String>,
    /// HTTP headers for --manifest-url, `key:value[,key:value...]`; repeatable; a name given
    /// twice gets both values in order (staticPodURLHeader).
    #[arg(long, value_name = "KEY:VALUE[,KEY:VALUE...]")]
    pub manifest_url_header: Vec<String>,
    /// Node name to use instead of the host name.
    #[arg(long, value_name = "NAME")]
    pub hostname_override: Option<String>,
    /// Where the kubelet keeps pod dirs and volumes [default: /var/lib/ferrolet/kubelet].
    #[arg(long, value_name = "DIR")]
    pub root_dir: Option<PathBuf>,
    /// CRI runtime endpoint (containerRuntimeEndpoint).
    #[arg(long, value_name = "ENDPOINT")]
    pub container_runtime_endpoint: Option<String>,
    /// CRI image endpoint, if not the runtime's (imageServiceEndpoint).
    #[arg(long, value_name = "ENDPOINT")]
    pub image_service_endpoint: Option<String>,
    /// Port of the read-only HTTP API, 0 = off (readOnlyPort).
    #[arg(long, value_name = "PORT")]
    pub read_only_port: Option<u16>,
    /// Port of the healthz endpoint, 0 = off (healthzPort).
    #[arg(long, value_name = "PORT")]
    pub healthz_port: Option<u16>,
    /// Address the healthz endpoint binds to (healthzBindAddress).
    #[arg(long, value_name = "IP")]
    pub healthz_bind_address: Option<IpAddr>,
    /// Address the read-only API binds to (address).
    #[arg(long, value_name = "IP")]
    pub address: Option<IpAddr>,
    /// Most pods this node runs (maxPods).
    #[arg(long, value_name = "N")]
    pub max_pods: Option<u32>,
    /// Cluster DNS server IPs, comma-separated (clusterDNS).
    #[arg(long, value_name = "IP[,IP...]", value_delimiter = ',')]
    pub cluster_dns: Vec<IpAddr>,
    /// Cluster DNS domain (clusterDomain).
    #[arg(long, value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,
    /// Resolver configuration the pods' DNS starts from; "" disables it (resolvConf).
    #[arg(long, value_name = "FILE")]
    pub resolv_conf: Option<PathBuf>,
    /// Cgroup parent of pods (cgroupRoot).
    #[arg(long, value_name = "CGROUP")]
    pub cgroup_root: Option<String>,
    /// How often the manifest directory is re-listed (fileCheckFrequency).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub file_check_frequency: Option<Duration>,
    /// How often the manifest URL is polled (httpCheckFrequency).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub http_check_frequency: Option<Duration>,
    /// How often every pod is synced (syncFrequency).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub sync_frequency: Option<Duration>,
    /// Timeout of CRI calls (runtimeRequestTimeout).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub runtime_request_timeout: Option<Duration>,
    /// Log verbosity (logging.verbosity).
    #[arg(short = 'v', long = "v", value_name = "LEVEL")]
    pub v: Option<u8>,
    /// Log format (logging.format).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Garbage collection flags.
    #[command(flatten)]
    pub gc: crate::gc::GcFlags,
    /// Port of the secure kubelet API (port) [default: 10250].
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Serving certificate chain, PEM (tlsCertFile) [default: self-signed in --cert-dir].
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving key, PEM (tlsPrivateKeyFile).
    #[arg(long, value_name = "FILE")]
    pub tls_private_key_file: Option<PathBuf>,
    /// Where the self-signed serving certificate is kept [default: pki/ in --root-dir].
    #[arg(long, value_name = "DIR")]
    pub cert_dir: Option<PathBuf>,
    /// CA bundle that signs client certificates (authentication.x509.clientCAFile).
    #[arg(long, value_name = "FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Let requests without credentials in as system:anonymous
    /// (authentication.anonymous.enabled) [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub anonymous_auth: Option<bool>,
    /// Bearer-token webhook authentication (authentication.webhook.enabled); needs an API
    /// server, so only false is accepted.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub authentication_token_webhook: Option<bool>,
    /// AlwaysAllow, Static (rules from --authorization-policy-file) or Webhook (needs an API
    /// server: refused) (authorization.mode) [default: AlwaysAllow].
    #[arg(long, value_name = "MODE")]
    pub authorization_mode: Option<String>,
    /// The rules of --authorization-mode=Static (ferrolet's own; YAML or JSON).
    #[arg(long, value_name = "FILE")]
    pub authorization_policy_file: Option<PathBuf>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn go_spellings() {
        let f = Flags::try_parse_from([
            "ferrolet",
            "--config=/etc/k.yaml",
            "--pod-manifest-path",
            "/etc/pods",
            "--manifest-url-header",
            "a:1,b:2",
            "--manifest-url-header=a:3",
            "--cluster-dns=10.0.0.10,10.0.0.11",
            "-v=4",
            "--log-format",
            "json",
            "--sync-frequency=1m30s",
            "--read-only-port",
            "10255",
        ])
        .unwrap();
        assert_eq!(f.config, Some("/etc/k.yaml".into()));
        assert_eq!(f.pod_manifest_path, Some("/etc/pods".into()));
        assert_eq!(f.manifest_url_header, ["a:1,b:2", "a:3"]);
        assert_eq!(f.cluster_dns.len(), 2);
        assert_eq!(f.v, Some(4));
        assert_eq!(f.log_format, Some(LogFormat::Json));
        assert_eq!(f.sync_frequency, Some(Duration::from_secs(90)));
        assert_eq!(f.read_only_port, Some(10255));
        assert_eq!(
            Flags::try_parse_from(["ferrolet", "--v", "2"]).unwrap().v,
            Some(2)
        );
        assert!(Flags::try_parse_from(["ferrolet", "--sync-frequency=20x"]).is_err());
        assert!(Flags::try_parse_from(["ferrolet", "--address=nowhere"]).is_err());
    }
}
