//! Table tests of the pure parts: quantities, allocatable, conditions, images, the send
//! decision, registration reconcile and the lease.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::lease::{self, ensure_backoff, jittered, renew_interval};
use super::machine::{HugePages, MachineInfo, count_cpu_list, hugepage_size, pretty_name};
use super::register::{initial_node, reconcile_patch, register_backoff};
use super::setters::*;
use super::*;
use crate::eviction::signals::{Signal, Threshold, ThresholdValue};

fn q(s: &str) -> Quantity {
    Quantity(s.into())
}

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn machine() -> MachineInfo {
    MachineInfo {
        machine_id: "m".into(),
        system_uuid: "u".into(),
        boot_id: "b1".into(),
        kernel_version: "6.1.0".into(),
        os_image: "Debian GNU/Linux 12 (bookworm)".into(),
        hostname: "n1".into(),
        num_cores: 4,
        memory_bytes: 24_597_928 * 1024,
        hugepages: vec![
            HugePages {
                page_bytes: 2 << 20,
                pages: 0,
            },
            HugePages {
                page_bytes: 1 << 30,
                pages: 0,
            },
        ],
        rootfs_capacity: Some(100 << 30),
    }
}

fn hard(signal: Signal, value: ThresholdValue) -> Threshold {
    Threshold {
        signal,
        value,
        grace_period: Duration::ZERO,
        min_reclaim: None,
    }
}

fn ready_health() -> RuntimeHealth {
    RuntimeHealth {
        last_ready_age: Some(Duration::from_secs(1)),
        conditions: Some(vec![
            RuntimeCondition {
                type_: "RuntimeReady".into(),
                status: true,
                ..Default::default()
            },
            RuntimeCondition {
                type_: "NetworkReady".into(),
                status: true,
                ..Default::default()
            },
        ]),
    }
}

#[test]
fn quantities_print_as_go_does() {
    let cases: [(Quantity, &str); 9] = [
        (binary_quantity(24_597_928 * 1024), "24597928Ki"),
        (binary_quantity(16 << 30), "16Gi"),
        (binary_quantity(0), "0"),
        (binary_quantity(1000), "1k"),
        (binary_quantity(1500 * 1024 + 1), "1536001"),
        (decimal_quantity(110), "110"),
        (milli_quantity(4000), "4"),
        (milli_quantity(3900), "3900m"),
        (milli_quantity(0), "0"),
    ];
    for (got, want) in cases {
        assert_eq!(got.0, want);
    }
    assert_eq!(hugepages_resource(2 << 20), "hugepages-2Mi");
    assert_eq!(hugepages_resource(1 << 30), "hugepages-1Gi");
}

#[test]
fn capacity_lists_every_resource() {
    let c = capacity(&machine(), 110);
    let want: BTreeMap<String, Quantity> = [
        ("cpu", "4"),
        ("memory", "24597928Ki"),
        ("pods", "110"),
        ("ephemeral-storage", "100Gi"),
        ("hugepages-2Mi", "0"),
        ("hugepages-1Gi", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), q(v)))
    .collect();
    assert_eq!(c, want);
}

#[test]
fn allocatable_subtracts_reservations_and_thresholds() {
    let cap: BTreeMap<String, Quantity> = [
        ("cpu", "4"),
        ("memory", "16Gi"),
        ("pods", "110"),
        ("ephemeral-storage", "100Gi"),
        ("hugepages-2Mi", "1Gi"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), q(v)))
    .collect();
    let kube: BTreeMap<String, String> = [("cpu", "100m"), ("memory", "1Gi"), ("pid", "1000")]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    let system: BTreeMap<String, String> = [("cpu", "0.5"), ("ephemeral-storage", "200Gi")]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    let thresholds = [
        hard(Signal::MemoryAvailable, ThresholdValue::Quantity(100 << 20)),
        hard(Signal::NodeFsAvailable, ThresholdValue::Percentage(0.1)),
        hard(Signal::PidAvailable, ThresholdValue::Quantity(10)),
    ];
    let r = reservation(&cap, &kube, &system, &thresholds);
    assert_eq!(r.get("cpu"), Some(&600));
    assert_eq!(r.get("memory"), Some(&((1 << 30) + (100 << 20))));
    assert_eq!(r.get("pods"), None);
    let a = allocatable(&cap, &r);
    let got: BTreeMap<&str, &str> = a.iter().map(|(k, v)| (k.as_str(), v.0.as_str())).collect();
    let want: BTreeMap<&str, &str> = [
        ("cpu", "3400m"),
        // 16Gi - 1Gi - 100Mi - 1Gi of hugepages.
        ("memory", "14236Mi"),
        ("pods", "110"),
        // 200Gi reserved on 100Gi: never below zero.
        ("ephemeral-storage", "0"),
        ("hugepages-2Mi", "1Gi"),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
}

#[test]
fn ready_errors_follow_go_messages() {
    let not_ready = RuntimeHealth {
        last_ready_age: Some(Duration::from_secs(1)),
        conditions: Some(vec![
            RuntimeCondition {
                type_: "RuntimeReady".into(),
                status: true,
                ..Default::default()
            },
            RuntimeCondition {
                type_: "NetworkReady".into(),
                status: false,
                reason: "NetworkPluginNotReady".into(),
                message: "Network plugin returns error: cni plugin not initialized".into(),
            },
        ]),
    };
    let cases: [(RuntimeHealth, Option<&str>, &str); 5] = [
        (ready_health(), None, ""),
        (
            not_ready.clone(),
            None,
            "container runtime network not ready: NetworkReady=false \
             reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not \
             initialized",
        ),
        (
            RuntimeHealth::default(),
            None,
            "[container runtime status check may not have completed yet, network state unknown]",
        ),
        (
            RuntimeHealth {
                last_ready_age: Some(Duration::from_secs(31)),
                conditions: Some(vec![]),
            },
            None,
            "[container runtime is down, container runtime not ready: <nil>, container runtime \
             network not ready: <nil>]",
        ),
        (
            ready_health(),
            Some("pleg was last seen active 3m0s ago; threshold is 3m0s"),
            "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s",
        ),
    ];
    for (health, pleg, want) in cases {
        let errs = ready_errors(&health, pleg);
        let got = if errs.is_empty() {
            String::new()
        } else {
            aggregate(&errs)
        };
        assert_eq!(got, want);
    }
    assert_eq!(aggregate(&["a".into(), "a".into()]), "a");
}

fn condition<'a>(s: &'a NodeStatus, type_: &str) -> &'a k8s_openapi::api::core::v1::NodeCondition {
    s.conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap()
}

#[test]
fn conditions_keep_transition_time_until_status_changes() {
    let mut s = NodeStatus::default();
    let events = set_conditions(&mut s, "n1", Pressure::default(), &[], t(0));
    let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
    // First report: pressure events, no Ready event (as Go).
    assert_eq!(
        reasons,
        [
            "NodeHasSufficientMemory",
            "NodeHasNoDiskPressure",
            "NodeHasSufficientPID"
        ]
    );
    assert_eq!(
        events[0].message,
        "Node n1 status is now: NodeHasSufficientMemory"
    );
    let ready = condition(&s, "Ready");
    assert_eq!(ready.status, "True");
    assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("kubelet is posting ready status")
    );

    // Nothing changes: heartbeat moves, transition stays, no events.
    let events = set_conditions(&mut s, "n1", Pressure::default(), &[], t(10));
    assert!(events.is_empty());
    let ready = condition(&s, "Ready");
    assert_eq!(ready.last_heartbeat_time.as_ref().unwrap().0, t(10));
    assert_eq!(ready.last_transition_time.as_ref().unwrap().0, t(0));

    // Memory pressure and not ready.
    let p = Pressure {
        memory: true,
        ..Default::default()
    };
    let events = set_conditions(
        &mut s,
        "n1",
        p,
        &["container runtime is down".into()],
        t(20),
    );
    let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["NodeHasInsufficientMemory", "NodeNotReady"]);
    let mem = condition(&s, "MemoryPressure");
    assert_eq!(mem.status, "True");
    assert_eq!(mem.reason.as_deref(), Some("KubeletHasInsufficientMemory"));
    assert_eq!(mem.last_transition_time.as_ref().unwrap().0, t(20));
    let disk = condition(&s, "DiskPressure");
    assert_eq!(disk.last_transition_time.as_ref().unwrap().0, t(0));
    let ready = condition(&s, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
    assert_eq!(ready.message.as_deref(), Some("container runtime is down"));
    assert_eq!(ready.last_transition_time.as_ref().unwrap().0, t(20));
    assert_eq!(s.conditions.as_ref().unwrap().len(), 4);
}

#[test]
fn images_keep_the_largest_with_digests_first() {
    let list: Vec<ImageInfo> = (0..60)
        .map(|i| ImageInfo {
            repo_tags: vec![format!("img{i}:latest")],
            repo_digests: vec![format!("img{i}@sha256:{i}")],
            size: i * 10,
        })
        .collect();
    let out = images(list.clone(), 50);
    assert_eq!(out.len(), 50);
    assert_eq!(out[0].size_bytes, Some(590));
    assert_eq!(out[49].size_bytes, Some(100));
    assert_eq!(
        out[0].names.as_deref().unwrap(),
        ["img59@sha256:59", "img59:latest"]
    );
    assert_eq!(images(list, -1).len(), 60);
    let many = ImageInfo {
        repo_tags: (0..4).map(|i| format!("t{i}")).collect(),
        repo_digests: (0..4).map(|i| format!("d{i}")).collect(),
        size: 1,
    };
    let names = images(vec![many], 50)[0].names.clone().unwrap();
    assert_eq!(names, ["d0", "d1", "d2", "d3", "t0"]);
}

#[test]
fn go_arch_names() {
    for (rust, go) in [
        ("x86_64", "amd64"),
        ("aarch64", "arm64"),
        ("s390x", "s390x"),
    ] {
        assert_eq!(go_arch_of(rust), go);
    }
}

fn params_status(
    old: &NodeStatus,
    inputs: NodeInputs,
    now: Timestamp,
) -> (NodeStatus, Vec<NodeEvent>) {
    let m = machine();
    let r = BTreeMap::new();
    let params = StatusParams {
        node_name: "n1",
        hostname: "n1",
        ip: "10.0.0.5".parse().unwrap(),
        machine: &m,
        max_pods: 110,
        reservation: &r,
        kubelet_port: 10250,
        max_images: 50,
    };
    node_status(old, &params, inputs, now)
}

fn ready_inputs() -> NodeInputs {
    NodeInputs {
        runtime: ready_health(),
        runtime_version: Some(("containerd".into(), "1.7.24".into())),
        images: Some(vec![]),
        ..Default::default()
    }
}

#[test]
fn full_status_and_change_detection() {
    let (s1, _) = params_status(&NodeStatus::default(), ready_inputs(), t(0));
    let info = s1.node_info.as_ref().unwrap();
    assert_eq!(info.container_runtime_version, "containerd://1.7.24");
    assert_eq!(info.kubelet_version, KUBELET_VERSION);
    assert_eq!(info.operating_system, "linux");
    assert_eq!(info.boot_id, "b1");
    let addrs = s1.addresses.as_ref().unwrap();
    assert_eq!(addrs[0].type_, "InternalIP");
    assert_eq!(addrs[0].address, "10.0.0.5");
    assert_eq!(addrs[1].type_, "Hostname");
    assert_eq!(
        s1.daemon_endpoints
            .as_ref()
            .unwrap()
            .kubelet_endpoint
            .as_ref()
            .unwrap()
            .port,
        10250
    );

    // Only heartbeats move: unchanged.
    let (s2, events) = params_status(&s1, ready_inputs(), t(10));
    assert!(events.is_empty());
    assert!(!status_changed(&s1, &s2));

    // The API server's canonical spelling of the same quantity is no change.
    let mut respelled = s1.clone();
    respelled
        .capacity
        .as_mut()
        .unwrap()
        .insert("memory".into(), q(&(24_597_928i64 * 1024).to_string()));
    assert!(!status_changed(&respelled, &s2));

    // Not ready is a change.
    let (s3, _) = params_status(&s2, NodeInputs::default(), t(20));
    assert!(status_changed(&s2, &s3));

    // A new boot id is a Rebooted warning.
    let mut old = s1.clone();
    old.node_info.as_mut().unwrap().boot_id = "b0".into();
    let (_, events) = params_status(&old, ready_inputs(), t(30));
    assert_eq!(events.len(), 1);
    assert!(events[0].warning);
    assert_eq!(events[0].reason, "Rebooted");
    assert_eq!(events[0].message, "Node n1 has been rebooted, boot id: b1");
}

#[test]
fn send_on_change_or_report_period() {
    let report = Duration::from_secs(300);
    let cases = [
        (false, None, true),
        (false, Some(Duration::from_secs(10)), false),
        (true, Some(Duration::from_secs(10)), true),
        (false, Some(Duration::from_secs(300)), true),
        (false, Some(Duration::from_secs(299)), false),
    ];
    for (changed, since, want) in cases {
        assert_eq!(
            should_send(changed, since, report),
            want,
            "{changed} {since:?}"
        );
    }
}

#[test]
fn status_patch_removes_vanished_resources() {
    let old = NodeStatus {
        capacity: Some(BTreeMap::from([
            ("cpu".into(), q("4")),
            ("hugepages-1Gi".into(), q("0")),
        ])),
        ..Default::default()
    };
    let new = NodeStatus {
        capacity: Some(BTreeMap::from([("cpu".into(), q("4"))])),
        ..Default::default()
    };
    let p = status_patch(&old, &new);
    assert_eq!(
        p,
        serde_json::json!({"status": {"capacity": {"cpu": "4", "hugepages-1Gi": null}}})
    );
}

#[test]
fn volumes_in_use_are_reported_and_volumes_attached_never_sent() {
    let attached = k8s_openapi::api::core::v1::AttachedVolume {
        name: "kubernetes.io/csi/d^h".into(),
        device_path: String::new(),
    };
    let old = NodeStatus {
        volumes_attached: Some(vec![attached]),
        volumes_in_use: Some(vec!["kubernetes.io/csi/d^old".into()]),
        ..Default::default()
    };
    let mut inputs = ready_inputs();
    inputs.volumes_in_use = Some(vec!["kubernetes.io/csi/d^h".into()]);
    let (status, _) = params_status(&old, inputs, t(0));
    assert_eq!(
        status.volumes_in_use.as_deref(),
        Some(&["kubernetes.io/csi/d^h".to_string()][..])
    );
    let patch = status_patch(&old, &status);
    assert_eq!(
        patch["status"]["volumesInUse"],
        serde_json::json!(["kubernetes.io/csi/d^h"])
    );
    assert!(patch["status"].get("volumesAttached").is_none(), "{patch}");
    // Not yet known: the last report stays; none in use: the field goes.
    let (kept, _) = params_status(&status, ready_inputs(), t(1));
    assert_eq!(kept.volumes_in_use, status.volumes_in_use);
    let mut none = ready_inputs();
    none.volumes_in_use = Some(Vec::new());
    let (gone, _) = params_status(&status, none, t(2));
    assert_eq!(gone.volumes_in_use, None);
    assert!(status_patch(&status, &gone)["status"]["volumesInUse"].is_null());
    assert!(status_changed(&status, &gone));
}

fn settings() -> NodeStatusSettings {
    NodeStatusSettings {
        node_name: "n1".into(),
        hostname: "n1".into(),
        node_labels: BTreeMap::from([("role".into(), "edge".into())]),
        ..Default::default()
    }
}

#[test]
fn initial_node_has_default_labels_and_annotation() {
    let n = initial_node(&settings());
    let labels = n.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "n1");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["beta.kubernetes.io/os"], "linux");
    assert_eq!(labels["kubernetes.io/arch"], go_arch());
    assert_eq!(labels["role"], "edge");
    assert_eq!(
        n.metadata.annotations.as_ref().unwrap()["volumes.kubernetes.io/controller-managed-attach-detach"],
        "true"
    );
    assert!(n.spec.as_ref().unwrap().taints.is_none());
    assert!(n.spec.as_ref().unwrap().pod_cidr.is_none());
}

#[test]
fn reconcile_resets_owned_labels_only() {
    let initial = initial_node(&settings());
    assert_eq!(reconcile_patch(&initial, &initial), None);
    let mut existing: Node = initial.clone();
    let labels = existing.metadata.labels.as_mut().unwrap();
    labels.insert("kubernetes.io/hostname".into(), "old".into());
    labels.insert("role".into(), "changed".into());
    existing.metadata.annotations = None;
    let patch = reconcile_patch(&initial, &existing).unwrap();
    assert_eq!(
        patch,
        serde_json::json!({"metadata": {
            "labels": {"kubernetes.io/hostname": "n1"},
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        }})
    );
}

#[test]
fn backoffs_double_to_seven_seconds() {
    let mut step = Duration::from_millis(100);
    let mut seen = Vec::new();
    for _ in 0..8 {
        step = register_backoff(step);
        seen.push(step.as_millis());
    }
    assert_eq!(seen, [200, 400, 800, 1600, 3200, 6400, 7000, 7000]);
    assert_eq!(
        ensure_backoff(Duration::from_secs(5)),
        Duration::from_secs(7)
    );
}

#[test]
fn lease_renews_every_quarter_with_jitter() {
    assert_eq!(renew_interval(40), Duration::from_secs(10));
    assert_eq!(renew_interval(60), Duration::from_secs(15));
    let i = Duration::from_secs(10);
    assert_eq!(jittered(i, 0.0), i);
    assert_eq!(jittered(i, 0.5), Duration::from_millis(10_200));
    assert!(jittered(i, 0.999) < Duration::from_millis(10_400));
}

#[test]
fn lease_carries_holder_duration_and_owner() {
    let node = Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("n1".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let l = lease::new_lease(None, "n1", 40, None, t(0));
    assert_eq!(l.metadata.namespace.as_deref(), Some("kube-node-lease"));
    let spec = l.spec.as_ref().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    assert_eq!(spec.renew_time.as_ref().unwrap().0, t(0));
    assert!(l.metadata.owner_references.is_none());

    let renewed = lease::new_lease(Some(&l), "n1", 40, lease::node_owner(&node), t(10));
    assert_eq!(
        renewed
            .spec
            .as_ref()
            .unwrap()
            .renew_time
            .as_ref()
            .unwrap()
            .0,
        t(10)
    );
    let owner = &renewed.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str()
        ),
        ("v1", "Node", "n1", "uid-1")
    );
}

#[test]
fn machine_parsers() {
    assert_eq!(count_cpu_list("0-3\n"), Some(4));
    assert_eq!(count_cpu_list("0-3,6,8-9"), Some(7));
    assert_eq!(count_cpu_list("x"), None);
    assert_eq!(hugepage_size("hugepages-2048kB"), Some(2 << 20));
    assert_eq!(hugepage_size("hugepages-1048576kB"), Some(1 << 30));
    assert_eq!(hugepage_size("other"), None);
    assert_eq!(
        pretty_name("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").as_deref(),
        Some("Debian GNU/Linux 12 (bookworm)")
    );
    assert_eq!(pretty_name("NAME=x"), None);
}
