//! Why a secret, configMap, downwardAPI or projected volume's payload could not be built, in
//! the Go kubelet's words, and what the builders share (file modes, `items` mappings).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::KeyToPath;

use super::atomic_writer::{FileProjection, Payload};

/// The mode of projected files when the volume names none (the API's default).
pub const DEFAULT_FILE_MODE: u32 = 0o644;

/// Why a payload could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    /// A non-optional object the API does not have (Go's watch-based cache's NotFound).
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// `secret` or `configmap`, as the API's group resource reads.
        kind: &'static str,
        /// The object's name.
        name: String,
    },
    /// An `items` key the secret lacks.
    #[error("references non-existent secret key: {0}")]
    MissingSecretKey(String),
    /// An `items` key the configMap lacks.
    #[error("configmap references non-existent config key: {0}")]
    MissingConfigMapKey(String),
    /// Standalone: a secret or configMap cannot be read (Go's volume host without managers).
    #[error("not supported due to running kubelet in standalone mode")]
    StandaloneObject,
    /// Standalone: a token cannot be requested (Go's token manager without a client).
    #[error("cannot use TokenManager when kubelet is in standalone mode")]
    StandaloneToken,
    /// Standalone: a projected volume with an API source (Go refuses it before any source).
    #[error("cannot setup projected volume {0} because kube client is not configured")]
    StandaloneProjected(String),
    /// The API's error reading an object, as it said it.
    #[error("{0}")]
    Api(String),
    /// An input the caller did not fetch before setting up the volume (a ferrolet bug).
    #[error("{0} was not read before setting up the volume")]
    NotFetched(String),
    /// A downward API field that cannot be read.
    #[error("{0}")]
    Field(String),
    /// `clusterTrustBundle` projections.
    #[error("clusterTrustBundle projections are not supported by ferrolet")]
    ClusterTrustBundle,
    /// Several failures (Go's aggregate: `[a, b]`).
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Many(Vec<ProjectionError>),
}

impl ProjectionError {
    /// Go's `NewAggregate`: none → Ok, one → itself, more (flattened, deduplicated by
    /// message) → [`ProjectionError::Many`].
    pub(crate) fn aggregate(errs: Vec<ProjectionError>) -> Result<(), ProjectionError> {
        let mut flat: Vec<ProjectionError> = Vec::new();
        for e in errs {
            let items = match e {
                ProjectionError::Many(inner) => inner,
                e => vec![e],
            };
            for e in items {
                if !flat.iter().any(|f| f.to_string() == e.to_string()) {
                    flat.push(e);
                }
            }
        }
        match flat.len() {
            0 => Ok(()),
            1 => Err(flat.remove(0)),
            _ => Err(ProjectionError::Many(flat)),
        }
    }

    /// Whether this (or any part of it) failed only for want of an API server.
    pub(crate) fn is_standalone(&self) -> bool {
        match self {
            ProjectionError::StandaloneObject
            | ProjectionError::StandaloneToken
            | ProjectionError::StandaloneProjected(_) => true,
            ProjectionError::Many(all) => all.iter().any(Self::is_standalone),
            _ => false,
        }
    }
}

/// A spec's mode as permission bits (validation keeps it within 0..=0777).
pub(crate) fn mode_bits(mode: Option<i32>, default: u32) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok())
        .map_or(default, |m| m & 0o777)
}

/// Go's `MakePayload` of the secret and configMap plugins over `data` (key → bytes): every
/// key under its own name with `default_mode`, or with `items` only the listed keys at their
/// paths and modes. A listed key `data` lacks is `missing(key)`, skipped when `optional`.
pub(crate) fn key_payload(
    data: &BTreeMap<&str, &[u8]>,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
    missing: impl Fn(&str) -> ProjectionError,
) -> Result<Payload, ProjectionError> {
    let mut out = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (key, bytes) in data {
                out.insert(
                    key.to_string(),
                    FileProjection {
                        data: bytes.to_vec(),
                        mode: default_mode,
                        fs_user: None,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let Some(bytes) = data.get(item.key.as_str()) else {
                    if optional {
                        continue;
                    }
                    return Err(missing(&item.key));
                };
                out.insert(
                    item.path.clone(),
                    FileProjection {
                        data: bytes.to_vec(),
                        mode: mode_bits(item.mode, default_mode),
                        fs_user: None,
                    },
                );
            }
        }
    }
    Ok(out)
}
