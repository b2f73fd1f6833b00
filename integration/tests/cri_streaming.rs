//! Exec, Attach and PortForward through ferrolet-cri's streaming server, with the repo's own
//! streaming client (`ferrolet_proto::streaming::client`), every scenario over SPDY/3.1 and
//! over WebSocket: output on the right streams and the exit code, stdin through `cat`, a tty
//! resized, a used token answered 404, a client that leaves mid-exec leaving no process, FIFO
//! or fd behind; attach both ways (output also in the CRI log); 64 MiB from the httpd test
//! image over 4 concurrent forwarded connections, intact, and a refused port reported; an
//! expired token answered 404; an idle session closed after `stream_idle_timeout`, its exec
//! killed. Each test ends with its node's teardown and leak checks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::time::Duration;

use ferrolet_integration::cri::poll;
use ferrolet_integration::pods::{
    ContainerBuilder, CriNode, LONG, NodeOptions, fifos_under, log_file, pids_with_cmdline,
    wait_for_process, wait_log_line,
};
use ferrolet_integration::streaming::{
    BoxIo, Opener, assert_rejected, dial_url, exit_code, fd_count, fd_list, fetch_in_ranges,
    finish, forwarded_connections, pipe_through_cat, read_all, read_until, sha256_hex,
};
use ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient;
use ferrolet_proto::cri::{AttachRequest, ExecRequest, PortForwardRequest};
use ferrolet_proto::streaming::client::{self, Target, Transport};
use ferrolet_proto::streaming::{StreamOptions, TerminalSize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

/// The big file's size and where httpd serves it from (the image's `-h /www`).
const BIG_SIZE: u64 = 64 << 20;
const BIG_PATH: &str = "/www/big";

fn exec_req(id: &str, cmd: &[&str], stdin: bool, tty: bool) -> ExecRequest {
    ExecRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty,
        stdin,
        stdout: true,
        stderr: !tty,
    }
}

fn opts(stdin: bool, tty: bool) -> StreamOptions {
    StreamOptions {
        stdin,
        stdout: true,
        stderr: !tty,
        tty,
    }
}

async fn exec_url(rt: &RuntimeServiceClient<Channel>, req: ExecRequest) -> String {
    rt.clone().exec(req).await.unwrap().into_inner().url
}

/// Exec: the streams, the exit code, the protocol chosen, the used token.
async fn exec_session(
    transport: Transport,
    rt: &RuntimeServiceClient<Channel>,
    req: ExecRequest,
) -> (client::Exec, String) {
    let stream = opts(req.stdin, req.tty);
    let url = exec_url(rt, req).await;
    let (io, target) = dial_url(&url, "", transport).await;
    let e = client::exec(io, &target, stream)
        .await
        .unwrap_or_else(|e| panic!("exec over {transport:?}: {e}"));
    (e, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_over_spdy() {
    exec_scenario(Transport::Spdy, "stream-exec-spdy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_over_websocket() {
    exec_scenario(Transport::WebSocket, "stream-exec-ws").await;
}

async fn exec_scenario(transport: Transport, name: &str) {
    let node = CriNode::start(name).await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod(name).build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let config = ContainerBuilder::new("box", &busybox.reference)
        .shell("sleep 100000")
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let rt = api.client();

    // Output on the right streams, exit code 3, over the newest protocol.
    let script = ["sh", "-c", "echo out; echo err >&2; exit 3"];
    let (e, url) = exec_session(transport, &rt, exec_req(&id, &script, false, false)).await;
    assert_eq!(e.protocol(), "v5.channel.k8s.io");
    assert_eq!(finish(e).await, ("out\n".into(), "err\n".into(), 3));

    // The token was used: 404, as Go's streaming server answers an unknown one.
    let (io, target) = dial_url(&url, "", transport).await;
    assert_rejected(
        client::exec(io, &target, opts(false, false)).await,
        404,
        Some("404 page not found\n"),
    );

    // stdin through cat, to its EOF.
    let (e, _) = exec_session(transport, &rt, exec_req(&id, &["cat"], true, false)).await;
    let data: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    let (out, code) = pipe_through_cat(transport, e, &data).await;
    assert!(
        out == data,
        "cat gave back {} bytes of {}",
        out.len(),
        data.len()
    );
    assert_eq!(code, Some(0));

    // A tty, resized: stty sees the size.
    let tty = ["sh", "-c", "sleep 1; stty size"];
    let (e, _) = exec_session(transport, &rt, exec_req(&id, &tty, false, true)).await;
    assert!(e.stderr.is_none());
    let size = TerminalSize {
        width: 123,
        height: 45,
    };
    e.resize.as_ref().unwrap().send(size).await.unwrap();
    let (out, _, code) = finish(e).await;
    assert_eq!((out.trim(), code), ("45 123", 0), "{out:?}");

    // Validation, as the Go streaming server words it.
    let mut rt_mut = rt.clone();
    let bad = rt_mut
        .exec(ExecRequest {
            stderr: true,
            ..exec_req(&id, &["true"], false, true)
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert_eq!(bad.message(), "tty and stderr cannot both be true");
    let missing = rt_mut
        .exec(exec_req("nonexistent", &["true"], false, false))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);

    // A client that leaves mid-exec: the process is killed, its FIFOs removed, and
    // ferrolet-cri holds no more fds than before the session.
    let pid = node.cri.pid();
    let fds_before = fd_count(pid);
    let listed_before = fd_list(pid);
    let marker = format!("sleep {}", node.marker(1));
    let (e, _) = exec_session(
        transport,
        &rt,
        exec_req(&id, &["sh", "-c", &marker], true, false),
    )
    .await;
    wait_for_process(&marker).await;
    assert!(fd_count(pid) > fds_before, "the session holds no fd?");
    drop(e);
    let exec_dir = node.state().join("containers").join(&id).join("exec");
    poll("the abandoned exec gone", LONG, || async {
        let pids = pids_with_cmdline(&marker);
        let fifos = fifos_under(&exec_dir);
        let fds = fd_count(pid);
        if pids.is_empty() && fifos.is_empty() && fds <= fds_before {
            Ok(())
        } else {
            Err(format!(
                "processes {pids:?}, FIFOs {fifos:?}, {fds} fds (before: {fds_before})\n\
                 before: {listed_before:#?}\nnow: {:#?}",
                fd_list(pid)
            ))
        }
    })
    .await;

    // Clients that leave while their exec starts, at delays across the Tasks.Start call: no
    // process outlives them (a start cancelled half-way once left one running for good).
    let marker = format!("sleep {}", node.marker(2));
    for delay_ms in (0..=48).step_by(4) {
        let (e, _) = exec_session(
            transport,
            &rt,
            exec_req(&id, &["sh", "-c", &marker], false, false),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        drop(e);
    }
    poll("the execs abandoned while starting gone", LONG, || async {
        let pids = pids_with_cmdline(&marker);
        let fifos = fifos_under(&exec_dir);
        if pids.is_empty() && fifos.is_empty() {
            Ok(())
        } else {
            Err(format!("processes {pids:?}, FIFOs {fifos:?}"))
        }
    })
    .await;

    api.stop_container(&id, 0).await.unwrap();
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_over_spdy() {
    attach_scenario(Transport::Spdy, "stream-attach-spdy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_over_websocket() {
    attach_scenario(Transport::WebSocket, "stream-attach-ws").await;
}

/// Attach to a container reading its stdin: what the client writes comes back on its output
/// (and in the CRI log); a second attach after the first detached works the same.
async fn attach_scenario(transport: Transport, name: &str) {
    let node = CriNode::start(name).await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod(name).build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let mut config = ContainerBuilder::new("echo", &busybox.reference)
        .shell("while read l; do echo got:$l; done")
        .build();
    config.stdin = true;
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let mut rt = api.client();

    for word in ["hello", "again"] {
        let url = rt
            .attach(AttachRequest {
                container_id: id.clone(),
                stdin: true,
                tty: false,
                stdout: true,
                stderr: true,
            })
            .await
            .unwrap()
            .into_inner()
            .url;
        let (io, target) = dial_url(&url, "", transport).await;
        let mut a = client::exec(io, &target, opts(true, false))
            .await
            .unwrap_or_else(|e| panic!("attach over {transport:?}: {e}"));
        let mut stdin = a.stdin.take().unwrap();
        let mut stdout = a.stdout.take().unwrap();
        stdin
            .write_all(format!("{word}\n").as_bytes())
            .await
            .unwrap();
        read_until(&mut stdout, &format!("got:{word}\n")).await;
        drop((stdin, stdout, a));
        wait_log_line(
            &log_file(&pod, &config.log_path),
            "stdout",
            &format!("got:{word}"),
        )
        .await;
    }

    // stdin_once, no tty (critest's attach spec): the client's EOF is the container's at
    // once, so a process reading to EOF ends, and with it the attach.
    let mut once = ContainerBuilder::new("once", &busybox.reference)
        .shell("cat")
        .build();
    once.stdin = true;
    once.stdin_once = true;
    let once_id = api.run_container(&pod_id, &pod, &once).await.unwrap();
    let url = rt
        .attach(AttachRequest {
            container_id: once_id.clone(),
            stdin: true,
            tty: false,
            stdout: true,
            stderr: true,
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let (io, target) = dial_url(&url, "", transport).await;
    let mut a = client::exec(io, &target, opts(true, false)).await.unwrap();
    let mut stdin = a.stdin.take().unwrap();
    let stdout = a.stdout.take();
    let send = async {
        stdin.write_all(b"bye\n").await.unwrap();
        stdin.shutdown().await.unwrap();
    };
    let (_, out) = tokio::time::timeout(LONG, async { tokio::join!(send, read_all(stdout)) })
        .await
        .unwrap_or_else(|_| panic!("attach with stdin_once over {transport:?} never ended"));
    assert_eq!(out, "bye\n");

    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_64_mib_over_spdy() {
    port_forward_scenario(Transport::Spdy, "stream-pf-spdy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_64_mib_over_websocket() {
    port_forward_scenario(Transport::WebSocket, "stream-pf-ws").await;
}

/// A PortForward session opener for the pod: a fresh URL each time.
fn opener<'a>(
    rt: &'a RuntimeServiceClient<Channel>,
    pod_id: &'a str,
    transport: Transport,
    port: u16,
) -> Opener<'a> {
    Box::new(move || {
        Box::pin(async move {
            let url = rt
                .clone()
                .port_forward(PortForwardRequest {
                    pod_sandbox_id: pod_id.into(),
                    port: vec![i32::from(port)],
                })
                .await
                .unwrap()
                .into_inner()
                .url;
            dial_url(&url, &format!("?port={port}"), transport).await
        })
    })
}

/// 64 MiB of noise written into httpd's docroot, fetched over 4 forwarded connections at
/// once (a quarter each), matches `sha256sum` inside the container; a port nobody listens
/// on is reported on the error stream.
async fn port_forward_scenario(transport: Transport, name: &str) {
    let node = CriNode::start(name).await;
    let api = node.api().await;
    let httpd = node.pull("httpd").await;
    let pod = node.pod(name).build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let web = ContainerBuilder::new("web", &httpd.reference).build();
    let id = api.run_container(&pod_id, &pod, &web).await.unwrap();
    let rt = api.client();

    let missing = rt
        .clone()
        .port_forward(PortForwardRequest {
            pod_sandbox_id: String::new(),
            port: vec![8080],
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::InvalidArgument);

    let dd = format!("dd if=/dev/urandom of={BIG_PATH} bs=1M count=64 2>/dev/null");
    api.exec_ok(&id, &["sh", "-c", &dd]).await;
    let sum = ["sha256sum", BIG_PATH];
    let (e, _) = exec_session(transport, &rt, exec_req(&id, &sum, false, false)).await;
    let (out, err, code) = finish(e).await;
    assert_eq!(code, 0, "{err}");
    let want = out.split_whitespace().next().unwrap().to_string();

    let open = opener(&rt, &pod_id, transport, 8080);
    let started = std::time::Instant::now();
    let got = fetch_in_ranges(transport, &open, 8080, "/big", BIG_SIZE, 4).await;
    let took = started.elapsed();
    assert_eq!(got.len() as u64, BIG_SIZE);
    assert_eq!(sha256_hex(&got), want, "the file came through altered");
    eprintln!(
        "{transport:?}: 64 MiB over 4 connections in {took:?} ({:.0} MB/s)",
        BIG_SIZE as f64 / 1e6 / took.as_secs_f64()
    );

    // Nothing listens on port 1: the error stream says so.
    let refused = opener(&rt, &pod_id, transport, 1);
    let (mut conns, _forwarder) = forwarded_connections(transport, &refused, 1, 1).await;
    let mut conn = conns.remove(0);
    let mut error = String::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(30),
        conn.error.read_to_string(&mut error),
    )
    .await;
    assert!(error.contains("connection refused"), "{error:?}");
    drop((conn, _forwarder));

    node.teardown().await;
}

/// Go's TTL is a minute and is not configurable: this test waits it out, beside the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_tokens_are_404_on_both_transports() {
    let node = CriNode::start("stream-expiry").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("stream-expiry").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let config = ContainerBuilder::new("box", &busybox.reference)
        .shell("sleep 100000")
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let rt = api.client();

    let mut urls = Vec::new();
    for transport in [Transport::Spdy, Transport::WebSocket] {
        let exec = exec_url(&rt, exec_req(&id, &["true"], false, false)).await;
        let forward = rt
            .clone()
            .port_forward(PortForwardRequest {
                pod_sandbox_id: pod_id.clone(),
                port: vec![8080],
            })
            .await
            .unwrap()
            .into_inner()
            .url;
        urls.push((transport, exec, forward));
    }
    tokio::time::sleep(Duration::from_secs(61)).await;
    for (transport, exec, forward) in urls {
        let (io, target): (BoxIo, Target) = dial_url(&exec, "", transport).await;
        assert_rejected(
            client::exec(io, &target, opts(false, false)).await,
            404,
            Some("404 page not found\n"),
        );
        let (io, target) = dial_url(&forward, "?port=8080", transport).await;
        let refused = match transport {
            Transport::Spdy => client::port_forward_spdy(io, &target).await.map(|_| ()),
            Transport::WebSocket => client::port_forward_websocket(io, &target, &[8080])
                .await
                .map(|_| ()),
        };
        assert_rejected(refused, 404, Some("404 page not found\n"));
    }
    // An expired token is gone: running the command now takes a new URL.
    let (e, _) = exec_session(Transport::Spdy, &rt, exec_req(&id, &["true"], false, false)).await;
    assert_eq!(exit_code(&e.wait().await.unwrap()), 0);

    api.stop_container(&id, 0).await.unwrap();
    node.teardown().await;
}

/// `stream_idle_timeout`: a session with no traffic either way is closed and its exec killed,
/// on both transports; one whose command keeps writing outlives the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_are_closed_after_the_idle_timeout() {
    let node = CriNode::start_with(
        "stream-idle",
        NodeOptions {
            extra_config: "stream_idle_timeout = \"2s\"".into(),
            ..NodeOptions::default()
        },
    )
    .await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("stream-idle").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let config = ContainerBuilder::new("box", &busybox.reference)
        .shell("sleep 100000")
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let rt = api.client();

    for (n, transport) in [Transport::Spdy, Transport::WebSocket]
        .into_iter()
        .enumerate()
    {
        // Output every second for 4 s: twice the timeout, never idle.
        let ticking = ["sh", "-c", "for i in 1 2 3 4; do echo $i; sleep 1; done"];
        let (e, _) = exec_session(transport, &rt, exec_req(&id, &ticking, false, false)).await;
        assert_eq!(
            finish(e).await,
            ("1\n2\n3\n4\n".into(), String::new(), 0),
            "{transport:?}"
        );

        // Silent both ways: closed after 2 s, the process killed.
        let marker = format!("sleep {}", node.marker(10 + n as u32));
        let (mut e, _) = exec_session(
            transport,
            &rt,
            exec_req(&id, &["sh", "-c", &marker], true, false),
        )
        .await;
        wait_for_process(&marker).await;
        let started = std::time::Instant::now();
        let stdout = e.stdout.take();
        let ended = tokio::time::timeout(Duration::from_secs(30), async move {
            let out = read_all(stdout).await;
            let _ = e.wait().await;
            out
        })
        .await
        .unwrap_or_else(|_| panic!("{transport:?}: the idle session still open after 30 s"));
        let took = started.elapsed();
        assert_eq!(ended, "", "{transport:?}");
        assert!(
            took >= Duration::from_millis(1500),
            "{transport:?}: closed after {took:?}, before the timeout"
        );
        poll("the idle exec killed", LONG, || async {
            let pids = pids_with_cmdline(&marker);
            if pids.is_empty() {
                Ok(())
            } else {
                Err(format!("processes {pids:?}"))
            }
        })
        .await;
    }

    api.stop_container(&id, 0).await.unwrap();
    node.teardown().await;
}
