//! ferrolet-cri's RuntimeService end to end (issue #5 acceptance): the real binary on a private
//! containerd, runc and the Debian CNI plugins, one node (namespace, network, dirs) per test,
//! and the pod leak checks after every teardown.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};

use ferrolet_integration::cri::{poll, reassemble};
use ferrolet_integration::leak::LeakChecker;
use ferrolet_integration::pods::{
    ContainerBuilder, CriNode, LONG, NodeOptions, http_get, labels, log_file, now_nanos,
};
use ferrolet_proto::cri::{
    ContainerEventType, ContainerFilter, ContainerState, ContainerStateValue, Mount,
    PodSandboxFilter, PodSandboxState, PodSandboxStateValue,
};
use tonic::Code;

const HTTPD_BODY: &str = "ferrolet httpd ok\n";

fn state_is(actual: i32, expected: ContainerState) -> bool {
    actual == expected as i32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_busybox_and_httpd_from_run_to_remove() {
    let node = CriNode::start("lifecycle").await;
    let api = node.api().await;
    let conditions = api.conditions().await.unwrap();
    for kind in ["RuntimeReady", "NetworkReady"] {
        let c = conditions.iter().find(|c| c.r#type == kind);
        assert!(c.is_some_and(|c| c.status), "{kind}: {conditions:?}");
    }
    let busybox = node.pull("busybox").await;
    let httpd = node.pull("httpd").await;
    let host_port = node.host_port(0);
    let pod = node
        .pod("web")
        .label("app", "web")
        .label("tier", "it")
        .annotation("ferrolet.test/note", "hello")
        .port(8080, host_port)
        .dns(&["192.0.2.53"], &["it.example"], &["ndots:2"])
        .build();
    let before_run = now_nanos();
    let pod_id = api.run_pod(&pod).await.unwrap();
    assert_eq!(pod_id.len(), 64, "{pod_id}");

    // PodSandboxStatus
    let response = api.pod_status(&pod_id).await.unwrap();
    let status = response.status.clone().unwrap();
    assert_eq!(status.id, pod_id);
    assert_eq!(status.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(status.metadata, pod.metadata);
    assert_eq!(status.labels, pod.labels);
    assert_eq!(status.annotations, pod.annotations);
    assert!(
        status.created_at >= before_run && status.created_at <= now_nanos(),
        "created_at {} not within the call",
        status.created_at
    );
    let options = status
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.clone())
        .unwrap();
    let asked = pod
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap();
    assert_eq!(
        (options.network, options.pid, options.ipc),
        (asked.network, asked.pid, asked.ipc)
    );
    let ip: Ipv4Addr = status.network.as_ref().unwrap().ip.parse().unwrap();
    assert_eq!(&ip.octets()[..3], &[10, 199, node.net.octet], "{ip}");
    assert_ne!(ip, node.net.gateway);
    assert!(!response.info.is_empty(), "verbose status has info");
    for (key, value) in &response.info {
        serde_json::from_str::<serde_json::Value>(value)
            .unwrap_or_else(|e| panic!("info[{key}] is not JSON ({e}): {value}"));
    }

    // Two containers.
    let data = node.scratch.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("hello.txt"), "from the host\n").unwrap();
    let marker = node.marker(0).to_string();
    let sleeper_config = ContainerBuilder::new("sleeper", &busybox.reference)
        .shell(&format!("trap '' TERM; exec sleep {marker}"))
        .label("role", "client")
        .annotation("ferrolet.test/c", "sleeper")
        .mount(&data, "/data", true)
        .build();
    let server_config = ContainerBuilder::new("server", &httpd.reference)
        .label("role", "server")
        .build();
    let before_create = now_nanos();
    let sleeper = api
        .create_container(&pod_id, &pod, &sleeper_config)
        .await
        .unwrap();
    let created = api.container_status(&sleeper).await.unwrap();
    assert!(
        state_is(created.state, ContainerState::ContainerCreated),
        "{created:?}"
    );
    assert!(created.created_at >= before_create, "{created:?}");
    assert_eq!((created.started_at, created.finished_at), (0, 0));
    api.start_container(&sleeper).await.unwrap();
    let server = api
        .run_container(&pod_id, &pod, &server_config)
        .await
        .unwrap();
    let running = api.container_status(&sleeper).await.unwrap();
    assert!(
        state_is(running.state, ContainerState::ContainerRunning),
        "{running:?}"
    );
    assert!(running.started_at >= running.created_at, "{running:?}");
    assert_eq!(running.finished_at, 0);

    // httpd answers on the pod IP from the host, on localhost from the other container
    // (one network namespace), and through the hostPort mapping.
    let direct = http_get(SocketAddr::from((ip, 8080)), LONG).await;
    assert_eq!(direct.as_deref(), Ok(HTTPD_BODY), "pod IP from the host");
    let local = api
        .exec_ok(&sleeper, &["wget", "-qO-", "http://localhost:8080/"])
        .await;
    assert_eq!(local, HTTPD_BODY, "localhost between containers");
    for host in [Ipv4Addr::LOCALHOST, node.net.gateway] {
        let mapped = http_get(SocketAddr::from((host, host_port)), LONG).await;
        assert_eq!(mapped.as_deref(), Ok(HTTPD_BODY), "hostPort via {host}");
    }

    // The sandbox's files and the bind mount, seen from inside.
    assert_eq!(api.exec_ok(&sleeper, &["hostname"]).await.trim(), "web");
    let resolv = api.exec_ok(&sleeper, &["cat", "/etc/resolv.conf"]).await;
    for want in [
        "nameserver 192.0.2.53",
        "search it.example",
        "options ndots:2",
    ] {
        assert!(
            resolv.lines().any(|l| l.trim() == want),
            "{want:?} in {resolv:?}"
        );
    }
    assert_eq!(
        api.exec_ok(&sleeper, &["cat", "/data/hello.txt"]).await,
        "from the host\n"
    );
    let write = api
        .exec_sync(&sleeper, &["touch", "/data/new"], 30)
        .await
        .unwrap();
    assert_ne!(write.exit_code, 0, "a readonly mount is not writable");
    assert!(!data.join("new").exists());

    // ListPodSandbox and its filters.
    let ids = |pods: Vec<ferrolet_proto::cri::PodSandbox>| -> Vec<String> {
        pods.into_iter().map(|p| p.id).collect()
    };
    let all = api.list_pods(None).await.unwrap();
    let listed = all.iter().find(|p| p.id == pod_id).unwrap();
    assert_eq!(listed.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(listed.metadata, pod.metadata);
    assert_eq!(listed.labels, pod.labels);
    assert_eq!(listed.created_at, status.created_at);
    let by = |id: &str, state: Option<PodSandboxState>, selector: &[(&str, &str)]| {
        Some(PodSandboxFilter {
            id: id.to_string(),
            state: state.map(|s| PodSandboxStateValue { state: s as i32 }),
            label_selector: labels(selector),
        })
    };
    assert_eq!(
        ids(api.list_pods(by(&pod_id, None, &[])).await.unwrap()),
        [pod_id.as_str()]
    );
    assert_eq!(
        ids(api
            .list_pods(by("", Some(PodSandboxState::SandboxReady), &[]))
            .await
            .unwrap()),
        [pod_id.as_str()]
    );
    assert!(
        ids(api
            .list_pods(by("", Some(PodSandboxState::SandboxNotready), &[]))
            .await
            .unwrap())
        .is_empty()
    );
    assert_eq!(
        ids(api
            .list_pods(by("", None, &[("app", "web"), ("tier", "it")]))
            .await
            .unwrap()),
        [pod_id.as_str()]
    );
    assert!(
        ids(api
            .list_pods(by("", None, &[("app", "other")]))
            .await
            .unwrap())
        .is_empty()
    );

    // ListContainers and its filters.
    let cids = |list: Vec<ferrolet_proto::cri::Container>| -> BTreeSet<String> {
        list.into_iter().map(|c| c.id).collect()
    };
    let both = BTreeSet::from([sleeper.clone(), server.clone()]);
    let cfilter =
        |id: &str, pod: &str, state: Option<ContainerState>, selector: &[(&str, &str)]| {
            Some(ContainerFilter {
                id: id.to_string(),
                pod_sandbox_id: pod.to_string(),
                state: state.map(|s| ContainerStateValue { state: s as i32 }),
                label_selector: labels(selector),
            })
        };
    assert_eq!(cids(api.list_containers(None).await.unwrap()), both);
    assert_eq!(
        cids(
            api.list_containers(cfilter("", &pod_id, None, &[]))
                .await
                .unwrap()
        ),
        both
    );
    assert_eq!(
        cids(
            api.list_containers(cfilter(&sleeper, "", None, &[]))
                .await
                .unwrap()
        ),
        BTreeSet::from([sleeper.clone()])
    );
    assert_eq!(
        cids(
            api.list_containers(cfilter("", "", Some(ContainerState::ContainerRunning), &[]))
                .await
                .unwrap()
        ),
        both
    );
    assert!(
        cids(
            api.list_containers(cfilter("", "", Some(ContainerState::ContainerExited), &[]))
                .await
                .unwrap()
        )
        .is_empty()
    );
    assert_eq!(
        cids(
            api.list_containers(cfilter("", "", None, &[("role", "server")]))
                .await
                .unwrap()
        ),
        BTreeSet::from([server.clone()])
    );
    let listed = api
        .list_containers(cfilter(&server, "", None, &[]))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(listed.pod_sandbox_id, pod_id);
    assert_eq!(listed.metadata, server_config.metadata);
    assert_eq!(listed.labels, server_config.labels);
    // ListContainers' image_ref: the image id (containerd's CRI) or the repo digest.
    assert!(
        listed.image_ref == httpd.id || listed.image_ref == httpd.repo_digest,
        "{}",
        listed.image_ref
    );

    // ContainerStatus fields.
    let s = api.container_status(&sleeper).await.unwrap();
    assert_eq!(s.id, sleeper);
    assert_eq!(s.metadata, sleeper_config.metadata);
    assert_eq!(
        s.image.as_ref().map(|i| i.image.as_str()),
        Some(busybox.reference.as_str())
    );
    assert_eq!(s.image_ref, busybox.repo_digest);
    assert!(
        s.image_id.is_empty() || s.image_id == busybox.id,
        "{}",
        s.image_id
    );
    assert_eq!(s.labels, sleeper_config.labels);
    assert_eq!(s.annotations, sleeper_config.annotations);
    let log_path = log_file(&pod, "sleeper.log");
    assert_eq!(s.log_path, log_path.display().to_string());
    assert!(
        log_path.is_file(),
        "the log file exists once the container runs"
    );
    let mount = s
        .mounts
        .iter()
        .find(|m| m.container_path == "/data")
        .unwrap_or_else(|| panic!("/data not in {:?}", s.mounts));
    assert_eq!(
        Mount {
            container_path: mount.container_path.clone(),
            host_path: mount.host_path.clone(),
            readonly: mount.readonly,
            ..Default::default()
        },
        Mount {
            container_path: "/data".into(),
            host_path: data.display().to_string(),
            readonly: true,
            ..Default::default()
        }
    );

    // StopContainer: the sleeper ignores SIGTERM, so the grace period runs out and SIGKILL
    // ends it. Stopping and removing twice is fine.
    api.stop_container(&sleeper, 2).await.unwrap();
    let stopped = api.container_status(&sleeper).await.unwrap();
    assert!(
        state_is(stopped.state, ContainerState::ContainerExited),
        "{stopped:?}"
    );
    assert_eq!((stopped.exit_code, stopped.reason.as_str()), (137, "Error"));
    assert!(stopped.finished_at >= stopped.started_at, "{stopped:?}");
    api.stop_container(&sleeper, 2).await.unwrap();
    api.remove_container(&sleeper).await.unwrap();
    api.remove_container(&sleeper).await.unwrap();
    let gone = api.container_status(&sleeper).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone}");
    assert_eq!(
        cids(
            api.list_containers(cfilter("", &pod_id, None, &[]))
                .await
                .unwrap()
        ),
        BTreeSet::from([server.clone()])
    );

    // StopPodSandbox stops httpd and takes the network down; twice is fine.
    api.stop_pod(&pod_id).await.unwrap();
    let status = api.pod_status(&pod_id).await.unwrap().status.unwrap();
    assert_eq!(status.state, PodSandboxState::SandboxNotready as i32);
    let server_status = api.container_status(&server).await.unwrap();
    assert!(
        state_is(server_status.state, ContainerState::ContainerExited),
        "{server_status:?}"
    );
    LeakChecker::new()
        .bridge(&node.net.bridge)
        .ipam_dir(&node.net.ipam_dir)
        .cni_cache_dir(&node.net.cache_dir)
        .netns_dir(&node.net.netns_dir)
        .assert_clean()
        .await;
    api.stop_pod(&pod_id).await.unwrap();

    // RemovePodSandbox removes its containers too; twice is fine.
    api.remove_pod(&pod_id).await.unwrap();
    api.remove_pod(&pod_id).await.unwrap();
    let gone = api.pod_status(&pod_id).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone}");
    let gone = api.container_status(&server).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone}");
    assert!(api.list_pods(None).await.unwrap().is_empty());
    assert!(api.list_containers(None).await.unwrap().is_empty());
    node.teardown().await;
}

/// The combinations Kubernetes defines: command replaces ENTRYPOINT (and drops CMD), args
/// replace CMD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entrypoint_cmd_env_and_workdir_merge_with_the_image() {
    let node = CriNode::start("merge").await;
    let api = node.api().await;
    // entry:1: ENTRYPOINT ["/bin/echo","entry"], CMD ["default-arg"], WORKDIR /work,
    // ENV GREETING=hello FERROLET_IMAGE=entry.
    let entry = node.pull("entry").await;
    let pod = node.pod("merge").build();
    let pod_id = api.run_pod(&pod).await.unwrap();

    let cases: [(&str, &[&str], &[&str], &str); 4] = [
        ("image-defaults", &[], &[], "entry default-arg"),
        ("args-only", &[], &["one", "two"], "entry one two"),
        ("command-only", &["/bin/echo", "cmd"], &[], "cmd"),
        (
            "command-and-args",
            &["/bin/echo", "cmd"],
            &["arg"],
            "cmd arg",
        ),
    ];
    for (name, command, args, expected) in cases {
        // Kubelets name the image by the id PullImage returned.
        let config = ContainerBuilder::new(name, &entry.id)
            .command(command)
            .args(args)
            .build();
        let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
        let status = api.wait_exited(&id, LONG).await;
        assert_eq!(
            (status.exit_code, status.reason.as_str()),
            (0, "Completed"),
            "{name}"
        );
        let log = log_file(&pod, &format!("{name}.log"));
        let lines = ferrolet_integration::pods::wait_log_line(&log, "stdout", expected).await;
        assert_eq!(
            reassemble(&lines, "stdout"),
            format!("{expected}\n"),
            "{name}"
        );
    }

    // Env: the config's value wins over the image's, image-only and config-only ones are there.
    let marker = node.marker(0).to_string();
    let env_config = ContainerBuilder::new("env", &entry.reference)
        .command(&["sleep", &marker])
        .env("GREETING", "bye")
        .env("EXTRA", "1")
        .build();
    let env_id = api.run_container(&pod_id, &pod, &env_config).await.unwrap();
    let env = api.exec_ok(&env_id, &["env"]).await;
    let vars: Vec<&str> = env.lines().collect();
    for want in ["GREETING=bye", "EXTRA=1", "FERROLET_IMAGE=entry"] {
        assert!(vars.contains(&want), "{want} in {vars:?}");
    }
    assert!(!vars.contains(&"GREETING=hello"), "{vars:?}");
    assert_eq!(
        vars.iter().filter(|v| v.starts_with("GREETING=")).count(),
        1
    );
    assert_eq!(
        vars.iter().filter(|v| v.starts_with("PATH=")).count(),
        1,
        "{vars:?}"
    );
    assert_eq!(
        api.exec_ok(&env_id, &["pwd"]).await,
        "/work\n",
        "the image's WORKDIR"
    );

    // working_dir overrides WORKDIR, and need not exist in the image.
    let marker = node.marker(1).to_string();
    let wd_config = ContainerBuilder::new("workdir", &entry.reference)
        .command(&["sleep", &marker])
        .working_dir("/srv/app")
        .build();
    let wd_id = api.run_container(&pod_id, &pod, &wd_config).await.unwrap();
    assert_eq!(api.exec_ok(&wd_id, &["pwd"]).await, "/srv/app\n");

    // The same, seen by the container's own process in its log.
    let shell_config = ContainerBuilder::new("shell", &entry.reference)
        .shell("echo $GREETING-$FERROLET_IMAGE; pwd")
        .env("GREETING", "bye")
        .build();
    let shell_id = api
        .run_container(&pod_id, &pod, &shell_config)
        .await
        .unwrap();
    api.wait_exited(&shell_id, LONG).await;
    let lines =
        ferrolet_integration::pods::wait_log_line(&log_file(&pod, "shell.log"), "stdout", "/work")
            .await;
    assert_eq!(reassemble(&lines, "stdout"), "bye-entry\n/work\n");
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_and_groups_come_from_the_image_or_the_security_context() {
    let node = CriNode::start("users").await;
    let api = node.api().await;
    // user:1: USER app, with app:x:1000:1000 in /etc/passwd and app:x:1000 in /etc/group.
    let user = node.pull("user").await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("users").build();
    let pod_id = api.run_pod(&pod).await.unwrap();

    type Tweak = fn(ContainerBuilder) -> ContainerBuilder;
    let cases: [(&str, &str, Tweak, &str, &str); 6] = [
        ("image-user", &user.reference, |c| c, "1000", "1000"),
        ("busybox-root", &busybox.reference, |c| c, "0", "0"),
        ("uid-0", &user.reference, |c| c.run_as_user(0), "0", "0"),
        // A uid without a passwd entry gets group 0.
        (
            "uid-1234",
            &user.reference,
            |c| c.run_as_user(1234),
            "1234",
            "0",
        ),
        (
            "nobody",
            &user.reference,
            |c| c.run_as_username("nobody"),
            "65534",
            "65534",
        ),
        (
            "uid-and-gid",
            &user.reference,
            |c| c.run_as_user(1000).run_as_group(4321),
            "1000",
            "4321",
        ),
    ];
    for (k, (name, image, tweak, uid, gid)) in cases.into_iter().enumerate() {
        let marker = node.marker(k as u32).to_string();
        let config = tweak(ContainerBuilder::new(name, image).command(&["sleep", &marker])).build();
        let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
        assert_eq!(
            api.exec_ok(&id, &["id", "-u"]).await.trim(),
            uid,
            "{name}: uid"
        );
        assert_eq!(
            api.exec_ok(&id, &["id", "-g"]).await.trim(),
            gid,
            "{name}: gid"
        );
        if name == "image-user" {
            assert_eq!(api.exec_ok(&id, &["id", "-un"]).await.trim(), "app");
        }
    }

    // Supplemental groups join the process's groups.
    let marker = node.marker(50).to_string();
    let config = ContainerBuilder::new("groups", &user.reference)
        .command(&["sleep", &marker])
        .supplemental_groups(&[555])
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let groups = api.exec_ok(&id, &["id", "-G"]).await;
    let groups: Vec<&str> = groups.split_whitespace().collect();
    assert!(
        groups.contains(&"555") && groups.contains(&"1000"),
        "{groups:?}"
    );

    // The container's own process, in its log.
    let config = ContainerBuilder::new("logged", &user.reference)
        .shell("id -u; id -g")
        .run_as_user(1234)
        .run_as_group(4321)
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    api.wait_exited(&id, LONG).await;
    let lines =
        ferrolet_integration::pods::wait_log_line(&log_file(&pod, "logged.log"), "stdout", "4321")
            .await;
    assert_eq!(reassemble(&lines, "stdout"), "1234\n4321\n");
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_reasons_oom_kills_and_the_image_stop_signal() {
    let node = CriNode::start("exits").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let entry = node.pull("entry").await;
    let pod = node.pod("exits").build();
    let pod_id = api.run_pod(&pod).await.unwrap();

    let failing = ContainerBuilder::new("exit3", &busybox.reference)
        .shell("exit 3")
        .build();
    let id = api.run_container(&pod_id, &pod, &failing).await.unwrap();
    let s = api.wait_exited(&id, LONG).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (3, "Error"), "{s:?}");
    // Not finished_at >= started_at: a process this short may exit before the start call
    // takes its timestamp (containerd's CRI reports exactly that).
    assert!(s.started_at > 0 && s.finished_at >= s.created_at, "{s:?}");

    let ok = ContainerBuilder::new("exit0", &busybox.reference)
        .command(&["true"])
        .build();
    let id = api.run_container(&pod_id, &pod, &ok).await.unwrap();
    let s = api.wait_exited(&id, LONG).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (0, "Completed"), "{s:?}");

    // tail keeps everything after the last newline, and /dev/zero has none: it grows until
    // the 16 MiB limit kills it.
    let hog = ContainerBuilder::new("oom", &busybox.reference)
        .shell("head -c 1000m /dev/zero | tail")
        .memory_limit(16 << 20)
        .build();
    let id = api.run_container(&pod_id, &pod, &hog).await.unwrap();
    api.wait_exited(&id, LONG).await;
    // With the systemd driver the kill is known from the shim's OOM event alone, which may
    // come after the exit: the reason may turn OOMKilled a moment later (as on containerd).
    let s = poll("the OOM kill in the status", LONG, || async {
        let s = api.container_status(&id).await.map_err(|e| e.to_string())?;
        if s.reason == "OOMKilled" {
            Ok(s)
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    assert_ne!(s.exit_code, 0, "{s:?}");

    // entry:1's STOPSIGNAL is SIGUSR1: StopContainer sends it, the trap exits cleanly.
    let trapper = ContainerBuilder::new("stopsignal", &entry.reference)
        .shell("trap 'echo got-usr1; exit 0' USR1; echo ready; while :; do sleep 0.1; done")
        .build();
    let id = api.run_container(&pod_id, &pod, &trapper).await.unwrap();
    let log = log_file(&pod, "stopsignal.log");
    ferrolet_integration::pods::wait_log_line(&log, "stdout", "ready").await;
    api.stop_container(&id, 30).await.unwrap();
    let s = api.container_status(&id).await.unwrap();
    assert_eq!((s.exit_code, s.reason.as_str()), (0, "Completed"), "{s:?}");
    ferrolet_integration::pods::wait_log_line(&log, "stdout", "got-usr1").await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_sync_returns_output_and_exit_code_and_kills_on_timeout() {
    let node = CriNode::start("exec").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("exec").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let marker = node.marker(0).to_string();
    let config = ContainerBuilder::new("target", &busybox.reference)
        .command(&["sleep", &marker])
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();

    let r = api
        .exec_sync(&id, &["sh", "-c", "echo out; echo err >&2; exit 5"], 30)
        .await
        .unwrap();
    assert_eq!(
        (r.stdout.as_slice(), r.stderr.as_slice(), r.exit_code),
        (&b"out\n"[..], &b"err\n"[..], 5)
    );

    let r = api
        .exec_sync(
            &id,
            &["sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' x"],
            60,
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.stdout.len(), 1_000_000);
    assert!(r.stdout.iter().all(|b| *b == b'x'));

    let missing = api.exec_sync(&id, &["/no/such/binary"], 30).await;
    assert!(
        !matches!(&missing, Ok(r) if r.exit_code == 0),
        "a missing binary cannot succeed: {missing:?}"
    );

    // The timeout: the call fails and the exec'd process is killed.
    let sleeper = node.marker(1).to_string();
    let timed_out = api.exec_sync(&id, &["sleep", &sleeper], 1).await;
    assert!(timed_out.is_err(), "exec past its timeout: {timed_out:?}");
    println!("timeout: {}", timed_out.unwrap_err());
    let cmdline = format!("sleep {sleeper}");
    poll("the timed-out exec process to be gone", LONG, || async {
        let pids = ferrolet_integration::pods::pids_with_cmdline(&cmdline);
        if pids.is_empty() {
            Ok(())
        } else {
            Err(format!("pids {pids:?}"))
        }
    })
    .await;
    // The container itself is unharmed.
    assert_eq!(api.exec_ok(&id, &["echo", "alive"]).await, "alive\n");

    // Exec in a container that no longer runs is refused.
    api.stop_container(&id, 0).await.unwrap();
    let refused = api.exec_sync(&id, &["true"], 10).await;
    assert!(refused.is_err(), "exec in an exited container: {refused:?}");
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_names_unknown_ids_and_malformed_configs_are_refused() {
    let node = CriNode::start("errors").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("dup").build();
    let pod_id = api.run_pod(&pod).await.unwrap();

    // Same name, namespace, uid and attempt: AlreadyExists; another attempt is another pod.
    let err = api.run_pod(&pod).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err}");
    let retry = node.pod("dup").attempt(1).build();
    let retry_id = api.run_pod(&retry).await.unwrap();
    assert_ne!(retry_id, pod_id);
    api.stop_pod(&retry_id).await.unwrap();
    api.remove_pod(&retry_id).await.unwrap();
    // Once removed, the name is free again.
    let again = api.run_pod(&retry).await.unwrap();
    api.stop_pod(&again).await.unwrap();
    api.remove_pod(&again).await.unwrap();

    // The default runtime handler by name works; an unknown one is refused.
    let runc_pod = node.pod("runc").build();
    let runc_id = api.run_pod_with_handler(&runc_pod, "runc").await.unwrap();
    let status = api.pod_status(&runc_id).await.unwrap().status.unwrap();
    assert_eq!(status.runtime_handler, "runc");
    api.stop_pod(&runc_id).await.unwrap();
    api.remove_pod(&runc_id).await.unwrap();
    let err = api
        .run_pod_with_handler(&node.pod("bad-handler").build(), "no-such-handler")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");

    // Malformed sandbox configs.
    let mut client = api.client();
    let err = client
        .run_pod_sandbox(ferrolet_proto::cri::RunPodSandboxRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "no config: {err}");
    let mut no_metadata = node.pod("nometa").build();
    no_metadata.metadata = None;
    let err = api.run_pod(&no_metadata).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "no metadata: {err}");

    // Containers: duplicate names, malformed configs, unknown images and pods.
    let marker = node.marker(0).to_string();
    let config = ContainerBuilder::new("one", &busybox.reference)
        .command(&["sleep", &marker])
        .build();
    let cid = api.create_container(&pod_id, &pod, &config).await.unwrap();
    let err = api
        .create_container(&pod_id, &pod, &config)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err}");
    let err = api
        .create_container(
            &pod_id,
            &pod,
            &ContainerBuilder::new("noimage", "").without_image().build(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "no image: {err}");
    let err = api
        .create_container(
            &pod_id,
            &pod,
            &ContainerBuilder::new("emptyimage", "").build(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "empty image: {err}");
    let err = api
        .create_container(
            &pod_id,
            &pod,
            &ContainerBuilder::new("nometa", &busybox.reference)
                .without_metadata()
                .build(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "no metadata: {err}");
    let err = api
        .client()
        .create_container(ferrolet_proto::cri::CreateContainerRequest {
            pod_sandbox_id: pod_id.clone(),
            config: None,
            sandbox_config: Some(pod.clone()),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "no config: {err}");
    let err = api
        .create_container(
            &pod_id,
            &pod,
            &ContainerBuilder::new("unknownimage", "ferrolet.local/none:1").build(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "unknown image: {err}");
    let err = api
        .create_container(
            &"f".repeat(64),
            &pod,
            &ContainerBuilder::new("x", &busybox.reference).build(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "unknown pod: {err}");

    // An image with neither ENTRYPOINT nor CMD needs a command.
    let layout =
        ferrolet_integration::pods::image_without_command(&node.scratch.path().join("nocmd"));
    node.import(&layout, "ferrolet.local/it/nocmd:1").await;
    let err = api
        .create_container(
            &pod_id,
            &pod,
            &ContainerBuilder::new("nocmd", "ferrolet.local/it/nocmd:1").build(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "no command: {err}");
    let with_command = ContainerBuilder::new("nocmd", "ferrolet.local/it/nocmd:1")
        .command(&["true"])
        .build();
    let ok = api
        .run_container(&pod_id, &pod, &with_command)
        .await
        .unwrap();
    assert_eq!(api.wait_exited(&ok, LONG).await.exit_code, 0);

    // Starting twice is refused.
    api.start_container(&cid).await.unwrap();
    assert!(api.start_container(&cid).await.is_err(), "second start");

    // Unknown ids.
    let unknown = "0".repeat(64);
    let code = |r: Result<(), tonic::Status>| r.map_err(|e| e.code()).err();
    assert_eq!(
        code(api.pod_status(&unknown).await.map(drop)),
        Some(Code::NotFound)
    );
    assert_eq!(
        code(api.container_status(&unknown).await.map(drop)),
        Some(Code::NotFound)
    );
    assert_eq!(
        code(api.start_container(&unknown).await),
        Some(Code::NotFound)
    );
    assert_eq!(
        code(api.container_stats(&unknown).await.map(drop)),
        Some(Code::NotFound)
    );
    assert_eq!(
        code(api.exec_sync(&unknown, &["true"], 5).await.map(drop)),
        Some(Code::NotFound)
    );
    assert_eq!(code(api.reopen_log(&unknown).await), Some(Code::NotFound));
    // Removing what is not there is not an error (CRI).
    api.remove_container(&unknown).await.unwrap();
    api.remove_pod(&unknown).await.unwrap();
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_agree_with_the_cgroup_and_resources_update() {
    use ferrolet_integration::cgroups;
    use ferrolet_integration::pods::{PodCgroup, pids_with_cmdline};
    let cgroup = PodCgroup::new("stats");
    let node = CriNode::start("stats").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("stats").cgroup_parent(&cgroup.path).build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    // 2 MB into the writable layer, 8 MB held in a shell variable, then idle.
    let marker = node.marker(0).to_string();
    let script = format!(
        "head -c 2000000 /dev/zero > /written; x=$(head -c 8000000 /dev/zero | tr '\\0' a); \
         echo ready; sleep {marker}; echo ${{#x}}"
    );
    let config = ContainerBuilder::new("busy", &busybox.reference)
        .shell(&script)
        .label("stats", "yes")
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    ferrolet_integration::pods::wait_log_line(&log_file(&pod, "busy.log"), "stdout", "ready").await;

    let sleep_pid = poll("the container's sleep on the host", LONG, || async {
        let pids = pids_with_cmdline(&format!("sleep {marker}"));
        pids.first().copied().ok_or_else(|| "none yet".to_string())
    })
    .await;
    let memory_cg = cgroups::of_process(sleep_pid, "memory").unwrap();
    let cpu_cg = cgroups::of_process(sleep_pid, "cpuacct").unwrap();
    let shares_cg = cgroups::of_process(sleep_pid, "cpu").unwrap();
    let cpu_before = cgroups::cpu_usage_ns(&cpu_cg).unwrap();

    let stats = api.container_stats(&id).await.unwrap();
    let attrs = stats.attributes.clone().unwrap();
    assert_eq!(attrs.id, id);
    assert_eq!(attrs.metadata, config.metadata);
    assert_eq!(attrs.labels, config.labels);
    let cpu = stats
        .cpu
        .as_ref()
        .and_then(|c| c.usage_core_nano_seconds.as_ref())
        .map(|v| v.value)
        .unwrap();
    let working_set = stats
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes.as_ref())
        .map(|v| v.value)
        .unwrap();
    let cpu_after = cgroups::cpu_usage_ns(&cpu_cg).unwrap();
    let usage = cgroups::memory_usage(&memory_cg).unwrap();
    let inactive = cgroups::inactive_file(&memory_cg).unwrap();
    println!(
        "cpu {cpu} (cgroup {cpu_before}..{cpu_after}), working set {working_set} (cgroup usage \
         {usage} - inactive {inactive})"
    );
    assert!(
        cpu > 0 && cpu <= cpu_after && cpu >= cpu_before / 2,
        "cpu {cpu}"
    );
    assert!(
        working_set >= 8_000_000,
        "the 8 MB variable is in the working set: {working_set}"
    );
    let expected = usage.saturating_sub(inactive);
    let tolerance = (expected / 4).max(4 << 20);
    assert!(
        working_set.abs_diff(expected) <= tolerance,
        "working set {working_set} vs the cgroup's {expected}"
    );
    // Snapshot usage may be sampled in the background (containerd's CRI does so every 10 s).
    let writable = poll("the writable layer's usage", LONG, || async {
        let stats = api.container_stats(&id).await.map_err(|e| e.to_string())?;
        let used = stats
            .writable_layer
            .and_then(|w| w.used_bytes)
            .map(|v| v.value);
        match used {
            Some(bytes) if bytes >= 2_000_000 => Ok(bytes),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    println!("writable layer {writable}");

    let mut client = api.client();
    let list = |filter: ferrolet_proto::cri::ContainerStatsFilter| {
        let mut client = client.clone();
        async move {
            client
                .list_container_stats(ferrolet_proto::cri::ListContainerStatsRequest {
                    filter: Some(filter),
                })
                .await
                .unwrap()
                .into_inner()
                .stats
                .into_iter()
                .filter_map(|s| s.attributes.map(|a| a.id))
                .collect::<Vec<_>>()
        }
    };
    let by_id = ferrolet_proto::cri::ContainerStatsFilter {
        id: id.clone(),
        ..Default::default()
    };
    let by_pod = ferrolet_proto::cri::ContainerStatsFilter {
        pod_sandbox_id: pod_id.clone(),
        ..Default::default()
    };
    let by_label = ferrolet_proto::cri::ContainerStatsFilter {
        label_selector: labels(&[("stats", "yes")]),
        ..Default::default()
    };
    assert_eq!(list(by_id).await, [id.as_str()]);
    assert_eq!(
        list(by_pod).await,
        [id.as_str()],
        "the pause container is not a container"
    );
    assert_eq!(list(by_label).await, [id.as_str()]);

    let pod_stats = api.pod_stats(&pod_id).await.unwrap();
    assert_eq!(
        pod_stats.attributes.as_ref().map(|a| a.id.as_str()),
        Some(pod_id.as_str())
    );
    let linux = pod_stats.linux.unwrap();
    let pod_cpu = linux
        .cpu
        .and_then(|c| c.usage_core_nano_seconds)
        .map(|v| v.value);
    assert!(pod_cpu.is_some_and(|c| c > 0), "{pod_cpu:?}");
    let pod_ws = linux
        .memory
        .and_then(|m| m.working_set_bytes)
        .map(|v| v.value);
    assert!(pod_ws.is_some_and(|w| w >= 8_000_000), "{pod_ws:?}");
    let in_pod: Vec<String> = linux
        .containers
        .iter()
        .filter_map(|c| c.attributes.as_ref().map(|a| a.id.clone()))
        .collect();
    assert_eq!(in_pod, [id.as_str()]);
    let all_pods = client
        .list_pod_sandbox_stats(ferrolet_proto::cri::ListPodSandboxStatsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .stats;
    assert!(
        all_pods
            .iter()
            .any(|s| s.attributes.as_ref().is_some_and(|a| a.id == pod_id))
    );

    // UpdateContainerResources reaches the cgroup and the status.
    let resources = ferrolet_proto::cri::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        cpu_shares: 512,
        ..Default::default()
    };
    client
        .update_container_resources(ferrolet_proto::cri::UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(resources),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(cgroups::memory_limit(&memory_cg), Some(64 << 20));
    assert_eq!(
        cgroups::cpu_weight(&shares_cg),
        cgroups::weight_of_shares(512)
    );
    assert!(
        memory_cg.starts_with(&cgroup.path),
        "{memory_cg} is under the pod's cgroup parent"
    );
    let s = api.container_status(&id).await.unwrap();
    let reported = s.resources.and_then(|r| r.linux).unwrap_or_default();
    assert_eq!(
        (reported.memory_limit_in_bytes, reported.cpu_shares),
        (64 << 20, 512),
        "ContainerStatus reports the new resources"
    );
    // A memory limit below what the container holds: on cgroup v1 the kernel refuses it
    // (runc: "unable to set memory limit … (current usage …)") and the container keeps its
    // limit, record included; on v2 the kernel would OOM-kill instead, which is why the
    // kubelet checks the pod's usage before it asks (Go's doPodResizeAction).
    if !cgroups::v2() {
        let below = ferrolet_proto::cri::LinuxContainerResources {
            memory_limit_in_bytes: 1 << 20,
            ..Default::default()
        };
        let refused = client
            .update_container_resources(ferrolet_proto::cri::UpdateContainerResourcesRequest {
                container_id: id.clone(),
                linux: Some(below),
                ..Default::default()
            })
            .await
            .unwrap_err();
        println!("below usage: {} {}", refused.code(), refused.message());
        assert!(refused.message().contains("memory limit"), "{refused:?}");
        assert_eq!(cgroups::memory_limit(&memory_cg), Some(64 << 20));
        let s = api.container_status(&id).await.unwrap();
        let kept = s.resources.and_then(|r| r.linux).unwrap_or_default();
        assert_eq!(kept.memory_limit_in_bytes, 64 << 20, "{kept:?}");
    }
    node.teardown().await;
    drop(cgroup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_events_arrive_in_order_with_the_sandbox_status() {
    let node = CriNode::start("events").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("events").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let mut events = api.events().await.unwrap();

    let marker = node.marker(0).to_string();
    let config = ContainerBuilder::new("watched", &busybox.reference)
        .command(&["sleep", &marker])
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    api.stop_container(&id, 0).await.unwrap();
    api.remove_container(&id).await.unwrap();

    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + LONG;
    while seen
        .last()
        .map(|e: &ferrolet_proto::cri::ContainerEventResponse| e.container_event_type)
        != Some(ContainerEventType::ContainerDeletedEvent as i32)
    {
        let next = tokio::time::timeout_at(deadline, events.message())
            .await
            .unwrap_or_else(|_| panic!("events so far: {seen:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("stream ended; events so far: {seen:?}"));
        if next.container_id == id {
            seen.push(next);
        }
    }
    let kinds: Vec<i32> = seen.iter().map(|e| e.container_event_type).collect();
    assert_eq!(
        kinds,
        [
            ContainerEventType::ContainerCreatedEvent as i32,
            ContainerEventType::ContainerStartedEvent as i32,
            ContainerEventType::ContainerStoppedEvent as i32,
            ContainerEventType::ContainerDeletedEvent as i32,
        ]
    );
    let mut last = 0;
    for e in &seen {
        assert_eq!(
            e.pod_sandbox_status.as_ref().map(|s| s.id.as_str()),
            Some(pod_id.as_str()),
            "{e:?}"
        );
        assert!(e.created_at > 0 && e.created_at >= last, "{e:?}");
        last = e.created_at;
    }
    node.teardown().await;
}

/// A kubelet tearing pods down stops a container while its pod is being stopped too, and the
/// exit follower reaps the same tasks at the same moment. Every call must succeed, and no
/// shim may outlive its pod (containerd 1.6's runc shim leaks when one task is deleted twice
/// at once, and a kill racing the reap sees "ttrpc: closed").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_container_and_its_pod_at_once_succeeds_and_leaks_nothing() {
    let node = CriNode::start("stop-race").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    for round in 0..10u64 {
        let runs = (0..3u64).map(|k| {
            let (api, node, image) = (api.clone(), &node, busybox.reference.clone());
            async move {
                let pod = node.pod(&format!("race-{round}-{k}")).build();
                let pod_id = api.run_pod(&pod).await.unwrap();
                let config = ContainerBuilder::new("idle", &image)
                    .shell("trap 'exit 0' TERM; sleep 1000 & wait")
                    .build();
                let id = api.create_container(&pod_id, &pod, &config).await.unwrap();
                api.start_container(&id).await.unwrap();
                // Stagger the stops over the container's start-up, as kubelets do.
                tokio::time::sleep(std::time::Duration::from_millis(100 * ((round + k) % 4))).await;
                let (stop, stop_pod) =
                    tokio::join!(api.stop_container(&id, 30), api.stop_pod(&pod_id));
                stop.unwrap_or_else(|e| panic!("StopContainer {id} during StopPodSandbox: {e}"));
                stop_pod.unwrap_or_else(|e| panic!("StopPodSandbox {pod_id}: {e}"));
                api.remove_container(&id).await.unwrap();
                api.remove_pod(&pod_id).await.unwrap();
            }
        });
        futures::future::join_all(runs).await;
        node.assert_no_pod_leaks().await;
    }
    node.teardown().await;
}

/// The verbose PodSandboxStatus's info object.
async fn sandbox_info(api: &ferrolet_integration::cri::RuntimeApi, id: &str) -> serde_json::Value {
    let status = api.pod_status(id).await.unwrap();
    serde_json::from_str(status.info.get("info").expect("verbose info")).unwrap()
}

/// Whether `path` is a mount point in this (the host's) mount namespace.
fn mounted(path: &str) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_shares_no_pid_namespace_runs_without_a_pause_process() {
    use ferrolet_proto::cri::NamespaceMode;
    let node = CriNode::start("no-pause").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    // The kubelet's default pod: PID per container, network and IPC shared.
    let pod = node.pod("np").hostname("pinned-host").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let info = sandbox_info(&api, &pod_id).await;
    assert_eq!(info["pid"], 0, "{info}");
    assert_eq!(info["pauseProcess"], false, "{info}");
    let pinned: Vec<String> = ["ipc", "uts"]
        .iter()
        .map(|k| info["pinnedNamespaces"][k].as_str().unwrap().to_string())
        .collect();
    for p in &pinned {
        assert!(mounted(p), "{p} is not pinned");
    }

    let run = |name: &str, k: u32| {
        let marker = node.marker(k).to_string();
        let config = ContainerBuilder::new(name, &busybox.reference)
            .command(&["sleep", &marker])
            .build();
        let (api, pod, pod_id) = (api.clone(), pod.clone(), pod_id.clone());
        async move { api.run_container(&pod_id, &pod, &config).await.unwrap() }
    };
    let (a, b) = (run("a", 0).await, run("b", 1).await);
    let ns = |id: String, kind: &'static str| {
        let api = api.clone();
        async move {
            api.exec_ok(&id, &["readlink", &format!("/proc/self/ns/{kind}")])
                .await
        }
    };
    let host = |kind: &str| {
        std::fs::read_link(format!("/proc/self/ns/{kind}"))
            .unwrap()
            .display()
            .to_string()
            + "\n"
    };
    for kind in ["ipc", "uts", "net"] {
        let (in_a, in_b) = (ns(a.clone(), kind).await, ns(b.clone(), kind).await);
        assert_eq!(in_a, in_b, "{kind}: the pod's containers share it");
        assert_ne!(in_a, host(kind), "{kind}: not the node's");
    }
    assert_ne!(ns(a.clone(), "pid").await, ns(b.clone(), "pid").await);
    assert_eq!(api.exec_ok(&a, &["hostname"]).await, "pinned-host\n");
    // The pod's /dev/shm is one too.
    api.exec_ok(&a, &["sh", "-c", "echo shared > /dev/shm/note"])
        .await;
    assert_eq!(api.exec_ok(&b, &["cat", "/dev/shm/note"]).await, "shared\n");

    // A restarted ferrolet-cri finds the sandbox ready, and a new container joins it.
    node.cri.respawn();
    let api = node.api().await;
    let status = api.pod_status(&pod_id).await.unwrap().status.unwrap();
    assert_eq!(status.state, PodSandboxState::SandboxReady as i32);
    let c = {
        let marker = node.marker(2).to_string();
        let config = ContainerBuilder::new("c", &busybox.reference)
            .command(&["sleep", &marker])
            .build();
        api.run_container(&pod_id, &pod, &config).await.unwrap()
    };
    assert_eq!(ns(c.clone(), "ipc").await, ns(a.clone(), "ipc").await);
    assert_eq!(api.exec_ok(&c, &["hostname"]).await, "pinned-host\n");

    // A shared PID namespace, or sysctls, still get a pause process.
    let shared = node
        .pod("shared-pid")
        .pid_namespace(NamespaceMode::Pod)
        .build();
    let shared_id = api.run_pod(&shared).await.unwrap();
    let with_sysctl = node
        .pod("sysctl")
        .sysctl("net.ipv4.ip_unprivileged_port_start", "80")
        .build();
    let sysctl_id = api.run_pod(&with_sysctl).await.unwrap();
    for id in [&shared_id, &sysctl_id] {
        let info = sandbox_info(&api, id).await;
        assert!(info["pid"].as_u64().unwrap() > 0, "{info}");
        assert_eq!(info["pauseProcess"], true, "{info}");
    }

    // Stop unpins the namespaces; stop and remove are idempotent.
    for _ in 0..2 {
        api.stop_pod(&pod_id).await.unwrap();
    }
    let status = api.pod_status(&pod_id).await.unwrap().status.unwrap();
    assert_eq!(status.state, PodSandboxState::SandboxNotready as i32);
    for p in &pinned {
        assert!(!mounted(p), "{p} is still pinned after StopPodSandbox");
    }
    for id in [&pod_id, &shared_id, &sysctl_id] {
        api.stop_pod(id).await.unwrap();
        api.remove_pod(id).await.unwrap();
        api.remove_pod(id).await.unwrap();
    }
    node.assert_no_pod_leaks().await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_without_a_pause_process_does_not_need_the_sandbox_image() {
    use ferrolet_proto::cri::NamespaceMode;
    // A sandbox image the node cannot pull: nothing listens on the discard port.
    let missing = "127.0.0.1:9/ferrolet/pause:missing";
    let opts = NodeOptions {
        extra_config: format!("sandbox_image = \"{missing}\""),
        ..Default::default()
    };
    let node = CriNode::start_with("no-pause-image", opts).await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;

    // The kubelet's default pod runs no pause, so it starts without the image.
    let pod = node.pod("np").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let info = sandbox_info(&api, &pod_id).await;
    assert_eq!(info["pauseProcess"], false, "{info}");
    let marker = node.marker(0).to_string();
    let config = ContainerBuilder::new("a", &busybox.reference)
        .command(&["sleep", &marker])
        .build();
    let a = api.run_container(&pod_id, &pod, &config).await.unwrap();
    assert_eq!(api.exec_ok(&a, &["echo", "up"]).await, "up\n");

    // A pod that shares its PID namespace needs the pause, and says which image it lacks.
    let shared = node
        .pod("shared-pid")
        .pid_namespace(NamespaceMode::Pod)
        .build();
    let err = api.run_pod(&shared).await.unwrap_err();
    assert!(err.message().contains(missing), "{err:?}");
    let status = api.pod_status(&pod_id).await.unwrap().status.unwrap();
    assert_eq!(status.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(api.exec_ok(&a, &["echo", "still"]).await, "still\n");

    api.stop_pod(&pod_id).await.unwrap();
    api.remove_pod(&pod_id).await.unwrap();
    node.assert_no_pod_leaks().await;
    node.teardown().await;
}

/// The state dir the runc shim gives its OCI runtime in a namespace (`--root`).
fn runtime_root(namespace: &str) -> String {
    format!("/run/containerd/runc/{namespace}")
}

/// Whether OCI runtime `binary` knows container `id` under `root`, and its status.
fn runtime_state(binary: &str, root: &str, id: &str) -> Option<String> {
    let out = std::process::Command::new(binary)
        .args(["--root", root, "state", id])
        .output()
        .unwrap_or_else(|e| panic!("running {binary}: {e}"));
    out.status.success().then(|| {
        let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        state["status"].as_str().unwrap_or_default().to_string()
    })
}

/// A handler naming only a runtime type (`[runtimes.go] runtime_type = ...`, as containerd's
/// `runtimes.<name>.runtime_type`) runs its pods under that shim: its records carry it and the
/// verbose statuses say it. A runtime type whose shim containerd cannot find fails the pod
/// with containerd's reason, naming the shim's binary, and leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_picks_its_shim_by_runtime_type() {
    let node = CriNode::start_with(
        "rtype",
        NodeOptions {
            extra_config: "[runtimes.go]\nruntime_type = \"io.containerd.runc.v2\"\n\
                           [runtimes.absent]\nruntime_type = \"io.containerd.absent.v1\"\n"
                .into(),
            ..Default::default()
        },
    )
    .await;
    let api = node.api().await;
    let image = node.pull("busybox").await;

    let err = api
        .run_pod_with_handler(&node.pod("on-absent").build(), "absent")
        .await
        .unwrap_err();
    println!("a runtime type without its shim: {err}");
    assert!(err.message().contains("containerd-shim-absent-v1"), "{err}");
    assert!(api.list_pods(None).await.unwrap().is_empty());
    node.assert_no_pod_leaks().await;

    let pod = node.pod("on-go").build();
    let sandbox = api.run_pod_with_handler(&pod, "go").await.unwrap();
    let c = ContainerBuilder::new("main", &image.reference)
        .shell("exec sleep 300")
        .build();
    let id = api.run_container(&sandbox, &pod, &c).await.unwrap();
    assert_eq!(api.exec_ok(&id, &["echo", "exec-ok"]).await, "exec-ok\n");
    let records = node
        .ns
        .client
        .containers()
        .list(ferrolet_proto::containerd::services::v1::ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(records.len(), 2, "the sandbox's record and the container's");
    for r in &records {
        let name = r.runtime.as_ref().map(|rt| rt.name.as_str());
        assert_eq!(name, Some("io.containerd.runc.v2"), "record {}", r.id);
    }
    let (_, info) = api.container_status_verbose(&id, true).await.unwrap();
    let info: serde_json::Value = serde_json::from_str(&info["info"]).unwrap();
    assert_eq!(info["runtimeType"], "io.containerd.runc.v2");
    let status = api
        .client()
        .pod_sandbox_status(ferrolet_proto::cri::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox.clone(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(&status.info["info"]).unwrap();
    assert_eq!(
        (&info["runtimeHandler"], &info["runtimeType"]),
        (&"go".into(), &"io.containerd.runc.v2".into())
    );
    api.stop_pod(&sandbox).await.unwrap();
    api.remove_pod(&sandbox).await.unwrap();
    node.teardown().await;
}

/// A runtime handler with its own OCI runtime binary (`[runtimes.crun]`, containerd's
/// `runtimes.crun.options.BinaryName`): its pods run under crun (crun knows them, runc does
/// not), the default handler's under runc, exec works in both, and the CRI Status lists it.
/// crun 1.8 refuses a hybrid cgroup host (these VMs): there the pod fails with crun's own
/// reason and leaves nothing behind, and the test node (cgroup v2) runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_with_its_own_binary_runs_its_pods_under_crun() {
    let node = CriNode::start_with(
        "crun",
        NodeOptions {
            extra_config: "[runtimes.crun]\nbinary_name = \"/usr/bin/crun\"\n".into(),
            ..Default::default()
        },
    )
    .await;
    let api = node.api().await;
    let handlers: Vec<String> = api
        .client()
        .status(ferrolet_proto::cri::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner()
        .runtime_handlers
        .into_iter()
        .map(|h| h.name)
        .collect();
    assert_eq!(handlers, ["", "crun"]);
    let image = node.pull("busybox").await;
    let root = runtime_root(&node.ns.name);
    let hybrid = !ferrolet_integration::cgroups::v2()
        && std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
            .is_ok_and(|c| !c.trim().is_empty());
    let mut runs = vec![("on-runc", "")];
    if hybrid {
        let err = api
            .run_pod_with_handler(&node.pod("on-crun").build(), "crun")
            .await
            .unwrap_err();
        println!("crun on this hybrid host: {err}");
        assert!(err.message().contains("hybrid mode not supported"), "{err}");
    } else {
        runs.insert(0, ("on-crun", "crun"));
    }
    let mut ids = Vec::new();
    for (name, handler) in runs {
        let pod = node.pod(name).build();
        let sandbox = api.run_pod_with_handler(&pod, handler).await.unwrap();
        let c = ContainerBuilder::new("main", &image.reference)
            .shell("echo started; exec sleep 300")
            .log_path("main.log")
            .build();
        let id = api.run_container(&sandbox, &pod, &c).await.unwrap();
        assert_eq!(api.exec_ok(&id, &["echo", "exec-ok"]).await, "exec-ok\n");
        ids.push((sandbox, id, handler));
    }
    for (_, id, handler) in &ids {
        let (crun, runc) = (
            runtime_state("crun", &root, id),
            runtime_state("runc", &root, id),
        );
        println!("{handler:?}: crun state {crun:?}, runc state {runc:?}");
        if *handler == "crun" {
            assert_eq!((crun.as_deref(), runc), (Some("running"), None));
        } else {
            assert_eq!((runc.as_deref(), crun), (Some("running"), None));
        }
    }
    for (sandbox, id, _) in &ids {
        api.stop_container(id, 1).await.unwrap();
        let status = api.wait_exited(id, LONG).await;
        // SIGTERM where the pod's pause process is PID 1 (a handler other than the default
        // gets one, and these pods share its PID namespace), SIGKILL where the sleep is PID 1
        // and ignores SIGTERM.
        assert!([137, 143].contains(&status.exit_code), "{status:?}");
        api.remove_container(id).await.unwrap();
        api.stop_pod(sandbox).await.unwrap();
        api.remove_pod(sandbox).await.unwrap();
        assert_eq!(runtime_state("crun", &root, id), None);
    }
    node.teardown().await;
}
