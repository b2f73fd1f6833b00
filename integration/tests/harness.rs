//! The harness itself, against a real containerd: it starts, answers, takes images, and the
//! leak checker sees what a test leaves behind.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::process::Command;

use ferrolet_cri::oci_layout::Layout;
use ferrolet_integration::containerd::containerd;
use ferrolet_integration::leak::{Leak, LeakChecker};
use ferrolet_integration::scratch::Scratch;
use ferrolet_integration::testimages;
use ferrolet_proto::containerd::services::v1::{
    CreateRequest as CreateLeaseRequest, DeleteImageRequest, DeleteRequest as DeleteLeaseRequest,
    ListImagesRequest, PluginsRequest,
};

#[tokio::test]
async fn containerd_answers_with_its_version_and_plugins() {
    let ns = containerd().namespace("version").await;
    let version = ns.client.version().version(()).await.unwrap().into_inner();
    println!("containerd {} ({})", version.version, version.revision);
    assert!(version.version.starts_with("1.") || version.version.starts_with('2'));

    let plugins = ns
        .client
        .introspection()
        .plugins(PluginsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .plugins;
    let ok = |ty: &str, id: &str| {
        plugins
            .iter()
            .any(|p| p.r#type == ty && p.id == id && p.init_err.is_none())
    };
    assert!(ok("io.containerd.snapshotter.v1", "overlayfs"));
    assert!(ok("io.containerd.runtime.v2", "task"));
    assert!(ok("io.containerd.grpc.v1", "content"));
    assert!(
        !ok("io.containerd.grpc.v1", "cri"),
        "the private containerd must run without its own CRI plugin"
    );
    ns.leak_checker().assert_clean().await;
    ns.delete().await.unwrap();
}

/// containerd runs a runtime type's shim from its PATH: the built ferrolet-cri's dir comes
/// first there, where `containerd-shim-ferrolet-v1` is built beside it.
#[test]
fn containerd_finds_the_workspace_s_shims_first_on_its_path() {
    let environ = std::fs::read(format!("/proc/{}/environ", containerd().pid())).unwrap();
    let path = environ
        .split(|b| *b == 0)
        .find_map(|var| var.strip_prefix(b"PATH="))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .expect("containerd has a PATH");
    let first = path.split(':').next().unwrap();
    let bin_dir = ferrolet_integration::workspace_bin_dir();
    assert_eq!(std::path::Path::new(first), bin_dir, "PATH={path}");
    assert!(
        bin_dir.join("ferrolet-cri").is_file(),
        "the dir of the ferrolet-cri the tests run: {}",
        bin_dir.display()
    );
}

#[tokio::test]
async fn an_image_layout_is_imported_listed_and_removed_without_residue() {
    let scratch = Scratch::new("import");
    let built = testimages::build("busybox", scratch.path(), "/bin/busybox".as_ref()).unwrap();
    let ns = containerd().namespace("import").await;

    let layout = Layout::new(&built.dir);
    let images = layout.images().await.unwrap();
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].tag.as_deref(), Some("1"));
    let name = "ferrolet.local/test/busybox:1";
    layout.import(&ns.client, &images[0], name).await.unwrap();
    // Importing again is a no-op, not an error.
    layout.import(&ns.client, &images[0], name).await.unwrap();

    let listed = ns
        .client
        .images()
        .list(ListImagesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .images;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, name);
    let target = listed[0].target.as_ref().unwrap();
    assert_eq!(target.digest, built.manifest_digest);
    println!("imported {name} -> {}", target.digest);

    // Only the image holds the content now: the import's lease is gone.
    ns.leak_checker().assert_clean().await;

    ns.client
        .images()
        .delete(DeleteImageRequest {
            name: name.into(),
            sync: true,
            target: None,
        })
        .await
        .unwrap();
    // A synchronous delete runs containerd's GC, which must find every blob unreferenced.
    ns.leak_checker().containerd_images().assert_clean().await;
    ns.delete().await.unwrap();
}

#[tokio::test]
async fn the_leak_checker_reports_a_leaked_netns_until_it_is_cleaned_up() {
    let scratch = Scratch::new("leaky-netns");
    let netns_dir = scratch.path().join("netns");
    std::fs::create_dir_all(&netns_dir).unwrap();
    let checker = LeakChecker::new()
        .netns_dir(&netns_dir)
        .mounts_under(scratch.path());
    checker.assert_clean().await;

    // Leak a persistent netns the way a runtime makes one: a bind mount of the namespace file.
    let leaked = netns_dir.join("leaked");
    std::fs::write(&leaked, b"").unwrap();
    let status = Command::new("unshare")
        .arg(format!("--net={}", leaked.display()))
        .arg("true")
        .status()
        .unwrap();
    assert!(status.success());

    let leaks = checker.check().await;
    assert!(leaks.contains(&Leak::Netns(leaked.clone())), "{leaks:?}");
    assert!(leaks.contains(&Leak::Mount(leaked.clone())), "{leaks:?}");

    nix::mount::umount2(&leaked, nix::mount::MntFlags::MNT_DETACH).unwrap();
    std::fs::remove_file(&leaked).unwrap();
    checker.assert_clean().await;
}

#[tokio::test]
async fn the_leak_checker_reports_leaked_processes_and_leases() {
    let ns = containerd().namespace("leaky").await;
    let checker = ns.leak_checker().child_processes();
    checker.assert_clean().await;

    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    ns.client
        .leases()
        .create(CreateLeaseRequest {
            id: "leaked-lease".into(),
            labels: Default::default(),
        })
        .await
        .unwrap();
    let leaks = checker.check().await;
    assert!(
        leaks
            .iter()
            .any(|l| matches!(l, Leak::Process { pid, .. } if *pid == child.id())),
        "{leaks:?}"
    );
    assert!(
        leaks.contains(&Leak::Containerd {
            kind: "lease",
            id: "leaked-lease".into()
        }),
        "{leaks:?}"
    );

    child.kill().unwrap();
    child.wait().unwrap();
    ns.client
        .leases()
        .delete(DeleteLeaseRequest {
            id: "leaked-lease".into(),
            sync: true,
        })
        .await
        .unwrap();
    checker.assert_clean().await;
    ns.delete().await.unwrap();
}
