//! `downwardAPI` volumes and projections, as Go's `pkg/volume/downwardapi`: the pod's own
//! metadata (`fieldRef`: name, namespace, uid, labels, annotations, one label or annotation)
//! and its containers' resources (`resourceFieldRef`) as files. Needs no API server.

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, DownwardAPIVolumeSource};

use super::atomic_writer::{FileProjection, Payload};
use super::projection::{DEFAULT_FILE_MODE, ProjectionError, mode_bits};
use crate::podspec::NodeContext;
use crate::podspec::env::{FieldError, extract_field_path, resource_field_value};
use crate::podspec::resources::Allocatable;
use crate::types::Pod;

/// Go's plugin directory name.
pub const PLUGIN: &str = "kubernetes.io~downward-api";

/// The payload of a `downwardAPI` volume.
pub fn payload(
    pod: &Pod,
    src: &DownwardAPIVolumeSource,
    node: &NodeContext,
) -> Result<Payload, ProjectionError> {
    make(
        pod,
        src.items.as_deref().unwrap_or_default(),
        mode_bits(src.default_mode, DEFAULT_FILE_MODE),
        node,
    )
}

/// Go's `CollectData`: one file per item; every failing item is reported (aggregated), not
/// only the first.
pub(crate) fn make(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
    node: &NodeContext,
) -> Result<Payload, ProjectionError> {
    let mut out = Payload::new();
    let mut errs = Vec::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            extract_field_path(pod, &f.field_path)
        } else if let Some(r) = &item.resource_field_ref {
            resource_value(pod, r, node)
        } else {
            Ok(String::new())
        };
        match value {
            Ok(v) => {
                out.insert(
                    item.path.clone(),
                    FileProjection {
                        data: v.into_bytes(),
                        mode: mode_bits(item.mode, default_mode),
                        fs_user: None,
                    },
                );
            }
            Err(reason) => errs.push(ProjectionError::Field(reason)),
        }
    }
    ProjectionError::aggregate(errs)?;
    Ok(out)
}

/// A container's resource as the env's `resourceFieldRef` computes it; the volume names its
/// container (Go looks it up and fails with `container NAME not found`).
fn resource_value(
    pod: &Pod,
    r: &k8s_openapi::api::core::v1::ResourceFieldSelector,
    node: &NodeContext,
) -> Result<String, String> {
    let name = r.container_name.as_deref().unwrap_or("");
    let container = pod
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == name)
        .ok_or_else(|| format!("container {name} not found"))?;
    let alloc = Allocatable::node(node.memory_capacity);
    resource_field_value(r, pod, container, &alloc).map_err(|e| match e {
        FieldError::Reason(r) => r,
        FieldError::Spec(e) => e.to_string(),
    })
}
