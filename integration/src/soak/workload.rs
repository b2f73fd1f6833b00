//! The soak's pods: a handful of templates covering what a node runs (init containers, exec
//! and HTTP probes, emptyDir, secret and configMap volumes, the three restart policies, a
//! crash loop), each with the state it must come to, from either source (a static manifest
//! or an API pod), and the book of every pod made, deleted and seen gone.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};

/// Where a pod comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A manifest file in ferrolet's static pod dir.
    Static,
    /// A pod object in the API server, bound to the node.
    Api,
}

/// The state a pod must come to and stay in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Running, every container ready.
    Ready,
    /// Its containers completed: phase Succeeded.
    Succeeded,
    /// A container failed and is not restarted: phase Failed.
    Failed,
    /// Running, its `main` container restarted at least once (and back-off in between).
    CrashLooping,
}

/// A kind of pod the soak makes.
#[derive(Clone, Copy, Debug)]
pub struct Template {
    /// Short name, part of every pod's name.
    pub name: &'static str,
    /// What it must come to.
    pub expect: Expect,
    /// Whether it needs the API (secret and configMap volumes): static pods cannot have them.
    pub api_only: bool,
}

/// Every template.
pub const TEMPLATES: [Template; 7] = [
    Template {
        name: "web",
        expect: Expect::Ready,
        api_only: false,
    },
    Template {
        name: "webapi",
        expect: Expect::Ready,
        api_only: true,
    },
    Template {
        name: "sleeper",
        expect: Expect::Ready,
        api_only: false,
    },
    Template {
        name: "jobok",
        expect: Expect::Succeeded,
        api_only: false,
    },
    Template {
        name: "jobfail",
        expect: Expect::Failed,
        api_only: false,
    },
    Template {
        name: "flaky",
        expect: Expect::Succeeded,
        api_only: false,
    },
    Template {
        name: "crashloop",
        expect: Expect::CrashLooping,
        api_only: false,
    },
];

/// Images the pods run, from the soak's own registry.
#[derive(Clone, Debug)]
pub struct Images {
    /// busybox.
    pub busybox: String,
    /// The httpd test image (busybox's httpd on port 8080).
    pub httpd: String,
}

/// A container that idles until SIGTERM, then exits 0.
const IDLE: &str = "trap 'exit 0' TERM; sleep 100000 & wait";

fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

/// The pod object of `template` named `name`.
pub fn pod(template: &Template, name: &str, images: &Images) -> Value {
    let (busybox, httpd) = (images.busybox.as_str(), images.httpd.as_str());
    let spec = match template.name {
        "web" | "webapi" => {
            let mut mounts = vec![json!({"name": "data", "mountPath": "/data"})];
            let mut volumes = vec![json!({"name": "data", "emptyDir": {}})];
            if template.api_only {
                mounts.push(json!({"name": "secret", "mountPath": "/secret", "readOnly": true}));
                mounts.push(json!({"name": "config", "mountPath": "/config"}));
                volumes.push(json!({"name": "secret", "secret": {"secretName": SECRET}}));
                volumes.push(json!({"name": "config", "configMap": {"name": CONFIG_MAP}}));
            }
            json!({
                "restartPolicy": "Always",
                "initContainers": [{
                    "name": "setup",
                    "image": busybox,
                    "imagePullPolicy": "IfNotPresent",
                    "command": sh("echo ready > /data/ready"),
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }],
                "containers": [
                    {
                        "name": "web",
                        "image": httpd,
                        // Pulled at every start, so registry outages meet pulls.
                        "imagePullPolicy": "Always",
                        "volumeMounts": mounts,
                        "readinessProbe": {
                            "exec": {"command": ["cat", "/data/ready"]},
                            "periodSeconds": 1,
                        },
                        "livenessProbe": {
                            "httpGet": {"path": "/", "port": 8080},
                            "periodSeconds": 2,
                            "failureThreshold": 5,
                        },
                    },
                    {
                        "name": "sidecar",
                        "image": busybox,
                        "imagePullPolicy": "IfNotPresent",
                        "command": sh(&format!("date >> /data/log; {IDLE}")),
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    },
                ],
                "volumes": volumes,
            })
        }
        "sleeper" => json!({
            "restartPolicy": "Always",
            "containers": [{
                "name": "main",
                "image": busybox,
                "imagePullPolicy": "IfNotPresent",
                "command": sh(IDLE),
                "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
            }],
        }),
        "jobok" => json!({
            "restartPolicy": "OnFailure",
            "initContainers": [{
                "name": "init",
                "image": busybox,
                "imagePullPolicy": "IfNotPresent",
                "command": sh("true"),
            }],
            "containers": [{
                "name": "main",
                "image": busybox,
                "imagePullPolicy": "IfNotPresent",
                "command": sh("sleep 1; exit 0"),
            }],
        }),
        "jobfail" => json!({
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": busybox,
                "imagePullPolicy": "IfNotPresent",
                "command": sh("sleep 1; exit 3"),
            }],
        }),
        // Fails its first run, succeeds the second (the emptyDir remembers).
        "flaky" => json!({
            "restartPolicy": "OnFailure",
            "containers": [{
                "name": "main",
                "image": busybox,
                "imagePullPolicy": "IfNotPresent",
                "command": sh("if [ -e /data/ran ]; then exit 0; fi; touch /data/ran; exit 1"),
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
        }),
        _ => json!({
            "restartPolicy": "Always",
            "containers": [{
                "name": "main",
                "image": busybox,
                "imagePullPolicy": "IfNotPresent",
                "command": sh("sleep 1; exit 1"),
            }],
        }),
    };
    let mut spec = spec;
    spec["terminationGracePeriodSeconds"] = json!(1);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"soak": template.name}},
        "spec": spec,
    })
}

/// The namespace of every soak pod.
pub const NAMESPACE: &str = "default";
/// The secret the API pods mount.
pub const SECRET: &str = "soak-secret";
/// The configMap the API pods mount.
pub const CONFIG_MAP: &str = "soak-config";

/// Whether `pod` (its status as ferrolet or the API reports it) is where `expect` says.
pub fn satisfied(expect: Expect, pod: &Value) -> bool {
    let status = &pod["status"];
    let phase = status["phase"].as_str().unwrap_or("");
    match expect {
        Expect::Ready => {
            phase == "Running"
                && status["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        }
        Expect::Succeeded => phase == "Succeeded",
        Expect::Failed => phase == "Failed",
        Expect::CrashLooping => {
            phase == "Running"
                && status["containerStatuses"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["name"] == "main" && c["restartCount"].as_u64() >= Some(1))
                })
        }
    }
}

/// One pod the soak made.
#[derive(Clone, Debug)]
pub struct PodRecord {
    /// Its name as the node lists it (a static pod's carries the node name).
    pub name: String,
    /// Its manifest file (static) or API object name.
    pub object: String,
    /// Where it came from.
    pub source: Source,
    /// What it is.
    pub template: Template,
    /// When it was made.
    pub created: Instant,
    /// When its status was first seen where its template says it must come to.
    pub reached: Option<Instant>,
    /// When its deletion was asked for.
    pub deleted: Option<Instant>,
    /// When the node was first seen with nothing of it left.
    pub gone: Option<Instant>,
}

/// Every pod of the soak, by name.
#[derive(Debug, Default)]
pub struct PodBook {
    /// By the name the node lists.
    pub pods: BTreeMap<String, PodRecord>,
    next: u64,
}

impl PodBook {
    /// A fresh number for a new pod's name.
    pub fn next_number(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Pods not yet deleted, oldest first.
    pub fn live(&self) -> Vec<PodRecord> {
        let mut live: Vec<PodRecord> = self
            .pods
            .values()
            .filter(|p| p.deleted.is_none())
            .cloned()
            .collect();
        live.sort_by_key(|p| p.created);
        live
    }

    /// Pods deleted and not yet seen gone.
    pub fn going(&self) -> Vec<PodRecord> {
        self.pods
            .values()
            .filter(|p| p.deleted.is_some() && p.gone.is_none())
            .cloned()
            .collect()
    }

    /// Lifecycles completed: pods made, deleted and seen gone.
    pub fn completed(&self) -> usize {
        self.pods.values().filter(|p| p.gone.is_some()).count()
    }

    /// Deletions asked for.
    pub fn deleted(&self) -> usize {
        self.pods.values().filter(|p| p.deleted.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_makes_a_pod_with_a_grace_period_of_one_second() {
        let images = Images {
            busybox: "b".into(),
            httpd: "h".into(),
        };
        for t in &TEMPLATES {
            let p = pod(t, &format!("x-{}", t.name), &images);
            assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 1, "{}", t.name);
            assert!(
                p["spec"]["containers"]
                    .as_array()
                    .is_some_and(|c| !c.is_empty())
            );
            let uses_api = p.to_string().contains(SECRET);
            assert_eq!(uses_api, t.api_only, "{}", t.name);
        }
    }

    #[test]
    fn states_are_read_from_the_status() {
        let ready = json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}});
        assert!(satisfied(Expect::Ready, &ready));
        assert!(!satisfied(Expect::CrashLooping, &ready));
        let looping = json!({"status": {"phase": "Running",
            "containerStatuses": [{"name": "main", "restartCount": 2}]}});
        assert!(satisfied(Expect::CrashLooping, &looping));
        assert!(satisfied(
            Expect::Failed,
            &json!({"status": {"phase": "Failed"}})
        ));
    }
}
