//! The kubelet's Prometheus metrics, with the Go kubelet's names, labels, buckets and HELP
//! texts, served as `/metrics` (and the prober series alone as `/metrics/probes`, where the
//! Go kubelet serves them).
//!
//! One process-wide set, as Go's legacy registry: the parts that observe something call the
//! functions here (the CRI client per call, the PLEG per relist, the pod workers per sync,
//! the prober per probe); [`render`] writes everything in the text format 0.0.4. The
//! family types are in [`registry`], the `process_*` figures in [`process`].

pub mod process;
pub mod registry;

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::PodStatus;
use registry::{
    Collector, Computed, CounterVec, DEF_BUCKETS, Desc, GaugeVec, HistogramVec, Stability,
    exponential_buckets,
};

use crate::types::{Pod, RuntimePod};

/// The Content-Type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `operation_type` of a pod worker pass for a pod it had not synced before.
pub const OP_CREATE: &str = "create";
/// `operation_type` of a pass after the pod's source changed it.
pub const OP_UPDATE: &str = "update";
/// `operation_type` of a resync or PLEG-triggered pass.
pub const OP_SYNC: &str = "sync";

/// `probe_type` of liveness probes (Go's `probeType.String()`).
#[cfg(test)]
pub const PROBE_LIVENESS: &str = "Liveness";
/// `probe_type` of readiness probes.
#[cfg(test)]
pub const PROBE_READINESS: &str = "Readiness";
/// `result` of a probe that passed.
pub const RESULT_SUCCESSFUL: &str = "successful";
/// `result` of a probe that failed.
pub const RESULT_FAILED: &str = "failed";
/// `result` of a probe that could not be run.
pub const RESULT_UNKNOWN: &str = "unknown";

/// The container states `kubelet_running_containers` reports (Go's `kubecontainer.State`).
const CONTAINER_STATES: [&str; 4] = ["created", "running", "exited", "unknown"];

/// Buckets of `kubelet_pod_start_duration_seconds` (Go's `podStartupDurationBuckets`).
const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// Pending pod-worker operation types kept before the oldest are dropped (pods whose work
/// was replaced by a kill never take theirs).
const MAX_PENDING_OPS: usize = 4096;

/// Every family the kubelet exports.
pub struct Metrics {
    /// `kubelet_pod_start_duration_seconds`.
    pub pod_start_duration: HistogramVec,
    /// `kubelet_pod_start_sli_duration_seconds{first_with_network}`.
    pub pod_start_sli_duration: HistogramVec,
    /// `kubelet_pod_start_total_duration_seconds{first_with_network}`.
    pub pod_start_total_duration: HistogramVec,
    /// `kubelet_pod_worker_start_duration_seconds`.
    pub pod_worker_start_duration: HistogramVec,
    /// `kubelet_pod_worker_duration_seconds{operation_type}`.
    pub pod_worker_duration: HistogramVec,
    /// `kubelet_pleg_relist_duration_seconds`.
    pub pleg_relist_duration: HistogramVec,
    /// `kubelet_pleg_relist_interval_seconds`.
    pub pleg_relist_interval: HistogramVec,
    /// `kubelet_pleg_last_seen_seconds`.
    pub pleg_last_seen: GaugeVec,
    /// `kubelet_runtime_operations_total{operation_type}`.
    pub runtime_operations: CounterVec,
    /// `kubelet_runtime_operations_duration_seconds{operation_type}`.
    pub runtime_operations_duration: HistogramVec,
    /// `kubelet_runtime_operations_errors_total{operation_type}`.
    pub runtime_operations_errors: CounterVec,
    /// `kubelet_running_pods`.
    pub running_pods: GaugeVec,
    /// `kubelet_running_containers{container_state}`.
    pub running_containers: GaugeVec,
    /// `kubelet_image_garbage_collected_total{reason}`.
    pub images_garbage_collected: CounterVec,
    /// `kubelet_oom_events_total{scope}`: ferrolet's own (Go's kubelet leaves OOM counts to
    /// cadvisor's `container_oom_events_total`).
    pub oom_events: CounterVec,
    /// `kubelet_device_plugin_registration_total{resource_name}`.
    pub device_plugin_registrations: CounterVec,
    /// `kubelet_device_plugin_alloc_duration_seconds{resource_name}`.
    pub device_plugin_alloc_duration: HistogramVec,
    /// `prober_probe_total{probe_type,result,container,pod,namespace,pod_uid}`.
    pub probe_total: CounterVec,
    /// `prober_probe_duration_seconds{probe_type,container,pod,namespace}`.
    pub probe_duration: HistogramVec,
    process: Vec<Computed>,
    /// `kubelet_volume_stats_*{namespace,persistentvolumeclaim}`, from the last readings.
    volume_stats: Vec<Computed>,
    /// A pod not on the host's network has had its start SLI observed (Go labels the first
    /// one `first_with_network="true"`: it waited for the network plugin).
    first_network_pod_seen: std::sync::atomic::AtomicBool,
    /// Pod UID → operation type of the pod's next worker pass.
    pending_ops: Mutex<HashMap<String, &'static str>>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process-wide metrics.
pub fn global() -> &'static Metrics {
    &METRICS
}

fn alpha(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Desc {
    Desc {
        name,
        help,
        stability: Stability::Alpha,
        labels,
    }
}

impl Metrics {
    fn new() -> Self {
        const OP: &[&str] = &["operation_type"];
        Self {
            pod_start_duration: HistogramVec::new(
                alpha(
                    "kubelet_pod_start_duration_seconds",
                    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
                    &[],
                ),
                POD_START_BUCKETS,
            ),
            pod_start_sli_duration: HistogramVec::new(
                alpha(
                    "kubelet_pod_start_sli_duration_seconds",
                    "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
                    &["first_with_network"],
                ),
                POD_START_BUCKETS,
            ),
            pod_start_total_duration: HistogramVec::new(
                alpha(
                    "kubelet_pod_start_total_duration_seconds",
                    "Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
                    &["first_with_network"],
                ),
                POD_START_BUCKETS,
            ),
            pod_worker_start_duration: HistogramVec::new(
                alpha(
                    "kubelet_pod_worker_start_duration_seconds",
                    "Duration in seconds from kubelet seeing a pod to starting a worker.",
                    &[],
                ),
                DEF_BUCKETS,
            ),
            pod_worker_duration: HistogramVec::new(
                alpha(
                    "kubelet_pod_worker_duration_seconds",
                    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
                    OP,
                ),
                DEF_BUCKETS,
            ),
            pleg_relist_duration: HistogramVec::new(
                alpha(
                    "kubelet_pleg_relist_duration_seconds",
                    "Duration in seconds for relisting pods in PLEG.",
                    &[],
                ),
                DEF_BUCKETS,
            ),
            pleg_relist_interval: HistogramVec::new(
                alpha(
                    "kubelet_pleg_relist_interval_seconds",
                    "Interval in seconds between relisting in PLEG.",
                    &[],
                ),
                DEF_BUCKETS,
            ),
            pleg_last_seen: GaugeVec::new(alpha(
                "kubelet_pleg_last_seen_seconds",
                "Timestamp in seconds when PLEG was last seen active.",
                &[],
            )),
            runtime_operations: CounterVec::new(alpha(
                "kubelet_runtime_operations_total",
                "Cumulative number of runtime operations by operation type.",
                OP,
            )),
            runtime_operations_duration: HistogramVec::new(
                alpha(
                    "kubelet_runtime_operations_duration_seconds",
                    "Duration in seconds of runtime operations. Broken down by operation type.",
                    OP,
                ),
                &exponential_buckets(0.005, 2.5, 14),
            ),
            runtime_operations_errors: CounterVec::new(alpha(
                "kubelet_runtime_operations_errors_total",
                "Cumulative number of runtime operation errors by operation type.",
                OP,
            )),
            running_pods: GaugeVec::new(alpha(
                "kubelet_running_pods",
                "Number of pods that have a running pod sandbox",
                &[],
            )),
            running_containers: GaugeVec::new(alpha(
                "kubelet_running_containers",
                "Number of containers currently running",
                &["container_state"],
            )),
            images_garbage_collected: CounterVec::new(alpha(
                "kubelet_image_garbage_collected_total",
                "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
                &["reason"],
            )),
            oom_events: CounterVec::new(alpha(
                "kubelet_oom_events_total",
                "Cumulative number of out of memory kills the kernel reported, by the limit reached: container, pod, system or other.",
                &["scope"],
            )),
            device_plugin_registrations: CounterVec::new(alpha(
                "kubelet_device_plugin_registration_total",
                "Cumulative number of device plugin registrations. Broken down by resource name.",
                &["resource_name"],
            )),
            device_plugin_alloc_duration: HistogramVec::new(
                alpha(
                    "kubelet_device_plugin_alloc_duration_seconds",
                    "Duration in seconds to serve a device plugin Allocation request. Broken down by resource name.",
                    &["resource_name"],
                ),
                DEF_BUCKETS,
            ),
            probe_total: CounterVec::new(Desc {
                name: "prober_probe_total",
                help: "Cumulative number of a liveness, readiness or startup probe for a container by result.",
                stability: Stability::Beta,
                labels: &[
                    "probe_type",
                    "result",
                    "container",
                    "pod",
                    "namespace",
                    "pod_uid",
                ],
            }),
            probe_duration: HistogramVec::new(
                alpha(
                    "prober_probe_duration_seconds",
                    "Duration in seconds for a probe response.",
                    &["probe_type", "container", "pod", "namespace"],
                ),
                DEF_BUCKETS,
            ),
            process: process_families(),
            volume_stats: volume_stats_families(),
            first_network_pod_seen: std::sync::atomic::AtomicBool::new(false),
            pending_ops: Mutex::new(HashMap::new()),
        }
    }

    fn kubelet_families(&self) -> Vec<&dyn Collector> {
        let mut all: Vec<&dyn Collector> = vec![
            &self.pod_start_duration,
            &self.pod_start_sli_duration,
            &self.pod_start_total_duration,
            &self.pod_worker_start_duration,
            &self.pod_worker_duration,
            &self.pleg_relist_duration,
            &self.pleg_relist_interval,
            &self.pleg_last_seen,
            &self.runtime_operations,
            &self.runtime_operations_duration,
            &self.runtime_operations_errors,
            &self.running_pods,
            &self.running_containers,
            &self.images_garbage_collected,
            &self.oom_events,
            &self.device_plugin_registrations,
            &self.device_plugin_alloc_duration,
            &self.probe_total,
            &self.probe_duration,
        ];
        all.extend(self.volume_stats.iter().map(|c| c as &dyn Collector));
        all.extend(self.process.iter().map(|c| c as &dyn Collector));
        all
    }
}

/// One claim's volume usage as the `kubelet_volume_stats_*` families show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimUsage {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub claim: String,
    /// capacity, available, used bytes; inodes, free, used.
    pub values: [u64; 6],
}

/// The last readings of claims' volumes (replaced whole: a claim gone leaves the families).
static CLAIM_USAGE: Mutex<Vec<ClaimUsage>> = Mutex::new(Vec::new());

/// Replaces the claims' volume usage the `kubelet_volume_stats_*` families report.
pub fn set_claim_usage(usage: Vec<ClaimUsage>) {
    *CLAIM_USAGE.lock().unwrap_or_else(|p| p.into_inner()) = usage;
}

/// Go's volume stats collector's families, computed from [`set_claim_usage`]'s readings.
fn volume_stats_families() -> Vec<Computed> {
    let fams: [(&'static str, &'static str); 6] = [
        (
            "kubelet_volume_stats_capacity_bytes",
            "Capacity in bytes of the volume",
        ),
        (
            "kubelet_volume_stats_available_bytes",
            "Number of available bytes in the volume",
        ),
        (
            "kubelet_volume_stats_used_bytes",
            "Number of used bytes in the volume",
        ),
        (
            "kubelet_volume_stats_inodes",
            "Maximum number of inodes in the volume",
        ),
        (
            "kubelet_volume_stats_inodes_free",
            "Number of free inodes in the volume",
        ),
        (
            "kubelet_volume_stats_inodes_used",
            "Number of used inodes in the volume",
        ),
    ];
    fams.into_iter()
        .enumerate()
        .map(|(i, (name, help))| {
            Computed::new(
                alpha(name, help, &["namespace", "persistentvolumeclaim"]),
                "gauge",
                move || {
                    let usage = CLAIM_USAGE.lock().unwrap_or_else(|p| p.into_inner());
                    usage
                        .iter()
                        .map(|u| {
                            (
                                vec![u.namespace.clone(), u.claim.clone()],
                                u.values[i] as f64,
                            )
                        })
                        .collect()
                },
            )
        })
        .collect()
}

/// The `process_*` families, computed when scraped.
fn process_families() -> Vec<Computed> {
    type Pick = fn(&process::ProcessStats) -> f64;
    let fams: [(&'static str, &'static str, &'static str, Pick); 6] = [
        (
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            "counter",
            |s| s.cpu_seconds,
        ),
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            "gauge",
            |s| s.resident_bytes,
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            "gauge",
            |s| s.virtual_bytes,
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            "gauge",
            |s| s.start_time_seconds,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            "gauge",
            |s| s.open_fds,
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            "gauge",
            |s| s.max_fds,
        ),
    ];
    fams.into_iter()
        .map(|(name, help, kind, pick)| {
            Computed::new(
                Desc {
                    name,
                    help,
                    stability: Stability::None,
                    labels: &[],
                },
                kind,
                move || vec![(Vec::new(), pick(&process_snapshot()))],
            )
        })
        .collect()
}

/// One `/proc/self` read per scrape, shared by the six process families.
fn process_snapshot() -> process::ProcessStats {
    static LAST: Mutex<Option<(Instant, process::ProcessStats)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    match *last {
        Some((at, stats)) if at.elapsed() < Duration::from_millis(500) => stats,
        _ => {
            let stats = process::read();
            *last = Some((Instant::now(), stats));
            stats
        }
    }
}

/// Everything, in the text format. Reads `/proc`: call it off the async runtime
/// ([`render_async`]).
pub fn render() -> String {
    registry::render(&global().kubelet_families())
}

/// The prober families alone (Go's `/metrics/probes`).
pub fn render_probes() -> String {
    let m = global();
    registry::render(&[&m.probe_total, &m.probe_duration])
}

/// [`render`] (or [`render_probes`]) on a blocking thread.
pub async fn render_async(probes_only: bool) -> String {
    let work = move || {
        if probes_only {
            render_probes()
        } else {
            render()
        }
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(text) => text,
        Err(e) => {
            tracing::warn!(error = %e, "rendering metrics");
            String::new()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Recording.

/// The Go kubelet's `operation_type` for a CRI method (`RunPodSandbox` → `run_podsandbox`),
/// as its instrumented runtime service names them.
pub fn operation_type(method: &str) -> &'static str {
    match method {
        "Version" => "version",
        "Status" => "status",
        "RunPodSandbox" => "run_podsandbox",
        "StopPodSandbox" => "stop_podsandbox",
        "RemovePodSandbox" => "remove_podsandbox",
        "PodSandboxStatus" => "podsandbox_status",
        "ListPodSandbox" => "list_podsandbox",
        "CreateContainer" => "create_container",
        "StartContainer" => "start_container",
        "StopContainer" => "stop_container",
        "RemoveContainer" => "remove_container",
        "ListContainers" => "list_containers",
        "ContainerStatus" => "container_status",
        "UpdateContainerResources" => "update_container",
        "ReopenContainerLog" => "reopen_container_log",
        "ExecSync" => "exec_sync",
        "Exec" => "exec",
        "Attach" => "attach",
        "PortForward" => "port_forward",
        "ContainerStats" => "container_stats",
        "ListContainerStats" => "list_container_stats",
        "PodSandboxStats" => "podsandbox_stats",
        "ListPodSandboxStats" => "list_podsandbox_stats",
        "UpdateRuntimeConfig" => "update_runtime_config",
        "GetContainerEvents" => "get_container_events",
        "ListMetricDescriptors" => "list_metric_descriptors",
        "ListPodSandboxMetrics" => "list_podsandbox_metrics",
        "CheckpointContainer" => "checkpoint_container",
        "RuntimeConfig" => "runtime_config",
        "ListImages" => "list_images",
        "ImageStatus" => "image_status",
        "PullImage" => "pull_image",
        "RemoveImage" => "remove_image",
        "ImageFsInfo" => "image_fs_info",
        _ => "other",
    }
}

/// Records one CRI call: its count, duration and, when it failed, its error.
pub fn runtime_operation(method: &str, started: Instant, failed: bool) {
    let m = global();
    let op = [operation_type(method)];
    m.runtime_operations.inc(&op);
    m.runtime_operations_duration
        .observe(&op, started.elapsed().as_secs_f64());
    if failed {
        m.runtime_operations_errors.inc(&op);
    }
}

/// Records a finished relist (its duration and the interval since the one before) and the
/// running pods and containers it found.
pub fn record_relist<'a>(stats: RelistStats, pods: impl Iterator<Item = &'a RuntimePod>) {
    let m = global();
    if let Some(d) = stats.last_duration {
        m.pleg_relist_duration.observe(&[], d.as_secs_f64());
    }
    if let Some(i) = stats.last_interval {
        m.pleg_relist_interval.observe(&[], i.as_secs_f64());
    }
    m.pleg_last_seen.set(&[], unix_now());
    let (pods, states) = count_running(pods);
    m.running_pods.set(&[], pods as f64);
    for (state, n) in CONTAINER_STATES.iter().zip(states) {
        m.running_containers.set(&[state], n as f64);
    }
}

/// Pods with a ready sandbox, and containers per state (in [`CONTAINER_STATES`] order).
fn count_running<'a>(pods: impl Iterator<Item = &'a RuntimePod>) -> (usize, [usize; 4]) {
    use ferrolet_proto::cri::ContainerState;
    let mut running_pods = 0;
    let mut states = [0; 4];
    for pod in pods {
        if pod.sandboxes.iter().any(|s| s.ready) {
            running_pods += 1;
        }
        for c in &pod.containers {
            let i = match c.state {
                ContainerState::ContainerCreated => 0,
                ContainerState::ContainerRunning => 1,
                ContainerState::ContainerExited => 2,
                ContainerState::ContainerUnknown => 3,
            };
            states[i] += 1;
        }
    }
    (running_pods, states)
}

/// The PLEG's relist timings, as it reports them for the relist metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelistStats {
    /// When the last successful relist started.
    pub last_relist: Option<Instant>,
    /// How long it took.
    pub last_duration: Option<Duration>,
    /// Time between the starts of the last two successful relists.
    pub last_interval: Option<Duration>,
    /// Whether runtime events are being received.
    pub evented: bool,
    /// Successful relists so far.
    pub relists: u64,
}

/// Notes why a pod's next worker pass runs: `known` false makes it a `create`, true an
/// `update`; passes without a note are `sync`s.
pub fn note_pod_update(uid: &str, known: bool) {
    let op = if known { OP_UPDATE } else { OP_CREATE };
    let mut ops = global()
        .pending_ops
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if ops.len() >= MAX_PENDING_OPS && !ops.contains_key(uid) {
        ops.clear();
    }
    // A create not yet run stays a create when an update follows it.
    let slot = ops.entry(uid.to_string()).or_insert(op);
    if *slot != OP_CREATE {
        *slot = op;
    }
}

/// Times one pod worker pass: observed into `kubelet_pod_worker_duration_seconds` when
/// dropped, under the operation type noted for the pod (else `sync`).
#[must_use = "the pass is timed until the timer is dropped"]
pub struct PodWorkerTimer {
    op: &'static str,
    started: Instant,
}

impl Drop for PodWorkerTimer {
    fn drop(&mut self) {
        global()
            .pod_worker_duration
            .observe(&[self.op], self.started.elapsed().as_secs_f64());
    }
}

/// Starts timing a worker pass for pod `uid`.
pub fn pod_worker_timer(uid: &str) -> PodWorkerTimer {
    let op = global()
        .pending_ops
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(uid)
        .unwrap_or(OP_SYNC);
    PodWorkerTimer {
        op,
        started: Instant::now(),
    }
}

/// Observes the pod's start duration when a status update takes it from Pending (or no
/// status) to Running: the time since its source first saw it (`kubernetes.io/config.seen`),
/// as the Go kubelet measures it.
pub fn observe_pod_status(pod: &Pod, previous: &PodStatus, current: &PodStatus) {
    if let Some(secs) = pod_start_seconds(pod, previous, current, SystemTime::now()) {
        global().pod_start_duration.observe(&[], secs);
    }
}

fn pod_start_seconds(
    pod: &Pod,
    previous: &PodStatus,
    current: &PodStatus,
    now: SystemTime,
) -> Option<f64> {
    let was_pending = matches!(previous.phase.as_deref(), None | Some("Pending"));
    if !was_pending || current.phase.as_deref() != Some("Running") {
        return None;
    }
    let seen_nanos = crate::types::config_seen_nanos(pod)?;
    let now_nanos = i64::try_from(now.duration_since(UNIX_EPOCH).ok()?.as_nanos()).ok()?;
    Some((now_nanos.saturating_sub(seen_nanos)).max(0) as f64 / 1e9)
}

/// Observes a new pod's first pick-up by its worker, `secs` after its source saw it
/// (`kubelet_pod_worker_start_duration_seconds`, Go's `SyncPodCreate` measure).
pub fn observe_pod_worker_start(secs: f64) {
    global().pod_worker_start_duration.observe(&[], secs);
}

/// Observes a pod's start: `sli` seconds without image pulls, `total` with them, into
/// `kubelet_pod_start_sli_duration_seconds` and `kubelet_pod_start_total_duration_seconds`;
/// the first pod not on the host's network is labelled `first_with_network="true"`, as Go's
/// start latency tracker does.
pub fn observe_pod_start_sli(sli: f64, total: f64, host_network: bool) {
    use std::sync::atomic::Ordering;
    let m = global();
    let first = !host_network && !m.first_network_pod_seen.swap(true, Ordering::Relaxed);
    let label = if first { "true" } else { "" };
    m.pod_start_sli_duration.observe(&[label], sli);
    m.pod_start_total_duration.observe(&[label], total);
}

/// Records one probe result (`prober_probe_total`): `probe_type` is [`PROBE_LIVENESS`],
/// [`PROBE_READINESS`] or [`PROBE_STARTUP`], `result` [`RESULT_SUCCESSFUL`],
/// [`RESULT_FAILED`] or [`RESULT_UNKNOWN`].
pub fn record_probe(
    probe_type: &str,
    result: &str,
    container: &str,
    pod: &str,
    namespace: &str,
    pod_uid: &str,
) {
    global()
        .probe_total
        .inc(&[probe_type, result, container, pod, namespace, pod_uid]);
}

/// Records how long a successful probe took (`prober_probe_duration_seconds`).
pub fn observe_probe_duration(
    probe_type: &str,
    container: &str,
    pod: &str,
    namespace: &str,
    took: Duration,
) {
    global()
        .probe_duration
        .observe(&[probe_type, container, pod, namespace], took.as_secs_f64());
}

/// Records one probe run of `container` in `pod` that started at `started`: counted as
/// successful or failed, and (when successful) timed, as Go's prober worker does.
pub fn observe_probe(
    probe_type: &str,
    success: bool,
    pod: &Pod,
    container: &str,
    started: Instant,
) {
    let (name, namespace, uid) = pod_labels(pod);
    let result = if success {
        RESULT_SUCCESSFUL
    } else {
        RESULT_FAILED
    };
    record_probe(probe_type, result, container, name, namespace, uid);
    if success {
        observe_probe_duration(probe_type, container, name, namespace, started.elapsed());
    }
}

/// [`forget_probe`] for `container` in `pod`.
pub fn forget_probe_of(probe_type: &str, pod: &Pod, container: &str) {
    let (name, namespace, uid) = pod_labels(pod);
    forget_probe(probe_type, container, name, namespace, uid);
}

/// A pod's name, namespace and UID as label values.
fn pod_labels(pod: &Pod) -> (&str, &str, &str) {
    let m = &pod.metadata;
    (
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or("default"),
        m.uid.as_deref().unwrap_or_default(),
    )
}

/// Drops the series of a probe whose worker stopped (as Go's worker does on exit).
pub fn forget_probe(probe_type: &str, container: &str, pod: &str, namespace: &str, pod_uid: &str) {
    let m = global();
    for result in [RESULT_SUCCESSFUL, RESULT_FAILED, RESULT_UNKNOWN] {
        m.probe_total
            .remove(&[probe_type, result, container, pod, namespace, pod_uid]);
    }
    m.probe_duration
        .remove(&[probe_type, container, pod, namespace]);
}

/// Counts images the image GC removed: `reason` is `space` or `age`.
pub fn images_garbage_collected(reason: &str, n: usize) {
    if n > 0 {
        global().images_garbage_collected.add(&[reason], n as f64);
    }
}

/// Counts one OOM kill the kernel reported (`scope`: `container`, `pod`, `system`, `other`).
pub fn oom_event(scope: &str) {
    global().oom_events.inc(&[scope]);
}

/// Shows the OOM counters at zero once the watcher runs, so a scrape tells "no kills" from
/// "not watching".
pub fn oom_events_watched(scopes: &[&str]) {
    for scope in scopes {
        global().oom_events.add(&[scope], 0.0);
    }
}

/// Counts a device plugin's registration request for `resource`, accepted or not (as Go).
pub fn device_plugin_registration(resource: &str) {
    global().device_plugin_registrations.inc(&[resource]);
}

/// Observes one `Allocate` call to `resource`'s plugin.
pub fn device_plugin_alloc(resource: &str, took: Duration) {
    global()
        .device_plugin_alloc_duration
        .observe(&[resource], took.as_secs_f64());
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
