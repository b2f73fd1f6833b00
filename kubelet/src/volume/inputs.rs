//! What a pod's volumes read from the API (secrets, configMaps, service-account tokens), as
//! the volume manager fetches it beforehand, and which names a pod or a volume refers to (Go's
//! `getSecretNames`/`getConfigMapNames`, which the object cache registers). The payload builders
//! are pure functions over [`VolumeInputs`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccountTokenProjection, Volume};

use super::projection::ProjectionError;
use crate::objects::{ObjectError, TokenRequestSpec};
use crate::types::Pod;

/// A projected token's lifetime when the projection names none (the API's default).
const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

/// What a pod's volumes read from the API, fetched beforehand by the volume manager.
#[derive(Clone, Default)]
pub struct VolumeInputs {
    /// Secrets of the pod's namespace by name; `None` = not found.
    pub secrets: BTreeMap<String, Option<Arc<Secret>>>,
    /// ConfigMaps of the pod's namespace by name; `None` = not found.
    pub config_maps: BTreeMap<String, Option<Arc<ConfigMap>>>,
    /// Bound service-account tokens by what was asked for.
    pub tokens: BTreeMap<TokenRequestSpec, String>,
    /// Objects that could not be read at all (standalone: [`ObjectError::NoApiServer`]), keyed
    /// by [`secret_key`], [`config_map_key`] or [`token_key`] (`secret/NAME`, `configmap/NAME`,
    /// `token/SA/AUDIENCE/SECONDS`).
    pub errors: BTreeMap<String, ObjectError>,
}

impl std::fmt::Debug for VolumeInputs {
    // Names and keys only: secret data and tokens must never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secrets: BTreeMap<&str, Option<Vec<&str>>> = self
            .secrets
            .iter()
            .map(|(name, s)| {
                let keys = s
                    .as_ref()
                    .map(|s| s.data.iter().flatten().map(|(k, _)| k.as_str()).collect());
                (name.as_str(), keys)
            })
            .collect();
        let config_maps: BTreeMap<&str, bool> = self
            .config_maps
            .iter()
            .map(|(name, c)| (name.as_str(), c.is_some()))
            .collect();
        let tokens: Vec<String> = self.tokens.keys().map(token_key).collect();
        f.debug_struct("VolumeInputs")
            .field("secrets", &secrets)
            .field("config_maps", &config_maps)
            .field("tokens", &tokens)
            .field("errors", &self.errors)
            .finish()
    }
}

/// What one volume reads: fetch these before calling [`super::setup_volume`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeReferences {
    /// Secret names (in the pod's namespace).
    pub secrets: BTreeSet<String>,
    /// ConfigMap names (in the pod's namespace).
    pub config_maps: BTreeSet<String>,
    /// Service-account tokens to request.
    pub tokens: BTreeSet<TokenRequestSpec>,
}

impl VolumeReferences {
    fn extend(&mut self, other: VolumeReferences) {
        self.secrets.extend(other.secrets);
        self.config_maps.extend(other.config_maps);
        self.tokens.extend(other.tokens);
    }

    fn secret(&mut self, name: &str) {
        if !name.is_empty() {
            self.secrets.insert(name.to_string());
        }
    }

    fn config_map(&mut self, name: &str) {
        if !name.is_empty() {
            self.config_maps.insert(name.to_string());
        }
    }
}

/// The [`VolumeInputs::errors`] key of secret `name`.
pub fn secret_key(name: &str) -> String {
    format!("secret/{name}")
}

/// The [`VolumeInputs::errors`] key of configMap `name`.
pub fn config_map_key(name: &str) -> String {
    format!("configmap/{name}")
}

/// The [`VolumeInputs::errors`] key of a token request (the pod is implied).
pub fn token_key(spec: &TokenRequestSpec) -> String {
    format!(
        "token/{}/{}/{}",
        spec.service_account,
        spec.audience.as_deref().unwrap_or(""),
        spec.expiration_seconds
    )
}

impl VolumeInputs {
    /// Inputs for a pod on a node without an API server: every object it refers to fails with
    /// [`ObjectError::NoApiServer`] (what the volume manager's reads through `objects::NoApi`
    /// come to; the tests' shortcut).
    #[cfg(test)]
    pub fn standalone(pod: &Pod) -> Self {
        let refs = pod_references(pod);
        let mut out = VolumeInputs::default();
        for name in &refs.secrets {
            out.errors
                .insert(secret_key(name), ObjectError::NoApiServer);
        }
        for name in &refs.config_maps {
            out.errors
                .insert(config_map_key(name), ObjectError::NoApiServer);
        }
        for spec in &refs.tokens {
            out.errors.insert(token_key(spec), ObjectError::NoApiServer);
        }
        out
    }

    /// Records the result of reading secret `name`.
    pub fn set_secret(&mut self, name: &str, read: Result<Option<Arc<Secret>>, ObjectError>) {
        match read {
            Ok(s) => {
                self.errors.remove(&secret_key(name));
                self.secrets.insert(name.to_string(), s);
            }
            Err(e) => {
                self.secrets.remove(name);
                self.errors.insert(secret_key(name), e);
            }
        }
    }

    /// Records the result of reading configMap `name`.
    pub fn set_config_map(
        &mut self,
        name: &str,
        read: Result<Option<Arc<ConfigMap>>, ObjectError>,
    ) {
        match read {
            Ok(c) => {
                self.errors.remove(&config_map_key(name));
                self.config_maps.insert(name.to_string(), c);
            }
            Err(e) => {
                self.config_maps.remove(name);
                self.errors.insert(config_map_key(name), e);
            }
        }
    }

    /// Records the result of requesting a token.
    pub fn set_token(&mut self, spec: &TokenRequestSpec, read: Result<String, ObjectError>) {
        match read {
            Ok(t) => {
                self.errors.remove(&token_key(spec));
                self.tokens.insert(spec.clone(), t);
            }
            Err(e) => {
                self.tokens.remove(spec);
                self.errors.insert(token_key(spec), e);
            }
        }
    }

    /// Secret `name`: `Ok(None)` when the API has none. A read object wins over a recorded
    /// error; a name never fetched is an error naming it.
    pub(crate) fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<&Secret>, ProjectionError> {
        if let Some(s) = self.secrets.get(name) {
            return Ok(s.as_deref());
        }
        Err(read_error(
            self.errors.get(&secret_key(name)),
            ProjectionError::StandaloneObject,
            format!("secret {namespace}/{name}"),
        ))
    }

    /// ConfigMap `name`, as [`Self::secret`].
    pub(crate) fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<&ConfigMap>, ProjectionError> {
        if let Some(c) = self.config_maps.get(name) {
            return Ok(c.as_deref());
        }
        Err(read_error(
            self.errors.get(&config_map_key(name)),
            ProjectionError::StandaloneObject,
            format!("configmap {namespace}/{name}"),
        ))
    }

    /// The token for `spec`.
    pub(crate) fn token(&self, spec: &TokenRequestSpec) -> Result<&str, ProjectionError> {
        if let Some(t) = self.tokens.get(spec) {
            return Ok(t);
        }
        Err(read_error(
            self.errors.get(&token_key(spec)),
            ProjectionError::StandaloneToken,
            format!(
                "token of service account {}/{}",
                spec.namespace, spec.service_account
            ),
        ))
    }
}

/// The error for an input that was not read: the recorded one, or "not fetched".
fn read_error(
    recorded: Option<&ObjectError>,
    standalone: ProjectionError,
    what: String,
) -> ProjectionError {
    match recorded {
        Some(ObjectError::NoApiServer) => standalone,
        Some(other) => ProjectionError::Api(other.to_string()),
        None => ProjectionError::NotFetched(what),
    }
}

/// The token a `serviceAccountToken` projection asks for, bound to `pod`.
pub fn token_request(pod: &Pod, projection: &ServiceAccountTokenProjection) -> TokenRequestSpec {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let service_account = spec
        .and_then(|s| {
            s.service_account_name
                .as_deref()
                .or(s.service_account.as_deref())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    TokenRequestSpec {
        namespace: m.namespace.clone().unwrap_or_else(|| "default".into()),
        service_account: service_account.to_string(),
        audience: projection.audience.clone().filter(|a| !a.is_empty()),
        expiration_seconds: projection
            .expiration_seconds
            .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS),
        pod_name: m.name.clone().unwrap_or_default(),
        pod_uid: m.uid.clone().unwrap_or_default(),
    }
}

/// What one volume reads from the API (nothing for emptyDir, hostPath and downwardAPI).
pub fn references(pod: &Pod, volume: &Volume) -> VolumeReferences {
    let mut out = VolumeReferences::default();
    if let Some(s) = &volume.secret {
        out.secret(s.secret_name.as_deref().unwrap_or(""));
    }
    if let Some(c) = &volume.config_map {
        out.config_map(&c.name);
    }
    for src in volume
        .projected
        .iter()
        .flat_map(|p| p.sources.iter().flatten())
    {
        if let Some(s) = &src.secret {
            out.secret(&s.name);
        }
        if let Some(c) = &src.config_map {
            out.config_map(&c.name);
        }
        if let Some(t) = &src.service_account_token {
            out.tokens.insert(token_request(pod, t));
        }
    }
    out
}

/// Every secret and configMap a pod refers to: its volumes (secret, configMap, projected
/// sources), every container's (init, regular, ephemeral) `env` `valueFrom` and `envFrom`, and
/// `imagePullSecrets` (Go's `getSecretNames`/`getConfigMapNames` for the kinds ferrolet
/// serves); also the tokens its projected volumes request, for the token manager.
pub fn pod_references(pod: &Pod) -> VolumeReferences {
    let mut out = VolumeReferences::default();
    let Some(spec) = pod.spec.as_ref() else {
        return out;
    };
    for s in spec.image_pull_secrets.iter().flatten() {
        out.secret(&s.name);
    }
    let envs = crate::podspec::init_and_app_containers(spec)
        .map(|c| (&c.env, &c.env_from))
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|e| (&e.env, &e.env_from)),
        );
    for (env, env_from) in envs {
        for from in env_from.iter().flatten() {
            if let Some(s) = &from.secret_ref {
                out.secret(&s.name);
            }
            if let Some(cm) = &from.config_map_ref {
                out.config_map(&cm.name);
            }
        }
        for var in env.iter().flatten() {
            let Some(from) = &var.value_from else {
                continue;
            };
            if let Some(s) = &from.secret_key_ref {
                out.secret(&s.name);
            }
            if let Some(cm) = &from.config_map_key_ref {
                out.config_map(&cm.name);
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        out.extend(references(pod, v));
    }
    out
}
