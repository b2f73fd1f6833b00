//! Certificate signing requests as client-go's `util/certificate/csr` makes them: an ECDSA
//! P-256 key, a PKCS#10 request for a template (subject, SANs), the `certificates.k8s.io/v1`
//! object with the signer and usages, and the wait for it to be approved and issued.

use std::net::IpAddr;
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, PublicKeyData, SanType};
use rustls::pki_types::CertificateSigningRequestDer;
use rustls::pki_types::pem::PemObject;
use sha2::{Digest, Sha512_256};
use x509_cert::der::{Decode, Encode};
use x509_cert::request::CertReq;

use super::CertificateError;
use super::pem::CertInfo;

/// The signer of the kubelet's client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of the kubelet's serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The nodes' group.
pub const NODES_GROUP: &str = "system:nodes";

/// Usages of a client certificate with an ECDSA key (Go adds "key encipherment" for RSA).
const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];
/// Usages of a serving certificate with an ECDSA key.
const SERVING_USAGES: &[&str] = &["digital signature", "server auth"];

/// What a certificate is asked for with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// The subject's CN.
    pub common_name: String,
    /// The subject's O.
    pub organizations: Vec<String>,
    /// DNS SANs.
    pub dns_names: Vec<String>,
    /// IP SANs.
    pub ips: Vec<IpAddr>,
    /// `spec.signerName`.
    pub signer_name: &'static str,
    /// `spec.usages`.
    pub usages: &'static [&'static str],
}

impl Template {
    /// The node's client certificate: `system:node:<name>` in `system:nodes`.
    pub fn client(node_name: &str) -> Self {
        Self {
            common_name: format!("system:node:{node_name}"),
            organizations: vec![NODES_GROUP.into()],
            dns_names: Vec::new(),
            ips: Vec::new(),
            signer_name: CLIENT_SIGNER,
            usages: CLIENT_USAGES,
        }
    }

    /// The node's serving certificate, for its hostnames and IPs (duplicates dropped).
    pub fn serving(node_name: &str, hostnames: &[String], ips: &[IpAddr]) -> Self {
        let mut dns_names: Vec<String> = Vec::new();
        for h in hostnames {
            if !h.is_empty() && !dns_names.contains(h) {
                dns_names.push(h.clone());
            }
        }
        let mut unique_ips: Vec<IpAddr> = Vec::new();
        for ip in ips {
            if !unique_ips.contains(ip) {
                unique_ips.push(*ip);
            }
        }
        Self {
            common_name: format!("system:node:{node_name}"),
            organizations: vec![NODES_GROUP.into()],
            dns_names,
            ips: unique_ips,
            signer_name: SERVING_SIGNER,
            usages: SERVING_USAGES,
        }
    }

    /// Whether a certificate still fits this template (Go's `certSatisfiesTemplate`): the same
    /// CN and organizations, and at least the template's DNS names and IPs.
    pub fn satisfied_by(&self, cert: &CertInfo) -> bool {
        let mut want_o = self.organizations.clone();
        let mut have_o = cert.organizations.clone();
        want_o.sort();
        have_o.sort();
        cert.common_name.as_deref() == Some(self.common_name.as_str())
            && want_o == have_o
            && self.dns_names.iter().all(|d| cert.dns_names.contains(d))
            && self.ips.iter().all(|ip| cert.ips.contains(ip))
    }
}

/// A key and the PKCS#10 request made with it.
pub struct Request {
    /// The private key, PKCS#8 PEM.
    pub key_pem: String,
    /// The request, PEM (`spec.request`).
    pub csr_pem: String,
    /// The public key, SubjectPublicKeyInfo DER.
    pub public_key_der: Vec<u8>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Request")
            .field("csr_pem", &self.csr_pem)
            .finish_non_exhaustive()
    }
}

/// A new ECDSA P-256 key. CPU-heavy: call it from a blocking task.
pub fn generate_key() -> Result<KeyPair, CertificateError> {
    Ok(KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?)
}

/// A request for `template` signed with `key`. CPU-heavy: call it from a blocking task.
pub fn make_request(template: &Template, key: &KeyPair) -> Result<Request, CertificateError> {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    for o in &template.organizations {
        name.push(DnType::OrganizationName, o.as_str());
    }
    name.push(DnType::CommonName, template.common_name.as_str());
    params.distinguished_name = name;
    let mut sans = Vec::new();
    for dns in &template.dns_names {
        sans.push(SanType::DnsName(dns.as_str().try_into()?));
    }
    sans.extend(template.ips.iter().copied().map(SanType::IpAddress));
    params.subject_alt_names = sans;
    let csr = params.serialize_request(key)?;
    Ok(Request {
        key_pem: key.serialize_pem(),
        csr_pem: csr.pem()?,
        public_key_der: key.subject_public_key_info(),
    })
}

/// The bootstrap CSR's name (Go's `digestedName`): `node-csr-` and a SHA-512/256 over the
/// public key, subject and usages, so a restarted bootstrap with the same key finds its CSR.
pub fn digested_name(public_key_der: &[u8], template: &Template) -> String {
    let encode = |data: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
    let mut hash = Sha512_256::new();
    // '|' is outside the base64url alphabet: no two inputs write the same stream.
    let mut write = |data: &[u8]| {
        hash.update(encode(data).as_bytes());
        hash.update(b"|");
    };
    write(public_key_der);
    write(template.common_name.as_bytes());
    for o in &template.organizations {
        write(o.as_bytes());
    }
    for u in template.usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", encode(&hash.finalize()))
}

/// The API object for `request`: named `name`, or `csr-…` generated by the server.
pub fn object(
    template: &Template,
    request: &Request,
    name: Option<&str>,
) -> CertificateSigningRequest {
    let metadata = match name {
        Some(n) => ObjectMeta {
            name: Some(n.into()),
            ..ObjectMeta::default()
        },
        None => ObjectMeta {
            generate_name: Some("csr-".into()),
            ..ObjectMeta::default()
        },
    };
    CertificateSigningRequest {
        metadata,
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.csr_pem.as_bytes().to_vec()),
            signer_name: template.signer_name.into(),
            usages: Some(template.usages.iter().map(|u| u.to_string()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

/// Where a CSR stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Neither issued nor refused yet.
    Pending,
    /// Approved and issued: the certificate PEM.
    Issued(Vec<u8>),
    /// Denied by an approver.
    Denied {
        /// The condition's reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// Failed by the signer.
    Failed {
        /// The condition's reason.
        reason: String,
        /// Its message.
        message: String,
    },
}

/// Where `csr` stands (Go's `WaitForCertificate` condition): a Denied or Failed condition ends
/// it, an Approved one with `status.certificate` set issues it.
pub fn outcome(csr: &CertificateSigningRequest) -> Outcome {
    let Some(status) = &csr.status else {
        return Outcome::Pending;
    };
    for c in status.conditions.iter().flatten() {
        let reason = c.reason.clone().unwrap_or_default();
        let message = c.message.clone().unwrap_or_default();
        match c.type_.as_str() {
            "Denied" => return Outcome::Denied { reason, message },
            "Failed" => return Outcome::Failed { reason, message },
            "Approved" => {
                if let Some(cert) = status.certificate.as_ref().filter(|c| !c.0.is_empty()) {
                    return Outcome::Issued(cert.0.clone());
                }
            }
            _ => {}
        }
    }
    Outcome::Pending
}

/// Why an existing CSR of the same name cannot stand for ours (Go's `ensureCompatible`), if
/// it cannot: another signer, other usages, or a request for another key.
pub fn compatible(
    existing: &CertificateSigningRequest,
    ours: &CertificateSigningRequest,
    public_key_der: &[u8],
) -> Result<(), String> {
    if existing.spec.signer_name != ours.spec.signer_name {
        return Err(format!("signer {}", existing.spec.signer_name));
    }
    if existing.spec.usages != ours.spec.usages {
        return Err(format!("usages {:?}", existing.spec.usages));
    }
    let der = CertificateSigningRequestDer::from_pem_slice(&existing.spec.request.0)
        .map_err(|e| format!("request is not PEM: {e}"))?;
    let req = CertReq::from_der(der.as_ref()).map_err(|e| format!("request: {e}"))?;
    let key = req
        .info
        .public_key
        .to_der()
        .map_err(|e| format!("request key: {e}"))?;
    if key != public_key_der {
        return Err("request for another key".into());
    }
    Ok(())
}

/// Creates the CSR for `request`; its name and UID. With a fixed `name` that exists already,
/// the existing one is taken if it asks for the same (a restarted bootstrap).
pub async fn create(
    api: &Api<CertificateSigningRequest>,
    template: &Template,
    request: &Request,
    name: Option<&str>,
) -> Result<(String, Option<String>), CertificateError> {
    let csr = object(template, request, name);
    let what = name.unwrap_or("csr-…");
    match (api.create(&PostParams::default(), &csr).await, name) {
        (Ok(created), _) => Ok((
            created.metadata.name.unwrap_or_else(|| what.into()),
            created.metadata.uid,
        )),
        (Err(kube::Error::Api(status)), Some(fixed)) if status.code == 409 => {
            tracing::info!(
                csr = fixed,
                "the CSR for this node exists already, reusing it"
            );
            let existing = api
                .get(fixed)
                .await
                .map_err(|source| CertificateError::Api {
                    what: format!("getting certificate signing request {fixed}"),
                    source,
                })?;
            compatible(&existing, &csr, &request.public_key_der).map_err(|reason| {
                CertificateError::content(
                    format!("existing certificate signing request {fixed}"),
                    format!("not compatible: {reason}"),
                )
            })?;
            Ok((fixed.to_string(), existing.metadata.uid))
        }
        (Err(source), _) => Err(CertificateError::Api {
            what: format!(
                "creating certificate signing request {what} (signer {})",
                template.signer_name
            ),
            source,
        }),
    }
}

/// Watches the CSR `name` (UID `uid`, when known) until it is issued, refused, or `timeout`
/// passes; the certificate PEM. Watch errors are retried (with kube's back-off) until then.
pub async fn wait_for_certificate(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    uid: Option<&str>,
    timeout: Duration,
) -> Result<Vec<u8>, CertificateError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(api.clone(), config)
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    tracing::info!(csr = name, "waiting for the certificate to be issued");
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next()).await;
        let csr = match next {
            Err(_) | Ok(None) => {
                return Err(CertificateError::Timeout {
                    name: name.into(),
                    after: timeout,
                });
            }
            Ok(Some(Err(e))) => {
                tracing::debug!(csr = name, error = %e, "watching the certificate signing request");
                continue;
            }
            Ok(Some(Ok(csr))) => csr,
        };
        if csr.metadata.name.as_deref() != Some(name) {
            continue;
        }
        if let (Some(want), Some(got)) = (uid, csr.metadata.uid.as_deref())
            && want != got
        {
            return Err(CertificateError::content(
                format!("certificate signing request {name}"),
                format!("its UID changed from {want} to {got}"),
            ));
        }
        match outcome(&csr) {
            Outcome::Pending => {}
            Outcome::Issued(cert) => {
                tracing::info!(csr = name, "certificate issued");
                return Ok(cert);
            }
            Outcome::Denied { reason, message } => {
                return Err(CertificateError::Denied {
                    name: name.into(),
                    reason,
                    message,
                });
            }
            Outcome::Failed { reason, message } => {
                return Err(CertificateError::Failed {
                    name: name.into(),
                    reason,
                    message,
                });
            }
        }
    }
}

/// Asks `client` for a certificate for `request` and waits up to `timeout` for it.
pub async fn request_certificate(
    client: kube::Client,
    template: &Template,
    request: &Request,
    name: Option<&str>,
    timeout: Duration,
) -> Result<Vec<u8>, CertificateError> {
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let (name, uid) = create(&api, template, request, name).await?;
    tracing::info!(csr = %name, signer = template.signer_name, "certificate signing request created");
    wait_for_certificate(&api, &name, uid.as_deref(), timeout).await
}

/// A new key and request for `template`, made on a blocking thread.
pub async fn new_request(template: &Template) -> Result<Request, CertificateError> {
    let template = template.clone();
    tokio::task::spawn_blocking(move || make_request(&template, &generate_key()?)).await?
}
