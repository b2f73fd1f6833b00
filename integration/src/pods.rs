//! Pods on a real node: [`CriNode`] runs `ferrolet-cri` with every directory it writes (root,
//! state, netns, CNI conf/cache, IPAM, pod logs) inside the test's own scratch dirs and CNI
//! network, so tests run in parallel and the leak checks see exactly what one test made.
//! [`PodBuilder`] and [`ContainerBuilder`] build CRI configs the way the kubelet fills them.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolet_proto::containerd::services::v1::snapshots::Kind;
use ferrolet_proto::containerd::services::v1::{
    DeleteImageRequest, ListContainersRequest as CdListContainers,
    ListImagesRequest as CdListImages, ListRequest as ListLeases, ListTasksRequest,
};
use ferrolet_proto::cri::image_service_client::ImageServiceClient;
use ferrolet_proto::cri::{
    CdiDevice, ContainerConfig, ContainerMetadata, DnsConfig, ImageSpec, ImageStatusRequest,
    Int64Value, KeyValue, LinuxContainerConfig, LinuxContainerResources,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext,
    ListImagesRequest, Mount, NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata,
    PortMapping, Protocol, PullImageRequest, RemoveImageRequest,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tonic::transport::Channel;

use ferrolet_proto::containerd::Containerd;

use crate::containerd::{TestNamespace, containerd};
use crate::cri::{CriServer, LogLine, RuntimeApi, parse_cri_log, poll};
use crate::leak::LeakChecker;
use crate::network::{PLUGIN_DIR, TestNetwork};
use crate::registry::OPEN_REGISTRY;
use crate::scratch::Scratch;

/// Kubernetes namespace every test pod claims.
pub const POD_NAMESPACE: &str = "ferrolet-it";

/// Generous limit for anything a loaded 2-core machine should finish (start, stop, exit).
pub const LONG: Duration = Duration::from_secs(60);

/// One test's node: ferrolet-cri on its own containerd namespace, scratch dir and network.
pub struct CriNode {
    // First field: dropped first, so a panicking test's pods are torn down while ferrolet-cri
    // and the network still exist.
    cleanup: PanicCleanup,
    /// The running ferrolet-cri (killed before its dirs and network go).
    pub cri: CriServer,
    /// The containerd namespace.
    pub ns: TestNamespace,
    /// The pod network (bridge + host-local + portmap unless the test chose otherwise).
    pub net: TestNetwork,
    /// ferrolet-cri's dir: config, socket, log, `root/`, `state/`, `pods/` (pod log dirs).
    pub scratch: Scratch,
    created: Arc<Mutex<Vec<String>>>,
}

/// Makes a node's conflist plugins (and any fake plugins they need) for its network.
pub type PluginsFn = Box<dyn FnOnce(&TestNetwork) -> Vec<Value>>;

/// What a test asks of its node.
#[derive(Default)]
pub struct NodeOptions {
    /// The conflist's plugins, given the network; `None`: bridge + portmap. An empty list
    /// writes no conflist at all (an empty conf dir).
    pub plugins: Option<PluginsFn>,
    /// Extra TOML lines for ferrolet-cri's config.
    pub extra_config: String,
}

/// An image pulled into the node through the ImageService.
#[derive(Clone, Debug)]
pub struct PulledImage {
    /// The tag reference it was pulled by (`127.0.0.1:5000/ferrolet/busybox:1`).
    pub reference: String,
    /// The image id (config digest), as PullImage returned it.
    pub id: String,
    /// Its first repo digest (`127.0.0.1:5000/ferrolet/busybox@sha256:…`).
    pub repo_digest: String,
}

impl CriNode {
    /// A node whose pod network is a bridge + portmap chain.
    pub async fn start(name: &str) -> Self {
        Self::start_with(name, NodeOptions::default()).await
    }

    /// A node with `opts`.
    pub async fn start_with(name: &str, opts: NodeOptions) -> Self {
        let net = TestNetwork::new(name);
        let plugins = match opts.plugins {
            Some(f) => f(&net),
            None => vec![net.bridge_plugin(), net.portmap_plugin()],
        };
        if !plugins.is_empty() {
            net.write_conflist(plugins);
        }
        let scratch = Scratch::new(&format!("cri-{name}"));
        let ns = containerd().namespace(name).await;
        let config = node_config(&scratch, &ns, &net, &opts.extra_config);
        let cri = CriServer::start(scratch.path(), &config);
        CriNode {
            cleanup: PanicCleanup {
                endpoint: cri.endpoint(),
            },
            scratch,
            ns,
            net,
            cri,
            created: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Records ids of sandboxes and containers another CRI client made (the kubelet), so
    /// [`CriNode::pod_leaks`] looks for their leftovers too.
    pub fn track_ids(&self, ids: impl IntoIterator<Item = String>) {
        remember_ids(&self.created, ids);
    }

    /// Waits until containerd holds `n` container records in the node's namespace (a
    /// sandbox's is made beside its CNI ADD); returns their ids.
    pub async fn wait_containerd_records(&self, n: usize) -> Vec<String> {
        let client = self.ns.client.clone();
        poll("the containerd records", LONG, || {
            let client = client.clone();
            async move {
                let listed = client
                    .containers()
                    .list(CdListContainers::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner()
                    .containers;
                if listed.len() == n {
                    Ok(listed.into_iter().map(|c| c.id).collect())
                } else {
                    Err(format!("{} records", listed.len()))
                }
            }
        })
        .await
    }

    /// ferrolet-cri's persistent state dir.
    pub fn root(&self) -> PathBuf {
        self.scratch.path().join("root")
    }

    /// ferrolet-cri's runtime state dir (FIFOs, shm).
    pub fn state(&self) -> PathBuf {
        self.scratch.path().join("state")
    }

    /// A RuntimeService client that records what it creates for the leak checks.
    pub async fn api(&self) -> RuntimeApi {
        self.cri.runtime_api(self.created.clone()).await
    }

    /// [`CriNode::api`], saying why it could not connect (ferrolet-cri is down) instead of
    /// panicking.
    pub async fn try_api(&self) -> Result<RuntimeApi, String> {
        let channel = ferrolet_proto::transport::connect(&self.cri.endpoint())
            .await
            .map_err(|e| format!("connecting to ferrolet-cri: {e}"))?;
        Ok(RuntimeApi::new(
            ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient::new(channel),
            self.created.clone(),
        ))
    }

    /// An ImageService client.
    pub async fn images(&self) -> ImageServiceClient<Channel> {
        self.cri.images().await
    }

    /// Pulls test image `name` (`busybox`, `httpd`, …) from the environment's open registry.
    ///
    /// # Panics
    /// If the pull or the status call fails.
    pub async fn pull(&self, name: &str) -> PulledImage {
        pull_test_image(self.images().await, name).await
    }

    /// Imports the OCI layout `dir` as `name` with `ferrolet-cri image import` and waits until
    /// the running server lists it; returns the image id.
    pub async fn import(&self, dir: &Path, name: &str) -> String {
        let binary = crate::workspace_binary("ferrolet-cri");
        let config = self.scratch.path().join("ferrolet-cri.toml");
        let out = Command::new(binary)
            .arg("--config")
            .arg(&config)
            .args(["image", "import"])
            .arg(dir)
            .args(["--name", name])
            .output()
            .unwrap_or_else(|e| panic!("running ferrolet-cri image import: {e}"));
        assert!(
            out.status.success(),
            "image import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let images = self.images().await;
        poll(&format!("{name} to be listed"), LONG, || {
            let mut images = images.clone();
            async move {
                images
                    .image_status(ImageStatusRequest {
                        image: Some(image_spec(name)),
                        verbose: false,
                    })
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner()
                    .image
                    .map(|i| i.id)
                    .ok_or_else(|| "not yet".to_string())
            }
        })
        .await
    }

    /// A pod config named `name`, with a fresh uid and its own (created) log directory.
    pub fn pod(&self, name: &str) -> PodBuilder {
        let uid = format!("{}-{name}-uid", self.ns.name);
        let log_dir = self.scratch.path().join("pods").join(&uid);
        if let Err(e) = std::fs::create_dir_all(&log_dir) {
            panic!("creating {}: {e}", log_dir.display());
        }
        PodBuilder::new(name, &uid, &log_dir)
    }

    /// A host port no other test uses while this one runs (`k` < 5).
    pub fn host_port(&self, k: u16) -> u16 {
        self.net.host_port(k)
    }

    /// A number unique to this test among all running tests (`k` < 100), for commands the
    /// test must find on the host (`sleep <marker>`).
    pub fn marker(&self, k: u32) -> u32 {
        assert!(k < 100, "marker({k}): only 100 per test");
        100_000 + u32::from(self.net.octet) * 100 + k
    }

    /// Everything a removed pod could have left behind, while ferrolet-cri still runs: the
    /// network's netns/veth/IP/cache, containerd containers, tasks, rootfs snapshots and
    /// leases (image snapshots stay until the images go), shims, mounts, FIFOs, portmap
    /// rules, cgroups and processes of the pods, and files named after them.
    pub async fn pod_leaks(&self) -> Vec<String> {
        let ids = self.created.lock().map(|i| i.clone()).unwrap_or_default();
        let mut leaks: Vec<String> = self
            .net
            .leak_checker()
            .check()
            .await
            .iter()
            .map(ToString::to_string)
            .collect();
        let task_mounts = containerd()
            .state()
            .join("io.containerd.runtime.v2.task")
            .join(&self.ns.name);
        leaks.extend(
            LeakChecker::new()
                .mounts_under(task_mounts)
                .mounts_under(self.scratch.path())
                .processes_mentioning(format!("-namespace {} ", self.ns.name))
                .shims_of(containerd().socket(), &self.ns.name)
                .shim_sockets(containerd().socket(), &self.ns.name, ids.clone())
                .check()
                .await
                .iter()
                .map(ToString::to_string),
        );
        leaks.extend(containerd_runtime_leaks(&self.ns.client).await);
        leaks.extend(
            fifos_under(self.scratch.path())
                .into_iter()
                .map(|p| format!("FIFO {}", p.display())),
        );
        for dir in [self.root(), self.state()] {
            leaks.extend(
                paths_naming(&dir, &ids)
                    .into_iter()
                    .map(|p| format!("file of a removed object: {}", p.display())),
            );
        }
        for id in &ids {
            leaks.extend(
                TestNetwork::iptables_lines(id)
                    .into_iter()
                    .map(|l| format!("iptables rule of {id}: {l}")),
            );
        }
        leaks.extend(cgroup_leaks(&ids));
        leaks
    }

    /// Panics with the list if [`CriNode::pod_leaks`] still finds anything after a short
    /// grace (a shim exits just after the call that deleted its last task returns).
    pub async fn assert_no_pod_leaks(&self) {
        let leaks = settled_leaks(|| self.pod_leaks()).await;
        assert!(
            leaks.is_empty(),
            "{} leak(s):\n  - {}\nferrolet-cri log tail:\n{}",
            leaks.len(),
            leaks.join("\n  - "),
            log_tail(&self.cri.log_text(), 40)
        );
    }

    /// Stops and removes every pod through CRI, checks nothing of them is left, removes the
    /// images, stops ferrolet-cri, deletes the pinned pause image, and checks the namespace
    /// is empty.
    pub async fn teardown(self) {
        let api = self.api().await;
        for pod in api
            .list_pods(None)
            .await
            .unwrap_or_else(|e| panic!("ListPodSandbox: {e}"))
        {
            api.stop_pod(&pod.id)
                .await
                .unwrap_or_else(|e| panic!("StopPodSandbox {}: {e}", pod.id));
            api.remove_pod(&pod.id)
                .await
                .unwrap_or_else(|e| panic!("RemovePodSandbox {}: {e}", pod.id));
        }
        let left = api
            .list_containers(None)
            .await
            .unwrap_or_else(|e| panic!("ListContainers: {e}"));
        assert!(
            left.is_empty(),
            "containers outlived RemovePodSandbox: {left:?}"
        );
        self.assert_no_pod_leaks().await;

        let mut images = self.images().await;
        let listed = images
            .list_images(ListImagesRequest::default())
            .await
            .unwrap_or_else(|e| panic!("ListImages: {e}"))
            .into_inner()
            .images;
        for image in listed.iter().filter(|i| !i.pinned) {
            images
                .remove_image(RemoveImageRequest {
                    image: Some(image_spec(&image.id)),
                })
                .await
                .unwrap_or_else(|e| panic!("RemoveImage {}: {e}", image.id));
        }
        let CriNode {
            cleanup,
            scratch,
            ns,
            net,
            cri,
            created: _,
        } = self;
        drop(cleanup);
        cri.terminate();
        let records = ns
            .client
            .images()
            .list(CdListImages::default())
            .await
            .unwrap_or_else(|e| panic!("listing containerd images: {e}"))
            .into_inner()
            .images;
        for record in records {
            ns.client
                .images()
                .delete(DeleteImageRequest {
                    name: record.name,
                    sync: true,
                    target: None,
                })
                .await
                .unwrap_or_else(|e| panic!("deleting an image record: {e}"));
        }
        assert_clean_soon(&ns.leak_checker().containerd_images()).await;
        assert_clean_soon(&net.leak_checker()).await;
        ns.delete()
            .await
            .unwrap_or_else(|e| panic!("deleting the namespace: {e}"));
        drop(net);
        drop(scratch);
    }
}

/// How long leftovers that go away by themselves (an exiting shim) may take to go.
const SETTLE: Duration = Duration::from_secs(15);

/// What `check` still finds after up to [`SETTLE`] for transient leftovers (an exiting
/// shim) to go.
pub(crate) async fn settled_leaks<F, Fut>(mut check: F) -> Vec<String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    let deadline = Instant::now() + SETTLE;
    let mut leaks = check().await;
    while !leaks.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        leaks = check().await;
    }
    leaks
}

/// Adds `ids` not yet in `known` (the ids a node's leak checks look for).
pub(crate) fn remember_ids(known: &Mutex<Vec<String>>, ids: impl IntoIterator<Item = String>) {
    if let Ok(mut known) = known.lock() {
        for id in ids {
            if !known.contains(&id) {
                known.push(id);
            }
        }
    }
}

/// [`LeakChecker::assert_clean`], after up to [`SETTLE`] for transient leftovers to go.
async fn assert_clean_soon(checker: &LeakChecker) {
    let deadline = Instant::now() + SETTLE;
    while !checker.check().await.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    checker.assert_clean().await;
}

/// ferrolet-cri's config: every path inside the test's dirs.
fn node_config(scratch: &Scratch, ns: &TestNamespace, net: &TestNetwork, extra: &str) -> String {
    let q = |p: &Path| toml_string(&p.display().to_string());
    let dir = scratch.path();
    format!(
        "containerd = {containerd}\n\
         namespace = {ns}\n\
         root = {root}\n\
         state = {state}\n\
         netns_dir = {netns}\n\
         cni_conf_dir = {conf}\n\
         cni_bin_dirs = [{fake}, {plugins}]\n\
         cni_cache_dir = {cache}\n\
         log_level = \"info\"\n\
         {extra}\n",
        containerd = q(containerd().socket()),
        ns = toml_string(&ns.name),
        root = q(&dir.join("root")),
        state = q(&dir.join("state")),
        netns = q(&net.netns_dir),
        conf = q(&net.conf_dir),
        fake = q(&net.fake_bin_dir),
        plugins = toml_string(PLUGIN_DIR),
        cache = q(&net.cache_dir),
    )
}

/// A TOML basic string (JSON's escapes are valid TOML).
fn toml_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// On a panicking test, stops and removes the node's pods through CRI so no veth, portmap
/// rule or container outlives the test binary.
pub(crate) struct PanicCleanup {
    endpoint: String,
}

impl PanicCleanup {
    /// Cleans up through the CRI server at `endpoint`.
    pub(crate) fn new(endpoint: String) -> Self {
        Self { endpoint }
    }
}

impl Drop for PanicCleanup {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let endpoint = self.endpoint.clone();
        // The test's runtime is unwinding; a thread with its own runtime can still talk gRPC.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let _ = tokio::time::timeout(LONG, remove_all_pods(&endpoint)).await;
            });
        })
        .join();
    }
}

async fn remove_all_pods(endpoint: &str) {
    let Ok(channel) = ferrolet_proto::transport::connect(endpoint).await else {
        return;
    };
    let api = RuntimeApi::new(
        ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient::new(channel),
        Arc::default(),
    );
    // A server that just restarted may refuse calls until its start-up is done.
    loop {
        match api.list_pods(None).await {
            Ok(pods) => {
                for pod in pods {
                    let _ = api.stop_pod(&pod.id).await;
                    let _ = api.remove_pod(&pod.id).await;
                }
                return;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// An image spec naming `image`.
pub fn image_spec(image: &str) -> ImageSpec {
    ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

/// Builds a [`PodSandboxConfig`].
#[derive(Clone, Debug)]
pub struct PodBuilder {
    config: PodSandboxConfig,
}

impl PodBuilder {
    /// Pod `name` in [`POD_NAMESPACE`] with `uid`, attempt 0, hostname `name`, logs in
    /// `log_dir`, pod-scoped namespaces.
    pub fn new(name: &str, uid: &str, log_dir: &Path) -> Self {
        Self {
            config: PodSandboxConfig {
                metadata: Some(PodSandboxMetadata {
                    name: name.to_string(),
                    uid: uid.to_string(),
                    namespace: POD_NAMESPACE.to_string(),
                    attempt: 0,
                }),
                hostname: name.to_string(),
                log_directory: log_dir.display().to_string(),
                linux: Some(LinuxPodSandboxConfig {
                    security_context: Some(LinuxSandboxSecurityContext {
                        // The kubelet's default: network and IPC shared by the pod, PID
                        // per container (no shareProcessNamespace).
                        namespace_options: Some(NamespaceOption {
                            network: NamespaceMode::Pod as i32,
                            pid: NamespaceMode::Container as i32,
                            ipc: NamespaceMode::Pod as i32,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        }
    }

    fn metadata(&mut self) -> &mut PodSandboxMetadata {
        self.config.metadata.get_or_insert_with(Default::default)
    }

    /// Sets the attempt.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.metadata().attempt = attempt;
        self
    }

    /// Sets the uid.
    pub fn uid(mut self, uid: &str) -> Self {
        self.metadata().uid = uid.to_string();
        self
    }

    /// Sets the hostname.
    pub fn hostname(mut self, hostname: &str) -> Self {
        self.config.hostname = hostname.to_string();
        self
    }

    /// Adds a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.config.labels.insert(key.into(), value.into());
        self
    }

    /// Adds an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.config.annotations.insert(key.into(), value.into());
        self
    }

    /// Maps TCP `host_port` on every host address to `container_port`.
    pub fn port(mut self, container_port: u16, host_port: u16) -> Self {
        self.config.port_mappings.push(PortMapping {
            protocol: Protocol::Tcp as i32,
            container_port: i32::from(container_port),
            host_port: i32::from(host_port),
            host_ip: String::new(),
        });
        self
    }

    /// Sets the DNS config.
    pub fn dns(mut self, servers: &[&str], searches: &[&str], options: &[&str]) -> Self {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        self.config.dns_config = Some(DnsConfig {
            servers: strings(servers),
            searches: strings(searches),
            options: strings(options),
        });
        self
    }

    /// Sets the pod's cgroup parent (cgroupfs path), as the kubelet always does.
    pub fn cgroup_parent(mut self, parent: &str) -> Self {
        self.config
            .linux
            .get_or_insert_with(Default::default)
            .cgroup_parent = parent.to_string();
        self
    }

    /// Sets the pod's PID namespace mode (the builder's default: one per container).
    pub fn pid_namespace(mut self, mode: NamespaceMode) -> Self {
        let linux = self.config.linux.get_or_insert_with(Default::default);
        let sc = linux.security_context.get_or_insert_with(Default::default);
        sc.namespace_options
            .get_or_insert_with(Default::default)
            .pid = mode as i32;
        self
    }

    /// Adds a sysctl.
    pub fn sysctl(mut self, key: &str, value: &str) -> Self {
        let linux = self.config.linux.get_or_insert_with(Default::default);
        linux.sysctls.insert(key.into(), value.into());
        self
    }

    /// The config.
    pub fn build(self) -> PodSandboxConfig {
        self.config
    }
}

/// A pod-level cgroup the test owns as the kubelet would: removed (in every v1 hierarchy,
/// deepest first) on drop, once the runtime has removed what it put inside; with the systemd
/// driver a slice, stopped on drop.
pub struct PodCgroup {
    /// The path the runtime is given, e.g. `/ferrolet-it/pod-1234`, or with the systemd
    /// driver `/ferrolet_it.slice/ferrolet_it-pod_1234.slice`.
    pub path: String,
}

impl PodCgroup {
    /// A cgroup path unique to this test: `/ferrolet-it/<tag>-<pid>` as the driver lays it
    /// out ([`crate::cgroups::node_path`]).
    pub fn new(tag: &str) -> Self {
        Self {
            path: crate::cgroups::node_path(&format!("/ferrolet-it/{tag}-{}", std::process::id())),
        }
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        crate::cgroups::stop_slice(&self.path);
        for h in crate::cgroups::hierarchies() {
            let leaf = h.join(self.path.trim_start_matches('/'));
            // The leaf, then its parent (shared by every test; only removed when empty).
            for dir in [leaf.as_path(), leaf.parent().unwrap_or(&leaf)] {
                if dir.is_dir()
                    && let Err(e) = std::fs::remove_dir(dir)
                    && e.raw_os_error() != Some(libc::EBUSY)
                    && e.raw_os_error() != Some(libc::ENOTEMPTY)
                {
                    eprintln!("removing cgroup {}: {e}", dir.display());
                }
            }
        }
    }
}

/// Builds a [`ContainerConfig`].
#[derive(Clone, Debug)]
pub struct ContainerBuilder {
    config: ContainerConfig,
}

impl ContainerBuilder {
    /// Container `name` (attempt 0) of `image`, logging to `<pod log dir>/<name>.log`.
    pub fn new(name: &str, image: &str) -> Self {
        Self {
            config: ContainerConfig {
                metadata: Some(ContainerMetadata {
                    name: name.to_string(),
                    attempt: 0,
                }),
                image: Some(image_spec(image)),
                log_path: format!("{name}.log"),
                linux: Some(LinuxContainerConfig {
                    resources: Some(LinuxContainerResources::default()),
                    security_context: Some(LinuxContainerSecurityContext::default()),
                }),
                ..Default::default()
            },
        }
    }

    fn security(&mut self) -> &mut LinuxContainerSecurityContext {
        self.config
            .linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
    }

    fn resources(&mut self) -> &mut LinuxContainerResources {
        self.config
            .linux
            .get_or_insert_with(Default::default)
            .resources
            .get_or_insert_with(Default::default)
    }

    /// Sets the command (Kubernetes' `command`: replaces ENTRYPOINT).
    pub fn command(mut self, command: &[&str]) -> Self {
        self.config.command = command.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Sets the args (Kubernetes' `args`: replaces CMD).
    pub fn args(mut self, args: &[&str]) -> Self {
        self.config.args = args.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Runs `script` with `sh -c`.
    pub fn shell(self, script: &str) -> Self {
        self.command(&["sh", "-c", script])
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.config.envs.push(KeyValue {
            key: key.into(),
            value: value.into(),
        });
        self
    }

    /// Sets the working dir.
    pub fn working_dir(mut self, dir: &str) -> Self {
        self.config.working_dir = dir.to_string();
        self
    }

    /// Mounts image `image` (an image volume) read-only at `container`, as the kubelet asks.
    pub fn image_mount(mut self, image: &str, container: &str) -> Self {
        self.config.mounts.push(Mount {
            container_path: container.to_string(),
            image: Some(image_spec(image)),
            readonly: true,
            ..Default::default()
        });
        self
    }

    /// Bind-mounts `host` at `container`.
    pub fn mount(mut self, host: &Path, container: &str, readonly: bool) -> Self {
        self.config.mounts.push(Mount {
            host_path: host.display().to_string(),
            container_path: container.to_string(),
            readonly,
            ..Default::default()
        });
        self
    }

    /// Adds a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.config.labels.insert(key.into(), value.into());
        self
    }

    /// Adds an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.config.annotations.insert(key.into(), value.into());
        self
    }

    /// Asks for the CDI device `name` (`vendor.com/class=name`) in CRI's `cdi_devices`.
    pub fn cdi_device(mut self, name: &str) -> Self {
        self.config.cdi_devices.push(CdiDevice {
            name: name.to_string(),
        });
        self
    }

    /// Sets the log path (relative to the pod's log directory; empty: no log).
    pub fn log_path(mut self, path: &str) -> Self {
        self.config.log_path = path.to_string();
        self
    }

    /// Sets the attempt.
    pub fn attempt(mut self, attempt: u32) -> Self {
        if let Some(m) = self.config.metadata.as_mut() {
            m.attempt = attempt;
        }
        self
    }

    /// Runs as `uid`.
    pub fn run_as_user(mut self, uid: i64) -> Self {
        self.security().run_as_user = Some(Int64Value { value: uid });
        self
    }

    /// Runs as the image's user `name`.
    pub fn run_as_username(mut self, name: &str) -> Self {
        self.security().run_as_username = name.to_string();
        self
    }

    /// Runs with primary group `gid`.
    pub fn run_as_group(mut self, gid: i64) -> Self {
        self.security().run_as_group = Some(Int64Value { value: gid });
        self
    }

    /// Adds supplemental groups.
    pub fn supplemental_groups(mut self, gids: &[i64]) -> Self {
        self.security().supplemental_groups = gids.to_vec();
        self
    }

    /// Limits memory to `bytes`.
    pub fn memory_limit(mut self, bytes: i64) -> Self {
        self.resources().memory_limit_in_bytes = bytes;
        self
    }

    /// Removes the image spec (a malformed config).
    pub fn without_image(mut self) -> Self {
        self.config.image = None;
        self
    }

    /// Removes the metadata (a malformed config).
    pub fn without_metadata(mut self) -> Self {
        self.config.metadata = None;
        self
    }

    /// The config.
    pub fn build(self) -> ContainerConfig {
        self.config
    }
}

/// The full log path of a container built with `log_path` in `pod`.
pub fn log_file(pod: &PodSandboxConfig, log_path: &str) -> PathBuf {
    Path::new(&pod.log_directory).join(log_path)
}

/// Reads and parses a CRI log file; a missing file has no lines.
///
/// # Panics
/// If a line is malformed.
pub fn read_log(path: &Path) -> Vec<LogLine> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("reading {}: {e}", path.display()),
    };
    parse_cri_log(&String::from_utf8_lossy(&bytes))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Waits until `path` holds a full line on `stream` equal to `text`; returns all lines.
pub async fn wait_log_line(path: &Path, stream: &str, text: &str) -> Vec<LogLine> {
    poll(
        &format!("{text:?} on {stream} in {}", path.display()),
        LONG,
        || async {
            let lines = read_log(path);
            if lines
                .iter()
                .any(|l| l.stream == stream && !l.partial && l.message == text)
            {
                Ok(lines)
            } else {
                Err(format!("{} lines", lines.len()))
            }
        },
    )
    .await
}

/// GETs `/` from `addr` over HTTP/1.0, retrying until `limit`; the body of a 200 answer.
pub async fn http_get(addr: SocketAddr, limit: Duration) -> Result<String, String> {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + limit;
        let mut last = String::from("never tried");
        while Instant::now() < deadline {
            match get_once(addr) {
                Ok(body) => return Ok(body),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!("GET http://{addr}/: {last}"))
    })
    .await
    .map_err(|e| e.to_string())?
}

fn get_once(addr: SocketAddr) -> Result<String, String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no header end in {answer:?}"))?;
    if !head.lines().next().is_some_and(|l| l.contains(" 200")) {
        return Err(format!("answer {head:?}"));
    }
    Ok(body.to_string())
}

/// Waits (up to [`LONG`]) until a process whose command line is exactly `cmdline` runs.
pub async fn wait_for_process(cmdline: &str) {
    crate::cri::poll("the process running", LONG, || async {
        if pids_with_cmdline(cmdline).is_empty() {
            Err(format!("no process {cmdline:?} yet"))
        } else {
            Ok(())
        }
    })
    .await;
}

/// Pids of host processes whose command line (arguments joined by spaces) is exactly `cmdline`.
pub fn pids_with_cmdline(cmdline: &str) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let text = String::from_utf8_lossy(&raw).replace('\0', " ");
            text.trim_end() == cmdline
        })
        .collect()
}

/// Writes a copy of the busybox test image without ENTRYPOINT and CMD as an OCI layout under
/// `dir` and returns the layout's path.
pub fn image_without_command(dir: &Path) -> PathBuf {
    let built = crate::testimages::build("busybox", dir, Path::new("/bin/busybox"))
        .unwrap_or_else(|e| panic!("building busybox: {e}"));
    let blobs = built.dir.join("blobs").join("sha256");
    let read_json = |digest: &str| -> Value {
        let hex = digest.trim_start_matches("sha256:");
        let bytes = std::fs::read(blobs.join(hex)).unwrap_or_else(|e| panic!("blob {digest}: {e}"));
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("blob {digest}: {e}"))
    };
    let write_blob = |value: &Value| -> (String, usize) {
        let bytes = value.to_string().into_bytes();
        let hex = hex::encode(Sha256::digest(&bytes));
        std::fs::write(blobs.join(&hex), &bytes).unwrap_or_else(|e| panic!("writing blob: {e}"));
        (format!("sha256:{hex}"), bytes.len())
    };
    let mut config = read_json(&built.config_digest);
    if let Some(run) = config.get_mut("config").and_then(Value::as_object_mut) {
        run.remove("Cmd");
        run.remove("Entrypoint");
    }
    let (config_digest, config_size) = write_blob(&config);
    let mut manifest = read_json(&built.manifest_digest);
    manifest["config"]["digest"] = Value::from(config_digest);
    manifest["config"]["size"] = Value::from(config_size);
    let (manifest_digest, manifest_size) = write_blob(&manifest);
    let index_path = built.dir.join("index.json");
    let mut index: Value = serde_json::from_slice(
        &std::fs::read(&index_path).unwrap_or_else(|e| panic!("reading index.json: {e}")),
    )
    .unwrap_or_else(|e| panic!("index.json: {e}"));
    index["manifests"][0]["digest"] = Value::from(manifest_digest);
    index["manifests"][0]["size"] = Value::from(manifest_size);
    std::fs::write(&index_path, index.to_string())
        .unwrap_or_else(|e| panic!("writing index.json: {e}"));
    built.dir
}

/// containerd objects a pod leaves: containers, tasks, non-committed snapshots, leases (also
/// what a failed call must not add to a running node's).
pub async fn containerd_runtime_leaks(client: &Containerd) -> Vec<String> {
    let mut leaks = Vec::new();
    match client.containers().list(CdListContainers::default()).await {
        Ok(r) => leaks.extend(
            r.into_inner()
                .containers
                .into_iter()
                .map(|c| format!("containerd container {}", c.id)),
        ),
        Err(e) => leaks.push(format!("could not list containers: {e}")),
    }
    match client.tasks().list(ListTasksRequest::default()).await {
        Ok(r) => leaks.extend(
            r.into_inner()
                .tasks
                .into_iter()
                .map(|t| format!("containerd task {} (pid {})", t.id, t.pid)),
        ),
        Err(e) => leaks.push(format!("could not list tasks: {e}")),
    }
    match client.leases().list(ListLeases::default()).await {
        Ok(r) => leaks.extend(
            r.into_inner()
                .leases
                .into_iter()
                .map(|l| format!("containerd lease {}", l.id)),
        ),
        Err(e) => leaks.push(format!("could not list leases: {e}")),
    }
    match crate::containerd::list_snapshots(client).await {
        Ok(s) => leaks.extend(
            s.into_iter()
                .filter(|i| i.kind != Kind::Committed as i32)
                .map(|i| format!("containerd snapshot {} (not committed)", i.name)),
        ),
        Err(e) => leaks.push(format!("could not list snapshots: {e}")),
    }
    leaks
}

/// Every FIFO under `dir`.
pub fn fifos_under(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    walk(dir, 12)
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_fifo()))
        .collect()
}

/// Every path under `dir` whose file name contains one of `ids`.
pub fn paths_naming(dir: &Path, ids: &[String]) -> Vec<PathBuf> {
    walk(dir, 12)
        .into_iter()
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            ids.iter()
                .any(|id| !id.is_empty() && name.contains(id.as_str()))
        })
        .collect()
}

/// Every path under `dir` (not following symlinks), at most `depth` levels down.
fn walk(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0)];
    while let Some((d, level)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in rd.flatten() {
            let path = entry.path();
            if level < depth && entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((path.clone(), level + 1));
            }
            out.push(path);
        }
    }
    out
}

/// cgroups named after `ids`, and processes in cgroups named after them.
pub(crate) fn cgroup_leaks(ids: &[String]) -> Vec<String> {
    let mut leaks = Vec::new();
    if ids.is_empty() {
        return leaks;
    }
    for root in crate::cgroups::hierarchies() {
        leaks.extend(
            walk(&root, 6)
                .into_iter()
                .filter(|p| p.is_dir())
                .filter(|p| {
                    let name = p
                        .file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default();
                    ids.iter().any(|id| name.contains(id.as_str()))
                })
                .map(|p| format!("cgroup {}", p.display())),
        );
    }
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return leaks;
    };
    for pid in rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
    {
        if let Some(cg) = crate::cgroups::of_process(pid, "memory")
            && ids.iter().any(|id| cg.contains(id.as_str()))
        {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            leaks.push(format!(
                "process {pid} ({}) in cgroup {cg}",
                String::from_utf8_lossy(&raw).replace('\0', " ").trim_end()
            ));
        }
    }
    leaks
}

/// The last `n` lines of `text`.
pub fn log_tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// Labels as a map, for filters.
pub fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Pulls test image `name` (`busybox`, `httpd`, …) from the environment's open registry
/// through `images` (ferrolet-cri's or containerd's ImageService).
///
/// # Panics
/// If the pull or the status call fails.
pub(crate) async fn pull_test_image(
    mut images: ImageServiceClient<Channel>,
    name: &str,
) -> PulledImage {
    let reference = format!("{OPEN_REGISTRY}/ferrolet/{name}:1");
    let id = images
        .pull_image(PullImageRequest {
            image: Some(image_spec(&reference)),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("pulling {reference}: {e}"))
        .into_inner()
        .image_ref;
    let image = images
        .image_status(ImageStatusRequest {
            image: Some(image_spec(&reference)),
            verbose: false,
        })
        .await
        .unwrap_or_else(|e| panic!("ImageStatus {reference}: {e}"))
        .into_inner()
        .image
        .unwrap_or_else(|| panic!("{reference} pulled but has no status"));
    PulledImage {
        reference,
        id,
        repo_digest: image.repo_digests.first().cloned().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_fill_what_the_kubelet_fills() {
        let pod = PodBuilder::new("p", "u", Path::new("/logs"))
            .port(8080, 30100)
            .label("a", "b")
            .attempt(2)
            .build();
        let meta = pod.metadata.clone().unwrap_or_default();
        assert_eq!(
            (
                meta.name.as_str(),
                meta.namespace.as_str(),
                meta.uid.as_str(),
                meta.attempt
            ),
            ("p", POD_NAMESPACE, "u", 2)
        );
        assert_eq!(pod.log_directory, "/logs");
        assert_eq!(pod.port_mappings[0].host_port, 30100);
        let ns = pod
            .linux
            .and_then(|l| l.security_context)
            .and_then(|s| s.namespace_options)
            .unwrap_or_default();
        assert_eq!((ns.network, ns.pid, ns.ipc), (0, 1, 0));

        let c = ContainerBuilder::new("c", "img")
            .shell("true")
            .run_as_user(5)
            .memory_limit(1 << 20)
            .build();
        assert_eq!(c.command, ["sh", "-c", "true"]);
        assert_eq!(c.log_path, "c.log");
        let linux = c.linux.unwrap_or_default();
        assert_eq!(
            linux
                .security_context
                .and_then(|s| s.run_as_user)
                .map(|u| u.value),
            Some(5)
        );
        assert_eq!(
            linux.resources.map(|r| r.memory_limit_in_bytes),
            Some(1 << 20)
        );
        assert_eq!(
            log_file(&pod_with_dir("/l"), "c.log"),
            Path::new("/l/c.log")
        );
    }

    fn pod_with_dir(dir: &str) -> PodSandboxConfig {
        PodBuilder::new("p", "u", Path::new(dir)).build()
    }

    #[test]
    fn names_of_removed_objects_are_found_under_a_dir() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let sub = dir.path().join("containers").join("abc123");
        std::fs::create_dir_all(&sub).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("other"), "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(paths_naming(dir.path(), &["abc123".into()]), [sub]);
        assert!(paths_naming(dir.path(), &["zzz".into()]).is_empty());
        assert!(fifos_under(dir.path()).is_empty());
        nix::unistd::mkfifo(&dir.path().join("f"), nix::sys::stat::Mode::S_IRWXU)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fifos_under(dir.path()), [dir.path().join("f")]);
    }
}
