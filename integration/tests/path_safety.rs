//! Paths a pod, an image or a client controls never reach outside where they belong (issue
//! #33): subPath and subPathExpr through symlinks (absolute and relative; the swap after the
//! check is covered deterministically by ferrolet's `volume::mounts` unit test), hostPath
//! `type` checks, log paths with `..` on the kubelet API and in CRI, image layers with
//! absolute and `..` paths and device nodes (through containerd's applier, imported with
//! `ferrolet-cri image import`), and static pod names with path separators.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::Path;
use std::time::Duration;

use ferrolet_integration::kubelet::{IDLE, KubeletNode, image, sh};
use ferrolet_integration::pods::{ContainerBuilder, CriNode, LONG};
use ferrolet_integration::registry::IMAGES_DIR;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The waiting reason and message of `container` in a pod's status.
fn waiting(pod: &Value, container: &str) -> Option<(String, String)> {
    let c = pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == container)?;
    let w = &c["state"]["waiting"];
    Some((
        w["reason"].as_str()?.to_string(),
        w["message"].as_str().unwrap_or("").to_string(),
    ))
}

fn running(pod: &Value, container: &str) -> bool {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["name"] == container && c["state"]["running"].is_object())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_paths_through_symlinks_out_of_the_volume_are_refused() {
    let node = KubeletNode::start("subpath-escape").await;
    let pod_name = node.pod_name("subpaths");
    let mount = |name: &str, sub: &str| {
        format!(
            "  - name: {name}\n    image: {img}\n    command: {idle}\n    volumeMounts: [{{name: v, mountPath: /x, {sub}}}]\n",
            img = image("busybox"),
            idle = sh(IDLE),
        )
    };
    let links = format!(
        "mkdir -p /v/ok && echo fine > /v/ok/f && ln -s / /v/abs && ln -s ../../../../../../../../../.. /v/rel && ln -s / /v/{pod_name}"
    );
    node.write_manifest(
        "subpaths.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: subpaths}}\nspec:\n  terminationGracePeriodSeconds: 1\n  initContainers:\n  - name: links\n    image: {img}\n    command: {cmd}\n    volumeMounts: [{{name: v, mountPath: /v}}]\n  containers:\n{ok}{abs}{rel}{expr}    env: [{{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}]\n  volumes: [{{name: v, emptyDir: {{}}}}]\n",
            img = image("busybox"),
            cmd = sh(&links),
            ok = mount("ok", "subPath: ok"),
            abs = mount("abs", "subPath: abs"),
            rel = mount("rel", "subPath: rel"),
            expr = mount("expr", "subPathExpr: $(POD_NAME)"),
        ),
    );
    let pod = node
        .wait_pod(
            "subpaths",
            |p| {
                running(p, "ok")
                    && ["abs", "rel", "expr"].iter().all(|c| {
                        waiting(p, c).is_some_and(|(r, _)| r == "CreateContainerConfigError")
                    })
            },
            LONG,
        )
        .await;
    for c in ["abs", "rel", "expr"] {
        let (_, message) = waiting(&pod, c).unwrap();
        assert!(
            message.contains("resolves outside the volume"),
            "{c}: {message}"
        );
    }
    // The container whose subPath stays inside sees the volume's file, through the bind
    // ferrolet made of what it checked.
    let api = node.node.api().await;
    let (_, containers) = node
        .runtime_objects(pod["metadata"]["uid"].as_str().unwrap())
        .await;
    let ok = containers
        .iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == "ok"))
        .unwrap();
    assert_eq!(api.exec_ok(&ok.id, &["cat", "/x/f"]).await, "fine\n");
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_path_types_are_checked_before_anything_runs() {
    let node = KubeletNode::start("hostpath-types").await;
    let host = node.host_dir();
    std::fs::write(host.join("afile"), "x").unwrap();
    std::fs::create_dir(host.join("adir")).unwrap();
    let pod = |name: &str, volumes: &[(&str, &str)]| {
        let mounts: String = volumes
            .iter()
            .enumerate()
            .map(|(i, _)| format!("{{name: v{i}, mountPath: /m{i}}},"))
            .collect();
        let vols: String = volumes
            .iter()
            .enumerate()
            .map(|(i, (path, kind))| {
                format!("  - {{name: v{i}, hostPath: {{path: {path}, type: {kind}}}}}\n")
            })
            .collect();
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {img}\n    command: {idle}\n    volumeMounts: [{mounts}]\n  volumes:\n{vols}",
            img = image("busybox"),
            idle = sh(IDLE),
        )
    };
    let h = |p: &str| host.join(p).display().to_string();
    // What each type asks for, present or made.
    node.write_manifest(
        "good.yaml",
        &pod(
            "good",
            &[
                (&h("adir"), "Directory"),
                (&h("afile"), "File"),
                (&h("made-dir"), "DirectoryOrCreate"),
                (&h("made-file"), "FileOrCreate"),
                ("/dev/null", "CharDevice"),
            ],
        ),
    );
    node.wait_running("good").await;
    assert!(host.join("made-dir").is_dir());
    assert!(host.join("made-file").is_file());
    // Each mismatch keeps its pod from starting, with Go's message in the log.
    for (name, path, kind, said) in [
        ("dir-on-file", h("afile"), "Directory", "is not a directory"),
        ("file-on-dir", h("adir"), "File", "is not a file"),
        (
            "missing-dir",
            h("nowhere"),
            "Directory",
            "is not a directory",
        ),
        (
            "socket-on-file",
            h("afile"),
            "Socket",
            "is not a socket file",
        ),
        (
            "block-on-char",
            "/dev/null".into(),
            "BlockDevice",
            "is not a block device",
        ),
    ] {
        node.write_manifest(&format!("{name}.yaml"), &pod(name, &[(&path, kind)]));
        let log_has = || node.kubelet_log().contains(said) && node.kubelet_log().contains(&path);
        let deadline = std::time::Instant::now() + LONG;
        while !log_has() {
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: no {said:?} about {path}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let status = node.pod(name).await.unwrap_or(Value::Null);
        assert!(!running(&status, "main"), "{name} runs: {status}");
        node.remove_manifest(&format!("{name}.yaml"));
        node.wait_pod_gone(name, LONG).await;
    }
    assert!(
        !host.join("nowhere").exists(),
        "a plain Directory type made nothing"
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_paths_never_leave_the_pod_log_dirs() {
    let node = KubeletNode::start("log-paths").await;
    node.write_manifest(
        "talker.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: talker}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {}\n    command: {}\n",
            image("busybox"),
            sh(&format!("echo talking; {IDLE}"))
        ),
    );
    node.wait_running("talker").await;
    let talker = node.pod_name("talker");
    for path in [
        "/containerLogs/default/../../../etc/passwd".to_string(),
        "/containerLogs/default/%2e%2e/%2e%2e/etc/passwd".to_string(),
        format!("/containerLogs/default/{talker}/..%2F..%2F..%2Fetc%2Fpasswd"),
        format!("/containerLogs/default/{talker}/../../../../etc/passwd"),
        "/containerLogs/..%2F..%2F..%2F/etc/passwd".to_string(),
        "/logs/../../../etc/passwd".to_string(),
    ] {
        let r = node.get(&path).await.unwrap();
        assert!(
            !r.body.contains("root:x:0:0"),
            "{path} served the host's passwd: {} {}",
            r.status,
            r.body
        );
        assert!(
            matches!(r.status, 400 | 404),
            "{path}: {} {}",
            r.status,
            r.body
        );
    }
    // CRI: the log path is relative to the pod's log directory and never climbs out of it.
    let api = node.node.api().await;
    let pods = api.list_pods(None).await.unwrap();
    let sandbox = &pods[0];
    let config = node.node.pod("talker-cri").build();
    for bad in [
        "../../../../tmp/escape.log",
        "/tmp/escape.log",
        "a/../../escape.log",
    ] {
        let c = ContainerBuilder::new("bad", &image("busybox"))
            .log_path(bad)
            .build();
        let err = api
            .create_container(&sandbox.id, &config, &c)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bad}: {err}");
        assert!(err.message().contains("log_path"), "{bad}: {err}");
    }
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pod_names_with_path_separators_are_refused_and_others_run() {
    let node = KubeletNode::start("manifest-names").await;
    let outside = node.scratch.path().join("outside");
    for (file, name) in [
        ("climb.yaml", format!("../../../..{}", outside.display())),
        ("slash.yaml", "a/b".to_string()),
        ("dots.yaml", "..".to_string()),
    ] {
        node.write_manifest(
            file,
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: \"{name}\"}}\nspec:\n  containers:\n  - name: main\n    image: {}\n    command: {}\n",
                image("busybox"),
                sh(IDLE)
            ),
        );
    }
    node.write_manifest(
        "fine.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: fine}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {}\n    command: {}\n",
            image("busybox"),
            sh(IDLE)
        ),
    );
    node.wait_running("fine").await;
    let log = node.kubelet_log();
    for file in ["climb.yaml", "slash.yaml", "dots.yaml"] {
        assert!(
            log.lines()
                .any(|l| l.contains(file) && l.contains("metadata.name")),
            "{file} was not reported:\n{}",
            ferrolet_integration::pods::log_tail(&log, 30)
        );
    }
    let pods = node.pods().await;
    assert_eq!(pods["items"].as_array().unwrap().len(), 1, "{pods}");
    assert!(!outside.exists(), "something was made outside");
    for dir in [node.root_dir().join("pods"), node.pod_logs_dir()] {
        let names: Vec<String> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            names
                .iter()
                .all(|n| !n.contains("..") && !n.contains("a_b")),
            "{}: {names:?}",
            dir.display()
        );
    }
    node.teardown().await;
}

/// A tar entry with a raw name (the tar crate's builder refuses `..` and absolute names).
fn raw_entry(out: &mut Vec<u8>, name: &str, kind: tar::EntryType, data: &[u8], dev: (u32, u32)) {
    let mut h = tar::Header::new_ustar();
    {
        let raw = h.as_old_mut();
        raw.name[..name.len()].copy_from_slice(name.as_bytes());
    }
    h.set_entry_type(kind);
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_device_major(dev.0).unwrap();
    h.set_device_minor(dev.1).unwrap();
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// The busybox test image with one more layer holding `layer`, as an OCI layout in `dir`.
fn busybox_plus(layer: &[u8], dir: &Path) {
    let base = Path::new(IMAGES_DIR).join("busybox");
    let blob = |d: &str| base.join("blobs/sha256").join(&d[7..]);
    let index: Value =
        serde_json::from_slice(&std::fs::read(base.join("index.json")).unwrap()).unwrap();
    let mdigest = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(blob(&mdigest)).unwrap()).unwrap();
    let cdigest = manifest["config"]["digest"].as_str().unwrap().to_string();
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(blob(&cdigest)).unwrap()).unwrap();
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    for entry in std::fs::read_dir(base.join("blobs/sha256"))
        .unwrap()
        .flatten()
    {
        std::fs::copy(entry.path(), blobs.join(entry.file_name())).unwrap();
    }
    let put = |bytes: &[u8]| {
        let d = sha256(bytes);
        std::fs::write(blobs.join(&d[7..]), bytes).unwrap();
        (d, bytes.len())
    };
    let (ldigest, lsize) = put(layer);
    config["rootfs"]["diff_ids"]
        .as_array_mut()
        .unwrap()
        .push(json!(ldigest));
    let config = serde_json::to_vec(&config).unwrap();
    let (cd, cs) = put(&config);
    manifest["config"]["digest"] = json!(cd);
    manifest["config"]["size"] = json!(cs);
    manifest["layers"].as_array_mut().unwrap().push(json!({
        "mediaType": "application/vnd.oci.image.layer.v1.tar",
        "digest": ldigest,
        "size": lsize,
    }));
    let manifest = serde_json::to_vec(&manifest).unwrap();
    let (md, ms) = put(&manifest);
    let index = json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": md, "size": ms,
        "annotations": {"org.opencontainers.image.ref.name": "1"},
    }]});
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_layers_cannot_write_outside_the_rootfs_or_open_host_devices() {
    let node = CriNode::start("evil-layers").await;
    let marker = format!("ferrolet-evil-{}", std::process::id());
    let host_abs = Path::new("/tmp").join(&marker);
    let _ = std::fs::remove_file(&host_abs);
    let mut layer = Vec::new();
    raw_entry(
        &mut layer,
        &format!("/tmp/{marker}"),
        tar::EntryType::Regular,
        b"absolute\n",
        (0, 0),
    );
    raw_entry(
        &mut layer,
        &format!("../../../../../../tmp/{marker}-up"),
        tar::EntryType::Regular,
        b"climbed\n",
        (0, 0),
    );
    // /dev/mem's numbers: the node's memory, if the device cgroup let it through.
    raw_entry(&mut layer, "evil-mem", tar::EntryType::Char, b"", (1, 1));
    layer.extend_from_slice(&[0; 1024]);
    let dir = node.scratch.path().join("evil-layout");
    busybox_plus(&layer, &dir);
    let reference = "ferrolet.local/evil-layers:1";
    node.import(&dir, reference).await;
    assert!(!host_abs.exists(), "the layer wrote {}", host_abs.display());
    assert!(!Path::new("/tmp").join(format!("{marker}-up")).exists());

    let api = node.api().await;
    let pod = node.pod("evil").build();
    let sandbox = api.run_pod(&pod).await.unwrap();
    let c = ContainerBuilder::new("main", reference).shell(IDLE).build();
    let id = api.run_container(&sandbox, &pod, &c).await.unwrap();
    // What the layer held is inside the container's own root, nowhere else.
    assert_eq!(
        api.exec_ok(&id, &["cat", &format!("/tmp/{marker}")]).await,
        "absolute\n"
    );
    assert_eq!(
        api.exec_ok(&id, &["cat", &format!("/tmp/{marker}-up")])
            .await,
        "climbed\n"
    );
    // The device node exists in the image but the device cgroup refuses it.
    let out = api
        .exec_sync(&id, &["head", "-c", "1", "/evil-mem"], 10)
        .await
        .unwrap();
    assert_ne!(out.exit_code, 0, "read the node's memory: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not permitted"), "{err}");
    assert!(!host_abs.exists());
    api.stop_pod(&sandbox).await.unwrap();
    api.remove_pod(&sandbox).await.unwrap();
    node.teardown().await;
}
