//! Image pull credentials, as the Go kubelet's `pkg/credentialprovider` finds them: a pod's
//! `imagePullSecrets` (`kubernetes.io/dockerconfigjson` and `kubernetes.io/dockercfg`) first,
//! then the node's Docker config files. [`Credentials::keyring`] builds a pod's [`Keyring`];
//! its `lookup` names every credential whose registry key matches an image, most specific
//! first, for the pull to try in turn.
//!
//! Credentials never reach a log: only registry keys, files and secret names do.

pub mod api;
pub mod docker_config;
pub mod files;
pub mod keyring;

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{LocalObjectReference, Secret};

pub use docker_config::ConfigError;
pub use files::{FileKeyring, SearchPaths};
pub use keyring::{DockerKeyring, Keyring, Source};

/// Secret type of a `config.json`-format pull secret.
pub const SECRET_TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// Its data key.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// Secret type of a legacy `.dockercfg`-format pull secret.
pub const SECRET_TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
/// Its data key.
pub const DOCKERCFG_KEY: &str = ".dockercfg";

/// Where pull secrets come from: the API server ([`api::ApiSecrets`]) in a cluster.
pub trait SecretSource: Send + Sync {
    /// Secret `name` in `namespace`, or `None` when it cannot be had.
    fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> BoxFuture<'a, Option<Secret>>;
}

/// The standalone kubelet's secret source: there are no secrets.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSecrets;

impl SecretSource for NoSecrets {
    fn get<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Option<Secret>> {
        Box::pin(std::future::ready(None))
    }
}

/// A pull secret that could not be used.
#[derive(Debug, thiserror::Error)]
#[error("pull secret {namespace}/{name}: invalid {key}: {source}")]
pub struct SecretError {
    /// The secret's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The data key that failed to parse.
    pub key: &'static str,
    /// Why.
    #[source]
    pub source: ConfigError,
}

/// The kubelet's credential lookup: the node's files plus the pods' pull secrets.
pub struct Credentials {
    files: FileKeyring,
    secrets: Arc<dyn SecretSource>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("paths", self.files.paths())
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Reads the Docker config files a kubelet with `root_dir` searches; pull secrets come
    /// from `secrets`.
    pub async fn load(root_dir: &Path, secrets: Arc<dyn SecretSource>) -> Self {
        Self::with_files(
            FileKeyring::load(SearchPaths::kubelet(root_dir)).await,
            secrets,
        )
    }

    /// Lookup over an already loaded file keyring.
    pub fn with_files(files: FileKeyring, secrets: Arc<dyn SecretSource>) -> Self {
        Self { files, secrets }
    }

    /// The keyring for a pod in `namespace` with `pull_secrets`: its usable secrets, then the
    /// node's files (re-read if they changed). A secret that cannot be had is logged and
    /// skipped, as in Go; one that does not parse fails the pull, as in Go.
    pub async fn keyring(
        &self,
        namespace: &str,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Keyring, SecretError> {
        let mut from_secrets = DockerKeyring::new();
        let mut missing = Vec::new();
        for reference in pull_secrets {
            // The API admits entries without a name; Go ignores them quietly.
            if reference.name.is_empty() {
                continue;
            }
            match self.secrets.get(namespace, &reference.name).await {
                Some(secret) => add_secret(&mut from_secrets, namespace, &reference.name, &secret)?,
                None => missing.push(reference.name.as_str()),
            }
        }
        if !missing.is_empty() {
            tracing::warn!(
                namespace,
                secrets = %missing.join(", "),
                "Unable to retrieve some image pull secrets; attempting to pull the image may not succeed"
            );
        }
        let files = self.files.current().await;
        let layers = if from_secrets.is_empty() {
            vec![files]
        } else {
            vec![Arc::new(from_secrets), files]
        };
        Ok(Keyring::new(layers))
    }
}

/// Adds a pull secret's registries (Go's `secretsToDockerConfigs`): only the two Docker
/// secret types with their data key present and non-empty count.
fn add_secret(
    keyring: &mut DockerKeyring,
    namespace: &str,
    name: &str,
    secret: &Secret,
) -> Result<(), SecretError> {
    let data = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.as_slice())
            .filter(|b| !b.is_empty())
    };
    let kind = secret.type_.as_deref().unwrap_or("");
    let (key, parsed) = match (kind, data(DOCKER_CONFIG_JSON_KEY), data(DOCKERCFG_KEY)) {
        (SECRET_TYPE_DOCKER_CONFIG_JSON, Some(bytes), _) => (
            DOCKER_CONFIG_JSON_KEY,
            docker_config::parse_config_json(bytes),
        ),
        (SECRET_TYPE_DOCKERCFG, _, Some(bytes)) => {
            (DOCKERCFG_KEY, docker_config::parse_dockercfg(bytes))
        }
        _ => {
            tracing::debug!(
                namespace,
                secret = name,
                kind,
                "not a docker registry secret"
            );
            return Ok(());
        }
    };
    let config = parsed.map_err(|source| SecretError {
        namespace: namespace.to_string(),
        name: name.to_string(),
        key,
        source,
    })?;
    keyring.add(
        Source::Secret {
            namespace: namespace.to_string(),
            name: name.to_string(),
        },
        config,
    );
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use k8s_openapi::ByteString;

    use super::*;

    struct Secrets(BTreeMap<(String, String), Secret>);

    impl SecretSource for Secrets {
        fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> BoxFuture<'a, Option<Secret>> {
            let found = self.0.get(&(namespace.into(), name.into())).cloned();
            Box::pin(std::future::ready(found))
        }
    }

    fn secret(kind: &str, key: &str, value: &str) -> Secret {
        Secret {
            type_: Some(kind.into()),
            data: Some(BTreeMap::from([(
                key.to_string(),
                ByteString(value.as_bytes().to_vec()),
            )])),
            ..Default::default()
        }
    }

    fn refs(names: &[&str]) -> Vec<LocalObjectReference> {
        names
            .iter()
            .map(|n| LocalObjectReference {
                name: n.to_string(),
            })
            .collect()
    }

    async fn credentials(
        node_file: Option<&str>,
        secrets: Vec<((&str, &str), Secret)>,
    ) -> (tempfile::TempDir, Credentials) {
        let tmp = tempfile::tempdir().unwrap();
        if let Some(text) = node_file {
            std::fs::write(tmp.path().join("config.json"), text).unwrap();
        }
        let paths = SearchPaths {
            config_json: vec![tmp.path().join("config.json")],
            dockercfg: vec![tmp.path().join(".dockercfg")],
        };
        let secrets = Secrets(
            secrets
                .into_iter()
                .map(|((ns, n), s)| ((ns.to_string(), n.to_string()), s))
                .collect(),
        );
        let creds = Credentials::with_files(FileKeyring::load(paths).await, Arc::new(secrets));
        (tmp, creds)
    }

    fn summary(k: &Keyring, image: &str) -> Vec<(String, String)> {
        k.matches(image)
            .iter()
            .map(|m| (m.credential.username.clone(), m.source.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn pod_secrets_come_before_the_node_files() {
        let (tmp, creds) = credentials(
            Some(r#"{"auths": {"127.0.0.1:5001": {"auth": "bm9kZTpwdw=="}}}"#),
            vec![
                (
                    ("team", "json"),
                    secret(
                        SECRET_TYPE_DOCKER_CONFIG_JSON,
                        DOCKER_CONFIG_JSON_KEY,
                        r#"{"auths": {"127.0.0.1:5001": {"username": "json", "password": "p"}}}"#,
                    ),
                ),
                (
                    ("team", "legacy"),
                    secret(
                        SECRET_TYPE_DOCKERCFG,
                        DOCKERCFG_KEY,
                        r#"{"https://127.0.0.1:5001/v1/": {"username": "legacy", "password": "p"}}"#,
                    ),
                ),
                (
                    ("team", "opaque"),
                    secret("Opaque", DOCKER_CONFIG_JSON_KEY, "not even json"),
                ),
                (
                    ("team", "mismatched"),
                    secret(SECRET_TYPE_DOCKERCFG, DOCKER_CONFIG_JSON_KEY, "not even json"),
                ),
            ],
        )
        .await;
        let k = creds
            .keyring(
                "team",
                &refs(&["json", "", "missing", "opaque", "mismatched", "legacy"]),
            )
            .await
            .unwrap();
        let file = format!("file {}", tmp.path().join("config.json").display());
        assert_eq!(
            summary(&k, "127.0.0.1:5001/ferrolet/busybox:1"),
            [
                ("json".to_string(), "secret team/json".to_string()),
                ("legacy".to_string(), "secret team/legacy".to_string()),
                ("node".to_string(), file),
            ]
        );
        // Secrets are per namespace.
        let k = creds.keyring("other", &refs(&["json"])).await.unwrap();
        assert_eq!(summary(&k, "127.0.0.1:5001/x").len(), 1);
        // Nothing matches: pull anonymously.
        assert!(k.lookup("127.0.0.1:5000/ferrolet/busybox:1").is_empty());
    }

    #[tokio::test]
    async fn a_broken_pull_secret_fails_the_lookup_without_leaking() {
        let (_tmp, creds) = credentials(
            None,
            vec![(
                ("ns", "bad"),
                secret(
                    SECRET_TYPE_DOCKER_CONFIG_JSON,
                    DOCKER_CONFIG_JSON_KEY,
                    r#"{"auths": {"r.io": {"auth": "c2VjcmV0"}}}"#,
                ),
            )],
        )
        .await;
        let err = creds.keyring("ns", &refs(&["bad"])).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("pull secret ns/bad"), "{text}");
        assert!(text.contains(".dockerconfigjson"), "{text}");
        assert!(!text.contains("c2VjcmV0"), "{text}");
    }

    #[tokio::test]
    async fn standalone_has_no_secrets_and_reads_the_root_dir_file() {
        let root = tempfile::tempdir().unwrap();
        let creds = Credentials::load(root.path(), Arc::new(NoSecrets)).await;
        let image = "127.0.0.1:5001/ferrolet/busybox:1";
        let k = creds.keyring("default", &refs(&["x"])).await.unwrap();
        assert!(
            k.matches(image)
                .iter()
                .all(|m| matches!(m.source, Source::File(_)))
        );
        std::fs::write(
            root.path().join("config.json"),
            r#"{"auths": {"127.0.0.1:5001": {"username": "u", "password": "p"}}}"#,
        )
        .unwrap();
        let auth = creds.keyring("default", &[]).await.unwrap().lookup(image);
        assert_eq!(auth.len(), 1);
        assert_eq!(
            (auth[0].username.as_str(), auth[0].password.as_str()),
            ("u", "p")
        );
        assert_eq!(
            creds.files.paths().config_json[0],
            PathBuf::from(root.path()).join("config.json")
        );
    }
}
