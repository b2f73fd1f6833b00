//! `ferrolet` image volumes end to end (issue #38): static pods with `volumes[].image` on
//! ferrolet-cri. The image's files at the mount path, read-only; the volume's `pullPolicy`
//! honoured (`Always` contacts the registry even when the image is there, `IfNotPresent`
//! does not, `Never` waits with `ErrImageNeverPull`) and a failed pull reported on the
//! containers that mount it as Go reports it; the node's pull credentials used; image GC
//! keeping the image while a pod mounts it and removing it after the pod goes; nothing left
//! of the volume after the pod (the harness's leak checks at teardown).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use ferrolet_integration::cluster::{ClusterNode, NAMESPACE};
use ferrolet_integration::containerd::containerd_version;
use ferrolet_integration::containerd::list_snapshots;
use ferrolet_integration::cri::poll;
use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, KubeletOptions, container_status, image, pod_phase, sh, waiting_reason,
};
use ferrolet_integration::pods::LONG;
use ferrolet_integration::registry::{AUTH_REGISTRY, TestRegistry, auth_credentials};
use ferrolet_integration::testimages;
use ferrolet_proto::cri::ListImagesRequest;
use serde_json::{Value, json};

const HTTPD_BODY: &str = "ferrolet httpd ok";

/// A busybox pod `name` mounting image `reference` (with `policy`, if any) at `/tools`; its
/// container prints the httpd image's page, tries to write, and idles.
fn tools_pod(name: &str, reference: &str, policy: Option<&str>) -> String {
    let policy = policy
        .map(|p| format!("\n                pullPolicy: {p}"))
        .unwrap_or_default();
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: {name}
        spec:
          terminationGracePeriodSeconds: 1
          containers:
          - name: main
            image: {busybox}
            command: {command}
            volumeMounts:
            - {{name: tools, mountPath: /tools}}
          volumes:
          - name: tools
            image:
                reference: {reference}{policy}
        "#,
        busybox = image("busybox"),
        command = sh(&format!(
            "cat /tools/www/index.html; \
             if touch /tools/new 2>/tmp/err; then echo write-allowed; \
             else cat /tmp/err; echo write-refused; fi; {IDLE}"
        )),
    )
}

/// The views of image volumes in the node's containerd namespace.
async fn image_volume_views(node: &KubeletNode) -> Vec<String> {
    let snapshots = list_snapshots(&node.node.ns.client).await.unwrap();
    snapshots
        .into_iter()
        .map(|i| i.name)
        .filter(|n| n.contains("-image-volume-"))
        .collect()
}

/// The tags of the images CRI lists.
async fn image_tags(node: &KubeletNode) -> Vec<String> {
    node.node
        .images()
        .await
        .list_images(ListImagesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .images
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .collect()
}

/// Container `main`'s waiting reason and message.
fn main_waiting(pod: &Value) -> Option<(String, String)> {
    let status = container_status(pod, "main")?;
    let reason = waiting_reason(status)?.to_string();
    let message = status["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Some((reason, message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_volume_is_read_only_kept_by_image_gc_and_goes_with_its_pod() {
    let node = KubeletNode::start_with("imgvol", KubeletOptions::image_gc_every_pass()).await;
    // httpd:1 is nobody's container image here: only the volume uses it.
    let httpd = image("httpd");
    node.write_manifest("reader.yaml", &tools_pod("reader", &httpd, None));
    node.wait_running("reader").await;
    let log = node.wait_log_line("reader", "main", "write-refused").await;
    assert!(log.starts_with(HTTPD_BODY), "{log}");
    assert!(log.contains("Read-only file system"), "{log}");
    assert_eq!(image_volume_views(&node).await.len(), 1);

    // Two GC passes while the pod runs leave the volume's image.
    let passes = |log: &str| {
        log.matches("Disk usage on image filesystem is over the high threshold")
            .count()
    };
    let seen = passes(&node.kubelet_log());
    poll("two image GC passes", LONG, || async {
        let n = passes(&node.kubelet_log());
        if n >= seen + 2 {
            Ok(())
        } else {
            Err(format!("{} passes since", n - seen))
        }
    })
    .await;
    let tags = image_tags(&node).await;
    assert!(
        tags.contains(&httpd),
        "the mounted image was collected: {tags:?}"
    );

    // The pod goes: its volume's view with it, then the image with the next GC pass.
    node.remove_manifest("reader.yaml");
    node.wait_pod_gone("reader", LONG).await;
    assert!(image_volume_views(&node).await.is_empty());
    poll("image GC to remove the volume's image", LONG, || async {
        let tags = image_tags(&node).await;
        if tags.contains(&httpd) {
            Err(format!("still listed: {tags:?}"))
        } else {
            Ok(())
        }
    })
    .await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_policies_credentials_and_failures_are_go_s() {
    let node = KubeletNode::start("imgvol-pull").await;
    // A registry of the test's own, to take away.
    let mut registry = TestRegistry::start(node.scratch.path());
    let built = testimages::build(
        "httpd",
        node.scratch.path(),
        std::path::Path::new("/bin/busybox"),
    )
    .unwrap();
    registry.push(&built.dir, "ferrolet/tools");
    let tools = format!("{}/ferrolet/tools:1", registry.addr);

    node.write_manifest("always.yaml", &tools_pod("always", &tools, Some("Always")));
    node.wait_running("always").await;
    let log = node.wait_log_line("always", "main", "write-refused").await;
    assert!(log.starts_with(HTTPD_BODY), "{log}");

    // With the registry gone, `Always` fails (the image is there, but must be pulled), and
    // the container that mounts it waits as on a failed pull of its own image.
    registry.kill();
    node.write_manifest("again.yaml", &tools_pod("again", &tools, Some("Always")));
    let pod = node
        .wait_pod(
            "again",
            |p| {
                main_waiting(p).is_some_and(|(r, _)| r == "ErrImagePull" || r == "ImagePullBackOff")
            },
            LONG,
        )
        .await;
    assert_eq!(pod_phase(&pod), "Pending", "{pod:#}");
    let (_, message) = main_waiting(&pod).unwrap();
    assert!(message.contains(&tools), "{message}");
    // `IfNotPresent` uses the image that is there.
    node.write_manifest(
        "present.yaml",
        &tools_pod("present", &tools, Some("IfNotPresent")),
    );
    node.wait_running("present").await;
    node.wait_log_line("present", "main", "write-refused").await;

    // `Never` with an image that is not there: Go's reason and message.
    let absent = image("user");
    node.write_manifest("never.yaml", &tools_pod("never", &absent, Some("Never")));
    let pod = node
        .wait_pod(
            "never",
            |p| main_waiting(p).is_some_and(|(r, _)| r == "ErrImageNeverPull"),
            LONG,
        )
        .await;
    let (_, message) = main_waiting(&pod).unwrap();
    assert_eq!(
        message,
        format!("Container image \"{absent}\" is not present with pull policy of Never")
    );

    // The node's credentials (`<root-dir>/config.json`) pull an image volume from the
    // registry that wants them.
    let (user, password) = auth_credentials();
    let auth = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("{user}:{password}"),
    );
    std::fs::write(
        node.root_dir().join("config.json"),
        format!(r#"{{"auths":{{"{AUTH_REGISTRY}":{{"auth":"{auth}"}}}}}}"#),
    )
    .unwrap();
    let private = format!("{AUTH_REGISTRY}/ferrolet/httpd:1");
    node.write_manifest(
        "private.yaml",
        &tools_pod("private", &private, Some("Always")),
    );
    node.wait_running("private").await;
    let log = node.wait_log_line("private", "main", "write-refused").await;
    assert!(log.starts_with(HTTPD_BODY), "{log}");

    node.teardown().await;
}

/// ferrolet on containerd's own CRI: containerd 2.1+ mounts the volume as ferrolet-cri does;
/// containerd 1.6 knows no `Mount.image` and fails CreateContainer (an empty host path).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_on_containerd_cri() {
    let version = containerd_version();
    let node = KubeletNode::start_on_containerd("cd-imgvol").await;
    node.write_manifest("reader.yaml", &tools_pod("reader", &image("httpd"), None));
    if version >= (2, 1) {
        node.wait_running("reader").await;
        let log = node.wait_log_line("reader", "main", "write-refused").await;
        assert!(log.starts_with(HTTPD_BODY), "{log}");
        assert!(log.contains("Read-only file system"), "{log}");
    } else {
        let pod = node
            .wait_pod(
                "reader",
                |p| main_waiting(p).is_some_and(|(r, _)| r == "CreateContainerError"),
                LONG,
            )
            .await;
        let (_, message) = main_waiting(&pod).unwrap();
        eprintln!(
            "[imgvol] containerd {}.{}: no image volumes: {message}",
            version.0, version.1
        );
    }
    node.remove_manifest("reader.yaml");
    node.wait_pod_gone("reader", LONG).await;
    node.teardown().await;
}

/// A pod from the API: its `imagePullSecrets` pull the volume's image (Go's events on the
/// pod: `Pulling`, `Pulled`); without them the pull fails and the container that mounts it
/// waits with `ErrImagePull`/`ImagePullBackOff`, its event `Error: ErrImagePull`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_pod_pulls_its_image_volume_with_its_pull_secrets() {
    let node = ClusterNode::start("imgvol-api").await;
    let (user, password) = auth_credentials();
    let b64 = |text: &str| {
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, text.as_bytes())
    };
    let config = format!(
        r#"{{"auths": {{"{AUTH_REGISTRY}": {{"auth": "{}"}}}}}}"#,
        b64(&format!("{user}:{password}"))
    );
    node.api
        .create(
            "secrets",
            NAMESPACE,
            json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "regcred", "namespace": NAMESPACE},
                "type": "kubernetes.io/dockerconfigjson",
                "data": {".dockerconfigjson": b64(&config)},
            }),
        )
        .await
        .unwrap();
    let private = format!("{AUTH_REGISTRY}/ferrolet/httpd:1");
    let pod = |name: &str, secrets: bool| {
        let mut pod = json!({
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "main",
                    "image": image("busybox"),
                    "command": ["sh", "-c", IDLE],
                    "volumeMounts": [{"name": "tools", "mountPath": "/tools"}],
                }],
                "volumes": [{
                    "name": "tools",
                    "image": {"reference": private, "pullPolicy": "Always"},
                }],
            },
        });
        if secrets {
            pod["spec"]["imagePullSecrets"] = json!([{"name": "regcred"}]);
        }
        pod
    };

    node.create_pod(pod("with-secret", true)).await;
    let running = node.wait_api_running("with-secret").await;
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();
    let (_, containers) = node.node.runtime_objects(&uid).await;
    let api = node.node.node.api().await;
    let body = api
        .exec_ok(&containers[0].id, &["cat", "/tools/www/index.html"])
        .await;
    assert!(body.starts_with(HTTPD_BODY), "{body}");
    let events = node.pod_events("with-secret").await;
    let pulled = format!("Successfully pulled image \"{private}\"");
    assert!(
        events.iter().any(|e| e["reason"] == "Pulled"
            && e["involvedObject"]["fieldPath"].is_null()
            && e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(&pulled))),
        "no Pulled event on the pod: {events:#?}"
    );

    node.create_pod(pod("no-secret", false)).await;
    let waiting = node
        .wait_api_pod(
            "no-secret",
            "its container waiting on the volume's pull",
            |p| {
                let reason = &p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
                *reason == "ErrImagePull" || *reason == "ImagePullBackOff"
            },
            LONG,
        )
        .await;
    let message = waiting["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains(&private), "{message}");
    let events = poll("the container's Error event", LONG, || async {
        let events = node.pod_events("no-secret").await;
        let found = events.iter().any(|e| {
            e["reason"] == "Failed"
                && e["involvedObject"]["fieldPath"] == "spec.containers{main}"
                && e["message"] == "Error: ErrImagePull"
        });
        if found {
            Ok(events)
        } else {
            Err(format!("{events:#?}"))
        }
    })
    .await;
    assert!(
        events.iter().any(|e| e["reason"] == "Failed"
            && e["involvedObject"]["fieldPath"].is_null()
            && e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(&format!("Failed to pull image \"{private}\"")))),
        "no Failed pull event on the pod: {events:#?}"
    );
    node.delete_pod("with-secret").await;
    node.delete_pod("no-secret").await;
    node.wait_api_pod_gone("with-secret", LONG).await;
    node.wait_api_pod_gone("no-secret", LONG).await;
    node.teardown().await;
}
