//! Just enough of X.509 (DER) for the secure API: a certificate's subject (common name and
//! organizations: the user and groups of a client certificate) and its validity window.
//! Chains and signatures are webpki's business (rustls); this only reads fields out of
//! certificates that are checked elsewhere or are our own.

use k8s_openapi::chrono::NaiveDate;

/// A certificate that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed certificate: {0}")]
pub struct X509Error(&'static str);

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

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
/// `[0] EXPLICIT` (the TBSCertificate's version).
const CONTEXT_0: u8 = 0xa0;

/// id-at-commonName, 2.5.4.3.
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
/// id-at-organizationName, 2.5.4.10.
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];

/// Reads DER elements one after another.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next element: its tag and contents.
    fn next(&mut self) -> Result<(u8, &'a [u8]), X509Error> {
        let [tag, first, rest @ ..] = self.0 else {
            return Err(X509Error("truncated element"));
        };
        if tag & 0x1f == 0x1f {
            return Err(X509Error("multi-byte tags are not used in certificates"));
        }
        let (len, rest) = if first & 0x80 == 0 {
            (usize::from(*first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return Err(X509Error("bad length"));
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, &rest[n..])
        };
        if rest.len() < len {
            return Err(X509Error("element longer than its container"));
        }
        let (contents, rest) = rest.split_at(len);
        self.0 = rest;
        Ok((*tag, contents))
    }

    /// The next element, which must have `tag`.
    fn expect(&mut self, tag: u8, what: &'static str) -> Result<&'a [u8], X509Error> {
        match self.next()? {
            (t, contents) if t == tag => Ok(contents),
            _ => Err(X509Error(what)),
        }
    }

    /// The next element if it has `tag`.
    fn optional(&mut self, tag: u8) -> Result<Option<&'a [u8]>, X509Error> {
        if self.0.first() == Some(&tag) {
            self.next().map(|(_, c)| Some(c))
        } else {
            Ok(None)
        }
    }
}

/// The TBSCertificate's fields up to the subject: (validity, subject) contents.
fn tbs_fields(der: &[u8]) -> Result<(&[u8], &[u8]), X509Error> {
    let cert = Reader(der).expect(SEQUENCE, "not a certificate")?;
    let mut tbs = Reader(Reader(cert).expect(SEQUENCE, "no TBSCertificate")?);
    tbs.optional(CONTEXT_0)?;
    tbs.next()?; // serialNumber
    tbs.expect(SEQUENCE, "no signature algorithm")?;
    tbs.expect(SEQUENCE, "no issuer")?;
    let validity = tbs.expect(SEQUENCE, "no validity")?;
    let subject = tbs.expect(SEQUENCE, "no subject")?;
    Ok((validity, subject))
}

/// The subject's common name and organizations.
pub fn subject(der: &[u8]) -> Result<Subject, X509Error> {
    let (_, name) = tbs_fields(der)?;
    let mut out = Subject::default();
    let mut rdns = Reader(name);
    while !rdns.is_empty() {
        let mut set = Reader(rdns.expect(SET, "a name part is not a SET")?);
        while !set.is_empty() {
            let mut attr = Reader(set.expect(SEQUENCE, "a name attribute is not a SEQUENCE")?);
            let oid = attr.expect(OID, "a name attribute has no type")?;
            let (tag, value) = attr.next()?;
            if oid == OID_CN {
                out.common_name = Some(directory_string(tag, value)?);
            } else if oid == OID_O {
                out.organizations.push(directory_string(tag, value)?);
            }
        }
    }
    Ok(out)
}

/// The validity window.
pub fn validity(der: &[u8]) -> Result<Validity, X509Error> {
    let (validity, _) = tbs_fields(der)?;
    let mut r = Reader(validity);
    let (t1, v1) = r.next()?;
    let (t2, v2) = r.next()?;
    Ok(Validity {
        not_before: time(t1, v1)?,
        not_after: time(t2, v2)?,
    })
}

/// A DirectoryString (or IA5String) as text.
fn directory_string(tag: u8, value: &[u8]) -> Result<String, X509Error> {
    match tag {
        // UTF8String, PrintableString, IA5String: ASCII is UTF-8.
        0x0c | 0x13 | 0x16 => String::from_utf8(value.to_vec())
            .map_err(|_| X509Error("a name value is not valid UTF-8")),
        // TeletexString: read as Latin-1, as Go does.
        0x14 => Ok(value.iter().map(|b| char::from(*b)).collect()),
        // BMPString: UCS-2, big-endian.
        0x1e => {
            if !value.len().is_multiple_of(2) {
                return Err(X509Error("odd-length BMPString"));
            }
            let units: Vec<u16> = value
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).map_err(|_| X509Error("a BMPString is not valid UCS-2"))
        }
        _ => Err(X509Error("unsupported string type in a name")),
    }
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) as
/// Unix seconds.
fn time(tag: u8, value: &[u8]) -> Result<i64, X509Error> {
    let text = std::str::from_utf8(value).map_err(|_| X509Error("a time is not ASCII"))?;
    let digits = text
        .strip_suffix('Z')
        .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
        .ok_or(X509Error("a time is not in UTC (…Z)"))?;
    let num = |s: &str| s.parse::<u32>().map_err(|_| X509Error("bad time digits"));
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let yy = num(&digits[..2])?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        (GENERALIZED_TIME, 14) => (num(&digits[..4])?, &digits[4..]),
        _ => return Err(X509Error("bad time")),
    };
    let field = |i: usize| num(&rest[i..i + 2]);
    let year = i32::try_from(year).map_err(|_| X509Error("bad year"))?;
    NaiveDate::from_ymd_opt(year, field(0)?, field(2)?)
        .and_then(|d| d.and_hms_opt(field(4).ok()?, field(6).ok()?, field(8).ok()?))
        .map(|t| t.and_utc().timestamp())
        .ok_or(X509Error("a time out of range"))
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
}
