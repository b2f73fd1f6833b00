//! TLS for the secure API: the serving certificate (the configured `tlsCertFile` and
//! `tlsPrivateKeyFile`, or a self-signed one kept in the cert dir as the Go kubelet keeps
//! `kubelet.crt`/`kubelet.key`), the rustls server configuration on the ring provider, and
//! client certificates asked for when `clientCAFile` is set.
//!
//! Client certificates are checked after the handshake, not during it: the Go kubelet asks
//! for them with `tls.RequestClientCert` and verifies them in its x509 authenticator, so a
//! request without one, or with one from another CA, still reaches HTTP and gets 401
//! Unauthorized (rather than a failed handshake). [`DeferredClientVerifier`] does the same
//! with rustls: it hints the configured CAs and checks that the client owns the key it
//! presents (the handshake signature), and [`crate::server::auth`] verifies the chain per
//! request against the same CAs.
//!
//! X.509 v1 certificates (what `openssl x509 -req` makes without `-extfile`): a v1 serving
//! certificate is served (its key checked by [`pem::certified_key_der`], not by webpki); the
//! client CAs may be v1 (webpki takes v1 trust anchors); a client presenting a v1 certificate
//! completes the handshake (its signature checked against the certificate's key alone) and is
//! then refused with 401 and a log line saying why, since webpki verifies only v3 end
//! entities and rustls cannot be told otherwise.

use std::fmt;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ResolvesServerCert, ServerConfig, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{DigitallySignedStruct, DistinguishedName as HintName, RootCertStore};

use crate::certificate::pem;

/// File names of the self-signed serving certificate in the cert dir (the Go kubelet's).
pub const SELF_SIGNED_CERT: &str = "kubelet.crt";
/// File name of its key.
pub const SELF_SIGNED_KEY: &str = "kubelet.key";

/// How long a generated certificate is valid (the Go kubelet's one year).
const VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// How far back its validity starts, for clocks slightly behind ours (Go's hour).
const BACKDATE: Duration = Duration::from_secs(3600);

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file does not hold what it should.
    #[error("{path}: {reason}")]
    Content {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The self-signed certificate cannot be made.
    #[error("generating a self-signed serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The clock is outside what a certificate can carry.
    #[error("a certificate cannot be valid at Unix time {0}")]
    Time(i64),
    /// A generated file cannot be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// rustls refuses the certificate, key or CAs.
    #[error("{what}: {source}")]
    Rustls {
        /// What was being set up.
        what: String,
        /// rustls' reason.
        source: rustls::Error,
    },
}

/// The ring provider, as everywhere in the workspace.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The serving certificate and key files in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingFiles {
    /// The certificate chain (PEM), leaf first.
    pub cert_file: PathBuf,
    /// Its key (PEM).
    pub key_file: PathBuf,
    /// Whether ferrolet made them (this start or an earlier one).
    pub self_signed: bool,
}

/// The serving files: the configured pair, or `cert_dir`'s `kubelet.crt`/`kubelet.key`, made
/// now (for `host` and `ips`) unless a usable pair is there: both readable, the key matching
/// the certificate, and the certificate not expired. Blocking: file I/O and key generation.
pub fn serving_files(
    configured: Option<(&Path, &Path)>,
    cert_dir: &Path,
    host: &str,
    ips: &[IpAddr],
) -> Result<ServingFiles, TlsError> {
    if let Some((cert, key)) = configured {
        return Ok(ServingFiles {
            cert_file: cert.to_path_buf(),
            key_file: key.to_path_buf(),
            self_signed: false,
        });
    }
    let files = ServingFiles {
        cert_file: cert_dir.join(SELF_SIGNED_CERT),
        key_file: cert_dir.join(SELF_SIGNED_KEY),
        self_signed: true,
    };
    match usable(&files.cert_file, &files.key_file, unix_now()) {
        Ok(()) => {
            tracing::info!(cert = %files.cert_file.display(), "using the self-signed serving certificate made earlier");
            return Ok(files);
        }
        Err(reason) if files.cert_file.exists() || files.key_file.exists() => {
            tracing::warn!(cert = %files.cert_file.display(), %reason, "making a new self-signed serving certificate");
        }
        Err(_) => {}
    }
    let (cert_pem, key_pem) = self_signed(host, ips, unix_now())?;
    std::fs::create_dir_all(cert_dir).map_err(|source| TlsError::Write {
        path: cert_dir.to_path_buf(),
        source,
    })?;
    write_atomically(&files.key_file, key_pem.as_bytes(), 0o600)?;
    write_atomically(&files.cert_file, cert_pem.as_bytes(), 0o644)?;
    tracing::info!(cert = %files.cert_file.display(), key = %files.key_file.display(), %host, "made a self-signed serving certificate");
    Ok(files)
}

/// Why the pair at `cert`/`key` cannot be reused, if it cannot.
fn usable(cert: &Path, key: &Path, now: i64) -> Result<(), String> {
    let chain = read_chain(cert).map_err(|e| e.to_string())?;
    let key_der = read_key(key).map_err(|e| e.to_string())?;
    let leaf = chain.first().cloned().ok_or("no certificate")?;
    pem::certified_key_der(chain, key_der)?;
    if pem::info(&leaf)?.not_after <= now {
        return Err("the certificate has expired".into());
    }
    Ok(())
}

/// A self-signed serving certificate as the Go kubelet makes one: a CA named
/// `<host>-ca@<unix time>` signing a leaf `<host>@<unix time>` for `host` (a DNS name, or an
/// IP) and `ips`, valid for a year from an hour ago; the PEM holds the leaf, then the CA.
/// ECDSA P-256 keys (Go uses RSA 2048; ring cannot generate RSA keys), the key as PKCS#8.
pub fn self_signed(host: &str, ips: &[IpAddr], now: i64) -> Result<(String, String), TlsError> {
    let not_before = timestamp(now - BACKDATE.as_secs() as i64)?;
    let not_after = timestamp(now + VALIDITY.as_secs() as i64)?;

    let mut ca = CertificateParams::default();
    ca.distinguished_name = common_name(&format!("{host}-ca@{now}"));
    ca.not_before = not_before;
    ca.not_after = not_after;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
    ];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut leaf = CertificateParams::default();
    leaf.distinguished_name = common_name(&format!("{host}@{now}"));
    leaf.not_before = not_before;
    leaf.not_after = not_after;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.use_authority_key_identifier_extension = true;
    let mut sans = Vec::new();
    match host.parse::<IpAddr>() {
        Ok(ip) => sans.push(SanType::IpAddress(ip)),
        Err(_) => sans.push(SanType::DnsName(host.try_into()?)),
    }
    for ip in ips {
        if !sans.contains(&SanType::IpAddress(*ip)) {
            sans.push(SanType::IpAddress(*ip));
        }
    }
    leaf.subject_alt_names = sans;
    let leaf_key = KeyPair::generate()?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
    Ok((
        format!("{}{}", leaf_cert.pem(), ca_cert.pem()),
        leaf_key.serialize_pem(),
    ))
}

fn common_name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

fn timestamp(secs: i64) -> Result<time::OffsetDateTime, TlsError> {
    time::OffsetDateTime::from_unix_timestamp(secs).map_err(|_| TlsError::Time(secs))
}

/// Now, Unix seconds.
fn unix_now() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// Writes `data` beside `path` with `mode` and renames it into place, so a reader never sees
/// half a file and the key never exists with wider permissions.
fn write_atomically(path: &Path, data: &[u8], mode: u32) -> Result<(), TlsError> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let err = |source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(data).and_then(|()| f.sync_all()).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Every certificate in the PEM file at `path`.
pub fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Content {
            path: path.to_path_buf(),
            reason: format!("not PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Content {
            path: path.to_path_buf(),
            reason: "no certificate in it (PEM \"CERTIFICATE\" blocks)".into(),
        });
    }
    Ok(certs)
}

/// The private key (PKCS#8, PKCS#1 or SEC1 PEM) at `path`.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Content {
        path: path.to_path_buf(),
        reason: format!("no private key in it: {e}"),
    })
}

/// The client CAs of `clientCAFile`, as a webpki verifier (the one that checks chains per
/// request).
pub fn client_verifier(ca_file: &Path) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(read_chain(ca_file)?);
    if added == 0 {
        return Err(TlsError::Content {
            path: ca_file.to_path_buf(),
            reason: format!("none of its {ignored} certificate(s) can be a trust anchor"),
        });
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Content {
            path: ca_file.to_path_buf(),
            reason: format!("client CAs: {e}"),
        })
}

/// The server side of TLS: the serving pair, and client certificates asked for (checked
/// later by `clients`) when there is a verifier. Blocking: reads the files.
pub fn server_config(
    files: &ServingFiles,
    clients: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let key = certified_key(files)?;
    server_config_resolving(Arc::new(SingleCertAndKey::from(key)), clients)
}

/// The serving pair as a rustls signing key, the key checked against the certificate.
/// Blocking: reads the files.
pub fn certified_key(files: &ServingFiles) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = read_chain(&files.cert_file)?;
    let key = read_key(&files.key_file)?;
    match pem::info(&chain[0]) {
        Ok(leaf) if leaf.not_after <= unix_now() => {
            tracing::warn!(cert = %files.cert_file.display(), "the serving certificate has expired");
        }
        Ok(_) => {}
        Err(reason) => {
            return Err(TlsError::Content {
                path: files.cert_file.clone(),
                reason,
            });
        }
    }
    let pair = pem::certified_key_der(chain, key).map_err(|reason| TlsError::Content {
        path: files.cert_file.clone(),
        reason: format!("with key {}: {reason}", files.key_file.display()),
    })?;
    Ok(Arc::new(pair))
}

/// The server side of TLS with the certificate chosen per handshake by `certs` (one that
/// changes while the server runs: a rotated serving certificate), and client certificates
/// asked for as in [`server_config`].
pub fn server_config_resolving(
    certs: Arc<dyn ResolvesServerCert>,
    clients: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            what: "TLS versions".into(),
            source,
        })?;
    let builder = match clients {
        Some(inner) => {
            builder.with_client_cert_verifier(Arc::new(DeferredClientVerifier { inner }))
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(certs);
    // HTTP/1.1 is all the server speaks; clients offering h2 as well fall back to it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Asks for a client certificate without requiring one and without judging its chain during
/// the handshake (Go's `tls.RequestClientCert`); the handshake still proves the client holds
/// the certificate's key. The chain is checked per request by the authenticator.
pub struct DeferredClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
}

impl fmt::Debug for DeferredClientVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferredClientVerifier")
            .finish_non_exhaustive()
    }
}

impl ClientCertVerifier for DeferredClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[HintName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Deferred to the authenticator, which answers 401 over HTTP as the Go kubelet does.
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self.inner.verify_tls12_signature(message, cert, dss) {
            Err(_) if pem::unsupported_version(cert).is_some() => {
                signed_by_key_of(message, cert, dss, false)
            }
            verified => verified,
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self.inner.verify_tls13_signature(message, cert, dss) {
            Err(_) if pem::unsupported_version(cert).is_some() => {
                signed_by_key_of(message, cert, dss, true)
            }
            verified => verified,
        }
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Whether `dss` signs `message` with the key of `cert`, read by ferrolet rather than webpki:
/// for the X.509 v1 (and v2) client certificates webpki will not parse, so that their clients
/// reach HTTP and hear why they are refused (the authenticator's 401) instead of a handshake
/// alert. Only possession of the key is shown here; the certificate itself is never trusted.
fn signed_by_key_of(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    tls13: bool,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let bad = || rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding);
    let spki = pem::public_key_info(cert).map_err(|_| bad())?;
    let algorithms = provider().signature_verification_algorithms;
    if tls13 {
        return rustls::crypto::verify_tls13_signature_with_raw_key(
            message,
            &SubjectPublicKeyInfoDer::from(spki.as_slice()),
            dss,
            &algorithms,
        );
    }
    // TLS 1.2 names no curve in its schemes: every algorithm of the scheme whose key type is
    // the certificate's is tried, as rustls does for the certificates webpki reads.
    let (key_algorithm, public_key) = split_public_key_info(&spki).ok_or_else(bad)?;
    let candidates = algorithms
        .mapping
        .iter()
        .find(|(scheme, _)| *scheme == dss.scheme)
        .map(|(_, algs)| *algs)
        .ok_or(rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme)?;
    candidates
        .iter()
        .filter(|alg| alg.public_key_alg_id().as_ref() == key_algorithm)
        .find(|alg| {
            alg.verify_signature(public_key, message, dss.signature())
                .is_ok()
        })
        .map(|_| HandshakeSignatureValid::assertion())
        .ok_or(rustls::Error::InvalidCertificate(
            rustls::CertificateError::BadSignature,
        ))
}

/// A SubjectPublicKeyInfo's algorithm (the contents of its AlgorithmIdentifier, as webpki
/// names algorithms) and its key (the BIT STRING's bits).
fn split_public_key_info(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    use x509_cert::der::{Decode, Header, Reader, SliceReader};
    let mut outer = SliceReader::new(spki).ok()?;
    let header = Header::decode(&mut outer).ok()?;
    let mut inner = SliceReader::new(outer.read_slice(header.length).ok()?).ok()?;
    let algorithm = Header::decode(&mut inner).ok()?;
    let algorithm = inner.read_slice(algorithm.length).ok()?;
    let key = Header::decode(&mut inner).ok()?;
    // The BIT STRING's first octet counts unused bits, 0 for every key type.
    let key = inner.read_slice(key.length).ok()?.split_first()?.1;
    Some((algorithm, key))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::ServerName;

    const NOW: i64 = 1_800_000_000;
    const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn chain(pem: &str) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Whether a client trusting the PEM's certificates accepts its leaf for `name` at `at`.
    fn verifies(pem: &str, name: &str, at: i64) -> Result<(), rustls::Error> {
        let certs = chain(pem);
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(certs.clone());
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
        let at = UnixTime::since_unix_epoch(Duration::from_secs(at as u64));
        verifier
            .verify_server_cert(
                &certs[0],
                &certs[1..],
                &ServerName::try_from(name.to_string()).unwrap(),
                &[],
                at,
            )
            .map(|_| ())
    }

    #[test]
    fn self_signed_as_the_go_kubelet_makes_it() {
        let (cert, key) = self_signed("node-a", &[LOCALHOST], NOW).unwrap();
        let certs = chain(&cert);
        assert_eq!(certs.len(), 2, "the leaf, then its CA");
        let leaf = pem::info(&certs[0]).unwrap();
        let ca = pem::info(&certs[1]).unwrap();
        assert_eq!(leaf.common_name.as_deref(), Some("node-a@1800000000"));
        assert_eq!(ca.common_name.as_deref(), Some("node-a-ca@1800000000"));
        let v = leaf;
        assert_eq!(v.not_before, NOW - 3600);
        assert_eq!(v.not_after, NOW + 365 * 24 * 3600);
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "{key}");
        CertifiedKey::from_der(
            certs,
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            &provider(),
        )
        .unwrap();

        verifies(&cert, "node-a", NOW).unwrap();
        verifies(&cert, "127.0.0.1", NOW).unwrap();
        assert!(verifies(&cert, "node-b", NOW).is_err());
        assert!(verifies(&cert, "10.0.0.1", NOW).is_err());
        assert!(verifies(&cert, "node-a", NOW + 366 * 24 * 3600).is_err());
    }

    #[test]
    fn an_ip_host_is_an_ip_san() {
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let (cert, _) = self_signed("10.1.2.3", &[LOCALHOST, ip], NOW).unwrap();
        verifies(&cert, "10.1.2.3", NOW).unwrap();
        verifies(&cert, "127.0.0.1", NOW).unwrap();
    }

    #[test]
    fn serving_files_are_reused_while_usable() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let files = serving_files(None, &pki, "node-a", &[LOCALHOST]).unwrap();
        assert!(files.self_signed);
        let first = std::fs::read_to_string(&files.cert_file).unwrap();
        let again = serving_files(None, &pki, "node-a", &[LOCALHOST]).unwrap();
        assert_eq!(again, files);
        assert_eq!(std::fs::read_to_string(&files.cert_file).unwrap(), first);
        let left: Vec<_> = std::fs::read_dir(&pki)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "only kubelet.crt and kubelet.key: {left:?}");

        // Expired: replaced.
        let (old_cert, old_key) = self_signed("node-a", &[LOCALHOST], 1_500_000_000).unwrap();
        std::fs::write(&files.cert_file, &old_cert).unwrap();
        std::fs::write(&files.key_file, &old_key).unwrap();
        assert!(usable(&files.cert_file, &files.key_file, unix_now()).is_err());
        serving_files(None, &pki, "node-a", &[LOCALHOST]).unwrap();
        let renewed = std::fs::read_to_string(&files.cert_file).unwrap();
        assert_ne!(renewed, old_cert);
        assert!(usable(&files.cert_file, &files.key_file, unix_now()).is_ok());

        // Garbage: replaced.
        std::fs::write(&files.cert_file, "not a certificate").unwrap();
        serving_files(None, &pki, "node-a", &[LOCALHOST]).unwrap();
        assert!(usable(&files.cert_file, &files.key_file, unix_now()).is_ok());
    }

    #[test]
    fn configured_files_are_taken_as_they_are() {
        let files = serving_files(
            Some((Path::new("/etc/k/tls.crt"), Path::new("/etc/k/tls.key"))),
            Path::new("/nonexistent"),
            "node-a",
            &[],
        )
        .unwrap();
        assert_eq!(files.cert_file, Path::new("/etc/k/tls.crt"));
        assert!(!files.self_signed);
    }

    /// A client that trusts whatever the server presents (and every handshake signature): the
    /// server side is what is under test.
    #[derive(Debug)]
    struct TrustAll;

    impl ServerCertVerifier for TrustAll {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    /// A handshake of a client (TLS `version`, presenting `identity` if any, verifying with
    /// `verifier`) with `server`; the client certificates the server saw, or the client's
    /// error, else the server's.
    async fn handshake(
        server: Arc<ServerConfig>,
        verifier: Arc<dyn ServerCertVerifier>,
        identity: Option<(&str, &str)>,
        version: &'static rustls::SupportedProtocolVersion,
    ) -> Result<Vec<CertificateDer<'static>>, String> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[version])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let client = match identity {
            Some((cert, key)) => {
                let pair = format!("{cert}{key}");
                builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(
                    pem::certified_key_der(
                        pem::certificates(pair.as_bytes()).unwrap(),
                        pem::private_key(pair.as_bytes()).unwrap(),
                    )
                    .unwrap(),
                )))
            }
            None => builder.with_no_client_auth(),
        };
        let (a, b) = tokio::io::duplex(64 * 1024);
        let accept = tokio_rustls::TlsAcceptor::from(server).accept(a);
        let connect = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), b);
        let (accepted, connected) = tokio::join!(accept, connect);
        connected.map_err(|e| format!("client: {e}"))?;
        let accepted = accepted.map_err(|e| format!("server: {e}"))?;
        Ok(accepted
            .get_ref()
            .1
            .peer_certificates()
            .map(|c| c.to_vec())
            .unwrap_or_default())
    }

    fn files_of(dir: &Path, cert: &str, key: &str) -> ServingFiles {
        let files = ServingFiles {
            cert_file: dir.join("tls.crt"),
            key_file: dir.join("tls.key"),
            self_signed: false,
        };
        std::fs::write(&files.cert_file, cert).unwrap();
        std::fs::write(&files.key_file, key).unwrap();
        files
    }

    /// `openssl x509 -req` without `-extfile` makes a v1 certificate: it serves (rustls' own
    /// key check would refuse it), and a webpki client is the one that refuses it.
    #[tokio::test]
    async fn a_v1_serving_certificate_serves() {
        use crate::certificate::fixtures;
        let dir = tempfile::tempdir().unwrap();
        let files = files_of(dir.path(), fixtures::SERVER_V1, fixtures::SERVER_V1_KEY);
        assert!(usable(&files.cert_file, &files.key_file, NOW).is_ok());
        let config = server_config(&files, None).unwrap();
        for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
            handshake(config.clone(), Arc::new(TrustAll), None, version)
                .await
                .unwrap();
        }
        let mut roots = RootCertStore::empty();
        roots.add(fixtures::der(fixtures::CA_V3)).unwrap();
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
        let err = handshake(config, webpki, None, &rustls::version::TLS13)
            .await
            .unwrap_err();
        assert!(err.contains("UnsupportedCertVersion"), "{err}");

        let wrong = files_of(dir.path(), fixtures::SERVER_V1, fixtures::SERVER_V3_KEY);
        let err = server_config(&wrong, None).unwrap_err().to_string();
        assert!(
            err.contains("tls.crt") && err.contains("does not fit"),
            "{err}"
        );
    }

    /// A client presenting a v1 certificate (RSA, P-256) completes the handshake over TLS 1.2
    /// and 1.3, its signature checked against the certificate's key, so the authenticator can
    /// refuse it over HTTP with the reason; a signature by another key is still refused.
    #[tokio::test]
    async fn a_v1_client_certificate_gets_through_the_handshake() {
        use crate::certificate::fixtures;
        let dir = tempfile::tempdir().unwrap();
        let files = files_of(dir.path(), fixtures::SERVER_V3, fixtures::SERVER_V3_KEY);
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, fixtures::CA_V3).unwrap();
        let config = server_config(&files, Some(client_verifier(&ca).unwrap())).unwrap();
        let identities = [
            (fixtures::CLIENT_V1, fixtures::CLIENT_V1_KEY),
            (fixtures::SERVER_V1, fixtures::SERVER_V1_KEY),
            (fixtures::CLIENT_V3, fixtures::CLIENT_V3_KEY),
        ];
        for (cert, key) in identities {
            for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
                let peer = handshake(
                    config.clone(),
                    Arc::new(TrustAll),
                    Some((cert, key)),
                    version,
                )
                .await
                .unwrap();
                assert_eq!(peer, [fixtures::der(cert)]);
            }
        }
        // The v1 certificate of one key, the handshake signed by another: refused.
        let other = rustls::crypto::ring::default_provider()
            .key_provider
            .load_private_key(pem::private_key(fixtures::SERVER_V3_KEY.as_bytes()).unwrap())
            .unwrap();
        let liar = CertifiedKey::new(vec![fixtures::der(fixtures::SERVER_V1)], other);
        for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
            let client = rustls::ClientConfig::builder_with_provider(provider())
                .with_protocol_versions(&[version])
                .unwrap()
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(TrustAll))
                .with_client_cert_resolver(Arc::new(SingleCertAndKey::from(liar.clone())));
            let (a, b) = tokio::io::duplex(64 * 1024);
            let accept = tokio_rustls::TlsAcceptor::from(config.clone()).accept(a);
            let connect = tokio_rustls::TlsConnector::from(Arc::new(client))
                .connect(ServerName::try_from("127.0.0.1").unwrap(), b);
            let (accepted, _) = tokio::join!(accept, connect);
            let err = accepted.unwrap_err().to_string();
            assert!(err.contains("BadSignature"), "{version:?}: {err}");
        }
    }

    #[test]
    fn unusable_inputs_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let err = client_verifier(&empty).unwrap_err().to_string();
        assert!(
            err.contains("empty.pem") && err.contains("no certificate"),
            "{err}"
        );
        let err = client_verifier(&dir.path().join("missing.pem"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.pem"), "{err}");

        // A key that does not fit the certificate.
        let (cert, _) = self_signed("a", &[], NOW).unwrap();
        let (_, other_key) = self_signed("b", &[], NOW).unwrap();
        let files = ServingFiles {
            cert_file: dir.path().join("c.pem"),
            key_file: dir.path().join("k.pem"),
            self_signed: false,
        };
        std::fs::write(&files.cert_file, cert).unwrap();
        std::fs::write(&files.key_file, other_key).unwrap();
        let err = server_config(&files, None).unwrap_err().to_string();
        assert!(err.contains("c.pem"), "{err}");
        std::fs::write(&files.key_file, "no key here").unwrap();
        let err = server_config(&files, None).unwrap_err().to_string();
        assert!(err.contains("k.pem"), "{err}");
    }
}
