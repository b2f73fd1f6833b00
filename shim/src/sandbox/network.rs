//! A sandbox's pod network: its pinned network namespace and the CNI chain run in it.
//!
//! The pod network is the first valid configuration (by file name) in the conf dir, as
//! containerd picks it; it is read per call so a conf dir written after start-up (by a network
//! add-on) takes effect without a restart.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use ferrolet_cni::config::{NetworkConfigList, scan_dir};
use ferrolet_cni::{Cni, CniError, RuntimeConf, netns};
use ferrolet_proto::cri;
use serde_json::{Value, json};

/// The interface CNI creates inside the pod.
const POD_IFNAME: &str = "eth0";

/// Why the pod network cannot be set up or torn down.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// No usable network configuration.
    #[error("no network config found in {dir}: {reason}")]
    NotReady { dir: PathBuf, reason: String },
    /// The CNI chain failed.
    #[error("CNI {op} for pod sandbox {id} on network {network}: {source}")]
    Cni {
        op: &'static str,
        id: String,
        network: String,
        #[source]
        source: Box<CniError>,
    },
    /// The network namespace could not be made or removed.
    #[error("network namespace for pod sandbox {id}: {source}")]
    Netns {
        id: String,
        #[source]
        source: Box<CniError>,
    },
    /// The pod's loopback interface could not be brought up.
    #[error("bringing up lo in pod sandbox {id}'s netns: {source}")]
    Loopback {
        id: String,
        #[source]
        source: std::io::Error,
    },
    /// An annotation or mapping that CNI cannot take.
    #[error("{0}")]
    Invalid(String),
}

impl NetworkError {
    /// The gRPC code a client sees.
    pub fn code(&self) -> tonic::Code {
        match self {
            NetworkError::Invalid(_) => tonic::Code::InvalidArgument,
            NetworkError::NotReady { .. } => tonic::Code::FailedPrecondition,
            _ => tonic::Code::Unknown,
        }
    }
}

/// Addresses CNI gave a pod.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PodIps {
    /// The primary address (IPv4 first, as the kubelet expects).
    pub ip: String,
    /// Any further addresses.
    pub additional: Vec<String>,
}

/// The pod network plugin and its settings.
#[derive(Debug)]
pub struct PodNetwork {
    cni: Cni,
    conf_dir: PathBuf,
    netns_dir: PathBuf,
    pod_cidr: RwLock<String>,
}

impl PodNetwork {
    /// A pod network from the conf dir, plugin dirs, result cache and netns pin dir.
    pub fn new(
        conf_dir: PathBuf,
        bin_dirs: Vec<PathBuf>,
        cache_dir: PathBuf,
        netns_dir: PathBuf,
    ) -> Self {
        Self {
            cni: Cni::new(bin_dirs, cache_dir),
            conf_dir,
            netns_dir,
            pod_cidr: RwLock::new(String::new()),
        }
    }

    /// Sets the node's pod CIDR, passed to IPAM as `ipRanges` (UpdateRuntimeConfig).
    pub fn set_pod_cidr(&self, cidr: &str) {
        if let Ok(mut c) = self.pod_cidr.write() {
            *c = cidr.to_string();
        }
    }

    /// The network configuration pods join, or why there is none (Status' NetworkReady).
    pub async fn config(&self) -> Result<NetworkConfigList, NetworkError> {
        let dir = self.conf_dir.clone();
        let loaded = tokio::task::spawn_blocking(move || scan_dir(&dir))
            .await
            .map_err(|e| NetworkError::Invalid(format!("loading CNI config: {e}")))?;
        let not_ready = |reason: String| NetworkError::NotReady {
            dir: self.conf_dir.clone(),
            reason,
        };
        let files = loaded.map_err(|e| not_ready(e.to_string()))?;
        let mut last_error = None;
        for (_, parsed) in files {
            match parsed {
                Ok(net) => return Ok(net),
                Err(e) => last_error = Some(e.to_string()),
            }
        }
        Err(not_ready(last_error.unwrap_or_else(|| {
            "no .conf, .conflist or .json file".to_string()
        })))
    }

    /// Where a sandbox's network namespace is pinned (known before it exists, so the
    /// sandbox's record can name it before anything is made).
    pub fn netns_path(&self, id: &str) -> PathBuf {
        self.netns_dir.join(netns_name(id))
    }

    /// Creates and pins a network namespace for a sandbox.
    pub async fn create_netns(&self, id: &str) -> Result<PathBuf, NetworkError> {
        netns::create(&self.netns_dir, &netns_name(id))
            .await
            .map_err(|source| NetworkError::Netns {
                id: id.to_string(),
                source: Box::new(source),
            })
    }

    /// Brings the netns's loopback interface up (containerd runs the `loopback` plugin for
    /// this; doing it ourselves saves a plugin run). Without it `localhost` between a pod's
    /// containers does not work.
    pub async fn loopback_up(&self, id: &str, path: &Path) -> Result<(), NetworkError> {
        let path = path.to_path_buf();
        let netns_err = |source: std::io::Error| NetworkError::Loopback {
            id: id.to_string(),
            source,
        };
        tokio::task::spawn_blocking(move || {
            // A thread that entered another netns must not go back to a pool: use our own.
            std::thread::spawn(move || -> std::io::Result<()> {
                netns::enter_current_thread(&path).map_err(std::io::Error::other)?;
                set_up("lo")
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("loopback thread panicked")))
        })
        .await
        .map_err(|e| netns_err(std::io::Error::other(e)))?
        .map_err(netns_err)
    }

    /// Unpins a sandbox's network namespace; gone already is fine.
    pub async fn remove_netns(&self, id: &str, path: &Path) -> Result<(), NetworkError> {
        netns::delete(path)
            .await
            .map_err(|source| NetworkError::Netns {
                id: id.to_string(),
                source: Box::new(source),
            })
    }

    /// Runs CNI ADD for a sandbox and returns its addresses (the chain rolls itself back on
    /// failure).
    pub async fn setup(
        &self,
        id: &str,
        netns_path: &Path,
        config: &cri::PodSandboxConfig,
    ) -> Result<PodIps, NetworkError> {
        let net = self.config().await?;
        let rt = self.runtime_conf(id, netns_path, config)?;
        let result = self
            .cni
            .add(&net, &rt)
            .await
            .map_err(|source| NetworkError::Cni {
                op: "ADD",
                id: id.to_string(),
                network: net.name.clone(),
                source: Box::new(source),
            })?;
        let mut ips: Vec<std::net::IpAddr> = result.ips.iter().filter_map(|ip| ip.ip()).collect();
        // The kubelet takes the first as the pod IP and expects IPv4 first on dual-stack.
        ips.sort_by_key(|ip| ip.is_ipv6());
        let mut ips = ips.into_iter().map(|ip| ip.to_string());
        Ok(PodIps {
            ip: ips.next().unwrap_or_default(),
            additional: ips.collect(),
        })
    }

    /// Runs CNI DEL for a sandbox; the cached ADD arguments make this work after a restart and
    /// when the netns is already gone, and without the sandbox's config (`None`: a sandbox of
    /// which nothing but its CNI attachment is left). Done twice, it succeeds.
    pub async fn teardown(
        &self,
        id: &str,
        netns_path: &Path,
        config: Option<&cri::PodSandboxConfig>,
    ) -> Result<(), NetworkError> {
        let net = match self.config().await {
            Ok(net) => net,
            Err(e @ NetworkError::NotReady { .. }) => {
                // A pod must still stop when its network's config was removed; its address
                // stays reserved in IPAM until the plugin's own GC runs.
                tracing::warn!(id, error = %e, "no CNI config to tear the pod network down with");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let rt = match config.map(|c| self.runtime_conf(id, netns_path, c)) {
            Some(Ok(rt)) => rt,
            // Teardown must not fail on an annotation that only matters at ADD.
            _ => RuntimeConf::new(id, netns_path.display().to_string(), POD_IFNAME),
        };
        self.cni
            .del(&net, &rt)
            .await
            .map_err(|source| NetworkError::Cni {
                op: "DEL",
                id: id.to_string(),
                network: net.name.clone(),
                source: Box::new(source),
            })
    }

    /// The network namespace files we pinned (others in a shared dir are not ours).
    pub async fn own_netns(&self) -> Result<Vec<PathBuf>, NetworkError> {
        let dir = self.netns_dir.clone();
        let names = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<PathBuf>> {
            let rd = match std::fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(e),
            };
            Ok(rd
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(NETNS_PREFIX))
                .map(|e| e.path())
                .collect())
        })
        .await
        .map_err(|e| NetworkError::Invalid(format!("listing network namespaces: {e}")))?;
        names.map_err(|e| {
            NetworkError::Invalid(format!("listing {}: {e}", self.netns_dir.display()))
        })
    }

    /// Sandbox ids with a CNI attachment on the pod network inside one of our network
    /// namespaces (the result cache's entries; none without a network config).
    pub async fn attachments(&self) -> Result<Vec<String>, NetworkError> {
        let Ok(net) = self.config().await else {
            return Ok(Vec::new());
        };
        let entries = self
            .cni
            .cache()
            .list(&net.name)
            .await
            .map_err(|e| NetworkError::Invalid(format!("reading the CNI result cache: {e}")))?;
        Ok(entries
            .into_iter()
            .filter(|a| {
                let path = Path::new(&a.netns);
                path.parent() == Some(self.netns_dir.as_path())
                    && path
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(NETNS_PREFIX))
            })
            .map(|a| a.container_id)
            .collect())
    }

    fn runtime_conf(
        &self,
        id: &str,
        netns_path: &Path,
        config: &cri::PodSandboxConfig,
    ) -> Result<RuntimeConf, NetworkError> {
        let meta = config.metadata.clone().unwrap_or_default();
        let mut rt = RuntimeConf::new(id, netns_path.display().to_string(), POD_IFNAME)
            .with_arg("IgnoreUnknown", "1")
            .with_arg("K8S_POD_NAMESPACE", &meta.namespace)
            .with_arg("K8S_POD_NAME", &meta.name)
            .with_arg("K8S_POD_INFRA_CONTAINER_ID", id)
            .with_arg("K8S_POD_UID", &meta.uid);
        let mappings = port_mappings(&config.port_mappings);
        if !mappings.is_empty() {
            rt = rt.with_capability("portMappings", Value::Array(mappings));
        }
        if let Some(bw) = bandwidth(&config.annotations)? {
            rt = rt.with_capability("bandwidth", bw);
        }
        let cidr = self.pod_cidr.read().map(|c| c.clone()).unwrap_or_default();
        if !cidr.is_empty() {
            rt = rt.with_capability("ipRanges", json!([[{ "subnet": cidr }]]));
        }
        if let Some(dns) = &config.dns_config {
            rt = rt.with_capability(
                "dns",
                json!({ "servers": dns.servers, "searches": dns.searches, "options": dns.options }),
            );
        }
        Ok(rt)
    }
}

/// Sets an interface of the current thread's netns up (SIOCSIFFLAGS).
fn set_up(name: &str) -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: a plain socket(2) call; the fd is owned right away.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh, valid fd nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *dst = src as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq naming the interface; the kernel fills in the flags.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS set the flags member of the union.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: as above, with the flags to set.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// What every network namespace file we pin is named with.
const NETNS_PREFIX: &str = "cri-";

fn netns_name(id: &str) -> String {
    format!("{NETNS_PREFIX}{}", &id[..id.len().min(32)])
}

/// CRI port mappings in the `portMappings` capability's shape; mappings without a host port
/// are only informational and are left out, as containerd does.
fn port_mappings(mappings: &[cri::PortMapping]) -> Vec<Value> {
    mappings
        .iter()
        .filter(|m| m.host_port > 0)
        .map(|m| {
            let protocol = match cri::Protocol::try_from(m.protocol) {
                Ok(cri::Protocol::Udp) => "udp",
                Ok(cri::Protocol::Sctp) => "sctp",
                _ => "tcp",
            };
            let mut v = json!({
                "hostPort": m.host_port,
                "containerPort": m.container_port,
                "protocol": protocol,
            });
            if !m.host_ip.is_empty() {
                v["hostIP"] = json!(m.host_ip);
            }
            v
        })
        .collect()
}

const INGRESS: &str = "kubernetes.io/ingress-bandwidth";
const EGRESS: &str = "kubernetes.io/egress-bandwidth";

/// The `bandwidth` capability from the Kubernetes bandwidth annotations (bits per second);
/// bursts as the kubelet's bandwidth shaping sets them.
fn bandwidth(
    annotations: &std::collections::HashMap<String, String>,
) -> Result<Option<Value>, NetworkError> {
    let rate = |key: &str| -> Result<Option<u64>, NetworkError> {
        annotations
            .get(key)
            .map(|v| {
                parse_quantity(v).ok_or_else(|| {
                    NetworkError::Invalid(format!(
                        "annotation {key} {v:?}: not a bandwidth quantity like \"10M\""
                    ))
                })
            })
            .transpose()
    };
    let (ingress, egress) = (rate(INGRESS)?, rate(EGRESS)?);
    if ingress.is_none() && egress.is_none() {
        return Ok(None);
    }
    // Large bursts, as in the kubelet: the rate alone is what the annotation promises.
    const BURST: u64 = i32::MAX as u64;
    let mut bw = serde_json::Map::new();
    if let Some(r) = ingress {
        bw.insert("ingressRate".into(), json!(r));
        bw.insert("ingressBurst".into(), json!(BURST));
    }
    if let Some(r) = egress {
        bw.insert("egressRate".into(), json!(r));
        bw.insert("egressBurst".into(), json!(BURST));
    }
    Ok(Some(Value::Object(bw)))
}

/// A Kubernetes quantity ("10M", "1Gi", "500k", "1000") as a whole number.
fn parse_quantity(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let num: f64 = num.parse().ok()?;
    let mult: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        _ => return None,
    };
    let v = num * mult;
    (v.is_finite() && v >= 0.0).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("10M"), Some(10_000_000));
        assert_eq!(parse_quantity("1Gi"), Some(1 << 30));
        assert_eq!(parse_quantity("1.5k"), Some(1500));
        assert_eq!(parse_quantity("12"), Some(12));
        assert_eq!(parse_quantity("ten"), None);
        assert_eq!(parse_quantity("10X"), None);
    }

    #[test]
    fn mappings_without_host_port_are_left_out() {
        let m = port_mappings(&[
            cri::PortMapping {
                container_port: 80,
                host_port: 8080,
                protocol: cri::Protocol::Tcp as i32,
                host_ip: String::new(),
            },
            cri::PortMapping {
                container_port: 53,
                host_port: 0,
                protocol: cri::Protocol::Udp as i32,
                host_ip: String::new(),
            },
            cri::PortMapping {
                container_port: 53,
                host_port: 5353,
                protocol: cri::Protocol::Udp as i32,
                host_ip: "127.0.0.1".into(),
            },
        ]);
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[0],
            json!({"hostPort": 8080, "containerPort": 80, "protocol": "tcp"})
        );
        assert_eq!(m[1]["hostIP"], "127.0.0.1");
        assert_eq!(m[1]["protocol"], "udp");
    }

    #[test]
    fn bandwidth_annotations() {
        let mut a = std::collections::HashMap::new();
        assert!(bandwidth(&a).unwrap().is_none());
        a.insert(INGRESS.to_string(), "1M".to_string());
        let bw = bandwidth(&a).unwrap().unwrap();
        assert_eq!(bw["ingressRate"], 1_000_000);
        assert!(bw.get("egressRate").is_none());
        a.insert(EGRESS.to_string(), "lots".to_string());
        assert!(bandwidth(&a).unwrap_err().to_string().contains(EGRESS));
    }
}
