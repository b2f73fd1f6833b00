//! TLS bootstrap (Go's `bootstrap.LoadClientCert`): when `--kubeconfig` is not usable, the
//! bootstrap kubeconfig's credentials ask for a client certificate for the node, which is
//! stored in the cert dir, and a kubeconfig naming it is written to `--kubeconfig`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::KeyPair;

use super::csr::{self, Template};
use super::store::{CLIENT_PREFIX, FileStore};
use super::{CertificateError, CertificateSettings, kubeconfig, pem};

/// The bootstrap key, kept until its CSR is answered so a restart asks with the same key
/// (and so finds the same `node-csr-…`).
pub const PENDING_KEY: &str = "kubelet-client.key.tmp";

/// How long to wait for the API server before the first request (Go's minute).
const SERVER_WAIT: Duration = Duration::from_secs(60);

/// Makes `settings.kubeconfig` usable, bootstrapping with `bootstrap` if it is not.
pub async fn load_client_cert(
    settings: &CertificateSettings,
    bootstrap: &Path,
) -> Result<(), CertificateError> {
    if kubeconfig::usable(&settings.kubeconfig).await? {
        tracing::info!(kubeconfig = %settings.kubeconfig.display(), "the kubeconfig is usable, skipping bootstrap");
        return Ok(());
    }
    tracing::info!(bootstrap = %bootstrap.display(), "using the bootstrap kubeconfig to ask for a client certificate");
    let raw = kubeconfig::read(bootstrap).await?;
    let config = kube::Config::from_custom_kubeconfig(raw.clone(), &Default::default())
        .await
        .map_err(|source| CertificateError::Kubeconfig {
            path: bootstrap.to_path_buf(),
            source,
        })?;
    let client = kubeconfig::client(config, bootstrap)?;

    let store = FileStore::new(&settings.cert_dir, CLIENT_PREFIX);
    let pending = settings.cert_dir.join(PENDING_KEY);
    let template = Template::client(&settings.node_name);
    let (request, pending) = {
        let (store, template) = (store.clone(), template.clone());
        tokio::task::spawn_blocking(move || {
            let key = bootstrap_key(&store, &pending)?;
            csr::make_request(&template, &key).map(|r| (r, pending))
        })
        .await??
    };

    wait_for_server(&client).await;
    let name = csr::digested_name(&request.public_key_der, &template);
    let cert = csr::request_certificate(
        client,
        &template,
        &request,
        Some(&name),
        settings.bootstrap_timeout,
    )
    .await?;
    pem::leaf_info(&cert).map_err(|reason| {
        CertificateError::content(format!("certificate of CSR {name}"), reason)
    })?;

    let kubeconfig_path = settings.kubeconfig.clone();
    tokio::task::spawn_blocking(move || {
        let pair = store.update(&cert, request.key_pem.as_bytes(), jiff::Timestamp::now())?;
        tracing::info!(pair = %pair.display(), "stored the bootstrapped client certificate");
        if let Err(e) = std::fs::remove_file(&pending)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(file = %pending.display(), error = %e, "removing the pending key");
        }
        let written = kubeconfig::bootstrapped(&raw, &store.current_path()).map_err(|reason| {
            CertificateError::KubeconfigWrite {
                path: kubeconfig_path.clone(),
                reason,
            }
        })?;
        kubeconfig::write(&written, &kubeconfig_path)?;
        tracing::info!(kubeconfig = %kubeconfig_path.display(), "wrote the kubeconfig");
        Ok(())
    })
    .await?
}

/// The key to ask with (Go's order): the store's current pair's key, else the pending key
/// file, else a new one written there first (0600). Blocking.
fn bootstrap_key(store: &FileStore, pending: &PathBuf) -> Result<KeyPair, CertificateError> {
    if let Some(pair) = store.current()?
        && let Ok(der) = pem::private_key(&pair)
        && let Ok(key) = KeyPair::try_from(&der)
    {
        return Ok(key);
    }
    match std::fs::read(pending) {
        Ok(bytes) => match pem::private_key(&bytes).map(|der| KeyPair::try_from(&der)) {
            Ok(Ok(key)) => return Ok(key),
            _ => {
                tracing::warn!(file = %pending.display(), "the pending key is unreadable, making a new one")
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(CertificateError::io(pending)(e)),
    }
    let key = csr::generate_key()?;
    if let Some(dir) = pending.parent() {
        std::fs::create_dir_all(dir).map_err(CertificateError::io(dir))?;
    }
    super::store::write_private(pending, key.serialize_pem().as_bytes())?;
    Ok(key)
}

/// Waits up to a minute for the API server to answer, as Go does before its first request;
/// only logs if it does not (the request itself then fails with the reason).
async fn wait_for_server(client: &kube::Client) {
    let deadline = tokio::time::Instant::now() + SERVER_WAIT;
    loop {
        match client.apiserver_version().await {
            Ok(_) => return,
            Err(e) => {
                let error = super::api_error_text(&e);
                tracing::info!(%error, "failed to connect to the API server")
            }
        }
        if tokio::time::Instant::now() + Duration::from_secs(2) > deadline {
            tracing::warn!("timed out waiting to connect to the API server");
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
