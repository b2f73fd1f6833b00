//! `configMap` volumes and projections, as Go's `pkg/volume/configmap`: the configMap's `data`
//! and `binaryData` keys as files (all, or the `items` listed, at their paths and modes).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, KeyToPath};

use super::VolumeInputs;
use super::atomic_writer::Payload;
use super::projection::{DEFAULT_FILE_MODE, ProjectionError, key_payload, mode_bits};

/// Go's plugin directory name.
pub const PLUGIN: &str = "kubernetes.io~configmap";

/// The payload of a `configMap` volume of a pod in `namespace`.
pub fn payload(
    namespace: &str,
    src: &ConfigMapVolumeSource,
    inputs: &VolumeInputs,
) -> Result<Payload, ProjectionError> {
    make(
        namespace,
        &src.name,
        src.items.as_deref(),
        mode_bits(src.default_mode, DEFAULT_FILE_MODE),
        src.optional.unwrap_or(false),
        inputs,
    )
}

/// The files of configMap `name`: a missing configMap is an error unless `optional` (then
/// there are none), and so is a listed key in neither `data` nor `binaryData`.
pub(crate) fn make(
    namespace: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
    inputs: &VolumeInputs,
) -> Result<Payload, ProjectionError> {
    let cm = match inputs.config_map(namespace, name)? {
        Some(c) => c,
        None if optional => return Ok(Payload::new()),
        None => {
            return Err(ProjectionError::NotFound {
                kind: "configmap",
                name: name.to_string(),
            });
        }
    };
    // Inserted after binaryData, `data` wins a key in both, as Go's item lookup does (the API
    // refuses such a configMap anyway).
    let mut data: BTreeMap<&str, &[u8]> = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.0.as_slice()))
        .collect();
    data.extend(
        cm.data
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_bytes())),
    );
    key_payload(&data, items, default_mode, optional, |key| {
        ProjectionError::MissingConfigMapKey(key.to_string())
    })
}
