//! The chaos soak: one ferrolet node joined to the in-memory API server, on ferrolet-cri, on a
//! containerd of its own, running a churn of static and API pods (init containers, probes,
//! emptyDir, secret and configMap volumes, every restart policy, a crash loop) with exec and
//! port-forward sessions in flight, while faults land at seeded random moments: kill -9 of
//! ferrolet, ferrolet-cri, containerd, a shim, the bridge plugin mid-ADD/DEL; ferrolet-cri
//! stopped past the kubelet's timeouts; the API server and the registry gone for a while;
//! ferrolet's root filesystem full. Each daemon is started again after its fault, as a
//! supervisor would.
//!
//! Invariants are checked while it runs ([`invariants`]) and at the end: every desired pod
//! converges after the last fault, and once every pod is deleted nothing is left — no netns,
//! veth, IP reservation, mount, cgroup, containerd object, shim or FIFO, and the daemons'
//! descriptors back at their idle level. The same seed draws the same pods, gaps and faults.
//!
//! `ferrolet-soak` (and `make soak`) runs it at length; `tests/soak.rs` runs a short one in CI.

pub mod faults;
pub mod invariants;
pub mod report;
pub mod sessions;
pub mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ferrolet_proto::streaming::client::Transport;
use serde_json::{Value, json};

use self::faults::{ALL, Fault, FaultKind};
use self::invariants::{Memory, Violation};
use self::report::{Sample, SoakReport};
use self::workload::{Images, PodBook, PodRecord, Source, TEMPLATES};
use crate::cluster::{ClusterNode, ClusterOptions, Prepared};
use crate::containerd::containerd;
use crate::kubelet::KubeletOptions;
use crate::network::{PLUGIN_DIR, TestNetwork};
use crate::pods::NodeOptions;
use crate::registry::{IMAGES_DIR, TestRegistry};
use crate::scratch::Scratch;

/// How a soak runs.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// Pod lifecycles (made, deleted, gone) to run.
    pub cycles: usize,
    /// The seed every random choice is drawn from.
    pub seed: u64,
    /// Faults to inject, spread over the run; `None`: one per 9 lifecycles.
    pub faults: Option<usize>,
    /// The kinds to draw from (each in turn, in a seeded order).
    pub kinds: Vec<FaultKind>,
    /// Desired pods at once.
    pub max_pods: usize,
    /// How long after the last fault every desired pod must have converged.
    pub convergence: Duration,
    /// Name of the node and its dirs.
    pub name: String,
    /// Print progress and faults as they happen.
    pub verbose: bool,
    /// Set (by a signal) to end the churn early; the end's checks and teardown still run.
    pub cancel: Option<Arc<AtomicBool>>,
}

impl Default for SoakOptions {
    fn default() -> Self {
        Self {
            cycles: 1000,
            seed: 1,
            faults: None,
            kinds: ALL.to_vec(),
            max_pods: 8,
            convergence: Duration::from_secs(180),
            name: "soak".into(),
            verbose: true,
            cancel: None,
        }
    }
}

/// A pod is deleted no sooner than this after it was made, and no later than [`MAX_AGE`]
/// (it may never get where it should while faults land); in between, once it got there.
const MIN_AGE: Duration = Duration::from_secs(3);
/// See [`MIN_AGE`].
const MAX_AGE: Duration = Duration::from_secs(40);
/// How long the end waits for the last pods to go, and then for the sweepers and
/// descriptors to settle.
const DRAIN: Duration = Duration::from_secs(180);
/// The pause between two faults, milliseconds.
const FAULT_GAP: (u64, u64) = (1_000, 8_000);
/// Descriptors a daemon may hold above its idle level at the end (a client connection or
/// two that it keeps pooled).
const FD_SLACK: u64 = 4;

/// Where faults stand.
#[derive(Default)]
struct FaultState {
    /// Injected and healed, in order.
    done: Vec<Fault>,
    /// One is under way.
    active: bool,
    /// When the last one healed.
    healed: Option<Instant>,
}

/// The running soak, shared by its tasks.
pub struct Soak {
    cluster: ClusterNode,
    registry: Mutex<TestRegistry>,
    /// Where the chaos bridge plugin looks for its markers.
    chaos_dir: PathBuf,
    rng: Mutex<fastrand::Rng>,
    started: Instant,
    book: Mutex<PodBook>,
    violations: Mutex<Vec<Violation>>,
    faults: Mutex<FaultState>,
    images: Images,
    identity: Option<sessions::Identity>,
    sessions: Mutex<BTreeMap<&'static str, (usize, usize)>>,
    /// A few failures of each kind of session, for the report.
    session_errors: Mutex<BTreeMap<&'static str, Vec<String>>>,
    stopping: AtomicBool,
    verbose: bool,
    _scratch: Scratch,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Soak {
    fn rng(&self) -> MutexGuard<'_, fastrand::Rng> {
        lock(&self.rng)
    }

    fn book(&self) -> MutexGuard<'_, PodBook> {
        lock(&self.book)
    }

    fn registry_lock(&self) -> MutexGuard<'_, TestRegistry> {
        lock(&self.registry)
    }

    fn log(&self, line: &str) {
        if self.verbose {
            println!("[{:7.1}s] {line}", self.started.elapsed().as_secs_f64());
        }
    }

    fn fault_active(&self) -> bool {
        lock(&self.faults).active
    }

    /// Since when no fault has been under way (the start, before the first).
    fn quiet_since(&self) -> Instant {
        let f = lock(&self.faults);
        if f.active {
            return Instant::now();
        }
        f.healed.unwrap_or(self.started)
    }

    /// Notes that `pod` (a status) has come to its template's state.
    fn mark_reached(&self, pod: &Value) {
        let name = pod["metadata"]["name"].as_str().unwrap_or("");
        let mut book = self.book();
        if let Some(p) = book.pods.get_mut(name)
            && p.reached.is_none()
            && workload::satisfied(p.template.expect, pod)
        {
            p.reached = Some(Instant::now());
        }
    }

    fn mark_gone(&self, name: &str) {
        if let Some(p) = self.book().pods.get_mut(name) {
            p.gone.get_or_insert_with(Instant::now);
        }
    }

    /// Makes one pod of a random template from a random source.
    async fn create_pod(&self) {
        let (n, template, source) = {
            let mut rng = self.rng();
            let template = TEMPLATES[rng.usize(..TEMPLATES.len())];
            let source = if template.api_only || rng.bool() {
                Source::Api
            } else {
                Source::Static
            };
            (self.book().next_number(), template, source)
        };
        let (object, name) = match source {
            Source::Static => {
                let object = format!("s{n}-{}", template.name);
                let name = self.cluster.node.pod_name(&object);
                (object, name)
            }
            Source::Api => {
                let object = format!("a{n}-{}", template.name);
                (object.clone(), object)
            }
        };
        let mut pod = workload::pod(&template, &object, &self.images);
        let made = match source {
            Source::Static => {
                self.cluster
                    .node
                    .write_manifest(&format!("{object}.yaml"), &pod.to_string());
                Ok(())
            }
            Source::Api => {
                pod["spec"]["nodeName"] = json!(self.cluster.node_name);
                self.cluster
                    .api
                    .create("pods", workload::NAMESPACE, pod)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        };
        match made {
            Ok(()) => {
                self.book().pods.insert(
                    name.clone(),
                    PodRecord {
                        name,
                        object,
                        source,
                        template,
                        created: Instant::now(),
                        reached: None,
                        deleted: None,
                        gone: None,
                    },
                );
            }
            Err(e) => self.log(&format!("creating pod {object}: {e}")),
        }
    }

    /// Deletes a pod as its owner would: its manifest removed, or its API object deleted.
    async fn delete_pod(&self, pod: &PodRecord) {
        let result = match pod.source {
            Source::Static => {
                self.cluster
                    .node
                    .remove_manifest(&format!("{}.yaml", pod.object));
                Ok(())
            }
            Source::Api => self
                .cluster
                .api
                .delete("pods", workload::NAMESPACE, &pod.object)
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
        };
        match result {
            Ok(()) => {
                if let Some(p) = self.book().pods.get_mut(&pod.name) {
                    p.deleted = Some(Instant::now());
                }
            }
            Err(e) => self.log(&format!("deleting pod {}: {e}", pod.object)),
        }
    }

    /// Opens an exec or port-forward session on a live pod, in the background.
    fn start_session(self: &Arc<Self>) {
        let Some(identity) = self.identity.clone() else {
            return;
        };
        let live = self.book().live();
        let candidates: Vec<&PodRecord> = live
            .iter()
            .filter(|p| matches!(p.template.name, "web" | "webapi" | "sleeper"))
            // Ready: its server listens, its shell can run.
            .filter(|p| p.reached.is_some())
            .collect();
        if candidates.is_empty() {
            return;
        }
        let (pod, kind, transport, marker) = {
            let mut rng = self.rng();
            let pod = candidates[rng.usize(..candidates.len())].clone();
            let forward = pod.template.name != "sleeper" && rng.bool();
            let transport = if rng.bool() {
                Transport::Spdy
            } else {
                Transport::WebSocket
            };
            (pod, forward, transport, rng.u64(..))
        };
        let soak = self.clone();
        tokio::spawn(async move {
            let cert = std::fs::read(soak.cluster.node.root_dir().join("pki/kubelet.crt"))
                .unwrap_or_default();
            let addr = soak.cluster.node.secure_addr();
            let (name, result) = if kind {
                (
                    "port-forward",
                    sessions::port_forward(addr, &cert, &identity, &pod.name).await,
                )
            } else {
                let container = if pod.template.name == "sleeper" {
                    "main"
                } else {
                    "web"
                };
                let name = match transport {
                    Transport::Spdy => "exec (SPDY)",
                    Transport::WebSocket => "exec (WebSocket)",
                };
                let r = sessions::exec(
                    addr,
                    &cert,
                    &identity,
                    &pod.name,
                    container,
                    transport,
                    marker,
                    sessions::LIMIT,
                )
                .await;
                (name, r)
            };
            {
                let mut s = lock(&soak.sessions);
                let entry = s.entry(name).or_default();
                entry.0 += 1;
                if result.is_ok() {
                    entry.1 += 1;
                }
            }
            if let Err(e) = result {
                let mut errors = lock(&soak.session_errors);
                let seen = errors.entry(name).or_default();
                if seen.len() < 5 {
                    seen.push(format!(
                        "{} {}: {e}",
                        pod.name,
                        soak.started.elapsed().as_secs()
                    ));
                }
            }
        });
    }

    /// The kinds of faults in turn: each round a seeded shuffle of every kind.
    fn next_kind(&self, deck: &mut Vec<FaultKind>, kinds: &[FaultKind]) -> FaultKind {
        if deck.is_empty() {
            *deck = kinds.to_vec();
            self.rng().shuffle(deck);
        }
        deck.pop().unwrap_or(FaultKind::KillKubelet)
    }

    /// Injects one fault of the next kind. One that finds nothing to hit (no shim runs, no
    /// CNI call comes) is tried again every 2 s for a minute, then left for the next turn.
    async fn fault(&self, deck: &mut Vec<FaultKind>, kinds: &[FaultKind]) {
        let kind = self.next_kind(deck, kinds);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            lock(&self.faults).active = true;
            self.log(&format!("fault: {}", kind.name()));
            let injected = self.inject(kind).await;
            {
                let mut f = lock(&self.faults);
                f.active = false;
                f.healed = Some(Instant::now());
                if let Some(fault) = injected {
                    self.log(&format!(
                        "fault: {} healed after {:.1} s ({})",
                        kind.name(),
                        fault.lasted.as_secs_f64(),
                        fault.detail
                    ));
                    f.done.push(fault);
                    return;
                }
            }
            if Instant::now() >= deadline || self.stopping.load(Ordering::Relaxed) {
                self.log(&format!(
                    "fault: {} found nothing to hit; next turn",
                    kind.name()
                ));
                deck.insert(0, kind);
                return;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// Samples the daemons' memory and descriptors.
    fn sample(&self, samples: &mut BTreeMap<&'static str, Vec<Sample>>) {
        let at = self.started.elapsed().as_secs_f64();
        for (daemon, pid) in [
            ("ferrolet", self.cluster.node.kubelet_pid()),
            ("ferrolet-cri", self.cluster.node.node.cri.pid()),
            ("containerd", containerd().pid()),
        ] {
            if pid == 0 {
                continue;
            }
            let Some(rss_kib) = rss_kib(pid) else {
                continue;
            };
            let fds = crate::streaming::fd_count(pid) as u64;
            samples
                .entry(daemon)
                .or_default()
                .push(Sample { at, rss_kib, fds });
        }
    }

    /// The pods whose status says they have not come to their desired state yet.
    async fn unconverged(&self) -> Vec<(String, String)> {
        let node_pods = self.cluster.node.try_pods().await.unwrap_or(Value::Null);
        let mut left = Vec::new();
        let live = self.book().live();
        for pod in live {
            let status = match pod.source {
                Source::Static => node_pods["items"]
                    .as_array()
                    .and_then(|items| {
                        items
                            .iter()
                            .find(|p| p["metadata"]["name"] == pod.name.as_str())
                            .cloned()
                    })
                    .unwrap_or(Value::Null),
                Source::Api => self
                    .cluster
                    .api
                    .get("pods", workload::NAMESPACE, &pod.object)
                    .await
                    .unwrap_or(Value::Null),
            };
            if !workload::satisfied(pod.template.expect, &status) {
                let phase = status["status"]["phase"].as_str().unwrap_or("(none)");
                left.push((
                    pod.name.clone(),
                    format!(
                        "expected {:?}, phase {phase}, containers {}",
                        pod.template.expect, status["status"]["containerStatuses"]
                    ),
                ));
            }
        }
        left
    }

    /// What is left of the pods, and descriptors above the idle level.
    async fn leaks(&self, idle_fds: &BTreeMap<&'static str, u64>) -> Vec<String> {
        let mut leaks = self.cluster.node.node.pod_leaks().await;
        leaks.extend(self.cluster.node.kubelet_leaks().await);
        for (daemon, pid) in [
            ("ferrolet", self.cluster.node.kubelet_pid()),
            ("ferrolet-cri", self.cluster.node.node.cri.pid()),
        ] {
            let fds = crate::streaming::fd_count(pid) as u64;
            let idle = idle_fds.get(daemon).copied().unwrap_or(0);
            if fds > idle + FD_SLACK {
                leaks.push(format!(
                    "{daemon} holds {fds} descriptors, {idle} when idle at the start: {:?}",
                    crate::streaming::fd_list(pid)
                ));
            }
        }
        leaks
    }
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The kubelet configuration of the soak's node: CRI calls time out after 10 s (the
/// SIGSTOP fault lasts longer), and no eviction for the root filesystem the disk-full fault
/// fills (a real node would evict pods there; the soak checks that nothing is lost or leaked
/// when writes fail, not eviction).
const KUBELET_CONFIG: &str = "runtimeRequestTimeout: 10s\n\
     evictionHard: {\"memory.available\": \"100Mi\", \"nodefs.available\": \"0%\", \"nodefs.inodesFree\": \"0%\", \"imagefs.available\": \"256Mi\"}\n";

/// Sets the node up: a registry with the images, the API server with the objects the pods
/// mount, ferrolet on ferrolet-cri on this process's containerd.
async fn start(opts: &SoakOptions) -> Soak {
    let scratch = Scratch::new(&format!("soak-{}", opts.name));
    let registry = TestRegistry::start(scratch.path());
    for name in ["busybox", "httpd"] {
        registry.push(
            &std::path::Path::new(IMAGES_DIR).join(name),
            &format!("ferrolet/{name}"),
        );
    }
    let images = Images {
        busybox: format!("{}/ferrolet/busybox:1", registry.addr),
        httpd: format!("{}/ferrolet/httpd:1", registry.addr),
    };
    let plugins: crate::pods::PluginsFn = Box::new(|net: &TestNetwork| {
        net.fake_plugin(
            "chaos-bridge",
            &faults::chaos_bridge_plugin(&std::path::Path::new(PLUGIN_DIR).join("bridge")),
        );
        let mut bridge = net.bridge_plugin();
        bridge["type"] = json!("chaos-bridge");
        vec![bridge, net.portmap_plugin()]
    });
    let prepared = Prepared::new(
        &opts.name,
        ClusterOptions {
            kubelet: KubeletOptions {
                cri: NodeOptions {
                    plugins: Some(plugins),
                    extra_config: "sweep_interval_secs = 20\n".into(),
                },
                root_size: Some(96 << 20),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    prepared.add_config(KUBELET_CONFIG);
    prepared.trust_cluster_clients("Webhook");
    prepared.api.set_sar_policy(|_| true);
    let identity = prepared
        .api
        .client_cert("kube-apiserver-kubelet-client", &["system:masters"])
        .ok()
        .and_then(|(cert, key)| sessions::Identity::from_pem(&cert, &key));
    for (kind, object) in [
        (
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": workload::SECRET, "namespace": workload::NAMESPACE},
                   "data": {"token": "c29haw=="}}),
        ),
        (
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": workload::CONFIG_MAP, "namespace": workload::NAMESPACE},
                   "data": {"mode": "soak"}}),
        ),
    ] {
        if let Err(e) = prepared.api.create(kind, workload::NAMESPACE, object).await {
            panic!("creating the soak's {kind}: {e}");
        }
    }
    let kubelet = prepared.start_kubelet().await;
    let cluster = prepared.into_node(kubelet);
    cluster.wait_node("registered", |_| true).await;
    let chaos_dir = cluster.node.node.net.fake_bin_dir.clone();
    Soak {
        cluster,
        registry: Mutex::new(registry),
        chaos_dir,
        rng: Mutex::new(fastrand::Rng::with_seed(opts.seed)),
        started: Instant::now(),
        book: Mutex::new(PodBook::default()),
        violations: Mutex::new(Vec::new()),
        faults: Mutex::new(FaultState::default()),
        images,
        identity,
        sessions: Mutex::new(BTreeMap::new()),
        session_errors: Mutex::new(BTreeMap::new()),
        stopping: AtomicBool::new(false),
        verbose: opts.verbose,
        _scratch: scratch,
    }
}

/// Runs a soak; returns the node (still up) and the report.
async fn run_soak(opts: SoakOptions) -> (Arc<Soak>, SoakReport) {
    let soak = Arc::new(start(&opts).await);
    let wall = Instant::now();
    let fault_count = opts.faults.unwrap_or(opts.cycles.div_ceil(9));
    soak.log(&format!(
        "soak: seed {}, {} lifecycles, {} faults of {:?}",
        opts.seed,
        opts.cycles,
        fault_count,
        opts.kinds.iter().map(|k| k.name()).collect::<Vec<_>>()
    ));

    // Idle levels before any pod.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_fds: BTreeMap<&'static str, u64> = [
        ("ferrolet", soak.cluster.node.kubelet_pid()),
        ("ferrolet-cri", soak.cluster.node.node.cri.pid()),
    ]
    .into_iter()
    .map(|(d, pid)| (d, crate::streaming::fd_count(pid) as u64))
    .collect();

    let observing = Arc::new(AtomicBool::new(true));
    let observer = {
        let (soak, on) = (soak.clone(), observing.clone());
        tokio::spawn(async move {
            let mut memory = Memory::default();
            let mut samples = BTreeMap::new();
            let mut tick = 0u64;
            while on.load(Ordering::Relaxed) {
                soak.observe(&mut memory).await;
                if tick.is_multiple_of(5) {
                    soak.sample(&mut samples);
                }
                tick += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            (memory, samples)
        })
    };
    // Faults one after another, a few seconds apart, while the churn goes on.
    let injector = {
        let (soak, kinds) = (soak.clone(), opts.kinds.clone());
        tokio::spawn(async move {
            let mut deck = Vec::new();
            while !kinds.is_empty()
                && lock(&soak.faults).done.len() < fault_count
                && !soak.stopping.load(Ordering::Relaxed)
            {
                let gap = soak.pick_ms(FAULT_GAP);
                tokio::time::sleep(gap).await;
                soak.fault(&mut deck, &kinds).await;
            }
        })
    };

    // The churn, until both the lifecycles and the faults asked for are done.
    let cancelled = || {
        opts.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    };
    let mut reported = 0;
    while (soak.book().deleted() < opts.cycles || !injector.is_finished()) && !cancelled() {
        let live = soak.book().live();
        if live.len() < opts.max_pods {
            soak.create_pod().await;
        } else if let Some(due) = live.iter().find(|p| {
            let age = p.created.elapsed();
            age >= MAX_AGE || (age >= MIN_AGE && p.reached.is_some())
        }) {
            soak.delete_pod(due).await;
        }
        if soak.rng().u8(..3) == 0 {
            soak.start_session();
        }
        let deleted = soak.book().deleted();
        if deleted >= reported + 25 {
            reported = deleted;
            let book = soak.book();
            soak.log(&format!(
                "{} deleted, {} gone, {} live, {} faults done",
                deleted,
                book.completed(),
                book.live().len(),
                lock(&soak.faults).done.len()
            ));
        }
        let gap = soak.rng().u64(150..=700);
        tokio::time::sleep(Duration::from_millis(gap)).await;
    }
    soak.stopping.store(true, Ordering::Relaxed);
    let _ = injector.await;
    soak.log("faults done; waiting for every desired pod to converge");

    // Convergence after the last fault.
    let quiet = soak.quiet_since();
    let convergence = loop {
        let left = soak.unconverged().await;
        if left.is_empty() {
            break Some(quiet.elapsed());
        }
        if quiet.elapsed() > opts.convergence {
            for (pod, why) in left {
                soak.violate("converges", &pod, why);
            }
            break None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };

    // Every pod goes; then nothing may be left.
    let live = soak.book().live();
    for pod in live {
        soak.delete_pod(&pod).await;
    }
    let drain = Instant::now();
    while !soak.book().going().is_empty() && drain.elapsed() < DRAIN {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    observing.store(false, Ordering::Relaxed);
    let (memory, samples) = observer.await.unwrap_or_default();
    let mut leaks: Vec<String> = soak
        .book()
        .going()
        .iter()
        .map(|p| {
            format!(
                "pod {} not removed {:.0} s after its deletion",
                p.name,
                drain.elapsed().as_secs_f64()
            )
        })
        .collect();
    let settle = Instant::now();
    let rest = loop {
        let found = soak.leaks(&idle_fds).await;
        if found.is_empty() || settle.elapsed() > DRAIN {
            break found;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    leaks.extend(rest);
    if !leaks.is_empty() {
        soak.violate("nothing-leaked", "node", format!("{} leaks", leaks.len()));
    }

    let mut check_runs = memory.runs.clone();
    check_runs.insert("converges", 1);
    check_runs.insert("nothing-leaked", 1);
    check_runs.insert("clean-shutdown", 1);
    let book = soak.book();
    let mut created = BTreeMap::new();
    for p in book.pods.values() {
        let source = match p.source {
            Source::Static => "static",
            Source::Api => "API",
        };
        *created.entry(source).or_insert(0) += 1;
    }
    let report = SoakReport {
        seed: opts.seed,
        wall: wall.elapsed(),
        created,
        lifecycles: book.completed(),
        sessions: lock(&soak.sessions).clone(),
        session_errors: lock(&soak.session_errors).clone(),
        faults: lock(&soak.faults).done.clone(),
        check_runs,
        violations: lock(&soak.violations).clone(),
        leaks,
        samples,
        convergence,
    };
    drop(book);
    (soak, report)
}

/// Runs a soak, prints its report (through `print`, before the node goes, so a failed
/// teardown cannot hide it), then tears the node down; a teardown that fails (a daemon that
/// does not stop on SIGTERM, something its own checks find) is added to the report as a
/// violation.
pub async fn run_and_report(opts: SoakOptions, print: impl Fn(&SoakReport)) -> SoakReport {
    let (soak, mut report) = run_soak(opts).await;
    print(&report);
    let clean = report.leaks.is_empty();
    let teardown = tokio::spawn(finish(soak, clean)).await;
    if let Err(e) = teardown {
        let why = match e.try_into_panic() {
            Ok(payload) => payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
            Err(e) => e.to_string(),
        };
        let first = why.lines().next().unwrap_or("").to_string();
        report.violations.push(Violation {
            check: "clean-shutdown",
            object: "node".into(),
            at: report.wall,
            evidence: why,
        });
        println!("teardown failed: {first}\n{}", report.summary());
    }
    report
}

/// Tears the node down: with its own leak checks when the soak found nothing left, else by
/// stopping everything (what is left was reported).
async fn finish(soak: Arc<Soak>, clean: bool) {
    // Sessions still running hold clones; they end within their limit.
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut soak = soak;
    let soak = loop {
        match Arc::try_unwrap(soak) {
            Ok(s) => break s,
            Err(again) if Instant::now() < deadline => {
                soak = again;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => return,
        }
    };
    if clean {
        soak.cluster.teardown().await;
    }
}
