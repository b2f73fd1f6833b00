//! ferrolet-cri's ImageService end to end: the real binary, a private containerd, the
//! environment's registries (`make env`) and private ones a test can watch or break.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use ferrolet_integration::containerd::TestNamespace;
use ferrolet_integration::cri::{CriServer, ScratchNode};
use ferrolet_integration::registry::{
    AUTH_REGISTRY, OPEN_REGISTRY, TestRegistry, auth_credentials,
};
use ferrolet_integration::scratch::unmount_all_under;
use ferrolet_integration::testimages::{self, BuiltImage};
use ferrolet_proto::containerd::services::v1::snapshots::{
    ListSnapshotsRequest, ViewSnapshotRequest,
};
use ferrolet_proto::containerd::services::v1::{
    ListContentRequest, ListImagesRequest as CdListImages, ListRequest as ListLeases,
};
use ferrolet_proto::cri::image_service_client::ImageServiceClient;
use ferrolet_proto::cri::{
    AuthConfig, ImageFsInfoRequest, ImageSpec, ImageStatusRequest, ListImagesRequest,
    PullImageRequest, RemoveImageRequest, VersionRequest,
};
use tonic::Code;
use tonic::transport::Channel;

const PAUSE_PREFIX: &str = "ferrolet.local/pause:";

fn spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: image.into(),
        ..Default::default()
    })
}

async fn pull(
    client: &mut ImageServiceClient<Channel>,
    image: &str,
    auth: Option<AuthConfig>,
) -> Result<String, tonic::Status> {
    client
        .pull_image(PullImageRequest {
            image: spec(image),
            auth,
            sandbox_config: None,
        })
        .await
        .map(|r| r.into_inner().image_ref)
}

async fn status_of(
    client: &mut ImageServiceClient<Channel>,
    reference: &str,
) -> Option<ferrolet_proto::cri::Image> {
    client
        .image_status(ImageStatusRequest {
            image: spec(reference),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .image
}

fn built(scratch: &Path, name: &str) -> BuiltImage {
    testimages::build(name, scratch, Path::new("/bin/busybox")).unwrap()
}

async fn content_and_snapshots(ns: &TestNamespace) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut content = BTreeSet::new();
    let mut s = ns
        .client
        .content()
        .list(ListContentRequest::default())
        .await
        .unwrap()
        .into_inner();
    while let Some(page) = s.message().await.unwrap() {
        content.extend(page.info.into_iter().map(|i| i.digest));
    }
    let mut snaps = BTreeSet::new();
    let mut s = ns
        .client
        .snapshots()
        .list(ListSnapshotsRequest {
            snapshotter: "overlayfs".into(),
            filters: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    while let Some(page) = s.message().await.unwrap() {
        snaps.extend(page.info.into_iter().map(|i| i.name));
    }
    (content, snaps)
}

async fn leases(ns: &TestNamespace) -> Vec<String> {
    ns.client
        .leases()
        .list(ListLeases::default())
        .await
        .unwrap()
        .into_inner()
        .leases
        .into_iter()
        .map(|l| l.id)
        .collect()
}

#[tokio::test]
async fn version_names_the_runtime_and_the_pause_image_is_there_without_a_registry() {
    // No registry is configured or reachable for this node: the sandbox image is built in.
    let node = ScratchNode::start("pause", "").await;
    let version = node
        .cri
        .runtime()
        .await
        .version(VersionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(version.runtime_name, "ferrolet");
    assert_eq!(version.runtime_api_version, "v1");

    let mut images = node.cri.images().await;
    let listed = images
        .list_images(ListImagesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .images;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let pause = &listed[0];
    assert!(pause.pinned);
    assert!(pause.repo_tags[0].starts_with(PAUSE_PREFIX), "{pause:?}");
    // Pinned: RemoveImage refuses, and the image stays.
    let err = images
        .remove_image(RemoveImageRequest {
            image: spec(&pause.id),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    // Streaming is served: a request naming no container is refused as invalid, not as
    // unimplemented (the sessions themselves are tested in cri_streaming).
    let err = node
        .cri
        .runtime()
        .await
        .exec(ferrolet_proto::cri::ExecRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    node.teardown().await;
}

#[tokio::test]
async fn every_test_image_pulls_by_tag_and_by_digest_with_the_right_status() {
    let node = ScratchNode::start("pull-all", "").await;
    let mut images = node.cri.images().await;
    for name in testimages::NAMES {
        let b = built(node.scratch.path(), name);
        let by_tag = format!("{OPEN_REGISTRY}/ferrolet/{name}:1");
        let id = pull(&mut images, &by_tag, None).await.unwrap();
        assert_eq!(id, b.config_digest, "{name}: image id is the config digest");
        let by_digest = format!("{OPEN_REGISTRY}/ferrolet/{name}@{}", b.manifest_digest);
        assert_eq!(pull(&mut images, &by_digest, None).await.unwrap(), id);

        let status = images
            .image_status(ImageStatusRequest {
                image: spec(&by_tag),
                verbose: true,
            })
            .await
            .unwrap()
            .into_inner();
        let image = status.image.unwrap();
        assert_eq!(image.id, b.config_digest);
        assert_eq!(image.repo_tags, vec![by_tag.clone()]);
        assert_eq!(image.repo_digests, vec![by_digest.clone()]);
        assert_eq!(
            image.size, b.size,
            "{name}: size is manifest + config + layers"
        );
        assert!(!image.pinned);
        if *name == "user" {
            assert_eq!(image.username, "app");
            assert!(image.uid.is_none());
        } else {
            assert_eq!(image.uid.map(|u| u.value), None);
        }
        let info: serde_json::Value = serde_json::from_str(&status.info["info"]).unwrap();
        assert_eq!(
            info["imageSpec"]["rootfs"]["diff_ids"]
                .as_array()
                .unwrap()
                .len(),
            b.diff_ids.len()
        );
        // By id, by short id and by digest all find it.
        for reference in [&id, &id[7..19].to_string(), &by_digest] {
            let found = status_of(&mut images, reference).await;
            assert_eq!(found.map(|i| i.id), Some(id.clone()), "{reference}");
        }
    }
    let fs = images
        .image_fs_info(ImageFsInfoRequest::default())
        .await
        .unwrap()
        .into_inner();
    let usage = &fs.image_filesystems[0];
    assert!(usage.used_bytes.unwrap().value > 64 << 20, "{usage:?}");
    assert!(usage.inodes_used.unwrap().value > 100);
    assert!(
        usage
            .fs_id
            .as_ref()
            .unwrap()
            .mountpoint
            .ends_with("io.containerd.snapshotter.v1.overlayfs"),
        "{usage:?}"
    );
    node.teardown().await;
}

#[tokio::test]
async fn layers_unpack_with_whiteouts_applied() {
    let node = ScratchNode::start("whiteouts", "").await;
    let mut images = node.cri.images().await;
    let b = built(node.scratch.path(), "layers");
    pull(
        &mut images,
        &format!("{OPEN_REGISTRY}/ferrolet/layers:1"),
        None,
    )
    .await
    .unwrap();
    // Mount a read-only view of the top snapshot and look at the merged tree.
    let chain = ferrolet_cri::image_config::chain_ids(&b.diff_ids);
    let mounts = node
        .ns
        .client
        .snapshots()
        .view(ViewSnapshotRequest {
            snapshotter: "overlayfs".into(),
            key: "whiteout-view".into(),
            parent: chain.last().unwrap().clone(),
            // No container or lease refers to this view, so without a root label containerd's
            // garbage collector (run when another test deletes something) may take it away
            // mid-test: "snapshot whiteout-view does not exist" on removal.
            labels: [("containerd.io/gc.root".to_string(), "test".to_string())].into(),
        })
        .await
        .unwrap()
        .into_inner()
        .mounts;
    let target = node.scratch.path().join("view");
    std::fs::create_dir_all(&target).unwrap();
    let m = &mounts[0];
    let status = std::process::Command::new("mount")
        .args(["-t", &m.r#type, &m.source])
        .arg("-o")
        .arg(m.options.join(","))
        .arg(&target)
        .status()
        .unwrap();
    assert!(status.success(), "mounting {m:?}");
    let present = |p: &str| target.join(p).exists();
    let checks = (
        present("data/keep.txt"),
        present("data/layer2.txt"),
        present("data/remove-me.txt"),
        present("olddir/new.txt"),
        present("olddir/a.txt"),
        present("bin/busybox"),
    );
    unmount_all_under(&target).unwrap();
    node.ns
        .client
        .snapshots()
        .remove(
            ferrolet_proto::containerd::services::v1::snapshots::RemoveSnapshotRequest {
                snapshotter: "overlayfs".into(),
                key: "whiteout-view".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(checks, (true, true, false, true, false, true));
    node.teardown().await;
}

#[tokio::test]
async fn the_auth_registry_needs_the_right_credentials() {
    let node = ScratchNode::start("auth", "").await;
    let mut images = node.cri.images().await;
    let image = format!("{AUTH_REGISTRY}/ferrolet/busybox:1");
    let err = pull(&mut images, &image, None).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    assert!(err.message().contains(AUTH_REGISTRY), "{err}");

    let (user, pass) = auth_credentials();
    let wrong = AuthConfig {
        username: user.clone(),
        password: "wrong".into(),
        ..Default::default()
    };
    let err = pull(&mut images, &image, Some(wrong)).await.unwrap_err();
    assert!(
        matches!(err.code(), Code::Unauthenticated | Code::PermissionDenied),
        "{err}"
    );
    let right = AuthConfig {
        username: user,
        password: pass,
        ..Default::default()
    };
    pull(&mut images, &image, Some(right)).await.unwrap();
    assert!(leases(&node.ns).await.is_empty());
    node.teardown().await;
}

#[tokio::test]
async fn bad_references_and_unknown_images_get_clear_errors() {
    let node = ScratchNode::start("errors", "").await;
    let mut images = node.cri.images().await;
    let err = pull(&mut images, "UPPER/Case:1", None).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    let missing = format!("{OPEN_REGISTRY}/ferrolet/busybox:no-such-tag");
    let err = pull(&mut images, &missing, None).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");
    assert!(err.message().contains("no-such-tag"), "{err}");
    let err = pull(&mut images, "127.0.0.1:1/ferrolet/busybox:1", None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.message().contains("127.0.0.1:1"), "{err}");
    // Status of an unknown image is empty, and removing one is not an error (CRI).
    let status = images
        .image_status(ImageStatusRequest {
            image: spec("ferrolet.local/none:1"),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(status.image.is_none());
    images
        .remove_image(RemoveImageRequest {
            image: spec("ferrolet.local/none:1"),
        })
        .await
        .unwrap();
    node.teardown().await;
}

#[tokio::test]
async fn docker_hub_names_pull_through_a_mirror() {
    let node = ScratchNode::start(
        "mirror",
        &format!("[registry.hosts.\"docker.io\"]\nmirrors = [\"http://{OPEN_REGISTRY}\"]\n"),
    )
    .await;
    let mut images = node.cri.images().await;
    let b = built(node.scratch.path(), "busybox");
    let id = pull(&mut images, "busybox:1", None).await.unwrap();
    assert_eq!(id, b.config_digest);
    let image = status_of(&mut images, "docker.io/library/busybox:1")
        .await
        .unwrap();
    assert_eq!(
        image.repo_tags,
        vec!["docker.io/library/busybox:1".to_string()]
    );
    // Removing by tag removes every name, as containerd's CRI does.
    images
        .remove_image(RemoveImageRequest {
            image: spec("busybox:1"),
        })
        .await
        .unwrap();
    let left = node
        .ns
        .client
        .images()
        .list(CdListImages::default())
        .await
        .unwrap()
        .into_inner()
        .images;
    assert!(
        left.iter().all(|i| i.name.starts_with(PAUSE_PREFIX)
            || i.labels.contains_key("io.cri-containerd.pinned")),
        "{left:?}"
    );
    node.teardown().await;
}

#[tokio::test]
async fn ten_concurrent_pulls_download_each_blob_once() {
    let node = ScratchNode::start("concurrent", "").await;
    let registry = TestRegistry::start(node.scratch.path());
    let b = built(node.scratch.path(), "big");
    registry.push(&b.dir, "ferrolet/big");
    let image = format!("{}/ferrolet/big:1", registry.addr);
    let pulls = (0..10).map(|_| {
        let cri = node.cri.endpoint();
        let image = image.clone();
        tokio::spawn(async move {
            let channel = ferrolet_proto::transport::connect(&cri).await.unwrap();
            pull(&mut ImageServiceClient::new(channel), &image, None).await
        })
    });
    for result in futures::future::join_all(pulls).await {
        assert_eq!(result.unwrap().unwrap(), b.config_digest);
    }
    for layer in &b.layer_digests {
        assert_eq!(
            registry.blob_gets(layer),
            1,
            "layer {layer} downloaded more than once"
        );
    }
    assert!(
        node.cri.log_text().contains("pull progress"),
        "progress is logged"
    );
    node.teardown().await;
}

#[tokio::test]
async fn a_pull_cut_short_leaves_nothing_and_the_next_pull_succeeds() {
    let node = ScratchNode::start("cut", "").await;
    let mut registry = TestRegistry::start(node.scratch.path());
    let b = built(node.scratch.path(), "big");
    registry.push(&b.dir, "ferrolet/big");
    let image = format!("{}/ferrolet/big:1", registry.addr);
    let before = content_and_snapshots(&node.ns).await;

    let cri = node.cri.endpoint();
    let puller = {
        let image = image.clone();
        tokio::spawn(async move {
            let channel = ferrolet_proto::transport::connect(&cri).await.unwrap();
            pull(&mut ImageServiceClient::new(channel), &image, None).await
        })
    };
    // Stop the registry once the big layer is partly written.
    let big_layer = b.layer_digests.last().unwrap().clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let statuses = node
            .ns
            .client
            .content()
            .list_statuses(ferrolet_proto::containerd::services::v1::ListStatusesRequest::default())
            .await
            .unwrap()
            .into_inner()
            .statuses;
        if statuses
            .iter()
            .any(|s| s.r#ref.contains(&big_layer) && s.offset > 0)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pull never started writing"
        );
        assert!(
            !puller.is_finished(),
            "the pull finished before it could be cut"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    registry.kill();
    let err = puller.await.unwrap().unwrap_err();
    println!("cut-short pull: {err}");
    assert!(leases(&node.ns).await.is_empty());
    assert_eq!(
        content_and_snapshots(&node.ns).await,
        before,
        "no partial content or snapshot"
    );

    let registry = TestRegistry::start(node.scratch.path());
    registry.push(&b.dir, "ferrolet/big");
    let mut images = node.cri.images().await;
    let image = format!("{}/ferrolet/big:1", registry.addr);
    assert_eq!(
        pull(&mut images, &image, None).await.unwrap(),
        b.config_digest
    );
    node.teardown().await;
}

#[tokio::test]
async fn images_survive_a_restart_with_the_same_ids_and_shutdown_is_graceful() {
    let mut node = ScratchNode::start("restart", "").await;
    let mut images = node.cri.images().await;
    for name in ["busybox", "user"] {
        pull(
            &mut images,
            &format!("{OPEN_REGISTRY}/ferrolet/{name}:1"),
            None,
        )
        .await
        .unwrap();
    }
    let list = |mut c: ImageServiceClient<Channel>| async move {
        let mut v: Vec<(String, Vec<String>)> = c
            .list_images(ListImagesRequest::default())
            .await
            .unwrap()
            .into_inner()
            .images
            .into_iter()
            .map(|i| (i.id, i.repo_tags))
            .collect();
        v.sort();
        v
    };
    let before = list(images).await;
    assert_eq!(before.len(), 3);

    node.cri.restart_after_kill();
    assert_eq!(list(node.cri.images().await).await, before);

    assert!(node.cri.terminate(), "SIGTERM exits 0");
    assert!(
        !node.cri.socket_exists(),
        "the socket is removed on shutdown"
    );
    let cri = CriServer::start(
        node.scratch.path(),
        &std::fs::read_to_string(node.scratch.path().join("ferrolet-cri.toml")).unwrap(),
    );
    node.cri = cri;
    assert_eq!(list(node.cri.images().await).await, before);
    node.teardown().await;
}

#[tokio::test]
async fn image_import_takes_layouts_oci_archives_and_docker_archives() {
    let node = ScratchNode::start("import", "").await;
    let b = built(node.scratch.path(), "entry");
    let oci_tar = node.scratch.path().join("entry-oci.tar");
    let docker_tar = node.scratch.path().join("entry-docker.tar");
    for (dest, what) in [
        (
            format!(
                "oci-archive:{}:ferrolet.local/arch/entry:oci",
                oci_tar.display()
            ),
            "oci",
        ),
        (
            format!(
                "docker-archive:{}:ferrolet.local/arch/entry:docker",
                docker_tar.display()
            ),
            "docker",
        ),
    ] {
        let ok = std::process::Command::new("skopeo")
            .args(["copy", "-q"])
            .arg(format!("oci:{}:1", b.dir.display()))
            .arg(&dest)
            .status()
            .unwrap()
            .success();
        assert!(ok, "skopeo made no {what} archive");
    }
    let binary = ferrolet_integration::workspace_binary("ferrolet-cri");
    let config = node.scratch.path().join("ferrolet-cri.toml");
    let import = |path: &Path, name: Option<&str>| {
        let mut cmd = std::process::Command::new(&binary);
        cmd.arg("--config")
            .arg(&config)
            .args(["image", "import"])
            .arg(path);
        if let Some(n) = name {
            cmd.args(["--name", n]);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        import(&b.dir, Some("ferrolet.local/arch/entry:layout")),
        "ferrolet.local/arch/entry:layout\n"
    );
    assert_eq!(import(&oci_tar, None), "ferrolet.local/arch/entry:oci\n");
    assert_eq!(
        import(&docker_tar, None),
        "ferrolet.local/arch/entry:docker\n"
    );

    // The running ferrolet-cri learns of the imports from containerd's events.
    let mut images = node.cri.images().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for tag in ["layout", "oci", "docker"] {
        let image = status_of(&mut images, &format!("ferrolet.local/arch/entry:{tag}"))
            .await
            .unwrap_or_else(|| panic!("entry:{tag} not imported"));
        // A Docker archive keeps the config bytes, so every path gives the same image id.
        assert_eq!(image.id, b.config_digest, "{tag}");
    }
    node.teardown().await;
}
