//! Tests of the certificate module's pure parts: kubeconfig writing and reading through
//! kube's types, the usable check, the file store, CSRs, and the rotation schedule.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use kube::config::AuthInfo;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use rustls::pki_types::CertificateSigningRequestDer;
use rustls::pki_types::pem::PemObject;
use x509_cert::der::Decode;
use x509_cert::der::oid::AssociatedOid;
use x509_cert::der::oid::db::rfc4519::{COMMON_NAME, ORGANIZATION_NAME};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::request::{CertReq, ExtensionReq};

use super::csr::{self, Outcome, Template};
use super::pem;
use super::rotation::{jittered_fraction, retry_delay, rotation_deadline};
use super::serving::ReloadingCert;
use super::store::{CLIENT_PREFIX, FileStore};
use super::{CertificateError, kubeconfig};

const NOW: i64 = 1_800_000_000;
const DAY: i64 = 24 * 3600;

/// A self-signed certificate (PEM) and its key (PEM).
fn cert(cn: &str, orgs: &[&str], sans: Vec<SanType>, from: i64, to: i64) -> (String, String) {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.subject_alt_names = sans;
    params.not_before = time::OffsetDateTime::from_unix_timestamp(from).unwrap();
    params.not_after = time::OffsetDateTime::from_unix_timestamp(to).unwrap();
    let key = KeyPair::generate().unwrap();
    let c = params.self_signed(&key).unwrap();
    (c.pem(), key.serialize_pem())
}

fn node_cert(from: i64, to: i64) -> (String, String) {
    cert("system:node:n1", &["system:nodes"], Vec::new(), from, to)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn cert_info_reads_validity_subject_and_sans() {
    let ip: IpAddr = "10.0.0.5".parse().unwrap();
    let v6: IpAddr = "fd00::5".parse().unwrap();
    let (pem_text, _) = cert(
        "system:node:n1",
        &["system:nodes"],
        vec![
            SanType::DnsName("n1.example".try_into().unwrap()),
            SanType::IpAddress(ip),
            SanType::IpAddress(v6),
        ],
        NOW,
        NOW + DAY,
    );
    let info = pem::leaf_info(pem_text.as_bytes()).unwrap();
    assert_eq!(info.not_before, NOW);
    assert_eq!(info.not_after, NOW + DAY);
    assert_eq!(info.common_name.as_deref(), Some("system:node:n1"));
    assert_eq!(info.organizations, ["system:nodes"]);
    assert_eq!(info.dns_names, ["n1.example"]);
    assert_eq!(info.ips, [ip, v6]);

    let t = Template::serving("n1", &["n1.example".into()], &[ip]);
    assert!(t.satisfied_by(&info));
    let missing_ip =
        Template::serving("n1", &["n1.example".into()], &["10.0.0.6".parse().unwrap()]);
    assert!(!missing_ip.satisfied_by(&info));
    let other_node = Template::serving("n2", &[], &[]);
    assert!(!other_node.satisfied_by(&info));
    assert!(Template::client("n1").satisfied_by(&info));
}

#[test]
fn unexpired_checks_every_certificate() {
    let (good, _) = node_cert(NOW - DAY, NOW + DAY);
    let (old, _) = node_cert(NOW - 2 * DAY, NOW - DAY);
    assert!(pem::unexpired(good.as_bytes(), NOW).is_ok());
    let both = format!("{good}{old}");
    let err = pem::unexpired(both.as_bytes(), NOW).unwrap_err();
    assert!(err.contains("expired"), "{err}");
    assert!(pem::unexpired(b"garbage", NOW).is_err());
    assert!(pem::unexpired(b"", NOW).is_err());
}

#[test]
fn credentials_table() {
    let (good, _) = node_cert(NOW - DAY, NOW + DAY);
    let (expired, _) = node_cert(NOW - 2 * DAY, NOW - DAY);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.pem");
    std::fs::write(&file, &good).unwrap();
    let cases: Vec<(&str, AuthInfo, bool)> = vec![
        (
            "data, unexpired",
            AuthInfo {
                client_certificate_data: Some(b64(&good)),
                ..AuthInfo::default()
            },
            true,
        ),
        (
            "data, expired",
            AuthInfo {
                client_certificate_data: Some(b64(&expired)),
                ..AuthInfo::default()
            },
            false,
        ),
        (
            "data, not base64",
            AuthInfo {
                client_certificate_data: Some("!!".into()),
                ..AuthInfo::default()
            },
            false,
        ),
        (
            "file",
            AuthInfo {
                client_certificate: Some(file.to_string_lossy().into()),
                ..AuthInfo::default()
            },
            true,
        ),
        (
            "missing file",
            AuthInfo {
                client_certificate: Some("/nonexistent/c.pem".into()),
                ..AuthInfo::default()
            },
            false,
        ),
        (
            "token",
            AuthInfo {
                token: Some("t".to_string().into()),
                ..AuthInfo::default()
            },
            true,
        ),
        (
            "token file",
            AuthInfo {
                token_file: Some("/var/run/token".into()),
                ..AuthInfo::default()
            },
            true,
        ),
        ("nothing", AuthInfo::default(), false),
    ];
    for (name, auth, want) in cases {
        assert_eq!(
            kubeconfig::check_credentials(&auth, NOW).is_ok(),
            want,
            "{name}"
        );
    }
}

const BOOTSTRAP: &str = r#"
apiVersion: v1
kind: Config
clusters:
- name: other
  cluster:
    server: https://other:6443
- name: kubernetes
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: ca.crt
contexts:
- name: tls-bootstrap-token-user@kubernetes
  context:
    cluster: kubernetes
    user: tls-bootstrap-token-user
current-context: tls-bootstrap-token-user@kubernetes
users:
- name: tls-bootstrap-token-user
  user:
    token: abcdef.0123456789abcdef
"#;

#[tokio::test]
async fn bootstrapped_kubeconfig_round_trips_through_kube() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, _) = cert("kubernetes", &[], Vec::new(), NOW - DAY, NOW + 3650 * DAY);
    std::fs::write(dir.path().join("ca.crt"), &ca).unwrap();
    let bootstrap_path = dir.path().join("bootstrap-kubelet.conf");
    std::fs::write(&bootstrap_path, BOOTSTRAP).unwrap();
    let bootstrap = kubeconfig::read(&bootstrap_path).await.unwrap();

    let store = FileStore::new(&dir.path().join("pki"), CLIENT_PREFIX);
    let written = kubeconfig::bootstrapped(&bootstrap, &store.current_path()).unwrap();
    let path = dir.path().join("kubelet.conf");
    kubeconfig::write(&written, &path).unwrap();
    assert_eq!(mode(&path), 0o600);

    let back = kubeconfig::read(&path).await.unwrap();
    assert_eq!(back.current_context.as_deref(), Some("default-context"));
    let cluster = kubeconfig::current_cluster(&back).unwrap();
    assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.1:6443"));
    // The CA stays a file, made absolute when the bootstrap kubeconfig was read.
    let ca_path = dir.path().join("ca.crt").to_string_lossy().into_owned();
    assert_eq!(
        cluster.certificate_authority.as_deref(),
        Some(ca_path.as_str())
    );
    let user = &back.auth_infos[0];
    assert_eq!(user.name, "default-auth");
    let auth = user.auth_info.as_ref().unwrap();
    let pair = store.current_path().to_string_lossy().into_owned();
    assert_eq!(auth.client_certificate.as_deref(), Some(pair.as_str()));
    assert_eq!(auth.client_key.as_deref(), Some(pair.as_str()));
    assert!(auth.token.is_none(), "the bootstrap token is not copied");
    let yaml = std::fs::read_to_string(&path).unwrap();
    assert!(!yaml.contains("abcdef"), "{yaml}");

    // kube resolves it into a client configuration.
    let config = kubeconfig::load(&path).await.unwrap();
    assert_eq!(config.cluster_url.to_string(), "https://10.0.0.1:6443/");
    assert_eq!(config.default_namespace, "default");
    assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));

    // Not usable until the pair exists; then usable.
    assert!(!kubeconfig::usable(&path).await.unwrap());
    let (c, k) = node_cert(pem::unix_now() - DAY, pem::unix_now() + DAY);
    store
        .update(c.as_bytes(), k.as_bytes(), jiff::Timestamp::now())
        .unwrap();
    assert!(kubeconfig::usable(&path).await.unwrap());
    // And a client is built from it with the pair.
    let config = kubeconfig::load(&path).await.unwrap();
    kubeconfig::client(config, &path).unwrap();

    // Missing, token-based.
    assert!(!kubeconfig::usable(&dir.path().join("nope")).await.unwrap());
    assert!(kubeconfig::usable(&bootstrap_path).await.unwrap());
}

#[test]
fn the_bootstrap_cluster_must_resolve() {
    let mut kc = kube::config::Kubeconfig::from_yaml(BOOTSTRAP).unwrap();
    kc.current_context = Some("missing".into());
    let err = kubeconfig::bootstrapped(&kc, Path::new("/p.pem")).unwrap_err();
    assert!(err.contains("missing"), "{err}");
    kc.current_context = None;
    assert!(kubeconfig::bootstrapped(&kc, Path::new("/p.pem")).is_err());
}

#[test]
fn store_writes_pairs_and_swaps_the_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let store = FileStore::new(&pki, CLIENT_PREFIX);
    let at: jiff::Timestamp = "2026-03-04T05:06:07Z".parse().unwrap();
    assert_eq!(
        store.pair_path(at),
        pki.join("kubelet-client-2026-03-04-05-06-07.pem")
    );
    assert_eq!(store.current_path(), pki.join("kubelet-client-current.pem"));
    assert!(store.current().unwrap().is_none());

    let (c1, k1) = node_cert(NOW, NOW + DAY);
    let first = store.update(c1.as_bytes(), k1.as_bytes(), at).unwrap();
    assert_eq!(first, store.pair_path(at));
    assert_eq!(mode(&first), 0o600);
    let content = std::fs::read_to_string(&first).unwrap();
    assert!(
        content.starts_with("-----BEGIN CERTIFICATE-----"),
        "cert first"
    );
    assert!(content.ends_with(&k1), "then the key");
    assert_eq!(std::fs::read_link(store.current_path()).unwrap(), first);
    pem::certified_key(&store.current().unwrap().unwrap()).unwrap();

    let later: jiff::Timestamp = "2026-03-04T05:06:08Z".parse().unwrap();
    let (c2, k2) = node_cert(NOW, NOW + 2 * DAY);
    let second = store.update(c2.as_bytes(), k2.as_bytes(), later).unwrap();
    assert_eq!(std::fs::read_link(store.current_path()).unwrap(), second);
    assert_eq!(
        pem::leaf_info(&store.current().unwrap().unwrap())
            .unwrap()
            .not_after,
        NOW + 2 * DAY
    );
    assert!(first.exists(), "older pairs are kept, as Go keeps them");
    let names: Vec<_> = std::fs::read_dir(&pki)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "two pairs and the link: {names:?}");

    // A regular file where the link should be is left alone.
    std::fs::remove_file(store.current_path()).unwrap();
    std::fs::write(store.current_path(), "mine").unwrap();
    let err = store
        .update(c2.as_bytes(), k2.as_bytes(), later)
        .unwrap_err();
    assert!(
        matches!(&err, CertificateError::Content { what, .. } if what.contains("kubelet-client-current.pem")),
        "{err}"
    );
}

/// The subject attributes and SANs of a PEM CSR.
fn parse_csr(pem_text: &str) -> (Vec<(String, String)>, Vec<String>, Vec<IpAddr>) {
    let der = CertificateSigningRequestDer::from_pem_slice(pem_text.as_bytes()).unwrap();
    let req = CertReq::from_der(der.as_ref()).unwrap();
    let mut subject = Vec::new();
    for rdn in req.info.subject.0.iter() {
        for attr in rdn.0.iter() {
            let kind = if attr.oid == COMMON_NAME {
                "CN"
            } else if attr.oid == ORGANIZATION_NAME {
                "O"
            } else {
                "?"
            };
            let value = String::from_utf8(attr.value.value().to_vec()).unwrap();
            subject.push((kind.to_string(), value));
        }
    }
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    for attr in req.info.attributes.iter() {
        for value in attr.values.iter() {
            let exts: ExtensionReq = value.decode_as().unwrap();
            for ext in exts.0 {
                assert_eq!(ext.extn_id, SubjectAltName::OID, "only SANs are requested");
                let sans = SubjectAltName::from_der(ext.extn_value.as_bytes()).unwrap();
                for n in sans.0 {
                    match n {
                        GeneralName::DnsName(d) => dns.push(d.to_string()),
                        GeneralName::IpAddress(ip) => {
                            let b: [u8; 4] = ip.as_bytes().try_into().unwrap();
                            ips.push(IpAddr::from(b));
                        }
                        other => panic!("unexpected SAN {other:?}"),
                    }
                }
            }
        }
    }
    (subject, dns, ips)
}

#[test]
fn client_csr_names_the_node() {
    let t = Template::client("n1");
    assert_eq!(t.signer_name, "kubernetes.io/kube-apiserver-client-kubelet");
    assert_eq!(t.usages, ["digital signature", "client auth"]);
    let key = csr::generate_key().unwrap();
    let req = csr::make_request(&t, &key).unwrap();
    assert!(
        req.csr_pem
            .starts_with("-----BEGIN CERTIFICATE REQUEST-----")
    );
    assert!(req.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    let (subject, dns, ips) = parse_csr(&req.csr_pem);
    assert_eq!(
        subject,
        [
            ("O".to_string(), "system:nodes".to_string()),
            ("CN".to_string(), "system:node:n1".to_string())
        ]
    );
    assert!(dns.is_empty() && ips.is_empty());
    assert!(
        !format!("{req:?}").contains("PRIVATE KEY"),
        "Debug hides the key"
    );

    let obj = csr::object(&t, &req, None);
    assert_eq!(obj.metadata.generate_name.as_deref(), Some("csr-"));
    assert_eq!(obj.spec.request.0, req.csr_pem.as_bytes());
    assert_eq!(
        obj.spec.usages.as_deref(),
        Some(&["digital signature".to_string(), "client auth".to_string()][..])
    );
    let named = csr::object(&t, &req, Some("node-csr-x"));
    assert_eq!(named.metadata.name.as_deref(), Some("node-csr-x"));
    assert!(named.metadata.generate_name.is_none());

    // The same key and template name the same CSR; another key another one.
    let name = csr::digested_name(&req.public_key_der, &t);
    assert!(name.starts_with("node-csr-"), "{name}");
    assert_eq!(name.len(), "node-csr-".len() + 43, "{name}");
    assert_eq!(name, csr::digested_name(&req.public_key_der, &t));
    let other = csr::make_request(&t, &csr::generate_key().unwrap()).unwrap();
    assert_ne!(name, csr::digested_name(&other.public_key_der, &t));
    assert_ne!(
        name,
        csr::digested_name(&req.public_key_der, &Template::client("n2"))
    );

    // An existing CSR of that name is ours only for the same key, signer and usages.
    assert!(csr::compatible(&named, &named, &req.public_key_der).is_ok());
    let err = csr::compatible(&named, &named, &other.public_key_der).unwrap_err();
    assert!(err.contains("another key"), "{err}");
    let mut serving = named.clone();
    serving.spec.signer_name = csr::SERVING_SIGNER.into();
    assert!(csr::compatible(&serving, &named, &req.public_key_der).is_err());
}

#[test]
fn serving_csr_carries_the_node_names_and_ips() {
    let ips: Vec<IpAddr> = vec!["10.0.0.5".parse().unwrap(), "10.0.0.5".parse().unwrap()];
    let t = Template::serving("n1", &["n1".into(), "n1.example".into(), "n1".into()], &ips);
    assert_eq!(t.signer_name, "kubernetes.io/kubelet-serving");
    assert_eq!(t.usages, ["digital signature", "server auth"]);
    let req = csr::make_request(&t, &csr::generate_key().unwrap()).unwrap();
    let (subject, dns, got_ips) = parse_csr(&req.csr_pem);
    assert_eq!(subject[1], ("CN".to_string(), "system:node:n1".to_string()));
    assert_eq!(dns, ["n1", "n1.example"]);
    assert_eq!(got_ips, [ips[0]]);
}

fn with_conditions(conditions: &[(&str, &str)], cert: Option<&str>) -> CertificateSigningRequest {
    CertificateSigningRequest {
        status: Some(CertificateSigningRequestStatus {
            certificate: cert.map(|c| ByteString(c.as_bytes().to_vec())),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, reason)| CertificateSigningRequestCondition {
                        type_: t.to_string(),
                        status: "True".into(),
                        reason: Some(reason.to_string()),
                        message: Some(format!("{t} by test")),
                        ..Default::default()
                    })
                    .collect(),
            ),
        }),
        ..Default::default()
    }
}

#[test]
fn csr_outcomes() {
    assert_eq!(
        csr::outcome(&CertificateSigningRequest::default()),
        Outcome::Pending
    );
    assert_eq!(csr::outcome(&with_conditions(&[], None)), Outcome::Pending);
    assert_eq!(
        csr::outcome(&with_conditions(&[("Approved", "AutoApproved")], None)),
        Outcome::Pending,
        "approved but not issued yet"
    );
    assert_eq!(
        csr::outcome(&with_conditions(&[("Approved", "AutoApproved")], Some(""))),
        Outcome::Pending
    );
    assert_eq!(
        csr::outcome(&with_conditions(
            &[("Approved", "AutoApproved")],
            Some("PEM")
        )),
        Outcome::Issued(b"PEM".to_vec())
    );
    assert_eq!(
        csr::outcome(&with_conditions(&[("Denied", "Nope")], None)),
        Outcome::Denied {
            reason: "Nope".into(),
            message: "Denied by test".into()
        }
    );
    assert_eq!(
        csr::outcome(&with_conditions(
            &[("Approved", "AutoApproved"), ("Failed", "SignerFailed")],
            None
        )),
        Outcome::Failed {
            reason: "SignerFailed".into(),
            message: "Failed by test".into()
        }
    );
    let err = CertificateError::Denied {
        name: "node-csr-abc".into(),
        reason: "Nope".into(),
        message: "no".into(),
    }
    .to_string();
    assert!(
        err.contains("node-csr-abc") && err.contains("Nope"),
        "{err}"
    );
}

#[test]
fn rotation_deadline_is_70_to_90_percent_of_the_lifetime() {
    let (from, to) = (NOW, NOW + 1000 * DAY);
    assert_eq!(
        rotation_deadline(from, to, jittered_fraction(0.0)),
        NOW + 700 * DAY
    );
    assert_eq!(
        rotation_deadline(from, to, jittered_fraction(0.5)),
        NOW + 800 * DAY
    );
    let top = rotation_deadline(from, to, jittered_fraction(0.999_999));
    assert!(top < NOW + 900 * DAY && top > NOW + 899 * DAY, "{top}");
    // Out-of-range randomness is clamped; an inverted window rotates at its start.
    assert_eq!(
        rotation_deadline(from, to, jittered_fraction(7.0)),
        NOW + 900 * DAY
    );
    assert_eq!(rotation_deadline(to, from, 0.8), to);
}

#[test]
fn retries_back_off_then_poll() {
    let secs: Vec<u64> = (0..7).map(|a| retry_delay(a, 0.0).as_secs()).collect();
    assert_eq!(secs, [2, 4, 8, 16, 32, 32, 32]);
    let jittered = retry_delay(1, 0.999);
    assert!(jittered > std::time::Duration::from_secs(4));
    assert!(jittered < std::time::Duration::from_millis(4400));
}

#[test]
fn reloading_cert_swaps_what_it_presents() {
    let r = ReloadingCert::new();
    assert!(r.get().is_none());
    let (c1, k1) = node_cert(NOW, NOW + DAY);
    let (c2, k2) = node_cert(NOW, NOW + DAY);
    let first = pem::certified_key(format!("{c1}{k1}").as_bytes()).unwrap();
    let second = pem::certified_key(format!("{c2}{k2}").as_bytes()).unwrap();
    assert!(r.set_if_empty(first.clone()));
    assert!(!r.set_if_empty(second.clone()), "a set certificate is kept");
    assert_eq!(r.get().unwrap().cert, first.cert);
    r.set(second.clone());
    assert_eq!(r.get().unwrap().cert, second.cert);
    // A key that is not the certificate's is refused.
    assert!(pem::certified_key(format!("{c1}{k2}").as_bytes()).is_err());
}

/// A kube client on a stub API server: creating a CSR answers it named `csr-x1` (or
/// conflicts, with `conflict`), and listing or getting it shows `status`.
fn stub_client(status: CertificateSigningRequestStatus, conflict: bool) -> kube::Client {
    use http_body_util::{BodyExt, Full};
    let svc = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
        let status = status.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let path = parts.uri.path().to_string();
            let base = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
            let (code, json) = if parts.method == hyper::Method::POST && path == base {
                let mut csr: CertificateSigningRequest = serde_json::from_slice(&body).unwrap();
                if conflict {
                    let name = csr.metadata.name.clone().unwrap();
                    (
                        409,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "AlreadyExists", "code": 409,
                            "message": format!("certificatesigningrequests {name} already exists")}),
                    )
                } else {
                    assert_eq!(csr.metadata.generate_name.as_deref(), Some("csr-"));
                    csr.metadata.name = Some("csr-x1".into());
                    csr.metadata.uid = Some("u1".into());
                    csr.metadata.resource_version = Some("1".into());
                    (201, serde_json::to_value(&csr).unwrap())
                }
            } else if parts.method == hyper::Method::GET && path == base {
                let query = parts.uri.query().unwrap_or_default().to_string();
                if query.contains("watch=true") {
                    // Nothing more happens: the watch never answers.
                    std::future::pending::<()>().await;
                    unreachable!()
                } else {
                    assert!(query.contains("fieldSelector=metadata.name"), "{query}");
                    let csr = serde_json::json!({
                        "metadata": {"name": "csr-x1", "uid": "u1", "resourceVersion": "2"},
                        "spec": {"request": "", "signerName": csr::CLIENT_SIGNER},
                        "status": status,
                    });
                    (
                        200,
                        serde_json::json!({"apiVersion": "certificates.k8s.io/v1",
                            "kind": "CertificateSigningRequestList",
                            "metadata": {"resourceVersion": "2"}, "items": [csr]}),
                    )
                }
            } else {
                (
                    404,
                    serde_json::json!({"kind": "Status", "code": 404, "message": path}),
                )
            };
            let bytes = serde_json::to_vec(&json).unwrap();
            Ok::<_, std::convert::Infallible>(
                hyper::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Full::new(bytes::Bytes::from(bytes)))
                    .unwrap(),
            )
        }
    });
    kube::Client::new(svc, "default")
}

fn condition(type_: &str) -> CertificateSigningRequestCondition {
    CertificateSigningRequestCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(format!("{type_}Reason")),
        message: Some("said the test".into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_csr_is_created_then_waited_for_until_issued() {
    let t = Template::client("n1");
    let req = csr::make_request(&t, &csr::generate_key().unwrap()).unwrap();
    let timeout = std::time::Duration::from_secs(5);

    let issued = CertificateSigningRequestStatus {
        certificate: Some(ByteString(b"CERT PEM".to_vec())),
        conditions: Some(vec![condition("Approved")]),
    };
    let cert = csr::request_certificate(stub_client(issued, false), &t, &req, None, timeout)
        .await
        .unwrap();
    assert_eq!(cert, b"CERT PEM");

    let denied = CertificateSigningRequestStatus {
        certificate: None,
        conditions: Some(vec![condition("Denied")]),
    };
    let err = csr::request_certificate(stub_client(denied, false), &t, &req, None, timeout)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CertificateError::Denied { name, reason, .. } if name == "csr-x1" && reason == "DeniedReason"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pending_csr_times_out_naming_it() {
    let t = Template::client("n1");
    let req = csr::make_request(&t, &csr::generate_key().unwrap()).unwrap();
    let pending = CertificateSigningRequestStatus {
        certificate: None,
        conditions: Some(vec![condition("Approved")]),
    };
    let err = csr::request_certificate(
        stub_client(pending, false),
        &t,
        &req,
        None,
        std::time::Duration::from_secs(30),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, CertificateError::Timeout { name, .. } if name == "csr-x1"),
        "{err}"
    );
}

#[tokio::test]
async fn a_conflicting_fixed_name_must_be_compatible() {
    let t = Template::client("n1");
    let req = csr::make_request(&t, &csr::generate_key().unwrap()).unwrap();
    let client = stub_client(CertificateSigningRequestStatus::default(), true);
    let err = csr::request_certificate(
        client,
        &t,
        &req,
        Some("node-csr-abc"),
        std::time::Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    // The stub's GET of the name is a 404: the existing CSR cannot be looked at.
    assert!(err.to_string().contains("node-csr-abc"), "{err}");
}

/// An HTTPS server on 127.0.0.1 presenting `pair` (certificate then key, PEM) that answers
/// every request `ok`; its URL.
async fn https_server(pair: String) -> String {
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let key = pem::certified_key(pair.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(
        Arc::unwrap_or_clone(key),
    )));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = [0u8; 4096];
                let _ = tls.read(&mut buf).await;
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    url
}

/// A kube client for `url` trusting `ca` (PEM).
fn client_trusting(url: &str, ca: &str) -> kube::Client {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.root_cert = Some(vec![crate::certificate::fixtures::der(ca).to_vec()]);
    kube::Client::try_from(config).unwrap()
}

async fn healthz(client: &kube::Client) -> Result<String, kube::Error> {
    let req = hyper::Request::get("/healthz").body(Vec::new()).unwrap();
    client.request_text(req).await
}

/// ferrolet's client and the API server's certificates: a v1 CA in the kubeconfig is a trust
/// anchor like any; a v1 serving certificate is refused by rustls, and the log says so.
#[tokio::test]
async fn api_server_certificates_v1_ca_taken_v1_leaf_explained() {
    use crate::certificate::fixtures::*;
    let v3 = https_server(format!("{SERVER_V3}{SERVER_V3_KEY}")).await;
    assert_eq!(healthz(&client_trusting(&v3, CA_V1)).await.unwrap(), "ok");

    let v1 = https_server(format!("{SERVER_V1}{SERVER_V1_KEY}")).await;
    let err = healthz(&client_trusting(&v1, CA_V3)).await.unwrap_err();
    let text = super::api_error_text(&err);
    assert!(
        text.ends_with(
            ": the API server's serving certificate is an X.509 v1 (or v2) certificate; rustls \
             accepts only v3 end-entity certificates: reissue it with extensions \
             (openssl x509 -req … -extfile …)"
        ),
        "{text}"
    );
    // Other failures are left as they are: a server from a CA the client does not trust.
    let err = healthz(&client_trusting(&v3, CA_V3)).await.unwrap_err();
    assert_eq!(super::api_error_text(&err), err.to_string());
}

/// A kubeconfig whose client certificate is v1 cannot make a client (rustls checks the key
/// against it with webpki); the error names the kubeconfig, the file and the reason.
#[tokio::test]
async fn a_v1_client_certificate_in_a_kubeconfig_is_named() {
    use crate::certificate::fixtures::*;
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("client.crt");
    let key = dir.path().join("client.key");
    std::fs::write(&cert, CLIENT_V1).unwrap();
    std::fs::write(&key, CLIENT_V1_KEY).unwrap();
    let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    config.auth_info = AuthInfo {
        client_certificate: Some(cert.display().to_string()),
        client_key: Some(key.display().to_string()),
        ..AuthInfo::default()
    };
    let path = Path::new("/etc/kubernetes/kubelet.conf");
    let Err(err) = kubeconfig::client(config.clone(), path) else {
        panic!("a client from a v1 client certificate");
    };
    let err = err.to_string();
    assert_eq!(
        err,
        format!(
            "/etc/kubernetes/kubelet.conf: its client certificate: {}: an X.509 v1 certificate; \
             rustls accepts only v3 end-entity certificates: reissue it with extensions \
             (openssl x509 -req … -extfile …)",
            cert.display()
        )
    );
    // A v3 one makes a client.
    std::fs::write(&cert, CLIENT_V3).unwrap();
    std::fs::write(&key, CLIENT_V3_KEY).unwrap();
    kubeconfig::client(config, path).unwrap();
}
