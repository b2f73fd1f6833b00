//! Command-line flags, spelled as the Go kubelet's; a flag that is given wins over the
//! configuration file.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ferrolet_proto::go_duration::parse_duration_flag;

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

/// Flags (clap derive); every one optional so that only those given override the file. Hence
/// the defaults `--help` shows are written into the help text (`[default: ...]`, checked
/// against [`super::Config::default`] by the tests) rather than set with `default_value`,
/// which would make every flag look given.
#[derive(clap::Parser, Clone, Debug, Default, PartialEq)]
#[command(
    name = "ferrolet",
    version,
    about = "ferrolet: a Kubernetes node agent (kubelet) that drives pods through CRI",
    after_help = "Settings: the defaults shown (the Go kubelet's, but for the runtime endpoint and \
                  the root dir), overridden by the --config file, overridden by the flags given."
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
    /// CRI runtime endpoint (containerRuntimeEndpoint) [default: unix:///run/ferrolet/cri.sock].
    #[arg(long, value_name = "ENDPOINT")]
    pub container_runtime_endpoint: Option<String>,
    /// CRI image endpoint, if not the runtime's (imageServiceEndpoint) [default: the
    /// --container-runtime-endpoint].
    #[arg(long, value_name = "ENDPOINT")]
    pub image_service_endpoint: Option<String>,
    /// Port of the read-only HTTP API, 0 = off (readOnlyPort) [default: 0].
    #[arg(long, value_name = "PORT")]
    pub read_only_port: Option<u16>,
    /// Port of the healthz endpoint, 0 = off (healthzPort) [default: 10248].
    #[arg(long, value_name = "PORT")]
    pub healthz_port: Option<u16>,
    /// Address the healthz endpoint binds to (healthzBindAddress) [default: 127.0.0.1].
    #[arg(long, value_name = "IP")]
    pub healthz_bind_address: Option<IpAddr>,
    /// Address the read-only and secure APIs bind to (address) [default: 0.0.0.0].
    #[arg(long, value_name = "IP")]
    pub address: Option<IpAddr>,
    /// Most pods this node runs (maxPods) [default: 110].
    #[arg(long, value_name = "N")]
    pub max_pods: Option<u32>,
    /// Cluster DNS server IPs, comma-separated (clusterDNS).
    #[arg(long, value_name = "IP[,IP...]", value_delimiter = ',')]
    pub cluster_dns: Vec<IpAddr>,
    /// Cluster DNS domain (clusterDomain).
    #[arg(long, value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,
    /// Resolver configuration the pods' DNS starts from; "" disables it (resolvConf)
    /// [default: /etc/resolv.conf].
    #[arg(long, value_name = "FILE")]
    pub resolv_conf: Option<PathBuf>,
    /// Cgroup parent of pods (cgroupRoot) [default: /].
    #[arg(long, value_name = "CGROUP")]
    pub cgroup_root: Option<String>,
    /// How often the manifest directory is re-listed (fileCheckFrequency) [default: 20s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub file_check_frequency: Option<Duration>,
    /// How often the manifest URL is polled (httpCheckFrequency) [default: 20s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub http_check_frequency: Option<Duration>,
    /// How often every pod is synced (syncFrequency) [default: 1m0s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub sync_frequency: Option<Duration>,
    /// Timeout of CRI calls (runtimeRequestTimeout) [default: 2m0s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub runtime_request_timeout: Option<Duration>,
    /// Log verbosity (logging.verbosity) [default: 0].
    #[arg(short = 'v', long = "v", value_name = "LEVEL")]
    pub v: Option<u8>,
    /// Log format (logging.format) [default: text].
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Garbage collection flags.
    #[command(flatten)]
    pub gc: crate::gc::GcFlags,
    /// The container manager's flags.
    #[command(flatten)]
    pub cm: super::CmFlags,
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
    /// Bearer tokens checked by TokenReview (authentication.webhook.enabled); API-server
    /// mode only [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub authentication_token_webhook: Option<bool>,
    /// AlwaysAllow, Static (rules from --authorization-policy-file) or Webhook
    /// (SubjectAccessReview; API-server mode only) (authorization.mode) [default: AlwaysAllow].
    #[arg(long, value_name = "MODE")]
    pub authorization_mode: Option<String>,
    /// The rules of --authorization-mode=Static (ferrolet's own; YAML or JSON).
    #[arg(long, value_name = "FILE")]
    pub authorization_policy_file: Option<PathBuf>,
    /// How to reach the API server; given = API-server mode, absent = standalone.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// A kubeconfig whose credentials request the kubelet's client certificate (kept in
    /// --cert-dir) when the --kubeconfig file does not exist yet.
    #[arg(long, value_name = "FILE")]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// The node's IP, or a comma-separated dual-stack pair [default: the host's].
    #[arg(long, value_name = "IP[,IP]")]
    pub node_ip: Option<String>,
    /// Labels the node registers with, `key=value[,key=value...]`; repeatable.
    #[arg(long, value_name = "KEY=VALUE[,...]")]
    pub node_labels: Vec<String>,
    /// Register the node with the API server (registerNode) [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub register_node: Option<bool>,
    /// Taints the node registers with, `key=value:Effect[,...]` (registerWithTaints).
    #[arg(long, value_name = "KEY=VALUE:EFFECT[,...]")]
    pub register_with_taints: Option<String>,
    /// Renew the client certificate from the API server as it nears expiry
    /// (rotateCertificates) [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub rotate_certificates: Option<bool>,
    /// Request the serving certificate from the API server (serverTLSBootstrap)
    /// [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub rotate_server_certificates: Option<bool>,
    /// The sandbox image; image garbage collection keeps it (the flag's only effect since
    /// the Go kubelet 1.27).
    #[arg(long, value_name = "IMAGE")]
    pub pod_infra_container_image: Option<String>,
    /// "" (none) or "external" (a cloud controller manager initializes the node).
    #[arg(long, value_name = "PROVIDER")]
    pub cloud_provider: Option<String>,
    /// The node's ID in the machine database, its spec.providerID (providerID).
    #[arg(long, value_name = "ID")]
    pub provider_id: Option<String>,
    /// How often the node status is computed, and posted if changed
    /// (nodeStatusUpdateFrequency) [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub node_status_update_frequency: Option<Duration>,
    /// Most images listed in the node status, -1 = all (nodeStatusMaxImages) [default: 50].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub node_status_max_images: Option<i32>,
    /// Resources kept for Kubernetes daemons, `cpu=100m,memory=1Gi,...` (kubeReserved).
    #[arg(long, value_name = "RESOURCE=QUANTITY[,...]")]
    pub kube_reserved: Vec<String>,
    /// Resources kept for the system, `cpu=100m,memory=1Gi,...` (systemReserved).
    #[arg(long, value_name = "RESOURCE=QUANTITY[,...]")]
    pub system_reserved: Vec<String>,
    /// Flexvolume plugins' directory; ferrolet has no flexvolume (volumePluginDir)
    /// [default: /usr/libexec/kubernetes/kubelet-plugins/volume/exec/].
    #[arg(long, value_name = "DIR")]
    pub volume_plugin_dir: Option<PathBuf>,
    /// Pods whose start timelines are kept for /debug/pods/<ns>/<name>/timeline, the least
    /// recently started evicted first; 0 keeps none (ferrolet's own) [default: 256].
    #[arg(long, value_name = "N")]
    pub pod_timeline_pods: Option<usize>,
    /// A command other than running the kubelet.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Commands other than running the kubelet (which is what no command means).
#[derive(clap::Subcommand, Clone, Debug, PartialEq)]
pub enum Command {
    /// Preflight the node with these flags (`ferrolet [FLAGS] check`): the configuration,
    /// cgroups, swap, kernel modules and sysctls, the runtime, the CNI configuration, ports,
    /// certificates and the clock; one pass/warn/fail line each, exit 1 when any fails.
    Check(CheckArgs),
    /// Show what a running ferrolet recorded (a client of its API).
    Trace {
        /// What to show.
        #[command(subcommand)]
        what: TraceCommand,
    },
}

/// `ferrolet trace ...`.
#[derive(clap::Subcommand, Clone, Debug, PartialEq)]
pub enum TraceCommand {
    /// A pod's start timeline as a table: each phase, its offset from the start and how long
    /// it took, per start.
    Pod(TracePod),
}

/// `ferrolet trace pod NAME`.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct TracePod {
    /// The pod's name (a static pod's ends with `-<node name>`).
    pub name: String,
    /// The pod's namespace.
    #[arg(long, short = 'n', value_name = "NS", default_value = "default")]
    pub namespace: String,
    /// ferrolet's read-only API (readOnlyPort).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:10255")]
    pub address: String,
    /// Print the JSON as served instead of the table.
    #[arg(long)]
    pub json: bool,
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

    #[test]
    fn trace_pod_is_a_subcommand_with_its_own_address() {
        let f =
            Flags::try_parse_from(["ferrolet", "trace", "pod", "web-node", "-n", "kube-system"])
                .unwrap();
        let Some(Command::Trace {
            what: TraceCommand::Pod(pod),
        }) = f.command
        else {
            panic!("{f:?}");
        };
        assert_eq!(pod.name, "web-node");
        assert_eq!(pod.namespace, "kube-system");
        assert_eq!(pod.address, "http://127.0.0.1:10255");
        assert!(!pod.json);
        let f = Flags::try_parse_from([
            "ferrolet",
            "trace",
            "pod",
            "p",
            "--address",
            "http://127.0.0.1:9999",
            "--json",
        ])
        .unwrap();
        let Some(Command::Trace {
            what: TraceCommand::Pod(pod),
        }) = f.command
        else {
            panic!("{f:?}");
        };
        assert_eq!(
            (pod.address.as_str(), pod.json),
            ("http://127.0.0.1:9999", true)
        );
        assert!(Flags::try_parse_from(["ferrolet", "trace", "pod"]).is_err());
        assert_eq!(Flags::try_parse_from(["ferrolet"]).unwrap().command, None);
    }

    /// The `[default: ...]` the help of `--long` shows, if any.
    fn shown_default(help: &str, long: &str) -> Option<String> {
        let heads = [format!(" --{long} "), format!(" --{long}[")];
        let mut lines = help
            .lines()
            .skip_while(|l| !heads.iter().any(|h| l.contains(h.as_str())));
        let first = lines.next()?;
        // An option's text ends where the next option starts.
        let text = std::iter::once(first)
            .chain(lines.take_while(|l| !l.trim_start().starts_with('-')))
            .collect::<Vec<_>>()
            .join(" ");
        let from = text.find("[default: ")? + "[default: ".len();
        let to = text[from..].find(']')? + from;
        Some(text[from..to].to_string())
    }

    #[test]
    fn help_shows_every_default() {
        use crate::config::Config;
        use clap::CommandFactory;
        use ferrolet_proto::go_duration::parse_duration;

        let help = Flags::command().render_long_help().to_string();
        assert!(
            help.contains("[default: unix:///run/ferrolet/cri.sock]"),
            "{help}"
        );
        let d = Config::default();
        let values = [
            ("root-dir", d.root_dir.display().to_string()),
            (
                "container-runtime-endpoint",
                d.container_runtime_endpoint.clone(),
            ),
            ("read-only-port", d.read_only_port.to_string()),
            ("healthz-port", d.healthz_port.to_string()),
            ("healthz-bind-address", d.healthz_bind_address.to_string()),
            ("address", d.address.to_string()),
            ("max-pods", d.max_pods.to_string()),
            ("resolv-conf", d.resolv_conf.display().to_string()),
            ("cgroup-root", d.cgroup_root.clone()),
            ("v", d.verbosity.to_string()),
            ("log-format", format!("{:?}", d.log_format).to_lowercase()),
            ("port", d.port.to_string()),
            ("register-node", d.register_node.to_string()),
            ("rotate-certificates", d.rotate_certificates.to_string()),
            (
                "rotate-server-certificates",
                d.server_tls_bootstrap.to_string(),
            ),
            (
                "node-status-max-images",
                d.node_status_max_images.to_string(),
            ),
            (
                "volume-plugin-dir",
                d.volume_plugin_dir.display().to_string(),
            ),
            ("anonymous-auth", d.authentication.anonymous.to_string()),
            (
                "authentication-token-webhook",
                d.authentication.webhook.to_string(),
            ),
            ("authorization-mode", d.authorization.mode.as_str().into()),
            (
                "maximum-dead-containers-per-container",
                d.gc.max_per_pod_container.to_string(),
            ),
            ("maximum-dead-containers", d.gc.max_containers.to_string()),
            (
                "image-gc-high-threshold",
                d.gc.image_gc_high_threshold_percent.to_string(),
            ),
            (
                "image-gc-low-threshold",
                d.gc.image_gc_low_threshold_percent.to_string(),
            ),
            ("cgroups-per-qos", d.cgroups_per_qos.to_string()),
            ("cgroup-driver", d.cgroup_driver.clone()),
            (
                "enforce-node-allocatable",
                d.enforce_node_allocatable.join(","),
            ),
            ("pod-max-pids", d.pod_pids_limit.to_string()),
            ("cpu-manager-policy", d.cpu_manager_policy.as_str().into()),
            ("cpu-cfs-quota", d.cpu_cfs_quota.to_string()),
            ("pod-timeline-pods", d.pod_timeline_pods.to_string()),
        ];
        let durations = [
            ("file-check-frequency", d.file_check_frequency),
            ("http-check-frequency", d.http_check_frequency),
            ("sync-frequency", d.sync_frequency),
            ("runtime-request-timeout", d.runtime_request_timeout),
            ("minimum-container-ttl-duration", d.gc.minimum_container_ttl),
            ("minimum-image-ttl-duration", d.gc.image_minimum_gc_age),
            (
                "node-status-update-frequency",
                d.node_status_update_frequency,
            ),
            (
                "cpu-manager-reconcile-period",
                d.cpu_manager_reconcile_period,
            ),
            ("cpu-cfs-quota-period", d.cpu_cfs_quota_period),
        ];
        // Defaults that are another setting, not a value.
        let derived = [
            "image-service-endpoint",
            "tls-cert-file",
            "cert-dir",
            "node-ip",
        ];
        // Nothing unless given, as in the Go kubelet's help.
        let unset = [
            "config",
            "pod-manifest-path",
            "manifest-url",
            "manifest-url-header",
            "hostname-override",
            "cluster-dns",
            "cluster-domain",
            "tls-private-key-file",
            "client-ca-file",
            "authorization-policy-file",
            "kubeconfig",
            "bootstrap-kubeconfig",
            "node-labels",
            "register-with-taints",
            "pod-infra-container-image",
            "cloud-provider",
            "provider-id",
            "kube-reserved",
            "system-reserved",
            "kube-reserved-cgroup",
            "system-reserved-cgroup",
            "qos-reserved",
            "reserved-cpus",
        ];
        for (long, want) in &values {
            assert_eq!(
                shown_default(&help, long).as_deref(),
                Some(want.as_str()),
                "--{long}"
            );
        }
        for (long, want) in durations {
            let shown = shown_default(&help, long).unwrap_or_else(|| panic!("--{long}"));
            assert_eq!(parse_duration(&shown).unwrap(), want, "--{long}");
        }
        for long in derived {
            assert!(shown_default(&help, long).is_some(), "--{long}");
        }
        for long in unset {
            assert_eq!(shown_default(&help, long), None, "--{long}");
        }
        // A new flag must take a side above.
        let known: Vec<&str> = values
            .iter()
            .map(|(l, _)| *l)
            .chain(durations.iter().map(|(l, _)| *l))
            .chain(derived)
            .chain(unset)
            .collect();
        for arg in Flags::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if arg.is_hide_set() || matches!(long, "help" | "version") {
                continue;
            }
            assert!(known.contains(&long), "--{long}: no default checked");
        }
    }
}

/// `ferrolet check`'s own options.
#[derive(clap::Args, Clone, Debug, Default, PartialEq)]
pub struct CheckArgs {
    /// The CNI configuration directory the runtime loads its pod network from (ferrolet-cri's
    /// `cni_conf_dir`, containerd's `conf_dir`).
    #[arg(long, value_name = "DIR", default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: std::path::PathBuf,
}
