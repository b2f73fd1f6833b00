#![allow(clippy::unwrap_used)]

use super::*;
use crate::types::{RuntimeContainer, RuntimeSandbox};
use ferrolet_proto::cri::ContainerState;
use std::collections::BTreeMap;

fn pod_seen(seen: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.annotations = Some(BTreeMap::from([(
        crate::types::labels::CONFIG_SEEN.to_string(),
        seen.to_string(),
    )]));
    pod
}

fn status(phase: Option<&str>) -> PodStatus {
    PodStatus {
        phase: phase.map(str::to_string),
        ..Default::default()
    }
}

#[test]
fn operation_types_are_go_s() {
    for (method, op) in [
        ("RunPodSandbox", "run_podsandbox"),
        ("PodSandboxStatus", "podsandbox_status"),
        ("ListPodSandbox", "list_podsandbox"),
        ("ListContainers", "list_containers"),
        ("UpdateContainerResources", "update_container"),
        ("ExecSync", "exec_sync"),
        ("ImageFsInfo", "image_fs_info"),
        ("PullImage", "pull_image"),
        ("SomethingNew", "other"),
    ] {
        assert_eq!(operation_type(method), op);
    }
}

#[test]
fn runtime_operations_count_time_and_errors() {
    let m = global();
    let op = ["reopen_container_log"];
    let (before, errors_before) = (
        m.runtime_operations.get(&op),
        m.runtime_operations_errors.get(&op),
    );
    runtime_operation("ReopenContainerLog", Instant::now(), false);
    runtime_operation("ReopenContainerLog", Instant::now(), true);
    assert!(m.runtime_operations.get(&op) >= before + 2.0);
    assert!(m.runtime_operations_errors.get(&op) > errors_before);
    assert!(m.runtime_operations_duration.series_for(&op).count() >= 2);
}

#[test]
fn pod_start_is_measured_from_first_seen_to_running() {
    let seen = "2024-05-01T10:00:00.250000000Z";
    let now = UNIX_EPOCH + Duration::from_secs(1_714_557_603);
    let pod = pod_seen(seen);
    let secs = pod_start_seconds(
        &pod,
        &status(Some("Pending")),
        &status(Some("Running")),
        now,
    );
    assert_eq!(secs, Some(2.75));
    // No status before counts as Pending.
    assert!(pod_start_seconds(&pod, &status(None), &status(Some("Running")), now).is_some());
    // Only the transition counts.
    assert_eq!(
        pod_start_seconds(
            &pod,
            &status(Some("Running")),
            &status(Some("Running")),
            now
        ),
        None
    );
    assert_eq!(
        pod_start_seconds(
            &pod,
            &status(Some("Pending")),
            &status(Some("Pending")),
            now
        ),
        None
    );
    assert_eq!(
        pod_start_seconds(&pod, &status(Some("Pending")), &status(Some("Failed")), now),
        None
    );
    // Without the annotation there is nothing to measure from.
    assert_eq!(
        pod_start_seconds(
            &Pod::default(),
            &status(None),
            &status(Some("Running")),
            now
        ),
        None
    );
    // A clock that went back gives 0, not a negative duration.
    let early = UNIX_EPOCH + Duration::from_secs(1_714_557_000);
    assert_eq!(
        pod_start_seconds(&pod, &status(None), &status(Some("Running")), early),
        Some(0.0)
    );
}

#[test]
fn pod_worker_passes_are_labelled_create_update_or_sync() {
    let m = global();
    let count = |op: &str| m.pod_worker_duration.series_for(&[op]).count();
    let (c, u, s) = (count(OP_CREATE), count(OP_UPDATE), count(OP_SYNC));
    note_pod_update("uid-metrics-test-a", false);
    note_pod_update("uid-metrics-test-a", true); // still a create: it never ran
    drop(pod_worker_timer("uid-metrics-test-a"));
    note_pod_update("uid-metrics-test-a", true);
    drop(pod_worker_timer("uid-metrics-test-a"));
    drop(pod_worker_timer("uid-metrics-test-a"));
    // Other tests run in parallel: at least ours are there.
    assert!(count(OP_CREATE) > c);
    assert!(count(OP_UPDATE) > u);
    assert!(count(OP_SYNC) > s);
}

#[test]
fn running_pods_and_containers_by_state() {
    let container = |state| RuntimeContainer {
        state,
        ..Default::default()
    };
    let sandbox = |ready| RuntimeSandbox {
        ready,
        ..Default::default()
    };
    let pods = [
        RuntimePod {
            sandboxes: vec![sandbox(false), sandbox(true)],
            containers: vec![
                container(ContainerState::ContainerRunning),
                container(ContainerState::ContainerExited),
                container(ContainerState::ContainerExited),
            ],
            ..Default::default()
        },
        RuntimePod {
            sandboxes: vec![sandbox(false)],
            containers: vec![
                container(ContainerState::ContainerCreated),
                container(ContainerState::ContainerUnknown),
            ],
            ..Default::default()
        },
    ];
    assert_eq!(count_running(pods.iter()), (1, [1, 1, 2, 1]));
}

#[test]
fn probes_are_counted_and_forgotten() {
    let m = global();
    let labels = [
        PROBE_READINESS,
        RESULT_SUCCESSFUL,
        "c",
        "p-metrics-test",
        "ns",
        "u-metrics-test",
    ];
    record_probe(
        PROBE_READINESS,
        RESULT_SUCCESSFUL,
        "c",
        "p-metrics-test",
        "ns",
        "u-metrics-test",
    );
    record_probe(
        PROBE_READINESS,
        RESULT_SUCCESSFUL,
        "c",
        "p-metrics-test",
        "ns",
        "u-metrics-test",
    );
    observe_probe_duration(
        PROBE_READINESS,
        "c",
        "p-metrics-test",
        "ns",
        Duration::from_millis(3),
    );
    assert_eq!(m.probe_total.get(&labels), 2.0);
    let text = render_probes();
    assert!(
        text.contains(
            "prober_probe_total{probe_type=\"Readiness\",result=\"successful\",container=\"c\",pod=\"p-metrics-test\",namespace=\"ns\",pod_uid=\"u-metrics-test\"} 2\n"
        ),
        "{text}"
    );
    assert!(text.contains("# HELP prober_probe_total [BETA] "), "{text}");
    forget_probe(
        PROBE_READINESS,
        "c",
        "p-metrics-test",
        "ns",
        "u-metrics-test",
    );
    assert_eq!(m.probe_total.get(&labels), 0.0);
    assert!(!render_probes().contains("p-metrics-test"));
}

#[test]
fn probe_runs_of_a_pod() {
    let m = global();
    let mut pod = Pod::default();
    pod.metadata.name = Some("web-run".into());
    pod.metadata.uid = Some("u-probe-run".into());
    observe_probe(PROBE_LIVENESS, true, &pod, "c", Instant::now());
    observe_probe(PROBE_LIVENESS, false, &pod, "c", Instant::now());
    let labels = |result| {
        [
            PROBE_LIVENESS,
            result,
            "c",
            "web-run",
            "default",
            "u-probe-run",
        ]
    };
    assert_eq!(m.probe_total.get(&labels(RESULT_SUCCESSFUL)), 1.0);
    assert_eq!(m.probe_total.get(&labels(RESULT_FAILED)), 1.0);
    assert_eq!(
        m.probe_duration
            .series_for(&[PROBE_LIVENESS, "c", "web-run", "default"])
            .count(),
        1
    );
    forget_probe_of(PROBE_LIVENESS, &pod, "c");
    assert_eq!(m.probe_total.get(&labels(RESULT_SUCCESSFUL)), 0.0);
}

#[test]
fn the_exposition_carries_every_family_with_help_and_type() {
    runtime_operation("RunPodSandbox", Instant::now(), true);
    record_relist(
        RelistStats {
            last_duration: Some(Duration::from_millis(3)),
            last_interval: Some(Duration::from_secs(1)),
            ..Default::default()
        },
        std::iter::empty(),
    );
    drop(pod_worker_timer("uid-metrics-test-exposition"));
    record_probe(
        PROBE_LIVENESS,
        RESULT_FAILED,
        "c",
        "p",
        "ns",
        "u-exposition",
    );
    let text = render();
    for family in [
        "kubelet_pod_start_duration_seconds",
        "kubelet_pod_worker_duration_seconds",
        "kubelet_pleg_relist_duration_seconds",
        "kubelet_pleg_relist_interval_seconds",
        "kubelet_pleg_last_seen_seconds",
        "kubelet_runtime_operations_total",
        "kubelet_runtime_operations_duration_seconds",
        "kubelet_runtime_operations_errors_total",
        "kubelet_running_pods",
        "kubelet_running_containers",
        "prober_probe_total",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
    ] {
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "no HELP for {family}:\n{text}"
        );
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "no TYPE for {family}"
        );
    }
    assert!(
        text.contains("kubelet_runtime_operations_errors_total{operation_type=\"run_podsandbox\"}")
    );
    for state in CONTAINER_STATES {
        assert!(text.contains(&format!(
            "kubelet_running_containers{{container_state=\"{state}\"}}"
        )));
    }
    // Every line is a comment or `name[{labels}] value`, value a float.
    for line in text.lines() {
        if line.starts_with('#') {
            assert!(
                line.starts_with("# HELP ") || line.starts_with("# TYPE "),
                "{line}"
            );
            continue;
        }
        let (_, value) = line.rsplit_once(' ').unwrap();
        let ok = matches!(value, "+Inf" | "-Inf" | "NaN") || value.parse::<f64>().is_ok();
        assert!(ok, "bad value in {line:?}");
    }
}

#[test]
fn oom_kills_are_counted_by_scope_from_zero() {
    oom_events_watched(&["container", "pod", "system", "other"]);
    let m = global();
    let before = m.oom_events.get(&["other"]);
    oom_event("other");
    // Other tests count kills too: at least this one.
    assert!(m.oom_events.get(&["other"]) >= before + 1.0);
    let text = render();
    assert!(text.contains("# TYPE kubelet_oom_events_total counter"));
    for scope in ["container", "pod", "system", "other"] {
        assert!(
            text.contains(&format!("kubelet_oom_events_total{{scope=\"{scope}\"}} ")),
            "{scope}:\n{text}"
        );
    }
}

#[test]
fn the_start_slis_label_the_first_pod_on_the_network_alone() {
    let m = global();
    let count = |label: &str| m.pod_start_sli_duration.series_for(&[label]).count();
    let (first, other) = (count("true"), count(""));
    // A host-network pod does not count as the first with network.
    observe_pod_start_sli(1.0, 3.0, true);
    observe_pod_start_sli(2.0, 4.0, false);
    observe_pod_start_sli(2.5, 2.5, false);
    // One pod is ever the first with network; every other goes under "".
    let firsts = count("true") - first;
    assert!(firsts <= 1 && count("true") == 1, "{firsts}");
    assert_eq!(firsts + count("") - other, 3);
    let total = m.pod_start_total_duration.series_for(&[""]);
    assert!(total.sum() >= 3.0 + 2.5);
    observe_pod_worker_start(0.25);
    let text = render();
    for family in [
        "kubelet_pod_start_sli_duration_seconds",
        "kubelet_pod_start_total_duration_seconds",
        "kubelet_pod_worker_start_duration_seconds",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} histogram")),
            "{family}"
        );
    }
    // Go's podStartupDurationBuckets and DefBuckets.
    assert!(
        text.contains(
            "kubelet_pod_start_sli_duration_seconds_bucket{first_with_network=\"\",le=\"3600\"}"
        ),
        "{text}"
    );
    assert!(text.contains("kubelet_pod_worker_start_duration_seconds_bucket{le=\"0.005\"}"));
}
