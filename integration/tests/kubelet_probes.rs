//! `ferrolet` probes end to end (issue #7 acceptance): a liveness exec probe that starts
//! failing restarts its container with the reason in `lastState.terminated`; readiness
//! follows an httpGet probe as the served file comes and goes, and tcpSocket probes against
//! an open and a closed port; a startup probe holds a liveness probe off until it passes (and
//! kills a container that never starts); gRPC probes pass against SERVING and fail against
//! NOT_SERVING.
//!
//! The gRPC health server: the test images are static busybox, which speaks no gRPC, so the
//! server is this test's own (tonic) with its listening socket opened inside the pod's
//! network namespace (found through the sandbox's pid from PodSandboxStatus). The kubelet
//! then probes the pod IP exactly as it would probe a server in the pod's container: the
//! connection goes over the pod network into the pod's namespace.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use ferrolet_integration::kubelet::{
    IDLE, KubeletNode, container_id, container_status, image, is_ready, is_running,
    last_terminated, pod_condition, pod_phase, restart_count, sh, terminated,
};
use ferrolet_integration::pods::LONG;
use serde_json::Value;
use tonic::codegen::http;

/// Readiness changes show within a period (1 s here); this is only the functional limit.
const FLIP: Duration = Duration::from_secs(20);

fn started(status: &Value) -> bool {
    status["started"] == true
}

/// Runs `cmd` in the pod's container `name`, which must exit 0.
async fn exec(node: &KubeletNode, pod: &Value, name: &str, cmd: &[&str]) {
    let id = container_id(container_status(pod, name).unwrap()).to_string();
    node.node.api().await.exec_ok(&id, cmd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_liveness_probe_restarts_the_container() {
    let node = KubeletNode::start("liveness").await;
    // Healthy for 20 s, then not. `sh` as PID 1 ignores SIGTERM: the probe's own grace
    // period (1 s, not the pod's 30) decides when it is killed.
    node.write_manifest(
        "live.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: live
            spec:
              terminationGracePeriodSeconds: 30
              containers:
              - name: main
                image: {image}
                command: {command}
                livenessProbe:
                  exec:
                    command: ["test", "-f", "/tmp/healthy"]
                  periodSeconds: 1
                  failureThreshold: 2
                  terminationGracePeriodSeconds: 1
            "#,
            image = image("busybox"),
            command = sh("touch /tmp/healthy; sleep 20; rm -f /tmp/healthy; sleep 100000"),
        ),
    );
    let first = node.wait_running("live").await;
    let first_id = container_id(container_status(&first, "main").unwrap()).to_string();
    let restarted = node
        .wait_pod(
            "live",
            |p| container_status(p, "main").is_some_and(|c| restart_count(c) >= 1 && is_running(c)),
            LONG,
        )
        .await;
    let c = container_status(&restarted, "main").unwrap();
    assert_eq!(restart_count(c), 1, "{c:#}");
    assert_ne!(container_id(c), first_id);
    let last = last_terminated(c).unwrap_or_else(|| panic!("no lastState.terminated: {c:#}"));
    assert_eq!(
        last["message"], "Container main failed liveness probe, will be restarted",
        "{last:#}"
    );
    assert_eq!(last["exitCode"], 137, "SIGKILLed after 1 s: {last:#}");
    assert_eq!(last["reason"], "Error");
    assert!(
        last["containerID"]
            .as_str()
            .is_some_and(|id| id.ends_with(&first_id)),
        "{last:#}"
    );
    assert!(
        node.kubelet_log().contains("Liveness probe failed"),
        "no Unhealthy line in the kubelet log"
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_http_and_tcp_probes() {
    let node = KubeletNode::start("readiness").await;
    let busybox = image("busybox");
    let httpd = sh("mkdir -p /www && echo ok > /www/ready && exec httpd -f -p 8080 -h /www");
    node.write_manifest(
        "web.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: web
            spec:
              terminationGracePeriodSeconds: 2
              containers:
              - name: web
                image: {busybox}
                command: {httpd}
                ports:
                - {{name: http, containerPort: 8080}}
                readinessProbe:
                  httpGet:
                    path: /ready
                    port: http
                    httpHeaders:
                    - {{name: X-Probe, value: ferrolet}}
                  periodSeconds: 1
                  failureThreshold: 1
            "#
        ),
    );
    // tcpSocket: one container probes the port its neighbour serves, one a closed port.
    node.write_manifest(
        "tcp.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: tcp
            spec:
              terminationGracePeriodSeconds: 2
              containers:
              - name: server
                image: {busybox}
                command: {httpd}
                readinessProbe:
                  tcpSocket: {{port: 8080}}
                  periodSeconds: 1
              - name: closed
                image: {busybox}
                command: {idle}
                readinessProbe:
                  tcpSocket: {{port: 9}}
                  periodSeconds: 1
                  failureThreshold: 1
            "#,
            idle = sh(IDLE),
        ),
    );

    let web = node.wait_running("web").await;
    assert!(is_ready(container_status(&web, "web").unwrap()));
    assert_eq!(pod_condition(&web, "ContainersReady"), Some("True"));

    // The file goes: not ready, the pod's conditions follow.
    exec(&node, &web, "web", &["rm", "/www/ready"]).await;
    let unready = node
        .wait_pod("web", |p| pod_condition(p, "Ready") == Some("False"), FLIP)
        .await;
    let c = container_status(&unready, "web").unwrap();
    assert!(!is_ready(c) && is_running(c), "{c:#}");
    assert_eq!(restart_count(c), 0, "readiness never restarts");
    assert_eq!(pod_condition(&unready, "ContainersReady"), Some("False"));
    assert_eq!(pod_phase(&unready), "Running");
    // And comes back.
    exec(
        &node,
        &unready,
        "web",
        &["sh", "-c", "echo ok > /www/ready"],
    )
    .await;
    node.wait_pod(
        "web",
        |p| {
            pod_condition(p, "Ready") == Some("True")
                && container_status(p, "web").is_some_and(is_ready)
        },
        FLIP,
    )
    .await;

    let tcp = node
        .wait_pod(
            "tcp",
            |p| container_status(p, "server").is_some_and(is_ready),
            LONG,
        )
        .await;
    let closed = container_status(&tcp, "closed").unwrap();
    assert!(is_running(closed) && !is_ready(closed), "{closed:#}");
    assert_eq!(pod_condition(&tcp, "Ready"), Some("False"));
    assert_eq!(
        tcp["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "ContainersReady")
            .unwrap()["message"],
        "containers with unready status: [closed]"
    );
    node.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_probe_holds_liveness_off() {
    let node = KubeletNode::start("startup").await;
    let busybox = image("busybox");
    // The liveness probe alone would kill this container within a second or two of its
    // start (its file appears after 8 s, failureThreshold 1); the startup probe, checking
    // the same file with room for 30 failures, keeps it from running until then.
    node.write_manifest(
        "slow.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: slow
            spec:
              terminationGracePeriodSeconds: 2
              containers:
              - name: main
                image: {busybox}
                command: {command}
                startupProbe:
                  exec:
                    command: ["test", "-f", "/tmp/started"]
                  periodSeconds: 1
                  failureThreshold: 30
                livenessProbe:
                  exec:
                    command: ["test", "-f", "/tmp/started"]
                  periodSeconds: 1
                  failureThreshold: 1
            "#,
            command = sh(&format!("sleep 8; touch /tmp/started; {IDLE}")),
        ),
    );
    // A startup probe that never passes: the container is killed (SIGKILLed after the grace
    // period: `sleep` as PID 1 ignores SIGTERM), and under Never stays so: the pod fails.
    node.write_manifest(
        "never.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: never
            spec:
              restartPolicy: Never
              terminationGracePeriodSeconds: 2
              containers:
              - name: main
                image: {busybox}
                command: ["sleep", "100000"]
                startupProbe:
                  exec:
                    command: ["test", "-f", "/tmp/never"]
                  periodSeconds: 1
                  failureThreshold: 2
            "#,
        ),
    );

    let waiting = node
        .wait_pod(
            "slow",
            |p| container_status(p, "main").is_some_and(is_running),
            LONG,
        )
        .await;
    let c = container_status(&waiting, "main").unwrap();
    let first_id = container_id(c).to_string();
    assert!(!started(c) && !is_ready(c), "before its file: {c:#}");
    assert_eq!(pod_condition(&waiting, "Ready"), Some("False"));

    let up = node
        .wait_pod(
            "slow",
            |p| {
                container_status(p, "main").is_some_and(|c| started(c) && is_ready(c))
                    && pod_condition(p, "Ready") == Some("True")
            },
            LONG,
        )
        .await;
    let c = container_status(&up, "main").unwrap();
    assert_eq!(container_id(c), first_id, "the liveness probe killed it");
    assert_eq!(restart_count(c), 0);

    let never = node
        .wait_pod(
            "never",
            |p| container_status(p, "main").is_some_and(|c| terminated(c).is_some()),
            LONG,
        )
        .await;
    let t = terminated(container_status(&never, "main").unwrap()).unwrap();
    assert_eq!(t["message"], "Container main failed startup probe", "{t:#}");
    let never = node.wait_phase("never", "Failed").await;
    assert_eq!(restart_count(container_status(&never, "main").unwrap()), 0);
    node.teardown().await;
}

// ---------------------------------------------------------------------------------------------
// A grpc.health.v1 server, its socket in the pod's network namespace.

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse` (status: 1 SERVING, 2 NOT_SERVING).
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

const SERVING: i32 = 1;
const NOT_SERVING: i32 = 2;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

#[derive(Clone)]
struct Health(Arc<AtomicI32>);

impl tonic::server::NamedService for Health {
    const NAME: &'static str = "grpc.health.v1.Health";
}

struct Check(Arc<AtomicI32>);

impl tonic::server::UnaryService<HealthCheckRequest> for Check {
    type Response = HealthCheckResponse;
    type Future = BoxFuture<Result<tonic::Response<HealthCheckResponse>, tonic::Status>>;

    fn call(&mut self, req: tonic::Request<HealthCheckRequest>) -> Self::Future {
        let status = self.0.load(Ordering::SeqCst);
        let service = req.into_inner().service;
        Box::pin(async move {
            if service != "ferrolet" {
                return Err(tonic::Status::not_found(format!(
                    "unknown service {service:?}"
                )));
            }
            Ok(tonic::Response::new(HealthCheckResponse { status }))
        })
    }
}

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for Health {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let status = self.0.clone();
        Box::pin(async move {
            if req.uri().path() != "/grpc.health.v1.Health/Check" {
                return Ok(tonic::Status::unimplemented("").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(Check(status), req).await)
        })
    }
}

/// The test's health server, listening inside a pod's network namespace.
struct HealthServer {
    status: Arc<AtomicI32>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl HealthServer {
    /// Binds `0.0.0.0:port` in the namespace at `netns` (from a thread of its own that
    /// enters it and ends: a socket stays in the namespace it was made in) and serves there
    /// from this test's runtime.
    async fn start_in(netns: PathBuf, port: u16, status: i32) -> Self {
        let listener = tokio::task::spawn_blocking(move || {
            std::thread::spawn(move || -> std::io::Result<std::net::TcpListener> {
                ferrolet_cni::netns::enter_current_thread(&netns).map_err(std::io::Error::other)?;
                let l = std::net::TcpListener::bind(("0.0.0.0", port))?;
                l.set_nonblocking(true)?;
                Ok(l)
            })
            .join()
        })
        .await
        .unwrap()
        .expect("the netns thread panicked")
        .expect("binding in the pod's network namespace");
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let status = Arc::new(AtomicI32::new(status));
        let svc = Health(status.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Self {
            status,
            stop: Some(stop),
            task,
        }
    }

    fn set(&self, status: i32) {
        self.status.store(status, Ordering::SeqCst);
    }

    /// Stops serving and closes the socket (before the pod's namespace goes).
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.task).await;
        self.task.abort();
    }
}

/// The network namespace of the pod's ready sandbox, by the sandbox process's pid as
/// PodSandboxStatus (verbose) reports it, or for a sandbox without a pause process, the netns
/// file it names.
async fn pod_netns(node: &KubeletNode, pod: &Value) -> PathBuf {
    let info = node.ready_sandbox_info(pod).await;
    match info["pid"].as_u64().expect("the sandbox's pid") {
        0 => PathBuf::from(info["netns"].as_str().expect("the sandbox's netns")),
        pid => PathBuf::from(format!("/proc/{pid}/ns/net")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_probes_pass_against_serving_and_fail_against_not_serving() {
    let node = KubeletNode::start("grpc").await;
    node.write_manifest(
        "grpc.yaml",
        &format!(
            r#"
            apiVersion: v1
            kind: Pod
            metadata:
              name: grpc
            spec:
              terminationGracePeriodSeconds: 2
              containers:
              - name: main
                image: {image}
                command: {idle}
                readinessProbe:
                  grpc:
                    port: 9555
                    service: ferrolet
                  periodSeconds: 1
                  failureThreshold: 1
            "#,
            image = image("busybox"),
            idle = sh(IDLE),
        ),
    );
    // Nothing listens yet: the probe fails, the container runs unready.
    let pod = node
        .wait_pod(
            "grpc",
            |p| container_status(p, "main").is_some_and(is_running),
            LONG,
        )
        .await;
    assert!(!is_ready(container_status(&pod, "main").unwrap()));

    let server = HealthServer::start_in(pod_netns(&node, &pod).await, 9555, SERVING).await;
    node.wait_pod(
        "grpc",
        |p| {
            pod_condition(p, "Ready") == Some("True")
                && container_status(p, "main").is_some_and(is_ready)
        },
        FLIP,
    )
    .await;
    server.set(NOT_SERVING);
    let unready = node
        .wait_pod("grpc", |p| pod_condition(p, "Ready") == Some("False"), FLIP)
        .await;
    let c = container_status(&unready, "main").unwrap();
    assert!(!is_ready(c) && is_running(c), "{c:#}");
    server.set(SERVING);
    node.wait_pod("grpc", |p| pod_condition(p, "Ready") == Some("True"), FLIP)
        .await;
    server.stop().await;
    node.teardown().await;
}
