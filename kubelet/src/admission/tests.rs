#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, PodOS, PodSpec, PodStatus, ResourceRequirements, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

fn q(s: &str) -> Quantity {
    Quantity(s.into())
}

fn node() -> NodeInfo {
    NodeInfo {
        name: "n1".into(),
        allocatable: [
            ("cpu", "1900m"),
            ("memory", "1Gi"),
            ("ephemeral-storage", "10Gi"),
            ("pods", "3"),
            ("example.com/gpu", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), q(v)))
        .collect(),
        labels: [("zone", "a"), ("gen", "5")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        taints: vec![],
    }
}

fn container(name: &str, req: &[(&str, &str)]) -> Container {
    Container {
        name: name.into(),
        image: Some("x".into()),
        resources: Some(ResourceRequirements {
            requests: Some(req.iter().map(|(k, v)| (k.to_string(), q(v))).collect()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pod(source: &str, req: &[(&str, &str)]) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some("p".into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some("u".into());
    p.metadata.annotations = Some(
        [(
            crate::types::labels::CONFIG_SOURCE.to_string(),
            source.to_string(),
        )]
        .into(),
    );
    p.spec = Some(PodSpec {
        containers: vec![container("c", req)],
        ..Default::default()
    });
    p
}

fn with_spec(mut p: Pod, f: impl FnOnce(&mut PodSpec)) -> Pod {
    f(p.spec.as_mut().unwrap());
    p
}

fn hostport(p: Pod, port: i32, ip: Option<&str>) -> Pod {
    with_spec(p, |s| {
        s.containers[0].ports = Some(vec![ContainerPort {
            container_port: 80,
            host_port: Some(port),
            host_ip: ip.map(Into::into),
            ..Default::default()
        }])
    })
}

fn required(exprs: Vec<NodeSelectorRequirement>) -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(exprs),
                    match_fields: None,
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: Some(values.iter().map(|v| v.to_string()).collect()),
    }
}

fn no_execute(key: &str) -> Taint {
    Taint {
        key: key.into(),
        effect: "NoExecute".into(),
        ..Default::default()
    }
}

/// (case, pod, node, admitted, expected reason or None, expected message).
type Case = (
    &'static str,
    Pod,
    NodeInfo,
    Vec<Pod>,
    Option<&'static str>,
    &'static str,
);

#[test]
fn admission_as_go_s() {
    let busy = pod("api", &[("cpu", "100m"), ("memory", "100Mi")]);
    let mut done = pod("api", &[("cpu", "1800m")]);
    done.status = Some(PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    let tainted = NodeInfo {
        taints: vec![
            no_execute("dedicated"),
            Taint {
                key: "soft".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            },
        ],
        ..node()
    };
    let cases: Vec<Case> = vec![
        (
            "fits",
            pod("api", &[("cpu", "1")]),
            node(),
            vec![busy.clone()],
            None,
            "",
        ),
        (
            "cpu",
            pod("api", &[("cpu", "2")]),
            node(),
            vec![busy.clone()],
            Some("OutOfcpu"),
            "Node didn't have enough resource: cpu, requested: 2000, used: 100, capacity: 1900",
        ),
        (
            "memory",
            pod("api", &[("memory", "1000Mi")]),
            node(),
            vec![busy.clone()],
            Some("OutOfmemory"),
            "Node didn't have enough resource: memory, requested: 1048576000, used: 104857600, capacity: 1073741824",
        ),
        (
            "ephemeral storage",
            pod("api", &[("ephemeral-storage", "11Gi")]),
            node(),
            vec![],
            Some("OutOfephemeral-storage"),
            "Node didn't have enough resource: ephemeral-storage, requested: 11811160064, used: 0, capacity: 10737418240",
        ),
        (
            "pod count first",
            pod("api", &[("cpu", "5")]),
            node(),
            vec![busy.clone(), busy.clone(), busy.clone()],
            Some("OutOfpods"),
            "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3",
        ),
        (
            "terminal pods do not count",
            pod("api", &[("cpu", "1")]),
            node(),
            vec![done],
            None,
            "",
        ),
        (
            "extended resource",
            pod("api", &[("example.com/gpu", "2")]),
            node(),
            vec![],
            Some("OutOfexample.com/gpu"),
            "Node didn't have enough resource: example.com/gpu, requested: 2, used: 0, capacity: 1",
        ),
        (
            "an extended resource the node lacks is ignored",
            pod("api", &[("other.io/fpga", "1")]),
            node(),
            vec![],
            None,
            "",
        ),
        (
            "init containers: the largest wins over the app sum",
            with_spec(pod("api", &[("cpu", "500m")]), |s| {
                s.init_containers = Some(vec![container("init", &[("cpu", "1950m")])]);
            }),
            node(),
            vec![],
            Some("OutOfcpu"),
            "Node didn't have enough resource: cpu, requested: 1950, used: 0, capacity: 1900",
        ),
        (
            "sidecars add to the app containers, overhead on top",
            with_spec(pod("api", &[("cpu", "1")]), |s| {
                let mut side = container("side", &[("cpu", "800m")]);
                side.restart_policy = Some("Always".into());
                s.init_containers = Some(vec![side]);
                s.overhead = Some([("cpu".to_string(), q("150m"))].into());
            }),
            node(),
            vec![],
            Some("OutOfcpu"),
            "Node didn't have enough resource: cpu, requested: 1950, used: 0, capacity: 1900",
        ),
        (
            "static pods are critical: admitted despite resources",
            pod("file", &[("cpu", "4")]),
            node(),
            vec![],
            None,
            "",
        ),
        (
            "node selector",
            with_spec(pod("api", &[]), |s| {
                s.node_selector = Some([("zone".to_string(), "b".to_string())].into());
            }),
            node(),
            vec![],
            Some("NodeAffinity"),
            "Predicate NodeAffinity failed",
        ),
        (
            "required affinity matches",
            with_spec(pod("api", &[]), |s| {
                s.affinity = Some(required(vec![
                    req("zone", "In", &["a", "b"]),
                    req("gen", "Gt", &["4"]),
                    req("gpu", "DoesNotExist", &[]),
                ]));
            }),
            node(),
            vec![],
            None,
            "",
        ),
        (
            "required affinity fails",
            with_spec(pod("api", &[]), |s| {
                s.affinity = Some(required(vec![req("gen", "Lt", &["5"])]));
            }),
            node(),
            vec![],
            Some("NodeAffinity"),
            "Predicate NodeAffinity failed",
        ),
        (
            "critical pods still obey affinity",
            with_spec(pod("file", &[("cpu", "4")]), |s| {
                s.node_selector = Some([("zone".to_string(), "b".to_string())].into());
            }),
            node(),
            vec![],
            Some("NodeAffinity"),
            "Predicate NodeAffinity failed",
        ),
        (
            "node name",
            with_spec(pod("api", &[]), |s| s.node_name = Some("n2".into())),
            node(),
            vec![],
            Some("NodeName"),
            "Predicate NodeName failed",
        ),
        (
            "host port taken",
            hostport(pod("api", &[]), 8080, Some("10.0.0.1")),
            node(),
            vec![hostport(busy.clone(), 8080, None)],
            Some("NodePorts"),
            "Predicate NodePorts failed",
        ),
        (
            "host port on another address",
            hostport(pod("api", &[]), 8080, Some("10.0.0.1")),
            node(),
            vec![hostport(busy.clone(), 8080, Some("10.0.0.2"))],
            None,
            "",
        ),
        (
            "untolerated NoExecute taint",
            pod("api", &[]),
            tainted.clone(),
            vec![],
            Some("TaintToleration"),
            "Predicate TaintToleration failed",
        ),
        (
            "tolerated NoExecute taint (NoSchedule ignored)",
            with_spec(pod("api", &[]), |s| {
                s.tolerations = Some(vec![Toleration {
                    key: Some("dedicated".into()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                }]);
            }),
            tainted.clone(),
            vec![],
            None,
            "",
        ),
        (
            "static pods skip taints",
            pod("file", &[]),
            tainted,
            vec![],
            None,
            "",
        ),
        (
            "OS field",
            with_spec(pod("api", &[]), |s| {
                s.os = Some(PodOS {
                    name: "windows".into(),
                })
            }),
            node(),
            vec![],
            Some("PodOSNotSupported"),
            "Failed to admit pod as the OS field doesn't match node OS",
        ),
        (
            "OS label",
            {
                let mut p = pod("api", &[]);
                p.metadata.labels = Some([(OS_LABEL.to_string(), "windows".to_string())].into());
                p
            },
            node(),
            vec![],
            Some("PodOSSelectorNodeLabelDoesNotMatch"),
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
        ),
    ];
    for (what, p, n, admitted, reason, message) in cases {
        match (admit(&p, &n, &admitted), reason) {
            (Ok(_), None) => {}
            (Err(r), Some(want)) => {
                assert_eq!(r.reason, want, "{what}");
                assert_eq!(r.message, message, "{what}");
            }
            (got, _) => panic!("{what}: {got:?}"),
        }
    }
}

#[test]
fn critical_shortfall_is_reported() {
    let mut p = pod("api", &[("cpu", "4")]);
    p.spec.as_mut().unwrap().priority = Some(2_000_001_000);
    let a = admit(&p, &node(), &[] as &[Pod]).unwrap();
    assert_eq!(a.shortfall.len(), 1);
    assert_eq!(a.shortfall[0].resource, "cpu");
}

#[test]
fn node_info_from_the_node_object() {
    let mut n = Node::default();
    n.metadata.name = Some("n1".into());
    n.status = Some(k8s_openapi::api::core::v1::NodeStatus {
        allocatable: Some([("pods".to_string(), q("110"))].into()),
        ..Default::default()
    });
    let info = NodeInfo::from_node(&n);
    assert_eq!(info.name, "n1");
    assert_eq!(info.allocatable["pods"], q("110"));
}

#[test]
fn an_allocation_failure_is_gos_unexpected_admission_error() {
    let r = unexpected_admission_error(&"not enough cpus available to satisfy request");
    assert_eq!(r.reason, "UnexpectedAdmissionError");
    assert_eq!(
        r.message,
        "Allocate failed due to not enough cpus available to satisfy request, which is unexpected"
    );
}
