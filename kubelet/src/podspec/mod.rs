//! A pod as CRI configs: the sandbox's `PodSandboxConfig` and each container's
//! `ContainerConfig`, built as the Go kubelet's kuberuntime builds them
//! (`generatePodSandboxConfig`, `generateContainerConfig`), so runtimes, crictl and our own
//! restart recovery see the same labels, annotations, paths and settings.
//!
//! - [`sandbox`]: the sandbox config (metadata, hostname, DNS, ports, cgroup parent, namespaces).
//! - [`container`]: the container config (command, env, labels/annotations, log path, linux).
//! - [`env`](mod@env): environment variables (`value`, `fieldRef`, `resourceFieldRef`, `envFrom`,
//!   configMap and secret keys) and `$(VAR)`; [`env_sources`]: the secrets and configMaps it
//!   reads (which to fetch, Go's messages).
//! - [`resources`]: cpu shares/quota, memory limit, huge pages, oom_score_adj.
//! - [`pod_resources`]: the pod's summed requests and limits (Go's `PodRequests`/`PodLimits`).
//! - [`security`]: security contexts, namespaces, seccomp and AppArmor profiles.
//! - [`dns`]: the pod's resolv.conf per `dnsPolicy`, hostname and domain.
//! - [`hash`]: the container spec hash; [`qos`]: the pod's QoS class.
//! - [`ephemeral`]: ephemeral containers as containers, and their target's PID namespace.

pub mod container;
pub mod dns;
pub mod env;
pub mod env_sources;
pub mod ephemeral;
pub mod hash;
pub mod pod_resources;
pub mod qos;
pub mod resources;
pub mod sandbox;
pub mod security;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::types::Pod;

pub use container::container_config;
pub use dns::hostname_and_domain;
pub use env::container_env;
pub use env_sources::{EnvObjects, env_references};
pub use hash::container_hash;

/// The spec's init containers, then its app containers (no ephemeral ones), in spec order.
pub fn init_and_app_containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
}
pub use sandbox::sandbox_config;

/// Node-wide inputs.
#[derive(Clone, Debug)]
pub struct NodeContext {
    /// The node's name (`spec.nodeName` when a pod does not carry one).
    pub node_name: String,
    /// The node's primary IP (`status.hostIP`).
    pub host_ip: String,
    /// `clusterDNS`: nameservers for `ClusterFirst` pods.
    pub cluster_dns: Vec<IpAddr>,
    /// `clusterDomain` (`cluster.local`), for search paths and subdomain FQDNs.
    pub cluster_domain: String,
    /// `resolvConf`: the node's resolver config (`Default` pods; empty = none).
    pub resolv_conf: PathBuf,
    /// `podLogsDir` (`/var/log/pods`).
    pub pod_logs_dir: PathBuf,
    /// `cgroupRoot` (`/`): where the `kubepods` hierarchy hangs.
    pub cgroup_root: String,
    /// Pods go under `kubepods` per QoS class (`cgroupsPerQOS`); else straight under the root.
    pub cgroups_per_qos: bool,
    /// The systemd cgroup driver names the pods' cgroups (`cgroupDriver: systemd`).
    pub systemd_cgroups: bool,
    /// Bytes of memory on the node (oom_score_adj, downward-API defaults).
    pub memory_capacity: u64,
    /// Containers' `memory.min`/`memory.high` (the `MemoryQoS` gate on cgroup v2); `None`: off.
    pub memory_qos: Option<resources::MemoryQos>,
    /// Where `Localhost` seccomp profiles are looked up: `<root-dir>/seccomp`, as Go's
    /// `seccompProfileRoot`.
    pub seccomp_profile_root: PathBuf,
}

/// Per-container inputs known at sync time.
pub struct ContainerContext<'a> {
    /// The new instance's restart count (also its CRI attempt).
    pub restart_count: u32,
    /// Mounts, from [`crate::volume::container_mounts_with`].
    pub mounts: Vec<cri::Mount>,
    /// Devices of raw block volumes, from [`crate::volume::container_devices`].
    pub devices: Vec<cri::Device>,
    /// The environment, from [`container_env`] (computed once per start: mounts'
    /// `subPathExpr` and the config share it).
    pub envs: Vec<cri::KeyValue>,
    /// The image ref or id to create from.
    pub image: &'a str,
}

/// Why a pod cannot be expressed as CRI configs; the pod's containers get
/// `CreateContainerConfigError` with this message, or the sandbox fails with it.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// A field the config cannot be built from.
    #[error("{field}: {reason}")]
    Invalid {
        /// Where (`spec.containers[web].env[HOME]`).
        field: String,
        /// What is wrong, in the Go kubelet's words where it has some.
        reason: String,
    },
    /// A secret or configMap the environment reads is missing or unreadable, or lacks the
    /// key (the Go kubelet's message as it is).
    #[error("{0}")]
    EnvSource(String),
    /// The node's resolver config could not be read (`Default` DNS and the node's searches).
    #[error("reading resolv conf file {}: {source}", path.display())]
    ResolvConf {
        /// `resolvConf`.
        path: PathBuf,
        /// The read error.
        #[source]
        source: std::io::Error,
    },
}

impl SpecError {
    /// An [`SpecError::Invalid`].
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        SpecError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// A pod's name, namespace and UID; the UID is required (sources always set one).
pub(crate) struct Identity<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.namespace` (`default` when unset).
    pub namespace: &'a str,
    /// `metadata.uid`.
    pub uid: &'a str,
}

/// The identity of a pod, refusing one without a UID (every path and label needs it).
pub(crate) fn identity(pod: &Pod) -> Result<Identity<'_>, SpecError> {
    let m = &pod.metadata;
    let uid = m
        .uid
        .as_deref()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| SpecError::invalid("metadata.uid", "must be set"))?;
    Ok(Identity {
        name: m.name.as_deref().unwrap_or_default(),
        // The API's default namespace, as the sources would have set it.
        namespace: m.namespace.as_deref().unwrap_or("default"),
        uid,
    })
}

/// The pod's spec, refusing a pod without one.
pub(crate) fn spec_of(pod: &Pod) -> Result<&PodSpec, SpecError> {
    pod.spec
        .as_ref()
        .ok_or_else(|| SpecError::invalid("spec", "must be set"))
}

/// Whether the pod uses the node's network namespace.
pub(crate) fn host_network(spec: &PodSpec) -> bool {
    spec.host_network.unwrap_or(false)
}

/// `<podLogsDir>/<namespace>_<name>_<uid>`: the sandbox's log directory.
pub(crate) fn pod_log_dir_of(pod_logs_dir: &Path, id: &Identity<'_>) -> PathBuf {
    pod_logs_dir.join(format!("{}_{}_{}", id.namespace, id.name, id.uid))
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Pods for the podspec tests.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A node context for tests.
    pub fn node() -> NodeContext {
        NodeContext {
            node_name: "node1".into(),
            host_ip: "192.168.1.10".into(),
            cluster_dns: vec!["10.96.0.10".parse().unwrap()],
            cluster_domain: "cluster.local".into(),
            resolv_conf: PathBuf::new(),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            cgroup_root: "/".into(),
            cgroups_per_qos: true,
            systemd_cgroups: false,
            memory_capacity: 8 << 30,
            memory_qos: None,
            seccomp_profile_root: PathBuf::from("/var/lib/kubelet/seccomp"),
        }
    }

    /// A pod from YAML.
    pub fn pod(yaml: &str) -> Pod {
        serde_yaml_ng::from_str(yaml).unwrap()
    }
}
