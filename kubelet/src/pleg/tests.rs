//! PLEG tests against a scripted runtime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};

use ferrolet_proto::cri::{self, ContainerState};
use tonic::Status;

use super::PodLifecycleEventType::*;
use super::source::EventStream;
use super::*;
use crate::types::{RuntimeContainer, RuntimeSandbox};

/// A runtime whose pods, statuses and failures the test sets.
#[derive(Default)]
struct Fake {
    pods: Mutex<Vec<RuntimePod>>,
    /// Container id → (state, exit code) ContainerStatus reports.
    containers: Mutex<HashMap<String, (ContainerState, i32)>>,
    /// Sandbox id → IP PodSandboxStatus reports.
    sandboxes: Mutex<HashMap<String, String>>,
    fail_status: Mutex<bool>,
    lists: AtomicUsize,
    /// Lists of one pod.
    pod_lists: AtomicUsize,
    status_calls: AtomicUsize,
    /// Events the runtime serves, each naming a pod or not (None: Unimplemented).
    events: Mutex<Option<mpsc::UnboundedReceiver<Option<String>>>>,
}

impl Fake {
    fn set(&self, pods: Vec<RuntimePod>) {
        let mut containers = self.containers.lock().unwrap();
        for p in &pods {
            for c in &p.containers {
                containers.insert(
                    c.id.clone(),
                    (
                        c.state,
                        if c.state == ContainerState::ContainerExited {
                            1
                        } else {
                            0
                        },
                    ),
                );
            }
        }
        *self.pods.lock().unwrap() = pods;
    }
}

impl RuntimeSource for Fake {
    fn list(&self) -> BoxFut<'_, Result<Vec<RuntimePod>, CriError>> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        let pods = self.pods.lock().unwrap().clone();
        Box::pin(async move {
            // A real list takes a moment; lets concurrent callers pile up.
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok(pods)
        })
    }

    fn list_pod(&self, uid: String) -> BoxFut<'_, Result<Vec<RuntimePod>, CriError>> {
        self.pod_lists.fetch_add(1, Ordering::SeqCst);
        let mut pods = self.pods.lock().unwrap().clone();
        pods.retain(|p| p.uid == uid);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok(pods)
        })
    }

    fn sandbox_status(&self, id: String) -> BoxFut<'_, Result<cri::PodSandboxStatus, CriError>> {
        self.status_calls.fetch_add(1, Ordering::SeqCst);
        let ip = self
            .sandboxes
            .lock()
            .unwrap()
            .get(&id)
            .cloned()
            .unwrap_or_default();
        Box::pin(async move {
            Ok(cri::PodSandboxStatus {
                id,
                network: Some(cri::PodSandboxNetworkStatus {
                    ip,
                    additional_ips: vec![cri::PodIp {
                        ip: "fd00::1".into(),
                    }],
                }),
                ..Default::default()
            })
        })
    }

    fn container_status(&self, id: String) -> BoxFut<'_, Result<cri::ContainerStatus, CriError>> {
        self.status_calls.fetch_add(1, Ordering::SeqCst);
        let fail = *self.fail_status.lock().unwrap();
        let found = self.containers.lock().unwrap().get(&id).copied();
        Box::pin(async move {
            if fail {
                return Err(CriError::Call {
                    method: "ContainerStatus",
                    status: Status::unavailable("runtime busy"),
                });
            }
            let Some((state, exit_code)) = found else {
                return Err(CriError::Call {
                    method: "ContainerStatus",
                    status: Status::not_found("no such container"),
                });
            };
            Ok(cri::ContainerStatus {
                id: id.clone(),
                state: state as i32,
                started_at: 100,
                finished_at: if state == ContainerState::ContainerExited {
                    200
                } else {
                    0
                },
                exit_code,
                reason: if state == ContainerState::ContainerExited {
                    "Error".into()
                } else {
                    String::new()
                },
                log_path: format!("/var/log/pods/ns_p_u/{id}/0.log"),
                image_ref: "busybox@sha256:1".into(),
                ..Default::default()
            })
        })
    }

    fn events(&self) -> BoxFut<'_, Result<EventStream, CriError>> {
        let rx = self.events.lock().unwrap().take();
        Box::pin(async move {
            let Some(rx) = rx else {
                return Err(CriError::Call {
                    method: "GetContainerEvents",
                    status: Status::unimplemented("no events"),
                });
            };
            let stream = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|uid| (Ok(uid), rx))
            });
            Ok(Box::pin(stream) as EventStream)
        })
    }
}

fn sandbox(id: &str, ready: bool) -> RuntimeSandbox {
    RuntimeSandbox {
        id: id.into(),
        ready,
        created_at: 1,
        ..Default::default()
    }
}

fn container(id: &str, name: &str, state: ContainerState) -> RuntimeContainer {
    RuntimeContainer {
        id: id.into(),
        sandbox_id: "s1".into(),
        name: name.into(),
        state,
        created_at: 10,
        image: "busybox".into(),
        ..Default::default()
    }
}

fn pod(uid: &str, sandboxes: Vec<RuntimeSandbox>, containers: Vec<RuntimeContainer>) -> RuntimePod {
    RuntimePod {
        uid: uid.into(),
        name: format!("pod-{uid}"),
        namespace: "default".into(),
        sandboxes,
        containers,
    }
}

fn kinds(events: &[PodLifecycleEvent]) -> Vec<(&str, PodLifecycleEventType, &str)> {
    events
        .iter()
        .map(|e| (e.uid.as_str(), e.kind, e.id.as_str()))
        .collect()
}

fn setup() -> (Arc<Fake>, Pleg) {
    let fake = Arc::new(Fake::default());
    fake.sandboxes
        .lock()
        .unwrap()
        .insert("s1".into(), "10.88.0.7".into());
    let pleg = Pleg::with_source(fake.clone());
    (fake, pleg)
}

#[tokio::test]
async fn relist_fills_the_cache_and_reports_changes() {
    let (fake, pleg) = setup();
    assert!(pleg.get("u1").is_none());
    assert!(pleg.healthy().is_err(), "no relist yet");
    fake.set(vec![pod(
        "u1",
        vec![sandbox("s1", true)],
        vec![container("c1", "app", ContainerState::ContainerRunning)],
    )]);
    let events = pleg.relist().await.unwrap();
    assert_eq!(
        kinds(&events),
        [("u1", ContainerStarted, "c1"), ("u1", SandboxChanged, "s1")]
    );
    let cached = pleg.get("u1").unwrap();
    assert_eq!(cached.sandboxes[0].ip, "10.88.0.7");
    assert_eq!(cached.sandboxes[0].additional_ips, ["fd00::1"]);
    assert_eq!(cached.containers[0].started_at, 100);
    assert_eq!(
        cached.containers[0].log_path,
        "/var/log/pods/ns_p_u/c1/0.log"
    );
    assert_eq!(cached.containers[0].image_ref, "busybox@sha256:1");
    assert_eq!(fake.status_calls.load(Ordering::SeqCst), 2);
    assert!(pleg.healthy().is_ok());
    let (_, first_read) = pleg.get_with_time("u1").unwrap();

    // Nothing changed: no events and no status calls, but the read time moves on.
    let events = pleg.relist().await.unwrap();
    assert!(events.is_empty());
    assert_eq!(fake.status_calls.load(Ordering::SeqCst), 2);
    let (same, read) = pleg.get_with_time("u1").unwrap();
    assert_eq!(same, cached);
    assert!(read > first_read);
    let stats = pleg.stats();
    assert_eq!(stats.relists, 2);
    assert!(stats.last_interval.is_some() && stats.last_duration.is_some());

    // The container exits and a second one is created: only those are asked about.
    fake.set(vec![pod(
        "u1",
        vec![sandbox("s1", true)],
        vec![
            container("c2", "app", ContainerState::ContainerCreated),
            container("c1", "app", ContainerState::ContainerExited),
        ],
    )]);
    let events = pleg.relist().await.unwrap();
    assert_eq!(
        kinds(&events),
        [("u1", ContainerDied, "c1"), ("u1", ContainerChanged, "c2")]
    );
    assert_eq!(fake.status_calls.load(Ordering::SeqCst), 4);
    let cached = pleg.get("u1").unwrap();
    let c1 = cached.containers.iter().find(|c| c.id == "c1").unwrap();
    assert_eq!(
        (c1.state, c1.exit_code, c1.finished_at, c1.reason.as_str()),
        (ContainerState::ContainerExited, 1, 200, "Error")
    );
    assert_eq!(cached.sandboxes[0].ip, "10.88.0.7", "kept from the cache");

    // The sandbox stops and no longer reports its address: the cached one stays.
    fake.sandboxes.lock().unwrap().clear();
    fake.set(vec![pod(
        "u1",
        vec![sandbox("s1", false)],
        vec![container("c1", "app", ContainerState::ContainerExited)],
    )]);
    let events = pleg.relist().await.unwrap();
    assert_eq!(
        kinds(&events),
        [
            ("u1", ContainerDied, "c2"),
            ("u1", ContainerRemoved, "c2"),
            ("u1", SandboxChanged, "s1")
        ]
    );
    assert_eq!(pleg.get("u1").unwrap().sandboxes[0].ip, "10.88.0.7");

    // Everything removed.
    fake.set(vec![]);
    let events = pleg.relist().await.unwrap();
    assert_eq!(
        kinds(&events),
        [("u1", ContainerRemoved, "c1"), ("u1", SandboxChanged, "s1")]
    );
    assert!(pleg.get("u1").is_none());
    assert!(pleg.all().is_empty());
}

#[tokio::test]
async fn failed_status_calls_are_retried_and_hold_back_events() {
    let (fake, pleg) = setup();
    let (tx, mut rx) = mpsc::channel(16);
    *pleg.tx.lock().unwrap() = Some(tx);
    fake.set(vec![
        pod(
            "u1",
            vec![sandbox("s1", true)],
            vec![container("c1", "app", ContainerState::ContainerRunning)],
        ),
        pod("u2", vec![sandbox("s2", true)], vec![]),
    ]);
    *fake.fail_status.lock().unwrap() = true;
    let events = pleg.relist().await.unwrap();
    assert_eq!(
        kinds(&events),
        [("u2", SandboxChanged, "s2")],
        "u1 held back"
    );
    assert!(pleg.get("u1").is_none());
    assert!(pleg.get("u2").is_some());
    assert_eq!(rx.try_recv().unwrap().uid, "u2");
    assert!(rx.try_recv().is_err());

    *fake.fail_status.lock().unwrap() = false;
    let events = pleg.relist().await.unwrap();
    assert_eq!(
        kinds(&events),
        [("u1", ContainerStarted, "c1"), ("u1", SandboxChanged, "s1")]
    );
    assert_eq!(pleg.get("u1").unwrap().containers[0].started_at, 100);
    assert_eq!(rx.try_recv().unwrap().kind, ContainerStarted);
    assert_eq!(rx.try_recv().unwrap().kind, SandboxChanged);
}

#[tokio::test]
async fn container_changed_is_returned_but_not_sent() {
    let (fake, pleg) = setup();
    let (tx, mut rx) = mpsc::channel(16);
    *pleg.tx.lock().unwrap() = Some(tx);
    fake.set(vec![pod(
        "u1",
        vec![sandbox("s1", true)],
        vec![container("c1", "app", ContainerState::ContainerCreated)],
    )]);
    let events = pleg.relist().await.unwrap();
    assert_eq!(
        kinds(&events),
        [("u1", ContainerChanged, "c1"), ("u1", SandboxChanged, "s1")]
    );
    assert_eq!(rx.try_recv().unwrap().kind, SandboxChanged);
    assert!(rx.try_recv().is_err());
}

#[tokio::test]
async fn concurrent_refreshes_share_relists() {
    let (fake, pleg) = setup();
    fake.set(vec![pod(
        "u1",
        vec![sandbox("s1", true)],
        vec![container("c1", "app", ContainerState::ContainerRunning)],
    )]);
    let pleg = Arc::new(pleg);
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let pleg = pleg.clone();
        tasks.push(tokio::spawn(async move { pleg.refresh("u1").await }));
    }
    for t in tasks {
        let got = t.await.unwrap().unwrap().unwrap();
        assert_eq!(got.containers[0].started_at, 100);
    }
    let lists = fake.pod_lists.load(Ordering::SeqCst);
    assert!(lists <= 2, "{lists} relists for 20 concurrent refreshes");
    assert_eq!(
        fake.lists.load(Ordering::SeqCst),
        0,
        "refreshes list one pod"
    );
    // A refresh after the last relist relists again.
    pleg.refresh("u1").await.unwrap();
    assert_eq!(fake.pod_lists.load(Ordering::SeqCst), lists + 1);
    assert!(pleg.refresh("nope").await.unwrap().is_none());
}

#[tokio::test]
async fn a_pod_relist_leaves_the_other_pods_and_the_relist_statistics() {
    let (fake, pleg) = setup();
    let running = |id: &str| container(id, "app", ContainerState::ContainerRunning);
    fake.set(vec![
        pod("u1", vec![sandbox("s1", true)], vec![running("c1")]),
        pod("u2", vec![sandbox("s2", true)], vec![running("c2")]),
    ]);
    pleg.relist().await.unwrap();
    // Both change; only u1 is relisted.
    fake.set(vec![pod(
        "u1",
        vec![sandbox("s1", true)],
        vec![container("c1", "app", ContainerState::ContainerExited)],
    )]);
    let events = pleg.relist_pod("u1").await.unwrap();
    assert_eq!(kinds(&events), [("u1", ContainerDied, "c1")]);
    assert_eq!(
        pleg.stats().relists,
        1,
        "a pod relist is no relist of the node"
    );
    assert!(
        pleg.get("u2").is_some(),
        "u2 is kept until a relist sees it gone"
    );
    assert_eq!(
        pleg.get("u1").unwrap().containers[0].state,
        ContainerState::ContainerExited
    );
    // u1 gone: its relist drops it and says so.
    fake.set(vec![]);
    let events = pleg.relist_pod("u1").await.unwrap();
    assert!(events.iter().all(|e| e.uid == "u1") && !events.is_empty());
    assert!(pleg.get("u1").is_none());
    assert!(pleg.get("u2").is_some());
    let events = pleg.relist().await.unwrap();
    assert!(events.iter().all(|e| e.uid == "u2") && !events.is_empty());
    assert!(pleg.all().is_empty());
}

#[tokio::test]
async fn runtime_events_trigger_a_relist_at_once() {
    let (fake, pleg) = setup();
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    *fake.events.lock().unwrap() = Some(events_rx);
    let pleg = Arc::new(pleg);
    let (tx, mut rx) = mpsc::channel(16);
    // A period far longer than the test: only events can make it relist again.
    let task = pleg.clone().spawn(Duration::from_secs(3600), tx);
    // The first tick relists at once.
    tokio::time::timeout(Duration::from_secs(5), async {
        while pleg.stats().relists == 0 || !pleg.stats().evented {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    fake.set(vec![pod(
        "u1",
        vec![sandbox("s1", true)],
        vec![container("c1", "app", ContainerState::ContainerRunning)],
    )]);
    // The subscription asks for a relist of every pod too: let it run first.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let full = pleg.stats().relists;
    events_tx.send(Some("u1".to_string())).unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.uid, "u1");
    assert!(pleg.stats().evented);
    assert_eq!(
        pleg.stats().relists,
        full,
        "an event naming a pod relists that pod"
    );
    assert!(fake.pod_lists.load(Ordering::SeqCst) >= 1);
    // The rest of u1's events (its container started too).
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
        assert_eq!(e.uid, "u1");
    }
    // An event naming no pod relists them all.
    fake.set(vec![pod("u2", vec![sandbox("s2", true)], vec![])]);
    events_tx.send(None).unwrap();
    let mut seen = BTreeSet::new();
    while seen.len() < 2 {
        let e = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        seen.insert(e.uid);
    }
    assert_eq!(Vec::from_iter(seen), ["u1", "u2"], "u1 gone, u2 new");
    assert!(pleg.stats().relists > full);
    while tokio::time::timeout(Duration::from_millis(100), rx.recv())
        .await
        .is_ok_and(|e| e.is_some())
    {}
    // The stream breaks: no longer evented, periodic relists go on.
    drop(events_tx);
    tokio::time::timeout(Duration::from_secs(5), async {
        while pleg.stats().evented {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    // Dropping the receiver ends the loop.
    drop(rx);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn periodic_relists_without_runtime_events() {
    let (fake, pleg) = setup();
    let pleg = Arc::new(pleg);
    let (tx, mut rx) = mpsc::channel(16);
    let task = pleg.clone().spawn(Duration::from_millis(20), tx);
    fake.set(vec![pod("u1", vec![sandbox("s1", true)], vec![])]);
    let e = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((e.uid.as_str(), e.kind), ("u1", SandboxChanged));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pleg.stats().evented);
    assert!(pleg.stats().relists >= 3);
    drop(rx);
    // With the receiver gone the loop ends by itself.
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}
