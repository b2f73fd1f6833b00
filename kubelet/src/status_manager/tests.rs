#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, PodCondition,
    PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::rules::*;
use std::sync::Arc;

use crate::types::Pod;

fn t(s: &str) -> Time {
    Time(s.parse().unwrap())
}

fn cond(type_: &str, status: &str, at: Option<&str>) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: at.map(t),
        ..Default::default()
    }
}

fn phase(p: &str) -> PodStatus {
    PodStatus {
        phase: Some(p.into()),
        ..Default::default()
    }
}

fn container(name: &str, exit: Option<i32>) -> ContainerStatus {
    let state = match exit {
        Some(code) => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        },
        None => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(t("2024-01-01T00:00:01.5Z")),
            }),
            ..Default::default()
        },
    };
    ContainerStatus {
        name: name.into(),
        state: Some(state),
        ..Default::default()
    }
}

fn with_policy(policy: &str) -> Pod {
    Pod {
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn terminal_phase_is_kept() {
    let now = t("2024-01-01T00:00:10Z");
    let mut old = phase("Failed");
    old.reason = Some("Evicted".into());
    let got = follow(Some(&old), phase("Running"), &now);
    assert_eq!(got.phase.as_deref(), Some("Failed"));
    assert_eq!(got.reason.as_deref(), Some("Evicted"));
    // A terminal phase over a running one goes through.
    let got = follow(Some(&phase("Running")), phase("Succeeded"), &now);
    assert_eq!(got.phase.as_deref(), Some("Succeeded"));
}

#[test]
fn start_time_and_transition_times() {
    let now = t("2024-01-01T00:00:10.75Z");
    let mut old = phase("Running");
    old.start_time = Some(t("2024-01-01T00:00:01Z"));
    old.conditions = Some(vec![
        cond("Ready", "False", Some("2024-01-01T00:00:02Z")),
        cond("Initialized", "True", Some("2024-01-01T00:00:03Z")),
    ]);
    let mut new = phase("Running");
    new.conditions = Some(vec![
        cond("Ready", "True", None),
        cond("Initialized", "True", None),
        cond("PodScheduled", "True", None),
    ]);
    let got = follow(Some(&old), new, &now);
    assert_eq!(got.start_time, Some(t("2024-01-01T00:00:01Z")));
    let times: Vec<_> = got
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.last_transition_time.unwrap())
        .collect();
    assert_eq!(
        times,
        [
            t("2024-01-01T00:00:10Z"), // changed: now, in whole seconds
            t("2024-01-01T00:00:03Z"), // unchanged: kept
            t("2024-01-01T00:00:10Z"), // new
        ]
    );
    // No previous status: start time is now.
    assert_eq!(
        follow(None, phase("Pending"), &now).start_time,
        Some(t("2024-01-01T00:00:10Z"))
    );
}

#[test]
fn normalize_truncates_and_sorts() {
    let mut s = PodStatus {
        start_time: Some(t("2024-01-01T00:00:01.999Z")),
        container_statuses: Some(vec![container("b", None), container("a", Some(0))]),
        ..Default::default()
    };
    normalize(&mut s);
    assert_eq!(s.start_time, Some(t("2024-01-01T00:00:01Z")));
    let cs = s.container_statuses.unwrap();
    assert_eq!(cs[0].name, "a");
    let started = cs[1].state.as_ref().unwrap().running.as_ref().unwrap();
    assert_eq!(started.started_at, Some(t("2024-01-01T00:00:01Z")));
}

#[test]
fn terminated_containers_stay_terminated() {
    let old = |code| PodStatus {
        container_statuses: Some(vec![container("c", Some(code))]),
        ..Default::default()
    };
    let running = PodStatus {
        container_statuses: Some(vec![container("c", None)]),
        ..Default::default()
    };
    // (restart policy, old exit code, allowed)
    let cases = [
        ("Always", 0, true),
        ("Always", 1, true),
        ("Never", 1, false),
        ("Never", 0, false),
        ("OnFailure", 1, true),
        ("OnFailure", 0, false),
    ];
    for (policy, code, allowed) in cases {
        let got = check_transition(&with_policy(policy), &old(code), &running);
        assert_eq!(got.is_ok(), allowed, "{policy} after exit {code}: {got:?}");
    }
}

#[test]
fn api_conditions_and_terminal_phase_survive_the_merge() {
    let mut api = phase("Failed");
    api.conditions = Some(vec![
        cond("DisruptionTarget", "True", Some("2024-01-01T00:00:05Z")),
        cond("Ready", "True", Some("2024-01-01T00:00:04Z")),
    ]);
    let mut ours = phase("Running");
    ours.conditions = Some(vec![cond("Ready", "False", Some("2024-01-01T00:00:06Z"))]);
    let got = merge_with_api(Some(&api), ours);
    assert_eq!(got.phase.as_deref(), Some("Failed"));
    let types: Vec<_> = got
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert_eq!(types, ["Ready", "DisruptionTarget"]);
}

#[test]
fn patch_has_the_uid_and_clears_what_only_the_api_has() {
    let mut api = phase("Pending");
    api.message = Some("old".into());
    api.nominated_node_name = Some("n1".into());
    let ours = merge_with_api(Some(&api), phase("Running"));
    assert_eq!(ours.nominated_node_name.as_deref(), Some("n1"));
    let body = patch_body("u1", Some(&api), &ours);
    assert_eq!(
        body,
        json!({"metadata": {"uid": "u1"}, "status": {"phase": "Running", "message": null}})
    );
}

fn manager() -> super::StatusManager {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let api = crate::kube_client::ApiHandle::new(client, "node");
    super::StatusManager::new(api, crate::source::MirrorTable::default())
}

fn api_pod(rv: &str, status: PodStatus) -> Pod {
    let mut pod = with_policy("Always");
    pod.metadata.name = Some("p".into());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some("u1".into());
    pod.metadata.resource_version = Some(rv.into());
    pod.status = Some(status);
    pod
}

fn running() -> PodStatus {
    PodStatus {
        container_statuses: Some(vec![container("app", None)]),
        ..phase("Running")
    }
}

#[tokio::test]
async fn an_older_copy_from_a_sync_does_not_make_the_pod_drift() {
    use crate::status::sink::StatusSink;
    let m = manager();
    m.set_pod_status(&Arc::new(api_pod("5", phase("Pending"))), running());
    let written = m.entries()["u1"].status.clone();
    // The watch shows our write (as a re-list may, under the version the kubelet first saw);
    // then a sync hands in the copy it started with.
    m.pod_seen(&Arc::new(api_pod("5", written.clone())));
    m.set_pod_status(&Arc::new(api_pod("5", phase("Pending"))), running());
    m.entries().get_mut("u1").unwrap().sent = Some(written);
    m.mark_drifted();
    assert!(
        !m.entries()["u1"].recheck,
        "no re-check when the API has our status"
    );
    // Someone else changed a field the kubelet owns: re-checked.
    m.pod_seen(&Arc::new(api_pod("7", phase("Running"))));
    m.mark_drifted();
    assert!(m.entries()["u1"].recheck);
}
