//! Exec, Attach and PortForward through ferrolet-cri's streaming server, with the repo's
//! own streaming client (`ferrolet_proto::streaming::client`, WebSocket: its SPDY client is
//! not there yet): output on the right streams and the exit code, stdin, a tty resized,
//! attach both ways, port-forward to the httpd test image on concurrent connections, a
//! client that leaves mid-exec leaving nothing behind, a used token answered 404.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::time::Duration;

use ferrolet_integration::cri::poll;
use ferrolet_integration::pods::{ContainerBuilder, CriNode, LONG, fifos_under, pids_with_cmdline};
use ferrolet_proto::cri::{AttachRequest, ExecRequest, PortForwardRequest};
use ferrolet_proto::streaming::client::{self, Target, Transport};
use ferrolet_proto::streaming::{CommandResult, StreamOptions, TerminalSize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `http://host:port/path` → (host:port, /path).
fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let i = rest.find('/').unwrap();
    (rest[..i].to_string(), rest[i..].to_string())
}

async fn connect(url: &str, query: &str) -> (TcpStream, Target) {
    let (host, path) = split_url(url);
    let tcp = TcpStream::connect(&host).await.unwrap();
    let target = Target::new(Transport::WebSocket, format!("{path}{query}"), host);
    (tcp, target)
}

fn code(r: &CommandResult) -> i32 {
    match r {
        CommandResult::Exited(c) => *c,
        CommandResult::CommandExited { code, .. } => *code,
        CommandResult::Failed(m) => panic!("failed: {m}"),
    }
}

async fn read_all(r: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>) -> String {
    let mut s = String::new();
    if let Some(mut r) = r {
        r.read_to_string(&mut s).await.unwrap();
    }
    s
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_streams_exit_codes_tty_tokens_and_no_leaks() {
    let node = CriNode::start("stream-exec").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("stream-exec").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let config = ContainerBuilder::new("box", &busybox.reference)
        .shell("sleep 100000")
        .build();
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let mut rt = api.client();

    // Output on the right streams, exit code 3.
    let url = rt
        .exec(exec_req(
            &id,
            &["sh", "-c", "echo out; echo err >&2; exit 3"],
            false,
            false,
        ))
        .await
        .unwrap()
        .into_inner()
        .url;
    let (tcp, target) = connect(&url, "").await;
    let opts = StreamOptions {
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let mut e = client::exec(tcp, &target, opts).await.unwrap();
    let (out, err) = tokio::join!(read_all(e.stdout.take()), read_all(e.stderr.take()));
    assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"));
    assert_eq!(code(&e.wait().await.unwrap()), 3);

    // The token was used: 404, as a reused one always is.
    let (tcp, target) = connect(&url, "").await;
    match client::exec(tcp, &target, opts).await {
        Err(client::ClientError::Rejected { status, body }) => {
            assert_eq!((status, body.as_str()), (404, "404 page not found\n"))
        }
        Err(e) => panic!("expected 404, got {e}"),
        Ok(_) => panic!("expected 404, got a session"),
    }

    // stdin through cat.
    let url = rt
        .exec(exec_req(&id, &["cat"], true, false))
        .await
        .unwrap()
        .into_inner()
        .url;
    let (tcp, target) = connect(&url, "").await;
    let opts = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let mut e = client::exec(tcp, &target, opts).await.unwrap();
    let mut stdin = e.stdin.take().unwrap();
    let data: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    let send = async {
        stdin.write_all(data.as_bytes()).await.unwrap();
        stdin.shutdown().await.unwrap();
    };
    let (_, out, _) = tokio::join!(send, read_all(e.stdout.take()), read_all(e.stderr.take()));
    assert_eq!(out, data);
    assert_eq!(code(&e.wait().await.unwrap()), 0);

    // A tty, resized: stty sees the size.
    let url = rt
        .exec(exec_req(
            &id,
            &["sh", "-c", "sleep 1; stty size"],
            false,
            true,
        ))
        .await
        .unwrap()
        .into_inner()
        .url;
    let (tcp, target) = connect(&url, "").await;
    let opts = StreamOptions {
        stdin: false,
        stdout: true,
        stderr: false,
        tty: true,
    };
    let mut e = client::exec(tcp, &target, opts).await.unwrap();
    e.resize
        .as_ref()
        .unwrap()
        .send(TerminalSize {
            width: 123,
            height: 45,
        })
        .await
        .unwrap();
    let out = read_all(e.stdout.take()).await;
    assert_eq!(out.trim(), "45 123", "{out:?}");
    assert_eq!(code(&e.wait().await.unwrap()), 0);

    // Validation, as the Go streaming server words it.
    let bad = rt
        .exec(ExecRequest {
            stderr: true,
            ..exec_req(&id, &["true"], false, true)
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert_eq!(bad.message(), "tty and stderr cannot both be true");
    let missing = rt
        .exec(exec_req("nonexistent", &["true"], false, false))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);

    // A client that leaves mid-exec: the process is killed, its FIFOs removed.
    let marker = "sleep 4242";
    let url = rt
        .exec(exec_req(&id, &["sh", "-c", marker], false, false))
        .await
        .unwrap()
        .into_inner()
        .url;
    let (tcp, target) = connect(&url, "").await;
    let opts = StreamOptions {
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let e = client::exec(tcp, &target, opts).await.unwrap();
    poll("the exec running", LONG, || async {
        if pids_with_cmdline(marker).is_empty() {
            Err("not yet".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    drop(e);
    let exec_dir = node.state().join("containers").join(&id).join("exec");
    poll("the abandoned exec gone", LONG, || async {
        let pids = pids_with_cmdline(marker);
        let fifos = fifos_under(&exec_dir);
        if pids.is_empty() && fifos.is_empty() {
            Ok(())
        } else {
            Err(format!("{pids:?} {fifos:?}"))
        }
    })
    .await;

    api.stop_container(&id, 0).await.unwrap();
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_both_ways_and_port_forward_to_httpd() {
    let node = CriNode::start("stream-attach").await;
    let api = node.api().await;
    let busybox = node.pull("busybox").await;
    let pod = node.pod("stream-attach").build();
    let pod_id = api.run_pod(&pod).await.unwrap();
    let mut config = ContainerBuilder::new("echo", &busybox.reference)
        .shell("while read l; do echo got:$l; done")
        .build();
    config.stdin = true;
    let id = api.run_container(&pod_id, &pod, &config).await.unwrap();
    let mut rt = api.client();

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
    let (tcp, target) = connect(&url, "").await;
    let opts = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let mut a = client::exec(tcp, &target, opts).await.unwrap();
    let mut stdin = a.stdin.take().unwrap();
    let mut stdout = a.stdout.take().unwrap();
    stdin.write_all(b"hello\n").await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"got:hello\n") {
        let n = tokio::time::timeout(LONG, stdout.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_ne!(
            n,
            0,
            "attach output ended early: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    drop((stdin, stdout, a));

    // Port-forward to httpd on 8080, four sessions at once.
    let httpd = node.pull("httpd").await;
    let web = ContainerBuilder::new("web", &httpd.reference).build();
    api.run_container(&pod_id, &pod, &web).await.unwrap();
    let missing = api
        .client()
        .port_forward(PortForwardRequest {
            pod_sandbox_id: String::new(),
            port: vec![8080],
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::InvalidArgument);
    // httpd listens a moment after its start.
    poll("httpd answering through port-forward", LONG, || async {
        let r = fetch(&api.client(), &pod_id).await;
        if r.contains("ferrolet httpd ok") {
            Ok(())
        } else {
            Err(r)
        }
    })
    .await;
    let fetches: Vec<_> = (0..4)
        .map(|_| {
            let rt = api.client();
            let pod_id = pod_id.clone();
            tokio::spawn(async move { fetch(&rt, &pod_id).await })
        })
        .collect();
    for f in fetches {
        let resp = f.await.unwrap();
        assert!(resp.contains("ferrolet httpd ok"), "{resp:.300}");
    }

    node.teardown().await;
}

/// GET /index.html from port 8080 of the pod through a port-forward session; the response.
async fn fetch(
    rt: &ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient<
        tonic::transport::Channel,
    >,
    pod_id: &str,
) -> String {
    let url = rt
        .clone()
        .port_forward(PortForwardRequest {
            pod_sandbox_id: pod_id.into(),
            port: vec![8080],
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let (tcp, target) = connect(&url, "?port=8080").await;
    let mut ports = client::port_forward_websocket(tcp, &target, &[8080])
        .await
        .unwrap();
    let mut p = ports.remove(0);
    p.data
        .write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut resp = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), p.data.read_to_end(&mut resp)).await;
    let mut err = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(1), p.error.read_to_string(&mut err)).await;
    format!("{}{err}", String::from_utf8_lossy(&resp))
}
