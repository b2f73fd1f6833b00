//! The kubelet's kubeconfig files: loaded into a client with kube's own loader (files named in
//! them are relative to the kubeconfig, as in client-go), the "still usable" check that decides
//! whether to bootstrap (Go's `isClientConfigStillValid`), and the kubeconfig bootstrap writes
//! (Go's `writeKubeconfigFromBootstrapping`).

use std::path::Path;

use base64::Engine;
use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};

use super::{CertificateError, pem, store};

/// Names in a kubeconfig written by bootstrap (Go's).
const CLUSTER: &str = "default-cluster";
const USER: &str = "default-auth";
const CONTEXT: &str = "default-context";

/// The kubeconfig at `path`, as written (paths in it made absolute).
pub async fn read(path: &Path) -> Result<Kubeconfig, CertificateError> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || Kubeconfig::read_from(&owned))
        .await?
        .map_err(|source| CertificateError::Kubeconfig {
            path: path.to_path_buf(),
            source,
        })
}

/// The client configuration of `path`'s current context.
pub async fn load(path: &Path) -> Result<kube::Config, CertificateError> {
    let raw = read(path).await?;
    kube::Config::from_custom_kubeconfig(raw, &KubeConfigOptions::default())
        .await
        .map_err(|source| CertificateError::Kubeconfig {
            path: path.to_path_buf(),
            source,
        })
}

/// A client for `config` (which came from `path`), on kube's rustls stack.
///
/// A client certificate that is X.509 v1 is refused here, naming it: rustls checks the
/// certificate against its key with webpki, which reads only v3 certificates, and kube's
/// error for it would be `invalid peer certificate: Other(OtherError(UnsupportedCertVersion))`.
/// (The Go kubelet takes a v1 one; ferrolet cannot without its own TLS client stack.)
pub fn client(config: kube::Config, path: &Path) -> Result<kube::Client, CertificateError> {
    let auth = config.auth_info.clone();
    kube::Client::try_from(config).map_err(|source| {
        let version = client_certificate(&auth)
            .ok()
            .flatten()
            .and_then(|pem| pem::certificates(&pem).ok())
            .and_then(|certs| {
                certs
                    .first()
                    .and_then(|leaf| pem::unsupported_version(leaf))
            });
        match version {
            Some(reason) => CertificateError::content(
                format!("{}: its client certificate", path.display()),
                format!(
                    "{}{reason}",
                    auth.client_certificate
                        .as_ref()
                        .map(|file| format!("{file}: "))
                        .unwrap_or_default()
                ),
            ),
            None => CertificateError::Client {
                path: path.to_path_buf(),
                source,
            },
        }
    })
}

/// `config` with `pair` (a store's certificate-and-key file) as its credentials instead of
/// whatever it had: the client after a rotation.
pub fn with_pair(mut config: kube::Config, pair: &Path) -> kube::Config {
    let pair = pair.to_string_lossy().into_owned();
    config.auth_info = AuthInfo {
        client_certificate: Some(pair.clone()),
        client_key: Some(pair),
        ..AuthInfo::default()
    };
    config
}

/// The client certificate(s) PEM of `auth` (from `client-certificate-data` or the
/// `client-certificate` file), if it has one. Blocking when it is a file.
pub fn client_certificate(auth: &AuthInfo) -> Result<Option<Vec<u8>>, String> {
    if let Some(data) = &auth.client_certificate_data {
        let compact: String = data.split_whitespace().collect();
        return base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map(Some)
            .map_err(|e| format!("client-certificate-data is not base64: {e}"));
    }
    match &auth.client_certificate {
        Some(file) => std::fs::read(file)
            .map(Some)
            .map_err(|e| format!("client-certificate {file}: {e}")),
        None => Ok(None),
    }
}

/// Why `auth` does not hold usable credentials at `now`, if it does not: a client certificate
/// that does not parse or has expired, or no credentials at all. A token (or token file, exec
/// plugin, auth provider) counts as usable. Blocking.
pub fn check_credentials(auth: &AuthInfo, now: i64) -> Result<(), String> {
    match client_certificate(auth)? {
        Some(certs) => pem::unexpired(&certs, now).map(|_| ()),
        None if auth.token.is_some()
            || auth.token_file.is_some()
            || auth.exec.is_some()
            || auth.auth_provider.is_some() =>
        {
            Ok(())
        }
        None => Err("no client certificate or token".into()),
    }
}

/// Whether the kubeconfig at `path` exists and its credentials are usable (Go's
/// `isClientConfigStillValid`); only a file that is there but cannot be looked at is an error,
/// anything else unusable is logged and answers false (bootstrap replaces it).
pub async fn usable(path: &Path) -> Result<bool, CertificateError> {
    match tokio::fs::metadata(path).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(CertificateError::io(path)(e)),
    }
    let config = match load(path).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "the existing kubeconfig cannot be loaded");
            return Ok(false);
        }
    };
    let auth = config.auth_info;
    let now = pem::unix_now();
    match tokio::task::spawn_blocking(move || check_credentials(&auth, now)).await? {
        Ok(()) => Ok(true),
        Err(reason) => {
            tracing::warn!(kubeconfig = %path.display(), %reason, "the existing kubeconfig is not usable");
            Ok(false)
        }
    }
}

/// The cluster of `kubeconfig`'s current context.
pub fn current_cluster(kubeconfig: &Kubeconfig) -> Result<Cluster, String> {
    let context_name = kubeconfig
        .current_context
        .as_deref()
        .ok_or("no current-context")?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| format!("no context {context_name:?}"))?;
    kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| format!("no cluster {:?}", context.cluster))
}

/// The kubeconfig bootstrap leaves: the bootstrap kubeconfig's cluster (server, CA file or
/// data, TLS settings), and the store's current pair (`pair`) as both client certificate and
/// key.
pub fn bootstrapped(bootstrap: &Kubeconfig, pair: &Path) -> Result<Kubeconfig, String> {
    let cluster = current_cluster(bootstrap)?;
    let pair = pair.to_string_lossy().into_owned();
    Ok(Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: CLUSTER.into(),
            cluster: Some(cluster),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: USER.into(),
            auth_info: Some(AuthInfo {
                client_certificate: Some(pair.clone()),
                client_key: Some(pair),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: CONTEXT.into(),
            context: Some(Context {
                cluster: CLUSTER.into(),
                user: Some(USER.into()),
                namespace: Some("default".into()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(CONTEXT.into()),
        ..Kubeconfig::default()
    })
}

/// Writes `kubeconfig` to `path` as YAML, 0600. Blocking.
pub fn write(kubeconfig: &Kubeconfig, path: &Path) -> Result<(), CertificateError> {
    let yaml =
        serde_yaml_ng::to_string(kubeconfig).map_err(|e| CertificateError::KubeconfigWrite {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(CertificateError::io(dir))?;
    }
    store::write_private(path, yaml.as_bytes())
}
