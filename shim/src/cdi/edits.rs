//! Applying a set of CDI container edits to an OCI runtime spec, by the reference's rules:
//!
//! - env: each `KEY=value` replaces the entry of the same key where it stands, else is appended;
//! - device nodes: type and major/minor taken from the host node (`lstat`, no symlinks
//!   followed, as the reference) when the spec leaves them out; owner defaulting to the
//!   process's uid/gid unless root; an entry at the same path is replaced; block and char
//!   devices get a device cgroup allow rule with the node's permissions (`rwm` by default,
//!   none for `none`);
//! - mounts: one at the same destination is replaced, then all mounts are ordered (stably) by
//!   the depth of their destination, so a parent is mounted before what goes inside it;
//! - hooks: appended to their lifecycle point;
//! - Intel RDT: set (the last device's wins); net devices: added by host name;
//! - additional GIDs: appended unless present; 0 is skipped.
//!
//! Stats host devices: call it off the async runtime.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use oci_spec::runtime::{
    Hook as OciHook, Hooks, LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, LinuxIntelRdt,
    LinuxNetDevice, Mount as OciMount, Spec,
};

use super::spec::{ContainerEdits, DeviceNode, Hook, IntelRdt, Mount};
use super::validate::NO_PERMISSIONS;

/// Applies `edits` to `spec` in place; the error says which edit could not be made.
pub fn apply(spec: &mut Spec, edits: &ContainerEdits) -> Result<(), String> {
    if !edits.env.is_empty() {
        let process = spec.process_mut().get_or_insert_with(Default::default);
        let env = process.env_mut().get_or_insert_with(Vec::new);
        set_env(env, &edits.env);
    }
    for node in &edits.device_nodes {
        add_device(spec, node)?;
    }
    if !edits.net_devices.is_empty() {
        let linux = spec.linux_mut().get_or_insert_with(Default::default);
        let nets = linux.net_devices_mut().get_or_insert_with(Default::default);
        for d in &edits.net_devices {
            let mut dev = LinuxNetDevice::default();
            dev.set_name(Some(d.name.clone()));
            nets.insert(d.host_interface_name.clone(), dev);
        }
    }
    if !edits.mounts.is_empty() {
        let mounts = spec.mounts_mut().get_or_insert_with(Vec::new);
        for m in &edits.mounts {
            let dest = Path::new(&m.container_path);
            mounts.retain(|old| old.destination() != dest);
            mounts.push(oci_mount(m));
        }
        // Stable: mounts of the same depth keep the order they were given in.
        mounts.sort_by_key(|m| depth(m.destination()));
    }
    for h in &edits.hooks {
        add_hook(spec, h)?;
    }
    if let Some(rdt) = &edits.intel_rdt {
        let rdt = oci_intel_rdt(rdt)?;
        spec.linux_mut()
            .get_or_insert_with(Default::default)
            .set_intel_rdt(Some(rdt));
    }
    if edits.additional_gids.iter().any(|&g| g != 0) {
        let process = spec.process_mut().get_or_insert_with(Default::default);
        let gids = process
            .user_mut()
            .additional_gids_mut()
            .get_or_insert_with(Vec::new);
        for &gid in &edits.additional_gids {
            if gid != 0 && !gids.contains(&gid) {
                gids.push(gid);
            }
        }
    }
    Ok(())
}

/// runtime-tools' `AddMultipleProcessEnv`: set in place by key, else append.
fn set_env(env: &mut Vec<String>, edits: &[String]) {
    let key = |e: &str| e.split_once('=').map_or(e, |(k, _)| k).to_string();
    for e in edits {
        let k = key(e);
        match env.iter().position(|old| key(old) == k) {
            Some(i) => env[i] = e.clone(),
            None => env.push(e.clone()),
        }
    }
}

/// A device node's type and numbers as the host has them: what the spec leaves out.
struct HostNode {
    typ: &'static str,
    major: i64,
    minor: i64,
}

fn host_node(path: &str) -> Result<HostNode, String> {
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| format!("failed to stat CDI host device {path:?}: {e}"))?;
    let ft = meta.file_type();
    let typ = if ft.is_block_device() {
        "b"
    } else if ft.is_char_device() {
        "c"
    } else if ft.is_fifo() {
        "p"
    } else {
        return Err(format!(
            "failed to stat CDI host device {path:?}: not a device node"
        ));
    };
    let rdev = meta.rdev();
    let num = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    Ok(HostNode {
        typ,
        major: num(nix::sys::stat::major(rdev)),
        minor: num(nix::sys::stat::minor(rdev)),
    })
}

/// The reference's `fillMissingInfo`: a typed node with a major number (or a FIFO) is taken
/// as written; otherwise the host node fills in what is missing and must agree on the type.
fn filled(node: &DeviceNode) -> Result<DeviceNode, String> {
    let mut node = node.clone();
    if node.host_path.is_empty() {
        node.host_path.clone_from(&node.path);
    }
    if !node.typ.is_empty() && (node.major != 0 || node.typ == "p") {
        return Ok(node);
    }
    let host = host_node(&node.host_path)?;
    if node.typ.is_empty() {
        node.typ = host.typ.to_string();
    } else if node.typ != host.typ {
        return Err(format!(
            "CDI device ({:?}, {:?}), host type mismatch ({}, {})",
            node.path, node.host_path, node.typ, host.typ
        ));
    }
    if node.major == 0 && node.typ != "p" {
        node.major = host.major;
        node.minor = host.minor;
    }
    Ok(node)
}

fn device_type(typ: &str) -> Result<LinuxDeviceType, String> {
    Ok(match typ {
        "b" => LinuxDeviceType::B,
        "c" => LinuxDeviceType::C,
        "u" => LinuxDeviceType::U,
        "p" => LinuxDeviceType::P,
        other => return Err(format!("invalid device type {other:?}")),
    })
}

fn add_device(spec: &mut Spec, node: &DeviceNode) -> Result<(), String> {
    let node = filled(node)?;
    let typ = device_type(&node.typ)?;
    // The process's identity owns the node unless the spec says otherwise (root needs
    // nothing: runc creates nodes owned by root).
    let user = spec.process().as_ref().map(|p| p.user());
    let uid = node.uid.or(user.map(|u| u.uid()).filter(|&u| u > 0));
    let gid = node.gid.or(user.map(|u| u.gid()).filter(|&g| g > 0));
    let mut dev = LinuxDevice::default();
    dev.set_path(PathBuf::from(&node.path))
        .set_typ(typ)
        .set_major(node.major)
        .set_minor(node.minor)
        .set_file_mode(node.file_mode)
        .set_uid(uid)
        .set_gid(gid);
    let linux = spec.linux_mut().get_or_insert_with(Default::default);
    let devices = linux.devices_mut().get_or_insert_with(Vec::new);
    devices.retain(|d| d.path() != Path::new(&node.path));
    devices.push(dev);
    if matches!(typ, LinuxDeviceType::B | LinuxDeviceType::C) {
        let access = match node.permissions.as_str() {
            "" => Some("rwm".to_string()),
            NO_PERMISSIONS => None,
            p => Some(p.to_string()),
        };
        let mut rule = LinuxDeviceCgroup::default();
        rule.set_allow(true)
            .set_typ(Some(typ))
            .set_major(Some(node.major))
            .set_minor(Some(node.minor))
            .set_access(access);
        linux
            .resources_mut()
            .get_or_insert_with(Default::default)
            .devices_mut()
            .get_or_insert_with(Vec::new)
            .push(rule);
    }
    Ok(())
}

fn oci_mount(m: &Mount) -> OciMount {
    let mut mount = OciMount::default();
    mount
        .set_destination(PathBuf::from(&m.container_path))
        .set_source(Some(PathBuf::from(&m.host_path)))
        .set_typ((!m.typ.is_empty()).then(|| m.typ.clone()))
        .set_options((!m.options.is_empty()).then(|| m.options.clone()));
    mount
}

/// The number of separators in the cleaned destination (`/` is 1, `/a/b` is 2): how the
/// reference orders mounts.
fn depth(dest: &Path) -> usize {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in dest.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::ParentDir => {
                parts.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    if dest.has_root() {
        parts.len().max(1)
    } else {
        parts.len().saturating_sub(1)
    }
}

fn add_hook(spec: &mut Spec, h: &Hook) -> Result<(), String> {
    let mut hook = OciHook::default();
    hook.set_path(PathBuf::from(&h.path))
        .set_args((!h.args.is_empty()).then(|| h.args.clone()))
        .set_env((!h.env.is_empty()).then(|| h.env.clone()))
        .set_timeout(h.timeout);
    let hooks = spec.hooks_mut().get_or_insert_with(Hooks::default);
    #[allow(deprecated)] // prestart: deprecated by OCI, still run by runc and still in CDI
    let list = match h.hook_name.as_str() {
        "prestart" => hooks.prestart_mut(),
        "createRuntime" => hooks.create_runtime_mut(),
        "createContainer" => hooks.create_container_mut(),
        "startContainer" => hooks.start_container_mut(),
        "poststart" => hooks.poststart_mut(),
        "poststop" => hooks.poststop_mut(),
        other => return Err(format!("unknown hook name {other:?}")),
    };
    list.get_or_insert_with(Vec::new).push(hook);
    Ok(())
}

/// The runtime spec we write (oci-spec 0.8, runtime-spec 1.2) has no `schemata` or
/// `enableMonitoring`: a spec asking for them is refused rather than half applied.
fn oci_intel_rdt(r: &IntelRdt) -> Result<LinuxIntelRdt, String> {
    if r.schemata.is_some() || r.enable_monitoring.is_some() {
        return Err(
            "intelRdt.schemata and intelRdt.enableMonitoring are not supported by this runtime"
                .into(),
        );
    }
    let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let mut rdt = LinuxIntelRdt::default();
    rdt.set_clos_id(text(&r.clos_id))
        .set_l3_cache_schema(text(&r.l3_cache_schema))
        .set_mem_bw_schema(text(&r.mem_bw_schema))
        .set_enable_cmt(r.enable_cmt)
        .set_enable_mbm(r.enable_mbm);
    Ok(rdt)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::spec::NetDevice;
    use super::*;

    fn base() -> Spec {
        let mut spec = Spec::default();
        let p = spec.process_mut().as_mut().unwrap();
        p.set_env(Some(vec!["PATH=/bin".into(), "A=old".into()]));
        p.user_mut().set_uid(0).set_gid(0);
        spec
    }

    fn node(path: &str, host: &str) -> DeviceNode {
        DeviceNode {
            path: path.into(),
            host_path: host.into(),
            ..Default::default()
        }
    }

    fn devices(spec: &Spec) -> Vec<LinuxDevice> {
        spec.linux()
            .as_ref()
            .unwrap()
            .devices()
            .clone()
            .unwrap_or_default()
    }

    fn rules(spec: &Spec) -> Vec<LinuxDeviceCgroup> {
        spec.linux()
            .as_ref()
            .unwrap()
            .resources()
            .as_ref()
            .unwrap()
            .devices()
            .clone()
            .unwrap()
    }

    #[test]
    fn env_replaces_by_key_and_appends_the_rest() {
        let mut spec = base();
        apply(
            &mut spec,
            &ContainerEdits {
                env: vec!["A=new".into(), "B=1".into(), "B=2".into()],
                ..Default::default()
            },
        )
        .unwrap();
        let env = spec.process().as_ref().unwrap().env().clone().unwrap();
        assert_eq!(env, ["PATH=/bin", "A=new", "B=2"]);
    }

    #[test]
    fn device_nodes_take_what_is_missing_from_the_host() {
        let mut spec = base();
        let edits = ContainerEdits {
            device_nodes: vec![
                node("/dev/ferrolet0", "/dev/null"),
                DeviceNode {
                    permissions: "rw".into(),
                    file_mode: Some(0o600),
                    uid: Some(7),
                    ..node("/dev/zero", "")
                },
                // Typed with a major number: taken as written, never stat'ed.
                DeviceNode {
                    typ: "b".into(),
                    major: 8,
                    minor: 1,
                    permissions: NO_PERMISSIONS.into(),
                    ..node("/dev/sdz1", "/does/not/exist")
                },
            ],
            ..Default::default()
        };
        apply(&mut spec, &edits).unwrap();
        let d = devices(&spec);
        assert_eq!(d.len(), 3);
        assert_eq!(d[0].path(), Path::new("/dev/ferrolet0"));
        assert_eq!(
            (d[0].typ(), d[0].major(), d[0].minor()),
            (LinuxDeviceType::C, 1, 3)
        );
        // Root's uid/gid are not written: runc's nodes are root's already.
        assert_eq!((d[0].uid(), d[0].gid()), (None, None));
        assert_eq!((d[1].major(), d[1].minor()), (1, 5));
        assert_eq!((d[1].file_mode(), d[1].uid()), (Some(0o600), Some(7)));
        assert_eq!((d[2].typ(), d[2].major()), (LinuxDeviceType::B, 8));
        let r = rules(&spec);
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].major(), r[0].minor(), r[0].access().as_deref()),
            (Some(1), Some(3), Some("rwm"))
        );
        assert_eq!(r[1].access().as_deref(), Some("rw"));
        assert_eq!(r[2].access().as_deref(), None);
        assert!(r.iter().all(|r| r.allow()));
    }

    #[test]
    fn device_nodes_replace_one_at_the_same_path_and_get_the_process_owner() {
        let mut spec = base();
        spec.process_mut()
            .as_mut()
            .unwrap()
            .user_mut()
            .set_uid(1000)
            .set_gid(2000);
        let once = ContainerEdits {
            device_nodes: vec![node("/dev/x", "/dev/null")],
            ..Default::default()
        };
        apply(&mut spec, &once).unwrap();
        apply(
            &mut spec,
            &ContainerEdits {
                device_nodes: vec![node("/dev/x", "/dev/zero")],
                ..Default::default()
            },
        )
        .unwrap();
        let d = devices(&spec);
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].minor(), d[0].uid(), d[0].gid()),
            (5, Some(1000), Some(2000))
        );
    }

    #[test]
    fn device_node_errors_name_the_host_path() {
        let err = apply(
            &mut base(),
            &ContainerEdits {
                device_nodes: vec![node("/dev/x", "/dev/ferrolet-missing")],
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(
            err.contains("failed to stat CDI host device \"/dev/ferrolet-missing\""),
            "{err}"
        );
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("plain");
        std::fs::write(&file, "").unwrap();
        let err = apply(
            &mut base(),
            &ContainerEdits {
                device_nodes: vec![node("/dev/x", file.to_str().unwrap())],
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.contains("not a device node"), "{err}");
        let err = apply(
            &mut base(),
            &ContainerEdits {
                device_nodes: vec![DeviceNode {
                    typ: "b".into(),
                    ..node("/dev/x", "/dev/null")
                }],
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.contains("host type mismatch (b, c)"), "{err}");
    }

    #[test]
    fn mounts_replace_by_destination_and_sort_by_depth() {
        let mut spec = base();
        let m = |dest: &str| {
            let mut m = OciMount::default();
            m.set_destination(dest.into());
            m
        };
        spec.set_mounts(Some(vec![m("/proc"), m("/dev"), m("/dev/pts"), m("/data")]));
        let edits = ContainerEdits {
            mounts: vec![
                Mount {
                    host_path: "/host/lib".into(),
                    container_path: "/usr/lib/vendor".into(),
                    options: vec!["ro".into(), "bind".into()],
                    typ: String::new(),
                },
                Mount {
                    host_path: "/host/data".into(),
                    container_path: "/data".into(),
                    options: vec![],
                    typ: "bind".into(),
                },
                Mount {
                    host_path: "/host/opt".into(),
                    container_path: "/opt/".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        apply(&mut spec, &edits).unwrap();
        let mounts = spec.mounts().clone().unwrap();
        let dests: Vec<_> = mounts
            .iter()
            .map(|m| m.destination().display().to_string())
            .collect();
        assert_eq!(
            dests,
            [
                "/proc",
                "/dev",
                "/data",
                "/opt/",
                "/dev/pts",
                "/usr/lib/vendor"
            ]
        );
        let data = &mounts[2];
        assert_eq!(data.source().as_deref(), Some(Path::new("/host/data")));
        assert_eq!(data.typ().as_deref(), Some("bind"));
        assert_eq!(
            mounts[5].options().clone().unwrap(),
            ["ro".to_string(), "bind".to_string()]
        );
        assert_eq!(mounts[5].typ(), &None);
    }

    #[test]
    fn depth_counts_separators_of_the_clean_path() {
        assert_eq!(depth(Path::new("/")), 1);
        assert_eq!(depth(Path::new("/a")), 1);
        assert_eq!(depth(Path::new("/a/b/")), 2);
        assert_eq!(depth(Path::new("/a/../b/c")), 2);
        assert_eq!(depth(Path::new("a/b")), 1);
    }

    #[test]
    fn hooks_go_to_their_lifecycle_point() {
        let mut spec = base();
        let hook = |name: &str| Hook {
            hook_name: name.into(),
            path: format!("/bin/{name}"),
            args: vec![name.into()],
            env: vec!["X=1".into()],
            timeout: Some(3),
        };
        let edits = ContainerEdits {
            hooks: crate::cdi::validate::HOOK_NAMES
                .iter()
                .map(|n| hook(n))
                .collect(),
            ..Default::default()
        };
        apply(&mut spec, &edits).unwrap();
        let hooks = spec.hooks().clone().unwrap();
        #[allow(deprecated)]
        let prestart = hooks.prestart().clone().unwrap();
        assert_eq!(prestart[0].path(), Path::new("/bin/prestart"));
        assert_eq!(prestart[0].timeout(), Some(3));
        for (list, name) in [
            (hooks.create_runtime(), "createRuntime"),
            (hooks.create_container(), "createContainer"),
            (hooks.start_container(), "startContainer"),
            (hooks.poststart(), "poststart"),
            (hooks.poststop(), "poststop"),
        ] {
            let list = list.clone().unwrap();
            assert_eq!(list.len(), 1, "{name}");
            assert_eq!(list[0].args().clone().unwrap(), [name.to_string()]);
        }
    }

    #[test]
    fn gids_rdt_and_net_devices() {
        let mut spec = base();
        spec.process_mut()
            .as_mut()
            .unwrap()
            .user_mut()
            .set_additional_gids(Some(vec![0, 10]));
        let edits = ContainerEdits {
            additional_gids: vec![0, 10, 44, 44],
            intel_rdt: Some(IntelRdt {
                clos_id: "gold".into(),
                enable_cmt: Some(true),
                ..Default::default()
            }),
            net_devices: vec![NetDevice {
                host_interface_name: "eth9".into(),
                name: "net0".into(),
            }],
            ..Default::default()
        };
        apply(&mut spec, &edits).unwrap();
        let user = spec.process().as_ref().unwrap().user().clone();
        assert_eq!(user.additional_gids().clone().unwrap(), [0, 10, 44]);
        let linux = spec.linux().as_ref().unwrap();
        let rdt = linux.intel_rdt().clone().unwrap();
        assert_eq!(rdt.clos_id().as_deref(), Some("gold"));
        assert_eq!(*rdt.enable_cmt(), Some(true));
        let nets = linux.net_devices().clone().unwrap();
        assert_eq!(nets["eth9"].name().as_deref(), Some("net0"));
        let err = apply(
            &mut spec,
            &ContainerEdits {
                intel_rdt: Some(IntelRdt {
                    schemata: Some(vec!["L3:0=f".into()]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.contains("not supported"), "{err}");
    }
}
