//! The pod's `PodSandboxConfig`, as the Go kubelet's `generatePodSandboxConfig` makes it:
//! metadata, hostname, DNS, log directory, port mappings, labels and annotations, and the
//! linux part (cgroup parent under `kubepods`, security context, sysctls).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::Container;

use super::qos::{QosClass, qos_class};
use super::{
    NodeContext, SpecError, dns, host_network, identity, pod_log_dir_of, security, spec_of,
};
use crate::types::{Pod, labels};

/// The pod's sandbox config for this attempt.
pub fn sandbox_config(
    pod: &Pod,
    node: &NodeContext,
    attempt: u32,
) -> Result<cri::PodSandboxConfig, SpecError> {
    let id = identity(pod)?;
    let spec = spec_of(pod)?;
    let hostname = if host_network(spec) {
        // The runtime gives a host-network pod the node's own hostname.
        String::new()
    } else {
        let (hostname, domain) = dns::hostname_and_domain(pod, node)?;
        dns::kernel_hostname(&hostname, &domain, spec.set_hostname_as_fqdn)?
    };
    let sysctls = spec
        .security_context
        .as_ref()
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    Ok(cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: id.name.to_string(),
            uid: id.uid.to_string(),
            namespace: id.namespace.to_string(),
            attempt,
        }),
        hostname,
        log_directory: pod_log_dir_of(&node.pod_logs_dir, &id)
            .to_string_lossy()
            .into_owned(),
        dns_config: Some(dns::pod_dns_config(pod, node)?),
        port_mappings: spec.containers.iter().flat_map(port_mappings).collect(),
        labels: sandbox_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: if node.cgroups_per_qos {
                cgroup_parent(pod, &node.cgroup_root, node.systemd_cgroups)
            } else {
                // Go's no-op pod container manager hands the runtime cgroupRoot itself.
                node.cgroup_root.clone()
            },
            security_context: Some(security::sandbox_security_context(pod)?),
            sysctls,
            overhead: None,
            resources: None,
        }),
        windows: None,
    })
}

/// The pod's labels plus the kubelet's: pod name, namespace and UID, and the marker that the
/// kubelet made it.
pub fn sandbox_labels(pod: &Pod) -> HashMap<String, String> {
    let m = &pod.metadata;
    let mut out: HashMap<String, String> =
        m.labels.clone().unwrap_or_default().into_iter().collect();
    out.insert(labels::POD_NAME.into(), m.name.clone().unwrap_or_default());
    out.insert(
        labels::POD_NAMESPACE.into(),
        m.namespace.clone().unwrap_or_else(|| "default".into()),
    );
    out.insert(labels::POD_UID.into(), m.uid.clone().unwrap_or_default());
    out.insert(labels::MANAGED.into(), "true".into());
    out
}

/// A container's ports as CRI port mappings (Go's `MakePortMappings`): every port, a port
/// repeated under the same name (or the same family/protocol/IP/ports) only once; the
/// runtime maps those with a hostPort.
fn port_mappings(c: &Container) -> Vec<cri::PortMapping> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for p in c.ports.iter().flatten() {
        let protocol = p.protocol.as_deref().unwrap_or("TCP");
        let host_ip = p.host_ip.clone().unwrap_or_default();
        let host_port = p.host_port.unwrap_or(0);
        let name = match p.name.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => {
                let family = match host_ip.parse::<IpAddr>() {
                    _ if host_ip.is_empty() => "any",
                    Ok(ip) if ip.is_ipv6() => "v6",
                    _ => "v4",
                };
                format!(
                    "{family}-{protocol}-{host_ip}:{}:{host_port}",
                    p.container_port
                )
            }
        };
        if !seen.insert(name.clone()) {
            tracing::info!(container = %c.name, port = %name, "port name conflicted, it is defined more than once");
            continue;
        }
        let proto = match protocol {
            "UDP" => cri::Protocol::Udp,
            "SCTP" => cri::Protocol::Sctp,
            "TCP" => cri::Protocol::Tcp,
            other => {
                tracing::warn!(protocol = other, "unknown protocol, defaulting to TCP");
                cri::Protocol::Tcp
            }
        };
        out.push(cri::PortMapping {
            protocol: proto as i32,
            container_port: p.container_port,
            host_port,
            host_ip,
        });
    }
    out
}

/// The pod's cgroup: `<cgroupRoot>/kubepods/pod<uid>` for Guaranteed pods,
/// `.../kubepods/burstable/pod<uid>` and `.../kubepods/besteffort/pod<uid>` for the others;
/// with the systemd driver (`systemd`) as [`systemd_cgroup`] lays that out.
pub fn cgroup_parent(pod: &Pod, cgroup_root: &str, systemd: bool) -> String {
    let path = cgroupfs_parent(pod, cgroup_root);
    if systemd { systemd_cgroup(&path) } else { path }
}

/// A cgroupfs path (`/kubepods/burstable/pod12-34`) as the systemd driver lays it out (Go's
/// `CgroupName.ToSystemd`): one slice per level, each named by the path to it joined with `-`,
/// each component's own `-` escaped as `_`:
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice`; `/` stays.
pub fn systemd_cgroup(cgroupfs: &str) -> String {
    let parts: Vec<String> = cgroupfs
        .split('/')
        .filter(|c| !c.is_empty())
        .map(|c| c.replace('-', "_"))
        .collect();
    if parts.is_empty() {
        return "/".to_string();
    }
    (1..=parts.len())
        .map(|i| format!("/{}.slice", parts[..i].join("-")))
        .collect()
}

fn cgroupfs_parent(pod: &Pod, cgroup_root: &str) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let root = cgroup_root.trim_matches('/');
    let mut parts: Vec<&str> = Vec::new();
    if !root.is_empty() {
        parts.push(root);
    }
    parts.push("kubepods");
    match qos_class(pod) {
        QosClass::Guaranteed => {}
        QosClass::Burstable => parts.push("burstable"),
        QosClass::BestEffort => parts.push("besteffort"),
    }
    format!("/{}/pod{uid}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::podspec::testutil::{node, pod};

    const POD: &str = "metadata:
  name: web-node1
  namespace: prod
  uid: 0b8a-11
  labels: {app: web}
  annotations: {kubernetes.io/config.source: file, note: hi}
spec:
  hostname: www
  securityContext:
    sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: '0'}]
  containers:
  - name: web
    image: httpd
    ports:
    - {containerPort: 80, hostPort: 8080}
    - {containerPort: 53, protocol: UDP, hostIP: 127.0.0.1, hostPort: 5353}
    - {containerPort: 80, hostPort: 8080}
    - {containerPort: 9090, name: metrics}
  - name: side
    image: busybox
    ports: [{containerPort: 81, protocol: SCTP}]
";

    #[test]
    fn sandbox_basics() {
        let p = pod(POD);
        let c = sandbox_config(&p, &node(), 2).unwrap();
        let m = c.metadata.as_ref().unwrap();
        assert_eq!(
            (
                m.name.as_str(),
                m.namespace.as_str(),
                m.uid.as_str(),
                m.attempt
            ),
            ("web-node1", "prod", "0b8a-11", 2)
        );
        assert_eq!(c.hostname, "www");
        assert_eq!(c.log_directory, "/var/log/pods/prod_web-node1_0b8a-11");
        assert_eq!(c.labels["app"], "web");
        assert_eq!(c.labels[labels::POD_NAME], "web-node1");
        assert_eq!(c.labels[labels::POD_NAMESPACE], "prod");
        assert_eq!(c.labels[labels::POD_UID], "0b8a-11");
        assert_eq!(c.annotations["note"], "hi");
        assert_eq!(c.annotations[labels::CONFIG_SOURCE], "file");
        let ports: Vec<_> = c
            .port_mappings
            .iter()
            .map(|p| {
                (
                    p.protocol,
                    p.container_port,
                    p.host_port,
                    p.host_ip.as_str(),
                )
            })
            .collect();
        assert_eq!(
            ports,
            [
                (cri::Protocol::Tcp as i32, 80, 8080, ""),
                (cri::Protocol::Udp as i32, 53, 5353, "127.0.0.1"),
                (cri::Protocol::Tcp as i32, 9090, 0, ""),
                (cri::Protocol::Sctp as i32, 81, 0, ""),
            ]
        );
        let linux = c.linux.as_ref().unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/besteffort/pod0b8a-11");
        assert_eq!(linux.sysctls["net.ipv4.ip_unprivileged_port_start"], "0");
        let ns = linux
            .security_context
            .as_ref()
            .unwrap()
            .namespace_options
            .as_ref()
            .unwrap();
        assert_eq!(ns.network, cri::NamespaceMode::Pod as i32);
        let dns = c.dns_config.as_ref().unwrap();
        assert_eq!(dns.servers, ["10.96.0.10"]);
        assert_eq!(dns.options, ["ndots:5"]);
    }

    #[test]
    fn host_network_has_no_hostname() {
        let p = pod("metadata: {name: p, uid: u}
spec: {hostNetwork: true, containers: [{name: c}]}");
        let c = sandbox_config(&p, &node(), 0).unwrap();
        assert_eq!(c.hostname, "");
        let ns = c
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
    }

    #[test]
    fn cgroup_parents() {
        let table = [
            ("{}", "/", "/kubepods/besteffort/podu1"),
            ("{requests: {cpu: 1}}", "/", "/kubepods/burstable/podu1"),
            ("{limits: {cpu: 1, memory: 1Gi}}", "/", "/kubepods/podu1"),
            ("{limits: {cpu: 1, memory: 1Gi}}", "", "/kubepods/podu1"),
            ("{}", "/ferrolet/", "/ferrolet/kubepods/besteffort/podu1"),
        ];
        for (resources, root, want) in table {
            let p = pod(&format!(
                "metadata: {{name: p, uid: u1}}\nspec: {{containers: [{{name: c, resources: {resources}}}]}}"
            ));
            assert_eq!(cgroup_parent(&p, root, false), want, "{resources} {root}");
        }
        let p = pod("metadata: {name: p, uid: 12-34}\nspec: {containers: [{name: c}]}");
        assert_eq!(
            cgroup_parent(&p, "/", true),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12_34.slice"
        );
        assert_eq!(
            cgroup_parent(&p, "/ferrolet-it/t-1", true),
            "/ferrolet_it.slice/ferrolet_it-t_1.slice/ferrolet_it-t_1-kubepods.slice/\
             ferrolet_it-t_1-kubepods-besteffort.slice/\
             ferrolet_it-t_1-kubepods-besteffort-pod12_34.slice"
        );
        assert_eq!(systemd_cgroup("/"), "/");
    }

    #[test]
    fn a_pod_without_uid_is_refused() {
        let p = pod("metadata: {name: p}\nspec: {containers: [{name: c}]}");
        let err = sandbox_config(&p, &node(), 0).unwrap_err().to_string();
        assert!(err.contains("metadata.uid"), "{err}");
    }
}
