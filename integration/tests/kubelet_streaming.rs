//! Exec, attach, port-forward and run through ferrolet's secure port (issue #18), as the API
//! server reaches a kubelet: TLS with a client certificate from the configured CA, `POST
//! /exec/{ns}/{pod}/{container}?command=…&output=1&error=1` and so on, upgraded to SPDY/3.1 or
//! WebSocket by the repo's own streaming client and proxied by ferrolet to the runtime's
//! streaming server. Every scenario runs over both transports, on ferrolet-cri and on
//! containerd's own CRI plugin (the reference): the kubelet side is runtime-neutral.
//!
//! Scenarios: an anonymous client is 401; exec with the output on the right streams and exit
//! code 3; stdin through `cat`; a tty resized; attach both ways; 64 MiB from the httpd test
//! image over 4 concurrent forwarded connections, intact (checked with `sha256sum` through
//! `/run`); `/run`'s output; a client that leaves mid-exec leaves no process, FIFO or fd in
//! ferrolet or the runtime. Static pods from manifests; each test ends with the node's
//! teardown and leak checks. Two shortfalls of the reference, containerd 1.6, are its own
//! (see [`Runtime`]): it leaves an abandoned exec running, and sends no tty output over
//! WebSocket.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::Path;
use std::time::Instant;

use ferrolet_integration::containerd_cri::ContainerdCriNode;
use ferrolet_integration::cri::poll;
use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, KubeletOptions, RuntimeNode, image, parse_http_response, sh,
};
use ferrolet_integration::pods::{LONG, fifos_under, pids_with_cmdline, wait_for_process};
use ferrolet_integration::streaming::{
    BoxIo, Opener, TlsClient, assert_rejected, can_close_stdin, fd_count, fd_list, fetch_in_ranges,
    finish, pipe_through_cat, query_escape, read_until, sha256_hex,
};
use ferrolet_proto::streaming::client::{self, Target, Transport};
use ferrolet_proto::streaming::{StreamOptions, TerminalSize};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The big file's size and where httpd serves it from (the image's `-h /www`).
const BIG_SIZE: u64 = 64 << 20;
const BIG_PATH: &str = "/www/big";

/// The pod every test runs: a shell to exec in, a line echoer to attach to, httpd to forward
/// to.
fn box_pod() -> String {
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: box
        spec:
          terminationGracePeriodSeconds: 1
          containers:
          - name: main
            image: {busybox}
            command: {idle}
          - name: echo
            image: {busybox}
            stdin: true
            command: {echo}
          - name: web
            image: {httpd}
        "#,
        busybox = image("busybox"),
        httpd = image("httpd"),
        idle = sh(IDLE),
        echo = sh("while read l; do echo got:$l; done"),
    )
}

/// A client CA for the node and a certificate it signed (an admin's).
struct Certs {
    ca_pem: String,
    chain: Vec<Vec<u8>>,
    key: Vec<u8>,
}

impl Certs {
    fn new() -> Self {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "ferrolet-it streaming clients");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_pem = params.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(params, ca_key);

        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver-kubelet-client");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        Certs {
            ca_pem,
            chain: vec![cert.der().to_vec()],
            key: key.serialize_der(),
        }
    }

    /// The KubeletConfiguration lines trusting the CA (written into `dir`).
    fn config(&self, dir: &Path) -> String {
        let file = dir.join("client-ca.crt");
        std::fs::write(&file, &self.ca_pem).unwrap();
        format!(
            "authentication:\n  x509:\n    clientCAFile: {}\n",
            file.display()
        )
    }
}

/// The query of an exec or attach, with the API server's parameter names.
fn stream_query(cmd: &[&str], opts: StreamOptions) -> String {
    let mut q: Vec<String> = cmd
        .iter()
        .map(|c| format!("command={}", query_escape(c)))
        .collect();
    for (on, key) in [
        (opts.stdin, "input"),
        (opts.stdout, "output"),
        (opts.stderr, "error"),
        (opts.tty, "tty"),
    ] {
        if on {
            q.push(format!("{key}=1"));
        }
    }
    q.join("&")
}

fn opts(stdin: bool, tty: bool) -> StreamOptions {
    StreamOptions {
        stdin,
        stdout: true,
        stderr: !tty,
        tty,
    }
}

/// The node, its TLS clients and the pod's name: what each step needs.
struct Ctx<'a, N: RuntimeNode> {
    node: &'a KubeletNode<N>,
    admin: TlsClient,
    transport: Transport,
    pod: String,
}

impl<N: RuntimeNode> Ctx<'_, N> {
    async fn dial(&self, path: &str) -> (BoxIo, Target) {
        self.admin
            .dial(self.node.secure_addr(), path, self.transport)
            .await
    }

    /// Starts `cmd` in `container` over `/exec`.
    async fn exec(&self, container: &str, cmd: &[&str], o: StreamOptions) -> client::Exec {
        let path = format!(
            "/exec/default/{}/{container}?{}",
            self.pod,
            stream_query(cmd, o)
        );
        let (io, target) = self.dial(&path).await;
        client::exec(io, &target, o).await.unwrap_or_else(|e| {
            panic!(
                "{path} over {:?}: {e}\nferrolet log tail:\n{}",
                self.transport,
                tail(&self.node.kubelet_log())
            )
        })
    }

    /// `POST /run/…?cmd=…`: status and body.
    async fn run(&self, container: &str, cmd: &str) -> (u16, String) {
        let path = format!(
            "/run/default/{}/{container}?cmd={}",
            self.pod,
            query_escape(cmd)
        );
        let (mut io, _) = self.dial(&path).await;
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.node.secure_addr()
        );
        io.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(LONG, io.read_to_end(&mut raw))
            .await
            .expect("/run answered in time")
            .unwrap();
        let resp = parse_http_response(&raw).unwrap();
        (resp.status, resp.body)
    }
}

/// Where the reference runtime (containerd 1.6's CRI plugin) falls short of the issue's
/// contract; ferrolet's side is checked in full on both runtimes.
#[derive(Clone, Copy)]
struct Runtime {
    /// Kills an exec whose client went away (containerd 1.6 runs it on a background
    /// context: it lives on until it exits by itself).
    kills_abandoned_exec: bool,
    /// Sends a tty exec's output over WebSocket (containerd 1.6 sends none: seen with a raw
    /// WebSocket client straight to its streaming URL, no ferrolet in between; SPDY is fine).
    websocket_tty_output: bool,
}

const FERROLET_CRI: Runtime = Runtime {
    kills_abandoned_exec: true,
    websocket_tty_output: true,
};

const CONTAINERD_1_6: Runtime = Runtime {
    kills_abandoned_exec: false,
    websocket_tty_output: false,
};

fn tail(log: &str) -> String {
    ferrolet_integration::pods::log_tail(log, 30)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_over_spdy() {
    let certs = Certs::new();
    let dir = tempfile::tempdir().unwrap();
    let node = KubeletNode::start_with(
        "ks-spdy",
        KubeletOptions {
            extra_config: certs.config(dir.path()),
            ..Default::default()
        },
    )
    .await;
    scenario(node, Transport::Spdy, &certs, FERROLET_CRI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_over_websocket() {
    let certs = Certs::new();
    let dir = tempfile::tempdir().unwrap();
    let node = KubeletNode::start_with(
        "ks-ws",
        KubeletOptions {
            extra_config: certs.config(dir.path()),
            ..Default::default()
        },
    )
    .await;
    scenario(node, Transport::WebSocket, &certs, FERROLET_CRI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_over_spdy_on_containerd_cri() {
    let certs = Certs::new();
    let dir = tempfile::tempdir().unwrap();
    let runtime = ContainerdCriNode::start("ks-cd-spdy").await;
    let node = KubeletNode::start_on("ks-cd-spdy", runtime, &certs.config(dir.path())).await;
    scenario(node, Transport::Spdy, &certs, CONTAINERD_1_6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_over_websocket_on_containerd_cri() {
    let certs = Certs::new();
    let dir = tempfile::tempdir().unwrap();
    let runtime = ContainerdCriNode::start("ks-cd-ws").await;
    let node = KubeletNode::start_on("ks-cd-ws", runtime, &certs.config(dir.path())).await;
    scenario(node, Transport::WebSocket, &certs, CONTAINERD_1_6).await;
}

async fn scenario<N: RuntimeNode>(
    node: KubeletNode<N>,
    transport: Transport,
    certs: &Certs,
    runtime: Runtime,
) {
    let serving_cert = std::fs::read(node.root_dir().join("pki/kubelet.crt")).unwrap();
    let ctx = Ctx {
        node: &node,
        admin: TlsClient::new(
            &serving_cert,
            Some((certs.chain.clone(), certs.key.clone())),
        ),
        transport,
        pod: node.pod_name("box"),
    };
    node.write_manifest("box.yaml", &box_pod());
    node.wait_running("box").await;
    // Running in /pods may come before the PLEG lists every container running.
    poll("/run in each container", LONG, || async {
        for c in ["main", "echo", "web"] {
            let (status, body) = ctx.run(c, "true").await;
            if status != 200 {
                return Err(format!("{c}: {status} {body}"));
            }
        }
        Ok(())
    })
    .await;

    // Anonymous: 401, before any upgrade.
    let anonymous = TlsClient::new(&serving_cert, None);
    for path in [
        format!("/exec/default/{}/main?command=true&output=1", ctx.pod),
        format!("/attach/default/{}/echo?output=1", ctx.pod),
        format!("/portForward/default/{}?port=8080", ctx.pod),
    ] {
        let (io, target) = anonymous.dial(node.secure_addr(), &path, transport).await;
        let refused = if path.starts_with("/portForward") {
            match transport {
                Transport::Spdy => client::port_forward_spdy(io, &target).await.map(|_| ()),
                Transport::WebSocket => client::port_forward_websocket(io, &target, &[8080])
                    .await
                    .map(|_| ()),
            }
        } else {
            client::exec(io, &target, opts(false, false))
                .await
                .map(|_| ())
        };
        assert_rejected(refused, 401, Some("Unauthorized"));
    }

    // Output on the right streams, exit code 3.
    let script = ["sh", "-c", "echo out; echo err >&2; exit 3"];
    let e = ctx.exec("main", &script, opts(false, false)).await;
    assert!(
        ["v5.channel.k8s.io", "v4.channel.k8s.io"].contains(&e.protocol()),
        "{}",
        e.protocol()
    );
    assert_eq!(finish(e).await, ("out\n".into(), "err\n".into(), 3));

    // stdin through cat (to its EOF where the protocol can say so).
    let e = ctx.exec("main", &["cat"], opts(true, false)).await;
    let closes = can_close_stdin(transport, &e);
    let data: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    let (out, code) = pipe_through_cat(transport, e, &data).await;
    assert!(
        out == data,
        "cat gave back {} bytes of {}",
        out.len(),
        data.len()
    );
    if closes {
        assert_eq!(code, Some(0));
    }

    // A tty, resized: stty sees the size.
    let e = ctx
        .exec(
            "main",
            &["sh", "-c", "sleep 1; stty size"],
            opts(false, true),
        )
        .await;
    let size = TerminalSize {
        width: 123,
        height: 45,
    };
    e.resize.as_ref().unwrap().send(size).await.unwrap();
    let (out, _, code) = finish(e).await;
    if transport == Transport::Spdy || runtime.websocket_tty_output {
        assert_eq!((out.trim(), code), ("45 123", 0), "{out:?}");
    } else {
        assert_eq!(code, 0, "{out:?}");
    }

    // Attach both ways, twice (the container outlives a detach).
    for word in ["hello", "again"] {
        let path = format!("/attach/default/{}/echo?input=1&output=1&error=1", ctx.pod);
        let (io, target) = ctx.dial(&path).await;
        let mut a = client::exec(io, &target, opts(true, false))
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}\n{}", tail(&node.kubelet_log())));
        let mut stdin = a.stdin.take().unwrap();
        let mut stdout = a.stdout.take().unwrap();
        stdin
            .write_all(format!("{word}\n").as_bytes())
            .await
            .unwrap();
        read_until(&mut stdout, &format!("got:{word}\n")).await;
        drop((stdin, stdout, a));
    }

    // /run: stdout and stderr as the answer; a failure as Go words it.
    assert_eq!(
        ctx.run("main", "echo hello from run").await,
        (200, "hello from run\n".to_string())
    );
    let (status, body) = ctx.run("main", "false").await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.starts_with("command 'false' exited with 1"),
        "{body:?}"
    );

    // 64 MiB of noise into httpd's docroot (through /exec), fetched over 4 forwarded
    // connections at once, matches sha256sum inside the container (through /run).
    let dd = format!("dd if=/dev/urandom of={BIG_PATH} bs=1M count=64 2>/dev/null");
    let (_, err, code) = finish(
        ctx.exec("web", &["sh", "-c", &dd], opts(false, false))
            .await,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (status, sum) = ctx.run("web", &format!("sha256sum {BIG_PATH}")).await;
    assert_eq!(status, 200, "{sum}");
    let want = sum.split_whitespace().next().unwrap().to_string();
    let forward = match transport {
        Transport::Spdy => format!("/portForward/default/{}", ctx.pod),
        Transport::WebSocket => format!("/portForward/default/{}?port=8080", ctx.pod),
    };
    let open: Opener<'_> = Box::new(|| {
        let forward = forward.clone();
        let ctx = &ctx;
        Box::pin(async move { ctx.dial(&forward).await })
    });
    let started = Instant::now();
    let got = fetch_in_ranges(transport, &open, 8080, "/big", BIG_SIZE, 4).await;
    let took = started.elapsed();
    assert_eq!(got.len() as u64, BIG_SIZE);
    assert_eq!(sha256_hex(&got), want, "the file came through altered");
    eprintln!(
        "{transport:?}: 64 MiB over 4 connections through ferrolet in {took:?} ({:.0} MB/s)",
        BIG_SIZE as f64 / 1e6 / took.as_secs_f64()
    );
    drop(open);

    // A client that leaves mid-exec: neither ferrolet nor the runtime keeps an fd of the
    // session, and (where the runtime kills abandoned execs) the process and its FIFOs go.
    let kubelet = node.kubelet_pid();
    let runtime_pid = node.node.runtime_pid();
    let before = (fd_count(kubelet), fd_count(runtime_pid));
    let listed = (fd_list(kubelet), fd_list(runtime_pid));
    let fifos_before = fifos_under(node.node.runtime_dir()).len();
    let marker = format!(
        "sleep {}",
        100_000 + u32::from(node.node.net().octet) * 100 + 1
    );
    let e = ctx
        .exec("main", &["sh", "-c", &marker], opts(true, false))
        .await;
    wait_for_process(&marker).await;
    drop(e);
    poll("the abandoned exec gone", LONG, || async {
        let pids = pids_with_cmdline(&marker);
        let fifos = fifos_under(node.node.runtime_dir());
        let now = (fd_count(kubelet), fd_count(runtime_pid));
        let process_gone = pids.is_empty() && fifos.len() <= fifos_before;
        if (process_gone || !runtime.kills_abandoned_exec) && now.0 <= before.0 && now.1 <= before.1
        {
            Ok(())
        } else {
            Err(format!(
                "processes {pids:?}, {} FIFOs (before: {fifos_before}): {fifos:#?}\n\
                 fds (ferrolet, runtime) {now:?}, before {before:?}\n\
                 ferrolet before: {:#?}\nferrolet now: {:#?}\n\
                 runtime before: {:#?}\nruntime now: {:#?}",
                fifos.len(),
                listed.0,
                fd_list(kubelet),
                listed.1,
                fd_list(runtime_pid)
            ))
        }
    })
    .await;
    drop(ctx);

    node.teardown().await;
}
