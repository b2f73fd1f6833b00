//! ferrolet's one reader of certificates: the certificates of a PEM bundle (a store's pair
//! file holds the certificate, then the key), the fields of a certificate that decide when to
//! rotate it (validity), whether it still fits what would be asked for (subject and SANs), who
//! a client certificate names (subject) and whether rustls can verify it as a peer's (version),
//! and a certificate and key as a rustls signing key. DER through `x509-cert`'s types, which
//! are strict (DER only, times from 1970, RDNs in DER order): what they refuse is refused.
//!
//! Chains and signatures are webpki's business (rustls), not this module's. webpki reads only
//! X.509 v3 certificates as end entities (v1 ones only as trust anchors), where Go reads all
//! three, and `openssl x509 -req` without `-extfile` makes a v1 one; [`unsupported_version`]
//! says so in ferrolet's errors, and [`certified_key_der`] lets a v1 certificate serve.

use std::net::IpAddr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use x509_cert::der::oid::AssociatedOid;
use x509_cert::der::oid::db::rfc4519::{COMMON_NAME, ORGANIZATION_NAME};
use x509_cert::der::{Decode, Encode};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::{Certificate, Version};

/// The fields of a certificate ferrolet looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertInfo {
    /// The X.509 version: 1, 2 or 3.
    pub version: u8,
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

/// A DER certificate, or why it is not one.
fn parse(der: &[u8]) -> Result<Certificate, String> {
    Certificate::from_der(der).map_err(|e| format!("malformed certificate: {e}"))
}

/// The certificate's fields: version, validity, subject (common name, organizations) and
/// SANs.
pub fn info(der: &[u8]) -> Result<CertInfo, String> {
    let cert = parse(der)?;
    let tbs = &cert.tbs_certificate;
    let secs = |t: x509_cert::time::Time| i64::try_from(t.to_unix_duration().as_secs());
    let mut info = CertInfo {
        version: version_number(tbs.version),
        not_before: secs(tbs.validity.not_before).map_err(|e| e.to_string())?,
        not_after: secs(tbs.validity.not_after).map_err(|e| e.to_string())?,
        ..CertInfo::default()
    };
    for rdn in tbs.subject.0.iter() {
        for attr in rdn.0.iter() {
            if attr.oid == COMMON_NAME {
                info.common_name = Some(directory_string(&attr.value)?);
            } else if attr.oid == ORGANIZATION_NAME {
                info.organizations.push(directory_string(&attr.value)?);
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

/// 1, 2 or 3 for X.509 v1, v2 or v3.
fn version_number(version: Version) -> u8 {
    match version {
        Version::V1 => 1,
        Version::V2 => 2,
        Version::V3 => 3,
    }
}

/// A name's DirectoryString (or IA5String) as text, by its tag, as Go's `pkix.Name` reads
/// them: UTF-8, Printable and IA5 as they are, TeletexString as Latin-1, BMPString as UCS-2.
fn directory_string(value: &x509_cert::attr::AttributeValue) -> Result<String, String> {
    use x509_cert::der::{Tag, Tagged};
    let bytes = value.value();
    match value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String => {
            String::from_utf8(bytes.to_vec())
                .map_err(|_| "malformed certificate: a name value is not valid UTF-8".into())
        }
        Tag::TeletexString => Ok(bytes.iter().map(|b| char::from(*b)).collect()),
        Tag::BmpString => {
            let units: Vec<u16> = bytes
                .chunks(2)
                .map(|c| match c {
                    [hi, lo] => Ok(u16::from_be_bytes([*hi, *lo])),
                    _ => Err("malformed certificate: odd-length BMPString"),
                })
                .collect::<Result<_, _>>()?;
            String::from_utf16(&units)
                .map_err(|_| "malformed certificate: a BMPString is not valid UCS-2".into())
        }
        tag => Err(format!("malformed certificate: a name value of type {tag}")),
    }
}

/// Why rustls will not verify `der` as a peer's end-entity certificate when that is its
/// version (webpki reads only v3 ones; v1 and v2 only as trust anchors); None for a v3
/// certificate, or bytes that are not a certificate (rustls says why).
pub fn unsupported_version(der: &[u8]) -> Option<String> {
    let version = version_number(parse(der).ok()?.tbs_certificate.version);
    (version != 3).then(|| version_reason(version))
}

/// What ferrolet says of an X.509 `version` certificate that rustls must verify as a peer's.
pub fn version_reason(version: u8) -> String {
    format!(
        "an X.509 v{version} certificate; rustls accepts only v3 end-entity certificates: \
         reissue it with extensions (openssl x509 -req … -extfile …)"
    )
}

/// The certificate's SubjectPublicKeyInfo, DER.
pub fn public_key_info(der: &[u8]) -> Result<Vec<u8>, String> {
    parse(der)?
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| format!("malformed certificate: {e}"))
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
    certified_key_der(chain, key).map(Arc::new)
}

/// `chain` (leaf first) and `key` as a rustls signing key on the ring provider, the key checked
/// against the leaf's public key here: rustls' own check (`CertifiedKey::from_der`) parses the
/// leaf with webpki, which refuses X.509 v1 certificates, and a v1 serving certificate (what
/// `openssl x509 -req` makes by default) serves as well as any: the Go kubelet's clients take
/// it, and presenting it needs nothing webpki reads.
pub fn certified_key_der(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<CertifiedKey, String> {
    let leaf = chain.first().ok_or("no certificate")?;
    let spki = public_key_info(leaf)?;
    let key = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("the private key cannot be used: {e}"))?;
    // A key that cannot say its public key is taken as rustls takes it (unknown, not wrong).
    if let Some(public) = key.public_key()
        && public.as_ref() != spki.as_slice()
    {
        return Err("the key does not fit the certificate".into());
    }
    Ok(CertifiedKey::new(chain, key))
}

/// Now, Unix seconds.
pub fn unix_now() -> i64 {
    jiff::Timestamp::now().as_second()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::certificate::fixtures::{self, der};
    use x509_cert::der::{Any, Tag};

    /// Made with `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes
    /// -subj "/O=system:masters/O=ops team/CN=alice" -days 36500` (OpenSSL 3.0): two O
    /// values and a CN as UTF8Strings, a UTCTime notBefore and, past 2049, a GeneralizedTime
    /// notAfter.
    const OPENSSL_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBzzCCAXWgAwIBAgIUG/penEe2jKizimBJ0+L5tGS1STcwCgYIKoZIzj0EAwIw
PDEXMBUGA1UECgwOc3lzdGVtOm1hc3RlcnMxETAPBgNVBAoMCG9wcyB0ZWFtMQ4w
DAYDVQQDDAVhbGljZTAgFw0yNjExMjIwNzEyNDVaGA8yMTI2MTAyOTA3MTI0NVow
PDEXMBUGA1UECgwOc3lzdGVtOm1hc3RlcnMxETAPBgNVBAoMCG9wcyB0ZWFtMQ4w
DAYDVQQDDAVhbGljZTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABB2TKPeoHrGj
BqtuLUYdlDTmVfpAIOmSUGHY3t2FRt1YnKciSO3D9BKJ5wXuXbIWrqUo8fURHtEW
Vz/ZDKgbHxCjUzBRMB0GA1UdDgQWBBQbHoB24Pp4v64CyPupc0iulAwqjDAfBgNV
HSMEGDAWgBQbHoB24Pp4v64CyPupc0iulAwqjDAPBgNVHRMBAf8EBTADAQH/MAoG
CCqGSM49BAMCA0gAMEUCICttfYv+ndiA2Wi5h49h6eNu4m378H9l2otVuDXTYXPR
AiEA7YFHb0EFHyJnwKRaAuxZW19GNc3m/+CdBqe0+hkjwcw=
-----END CERTIFICATE-----";

    #[test]
    fn an_openssl_certificate_with_a_generalized_time() {
        let i = info(&der(OPENSSL_CERT)).unwrap();
        assert_eq!(i.version, 3);
        assert_eq!(i.common_name.as_deref(), Some("alice"));
        assert_eq!(i.organizations, ["system:masters", "ops team"]);
        // 2026-11-22T07:12:45Z and 2126-10-29T07:12:45Z, as `openssl x509 -dates` shows them.
        assert_eq!(i.not_before, 1_795_331_565);
        assert_eq!(i.not_after, 4_948_931_565);
        assert_eq!(unsupported_version(&der(OPENSSL_CERT)), None);
    }

    #[test]
    fn openssl_v1_and_v3_certificates() {
        let v1 = info(&der(fixtures::CLIENT_V1)).unwrap();
        assert_eq!(v1.version, 1);
        assert_eq!(v1.common_name.as_deref(), Some("alice"));
        assert_eq!(v1.organizations, ["system:masters", "ops team"]);
        assert!(v1.dns_names.is_empty() && v1.ips.is_empty());
        assert!(v1.not_after - v1.not_before == 36_500 * 24 * 3600);
        assert_eq!(info(&der(fixtures::CA_V1)).unwrap().version, 1);
        assert_eq!(info(&der(fixtures::CA_V3)).unwrap().version, 3);
        let server = info(&der(fixtures::SERVER_V3)).unwrap();
        assert_eq!(server.version, 3);
        assert_eq!(server.ips, [IpAddr::from([127, 0, 0, 1])]);
        let node = leaf_info(fixtures::CLIENT_V3.as_bytes()).unwrap();
        assert_eq!(node.common_name.as_deref(), Some("system:node:n1"));
        assert_eq!(node.organizations, ["system:nodes"]);

        let reason = unsupported_version(&der(fixtures::CLIENT_V1)).unwrap();
        assert_eq!(
            reason,
            "an X.509 v1 certificate; rustls accepts only v3 end-entity certificates: \
             reissue it with extensions (openssl x509 -req … -extfile …)"
        );
        assert_eq!(unsupported_version(&der(fixtures::CLIENT_V3)), None);
        assert_eq!(unsupported_version(b"not a certificate"), None);
    }

    #[test]
    fn a_v1_certificate_makes_a_signing_key_with_its_own_key_only() {
        let pair = format!("{}{}", fixtures::SERVER_V1, fixtures::SERVER_V1_KEY);
        certified_key(pair.as_bytes()).unwrap();
        // rustls' own check refuses it, which is why ferrolet checks the key itself.
        let chain = certificates(fixtures::SERVER_V1.as_bytes()).unwrap();
        let key = private_key(fixtures::SERVER_V1_KEY.as_bytes()).unwrap();
        let provider = rustls::crypto::ring::default_provider();
        assert!(CertifiedKey::from_der(chain, key, &provider).is_err());
        // RSA too.
        let pair = format!("{}{}", fixtures::CLIENT_V1, fixtures::CLIENT_V1_KEY);
        certified_key(pair.as_bytes()).unwrap();

        let wrong = format!("{}{}", fixtures::SERVER_V1, fixtures::SERVER_V3_KEY);
        let err = certified_key(wrong.as_bytes()).unwrap_err();
        assert_eq!(err, "the key does not fit the certificate");
        let wrong_type = format!("{}{}", fixtures::SERVER_V1, fixtures::CLIENT_V1_KEY);
        assert!(certified_key(wrong_type.as_bytes()).is_err());
    }

    #[test]
    fn public_key_info_is_the_keys() {
        let spki = public_key_info(&der(fixtures::SERVER_V1)).unwrap();
        let key = rustls::crypto::ring::default_provider()
            .key_provider
            .load_private_key(private_key(fixtures::SERVER_V1_KEY.as_bytes()).unwrap())
            .unwrap();
        assert_eq!(key.public_key().unwrap().as_ref(), spki.as_slice());
    }

    #[test]
    fn string_types() {
        let value = |tag, bytes: &[u8]| Any::new(tag, bytes).unwrap();
        let text = |tag, bytes: &[u8]| directory_string(&value(tag, bytes));
        assert_eq!(text(Tag::PrintableString, b"abc").unwrap(), "abc");
        assert_eq!(text(Tag::Utf8String, "ü".as_bytes()).unwrap(), "ü");
        assert_eq!(text(Tag::TeletexString, &[0x61, 0xe9]).unwrap(), "a\u{e9}");
        assert_eq!(
            text(Tag::BmpString, &[0x00, 0x61, 0x04, 0x10]).unwrap(),
            "a\u{410}"
        );
        assert!(text(Tag::BmpString, &[0x00]).is_err());
        assert!(text(Tag::Utf8String, &[0xff]).is_err());
        assert!(text(Tag::OctetString, b"x").is_err());
    }

    #[test]
    fn garbage_is_refused_not_panicked_on() {
        let good = der(OPENSSL_CERT);
        for cut in [0, 1, 2, 10, 50, good.len() / 2, good.len() - 1] {
            assert!(info(&good[..cut]).is_err(), "cut at {cut}");
        }
        assert!(info(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(info(&[0x30, 0x80]).is_err());
        assert!(info(b"not DER at all").is_err());
        // Strict DER: bytes after the certificate are refused.
        let mut trailing = good.to_vec();
        trailing.extend_from_slice(b"trailing");
        assert!(info(&trailing).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_a_certificate_or_an_error(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = info(&bytes);
            let _ = unsupported_version(&bytes);
            let _ = public_key_info(&bytes);
        }

        #[test]
        fn a_damaged_certificate_is_read_or_refused(
            edits in proptest::collection::vec((0usize..1000, proptest::prelude::any::<u8>()), 1..8),
            cut in proptest::option::of(0usize..1000),
        ) {
            let mut bytes = der(fixtures::CLIENT_V1).to_vec();
            for (at, byte) in edits {
                let at = at % bytes.len();
                bytes[at] = byte;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut);
            }
            let _ = info(&bytes);
            let _ = unsupported_version(&bytes);
        }
    }
}
