//! `secret` volumes and projections, as Go's `pkg/volume/secret`: the secret's keys as files
//! (all, or the `items` listed, at their paths and modes). Written on a tmpfs, never on disk.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{KeyToPath, SecretVolumeSource};

use super::VolumeInputs;
use super::atomic_writer::Payload;
use super::projection::{DEFAULT_FILE_MODE, ProjectionError, key_payload, mode_bits};

/// Go's plugin directory name.
pub const PLUGIN: &str = "kubernetes.io~secret";

/// The payload of a `secret` volume of a pod in `namespace`.
pub fn payload(
    namespace: &str,
    src: &SecretVolumeSource,
    inputs: &VolumeInputs,
) -> Result<Payload, ProjectionError> {
    make(
        namespace,
        src.secret_name.as_deref().unwrap_or(""),
        src.items.as_deref(),
        mode_bits(src.default_mode, DEFAULT_FILE_MODE),
        src.optional.unwrap_or(false),
        inputs,
    )
}

/// The files of secret `name`: a missing secret is an error unless `optional` (then there are
/// none), and so is a listed key it lacks.
pub(crate) fn make(
    namespace: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
    inputs: &VolumeInputs,
) -> Result<Payload, ProjectionError> {
    let secret = match inputs.secret(namespace, name)? {
        Some(s) => s,
        None if optional => return Ok(Payload::new()),
        None => {
            return Err(ProjectionError::NotFound {
                kind: "secret",
                name: name.to_string(),
            });
        }
    };
    let data: BTreeMap<&str, &[u8]> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.0.as_slice()))
        .collect();
    key_payload(&data, items, default_mode, optional, |key| {
        ProjectionError::MissingSecretKey(key.to_string())
    })
}
