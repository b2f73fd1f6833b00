//! The serving certificate from the API server (`serverTLSBootstrap`): a
//! `kubernetes.io/kubelet-serving` CSR for the node's names and IPs, stored as
//! `kubelet-server-<ts>.pem` and rotated like the client certificate, and [`ReloadingCert`],
//! the rustls certificate resolver the HTTPS server presents it through, so a new certificate
//! is used from the next handshake on without a restart.

use std::sync::{Arc, RwLock};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::csr::Template;
use super::rotation::{RotationTask, Rotator, Target, WAIT_TIMEOUT};
use super::store::{FileStore, SERVER_PREFIX};
use super::{CertificateError, CertificateSettings, pem};
use crate::kube_client::ApiHandle;

/// The serving certificate in use, replaceable while the server runs.
#[derive(Default)]
pub struct ReloadingCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ReloadingCert {
    /// A resolver presenting nothing yet (handshakes fail until [`ReloadingCert::set`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The certificate presented from now on.
    pub fn set(&self, key: Arc<CertifiedKey>) {
        match self.current.write() {
            Ok(mut c) => *c = Some(key),
            Err(poisoned) => *poisoned.into_inner() = Some(key),
        }
    }

    /// Presents `key` unless a certificate is set already (the self-signed stand-in until
    /// the first issued one); whether it was taken.
    pub fn set_if_empty(&self, key: Arc<CertifiedKey>) -> bool {
        let mut c = match self.current.write() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if c.is_some() {
            return false;
        }
        *c = Some(key);
        true
    }

    /// The certificate presented now.
    pub fn get(&self) -> Option<Arc<CertifiedKey>> {
        match self.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("set", &self.get().is_some())
            .finish()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.get()
    }
}

/// The serving certificate with `serverTLSBootstrap`: the stored `kubelet-server-current.pem`
/// if it is unexpired (presented at once), and the task that asks for one (at once when there
/// is none or it lacks a name or IP) and rotates it, with `handle`'s client. Until the first
/// is issued the resolver is empty (Go serves nothing); the secure server may stand in its
/// self-signed pair with [`ReloadingCert::set_if_empty`].
pub async fn serving_certificate(
    settings: &CertificateSettings,
    handle: ApiHandle,
) -> Result<(Arc<ReloadingCert>, RotationTask), CertificateError> {
    let store = FileStore::new(&settings.cert_dir, SERVER_PREFIX);
    let cert = Arc::new(ReloadingCert::new());
    let current = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || store.current()).await??
    };
    let mut info = None;
    if let Some(pair) = current {
        let path = store.current_path();
        match pem::unexpired(&pair, pem::unix_now())
            .and_then(|i| pem::certified_key(&pair).map(|k| (i, k)))
        {
            Ok((i, key)) => {
                tracing::info!(cert = %path.display(), "using the stored serving certificate");
                cert.set(key);
                info = Some(i);
            }
            Err(reason) => {
                tracing::warn!(cert = %path.display(), %reason, "the stored serving certificate is not usable");
            }
        }
    }
    let rotator = Rotator {
        target: Target::Serving {
            handle,
            cert: cert.clone(),
        },
        store,
        template: Template::serving(
            &settings.node_name,
            &settings.hostnames,
            &settings.node_addresses,
        ),
        timeout: WAIT_TIMEOUT,
    };
    Ok((cert, rotator.spawn(info, false)))
}
