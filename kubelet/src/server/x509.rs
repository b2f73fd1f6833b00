//! The two things the secure API reads out of a certificate: its subject (common name and
//! organizations: the user and groups of a client certificate) and its validity window.
//! `x509-parser` reads the DER; chains and signatures are webpki's business (rustls), so this
//! only reads fields out of certificates that are checked elsewhere or are our own.

use x509_parser::asn1_rs::{Any, FromDer, Sequence, Tag};
use x509_parser::certificate::{X509Certificate, X509CertificateParser};
use x509_parser::nom::Parser;
use x509_parser::oid_registry::{OID_X509_COMMON_NAME, OID_X509_ORGANIZATION_NAME};

/// A certificate that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum X509Error {
    /// The DER is not a certificate.
    #[error("malformed certificate: {0}")]
    Der(#[from] x509_parser::error::X509Error),
    /// The DER ends inside an element.
    #[error("malformed certificate: truncated element")]
    Truncated,
    /// A name value that is not text.
    #[error("malformed certificate: {0}")]
    Name(&'static str),
}

/// The parts of a subject name the kubelet uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    /// The common name (the last one if there are several, as Go's `pkix.Name` keeps it).
    pub common_name: Option<String>,
    /// The organization (O) values, in order.
    pub organizations: Vec<String>,
}

/// A certificate's validity window, Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// notBefore.
    pub not_before: i64,
    /// notAfter.
    pub not_after: i64,
}

/// Parses `der`; bytes after the certificate are ignored, as before the parser was a crate.
fn parse(der: &[u8]) -> Result<X509Certificate<'_>, X509Error> {
    // Extensions are not looked at here, so they are not parsed past their framing: a
    // certificate rustls accepted is not refused for an extension this crate reads strictly.
    let mut parser = X509CertificateParser::new().with_deep_parse_extensions(false);
    match parser.parse(der) {
        Ok((_, cert)) => Ok(cert),
        Err(x509_parser::nom::Err::Incomplete(_)) => Err(X509Error::Truncated),
        Err(x509_parser::nom::Err::Error(e) | x509_parser::nom::Err::Failure(e)) => Err(e.into()),
    }
}

/// The subject's common name and organizations.
pub fn subject(der: &[u8]) -> Result<Subject, X509Error> {
    let cert = parse(der)?;
    let mut out = Subject::default();
    for attr in cert.subject().iter().flat_map(|rdn| rdn.iter()) {
        let value = attr.attr_value();
        if attr.attr_type() == &OID_X509_COMMON_NAME {
            out.common_name = Some(directory_string(value.tag().0, value.data)?);
        } else if attr.attr_type() == &OID_X509_ORGANIZATION_NAME {
            out.organizations
                .push(directory_string(value.tag().0, value.data)?);
        }
    }
    Ok(out)
}

/// The validity window.
pub fn validity(der: &[u8]) -> Result<Validity, X509Error> {
    let cert = parse(der)?;
    require_zulu_times(der, &cert)?;
    let v = cert.validity();
    Ok(Validity {
        not_before: v.not_before.timestamp(),
        not_after: v.not_after.timestamp(),
    })
}

/// Refuses validity times with a UTC offset or without seconds. `x509-parser` (asn1-rs)
/// reads `YYMMDDHHMMSS+hhmm` as well; RFC 5280 (4.1.2.5) allows only `…SSZ`, and the kubelet
/// refused anything else before it used the crate, so it still does.
fn require_zulu_times(der: &[u8], cert: &X509Certificate<'_>) -> Result<(), X509Error> {
    // The Validity SEQUENCE lies between the issuer and the subject, whose raw bytes are
    // slices of `der`.
    let offset = |part: &[u8]| (part.as_ptr() as usize).checked_sub(der.as_ptr() as usize);
    let issuer = cert.issuer().as_raw();
    let start = offset(issuer).and_then(|o| o.checked_add(issuer.len()));
    let end = offset(cert.subject().as_raw());
    let raw = match (start, end) {
        (Some(s), Some(e)) => der.get(s..e),
        _ => None,
    }
    .ok_or(X509Error::Name("no validity between issuer and subject"))?;
    let (_, seq) = Sequence::from_der(raw).map_err(|_| bad_date())?;
    let mut rest: &[u8] = &seq.content;
    for _ in 0..2 {
        let (more, time) = Any::from_der(rest).map_err(|_| bad_date())?;
        zulu(&time)?;
        rest = more;
    }
    Ok(())
}

fn bad_date() -> X509Error {
    X509Error::Der(x509_parser::error::X509Error::InvalidDate)
}

/// One validity time in the only form RFC 5280 allows: `YYMMDDHHMMSSZ` (UTCTime) or
/// `YYYYMMDDHHMMSSZ` (GeneralizedTime).
fn zulu(time: &Any<'_>) -> Result<(), X509Error> {
    let digits = match time.tag() {
        Tag::UtcTime => 12,
        Tag::GeneralizedTime => 14,
        _ => return Err(bad_date()),
    };
    if time.data.len() != digits + 1 || time.data.last() != Some(&b'Z') {
        return Err(X509Error::Name("a time is not in UTC (…Z) with seconds"));
    }
    Ok(())
}

/// A DirectoryString (or IA5String) as text. `x509-parser`'s `as_str` reads only the
/// ASCII-compatible types; Go also reads TeletexString and BMPString, so this does too.
fn directory_string(tag: u32, value: &[u8]) -> Result<String, X509Error> {
    match tag {
        // UTF8String, PrintableString, IA5String: ASCII is UTF-8.
        0x0c | 0x13 | 0x16 => String::from_utf8(value.to_vec())
            .map_err(|_| X509Error::Name("a name value is not valid UTF-8")),
        // TeletexString: read as Latin-1, as Go does.
        0x14 => Ok(value.iter().map(|b| char::from(*b)).collect()),
        // BMPString: UCS-2, big-endian.
        0x1e => {
            if !value.len().is_multiple_of(2) {
                return Err(X509Error::Name("odd-length BMPString"));
            }
            let units: Vec<u16> = value
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units)
                .map_err(|_| X509Error::Name("a BMPString is not valid UCS-2"))
        }
        _ => Err(X509Error::Name("unsupported string type in a name")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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

    const NOT_BEFORE: i64 = 1_795_331_565;
    const NOT_AFTER: i64 = 4_948_931_565;

    fn der(pem: &str) -> Vec<u8> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    #[test]
    fn subject_of_an_openssl_certificate() {
        let s = subject(&der(OPENSSL_CERT)).unwrap();
        assert_eq!(s.common_name.as_deref(), Some("alice"));
        assert_eq!(s.organizations, ["system:masters", "ops team"]);
    }

    #[test]
    fn validity_of_an_openssl_certificate() {
        let v = validity(&der(OPENSSL_CERT)).unwrap();
        // 2026-11-22T07:12:45Z and 2126-10-29T07:12:45Z, as `openssl x509 -dates` shows them.
        assert_eq!(v.not_before, NOT_BEFORE);
        assert_eq!(v.not_after, NOT_AFTER);
    }

    #[test]
    fn subject_of_an_rcgen_certificate() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "nodes");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "bob");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let s = subject(cert.der()).unwrap();
        assert_eq!(s.common_name.as_deref(), Some("bob"));
        assert_eq!(s.organizations, ["nodes"]);
    }

    #[test]
    fn string_types() {
        assert_eq!(directory_string(0x13, b"abc").unwrap(), "abc");
        assert_eq!(directory_string(0x14, &[0x61, 0xe9]).unwrap(), "a\u{e9}");
        assert_eq!(
            directory_string(0x1e, &[0x00, 0x61, 0x04, 0x10]).unwrap(),
            "a\u{410}"
        );
        assert!(directory_string(0x1e, &[0x00]).is_err());
        assert!(directory_string(0x04, b"x").is_err());
    }

    /// A UTCTime (`tag` 0x17) or GeneralizedTime (0x18) read as [`validity`] reads a
    /// certificate's: its form checked, then its value, as Unix seconds.
    fn time(tag: u8, value: &[u8]) -> Result<i64, X509Error> {
        let mut der = vec![tag, u8::try_from(value.len()).unwrap()];
        der.extend_from_slice(value);
        let (_, any) = Any::from_der(&der).map_err(|_| bad_date())?;
        zulu(&any)?;
        x509_parser::time::ASN1Time::from_der(&der)
            .map(|(_, t)| t.timestamp())
            .map_err(|_| bad_date())
    }

    const UTC_TIME: u8 = 0x17;
    const GENERALIZED_TIME: u8 = 0x18;

    #[test]
    fn times() {
        assert_eq!(time(UTC_TIME, b"700101000000Z").unwrap(), 0);
        assert_eq!(time(UTC_TIME, b"491231235959Z").unwrap(), 2_524_607_999);
        assert_eq!(time(GENERALIZED_TIME, b"19700101000001Z").unwrap(), 1);
        assert!(time(UTC_TIME, b"700101000000+0100").is_err());
        assert!(time(UTC_TIME, b"701301000000Z").is_err());
        assert!(time(GENERALIZED_TIME, b"700101000000Z").is_err());
    }

    #[test]
    fn garbage_is_refused_not_panicked_on() {
        let good = der(OPENSSL_CERT);
        for cut in [0, 1, 2, 10, 50, good.len() / 2] {
            assert!(subject(&good[..cut]).is_err(), "cut at {cut}");
        }
        assert!(subject(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(subject(&[0x30, 0x80]).is_err());
        assert!(validity(b"not DER at all").is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_a_certificate_or_an_error(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = subject(&bytes);
            let _ = validity(&bytes);
        }

        #[test]
        fn a_damaged_certificate_is_read_or_refused(
            edits in proptest::collection::vec((0usize..1000, proptest::prelude::any::<u8>()), 1..8),
            cut in proptest::option::of(0usize..1000),
        ) {
            let mut bytes = der(OPENSSL_CERT);
            for (at, byte) in edits {
                let at = at % bytes.len();
                bytes[at] = byte;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut);
            }
            let _ = subject(&bytes);
            let _ = validity(&bytes);
        }
    }
}
