//! ferrolet-cri's configuration: a TOML file (`--config`) whose every field a flag can override.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The built-in sandbox (pause) image's name; `ferrolet-cri` imports it at start-up.
pub const BUILTIN_PAUSE_IMAGE: &str = concat!("ferrolet.local/pause:", env!("CARGO_PKG_VERSION"));

/// [`DEFAULT_RUNTIME_TYPE`] as a literal, for `concat!` (the `--runtime-type` help).
macro_rules! default_runtime_type {
    () => {
        "io.containerd.ferrolet.v1"
    };
}
pub(crate) use default_runtime_type;

/// The runtime (shim) type of the default handler when the config names none: Ferrolet's own
/// shim, found by containerd as `containerd-shim-ferrolet-v1` on its PATH. containerd's runc
/// shim (`io.containerd.runc.v2`) is one config line away.
pub const DEFAULT_RUNTIME_TYPE: &str = default_runtime_type!();

/// Ferrolet's own shim (`containerd-shim-ferrolet-v1`, installed beside ferrolet-cri).
pub const FERROLET_SHIM: &str = "io.containerd.ferrolet.v1";

/// containerd's (and the Go streaming server's) default streaming idle timeout.
const DEFAULT_STREAM_IDLE_TIMEOUT: &str = "4h0m0s";

/// Everything ferrolet-cri can be told.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "snake_case")]
pub struct Config {
    /// CRI endpoint to serve, `unix:///path`.
    pub listen: String,
    /// Mode of the CRI socket, as octal text ("0660").
    pub socket_mode: String,
    /// containerd's socket.
    pub containerd: String,
    /// containerd namespace holding everything CRI makes.
    pub namespace: String,
    /// Directory for ferrolet-cri's own persistent state (sandbox files, container status).
    pub root: PathBuf,
    /// Directory for runtime state that dies with the node (FIFOs, shm mounts).
    pub state: PathBuf,
    /// Where pod network namespaces are pinned.
    pub netns_dir: PathBuf,
    /// CNI network configurations; the first valid one (by file name) is the pod network.
    pub cni_conf_dir: PathBuf,
    /// Directories searched for CNI plugins.
    pub cni_bin_dirs: Vec<PathBuf>,
    /// CNI result cache (DEL after a restart relies on it).
    pub cni_cache_dir: PathBuf,
    /// The containerd runtime (shim) type of the default handler ("" and "runc") and of
    /// every handler that names none, as containerd's CRI plugin's
    /// `runtimes.<name>.runtime_type`: `io.containerd.<name>.<version>` (containerd runs
    /// `containerd-shim-<name>-<version>` from its PATH) or a shim binary's absolute path.
    pub runtime_type: String,
    /// Runtime handlers accepted besides the default ("" and "runc" are always accepted),
    /// run like the default.
    pub runtime_handlers: Vec<String>,
    /// Runtime handlers with a shim or OCI runtime binary of their own
    /// (`[runtimes.crun] binary_name = "/usr/bin/crun"`, `[runtimes.go]
    /// runtime_type = "io.containerd.runc.v2"`), as containerd's CRI plugin's
    /// `runtimes.<name>.runtime_type` and `runtimes.<name>.options.BinaryName`.
    pub runtimes: std::collections::BTreeMap<String, RuntimeHandlerConfig>,
    /// Snapshotter images are unpacked into.
    pub snapshotter: String,
    /// Image a pod sandbox's pause process runs; the built-in one needs no registry.
    pub sandbox_image: String,
    /// Run a pod sandbox without a pause process when nothing needs one: the pod shares no
    /// PID namespace, sets no sysctls and uses the default runtime handler. Its IPC and UTS
    /// namespaces are then pinned on files, as CRI-O's `drop_infra_ctr` does; the pod starts
    /// without a `runc create` + `start` of its own. `false`: every sandbox has a pause
    /// process, as with containerd.
    pub drop_infra_container: bool,
    /// runc manages container cgroups through systemd (containerd's `SystemdCgroup` runc
    /// option): a pod whose cgroup parent is a slice gets `<slice>:ferrolet-cri:<id>` scopes,
    /// and RuntimeConfig reports the systemd driver, as the kubelet's must then be.
    pub systemd_cgroup: bool,
    /// Layers downloaded at once per pull.
    pub max_concurrent_downloads: usize,
    /// Seconds between pull progress lines in the log.
    pub pull_progress_interval_secs: u64,
    /// How long in-flight calls may take to finish after SIGTERM.
    pub shutdown_timeout_secs: u64,
    /// Exec, attach and port-forward sessions admitted at once (their URLs waiting to be
    /// used, and the sessions running); past it a request is refused at once
    /// (RESOURCE_EXHAUSTED) instead of queueing behind the others until its client gives up.
    pub max_streaming_sessions: usize,
    /// Seconds between sweeps for what no sandbox or container owns any more (left by a
    /// crash, or by a teardown step that failed); a failed teardown asks for one at once.
    pub sweep_interval_secs: u64,
    /// Accept any `:authority` a gRPC client sends (the socket path, percent-encoded or empty,
    /// as grpc-go ≤ 1.58, grpc-java and grpcio do). Off only to measure what that costs: then
    /// such clients are refused.
    pub accept_any_authority: bool,
    /// Log filter (`info`, `debug`, `ferrolet_cri=trace,...`).
    pub log_level: String,
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// Registry hosts: mirrors, TLS and default credentials.
    pub registry: RegistryConfig,
    /// Address the streaming server (exec, attach, port-forward URLs) listens on.
    pub stream_server_address: String,
    /// Its port, as text as in containerd; "0" picks a free one.
    pub stream_server_port: String,
    /// A streaming connection with no traffic either way for this long is closed (a Go
    /// duration, as containerd's; "0" never closes one, "" is the 4 h default).
    pub stream_idle_timeout: String,
    /// Serve the streaming URLs over HTTPS with `x509_key_pair_streaming`.
    pub enable_tls_streaming: bool,
    /// The streaming server's certificate and key (PEM), read when TLS streaming is on.
    pub x509_key_pair_streaming: X509KeyPairStreaming,
    /// Give containers the CDI devices they ask for (`cdi_devices`, `cdi.k8s.io/*`
    /// annotations), as containerd 2.x does by default; off, such requests are ignored.
    pub enable_cdi: bool,
    /// Where CDI spec files are, lowest priority first: a device defined in a later directory
    /// wins over one in an earlier.
    pub cdi_spec_dirs: Vec<PathBuf>,
}

/// The streaming server's certificate and key, named as containerd names them.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct X509KeyPairStreaming {
    /// The certificate chain, PEM.
    pub tls_cert_file: PathBuf,
    /// Its private key, PEM.
    pub tls_key_file: PathBuf,
}

/// One runtime handler of [`Config::runtimes`]: it names at least one of the two.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeHandlerConfig {
    /// The OCI runtime binary the shim runs instead of `runc` (a path, or a name on its PATH).
    pub binary_name: String,
    /// The containerd runtime (shim) type; empty: [`Config::runtime_type`].
    pub runtime_type: String,
}

/// Registry configuration, per host (`[registry.hosts."docker.io"]`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryConfig {
    /// Per-host settings keyed by registry host (`docker.io`, `127.0.0.1:5000`).
    pub hosts: crate::registry::HostsConfig,
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for machines.
    Json,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "unix:///run/ferrolet/cri.sock".into(),
            socket_mode: "0660".into(),
            containerd: "/run/containerd/containerd.sock".into(),
            namespace: "k8s.io".into(),
            root: "/var/lib/ferrolet/cri".into(),
            state: "/run/ferrolet/cri".into(),
            netns_dir: "/var/run/netns".into(),
            cni_conf_dir: "/etc/cni/net.d".into(),
            cni_bin_dirs: vec!["/opt/cni/bin".into(), "/usr/lib/cni".into()],
            cni_cache_dir: "/var/lib/cni".into(),
            runtime_type: DEFAULT_RUNTIME_TYPE.into(),
            runtime_handlers: Vec::new(),
            runtimes: Default::default(),
            snapshotter: "overlayfs".into(),
            sandbox_image: BUILTIN_PAUSE_IMAGE.into(),
            drop_infra_container: true,
            systemd_cgroup: false,
            max_concurrent_downloads: 3,
            pull_progress_interval_secs: 5,
            shutdown_timeout_secs: 10,
            sweep_interval_secs: 60,
            max_streaming_sessions: 128,
            accept_any_authority: true,
            log_level: "info".into(),
            log_format: LogFormat::Text,
            registry: RegistryConfig::default(),
            stream_server_address: "127.0.0.1".into(),
            stream_server_port: "0".into(),
            stream_idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT.into(),
            enable_tls_streaming: false,
            x509_key_pair_streaming: X509KeyPairStreaming::default(),
            enable_cdi: true,
            cdi_spec_dirs: vec!["/etc/cdi".into(), "/var/run/cdi".into()],
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("parsing config {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    /// A field has a value we refuse.
    #[error("config field {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

impl Config {
    /// Reads a config file; fields it omits keep their defaults.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source: Box::new(source),
        })
    }

    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// The socket mode as a number.
    pub fn socket_mode(&self) -> Result<u32, ConfigError> {
        let digits = self.socket_mode.trim_start_matches("0o");
        match u32::from_str_radix(digits, 8) {
            Ok(mode) if mode <= 0o777 => Ok(mode),
            _ => Err(ConfigError::Invalid {
                field: "socket_mode",
                reason: format!("{:?} is not an octal file mode", self.socket_mode),
            }),
        }
    }

    /// The streaming server's socket address.
    pub fn stream_server_addr(&self) -> Result<std::net::SocketAddr, ConfigError> {
        let port: u16 = self
            .stream_server_port
            .parse()
            .map_err(|_| ConfigError::Invalid {
                field: "stream_server_port",
                reason: format!("{:?} is not a port number", self.stream_server_port),
            })?;
        // An IPv6 address may come with or without brackets.
        let host = self
            .stream_server_address
            .trim_start_matches('[')
            .trim_end_matches(']');
        let ip: std::net::IpAddr = host.parse().map_err(|_| ConfigError::Invalid {
            field: "stream_server_address",
            reason: format!("{:?} is not an IP address", self.stream_server_address),
        })?;
        Ok(std::net::SocketAddr::new(ip, port))
    }

    /// The streaming idle timeout; `None` when it is off ("0").
    pub fn stream_idle_timeout(&self) -> Result<Option<Duration>, ConfigError> {
        let text = match self.stream_idle_timeout.trim() {
            "" => DEFAULT_STREAM_IDLE_TIMEOUT,
            t => t,
        };
        let d = ferrolet_proto::go_duration::parse_duration(text).map_err(|e| {
            ConfigError::Invalid {
                field: "stream_idle_timeout",
                reason: e.to_string(),
            }
        })?;
        Ok((!d.is_zero()).then_some(d))
    }

    /// Checks values a type cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.socket_mode()?;
        self.stream_server_addr()?;
        self.stream_idle_timeout()?;
        let pair = &self.x509_key_pair_streaming;
        if self.enable_tls_streaming
            && (pair.tls_cert_file.as_os_str().is_empty()
                || pair.tls_key_file.as_os_str().is_empty())
        {
            return Err(ConfigError::Invalid {
                field: "x509_key_pair_streaming",
                reason: "enable_tls_streaming needs tls_cert_file and tls_key_file".into(),
            });
        }
        if let Err(why) = check_runtime_type(&self.runtime_type) {
            return Err(ConfigError::Invalid {
                field: "runtime_type",
                reason: why,
            });
        }
        for (name, handler) in &self.runtimes {
            if handler.binary_name.is_empty() && handler.runtime_type.is_empty() {
                return Err(ConfigError::Invalid {
                    field: "runtimes",
                    reason: format!(
                        "runtime handler {name:?} needs a binary_name or a runtime_type"
                    ),
                });
            }
            if !handler.runtime_type.is_empty()
                && let Err(why) = check_runtime_type(&handler.runtime_type)
            {
                return Err(ConfigError::Invalid {
                    field: "runtimes",
                    reason: format!("runtime handler {name:?}: {why}"),
                });
            }
        }
        if self.max_concurrent_downloads == 0 {
            return Err(ConfigError::Invalid {
                field: "max_concurrent_downloads",
                reason: "must be at least 1".into(),
            });
        }
        if self.max_streaming_sessions == 0 {
            return Err(ConfigError::Invalid {
                field: "max_streaming_sessions",
                reason: "must be at least 1".into(),
            });
        }
        if self.sweep_interval_secs == 0 {
            return Err(ConfigError::Invalid {
                field: "sweep_interval_secs",
                reason: "must be at least 1".into(),
            });
        }
        if self.namespace.is_empty() {
            return Err(ConfigError::Invalid {
                field: "namespace",
                reason: "must not be empty".into(),
            });
        }
        Ok(())
    }

    /// The runtime (shim) type of runtime handler `handler`: its own, else the default's.
    pub fn runtime_type_of(&self, handler: &str) -> &str {
        match self.runtimes.get(handler) {
            Some(h) if !h.runtime_type.is_empty() => &h.runtime_type,
            _ => &self.runtime_type,
        }
    }

    /// Grace period for in-flight calls at shutdown.
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs(self.shutdown_timeout_secs)
    }
}

/// Whether containerd can start a shim for `runtime_type`: `io.containerd.<name>.<version>`
/// (containerd derives the binary `containerd-shim-<name>-<version>` from the last two
/// parts) or an absolute path to a shim binary. The reason, when it cannot.
fn check_runtime_type(runtime_type: &str) -> Result<(), String> {
    if runtime_type.is_empty() {
        return Err(concat!(
            "must not be empty (the default is \"",
            default_runtime_type!(),
            "\")"
        )
        .into());
    }
    if runtime_type.starts_with('/') {
        return Ok(());
    }
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    match runtime_type
        .strip_prefix("io.containerd.")
        .and_then(|rest| rest.split_once('.'))
    {
        Some((name, version)) if part_ok(name) && part_ok(version) => Ok(()),
        _ => Err(format!(
            "{runtime_type:?} is neither io.containerd.<name>.<version> (containerd runs \
             containerd-shim-<name>-<version> from its PATH) nor a shim binary's absolute path"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = Config::default();
        assert_eq!(c.listen, "unix:///run/ferrolet/cri.sock");
        assert_eq!(c.socket_mode().unwrap(), 0o660);
        assert_eq!(c.namespace, "k8s.io");
        assert!(c.sandbox_image.starts_with("ferrolet.local/pause:"));
        assert_eq!(
            c.stream_server_addr().unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert!(!c.enable_tls_streaming);
        assert!(c.enable_cdi);
        assert_eq!(
            c.cdi_spec_dirs,
            [PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")]
        );
        assert_eq!(
            c.stream_idle_timeout().unwrap(),
            Some(Duration::from_secs(4 * 3600))
        );
    }

    #[test]
    fn the_idle_timeout_is_a_go_duration_and_zero_turns_it_off() {
        let t = |s: &str| {
            Config::parse(&format!("stream_idle_timeout = {s:?}"))
                .unwrap()
                .stream_idle_timeout()
        };
        assert_eq!(t("30m").unwrap(), Some(Duration::from_secs(1800)));
        assert_eq!(t("1h30m0s").unwrap(), Some(Duration::from_secs(5400)));
        assert_eq!(t("0").unwrap(), None);
        assert_eq!(t("").unwrap(), Some(Duration::from_secs(4 * 3600)));
        let err = t("4 hours").unwrap_err().to_string();
        assert!(err.contains("stream_idle_timeout"), "{err}");
    }

    #[test]
    fn a_runtime_handler_names_its_binary() {
        let c = Config::parse(
            "runtime_handlers = [\"alias\"]\n[runtimes.crun]\nbinary_name = \"/usr/bin/crun\"\n",
        )
        .unwrap();
        c.validate().unwrap();
        let opts = crate::runtime::RuntimeOptions::from_config(&c);
        let crun = &opts.runtime_handlers["crun"];
        assert_eq!(crun.binary_name.as_deref(), Some("/usr/bin/crun"));
        assert_eq!(crun.runtime_type, DEFAULT_RUNTIME_TYPE);
        assert_eq!(opts.runtime_handlers["alias"].binary_name, None);
        // runc under its own name, the default cgroup driver: no options at all.
        assert_eq!(opts.runc_options("alias"), None);
        assert!(opts.runc_options("crun").is_some());
        let err = Config::parse("[runtimes.crun]\n")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"crun\"") && err.contains("binary_name or a runtime_type"),
            "{err}"
        );
        assert!(Config::parse("[runtimes.crun]\nbinary = \"x\"\n").is_err());
    }

    #[test]
    fn runtime_types_default_per_handler_as_containerd_s() {
        let c = Config::default();
        assert_eq!(c.runtime_type, DEFAULT_RUNTIME_TYPE);
        let c = Config::parse(&format!(
            "runtime_type = {FERROLET_SHIM:?}\nruntime_handlers = [\"alias\"]\n\
             [runtimes.go]\nruntime_type = \"io.containerd.runc.v2\"\n\
             [runtimes.crun]\nbinary_name = \"/usr/bin/crun\"\n\
             [runtimes.own]\nruntime_type = \"/opt/shims/containerd-shim-own-v1\"\n",
        ))
        .unwrap();
        c.validate().unwrap();
        let opts = crate::runtime::RuntimeOptions::from_config(&c);
        // The default handlers and those naming no type of their own take the top-level one.
        for (handler, want) in [
            ("", FERROLET_SHIM),
            ("runc", FERROLET_SHIM),
            ("alias", FERROLET_SHIM),
            ("crun", FERROLET_SHIM),
            ("go", "io.containerd.runc.v2"),
            ("own", "/opt/shims/containerd-shim-own-v1"),
        ] {
            assert_eq!(opts.runtime_type(handler), want, "handler {handler:?}");
        }
        // Only a runtime type: runc under the Go shim, no options.
        assert_eq!(opts.runtime_handlers["go"].binary_name, None);
        assert_eq!(opts.runc_options("go"), None);
    }

    #[test]
    fn a_runtime_type_containerd_cannot_start_is_refused_naming_the_handler() {
        for bad in [
            "",
            "runc",
            "io.containerd.runc",
            "io.containerd..v2",
            "containerd-shim-runc-v2",
            "io.containerd.runc.v2 ",
        ] {
            let err = Config::parse(&format!(
                "[runtimes.fast]\nruntime_type = {bad:?}\nbinary_name = \"crun\"\n"
            ))
            .unwrap()
            .validate();
            if bad.is_empty() {
                // Empty is "not set": the default's.
                err.unwrap();
                continue;
            }
            let err = err.unwrap_err().to_string();
            assert!(
                err.contains("runtime handler \"fast\"") && err.contains(&format!("{bad:?}")),
                "{bad:?}: {err}"
            );
            let err = Config::parse(&format!("runtime_type = {bad:?}\n"))
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(err.contains("config field runtime_type"), "{bad:?}: {err}");
        }
        let err = Config::parse("runtime_type = \"\"\n")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("runtime_type") && err.contains("must not be empty"),
            "{err}"
        );
        for good in [
            "io.containerd.runc.v2",
            "io.containerd.ferrolet.v1",
            "io.containerd.kata-qemu.v2",
            "/usr/local/bin/containerd-shim-x-v1",
        ] {
            Config::parse(&format!("runtime_type = {good:?}\n"))
                .unwrap()
                .validate()
                .unwrap();
        }
    }

    #[test]
    fn streaming_keys_as_containerd_names_them() {
        let c = Config::parse(
            "stream_server_address = \"::1\"\nstream_server_port = \"10010\"\n\
             enable_tls_streaming = true\n[x509_key_pair_streaming]\n\
             tls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.stream_server_addr().unwrap(),
            "[::1]:10010".parse().unwrap()
        );
        assert_eq!(
            c.x509_key_pair_streaming.tls_key_file,
            PathBuf::from("/k.pem")
        );
        for bad in [
            "stream_server_port = \"http\"",
            "stream_server_address = \"localhost\"",
            "enable_tls_streaming = true",
        ] {
            assert!(Config::parse(bad).unwrap().validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn cdi_keys_as_containerd_names_them() {
        let c = Config::parse("enable_cdi = false\ncdi_spec_dirs = [\"/srv/cdi\"]\n").unwrap();
        c.validate().unwrap();
        assert!(!c.enable_cdi);
        assert_eq!(c.cdi_spec_dirs, [PathBuf::from("/srv/cdi")]);
    }

    #[test]
    fn a_file_overrides_only_what_it_names() {
        let c = Config::parse("namespace = \"test\"\nsocket_mode = \"0600\"\n").unwrap();
        assert_eq!(c.namespace, "test");
        assert_eq!(c.socket_mode().unwrap(), 0o600);
        assert_eq!(c.containerd, Config::default().containerd);
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused() {
        let err = Config::parse("nmaespace = \"x\"").unwrap_err();
        assert!(err.to_string().contains("nmaespace"), "{err}");
        let c = Config {
            socket_mode: "999".into(),
            ..Config::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("socket_mode")
        );
    }
}
