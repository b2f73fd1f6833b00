//! The servers on 127.0.0.1:0 with a scripted node.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, PodSpec, PodStatus,
};
use tokio::sync::oneshot;

use super::*;

#[derive(Default)]
struct Stub {
    pods: Vec<Pod>,
    running: Vec<Pod>,
    unhealthy: Option<String>,
    /// (pod, container, previous) → log path.
    logs: BTreeMap<(String, String, bool), PathBuf>,
}

impl NodeView for Stub {
    fn pods(&self) -> Vec<Pod> {
        self.pods.clone()
    }
    fn running_pods(&self) -> Vec<Pod> {
        self.running.clone()
    }
    fn healthy(&self) -> Result<(), String> {
        self.unhealthy.clone().map_or(Ok(()), Err)
    }
    fn container_log_path(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Option<PathBuf> {
        assert_eq!(namespace, "default");
        self.logs
            .get(&(pod.to_string(), container.to_string(), previous))
            .cloned()
    }
}

fn status(name: &str, state: ContainerState, last: Option<ContainerState>) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(state),
        last_state: last,
        ..Default::default()
    }
}

fn running() -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning::default()),
        ..Default::default()
    }
}

fn terminated(id: &str) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            container_id: Some(format!("containerd://{id}")),
            exit_code: 1,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn waiting(reason: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: None,
        }),
        ..Default::default()
    }
}

fn pod(name: &str, containers: &[&str], statuses: Vec<ContainerStatus>) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.spec = Some(PodSpec {
        containers: containers
            .iter()
            .map(|c| Container {
                name: c.to_string(),
                image: Some("busybox".into()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    });
    p.status = Some(PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(statuses),
        ..Default::default()
    });
    p
}

struct Server {
    base: String,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

const LOG: &str = "\
2024-05-01T10:00:00Z stdout F hello
2024-05-01T10:00:01.5Z stderr P wor
2024-05-01T10:00:02Z stderr F ld
2024-05-01T10:00:03Z stdout F bye
";

async fn start(healthz_only: bool, tweak: impl FnOnce(&mut Stub, &Path)) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let current = dir.path().join("1.log");
    let previous = dir.path().join("0.log");
    std::fs::write(&current, LOG).unwrap();
    std::fs::write(
        &previous,
        "2024-05-01T09:00:00Z stdout F before the crash\n",
    )
    .unwrap();
    let mut stub = Stub {
        pods: vec![
            pod(
                "web",
                &["app"],
                vec![status("app", running(), Some(terminated("old")))],
            ),
            pod(
                "pulling",
                &["app"],
                vec![status("app", waiting("ErrImagePull"), None)],
            ),
        ],
        running: vec![pod("web", &["app"], vec![])],
        ..Default::default()
    };
    stub.logs
        .insert(("web".into(), "app".into(), false), current);
    stub.logs
        .insert(("web".into(), "app".into(), true), previous);
    tweak(&mut stub, dir.path());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let view: Arc<dyn NodeView> = Arc::new(stub);
    let shutdown = async move {
        let _ = stopped.await;
    };
    let task = if healthz_only {
        tokio::spawn(serve_healthz_on(listener, view, shutdown))
    } else {
        tokio::spawn(serve_read_only_on(listener, view, shutdown))
    };
    Server {
        base,
        stop: Some(stop),
        task,
        _dir: dir,
    }
}

async fn get(url: &str) -> (u16, String, String) {
    let resp = reqwest::get(url).await.unwrap();
    let code = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (code, ctype, resp.text().await.unwrap())
}

#[tokio::test]
async fn healthz() {
    let s = start(false, |_, _| {}).await;
    assert_eq!(
        get(&format!("{}/healthz", s.base)).await,
        (200, "text/plain; charset=utf-8".into(), "ok".into())
    );
    let (code, _, body) = get(&format!("{}/healthz?verbose", s.base)).await;
    assert_eq!(code, 200);
    assert!(body.ends_with("healthz check passed\n"));
    s.shutdown().await;

    let s = start(true, |stub, _| {
        stub.unhealthy = Some("PLEG is not healthy".into())
    })
    .await;
    let (code, _, body) = get(&format!("{}/healthz", s.base)).await;
    assert_eq!(code, 500);
    assert!(
        body.contains("[-]syncloop failed: PLEG is not healthy"),
        "{body}"
    );
    // The healthz server has nothing else.
    assert_eq!(get(&format!("{}/pods", s.base)).await.0, 404);
    s.shutdown().await;
}

#[tokio::test]
async fn pods_and_running_pods() {
    let s = start(false, |_, _| {}).await;
    let (code, ctype, body) = get(&format!("{}/pods", s.base)).await;
    assert_eq!((code, ctype.as_str()), (200, "application/json"));
    assert!(
        body.starts_with(r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":["#),
        "{body}"
    );
    assert!(body.ends_with("}\n"));
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["metadata"]["name"], "web");
    assert_eq!(items[0]["status"]["phase"], "Running");
    assert!(items[0].get("kind").is_none());
    // The same list parses as a k8s PodList.
    let typed: k8s_openapi::List<Pod> = serde_json::from_str(&body).unwrap();
    assert_eq!(typed.items.len(), 2);

    let (code, _, body) = get(&format!("{}/runningpods/", s.base)).await;
    assert_eq!(code, 200);
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["items"][0]["metadata"]["uid"], "uid-web");
    assert_eq!(
        list["items"][0]["spec"]["containers"][0]["image"],
        "busybox"
    );

    assert_eq!(get(&format!("{}/nope", s.base)).await.0, 404);
    let post = reqwest::Client::new()
        .post(format!("{}/pods", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status().as_u16(), 405);
    s.shutdown().await;
}

#[tokio::test]
async fn container_logs_and_their_options() {
    let s = start(false, |_, _| {}).await;
    let logs = |q: &str| format!("{}/containerLogs/default/web/app{q}", s.base);
    let (code, ctype, body) = get(&logs("")).await;
    assert_eq!((code, ctype.as_str()), (200, "text/plain; charset=utf-8"));
    assert_eq!(body, "hello\nworld\nbye\n");
    assert_eq!(get(&logs("?tailLines=2")).await.2, "world\nbye\n");
    assert_eq!(get(&logs("?tail=1")).await.2, "bye\n");
    assert_eq!(get(&logs("?tail=all")).await.2, "hello\nworld\nbye\n");
    assert_eq!(
        get(&logs("?timestamps=true&tailLines=2")).await.2,
        "2024-05-01T10:00:01.5Z world\n2024-05-01T10:00:03Z bye\n"
    );
    assert_eq!(get(&logs("?limitBytes=8")).await.2, "hello\nwo");
    assert_eq!(
        get(&logs("?sinceTime=2024-05-01T10:00:02Z")).await.2,
        "bye\n"
    );
    assert_eq!(
        get(&logs("?sinceSeconds=60")).await.2,
        "",
        "all lines are old"
    );
    assert_eq!(get(&logs("?previous=true")).await.2, "before the crash\n");
    // Not following an exited writer: the whole file, then the end.
    assert_eq!(get(&logs("?follow=false")).await.2, "hello\nworld\nbye\n");

    // Errors, as the Go kubelet words them.
    let (code, _, body) = get(&format!("{}/containerLogs/default/nope/app", s.base)).await;
    assert_eq!((code, body.as_str()), (404, r#"pod "nope" does not exist"#));
    let (code, _, body) = get(&format!("{}/containerLogs/default/web/db", s.base)).await;
    assert_eq!(
        (code, body.as_str()),
        (404, r#"container "db" not found in pod "web""#)
    );
    let (code, _, body) = get(&format!("{}/containerLogs/default/pulling/app", s.base)).await;
    assert_eq!(
        (code, body.as_str()),
        (
            400,
            r#"container "app" in pod "pulling" is waiting to start: image can't be pulled"#
        )
    );
    let (code, _, body) = get(&format!(
        "{}/containerLogs/default/pulling/app?previous=1",
        s.base
    ))
    .await;
    assert_eq!(
        (code, body.as_str()),
        (
            400,
            r#"previous terminated container "app" in pod "pulling" not found"#
        )
    );
    let (code, _, body) = get(&logs("?tailLines=abc")).await;
    assert_eq!(
        (code, body.as_str()),
        (400, r#"{"message": "Unable to decode query."}"#)
    );
    assert_eq!(get(&logs("?sinceTime=yesterday")).await.0, 400);
    let (code, _, body) = get(&logs("?tailLines=-1")).await;
    assert_eq!(
        (code, body.as_str()),
        (422, r#"{"message": "Invalid request."}"#)
    );
    assert_eq!(get(&logs("?limitBytes=0")).await.0, 422);
    assert_eq!(get(&logs("?sinceSeconds=0")).await.0, 422);
    assert_eq!(
        get(&logs("?sinceSeconds=5&sinceTime=2024-05-01T10:00:02Z"))
            .await
            .0,
        422
    );
    assert_eq!(
        get(&format!("{}/containerLogs/default/web", s.base))
            .await
            .0,
        400
    );
    s.shutdown().await;
}

#[tokio::test]
async fn follow_streams_until_the_container_stops() {
    let s = start(false, |_, _| {}).await;
    let log_path = s._dir.path().join("1.log");
    let mut resp = reqwest::get(format!(
        "{}/containerLogs/default/web/app?follow=true&tailLines=1",
        s.base
    ))
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let first = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b"bye\n");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&log_path)
        .unwrap();
    f.write_all(b"2024-05-01T10:00:04Z stdout F more\n")
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(&next[..], b"more\n");
    // The client goes away; the server carries on serving others.
    drop(resp);
    assert_eq!(get(&format!("{}/healthz", s.base)).await.0, 200);
    s.shutdown().await;
}

#[tokio::test]
async fn follow_ends_with_the_container_and_on_shutdown() {
    // The default check: the pod's status says running, so it follows...
    let s = start(false, |_, _| {}).await;
    let mut resp = reqwest::get(format!("{}/containerLogs/default/web/app?follow", s.base))
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b"hello\nworld\nbye\n");
    // ...and server shutdown ends the stream.
    s.shutdown().await;
    let rest = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
        .await
        .unwrap();
    assert!(rest.is_err() || rest.unwrap().is_none());

    // The previous instance is not running: follow drains it and ends.
    let s = start(false, |_, _| {}).await;
    let (code, _, body) = tokio::time::timeout(
        Duration::from_secs(5),
        get(&format!(
            "{}/containerLogs/default/web/app?follow=true&previous=true",
            s.base
        )),
    )
    .await
    .unwrap();
    assert_eq!((code, body.as_str()), (200, "before the crash\n"));
    s.shutdown().await;
}

#[test]
fn an_ephemeral_containers_log_is_followed_while_it_runs() {
    let mut web = pod("web", &["app"], vec![status("app", running(), None)]);
    let spec = web.spec.as_mut().unwrap();
    spec.ephemeral_containers = Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
        name: "dbg".into(),
        image: Some("busybox".into()),
        ..Default::default()
    }]);
    let path = PathBuf::from("/var/log/pods/default_web_uid-web/dbg/0.log");
    let mut stub = Stub::default();
    stub.logs
        .insert(("web".into(), "dbg".into(), false), path.clone());
    let with_state = |state| {
        let mut p = web.clone();
        p.status.as_mut().unwrap().ephemeral_container_statuses =
            Some(vec![status("dbg", state, None)]);
        p
    };
    stub.pods = vec![with_state(running())];
    assert!(stub.log_writer_running("default", "web", "dbg", &path));
    stub.pods = vec![with_state(terminated("e1"))];
    assert!(!stub.log_writer_running("default", "web", "dbg", &path));
}
