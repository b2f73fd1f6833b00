//! The server's CA: its serving certificate, client certificates for tests and the CSR signer
//! (playing kube-controller-manager's).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, CertifiedIssuer, DnType,
    DnValue, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};

/// The signers whose CSRs the server signs.
pub const CLIENT_KUBELET_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The kubelet serving certificate signer.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// The CA and the server's own certificate.
pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
    /// The serving certificate's chain (leaf) and key, PEM.
    pub server_cert_pem: String,
    /// The serving key, PEM (PKCS#8).
    pub server_key_pem: String,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").finish_non_exhaustive()
    }
}

fn validity(params: &mut CertificateParams, lifetime: Duration) {
    let now = time::OffsetDateTime::now_utc();
    // Backdated a little, as real signers do, against clock skew between test processes.
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + lifetime;
}

/// A subject with the user as CN and up to two groups as O (rcgen keeps one value per
/// attribute type; the second O goes in under its raw OID).
fn subject(params: &mut CertificateParams, user: &str, groups: &[&str]) -> Result<()> {
    if groups.len() > 2 {
        bail!("client certificates carry at most two groups here (got {groups:?})");
    }
    params.distinguished_name.push(DnType::CommonName, user);
    if let Some(g) = groups.first() {
        params.distinguished_name.push(DnType::OrganizationName, *g);
    }
    if let Some(g) = groups.get(1) {
        params.distinguished_name.push(
            DnType::CustomDnType(vec![2, 5, 4, 10]),
            DnValue::Utf8String((*g).to_string()),
        );
    }
    Ok(())
}

impl Pki {
    /// A fresh CA and a serving certificate for 127.0.0.1 and localhost.
    pub fn new() -> Result<Self> {
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "ferrolet-test-apiserver-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut ca_params, Duration::from_secs(10 * 365 * 86400));
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut params, Duration::from_secs(365 * 86400));
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        Ok(Pki {
            server_cert_pem: cert.pem(),
            server_key_pem: key.serialize_pem(),
            ca,
        })
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// The CA certificate, DER.
    pub fn ca_der(&self) -> Vec<u8> {
        self.ca.der().to_vec()
    }

    /// A client certificate (CN = user, O = groups) and its key, PEM.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<(String, String)> {
        let mut params = CertificateParams::default();
        subject(&mut params, user, groups)?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        validity(&mut params, Duration::from_secs(365 * 86400));
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.ca)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Signs a PEM CSR for `signer` with the CA, valid for `lifetime`; the certificate, PEM.
    pub fn sign_csr(&self, csr_pem: &str, signer: &str, lifetime: Duration) -> Result<String> {
        let mut csr =
            CertificateSigningRequestParams::from_pem(csr_pem).context("parsing the CSR")?;
        csr.params.is_ca = IsCa::ExplicitNoCa;
        csr.params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        csr.params.extended_key_usages = match signer {
            CLIENT_KUBELET_SIGNER => vec![ExtendedKeyUsagePurpose::ClientAuth],
            KUBELET_SERVING_SIGNER => vec![ExtendedKeyUsagePurpose::ServerAuth],
            other => bail!("signer {other} is not served"),
        };
        csr.params.use_authority_key_identifier_extension = true;
        validity(&mut csr.params, lifetime);
        Ok(csr.signed_by(&self.ca)?.pem())
    }
}

/// The CN and O values of a DER certificate's subject: the user and groups it authenticates.
pub fn subject_of(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let user = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some((user, groups))
}
