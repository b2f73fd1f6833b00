//! Device nodes: the ones a container asks for (created in its /dev and allowed in its device
//! cgroup), and every host device for privileged containers.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use ferrolet_proto::cri;
use oci_spec::runtime::{LinuxDevice, LinuxDeviceType, Spec};

use super::OciError;
use super::defaults::device_rule;

/// /dev entries that are mounts or runtime-managed, never device nodes to copy.
const SKIPPED_DIRS: &[&str] = &["pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"];

/// The node at `path` (not following a final symlink), or `None` when it is no device.
fn device_at(path: &Path) -> std::io::Result<Option<LinuxDevice>> {
    let meta = std::fs::symlink_metadata(path)?;
    let ft = meta.file_type();
    let typ = if ft.is_block_device() {
        LinuxDeviceType::B
    } else if ft.is_char_device() {
        LinuxDeviceType::C
    } else if ft.is_fifo() {
        LinuxDeviceType::P
    } else {
        return Ok(None);
    };
    let rdev = meta.rdev();
    let mut dev = LinuxDevice::default();
    dev.set_path(path.to_path_buf())
        .set_typ(typ)
        .set_major(i64::try_from(nix::sys::stat::major(rdev)).unwrap_or(i64::MAX))
        .set_minor(i64::try_from(nix::sys::stat::minor(rdev)).unwrap_or(i64::MAX))
        .set_file_mode(Some(meta.mode() & 0o7777))
        .set_uid(Some(meta.uid()))
        .set_gid(Some(meta.gid()));
    Ok(Some(dev))
}

/// Every device node under `dir`, at `container_dir` (same place when `None`) in the
/// container. FIFOs, the console and runtime-managed directories are skipped.
fn devices_under(dir: &Path, container_dir: Option<&Path>) -> std::io::Result<Vec<LinuxDevice>> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let host = entry.path();
        let inside = container_dir.map(|c| c.join(&name));
        let ft = entry.file_type()?;
        if ft.is_dir() {
            if SKIPPED_DIRS.iter().any(|s| name == *s) {
                continue;
            }
            out.extend(devices_under(&host, inside.as_deref())?);
            continue;
        }
        if name == "console" {
            continue;
        }
        match device_at(&host) {
            Ok(Some(mut dev)) if dev.typ() != LinuxDeviceType::P => {
                if let Some(inside) = inside {
                    dev.set_path(inside);
                }
                out.push(dev);
            }
            Ok(_) => {}
            // Devices come and go (hotplug); one vanishing mid-walk is not an error.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn push(spec: &mut Spec, devices: Vec<LinuxDevice>, access: Option<&str>) {
    let Some(linux) = spec.linux_mut() else {
        return;
    };
    if let Some(access) = access {
        let resources = linux.resources_mut().get_or_insert_with(Default::default);
        let rules = resources.devices_mut().get_or_insert_with(Vec::new);
        for d in &devices {
            rules.push(device_rule(
                true,
                Some(d.typ()),
                Some(d.major()),
                Some(d.minor()),
                access,
            ));
        }
    }
    linux
        .devices_mut()
        .get_or_insert_with(Vec::new)
        .extend(devices);
}

/// Adds the requested devices (a directory adds every device under it) and allows them in the
/// device cgroup with the requested permissions.
pub(crate) fn apply(spec: &mut Spec, devices: &[cri::Device]) -> Result<(), OciError> {
    for (i, d) in devices.iter().enumerate() {
        let field = format!("devices[{i}]");
        if d.host_path.is_empty() {
            return Err(OciError::invalid(
                format!("{field}.host_path"),
                "",
                "must not be empty",
            ));
        }
        let access = if d.permissions.is_empty() {
            "rwm"
        } else {
            d.permissions.as_str()
        };
        if !access.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
            return Err(OciError::invalid(
                format!("{field}.permissions"),
                &d.permissions,
                "expected a combination of r, w and m",
            ));
        }
        let not_a_device =
            |why: String| OciError::invalid(format!("{field}.host_path"), &d.host_path, why);
        let host = std::fs::canonicalize(&d.host_path)
            .map_err(|e| not_a_device(format!("no such device: {e}")))?;
        let inside = if d.container_path.is_empty() {
            PathBuf::from(&d.host_path)
        } else {
            PathBuf::from(&d.container_path)
        };
        let found = if host.is_dir() {
            devices_under(&host, Some(&inside))
                .map_err(|e| not_a_device(format!("cannot list devices: {e}")))?
        } else {
            match device_at(&host) {
                Ok(Some(mut dev)) => {
                    dev.set_path(inside);
                    vec![dev]
                }
                Ok(None) => return Err(not_a_device("not a device node".into())),
                Err(e) => return Err(not_a_device(format!("cannot stat: {e}"))),
            }
        };
        push(spec, found, Some(access));
    }
    Ok(())
}

/// A privileged container's devices: every node in the host's /dev, all allowed.
pub(crate) fn apply_host_devices(spec: &mut Spec) -> Result<(), OciError> {
    let found = devices_under(Path::new("/dev"), None).map_err(|source| OciError::Io {
        what: "listing host devices in",
        path: "/dev".into(),
        source,
    })?;
    push(spec, found, None);
    if let Some(linux) = spec.linux_mut() {
        let resources = linux.resources_mut().get_or_insert_with(Default::default);
        resources.set_devices(Some(vec![device_rule(true, None, None, None, "rwm")]));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::defaults::default_spec;
    use super::*;

    fn dev(host: &str, inside: &str, perms: &str) -> cri::Device {
        cri::Device {
            host_path: host.into(),
            container_path: inside.into(),
            permissions: perms.into(),
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

    #[test]
    fn requested_devices_are_created_and_allowed() {
        let mut spec = default_spec();
        apply(
            &mut spec,
            &[
                dev("/dev/null", "/dev/mynull", "rw"),
                dev("/dev/zero", "", ""),
            ],
        )
        .unwrap();
        let d = devices(&spec);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].path(), Path::new("/dev/mynull"));
        assert_eq!(
            (d[0].typ(), d[0].major(), d[0].minor()),
            (LinuxDeviceType::C, 1, 3)
        );
        assert_eq!(d[0].file_mode(), Some(0o666));
        assert_eq!(d[1].path(), Path::new("/dev/zero"));
        let rules = spec
            .linux()
            .as_ref()
            .unwrap()
            .resources()
            .as_ref()
            .unwrap()
            .devices()
            .clone()
            .unwrap();
        let last: Vec<_> = rules.iter().rev().take(2).collect();
        assert_eq!(last[1].access().as_deref(), Some("rw"));
        assert_eq!((last[1].major(), last[1].minor()), (Some(1), Some(3)));
        assert_eq!(last[0].access().as_deref(), Some("rwm"));
        assert!(last.iter().all(|r| r.allow()));
    }

    #[test]
    fn symlinked_devices_resolve() {
        let tmp = tempfile::tempdir().unwrap();
        let link = tmp.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let mut spec = default_spec();
        apply(&mut spec, &[dev(link.to_str().unwrap(), "/dev/n", "rwm")]).unwrap();
        assert_eq!(devices(&spec)[0].major(), 1);
    }

    #[test]
    fn device_directories_expand() {
        let tmp = tempfile::tempdir().unwrap();
        nix::sys::stat::mknod(
            &tmp.path().join("c13"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        std::fs::write(tmp.path().join("plain"), "").unwrap();
        let mut spec = default_spec();
        apply(
            &mut spec,
            &[dev(tmp.path().to_str().unwrap(), "/dev/sub", "r")],
        )
        .unwrap();
        let d = devices(&spec);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].path(), Path::new("/dev/sub/c13"));
        assert_eq!(d[0].file_mode(), Some(0o600));
    }

    #[test]
    fn bad_devices_are_invalid() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, "").unwrap();
        for (d, want) in [
            (
                dev("", "/x", "rw"),
                "devices[0].host_path \"\": must not be empty",
            ),
            (dev("/dev/nope-missing", "/x", "rw"), "no such device"),
            (dev(file.to_str().unwrap(), "/x", "rw"), "not a device node"),
            (
                dev("/dev/null", "/x", "rwx"),
                "expected a combination of r, w and m",
            ),
        ] {
            let err = apply(&mut default_spec(), &[d]).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
        }
    }

    #[test]
    fn host_devices_for_privileged() {
        let mut spec = default_spec();
        apply_host_devices(&mut spec).unwrap();
        let d = devices(&spec);
        assert!(d.iter().any(|d| d.path() == Path::new("/dev/null")));
        assert!(!d.iter().any(|d| d.path().starts_with("/dev/pts")));
        assert!(!d.iter().any(|d| d.path() == Path::new("/dev/console")));
        let rules = spec
            .linux()
            .as_ref()
            .unwrap()
            .resources()
            .as_ref()
            .unwrap()
            .devices()
            .clone()
            .unwrap();
        assert_eq!(rules.len(), 1);
        assert!(rules[0].allow() && rules[0].typ().is_none());
    }
}
