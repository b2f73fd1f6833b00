//! The CDI spec file format (`cdiVersion` 0.3.0 to 1.1.0) as serde types, and reading one
//! from JSON or YAML.
//!
//! Unknown fields are refused, as the reference's strict decoding refuses them: a field we
//! silently dropped could be an edit the vendor needs (a misspelt `deviceNodes` would give a
//! container without its device and no error).

use std::collections::BTreeMap;

use serde::Deserialize;

/// A whole spec file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SpecFile {
    /// The spec format's version, `0.6.0` (a leading `v` is accepted).
    pub cdi_version: String,
    /// `vendor.com/class`: the first half of every device's qualified name.
    pub kind: String,
    /// Free-form annotations (0.6.0).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The devices; at least one.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Edits applied once to a container that gets any device of this spec.
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

/// One device of a spec.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Device {
    /// The name after `=` in the qualified name.
    pub name: String,
    /// Free-form annotations (0.6.0).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// What injecting this device does to a container; must not be empty.
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

/// Changes to a container's OCI spec.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ContainerEdits {
    /// `KEY=value` entries set in the process environment.
    #[serde(default)]
    pub env: Vec<String>,
    /// Device nodes created in the container and allowed in its device cgroup.
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    /// Host network interfaces moved into the container (1.1.0).
    #[serde(default)]
    pub net_devices: Vec<NetDevice>,
    /// OCI hooks.
    #[serde(default)]
    pub hooks: Vec<Hook>,
    /// Mounts.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// The container's Intel RDT class (0.7.0).
    #[serde(default)]
    pub intel_rdt: Option<IntelRdt>,
    /// Supplementary groups for the container's process (0.7.0).
    #[serde(default)]
    pub additional_gids: Vec<u32>,
}

impl ContainerEdits {
    /// Whether these edits change nothing (fine for a spec, refused for a device).
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.net_devices.is_empty()
            && self.hooks.is_empty()
            && self.mounts.is_empty()
            && self.intel_rdt.is_none()
            && self.additional_gids.is_empty()
    }
}

/// A device node.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceNode {
    /// Where it appears in the container.
    pub path: String,
    /// The host node it stands for (0.5.0); `path` when empty.
    #[serde(default)]
    pub host_path: String,
    /// `b`, `c`, `u` or `p`; taken from the host node when empty.
    #[serde(default, rename = "type")]
    pub typ: String,
    /// Major number; taken from the host node when 0.
    #[serde(default)]
    pub major: i64,
    /// Minor number.
    #[serde(default)]
    pub minor: i64,
    /// The node's file mode in the container.
    #[serde(default, deserialize_with = "file_mode")]
    pub file_mode: Option<u32>,
    /// Device cgroup access: a combination of `r`, `w`, `m`; `rwm` when empty; `none` for no
    /// access rule at all.
    #[serde(default)]
    pub permissions: String,
    /// Owner in the container; the process's uid (when not root) otherwise.
    #[serde(default)]
    pub uid: Option<u32>,
    /// Group in the container; the process's gid (when not root) otherwise.
    #[serde(default)]
    pub gid: Option<u32>,
}

/// A host network interface moved into the container's network namespace.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetDevice {
    /// Its name on the host.
    pub host_interface_name: String,
    /// Its name in the container.
    pub name: String,
}

/// A mount.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Mount {
    /// The source on the host.
    pub host_path: String,
    /// The destination in the container.
    pub container_path: String,
    /// Mount options (`bind`, `ro`, ...).
    #[serde(default)]
    pub options: Vec<String>,
    /// Filesystem type (0.4.0).
    #[serde(default, rename = "type")]
    pub typ: String,
}

/// An OCI hook.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Hook {
    /// `prestart`, `createRuntime`, `createContainer`, `startContainer`, `poststart` or
    /// `poststop`.
    pub hook_name: String,
    /// The program.
    pub path: String,
    /// Its arguments, the program's name first.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment.
    #[serde(default)]
    pub env: Vec<String>,
    /// Seconds before the runtime gives up on it.
    #[serde(default)]
    pub timeout: Option<i64>,
}

/// Intel RDT settings.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IntelRdt {
    /// The resctrl class (`/` is the root class).
    #[serde(default, rename = "closID")]
    pub clos_id: String,
    /// L3 cache allocation schema.
    #[serde(default)]
    pub l3_cache_schema: String,
    /// Memory bandwidth schema.
    #[serde(default)]
    pub mem_bw_schema: String,
    /// Free-form schemata lines (1.1.0).
    #[serde(default)]
    pub schemata: Option<Vec<String>>,
    /// Monitoring (1.1.0).
    #[serde(default)]
    pub enable_monitoring: Option<bool>,
    /// Cache monitoring (before 1.1.0).
    #[serde(default, rename = "enableCMT")]
    pub enable_cmt: Option<bool>,
    /// Memory bandwidth monitoring (before 1.1.0).
    #[serde(default, rename = "enableMBM")]
    pub enable_mbm: Option<bool>,
}

/// A file mode: a number, or YAML 1.1's octal `0666` (which the reference's YAML decoder
/// reads as 438, and YAML 1.2's, ours, as a string; a spec written for the reference must
/// not be refused here), or `0o666`.
fn file_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Mode {
        Number(u32),
        Text(String),
    }
    let Some(mode) = Option::<Mode>::deserialize(d)? else {
        return Ok(None);
    };
    match mode {
        Mode::Number(n) => Ok(Some(n)),
        Mode::Text(t) => {
            let digits = t.strip_prefix("0o").or_else(|| t.strip_prefix('0'));
            digits
                .filter(|d| !d.is_empty())
                .and_then(|d| u32::from_str_radix(d, 8).ok())
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("fileMode {t:?} is not a number")))
        }
    }
}

/// Decodes a spec file's bytes. YAML is a superset of JSON, and the reference reads both
/// `.json` and `.yaml` files through one YAML decoder, so one decoder serves both here too.
pub fn parse(data: &[u8]) -> Result<SpecFile, String> {
    serde_yaml_ng::from_slice(data).map_err(|e| format!("failed to unmarshal CDI Spec: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn yaml_specs_decode() {
        let spec = parse(
            br#"
cdiVersion: "0.7.0"
kind: vendor.com/gpu
annotations: {a: b}
devices:
  - name: "0"
    containerEdits:
      deviceNodes:
        - path: /dev/gpu0
          hostPath: /dev/null
          type: c
          major: 1
          minor: 3
          fileMode: 438
          permissions: rw
          uid: 1000
          gid: 1000
      netDevices:
        - {hostInterfaceName: eth9, name: net0}
containerEdits:
  env: [GPU=yes]
  mounts:
    - {hostPath: /opt/lib, containerPath: /usr/lib/gpu, options: [ro, bind], type: bind}
  hooks:
    - {hookName: createContainer, path: /bin/hook, args: [hook, x], env: [A=b], timeout: 5}
  intelRdt: {closID: gold, l3CacheSchema: "L3:0=ff", enableCMT: true}
  additionalGids: [44, 0]
"#,
        )
        .unwrap();
        assert_eq!(spec.cdi_version, "0.7.0");
        assert_eq!(spec.annotations["a"], "b");
        let node = &spec.devices[0].container_edits.device_nodes[0];
        assert_eq!((node.typ.as_str(), node.major, node.minor), ("c", 1, 3));
        assert_eq!(node.file_mode, Some(0o666));
        assert_eq!((node.uid, node.gid), (Some(1000), Some(1000)));
        let edits = &spec.container_edits;
        assert_eq!(edits.mounts[0].typ, "bind");
        assert_eq!(edits.hooks[0].timeout, Some(5));
        let rdt = edits.intel_rdt.as_ref().unwrap();
        assert_eq!((rdt.clos_id.as_str(), rdt.enable_cmt), ("gold", Some(true)));
        assert_eq!(edits.additional_gids, [44, 0]);
        assert_eq!(
            spec.devices[0].container_edits.net_devices[0].host_interface_name,
            "eth9"
        );
    }

    #[test]
    fn file_modes_read_as_the_reference_reads_them() {
        let mode = |text: &str| {
            let yaml = format!(
                "cdiVersion: 0.3.0\nkind: v.com/c\ndevices:\n  - name: x\n    containerEdits:\n      \
                 deviceNodes: [{{path: /dev/x, fileMode: {text}}}]\n"
            );
            parse(yaml.as_bytes()).map(|s| s.devices[0].container_edits.device_nodes[0].file_mode)
        };
        assert_eq!(mode("0666").unwrap(), Some(0o666));
        assert_eq!(mode("0o640").unwrap(), Some(0o640));
        assert_eq!(mode("438").unwrap(), Some(0o666));
        assert_eq!(mode("null").unwrap(), None);
        assert!(mode("0999").is_err());
        assert!(mode("rw").is_err());
        assert!(mode("-1").is_err());
    }

    #[test]
    fn json_specs_decode_with_the_same_decoder() {
        let spec = parse(
            br#"{"cdiVersion":"0.3.0","kind":"v.com/c","devices":[{"name":"x","containerEdits":{"env":["A=1"]}}]}"#,
        )
        .unwrap();
        assert_eq!(spec.devices[0].container_edits.env, ["A=1"]);
        assert!(spec.container_edits.is_empty());
    }

    #[test]
    fn unknown_fields_and_garbage_are_refused() {
        let err = parse(br#"{"cdiVersion":"0.3.0","kind":"v.com/c","devices":[],"deviceNode":[]}"#)
            .unwrap_err();
        assert!(err.contains("unknown field `deviceNode`"), "{err}");
        assert!(parse(b"{not yaml: [").is_err());
        assert!(parse(b"").is_err());
    }
}
