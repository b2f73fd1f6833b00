//! User-namespaced pods (`userns_options` mode POD) on ferrolet-cri, under runc and crun:
//! the pod's containers share one user namespace with the mapping asked for, the rootfs and
//! the mounts that carry the mapping are idmapped (files the host made as root read as the
//! pod's root, the pod's root writes land as host root on volumes), and nothing is left.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use ferrolet_integration::pods::{ContainerBuilder, CriNode, NodeOptions};
use ferrolet_proto::cri::{self, IdMapping, NamespaceMode, PodSandboxConfig};
use tonic::Code;

const L: u32 = 65536;

/// A mapping of the pod's 65536 ids from `base`.
fn mapping(base: u32) -> Vec<IdMapping> {
    vec![IdMapping {
        host_id: base,
        container_id: 0,
        length: L,
    }]
}

fn userns(base: u32) -> cri::UserNamespace {
    cri::UserNamespace {
        mode: NamespaceMode::Pod as i32,
        uids: mapping(base),
        gids: mapping(base),
    }
}

/// Sets the pod's user namespace.
fn with_userns(mut pod: PodSandboxConfig, base: u32) -> PodSandboxConfig {
    let ns = pod
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut())
        .expect("the builder sets namespace options");
    ns.userns_options = Some(userns(base));
    pod
}

/// A container of the pod: its own options say the pod's user namespace, its mount of
/// `vol` carries the mapping, as the Go kubelet sends them.
fn container(image: &str, vol: &Path, base: u32) -> cri::ContainerConfig {
    let mut c = ContainerBuilder::new("main", image)
        .shell("exec sleep 300")
        .mount(vol, "/data", false)
        .build();
    for m in &mut c.mounts {
        m.uid_mappings = mapping(base);
        m.gid_mappings = mapping(base);
    }
    let sc = c
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default);
    sc.namespace_options = Some(cri::NamespaceOption {
        network: NamespaceMode::Pod as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        userns_options: Some(userns(base)),
        ..Default::default()
    });
    c
}

/// Whether ferrolet-cri found user namespaces usable here (its start-up probe: a pinned user
/// namespace and an idmapped mount under its state dir); where not, a user-namespaced pod
/// must be refused with the reason, and nothing is left.
async fn supported_or_refused(node: &CriNode, api: &ferrolet_integration::cri::RuntimeApi) -> bool {
    let status = api
        .client()
        .status(cri::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    let supported: Vec<bool> = status
        .runtime_handlers
        .iter()
        .map(|h| h.features.unwrap_or_default().user_namespaces)
        .collect();
    assert!(
        supported.iter().all(|s| *s == supported[0]),
        "every handler alike: {supported:?}"
    );
    if supported[0] {
        return true;
    }
    let pod = with_userns(node.pod("userns-refused").build(), 1000 * L);
    let err = api.run_pod(&pod).await.unwrap_err();
    println!("user namespaces unsupported here: {err}");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    assert!(
        err.message()
            .contains("user namespaces are not supported on this node: idmapped mounts on"),
        "{err}"
    );
    false
}

/// Whether crun 1.8 can run here (it refuses hybrid cgroup hosts).
fn crun_runs_here() -> bool {
    ferrolet_integration::cgroups::v2()
        || std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
            .map_or(true, |c| c.trim().is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_namespaced_pods_see_their_mapping_and_idmapped_files() {
    let node = CriNode::start_with(
        "userns",
        NodeOptions {
            extra_config: "[runtimes.crun]\nbinary_name = \"/usr/bin/crun\"\n".into(),
            ..Default::default()
        },
    )
    .await;
    let api = node.api().await;
    if !supported_or_refused(&node, &api).await {
        node.teardown().await;
        return;
    }
    let image = node.pull("busybox").await;
    // A pod of the host's users first: its FIFOs make the state's `containers` dir, closed
    // (0700) to the user-namespaced pods' roots that must reach their rootfs below it.
    let plain = node.pod("userns-plain").build();
    let plain_sandbox = api.run_pod(&plain).await.unwrap();
    let plain_c = ContainerBuilder::new("plain", &image.reference)
        .shell("exec sleep 300")
        .build();
    api.run_container(&plain_sandbox, &plain, &plain_c)
        .await
        .unwrap();
    let mut handlers = vec![""];
    if crun_runs_here() {
        handlers.push("crun");
    } else {
        println!("crun 1.8 does not run on this hybrid cgroup host: runc only");
    }
    // Ranges of this test's own (the octet keeps parallel nodes apart).
    let base0 = (1000 + u32::from(node.net.octet) * 8) * L;
    let mut pods = Vec::new();
    for (i, handler) in handlers.iter().enumerate() {
        for j in 0..2u32 {
            let base = base0 + (i as u32 * 2 + j) * L;
            let name = format!("userns-{i}-{j}");
            let vol = node.scratch.path().join(format!("vol-{i}-{j}"));
            std::fs::create_dir_all(&vol).unwrap();
            std::fs::write(vol.join("from-host"), "host\n").unwrap();
            let pod = with_userns(node.pod(&name).build(), base);
            let sandbox = api.run_pod_with_handler(&pod, handler).await.unwrap();
            let c = container(&image.reference, &vol, base);
            let id = api.run_container(&sandbox, &pod, &c).await.unwrap();
            pods.push((sandbox, id, base, vol, *handler));
        }
    }
    for (_, id, base, vol, handler) in &pods {
        println!("handler {handler:?}, base {base}");
        let map = api.exec_ok(id, &["cat", "/proc/self/uid_map"]).await;
        assert_eq!(
            map.split_whitespace().collect::<Vec<_>>(),
            ["0", &base.to_string(), &L.to_string()],
            "uid_map is the pod's mapping"
        );
        let gid_map = api.exec_ok(id, &["cat", "/proc/self/gid_map"]).await;
        assert_eq!(gid_map, map);
        assert_eq!(api.exec_ok(id, &["id", "-u"]).await.trim(), "0");
        // The volume: the host's root-owned file reads as the pod's root; what the pod's
        // root writes is host root's on disk.
        let (code, out) = api
            .sh(
                id,
                "stat -c '%u %g' /data/from-host && cat /data/from-host && \
                 echo pod > /data/from-pod && mkdir /data/dir && chown 1000:1000 /data/dir",
            )
            .await;
        assert_eq!((code, out.as_str()), (0, "0 0\nhost\n"), "{out}");
        let meta = std::fs::metadata(vol.join("from-pod")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0));
        let meta = std::fs::metadata(vol.join("dir")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (1000, 1000));
        // The rootfs: the image's files are root's, and root writes where the image lets it.
        let (code, out) = api
            .sh(
                id,
                "stat -c '%u' /bin/busybox /etc /etc/hosts && echo x > /etc/new && \
                 touch /root-file && rm /etc/new && hostname",
            )
            .await;
        assert_eq!(code, 0, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(&lines[..3], ["0", "0", "0"], "{out}");
        // The container's processes run as the mapping's ids on the host.
        let (_, info) = api.container_status_verbose(id, true).await.unwrap();
        let pid = info
            .get("info")
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
            .and_then(|v| v["pid"].as_u64())
            .unwrap_or(0);
        if pid > 0 {
            let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let uid_line = st.lines().find(|l| l.starts_with("Uid:")).unwrap();
            assert!(uid_line.contains(&base.to_string()), "{uid_line}");
        }
    }
    // Two pods' ranges are apart, and each pod's containers share its user namespace.
    let (sb0, _, base, vol, handler) = &pods[0];
    let pod0 = api.pod_status(sb0).await.unwrap();
    let meta = pod0.status.and_then(|s| s.metadata).unwrap();
    let pod_config = with_userns(node.pod(&meta.name).build(), *base);
    let mut second = container(&image.reference, vol, *base);
    second.metadata.as_mut().unwrap().name = "second".into();
    let id2 = api.run_container(sb0, &pod_config, &second).await.unwrap();
    let same = |id: &str| {
        let id = id.to_string();
        let api = api.clone();
        async move { api.exec_ok(&id, &["readlink", "/proc/self/ns/user"]).await }
    };
    assert_eq!(same(&pods[0].1).await, same(&id2).await, "on {handler:?}");
    assert_ne!(same(&pods[0].1).await, same(&pods[1].1).await);
    api.stop_container(&id2, 0).await.unwrap();
    api.remove_container(&id2).await.unwrap();

    // Refused: the node's network with a user namespace, a container asking for another
    // mapping, a mount with another mapping.
    let mut host_net = with_userns(node.pod("userns-hostnet").build(), base0);
    host_net
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .namespace_options
        .as_mut()
        .unwrap()
        .network = NamespaceMode::Node as i32;
    let err = api.run_pod(&host_net).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    let mut other = container(&image.reference, vol, base + 7 * L);
    other.metadata.as_mut().unwrap().name = "other".into();
    let err = api
        .create_container(sb0, &pod_config, &other)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(
        err.message().contains("differs from the pod sandbox"),
        "{err}"
    );

    for (sandbox, id, _, _, _) in &pods {
        api.stop_container(id, 0).await.unwrap();
        api.remove_container(id).await.unwrap();
        api.stop_pod(sandbox).await.unwrap();
        api.remove_pod(sandbox).await.unwrap();
    }
    api.stop_pod(&plain_sandbox).await.unwrap();
    api.remove_pod(&plain_sandbox).await.unwrap();
    node.teardown().await;
}

/// ferrolet-cri killed and restarted under a user-namespaced pod: the pod is still Ready
/// (its pinned user namespace found), its container keeps its mapping, a new container joins
/// the same user namespace, and the pod's removal leaves nothing (idmapped mounts included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_a_user_namespaced_pod_and_its_removal_leaves_nothing() {
    let node = CriNode::start("userns-rs").await;
    let image = node.pull("busybox").await;
    let base = (1000 + u32::from(node.net.octet) * 8 + 6) * L;
    let vol = node.scratch.path().join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    let pod = with_userns(node.pod("userns-restart").build(), base);
    let api = node.api().await;
    if !supported_or_refused(&node, &api).await {
        node.teardown().await;
        return;
    }
    let sandbox = api.run_pod(&pod).await.unwrap();
    let id = api
        .run_container(&sandbox, &pod, &container(&image.reference, &vol, base))
        .await
        .unwrap();
    let before = api.exec_ok(&id, &["readlink", "/proc/self/ns/user"]).await;

    node.cri.kill();
    node.cri.restart_after_kill();
    let api = node.api().await;
    let status = api.pod_status(&sandbox).await.unwrap().status.unwrap();
    assert_eq!(status.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(
        api.exec_ok(&id, &["readlink", "/proc/self/ns/user"]).await,
        before
    );
    let mut second = container(&image.reference, &vol, base);
    second.metadata.as_mut().unwrap().name = "after-restart".into();
    let id2 = api.run_container(&sandbox, &pod, &second).await.unwrap();
    assert_eq!(
        api.exec_ok(&id2, &["readlink", "/proc/self/ns/user"]).await,
        before,
        "a container made after the restart joins the pod's user namespace"
    );
    let (code, out) = api
        .sh(&id2, "echo x > /data/after && stat -c %u /data/after")
        .await;
    assert_eq!((code, out.as_str()), (0, "0\n"), "{out}");

    api.stop_pod(&sandbox).await.unwrap();
    api.remove_pod(&sandbox).await.unwrap();
    node.teardown().await;
}

/// A user-namespaced pod that needs a pause process (a shared PID namespace and a sysctl):
/// the pause joins the pod's pinned user namespace and netns, runs on an idmapped rootfs, is
/// the containers' PID 1, and the sysctl lands in the pod's netns; nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_sharing_its_pid_namespace_runs_its_pause_in_its_user_namespace() {
    let node = CriNode::start("userns-pause").await;
    let api = node.api().await;
    if !supported_or_refused(&node, &api).await {
        node.teardown().await;
        return;
    }
    let image = node.pull("busybox").await;
    let base = (1000 + u32::from(node.net.octet) * 8 + 7) * L;
    let vol = node.scratch.path().join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    let pod = with_userns(
        node.pod("userns-pause")
            .pid_namespace(NamespaceMode::Pod)
            .sysctl("net.ipv4.ping_group_range", "0 65535")
            .build(),
        base,
    );
    let sandbox = api.run_pod(&pod).await.unwrap();
    let mut c = container(&image.reference, &vol, base);
    c.linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .namespace_options
        .as_mut()
        .unwrap()
        .pid = NamespaceMode::Pod as i32;
    let id = api.run_container(&sandbox, &pod, &c).await.unwrap();
    let (code, out) = api
        .sh(
            &id,
            "cat /proc/1/cmdline | tr '\\0' ' '; echo; cat /proc/1/uid_map; \
             cat /proc/sys/net/ipv4/ping_group_range; echo y > /data/y && stat -c %u /data/y",
        )
        .await;
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("pause"), "PID 1 is the pause: {out}");
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["0", &base.to_string(), &L.to_string()],
        "the pause is in the pod's user namespace: {out}"
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["0", "65535"],
        "{out}"
    );
    assert_eq!(lines[3], "0", "{out}");
    api.stop_pod(&sandbox).await.unwrap();
    api.remove_pod(&sandbox).await.unwrap();
    node.teardown().await;
}
