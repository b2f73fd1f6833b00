//! A kubelet node per test: [`KubeletNode`] runs the real `ferrolet` binary in standalone mode
//! (static pods from a manifest directory) on top of a [`RuntimeNode`]: a [`CriNode`]
//! (`ferrolet-cri` on the test's own containerd namespace and CNI network), or a
//! [`ContainerdCriNode`] (containerd's own CRI plugin, the reference), with its manifest, root, pod-log and
//! cgroup dirs private to the test and its read-only API, healthz and secure API (`--port`)
//! on free loopback ports.
//!
//! Tests talk to it as a user would: they write and remove manifests, read `/pods`,
//! `/healthz` and `/containerLogs` over HTTP, and ask ferrolet-cri through CRI what really
//! runs. [`KubeletNode::teardown`] removes every manifest, waits for ferrolet to stop and
//! remove the pods and their dirs, stops ferrolet, and ends with the node's leak checks.

use std::collections::BTreeSet;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferrolet_proto::cri::{
    Container, ContainerFilter, PodSandbox, PodSandboxFilter, PodSandboxState,
};
use serde_json::Value;

use crate::containerd_cri::ContainerdCriNode;
use crate::cri::RuntimeApi;
use crate::leak::{self, LeakChecker};
use crate::network::TestNetwork;
use crate::pods::{CriNode, LONG, NodeOptions, labels, log_tail, paths_naming};
use crate::registry::OPEN_REGISTRY;
use crate::scratch::Scratch;
use crate::workspace_binary;

/// The namespace of static pods whose manifest names none.
pub const POD_NAMESPACE: &str = "default";

/// The CRI label carrying a pod's UID (the Go kubelet's key).
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";

/// The CRI label carrying a container's name in its pod.
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// A shell fragment that idles until SIGTERM and then exits 0 at once: `sh` as a container's
/// PID 1 would otherwise ignore SIGTERM and every stop would last the whole grace period.
pub const IDLE: &str = "trap 'exit 0' TERM; sleep 100000 & wait";

/// How long teardown waits for ferrolet to stop and remove every pod (grace periods
/// included).
const REMOVE_LIMIT: Duration = Duration::from_secs(120);

/// How long a stopped ferrolet may take to exit after SIGTERM.
const STOP_LIMIT: Duration = Duration::from_secs(20);

/// What a test asks of its kubelet node.
#[derive(Default)]
pub struct KubeletOptions {
    /// Options of the ferrolet-cri node underneath.
    pub cri: NodeOptions,
    /// Extra KubeletConfiguration lines (YAML, top level), appended to the harness's own.
    pub extra_config: String,
    /// Extra ferrolet flags, after the harness's own (e.g. the hidden GC periods).
    pub extra_args: Vec<String>,
    /// A size in bytes: ferrolet's root dir is a loop-mounted ext4 of that size, a small disk
    /// a test can fill (the disk-full fault); `None`: a plain dir on the scratch disk.
    pub root_size: Option<u64>,
}

impl KubeletOptions {
    /// Image GC every 2 s with thresholds any disk use passes, so every pass wants to free
    /// everything and only the images in use (or pinned) stay.
    pub fn image_gc_every_pass() -> Self {
        KubeletOptions {
            extra_config: "imageGCHighThresholdPercent: 1\n\
                           imageGCLowThresholdPercent: 0\n\
                           imageMinimumGCAge: 1s\n"
                .into(),
            extra_args: vec!["--image-gc-period=2s".into()],
            ..Default::default()
        }
    }
}

/// The CRI runtime under a [`KubeletNode`]: ferrolet-cri ([`CriNode`], the default) or
/// containerd's own CRI plugin ([`ContainerdCriNode`], the reference).
pub trait RuntimeNode: Sized + Send + Sync + 'static {
    /// Its CRI endpoint (`unix://…`), as ferrolet's `--container-runtime-endpoint`.
    fn endpoint(&self) -> String;
    /// A RuntimeService client that records the ids it sees for the leak checks.
    fn api(&self) -> impl Future<Output = RuntimeApi> + Send;
    /// Records ids of sandboxes and containers the kubelet made, for the leak checks.
    fn track_ids(&self, ids: Vec<String>);
    /// The pod network.
    fn net(&self) -> &TestNetwork;
    /// A host port no other running test uses (`k` < 5).
    fn host_port(&self, k: u16) -> u16;
    /// The runtime's process (ferrolet-cri or containerd), for fd checks.
    fn runtime_pid(&self) -> u32;
    /// The runtime's scratch dir: its state, pod and exec FIFOs included.
    fn runtime_dir(&self) -> &Path;
    /// Checks that nothing of the pods is left and stops the runtime.
    fn teardown(self) -> impl Future<Output = ()> + Send;
}

impl RuntimeNode for CriNode {
    fn endpoint(&self) -> String {
        self.cri.endpoint()
    }
    fn api(&self) -> impl Future<Output = RuntimeApi> + Send {
        CriNode::api(self)
    }
    fn track_ids(&self, ids: Vec<String>) {
        CriNode::track_ids(self, ids);
    }
    fn net(&self) -> &TestNetwork {
        &self.net
    }
    fn host_port(&self, k: u16) -> u16 {
        CriNode::host_port(self, k)
    }
    fn runtime_pid(&self) -> u32 {
        self.cri.pid()
    }
    fn runtime_dir(&self) -> &Path {
        self.scratch.path()
    }
    fn teardown(self) -> impl Future<Output = ()> + Send {
        CriNode::teardown(self)
    }
}

impl RuntimeNode for ContainerdCriNode {
    fn endpoint(&self) -> String {
        ContainerdCriNode::endpoint(self)
    }
    fn api(&self) -> impl Future<Output = RuntimeApi> + Send {
        ContainerdCriNode::api(self)
    }
    fn track_ids(&self, ids: Vec<String>) {
        ContainerdCriNode::track_ids(self, ids);
    }
    fn net(&self) -> &TestNetwork {
        &self.net
    }
    fn host_port(&self, k: u16) -> u16 {
        ContainerdCriNode::host_port(self, k)
    }
    fn runtime_pid(&self) -> u32 {
        ContainerdCriNode::pid(self)
    }
    fn runtime_dir(&self) -> &Path {
        self.scratch.path()
    }
    fn teardown(self) -> impl Future<Output = ()> + Send {
        ContainerdCriNode::teardown(self)
    }
}

/// One test's node: ferrolet over a CRI runtime, every dir in the test's scratch space.
pub struct KubeletNode<N: RuntimeNode = CriNode> {
    // First field: dropped first, so a panicking test's ferrolet is gone before the CRI
    // node's panic cleanup removes the pods (it would recreate them).
    kubelet: Ferrolet,
    /// The runtime node: its CRI clients, network and leak checks.
    pub node: N,
    /// ferrolet's dir: `config.yaml`, `ferrolet.log`, `manifests/`, `root/`, `logs/`, `host/`.
    pub scratch: Scratch,
    /// The node name (`--hostname-override`): static pods are named `<name>-<node_name>`.
    pub node_name: String,
    /// The cgroup every pod goes under (`cgroupRoot`), e.g. `/ferrolet-it/kubelet-web-123`.
    pub cgroup_root: String,
    read_only: SocketAddr,
    healthz: SocketAddr,
    secure: SocketAddr,
    uids: Mutex<BTreeSet<String>>,
    cgroup: CgroupTree,
    /// The root dir is a tmpfs of the node's own (not a pod's mount).
    root_mounted: bool,
}

impl KubeletNode<CriNode> {
    /// A node on ferrolet-cri with the harness's defaults: bridge + portmap network,
    /// `fileCheckFrequency: 1s`, `syncFrequency: 10s`.
    pub async fn start(name: &str) -> Self {
        Self::start_with(name, KubeletOptions::default()).await
    }

    /// A node on ferrolet-cri with `extra_config` appended to the harness's
    /// KubeletConfiguration.
    pub async fn start_with_config(name: &str, extra_config: &str) -> Self {
        Self::start_on(name, CriNode::start(name).await, extra_config).await
    }

    /// A node on ferrolet-cri with `opts`; returns once ferrolet's healthz answers.
    pub async fn start_with(name: &str, opts: KubeletOptions) -> Self {
        let node = CriNode::start_with(name, opts.cri).await;
        Self::start_on_with_root(
            name,
            node,
            &opts.extra_config,
            &opts.extra_args,
            opts.root_size,
        )
        .await
    }

    /// Kills ferrolet-cri with SIGKILL and starts it again with the same config (ferrolet
    /// keeps running). Blocks a runtime worker while ferrolet-cri starts, so the test must
    /// run on the multi-thread runtime.
    pub fn restart_cri(&self) {
        let cri = &self.node.cri;
        tokio::task::block_in_place(|| cri.restart_after_kill());
    }
}

impl KubeletNode<ContainerdCriNode> {
    /// A node on containerd's own CRI plugin (a private containerd for this test), with the
    /// harness's defaults.
    pub async fn start_on_containerd(name: &str) -> Self {
        Self::start_on_containerd_with_config(name, "").await
    }

    /// [`KubeletNode::start_on_containerd`] with `extra_config` appended to the harness's
    /// KubeletConfiguration.
    pub async fn start_on_containerd_with_config(name: &str, extra_config: &str) -> Self {
        let node = ContainerdCriNode::start(name).await;
        Self::start_on(name, node, extra_config).await
    }
}

impl<N: RuntimeNode> KubeletNode<N> {
    /// ferrolet on `node`, with `extra_config` appended to the harness's KubeletConfiguration;
    /// returns once its healthz answers.
    pub async fn start_on(name: &str, node: N, extra_config: &str) -> Self {
        Self::start_on_with_args(name, node, extra_config, &[]).await
    }

    /// [`KubeletNode::start_on`] with extra ferrolet flags.
    pub async fn start_on_with_args(
        name: &str,
        node: N,
        extra_config: &str,
        extra_args: &[String],
    ) -> Self {
        Self::start_on_with_root(name, node, extra_config, extra_args, None).await
    }

    /// [`KubeletNode::start_on_with_args`] with the root dir on a small disk of `root_size`.
    async fn start_on_with_root(
        name: &str,
        node: N,
        extra_config: &str,
        extra_args: &[String],
        root_size: Option<u64>,
    ) -> Self {
        let scratch = Scratch::new(&format!("kubelet-{name}"));
        let dir = scratch.path().to_path_buf();
        for sub in ["manifests", "root", "logs", "host"] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path)
                .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        }
        // Unmounted with the scratch dir; the loop device goes with its last mount.
        if let Some(size) = root_size {
            mount_small_disk(&dir.join("root.img"), size, &dir.join("root"));
        }
        let node_name = node_name_for(name);
        let cgroup_root = format!("/ferrolet-it/kubelet-{name}-{}", std::process::id());
        let cgroup = CgroupTree {
            path: cgroup_root.clone(),
        };
        // ferrolet refuses a cgroupRoot that does not exist, as Go's kubelet does.
        cgroup.create();
        let config = kubelet_config(&dir, &cgroup_root, extra_config);
        let config_path = dir.join("config.yaml");
        std::fs::write(&config_path, config)
            .unwrap_or_else(|e| panic!("writing {}: {e}", config_path.display()));
        let (read_only, healthz, secure) = free_ports();
        let mut args = vec![
            "--config".to_string(),
            config_path.display().to_string(),
            "--pod-manifest-path".to_string(),
            dir.join("manifests").display().to_string(),
            "--root-dir".to_string(),
            dir.join("root").display().to_string(),
            "--container-runtime-endpoint".to_string(),
            node.endpoint(),
            "--address".to_string(),
            Ipv4Addr::LOCALHOST.to_string(),
            "--read-only-port".to_string(),
            read_only.port().to_string(),
            "--healthz-port".to_string(),
            healthz.port().to_string(),
            "--port".to_string(),
            secure.port().to_string(),
            "--hostname-override".to_string(),
            node_name.clone(),
            "-v".to_string(),
            "4".to_string(),
        ];
        args.extend(extra_args.iter().cloned());
        let kubelet = Ferrolet {
            child: Mutex::new(None),
            args,
            log: dir.join("ferrolet.log"),
            healthz,
        };
        kubelet.spawn().await;
        KubeletNode {
            kubelet,
            node,
            scratch,
            node_name,
            cgroup,
            cgroup_root,
            read_only,
            healthz,
            secure,
            uids: Mutex::new(BTreeSet::new()),
            root_mounted: root_size.is_some(),
        }
    }

    /// The manifest directory (`--pod-manifest-path`).
    pub fn manifest_dir(&self) -> PathBuf {
        self.scratch.path().join("manifests")
    }

    /// ferrolet's root dir (`--root-dir`): pod dirs and volumes.
    pub fn root_dir(&self) -> PathBuf {
        self.scratch.path().join("root")
    }

    /// The pod logs dir (`podLogsDir`).
    pub fn pod_logs_dir(&self) -> PathBuf {
        self.scratch.path().join("logs")
    }

    /// A dir of this test for hostPath volumes (`host/`, created empty).
    pub fn host_dir(&self) -> PathBuf {
        self.scratch.path().join("host")
    }

    /// The read-only API's address.
    pub fn read_only_addr(&self) -> SocketAddr {
        self.read_only
    }

    /// The healthz server's address.
    pub fn healthz_addr(&self) -> SocketAddr {
        self.healthz
    }

    /// The secure (TLS) kubelet API's address (`--port`).
    pub fn secure_addr(&self) -> SocketAddr {
        self.secure
    }

    /// The static pod name of manifest pod `name` (`<name>-<node>`); a name that already
    /// carries the suffix is returned as it is.
    pub fn pod_name(&self, name: &str) -> String {
        let suffix = format!("-{}", self.node_name);
        if name.ends_with(&suffix) {
            name.to_string()
        } else {
            format!("{name}{suffix}")
        }
    }

    /// Writes manifest `file` (common leading indentation removed, so tests can indent YAML
    /// with their code) beside the dir and renames it in, so ferrolet never reads half a file.
    pub fn write_manifest(&self, file: &str, text: &str) {
        let dir = self.manifest_dir();
        let tmp = dir.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, dedent(text))
            .unwrap_or_else(|e| panic!("writing {}: {e}", tmp.display()));
        let path = dir.join(file);
        std::fs::rename(&tmp, &path)
            .unwrap_or_else(|e| panic!("renaming to {}: {e}", path.display()));
    }

    /// Removes manifest `file`.
    pub fn remove_manifest(&self, file: &str) {
        let path = self.manifest_dir().join(file);
        std::fs::remove_file(&path).unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
    }

    /// Everything ferrolet has logged so far (all its runs).
    pub fn kubelet_log(&self) -> String {
        self.kubelet.log_text()
    }

    /// ferrolet's pid (0 while it is not running).
    pub fn kubelet_pid(&self) -> u32 {
        self.kubelet.pid()
    }

    /// GETs `path_and_query` from the read-only API.
    pub async fn get(&self, path_and_query: &str) -> Result<HttpResponse, String> {
        http_request(self.read_only, path_and_query).await
    }

    /// Polls `/stats/summary` until it answers a Summary `pred` holds for (an answer may be
    /// an error while a pod's first stats are not there yet); returns it.
    ///
    /// # Panics
    /// After 30 s, with the last answer.
    pub async fn summary_until(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let last = match self.get("/stats/summary").await {
                Ok(r) if r.status == 200 => match serde_json::from_str::<Value>(&r.body) {
                    Ok(v) if pred(&v) => return v,
                    Ok(v) => format!("{v:#}"),
                    Err(e) => format!("not JSON ({e}): {:.400}", r.body),
                },
                Ok(r) => format!("{} {:.400}", r.status, r.body),
                Err(e) => e,
            };
            assert!(
                Instant::now() < deadline,
                "no Summary {what} within 30 s; last: {last:.2000}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// GET `/pods`: the PodList, or why not.
    pub async fn try_pods(&self) -> Result<Value, String> {
        let r = self.get("/pods").await?;
        if r.status != 200 {
            return Err(format!("GET /pods: {} {}", r.status, r.body));
        }
        let list: Value = serde_json::from_str(&r.body)
            .map_err(|e| format!("GET /pods: not JSON ({e}): {:.500}", r.body))?;
        if list["kind"] != "PodList" || !list["items"].is_array() {
            return Err(format!("GET /pods: not a PodList: {:.500}", r.body));
        }
        self.remember_uids(&list);
        Ok(list)
    }

    /// GET `/pods`: the PodList.
    ///
    /// # Panics
    /// If ferrolet does not answer with a PodList.
    pub async fn pods(&self) -> Value {
        self.try_pods()
            .await
            .unwrap_or_else(|e| panic!("{e}\nferrolet log tail:\n{}", self.log_tail()))
    }

    /// Pod `name` (manifest name or full static pod name) in `/pods`, if listed.
    pub async fn pod(&self, name: &str) -> Option<Value> {
        find_pod(&self.pods().await, &self.pod_name(name)).cloned()
    }

    /// Polls `/pods` until pod `name` is listed and `pred` holds for it; returns it.
    ///
    /// # Panics
    /// If that does not happen within `limit`: the message shows the pod as last seen and
    /// the tail of ferrolet's log.
    pub async fn wait_pod(
        &self,
        name: &str,
        mut pred: impl FnMut(&Value) -> bool,
        limit: Duration,
    ) -> Value {
        let full = self.pod_name(name);
        let deadline = Instant::now() + limit;
        loop {
            let last = match self.try_pods().await {
                Ok(list) => match find_pod(&list, &full) {
                    Some(pod) if pred(pod) => return pod.clone(),
                    Some(pod) => pretty(pod),
                    None => format!("not listed; listed: {:?}", pod_names(&list)),
                },
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {limit:?} waiting for pod {full}; last seen:\n{last}\n\
                     ferrolet log tail:\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until pod `name` is Running with its Ready condition True.
    pub async fn wait_running(&self, name: &str) -> Value {
        self.wait_pod(
            name,
            |p| pod_phase(p) == "Running" && pod_condition(p, "Ready") == Some("True"),
            LONG,
        )
        .await
    }

    /// Waits until pod `name` is in `phase`.
    pub async fn wait_phase(&self, name: &str, phase: &str) -> Value {
        self.wait_pod(name, |p| pod_phase(p) == phase, LONG).await
    }

    /// Polls `/pods` until pod `name` is no longer listed.
    pub async fn wait_pod_gone(&self, name: &str, limit: Duration) {
        let full = self.pod_name(name);
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(list) = self.try_pods().await
                && find_pod(&list, &full).is_none()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pod {full} still listed after {limit:?}\nferrolet log tail:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// GET `/containerLogs/<ns>/<pod>/<container>?<query>` of pod `pod` (manifest or full
    /// name) in [`POD_NAMESPACE`]; the body of a 200 answer.
    pub async fn container_logs_with(
        &self,
        pod: &str,
        container: &str,
        query: &str,
    ) -> Result<String, String> {
        let mut path = format!(
            "/containerLogs/{POD_NAMESPACE}/{}/{container}",
            self.pod_name(pod)
        );
        if !query.is_empty() {
            path.push('?');
            path.push_str(query);
        }
        let r = self.get(&path).await?;
        if r.status == 200 {
            Ok(r.body)
        } else {
            Err(format!("GET {path}: {} {}", r.status, r.body))
        }
    }

    /// GET `/metrics` from the read-only API, parsed by the strict text-format parser.
    ///
    /// # Panics
    /// If ferrolet does not answer 200 with a valid exposition.
    pub async fn metrics(&self) -> crate::prometheus::Exposition {
        let r = self
            .get("/metrics")
            .await
            .unwrap_or_else(|e| panic!("{e}\nferrolet log tail:\n{}", self.log_tail()));
        assert_eq!(r.status, 200, "GET /metrics: {}", r.body);
        crate::prometheus::parse(&r.body)
            .unwrap_or_else(|e| panic!("GET /metrics: not the text format: {e}\n{}", r.body))
    }

    /// The whole log of `container` in pod `pod`, as `/containerLogs` serves it.
    pub async fn container_logs(&self, pod: &str, container: &str) -> Result<String, String> {
        self.container_logs_with(pod, container, "").await
    }

    /// Polls `/containerLogs` until the log of `container` in `pod` has a line equal to
    /// `line`; returns the whole log.
    pub async fn wait_log_line(&self, pod: &str, container: &str, line: &str) -> String {
        let deadline = Instant::now() + LONG;
        loop {
            let last = match self.container_logs(pod, container).await {
                Ok(text) if text.lines().any(|l| l == line) => return text,
                Ok(text) => format!("log so far: {text:?}"),
                Err(e) => e,
            };
            assert!(
                Instant::now() < deadline,
                "no line {line:?} in the log of {pod}/{container} within {LONG:?}; last: {last}\n\
                 ferrolet log tail:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The verbose PodSandboxStatus `info` of the ready sandbox of `pod` (a /pods item):
    /// `pid` is the pause process's (0 for a ferrolet-cri sandbox without one, which names
    /// its `netns` file instead).
    pub async fn ready_sandbox_info(&self, pod: &Value) -> Value {
        let uid = pod_uid(pod);
        let (sandboxes, _) = self.runtime_objects(uid).await;
        let Some(sandbox) = sandboxes
            .iter()
            .find(|s| s.state == PodSandboxState::SandboxReady as i32)
        else {
            panic!("pod {uid} has no ready sandbox: {sandboxes:?}");
        };
        let status = self.node.api().await.pod_status(&sandbox.id).await;
        let status = status.unwrap_or_else(|e| panic!("PodSandboxStatus {}: {e}", sandbox.id));
        let Some(info) = status.info.get("info") else {
            panic!("sandbox {}: no verbose info: {:?}", sandbox.id, status.info);
        };
        serde_json::from_str(info)
            .unwrap_or_else(|e| panic!("sandbox {}: info is not JSON ({e}): {info}", sandbox.id))
    }

    /// What ferrolet-cri runs for the pod with `uid` (sandboxes and containers, any state),
    /// found by the kubelet's CRI labels; the ids are remembered for the leak checks.
    pub async fn runtime_objects(&self, uid: &str) -> (Vec<PodSandbox>, Vec<Container>) {
        let api = self.node.api().await;
        let selector = labels(&[(POD_UID_LABEL, uid)]);
        let sandboxes = api
            .list_pods(Some(PodSandboxFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await
            .unwrap_or_else(|e| panic!("ListPodSandbox: {e}"));
        let containers = api
            .list_containers(Some(ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await
            .unwrap_or_else(|e| panic!("ListContainers: {e}"));
        self.node.track_ids(
            sandboxes
                .iter()
                .map(|s| s.id.clone())
                .chain(containers.iter().map(|c| c.id.clone()))
                .collect(),
        );
        (sandboxes, containers)
    }

    /// How ferrolet exited, if it did by itself (nothing here killed it).
    pub fn kubelet_exited(&self) -> Option<std::process::ExitStatus> {
        self.kubelet.exited()
    }

    /// Kills ferrolet with SIGKILL (a crash) and reaps it; the pods keep running.
    pub fn kill_kubelet(&self) {
        self.kubelet.kill();
    }

    /// Stops ferrolet with SIGTERM; whether it exited 0 within a generous limit.
    pub async fn stop_kubelet(&self) -> bool {
        self.kubelet.terminate().await
    }

    /// Starts ferrolet again with the same flags (after killing it if it still runs), and
    /// waits until its healthz answers.
    pub async fn restart_kubelet(&self) {
        self.kubelet.kill();
        self.kubelet.spawn().await;
    }

    /// [`KubeletNode::restart_kubelet`] as a supervisor does it: says why ferrolet did not
    /// come up (it exited, or its healthz never answered) instead of panicking.
    pub async fn try_restart_kubelet(&self) -> Result<(), String> {
        self.kubelet.kill();
        self.kubelet.try_spawn().await
    }

    /// Stops the node and checks that nothing is left: removes every manifest, waits until
    /// ferrolet has stopped and removed every pod through CRI, with no file of a removed
    /// pod left under the root or pod-logs dirs, no mount under the scratch dir and no
    /// process in the pods' cgroups; then stops ferrolet (it must exit 0 on SIGTERM) and
    /// tears the CRI node down with its leak checks.
    pub async fn teardown(self) {
        if let Ok(rd) = std::fs::read_dir(self.manifest_dir()) {
            for entry in rd.flatten() {
                let path = entry.path();
                std::fs::remove_file(&path)
                    .unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
            }
        }
        self.wait_all_removed().await;
        self.assert_no_kubelet_leaks().await;
        let stopped = self.kubelet.terminate().await;
        assert!(
            stopped,
            "ferrolet did not exit 0 within {STOP_LIMIT:?} of SIGTERM\nferrolet log tail:\n{}",
            self.log_tail()
        );
        let KubeletNode {
            kubelet,
            node,
            scratch,
            cgroup,
            ..
        } = self;
        drop(kubelet);
        node.teardown().await;
        drop(cgroup);
        drop(scratch);
    }

    /// Waits until `/pods` is empty, CRI lists nothing, and no pod dir or pod log dir of a
    /// pod seen during the test is left.
    async fn wait_all_removed(&self) {
        let api = self.node.api().await;
        let deadline = Instant::now() + REMOVE_LIMIT;
        loop {
            let mut left = Vec::new();
            match self.try_pods().await {
                Ok(list) => left.extend(
                    pod_names(&list)
                        .into_iter()
                        .map(|n| format!("pod {n} in /pods")),
                ),
                Err(e) => left.push(e),
            }
            match api.list_pods(None).await {
                Ok(pods) => {
                    self.node
                        .track_ids(pods.iter().map(|p| p.id.clone()).collect());
                    left.extend(pods.iter().map(|p| {
                        let name = p.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("");
                        format!("sandbox {} ({name}) in CRI", p.id)
                    }));
                }
                Err(e) => left.push(format!("ListPodSandbox: {e}")),
            }
            match api.list_containers(None).await {
                Ok(containers) => {
                    self.node
                        .track_ids(containers.iter().map(|c| c.id.clone()).collect());
                    left.extend(
                        containers
                            .iter()
                            .map(|c| format!("container {} in CRI", c.id)),
                    );
                }
                Err(e) => left.push(format!("ListContainers: {e}")),
            }
            left.extend(self.pod_file_leaks());
            if left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "ferrolet did not remove the pods within {REMOVE_LIMIT:?} of their manifests \
                     going:\n  - {}\nferrolet log tail:\n{}",
                    left.join("\n  - "),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Files of pods seen during the test under the root dir, and any pod log dir.
    fn pod_file_leaks(&self) -> Vec<String> {
        let uids: Vec<String> = self
            .uids
            .lock()
            .map(|u| u.iter().cloned().collect())
            .unwrap_or_default();
        let mut leaks: Vec<String> = paths_naming(&self.root_dir(), &uids)
            .into_iter()
            .map(|p| format!("file of a removed pod: {}", p.display()))
            .collect();
        if let Ok(rd) = std::fs::read_dir(self.pod_logs_dir()) {
            leaks.extend(
                rd.flatten()
                    .map(|e| format!("pod log dir of a removed pod: {}", e.path().display())),
            );
        }
        leaks
    }

    /// What ferrolet left of its pods: mounts under the scratch dir (emptyDir tmpfs, volume
    /// mounts, CSI publish and staging mounts; not the node's own root tmpfs), CSI volumes'
    /// global directories (staging, `vol_data.json`), processes in the pods' cgroups, files
    /// of pods seen during the test under the root dir, and pod log dirs.
    pub async fn kubelet_leaks(&self) -> Vec<String> {
        let root = self.root_dir();
        let mut leaks: Vec<String> = LeakChecker::new()
            .mounts_under(self.scratch.path())
            .check()
            .await
            .iter()
            .filter(|l| !(self.root_mounted && **l == leak::Leak::Mount(root.clone())))
            .map(ToString::to_string)
            .collect();
        leaks.extend(csi_global_leaks(&root));
        leaks.extend(self.cgroup.processes());
        leaks.extend(self.cgroup.pod_cgroups());
        leaks.extend(self.pod_file_leaks());
        leaks
    }

    /// Mounts under the scratch dir (emptyDir tmpfs) and processes in the pods' cgroups,
    /// after a short grace.
    async fn assert_no_kubelet_leaks(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let leaks: Vec<String> = self
                .kubelet_leaks()
                .await
                .into_iter()
                .filter(|l| {
                    !l.starts_with("file of a removed pod")
                        && !l.starts_with("pod log dir")
                        && !l.starts_with("cgroup ")
                })
                .collect();
            if leaks.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} leak(s) after ferrolet removed every pod:\n  - {}\nferrolet log tail:\n{}",
                    leaks.len(),
                    leaks.join("\n  - "),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn remember_uids(&self, list: &Value) {
        let found = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["metadata"]["uid"].as_str())
            .filter(|u| !u.is_empty());
        if let Ok(mut uids) = self.uids.lock() {
            uids.extend(found.map(str::to_string));
        }
    }

    fn log_tail(&self) -> String {
        log_tail(&self.kubelet.log_text(), 40)
    }
}

/// The node name for test `name`: lowercase, `_` as `-`, so pod names stay DNS names.
/// The node name of test `name` (`--hostname-override`).
pub fn node_name_for(name: &str) -> String {
    format!("node-{}", name.to_lowercase().replace('_', "-"))
}

/// Settings every node gets unless its test sets them itself: this VM's disk is ~85% full,
/// past the image GC's default high threshold, and a GC pass would remove the images tests
/// run (and, on containerd 1.6's CRI, which does not pin it, the pause image), so image GC
/// only runs in the tests that ask for it.
const HARNESS_DEFAULTS: &[(&str, &str)] = &[
    ("imageGCHighThresholdPercent", "100"),
    ("imageGCLowThresholdPercent", "99"),
    // Likewise the default hard eviction thresholds (imagefs.available<15%): a CI run's own
    // build fills this disk past them, and pods of unrelated tests would be evicted. Sizes, not
    // shares: 1% of a CI machine's 270 GB disk was 2.7 GB, and with 1.8 GB free its pods were.
    (
        "evictionHard",
        r#"{"memory.available": "100Mi", "nodefs.available": "256Mi", "imagefs.available": "256Mi", "nodefs.inodesFree": "1%"}"#,
    ),
];

/// The KubeletConfiguration every node starts from: its own pod logs dir and cgroup root,
/// quick manifest re-lists and resyncs, [`HARNESS_DEFAULTS`] the test does not override.
fn kubelet_config(dir: &Path, cgroup_root: &str, extra: &str) -> String {
    let q = |s: &str| Value::String(s.to_string()).to_string();
    let defaults: String = HARNESS_DEFAULTS
        .iter()
        .filter(|(key, _)| {
            !extra
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{key}:")))
        })
        .map(|(key, value)| format!("{key}: {value}\n"))
        .collect();
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         podLogsDir: {logs}\n\
         cgroupRoot: {cgroup}\n\
         cgroupDriver: {driver}\n\
         fileCheckFrequency: 1s\n\
         syncFrequency: 10s\n\
         {defaults}\
         {extra}\n",
        logs = q(&dir.join("logs").display().to_string()),
        cgroup = q(cgroup_root),
        driver = crate::cgroups::driver_name(),
    )
}

/// Three free TCP ports on 127.0.0.1 (held together while chosen, so they differ).
fn free_ports() -> (SocketAddr, SocketAddr, SocketAddr) {
    let bind = || {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("binding a free port: {e}"))
    };
    let (a, b, c) = (bind(), bind(), bind());
    let addr = |l: &TcpListener| {
        l.local_addr()
            .unwrap_or_else(|e| panic!("reading a bound address: {e}"))
    };
    (addr(&a), addr(&b), addr(&c))
}

/// The running `ferrolet`, killed on drop. Its calls take `&self`, so a fault injector can
/// kill and restart it while other tasks use the node.
struct Ferrolet {
    child: Mutex<Option<Child>>,
    args: Vec<String>,
    log: PathBuf,
    healthz: SocketAddr,
}

impl Ferrolet {
    /// Starts it with its flags, logging to its file, and waits until healthz says ok.
    async fn spawn(&self) {
        if let Err(e) = self.try_spawn().await {
            panic!("{e}");
        }
    }

    /// [`Ferrolet::spawn`], saying why it did not come up instead of panicking.
    async fn try_spawn(&self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("opening {}: {e}", self.log.display()))?;
        let err = log
            .try_clone()
            .map_err(|e| format!("duplicating the log fd: {e}"))?;
        let child = crate::daemon_command(workspace_binary("ferrolet"))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawning ferrolet: {e}"))?;
        leak::register_daemon(child.id());
        *self.slot() = Some(child);
        self.wait_healthy(LONG).await
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pid(&self) -> u32 {
        self.slot().as_ref().map(Child::id).unwrap_or_default()
    }

    fn exited(&self) -> Option<std::process::ExitStatus> {
        let mut slot = self.slot();
        let status = slot.as_mut()?.try_wait().ok().flatten()?;
        slot.take();
        Some(status)
    }

    async fn wait_healthy(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let mut last = String::from("never asked");
        while Instant::now() < deadline {
            let exited = self
                .slot()
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(format!(
                    "ferrolet exited with {status}:\n{}",
                    log_tail(&self.log_text(), 60)
                ));
            }
            match http_request(self.healthz, "/healthz").await {
                Ok(r) if r.status == 200 => return Ok(()),
                Ok(r) => last = format!("{} {}", r.status, r.body),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "ferrolet's healthz did not answer 200 within {limit:?} (last: {last}):\n{}",
            log_tail(&self.log_text(), 60)
        ))
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&self) {
        if let Some(mut child) = self.slot().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then up to [`STOP_LIMIT`] for it to exit (SIGKILL after that); whether it
    /// exited 0.
    async fn terminate(&self) -> bool {
        let Some(mut child) = self.slot().take() else {
            return true;
        };
        let Ok(raw) = i32::try_from(child.id()) else {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        };
        let pid = nix::unistd::Pid::from_raw(raw);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + STOP_LIMIT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }
}

impl Drop for Ferrolet {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The test's `cgroupRoot` in every v1 hierarchy: removed (deepest first) on drop, once the
/// runtime has removed what it put inside. With the systemd driver it lives where systemd
/// keeps that name ([`crate::cgroups::node_path`]), and its slice is stopped on drop, which
/// stops every unit the kubelet and runc started below it.
struct CgroupTree {
    path: String,
}

impl CgroupTree {
    /// The tree's top as it is on disk.
    fn on_disk(&self) -> String {
        crate::cgroups::node_path(&self.path)
    }

    /// Makes the tree's top in every hierarchy (the v1 controllers and the unified one). On
    /// v2 the controllers are delegated down to it, as a node's init does for the kubelet's
    /// cgroup root; with the systemd driver it is a slice systemd started with them.
    fn create(&self) {
        let v2 = crate::cgroups::v2();
        if v2 && crate::cgroups::start_slice(&self.path) {
            return;
        }
        let top = self.on_disk();
        for h in crate::cgroups::hierarchies() {
            let dir = h.join(top.trim_start_matches('/'));
            if let Err(e) = std::fs::create_dir_all(&dir) {
                panic!("creating cgroup {}: {e}", dir.display());
            }
            if v2 {
                delegate_controllers(&h, &dir);
            }
        }
    }

    /// The tree's dirs in every hierarchy, deepest first.
    fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        let on_disk = self.on_disk();
        for h in crate::cgroups::hierarchies() {
            let top = h.join(on_disk.trim_start_matches('/'));
            let mut stack = vec![top];
            while let Some(dir) = stack.pop() {
                if !dir.is_dir() {
                    continue;
                }
                if let Ok(rd) = std::fs::read_dir(&dir) {
                    stack.extend(
                        rd.flatten()
                            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                            .map(|e| e.path()),
                    );
                }
                dirs.push(dir);
            }
        }
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        dirs
    }

    /// Pod cgroups (`pod<uid>`, `kubepods-…-pod<uid>.slice`) still in the tree: a pod's
    /// cgroup that outlived its pod.
    fn pod_cgroups(&self) -> Vec<String> {
        self.dirs()
            .into_iter()
            .filter(|d| {
                d.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with("pod") || n.contains("-pod")
                })
            })
            .map(|d| format!("cgroup {}", d.display()))
            .collect()
    }

    /// Processes still in the tree: a pod's process that outlived its pod.
    fn processes(&self) -> Vec<String> {
        let mut found = BTreeSet::new();
        for dir in self.dirs() {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.split_whitespace() {
                let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
                found.insert(format!(
                    "process {pid} ({}) in cgroup {}",
                    cmdline.trim_end(),
                    dir.display()
                ));
            }
        }
        found.into_iter().collect()
    }
}

impl Drop for CgroupTree {
    fn drop(&mut self) {
        let on_disk = self.on_disk();
        crate::cgroups::stop_slice(&on_disk);
        for dir in self.dirs() {
            if let Err(e) = std::fs::remove_dir(&dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                eprintln!("removing cgroup {}: {e}", dir.display());
            }
        }
        // The shared parent goes only once no test uses it.
        let Some(parent) = Path::new(&on_disk).parent() else {
            return;
        };
        for h in crate::cgroups::hierarchies() {
            let _ = std::fs::remove_dir(h.join(parent.strip_prefix("/").unwrap_or(parent)));
        }
    }
}

/// Runs `ferrolet --config <config> --root-dir <root>` against `endpoint` until it exits (a
/// start-up it must refuse), its output in `log`; the exit status and the log's text. Panics
/// if it still runs after [`LONG`].
pub async fn run_ferrolet_to_exit(
    config: &Path,
    root: &Path,
    endpoint: &str,
    log: &Path,
) -> (std::process::ExitStatus, String) {
    let out = std::fs::File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let err = out
        .try_clone()
        .unwrap_or_else(|e| panic!("duplicating the log fd: {e}"));
    let mut child = std::process::Command::new(workspace_binary("ferrolet"))
        .arg("--config")
        .arg(config)
        .arg("--root-dir")
        .arg(root)
        .arg("--container-runtime-endpoint")
        .arg(endpoint)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning ferrolet: {e}"));
    let deadline = Instant::now() + LONG;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "ferrolet still runs after {LONG:?}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    (status, std::fs::read_to_string(log).unwrap_or_default())
}

// ---------------------------------------------------------------------------------------------
// Manifests.

/// An image reference of test image `name` (`busybox`, `httpd`, …) in the environment's open
/// registry: `127.0.0.1:5000/ferrolet/<name>:1`.
pub fn image(name: &str) -> String {
    format!("{OPEN_REGISTRY}/ferrolet/{name}:{}", crate::testimages::TAG)
}

/// A busybox pod `name` whose one container `main` runs `script` with `resources` (a YAML
/// flow mapping, e.g. `{requests: {cpu: 500m}}`), stopped within 1 s.
pub fn resources_pod(name: &str, resources: &str, script: &str) -> String {
    format!(
        r#"
        apiVersion: v1
        kind: Pod
        metadata:
          name: {name}
        spec:
          terminationGracePeriodSeconds: 1
          containers:
          - name: main
            image: {image}
            command: {command}
            resources: {resources}
        "#,
        image = image("busybox"),
        command = sh(script),
    )
}

/// A fresh ext4 filesystem of `size` bytes in `image`, loop-mounted at `at`: a node's small
/// disk that a test can fill. No blocks are reserved for root, so ferrolet (root) sees it
/// full when it is.
fn mount_small_disk(image: &Path, size: u64, at: &Path) {
    let run = |program: &str, args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let file = std::fs::File::create(image)
        .unwrap_or_else(|e| panic!("creating {}: {e}", image.display()));
    file.set_len(size)
        .unwrap_or_else(|e| panic!("sizing {}: {e}", image.display()));
    run(
        "mkfs.ext4",
        &[
            "-q".as_ref(),
            "-m".as_ref(),
            "0".as_ref(),
            image.as_os_str(),
        ],
    );
    run(
        "mount",
        &[
            "-o".as_ref(),
            "loop".as_ref(),
            image.as_os_str(),
            at.as_os_str(),
        ],
    );
}

/// cgroup v2: every controller `root` has enabled in the subtree of each cgroup from `root`
/// down to `leaf`'s parent, so `leaf` has them all.
fn delegate_controllers(root: &Path, leaf: &Path) {
    let Ok(controllers) = std::fs::read_to_string(root.join("cgroup.controllers")) else {
        return;
    };
    let enable: String = controllers
        .split_whitespace()
        .map(|c| format!("+{c} "))
        .collect();
    let mut dir = root.to_path_buf();
    let Ok(rel) = leaf.strip_prefix(root) else {
        return;
    };
    for part in rel.components() {
        let control = dir.join("cgroup.subtree_control");
        if let Err(e) = std::fs::write(&control, enable.trim_end()) {
            panic!("enabling {enable:?} in {}: {e}", control.display());
        }
        dir.push(part);
    }
}

/// `["sh", "-c", <script>]` as a YAML flow sequence (JSON strings are YAML scalars), for a
/// container's `command:`.
pub fn sh(script: &str) -> String {
    Value::from(vec!["sh", "-c", script]).to_string()
}

/// `text` without its first line break and without the leading indentation its non-blank
/// lines share.
pub fn dedent(text: &str) -> String {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let indent = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        out.push_str(
            line.get(indent..)
                .unwrap_or_else(|| line.trim_start_matches(' ')),
        );
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reading pods as `/pods` serves them (v1 Pod JSON).

/// The item of `list` (a PodList) named `name`.
pub fn find_pod<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == name)
}

/// The names of the pods in `list`.
pub fn pod_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// `metadata.uid` ("" when missing).
pub fn pod_uid(pod: &Value) -> &str {
    pod["metadata"]["uid"].as_str().unwrap_or_default()
}

/// `status.phase` ("" when missing).
pub fn pod_phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

/// `status.podIP` ("" when missing).
pub fn pod_ip(pod: &Value) -> &str {
    pod["status"]["podIP"].as_str().unwrap_or_default()
}

/// `status.hostIP` ("" when missing).
pub fn host_ip(pod: &Value) -> &str {
    pod["status"]["hostIP"].as_str().unwrap_or_default()
}

/// The `status` (`True`/`False`/`Unknown`) of the pod's condition `kind`.
pub fn pod_condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a str> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?["status"]
        .as_str()
}

/// The status of app container `name`.
pub fn container_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    named_status(&pod["status"]["containerStatuses"], name)
}

/// The status of init container `name`.
pub fn init_container_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    named_status(&pod["status"]["initContainerStatuses"], name)
}

fn named_status<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|s| s["name"] == name)
}

/// The runtime's container id of a container status, without the `<runtime>://` prefix.
pub fn container_id(status: &Value) -> &str {
    let id = status["containerID"].as_str().unwrap_or_default();
    id.split_once("://").map_or(id, |(_, id)| id)
}

/// `restartCount` (0 when missing).
pub fn restart_count(status: &Value) -> i64 {
    status["restartCount"].as_i64().unwrap_or_default()
}

/// Whether the container status says `ready: true`.
pub fn is_ready(status: &Value) -> bool {
    status["ready"] == true
}

/// Whether the container's state is `running`.
pub fn is_running(status: &Value) -> bool {
    status["state"]["running"].is_object()
}

/// `state.running.startedAt` ("" when not running).
pub fn started_at(status: &Value) -> &str {
    status["state"]["running"]["startedAt"]
        .as_str()
        .unwrap_or_default()
}

/// `state.waiting.reason`, when waiting.
pub fn waiting_reason(status: &Value) -> Option<&str> {
    status["state"]["waiting"]["reason"].as_str()
}

/// `state.terminated`, when terminated.
pub fn terminated(status: &Value) -> Option<&Value> {
    Some(&status["state"]["terminated"]).filter(|t| t.is_object())
}

/// `lastState.terminated`, when the previous instance is known.
pub fn last_terminated(status: &Value) -> Option<&Value> {
    Some(&status["lastState"]["terminated"]).filter(|t| t.is_object())
}

/// Seconds since the Unix epoch of an RFC 3339 time (`2024-05-01T10:00:00Z`, fractions and
/// offsets allowed), as the API writes `startedAt`/`finishedAt`.
pub fn rfc3339_seconds(ts: &str) -> Option<i64> {
    if !crate::cri::is_rfc3339(ts) {
        return None;
    }
    ts.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

fn pretty(v: &Value) -> String {
    let text = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    log_tail(&text, 120)
}

// ---------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client for the read-only API (no new dependency for one GET).

/// An HTTP answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The body (chunked encoding undone), as text.
    pub body: String,
}

/// GETs `path_and_query` from `addr` (one connection, closed after the answer).
pub async fn http_request(addr: SocketAddr, path_and_query: &str) -> Result<HttpResponse, String> {
    let path = path_and_query.to_string();
    tokio::task::spawn_blocking(move || get_blocking(addr, &path))
        .await
        .map_err(|e| format!("GET http://{addr}{path_and_query}: {e}"))?
}

fn get_blocking(addr: SocketAddr, path: &str) -> Result<HttpResponse, String> {
    let fail = |e: std::io::Error| format!("GET http://{addr}{path}: {e}");
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .map_err(fail)?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: */*\r\n\r\n");
    s.write_all(request.as_bytes()).map_err(fail)?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).map_err(fail)?;
    parse_http_response(&answer).map_err(|e| format!("GET http://{addr}{path}: {e}"))
}

/// Parses a whole HTTP/1.x response (read until the server closed the connection).
pub fn parse_http_response(raw: &[u8]) -> Result<HttpResponse, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let body = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|_| status_line.starts_with("HTTP/1."))
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("bad header line {line:?}"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| format!("bad content-length {value:?}"))?,
            );
        }
    }
    let body = if chunked {
        dechunk(body)?
    } else if let Some(n) = length {
        body.get(..n)
            .ok_or_else(|| format!("body of {} bytes, content-length {n}", body.len()))?
            .to_vec()
    } else {
        body.to_vec()
    };
    Ok(HttpResponse {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line without CRLF")?;
        let line = String::from_utf8_lossy(&rest[..eol]);
        let hex = line.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(hex, 16).map_err(|_| format!("bad chunk size {line:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).ok_or("truncated chunk")?;
        out.extend_from_slice(chunk);
        rest = rest
            .get(size..)
            .and_then(|r| r.strip_prefix(b"\r\n"))
            .ok_or("chunk without CRLF")?;
    }
}

/// CSI volumes still staged (or given their global directory) under `root`:
/// `plugins/kubernetes.io/csi/<driver>/<sha256(handle)>`, whatever is in them; for raw block
/// volumes `volumeDevices/{staging,publish}/<name>` and `volumeDevices/<name>` (the empty
/// `staging` and `publish` dirs stay, as Go leaves them).
fn csi_global_leaks(root: &Path) -> Vec<String> {
    let base = root.join("plugins/kubernetes.io/csi");
    let dirs = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect()
    };
    let block = base.join("volumeDevices");
    let mut left: Vec<PathBuf> = dirs(&base)
        .iter()
        .filter(|d| **d != block)
        .flat_map(|driver| dirs(driver))
        .collect();
    for d in dirs(&block) {
        if d.ends_with("staging") || d.ends_with("publish") {
            left.extend(
                std::fs::read_dir(&d)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        } else {
            left.push(d);
        }
    }
    left.into_iter()
        .map(|v| format!("CSI volume's global directory left: {}", v.display()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse_with_length_chunks_or_close() {
        let plain = parse_http_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        assert_eq!(
            plain,
            Ok(HttpResponse {
                status: 200,
                body: "ok".into()
            })
        );
        let chunked = parse_http_response(
            b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n4\r\nnot \r\n5;x=y\r\nfound\r\n0\r\n\r\n",
        );
        assert_eq!(
            chunked,
            Ok(HttpResponse {
                status: 404,
                body: "not found".into()
            })
        );
        let closed = parse_http_response(b"HTTP/1.0 500 Internal\r\nX: y\r\n\r\nbad\n");
        assert_eq!(
            closed.map(|r| (r.status, r.body)),
            Ok((500, "bad\n".into()))
        );
        for bad in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"SPDY 200\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc",
        ] {
            assert!(parse_http_response(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn manifests_are_dedented_and_commands_quoted() {
        let text = "\n    a: 1\n    b:\n      - c\n\n    d: 2\n";
        assert_eq!(dedent(text), "a: 1\nb:\n  - c\n\nd: 2\n");
        assert_eq!(dedent("x: 1"), "x: 1\n");
        assert_eq!(
            sh(r#"echo "hi"; exit 1"#),
            r#"["sh","-c","echo \"hi\"; exit 1"]"#
        );
        assert_eq!(image("busybox"), "127.0.0.1:5000/ferrolet/busybox:1");
        assert_eq!(node_name_for("Static_Pods"), "node-static-pods");
    }

    #[test]
    fn the_config_names_the_test_dirs() {
        let config = kubelet_config(Path::new("/t/k"), "/ferrolet-it/k-1", "maxPods: 5");
        for want in [
            "apiVersion: kubelet.config.k8s.io/v1beta1",
            "kind: KubeletConfiguration",
            "podLogsDir: \"/t/k/logs\"",
            "cgroupRoot: \"/ferrolet-it/k-1\"",
            "fileCheckFrequency: 1s",
            "syncFrequency: 10s",
            "maxPods: 5",
        ] {
            assert!(config.lines().any(|l| l == want), "{want:?} in {config}");
        }
    }

    #[test]
    fn pod_json_is_read_as_the_api_writes_it() {
        let list = serde_json::json!({
            "kind": "PodList",
            "items": [{
                "metadata": {"name": "web-n", "uid": "u1"},
                "status": {
                    "phase": "Running",
                    "podIP": "10.1.2.3",
                    "hostIP": "192.0.2.1",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 0}}}],
                    "containerStatuses": [{
                        "name": "c",
                        "containerID": "containerd://abc",
                        "ready": true,
                        "restartCount": 2,
                        "state": {"running": {"startedAt": "2024-05-01T10:00:00Z"}},
                        "lastState": {"terminated": {"exitCode": 1}}
                    }]
                }
            }]
        });
        assert_eq!(pod_names(&list), ["web-n"]);
        assert!(find_pod(&list, "web").is_none());
        let pod = find_pod(&list, "web-n").unwrap_or(&Value::Null);
        assert_eq!(
            (pod_uid(pod), pod_phase(pod), pod_ip(pod), host_ip(pod)),
            ("u1", "Running", "10.1.2.3", "192.0.2.1")
        );
        assert_eq!(pod_condition(pod, "Ready"), Some("True"));
        assert_eq!(pod_condition(pod, "Initialized"), None);
        let c = container_status(pod, "c").unwrap_or(&Value::Null);
        assert_eq!((container_id(c), restart_count(c)), ("abc", 2));
        assert!(is_ready(c) && is_running(c));
        assert_eq!(started_at(c), "2024-05-01T10:00:00Z");
        assert_eq!(waiting_reason(c), None);
        assert!(terminated(c).is_none());
        assert_eq!(
            last_terminated(c).map(|t| &t["exitCode"]),
            Some(&Value::from(1))
        );
        let init = init_container_status(pod, "init").unwrap_or(&Value::Null);
        assert_eq!(
            terminated(init).map(|t| &t["exitCode"]),
            Some(&Value::from(0))
        );
        assert!(container_status(pod, "init").is_none());
    }

    #[test]
    fn rfc3339_times_become_epoch_seconds() {
        assert_eq!(rfc3339_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_seconds("2024-05-01T10:00:00Z"), Some(1_714_557_600));
        assert_eq!(
            rfc3339_seconds("2024-05-01T12:00:00.5+02:00"),
            Some(1_714_557_600)
        );
        assert_eq!(
            rfc3339_seconds("2000-03-01T00:00:00-01:30"),
            Some(951_868_800 + 5400)
        );
        assert_eq!(rfc3339_seconds("2024-05-01 10:00:00Z"), None);
    }
}
