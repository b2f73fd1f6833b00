//! `ferrolet-kubelet-bench`: the static-pod start-latency benchmark of `ferrolet` (issue #6,
//! "Performance"). Against a running `ferrolet` (standalone, its manifest dir and read-only port
//! given), for each N it writes N static pod manifests at once and measures per pod the time from
//! its manifest being written to the pod being `Running` in `/pods` (and to its container having
//! started, from the runtime's CRI `ContainerStatus`), then the total until all run; with the
//! largest N running it samples ferrolet's RSS and idle CPU; then it removes the manifests and
//! waits until the runtime (CRI `ListPodSandbox`) holds none of the pods. With `--containerd`
//! the pods' app containers are also timed to their task running, from containerd's own
//! `/tasks/start` events (the same clock for every runtime and kubelet on that containerd). `compare A.json B.json`
//! prints two runs side by side with the issue's goals.
//!
//! With the largest N running it also samples the node's runtime overhead (issue #39): the
//! kubelet, the CRI runtime (`--runtime-pid`, when it is not containerd itself), containerd
//! (`--containerd-pid`), the shims that containerd started for the namespace (`-address <its
//! socket>` on their command lines) and the pause processes under them; RSS at the end of the
//! idle window, the shims' CPU over it. `node OURS.json REFERENCE.json` puts two stacks' figures
//! side by side (ferrolet on ferrolet-cri against the Go kubelet on containerd's own CRI), or
//! says why the reference is absent.
//!
//! With `--probes network` (or `exec`) every pod carries three probes at a 1 s period (issue
//! #7, "Performance"): a web container with a tcpSocket liveness and an httpGet readiness probe
//! on its busybox httpd, and a sidecar with an httpGet readiness probe on its own (or, for
//! `exec`, three exec probes); the idle window then measures ferrolet's CPU with the probes
//! running, and the probe runs per second read from `prober_probe_total` in `/metrics`.
//!
//! A Ctrl-C (or SIGTERM) removes the manifests written and waits for the pods to go before
//! exiting 130; a second one exits at once.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};
use ferrolet_integration::bench::processes::{self, PAUSE_COMM, status_kib};
use ferrolet_integration::bench::{
    deadline, ensure_image, install_signal_thread, parse_stat_ticks, percentile,
};
use ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient;
use ferrolet_proto::cri::{
    ContainerStatusRequest, ListContainersRequest, ListPodSandboxRequest, PodSandboxState,
    VersionRequest,
};
use ferrolet_proto::transport;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tonic::transport::Channel;

use ferrolet_integration::prometheus;
use ferrolet_integration::task_events::TaskStarts;

/// Namespace of the benchmark's pods; how their sandboxes are found in the runtime.
const POD_NAMESPACE: &str = "ferrolet-bench";
/// Pod label carrying the run id (so `/pods` entries are matched to the manifests written).
const RUN_LABEL: &str = "ferrolet.bench/run";
/// Pod label carrying the pod's index within its round.
const INDEX_LABEL: &str = "ferrolet.bench/index";
/// Sandbox label the kubelet puts the pod namespace under (the Go kubelet's key).
const NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// Container label the kubelet puts the pod name under.
const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
/// Ends at once on SIGTERM: as PID 1 a plain `sleep` would ignore it and every pod removal would
/// wait for the whole grace period.
const COMMAND: &str = "trap 'exit 0' TERM; sleep 1000000 & wait";
/// Probes per pod in the probe modes.
const PROBES_PER_POD: u32 = 3;

/// Which probes the benchmark's pods carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ProbeMode {
    /// No probes: one sleeping container per pod.
    #[default]
    None,
    /// tcpSocket and httpGet probes against busybox httpd in the pod.
    Network,
    /// exec probes (`true`), each an ExecSync through the runtime.
    Exec,
}

#[derive(Parser, Debug)]
#[command(
    name = "ferrolet-kubelet-bench",
    about = "Static-pod start latency, RSS and idle CPU of a running ferrolet",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print two `--json` reports side by side, with the goals of issue #6.
    Compare {
        /// Report of the first run (e.g. on ferrolet-cri).
        a: PathBuf,
        /// Report of the second run (e.g. on containerd's CRI).
        b: PathBuf,
    },
    /// Put the node overhead of one stack beside a reference's (issue #39: ferrolet on
    /// ferrolet-cri against the Go kubelet on containerd's CRI, same pods, same run), with the
    /// goal (<= 0.2x the reference). Without a reference, `--absent` says why.
    Node {
        /// The report of the stack under test.
        ours: PathBuf,
        /// The reference's report.
        #[arg(required_unless_present = "absent")]
        reference: Option<PathBuf>,
        /// Why there is no reference (printed in its place, the goal then not measured).
        #[arg(long, conflicts_with = "reference")]
        absent: Option<String>,
    },
    /// Put a run beside the same pods started directly through CRI by `ferrolet-cri-bench`
    /// on the same runtime in the same run, with issue #20's goals.
    Direct {
        /// This benchmark's report (ferrolet on the runtime).
        kubelet: PathBuf,
        /// `ferrolet-cri-bench --json` reports: sequential ones (concurrency 1) give the CRI
        /// calls' p50s, concurrent ones each N's all-started time.
        #[arg(required = true)]
        cri: Vec<PathBuf>,
    },
}

/// What `direct` reads of a `ferrolet-cri-bench --json` report.
#[derive(Clone, Debug, Deserialize)]
struct CriReport {
    pods: u32,
    concurrency: u32,
    rpcs: Vec<CriRpc>,
    /// All pods' RunPodSandbox → StartContainer done, seconds.
    setup_s: f64,
}

/// One RPC's samples in a `ferrolet-cri-bench` report.
#[derive(Clone, Debug, Deserialize)]
struct CriRpc {
    rpc: String,
    samples_ms: Vec<f64>,
}

/// The CRI calls a pod start makes, whose p50s sum to the floor of a start.
const START_CALLS: [&str; 3] = ["RunPodSandbox", "CreateContainer", "StartContainer"];
/// Timeline phases that are the three CRI calls (and what comes after the task runs): the
/// rest of a start's phases up to its container starting is ferrolet's own time.
const RUNTIME_PHASES: [&str; 6] = [
    "sandbox_ready",
    "container_created",
    "container_started",
    "container_exited",
    "running_seen",
    "status_visible",
];

/// Flags of a benchmark run.
#[derive(Args, Debug, Clone)]
struct RunArgs {
    /// ferrolet's manifest directory (`--pod-manifest-path`); the benchmark writes into it.
    #[arg(long)]
    manifest_dir: Option<PathBuf>,
    /// ferrolet's read-only API, host:port.
    #[arg(long, default_value = "127.0.0.1:10255")]
    read_only: String,
    /// The CRI endpoint ferrolet drives (to pre-pull the image and to see pods go), unix:///path.
    #[arg(long, default_value = "unix:///run/ferrolet/cri.sock")]
    endpoint: String,
    /// ferrolet's pid (RSS and CPU are sampled from `/proc/<pid>`).
    #[arg(long)]
    pid: Option<u32>,
    /// Pod counts, one round each, in order.
    #[arg(short = 'n', long = "pods", value_delimiter = ',', default_values_t = [1u32, 30, 100])]
    pods: Vec<u32>,
    /// Container image (pulled through CRI first if missing; the pods use IfNotPresent).
    #[arg(long, default_value = "127.0.0.1:5000/ferrolet/busybox:1")]
    image: String,
    /// Interval between two `/pods` polls, milliseconds; at least 2 ms per pod of the round,
    /// so the polling does not load the kubelet it measures (a 100-pod list every 20 ms took
    /// ferrolet's CPU during a 100-pod start from 1.9 s to 3.1 s).
    #[arg(long, default_value_t = 20)]
    poll_ms: u64,
    /// Idle window over which ferrolet's CPU is measured with the largest N running, seconds.
    #[arg(long, default_value_t = 30)]
    idle_s: u64,
    /// Pause after the last pod is Running before the idle window, seconds.
    #[arg(long, default_value_t = 5)]
    settle_s: u64,
    /// Deadline for a round's pods to run, and for them to go, seconds.
    #[arg(long, default_value_t = 300)]
    round_timeout_s: u64,
    /// Name of this run in the table and the JSON.
    #[arg(long, default_value = "ferrolet")]
    label: String,
    /// Print the report as JSON on stdout (the table then goes to stderr).
    #[arg(long)]
    json: bool,
    /// Probes every pod carries (three per pod; the idle window then measures their cost).
    #[arg(long, value_enum, default_value_t = ProbeMode::None)]
    probes: ProbeMode,
    /// Period of those probes, seconds.
    #[arg(long, default_value_t = 1)]
    probe_period_s: u32,
    /// Containers per pod without probes (the first `sleep`, the others `sleep-1`, ...).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    containers: u32,
    /// The containerd under the CRI runtime (socket): the app containers' task starts are read
    /// from its `/tasks/start` events.
    #[arg(long)]
    containerd: Option<String>,
    /// The containerd namespace the runtime puts its containers in.
    #[arg(long, default_value = "k8s.io")]
    containerd_namespace: String,
    /// The CRI runtime's pid, when it is not containerd itself (ferrolet-cri): its RSS is part
    /// of the node overhead.
    #[arg(long)]
    runtime_pid: Option<u32>,
    /// containerd's pid: its RSS is part of the node overhead (the shims and pause processes
    /// are those it started, found by `--containerd`'s socket).
    #[arg(long)]
    containerd_pid: Option<u32>,
    /// A removed pod counts as gone once its sandbox is no longer ready, not only once the
    /// sandbox is removed (the Go kubelet removes stopped sandboxes only at its minutely GC).
    #[arg(long)]
    gone_when_stopped: bool,
    /// A random pause of up to this long before each round, milliseconds: rounds then start
    /// at random moments, not in step with the kubelet's periodic work (relists, housekeeping).
    #[arg(long, default_value_t = 0)]
    gap_ms: u64,
    /// An extended resource every container's limits ask for, `NAME=COUNT` (repeatable): the
    /// pods then get devices from a device plugin at admission (issue #37's benchmark).
    #[arg(long = "extended-resource", value_name = "NAME=COUNT", value_parser = resource_arg)]
    extended_resources: Vec<(String, u32)>,
}

/// Latency summary of one measure over a round's pods, milliseconds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Latency {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// One round: N manifests written, all Running, all removed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Round {
    pods: u32,
    /// Manifest written → pod `Running` in `/pods`.
    running: Latency,
    /// Manifest written → container started (the runtime's `ContainerStatus.started_at`).
    started: Option<Latency>,
    /// Manifest written → the app container's task running (containerd's `/tasks/start`).
    #[serde(default)]
    task_running: Option<Latency>,
    /// First manifest written → last pod `Running`, seconds.
    total_s: f64,
    /// Manifests removed → no sandbox of them left in the runtime, seconds.
    teardown_s: f64,
    /// Per-phase medians of the pods' start timelines (ferrolet's
    /// `/debug/pods/{ns}/{name}/timeline`; empty for a kubelet without them), in phase order;
    /// the first, `file_source`, is manifest written → the source's `config.seen`.
    #[serde(default)]
    phases: Vec<PhaseP50>,
}

/// The median over a round's pods of one timeline phase (the time from the mark before it).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct PhaseP50 {
    phase: String,
    p50_ms: f64,
}

/// ferrolet's footprint with the largest round's pods running.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Idle {
    pods: u32,
    /// VmRSS at the end of the idle window, MiB.
    rss_mib: f64,
    /// VmHWM (peak RSS since start), MiB.
    peak_rss_mib: f64,
    /// utime+stime over the window, percent of one core.
    cpu_pct: f64,
    window_s: f64,
    /// The probes the pods carried during the window, if any.
    #[serde(default)]
    probes: Option<ProbeLoad>,
    /// The whole runtime stack's footprint in the same window (with `--containerd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node: Option<NodeOverhead>,
}

/// The node's runtime overhead with the idle window's pods running: RSS at the end of the
/// window, MiB; the shims' CPU over it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
struct NodeOverhead {
    kubelet_mib: f64,
    /// The CRI runtime's (None when it is containerd's own plugin, or was not given).
    runtime_mib: Option<f64>,
    containerd_mib: Option<f64>,
    shims: usize,
    shims_mib: f64,
    /// The shims' programs (`containerd-shim-runc-v2`, `containerd-shim-ferrolet-v1`).
    shim_programs: Vec<String>,
    pause: usize,
    pause_mib: f64,
    /// The shims' CPU over the window, percent of one core.
    shims_cpu_pct: f64,
}

impl NodeOverhead {
    /// Everything summed, MiB.
    fn total_mib(&self) -> f64 {
        self.kubelet_mib
            + self.runtime_mib.unwrap_or_default()
            + self.containerd_mib.unwrap_or_default()
            + self.shims_mib
            + self.pause_mib
    }
}

/// The probe load during the idle window.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct ProbeLoad {
    mode: ProbeMode,
    per_pod: u32,
    period_s: u32,
    /// Probe runs per second over the window (`prober_probe_total`), when `/metrics` has it.
    runs_per_s: Option<f64>,
    /// Of those, failed runs per second.
    failed_per_s: Option<f64>,
}

/// Everything one run measured; `--json` prints it, `compare` reads it back.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Report {
    label: String,
    endpoint: String,
    runtime: String,
    rounds: Vec<Round>,
    idle: Option<Idle>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Compare { a, b }) => {
            let (a, b) = (read_report(&a)?, read_report(&b)?);
            print!("{}", render_compare(&a, &b));
            return Ok(());
        }
        Some(Command::Node {
            ours,
            reference,
            absent,
        }) => {
            let ours = read_report(&ours)?;
            let reference = match (reference, absent) {
                (Some(path), _) => Ok(read_report(&path)?),
                (None, why) => Err(why.unwrap_or_default()),
            };
            print!("{}", render_node(&ours, &reference));
            return Ok(());
        }
        Some(Command::Direct { kubelet, cri }) => {
            let kubelet = read_report(&kubelet)?;
            let cri = cri
                .iter()
                .map(|p| {
                    let text = std::fs::read_to_string(p)
                        .with_context(|| format!("reading {}", p.display()))?;
                    serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))
                })
                .collect::<Result<Vec<CriReport>>>()?;
            print!("{}", render_direct(&kubelet, &cri));
            return Ok(());
        }
        None => {}
    }
    let cancel = install_signal_thread("removing the manifests")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = rt.block_on(run(cli.run, cancel));
    if let Err(e) = &result
        && e.chain().any(|c| c.is::<Interrupted>())
    {
        eprintln!("interrupted: the manifests written have been removed");
        std::process::exit(130);
    }
    result
}

/// The run was interrupted by a signal.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
struct Interrupted;

fn read_report(path: &Path) -> Result<Report> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// State of one benchmark run.
struct Bench {
    args: RunArgs,
    manifest_dir: PathBuf,
    /// This run's id; each round's pods carry `<base_id>-<round>` (see `run_id`).
    base_id: String,
    /// The current round's id: pod names and the run label are unique per round, so a round
    /// never meets the UIDs (or the leftovers) of the one before.
    run_id: String,
    rt: RuntimeServiceClient<Channel>,
    cancel: Arc<AtomicBool>,
    rpc_timeout: Duration,
    task_starts: Option<TaskStarts>,
}

async fn run(args: RunArgs, cancel: Arc<AtomicBool>) -> Result<()> {
    let manifest_dir = args
        .manifest_dir
        .clone()
        .ok_or_else(|| anyhow!("--manifest-dir is required"))?;
    if args.pods.is_empty() || args.pods.contains(&0) {
        bail!("--pods needs counts of at least 1");
    }
    let channel = transport::connect(&args.endpoint)
        .await
        .with_context(|| format!("connecting to {}", args.endpoint))?;
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let rpc_timeout = Duration::from_secs(120);
    let version = deadline(
        rpc_timeout,
        "Version",
        rt.version(VersionRequest::default()),
    )
    .await?;
    let runtime = format!("{} {}", version.runtime_name, version.runtime_version);
    ensure_image(channel, &args.image, rpc_timeout).await?;
    let task_starts = match &args.containerd {
        Some(socket) => Some(TaskStarts::watch(socket, &args.containerd_namespace).await?),
        None => None,
    };
    let base_id = run_id();
    let mut bench = Bench {
        task_starts,
        manifest_dir,
        run_id: base_id.clone(),
        base_id,
        rt,
        cancel,
        rpc_timeout,
        args,
    };
    // ferrolet must answer before the clock starts, or the first round would time its start-up.
    bench.pods_json().await.context("ferrolet's /pods")?;
    let left = bench.sandboxes_left().await?;
    if left > 0 {
        bail!(
            "{left} pods of namespace {POD_NAMESPACE} already run on the runtime; remove them first"
        );
    }
    eprintln!(
        "[{}] {runtime} at {}; run {}, rounds {:?}",
        bench.args.label, bench.args.endpoint, bench.base_id, bench.args.pods
    );
    let largest = bench.args.pods.iter().copied().max().unwrap_or(1);
    let mut report = Report {
        label: bench.args.label.clone(),
        endpoint: bench.args.endpoint.clone(),
        runtime,
        rounds: Vec::new(),
        idle: None,
    };
    let mut idle_done = false;
    for (k, &n) in bench.args.pods.clone().iter().enumerate() {
        bench.run_id = format!("{}-{}", bench.base_id, k + 1);
        if bench.args.gap_ms > 0 {
            let gap = random_below(bench.args.gap_ms + 1);
            bench.sleep_checked(Duration::from_millis(gap)).await?;
        }
        let sample_idle = n == largest && !idle_done;
        let outcome = bench.round(n, sample_idle).await;
        // Whatever happened, the round's pods go before the next step.
        let teardown = bench.remove_all(n).await;
        let (mut round, idle) = outcome?;
        round.teardown_s = teardown?;
        eprintln!("{}", render_round(&bench.args.label, &round));
        if let Some(idle) = idle {
            eprintln!("{}", render_idle(&bench.args.label, &idle));
            report.idle = Some(idle);
            idle_done = true;
        }
        report.rounds.push(round);
    }
    if bench.args.json {
        eprint!("{}", render_report(&report));
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_report(&report));
    }
    Ok(())
}

/// A number in `0..bound` (bound ≥ 1) from the clock's nanoseconds, mixed: random enough to
/// spread rounds in time, with no generator to seed.
fn random_below(bound: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // splitmix64's finaliser.
    let mut z = u64::from(nanos).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % bound.max(1)
}

/// A short random run id from the clock and the pid (lowercase hex: valid in names and labels).
fn run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mixed = (nanos as u64) ^ (u64::from(std::process::id()) << 32);
    format!("{:08x}", mixed & 0xffff_ffff)
}

impl Bench {
    fn check(&self) -> Result<()> {
        if self.cancel.load(Ordering::SeqCst) {
            return Err(Interrupted.into());
        }
        Ok(())
    }

    fn pod_name(&self, index: u32) -> String {
        format!("bench-{}-{index}", self.run_id)
    }

    fn manifest_path(&self, index: u32) -> PathBuf {
        self.manifest_dir
            .join(format!("{}.json", self.pod_name(index)))
    }

    /// Writes the N manifests (each atomically: a dot file renamed into place, which the file
    /// source ignores until the rename) and returns the instant and wall time each appeared.
    async fn write_manifests(&self, n: u32) -> Result<Vec<(Instant, SystemTime)>> {
        let files: Vec<(PathBuf, PathBuf, Vec<u8>)> = (0..n)
            .map(|i| {
                let path = self.manifest_path(i);
                let tmp = self.manifest_dir.join(format!(".{}.tmp", self.pod_name(i)));
                let mut body = manifest_with(
                    &self.pod_name(i),
                    &self.run_id,
                    i,
                    &self.args.image,
                    self.args.probes,
                    self.args.probe_period_s,
                );
                if self.args.probes == ProbeMode::None {
                    body = with_containers(body, self.args.containers);
                }
                let body = with_limits(body, &self.args.extended_resources);
                (path, tmp, body)
            })
            .collect();
        tokio::task::spawn_blocking(move || {
            // Contents first, renames in a tight loop: "at once" as far as the watcher goes.
            for (_, tmp, body) in &files {
                std::fs::write(tmp, body).with_context(|| format!("writing {}", tmp.display()))?;
            }
            let mut written = Vec::with_capacity(files.len());
            for (path, tmp, _) in &files {
                // Stamped before the rename that makes the manifest appear: stamped after it, a
                // writer preempted in between saw ferrolet's `seen` come first (file_source −2 ms).
                let at = (Instant::now(), SystemTime::now());
                std::fs::rename(tmp, path)
                    .with_context(|| format!("renaming to {}", path.display()))?;
                written.push(at);
            }
            Ok(written)
        })
        .await?
    }

    /// Removes every manifest this run may have written for a round of N, then waits until
    /// the runtime holds no sandbox of the benchmark's namespace; returns that wait, seconds.
    async fn remove_all(&self, n: u32) -> Result<f64> {
        let paths: Vec<PathBuf> = (0..n)
            .flat_map(|i| {
                let tmp = self.manifest_dir.join(format!(".{}.tmp", self.pod_name(i)));
                [self.manifest_path(i), tmp]
            })
            .collect();
        tokio::task::spawn_blocking(move || {
            for p in paths {
                // Missing is fine: a round may fail before writing them all.
                let _ = std::fs::remove_file(p);
            }
        })
        .await?;
        let start = Instant::now();
        let limit = Duration::from_secs(self.args.round_timeout_s);
        loop {
            let left = self.sandboxes_left().await?;
            if left == 0 {
                return Ok(start.elapsed().as_secs_f64());
            }
            if start.elapsed() > limit {
                bail!(
                    "{left} sandboxes still in the runtime {limit:?} after removing the manifests"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sandboxes of the benchmark's namespace in the runtime, in any state.
    async fn sandboxes_left(&self) -> Result<usize> {
        let mut rt = self.rt.clone();
        let list = deadline(
            self.rpc_timeout,
            "ListPodSandbox",
            rt.list_pod_sandbox(ListPodSandboxRequest { filter: None }),
        )
        .await?;
        Ok(list
            .items
            .iter()
            .filter(|s| {
                s.labels.get(NAMESPACE_LABEL).map(String::as_str) == Some(POD_NAMESPACE)
                    || s.metadata
                        .as_ref()
                        .is_some_and(|m| m.namespace == POD_NAMESPACE)
            })
            .filter(|s| {
                !self.args.gone_when_stopped || s.state == PodSandboxState::SandboxReady as i32
            })
            .count())
    }

    async fn pods_json(&self) -> Result<Value> {
        let addr = self.args.read_only.clone();
        tokio::task::spawn_blocking(move || http_get_json(&addr, "/pods")).await?
    }

    /// Probe runs so far (total, failed) from `/metrics`; None when it cannot be read or has no
    /// prober series.
    async fn probe_runs(&self) -> Option<(f64, f64)> {
        let addr = self.args.read_only.clone();
        let text = tokio::task::spawn_blocking(move || http_get(&addr, "/metrics", "text/plain"))
            .await
            .ok()?
            .ok()?;
        probe_runs_in(&String::from_utf8_lossy(&text))
    }

    /// One round: write, poll until all Running, then (when asked) sample the idle footprint.
    async fn round(&self, n: u32, sample_idle: bool) -> Result<(Round, Option<Idle>)> {
        self.check()?;
        eprintln!("[{}] {n} pods: writing the manifests", self.args.label);
        let written = self.write_manifests(n).await?;
        let first = written.first().map(|w| w.0).unwrap_or_else(Instant::now);
        let mut running_at: Vec<Option<Instant>> = vec![None; written.len()];
        let limit = Duration::from_secs(self.args.round_timeout_s);
        let poll = Duration::from_millis(self.args.poll_ms.max(2 * u64::from(n)));
        let mut waiting = written.len();
        while waiting > 0 {
            self.check()?;
            let body = self.pods_json().await?;
            // Stamped after the answer: the pod was Running at the latest then.
            let now = Instant::now();
            for index in running_indexes(&body, &self.run_id) {
                if let Some(slot) = running_at.get_mut(index as usize)
                    && slot.is_none()
                {
                    *slot = Some(now);
                    waiting -= 1;
                }
            }
            if first.elapsed() > limit {
                bail!("{waiting} of {n} pods not Running after {limit:?}");
            }
            if waiting > 0 {
                tokio::time::sleep(poll).await;
            }
        }
        let mut running = Vec::with_capacity(written.len());
        let mut last = first;
        for ((w, _), r) in written.iter().zip(&running_at) {
            let r = r.ok_or_else(|| anyhow!("a pod has no Running time"))?;
            running.push(r.saturating_duration_since(*w));
            last = last.max(r);
        }
        let total_s = last.saturating_duration_since(first).as_secs_f64();
        let wall: Vec<SystemTime> = written.iter().map(|w| w.1).collect();
        let (started, task_running) = match self.started_latencies(&wall).await {
            Ok((s, t)) => (
                (!s.is_empty()).then(|| latency(&s)),
                (!t.is_empty()).then(|| latency(&t)),
            ),
            Err(e) => {
                eprintln!("[{}] no CRI start times: {e:#}", self.args.label);
                (None, None)
            }
        };
        if self.task_starts.is_some() && task_running.is_none() {
            eprintln!(
                "[{}] no task start seen for this round's containers",
                self.args.label
            );
        }
        let phases = self.phase_p50s(&wall).await;
        let round = Round {
            pods: n,
            running: latency(&running),
            started,
            task_running,
            total_s,
            teardown_s: 0.0,
            phases,
        };
        let idle = if sample_idle {
            match self.args.pid {
                Some(pid) => Some(self.sample_idle(pid, n).await?),
                None => None,
            }
        } else {
            None
        };
        Ok((round, idle))
    }

    /// Manifest written → container started, from the runtime's `ContainerStatus.started_at`
    /// (nanoseconds, unlike the API's whole-second `startedAt`), and → its task running, from
    /// containerd's events (when watched).
    async fn started_latencies(
        &self,
        wall: &[SystemTime],
    ) -> Result<(Vec<Duration>, Vec<Duration>)> {
        let mut rt = self.rt.clone();
        let list = deadline(
            self.rpc_timeout,
            "ListContainers",
            rt.list_containers(ListContainersRequest { filter: None }),
        )
        .await?;
        let prefix = format!("bench-{}-", self.run_id);
        let mut out = Vec::new();
        let mut tasks = Vec::new();
        for c in list.containers {
            let Some(index) = c
                .labels
                .get(POD_NAME_LABEL)
                .and_then(|name| name.strip_prefix(&prefix))
                .and_then(|rest| rest.split('-').next())
                .and_then(|i| i.parse::<usize>().ok())
            else {
                continue;
            };
            let Some(written) = wall.get(index) else {
                continue;
            };
            if let Some(at) = self.task_starts.as_ref().and_then(|t| t.started(&c.id)) {
                tasks.push(at.duration_since(*written).unwrap_or(Duration::ZERO));
            }
            let status = deadline(
                self.rpc_timeout,
                "ContainerStatus",
                rt.container_status(ContainerStatusRequest {
                    container_id: c.id.clone(),
                    verbose: false,
                }),
            )
            .await?;
            let Some(started_ns) = status.status.map(|s| s.started_at).filter(|t| *t > 0) else {
                continue;
            };
            let started = UNIX_EPOCH + Duration::from_nanos(started_ns.unsigned_abs());
            out.push(started.duration_since(*written).unwrap_or(Duration::ZERO));
        }
        Ok((out, tasks))
    }

    /// The round's per-phase medians from the start timelines of its pods (manifest written at
    /// `wall[index]`); empty when the kubelet serves no timelines (the Go kubelet).
    async fn phase_p50s(&self, wall: &[SystemTime]) -> Vec<PhaseP50> {
        let Ok(body) = self.pods_json().await else {
            return Vec::new();
        };
        let pods = run_pods(&body, &self.run_id);
        let addr = self.args.read_only.clone();
        let wall = wall.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut timelines = Vec::with_capacity(pods.len());
            for (index, namespace, name) in pods {
                let path = format!("/debug/pods/{namespace}/{name}/timeline");
                let Ok(timeline) = http_get_json(&addr, &path) else {
                    // No timelines at all (another kubelet), or this pod's was evicted.
                    if timelines.is_empty() {
                        return Vec::new();
                    }
                    continue;
                };
                if let Some(written) = wall.get(index as usize) {
                    timelines.push(phase_durations(&timeline, *written));
                }
            }
            phase_medians(&timelines)
        })
        .await
        .unwrap_or_default()
    }

    /// ferrolet's RSS and CPU over the idle window, with `pods` pods running.
    async fn sample_idle(&self, pid: u32, pods: u32) -> Result<Idle> {
        let label = &self.args.label;
        eprintln!(
            "[{label}] {pods} pods running: settling {} s, then {} s of idle sampling",
            self.args.settle_s, self.args.idle_s
        );
        self.sleep_checked(Duration::from_secs(self.args.settle_s))
            .await?;
        let probing = self.args.probes != ProbeMode::None;
        let runs_before = if probing {
            self.probe_runs().await
        } else {
            None
        };
        let stack = match &self.args.containerd {
            Some(socket) => {
                let (socket, ns) = (socket.clone(), self.args.containerd_namespace.clone());
                let ids = self.pod_ids().await?;
                Some(
                    tokio::task::spawn_blocking(move || StackPids::find(&socket, &ns, &ids))
                        .await?,
                )
            }
            None => None,
        };
        let shims_cpu_ns = stack.as_ref().map(|s| processes::total_cpu_ns(&s.shims));
        let t0 = Instant::now();
        let before = read_proc(pid).await?;
        self.sleep_checked(Duration::from_secs(self.args.idle_s))
            .await?;
        let after = read_proc(pid).await?;
        let window = t0.elapsed().as_secs_f64();
        let node = stack.map(|stack| {
            let shims_cpu = processes::total_cpu_ns(&stack.shims)
                .saturating_sub(shims_cpu_ns.unwrap_or_default());
            stack.overhead(
                after.rss_kib,
                self.args.runtime_pid,
                self.args.containerd_pid,
                shims_cpu as f64 / 1e9 / window * 100.0,
            )
        });
        let probes = if probing {
            let runs_after = self.probe_runs().await;
            let rates = runs_before.zip(runs_after).map(|((t0, f0), (t1, f1))| {
                ((t1 - t0).max(0.0) / window, (f1 - f0).max(0.0) / window)
            });
            Some(ProbeLoad {
                mode: self.args.probes,
                per_pod: PROBES_PER_POD,
                period_s: self.args.probe_period_s,
                runs_per_s: rates.map(|r| r.0),
                failed_per_s: rates.map(|r| r.1),
            })
        } else {
            None
        };
        let hz = match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
            Ok(Some(hz)) if hz > 0 => hz as f64,
            _ => 100.0,
        };
        let ticks = after.ticks.saturating_sub(before.ticks) as f64;
        Ok(Idle {
            pods,
            rss_mib: after.rss_kib as f64 / 1024.0,
            peak_rss_mib: after.hwm_kib as f64 / 1024.0,
            cpu_pct: ticks / hz / window * 100.0,
            window_s: window,
            probes,
            node,
        })
    }

    /// The ids of the benchmark's sandboxes and containers in the runtime: one of them names
    /// each shim serving its pods (the pod's first task's).
    async fn pod_ids(&self) -> Result<HashSet<String>> {
        let mut rt = self.rt.clone();
        let sandboxes = deadline(
            self.rpc_timeout,
            "ListPodSandbox",
            rt.list_pod_sandbox(ListPodSandboxRequest { filter: None }),
        )
        .await?
        .items;
        let containers = deadline(
            self.rpc_timeout,
            "ListContainers",
            rt.list_containers(ListContainersRequest { filter: None }),
        )
        .await?
        .containers;
        let ours = |labels: &std::collections::HashMap<String, String>| {
            labels.get(NAMESPACE_LABEL).map(String::as_str) == Some(POD_NAMESPACE)
        };
        Ok(sandboxes
            .into_iter()
            .filter(|s| {
                ours(&s.labels)
                    || s.metadata
                        .as_ref()
                        .is_some_and(|m| m.namespace == POD_NAMESPACE)
            })
            .map(|s| s.id)
            .chain(
                containers
                    .into_iter()
                    .filter(|c| ours(&c.labels))
                    .map(|c| c.id),
            )
            .collect())
    }

    async fn sleep_checked(&self, d: Duration) -> Result<()> {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.check()?;
            let left = end.saturating_duration_since(Instant::now());
            tokio::time::sleep(left.min(Duration::from_millis(200))).await;
        }
        Ok(())
    }
}

/// A static pod manifest (JSON, which the kubelet reads as YAML too).
#[cfg(test)]
fn manifest(name: &str, run_id: &str, index: u32, image: &str) -> Vec<u8> {
    manifest_with(name, run_id, index, image, ProbeMode::None, 1)
}

/// A static pod manifest with `probes` at `period_s`.
fn manifest_with(
    name: &str,
    run_id: &str,
    index: u32,
    image: &str,
    probes: ProbeMode,
    period_s: u32,
) -> Vec<u8> {
    if probes != ProbeMode::None {
        return probed_manifest(name, run_id, index, image, probes, period_s);
    }
    let sleep = json!({
        "name": "sleep",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", COMMAND],
    });
    pod_manifest(name, run_id, index, vec![sleep])
}

/// `manifest` with its first container repeated until the pod has `n` (named `<name>-1`,
/// `<name>-2`, ...).
fn with_containers(manifest: Vec<u8>, n: u32) -> Vec<u8> {
    if n <= 1 {
        return manifest;
    }
    let Ok(mut pod) = serde_json::from_slice::<Value>(&manifest) else {
        return manifest;
    };
    if let Some(containers) = pod["spec"]["containers"].as_array_mut()
        && let Some(first) = containers.first().cloned()
    {
        let name = first["name"].as_str().unwrap_or("c").to_string();
        for i in 1..n {
            let mut c = first.clone();
            c["name"] = Value::String(format!("{name}-{i}"));
            containers.push(c);
        }
    }
    let mut out = pod.to_string().into_bytes();
    out.push(b'\n');
    out
}

/// `NAME=COUNT`.
fn resource_arg(s: &str) -> Result<(String, u32), String> {
    let (name, count) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=COUNT"))?;
    let count = count
        .parse()
        .map_err(|e| format!("{s:?}: bad count: {e}"))?;
    Ok((name.to_string(), count))
}

/// `manifest` with `resources` as every container's limits (extended resources: requests
/// default to limits).
fn with_limits(manifest: Vec<u8>, resources: &[(String, u32)]) -> Vec<u8> {
    if resources.is_empty() {
        return manifest;
    }
    let Ok(mut pod) = serde_json::from_slice::<Value>(&manifest) else {
        return manifest;
    };
    let limits: serde_json::Map<String, Value> = resources
        .iter()
        .map(|(name, n)| (name.clone(), Value::String(n.to_string())))
        .collect();
    if let Some(containers) = pod["spec"]["containers"].as_array_mut() {
        for c in containers {
            c["resources"] = json!({ "limits": limits });
        }
    }
    let mut out = pod.to_string().into_bytes();
    out.push(b'\n');
    out
}

/// The benchmark's pod of `containers`, labelled with the run and its index, as one JSON line.
fn pod_manifest(name: &str, run_id: &str, index: u32, containers: Vec<Value>) -> Vec<u8> {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": POD_NAMESPACE,
            "labels": { RUN_LABEL: run_id, INDEX_LABEL: index.to_string() },
        },
        "spec": {
            "terminationGracePeriodSeconds": 10,
            "containers": containers,
        },
    });
    let mut out = pod.to_string().into_bytes();
    out.push(b'\n');
    out
}

/// A pod of two containers with three probes between them: `web` (busybox httpd on 8080)
/// with liveness and readiness, `side` (httpd on 8081) with readiness; tcpSocket and httpGet
/// probes, or exec probes (`true`). The thresholds are generous so a slow probe under load
/// never restarts a container mid-measure.
fn probed_manifest(
    name: &str,
    run_id: &str,
    index: u32,
    image: &str,
    mode: ProbeMode,
    period_s: u32,
) -> Vec<u8> {
    let serve = |port: u16| {
        format!(
            "trap 'exit 0' TERM; mkdir -p /tmp/www && echo ok > /tmp/www/index.html && \
             httpd -f -p {port} -h /tmp/www & wait"
        )
    };
    let timing = json!({
        "periodSeconds": period_s,
        "timeoutSeconds": 1,
        "failureThreshold": 30,
        "successThreshold": 1,
    });
    let probe = |handler: Value| {
        let mut p = timing.clone();
        if let (Some(p), Some(h)) = (p.as_object_mut(), handler.as_object()) {
            p.extend(h.clone());
        }
        p
    };
    let exec = || json!({"exec": {"command": ["true"]}});
    let (web_live, web_ready, side_ready) = match mode {
        ProbeMode::Exec => (exec(), exec(), exec()),
        _ => (
            json!({"tcpSocket": {"port": 8080}}),
            json!({"httpGet": {"path": "/", "port": 8080}}),
            json!({"httpGet": {"path": "/", "port": 8081}}),
        ),
    };
    let container = |name: &str, port: u16| {
        json!({
            "name": name,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", serve(port)],
        })
    };
    let mut web = container("web", 8080);
    web["livenessProbe"] = probe(web_live);
    web["readinessProbe"] = probe(web_ready);
    let mut side = container("side", 8081);
    side["readinessProbe"] = probe(side_ready);
    pod_manifest(name, run_id, index, vec![web, side])
}

/// (all, failed) runs in a `/metrics` exposition's `prober_probe_total`; None without it.
fn probe_runs_in(text: &str) -> Option<(f64, f64)> {
    let exposition = prometheus::parse(text).ok()?;
    let family = exposition.family("prober_probe_total")?;
    let total = family.samples.iter().map(|s| s.value).sum();
    let failed = family
        .with_labels(&[("result", "failed")])
        .iter()
        .map(|s| s.value)
        .sum();
    Some((total, failed))
}

/// This run's pods in a `/pods` PodList, each with its index (from the run and index labels).
fn run_items<'a>(pods: &'a Value, run_id: &'a str) -> impl Iterator<Item = (u32, &'a Value)> {
    pods.get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(move |p| {
            let labels = p.pointer("/metadata/labels")?;
            if labels.get(RUN_LABEL)?.as_str()? != run_id {
                return None;
            }
            let index = labels.get(INDEX_LABEL)?.as_str()?.parse().ok()?;
            Some((index, p))
        })
}

/// Indexes of this run's pods whose phase is `Running` in a `/pods` PodList.
fn running_indexes(pods: &Value, run_id: &str) -> Vec<u32> {
    run_items(pods, run_id)
        .filter(|(_, p)| p.pointer("/status/phase").and_then(Value::as_str) == Some("Running"))
        .map(|(index, _)| index)
        .collect()
}

/// (index, namespace, name) of this run's pods in a `/pods` PodList.
fn run_pods(pods: &Value, run_id: &str) -> Vec<(u32, String, String)> {
    run_items(pods, run_id)
        .filter_map(|(index, p)| {
            let namespace = p.pointer("/metadata/namespace")?.as_str()?.to_string();
            let name = p.pointer("/metadata/name")?.as_str()?.to_string();
            Some((index, namespace, name))
        })
        .collect()
}

/// The phases of a pod's newest start (its timeline JSON) with their durations, milliseconds,
/// in order; a phase marked more than once (one mark per container) is summed. First comes
/// `file_source`: manifest written → the `seen` mark.
fn phase_durations(timeline: &Value, written: SystemTime) -> Vec<(String, f64)> {
    let Some(marks) = timeline
        .pointer("/starts")
        .and_then(Value::as_array)
        .and_then(|s| s.last())
        .and_then(|s| s.get("marks"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let mut out: Vec<(String, f64)> = Vec::new();
    let seen = marks
        .first()
        .filter(|m| m.get("phase").and_then(Value::as_str) == Some("seen"))
        .and_then(|m| m.get("at")?.as_str()?.parse::<jiff::Timestamp>().ok());
    if let Some(seen) = seen {
        let seen = SystemTime::from(seen);
        let ms = match seen.duration_since(written) {
            Ok(d) => d.as_secs_f64() * 1000.0,
            Err(e) => -e.duration().as_secs_f64() * 1000.0,
        };
        out.push(("file_source".to_string(), ms));
    }
    for m in marks.iter().skip(1) {
        let (Some(phase), Some(ms)) = (
            m.get("phase").and_then(Value::as_str),
            m.get("durationMs").and_then(Value::as_f64),
        ) else {
            continue;
        };
        match out.iter_mut().find(|(p, _)| p == phase) {
            Some((_, total)) => *total += ms,
            None => out.push((phase.to_string(), ms)),
        }
    }
    out
}

/// Per-phase medians over pods, in the phase order of the pod with the most phases.
fn phase_medians(pods: &[Vec<(String, f64)>]) -> Vec<PhaseP50> {
    let Some(order) = pods.iter().max_by_key(|p| p.len()) else {
        return Vec::new();
    };
    order
        .iter()
        .map(|(phase, _)| {
            let values = pods
                .iter()
                .filter_map(|p| p.iter().find(|(q, _)| q == phase).map(|(_, v)| *v))
                .collect();
            PhaseP50 {
                phase: phase.clone(),
                // Never empty: `order` itself has the phase.
                p50_ms: median(values).unwrap_or_default(),
            }
        })
        .collect()
}

/// A plain HTTP/1.1 GET of a JSON document (the read-only API has neither TLS nor auth).
fn http_get_json(addr: &str, path: &str) -> Result<Value> {
    let body = http_get(addr, path, "application/json")?;
    serde_json::from_slice(&body).with_context(|| format!("parsing {path} from {addr}"))
}

/// A plain HTTP/1.1 GET; the body of a 200 answer.
fn http_get(addr: &str, path: &str, accept: &str) -> Result<Vec<u8>> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("reading {path} from {addr}"))?;
    http_body(&raw)
}

/// The body of a raw HTTP/1.1 response with status 200 (chunked or not).
fn http_body(raw: &[u8]) -> Result<Vec<u8>> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("truncated HTTP response"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = &raw[split + 4..];
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("HTTP status {status:?}");
    }
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok(body.to_vec());
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| anyhow!("truncated chunk header"))?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size_hex = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .with_context(|| format!("bad chunk size {size_hex:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).ok_or_else(|| anyhow!("truncated chunk"))?;
        out.extend_from_slice(chunk);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
}

/// The shims a containerd started for one namespace to serve the benchmark's pods (another
/// user's pods on the same containerd are not ours to count), and the pause processes under
/// them.
struct StackPids {
    shims: Vec<u32>,
    programs: Vec<String>,
    pause: Vec<u32>,
}

impl StackPids {
    fn find(socket: &str, namespace: &str, ids: &HashSet<String>) -> Self {
        let found: Vec<_> = processes::shims(socket, Some(namespace))
            .into_iter()
            .filter(|s| ids.contains(&s.id))
            .collect();
        let shims: Vec<u32> = found.iter().map(|s| s.pid).collect();
        let mut programs: Vec<String> = found.into_iter().map(|s| s.program).collect();
        programs.sort();
        programs.dedup();
        let pause = processes::children_named(&shims, PAUSE_COMM);
        Self {
            shims,
            programs,
            pause,
        }
    }

    /// The overhead now, with the kubelet's RSS (KiB) and the shims' CPU over the window.
    fn overhead(
        self,
        kubelet_kib: u64,
        runtime: Option<u32>,
        containerd: Option<u32>,
        shims_cpu_pct: f64,
    ) -> NodeOverhead {
        let mib = |pid: Option<u32>| pid.and_then(processes::rss_kib).map(processes::kib_to_mib);
        NodeOverhead {
            kubelet_mib: processes::kib_to_mib(kubelet_kib),
            runtime_mib: mib(runtime),
            containerd_mib: mib(containerd),
            shims: self.shims.len(),
            shims_mib: processes::kib_to_mib(processes::total_rss_kib(&self.shims)),
            shim_programs: self.programs,
            pause: self.pause.len(),
            pause_mib: processes::kib_to_mib(processes::total_rss_kib(&self.pause)),
            shims_cpu_pct,
        }
    }
}

/// What /proc says about a process.
struct ProcSample {
    rss_kib: u64,
    hwm_kib: u64,
    ticks: u64,
}

async fn read_proc(pid: u32) -> Result<ProcSample> {
    tokio::task::spawn_blocking(move || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status (is ferrolet running?)"))?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        Ok(ProcSample {
            rss_kib: status_kib(&status, "VmRSS:").ok_or_else(|| anyhow!("no VmRSS"))?,
            hwm_kib: status_kib(&status, "VmHWM:").unwrap_or(0),
            ticks: parse_stat_ticks(&stat).ok_or_else(|| anyhow!("unreadable /proc/{pid}/stat"))?,
        })
    })
    .await?
}

fn latency(samples: &[Duration]) -> Latency {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    Latency {
        p50_ms: percentile(&ms, 50.0),
        p99_ms: percentile(&ms, 99.0),
        max_ms: ms.last().copied().unwrap_or(0.0),
    }
}

fn render_round(label: &str, r: &Round) -> String {
    let pair = |l: &Option<Latency>| {
        l.as_ref().map_or("-".to_string(), |s| {
            format!("{:.0}/{:.0} ms", s.p50_ms, s.p99_ms)
        })
    };
    let mut out = format!(
        "[{label}] N={}: Running p50 {:.0} ms, p99 {:.0} ms; started (CRI) p50/p99 {}; task running p50/p99 {}; all Running {:.2} s; gone {:.2} s",
        r.pods,
        r.running.p50_ms,
        r.running.p99_ms,
        pair(&r.started),
        pair(&r.task_running),
        r.total_s,
        r.teardown_s
    );
    if !r.phases.is_empty() {
        let phases: Vec<String> = r
            .phases
            .iter()
            .map(|p| format!("{} {:.1}", p.phase, p.p50_ms))
            .collect();
        let _ = write!(
            out,
            "\n[{label}]   timeline p50 (ms): {}",
            phases.join(", ")
        );
    }
    out
}

fn render_idle(label: &str, i: &Idle) -> String {
    let node = i
        .node
        .as_ref()
        .map(|n| format!("\n[{label}] {}", render_overhead(i.pods, n)))
        .unwrap_or_default();
    let Some(p) = &i.probes else {
        return format!(
            "[{label}] idle with {} pods: RSS {:.1} MiB (peak {:.1}), CPU {:.2}% of a core over {:.0} s{node}",
            i.pods, i.rss_mib, i.peak_rss_mib, i.cpu_pct, i.window_s
        );
    };
    let mode = match p.mode {
        ProbeMode::Exec => "exec",
        _ => "tcp/http",
    };
    let runs = match (p.runs_per_s, p.failed_per_s) {
        (Some(r), Some(f)) => format!("{r:.1} probe runs/s ({f:.1} failed/s)"),
        _ => "probe runs not in /metrics".to_string(),
    };
    // Issue #7's budget is for network probes; exec probes are reported beside it.
    let goal = match p.mode {
        ProbeMode::Exec => "exec probes: reported separately, no goal".to_string(),
        _ => format!("goal <= 5% of a core: {}", verdict(Some(i.cpu_pct), 5.0)),
    };
    format!(
        "[{label}] {} pods x {} {mode} probes every {} s: CPU {:.2}% of a core over {:.0} s, {runs}; RSS {:.1} MiB (peak {:.1}); {goal}{node}",
        i.pods, p.per_pod, p.period_s, i.cpu_pct, i.window_s, i.rss_mib, i.peak_rss_mib
    )
}

/// One line: the node overhead's parts and total.
fn render_overhead(pods: u32, n: &NodeOverhead) -> String {
    let part = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let programs = if n.shim_programs.is_empty() {
        "none found".to_string()
    } else {
        n.shim_programs.join(", ")
    };
    format!(
        "node overhead with {pods} pods, RSS MiB: kubelet {:.1} + CRI runtime {} + containerd {} + {} shims ({programs}) {:.1} ({:.2} per pod) + {} pause {:.1} = {:.1}; shims' idle CPU {:.3}% of a core",
        n.kubelet_mib,
        part(n.runtime_mib),
        part(n.containerd_mib),
        n.shims,
        n.shims_mib,
        n.shims_mib / f64::from(pods.max(1)),
        n.pause,
        n.pause_mib,
        n.total_mib(),
        n.shims_cpu_pct
    )
}

/// The node overhead of `ours` against the reference's (or why there is none), part by part,
/// with issue #39's goal: ours <= 0.2x the reference.
fn render_node(ours: &Report, reference: &Result<Report, String>) -> String {
    let mut out = String::new();
    let node = |r: &Report| {
        r.idle
            .as_ref()
            .and_then(|i| i.node.clone().map(|n| (i.pods, n)))
    };
    let reference = match reference {
        Ok(r) => Ok(r),
        Err(why) if why.is_empty() => Err("no reference report"),
        Err(why) => Err(why.as_str()),
    };
    let _ = writeln!(
        out,
        "node overhead (kubelet + CRI runtime + containerd + shims + pause), same pods, same run: {} ({}) against {}",
        ours.label,
        ours.runtime,
        match reference {
            Ok(r) => format!("{} ({})", r.label, r.runtime),
            Err(why) => format!("the reference, absent: {why}"),
        }
    );
    let a = node(ours);
    let b = reference.ok().and_then(node);
    if let Some((pods, n)) = &a {
        let _ = writeln!(out, "  {}: {}", ours.label, render_overhead(*pods, n));
    } else {
        let _ = writeln!(
            out,
            "  {}: no node overhead sampled (--containerd)",
            ours.label
        );
    }
    match (reference, &b) {
        (Ok(r), Some((pods, n))) => {
            let _ = writeln!(out, "  {}: {}", r.label, render_overhead(*pods, n));
        }
        (Ok(r), None) => {
            let _ = writeln!(
                out,
                "  {}: no node overhead sampled (--containerd)",
                r.label
            );
        }
        (Err(_), _) => {}
    }
    if let (Some((pa, x)), Some((pb, y))) = (&a, &b) {
        let mut table = String::new();
        let _ = writeln!(
            table,
            "{:<34}{:>16}{:>16}{:>10}",
            "RSS MiB",
            ours.label,
            reference.map(|r| r.label.as_str()).unwrap_or_default(),
            "ratio"
        );
        let parts: [(&str, Option<f64>, Option<f64>); 7] = [
            ("kubelet", Some(x.kubelet_mib), Some(y.kubelet_mib)),
            ("CRI runtime", x.runtime_mib, y.runtime_mib),
            ("containerd", x.containerd_mib, y.containerd_mib),
            ("shims", Some(x.shims_mib), Some(y.shims_mib)),
            (
                "shims per pod",
                Some(x.shims_mib / f64::from((*pa).max(1))),
                Some(y.shims_mib / f64::from((*pb).max(1))),
            ),
            ("pause", Some(x.pause_mib), Some(y.pause_mib)),
            ("total", Some(x.total_mib()), Some(y.total_mib())),
        ];
        for (name, u, v) in parts {
            row(&mut table, name, u, v, "MiB", 1);
        }
        row(
            &mut table,
            "shims' idle CPU",
            Some(x.shims_cpu_pct),
            Some(y.shims_cpu_pct),
            "%",
            3,
        );
        out.push_str(&table);
        if pa != pb {
            let _ = writeln!(out, "  note: {pa} pods against {pb}: not the same pods");
        }
    }
    let ratio = a
        .as_ref()
        .zip(b.as_ref())
        .map(|((_, x), (_, y))| (x.total_mib(), y.total_mib()))
        .filter(|(_, y)| *y > 0.0)
        .map(|(x, y)| x / y);
    let why = match (reference, &a, &b) {
        (Err(why), _, _) => format!("not measured: the reference is absent ({why})"),
        (Ok(_), None, _) | (Ok(_), _, None) => {
            "not measured: a stack's overhead was not sampled".to_string()
        }
        _ => format!(
            "ratio {}: {}",
            ratio.map_or("-".to_string(), |r| format!("{r:.2}")),
            verdict(ratio, 0.2)
        ),
    };
    let _ = writeln!(
        out,
        "goal node overhead {} <= 0.2x the reference: {why}",
        ours.label
    );
    out
}

fn render_report(r: &Report) -> String {
    let mut out = format!("{} on {} ({})\n", r.label, r.runtime, r.endpoint);
    for round in &r.rounds {
        let _ = writeln!(out, "  {}", render_round(&r.label, round));
    }
    if let Some(i) = &r.idle {
        let _ = writeln!(out, "  {}", render_idle(&r.label, i));
    }
    out
}

/// Nearest-rank median of unsorted values; None for none.
fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(percentile(&values, 50.0))
}

/// A kubelet run beside the same pods started directly through CRI (issue #20's goals): at
/// N=1, manifest → app task running against the sum of the three CRI calls' p50s (goal ≤ 1.3×,
/// and ≤ 15 ms more); each larger N's all-Running against the direct all-started (≤ 1.1×).
/// The N=1 figures pool every single-pod round.
fn render_direct(k: &Report, cri: &[CriReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}) against the same pods started directly through CRI, same run",
        k.label, k.runtime
    );
    let singles: Vec<&Round> = k.rounds.iter().filter(|r| r.pods == 1).collect();
    let task = median(
        singles
            .iter()
            .filter_map(|r| r.task_running.as_ref().map(|l| l.p50_ms))
            .collect(),
    );
    let sequential: Vec<&CriReport> = cri.iter().filter(|c| c.concurrency == 1).collect();
    let call = |name: &str| {
        median(
            sequential
                .iter()
                .flat_map(|c| c.rpcs.iter().filter(|r| r.rpc == name))
                .flat_map(|r| r.samples_ms.iter().copied())
                .collect(),
        )
    };
    let calls: Vec<Option<f64>> = START_CALLS.iter().map(|c| call(c)).collect();
    let floor: Option<f64> = calls.iter().copied().sum();
    let direct_pods: u32 = sequential.iter().map(|c| c.pods).sum();
    let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ms"));
    let _ = writeln!(
        out,
        "N=1 ({} starts): manifest → app task running p50 {}",
        singles.len(),
        fmt(task)
    );
    let _ = writeln!(
        out,
        "  CRI calls p50 ({direct_pods} direct starts): {} = {}",
        START_CALLS
            .iter()
            .zip(&calls)
            .map(|(c, v)| format!("{c} {}", fmt(*v)))
            .collect::<Vec<_>>()
            .join(" + "),
        fmt(floor)
    );
    let ratio = task
        .zip(floor)
        .filter(|(_, f)| *f > 0.0)
        .map(|(t, f)| t / f);
    let _ = writeln!(
        out,
        "  ratio {} (goal <= 1.3: {})",
        ratio.map_or("-".to_string(), |r| format!("{r:.2}")),
        verdict(ratio, 1.3)
    );
    let overhead = task.zip(floor).map(|(t, f)| t - f);
    let _ = writeln!(
        out,
        "  ferrolet's overhead (task running p50 - the calls' p50s) {} (goal <= 15 ms: {})",
        fmt(overhead),
        verdict(overhead, 15.0)
    );
    // The same from the timeline: ferrolet's own phases, and its share of the sandbox phase.
    let own = median(
        singles
            .iter()
            .filter(|r| !r.phases.is_empty())
            .map(|r| {
                r.phases
                    .iter()
                    .filter(|p| !RUNTIME_PHASES.contains(&p.phase.as_str()))
                    .map(|p| p.p50_ms)
                    .sum()
            })
            .collect(),
    );
    let phase = |name: &str| {
        median(
            singles
                .iter()
                .flat_map(|r| r.phases.iter().filter(|p| p.phase == name))
                .map(|p| p.p50_ms)
                .collect(),
        )
    };
    let _ = writeln!(
        out,
        "  timeline: own phases (source, admission, worker, volumes, image check) p50 {}; sandbox phase p50 {} against RunPodSandbox {}",
        fmt(own),
        fmt(phase("sandbox_ready")),
        fmt(calls[0])
    );
    for r in k.rounds.iter().filter(|r| r.pods > 1) {
        let direct = cri
            .iter()
            .find(|c| c.pods == r.pods && c.concurrency > 1)
            .map(|c| c.setup_s);
        let ratio = direct.filter(|d| *d > 0.0).map(|d| r.total_s / d);
        let _ = writeln!(
            out,
            "N={}: all Running {:.2} s; direct all started {} ; ratio {} (goal <= 1.1: {})",
            r.pods,
            r.total_s,
            direct.map_or("-".to_string(), |d| format!("{d:.2} s")),
            ratio.map_or("-".to_string(), |r| format!("{r:.2}")),
            verdict(ratio, 1.1)
        );
    }
    out
}

fn round_of(r: &Report, n: u32) -> Option<&Round> {
    r.rounds.iter().find(|x| x.pods == n)
}

/// One table row: a measure of both reports (`-` where one lacks it).
fn row(out: &mut String, name: &str, a: Option<f64>, b: Option<f64>, unit: &str, digits: usize) {
    let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.digits$} {unit}"));
    let ratio = match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".to_string(),
    };
    let _ = writeln!(out, "{name:<34}{:>16}{:>16}{ratio:>10}", cell(a), cell(b));
}

/// Whether a measure meets its goal, for one report.
fn verdict(v: Option<f64>, goal: f64) -> &'static str {
    match v {
        Some(v) if v <= goal => "met",
        Some(_) => "NOT met",
        None => "not measured",
    }
}

fn render_compare(a: &Report, b: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ferrolet static-pod start latency: {} ({}) vs {} ({})",
        a.label, a.runtime, b.label, b.runtime
    );
    let _ = writeln!(
        out,
        "{:<34}{:>16}{:>16}{:>10}",
        "", a.label, b.label, "ratio"
    );
    let mut counts: Vec<u32> = a.rounds.iter().chain(&b.rounds).map(|r| r.pods).collect();
    counts.sort_unstable();
    counts.dedup();
    for n in counts {
        let (ra, rb) = (round_of(a, n), round_of(b, n));
        let s = |r: Option<&Round>, f: fn(&Round) -> Option<f64>| r.and_then(f);
        row(
            &mut out,
            &format!("N={n} Running p50"),
            s(ra, |r| Some(r.running.p50_ms)),
            s(rb, |r| Some(r.running.p50_ms)),
            "ms",
            0,
        );
        row(
            &mut out,
            &format!("N={n} Running p99"),
            s(ra, |r| Some(r.running.p99_ms)),
            s(rb, |r| Some(r.running.p99_ms)),
            "ms",
            0,
        );
        row(
            &mut out,
            &format!("N={n} started (CRI) p50"),
            s(ra, |r| r.started.as_ref().map(|l| l.p50_ms)),
            s(rb, |r| r.started.as_ref().map(|l| l.p50_ms)),
            "ms",
            0,
        );
        row(
            &mut out,
            &format!("N={n} started (CRI) p99"),
            s(ra, |r| r.started.as_ref().map(|l| l.p99_ms)),
            s(rb, |r| r.started.as_ref().map(|l| l.p99_ms)),
            "ms",
            0,
        );
        row(
            &mut out,
            &format!("N={n} task running p50"),
            s(ra, |r| r.task_running.as_ref().map(|l| l.p50_ms)),
            s(rb, |r| r.task_running.as_ref().map(|l| l.p50_ms)),
            "ms",
            0,
        );
        row(
            &mut out,
            &format!("N={n} task running p99"),
            s(ra, |r| r.task_running.as_ref().map(|l| l.p99_ms)),
            s(rb, |r| r.task_running.as_ref().map(|l| l.p99_ms)),
            "ms",
            0,
        );
        row(
            &mut out,
            &format!("N={n} all Running"),
            s(ra, |r| Some(r.total_s)),
            s(rb, |r| Some(r.total_s)),
            "s",
            2,
        );
        row(
            &mut out,
            &format!("N={n} all gone after removal"),
            s(ra, |r| Some(r.teardown_s)),
            s(rb, |r| Some(r.teardown_s)),
            "s",
            2,
        );
    }
    let idle = |r: &Report, f: fn(&Idle) -> f64| r.idle.as_ref().map(f);
    let pods = a.idle.as_ref().or(b.idle.as_ref()).map_or(0, |i| i.pods);
    row(
        &mut out,
        &format!("ferrolet RSS, {pods} pods"),
        idle(a, |i| i.rss_mib),
        idle(b, |i| i.rss_mib),
        "MiB",
        1,
    );
    row(
        &mut out,
        "ferrolet peak RSS",
        idle(a, |i| i.peak_rss_mib),
        idle(b, |i| i.peak_rss_mib),
        "MiB",
        1,
    );
    row(
        &mut out,
        &format!("ferrolet idle CPU, {pods} pods"),
        idle(a, |i| i.cpu_pct),
        idle(b, |i| i.cpu_pct),
        "%",
        2,
    );
    let node = |r: &Report, f: fn(&NodeOverhead) -> f64| {
        r.idle.as_ref().and_then(|i| i.node.as_ref()).map(f)
    };
    if a.idle.iter().chain(&b.idle).any(|i| i.node.is_some()) {
        row(
            &mut out,
            &format!("node overhead, {pods} pods"),
            node(a, NodeOverhead::total_mib),
            node(b, NodeOverhead::total_mib),
            "MiB",
            1,
        );
        row(
            &mut out,
            "  of it shims",
            node(a, |n| n.shims_mib),
            node(b, |n| n.shims_mib),
            "MiB",
            1,
        );
        row(
            &mut out,
            "  of it pause",
            node(a, |n| n.pause_mib),
            node(b, |n| n.pause_mib),
            "MiB",
            1,
        );
        row(
            &mut out,
            "shims' idle CPU",
            node(a, |n| n.shims_cpu_pct),
            node(b, |n| n.shims_cpu_pct),
            "%",
            3,
        );
    }
    let _ = writeln!(out, "goals (issue #6):");
    type Pick = fn(&Report) -> Option<f64>;
    let goals: [(&str, f64, Pick); 4] = [
        ("N=1 p50 <= 1 s", 1000.0, |r| {
            round_of(r, 1).map(|x| x.running.p50_ms)
        }),
        ("N=30 all Running <= 10 s", 10.0, |r| {
            round_of(r, 30).map(|x| x.total_s)
        }),
        ("idle CPU <= 1% of a core, 100 pods", 1.0, |r| {
            r.idle.as_ref().filter(|i| i.pods >= 100).map(|i| i.cpu_pct)
        }),
        ("RSS <= 40 MiB, 100 pods", 40.0, |r| {
            r.idle.as_ref().filter(|i| i.pods >= 100).map(|i| i.rss_mib)
        }),
    ];
    for (name, goal, pick) in goals {
        let _ = writeln!(
            out,
            "  {name:<34}{:>14}{:>16}",
            verdict(pick(a), goal),
            verdict(pick(b), goal)
        );
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn manifests_are_valid_pods_with_the_run_labels() {
        let m: Value = serde_json::from_slice(&manifest("bench-ab-3", "ab", 3, "img:1")).unwrap();
        assert_eq!(m["kind"], "Pod");
        assert_eq!(m["metadata"]["namespace"], POD_NAMESPACE);
        assert_eq!(m["metadata"]["labels"][RUN_LABEL], "ab");
        assert_eq!(m["metadata"]["labels"][INDEX_LABEL], "3");
        let c = &m["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(c["command"][2], COMMAND);
    }

    #[test]
    fn pods_get_the_containers_asked_for() {
        let m = with_containers(manifest("bench-ab-1", "ab", 1, "img:1"), 3);
        let m: Value = serde_json::from_slice(&m).unwrap();
        let names: Vec<&str> = m["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["sleep", "sleep-1", "sleep-2"]);
        assert_eq!(m["spec"]["containers"][2]["command"][2], COMMAND);
        let one = manifest("bench-ab-1", "ab", 1, "img:1");
        assert_eq!(with_containers(one.clone(), 1), one);
    }

    #[test]
    fn extended_resources_become_every_containers_limits() {
        let m = with_limits(
            manifest("bench-ab-1", "ab", 1, "img:1"),
            &[resource_arg("example.com/resource=1").unwrap()],
        );
        let m: Value = serde_json::from_slice(&m).unwrap();
        assert_eq!(
            m["spec"]["containers"][0]["resources"]["limits"]["example.com/resource"],
            "1"
        );
        assert!(resource_arg("x").is_err());
    }

    #[test]
    fn probed_manifests_carry_three_probes() {
        let m: Value = serde_json::from_slice(&manifest_with(
            "bench-ab-1",
            "ab",
            1,
            "img:1",
            ProbeMode::Network,
            1,
        ))
        .unwrap();
        let containers = m["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 2);
        let probes: Vec<&Value> = containers
            .iter()
            .flat_map(|c| ["livenessProbe", "readinessProbe", "startupProbe"].map(|k| &c[k]))
            .filter(|p| p.is_object())
            .collect();
        assert_eq!(probes.len() as u32, PROBES_PER_POD);
        assert!(probes.iter().all(|p| p["periodSeconds"] == 1));
        assert_eq!(containers[0]["livenessProbe"]["tcpSocket"]["port"], 8080);
        assert_eq!(containers[0]["readinessProbe"]["httpGet"]["port"], 8080);
        assert_eq!(containers[1]["readinessProbe"]["httpGet"]["port"], 8081);
        let e: Value = serde_json::from_slice(&manifest_with(
            "bench-ab-1",
            "ab",
            1,
            "img:1",
            ProbeMode::Exec,
            2,
        ))
        .unwrap();
        let web = &e["spec"]["containers"][0];
        assert_eq!(web["livenessProbe"]["exec"]["command"][0], "true");
        assert_eq!(web["readinessProbe"]["periodSeconds"], 2);
        assert!(web["livenessProbe"]["tcpSocket"].is_null());
    }

    #[test]
    fn probe_runs_are_read_from_metrics() {
        let text = "# TYPE prober_probe_total counter\n\
            prober_probe_total{probe_type=\"Liveness\",result=\"successful\",container=\"web\",pod=\"p\",namespace=\"n\",pod_uid=\"u\"} 10\n\
            prober_probe_total{probe_type=\"Readiness\",result=\"failed\",container=\"web\",pod=\"p\",namespace=\"n\",pod_uid=\"u\"} 2\n";
        assert_eq!(probe_runs_in(text), Some((12.0, 2.0)));
        assert_eq!(probe_runs_in("# TYPE other gauge\nother 1\n"), None);
        assert_eq!(probe_runs_in("not {the format"), None);
    }

    #[test]
    fn probe_loads_render_with_the_goal() {
        let mut idle = Idle {
            pods: 100,
            rss_mib: 20.0,
            peak_rss_mib: 21.0,
            cpu_pct: 3.0,
            window_s: 30.0,
            node: None,
            probes: Some(ProbeLoad {
                mode: ProbeMode::Network,
                per_pod: 3,
                period_s: 1,
                runs_per_s: Some(300.0),
                failed_per_s: Some(0.0),
            }),
        };
        let line = render_idle("x", &idle);
        assert!(
            line.contains("100 pods x 3 tcp/http probes every 1 s"),
            "{line}"
        );
        assert!(line.contains("300.0 probe runs/s"), "{line}");
        assert!(line.contains("goal <= 5% of a core: met"), "{line}");
        idle.probes = idle.probes.map(|p| ProbeLoad {
            mode: ProbeMode::Exec,
            runs_per_s: None,
            ..p
        });
        let line = render_idle("x", &idle);
        assert!(
            line.contains("exec probes") && line.contains("not in /metrics"),
            "{line}"
        );
        let back: Idle = serde_json::from_str(&serde_json::to_string(&idle).unwrap()).unwrap();
        assert_eq!(back, idle);
        // Reports written before probes existed still read.
        let old: Idle = serde_json::from_str(
            r#"{"pods":1,"rss_mib":1.0,"peak_rss_mib":1.0,"cpu_pct":0.1,"window_s":30.0}"#,
        )
        .unwrap();
        assert_eq!(old.probes, None);
    }

    #[test]
    fn timeline_phases_are_summed_per_phase_and_their_medians_taken() {
        let written = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let timeline = |seen_ms: u32, sandbox: f64| {
            json!({"starts": [
                {"marks": [{"phase": "seen", "at": "2023-11-14T22:13:20.000000000Z", "durationMs": 0.0}]},
                {"marks": [
                    {"phase": "seen", "at": format!("2023-11-14T22:13:20.{seen_ms:03}000000Z"), "durationMs": 0.0},
                    {"phase": "admitted", "durationMs": 1.0},
                    {"phase": "sandbox_ready", "durationMs": sandbox},
                    {"phase": "image_ready", "container": "a", "durationMs": 0.5},
                    {"phase": "image_ready", "container": "b", "durationMs": 0.25},
                ]},
            ]})
        };
        let a = phase_durations(&timeline(4, 70.0), written);
        assert_eq!(
            a,
            vec![
                ("file_source".to_string(), 4.0),
                ("admitted".to_string(), 1.0),
                ("sandbox_ready".to_string(), 70.0),
                ("image_ready".to_string(), 0.75),
            ]
        );
        let b = phase_durations(&timeline(8, 90.0), written);
        let c = phase_durations(&timeline(6, 80.0), written);
        let medians = phase_medians(&[a, b, c]);
        let get = |name: &str| medians.iter().find(|p| p.phase == name).map(|p| p.p50_ms);
        assert_eq!(medians[0].phase, "file_source");
        assert_eq!(get("file_source"), Some(6.0));
        assert_eq!(get("sandbox_ready"), Some(80.0));
        assert!(phase_durations(&json!({"kind": "Status"}), written).is_empty());
    }

    #[test]
    fn direct_puts_pooled_single_starts_beside_the_cri_calls() {
        let lat = |p: f64| Latency {
            p50_ms: p,
            p99_ms: p,
            max_ms: p,
        };
        let single = |task: f64, own: f64| Round {
            pods: 1,
            running: lat(task + 10.0),
            started: None,
            task_running: Some(lat(task)),
            total_s: 0.3,
            teardown_s: 0.3,
            phases: vec![
                PhaseP50 {
                    phase: "file_source".into(),
                    p50_ms: own,
                },
                PhaseP50 {
                    phase: "sandbox_ready".into(),
                    p50_ms: 100.0,
                },
            ],
        };
        let mut burst = single(0.0, 0.0);
        burst.pods = 30;
        burst.total_s = 2.2;
        let k = Report {
            label: "ferrolet-cri".into(),
            endpoint: "unix:///x.sock".into(),
            runtime: "rt 1".into(),
            rounds: vec![
                single(200.0, 5.0),
                single(240.0, 7.0),
                single(220.0, 6.0),
                burst,
            ],
            idle: None,
        };
        let rpc = |name: &str, samples: Vec<f64>| CriRpc {
            rpc: name.into(),
            samples_ms: samples,
        };
        let cri = vec![
            CriReport {
                pods: 2,
                concurrency: 1,
                rpcs: vec![
                    rpc("RunPodSandbox", vec![100.0, 120.0]),
                    rpc("CreateContainer", vec![10.0, 10.0]),
                    rpc("StartContainer", vec![60.0, 70.0]),
                ],
                setup_s: 0.4,
            },
            CriReport {
                pods: 1,
                concurrency: 1,
                rpcs: vec![
                    rpc("RunPodSandbox", vec![110.0]),
                    rpc("CreateContainer", vec![10.0]),
                    rpc("StartContainer", vec![65.0]),
                ],
                setup_s: 0.2,
            },
            CriReport {
                pods: 30,
                concurrency: 30,
                rpcs: Vec::new(),
                setup_s: 2.0,
            },
        ];
        let text = render_direct(&k, &cri);
        assert!(
            text.contains("N=1 (3 starts): manifest → app task running p50 220.0 ms"),
            "{text}"
        );
        assert!(text.contains("(3 direct starts)"), "{text}");
        // 110 + 10 + 65 = 185; 220 / 185 = 1.19; 35 ms over.
        assert!(text.contains("= 185.0 ms"), "{text}");
        assert!(text.contains("ratio 1.19 (goal <= 1.3: met)"), "{text}");
        assert!(text.contains("35.0 ms (goal <= 15 ms: NOT met)"), "{text}");
        assert!(
            text.contains(
                "own phases (source, admission, worker, volumes, image check) p50 6.0 ms"
            ),
            "{text}"
        );
        assert!(text.contains("N=30: all Running 2.20 s; direct all started 2.00 s ; ratio 1.10 (goal <= 1.1: met)"), "{text}");
    }

    #[test]
    fn only_this_runs_running_pods_count() {
        let list = json!({"kind": "PodList", "items": [
            {"metadata": {"labels": {RUN_LABEL: "r1", INDEX_LABEL: "0"}}, "status": {"phase": "Running"}},
            {"metadata": {"labels": {RUN_LABEL: "r1", INDEX_LABEL: "1"}}, "status": {"phase": "Pending"}},
            {"metadata": {"labels": {RUN_LABEL: "r2", INDEX_LABEL: "2"}}, "status": {"phase": "Running"}},
            {"metadata": {"name": "other"}, "status": {"phase": "Running"}},
            {"metadata": {"labels": {RUN_LABEL: "r1", INDEX_LABEL: "7"}}, "status": {"phase": "Running"}},
        ]});
        assert_eq!(running_indexes(&list, "r1"), vec![0, 7]);
        assert!(running_indexes(&json!({}), "r1").is_empty());
    }

    #[test]
    fn http_bodies_plain_and_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(http_body(plain).unwrap(), b"{}");
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=y\r\n\":1}\r\n0\r\n\r\n";
        assert_eq!(http_body(chunked).unwrap(), b"{\"a\":1}");
        assert!(http_body(b"HTTP/1.1 404 Not Found\r\n\r\nno").is_err());
        assert!(http_body(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(http_body(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
    }

    #[test]
    fn proc_fields_parse() {
        let status = "Name:\tferrolet\nVmHWM:\t  20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(10240));
        assert_eq!(status_kib(status, "VmHWM:"), Some(20480));
        assert_eq!(status_kib(status, "VmSwap:"), None);
        let stat = "123 (a b) c) S 1 123 123 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(parse_stat_ticks(stat), Some(300));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let l = latency(&(1..=100).map(Duration::from_millis).collect::<Vec<_>>());
        assert_eq!(l.p50_ms, 50.0);
        assert_eq!(l.p99_ms, 99.0);
        assert_eq!(l.max_ms, 100.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        assert_eq!(latency(&[Duration::from_millis(7)]).p99_ms, 7.0);
    }

    fn report(label: &str, p50: f64, total30: f64, cpu: f64, rss: f64) -> Report {
        let lat = |p| Latency {
            p50_ms: p,
            p99_ms: p * 2.0,
            max_ms: p * 2.0,
        };
        Report {
            label: label.into(),
            endpoint: "unix:///x.sock".into(),
            runtime: "rt 1".into(),
            rounds: vec![
                Round {
                    pods: 1,
                    running: lat(p50),
                    started: Some(lat(p50 / 2.0)),
                    task_running: Some(lat(p50 / 2.0 + 1.0)),
                    total_s: p50 / 1000.0,
                    teardown_s: 0.5,
                    phases: Vec::new(),
                },
                Round {
                    pods: 30,
                    running: lat(p50 * 3.0),
                    started: None,
                    task_running: None,
                    total_s: total30,
                    teardown_s: 2.0,
                    phases: Vec::new(),
                },
            ],
            idle: Some(Idle {
                pods: 100,
                rss_mib: rss,
                peak_rss_mib: rss + 1.0,
                cpu_pct: cpu,
                window_s: 30.0,
                probes: None,
                node: None,
            }),
        }
    }

    #[test]
    fn reports_survive_json() {
        let r = report("a", 500.0, 5.0, 0.5, 20.0);
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn compare_shows_both_and_judges_the_goals() {
        let t = render_compare(
            &report("ferrolet-cri", 500.0, 5.0, 0.5, 20.0),
            &report("containerd-cri", 1500.0, 12.0, 2.0, 50.0),
        );
        let p50 = t
            .lines()
            .find(|l| l.starts_with("N=1 Running p50"))
            .unwrap();
        assert!(p50.contains("500 ms") && p50.contains("1500 ms"), "{p50}");
        let started = t
            .lines()
            .find(|l| l.starts_with("N=30 started (CRI) p50"))
            .unwrap();
        assert!(started.trim_end().ends_with('-'), "{started}");
        for goal in ["N=1 p50", "N=30 all Running", "idle CPU", "RSS <= 40 MiB"] {
            // Goal lines are indented; the measures above them are not.
            let line = t
                .lines()
                .find(|l| l.starts_with("  ") && l.contains(goal))
                .unwrap();
            assert!(line.contains("met") && line.contains("NOT met"), "{line}");
            let first = line.find("met").unwrap();
            assert!(!line[..first].ends_with("NOT "), "{line}");
        }
    }

    fn overhead(kubelet: f64, runtime: Option<f64>, shims: f64, cpu: f64) -> NodeOverhead {
        NodeOverhead {
            kubelet_mib: kubelet,
            runtime_mib: runtime,
            containerd_mib: Some(40.0),
            shims: 100,
            shims_mib: shims,
            shim_programs: vec!["containerd-shim-runc-v2".into()],
            pause: 100,
            pause_mib: 30.0,
            shims_cpu_pct: cpu,
        }
    }

    #[test]
    fn node_overhead_is_judged_against_the_reference_or_its_absence() {
        let mut ours = report("ferrolet-cri", 500.0, 5.0, 0.5, 20.0);
        ours.idle.as_mut().unwrap().node = Some(overhead(20.0, Some(30.0), 180.0, 0.1));
        let mut go = report("go-kubelet", 900.0, 9.0, 2.0, 80.0);
        go.idle.as_mut().unwrap().node = Some(overhead(80.0, None, 1300.0, 0.2));
        // 20 + 30 + 40 + 180 + 30 = 300 against 80 + 40 + 1300 + 30 = 1450: 0.21.
        assert_eq!(
            ours.idle
                .as_ref()
                .unwrap()
                .node
                .as_ref()
                .unwrap()
                .total_mib(),
            300.0
        );
        let t = render_node(&ours, &Ok(go.clone()));
        assert!(t.contains("ratio 0.21: NOT met"), "{t}");
        assert!(t.contains("1.80 per pod"), "{t}");
        let total = t.lines().find(|l| l.starts_with("total")).unwrap();
        assert!(
            total.contains("300.0 MiB") && total.contains("1450.0 MiB"),
            "{total}"
        );
        let cri = t.lines().find(|l| l.starts_with("CRI runtime")).unwrap();
        assert!(cri.trim_end().ends_with('-'), "{cri}");
        go.idle.as_mut().unwrap().node = Some(overhead(80.0, None, 1400.0, 0.2));
        assert!(render_node(&ours, &Ok(go)).contains(": met"));
        let absent = render_node(&ours, &Err("BENCH_GO_KUBELET unset".into()));
        assert!(
            absent.contains("against the reference, absent: BENCH_GO_KUBELET unset"),
            "{absent}"
        );
        assert!(
            absent.contains("not measured: the reference is absent (BENCH_GO_KUBELET unset)"),
            "{absent}"
        );
        // The overhead joins the idle line and the comparison.
        let idle = render_idle("x", ours.idle.as_ref().unwrap());
        assert!(idle.contains("node overhead with 100 pods"), "{idle}");
        let c = render_compare(&ours, &report("containerd-cri", 1500.0, 12.0, 2.0, 50.0));
        let line = c.lines().find(|l| l.starts_with("node overhead")).unwrap();
        assert!(
            line.contains("300.0 MiB") && line.trim_end().ends_with('-'),
            "{line}"
        );
        let back: Report = serde_json::from_str(&serde_json::to_string(&ours).unwrap()).unwrap();
        assert_eq!(back, ours);
    }

    #[test]
    fn missing_measures_are_reported_as_such() {
        let mut a = report("a", 500.0, 5.0, 0.5, 20.0);
        a.idle = None;
        a.rounds.truncate(1);
        let t = render_compare(&a, &report("b", 500.0, 5.0, 0.5, 20.0));
        let line = t
            .lines()
            .find(|l| l.contains("N=30 all Running <="))
            .unwrap();
        assert!(line.contains("not measured"), "{line}");
    }
}
