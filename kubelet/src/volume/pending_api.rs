//! STAND-IN, DELETE AT THE MERGE WITH wt-vol: minimal versions of the per-volume API the
//! volume manager calls (the pod-model helper writes the real ones in `volume/mod.rs`, with
//! the secret, configMap, downwardAPI and projected kinds). Here only emptyDir and hostPath
//! are set up, through the existing `empty_dir::setup` / `host_path::setup`; every other kind
//! is refused as before. The signatures are the agreed ones, so the manager compiles
//! unchanged against either.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Volume};

use super::{EMPTY_DIR_PLUGIN, VolumeError, check_uid, empty_dir, host_path, mkdir_all, pod_dir};
use crate::objects::{ObjectError, TokenRequestSpec};
use crate::types::Pod;

/// What a volume's set-up reads from the API, fetched beforehand by the volume manager.
#[derive(Clone, Debug, Default)]
pub struct VolumeInputs {
    /// Secrets by name; `None`: not found.
    pub secrets: BTreeMap<String, Option<Arc<Secret>>>,
    /// ConfigMaps by name; `None`: not found.
    pub config_maps: BTreeMap<String, Option<Arc<ConfigMap>>>,
    /// Bound service-account tokens.
    pub tokens: BTreeMap<TokenRequestSpec, String>,
    /// What could not be read, by `secret/NAME`, `configmap/NAME` or token key.
    pub errors: BTreeMap<String, ObjectError>,
}

/// What a volume refers to in the API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeReferences {
    /// Secret names.
    pub secrets: BTreeSet<String>,
    /// ConfigMap names.
    pub config_maps: BTreeSet<String>,
    /// Tokens to request.
    pub tokens: BTreeSet<TokenRequestSpec>,
}

/// The secrets, configMaps and tokens `volume` of `pod` refers to.
pub fn references(pod: &Pod, volume: &Volume) -> VolumeReferences {
    let mut refs = VolumeReferences::default();
    if let Some(name) = volume.secret.as_ref().and_then(|s| s.secret_name.clone()) {
        refs.secrets.insert(name);
    }
    if let Some(cm) = &volume.config_map {
        refs.config_maps.insert(cm.name.clone());
    }
    let sources = volume
        .projected
        .iter()
        .flat_map(|p| p.sources.iter().flatten());
    for source in sources {
        if let Some(s) = &source.secret {
            refs.secrets.insert(s.name.clone());
        }
        if let Some(cm) = &source.config_map {
            refs.config_maps.insert(cm.name.clone());
        }
        if let Some(t) = &source.service_account_token {
            let spec = pod.spec.as_ref();
            refs.tokens.insert(TokenRequestSpec {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                service_account: spec
                    .and_then(|s| s.service_account_name.clone())
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "default".into()),
                audience: t.audience.clone().filter(|a| !a.is_empty()),
                expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                pod_name: pod.metadata.name.clone().unwrap_or_default(),
                pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            });
        }
    }
    refs
}

/// Go's plugin directory name of the volume's kind; `None` for hostPath (the host's own).
pub fn plugin_dir_name(volume: &Volume) -> Option<&'static str> {
    if volume.host_path.is_some() {
        None
    } else if volume.secret.is_some() {
        Some("kubernetes.io~secret")
    } else if volume.config_map.is_some() {
        Some("kubernetes.io~configmap")
    } else if volume.downward_api.is_some() {
        Some("kubernetes.io~downward-api")
    } else if volume.projected.is_some() {
        Some("kubernetes.io~projected")
    } else {
        Some(EMPTY_DIR_PLUGIN)
    }
}

/// Where the volume lives on the host: `<root>/pods/<uid>/volumes/<plugin>/<name>`, or a
/// hostPath's path.
pub fn volume_path(root_dir: &Path, uid: &str, volume: &Volume) -> PathBuf {
    match (&volume.host_path, plugin_dir_name(volume)) {
        (Some(hp), _) => PathBuf::from(&hp.path),
        (None, plugin) => pod_dir(root_dir, uid)
            .join("volumes")
            .join(plugin.unwrap_or(EMPTY_DIR_PLUGIN))
            .join(&volume.name),
    }
}

/// Whether the volume's content follows its sources (set up again on every pod sync).
pub fn requires_remount(volume: &Volume) -> bool {
    volume.secret.is_some()
        || volume.config_map.is_some()
        || volume.downward_api.is_some()
        || volume.projected.is_some()
}

/// Sets up one volume of `pod` (blocking, idempotent); its host path.
pub fn setup_volume(
    root_dir: &Path,
    pod: &Pod,
    volume: &Volume,
    _inputs: &VolumeInputs,
    _node: &crate::podspec::NodeContext,
) -> Result<PathBuf, VolumeError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    check_uid(&uid)?;
    if let Some(kind) = super::unsupported_kind(volume) {
        return Err(VolumeError::Unsupported {
            volume: volume.name.clone(),
            kind: kind.into(),
        });
    }
    if let Some(hp) = &volume.host_path {
        return host_path::setup(&volume.name, hp);
    }
    mkdir_all("", &pod_dir(root_dir, &uid), 0o750)?;
    let dir = volume_path(root_dir, &uid, volume);
    empty_dir::setup(&volume.name, &dir, volume.empty_dir.as_ref(), pod)?;
    Ok(dir)
}

/// Removes one volume set up under a pod dir (unmounting a tmpfs first); idempotent.
pub fn teardown_volume(path: &Path) -> Result<(), VolumeError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(VolumeError::io("", path, e)),
        Ok(_) => {}
    }
    empty_dir::unmount(path)?;
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(VolumeError::io("", path, e)),
        _ => Ok(()),
    }
}
