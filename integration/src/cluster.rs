//! A kubelet node of a cluster: [`ClusterNode`] is the in-memory test API server
//! ([`crate::apiserver`]) plus a [`KubeletNode`] (on ferrolet-cri, or on another runtime
//! through [`Prepared::start_kubelet_on`]) whose `ferrolet` joins it with
//! `--kubeconfig` (a client certificate for `system:node:<name>` in `system:nodes`), or with
//! `--bootstrap-kubeconfig` (a bootstrap token) for the TLS bootstrap tests.
//!
//! The test plays the scheduler (it creates pods with `spec.nodeName` set) and the
//! controllers; it reads what ferrolet wrote through the server's in-process calls, and what
//! really runs through CRI. [`ClusterNode::teardown`] deletes every API pod, waits for
//! ferrolet to kill them and remove the API objects, then tears the node down with its leak
//! checks.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::apiserver::{ApiServerOptions, DeleteOptions, TestApiServer};
use crate::kubelet::{IDLE, KubeletNode, KubeletOptions, RuntimeNode, image, node_name_for};
use crate::pods::CriNode;

/// The namespace test pods go in.
pub const NAMESPACE: &str = "default";

/// How a [`ClusterNode`] starts.
#[derive(Default)]
pub struct ClusterOptions {
    /// The kubelet node's own options (extra config lines and flags are added to the
    /// cluster ones).
    pub kubelet: KubeletOptions,
    /// The test API server's options.
    pub api: ApiServerOptions,
    /// Join with a bootstrap token (`--bootstrap-kubeconfig`) instead of a node certificate.
    pub bootstrap_token: Option<String>,
}

/// A test API server and one ferrolet node registered with it, on ferrolet-cri (the default)
/// or another CRI runtime.
pub struct ClusterNode<N: RuntimeNode = CriNode> {
    /// The kubelet node (dropped before the API server: see `Drop` order of fields).
    pub node: KubeletNode<N>,
    /// The API server.
    pub api: TestApiServer,
    /// ferrolet's `--kubeconfig`.
    pub kubeconfig: PathBuf,
    /// The node's name, as registered.
    pub node_name: String,
}

/// A cluster node before its kubelet runs: the API server is up and the kubeconfigs are
/// written, so a test can play the controllers (approve a bootstrap CSR) while
/// [`Prepared::start_kubelet`] waits for ferrolet to come up.
pub struct Prepared {
    /// The API server.
    pub api: TestApiServer,
    /// ferrolet's `--kubeconfig`.
    pub kubeconfig: PathBuf,
    /// The node's name.
    pub node_name: String,
    name: String,
    kubelet: std::sync::Mutex<Option<KubeletOptions>>,
}

impl Prepared {
    /// Starts the API server and writes the node's kubeconfig (or bootstrap kubeconfig).
    pub async fn new(name: &str, opts: ClusterOptions) -> Self {
        let api = TestApiServer::start(opts.api)
            .await
            .unwrap_or_else(|e| panic!("starting the test API server: {e:#}"));
        let node_name = node_name_for(name);
        let dir =
            std::env::temp_dir().join(format!("ferrolet-cluster-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let kubeconfig = dir.join("kubelet.conf");
        let mut kubelet = opts.kubelet;
        match &opts.bootstrap_token {
            None => {
                let user = format!("system:node:{node_name}");
                api.write_kubeconfig(&kubeconfig, &user, &["system:nodes"])
                    .unwrap_or_else(|e| panic!("writing {}: {e:#}", kubeconfig.display()));
            }
            Some(token) => {
                let bootstrap = dir.join("bootstrap-kubelet.conf");
                api.add_token(
                    token,
                    "system:bootstrap:ferrolet",
                    &[
                        "system:bootstrappers",
                        "system:bootstrappers:kubeadm:default-node-token",
                    ],
                );
                api.write_token_kubeconfig(&bootstrap, token)
                    .unwrap_or_else(|e| panic!("writing {}: {e:#}", bootstrap.display()));
                let _ = std::fs::remove_file(&kubeconfig);
                kubelet.extra_args.extend([
                    "--bootstrap-kubeconfig".to_string(),
                    bootstrap.display().to_string(),
                ]);
            }
        }
        kubelet
            .extra_args
            .extend(["--kubeconfig".to_string(), kubeconfig.display().to_string()]);
        for (key, value) in CLUSTER_DEFAULTS {
            let set = kubelet
                .extra_config
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{key}:")));
            if !set {
                kubelet
                    .extra_config
                    .push_str(&format!("\n{key}: {value}\n"));
            }
        }
        Prepared {
            api,
            kubeconfig,
            node_name,
            name: name.to_string(),
            kubelet: std::sync::Mutex::new(Some(kubelet)),
        }
    }

    /// Adds KubeletConfiguration lines before ferrolet starts.
    pub fn add_config(&self, text: &str) {
        if let Some(opts) = self
            .kubelet
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            opts.extra_config.push_str(&format!("\n{text}\n"));
        }
    }

    /// Configures ferrolet's secure API as kubeadm does: client certificates of the API
    /// server's CA (written beside the kubeconfig), bearer tokens through TokenReview,
    /// anonymous requests off, and `authorization_mode` (`Webhook`: a SubjectAccessReview per
    /// request, decided by the API server's SAR policy; `AlwaysAllow`).
    pub fn trust_cluster_clients(&self, authorization_mode: &str) {
        let ca = self.kubeconfig.with_file_name("cluster-ca.crt");
        if let Err(e) = std::fs::write(&ca, self.api.ca_pem()) {
            panic!("writing {}: {e}", ca.display());
        }
        self.add_config(&format!(
            "authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: true\n  x509:\n    clientCAFile: {}\nauthorization:\n  mode: {authorization_mode}\n",
            ca.display()
        ));
    }

    /// Starts ferrolet; returns once its healthz answers.
    pub async fn start_kubelet(&self) -> KubeletNode {
        let opts = self
            .kubelet
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        KubeletNode::start_with(&self.name, opts).await
    }

    /// Starts ferrolet on `runtime` (containerd's own CRI plugin, say) instead of
    /// ferrolet-cri; returns once its healthz answers. The options' `cri` and `root_size`
    /// are ferrolet-cri's and left aside.
    pub async fn start_kubelet_on<N: RuntimeNode>(&self, runtime: N) -> KubeletNode<N> {
        let opts = self
            .kubelet
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        KubeletNode::start_on_with_args(&self.name, runtime, &opts.extra_config, &opts.extra_args)
            .await
    }

    /// The cluster node, with the kubelet `start_kubelet` (or `start_kubelet_on`) started.
    pub fn into_node<N: RuntimeNode>(self, node: KubeletNode<N>) -> ClusterNode<N> {
        ClusterNode {
            node,
            api: self.api,
            kubeconfig: self.kubeconfig,
            node_name: self.node_name,
        }
    }
}

/// A KubeletConfiguration fragment every cluster node gets unless the test sets the key:
/// quick leases and status updates keep the tests short.
const CLUSTER_DEFAULTS: &[(&str, &str)] = &[
    ("nodeLeaseDurationSeconds", "8"),
    ("nodeStatusUpdateFrequency", "2s"),
];

impl ClusterNode<CriNode> {
    /// A node with the defaults: joined with a node certificate.
    pub async fn start(name: &str) -> Self {
        Self::start_with(name, ClusterOptions::default()).await
    }

    /// A node with `opts`; returns once ferrolet's healthz answers (registration may still
    /// be under way: see [`ClusterNode::wait_node`]).
    pub async fn start_with(name: &str, opts: ClusterOptions) -> Self {
        let prepared = Prepared::new(name, opts).await;
        let node = prepared.start_kubelet().await;
        prepared.into_node(node)
    }
}

impl<N: RuntimeNode> ClusterNode<N> {
    /// Waits until the Node object exists and satisfies `pred`.
    pub async fn wait_node(&self, what: &str, pred: impl FnMut(&Value) -> bool) -> Value {
        self.wait_object(
            "nodes",
            "",
            &self.node_name.clone(),
            what,
            pred,
            Duration::from_secs(60),
        )
        .await
    }

    /// Waits until the cluster-scoped object `resource`/`name` exists and satisfies `pred`.
    pub async fn wait_object_named(
        &self,
        resource: &str,
        name: &str,
        what: &str,
        pred: impl FnMut(&Value) -> bool,
    ) -> Value {
        self.wait_object(resource, "", name, what, pred, Duration::from_secs(60))
            .await
    }

    /// Creates a pod bound to this node (`spec.nodeName` set, as the scheduler would) from
    /// its JSON; returns the created object.
    pub async fn create_pod(&self, mut pod: Value) -> Value {
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["spec"]["nodeName"] = json!(self.node_name);
        self.api
            .create("pods", NAMESPACE, pod)
            .await
            .unwrap_or_else(|e| panic!("creating a pod: {e}"))
    }

    /// Creates pod `name`: one busybox container, `main`, idling until it is stopped (a
    /// 1 s grace period); returns it once it is Running and Ready.
    pub async fn run_idle_pod(&self, name: &str) -> Value {
        self.create_pod(json!({
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": image("busybox"), "command": ["sh", "-c", IDLE]}],
            },
        }))
        .await;
        self.wait_api_running(name).await
    }

    /// The API's pod `name`, if it exists.
    pub async fn api_pod(&self, name: &str) -> Option<Value> {
        self.api.get("pods", NAMESPACE, name).await.ok()
    }

    /// Deletes pod `name` as `kubectl delete` does (the pod's own grace period).
    pub async fn delete_pod(&self, name: &str) -> Value {
        self.api
            .delete("pods", NAMESPACE, name)
            .await
            .unwrap_or_else(|e| panic!("deleting pod {name}: {e}"))
    }

    /// Waits until the API's pod `name` satisfies `pred`.
    pub async fn wait_api_pod(
        &self,
        name: &str,
        what: &str,
        pred: impl FnMut(&Value) -> bool,
        limit: Duration,
    ) -> Value {
        self.wait_object("pods", NAMESPACE, name, what, pred, limit)
            .await
    }

    /// Waits until the API's pod `name` is Running with its Ready condition True.
    pub async fn wait_api_running(&self, name: &str) -> Value {
        self.wait_api_pod(
            name,
            "Running and Ready",
            |p| {
                p["status"]["phase"] == "Running"
                    && p["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
            },
            Duration::from_secs(90),
        )
        .await
    }

    /// Waits until the API has no pod `name` any more.
    pub async fn wait_api_pod_gone(&self, name: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while let Some(pod) = self.api_pod(name).await {
            if Instant::now() >= deadline {
                panic!(
                    "pod {name} still in the API after {limit:?}:\n{}\nferrolet log tail:\n{}",
                    serde_json::to_string_pretty(&pod).unwrap_or_default(),
                    log_tail(&self.node.kubelet_log())
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Every Event in the API whose involved object is pod `name`.
    pub async fn pod_events(&self, name: &str) -> Vec<Value> {
        self.api
            .list("events", Some(NAMESPACE))
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["involvedObject"]["kind"] == "Pod" && e["involvedObject"]["name"] == name)
            .collect()
    }

    /// Waits until `resource` `ns/name` exists and satisfies `pred`, at most `limit`.
    pub async fn wait_object(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        what: &str,
        mut pred: impl FnMut(&Value) -> bool,
        limit: Duration,
    ) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let last = match self.api.get(resource, ns, name).await {
                Ok(obj) if pred(&obj) => return obj,
                Ok(obj) => serde_json::to_string_pretty(&obj).unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {limit:?} waiting for {resource} {name} to be {what}; last seen:\n{last}\n\
                     ferrolet log tail:\n{}",
                    log_tail(&self.node.kubelet_log())
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Deletes every pod in the API (grace 1 s), waits until ferrolet has killed them and
    /// the API has none left, then tears the kubelet node down (with its leak checks) and
    /// stops the API server.
    pub async fn teardown(self) {
        let pods = self.api.list("pods", None).await.unwrap_or_default();
        for pod in &pods {
            let (ns, name) = (
                pod["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE),
                pod["metadata"]["name"].as_str().unwrap_or(""),
            );
            let is_mirror =
                pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string();
            if is_mirror {
                continue;
            }
            let _ = self
                .api
                .delete_with(
                    "pods",
                    ns,
                    name,
                    &DeleteOptions {
                        grace_period_seconds: Some(1),
                        ..Default::default()
                    },
                )
                .await;
        }
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let left: Vec<String> = self
                .api
                .list("pods", None)
                .await
                .unwrap_or_default()
                .iter()
                .filter(|p| {
                    !p["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string()
                })
                .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
                .collect();
            if left.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                panic!(
                    "pods {left:?} still in the API 90 s after their deletion\nferrolet log tail:\n{}",
                    log_tail(&self.node.kubelet_log())
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let ClusterNode { node, api, .. } = self;
        node.teardown().await;
        api.stop().await;
    }
}

fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}
