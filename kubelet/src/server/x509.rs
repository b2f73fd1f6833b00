//! The two things the secure API reads out of a certificate: its subject (common name and
//! organizations: the user and groups of a client certificate) and its validity window.
//! The DER is read with the `der` crate and `x509-cert`'s types (through `x509-cert`, which
//! re-exports both); chains and signatures are webpki's business (rustls), so this only reads
//! fields out of certificates that are checked elsewhere or are our own.

use x509_cert::der::asn1::{
    BitStringRef, ContextSpecific, IntRef, ObjectIdentifier, OctetStringRef,
};
use x509_cert::der::oid::db::rfc4519::{COMMON_NAME, ORGANIZATION_NAME};
use x509_cert::der::{
    self, Decode, ErrorKind, Header, Length, Reader, SliceReader, Tag, TagNumber,
};
use x509_cert::spki::{AlgorithmIdentifierRef, SubjectPublicKeyInfoRef};

/// A certificate that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum X509Error {
    /// The DER is not a certificate.
    #[error("malformed certificate: {0}")]
    Der(der::Error),
    /// The DER ends inside an element.
    #[error("malformed certificate: truncated element")]
    Truncated,
    /// A validity time that is not a real date and time.
    #[error("malformed certificate: invalid date")]
    Date,
    /// A field read here (a name value, a validity time's form) that is not what it must be.
    #[error("malformed certificate: {0}")]
    Field(&'static str),
}

impl From<der::Error> for X509Error {
    /// Input that stops inside an element is `Truncated`, so logs tell a cut-off certificate
    /// from a malformed one.
    fn from(e: der::Error) -> Self {
        match e.kind() {
            ErrorKind::Incomplete { .. } => X509Error::Truncated,
            _ => X509Error::Der(e),
        }
    }
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

const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One DER element: its identifier octet and its contents.
#[derive(Clone, Copy, Debug)]
struct Element<'a> {
    tag: u8,
    value: &'a [u8],
}

/// The fields of a certificate this module reads, still as DER.
struct Fields<'a> {
    /// notBefore and notAfter.
    validity: [Element<'a>; 2],
    /// The subject's attributes (type, value), in the order of the DER.
    subject: Vec<(ObjectIdentifier, Element<'a>)>,
}

/// Parses `der`; bytes after the certificate are ignored, as before the parser was a crate.
///
/// The Certificate and TBSCertificate SEQUENCEs are walked here instead of decoding
/// `x509_cert::Certificate`, whose strictness would change what is accepted: its `Time` refuses
/// the `+hhmm` times that only [`validity`] refuses (with its own message; [`subject`] reads
/// such a certificate) and any year before 1970, and its `Name` re-sorts the attributes of a
/// multi-valued RDN and refuses duplicates in one, where Go keeps the DER's order. The other
/// fields are `x509-cert`/`spki` types, decoded for their framing and dropped.
fn parse(der: &[u8]) -> Result<Fields<'_>, X509Error> {
    let mut reader = SliceReader::new(der)?;
    // No `finish()`: that would refuse trailing bytes.
    let fields = reader.sequence(|cert| {
        let fields = cert.sequence(tbs_certificate)?;
        AlgorithmIdentifierRef::decode(cert)?;
        BitStringRef::decode(cert)?;
        Ok(fields)
    })?;
    // A `…Z` time must be a real date for the certificate to be read at all, whichever field
    // is asked for; other forms are left to `validity`'s refusal.
    for time in fields.validity {
        if zulu(time).is_ok() {
            unix_seconds(time)?;
        }
    }
    Ok(fields)
}

/// The TBSCertificate's contents (RFC 5280, 4.1).
fn tbs_certificate<'a, R: Reader<'a>>(tbs: &mut R) -> der::Result<Fields<'a>> {
    // Any version number: what it allows is webpki's check, not a reason not to read a name.
    ContextSpecific::<u32>::decode_explicit(tbs, TagNumber::N0)?;
    // Any length: RFC 5280's 20 octets are not kept by every issuer.
    IntRef::decode(tbs)?;
    AlgorithmIdentifierRef::decode(tbs)?;
    name(tbs)?;
    let validity = tbs.sequence(|v| Ok([validity_time(v)?, validity_time(v)?]))?;
    let subject = name(tbs)?;
    SubjectPublicKeyInfoRef::decode(tbs)?;
    // The unique IDs only when their tag is next: `decode_implicit` would skip over other
    // context-specific fields before them, and anything but [3] must be refused below.
    for number in [TagNumber::N1, TagNumber::N2] {
        let unique_id = Tag::ContextSpecific {
            constructed: false,
            number,
        };
        if tbs.peek_tag().ok() == Some(unique_id) {
            ContextSpecific::<BitStringRef<'a>>::decode_implicit(tbs, number)?;
        }
    }
    if !tbs.is_finished() {
        let header = Header::decode(tbs)?;
        header.tag.assert_eq(Tag::ContextSpecific {
            constructed: true,
            number: TagNumber::N3,
        })?;
        tbs.read_nested(header.length, |explicit| explicit.sequence(extensions))?;
    }
    Ok(Fields { validity, subject })
}

/// Each extension's framing only (id, critical, OCTET STRING): values are not looked at, so a
/// certificate is not refused for an extension nothing here uses. Not `x509_cert::ext`'s
/// `Extension`: its DER BOOLEAN refuses a `critical` of 0x01, which some issuers write (valid
/// BER) — and a configured serving certificate is not checked by webpki.
fn extensions<'a, R: Reader<'a>>(exts: &mut R) -> der::Result<()> {
    while !exts.is_finished() {
        exts.sequence(|ext| {
            ObjectIdentifier::decode(ext)?;
            if ext.peek_byte() == Some(0x01) {
                let critical = element(ext)?;
                if critical.value.len() != 1 {
                    return Err(Tag::Boolean.value_error());
                }
            }
            OctetStringRef::decode(ext)?;
            Ok(())
        })?;
    }
    Ok(())
}

/// A Name's attributes in the order of the DER. Not `x509_cert::name::Name`: it sorts the
/// attributes of each RDN (a SET) and refuses duplicates, and Go keeps them as encoded.
fn name<'a, R: Reader<'a>>(reader: &mut R) -> der::Result<Vec<(ObjectIdentifier, Element<'a>)>> {
    reader.sequence(|rdns| {
        let mut attrs = Vec::new();
        while !rdns.is_finished() {
            let header = Header::decode(rdns)?;
            header.tag.assert_eq(Tag::Set)?;
            rdns.read_nested(header.length, |set| {
                // SET SIZE (1..MAX): an empty RDN is malformed.
                if set.is_finished() {
                    return Err(Tag::Set.value_error());
                }
                while !set.is_finished() {
                    let attr =
                        set.sequence(|atv| Ok((ObjectIdentifier::decode(atv)?, element(atv)?)))?;
                    attrs.push(attr);
                }
                Ok(())
            })?;
        }
        Ok(attrs)
    })
}

/// A validity time's element; its form is checked by [`validity`] alone.
fn validity_time<'a, R: Reader<'a>>(reader: &mut R) -> der::Result<Element<'a>> {
    let time = element(reader)?;
    match time.tag {
        UTC_TIME | GENERALIZED_TIME => Ok(time),
        _ => Err(reader.error(ErrorKind::DateTime)),
    }
}

/// The next element, whatever its tag. `der`'s `AnyRef` refuses universal tags it does not
/// know (UniversalString, GeneralString), which would make one unused attribute of that type
/// refuse the whole certificate.
fn element<'a, R: Reader<'a>>(reader: &mut R) -> der::Result<Element<'a>> {
    let tag = reader.read_byte()?;
    // Tag numbers of 31 and up take more identifier octets; no name or time uses one.
    if tag & 0x1f == 0x1f {
        return Err(reader.error(ErrorKind::TagNumberInvalid));
    }
    let len = Length::decode(reader)?;
    let value = reader.read_slice(len)?;
    Ok(Element { tag, value })
}

/// The subject's common name and organizations.
pub fn subject(der: &[u8]) -> Result<Subject, X509Error> {
    let fields = parse(der)?;
    let mut out = Subject::default();
    for (oid, value) in fields.subject {
        // By tag number, whatever the class: the universal string types are all that occur.
        let tag = value.tag & 0x1f;
        if oid == COMMON_NAME {
            out.common_name = Some(directory_string(tag, value.value)?);
        } else if oid == ORGANIZATION_NAME {
            out.organizations.push(directory_string(tag, value.value)?);
        }
    }
    Ok(out)
}

/// The validity window.
pub fn validity(der: &[u8]) -> Result<Validity, X509Error> {
    let [not_before, not_after] = parse(der)?.validity;
    // The forms first: an offset or missing seconds in either time is refused as such
    // before a value is read.
    zulu(not_before)?;
    zulu(not_after)?;
    Ok(Validity {
        not_before: unix_seconds(not_before)?,
        not_after: unix_seconds(not_after)?,
    })
}

/// One validity time in the only form RFC 5280 (4.1.2.5) allows: `YYMMDDHHMMSSZ` (UTCTime)
/// or `YYYYMMDDHHMMSSZ` (GeneralizedTime). The kubelet refused any other form (a UTC offset,
/// no seconds, fractions) before it used a crate, so it still does.
fn zulu(time: Element<'_>) -> Result<(), X509Error> {
    let digits = match time.tag {
        UTC_TIME => 12,
        GENERALIZED_TIME => 14,
        _ => return Err(X509Error::Date),
    };
    if time.value.len() != digits + 1 || time.value.last() != Some(&b'Z') {
        return Err(X509Error::Field("a time is not in UTC (…Z) with seconds"));
    }
    Ok(())
}

/// A time [`zulu`] accepted, as Unix seconds. Computed here rather than by `der`'s
/// `UtcTime`/`GeneralizedTime`, which refuse years before 1970 (UTCTime covers 1950–2049).
fn unix_seconds(time: Element<'_>) -> Result<i64, X509Error> {
    let digits = time.value.strip_suffix(b"Z").ok_or(X509Error::Date)?;
    let two = |at: usize| -> Result<u8, X509Error> {
        match digits.get(at..at + 2) {
            Some([a @ b'0'..=b'9', b @ b'0'..=b'9']) => Ok((a - b'0') * 10 + (b - b'0')),
            _ => Err(X509Error::Date),
        }
    };
    let (year, at) = match (time.tag, digits.len()) {
        // Two-digit years: 50–99 are 19xx, 00–49 are 20xx (RFC 5280, 4.1.2.5.1).
        (UTC_TIME, 12) => {
            let yy = i32::from(two(0)?);
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (GENERALIZED_TIME, 14) => (i32::from(two(0)?) * 100 + i32::from(two(2)?), 4),
        _ => return Err(X509Error::Date),
    };
    let field = |at: usize| two(at).map(|v| v as i8);
    let year = i16::try_from(year).map_err(|_| X509Error::Date)?;
    let civil = jiff::civil::DateTime::new(
        year,
        field(at)?,
        field(at + 2)?,
        field(at + 4)?,
        field(at + 6)?,
        field(at + 8)?,
        0,
    )
    .map_err(|_| X509Error::Date)?;
    let instant = jiff::tz::Offset::UTC
        .to_timestamp(civil)
        .map_err(|_| X509Error::Date)?;
    Ok(instant.as_second())
}

/// A DirectoryString (or IA5String) as text, by its tag number. Go also reads
/// TeletexString and BMPString, so this does too.
fn directory_string(tag: u8, value: &[u8]) -> Result<String, X509Error> {
    match tag {
        // UTF8String, PrintableString, IA5String: ASCII is UTF-8.
        0x0c | 0x13 | 0x16 => String::from_utf8(value.to_vec())
            .map_err(|_| X509Error::Field("a name value is not valid UTF-8")),
        // TeletexString: read as Latin-1, as Go does.
        0x14 => Ok(value.iter().map(|b| char::from(*b)).collect()),
        // BMPString: UCS-2, big-endian.
        0x1e => {
            if !value.len().is_multiple_of(2) {
                return Err(X509Error::Field("odd-length BMPString"));
            }
            let units: Vec<u16> = value
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units)
                .map_err(|_| X509Error::Field("a BMPString is not valid UCS-2"))
        }
        _ => Err(X509Error::Field("unsupported string type in a name")),
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
        let mut reader = SliceReader::new(&der)?;
        let time = validity_time(&mut reader)?;
        zulu(time)?;
        unix_seconds(time)
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

    /// The OpenSSL certificate with its notBefore (the UTCTime `261122071245Z`) replaced by
    /// the UTCTime `value`, the lengths around it adjusted (certificate and TBSCertificate
    /// have two-octet lengths, Validity a one-octet one).
    fn with_not_before(value: &[u8]) -> Vec<u8> {
        let mut good = der(OPENSSL_CERT);
        let old = b"\x17\x0d261122071245Z";
        let at = good.windows(old.len()).position(|w| w == old).unwrap();
        let grow = value.len() - 13;
        for len_at in [2, 6] {
            let len = usize::from(u16::from_be_bytes([good[len_at], good[len_at + 1]])) + grow;
            good[len_at..len_at + 2].copy_from_slice(&u16::try_from(len).unwrap().to_be_bytes());
        }
        good[at - 1] += u8::try_from(grow).unwrap();
        let mut time = vec![UTC_TIME, u8::try_from(value.len()).unwrap()];
        time.extend_from_slice(value);
        good.splice(at..at + old.len(), time);
        good
    }

    #[test]
    fn an_offset_time_is_refused_by_validity_alone() {
        let cert = with_not_before(b"261122071245+0100");
        assert_eq!(
            subject(&cert).unwrap().common_name.as_deref(),
            Some("alice")
        );
        let err = validity(&cert).unwrap_err();
        assert_eq!(
            err.to_string(),
            "malformed certificate: a time is not in UTC (…Z) with seconds"
        );
    }

    #[test]
    fn times_before_1970_and_bad_dates() {
        let v = validity(&with_not_before(b"500101000000Z")).unwrap();
        assert_eq!(v.not_before, -631_152_000);
        assert_eq!(v.not_after, NOT_AFTER);
        let err = validity(&with_not_before(b"260230000000Z")).unwrap_err();
        assert_eq!(err.to_string(), "malformed certificate: invalid date");
    }

    #[test]
    fn truncated_and_trailing_bytes() {
        let mut good = der(OPENSSL_CERT);
        assert_eq!(subject(&good[..100]), Err(X509Error::Truncated));
        assert_eq!(
            X509Error::Truncated.to_string(),
            "malformed certificate: truncated element"
        );
        good.extend_from_slice(b"trailing");
        assert_eq!(validity(&good).unwrap().not_before, NOT_BEFORE);
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
