//! Image pull credentials (issue #6): `ferrolet` looks up the node's Docker config files as the
//! Go kubelet does (`<root-dir>/config.json` first) and hands the matching credentials to CRI
//! `PullImage`. A static pod whose image lives on the environment's basic-auth registry
//! (`127.0.0.1:5001`) fails to pull without credentials, then with wrong ones, and runs once
//! `config.json` holds the right ones, with no restart of ferrolet (the file is re-read when
//! it changes) and through the image-pull back-off. Driven through the real `ferrolet-cri`,
//! containerd and registry; ends with the node's teardown and leak checks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, container_status, is_running, pod_phase, sh, waiting_reason,
};
use ferrolet_integration::pods::LONG;
use ferrolet_integration::registry::{AUTH_REGISTRY, auth_credentials};
use ferrolet_integration::testimages::TAG;
use serde_json::Value;

/// A one-container pod running busybox from the auth registry.
fn private_pod(name: &str) -> String {
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: {name}
        spec:
          terminationGracePeriodSeconds: 5
          containers:
          - name: main
            image: {AUTH_REGISTRY}/ferrolet/busybox:{TAG}
            command: {command}
        "#,
        command = sh(IDLE),
    )
}

/// `config.json` with `user:password` for the auth registry, in the `auth` field as
/// `docker login` writes it.
fn config_json(user: &str, password: &str) -> String {
    let auth = base64(format!("{user}:{password}").as_bytes());
    format!(r#"{{"auths": {{"http://{AUTH_REGISTRY}": {{"auth": "{auth}"}}}}}}"#)
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The waiting reason and message of container `main`, when it waits on its image.
fn pull_failure(pod: &Value) -> Option<(String, String)> {
    let status = container_status(pod, "main")?;
    let reason = waiting_reason(status)?;
    if reason != "ErrImagePull" && reason != "ImagePullBackOff" {
        return None;
    }
    let message = status["state"]["waiting"]["message"].as_str()?;
    Some((reason.to_string(), message.to_string()))
}

/// Waits until pod `name` waits on a failed pull whose message says `why`; returns it.
async fn wait_pull_failure(node: &KubeletNode, name: &str, why: &str) -> (String, String) {
    let pod = node
        .wait_pod(
            name,
            |p| pull_failure(p).is_some_and(|(_, m)| m.contains(why)),
            LONG,
        )
        .await;
    assert_eq!(pod_phase(&pod), "Pending", "{pod:#}");
    pull_failure(&pod).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_image_pulls_with_the_root_dir_config_json() {
    let node = KubeletNode::start("pull-auth").await;
    let (user, password) = auth_credentials();
    let config = node.root_dir().join("config.json");

    // No credentials anywhere: the registry's refusal reaches the container's waiting state.
    node.write_manifest("private.yaml", &private_pod("private"));
    let (_, message) = wait_pull_failure(&node, "private", "requires authentication").await;
    assert!(message.contains(AUTH_REGISTRY), "{message}");
    // ferrolet-cri's words for a pull that sent no credentials.
    assert!(message.contains("no user name or password"), "{message}");

    // Wrong credentials: the file is read when it appears (ferrolet keeps running), the next
    // attempt after the 10 s back-off sends them, and the registry rejects them.
    std::fs::write(&config, config_json(&user, "not-the-password")).unwrap();
    let (_, message) = wait_pull_failure(&node, "private", "credentials rejected").await;
    assert!(message.contains(AUTH_REGISTRY), "{message}");

    // The right ones: the changed file is re-read, and after the 20 s back-off the pull
    // succeeds and the pod runs.
    std::fs::write(&config, config_json(&user, &password)).unwrap();
    let pod = node.wait_running("private").await;
    let main = container_status(&pod, "main").unwrap_or_else(|| panic!("{pod:#}"));
    assert!(is_running(main), "{main}");
    assert!(
        main["image"]
            .as_str()
            .is_some_and(|i| i.contains(AUTH_REGISTRY)),
        "{main}"
    );

    // The log names the file and registry, never the secret.
    let log = node.kubelet_log();
    assert!(
        log.contains(&config.display().to_string()),
        "no mention of {}",
        config.display()
    );
    assert!(
        !log.contains(&password),
        "the password is in ferrolet's log"
    );
    assert!(
        !log.contains(&base64(format!("{user}:{password}").as_bytes())),
        "the auth field is in ferrolet's log"
    );

    node.teardown().await;
}

#[test]
fn the_tests_base64_is_standard() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"u:pq"), "dTpwcQ==");
}
