//! Resource exhaustion (issue #33): a container logging as fast as it can stays within its
//! log limits; a container writing 10,000 lines while its output FIFO has no reader (the
//! runtime down) blocks and loses nothing once the reader is back; exec requests past the
//! streaming server's session bound (`max_streaming_sessions`, 128) are refused at once with
//! RESOURCE_EXHAUSTED while the ones within it work, and of 1,000 concurrent exec sessions
//! through the kubelet's secure port the excess is refused with 429 at once, the rest run,
//! and nothing is left behind; a manifest directory of 10,000 files runs its valid pods and
//! reports each bad file once.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::Path;
use std::time::{Duration, Instant};

use ferrolet_integration::cri::poll;
use ferrolet_integration::kubelet::{IDLE, KubeletNode, image, sh};
use ferrolet_integration::pods::{ContainerBuilder, CriNode, LONG, read_log};
use ferrolet_proto::cri::ExecRequest;

/// Total bytes of the files in `dir` whose names start with `prefix`.
fn size_of(dir: &Path, prefix: &str) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_logging_flat_out_stays_within_its_log_limits() {
    const MAX_SIZE: u64 = 1 << 20;
    const MAX_FILES: u64 = 2;
    let node = KubeletNode::start_with_config(
        "log-flood",
        &format!("containerLogMaxSize: \"{MAX_SIZE}\"\ncontainerLogMaxFiles: {MAX_FILES}"),
    )
    .await;
    node.write_manifest(
        "flood.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: flood}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {}\n    command: {}\n",
            image("busybox"),
            sh("yes 0123456789012345678901234567890123456789012345678901234567890123456789")
        ),
    );
    let pod = node.wait_running("flood").await;
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let dir = std::fs::read_dir(node.pod_logs_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains(uid))
        .unwrap()
        .join("main");
    // Watch it for 20 s: the most its log files ever held, and how much it wrote.
    let start = Instant::now();
    let mut most = 0u64;
    while start.elapsed() < Duration::from_secs(20) {
        most = most.max(size_of(&dir, "0.log"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rotated = node.kubelet_log().matches("container log rotated").count();
    println!(
        "most held: {:.1} MiB; rotations: {rotated}; limit {} MiB",
        most as f64 / (1 << 20) as f64,
        (MAX_SIZE * MAX_FILES) >> 20
    );
    assert!(
        rotated >= 5,
        "it logged fast enough to be rotated often: {rotated}"
    );
    // The limit per file, give or take the read that crossed it (ferrolet-cri stops reading
    // a log at its limit until ferrolet has rotated it): without that, ferrolet's 200 ms
    // looks left 40 MB files at this rate, and Go's 10 s period would leave gigabytes.
    assert!(
        most <= MAX_FILES * (MAX_SIZE + (512 << 10)),
        "its logs held {most} bytes against a limit of {}",
        MAX_SIZE * MAX_FILES
    );
    // Still running, still logging.
    let status = node.pod("flood").await.unwrap();
    assert!(status["status"]["containerStatuses"][0]["state"]["running"].is_object());
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_written_while_the_fifo_has_no_reader_waits_and_none_is_lost() {
    let node = CriNode::start("fifo-no-reader").await;
    let image = node.pull("busybox").await;
    let api = node.api().await;
    let pod = node.pod("fifo").build();
    let sandbox = api.run_pod(&pod).await.unwrap();
    let marker = node.scratch.path().join("go");
    let c = ContainerBuilder::new("writer", &image.reference)
        .mount(node.scratch.path(), "/ctl", false)
        .shell(
            "while [ ! -e /ctl/go ]; do sleep 0.1; done; \
             i=0; while [ $i -lt 10000 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done; echo done",
        )
        .log_path("writer.log")
        .build();
    let id = api.run_container(&sandbox, &pod, &c).await.unwrap();
    // The reader goes (ferrolet-cri killed); the container writes ~450 KB into a 64 KiB pipe.
    node.cri.kill();
    std::fs::write(&marker, "").unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    node.cri.respawn();
    let api = node.api().await;
    let status = api.wait_exited(&id, LONG).await;
    assert_eq!(status.exit_code, 0, "{status:?}");
    let lines = read_log(&ferrolet_integration::pods::log_file(&pod, "writer.log"));
    let text: Vec<&str> = lines.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(text.len(), 10_001, "every line arrived once");
    for (i, line) in text.iter().take(10_000).enumerate() {
        assert!(line.starts_with(&format!("line-{i}-")), "line {i}: {line}");
    }
    assert_eq!(text[10_000], "done");
    api.stop_pod(&sandbox).await.unwrap();
    api.remove_pod(&sandbox).await.unwrap();
    node.teardown().await;
}

/// ferrolet-cri's default `max_streaming_sessions`.
const MAX_SESSIONS: usize = 128;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_requests_past_the_session_bound_are_refused_and_the_rest_work() {
    let node = CriNode::start("exec-flood").await;
    let image = node.pull("busybox").await;
    let api = node.api().await;
    let pod = node.pod("execs").build();
    let sandbox = api.run_pod(&pod).await.unwrap();
    let c = ContainerBuilder::new("main", &image.reference)
        .shell(IDLE)
        .build();
    let id = api.run_container(&sandbox, &pod, &c).await.unwrap();
    let request = || ExecRequest {
        container_id: id.clone(),
        cmd: vec!["true".into()],
        stdout: true,
        ..Default::default()
    };
    // As many URLs as sessions are admitted, asked for and not used yet.
    let mut client = api.client();
    let mut urls = Vec::new();
    for _ in 0..MAX_SESSIONS {
        urls.push(client.exec(request()).await.unwrap().into_inner().url);
    }
    let refused = client.exec(request()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused}");
    assert!(
        refused.message().contains("max_streaming_sessions"),
        "{refused}"
    );
    // The node is otherwise fine: other calls work, and so does a URL already handed out.
    assert_eq!(api.exec_ok(&id, &["echo", "still"]).await, "still\n");
    let (host, path) = ferrolet_integration::streaming::split_url(&urls[0]);
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let target = ferrolet_proto::streaming::client::Target::new(
        ferrolet_proto::streaming::client::Transport::Spdy,
        &path,
        host.clone(),
    );
    let opts = ferrolet_proto::streaming::StreamOptions {
        stdin: false,
        stdout: true,
        stderr: false,
        tty: false,
    };
    let exec = ferrolet_proto::streaming::client::exec(stream, &target, opts)
        .await
        .unwrap();
    let (_, _, code) = ferrolet_integration::streaming::finish(exec).await;
    assert_eq!(code, 0);
    // The session that ended gave its place back.
    poll("a place to come free", LONG, || {
        let (mut client, request) = (client.clone(), request());
        async move {
            client
                .exec(request)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await;
    api.stop_pod(&sandbox).await.unwrap();
    api.remove_pod(&sandbox).await.unwrap();
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_dir_of_ten_thousand_files_runs_the_valid_pods_and_reports_each_bad_one_once() {
    let node = KubeletNode::start("manifest-flood").await;
    let dir = node.manifest_dir();
    // Written beside the dir and moved in together, as a config-management run would.
    let staging = node.scratch.path().join("staging");
    std::fs::create_dir(&staging).unwrap();
    for i in 0..9_995 {
        let text = match i % 3 {
            0 => "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: not-a-pod}\n".to_string(),
            1 => format!("{{{{ broken yaml {i}"),
            _ => {
                format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: \"Bad_{i}\"}}\nspec: {{}}\n")
            }
        };
        std::fs::write(staging.join(format!("bad-{i:05}.yaml")), text).unwrap();
    }
    for i in 0..5 {
        std::fs::write(
            staging.join(format!("good-{i}.yaml")),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: good-{i}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {}\n    command: {}\n",
                image("busybox"),
                sh(IDLE)
            ),
        )
        .unwrap();
    }
    for entry in std::fs::read_dir(&staging).unwrap().flatten() {
        std::fs::rename(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    for i in 0..5 {
        node.wait_running(&format!("good-{i}")).await;
    }
    // Several re-lists later (fileCheckFrequency is 1 s), each bad file was reported once.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let log = node.kubelet_log();
    for file in [
        "bad-00000.yaml",
        "bad-00001.yaml",
        "bad-00002.yaml",
        "bad-09994.yaml",
    ] {
        let reports = log.lines().filter(|l| l.contains(file)).count();
        assert_eq!(reports, 1, "{file} reported {reports} times");
    }
    assert!(node.get("/healthz").await.is_ok());
    // They go the same way.
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        std::fs::remove_file(entry.path()).unwrap();
    }
    poll("the good pods to go", LONG, || async {
        let pods = node.pods().await;
        match pods["items"].as_array().map_or(0, Vec::len) {
            0 => Ok(()),
            n => Err(format!("{n} pods")),
        }
    })
    .await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_exec_sessions_through_the_kubelet_end_cleanly() {
    use ferrolet_integration::cluster::{ClusterOptions, Prepared};
    use ferrolet_integration::soak::sessions::{self, Identity};
    use ferrolet_integration::streaming::fd_count;
    use ferrolet_proto::streaming::client::Transport;

    // containerd 1.6's runc shim bogs down with many execs in one container: 128 concurrent
    // `ctr task exec ... sleep 1` took 138 s on the 2-core machine (32 took 1.9 s), so with
    // the default bound of 128 admitted sessions missed their deadline in CI. What is tested
    // is the bound, so the test sets one the shim can serve.
    const BOUND: usize = 32;
    let opts = ClusterOptions {
        kubelet: ferrolet_integration::kubelet::KubeletOptions {
            cri: ferrolet_integration::pods::NodeOptions {
                extra_config: format!("max_streaming_sessions = {BOUND}\n"),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let prepared = Prepared::new("exec-sessions", opts).await;
    prepared.trust_cluster_clients("AlwaysAllow");
    let kubelet = prepared.start_kubelet().await;
    let node = prepared.into_node(kubelet);
    node.run_idle_pod("box").await;
    let (cert, key) = node
        .api
        .client_cert("kube-apiserver-kubelet-client", &["system:masters"])
        .unwrap();
    let identity = Identity::from_pem(&cert, &key).unwrap();
    let serving = std::fs::read(node.node.root_dir().join("pki/kubelet.crt")).unwrap();
    let addr = node.node.secure_addr();
    let (kubelet_pid, cri_pid) = (node.node.kubelet_pid(), node.node.node.cri.pid());
    let idle = (fd_count(kubelet_pid), fd_count(cri_pid));

    let sessions: Vec<_> = (0..1000u64)
        .map(|i| {
            let (identity, serving) = (identity.clone(), serving.clone());
            let transport = if i % 2 == 0 {
                Transport::Spdy
            } else {
                Transport::WebSocket
            };
            tokio::spawn(async move {
                // Long enough for every admitted session to have its turn at the shim.
                let limit = Duration::from_secs(180);
                sessions::exec(
                    addr, &serving, &identity, "box", "main", transport, i, limit,
                )
                .await
            })
        })
        .collect();
    let mut ok = 0;
    let mut refused = std::collections::BTreeMap::<String, usize>::new();
    for s in sessions {
        match s.await.unwrap() {
            Ok(()) => ok += 1,
            Err(e) => *refused.entry(e.chars().take(80).collect()).or_default() += 1,
        }
    }
    println!("1000 exec sessions: {ok} completed, refused: {refused:?}");
    // Those past the runtime's bound were refused at once (429 from the kubelet, with the
    // runtime's reason), none hung until its client gave up, and the admitted ones ran.
    assert!(ok >= BOUND, "{ok} completed; refused: {refused:?}");
    for (why, n) in &refused {
        assert!(
            why.contains("429") || why.contains("too many streaming sessions"),
            "{n} sessions ended with {why:?}"
        );
    }
    // The node is as it was: healthy, its pod running, no exec left in the container, and
    // the daemons' descriptors back near their idle levels.
    assert_eq!(
        node.node
            .get("/healthz")
            .await
            .map(|r| r.status)
            .unwrap_or(0),
        200
    );
    let api = node.node.node.api().await;
    let (_, containers) = node
        .node
        .runtime_objects(
            node.api_pod("box").await.unwrap()["metadata"]["uid"]
                .as_str()
                .unwrap(),
        )
        .await;
    let ps = api.exec_ok(&containers[0].id, &["ps", "-o", "args"]).await;
    assert!(!ps.contains("soak-"), "exec processes left:\n{ps}");
    poll("descriptors back near idle", LONG, || async {
        let now = (fd_count(kubelet_pid), fd_count(cri_pid));
        if now.0 <= idle.0 + 8 && now.1 <= idle.1 + 8 {
            Ok(())
        } else {
            Err(format!(
                "ferrolet {} (idle {}), ferrolet-cri {} (idle {})",
                now.0, idle.0, now.1, idle.1
            ))
        }
    })
    .await;
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gigabyte_of_watch_events_leaves_the_kubelet_bounded_and_working() {
    use ferrolet_integration::apiserver::ApiServerOptions;
    use ferrolet_integration::cluster::{ClusterNode, ClusterOptions, NAMESPACE};

    let node = ClusterNode::start_with(
        "watch-flood",
        ClusterOptions {
            // As a real server: a watch that falls behind is closed, and the client resumes.
            api: ApiServerOptions {
                history_size: 64,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    let first = node.run_idle_pod("big").await;
    let container = first["status"]["containerStatuses"][0]["containerID"].clone();
    let kubelet = node.node.kubelet_pid();
    let rss = move || -> u64 {
        std::fs::read_to_string(format!("/proc/{kubelet}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let before = rss();
    // 4,000 updates of the node's pod, each carrying a 256 KiB annotation (the most the API
    // allows): a gigabyte of MODIFIED events on ferrolet's pod watch.
    const UPDATES: usize = 4000;
    const SIZE: usize = 256 * 1024 - 64;
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let most = sampling.clone();
        tokio::spawn(async move {
            loop {
                most.fetch_max(rss(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut sent = 0usize;
    for i in 0..UPDATES {
        let mut p = node.api_pod("big").await.unwrap();
        let filler: String = std::iter::repeat_n(char::from(b'a' + (i % 26) as u8), SIZE).collect();
        p["metadata"]["annotations"] = serde_json::json!({ "soak/filler": filler });
        sent += SIZE;
        node.api.update("pods", NAMESPACE, "big", p).await.unwrap();
    }
    sampler.abort();
    let most = sampling.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "{} MiB of pod updates; ferrolet RSS {} MiB before, at most {} MiB during; requests by verb {:?}",
        sent >> 20,
        before >> 10,
        most >> 10,
        node.api.request_counts()
    );
    assert!(sent >= 1_000_000_000);
    // It kept none of it: its memory stayed within a small multiple of one object.
    assert!(
        most < before + (200 << 10),
        "RSS went from {before} KiB to {most} KiB"
    );
    // The pod ran on untouched (annotations change nothing that runs), and the node still
    // takes new pods from its watch.
    let now = node.api_pod("big").await.unwrap();
    assert_eq!(
        now["status"]["containerStatuses"][0]["containerID"],
        container
    );
    assert_eq!(now["status"]["containerStatuses"][0]["restartCount"], 0);
    node.run_idle_pod("after").await;
    node.teardown().await;
}
