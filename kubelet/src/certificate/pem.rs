//! What the certificate code reads out of PEM: the certificates of a bundle (a store's pair
//! file holds the certificate, then the key), the fields of a leaf that decide when to rotate
//! it (validity) and whether it still fits what would be asked for (subject and SANs), and the
//! pair as a rustls signing key. DER through `x509-cert`'s types; only our own certificates,
//! or ones the API server's signer issued, are read here.

use std::net::IpAddr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use x509_cert::Certificate;
use x509_cert::der::Decode;
use x509_cert::der::oid::AssociatedOid;
use x509_cert::der::oid::db::rfc4519::{COMMON_NAME, ORGANIZATION_NAME};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

/// The fields of a leaf certificate rotation looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertInfo {
    /// notBefore, Unix seconds.
    pub not_before: i64,
    /// notAfter, Unix seconds.
    pub not_after: i64,
    /// The subject's common name.
    pub common_name: Option<String>,
    /// The subject's organizations.
    pub organizations: Vec<String>,
    /// DNS SANs.
    pub dns_names: Vec<String>,
    /// IP SANs.
    pub ips: Vec<IpAddr>,
}

/// Every certificate in `pem`, in order (other blocks, such as a key, are skipped).
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no PEM \"CERTIFICATE\" block".into());
    }
    Ok(certs)
}

/// The first private key in `pem`.
pub fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("no private key: {e}"))
}

/// The leaf's fields.
pub fn info(der: &[u8]) -> Result<CertInfo, String> {
    let cert = Certificate::from_der(der).map_err(|e| format!("malformed certificate: {e}"))?;
    let tbs = &cert.tbs_certificate;
    let secs = |t: x509_cert::time::Time| i64::try_from(t.to_unix_duration().as_secs());
    let mut info = CertInfo {
        not_before: secs(tbs.validity.not_before).map_err(|e| e.to_string())?,
        not_after: secs(tbs.validity.not_after).map_err(|e| e.to_string())?,
        ..CertInfo::default()
    };
    for rdn in tbs.subject.0.iter() {
        for attr in rdn.0.iter() {
            // Printable and UTF-8 strings alike: their contents are the text.
            let text = String::from_utf8_lossy(attr.value.value()).into_owned();
            if attr.oid == COMMON_NAME {
                info.common_name = Some(text);
            } else if attr.oid == ORGANIZATION_NAME {
                info.organizations.push(text);
            }
        }
    }
    for ext in tbs.extensions.iter().flatten() {
        if ext.extn_id != SubjectAltName::OID {
            continue;
        }
        let sans = SubjectAltName::from_der(ext.extn_value.as_bytes())
            .map_err(|e| format!("malformed subjectAltName: {e}"))?;
        for name in sans.0 {
            match name {
                GeneralName::DnsName(dns) => info.dns_names.push(dns.to_string()),
                GeneralName::IpAddress(ip) => match ip.as_bytes().len() {
                    4 => {
                        let b: [u8; 4] = ip.as_bytes().try_into().unwrap_or_default();
                        info.ips.push(IpAddr::from(b));
                    }
                    16 => {
                        let b: [u8; 16] = ip.as_bytes().try_into().unwrap_or_default();
                        info.ips.push(IpAddr::from(b));
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    Ok(info)
}

/// The fields of the first certificate in `pem`.
pub fn leaf_info(pem: &[u8]) -> Result<CertInfo, String> {
    let certs = certificates(pem)?;
    info(&certs[0])
}

/// Why the certificates in `pem` are not usable at `now` (Go's `isClientConfigStillValid`:
/// every one of them parses and none has expired), if they are not.
pub fn unexpired(pem: &[u8], now: i64) -> Result<CertInfo, String> {
    let certs = certificates(pem)?;
    let mut leaf = None;
    for der in &certs {
        let i = info(der)?;
        if now > i.not_after {
            return Err(format!(
                "a certificate expired at Unix time {}",
                i.not_after
            ));
        }
        leaf.get_or_insert(i);
    }
    leaf.ok_or_else(|| "no certificate".into())
}

/// The certificate chain and key of `pem` (a store's pair file) as a rustls signing key on
/// the ring provider, checking that the key fits the leaf.
pub fn certified_key(pem: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    let chain = certificates(pem)?;
    let key = private_key(pem)?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, key, &provider)
        .map(Arc::new)
        .map_err(|e| format!("the key does not fit the certificate: {e}"))
}

/// Now, Unix seconds.
pub fn unix_now() -> i64 {
    jiff::Timestamp::now().as_second()
}
