//! The base spec every sandbox and container starts from: containerd's
//! `populateDefaultUnixSpec` (namespaces, capabilities, mounts, device rules, masked and
//! readonly paths), minus what its CRI plugin strips again for every pod (`/run`, rlimits).

use std::collections::HashMap;
use std::path::PathBuf;

use oci_spec::runtime::{
    Capabilities, Capability, Linux, LinuxCapabilities, LinuxDeviceCgroup, LinuxDeviceType,
    LinuxNamespace, LinuxNamespaceType, LinuxResources, Mount, PosixRlimitBuilder, PosixRlimitType,
    Process, Root, Spec, User,
};

/// Runtime-spec version we emit; runc 1.1 speaks 1.0.2.
pub(crate) const SPEC_VERSION: &str = "1.0.2-dev";

/// `PATH` for containers whose image sets none.
pub(crate) const DEFAULT_PATH_ENV: &str =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Docker's default capability set, as containerd grants it.
pub(crate) fn default_capabilities() -> Capabilities {
    [
        Capability::Chown,
        Capability::DacOverride,
        Capability::Fsetid,
        Capability::Fowner,
        Capability::Mknod,
        Capability::NetRaw,
        Capability::Setgid,
        Capability::Setuid,
        Capability::Setfcap,
        Capability::Setpcap,
        Capability::NetBindService,
        Capability::SysChroot,
        Capability::Kill,
        Capability::AuditWrite,
    ]
    .into_iter()
    .collect()
}

/// Bounding, effective and permitted sets all equal to `caps`; no inheritable or ambient ones.
pub(crate) fn capability_sets(caps: Capabilities) -> LinuxCapabilities {
    let mut sets = LinuxCapabilities::default();
    sets.set_bounding(Some(caps.clone()))
        .set_effective(Some(caps.clone()))
        .set_permitted(Some(caps))
        .set_inheritable(None)
        .set_ambient(None);
    sets
}

/// A mount from its parts.
pub(crate) fn mount(dest: &str, typ: &str, source: &str, options: &[&str]) -> Mount {
    let mut m = Mount::default();
    m.set_destination(PathBuf::from(dest))
        .set_typ(Some(typ.to_string()))
        .set_source(Some(PathBuf::from(source)))
        .set_options(Some(options.iter().map(|o| o.to_string()).collect()));
    m
}

/// The standard pseudo-filesystems of a Linux container.
fn default_mounts() -> Vec<Mount> {
    vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        ),
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", "ro"],
        ),
    ]
}

/// A device cgroup rule.
pub(crate) fn device_rule(
    allow: bool,
    typ: Option<LinuxDeviceType>,
    major: Option<i64>,
    minor: Option<i64>,
    access: &str,
) -> LinuxDeviceCgroup {
    let mut rule = LinuxDeviceCgroup::default();
    rule.set_allow(allow)
        .set_typ(typ)
        .set_major(major)
        .set_minor(minor)
        .set_access(Some(access.to_string()));
    rule
}

/// Deny every device, then allow the ones every container gets (null, zero, full, random,
/// urandom, tty, console, ptmx, and the pty slaves).
fn default_device_rules() -> Vec<LinuxDeviceCgroup> {
    let c = Some(LinuxDeviceType::C);
    let mut rules = vec![device_rule(false, None, None, None, "rwm")];
    for (major, minor) in [
        (1, Some(3)),
        (1, Some(8)),
        (1, Some(7)),
        (5, Some(0)),
        (1, Some(5)),
        (1, Some(9)),
        (5, Some(1)),
        (136, None),
        (5, Some(2)),
    ] {
        rules.push(device_rule(true, c, Some(major), minor, "rwm"));
    }
    rules
}

fn namespace(typ: LinuxNamespaceType) -> LinuxNamespace {
    let mut ns = LinuxNamespace::default();
    ns.set_typ(typ);
    ns
}

/// Paths the kernel exposes that a container must not read.
pub(crate) fn default_masked_paths() -> Vec<String> {
    [
        "/proc/acpi",
        "/proc/asound",
        "/proc/kcore",
        "/proc/keys",
        "/proc/latency_stats",
        "/proc/timer_list",
        "/proc/timer_stats",
        "/proc/sched_debug",
        "/sys/firmware",
        "/sys/devices/virtual/powercap",
        "/proc/scsi",
    ]
    .map(String::from)
    .to_vec()
}

/// Paths a container may read but not write.
pub(crate) fn default_readonly_paths() -> Vec<String> {
    [
        "/proc/bus",
        "/proc/fs",
        "/proc/irq",
        "/proc/sys",
        "/proc/sysrq-trigger",
    ]
    .map(String::from)
    .to_vec()
}

/// containerd's default Unix spec; the builders set the cgroup path and everything pod-specific.
pub(crate) fn default_spec() -> Spec {
    let mut root = Root::default();
    root.set_path(PathBuf::from("rootfs")).set_readonly(None);

    let mut user = User::default();
    user.set_uid(0).set_gid(0);
    // The builder cannot fail: every field has a default and none is validated.
    let nofile = PosixRlimitBuilder::default()
        .typ(PosixRlimitType::RlimitNofile)
        .hard(1024u64)
        .soft(1024u64)
        .build()
        .unwrap_or_default();
    let mut process = Process::default();
    process
        .set_terminal(None)
        .set_user(user)
        .set_args(None)
        .set_env(None)
        .set_cwd(PathBuf::from("/"))
        .set_no_new_privileges(Some(true))
        .set_capabilities(Some(capability_sets(default_capabilities())))
        .set_rlimits(Some(vec![nofile]))
        .set_oom_score_adj(None);

    let mut resources = LinuxResources::default();
    resources.set_devices(Some(default_device_rules()));
    let mut linux = Linux::default();
    linux
        .set_resources(Some(resources))
        .set_namespaces(Some(
            [
                LinuxNamespaceType::Pid,
                LinuxNamespaceType::Ipc,
                LinuxNamespaceType::Uts,
                LinuxNamespaceType::Mount,
                LinuxNamespaceType::Network,
            ]
            .into_iter()
            .map(namespace)
            .collect(),
        ))
        .set_masked_paths(Some(default_masked_paths()))
        .set_readonly_paths(Some(default_readonly_paths()))
        .set_sysctl(None)
        .set_devices(None);

    let mut spec = Spec::default();
    spec.set_version(SPEC_VERSION.to_string())
        .set_root(Some(root))
        .set_mounts(Some(default_mounts()))
        .set_process(Some(process))
        .set_hostname(None)
        .set_annotations(Some(HashMap::new()))
        .set_linux(Some(linux));
    spec
}

/// What containerd's CRI strips from the default for every pod: the `/run` tmpfs (not in our
/// default), default rlimits (pods inherit the runtime's, kubernetes/kubernetes#5203), any
/// seccomp or AppArmor profile (chosen later from the security context).
pub(crate) fn without_default_security(spec: &mut Spec) {
    if let Some(p) = spec.process_mut() {
        p.set_rlimits(None).set_apparmor_profile(None);
    }
    if let Some(l) = spec.linux_mut() {
        l.set_seccomp(None);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn default_spec_matches_containerd() {
        let spec = default_spec();
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["root"]["path"], "rootfs");
        assert_eq!(json["process"]["cwd"], "/");
        assert_eq!(json["process"]["noNewPrivileges"], true);
        assert_eq!(json["process"]["rlimits"][0]["type"], "RLIMIT_NOFILE");
        assert!(json.get("hostname").is_none());
        let ns: Vec<_> = json["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ns, ["pid", "ipc", "uts", "mount", "network"]);
        let dests: Vec<_> = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m.destination().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            dests,
            [
                "/proc",
                "/dev",
                "/dev/pts",
                "/dev/shm",
                "/dev/mqueue",
                "/sys",
                "/sys/fs/cgroup"
            ]
        );
        let caps = json["process"]["capabilities"]["bounding"]
            .as_array()
            .unwrap();
        assert_eq!(caps.len(), 14);
        assert!(caps.contains(&serde_json::json!("CAP_NET_BIND_SERVICE")));
        assert!(json["process"]["capabilities"].get("ambient").is_none());
        let devices = json["linux"]["resources"]["devices"].as_array().unwrap();
        assert_eq!(devices[0]["allow"], false);
        assert_eq!(devices[0]["access"], "rwm");
        assert!(devices[1..].iter().all(|d| d["allow"] == true));
        assert!(
            devices
                .iter()
                .any(|d| d["major"] == 1 && d["minor"] == 3 && d["type"] == "c")
        );
        assert_eq!(
            json["linux"]["maskedPaths"].as_array().unwrap().len(),
            default_masked_paths().len()
        );
    }

    #[test]
    fn without_default_security_drops_rlimits() {
        let mut spec = default_spec();
        without_default_security(&mut spec);
        assert!(spec.process().as_ref().unwrap().rlimits().is_none());
    }
}
