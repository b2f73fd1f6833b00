//! containerd's own CRI plugin as a test node, the reference runtime: [`ContainerdCriNode`]
//! runs a private containerd with its CRI plugin on (own root, state, socket and netns mounts
//! under one scratch dir; never the machine's service), its CNI config the test's own
//! network, its registries the environment's loopback ones, and its sandbox image
//! ferrolet-cri's built-in pause image, so no pull leaves the machine.
//!
//! Kubelet tests run ferrolet on it to show the kubelet works against the runtime users run;
//! teardown checks that containerd's CRI, driven by ferrolet, left nothing behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::cri::ImageStatusRequest;
use ferrolet_proto::cri::image_service_client::ImageServiceClient;

use crate::containerd::kill_processes_mentioning;
use crate::cri::{CriServer, RuntimeApi};
use crate::leak;
use crate::network::{PLUGIN_DIR, TestNetwork};
use crate::pods::{
    LONG, PanicCleanup, PodBuilder, PulledImage, cgroup_leaks, containerd_runtime_leaks,
    fifos_under, image_spec, log_tail, pull_test_image, remember_ids, settled_leaks,
};
use crate::registry::{AUTH_REGISTRY, OPEN_REGISTRY};
use crate::scratch::Scratch;

/// The containerd namespace containerd's CRI plugin keeps its pods and images in.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// One test's node on containerd's CRI plugin.
pub struct ContainerdCriNode {
    // First field: dropped first, so a panicking test's pods are removed through CRI while
    // containerd and the network still exist.
    cleanup: PanicCleanup,
    daemon: Daemon,
    /// The pod network (bridge + portmap).
    pub net: TestNetwork,
    /// containerd's dir: `config.toml`, `containerd.log`, `root/`, `state/`, `hosts/`.
    pub scratch: Scratch,
    created: Arc<Mutex<Vec<String>>>,
}

impl ContainerdCriNode {
    /// Starts containerd with its CRI plugin on a fresh bridge + portmap network, gives it
    /// the pause image, and returns once its CRI answers.
    pub async fn start(name: &str) -> Self {
        Self::start_with_cdi(name, &[]).await
    }

    /// [`ContainerdCriNode::start`] with CDI on and its spec files read from `cdi_spec_dirs`
    /// (lowest priority first) instead of the node's `/etc/cdi` and `/var/run/cdi`; none given:
    /// containerd's defaults. containerd 1.7+ reads the keys (on by default from 2.0);
    /// containerd 1.6 has no CDI and ignores them.
    pub async fn start_with_cdi(name: &str, cdi_spec_dirs: &[PathBuf]) -> Self {
        let net = TestNetwork::new(&format!("cd-{name}"));
        net.write_conflist(vec![net.bridge_plugin(), net.portmap_plugin()]);
        let scratch = Scratch::new(&format!("containerd-cri-{name}"));
        let dir = scratch.path().to_path_buf();
        let mut config = config_toml(&dir, &net);
        if !cdi_spec_dirs.is_empty() {
            config = with_cdi(&config, cdi_spec_dirs);
        }
        let config_path = dir.join("config.toml");
        std::fs::write(&config_path, config)
            .unwrap_or_else(|e| panic!("writing {}: {e}", config_path.display()));
        write_hosts(&dir.join("hosts"));
        let daemon = Daemon::spawn(&dir, &config_path);
        import_pause_image(&dir, daemon.socket());
        let node = ContainerdCriNode {
            cleanup: PanicCleanup::new(daemon.endpoint()),
            daemon,
            net,
            scratch,
            created: Arc::new(Mutex::new(Vec::new())),
        };
        node.wait_cri_ready().await;
        node
    }

    /// Its CRI endpoint.
    pub fn endpoint(&self) -> String {
        self.daemon.endpoint()
    }

    /// A RuntimeService client that records the ids it sees for the leak checks.
    pub async fn api(&self) -> RuntimeApi {
        let channel = ferrolet_proto::transport::connect(&self.endpoint())
            .await
            .unwrap_or_else(|e| panic!("connecting to containerd's CRI: {e}"));
        RuntimeApi::new(
            ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient::new(channel),
            self.created.clone(),
        )
    }

    /// An ImageService client.
    pub async fn images(&self) -> ImageServiceClient<tonic::transport::Channel> {
        let channel = ferrolet_proto::transport::connect(&self.endpoint())
            .await
            .unwrap_or_else(|e| panic!("connecting to containerd's CRI: {e}"));
        ImageServiceClient::new(channel)
    }

    /// Pulls test image `name` from the environment's open registry, as [`crate::pods::CriNode::pull`].
    pub async fn pull(&self, name: &str) -> PulledImage {
        pull_test_image(self.images().await, name).await
    }

    /// A pod named `name` (its uid unique to this test process, its log dir made).
    pub fn pod(&self, name: &str) -> PodBuilder {
        let uid = format!("{name}-{}-uid", std::process::id());
        let log_dir = self.scratch.path().join("pods").join(&uid);
        if let Err(e) = std::fs::create_dir_all(&log_dir) {
            panic!("creating {}: {e}", log_dir.display());
        }
        PodBuilder::new(name, &uid, &log_dir)
    }

    /// A client of its containerd, in the CRI plugin's namespace.
    pub async fn containerd(&self) -> Containerd {
        self.daemon.client().await
    }

    /// Records ids another client (the kubelet) made, for the leak checks.
    pub fn track_ids(&self, ids: impl IntoIterator<Item = String>) {
        remember_ids(&self.created, ids);
    }

    /// A host port no other test uses while this one runs (`k` < 5).
    pub fn host_port(&self, k: u16) -> u16 {
        self.net.host_port(k)
    }

    /// containerd's pid (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.daemon
            .child
            .as_ref()
            .map(Child::id)
            .unwrap_or_default()
    }

    /// Where containerd's CRI mounts pod network namespaces
    /// (`netns_mounts_under_state_dir`).
    pub fn netns_dir(&self) -> PathBuf {
        self.state().join("io.containerd.grpc.v1.cri").join("netns")
    }

    fn state(&self) -> PathBuf {
        self.scratch.path().join("state")
    }

    /// Waits until the CRI reports ready and lists the pause image: its image store follows
    /// containerd's image events, so it learns of the import a moment after it happened.
    async fn wait_cri_ready(&self) {
        let deadline = Instant::now() + LONG;
        let mut last = String::new();
        while Instant::now() < deadline {
            let api = self.api().await;
            match api.conditions().await {
                Ok(conditions) if conditions.iter().all(|c| c.status) => {
                    match self.pause_image_listed().await {
                        Ok(true) => return,
                        Ok(false) => last = "the pause image is not listed yet".into(),
                        Err(e) => last = e,
                    }
                }
                Ok(conditions) => last = format!("{conditions:?}"),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "containerd's CRI not ready within {LONG:?} (last: {last}); log:\n{}",
            self.daemon.log_tail()
        );
    }

    async fn pause_image_listed(&self) -> Result<bool, String> {
        let channel = ferrolet_proto::transport::connect(&self.endpoint())
            .await
            .map_err(|e| e.to_string())?;
        let status = ImageServiceClient::new(channel)
            .image_status(ImageStatusRequest {
                image: Some(image_spec(ferrolet_cri::config::BUILTIN_PAUSE_IMAGE)),
                verbose: false,
            })
            .await
            .map_err(|e| format!("ImageStatus: {e}"))?;
        Ok(status.into_inner().image.is_some())
    }

    /// Everything a removed pod could leave behind, while containerd still runs: the
    /// network's netns/veths/IPs, containerd's CNI result cache, containers, tasks, active
    /// snapshots, leases, shims, mounts, FIFOs, portmap rules and cgroups.
    pub async fn pod_leaks(&self) -> Vec<String> {
        let ids = self.created.lock().map(|i| i.clone()).unwrap_or_default();
        let mut leaks: Vec<String> = self
            .net
            .leak_checker()
            .netns_dir(self.netns_dir())
            .mounts_under(self.state())
            .processes_mentioning(format!("-address {}", self.daemon.socket().display()))
            .check()
            .await
            .iter()
            .map(ToString::to_string)
            .collect();
        leaks.extend(containerd_runtime_leaks(&self.daemon.client().await).await);
        leaks.extend(
            fifos_under(self.scratch.path())
                .into_iter()
                .map(|p| format!("FIFO {}", p.display())),
        );
        leaks.extend(cni_results_naming(&ids));
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

    /// Removes any pod left (there should be none: the kubelet removed them), checks that
    /// nothing of the pods is left, stops containerd and removes its dirs and network.
    pub async fn teardown(self) {
        let api = self.api().await;
        let pods = api
            .list_pods(None)
            .await
            .unwrap_or_else(|e| panic!("ListPodSandbox: {e}"));
        for pod in &pods {
            let _ = api.stop_pod(&pod.id).await;
            let _ = api.remove_pod(&pod.id).await;
        }
        assert!(pods.is_empty(), "pods outlived the kubelet: {pods:?}");
        let leaks = settled_leaks(|| self.pod_leaks()).await;
        assert!(
            leaks.is_empty(),
            "{} leak(s):\n  - {}\ncontainerd log tail:\n{}",
            leaks.len(),
            leaks.join("\n  - "),
            self.daemon.log_tail()
        );
        let ContainerdCriNode {
            cleanup,
            mut daemon,
            net,
            scratch,
            created: _,
        } = self;
        drop(cleanup);
        daemon.stop();
        net.leak_checker().assert_clean().await;
        drop(net);
        drop(scratch);
    }
}

/// The containerd process, stopped (with its shims) on drop.
struct Daemon {
    child: Option<Child>,
    dir: PathBuf,
}

impl Daemon {
    fn spawn(dir: &Path, config: &Path) -> Self {
        let log = std::fs::File::create(dir.join("containerd.log"))
            .unwrap_or_else(|e| panic!("creating containerd.log: {e}"));
        let err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("duplicating the log fd: {e}"));
        let child = crate::containerd::containerd_command(Command::new(
            crate::containerd::containerd_binary(),
        ))
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning containerd (run `make env`): {e}"));
        leak::register_daemon(child.id());
        let mut daemon = Daemon {
            child: Some(child),
            dir: dir.to_path_buf(),
        };
        daemon.wait_socket(LONG);
        daemon
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    async fn client(&self) -> Containerd {
        Containerd::connect(&self.socket().to_string_lossy(), CRI_NAMESPACE)
            .await
            .unwrap_or_else(|e| panic!("connecting to containerd: {e}"))
    }

    fn log_tail(&self) -> String {
        log_tail(
            &std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default(),
            40,
        )
    }

    fn wait_socket(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(self.socket()).is_ok() {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("containerd exited with {status}:\n{}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "containerd did not listen within {limit:?}:\n{}",
            self.log_tail()
        );
    }

    /// SIGTERM (SIGKILL after 10 s), then its shims: they outlive containerd by design, and
    /// any still running belong to pods the checks have already reported.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(raw) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(raw),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_processes_mentioning(&format!("-address {}", self.socket().display()));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// containerd's config: the project's reference template (`scripts/containerd-cri.toml.in`,
/// which `make bench-cri` runs too) with every path inside `dir` and the test's network.
fn config_toml(dir: &Path, net: &TestNetwork) -> String {
    let path = |sub: &str| dir.join(sub).display().to_string();
    include_str!("../../scripts/containerd-cri.toml.in")
        .replace("@ROOT@", &path("root"))
        .replace("@STATE@", &path("state"))
        .replace("@SOCKET@", &path("containerd.sock"))
        .replace("@OPT@", &path("opt"))
        .replace("@HOSTS@", &path("hosts"))
        .replace("@SANDBOX_IMAGE@", ferrolet_cri::config::BUILTIN_PAUSE_IMAGE)
        .replace("@CNI_CONF_DIR@", &net.conf_dir.display().to_string())
        .replace("@CNI_BIN_DIR@", PLUGIN_DIR)
        .replace(
            "@SYSTEMD_CGROUP@",
            &crate::cgroups::systemd_driver().to_string(),
        )
}

/// `config` with CDI on and reading `dirs`: the two keys of containerd's CRI plugin section
/// (where 1.7 reads them; 2.x's migration of a version 2 config moves them to its runtime
/// plugin).
fn with_cdi(config: &str, dirs: &[PathBuf]) -> String {
    const SECTION: &str = "[plugins.\"io.containerd.grpc.v1.cri\"]\n";
    assert!(
        config.contains(SECTION),
        "the CRI plugin's section is missing from the template"
    );
    let list = dirs
        .iter()
        .map(|d| serde_json::Value::String(d.display().to_string()).to_string())
        .collect::<Vec<_>>()
        .join(", ");
    config.replacen(
        SECTION,
        &format!("{SECTION}  enable_cdi = true\n  cdi_spec_dirs = [{list}]\n"),
        1,
    )
}

/// One `hosts.toml` per loopback registry: plain HTTP, as containerd's CRI reads them.
fn write_hosts(dir: &Path) {
    for registry in [OPEN_REGISTRY, AUTH_REGISTRY] {
        let sub = dir.join(registry);
        std::fs::create_dir_all(&sub).unwrap_or_else(|e| panic!("creating {}: {e}", sub.display()));
        let text = format!(
            "server = \"http://{registry}\"\n\n[host.\"http://{registry}\"]\n  \
             capabilities = [\"pull\", \"resolve\"]\n"
        );
        std::fs::write(sub.join("hosts.toml"), text)
            .unwrap_or_else(|e| panic!("writing hosts.toml for {registry}: {e}"));
    }
}

/// Puts ferrolet-cri's built-in pause image into containerd's CRI namespace by running
/// ferrolet-cri against it once (it imports the image, unpacked and labelled, at start-up),
/// with every dir of that one-off run of its own.
fn import_pause_image(dir: &Path, socket: PathBuf) {
    let import = dir.join("pause-import");
    std::fs::create_dir_all(&import)
        .unwrap_or_else(|e| panic!("creating {}: {e}", import.display()));
    let q = |p: PathBuf| serde_json::Value::String(p.display().to_string()).to_string();
    let config = format!(
        "containerd = {socket}\nnamespace = \"{CRI_NAMESPACE}\"\nroot = {root}\n\
         state = {state}\nnetns_dir = {netns}\ncni_cache_dir = {cache}\nlog_level = \"warn\"\n",
        socket = q(socket),
        root = q(import.join("root")),
        state = q(import.join("state")),
        netns = q(import.join("netns")),
        cache = q(import.join("cni-cache")),
    );
    let cri = CriServer::start(&import, &config);
    // Its exit status does not matter: whether containerd's CRI then lists the image does
    // (ContainerdCriNode::wait_cri_ready).
    if !cri.terminate() {
        eprintln!(
            "the pause-image import run of ferrolet-cri did not exit 0:\n{}",
            log_tail(&cri.log_text(), 20)
        );
    }
}

/// Results containerd's CNI library cached for the pods (`/var/lib/cni/results`, which
/// containerd 1.6 does not let us move; `<network>-<sandbox id>-eth0` and
/// `cni-loopback-<sandbox id>-lo`): each must go with its pod's teardown.
fn cni_results_naming(ids: &[String]) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir("/var/lib/cni/results") else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| ids.iter().any(|id| n.contains(id.as_str())))
        })
        .map(|e| format!("CNI result cache {}", e.path().display()))
        .collect()
}
