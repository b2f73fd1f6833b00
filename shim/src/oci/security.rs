//! Capabilities (CRI add/drop with `ALL`), privileged mode, and masked/readonly paths.

use std::sync::OnceLock;

use ferrolet_proto::cri;
use oci_spec::runtime::{Capabilities, Capability, Spec};

use super::OciError;
use super::defaults::capability_sets;

/// Every capability oci-spec knows, with its kernel number.
const CAPABILITIES: &[(&str, u8, Capability)] = &[
    ("CHOWN", 0, Capability::Chown),
    ("DAC_OVERRIDE", 1, Capability::DacOverride),
    ("DAC_READ_SEARCH", 2, Capability::DacReadSearch),
    ("FOWNER", 3, Capability::Fowner),
    ("FSETID", 4, Capability::Fsetid),
    ("KILL", 5, Capability::Kill),
    ("SETGID", 6, Capability::Setgid),
    ("SETUID", 7, Capability::Setuid),
    ("SETPCAP", 8, Capability::Setpcap),
    ("LINUX_IMMUTABLE", 9, Capability::LinuxImmutable),
    ("NET_BIND_SERVICE", 10, Capability::NetBindService),
    ("NET_BROADCAST", 11, Capability::NetBroadcast),
    ("NET_ADMIN", 12, Capability::NetAdmin),
    ("NET_RAW", 13, Capability::NetRaw),
    ("IPC_LOCK", 14, Capability::IpcLock),
    ("IPC_OWNER", 15, Capability::IpcOwner),
    ("SYS_MODULE", 16, Capability::SysModule),
    ("SYS_RAWIO", 17, Capability::SysRawio),
    ("SYS_CHROOT", 18, Capability::SysChroot),
    ("SYS_PTRACE", 19, Capability::SysPtrace),
    ("SYS_PACCT", 20, Capability::SysPacct),
    ("SYS_ADMIN", 21, Capability::SysAdmin),
    ("SYS_BOOT", 22, Capability::SysBoot),
    ("SYS_NICE", 23, Capability::SysNice),
    ("SYS_RESOURCE", 24, Capability::SysResource),
    ("SYS_TIME", 25, Capability::SysTime),
    ("SYS_TTY_CONFIG", 26, Capability::SysTtyConfig),
    ("MKNOD", 27, Capability::Mknod),
    ("LEASE", 28, Capability::Lease),
    ("AUDIT_WRITE", 29, Capability::AuditWrite),
    ("AUDIT_CONTROL", 30, Capability::AuditControl),
    ("SETFCAP", 31, Capability::Setfcap),
    ("MAC_OVERRIDE", 32, Capability::MacOverride),
    ("MAC_ADMIN", 33, Capability::MacAdmin),
    ("SYSLOG", 34, Capability::Syslog),
    ("WAKE_ALARM", 35, Capability::WakeAlarm),
    ("BLOCK_SUSPEND", 36, Capability::BlockSuspend),
    ("AUDIT_READ", 37, Capability::AuditRead),
    ("PERFMON", 38, Capability::Perfmon),
    ("BPF", 39, Capability::Bpf),
    ("CHECKPOINT_RESTORE", 40, Capability::CheckpointRestore),
];

/// The highest capability this kernel has (what `ALL` means).
fn last_cap() -> u8 {
    static LAST: OnceLock<u8> = OnceLock::new();
    *LAST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(40)
    })
}

/// Every capability the kernel knows.
pub(crate) fn all_known() -> Capabilities {
    let last = last_cap();
    CAPABILITIES
        .iter()
        .filter(|(_, n, _)| *n <= last)
        .map(|(_, _, c)| *c)
        .collect()
}

/// The capabilities this process holds, which a privileged container inherits.
fn current() -> Capabilities {
    static CURRENT: OnceLock<Option<u64>> = OnceLock::new();
    let mask = CURRENT.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
        u64::from_str_radix(hex.trim(), 16).ok()
    });
    match mask {
        Some(mask) => CAPABILITIES
            .iter()
            .filter(|(_, n, _)| mask & (1u64 << n) != 0)
            .map(|(_, _, c)| *c)
            .collect(),
        None => all_known(),
    }
}

/// A CRI capability name (`NET_ADMIN`, `CAP_NET_ADMIN`, any case).
fn parse_capability(name: &str) -> Option<Capability> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    CAPABILITIES
        .iter()
        .find(|(n, _, _)| *n == bare)
        .map(|(_, _, c)| *c)
}

/// The bounding set of the spec's process.
pub(crate) fn bounding(spec: &Spec) -> Capabilities {
    spec.process()
        .as_ref()
        .and_then(|p| p.capabilities().as_ref())
        .and_then(|c| c.bounding().clone())
        .unwrap_or_default()
}

fn set_capabilities(spec: &mut Spec, caps: Capabilities) {
    if let Some(p) = spec.process_mut() {
        p.set_capabilities(Some(capability_sets(caps)));
    }
}

/// Applies CRI add/drop lists: `ALL` first (so `add: [ALL], drop: [CHOWN]` works), then single
/// capabilities.
pub(crate) fn apply_capabilities(
    spec: &mut Spec,
    requested: Option<&cri::Capability>,
    field: &str,
) -> Result<(), OciError> {
    let Some(requested) = requested else {
        return Ok(());
    };
    let is_all = |c: &String| c.trim().eq_ignore_ascii_case("ALL");
    let parse_list = |list: &[String], which: &str| -> Result<Vec<Capability>, OciError> {
        list.iter()
            .filter(|c| !is_all(c))
            .map(|c| {
                parse_capability(c).ok_or_else(|| {
                    OciError::invalid(format!("{field}.{which}"), c, "unknown capability")
                })
            })
            .collect()
    };
    let add = parse_list(&requested.add_capabilities, "add_capabilities")?;
    let drop = parse_list(&requested.drop_capabilities, "drop_capabilities")?;

    let mut caps = bounding(spec);
    if requested.add_capabilities.iter().any(is_all) {
        // Only what we hold ourselves can be granted: runc fails on anything beyond our
        // bounding set (these VMs lack CAP_SYS_RESOURCE), as containerd's `cap.Current()`.
        caps = current();
    }
    if requested.drop_capabilities.iter().any(is_all) {
        caps.clear();
    }
    caps.extend(add);
    for c in &drop {
        caps.remove(c);
    }
    set_capabilities(spec, caps);
    Ok(())
}

/// What `privileged: true` lifts: all of this process's capabilities, no masked or readonly
/// paths, writable sysfs and cgroupfs. Seccomp and devices are handled by their own modules.
pub(crate) fn apply_privileged(spec: &mut Spec) {
    set_capabilities(spec, current());
    if let Some(l) = spec.linux_mut() {
        l.set_masked_paths(None).set_readonly_paths(None);
    }
    if let Some(p) = spec.process_mut() {
        p.set_apparmor_profile(None).set_selinux_label(None);
    }
    for m in spec.mounts_mut().iter_mut().flatten() {
        let writable = matches!(m.typ().as_deref(), Some("sysfs" | "cgroup"));
        if let (true, Some(opts)) = (writable, m.options_mut()) {
            for o in opts.iter_mut().filter(|o| *o == "ro") {
                *o = "rw".to_string();
            }
        }
    }
}

/// Masked and readonly paths of a container: none by default (containerd#5029: kubelet sends
/// the defaults it wants), else what the request lists.
pub(crate) fn apply_paths(spec: &mut Spec, sc: &cri::LinuxContainerSecurityContext) {
    if let Some(l) = spec.linux_mut() {
        l.set_masked_paths(Some(sc.masked_paths.clone()))
            .set_readonly_paths(Some(sc.readonly_paths.clone()));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::defaults::default_spec;
    use super::*;

    fn caps(add: &[&str], drop: &[&str]) -> cri::Capability {
        cri::Capability {
            add_capabilities: add.iter().map(|s| s.to_string()).collect(),
            drop_capabilities: drop.iter().map(|s| s.to_string()).collect(),
            add_ambient_capabilities: vec![],
        }
    }

    fn apply(add: &[&str], drop: &[&str]) -> Result<Capabilities, OciError> {
        let mut spec = default_spec();
        apply_capabilities(&mut spec, Some(&caps(add, drop)), "sc.capabilities")?;
        let p = spec.process().as_ref().unwrap();
        let sets = p.capabilities().as_ref().unwrap();
        assert_eq!(sets.bounding(), sets.effective());
        assert_eq!(sets.bounding(), sets.permitted());
        assert!(sets.ambient().is_none() && sets.inheritable().is_none());
        Ok(bounding(&spec))
    }

    #[test]
    fn add_and_drop_single_capabilities() {
        let c = apply(&["NET_ADMIN", "cap_sys_time"], &["CHOWN", "CAP_KILL"]).unwrap();
        assert!(c.contains(&Capability::NetAdmin));
        assert!(c.contains(&Capability::SysTime));
        assert!(!c.contains(&Capability::Chown));
        assert!(!c.contains(&Capability::Kill));
        assert!(c.contains(&Capability::Setuid));
        assert_eq!(c.len(), 14);
    }

    #[test]
    fn all_is_applied_before_single_names() {
        let c = apply(&["ALL"], &["CHOWN"]).unwrap();
        assert_eq!(c.len(), current().len() - 1);
        assert!(c.contains(&Capability::SysAdmin));
        assert!(!c.contains(&Capability::Chown));
        let c = apply(&["NET_RAW"], &["all"]).unwrap();
        assert_eq!(c.into_iter().collect::<Vec<_>>(), [Capability::NetRaw]);
        assert!(apply(&[], &["ALL"]).unwrap().is_empty());
    }

    #[test]
    fn unknown_capabilities_are_invalid() {
        let err = apply(&["CAP_FOO"], &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "sc.capabilities.add_capabilities \"CAP_FOO\": unknown capability"
        );
        assert!(apply(&[], &["bogus"]).is_err());
    }

    #[test]
    fn no_request_keeps_defaults() {
        let mut spec = default_spec();
        apply_capabilities(&mut spec, None, "x").unwrap();
        assert_eq!(bounding(&spec).len(), 14);
    }

    #[test]
    fn privileged_lifts_restrictions() {
        let mut spec = default_spec();
        apply_privileged(&mut spec);
        // Tests run as root with every capability.
        assert_eq!(bounding(&spec), current());
        assert!(bounding(&spec).contains(&Capability::SysAdmin));
        let l = spec.linux().as_ref().unwrap();
        assert!(l.masked_paths().is_none() && l.readonly_paths().is_none());
        for m in spec.mounts().as_ref().unwrap() {
            if matches!(m.typ().as_deref(), Some("sysfs" | "cgroup")) {
                let o = m.options().as_ref().unwrap();
                assert!(o.contains(&"rw".to_string()) && !o.contains(&"ro".to_string()));
            }
        }
    }

    #[test]
    fn known_capabilities_follow_the_kernel() {
        let known = all_known();
        assert_eq!(known.len(), usize::from(last_cap().min(40)) + 1);
        assert_eq!(
            parse_capability("Cap_Net_Admin"),
            Some(Capability::NetAdmin)
        );
        assert_eq!(parse_capability("ALL"), None);
    }
}
