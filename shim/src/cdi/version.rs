//! Spec versions: which `cdiVersion`s exist, and the oldest version a spec's fields need (a
//! spec declaring 0.3.0 that uses `additionalGids` is refused, as by the reference).

use super::spec::{ContainerEdits, IntelRdt, SpecFile};

/// Every released version of the format, oldest first.
const KNOWN: &[Version] = &[
    Version(0, 1, 0),
    Version(0, 2, 0),
    Version(0, 3, 0),
    Version(0, 4, 0),
    Version(0, 5, 0),
    Version(0, 6, 0),
    Version(0, 7, 0),
    Version(0, 8, 0),
    Version(1, 0, 0),
    Version(1, 1, 0),
];

/// The oldest version whose fields every spec is held to.
const EARLIEST: Version = Version(0, 3, 0);
/// Where monitoring moved from `enableCMT`/`enableMBM` to `enableMonitoring`.
const V110: Version = Version(1, 1, 0);

/// A released spec version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(u32, u32, u32);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

impl Version {
    /// A released version from its text (`0.6.0` or `v0.6.0`).
    fn parse(text: &str) -> Option<Self> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
        let v = Version(parts.next()??, parts.next()??, parts.next()??);
        (parts.next().is_none() && KNOWN.contains(&v)).then_some(v)
    }
}

/// Checks that `spec` declares a released version that has every field it uses.
pub fn check(spec: &SpecFile) -> Result<(), String> {
    let declared = Version::parse(&spec.cdi_version)
        .ok_or_else(|| format!("invalid version {:?}", spec.cdi_version))?;
    let edits = edit_sets(spec);
    for (scope, e) in &edits {
        if let Some(rdt) = &e.intel_rdt {
            check_rdt_fields(declared, scope, rdt)?;
        }
        if !e.net_devices.is_empty() && declared < V110 {
            return Err(format!(
                "{scope}.netDevices requires CDI spec version at least {V110}"
            ));
        }
    }
    let needed = required(spec, &edits);
    if needed > declared {
        return Err(format!("the spec version must be at least v{needed}"));
    }
    Ok(())
}

/// Monitoring flags are named differently before and from 1.1.0; each name is refused in
/// the versions that do not have it.
fn check_rdt_fields(declared: Version, scope: &str, rdt: &IntelRdt) -> Result<(), String> {
    if declared >= V110 {
        for (field, set) in [("enableCMT", rdt.enable_cmt), ("enableMBM", rdt.enable_mbm)] {
            if set.is_some() {
                return Err(format!(
                    "{scope}.intelRdt.{field} is not valid for CDI spec version {declared}"
                ));
            }
        }
    } else {
        let newer = [
            ("schemata", rdt.schemata.is_some()),
            ("enableMonitoring", rdt.enable_monitoring.is_some()),
        ];
        for (field, set) in newer {
            if set {
                return Err(format!(
                    "{scope}.intelRdt.{field} requires CDI spec version at least {V110}"
                ));
            }
        }
    }
    Ok(())
}

/// The spec's own edits and each device's, named as errors name them.
fn edit_sets(spec: &SpecFile) -> Vec<(String, &ContainerEdits)> {
    std::iter::once(("containerEdits".to_string(), &spec.container_edits))
        .chain(
            spec.devices
                .iter()
                .enumerate()
                .map(|(i, d)| (format!("devices[{i}].containerEdits"), &d.container_edits)),
        )
        .collect()
}

/// The oldest version with every field `spec` uses.
fn required(spec: &SpecFile, edits: &[(String, &ContainerEdits)]) -> Version {
    let any = |f: &dyn Fn(&ContainerEdits) -> bool| edits.iter().any(|(_, e)| f(e));
    if any(&|e| {
        !e.net_devices.is_empty()
            || e.intel_rdt
                .as_ref()
                .is_some_and(|r| r.schemata.is_some() || r.enable_monitoring == Some(true))
    }) {
        return V110;
    }
    if any(&|e| e.intel_rdt.is_some() || !e.additional_gids.is_empty()) {
        return Version(0, 7, 0);
    }
    let dotted_class = super::name::parse_kind(&spec.kind).is_some_and(|(_, c)| c.contains('.'));
    if !spec.annotations.is_empty()
        || spec.devices.iter().any(|d| !d.annotations.is_empty())
        || dotted_class
    {
        return Version(0, 6, 0);
    }
    if spec
        .devices
        .iter()
        .any(|d| d.name.starts_with(|c: char| c.is_ascii_digit()))
        || any(&|e| e.device_nodes.iter().any(|n| !n.host_path.is_empty()))
    {
        return Version(0, 5, 0);
    }
    if any(&|e| e.mounts.iter().any(|m| !m.typ.is_empty())) {
        return Version(0, 4, 0);
    }
    EARLIEST
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::spec::{Device, DeviceNode, Mount};
    use super::*;

    fn spec(version: &str, name: &str, edits: ContainerEdits) -> SpecFile {
        SpecFile {
            cdi_version: version.into(),
            kind: "vendor.com/gpu".into(),
            devices: vec![Device {
                name: name.into(),
                container_edits: edits,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn env() -> ContainerEdits {
        ContainerEdits {
            env: vec!["A=1".into()],
            ..Default::default()
        }
    }

    #[test]
    fn released_versions_are_known() {
        for v in ["0.3.0", "v0.3.0", "0.6.0", "0.8.0", "1.0.0", "1.1.0"] {
            assert!(check(&spec(v, "a", env())).is_ok(), "{v}");
        }
        // Released, but older than any spec is held to (the reference's vEarliest).
        assert_eq!(
            check(&spec("0.2.0", "a", env())).unwrap_err(),
            "the spec version must be at least v0.3.0"
        );
        for v in ["", "0.9.0", "1.2.0", "0.3", "0.3.0.1", "x", "v"] {
            let err = check(&spec(v, "a", env())).unwrap_err();
            assert!(err.starts_with("invalid version"), "{v}: {err}");
        }
    }

    #[test]
    fn fields_need_the_version_that_introduced_them() {
        let gids = ContainerEdits {
            additional_gids: vec![5],
            ..Default::default()
        };
        assert_eq!(
            check(&spec("0.6.0", "a", gids.clone())).unwrap_err(),
            "the spec version must be at least v0.7.0"
        );
        assert!(check(&spec("0.7.0", "a", gids)).is_ok());
        // A device name starting with a digit, and hostPath: 0.5.0.
        assert!(check(&spec("0.4.0", "0", env())).is_err());
        assert!(check(&spec("0.5.0", "0", env())).is_ok());
        let host_path = ContainerEdits {
            device_nodes: vec![DeviceNode {
                path: "/dev/x".into(),
                host_path: "/dev/null".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(check(&spec("0.4.0", "a", host_path)).is_err());
        let typed_mount = ContainerEdits {
            mounts: vec![Mount {
                host_path: "/a".into(),
                container_path: "/b".into(),
                typ: "bind".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(check(&spec("0.3.0", "a", typed_mount.clone())).is_err());
        assert!(check(&spec("0.4.0", "a", typed_mount)).is_ok());
        let mut annotated = spec("0.5.0", "a", env());
        annotated.annotations.insert("k".into(), "v".into());
        assert!(check(&annotated).is_err());
        let mut dotted = spec("0.5.0", "a", env());
        dotted.kind = "vendor.com/gpu.mig".into();
        assert!(check(&dotted).is_err());
    }

    #[test]
    fn monitoring_flags_follow_their_version() {
        let rdt = |r: IntelRdt| ContainerEdits {
            intel_rdt: Some(r),
            ..Default::default()
        };
        let cmt = rdt(IntelRdt {
            enable_cmt: Some(true),
            ..Default::default()
        });
        assert!(check(&spec("0.7.0", "a", cmt.clone())).is_ok());
        let err = check(&spec("1.1.0", "a", cmt)).unwrap_err();
        assert!(err.contains("enableCMT is not valid"), "{err}");
        let schemata = rdt(IntelRdt {
            schemata: Some(vec![]),
            ..Default::default()
        });
        let err = check(&spec("1.0.0", "a", schemata.clone())).unwrap_err();
        assert!(err.contains("schemata requires"), "{err}");
        assert!(check(&spec("1.1.0", "a", schemata)).is_ok());
        let mut nets = spec("1.0.0", "a", env());
        nets.container_edits.net_devices = vec![Default::default()];
        let err = check(&nets).unwrap_err();
        assert!(err.contains("containerEdits.netDevices requires"), "{err}");
    }
}
