//! The kubelet's credentials towards the cluster, as the Go kubelet keeps them: the
//! `--kubeconfig` client (made by TLS bootstrap from `--bootstrap-kubeconfig` when it is not
//! usable), client certificate rotation (`rotateCertificates`), and the serving certificate
//! from a `kubernetes.io/kubelet-serving` CSR (`serverTLSBootstrap`).
//!
//! Files, in `--cert-dir` (`<root-dir>/pki`): `kubelet-client-<ts>.pem` and
//! `kubelet-server-<ts>.pem` (certificate then key, 0600), each pair's `-current.pem` symlink
//! swapped atomically ([`store`]), and `kubelet-client.key.tmp`, the bootstrap key kept until
//! its CSR is answered.

pub mod bootstrap;
pub mod csr;
pub mod kubeconfig;
pub mod pem;
pub mod rotation;
pub mod serving;
pub mod store;

#[cfg(test)]
pub mod fixtures;
#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::kube_client::ApiHandle;

pub use rotation::RotationTask;
pub use serving::{ReloadingCert, serving_certificate};

/// How long the bootstrap CSR may wait for its certificate (Go's hour).
pub const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(3600);

/// What the kubelet's credentials are made from (flags and KubeletConfiguration fields).
#[derive(Clone, Debug)]
pub struct CertificateSettings {
    /// `--cert-dir` (default `<root-dir>/pki`): the certificate store.
    pub cert_dir: PathBuf,
    /// `--kubeconfig`: the client's kubeconfig, written by bootstrap when not usable.
    pub kubeconfig: PathBuf,
    /// `--bootstrap-kubeconfig`: credentials to ask for a client certificate with.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `rotateCertificates` (KubeletConfiguration default false; kubeadm sets true).
    pub rotate_certificates: bool,
    /// `serverTLSBootstrap` (default false): the serving certificate from a CSR.
    pub server_tls_bootstrap: bool,
    /// The node's name (`system:node:<name>`).
    pub node_name: String,
    /// The node's hostnames, DNS SANs of the serving certificate (Go: the node's Hostname,
    /// InternalDNS and ExternalDNS addresses).
    pub hostnames: Vec<String>,
    /// The node's IPs, IP SANs of the serving certificate.
    pub node_addresses: Vec<IpAddr>,
    /// How long the bootstrap CSR may wait ([`BOOTSTRAP_TIMEOUT`]).
    pub bootstrap_timeout: Duration,
}

/// Why the kubelet's credentials cannot be loaded or renewed.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    /// A kubeconfig cannot be read or resolved (kube's reason).
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The kubeconfig.
        path: PathBuf,
        /// kube's error.
        source: kube::config::KubeconfigError,
    },
    /// A kubeconfig cannot be written.
    #[error("writing kubeconfig {path}: {reason}")]
    KubeconfigWrite {
        /// The kubeconfig.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// A client cannot be built from a kubeconfig.
    #[error("building an API client from {path}: {source}")]
    Client {
        /// The kubeconfig (or certificate) it came from.
        path: PathBuf,
        /// kube's error.
        source: kube::Error,
    },
    /// A file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// PEM or DER that is not what it must be.
    #[error("{what}: {reason}")]
    Content {
        /// Which file or object.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// A key or request cannot be made.
    #[error("generating a key or certificate request: {0}")]
    Generate(#[from] rcgen::Error),
    /// An API call about a CSR failed.
    #[error("{what}: {source}")]
    Api {
        /// The call, naming the CSR.
        what: String,
        /// kube's error.
        source: kube::Error,
    },
    /// The CSR was denied.
    #[error("certificate signing request {name} is denied, reason: {reason}, message: {message}")]
    Denied {
        /// The CSR.
        name: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// The signer failed the CSR.
    #[error("certificate signing request {name} failed, reason: {reason}, message: {message}")]
    Failed {
        /// The CSR.
        name: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// No certificate in time.
    #[error("certificate signing request {name} was not signed within {after:?}")]
    Timeout {
        /// The CSR.
        name: String,
        /// How long it was waited for.
        after: Duration,
    },
    /// A blocking task died.
    #[error("certificate task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl CertificateError {
    fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| CertificateError::Io { path, source }
    }

    fn content(what: impl std::fmt::Display, reason: impl std::fmt::Display) -> Self {
        CertificateError::Content {
            what: what.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// `error` (from a call to the API server) as ferrolet logs it: its text, and, when the TLS
/// handshake failed because the API server presented an X.509 v1 serving certificate, that
/// reason in words. rustls verifies only v3 end-entity certificates and cannot be told
/// otherwise (Go accepts v1), and kube's error says no more than `client error (Connect)`.
pub fn api_error_text(error: &(dyn std::error::Error + 'static)) -> String {
    if server_certificate_version_refused(error) {
        format!(
            "{error}: the API server's serving certificate is {}",
            pem::version_reason(1).replacen("an X.509 v1", "an X.509 v1 (or v2)", 1)
        )
    } else {
        error.to_string()
    }
}

/// Whether webpki's `UnsupportedCertVersion` is among `error`'s causes. An `io::Error`'s
/// `source()` skips the error it wraps, so each one's inner error is looked at too.
fn server_certificate_version_refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let refused = |e: &(dyn std::error::Error + 'static)| {
        matches!(
            e.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)))
                if matches!(
                    other.0.downcast_ref::<webpki::Error>(),
                    Some(webpki::Error::UnsupportedCertVersion)
                )
        )
    };
    let mut next = Some(error);
    while let Some(e) = next {
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        if refused(e) || inner.is_some_and(refused) {
            return true;
        }
        next = inner.or_else(|| e.source());
    }
    false
}

/// The client of `--kubeconfig` (bootstrapped first when `--bootstrap-kubeconfig` is set and
/// the kubeconfig is not usable, as Go's `LoadClientCert`), in a handle; with
/// `rotate_certificates`, the task rotating its certificate (keep it: dropping it stops
/// rotation).
pub async fn connect(
    settings: &CertificateSettings,
) -> Result<(ApiHandle, Option<RotationTask>), CertificateError> {
    if let Some(bootstrap) = &settings.bootstrap_kubeconfig {
        bootstrap::load_client_cert(settings, bootstrap).await?;
    }
    let config = kubeconfig::load(&settings.kubeconfig).await?;
    let client = kubeconfig::client(config.clone(), &settings.kubeconfig)?;
    let handle = ApiHandle::new(client, &settings.node_name);
    let rotation = if settings.rotate_certificates {
        rotation::spawn_client_rotation(settings, handle.clone(), config).await?
    } else {
        None
    };
    Ok((handle, rotation))
}
