use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::correlator::CorrelatorConfig;
use super::lru::Lru;
use super::sink::SinkFuture;
use super::*;
use crate::events::{container_ref, node_ref, pod_ref};

fn source() -> EventSource {
    EventSource {
        component: Some("kubelet".into()),
        host: Some("node-1".into()),
    }
}

fn pod() -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("prod".into()),
            uid: Some("u-1".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn t0() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn at(secs: i64) -> Timestamp {
    t0() + SignedDuration::from_secs(secs)
}

fn ev(object: &ObjectReference, reason: &str, message: &str, now: Timestamp) -> Event {
    make_event(&source(), object, EventType::Warning, reason, message, now)
}

#[test]
fn make_event_is_gos_shape() {
    let now = Timestamp::from_nanosecond(1_700_000_000_123_456_789).unwrap();
    let e = make_event(
        &source(),
        &container_ref(&pod(), "app"),
        EventType::Normal,
        "Pulling",
        "Pulling image \"nginx\"",
        now,
    );
    assert_eq!(e.metadata.name.as_deref(), Some("web.17979cfe3d85cd15"));
    assert_eq!(e.metadata.namespace.as_deref(), Some("prod"));
    assert_eq!(e.count, Some(1));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.reporting_component.as_deref(), Some("kubelet"));
    assert_eq!(e.reporting_instance.as_deref(), Some("node-1"));
    assert_eq!(e.first_timestamp, Some(Time(now)));
    assert_eq!(e.last_timestamp, Some(Time(now)));
    assert_eq!(
        e.involved_object.field_path.as_deref(),
        Some("spec.containers{app}")
    );
    let node = make_event(
        &source(),
        &node_ref("node-1"),
        EventType::Normal,
        "Starting",
        "",
        now,
    );
    assert_eq!(node.metadata.namespace.as_deref(), Some("default"));
    assert!(node.metadata.name.unwrap().starts_with("node-1."));
}

#[test]
fn spam_filter_burst_then_drop_then_refill() {
    let mut c = EventCorrelator::default();
    let object = pod_ref(&pod());
    // Distinct reasons so neither aggregation nor dedup interferes.
    let mut created = 0;
    for i in 0..25 {
        let d = c.correlate(ev(&object, &format!("R{i}"), "m", at(0)), at(0));
        assert!(matches!(d, Decision::Create(_)), "event {i}: {d:?}");
        created += 1;
    }
    assert_eq!(created, 25);
    for i in 25..30 {
        let d = c.correlate(ev(&object, &format!("R{i}"), "m", at(1)), at(1));
        assert_eq!(d, Decision::Drop, "event {i}");
    }
    // One token back after 5 minutes, exactly one.
    let d = c.correlate(ev(&object, "Late", "m", at(301)), at(301));
    assert!(matches!(d, Decision::Create(_)), "{d:?}");
    assert_eq!(
        c.correlate(ev(&object, "Later", "m", at(302)), at(302)),
        Decision::Drop
    );
    // Another object has its own bucket.
    let other = node_ref("node-1");
    assert!(matches!(
        c.correlate(ev(&other, "R0", "m", at(1)), at(1)),
        Decision::Create(_)
    ));
}

#[test]
fn spam_filter_ignores_field_path() {
    let mut c = EventCorrelator::default();
    let p = pod();
    for i in 0..25 {
        let name = format!("c{i}");
        let d = c.correlate(ev(&container_ref(&p, &name), "Started", "m", at(0)), at(0));
        assert!(matches!(d, Decision::Create(_)));
    }
    let d = c.correlate(ev(&container_ref(&p, "last"), "Started", "m", at(0)), at(0));
    assert_eq!(d, Decision::Drop);
}

#[test]
fn similar_events_are_combined_after_ten_messages() {
    let mut c = EventCorrelator::default();
    let object = pod_ref(&pod());
    for i in 0..9 {
        let msg = format!("message {i}");
        match c.correlate(ev(&object, "BackOff", &msg, at(i)), at(i)) {
            Decision::Create(e) => assert_eq!(e.message.as_deref(), Some(msg.as_str())),
            d => panic!("event {i}: {d:?}"),
        }
    }
    // The tenth distinct message starts the combined event.
    let combined_name = match c.correlate(ev(&object, "BackOff", "message 9", at(9)), at(9)) {
        Decision::Create(e) => {
            assert_eq!(
                e.message.as_deref(),
                Some("(combined from similar events): message 9")
            );
            assert_eq!(e.reason.as_deref(), Some("BackOff"));
            assert_eq!(e.count, Some(1));
            e.metadata.name.unwrap()
        }
        d => panic!("{d:?}"),
    };
    // Later ones patch the combined event.
    match c.correlate(ev(&object, "BackOff", "message 10", at(10)), at(10)) {
        Decision::Patch {
            name,
            count,
            message,
            last_timestamp,
            ..
        } => {
            assert_eq!(name, combined_name);
            assert_eq!(count, 2);
            assert_eq!(message, "(combined from similar events): message 10");
            assert_eq!(last_timestamp, Time(at(10)));
        }
        d => panic!("{d:?}"),
    }
    // Ten minutes of quiet start the count again.
    match c.correlate(ev(&object, "BackOff", "fresh", at(10 + 601)), at(10 + 601)) {
        Decision::Create(e) => assert_eq!(e.message.as_deref(), Some("fresh")),
        d => panic!("{d:?}"),
    }
}

#[test]
fn identical_events_become_patches() {
    let mut c = EventCorrelator::default();
    let object = container_ref(&pod(), "app");
    let first = match c.correlate(ev(&object, "Unhealthy", "probe failed", at(0)), at(0)) {
        Decision::Create(e) => e,
        d => panic!("{d:?}"),
    };
    for n in 2..=4 {
        let now = at(n.into());
        match c.correlate(ev(&object, "Unhealthy", "probe failed", now), now) {
            Decision::Patch {
                name,
                count,
                last_timestamp,
                message,
                event,
            } => {
                assert_eq!(Some(name), first.metadata.name.clone());
                assert_eq!(count, n);
                assert_eq!(last_timestamp, Time(now));
                assert_eq!(message, "probe failed");
                assert_eq!(event.first_timestamp, first.first_timestamp);
                assert_eq!(event.count, Some(n));
            }
            d => panic!("{d:?}"),
        }
    }
    // A different message is a different event.
    assert!(matches!(
        c.correlate(ev(&object, "Unhealthy", "other", at(5)), at(5)),
        Decision::Create(_)
    ));
}

#[test]
fn update_state_takes_the_servers_name_and_version() {
    let mut c = EventCorrelator::default();
    let object = pod_ref(&pod());
    let mut written = match c.correlate(ev(&object, "Killing", "m", at(0)), at(0)) {
        Decision::Create(e) => e,
        d => panic!("{d:?}"),
    };
    written.metadata.resource_version = Some("42".into());
    c.update_state(&written);
    match c.correlate(ev(&object, "Killing", "m", at(1)), at(1)) {
        Decision::Patch { event, .. } => {
            assert_eq!(event.metadata.resource_version.as_deref(), Some("42"))
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn dedup_cache_forgets_least_recently_used() {
    let mut c = EventCorrelator::new(CorrelatorConfig {
        lru_entries: 2,
        ..Default::default()
    });
    let objects: Vec<_> = ["a", "b", "c"].iter().map(|n| node_ref(n)).collect();
    for o in &objects {
        assert!(matches!(
            c.correlate(ev(o, "R", "m", at(0)), at(0)),
            Decision::Create(_)
        ));
    }
    // "a" was evicted by "c": created again; "c" is still known: patched.
    assert!(matches!(
        c.correlate(ev(&objects[0], "R", "m", at(1)), at(1)),
        Decision::Create(_)
    ));
    assert!(matches!(
        c.correlate(ev(&objects[2], "R", "m", at(1)), at(1)),
        Decision::Patch { .. }
    ));
}

#[test]
fn lru_table() {
    let mut l = Lru::new(3);
    for k in 1..=3 {
        l.insert(k, k * 10);
    }
    assert_eq!(l.get_mut(&1), Some(&mut 10)); // 1 is now the most recent
    l.insert(4, 40); // evicts 2
    assert!(!l.contains(&2));
    assert!(l.contains(&1) && l.contains(&3) && l.contains(&4));
    l.insert(3, 33); // an update, no eviction
    assert_eq!(l.len(), 3);
    l.insert(5, 50); // evicts 1 (3 was touched after it)
    assert!(!l.contains(&1));
    assert_eq!(l.get_mut(&3), Some(&mut 33));
}

#[test]
fn patch_body_is_gos_merge_patch() {
    let body = patch_body(3, &Time(t0()), "x");
    assert_eq!(
        body,
        serde_json::json!({"count": 3, "lastTimestamp": "2023-11-14T22:13:20Z", "message": "x"})
    );
    assert!(patch_body(2, &Time(t0()), "").get("message").is_none());
}

/// An in-memory sink: a map of events, with scripted failures.
#[derive(Default)]
struct MemorySink {
    state: Mutex<MemoryState>,
}

#[derive(Default)]
struct MemoryState {
    created: Vec<Event>,
    patched: Vec<(String, serde_json::Value)>,
    unreachable_for: u32,
    patch_not_found: bool,
}

impl EventSink for Arc<MemorySink> {
    fn create<'a>(
        &'a self,
        _namespace: &'a str,
        event: &'a Event,
    ) -> SinkFuture<'a, Result<Event, SinkError>> {
        Box::pin(async move {
            let mut s = self.state.lock().unwrap();
            if s.unreachable_for > 0 {
                s.unreachable_for -= 1;
                return Err(SinkError::Unreachable("connection refused".into()));
            }
            let mut e = event.clone();
            e.metadata.resource_version = Some(s.created.len().to_string());
            s.created.push(e.clone());
            Ok(e)
        })
    }

    fn patch<'a>(
        &'a self,
        _namespace: &'a str,
        name: &'a str,
        body: &'a serde_json::Value,
    ) -> SinkFuture<'a, Result<Event, SinkError>> {
        Box::pin(async move {
            let mut s = self.state.lock().unwrap();
            if s.patch_not_found {
                return Err(SinkError::NotFound);
            }
            s.patched.push((name.to_owned(), body.clone()));
            let mut e = s
                .created
                .iter()
                .find(|e| e.metadata.name.as_deref() == Some(name))
                .cloned()
                .ok_or(SinkError::NotFound)?;
            e.count = body["count"].as_i64().map(|c| c as i32);
            Ok(e)
        })
    }
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn recorder_creates_then_patches() {
    let sink = Arc::new(MemorySink::default());
    let rec = spawn_with(sink.clone(), "node-1", RetryPolicy::default());
    let object = container_ref(&pod(), "app");
    rec.record(&object, EventType::Normal, "Pulled", "already present");
    rec.record(&object, EventType::Normal, "Pulled", "already present");
    settle().await;
    let s = sink.state.lock().unwrap();
    assert_eq!(s.created.len(), 1);
    assert_eq!(s.created[0].source, Some(source()));
    assert_eq!(s.patched.len(), 1);
    assert_eq!(Some(s.patched[0].0.clone()), s.created[0].metadata.name);
    assert_eq!(s.patched[0].1["count"], 2);
}

#[tokio::test(start_paused = true)]
async fn patch_of_a_vanished_event_creates_it() {
    let sink = Arc::new(MemorySink::default());
    let rec = spawn_with(sink.clone(), "node-1", RetryPolicy::default());
    let object = pod_ref(&pod());
    rec.record(&object, EventType::Warning, "FailedKillPod", "x");
    settle().await;
    sink.state.lock().unwrap().patch_not_found = true;
    rec.record(&object, EventType::Warning, "FailedKillPod", "x");
    settle().await;
    let s = sink.state.lock().unwrap();
    assert_eq!(s.created.len(), 2);
    assert_eq!(s.created[1].count, Some(2));
    assert_eq!(s.created[1].metadata.name, s.created[0].metadata.name);
}

#[tokio::test(start_paused = true)]
async fn unreachable_server_is_retried_boundedly() {
    let sink = Arc::new(MemorySink::default());
    sink.state.lock().unwrap().unreachable_for = 3;
    let rec = spawn_with(sink.clone(), "node-1", RetryPolicy::default());
    rec.record(&pod_ref(&pod()), EventType::Normal, "Created", "a");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(sink.state.lock().unwrap().created.len(), 1);

    sink.state.lock().unwrap().unreachable_for = 100;
    rec.record(&pod_ref(&pod()), EventType::Normal, "Created", "b");
    tokio::time::sleep(Duration::from_secs(200)).await;
    let s = sink.state.lock().unwrap();
    assert_eq!(s.created.len(), 1);
    // Twelve attempts in all.
    assert_eq!(s.unreachable_for, 100 - MAX_TRIES_PER_EVENT);
}

#[tokio::test(start_paused = true)]
async fn full_queue_drops_without_blocking() {
    // A writer stuck on an unreachable server leaves the queue to fill.
    let sink = Arc::new(MemorySink::default());
    sink.state.lock().unwrap().unreachable_for = u32::MAX;
    let rec = spawn_with(sink.clone(), "node-1", RetryPolicy::default());
    for i in 0..(MAX_QUEUED_EVENTS + 50) {
        rec.record(&node_ref(&format!("n{i}")), EventType::Normal, "R", "m");
    }
    assert_eq!(rec.queue.capacity(), 0);
}
