//! `projected` volumes, as Go's `pkg/volume/projected`: secrets, configMaps, the downward API
//! and bound service-account tokens merged into one directory (the `kube-api-access-*` volume
//! every API pod gets). Written on a tmpfs, never on disk.

use k8s_openapi::api::core::v1::{PodSpec, ProjectedVolumeSource};

use super::atomic_writer::{FileProjection, Payload};
use super::inputs::token_request;
use super::projection::{DEFAULT_FILE_MODE, ProjectionError, mode_bits};
use super::{VolumeInputs, config_map, downward_api, secret};
use crate::podspec::NodeContext;
use crate::types::Pod;

/// Go's plugin directory name.
pub const PLUGIN: &str = "kubernetes.io~projected";

/// A token's mode when the pod has an fsGroup or a common `runAsUser`: only its owner (and,
/// after the fsGroup change, its group) may read it.
const TOKEN_MODE: u32 = 0o600;

/// The payload of projected volume `volume` of `pod`. Every source is tried and every failure
/// reported (Go's aggregate). Standalone, a volume with any source that needs the API fails as
/// Go's does ("kube client is not configured"); one with only downwardAPI sources works.
pub fn payload(
    pod: &Pod,
    volume: &str,
    src: &ProjectedVolumeSource,
    inputs: &VolumeInputs,
    node: &NodeContext,
) -> Result<Payload, ProjectionError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let default_mode = mode_bits(src.default_mode, DEFAULT_FILE_MODE);
    let fs_group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group);
    let fs_user = fs_user(pod);
    let mut out = Payload::new();
    let mut errs = Vec::new();
    for source in src.sources.iter().flatten() {
        let part = if let Some(s) = &source.secret {
            secret::make(
                namespace,
                &s.name,
                s.items.as_deref(),
                default_mode,
                s.optional.unwrap_or(false),
                inputs,
            )
        } else if let Some(c) = &source.config_map {
            config_map::make(
                namespace,
                &c.name,
                c.items.as_deref(),
                default_mode,
                c.optional.unwrap_or(false),
                inputs,
            )
        } else if let Some(d) = &source.downward_api {
            downward_api::make(
                pod,
                d.items.as_deref().unwrap_or_default(),
                default_mode,
                node,
            )
        } else if let Some(t) = &source.service_account_token {
            // With an fsGroup the ownership change then adds group read (0640).
            let mode = if fs_user.is_some() || fs_group.is_some() {
                TOKEN_MODE
            } else {
                default_mode
            };
            inputs.token(&token_request(pod, t)).map(|token| {
                Payload::from([(
                    t.path.clone(),
                    FileProjection {
                        data: token.as_bytes().to_vec(),
                        mode,
                        fs_user,
                    },
                )])
            })
        } else if source.cluster_trust_bundle.is_some() {
            Err(ProjectionError::ClusterTrustBundle)
        } else {
            Ok(Payload::new())
        };
        match part {
            Ok(p) => out.extend(p),
            Err(e) => errs.push(e),
        }
    }
    if errs.iter().any(ProjectionError::is_standalone) {
        return Err(ProjectionError::StandaloneProjected(volume.to_string()));
    }
    ProjectionError::aggregate(errs)?;
    Ok(out)
}

/// The owner of projected tokens (Go's `FsUserFrom`): the effective `runAsUser` every init and
/// regular container shares; none when one has none or two differ.
pub fn fs_user(pod: &Pod) -> Option<i64> {
    let spec: &PodSpec = pod.spec.as_ref()?;
    let mut common = None;
    for c in crate::podspec::init_and_app_containers(spec) {
        let user = crate::podspec::security::effective_security_context(pod, c).run_as_user?;
        if common.is_some_and(|u| u != user) {
            return None;
        }
        common = Some(user);
    }
    common
}
