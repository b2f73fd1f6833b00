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
    about = "ferrolet: a Kubernetes node agent (kubelet) that drives pods through CRI",
    after_help = "Settings: the defaults shown (the Go kubelet's, but for the runtime endpoint and \
                  the root dir), overridden by the --config file, overridden by the flags given."
)]
pub struct Flags {
    /// Print `Kubernetes vX.Y.Z` and exit: the Kubernetes version whose kubelet ferrolet
    /// follows (its API level and behaviour, what the node reports as its kubelet version;
    /// kubeadm reads it). `--version=raw` prints it as Go's version.Info.
    #[arg(long, value_name = "BOOL|raw", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub version: Option<String>,
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
    /// Where the kubelet keeps pod dirs and volumes [default: /var/lib/kubelet].
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
    /// How long a device plugin that went away keeps its resource in the node's capacity
    /// before it shows 0 (ferrolet's own; Go's fixed 5 minutes) [default: 5m0s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub device_plugin_stop_grace_period: Option<Duration>,
    /// The Go kubelet's other flags ([`GO_FLAGS`]).
    #[command(flatten)]
    pub go: GoFlags,
    /// A command other than running the kubelet.
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Flags {
    /// What `--version` prints, if it was given (Go's verflag: `--version`, `--version=true`
    /// or `--version=raw`; `--version=false` is as if not given).
    pub fn version_line(&self) -> Option<String> {
        let version = crate::node_status::KUBELET_VERSION;
        match self.version.as_deref()? {
            "raw" => {
                let (major, minor) = version
                    .trim_start_matches('v')
                    .split_once('.')
                    .map(|(major, rest)| (major, rest.split('.').next().unwrap_or("")))
                    .unwrap_or(("", ""));
                Some(format!(
                    "version.Info{{Major:\"{major}\", Minor:\"{minor}\", GitVersion:\"{version}\"}}"
                ))
            }
            "false" | "0" | "f" | "F" | "FALSE" | "False" => None,
            _ => Some(format!("Kubernetes {version}")),
        }
    }
}

/// How a Go kubelet flag's value is read (pflag's value types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoFlagKind {
    /// `--name`, `--name=true|false` (the value only with `=`).
    Bool,
    /// An integer.
    Int,
    /// A string.
    Str,
    /// A Go duration.
    Duration,
    /// Comma-separated strings, repeatable.
    List,
    /// `k=v[,k=v...]`, repeatable.
    Map,
    /// `k<v[,k<v...]` (the eviction thresholds), repeatable.
    LangleMap,
    /// One `k=v` each time, repeatable.
    MapNoSplit,
    /// `Gate=true[,Gate=false...]`, merged with the file's gates.
    Gates,
}

/// A flag of the Go kubelet (1.28-1.32) that ferrolet has no flag of its own for.
#[derive(Clone, Copy, Debug)]
pub struct GoFlag {
    /// Its name, without `--`.
    pub name: &'static str,
    /// How its value is read.
    pub kind: GoFlagKind,
    /// The KubeletConfiguration field it sets (dotted), if any.
    pub field: Option<&'static str>,
    /// Whether ferrolet acts on it (through its field); the others are named in the
    /// "not implemented" warning.
    pub implemented: bool,
}

const fn go(
    name: &'static str,
    kind: GoFlagKind,
    field: Option<&'static str>,
    implemented: bool,
) -> GoFlag {
    GoFlag {
        name,
        kind,
        field,
        implemented,
    }
}

use GoFlagKind as K;

/// The Go kubelet's flags (cmd/kubelet/app/options, 1.28-1.32, deprecated ones included, and
/// the cadvisor, credential provider and logging flags it registers) other than those
/// [`Flags`] has. They are accepted so that a command line written for the Go kubelet (a
/// kubeadm drop-in, a distribution's unit) starts ferrolet; a flag that is a
/// KubeletConfiguration field sets that field, and one ferrolet does not act on is named
/// in the start-up warning. They are clap arguments of their own (rather than words taken
/// out of the command line before clap sees it) so that `Flags::parse` and
/// `Flags::try_parse_from` take them in all of Go's forms (`--name=value`, `--name value`,
/// `--name` and `--name=false` for booleans) with no second parser; ferrolet's help shows
/// the implemented ones and hides the rest.
pub const GO_FLAGS: &[GoFlag] = &[
    // KubeletConfiguration fields ferrolet acts on.
    go(
        "authentication-token-webhook-cache-ttl",
        K::Duration,
        Some("authentication.webhook.cacheTTL"),
        true,
    ),
    go(
        "authorization-webhook-cache-authorized-ttl",
        K::Duration,
        Some("authorization.webhook.cacheAuthorizedTTL"),
        true,
    ),
    go(
        "authorization-webhook-cache-unauthorized-ttl",
        K::Duration,
        Some("authorization.webhook.cacheUnauthorizedTTL"),
        true,
    ),
    go(
        "container-log-max-files",
        K::Int,
        Some("containerLogMaxFiles"),
        true,
    ),
    go(
        "container-log-max-size",
        K::Str,
        Some("containerLogMaxSize"),
        true,
    ),
    go("enable-server", K::Bool, Some("enableServer"), true),
    go("eviction-hard", K::LangleMap, Some("evictionHard"), true),
    go("eviction-soft", K::LangleMap, Some("evictionSoft"), true),
    go(
        "eviction-soft-grace-period",
        K::Map,
        Some("evictionSoftGracePeriod"),
        true,
    ),
    go(
        "eviction-minimum-reclaim",
        K::Map,
        Some("evictionMinimumReclaim"),
        true,
    ),
    go(
        "eviction-pressure-transition-period",
        K::Duration,
        Some("evictionPressureTransitionPeriod"),
        true,
    ),
    go(
        "eviction-max-pod-grace-period",
        K::Int,
        Some("evictionMaxPodGracePeriod"),
        true,
    ),
    go("feature-gates", K::Gates, Some("featureGates"), true),
    go("logging-format", K::Str, Some("logging.format"), true),
    go(
        "serialize-image-pulls",
        K::Bool,
        Some("serializeImagePulls"),
        true,
    ),
    // KubeletConfiguration fields ferrolet does not act on.
    go(
        "allowed-unsafe-sysctls",
        K::List,
        Some("allowedUnsafeSysctls"),
        false,
    ),
    go(
        "contention-profiling",
        K::Bool,
        Some("enableContentionProfiling"),
        false,
    ),
    go(
        "cpu-manager-policy-options",
        K::MapNoSplit,
        Some("cpuManagerPolicyOptions"),
        false,
    ),
    go(
        "enable-controller-attach-detach",
        K::Bool,
        Some("enableControllerAttachDetach"),
        false,
    ),
    go(
        "enable-debugging-handlers",
        K::Bool,
        Some("enableDebuggingHandlers"),
        false,
    ),
    go("event-burst", K::Int, Some("eventBurst"), false),
    go("event-qps", K::Int, Some("eventRecordQPS"), false),
    go("fail-swap-on", K::Bool, Some("failSwapOn"), true),
    go("hairpin-mode", K::Str, Some("hairpinMode"), false),
    go("iptables-drop-bit", K::Int, Some("iptablesDropBit"), false),
    go(
        "iptables-masquerade-bit",
        K::Int,
        Some("iptablesMasqueradeBit"),
        false,
    ),
    go(
        "kernel-memcg-notification",
        K::Bool,
        Some("kernelMemcgNotification"),
        false,
    ),
    go("kube-api-burst", K::Int, Some("kubeAPIBurst"), false),
    go("kube-api-content-type", K::Str, Some("contentType"), false),
    go("kube-api-qps", K::Int, Some("kubeAPIQPS"), false),
    go("kubelet-cgroups", K::Str, Some("kubeletCgroups"), false),
    go(
        "local-storage-capacity-isolation",
        K::Bool,
        Some("localStorageCapacityIsolation"),
        false,
    ),
    go(
        "log-flush-frequency",
        K::Duration,
        Some("logging.flushFrequency"),
        false,
    ),
    go(
        "log-json-info-buffer-size",
        K::Str,
        Some("logging.options.json.infoBufferSize"),
        false,
    ),
    go(
        "log-json-split-stream",
        K::Bool,
        Some("logging.options.json.splitStream"),
        false,
    ),
    go(
        "log-text-info-buffer-size",
        K::Str,
        Some("logging.options.text.infoBufferSize"),
        false,
    ),
    go(
        "log-text-split-stream",
        K::Bool,
        Some("logging.options.text.splitStream"),
        false,
    ),
    go(
        "make-iptables-util-chains",
        K::Bool,
        Some("makeIPTablesUtilChains"),
        false,
    ),
    go("max-open-files", K::Int, Some("maxOpenFiles"), false),
    go(
        "memory-manager-policy",
        K::Str,
        Some("memoryManagerPolicy"),
        false,
    ),
    go("oom-score-adj", K::Int, Some("oomScoreAdj"), false),
    go("pod-cidr", K::Str, Some("podCIDR"), false),
    go("pods-per-core", K::Int, Some("podsPerCore"), false),
    go(
        "protect-kernel-defaults",
        K::Bool,
        Some("protectKernelDefaults"),
        false,
    ),
    go("registry-burst", K::Int, Some("registryBurst"), false),
    go("registry-qps", K::Int, Some("registryPullQPS"), false),
    go("runonce", K::Bool, Some("runOnce"), false),
    go("seccomp-default", K::Bool, Some("seccompDefault"), false),
    go(
        "streaming-connection-idle-timeout",
        K::Duration,
        Some("streamingConnectionIdleTimeout"),
        false,
    ),
    go("system-cgroups", K::Str, Some("systemCgroups"), false),
    go("tls-cipher-suites", K::List, Some("tlsCipherSuites"), false),
    go("tls-min-version", K::Str, Some("tlsMinVersion"), false),
    go(
        "topology-manager-policy",
        K::Str,
        Some("topologyManagerPolicy"),
        false,
    ),
    go(
        "topology-manager-policy-options",
        K::MapNoSplit,
        Some("topologyManagerPolicyOptions"),
        false,
    ),
    go(
        "topology-manager-scope",
        K::Str,
        Some("topologyManagerScope"),
        false,
    ),
    go(
        "volume-stats-agg-period",
        K::Duration,
        Some("volumeStatsAggPeriod"),
        false,
    ),
    // Flags that are not fields, ferrolet does not act on them.
    go("azure-container-registry-config", K::Str, None, false),
    go("cloud-config", K::Str, None, false),
    go("config-dir", K::Str, None, false),
    go("exit-on-lock-contention", K::Bool, None, false),
    go(
        "experimental-allocatable-ignore-eviction",
        K::Bool,
        None,
        false,
    ),
    go("experimental-mounter-path", K::Str, None, false),
    go("image-credential-provider-bin-dir", K::Str, None, false),
    go("image-credential-provider-config", K::Str, None, false),
    go("keep-terminated-pod-volumes", K::Bool, None, false),
    go("lock-file", K::Str, None, false),
    go("register-schedulable", K::Bool, None, false),
    go("reserved-memory", K::Str, None, false),
    go("runtime-cgroups", K::Str, None, false),
    go("vmodule", K::Str, None, false),
    // cadvisor's, registered by the Go kubelet (deprecated).
    go("application-metrics-count-limit", K::Int, None, false),
    go("boot-id-file", K::Str, None, false),
    go("container-hints", K::Str, None, false),
    go("containerd", K::Str, None, false),
    go("containerd-namespace", K::Str, None, false),
    go("enable-load-reader", K::Bool, None, false),
    go("event-storage-age-limit", K::Str, None, false),
    go("event-storage-event-limit", K::Str, None, false),
    go("global-housekeeping-interval", K::Duration, None, false),
    go("housekeeping-interval", K::Duration, None, false),
    go("log-cadvisor-usage", K::Bool, None, false),
    go("machine-id-file", K::Str, None, false),
    go("storage-driver-buffer-duration", K::Duration, None, false),
    go("storage-driver-db", K::Str, None, false),
    go("storage-driver-host", K::Str, None, false),
    go("storage-driver-password", K::Str, None, false),
    go("storage-driver-secure", K::Bool, None, false),
    go("storage-driver-table", K::Str, None, false),
    go("storage-driver-user", K::Str, None, false),
];

/// Help heading of the Go kubelet's flags ferrolet acts on through their fields.
pub const GO_FIELD_FLAGS_HEADING: &str = "KubeletConfiguration fields (the Go kubelet's flags)";

/// The [`GO_FLAGS`] given: name and value, in command-line order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GoFlags {
    /// (name, value) as given; a bare boolean is `true`.
    pub given: Vec<(String, String)>,
}

impl clap::FromArgMatches for GoFlags {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = Self::default();
        flags.update_from_arg_matches(m)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        let mut given = Vec::new();
        for flag in GO_FLAGS {
            let (Ok(Some(values)), Some(indices)) =
                (m.try_get_many::<String>(flag.name), m.indices_of(flag.name))
            else {
                continue;
            };
            given.extend(indices.zip(values).map(|(i, v)| (i, flag.name, v.clone())));
        }
        given.sort_by_key(|(i, ..)| *i);
        self.given = given
            .into_iter()
            .map(|(_, name, value)| (name.to_string(), value))
            .collect();
        Ok(())
    }
}

impl clap::Args for GoFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        GO_FLAGS.iter().fold(cmd, |cmd, flag| {
            let arg = clap::Arg::new(flag.name)
                .long(flag.name)
                .action(clap::ArgAction::Append);
            let arg = match flag.kind {
                GoFlagKind::Bool => arg
                    .value_name("BOOL")
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true"),
                _ => arg
                    .value_name("VALUE")
                    .num_args(1)
                    .allow_hyphen_values(true),
            };
            let arg = match (flag.implemented, flag.field) {
                (true, Some(field)) => arg
                    .help(format!("Sets {field} (see the KubeletConfiguration)"))
                    .help_heading(GO_FIELD_FLAGS_HEADING),
                _ => arg.hide(true),
            };
            cmd.arg(arg)
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
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
            (
                "device-plugin-stop-grace-period",
                d.device_plugin_stop_grace_period,
            ),
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
            if arg.is_hide_set()
                || matches!(long, "help" | "version")
                || arg.get_help_heading() == Some(GO_FIELD_FLAGS_HEADING)
            {
                continue;
            }
            assert!(known.contains(&long), "--{long}: no default checked");
        }
    }

    /// What systemd hands the kubelet of `KEY="value"` from an EnvironmentFile, expanded
    /// unbraced (`$KEY`) in ExecStart: the value, split at whitespace.
    fn systemd_words(line: &str) -> Vec<String> {
        let (_, value) = line.split_once('=').unwrap();
        let value = value.trim().trim_matches('"');
        value.split_whitespace().map(String::from).collect()
    }

    /// kubeadm's drop-in: `kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS
    /// $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS`.
    fn kubeadm_command_line(kubeadm_flags_env: &str) -> Vec<String> {
        let drop_in = [
            "KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf",
            "KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml",
        ];
        let mut words = vec!["kubelet".to_string()];
        for line in drop_in
            .into_iter()
            .chain([kubeadm_flags_env, "KUBELET_EXTRA_ARGS="])
        {
            words.extend(systemd_words(line));
        }
        words
    }

    #[test]
    fn kubeadm_s_command_line() {
        let words = kubeadm_command_line(
            r#"KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9""#,
        );
        assert_eq!(words.len(), 6, "{words:?}");
        let f = Flags::try_parse_from(&words).unwrap();
        assert_eq!(
            f.bootstrap_kubeconfig,
            Some("/etc/kubernetes/bootstrap-kubelet.conf".into())
        );
        assert_eq!(f.kubeconfig, Some("/etc/kubernetes/kubelet.conf".into()));
        assert_eq!(f.config, Some("/var/lib/kubelet/config.yaml".into()));
        assert_eq!(
            f.container_runtime_endpoint.as_deref(),
            Some("unix:///var/run/containerd/containerd.sock")
        );
        assert_eq!(
            f.pod_infra_container_image.as_deref(),
            Some("registry.k8s.io/pause:3.9")
        );
        assert!(f.go.given.is_empty());

        // What kubeadm may add to kubeadm-flags.env (node registration options, a cloud
        // provider, systemd-resolved's file, a verbosity).
        let words = kubeadm_command_line(
            r#"KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --hostname-override=node-1 --node-ip=10.0.0.5 --node-labels=tier=a,zone=b --register-with-taints=dedicated=x:NoSchedule --cloud-provider=external --resolv-conf=/run/systemd/resolve/resolv.conf --v=2 --pod-infra-container-image=registry.k8s.io/pause:3.10""#,
        );
        let f = Flags::try_parse_from(&words).unwrap();
        assert_eq!(f.hostname_override.as_deref(), Some("node-1"));
        assert_eq!(f.node_ip.as_deref(), Some("10.0.0.5"));
        assert_eq!(f.node_labels, ["tier=a,zone=b"]);
        assert_eq!(
            f.register_with_taints.as_deref(),
            Some("dedicated=x:NoSchedule")
        );
        assert_eq!(f.cloud_provider.as_deref(), Some("external"));
        assert_eq!(
            f.resolv_conf,
            Some("/run/systemd/resolve/resolv.conf".into())
        );
        assert_eq!(f.v, Some(2));
    }

    /// Every flag of the Go kubelet 1.28 (cmd/kubelet/app/options and the global flags it
    /// registers on Linux), and those 1.29-1.32 added.
    const GO_KUBELET_FLAGS: &[&str] = &[
        "address",
        "allowed-unsafe-sysctls",
        "anonymous-auth",
        "authentication-token-webhook",
        "authentication-token-webhook-cache-ttl",
        "authorization-mode",
        "authorization-webhook-cache-authorized-ttl",
        "authorization-webhook-cache-unauthorized-ttl",
        "bootstrap-kubeconfig",
        "cert-dir",
        "cgroup-driver",
        "cgroup-root",
        "cgroups-per-qos",
        "client-ca-file",
        "cloud-config",
        "cloud-provider",
        "cluster-dns",
        "cluster-domain",
        "config",
        "config-dir",
        "container-log-max-files",
        "container-log-max-size",
        "container-runtime-endpoint",
        "contention-profiling",
        "cpu-cfs-quota",
        "cpu-cfs-quota-period",
        "cpu-manager-policy",
        "cpu-manager-policy-options",
        "cpu-manager-reconcile-period",
        "enable-controller-attach-detach",
        "enable-debugging-handlers",
        "enable-server",
        "enforce-node-allocatable",
        "event-burst",
        "event-qps",
        "eviction-hard",
        "eviction-max-pod-grace-period",
        "eviction-minimum-reclaim",
        "eviction-pressure-transition-period",
        "eviction-soft",
        "eviction-soft-grace-period",
        "exit-on-lock-contention",
        "experimental-allocatable-ignore-eviction",
        "experimental-mounter-path",
        "fail-swap-on",
        "feature-gates",
        "file-check-frequency",
        "hairpin-mode",
        "healthz-bind-address",
        "healthz-port",
        "hostname-override",
        "http-check-frequency",
        "image-credential-provider-bin-dir",
        "image-credential-provider-config",
        "image-gc-high-threshold",
        "image-gc-low-threshold",
        "image-service-endpoint",
        "iptables-drop-bit",
        "iptables-masquerade-bit",
        "keep-terminated-pod-volumes",
        "kernel-memcg-notification",
        "kube-api-burst",
        "kube-api-content-type",
        "kube-api-qps",
        "kube-reserved",
        "kube-reserved-cgroup",
        "kubeconfig",
        "kubelet-cgroups",
        "local-storage-capacity-isolation",
        "lock-file",
        "make-iptables-util-chains",
        "manifest-url",
        "manifest-url-header",
        "max-open-files",
        "max-pods",
        "maximum-dead-containers",
        "maximum-dead-containers-per-container",
        "memory-manager-policy",
        "minimum-container-ttl-duration",
        "minimum-image-ttl-duration",
        "node-ip",
        "node-labels",
        "node-status-max-images",
        "node-status-update-frequency",
        "oom-score-adj",
        "pod-cidr",
        "pod-infra-container-image",
        "pod-manifest-path",
        "pod-max-pids",
        "pods-per-core",
        "port",
        "protect-kernel-defaults",
        "provider-id",
        "qos-reserved",
        "read-only-port",
        "register-node",
        "register-schedulable",
        "register-with-taints",
        "registry-burst",
        "registry-qps",
        "reserved-cpus",
        "reserved-memory",
        "resolv-conf",
        "root-dir",
        "rotate-certificates",
        "rotate-server-certificates",
        "runonce",
        "runtime-cgroups",
        "runtime-request-timeout",
        "seccomp-default",
        "serialize-image-pulls",
        "streaming-connection-idle-timeout",
        "sync-frequency",
        "system-cgroups",
        "system-reserved",
        "system-reserved-cgroup",
        "tls-cert-file",
        "tls-cipher-suites",
        "tls-min-version",
        "tls-private-key-file",
        "topology-manager-policy",
        "topology-manager-policy-options",
        "topology-manager-scope",
        "volume-plugin-dir",
        "volume-stats-agg-period",
        // Logging (component-base), including 1.30's text-stream options.
        "logging-format",
        "log-flush-frequency",
        "v",
        "vmodule",
        "log-json-split-stream",
        "log-json-info-buffer-size",
        "log-text-split-stream",
        "log-text-info-buffer-size",
        // cadvisor's and the legacy credential provider's.
        "housekeeping-interval",
        "application-metrics-count-limit",
        "boot-id-file",
        "container-hints",
        "containerd",
        "enable-load-reader",
        "event-storage-age-limit",
        "event-storage-event-limit",
        "global-housekeeping-interval",
        "log-cadvisor-usage",
        "machine-id-file",
        "storage-driver-user",
        "storage-driver-password",
        "storage-driver-host",
        "storage-driver-db",
        "storage-driver-table",
        "storage-driver-secure",
        "storage-driver-buffer-duration",
        "containerd-namespace",
        "azure-container-registry-config",
        "version",
    ];

    #[test]
    fn every_go_kubelet_flag_is_accepted_in_go_s_forms() {
        use clap::CommandFactory;
        Flags::command().debug_assert();
        let cmd = Flags::command();
        for name in GO_KUBELET_FLAGS {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_long() == Some(name))
                .unwrap_or_else(|| panic!("--{name} is not accepted"));
            // Booleans as `--name` and `--name=false`; values as `--name=v` and `--name v`.
            let takes_value = !matches!(arg.get_num_args(), Some(r) if r.min_values() == 0);
            let forms: Vec<Vec<String>> = if takes_value {
                let value = if *name == "v" { "3" } else { "1" };
                vec![
                    vec![format!("--{name}={value}")],
                    vec![format!("--{name}"), value.to_string()],
                ]
            } else {
                vec![vec![format!("--{name}")], vec![format!("--{name}=false")]]
            };
            for form in forms {
                let args = std::iter::once("ferrolet".to_string()).chain(form.clone());
                // Known, whatever the value: a value ferrolet's own flag refuses (`1` is no
                // IP address) is a clap value error, not an unknown argument.
                if let Err(e) = Flags::try_parse_from(args) {
                    use clap::error::ErrorKind;
                    assert!(
                        matches!(
                            e.kind(),
                            ErrorKind::ValueValidation | ErrorKind::InvalidValue
                        ),
                        "{form:?}: {e}"
                    );
                }
            }
        }
        // A value may start with a dash, as pflag takes the next word whatever it is.
        let f = Flags::try_parse_from(["ferrolet", "--oom-score-adj", "-999"]).unwrap();
        assert_eq!(
            f.go.given,
            [("oom-score-adj".to_string(), "-999".to_string())]
        );
    }

    #[test]
    fn version_is_the_kubernetes_version_ferrolet_follows() {
        let line = |args: &[&str]| {
            let all = std::iter::once("ferrolet").chain(args.iter().copied());
            Flags::try_parse_from(all).unwrap().version_line()
        };
        let printed = line(&["--version"]).unwrap();
        assert_eq!(
            printed,
            format!("Kubernetes {}", crate::node_status::KUBELET_VERSION)
        );
        assert_eq!(printed, "Kubernetes v1.32.0");
        // kubeadm's check: `^\s*Kubernetes v(\d+\.\d+\.\d+[-0-9a-zA-Z_\.+]*)\s*$` on the
        // whole trimmed output, one line.
        let version = printed.trim().strip_prefix("Kubernetes v").unwrap();
        assert!(!printed.contains('\n'));
        let mut parts = version.splitn(3, '.');
        for _ in 0..2 {
            let n = parts.next().unwrap();
            assert!(
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()),
                "{printed}"
            );
        }
        let rest = parts.next().unwrap();
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        assert!(digits > 0, "{printed}");
        assert!(
            rest[digits..]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.+".contains(&b)),
            "{printed}"
        );
        assert_eq!(line(&["--version=true"]), line(&["--version"]));
        assert_eq!(line(&["--version=false"]), None);
        assert_eq!(line(&[]), None);
        assert!(
            line(&["--version=raw"])
                .unwrap()
                .contains("GitVersion:\"v1.32.0\"")
        );
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
