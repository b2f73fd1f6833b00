//! The static pods of a kubeadm control plane, in their shape (issue #36): manifests as
//! `kubeadm init` writes them to `/etc/kubernetes/manifests` — host network,
//! `priorityClassName: system-node-critical`, `hostPath` volumes for the PKI directory and the
//! host's libraries, startup, liveness and readiness probes on the component's HTTPS health
//! endpoints at `127.0.0.1` — with our own HTTPS server (`ferrolet-test-https`) standing in for
//! the component. The pod runs and becomes Ready through its HTTPS probes, reports the node's
//! address as its IP, and a component whose liveness endpoint fails is restarted with Go's
//! probe message; removing the manifests (what `kubeadm reset` does) stops both pods.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::time::Duration;

use ferrolet_integration::kubelet::{
    KubeletNode, container_status, host_ip, image, pod_ip, restart_count,
};
use ferrolet_integration::workspace_binary;
use rcgen::{CertificateParams, KeyPair};

/// A component's static pod, as kubeadm writes one (fields and their order from kubeadm's
/// kube-apiserver manifest), probing `path` on its HTTPS port.
fn component(name: &str, port: u16, pki: &str, liveness_path: &str) -> String {
    let server = workspace_binary("ferrolet-test-https");
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  labels:
    component: {name}
    tier: control-plane
  name: {name}
  namespace: kube-system
spec:
  containers:
  - command:
    - /usr/local/bin/{name}
    - --listen=127.0.0.1:{port}
    - --cert=/etc/kubernetes/pki/{name}.crt
    - --key=/etc/kubernetes/pki/{name}.key
    image: {image}
    imagePullPolicy: IfNotPresent
    livenessProbe:
      failureThreshold: 3
      httpGet:
        host: 127.0.0.1
        path: {liveness_path}
        port: {port}
        scheme: HTTPS
      periodSeconds: 1
      timeoutSeconds: 5
    name: {name}
    readinessProbe:
      failureThreshold: 3
      httpGet:
        host: 127.0.0.1
        path: /readyz
        port: {port}
        scheme: HTTPS
      periodSeconds: 1
      timeoutSeconds: 5
    resources:
      requests:
        cpu: 50m
    startupProbe:
      failureThreshold: 24
      httpGet:
        host: 127.0.0.1
        path: /livez
        port: {port}
        scheme: HTTPS
      periodSeconds: 1
      timeoutSeconds: 5
    volumeMounts:
    - mountPath: /etc/kubernetes/pki
      name: k8s-certs
      readOnly: true
    - mountPath: /usr/local/bin/{name}
      name: binary
      readOnly: true
    - mountPath: /lib/x86_64-linux-gnu
      name: lib
      readOnly: true
    - mountPath: /lib64
      name: lib64
      readOnly: true
  hostNetwork: true
  priority: 2000001000
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  volumes:
  - hostPath:
      path: {pki}
      type: DirectoryOrCreate
    name: k8s-certs
  - hostPath:
      path: {server}
      type: File
    name: binary
  - hostPath:
      path: /lib/x86_64-linux-gnu
      type: Directory
    name: lib
  - hostPath:
      path: /lib64
      type: Directory
    name: lib64
status: {{}}
"#,
        image = image("busybox"),
        server = server.display(),
    )
}

/// A serving certificate for `127.0.0.1`, written as `<dir>/<name>.crt` and `.key`.
fn write_pair(dir: &std::path::Path, name: &str) {
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadm_shaped_static_pods_run_on_the_host_network_with_https_probes() {
    let node = KubeletNode::start("kubeadm-pods").await;
    let pki = node.host_dir().join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    write_pair(&pki, "kube-apiserver");
    write_pair(&pki, "kube-flaky");
    let pki = pki.display().to_string();
    let (good, bad) = (free_port(), free_port());
    node.write_manifest(
        "kube-apiserver.yaml",
        &component("kube-apiserver", good, &pki, "/livez"),
    );
    node.write_manifest(
        "kube-flaky.yaml",
        &component("kube-flaky", bad, &pki, "/fail"),
    );

    // Ready through the HTTPS startup and readiness probes, on the node's address.
    let pod = node.wait_running("kube-apiserver").await;
    assert_eq!(
        pod_ip(&pod),
        host_ip(&pod),
        "a host-network pod has the node's IP"
    );
    let status = container_status(&pod, "kube-apiserver").unwrap();
    assert_eq!(status["started"], true, "{status}");
    assert_eq!(restart_count(status), 0, "{status}");
    println!(
        "kube-apiserver stand-in Ready on {} (pod IP {})",
        good,
        pod_ip(&pod)
    );

    // The failing liveness endpoint gets the container restarted, with Go's probe message.
    let pod = node
        .wait_pod(
            "kube-flaky",
            |p| container_status(p, "kube-flaky").is_some_and(|s| restart_count(s) >= 1),
            Duration::from_secs(90),
        )
        .await;
    let log = node.kubelet_log();
    assert!(
        log.contains("HTTP probe failed with statuscode: 500"),
        "no liveness failure in the kubelet's log"
    );
    println!(
        "kube-flaky restarted {} time(s) by its HTTPS liveness probe",
        restart_count(container_status(&pod, "kube-flaky").unwrap())
    );

    // kubeadm reset removes the manifests: the kubelet stops the pods.
    node.remove_manifest("kube-apiserver.yaml");
    node.remove_manifest("kube-flaky.yaml");
    node.wait_pod_gone("kube-apiserver", Duration::from_secs(60))
        .await;
    node.wait_pod_gone("kube-flaky", Duration::from_secs(60))
        .await;
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", good)).is_ok(),
        "the stopped component's port is free again"
    );
    node.teardown().await;
}
