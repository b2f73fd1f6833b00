//! Certificate rotation (client-go's certificate manager): a task that sleeps until a
//! jittered 70–90 % of the current certificate's lifetime, then asks for a new one with a new
//! key, stores it, and puts it to use (a new API client, or the serving certificate swapped).
//! A certificate that no longer fits the template (another CN, missing SANs), or none at all,
//! is replaced at once. Failures retry after 2, 4, 8, 16 s (10 % jitter), then every 32 s.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::csr::{self, Template};
use super::pem::{self, CertInfo};
use super::serving::ReloadingCert;
use super::store::{CLIENT_PREFIX, FileStore};
use super::{CertificateError, CertificateSettings, kubeconfig};
use crate::kube_client::ApiHandle;

/// How long a rotation's CSR may wait for its certificate (Go's 15 minutes).
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// Retry delays of the first failed attempts (Go's 2 s ×2, five steps), then [`RETRY_POLL`].
const RETRY_BASE: Duration = Duration::from_secs(2);
const RETRY_STEPS: u32 = 4;
/// The delay between attempts once the back-off is spent.
const RETRY_POLL: Duration = Duration::from_secs(32);

/// A running rotation; dropping it stops the rotation.
#[derive(Debug)]
pub struct RotationTask {
    handle: tokio::task::JoinHandle<()>,
}

impl Drop for RotationTask {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// When a certificate valid from `not_before` to `not_after` (Unix seconds) is rotated: at
/// `fraction` of its lifetime.
pub fn rotation_deadline(not_before: i64, not_after: i64, fraction: f64) -> i64 {
    let total = not_after.saturating_sub(not_before).max(0) as f64;
    not_before.saturating_add((total * fraction).round() as i64)
}

/// Go's `jitteryDuration`: 70 % plus up to 20 % more, for `random` in [0, 1).
pub fn jittered_fraction(random: f64) -> f64 {
    0.7 + 0.2 * random.clamp(0.0, 1.0)
}

/// The delay after the `attempt`th failed attempt (from 0), `random` in [0, 1) for the
/// jitter.
pub fn retry_delay(attempt: u32, random: f64) -> Duration {
    if attempt >= RETRY_STEPS {
        return RETRY_POLL;
    }
    (RETRY_BASE * 2u32.pow(attempt)).mul_f64(1.0 + 0.1 * random.clamp(0.0, 1.0))
}

/// A random number in [0, 1): enough for jitter.
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded randomly per process and per instance.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_i128(jiff::Timestamp::now().as_nanosecond());
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Where a new certificate goes.
pub(crate) enum Target {
    /// The API client: rebuilt from the kubeconfig's configuration with the new pair.
    Client {
        /// The handle whose client is replaced.
        handle: ApiHandle,
        /// The kubeconfig's configuration (server, CA, TLS settings).
        base: Box<kube::Config>,
        /// The kubeconfig's path, for messages.
        kubeconfig: PathBuf,
        /// Asked with once the certificate has expired.
        bootstrap: Option<PathBuf>,
    },
    /// The serving certificate.
    Serving {
        /// The client the CSRs are made with.
        handle: ApiHandle,
        /// What the HTTPS server presents.
        cert: Arc<ReloadingCert>,
    },
}

/// One certificate's rotation.
pub(crate) struct Rotator {
    pub target: Target,
    pub store: FileStore,
    pub template: Template,
    pub timeout: Duration,
}

impl Rotator {
    /// Spawns the rotation of the certificate `current` (none: ask at once; `force`: ask at
    /// once even if it is fine).
    pub fn spawn(self, current: Option<CertInfo>, force: bool) -> RotationTask {
        RotationTask {
            handle: tokio::spawn(self.run(current, force)),
        }
    }

    async fn run(self, mut current: Option<CertInfo>, mut force: bool) {
        let what = self.template.signer_name;
        loop {
            let due = match &current {
                Some(info) if !force && self.template.satisfied_by(info) => {
                    let deadline = rotation_deadline(
                        info.not_before,
                        info.not_after,
                        jittered_fraction(random_unit()),
                    );
                    tracing::info!(
                        signer = what,
                        expires = info.not_after,
                        deadline,
                        "next certificate rotation"
                    );
                    deadline
                }
                Some(_) if !force => {
                    tracing::info!(
                        signer = what,
                        "the certificate does not fit the template, rotating"
                    );
                    0
                }
                _ => 0,
            };
            let wait = due.saturating_sub(pem::unix_now()).max(0);
            tokio::time::sleep(Duration::from_secs(wait as u64)).await;
            force = false;
            let mut attempt = 0;
            loop {
                match self.rotate(current.as_ref()).await {
                    Ok(info) => {
                        tracing::info!(
                            signer = what,
                            expires = info.not_after,
                            "certificate rotated"
                        );
                        current = Some(info);
                        break;
                    }
                    Err(e) => {
                        let delay = retry_delay(attempt, random_unit());
                        tracing::warn!(signer = what, error = %e, retry_in = ?delay, "certificate rotation failed");
                        tokio::time::sleep(delay).await;
                        attempt = attempt.saturating_add(1);
                    }
                }
            }
        }
    }

    /// One attempt: a new key and CSR, the certificate stored and put to use.
    async fn rotate(&self, current: Option<&CertInfo>) -> Result<CertInfo, CertificateError> {
        let client = self.csr_client(current).await?;
        let request = csr::new_request(&self.template).await?;
        let cert =
            csr::request_certificate(client, &self.template, &request, None, self.timeout).await?;
        let info = pem::leaf_info(&cert)
            .map_err(|reason| CertificateError::content("the issued certificate", reason))?;
        let store = self.store.clone();
        let (path, pair) = tokio::task::spawn_blocking(move || {
            let path = store.update(&cert, request.key_pem.as_bytes(), jiff::Timestamp::now())?;
            let pair = std::fs::read(&path).map_err(CertificateError::io(&path))?;
            Ok::<_, CertificateError>((path, pair))
        })
        .await??;
        self.install(&path, &pair)?;
        Ok(info)
    }

    /// The client to ask with: the current one, or the bootstrap kubeconfig's once the client
    /// certificate has expired (the current one cannot authenticate any more).
    async fn csr_client(
        &self,
        current: Option<&CertInfo>,
    ) -> Result<kube::Client, CertificateError> {
        match &self.target {
            Target::Client {
                bootstrap: Some(bootstrap),
                ..
            } if current.is_none_or(|c| c.not_after <= pem::unix_now()) => {
                tracing::info!(bootstrap = %bootstrap.display(), "the client certificate has expired, asking with the bootstrap kubeconfig");
                let config = kubeconfig::load(bootstrap).await?;
                kubeconfig::client(config, bootstrap)
            }
            Target::Client { handle, .. } | Target::Serving { handle, .. } => Ok(handle.client()),
        }
    }

    /// Puts the stored pair at `path` (contents `pair`) to use.
    fn install(&self, path: &Path, pair: &[u8]) -> Result<(), CertificateError> {
        match &self.target {
            Target::Client {
                handle,
                base,
                kubeconfig: from,
                ..
            } => {
                let config = kubeconfig::with_pair((**base).clone(), path);
                handle.replace(kubeconfig::client(config, from)?);
            }
            Target::Serving { cert, .. } => {
                let key = pem::certified_key(pair)
                    .map_err(|reason| CertificateError::content(path.display(), reason))?;
                cert.set(key);
            }
        }
        Ok(())
    }
}

/// Starts rotating the client certificate of `config` (the loaded `--kubeconfig`), replacing
/// `handle`'s client with each new one. None when the kubeconfig has no client certificate
/// (a token): there is nothing to rotate. A certificate embedded in the kubeconfig is
/// replaced at once by one in the store, as Go's manager does with one not in its store.
pub async fn spawn_client_rotation(
    settings: &CertificateSettings,
    handle: ApiHandle,
    config: kube::Config,
) -> Result<Option<RotationTask>, CertificateError> {
    let auth = config.auth_info.clone();
    let embedded = auth.client_certificate_data.is_some();
    let certs = tokio::task::spawn_blocking(move || kubeconfig::client_certificate(&auth))
        .await?
        .map_err(|reason| CertificateError::content(settings.kubeconfig.display(), reason))?;
    let Some(certs) = certs else {
        tracing::info!(kubeconfig = %settings.kubeconfig.display(), "no client certificate in the kubeconfig: not rotating");
        return Ok(None);
    };
    let current = match pem::leaf_info(&certs) {
        Ok(info) => Some(info),
        Err(reason) => {
            tracing::warn!(kubeconfig = %settings.kubeconfig.display(), %reason, "the client certificate cannot be read, asking for a new one");
            None
        }
    };
    let rotator = Rotator {
        target: Target::Client {
            handle,
            base: Box::new(config),
            kubeconfig: settings.kubeconfig.clone(),
            bootstrap: settings.bootstrap_kubeconfig.clone(),
        },
        store: FileStore::new(&settings.cert_dir, CLIENT_PREFIX),
        template: Template::client(&settings.node_name),
        timeout: WAIT_TIMEOUT,
    };
    Ok(Some(rotator.spawn(current, embedded)))
}
