//! The CDI devices a container asks for: CRI's `cdi_devices`, then the `cdi.k8s.io/*`
//! annotations (comma-separated qualified names, as the reference's `ParseAnnotations` reads
//! them, the form device plugins used before the CRI field existed), merged without
//! duplicates in that order, as containerd's `WithCDI` merges them.

use std::collections::HashSet;

use ferrolet_proto::cri;

use super::CdiError;
use super::name::parse_qualified;

/// The prefix of annotation keys that request CDI devices.
pub const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// The qualified names `config` asks for, each once; a malformed one is an error naming it.
pub fn requested_devices(config: &cri::ContainerConfig) -> Result<Vec<String>, CdiError> {
    let mut seen = HashSet::new();
    let mut devices = Vec::new();
    for d in &config.cdi_devices {
        parse_qualified(&d.name).map_err(|reason| CdiError::InvalidName {
            device: d.name.clone(),
            reason,
        })?;
        if seen.insert(d.name.as_str()) {
            devices.push(d.name.clone());
        }
    }
    // Sorted keys: the order annotations come in (a map) must not change the spec we write.
    let mut keys: Vec<&String> = config
        .annotations
        .keys()
        .filter(|k| k.starts_with(ANNOTATION_PREFIX))
        .collect();
    keys.sort();
    for key in keys {
        for name in config.annotations[key].split(',') {
            parse_qualified(name).map_err(|reason| CdiError::InvalidAnnotation {
                key: key.clone(),
                device: name.to_string(),
                reason,
            })?;
            if seen.insert(name) {
                devices.push(name.to_string());
            }
        }
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn config(fields: &[&str], annotations: &[(&str, &str)]) -> cri::ContainerConfig {
        cri::ContainerConfig {
            cdi_devices: fields
                .iter()
                .map(|n| cri::CdiDevice {
                    name: n.to_string(),
                })
                .collect(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_field_then_the_annotations_each_device_once() {
        let c = config(
            &["v.com/gpu=0", "v.com/gpu=1", "v.com/gpu=0"],
            &[
                ("cdi.k8s.io/z-plugin", "v.com/nic=a,v.com/gpu=1"),
                ("cdi.k8s.io/a-plugin", "v.com/fpga=x"),
                ("other.io/cdi", "not-a-device"),
            ],
        );
        assert_eq!(
            requested_devices(&c).unwrap(),
            ["v.com/gpu=0", "v.com/gpu=1", "v.com/fpga=x", "v.com/nic=a"]
        );
        assert!(requested_devices(&config(&[], &[])).unwrap().is_empty());
    }

    #[test]
    fn malformed_names_fail_naming_the_device() {
        let err = requested_devices(&config(&["gpu0"], &[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CDI device \"gpu0\": unqualified device, missing vendor"
        );
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        let err = requested_devices(&config(&[], &[("cdi.k8s.io/p", "v.com/gpu=0,")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "annotation \"cdi.k8s.io/p\": invalid CDI device name \"\": \
             unqualified device, missing vendor"
        );
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    }
}
