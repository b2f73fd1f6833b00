//! Namespaces per CRI mode (a path to join, a new one, or none = the host's), and sysctls,
//! which are only safe in namespaces the pod owns.

use std::collections::HashMap;
use std::path::PathBuf;

use ferrolet_proto::cri::NamespaceMode;
use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType, Spec};

use super::OciError;

/// A namespace mode from its wire value (unknown values are refused).
pub(crate) fn mode(raw: i32, field: &str) -> Result<NamespaceMode, OciError> {
    NamespaceMode::try_from(raw)
        .map_err(|_| OciError::invalid(field, raw.to_string(), "unknown namespace mode"))
}

/// Where a process gets a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ns {
    /// The host's (no entry in the spec).
    Host,
    /// A fresh one.
    New,
    /// Join an existing one.
    Join(PathBuf),
}

/// Sets the spec's entry for `typ`.
pub(crate) fn set(spec: &mut Spec, typ: LinuxNamespaceType, ns: Ns) {
    let Some(linux) = spec.linux_mut() else {
        return;
    };
    let list = linux.namespaces_mut().get_or_insert_with(Vec::new);
    list.retain(|n| n.typ() != typ);
    let path = match ns {
        Ns::Host => return,
        Ns::New => None,
        Ns::Join(p) => Some(p),
    };
    let mut entry = LinuxNamespace::default();
    entry.set_typ(typ).set_path(path);
    list.push(entry);
}

/// `/proc/<pid>/ns/<kind>`.
pub(crate) fn proc_ns(pid: u32, kind: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/ns/{kind}"))
}

/// IPC-namespaced sysctls outside `fs.mqueue.*`.
const IPC_SYSCTLS: &[&str] = &[
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
    "kernel.sem",
    "kernel.shmall",
    "kernel.shmmax",
    "kernel.shmmni",
    "kernel.shm_rmid_forced",
];

/// Kubernetes lets `net/ipv4/ip_forward` stand for `net.ipv4.ip_forward`: when the first
/// separator is a slash, slashes and dots trade places.
fn normalize_sysctl(key: &str) -> String {
    match key.find(['.', '/']) {
        Some(i) if key.as_bytes()[i] == b'/' => key
            .chars()
            .map(|c| match c {
                '/' => '.',
                '.' => '/',
                c => c,
            })
            .collect(),
        _ => key.to_string(),
    }
}

/// The pod's sysctls, keys normalized, each checked to live in a namespace the pod owns:
/// net.* needs the pod's network namespace, IPC ones its IPC namespace, kernel.domainname its
/// UTS namespace (which follows the network one); anything else would change the node.
pub(crate) fn check_sysctls(
    sysctls: &HashMap<String, String>,
    host_network: bool,
    host_ipc: bool,
) -> Result<HashMap<String, String>, OciError> {
    const FIELD: &str = "linux.sysctls";
    let mut out = HashMap::with_capacity(sysctls.len());
    for (raw, value) in sysctls {
        let key = normalize_sysctl(raw.trim());
        let refuse = |why: &str| OciError::invalid(FIELD, raw, why);
        if IPC_SYSCTLS.contains(&key.as_str()) || key.starts_with("fs.mqueue.") {
            if host_ipc {
                return Err(refuse("not allowed with the host's IPC namespace"));
            }
        } else if key.starts_with("net.") {
            if host_network {
                return Err(refuse("not allowed with the host's network namespace"));
            }
        } else if key == "kernel.domainname" {
            if host_network {
                return Err(refuse("not allowed with the host's UTS namespace"));
            }
        } else if key == "kernel.hostname" {
            return Err(refuse("set the pod's hostname instead"));
        } else {
            return Err(refuse("not namespaced: setting it would change the node"));
        }
        out.insert(key, value.clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::defaults::default_spec;
    use super::*;

    fn entries(spec: &Spec) -> Vec<(LinuxNamespaceType, Option<PathBuf>)> {
        spec.linux()
            .as_ref()
            .unwrap()
            .namespaces()
            .as_ref()
            .unwrap()
            .iter()
            .map(|n| (n.typ(), n.path().clone()))
            .collect()
    }

    #[test]
    fn set_replaces_adds_and_removes() {
        let mut spec = default_spec();
        set(
            &mut spec,
            LinuxNamespaceType::Network,
            Ns::Join("/run/netns/x".into()),
        );
        set(&mut spec, LinuxNamespaceType::Pid, Ns::Host);
        set(&mut spec, LinuxNamespaceType::Cgroup, Ns::New);
        let e = entries(&spec);
        assert!(e.contains(&(
            LinuxNamespaceType::Network,
            Some(PathBuf::from("/run/netns/x"))
        )));
        assert!(!e.iter().any(|(t, _)| *t == LinuxNamespaceType::Pid));
        assert!(e.contains(&(LinuxNamespaceType::Cgroup, None)));
        assert_eq!(
            e.iter()
                .filter(|(t, _)| *t == LinuxNamespaceType::Network)
                .count(),
            1
        );
        assert_eq!(proc_ns(42, "ipc"), PathBuf::from("/proc/42/ns/ipc"));
    }

    #[test]
    fn sysctls_must_be_namespaced_by_the_pod() {
        let s = |k: &str| HashMap::from([(k.to_string(), "1".to_string())]);
        assert!(check_sysctls(&s("kernel.shm_rmid_forced"), false, false).is_ok());
        assert!(check_sysctls(&s("fs.mqueue.msg_max"), true, false).is_ok());
        assert!(check_sysctls(&s("net.ipv4.ip_forward"), false, true).is_ok());
        let err = check_sysctls(&s("net.ipv4.ip_forward"), true, false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "linux.sysctls \"net.ipv4.ip_forward\": not allowed with the host's network namespace"
        );
        assert!(check_sysctls(&s("kernel.shm_rmid_forced"), false, true).is_err());
        assert!(check_sysctls(&s("kernel.domainname"), true, false).is_err());
        assert!(check_sysctls(&s("kernel.hostname"), false, false).is_err());
        assert!(check_sysctls(&s("vm.swappiness"), false, false).is_err());
        let out = check_sysctls(&s("net/ipv4/conf/eth0.100/forwarding"), false, false).unwrap();
        assert!(out.contains_key("net.ipv4.conf.eth0/100.forwarding"));
    }
}
