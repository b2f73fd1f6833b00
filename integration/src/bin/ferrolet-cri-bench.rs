//! `ferrolet-cri-bench`: a pod lifecycle benchmark for any CRI endpoint (ferrolet-cri, containerd's
//! CRI plugin, ...). It runs N sandboxes with one container each, or `--containers` each
//! (RunPodSandbox → CreateContainer → StartContainer), samples the runtime's RSS with all N
//! running, and that of the shims serving the pods (with their pause processes; with
//! `--idle-s`, their CPU over an idle window too), then tears them down (StopContainer →
//! RemoveContainer → StopPodSandbox → RemovePodSandbox), and reports p50/p99 per RPC, wall
//! time and memory. `compare A.json B.json` puts two runs side by side; `merge` pools
//! the reports of several short runs of one runtime (turns taken with another runtime, so that
//! both meet the same drift of the machine); `clean` removes what an interrupted run might have
//! left.
//!
//! Everything a run creates carries the label `ferrolet.bench/run=<run id>`, so it is removed
//! even after an error or Ctrl-C (a second Ctrl-C exits at once, without cleaning up).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};
use ferrolet_integration::bench::processes::{self, PAUSE_COMM, Shim};
use ferrolet_integration::bench::{
    deadline, ensure_image, install_signal_thread, parse_stat_ticks, percentile, run_id,
};
use ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient;
use ferrolet_proto::cri::{
    ContainerConfig, ContainerFilter, ContainerMetadata, ContainerState, ContainerStateValue,
    ContainerStatusRequest, CreateContainerRequest, ImageSpec, LinuxContainerConfig,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext,
    ListContainersRequest, ListPodSandboxRequest, NamespaceMode, NamespaceOption, PodSandboxConfig,
    PodSandboxMetadata, PodSandboxStatusRequest, RemoveContainerRequest, RemovePodSandboxRequest,
    RunPodSandboxRequest, SecurityProfile, StartContainerRequest, StopContainerRequest,
    StopPodSandboxRequest, VersionRequest, security_profile::ProfileType,
};
use ferrolet_proto::transport;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use tonic::transport::Channel;

/// Label on every sandbox and container a run creates; its value is the run id.
const RUN_LABEL: &str = "ferrolet.bench/run";
/// Kubernetes namespace of the benchmark's pods.
const POD_NAMESPACE: &str = "ferrolet-bench";
/// A long sleep that still ends at once on SIGTERM: as PID 1 of its pid namespace, a plain
/// `sleep` would ignore SIGTERM and every StopContainer would wait for the full timeout.
const DEFAULT_COMMAND: &str = "trap 'exit 0' TERM; sleep 1000000 & wait";

/// The timed RPCs, in lifecycle order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Rpc {
    RunPodSandbox,
    CreateContainer,
    StartContainer,
    ContainerStatus,
    Version,
    StopContainer,
    RemoveContainer,
    StopPodSandbox,
    RemovePodSandbox,
}

impl Rpc {
    const ALL: [Rpc; 9] = [
        Rpc::RunPodSandbox,
        Rpc::CreateContainer,
        Rpc::StartContainer,
        Rpc::ContainerStatus,
        Rpc::Version,
        Rpc::StopContainer,
        Rpc::RemoveContainer,
        Rpc::StopPodSandbox,
        Rpc::RemovePodSandbox,
    ];

    fn name(self) -> &'static str {
        match self {
            Rpc::RunPodSandbox => "RunPodSandbox",
            Rpc::CreateContainer => "CreateContainer",
            Rpc::StartContainer => "StartContainer",
            Rpc::ContainerStatus => "ContainerStatus",
            Rpc::Version => "Version",
            Rpc::StopContainer => "StopContainer",
            Rpc::RemoveContainer => "RemoveContainer",
            Rpc::StopPodSandbox => "StopPodSandbox",
            Rpc::RemovePodSandbox => "RemovePodSandbox",
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "ferrolet-cri-bench",
    about = "Pod lifecycle benchmark for a CRI endpoint: N sandboxes with one container each",
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
    /// Print the p50 ratios A/B per RPC of two `--json` reports.
    Compare {
        /// Report of the runtime under test (e.g. ferrolet-cri).
        a: PathBuf,
        /// Report of the reference runtime (e.g. containerd's CRI).
        b: PathBuf,
        /// Also check A's RSS with all pods running against this limit, MiB.
        #[arg(long)]
        max_rss_mib: Option<f64>,
    },
    /// Print one `--json` report made of the reports of several runs of one runtime: samples
    /// pooled, figures recomputed (the pooled table goes to stderr).
    Merge {
        /// The runs' reports, in order (the first gives the label, endpoint and idle RSS).
        #[arg(required = true)]
        reports: Vec<PathBuf>,
    },
    /// Stop and remove the sandboxes and containers benchmark runs left behind.
    ///
    /// Not while a run is going on: its pods would be removed under it.
    Clean(CleanArgs),
}

/// Flags of a benchmark run.
#[derive(Args, Debug, Clone)]
struct RunArgs {
    /// CRI endpoint (runtime and image service), unix:///path.
    #[arg(long, default_value = "unix:///run/ferrolet/cri.sock")]
    endpoint: String,
    /// Number of pods (one sandbox and `--containers` containers each).
    #[arg(short = 'n', long = "pods", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pods: u32,
    /// Containers per pod, created and started one after the other (the first is `bench`,
    /// the others `bench-1`, `bench-2`, ...).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    containers: u32,
    /// The socket of the containerd under the runtime: only shims carrying it (`-address` on
    /// their command line) are sampled. Without it, a shim of any containerd serving one of
    /// the run's sandboxes or containers is.
    #[arg(long)]
    containerd_address: Option<String>,
    /// With all pods running, an idle window over which the CPU of the shims, their pause
    /// processes and the runtime is measured, seconds (0: none).
    #[arg(long, default_value_t = 0)]
    idle_s: u64,
    /// Container image; pulled through the ImageService first if the runtime lacks it.
    #[arg(long, default_value = "127.0.0.1:5000/ferrolet/busybox:1")]
    image: String,
    /// Shell command the container runs (`sh -c`); it must keep running until stopped.
    #[arg(long, default_value = DEFAULT_COMMAND)]
    command: String,
    /// Runtime process whose RSS is sampled (repeatable; summed).
    #[arg(long = "pid")]
    pids: Vec<u32>,
    /// Runtime process name (/proc/PID/comm) whose RSS is sampled; every match is summed.
    #[arg(long = "process")]
    processes: Vec<String>,
    /// A process the runtime relies on (ferrolet-cri's containerd), reported on its own line.
    #[arg(long)]
    backend_pid: Option<u32>,
    /// Name of this run in the table and the JSON (default: the runtime's name).
    #[arg(long)]
    label: Option<String>,
    /// Print the report as JSON on stdout (the table then goes to stderr).
    #[arg(long)]
    json: bool,
    /// With all pods running, check each sandbox has a distinct IP the host can ping.
    #[arg(long)]
    cni_check: bool,
    /// Pods driven at once (1 = strictly sequential RPCs, the cleanest latencies).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    concurrency: u32,
    /// StopContainer's grace period, seconds.
    #[arg(long, default_value_t = 30)]
    stop_timeout: i64,
    /// Client-side deadline of each RPC, seconds.
    #[arg(long, default_value_t = 120)]
    rpc_timeout: u64,
    /// Pause with all pods running before the RSS sample, milliseconds.
    #[arg(long, default_value_t = 2000)]
    settle_ms: u64,
    /// Directory for the sandboxes' log directories (a fresh temp dir inside it is used).
    #[arg(long, default_value = "/tmp")]
    log_root: PathBuf,
    /// Give each sandbox the runtime's default seccomp profile, as the Go kubelet (and
    /// ferrolet) always does for the pause container: its filter is compiled at every pod
    /// start, so kubelet-driven starts are timed against the same requests.
    #[arg(long)]
    sandbox_seccomp: bool,
    /// Give each pod the namespace options the Go kubelet (and ferrolet) sends for a pod
    /// without shareProcessNamespace: a PID namespace per container, network and IPC shared
    /// (the sandbox's and the container's options). Without it the options are left unset,
    /// which CRI reads as everything shared by the pod, as crictl's examples do. ferrolet-cri
    /// runs such pods without a pause process; containerd's CRI runs one for every pod.
    #[arg(long)]
    kubelet_namespaces: bool,
}

/// Flags of `clean`.
#[derive(Args, Debug)]
struct CleanArgs {
    /// CRI endpoint, unix:///path.
    #[arg(long, default_value = "unix:///run/ferrolet/cri.sock")]
    endpoint: String,
    /// Remove every sandbox and container of the endpoint, not only the benchmark's.
    #[arg(long)]
    all: bool,
    /// Only this run's objects (its id, from the `ferrolet.bench/run` label).
    #[arg(long, conflicts_with = "all")]
    run: Option<String>,
    /// Client-side deadline of each RPC, seconds.
    #[arg(long, default_value_t = 120)]
    rpc_timeout: u64,
}

/// Latency summary of one RPC.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct RpcStats {
    rpc: String,
    n: usize,
    p50_ms: f64,
    p99_ms: f64,
    mean_ms: f64,
    max_ms: f64,
    samples_ms: Vec<f64>,
}

/// Memory of a set of processes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Memory {
    /// The processes sampled.
    pids: Vec<u32>,
    /// Their total RSS before the first pod, MiB.
    idle_mib: f64,
    /// Their total RSS with all pods running, MiB.
    running_mib: f64,
    /// CPU time they used during the run (user + system), seconds.
    cpu_s: f64,
    /// Their CPU over the idle window (`--idle-s`), percent of one core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idle_cpu_pct: Option<f64>,
}

/// The shims serving the run's pods, and the pause processes under them, sampled with all
/// pods running.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
struct Shims {
    count: usize,
    total_mib: f64,
    /// The pods they serve (the run's: a merged report's sum of its turns').
    #[serde(default)]
    pods: u32,
    /// Their programs' names (`containerd-shim-runc-v2`, `containerd-shim-ferrolet-v1`).
    #[serde(default)]
    programs: Vec<String>,
    /// Pause processes under them (a sandbox with a pause container has one).
    #[serde(default)]
    pause_count: usize,
    #[serde(default)]
    pause_mib: f64,
    /// The shims' CPU over the idle window (`--idle-s`), percent of one core; the pause
    /// processes' apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idle_cpu_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pause_idle_cpu_pct: Option<f64>,
    /// That window, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idle_window_s: Option<f64>,
}

impl Shims {
    /// The shims' RSS per pod, MiB (None when no pod was sampled).
    fn per_pod_mib(&self) -> Option<f64> {
        (self.pods > 0).then(|| self.total_mib / f64::from(self.pods))
    }
}

/// Everything one run measured; `--json` prints it, `compare` reads it back.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Report {
    label: String,
    endpoint: String,
    runtime: String,
    pods: u32,
    /// Only in a merged report, whose pods ran in turns: the most pods that ran at once (its
    /// largest turn's), so that its RSS figures are not read as sampled with all `pods`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    running_pods: Option<u32>,
    concurrency: u32,
    /// Containers per pod (reports written before `--containers` had one).
    #[serde(default = "one")]
    containers: u32,
    image: String,
    rpcs: Vec<RpcStats>,
    wall_s: f64,
    setup_s: f64,
    teardown_s: f64,
    runtime_memory: Option<Memory>,
    /// `--backend-pid`'s memory, when given.
    backend_memory: Option<Memory>,
    shims: Option<Shims>,
    cni_check: Option<String>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Compare { a, b, max_rss_mib }) => {
            let a = read_report(&a)?;
            let b = read_report(&b)?;
            print!("{}", render_compare(&a, &b, max_rss_mib));
            Ok(())
        }
        Some(Command::Merge { reports }) => {
            let reports = reports
                .iter()
                .map(|p| read_report(p))
                .collect::<Result<Vec<_>>>()?;
            let merged = merge_reports(reports)?;
            eprint!("{}", render_table(&merged));
            println!("{}", serde_json::to_string_pretty(&merged)?);
            Ok(())
        }
        Some(Command::Clean(args)) => runtime()?.block_on(clean(args)),
        None => {
            let cancel = install_signal_thread("removing what this run created")?;
            let result = runtime()?.block_on(run(cli.run, cancel));
            if let Err(e) = &result
                && e.chain().any(|c| c.is::<Interrupted>())
            {
                eprintln!("interrupted: what this run created has been removed");
                std::process::exit(130);
            }
            result
        }
    }
}

fn one() -> u32 {
    1
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn read_report(path: &Path) -> Result<Report> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Pools several runs of one runtime into one report that stands for all their pods, as if
/// they had been one run whose pods ran in turns:
/// - per RPC, the samples of every run, p50/p99/mean/max recomputed from them (nearest rank,
///   as for a run: the p50 of the pooled samples, not an average of the runs' p50s);
/// - pods, wall, setup and teardown time summed, like the samples;
/// - memory (the runtime's and the backend's): the largest running RSS, since a peak is what
///   a memory limit has to hold; the first run's idle RSS, since a later run's "idle" still
///   holds what the earlier runs' pods made the process allocate; CPU time summed, the work
///   for all the pods, like the summed wall time; the pids of all runs. A run without a
///   sample leaves the others' figures as they are;
/// - shims summed (count, RSS, pause processes, idle CPU): each run sampled its own pods'
///   shims, so the sum covers every pod;
/// - the CNI checks' distinct verdicts joined;
/// - `running_pods`: the largest run's pods, as the RSS was sampled with at most that many.
///
/// Runs of different labels, runtimes, images, concurrency or containers per pod are refused: pooling them would
/// mix what a comparison is meant to set apart. A single report comes back as it is.
fn merge_reports(reports: Vec<Report>) -> Result<Report> {
    let mut reports = reports.into_iter();
    let mut merged = reports
        .next()
        .ok_or_else(|| anyhow!("no report to merge"))?;
    let mut largest_run = merged.running_pods.unwrap_or(merged.pods);
    for (i, r) in reports.enumerate() {
        let what = |r: &Report| {
            format!(
                "{} ({}, image {}, concurrency {}, {} containers a pod)",
                r.label, r.runtime, r.image, r.concurrency, r.containers
            )
        };
        if (&r.label, &r.runtime, &r.image, r.concurrency, r.containers)
            != (
                &merged.label,
                &merged.runtime,
                &merged.image,
                merged.concurrency,
                merged.containers,
            )
        {
            bail!(
                "report {} is of {}, the first of {}: only runs of one runtime merge",
                i + 2,
                what(&r),
                what(&merged)
            );
        }
        for x in r.rpcs {
            match merged.rpcs.iter_mut().find(|m| m.rpc == x.rpc) {
                Some(m) => {
                    let mut samples = std::mem::take(&mut m.samples_ms);
                    samples.extend(x.samples_ms);
                    *m = RpcStats::from_ms(&x.rpc, samples);
                }
                None => merged.rpcs.push(x),
            }
        }
        largest_run = largest_run.max(r.running_pods.unwrap_or(r.pods));
        merged.running_pods = Some(largest_run);
        merged.pods = merged.pods.saturating_add(r.pods);
        merged.wall_s += r.wall_s;
        merged.setup_s += r.setup_s;
        merged.teardown_s += r.teardown_s;
        merged.runtime_memory = merge_memory(merged.runtime_memory.take(), r.runtime_memory);
        merged.backend_memory = merge_memory(merged.backend_memory.take(), r.backend_memory);
        merged.shims = match (merged.shims.take(), r.shims) {
            (Some(a), Some(b)) => Some(merge_shims(a, b)),
            (a, b) => a.or(b),
        };
        merged.cni_check = match (merged.cni_check.take(), r.cni_check) {
            (Some(a), Some(b)) if !a.split("; ").any(|x| x == b) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
    }
    Ok(merged)
}

/// Two runs' shims: each sampled its own pods' shims, so counts, RSS and idle CPU add up
/// (the idle CPU then stands for all the pods' shims over one window, each run's window
/// being as long).
fn merge_shims(a: Shims, b: Shims) -> Shims {
    let add = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => Some(x + y),
        (x, y) => x.or(y),
    };
    let mut programs = a.programs;
    programs.extend(b.programs);
    programs.sort();
    programs.dedup();
    Shims {
        count: a.count + b.count,
        total_mib: a.total_mib + b.total_mib,
        pods: a.pods + b.pods,
        programs,
        pause_count: a.pause_count + b.pause_count,
        pause_mib: a.pause_mib + b.pause_mib,
        idle_cpu_pct: add(a.idle_cpu_pct, b.idle_cpu_pct),
        pause_idle_cpu_pct: add(a.pause_idle_cpu_pct, b.pause_idle_cpu_pct),
        idle_window_s: a.idle_window_s.or(b.idle_window_s),
    }
}

/// One process set's memory over two runs, as `merge_reports` describes; of two idle
/// windows' CPU the larger (the same processes, measured twice).
fn merge_memory(first: Option<Memory>, next: Option<Memory>) -> Option<Memory> {
    match (first, next) {
        (Some(mut a), Some(b)) => {
            a.running_mib = a.running_mib.max(b.running_mib);
            a.idle_cpu_pct = match (a.idle_cpu_pct, b.idle_cpu_pct) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            };
            a.cpu_s += b.cpu_s;
            a.pids.extend(b.pids);
            a.pids.sort_unstable();
            a.pids.dedup();
            Some(a)
        }
        (a, b) => a.or(b),
    }
}

/// The run was interrupted by a signal.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
struct Interrupted;

/// What a run has created and not yet removed, for cleanup after a failure.
#[derive(Default)]
struct Created {
    sandboxes: Vec<String>,
    containers: Vec<String>,
}

/// State shared by the pods of one run.
struct Bench {
    rt: RuntimeServiceClient<Channel>,
    run_id: String,
    image_ref: String,
    image_name: String,
    command: String,
    stop_timeout: i64,
    rpc_timeout: Duration,
    log_dir: PathBuf,
    /// `--sandbox-seccomp`.
    sandbox_seccomp: bool,
    /// `--kubelet-namespaces`.
    kubelet_namespaces: bool,
    /// `--containers`.
    containers: u32,
    cancel: Arc<AtomicBool>,
    timings: Mutex<BTreeMap<Rpc, Vec<Duration>>>,
    created: Mutex<Created>,
}

/// One running pod.
struct Pod {
    sandbox: String,
    /// Its containers, in the order they were started.
    containers: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere cannot leave these plain collections inconsistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Bench {
    fn check(&self) -> Result<()> {
        if self.cancel.load(Ordering::SeqCst) {
            return Err(Interrupted.into());
        }
        Ok(())
    }

    /// Runs one RPC under the deadline and records its latency if it succeeded.
    async fn timed<T>(
        &self,
        rpc: Rpc,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T> {
        let start = Instant::now();
        let out = deadline(self.rpc_timeout, rpc.name(), call).await?;
        lock(&self.timings)
            .entry(rpc)
            .or_default()
            .push(start.elapsed());
        Ok(out)
    }

    fn sandbox_config(&self, index: u32) -> PodSandboxConfig {
        let name = format!("bench-{}-{index}", self.run_id);
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.clone(),
                uid: format!("{}-{index}", self.run_id),
                namespace: POD_NAMESPACE.into(),
                attempt: 0,
            }),
            hostname: name,
            log_directory: self.log_dir.join(index.to_string()).display().to_string(),
            labels: run_labels(&self.run_id),
            // cgroup_parent unset: each runtime puts the pod where it puts pods by default.
            linux: Some(LinuxPodSandboxConfig {
                security_context: (self.sandbox_seccomp || self.kubelet_namespaces).then(|| {
                    LinuxSandboxSecurityContext {
                        seccomp: self.sandbox_seccomp.then(|| SecurityProfile {
                            profile_type: ProfileType::RuntimeDefault as i32,
                            localhost_ref: String::new(),
                        }),
                        namespace_options: self.namespace_options(),
                        ..Default::default()
                    }
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// `--kubelet-namespaces`' options, else none.
    fn namespace_options(&self) -> Option<NamespaceOption> {
        self.kubelet_namespaces.then(|| NamespaceOption {
            network: NamespaceMode::Pod as i32,
            pid: NamespaceMode::Container as i32,
            ipc: NamespaceMode::Pod as i32,
            ..Default::default()
        })
    }

    /// The pod's `index`th container (0: `bench`, then `bench-1`, ...).
    fn container_config(&self, index: u32) -> ContainerConfig {
        let name = match index {
            0 => "bench".to_string(),
            i => format!("bench-{i}"),
        };
        ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: name.clone(),
                attempt: 0,
            }),
            // As the kubelet does: the image id, with the name the user wrote.
            image: Some(ImageSpec {
                image: self.image_ref.clone(),
                user_specified_image: self.image_name.clone(),
                ..Default::default()
            }),
            command: vec!["sh".into(), "-c".into(), self.command.clone()],
            log_path: format!("{name}.log"),
            labels: run_labels(&self.run_id),
            linux: self.kubelet_namespaces.then(|| LinuxContainerConfig {
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: self.namespace_options(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    async fn start_pod(&self, index: u32) -> Result<Pod> {
        self.check()?;
        let config = self.sandbox_config(index);
        tokio::fs::create_dir_all(&config.log_directory)
            .await
            .with_context(|| format!("creating {}", config.log_directory))?;
        let mut rt = self.rt.clone();
        let sandbox = self
            .timed(
                Rpc::RunPodSandbox,
                rt.run_pod_sandbox(RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: String::new(),
                }),
            )
            .await?
            .pod_sandbox_id;
        lock(&self.created).sandboxes.push(sandbox.clone());
        let mut containers = Vec::new();
        for k in 0..self.containers {
            self.check()?;
            let container = self
                .timed(
                    Rpc::CreateContainer,
                    rt.create_container(CreateContainerRequest {
                        pod_sandbox_id: sandbox.clone(),
                        config: Some(self.container_config(k)),
                        sandbox_config: Some(config.clone()),
                    }),
                )
                .await
                .with_context(|| format!("in sandbox {sandbox}"))?
                .container_id;
            lock(&self.created).containers.push(container.clone());
            self.check()?;
            self.timed(
                Rpc::StartContainer,
                rt.start_container(StartContainerRequest {
                    container_id: container.clone(),
                }),
            )
            .await
            .with_context(|| format!("container {container}"))?;
            // The calls a kubelet makes most once pods run: cheap on the runtime, so they show
            // what the transport costs (the :authority rewrite, for one).
            self.timed(
                Rpc::ContainerStatus,
                rt.container_status(ContainerStatusRequest {
                    container_id: container.clone(),
                    verbose: false,
                }),
            )
            .await
            .with_context(|| format!("container {container}"))?;
            containers.push(container);
        }
        self.timed(Rpc::Version, rt.version(VersionRequest::default()))
            .await?;
        Ok(Pod {
            sandbox,
            containers,
        })
    }

    /// Tears one pod down; a failure is reported but the pod stays in `created` for cleanup.
    async fn stop_pod(&self, pod: &Pod) -> Result<()> {
        let mut rt = self.rt.clone();
        let sandbox = &pod.sandbox;
        for container in &pod.containers {
            self.timed(
                Rpc::StopContainer,
                rt.stop_container(StopContainerRequest {
                    container_id: container.clone(),
                    timeout: self.stop_timeout,
                }),
            )
            .await
            .with_context(|| format!("container {container}"))?;
            self.timed(
                Rpc::RemoveContainer,
                rt.remove_container(RemoveContainerRequest {
                    container_id: container.clone(),
                }),
            )
            .await
            .with_context(|| format!("container {container}"))?;
            lock(&self.created).containers.retain(|c| c != container);
        }
        self.timed(
            Rpc::StopPodSandbox,
            rt.stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: sandbox.clone(),
            }),
        )
        .await
        .with_context(|| format!("sandbox {sandbox}"))?;
        self.timed(
            Rpc::RemovePodSandbox,
            rt.remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: sandbox.clone(),
            }),
        )
        .await
        .with_context(|| format!("sandbox {sandbox}"))?;
        lock(&self.created).sandboxes.retain(|s| s != sandbox);
        Ok(())
    }

    /// Best-effort removal of everything the run created, then of anything still carrying its
    /// label (an RPC that timed out on our side may still have created something).
    async fn cleanup(&self) -> usize {
        let Created {
            sandboxes,
            containers,
        } = std::mem::take(&mut *lock(&self.created));
        let mut rt = self.rt.clone();
        let t = self.rpc_timeout;
        let mut removed = 0;
        for id in containers {
            remove_container(&mut rt, t, &id).await;
            removed += 1;
        }
        for id in sandboxes {
            remove_sandbox(&mut rt, t, &id).await;
            removed += 1;
        }
        removed
            + sweep(&mut rt, t, Selector::Run(&self.run_id))
                .await
                .unwrap_or(0)
    }

    /// Every container of the run is running (a command that exits would make the figures lie).
    async fn check_running(&self, want: usize) -> Result<()> {
        let mut rt = self.rt.clone();
        let list = deadline(
            self.rpc_timeout,
            "ListContainers",
            rt.list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    state: Some(ContainerStateValue {
                        state: ContainerState::ContainerRunning as i32,
                    }),
                    label_selector: run_labels(&self.run_id),
                    ..Default::default()
                }),
            }),
        )
        .await?;
        let running = list.containers.len();
        if running != want {
            bail!("only {running} of {want} containers are running: does --command keep running?");
        }
        Ok(())
    }

    /// Each sandbox has an IP of its own, and the host reaches it.
    async fn cni_check(&self, pods: &[Pod]) -> Result<String> {
        let mut rt = self.rt.clone();
        let mut ips = Vec::new();
        for pod in pods {
            let status = deadline(
                self.rpc_timeout,
                "PodSandboxStatus",
                rt.pod_sandbox_status(PodSandboxStatusRequest {
                    pod_sandbox_id: pod.sandbox.clone(),
                    verbose: false,
                }),
            )
            .await?;
            let ip = status
                .status
                .and_then(|s| s.network)
                .map(|n| n.ip)
                .unwrap_or_default();
            if ip.is_empty() {
                bail!("sandbox {} has no IP", pod.sandbox);
            }
            ips.push(ip);
        }
        let distinct: HashSet<&String> = ips.iter().collect();
        if distinct.len() != ips.len() {
            bail!("sandboxes share IPs: {ips:?}");
        }
        let busybox = Path::new("/bin/busybox");
        if !busybox.exists() {
            return Ok(format!(
                "{} distinct IPs (no /bin/busybox to ping them)",
                ips.len()
            ));
        }
        for ip in &ips {
            let out = tokio::process::Command::new(busybox)
                .args(["ping", "-c", "1", "-W", "2", ip])
                .output()
                .await
                .context("running busybox ping")?;
            if !out.status.success() {
                bail!(
                    "the host cannot ping pod IP {ip}: {}",
                    String::from_utf8_lossy(&out.stdout).trim()
                );
            }
        }
        Ok(format!("{} distinct IPs, all answer ping", ips.len()))
    }
}

fn run_labels(run_id: &str) -> HashMap<String, String> {
    HashMap::from([(RUN_LABEL.to_string(), run_id.to_string())])
}

async fn remove_container(rt: &mut RuntimeServiceClient<Channel>, t: Duration, id: &str) {
    // Timeout 0: cleanup kills at once rather than waiting out a grace period.
    let stop = rt.stop_container(StopContainerRequest {
        container_id: id.into(),
        timeout: 0,
    });
    if let Err(e) = deadline(t, "StopContainer", stop).await {
        eprintln!("cleanup: container {id}: {e:#}");
    }
    let remove = rt.remove_container(RemoveContainerRequest {
        container_id: id.into(),
    });
    if let Err(e) = deadline(t, "RemoveContainer", remove).await {
        eprintln!("cleanup: container {id}: {e:#}");
    }
}

async fn remove_sandbox(rt: &mut RuntimeServiceClient<Channel>, t: Duration, id: &str) {
    let stop = rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    });
    if let Err(e) = deadline(t, "StopPodSandbox", stop).await {
        eprintln!("cleanup: sandbox {id}: {e:#}");
    }
    let remove = rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    });
    if let Err(e) = deadline(t, "RemovePodSandbox", remove).await {
        eprintln!("cleanup: sandbox {id}: {e:#}");
    }
}

/// Which objects a sweep removes.
#[derive(Clone, Copy, Debug)]
enum Selector<'a> {
    /// Those of one run.
    Run(&'a str),
    /// Those of any benchmark run.
    AnyRun,
    /// Everything.
    All,
}

impl Selector<'_> {
    fn matches(self, labels: &HashMap<String, String>) -> bool {
        match self {
            Selector::Run(id) => labels.get(RUN_LABEL).is_some_and(|v| v == id),
            Selector::AnyRun => labels.contains_key(RUN_LABEL),
            Selector::All => true,
        }
    }
}

/// Removes the containers, then the sandboxes, the selector matches; returns how many.
async fn sweep(
    rt: &mut RuntimeServiceClient<Channel>,
    t: Duration,
    selector: Selector<'_>,
) -> Result<usize> {
    let containers = deadline(
        t,
        "ListContainers",
        rt.list_containers(ListContainersRequest { filter: None }),
    )
    .await?
    .containers;
    let sandboxes = deadline(
        t,
        "ListPodSandbox",
        rt.list_pod_sandbox(ListPodSandboxRequest { filter: None }),
    )
    .await?
    .items;
    let mut removed = 0;
    for c in containers.iter().filter(|c| selector.matches(&c.labels)) {
        remove_container(rt, t, &c.id).await;
        removed += 1;
    }
    for s in sandboxes.iter().filter(|s| selector.matches(&s.labels)) {
        remove_sandbox(rt, t, &s.id).await;
        removed += 1;
    }
    Ok(removed)
}

async fn clean(args: CleanArgs) -> Result<()> {
    let channel = transport::connect(&args.endpoint)
        .await
        .with_context(|| format!("connecting to {}", args.endpoint))?;
    let mut rt = RuntimeServiceClient::new(channel);
    let selector = match (&args.run, args.all) {
        (Some(id), _) => Selector::Run(id),
        (None, true) => Selector::All,
        (None, false) => Selector::AnyRun,
    };
    let t = Duration::from_secs(args.rpc_timeout);
    let removed = sweep(&mut rt, t, selector).await?;
    // Whatever is still listed now could not be removed.
    let left = sweep_count(&mut rt, t, selector).await?;
    eprintln!(
        "{}: removed {removed} sandboxes/containers, {left} left",
        args.endpoint
    );
    if left > 0 {
        bail!("{left} sandboxes/containers could not be removed");
    }
    Ok(())
}

async fn sweep_count(
    rt: &mut RuntimeServiceClient<Channel>,
    t: Duration,
    selector: Selector<'_>,
) -> Result<usize> {
    let containers = deadline(
        t,
        "ListContainers",
        rt.list_containers(ListContainersRequest { filter: None }),
    )
    .await?
    .containers;
    let sandboxes = deadline(
        t,
        "ListPodSandbox",
        rt.list_pod_sandbox(ListPodSandboxRequest { filter: None }),
    )
    .await?
    .items;
    Ok(containers
        .iter()
        .filter(|c| selector.matches(&c.labels))
        .count()
        + sandboxes
            .iter()
            .filter(|s| selector.matches(&s.labels))
            .count())
}

async fn run(args: RunArgs, cancel: Arc<AtomicBool>) -> Result<()> {
    let channel = transport::connect(&args.endpoint)
        .await
        .with_context(|| format!("connecting to {}", args.endpoint))?;
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let t = Duration::from_secs(args.rpc_timeout);
    let version = deadline(
        t,
        "Version",
        rt.version(VersionRequest {
            version: String::new(),
        }),
    )
    .await?;
    let runtime = format!("{} {}", version.runtime_name, version.runtime_version);
    let label = args
        .label
        .clone()
        .unwrap_or_else(|| version.runtime_name.clone());
    let image_ref = ensure_image(channel, &args.image, t).await?;
    let pids = resolve_pids(&args.pids, &args.processes)?;
    let backend: Vec<u32> = args.backend_pid.into_iter().collect();
    let idle = sample_rss(&pids).await;
    let backend_idle = sample_rss(&backend).await;
    let cpu_before = cpu_seconds(&pids);
    let backend_cpu_before = cpu_seconds(&backend);

    let run_id = run_id()?;
    let log_dir = tempfile::Builder::new()
        .prefix("ferrolet-cri-bench-")
        .tempdir_in(&args.log_root)
        .with_context(|| format!("creating a log dir in {}", args.log_root.display()))?;
    let bench = Bench {
        rt,
        run_id: run_id.clone(),
        image_ref,
        image_name: args.image.clone(),
        command: args.command.clone(),
        stop_timeout: args.stop_timeout,
        rpc_timeout: t,
        log_dir: log_dir.path().to_path_buf(),
        sandbox_seccomp: args.sandbox_seccomp,
        kubelet_namespaces: args.kubelet_namespaces,
        containers: args.containers,
        cancel,
        timings: Mutex::new(BTreeMap::new()),
        created: Mutex::new(Created::default()),
    };
    eprintln!(
        "{label}: {runtime} at {}, run {run_id}: {} pods of {} containers, concurrency {}, image {}",
        args.endpoint, args.pods, args.containers, args.concurrency, args.image
    );

    let outcome = measure(&bench, &args, &pids, &backend).await;
    // Removal on failure or interruption, and a final sweep either way.
    let removed = bench.cleanup().await;
    let leftover = sweep_count(&mut bench.rt.clone(), t, Selector::Run(&run_id)).await;
    let still = |n: usize| {
        format!(
            "{n} sandboxes/containers of run {run_id} are still listed: try `ferrolet-cri-bench clean --run {run_id} --endpoint {}`",
            args.endpoint
        )
    };
    let measured = match outcome {
        Ok(m) => m,
        Err(e) => {
            if let Ok(n @ 1..) = leftover {
                eprintln!("{}", still(n));
            }
            return Err(e);
        }
    };
    match leftover? {
        0 => {}
        n => bail!(still(n)),
    }
    if removed > 0 {
        bail!("teardown left {removed} sandboxes/containers behind (now removed)");
    }

    let timings = std::mem::take(&mut *lock(&bench.timings));
    let rpcs = Rpc::ALL
        .iter()
        .filter_map(|rpc| timings.get(rpc).map(|d| RpcStats::new(rpc.name(), d)))
        .collect();
    let report = Report {
        label,
        endpoint: args.endpoint.clone(),
        runtime,
        pods: args.pods,
        running_pods: None,
        concurrency: args.concurrency,
        containers: args.containers,
        image: args.image.clone(),
        rpcs,
        wall_s: (measured.setup + measured.teardown).as_secs_f64(),
        setup_s: measured.setup.as_secs_f64(),
        teardown_s: measured.teardown.as_secs_f64(),
        runtime_memory: memory(
            &pids,
            idle,
            measured.running_rss,
            cpu_before,
            measured.runtime_idle_cpu,
        ),
        backend_memory: memory(
            &backend,
            backend_idle,
            measured.backend_rss,
            backend_cpu_before,
            measured.backend_idle_cpu,
        ),
        shims: measured.shims,
        cni_check: measured.cni_check,
    };
    let table = render_table(&report);
    if args.json {
        eprint!("{table}");
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{table}");
    }
    Ok(())
}

fn memory(
    pids: &[u32],
    idle: Option<u64>,
    running: Option<u64>,
    cpu_before: f64,
    idle_cpu_pct: Option<f64>,
) -> Option<Memory> {
    Some(Memory {
        pids: pids.to_vec(),
        idle_mib: mib(idle?),
        running_mib: mib(running?),
        cpu_s: cpu_seconds(pids) - cpu_before,
        idle_cpu_pct,
    })
}

/// What the lifecycle phases measured besides RPC latencies.
struct Measured {
    setup: Duration,
    teardown: Duration,
    running_rss: Option<u64>,
    backend_rss: Option<u64>,
    shims: Option<Shims>,
    cni_check: Option<String>,
    /// The runtime's and the backend's CPU over the idle window, percent of one core.
    runtime_idle_cpu: Option<f64>,
    backend_idle_cpu: Option<f64>,
}

async fn measure(bench: &Bench, args: &RunArgs, pids: &[u32], backend: &[u32]) -> Result<Measured> {
    let n = args.pods;
    let step = (n / 10).max(1);
    let start = Instant::now();
    let pods: Vec<Pod> = futures::stream::iter(0..n)
        .map(|i| async move {
            let pod = bench.start_pod(i).await?;
            if (i + 1) % step == 0 {
                eprintln!("  started {}/{n}", i + 1);
            }
            Ok::<_, anyhow::Error>(pod)
        })
        .buffered(args.concurrency as usize)
        .try_collect()
        .await?;
    let setup = start.elapsed();

    bench
        .check_running(pods.len() * bench.containers as usize)
        .await?;
    let cni_check = if args.cni_check {
        Some(bench.cni_check(&pods).await?)
    } else {
        None
    };
    bench.check()?;
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let running_rss = sample_rss(pids).await;
    let backend_rss = sample_rss(backend).await;
    let ids: HashSet<String> = pods
        .iter()
        .flat_map(|p| std::iter::once(p.sandbox.clone()).chain(p.containers.iter().cloned()))
        .collect();
    let address = args.containerd_address.clone();
    let (mut shims, shim_pids, pause_pids) =
        tokio::task::spawn_blocking(move || sample_shims(&ids, address.as_deref(), n))
            .await
            .context("sampling the shims")?;
    bench.check()?;
    let (mut runtime_idle_cpu, mut backend_idle_cpu) = (None, None);
    if args.idle_s > 0 {
        eprintln!(
            "  {} pods running: {} s of idle CPU sampling",
            pods.len(),
            args.idle_s
        );
        let window = Duration::from_secs(args.idle_s);
        let (secs, pct) =
            idle_cpu(bench, window, &[&shim_pids, &pause_pids, pids, backend]).await?;
        shims.idle_cpu_pct = Some(pct[0]);
        shims.pause_idle_cpu_pct = Some(pct[1]);
        shims.idle_window_s = Some(secs);
        runtime_idle_cpu = (!pids.is_empty()).then_some(pct[2]);
        backend_idle_cpu = (!backend.is_empty()).then_some(pct[3]);
    }
    let shims = Some(shims);

    let start = Instant::now();
    let results: Vec<Result<()>> = futures::stream::iter(pods.iter())
        .map(|pod| bench.stop_pod(pod))
        .buffered(args.concurrency as usize)
        .collect()
        .await;
    let teardown = start.elapsed();
    let errors: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| format!("{e:#}")))
        .collect();
    if !errors.is_empty() {
        bail!(
            "{} of {n} pods failed to tear down; first: {}",
            errors.len(),
            errors[0]
        );
    }
    Ok(Measured {
        setup,
        teardown,
        running_rss,
        backend_rss,
        shims,
        cni_check,
        runtime_idle_cpu,
        backend_idle_cpu,
    })
}

/// The CPU each set of pids uses over `window`, percent of one core, with the window's length
/// in seconds (a process gone during it counts nothing).
async fn idle_cpu(bench: &Bench, window: Duration, sets: &[&[u32]]) -> Result<(f64, Vec<f64>)> {
    let before: Vec<u64> = sets.iter().map(|p| processes::total_cpu_ns(p)).collect();
    let start = Instant::now();
    while start.elapsed() < window {
        bench.check()?;
        let left = window.saturating_sub(start.elapsed());
        tokio::time::sleep(left.min(Duration::from_millis(200))).await;
    }
    let after: Vec<u64> = sets.iter().map(|p| processes::total_cpu_ns(p)).collect();
    let secs = start.elapsed().as_secs_f64();
    let pct = before
        .iter()
        .zip(&after)
        .map(|(b, a)| a.saturating_sub(*b) as f64 / 1e9 / secs * 100.0)
        .collect();
    Ok((secs, pct))
}

impl RpcStats {
    fn new(rpc: &str, samples: &[Duration]) -> Self {
        Self::from_ms(rpc, samples.iter().map(|d| d.as_secs_f64() * 1e3).collect())
    }

    /// The summary of `ms` (latencies in milliseconds, kept in the order given): `new` for
    /// one run's timings, `merge` for the samples several runs' reports pooled.
    fn from_ms(rpc: &str, ms: Vec<f64>) -> Self {
        let mut sorted = ms.clone();
        sorted.sort_by(f64::total_cmp);
        let mean = if ms.is_empty() {
            0.0
        } else {
            ms.iter().sum::<f64>() / ms.len() as f64
        };
        Self {
            rpc: rpc.into(),
            n: ms.len(),
            p50_ms: percentile(&sorted, 50.0),
            p99_ms: percentile(&sorted, 99.0),
            mean_ms: mean,
            max_ms: sorted.last().copied().unwrap_or(0.0),
            samples_ms: ms,
        }
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The pids given, plus every process whose `comm` is one of `names`.
fn resolve_pids(pids: &[u32], names: &[String]) -> Result<Vec<u32>> {
    let mut out: Vec<u32> = pids.to_vec();
    if !names.is_empty() {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").context("reading /proc")? {
            let Ok(entry) = entry else { continue };
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
                continue;
            };
            if names.iter().any(|n| n == comm.trim_end()) {
                found.push(pid);
            }
        }
        if found.is_empty() {
            bail!("no process named {names:?}");
        }
        out.extend(found);
    }
    for pid in &out {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process {pid}");
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Resident set size from the text of /proc/PID/status, bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Total RSS of `pids` in bytes; None without pids or if one has gone.
async fn sample_rss(pids: &[u32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    let mut total = 0;
    for pid in pids {
        let status = tokio::fs::read_to_string(format!("/proc/{pid}/status"))
            .await
            .ok()?;
        total += parse_vm_rss(&status)?;
    }
    Some(total)
}

/// CPU seconds `pids` have used so far (0 for those that cannot be read).
fn cpu_seconds(pids: &[u32]) -> f64 {
    let hz = match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(hz)) if hz > 0 => hz as f64,
        _ => 100.0,
    };
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|s| parse_stat_ticks(&s))
        .map(|ticks| ticks as f64 / hz)
        .sum()
}

/// The shims serving a run's `pods` pods: those whose `-id` is one of the run's sandbox or
/// container ids (containerd's CRI and ferrolet-cri run one shim per pod, under the id of the
/// pod's first task; a runtime without grouping would run one per container), started by the
/// containerd at `address` when given; and the pause processes under them. Returns the
/// sample with the shims' and the pause processes' pids.
fn sample_shims(
    ids: &HashSet<String>,
    address: Option<&str>,
    pods: u32,
) -> (Shims, Vec<u32>, Vec<u32>) {
    let found: Vec<Shim> = processes::all_shims()
        .into_iter()
        .filter(|s| ids.contains(&s.id) && address.is_none_or(|a| s.address == a))
        .collect();
    let shim_pids: Vec<u32> = found.iter().map(|s| s.pid).collect();
    let pause_pids = processes::children_named(&shim_pids, PAUSE_COMM);
    let mut programs: Vec<String> = found.iter().map(|s| s.program.clone()).collect();
    programs.sort();
    programs.dedup();
    let shims = Shims {
        count: found.len(),
        total_mib: processes::kib_to_mib(processes::total_rss_kib(&shim_pids)),
        pods,
        programs,
        pause_count: pause_pids.len(),
        pause_mib: processes::kib_to_mib(processes::total_rss_kib(&pause_pids)),
        ..Shims::default()
    };
    (shims, shim_pids, pause_pids)
}

fn render_table(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{} ({}; {}), {} pods of {} containers, concurrency {}",
        r.label, r.runtime, r.endpoint, r.pods, r.containers, r.concurrency
    );
    let _ = writeln!(
        s,
        "{:<18} {:>5} {:>9} {:>9} {:>9} {:>9}",
        "RPC", "n", "p50 ms", "p99 ms", "mean ms", "max ms"
    );
    for x in &r.rpcs {
        let _ = writeln!(
            s,
            "{:<18} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            x.rpc, x.n, x.p50_ms, x.p99_ms, x.mean_ms, x.max_ms
        );
    }
    let _ = writeln!(
        s,
        "total wall {:.2} s (start {:.2} s, teardown {:.2} s)",
        r.wall_s, r.setup_s, r.teardown_s
    );
    match &r.runtime_memory {
        Some(m) => {
            let _ = writeln!(
                s,
                "RSS {} (pids {:?}): {:.1} MiB with {} running ({:.1} MiB idle); CPU {:.2} s",
                r.label,
                m.pids,
                m.running_mib,
                r.pods_running(),
                m.idle_mib,
                m.cpu_s
            );
        }
        None => {
            let _ = writeln!(s, "RSS {}: not sampled (use --pid or --process)", r.label);
        }
    }
    if let Some(m) = &r.backend_memory {
        let _ = writeln!(
            s,
            "RSS backend (pids {:?}): {:.1} MiB with {} running ({:.1} MiB idle); CPU {:.2} s",
            m.pids,
            m.running_mib,
            r.pods_running(),
            m.idle_mib,
            m.cpu_s
        );
    }
    let idle_cpu = |m: &Option<Memory>| m.as_ref().and_then(|m| m.idle_cpu_pct);
    if let Some(sh) = &r.shims {
        s.push_str(&render_shims(sh));
        if let (Some(cpu), Some(window)) = (sh.idle_cpu_pct, sh.idle_window_s) {
            let _ = writeln!(
                s,
                "idle CPU over {window:.0} s: shims {cpu:.3}% of a core, pause {:.3}%, {} {}, backend {}",
                sh.pause_idle_cpu_pct.unwrap_or_default(),
                r.label,
                pct(idle_cpu(&r.runtime_memory)),
                pct(idle_cpu(&r.backend_memory))
            );
        }
    }
    if let Some(total) = r.stack_mib() {
        let _ = writeln!(
            s,
            "runtime stack RSS (runtime + backend + shims + pause): {total:.1} MiB"
        );
    }
    if let Some(c) = &r.cni_check {
        let _ = writeln!(s, "CNI check: {c}");
    }
    s
}

/// The shims line of a table: count, programs, RSS in all and per pod, pause processes.
fn render_shims(sh: &Shims) -> String {
    let programs = if sh.programs.is_empty() {
        "none found".to_string()
    } else {
        sh.programs.join(", ")
    };
    let per_pod = sh
        .per_pod_mib()
        .map_or("-".to_string(), |m| format!("{m:.2} MiB"));
    let mut line = format!(
        "shims ({programs}): {} processes for {} pods, {:.1} MiB total, {per_pod} per pod; pause: {} processes, {:.1} MiB\n",
        sh.count, sh.pods, sh.total_mib, sh.pause_count, sh.pause_mib
    );
    if sh.pods > 0 && sh.count != sh.pods as usize {
        let _ = writeln!(
            line,
            "  note: {} shims for {} pods (one per pod expected)",
            sh.count, sh.pods
        );
    }
    line
}

/// A percentage of a core, or `-`.
fn pct(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.3}%"))
}

/// Issue #39's goals for the shim (A against the reference B, same run): StartContainer p50
/// <= 0.85x, RunPodSandbox p50 no slower, shim RSS <= 2 MiB per pod, the shims' idle CPU no
/// more than the reference's.
fn render_shim_goals(a: &Report, b: &Report) -> String {
    let mut s = String::new();
    let programs = |r: &Report| {
        r.shims
            .as_ref()
            .filter(|sh| !sh.programs.is_empty())
            .map_or("no shims sampled".to_string(), |sh| sh.programs.join(", "))
    };
    let _ = writeln!(
        s,
        "issue #39 goals, {} ({}) against {} ({}):",
        a.label,
        programs(a),
        b.label,
        programs(b)
    );
    let p50 = |r: &Report, rpc: Rpc| {
        r.rpcs
            .iter()
            .find(|x| x.rpc == rpc.name())
            .map(|x| x.p50_ms)
    };
    let verdict = |v: Option<f64>, goal: f64| match v {
        Some(v) if v <= goal => "met",
        Some(_) => "NOT met",
        None => "not measured",
    };
    let fmt =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    for (rpc, goal) in [(Rpc::StartContainer, 0.85), (Rpc::RunPodSandbox, 1.0)] {
        let r = p50(a, rpc)
            .zip(p50(b, rpc))
            .filter(|(_, y)| *y > 0.0)
            .map(|(x, y)| x / y);
        let _ = writeln!(
            s,
            "  {} p50 {} / {} <= {goal:.2}: ratio {} ({} ms / {} ms): {}",
            rpc.name(),
            a.label,
            b.label,
            fmt(r, 2),
            fmt(p50(a, rpc), 2),
            fmt(p50(b, rpc), 2),
            verdict(r, goal)
        );
    }
    let per_pod = |r: &Report| r.shims.as_ref().and_then(Shims::per_pod_mib);
    let rss_ratio = per_pod(a)
        .zip(per_pod(b))
        .filter(|(_, y)| *y > 0.0)
        .map(|(x, y)| x / y);
    let _ = writeln!(
        s,
        "  shim RSS per pod <= 2 MiB ({}): {} MiB against {} MiB, ratio {}: {}",
        a.pods_running(),
        fmt(per_pod(a), 2),
        fmt(per_pod(b), 2),
        fmt(rss_ratio, 2),
        verdict(per_pod(a), 2.0)
    );
    let cpu = |r: &Report| r.shims.as_ref().and_then(|sh| sh.idle_cpu_pct);
    let cpu_ratio = cpu(a)
        .zip(cpu(b))
        .filter(|(_, y)| *y > 0.0)
        .map(|(x, y)| x / y);
    let _ = writeln!(
        s,
        "  shims' idle CPU {} <= {}: {} against {} of a core, ratio {}: {}",
        a.label,
        b.label,
        pct(cpu(a)),
        pct(cpu(b)),
        fmt(cpu_ratio, 2),
        match (cpu(a), cpu(b)) {
            (Some(x), Some(y)) if x <= y => "met",
            (Some(_), Some(_)) => "NOT met",
            _ => "not measured (--idle-s)",
        }
    );
    s
}

fn render_compare(a: &Report, b: &Report, max_rss_mib: Option<f64>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{} / {}: {} vs {} pods (ratio < 1: {} is faster/smaller)",
        a.label, b.label, a.pods, b.pods, a.label
    );
    let _ = writeln!(
        s,
        "{:<18} {:>17} {:>17} {:>8}",
        "RPC p50",
        format!("{} ms", short(&a.label)),
        format!("{} ms", short(&b.label)),
        "ratio"
    );
    let by_name: HashMap<&str, &RpcStats> = b.rpcs.iter().map(|x| (x.rpc.as_str(), x)).collect();
    let mut slower = Vec::new();
    for x in &a.rpcs {
        let Some(y) = by_name.get(x.rpc.as_str()) else {
            continue;
        };
        if x.p50_ms > y.p50_ms {
            slower.push(x.rpc.as_str());
        }
        let _ = writeln!(
            s,
            "{:<18} {:>17.2} {:>17.2} {:>8}",
            x.rpc,
            x.p50_ms,
            y.p50_ms,
            ratio(x.p50_ms, y.p50_ms)
        );
    }
    let _ = writeln!(
        s,
        "{:<18} {:>17.2} {:>17.2} {:>8}",
        "wall s",
        a.wall_s,
        b.wall_s,
        ratio(a.wall_s, b.wall_s)
    );
    if let (Some(x), Some(y)) = (&a.runtime_memory, &b.runtime_memory) {
        let _ = writeln!(
            s,
            "{:<18} {:>17.1} {:>17.1} {:>8}",
            "RSS MiB (running)",
            x.running_mib,
            y.running_mib,
            ratio(x.running_mib, y.running_mib)
        );
    }
    if let (Some(x), Some(y)) = (&a.shims, &b.shims) {
        let mut row = |name: &str, x: f64, y: f64, digits: usize| {
            let _ = writeln!(
                s,
                "{name:<18} {x:>17.digits$} {y:>17.digits$} {:>8}",
                ratio(x, y)
            );
        };
        row("shims MiB", x.total_mib, y.total_mib, 1);
        if let (Some(xp), Some(yp)) = (x.per_pod_mib(), y.per_pod_mib()) {
            row("shims MiB per pod", xp, yp, 2);
        }
        row("pause MiB", x.pause_mib, y.pause_mib, 1);
        if let (Some(xc), Some(yc)) = (x.idle_cpu_pct, y.idle_cpu_pct) {
            row("shims idle CPU %", xc, yc, 3);
        }
    }
    if let (Some(x), Some(y)) = (a.stack_mib(), b.stack_mib()) {
        let _ = writeln!(
            s,
            "{:<18} {:>17.1} {:>17.1} {:>8}",
            "stack MiB",
            x,
            y,
            ratio(x, y)
        );
    }
    if slower.is_empty() {
        let _ = writeln!(s, "goal p50 {} <= {} for every RPC: met", a.label, b.label);
    } else {
        let _ = writeln!(
            s,
            "goal p50 {} <= {} for every RPC: NOT met ({})",
            a.label,
            b.label,
            slower.join(", ")
        );
    }
    if a.shims.is_some() || b.shims.is_some() {
        s.push_str(&render_shim_goals(a, b));
    }
    if let Some(limit) = max_rss_mib {
        let verdict = match &a.runtime_memory {
            Some(m) if m.running_mib <= limit => format!("met ({:.1} MiB)", m.running_mib),
            Some(m) => format!("NOT met ({:.1} MiB)", m.running_mib),
            None => "not sampled".into(),
        };
        let _ = writeln!(
            s,
            "goal RSS {} <= {limit} MiB with {}: {verdict}",
            a.label,
            a.pods_running()
        );
    }
    s
}

impl Report {
    /// RSS of the whole runtime stack with the pods running, MiB: the runtime, its backend
    /// (ferrolet-cri's containerd), the shims and the pause processes (None without shims or
    /// the runtime's RSS).
    /// A merged report whose turns ran fewer pods at once has none: its shims are every
    /// turn's, its runtime's RSS one turn's peak.
    fn stack_mib(&self) -> Option<f64> {
        if self.running_pods.is_some_and(|k| k < self.pods) {
            return None;
        }
        let shims = self.shims.as_ref()?;
        let runtime = self.runtime_memory.as_ref()?.running_mib;
        let backend = self.backend_memory.as_ref().map_or(0.0, |m| m.running_mib);
        Some(runtime + backend + shims.total_mib + shims.pause_mib)
    }

    /// The pods the RSS figures were sampled with: all of them, or for a merged report only
    /// its largest run's.
    fn pods_running(&self) -> String {
        match self.running_pods {
            Some(k) if k < self.pods => format!("up to {k} of {} pods", self.pods),
            _ => format!("{} pods", self.pods),
        }
    }
}

fn short(label: &str) -> String {
    label.chars().take(14).collect()
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 50.0), 50.0);
        assert_eq!(percentile(&sorted, 99.0), 99.0);
        assert_eq!(percentile(&sorted, 100.0), 100.0);
        let twenty: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&twenty, 50.0), 10.0);
        assert_eq!(percentile(&twenty, 99.0), 20.0);
        assert_eq!(percentile(&[7.0], 50.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn stats_summarise_unsorted_samples() {
        let s = RpcStats::new("StartContainer", &ms(&[30, 10, 20, 40]));
        assert_eq!(s.n, 4);
        assert_eq!(s.p50_ms, 20.0);
        assert_eq!(s.p99_ms, 40.0);
        assert_eq!(s.mean_ms, 25.0);
        assert_eq!(s.max_ms, 40.0);
        assert_eq!(s.samples_ms, vec![30.0, 10.0, 20.0, 40.0]);
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tcontainerd\nVmPeak:\t 99 kB\nVmRSS:\t   38136 kB\nThreads:\t12\n";
        assert_eq!(parse_vm_rss(status), Some(38136 * 1024));
        assert_eq!(parse_vm_rss("Name:\tkthreadd\n"), None);
    }

    #[test]
    fn cpu_ticks_skip_odd_command_names() {
        let stat = "123 (a b) c) S 1 123 123 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(parse_stat_ticks(stat), Some(300));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn selectors_match_by_run_label() {
        let mine = run_labels("r1");
        let other = run_labels("r2");
        let none = HashMap::new();
        assert!(Selector::Run("r1").matches(&mine));
        assert!(!Selector::Run("r1").matches(&other));
        assert!(!Selector::Run("r1").matches(&none));
        assert!(Selector::AnyRun.matches(&other));
        assert!(!Selector::AnyRun.matches(&none));
        assert!(Selector::All.matches(&none));
    }

    fn report(label: &str, p50: u64) -> Report {
        Report {
            label: label.into(),
            endpoint: "unix:///x.sock".into(),
            runtime: "rt 1.0".into(),
            pods: 2,
            running_pods: None,
            concurrency: 1,
            image: "img".into(),
            rpcs: Rpc::ALL
                .iter()
                .map(|r| RpcStats::new(r.name(), &ms(&[p50, p50 * 2])))
                .collect(),
            wall_s: 1.5,
            setup_s: 1.0,
            teardown_s: 0.5,
            runtime_memory: Some(Memory {
                pids: vec![1],
                idle_mib: 10.0,
                running_mib: 20.0,
                cpu_s: 0.25,
                idle_cpu_pct: None,
            }),
            backend_memory: None,
            shims: Some(Shims {
                count: 2,
                total_mib: 16.0,
                pods: 2,
                programs: vec!["containerd-shim-runc-v2".into()],
                ..Shims::default()
            }),
            cni_check: None,
            containers: 1,
        }
    }

    #[test]
    fn reports_survive_json() {
        let r = report("ferrolet-cri", 10);
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn the_table_has_every_rpc_and_the_memory() {
        let t = render_table(&report("containerd", 10));
        for rpc in Rpc::ALL {
            assert!(t.contains(rpc.name()), "{t}");
        }
        assert!(t.contains("20.0 MiB with 2 pods running"), "{t}");
        assert!(
            t.contains("shims (containerd-shim-runc-v2): 2 processes for 2 pods, 16.0 MiB total, 8.00 MiB per pod; pause: 0 processes"),
            "{t}"
        );
        assert!(
            t.contains("runtime stack RSS (runtime + backend + shims + pause): 36.0 MiB"),
            "{t}"
        );
        assert!(t.contains("total wall 1.50 s"), "{t}");
    }

    #[test]
    fn compare_divides_a_by_b() {
        let t = render_compare(
            &report("ferrolet-cri", 10),
            &report("containerd", 20),
            Some(30.0),
        );
        let line = t.lines().find(|l| l.starts_with("RunPodSandbox")).unwrap();
        assert!(line.ends_with("0.50"), "{line}");
        let wall = t.lines().find(|l| l.starts_with("wall s")).unwrap();
        assert!(wall.ends_with("1.00"), "{wall}");
        assert!(t.contains("for every RPC: met"), "{t}");
        assert!(t.contains("<= 30 MiB with 2 pods: met (20.0 MiB)"), "{t}");
        assert_eq!(ratio(1.0, 0.0), "-");
    }

    #[test]
    fn compare_names_the_slower_rpcs_and_a_missed_rss_goal() {
        let mut a = report("ferrolet-cri", 10);
        a.rpcs[1] = RpcStats::new(Rpc::CreateContainer.name(), &ms(&[50, 50]));
        let t = render_compare(&a, &report("containerd", 20), Some(16.0));
        assert!(t.contains("NOT met (CreateContainer)"), "{t}");
        assert!(t.contains("16 MiB with 2 pods: NOT met (20.0 MiB)"), "{t}");
    }

    /// `report("ferrolet-cri", 10)` with this many pods and these StartContainer samples (ms).
    fn turn(pods: u32, start_ms: &[u64]) -> Report {
        let mut r = report("ferrolet-cri", 10);
        r.pods = pods;
        r.rpcs[2] = RpcStats::new(Rpc::StartContainer.name(), &ms(start_ms));
        r
    }

    #[test]
    fn merged_p50_is_the_p50_of_the_pooled_samples() {
        let turns = vec![turn(2, &[10, 20]), turn(3, &[30, 40, 50]), turn(1, &[1])];
        let m = merge_reports(turns.clone()).unwrap();
        let pooled: Vec<f64> = turns
            .iter()
            .flat_map(|t| t.rpcs[2].samples_ms.clone())
            .collect();
        assert_eq!(pooled, vec![10.0, 20.0, 30.0, 40.0, 50.0, 1.0]);
        let start = &m.rpcs[2];
        assert_eq!(start, &RpcStats::from_ms("StartContainer", pooled));
        // Nearest rank of [1, 10, 20, 30, 40, 50]: not the median of the turns' p50s (10).
        assert_eq!(
            (start.n, start.p50_ms, start.p99_ms, start.max_ms),
            (6, 20.0, 50.0, 50.0)
        );
        assert_eq!(start.mean_ms, 151.0 / 6.0);
        // The other RPCs pooled too: each turn gave [10, 20].
        assert_eq!(m.rpcs[0].samples_ms, [10.0, 20.0].repeat(3));
        assert_eq!((m.rpcs[0].n, m.rpcs[0].p50_ms), (6, 10.0));
        assert_eq!(m.rpcs.len(), Rpc::ALL.len());
    }

    #[test]
    fn a_single_report_merges_to_itself() {
        let r = turn(3, &[30, 10, 20]);
        assert_eq!(merge_reports(vec![r.clone()]).unwrap(), r);
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains("running_pods"), "{json}");
        assert!(merge_reports(Vec::new()).is_err());
    }

    #[test]
    fn merged_totals_sum_and_memory_keeps_the_peak() {
        let mut a = turn(3, &[10]);
        let mut b = turn(2, &[20]);
        b.wall_s = 0.5;
        b.runtime_memory = Some(Memory {
            pids: vec![1, 7],
            idle_mib: 15.0,
            running_mib: 25.0,
            cpu_s: 0.5,
            idle_cpu_pct: None,
        });
        b.shims = Some(Shims {
            count: 3,
            total_mib: 24.0,
            pods: 3,
            programs: vec!["containerd-shim-ferrolet-v1".into()],
            pause_count: 3,
            pause_mib: 0.75,
            ..Shims::default()
        });
        a.cni_check = Some("3 distinct IPs, all answer ping".into());
        b.cni_check = Some("2 distinct IPs, all answer ping".into());
        let mut c = turn(3, &[30]);
        c.runtime_memory = None;
        c.cni_check = a.cni_check.clone();
        let m = merge_reports(vec![a, b, c]).unwrap();
        assert_eq!((m.pods, m.running_pods), (8, Some(3)));
        assert_eq!((m.wall_s, m.setup_s, m.teardown_s), (3.5, 3.0, 1.5));
        let mem = m.runtime_memory.as_ref().unwrap();
        assert_eq!(mem.pids, vec![1, 7]);
        assert_eq!(
            (mem.idle_mib, mem.running_mib, mem.cpu_s),
            (10.0, 25.0, 0.75)
        );
        assert_eq!(
            m.shims,
            Some(Shims {
                count: 7,
                total_mib: 56.0,
                pods: 7,
                programs: vec![
                    "containerd-shim-ferrolet-v1".into(),
                    "containerd-shim-runc-v2".into()
                ],
                pause_count: 3,
                pause_mib: 0.75,
                ..Shims::default()
            })
        );
        // Every turn's shims, but one turn's runtime peak: no stack figure.
        assert_eq!(m.stack_mib(), None);
        assert_eq!(
            m.cni_check.as_deref(),
            Some("3 distinct IPs, all answer ping; 2 distinct IPs, all answer ping")
        );
        let t = render_table(&m);
        assert!(t.contains("25.0 MiB with up to 3 of 8 pods running"), "{t}");
        let c = render_compare(&m, &report("containerd", 20), Some(30.0));
        assert!(c.contains("<= 30 MiB with up to 3 of 8 pods: met"), "{c}");
        // Merging merged reports keeps the largest run.
        let again = merge_reports(vec![m.clone(), turn(2, &[5])]).unwrap();
        assert_eq!((again.pods, again.running_pods), (10, Some(3)));
    }

    #[test]
    fn compare_judges_the_shim_goals() {
        let mut a = report("ferrolet-cri", 10);
        let mut b = report("containerd-cri", 20);
        // StartContainer 10 against 20 ms: 0.50; RunPodSandbox likewise.
        let shims = |mib: f64, cpu: f64, program: &str| Shims {
            count: 100,
            total_mib: mib,
            pods: 100,
            programs: vec![program.into()],
            pause_count: 100,
            pause_mib: 50.0,
            idle_cpu_pct: Some(cpu),
            pause_idle_cpu_pct: Some(0.0),
            idle_window_s: Some(30.0),
        };
        a.pods = 100;
        b.pods = 100;
        a.shims = Some(shims(150.0, 0.2, "containerd-shim-ferrolet-v1"));
        b.shims = Some(shims(1300.0, 0.4, "containerd-shim-runc-v2"));
        let t = render_compare(&a, &b, None);
        assert!(t.contains("issue #39 goals, ferrolet-cri (containerd-shim-ferrolet-v1) against containerd-cri (containerd-shim-runc-v2)"), "{t}");
        assert!(t.contains("StartContainer p50 ferrolet-cri / containerd-cri <= 0.85: ratio 0.50 (10.00 ms / 20.00 ms): met"), "{t}");
        assert!(
            t.contains("RunPodSandbox p50 ferrolet-cri / containerd-cri <= 1.00: ratio 0.50"),
            "{t}"
        );
        assert!(
            t.contains(
                "shim RSS per pod <= 2 MiB (100 pods): 1.50 MiB against 13.00 MiB, ratio 0.12: met"
            ),
            "{t}"
        );
        assert!(t.contains("shims' idle CPU ferrolet-cri <= containerd-cri: 0.200% against 0.400% of a core, ratio 0.50: met"), "{t}");
        let per_pod = t
            .lines()
            .find(|l| l.starts_with("shims MiB per pod"))
            .unwrap();
        assert!(
            per_pod.contains("1.50") && per_pod.ends_with("0.12"),
            "{per_pod}"
        );
        // 20 + 150 + 50 against 20 + 1300 + 50.
        let stack = t.lines().find(|l| l.starts_with("stack MiB")).unwrap();
        assert!(
            stack.contains("220.0") && stack.contains("1370.0"),
            "{stack}"
        );
        a.shims = Some(shims(1300.0, 0.5, "containerd-shim-runc-v2"));
        a.shims.as_mut().unwrap().idle_cpu_pct = None;
        let t = render_compare(&a, &b, None);
        assert!(
            t.contains("13.00 MiB against 13.00 MiB, ratio 1.00: NOT met"),
            "{t}"
        );
        assert!(t.contains("not measured (--idle-s)"), "{t}");
    }

    #[test]
    fn merge_refuses_another_runtime() {
        let err = merge_reports(vec![turn(2, &[10]), report("containerd", 10)]).unwrap_err();
        assert!(
            err.to_string().contains("report 2 is of containerd"),
            "{err}"
        );
        let mut other_image = turn(2, &[10]);
        other_image.image = "other".into();
        assert!(merge_reports(vec![turn(2, &[10]), other_image]).is_err());
    }

    #[test]
    fn pod_configs_are_unique_per_run_and_index() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // A lazy channel never dials, so a client exists without a server.
        let channel = rt.block_on(async {
            tonic::transport::Endpoint::from_static("http://[::]:0").connect_lazy()
        });
        let bench = Bench {
            rt: RuntimeServiceClient::new(channel),
            run_id: "abcd".into(),
            image_ref: "sha256:1".into(),
            image_name: "busybox:1".into(),
            command: DEFAULT_COMMAND.into(),
            stop_timeout: 30,
            rpc_timeout: Duration::from_secs(1),
            log_dir: PathBuf::from("/tmp/logs"),
            sandbox_seccomp: false,
            kubelet_namespaces: true,
            containers: 2,
            cancel: Arc::new(AtomicBool::new(false)),
            timings: Mutex::new(BTreeMap::new()),
            created: Mutex::new(Created::default()),
        };
        let a = bench.sandbox_config(0);
        let b = bench.sandbox_config(1);
        let (ma, mb) = (a.metadata.unwrap(), b.metadata.unwrap());
        assert_ne!(ma.name, mb.name);
        assert_ne!(ma.uid, mb.uid);
        assert_eq!(a.log_directory, "/tmp/logs/0");
        assert_eq!(a.labels.get(RUN_LABEL).map(String::as_str), Some("abcd"));
        let linux = a.linux.unwrap();
        assert!(linux.cgroup_parent.is_empty());
        // --kubelet-namespaces: a PID namespace per container, in the pod and each container.
        let pid = |o: Option<NamespaceOption>| o.unwrap().pid;
        let own = NamespaceMode::Container as i32;
        assert_eq!(pid(linux.security_context.unwrap().namespace_options), own);
        let c = bench.container_config(0);
        assert_eq!(c.metadata.as_ref().unwrap().name, "bench");
        let second = bench.container_config(1);
        assert_eq!(second.metadata.unwrap().name, "bench-1");
        assert_eq!(second.log_path, "bench-1.log");
        let sc = c.linux.clone().unwrap().security_context.unwrap();
        assert_eq!(pid(sc.namespace_options), own);
        assert_eq!(c.image.unwrap().image, "sha256:1");
        assert_eq!(c.command[..2], ["sh".to_string(), "-c".to_string()]);
        assert!(bench.check().is_ok());
    }
}
