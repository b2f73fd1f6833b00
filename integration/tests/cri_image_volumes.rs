//! Image volumes through ferrolet-cri's CRI (CreateContainer with `Mount.image`, issue #38):
//! the image's files at the mount path, read-only; a read-only view of the image's top
//! snapshot per volume, gone with the container; bad requests refused with nothing left; the
//! views known again after a restart and orphans swept. Real containerd, runc and CNI; the
//! pod leak checks (mounts, snapshots that are not committed, leases) after each teardown.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::HashMap;

use ferrolet_integration::containerd::{containerd_version, list_snapshots};
use ferrolet_integration::containerd_cri::ContainerdCriNode;
use ferrolet_integration::cri::poll;
use ferrolet_integration::kubelet::image;
use ferrolet_integration::pods::{ContainerBuilder, CriNode, LONG, image_spec};
use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::snapshots::{Info, ViewSnapshotRequest};
use ferrolet_proto::containerd::services::v1::{CreateRequest, DeleteRequest};
use ferrolet_proto::cri::{MountPropagation, RemoveImageRequest};
use tonic::Code;

const HTTPD_BODY: &str = "ferrolet httpd ok\n";

/// The snapshots of the namespace whose key contains `part`.
async fn snapshots_named(client: &Containerd, part: &str) -> Vec<Info> {
    let mut all = list_snapshots(client).await.unwrap();
    all.retain(|i| i.name.contains(part));
    all
}

/// Runs containerd's garbage collector to its end: a lease made and deleted with `sync`.
async fn collect_garbage(client: &Containerd) {
    let id = format!("imgvol-gc-{}", std::process::id());
    client
        .leases()
        .create(CreateRequest {
            id: id.clone(),
            labels: HashMap::new(),
        })
        .await
        .unwrap();
    client
        .leases()
        .delete(DeleteRequest { id, sync: true })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_volume_shows_the_image_read_only_and_goes_with_its_container() {
    let node = CriNode::start("imgvol").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    // httpd:1 has two layers (the view is an overlay), busybox:1 one (the view is a bind).
    let httpd = node.pull("httpd").await;
    let pod = node.pod("imgvol").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let config = ContainerBuilder::new("reader", &busybox.reference)
        .shell("sleep 1000")
        .image_mount(&httpd.reference, "/vol")
        .image_mount(&busybox.id, "/bb")
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();

    assert_eq!(
        api.exec_ok(&id, &["cat", "/vol/www/index.html"]).await,
        HTTPD_BODY
    );
    assert_eq!(
        api.exec_ok(&id, &["sh", "-c", "test -x /bb/bin/busybox && echo yes"])
            .await,
        "yes\n"
    );
    for dir in ["/vol", "/bb", "/vol/www"] {
        let (code, out) = api.sh(&id, &format!("touch {dir}/new")).await;
        assert_ne!(code, 0, "a write to {dir} succeeded: {out}");
        assert!(out.contains("Read-only file system"), "{dir}: {out}");
    }
    let (code, out) = api.sh(&id, "grep ' /vol ' /proc/mounts").await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(" ro,") || out.contains(" ro "), "{out}");

    // One view per volume, keyed by the container id, not committed.
    let views = snapshots_named(&node.ns.client, &format!("{id}-image-volume-")).await;
    assert_eq!(views.len(), 2, "{views:?}");
    // ContainerStatus reports the mounts as asked: the image, read-only, no host path.
    let status = api.container_status(&id).await.unwrap();
    let vol = status
        .mounts
        .iter()
        .find(|m| m.container_path == "/vol")
        .unwrap_or_else(|| panic!("no /vol in {:?}", status.mounts));
    assert!(vol.readonly && vol.host_path.is_empty(), "{vol:?}");
    assert_eq!(
        vol.image.as_ref().map(|i| i.image.as_str()),
        Some(httpd.reference.as_str())
    );

    // As on containerd's CRI, the image may go while a container mounts it: its view keeps
    // the layers until the container goes.
    let mut images = node.images().await;
    images
        .remove_image(RemoveImageRequest {
            image: Some(image_spec(&httpd.reference)),
        })
        .await
        .unwrap();
    // A garbage collection now (a lease deleted with `sync`) keeps the views and, through
    // them, the layers: the record holds them by label.
    collect_garbage(&node.ns.client).await;
    let after = snapshots_named(&node.ns.client, &format!("{id}-image-volume-")).await;
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(
        api.exec_ok(&id, &["cat", "/vol/www/index.html"]).await,
        HTTPD_BODY
    );

    api.stop_container(&id, 0).await.unwrap();
    api.remove_container(&id).await.unwrap();
    assert!(
        snapshots_named(&node.ns.client, "-image-volume-")
            .await
            .is_empty(),
        "views left after RemoveContainer"
    );
    api.stop_pod(&pod_id).await.unwrap();
    api.remove_pod(&pod_id).await.unwrap();
    node.assert_no_pod_leaks().await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_or_missing_image_volumes_are_refused_with_nothing_left() {
    let node = CriNode::start("imgvol-bad").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("imgvol-bad").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let base = || ContainerBuilder::new("bad", &busybox.reference).shell("sleep 1000");

    // Not pulled: NotFound, naming the image and the mount.
    let missing = "127.0.0.1:5000/ferrolet/user:1";
    let config = base().image_mount(missing, "/vol").build();
    let err = api
        .create_container(&pod_id, &pod, &config)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");
    assert!(
        err.message().contains(missing) && err.message().contains("/vol"),
        "{err}"
    );

    // Writable or with a host path: refused as containerd refuses them.
    let mut config = base().image_mount(&busybox.reference, "/vol").build();
    config.mounts[0].readonly = false;
    let err = api
        .create_container(&pod_id, &pod, &config)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("readonly"), "{err}");
    let mut config = base().image_mount(&busybox.reference, "/vol").build();
    config.mounts[0].host_path = "/tmp".into();
    let err = api
        .create_container(&pod_id, &pod, &config)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("host_path"), "{err}");

    // Refused by the spec after the views were made: they go with the failed call.
    let mut config = base()
        .image_mount(&busybox.reference, "/ok")
        .image_mount(&busybox.reference, "/shared")
        .build();
    config.mounts[1].propagation = MountPropagation::PropagationBidirectional as i32;
    let err = api
        .create_container(&pod_id, &pod, &config)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("private"), "{err}");

    assert!(api.list_containers(None).await.unwrap().is_empty());
    assert!(
        snapshots_named(&node.ns.client, "-image-volume-")
            .await
            .is_empty(),
        "views left by refused calls"
    );
    api.stop_pod(&pod_id).await.unwrap();
    api.remove_pod(&pod_id).await.unwrap();
    node.assert_no_pod_leaks().await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_are_known_after_a_restart_and_orphans_are_swept() {
    let node = CriNode::start("imgvol-restart").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let httpd = node.pull("httpd").await;
    let pod = node.pod("imgvol-restart").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let config = ContainerBuilder::new("reader", &busybox.reference)
        .shell("sleep 1000")
        .image_mount(&httpd.reference, "/vol")
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let view = snapshots_named(&node.ns.client, &format!("{id}-image-volume-0"))
        .await
        .pop()
        .expect("the container's view");

    // A view whose container is gone (a crash between the view and the record): ours by its
    // label, owned by an id nobody uses.
    let orphan = format!("{}-image-volume-0", "f".repeat(64));
    node.ns
        .client
        .snapshots()
        .view(ViewSnapshotRequest {
            snapshotter: "overlayfs".into(),
            key: orphan.clone(),
            parent: view.parent.clone(),
            labels: HashMap::from([("io.ferrolet.cri.owner".into(), "ferrolet-cri".into())]),
        })
        .await
        .unwrap();

    node.cri.restart_after_kill();
    let api = node.api().await;
    poll("the orphan view to be swept", LONG, || {
        let client = node.ns.client.clone();
        let orphan = orphan.clone();
        async move {
            if snapshots_named(&client, &orphan).await.is_empty() {
                Ok(())
            } else {
                Err("still there".to_string())
            }
        }
    })
    .await;
    // The container's own view stays, and still shows the image.
    assert_eq!(
        snapshots_named(&node.ns.client, &format!("{id}-image-volume-"))
            .await
            .len(),
        1
    );
    let body = poll("exec after the restart", LONG, || {
        let api = api.clone();
        let id = id.clone();
        async move {
            api.exec_sync(&id, &["cat", "/vol/www/index.html"], 30)
                .await
                .map(|r| String::from_utf8_lossy(&r.stdout).into_owned())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    assert_eq!(body, HTTPD_BODY);

    api.stop_container(&id, 0).await.unwrap();
    api.remove_container(&id).await.unwrap();
    assert!(
        snapshots_named(&node.ns.client, "-image-volume-")
            .await
            .is_empty()
    );
    api.stop_pod(&pod_id).await.unwrap();
    api.remove_pod(&pod_id).await.unwrap();
    node.assert_no_pod_leaks().await;
    node.teardown().await;
}

/// The reference runtime with the same requests: containerd's own CRI. containerd 2.1+
/// mounts image volumes (one writable snapshot per pod and image, mounted on the host until
/// StopPodSandbox); containerd 1.6, the machine's, has no `Mount.image`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_on_containerd_cri() {
    let version = containerd_version();
    let node = ContainerdCriNode::start("imgvol").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await.reference;
    let httpd = node.pull("httpd").await.reference;
    let pod = node.pod("imgvol").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let config = ContainerBuilder::new("reader", &busybox)
        .shell("sleep 1000")
        .image_mount(&httpd, "/vol")
        .build();
    let created = api.run_container(&pod_id, &pod, &config).await;
    let missing = ContainerBuilder::new("missing", &busybox)
        .shell("sleep 1000")
        .image_mount(&image("user"), "/vol")
        .build();
    let refused = api.create_container(&pod_id, &pod, &missing).await;
    eprintln!(
        "[imgvol] containerd {}.{}: CreateContainer with an image volume → {:?}; \
         with an image not pulled → {:?}",
        version.0,
        version.1,
        created
            .as_ref()
            .map_err(|e| (e.code(), e.message().to_string())),
        refused
            .as_ref()
            .map_err(|e| (e.code(), e.message().to_string())),
    );
    if let Ok(id) = &created {
        let (code, out) = api.sh(id, "cat /vol/www/index.html; touch /vol/new").await;
        eprintln!(
            "[imgvol] containerd {}.{}: exit {code}: {out}",
            version.0, version.1
        );
        if version >= (2, 1) {
            assert!(out.starts_with(HTTPD_BODY), "{out}");
            assert!(out.contains("Read-only file system"), "{out}");
            // RemoveImage of a mounted image succeeds; the volume stays readable.
            node.images()
                .await
                .remove_image(RemoveImageRequest {
                    image: Some(image_spec(&httpd)),
                })
                .await
                .unwrap();
            assert_eq!(
                api.exec_ok(id, &["cat", "/vol/www/index.html"]).await,
                HTTPD_BODY
            );
        }
        api.stop_container(id, 0).await.unwrap();
        api.remove_container(id).await.unwrap();
    }
    if version >= (2, 1) {
        assert!(created.is_ok());
        let err = refused.as_ref().unwrap_err();
        assert!(err.message().contains(&image("user")), "{err}");
    }
    if let Ok(id) = &refused {
        api.remove_container(id).await.unwrap();
    }
    api.stop_pod(&pod_id).await.unwrap();
    api.remove_pod(&pod_id).await.unwrap();
    node.teardown().await;
}
