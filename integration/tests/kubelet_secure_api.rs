//! The secure kubelet API end to end (issue #7): `ferrolet` on its own free `--port`, with a
//! client CA the test makes, over the real ferrolet-cri. A client that trusts only the
//! self-signed `<root-dir>/pki/kubelet.crt` ferrolet generated completes the handshake; an
//! anonymous request is 401; a client certificate from the configured CA reads `/pods`,
//! `/healthz`, `/configz`, container logs and `/run`; one from another CA is 401; and a
//! restarted ferrolet keeps its serving certificate.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, KubeletOptions, find_pod, image, pod_phase, sh,
};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair,
};
use serde_json::Value;

/// A CA: its certificate (PEM) and the issuer that signs with it.
fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    (pem, Issuer::new(params, key))
}

/// A client certificate for user `cn` in group `org`, signed by `issuer`, with its key.
fn client_identity(issuer: &Issuer<'_, KeyPair>, cn: &str, org: &str) -> reqwest::Identity {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, org);
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    reqwest::Identity::from_pem(format!("{}{}", cert.pem(), key.serialize_pem()).as_bytes())
        .unwrap()
}

/// An HTTPS client that trusts only the certificates in `serving_cert` (ferrolet's
/// self-signed `kubelet.crt`), presenting `identity` if given.
fn client(serving_cert: &Path, identity: Option<reqwest::Identity>) -> reqwest::Client {
    let pem = std::fs::read(serving_cert)
        .unwrap_or_else(|e| panic!("reading {}: {e}", serving_cert.display()));
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .timeout(std::time::Duration::from_secs(30));
    for cert in reqwest::Certificate::from_pem_bundle(&pem).unwrap() {
        builder = builder.add_root_certificate(cert);
    }
    if let Some(identity) = identity {
        builder = builder.identity(identity);
    }
    builder.build().unwrap()
}

/// `method path` on the node's secure port: status and body. Panics if the request fails
/// below HTTP (TLS included).
async fn call(
    node: &KubeletNode,
    client: &reqwest::Client,
    method: reqwest::Method,
    path: &str,
) -> (u16, String) {
    let url = format!("https://127.0.0.1:{}{path}", node.secure_addr().port());
    let resp = client
        .request(method, &url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e:?}\nferrolet log:\n{}", node.kubelet_log()));
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

async fn get(node: &KubeletNode, client: &reqwest::Client, path: &str) -> (u16, String) {
    call(node, client, reqwest::Method::GET, path).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_guard_the_secure_port() {
    let certs = tempfile::tempdir().unwrap();
    let (ca_pem, issuer) = ca("ferrolet-it clients");
    let (_, stranger) = ca("some other CA");
    let ca_file = certs.path().join("client-ca.crt");
    std::fs::write(&ca_file, &ca_pem).unwrap();

    let node = KubeletNode::start_with(
        "secure-api",
        KubeletOptions {
            extra_config: format!(
                "authentication:\n  x509:\n    clientCAFile: {}\n",
                ca_file.display()
            ),
            ..Default::default()
        },
    )
    .await;

    // The generated serving certificate and its key, as the Go kubelet keeps them.
    let serving_cert = node.root_dir().join("pki/kubelet.crt");
    let serving_key = node.root_dir().join("pki/kubelet.key");
    let mode = std::fs::metadata(&serving_key)
        .unwrap_or_else(|e| panic!("{}: {e}", serving_key.display()))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{}", serving_key.display());

    // The handshake verifies against kubelet.crt; without a certificate: 401.
    let anonymous = client(&serving_cert, None);
    assert_eq!(
        get(&node, &anonymous, "/pods").await,
        (401, "Unauthorized".to_string())
    );
    assert_eq!(get(&node, &anonymous, "/healthz").await.0, 401);

    // A certificate from another CA: the handshake completes, the request is 401.
    let mallory = client(
        &serving_cert,
        Some(client_identity(&stranger, "mallory", "system:masters")),
    );
    assert_eq!(
        get(&node, &mallory, "/pods").await,
        (401, "Unauthorized".to_string())
    );

    // A certificate from the configured CA.
    let admin = client(
        &serving_cert,
        Some(client_identity(&issuer, "ops-admin", "system:masters")),
    );
    assert_eq!(
        get(&node, &admin, "/healthz").await,
        (200, "ok".to_string())
    );
    let (status, body) = get(&node, &admin, "/configz").await;
    assert_eq!(status, 200, "{body}");
    let configz: Value = serde_json::from_str(&body).unwrap();
    let kc = &configz["kubeletconfig"];
    assert_eq!(kc["port"], node.secure_addr().port(), "{body}");
    assert_eq!(
        kc["authentication"]["x509"]["clientCAFile"],
        ca_file.display().to_string()
    );
    assert_eq!(kc["authentication"]["anonymous"]["enabled"], false);
    assert_eq!(kc["authorization"]["mode"], "AlwaysAllow");
    assert_eq!(kc["tlsCertFile"], serving_cert.display().to_string());

    // The same kubelet as the read-only API: a static pod shows in /pods, its log in
    // /containerLogs.
    node.write_manifest(
        "hello.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: hello
            spec:
              terminationGracePeriodSeconds: 1
              containers:
              - name: app
                image: {busybox}
                command: {script}
            "#,
            busybox = image("busybox"),
            script = sh(&format!("echo hello over TLS; {IDLE}")),
        ),
    );
    node.wait_running("hello").await;
    node.wait_log_line("hello", "app", "hello over TLS").await;
    let (status, body) = get(&node, &admin, "/pods").await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    let pod = find_pod(&list, &node.pod_name("hello")).expect("hello in /pods");
    assert_eq!(pod_phase(pod), "Running");
    let logs = format!("/containerLogs/default/{}/app", node.pod_name("hello"));
    let (status, body) = get(&node, &admin, &logs).await;
    assert_eq!((status, body.as_str()), (200, "hello over TLS\n"));
    assert_eq!(get(&node, &mallory, &logs).await.0, 401);

    // The streaming endpoints sit behind the same guard (kubelet_streaming.rs runs them all).
    let run = format!("/run/default/{}/app?cmd=echo%20ran", node.pod_name("hello"));
    assert_eq!(
        call(&node, &mallory, reqwest::Method::POST, &run).await.0,
        401
    );
    assert_eq!(
        call(&node, &admin, reqwest::Method::POST, &run).await,
        (200, "ran\n".to_string())
    );

    // A restarted ferrolet serves with the certificate it made before.
    let before = std::fs::read(&serving_cert).unwrap();
    node.restart_kubelet().await;
    assert_eq!(std::fs::read(&serving_cert).unwrap(), before);
    let admin = client(
        &serving_cert,
        Some(client_identity(&issuer, "ops-admin", "system:masters")),
    );
    assert_eq!(
        get(&node, &admin, "/healthz").await,
        (200, "ok".to_string())
    );

    node.teardown().await;
}

/// A port ferrolet is configured to serve and cannot bind stops it at start-up, naming the
/// address, as the Go kubelet's servers do: the healthz port, the read-only port and the
/// secure port in turn, each taken by a listener of the test (a second kubelet, say). Nothing
/// of the runtime is needed: the ports are bound before the runtime is dialled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_port_stops_the_kubelet_naming_the_address() {
    use ferrolet_integration::scratch::Scratch;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let scratch = Scratch::new("kubelet-taken-port");
    let cases = [
        (
            format!("healthzPort: {port}\nreadOnlyPort: 0\nenableServer: false\n"),
            format!("listening for the healthz server on 127.0.0.1:{port}"),
        ),
        (
            format!("healthzPort: 0\nreadOnlyPort: {port}\nenableServer: false\n"),
            format!("listening for the read-only API on 127.0.0.1:{port}"),
        ),
        (
            format!("healthzPort: 0\nreadOnlyPort: 0\nenableServer: true\nport: {port}\n"),
            format!("listening for the kubelet API on 127.0.0.1:{port}"),
        ),
    ];
    for (i, (ports, want)) in cases.iter().enumerate() {
        let config = scratch.path().join(format!("config-{i}.yaml"));
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 address: 127.0.0.1\nhealthzBindAddress: 127.0.0.1\n{ports}"
            ),
        )
        .unwrap();
        let (status, text) = ferrolet_integration::kubelet::run_ferrolet_to_exit(
            &config,
            &scratch.path().join("root"),
            "unix:///nonexistent/ferrolet-taken-port.sock",
            &scratch.path().join(format!("ferrolet-{i}.log")),
        )
        .await;
        assert!(!status.success(), "ferrolet started:\n{text}");
        assert!(text.contains(want), "no {want:?} in:\n{text}");
        assert!(text.contains("Address already in use"), "{text}");
        println!(
            "exit {:?}: {}",
            status.code(),
            text.lines().find(|l| l.contains(want)).unwrap_or_default()
        );
    }
    drop(taken);
}
