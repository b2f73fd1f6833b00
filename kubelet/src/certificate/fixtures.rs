//! Certificates made by the `openssl` CLI, for the tests of every reader of certificates
//! (`testdata/gen.sh` made them, and says how; valid until 2126).

/// A self-signed X.509 v1 CA, `CN=v1-ca` (P-256).
pub const CA_V1: &str = include_str!("testdata/ca-v1.crt");
/// A self-signed v3 CA as kubeadm's is, `CN=kubernetes` (P-256, basicConstraints CA:TRUE).
pub const CA_V3: &str = include_str!("testdata/ca-v3.crt");
/// A v1 client certificate `/O=system:masters/O=ops team/CN=alice` from [`CA_V3`] (RSA 2048).
pub const CLIENT_V1: &str = include_str!("testdata/client-v1.crt");
/// Its key.
pub const CLIENT_V1_KEY: &str = include_str!("testdata/client-v1.key");
/// A v3 client certificate `/O=system:nodes/CN=system:node:n1` (clientAuth) from [`CA_V1`].
pub const CLIENT_V3: &str = include_str!("testdata/client-v3.crt");
/// Its key.
pub const CLIENT_V3_KEY: &str = include_str!("testdata/client-v3.key");
/// A v1 serving certificate `CN=127.0.0.1` from [`CA_V3`] (P-256).
pub const SERVER_V1: &str = include_str!("testdata/server-v1.crt");
/// Its key.
pub const SERVER_V1_KEY: &str = include_str!("testdata/server-v1.key");
/// A v3 serving certificate for IP 127.0.0.1 (serverAuth) from [`CA_V1`] (P-256).
pub const SERVER_V3: &str = include_str!("testdata/server-v3.crt");
/// Its key.
pub const SERVER_V3_KEY: &str = include_str!("testdata/server-v3.key");

/// The one certificate of `pem`, DER.
pub fn der(pem: &str) -> rustls::pki_types::CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    match rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()) {
        Ok(der) => der,
        Err(e) => panic!("a fixture is not PEM: {e}"),
    }
}
