#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::render::{table, view};
use super::*;
use crate::types::RuntimeContainer;

const MS: i64 = 1_000_000;

fn id<'a>(uid: &'a str, name: &'a str) -> PodId<'a> {
    PodId {
        uid,
        namespace: "default",
        name,
    }
}

const INIT: &[&str] = &["setup"];
const APP: &[&str] = &["web", "sidecar"];

fn containers() -> Containers<'static> {
    Containers {
        init: INIT,
        app: APP,
    }
}

fn runtime(uid: &str, name: &str, states: &[(&str, ContainerState)]) -> RuntimePod {
    RuntimePod {
        uid: uid.into(),
        name: name.into(),
        namespace: "default".into(),
        sandboxes: Vec::new(),
        containers: states
            .iter()
            .map(|(n, s)| RuntimeContainer {
                name: (*n).into(),
                state: *s,
                ..Default::default()
            })
            .collect(),
    }
}

/// A whole first start of pod `name` (uid `uid`) from `t0`, one millisecond a step.
fn full_start(t: &Timeline, uid: &str, name: &str, t0: i64) {
    let p = id(uid, name);
    t.admitted(p, containers(), t0, t0 + MS);
    let mut at = t0 + MS;
    let mut next = || {
        at += MS;
        at
    };
    assert!(t.mark(p, Phase::WorkerStarted, None, next()));
    assert!(t.mark(p, Phase::VolumesReady, None, next()));
    assert!(t.mark(p, Phase::SandboxReady, None, next()));
    for phase in [
        Phase::ImageReady,
        Phase::ContainerCreated,
        Phase::ContainerStarted,
    ] {
        assert!(t.mark(p, phase, Some("setup"), next()));
    }
    t.runtime_seen(
        &runtime(uid, name, &[("setup", ContainerState::ContainerExited)]),
        next(),
    );
    for c in APP.iter().copied() {
        assert!(t.mark(p, Phase::ImagePulling, Some(c), next()));
        assert!(t.mark(p, Phase::ImageReady, Some(c), next()));
        assert!(t.mark(p, Phase::ContainerCreated, Some(c), next()));
        assert!(t.mark(p, Phase::ContainerStarted, Some(c), next()));
    }
    let running = [
        ("web", ContainerState::ContainerRunning),
        ("sidecar", ContainerState::ContainerRunning),
        ("setup", ContainerState::ContainerExited),
    ];
    t.runtime_seen(&runtime(uid, name, &running), next());
    assert!(t.status_visible(p, next()).is_some());
}

#[test]
fn a_start_keeps_its_phases_in_time_order_once_each() {
    let t = Timeline::new(Limits::default());
    full_start(&t, "u1", "web", 1_000 * MS);
    let starts = t.starts("default", "web").unwrap();
    assert_eq!(starts.len(), 1);
    let s = &starts[0];
    assert!(s.finished);
    assert_eq!((s.number, s.trigger), (1, Trigger::Created));
    let phases: Vec<(Phase, Option<&str>)> = s.marks().map(|(m, c)| (m.phase, c)).collect();
    assert_eq!(
        phases[..6],
        [
            (Phase::Seen, None),
            (Phase::Admitted, None),
            (Phase::WorkerStarted, None),
            (Phase::VolumesReady, None),
            (Phase::SandboxReady, None),
            (Phase::ImageReady, Some("setup")),
        ]
    );
    assert!(phases.contains(&(Phase::ContainerExited, Some("setup"))));
    assert_eq!(phases[phases.len() - 2], (Phase::RunningSeen, None));
    assert_eq!(phases[phases.len() - 1], (Phase::StatusVisible, None));
    let times: Vec<i64> = s.marks().map(|(m, _)| m.at).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // A finished start takes no more marks; a repeated phase is not recorded twice.
    assert!(!t.mark(id("u1", "web"), Phase::WorkerStarted, None, 2_000 * MS));
    // A mark for another incarnation, or an unknown container, is not this start's.
    assert!(!t.mark(id("other", "web"), Phase::VolumesReady, None, 0));
    assert_eq!(s.pull_window(), Some((1_009 * MS, 1_014 * MS)));
    assert!(s.made_sandbox());
}

#[test]
fn marks_taken_late_are_put_in_time_order_and_repeats_are_ignored() {
    let t = Timeline::new(Limits::default());
    let p = id("u", "p");
    t.admitted(p, containers(), 10 * MS, 11 * MS);
    assert!(t.mark(p, Phase::VolumesReady, None, 20 * MS));
    // A pull that began before the last mark was taken (its mark comes after the fact).
    assert!(t.mark(p, Phase::ImagePulling, Some("web"), 15 * MS));
    assert!(!t.mark(p, Phase::VolumesReady, None, 30 * MS));
    assert!(!t.mark(p, Phase::ImageReady, Some("nope"), 30 * MS));
    let s = &t.starts("default", "p").unwrap()[0];
    let got: Vec<(Phase, i64)> = s.marks().map(|(m, _)| (m.phase, m.at / MS)).collect();
    assert_eq!(
        got,
        [
            (Phase::Seen, 10),
            (Phase::Admitted, 11),
            (Phase::ImagePulling, 15),
            (Phase::VolumesReady, 20)
        ]
    );
    // Seen after admission (another clock) is taken as admission's moment.
    t.admitted(id("v", "q"), containers(), 50 * MS, 40 * MS);
    let s = &t.starts("default", "q").unwrap()[0];
    assert!(s.marks().all(|(m, _)| m.at == 40 * MS));
}

#[test]
fn a_restart_appends_a_start_only_once_the_last_one_finished() {
    let t = Timeline::new(Limits::default());
    // Not finished: a restart keeps adding to the start it is in.
    let busy = id("u9", "busy");
    t.admitted(busy, containers(), 0, MS);
    assert!(!t.restarted(busy, Trigger::Restarted, containers(), 2 * MS));
    assert_eq!(t.starts("default", "busy").map(|s| s.len()), Some(1));

    let p = id("u1", "web");
    full_start(&t, "u1", "web", 10 * MS);
    assert!(t.restarted(p, Trigger::Restarted, containers(), 100 * MS));
    assert!(t.mark(p, Phase::ContainerStarted, Some("web"), 101 * MS));
    // Another uid's restart is not this pod's.
    assert!(!t.restarted(id("u0", "web"), Trigger::Restarted, containers(), 0));
    let starts = t.starts("default", "web").unwrap();
    let numbers: Vec<(u32, Trigger)> = starts.iter().map(|s| (s.number, s.trigger)).collect();
    assert_eq!(numbers, [(1, Trigger::Created), (2, Trigger::Restarted)]);
    let last = starts.last().unwrap();
    assert_eq!(last.first_at(), Some(100 * MS));
    assert_eq!(
        last.marks().map(|(m, _)| m.phase).collect::<Vec<_>>(),
        [Phase::WorkerStarted, Phase::ContainerStarted]
    );
    assert!(!last.finished);
    // A new incarnation (another UID under the name) is a start of its own, numbered on.
    t.admitted(id("u2", "web"), containers(), 200 * MS, 201 * MS);
    let starts = t.starts("default", "web").unwrap();
    assert_eq!(starts.last().map(|s| (&*s.uid, s.number)), Some(("u2", 3)));
    // The old incarnation's marks no longer land anywhere.
    assert!(!t.mark(p, Phase::ContainerCreated, Some("web"), 202 * MS));
}

#[test]
fn memory_stays_bounded_over_thousands_of_starts() {
    let limits = Limits {
        pods: 64,
        starts_per_pod: 3,
    };
    let t = Timeline::new(limits);
    // 1,200 pods started once each, then one pod restarted 1,200 times.
    for i in 0..1_200 {
        let (uid, name) = (format!("uid-{i}"), format!("pod-{i}"));
        full_start(&t, &uid, &name, i64::from(i) * 100 * MS);
    }
    let (pods, starts) = t.counts();
    assert_eq!((pods, starts), (64, 64));
    let one_start = t.approx_bytes() / 64;
    // The oldest were evicted, the newest kept.
    assert!(t.starts("default", "pod-0").is_none());
    assert!(t.starts("default", "pod-1199").is_some());
    let p = id("uid-1199", "pod-1199");
    for i in 0..1_200 {
        let at = 1_000_000 * MS + i64::from(i) * 10 * MS;
        assert!(t.restarted(p, Trigger::Restarted, containers(), at));
        for c in APP.iter().copied() {
            t.mark(p, Phase::ContainerStarted, Some(c), at + MS);
        }
        assert!(t.status_visible(p, at + 2 * MS).is_some());
    }
    let (pods, starts) = t.counts();
    assert_eq!(pods, 64);
    assert!(starts <= 64 * 3, "{starts}");
    let kept = t.starts("default", "pod-1199").unwrap();
    assert_eq!(kept.len(), 3);
    assert_eq!(kept.last().map(|s| s.number), Some(1_201));
    // Bounded: never more than the limits' worth of full starts.
    let bound = 64 * 3 * (one_start + MARKS_PER_START * std::mem::size_of::<Mark>());
    assert!(t.approx_bytes() <= bound, "{} > {bound}", t.approx_bytes());
}

#[test]
fn a_start_keeps_at_most_its_share_of_marks() {
    let t = Timeline::new(Limits::default());
    let names: Vec<String> = (0..100).map(|i| format!("c{i}")).collect();
    let app: Vec<&str> = names.iter().map(String::as_str).collect();
    let p = id("u", "big");
    t.admitted(
        p,
        Containers {
            init: &[],
            app: &app,
        },
        0,
        1,
    );
    for (i, c) in app.iter().copied().enumerate() {
        t.mark(p, Phase::ContainerStarted, Some(c), 10 + i as i64);
    }
    let s = &t.starts("default", "big").unwrap()[0];
    assert_eq!(s.marks().count(), MARKS_PER_START);
    assert_eq!(s.dropped as usize, 100 + 2 - MARKS_PER_START);
}

#[test]
fn the_view_has_durations_that_add_up_and_the_table_shows_them() {
    let t = Timeline::new(Limits::default());
    full_start(&t, "u1", "web", 1_700_000_000_000 * MS);
    let sandbox = SandboxTimings {
        files_ms: 0.5,
        netns_ms: 1.25,
        cni_add_ms: 86.5,
        pause_ms: Some(90.0),
    };
    // Kept with the start that made the sandbox, even once it finished; not for another UID.
    assert!(!t.sandbox_timings(id("u2", "web"), sandbox));
    assert!(t.sandbox_timings(id("u1", "web"), sandbox));
    let v = view("default", "web", &t.starts("default", "web").unwrap());
    let s = &v.starts[0];
    assert_eq!(s.started_at, "2023-11-14T22:13:20.000000000Z");
    let sum: f64 = s.marks.iter().map(|m| m.duration_ms).sum();
    assert!((sum - s.total_ms).abs() < 1e-6, "{sum} vs {}", s.total_ms);
    assert_eq!(s.marks.last().map(|m| m.offset_ms), Some(s.total_ms));
    assert_eq!(s.marks[1].at, "2023-11-14T22:13:20.001000000Z");
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["starts"][0]["trigger"], "created");
    assert_eq!(json["starts"][0]["marks"][0]["phase"], "seen");
    assert!(json["starts"][0]["marks"][0].get("container").is_none());
    assert_eq!(json["starts"][0]["marks"][5]["container"], "setup");
    assert_eq!(json["starts"][0]["marks"][1]["offsetMs"], 1.0);
    assert_eq!(json["starts"][0]["sandboxRuntime"]["cniAddMs"], 86.5);
    let back: render::PodTimeline = serde_json::from_value(json).unwrap();
    assert_eq!(back, v);
    let text = table(&v);
    assert!(text.starts_with("pod default/web\n"), "{text}");
    assert!(text.contains("start 1 (created) uid u1 at 2023-11-14T22:13:20.000000000Z"));
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.contains(&vec!["image_pulling", "sidecar", "13.000", "1.000"]),
        "{text}"
    );
    assert!(
        rows.contains(&vec!["seen", "-", "0.000", "0.000"]),
        "{text}"
    );
    assert!(rows.contains(&vec!["total", "18.000"]), "{text}");
    assert!(
        text.contains("in the runtime: files 0.5 ms, netns 1.2 ms, then at once CNI ADD 86.5 ms and pause container 90.0 ms"),
        "{text}"
    );

    // A sandbox without a pause process: no pause time in the JSON, none in the table.
    let t = Timeline::new(Limits::default());
    full_start(&t, "u3", "lean", 1_700_000_000_000 * MS);
    let lean = SandboxTimings {
        pause_ms: None,
        ..sandbox
    };
    assert!(t.sandbox_timings(id("u3", "lean"), lean));
    let v = view("default", "lean", &t.starts("default", "lean").unwrap());
    let json = serde_json::to_value(&v).unwrap();
    assert!(json["starts"][0]["sandboxRuntime"].get("pauseMs").is_none());
    let text = table(&v);
    assert!(
        text.contains(
            "in the runtime: files 0.5 ms, namespaces 1.2 ms, CNI ADD 86.5 ms (no pause container)"
        ),
        "{text}"
    );
}

#[test]
fn the_clock_follows_the_wall_clock_and_instants() {
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let a = now();
    let later = Instant::now() + std::time::Duration::from_millis(5);
    assert!((a - before).abs() < 1_000 * MS, "{a} vs {before}");
    assert!(at(later) - a >= 5 * MS);
}

#[test]
fn running_is_not_seen_while_a_created_containers_start_is_unmarked() {
    let t = Timeline::new(Limits::default());
    let p = id("u", "p");
    t.admitted(p, containers(), 0, MS);
    let all = [
        ("web", ContainerState::ContainerRunning),
        ("sidecar", ContainerState::ContainerRunning),
    ];
    t.mark(p, Phase::ContainerCreated, Some("web"), 2 * MS);
    t.mark(p, Phase::ContainerCreated, Some("sidecar"), 3 * MS);
    t.mark(p, Phase::ContainerStarted, Some("web"), 4 * MS);
    // sidecar runs, but its StartContainer has not returned yet.
    t.runtime_seen(&runtime("u", "p", &all), 5 * MS);
    t.mark(p, Phase::ContainerStarted, Some("sidecar"), 6 * MS);
    t.runtime_seen(&runtime("u", "p", &all), 7 * MS);
    let s = &t.starts("default", "p").unwrap()[0];
    let seen: Vec<i64> = s
        .marks()
        .filter(|(m, _)| m.phase == Phase::RunningSeen)
        .map(|(m, _)| m.at / MS)
        .collect();
    assert_eq!(seen, [7]);
    // An init container's exit counts only once its start was marked.
    let exited = [("setup", ContainerState::ContainerExited)];
    t.runtime_seen(&runtime("u", "p", &exited), 8 * MS);
    assert!(
        !t.starts("default", "p").unwrap()[0]
            .marks()
            .any(|(m, _)| m.phase == Phase::ContainerExited)
    );
}
