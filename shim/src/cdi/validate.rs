//! What makes a spec file valid, with the reference's rules: a released version that has every
//! field used, a well-formed kind, annotations Kubernetes would accept, well-formed edits, and
//! at least one device, each named once and changing something.

use std::collections::{BTreeMap, HashSet};

use super::name;
use super::spec::{ContainerEdits, DeviceNode, Hook, IntelRdt, Mount, NetDevice, SpecFile};
use super::version;

/// The hook names OCI knows.
pub const HOOK_NAMES: &[&str] = &[
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// Device cgroup permissions that ask for no access rule at all.
pub const NO_PERMISSIONS: &str = "none";

/// Kubernetes' limit on a set of annotations, keys and values together.
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// Checks a whole spec; the error is the first problem found.
pub fn spec(spec: &SpecFile) -> Result<(), String> {
    version::check(spec)?;
    let (vendor, class) = name::parse_kind(&spec.kind).unwrap_or(("", &spec.kind));
    name::validate_vendor(vendor)?;
    name::validate_class(class)?;
    annotations(&spec.kind, &spec.annotations)?;
    edits(&spec.container_edits)?;
    let mut seen = HashSet::new();
    for d in &spec.devices {
        if !seen.insert(d.name.as_str()) {
            return Err(format!("invalid spec, multiple device {:?}", d.name));
        }
        let device = || -> Result<(), String> {
            name::validate_device_name(&d.name)?;
            annotations(&format!("{}={}", spec.kind, d.name), &d.annotations)?;
            if d.container_edits.is_empty() {
                return Err("empty container edits".into());
            }
            edits(&d.container_edits)
        };
        device().map_err(|e| format!("invalid device {:?}: {e}", d.name))?;
    }
    if spec.devices.is_empty() {
        return Err("invalid spec, no devices".into());
    }
    Ok(())
}

/// Annotation keys as Kubernetes takes them (`[prefix/]name`, the name at most 63
/// characters of `[A-Za-z0-9._-]` starting and ending alphanumeric, the prefix a DNS
/// subdomain), and at most 256 KiB in all.
fn annotations(owner: &str, annotations: &BTreeMap<String, String>) -> Result<(), String> {
    let total: usize = annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > ANNOTATIONS_MAX_BYTES {
        return Err(format!(
            "{owner}.annotations: too long, must have at most {ANNOTATIONS_MAX_BYTES} bytes"
        ));
    }
    for key in annotations.keys() {
        annotation_key(key).map_err(|e| format!("{owner}.annotations: key {key:?}: {e}"))?;
    }
    Ok(())
}

fn annotation_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let bytes = name.as_bytes();
    let ok_inner = |c: &u8| c.is_ascii_alphanumeric() || b"._-".contains(c);
    let name_ok = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.iter().all(ok_inner);
    if !name_ok {
        return Err("name part must be 1-63 characters of [A-Za-z0-9._-], \
                    starting and ending with a letter or digit"
            .into());
    }
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.first()
                    .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && b.last()
                    .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        };
        if prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Err("prefix part must be a DNS subdomain".into());
        }
    }
    Ok(())
}

/// Checks one set of edits.
pub fn edits(e: &ContainerEdits) -> Result<(), String> {
    env(&e.env).map_err(|err| format!("invalid container edits: {err}"))?;
    e.device_nodes.iter().try_for_each(device_node)?;
    e.hooks.iter().try_for_each(hook)?;
    e.mounts.iter().try_for_each(mount)?;
    if let Some(rdt) = &e.intel_rdt {
        intel_rdt(rdt)?;
    }
    net_devices(&e.net_devices)
}

/// Each entry must be `KEY=value` with a non-empty key.
fn env(env: &[String]) -> Result<(), String> {
    match env.iter().find(|v| v.find('=').is_none_or(|i| i == 0)) {
        Some(bad) => Err(format!("invalid environment variable {bad:?}")),
        None => Ok(()),
    }
}

fn device_node(d: &DeviceNode) -> Result<(), String> {
    if d.path.is_empty() {
        return Err("invalid (empty) device path".into());
    }
    if !matches!(d.typ.as_str(), "" | "b" | "c" | "u" | "p") {
        return Err(format!("device {:?}: invalid type {:?}", d.path, d.typ));
    }
    // -1 would be a wildcard in a device cgroup rule.
    if d.major < 0 || d.minor < 0 {
        return Err(format!(
            "device {:?}: invalid (negative) device number {}:{}",
            d.path, d.major, d.minor
        ));
    }
    if d.permissions != NO_PERMISSIONS && !d.permissions.chars().all(|c| "rwm".contains(c)) {
        return Err(format!(
            "device {:?}: invalid permissions {:?}",
            d.path, d.permissions
        ));
    }
    Ok(())
}

fn hook(h: &Hook) -> Result<(), String> {
    if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
        return Err(format!("invalid hook name {:?}", h.hook_name));
    }
    if h.path.is_empty() {
        return Err(format!("invalid hook {:?} with empty path", h.hook_name));
    }
    env(&h.env).map_err(|e| format!("invalid hook {:?}: {e}", h.hook_name))
}

fn mount(m: &Mount) -> Result<(), String> {
    if m.host_path.is_empty() {
        return Err("invalid mount, empty host path".into());
    }
    if m.container_path.is_empty() {
        return Err("invalid mount, empty container path".into());
    }
    Ok(())
}

/// The class must be usable as a resctrl directory name; `/` is the root class.
fn intel_rdt(r: &IntelRdt) -> Result<(), String> {
    let c = r.clos_id.as_str();
    if c != "/" && (c.len() >= 4096 || c == "." || c == ".." || c.contains(['/', '\n'])) {
        return Err("invalid ClosID".into());
    }
    Ok(())
}

fn net_devices(devices: &[NetDevice]) -> Result<(), String> {
    let mut hosts = HashSet::new();
    let mut names = HashSet::new();
    for d in devices {
        if d.host_interface_name.is_empty() {
            return Err("invalid linux net device, empty HostInterfaceName".into());
        }
        if d.name.is_empty() {
            return Err("invalid linux net device, empty Name".into());
        }
        if !hosts.insert(&d.host_interface_name) {
            return Err(format!(
                "invalid linux net device, duplicate HostInterfaceName {:?}",
                d.host_interface_name
            ));
        }
        if !names.insert(&d.name) {
            return Err(format!(
                "invalid linux net device, duplicate Name {:?}",
                d.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::spec::parse;
    use super::*;

    fn valid() -> SpecFile {
        parse(
            br#"
cdiVersion: 0.6.0
kind: vendor.com/gpu
annotations: {vendor.com/note: x}
devices:
  - name: gpu0
    annotations: {plain: y}
    containerEdits:
      deviceNodes: [{path: /dev/gpu0, permissions: none}]
containerEdits:
  env: [A=1]
"#,
        )
        .unwrap()
    }

    fn err(f: impl FnOnce(&mut SpecFile)) -> String {
        let mut s = valid();
        f(&mut s);
        spec(&s).unwrap_err()
    }

    #[test]
    fn a_valid_spec_passes() {
        spec(&valid()).unwrap();
    }

    /// A change that breaks a valid spec, and what the error must say.
    type Case = (Box<dyn FnOnce(&mut SpecFile)>, &'static str);

    #[test]
    fn each_rule_has_its_message() {
        let cases: Vec<Case> = vec![
            (
                Box::new(|s| s.kind = "gpu".into()),
                "invalid vendor: empty name",
            ),
            (
                Box::new(|s| s.kind = "vendor.com/".into()),
                "invalid vendor",
            ),
            (
                Box::new(|s| s.kind = "vendor.com/g%".into()),
                "invalid class",
            ),
            (Box::new(|s| s.devices.clear()), "invalid spec, no devices"),
            (
                Box::new(|s| s.devices.push(s.devices[0].clone())),
                "multiple device \"gpu0\"",
            ),
            (
                Box::new(|s| s.devices[0].container_edits = ContainerEdits::default()),
                "invalid device \"gpu0\": empty container edits",
            ),
            (
                Box::new(|s| s.devices[0].name = "gpu_".into()),
                "should end with a letter or digit",
            ),
            (
                Box::new(|s| s.container_edits.env = vec!["=x".into()]),
                "invalid environment variable \"=x\"",
            ),
            (
                Box::new(|s| s.container_edits.env = vec!["NOVALUE".into()]),
                "invalid environment variable",
            ),
            (
                Box::new(|s| s.devices[0].container_edits.device_nodes[0].typ = "x".into()),
                "invalid type \"x\"",
            ),
            (
                Box::new(|s| s.devices[0].container_edits.device_nodes[0].major = -1),
                "negative",
            ),
            (
                Box::new(|s| {
                    s.devices[0].container_edits.device_nodes[0].permissions = "rx".into();
                }),
                "invalid permissions \"rx\"",
            ),
            (
                Box::new(|s| s.devices[0].container_edits.device_nodes[0].path.clear()),
                "invalid (empty) device path",
            ),
            (
                Box::new(|s| {
                    s.container_edits.hooks = vec![Hook {
                        hook_name: "preStart".into(),
                        path: "/x".into(),
                        ..Default::default()
                    }];
                }),
                "invalid hook name \"preStart\"",
            ),
            (
                Box::new(|s| {
                    s.container_edits.hooks = vec![Hook {
                        hook_name: "poststop".into(),
                        ..Default::default()
                    }];
                }),
                "empty path",
            ),
            (
                Box::new(|s| {
                    s.container_edits.mounts = vec![Mount {
                        host_path: "/a".into(),
                        ..Default::default()
                    }];
                }),
                "empty container path",
            ),
            (
                Box::new(|s| {
                    s.cdi_version = "0.7.0".into();
                    s.container_edits.intel_rdt = Some(IntelRdt {
                        clos_id: "..".into(),
                        ..Default::default()
                    });
                }),
                "invalid ClosID",
            ),
            (
                Box::new(|s| {
                    s.annotations.insert("Bad.Prefix/x".into(), String::new());
                }),
                "prefix part must be a DNS subdomain",
            ),
            (
                Box::new(|s| {
                    s.devices[0].annotations.insert("-x".into(), String::new());
                }),
                "vendor.com/gpu=gpu0.annotations: key \"-x\"",
            ),
        ];
        for (mutate, want) in cases {
            let got = err(mutate);
            assert!(got.contains(want), "want {want:?} in {got:?}");
        }
    }

    #[test]
    fn net_devices_are_unique_both_ways() {
        let dev = |h: &str, n: &str| NetDevice {
            host_interface_name: h.into(),
            name: n.into(),
        };
        assert!(net_devices(&[dev("a", "x"), dev("b", "y")]).is_ok());
        assert!(net_devices(&[dev("a", "x"), dev("a", "y")]).is_err());
        assert!(net_devices(&[dev("a", "x"), dev("b", "x")]).is_err());
        assert!(net_devices(&[dev("", "x")]).is_err());
    }

    #[test]
    fn root_clos_is_allowed() {
        assert!(
            intel_rdt(&IntelRdt {
                clos_id: "/".into(),
                ..Default::default()
            })
            .is_ok()
        );
    }
}
