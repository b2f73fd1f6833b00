//! The kubelet process: flags and configuration, logging, the async runtime, then the
//! runtime connection, the pod sources, the kubelet's loop and its API servers, until a
//! signal. The binary (`main.rs`) only calls [`main`], so everything else in this crate is
//! crate-private and the compiler reports what nothing uses.

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::sync::mpsc;

use crate::config::{Config, ConfigError, Flags};
use crate::cri::Cri;
use crate::kube_client::ApiHandle;
use crate::kubelet::cluster::{Cluster, ClusterFacts};
use crate::kubelet::{Kubelet, Seams};
use crate::podspec::NodeContext;
use crate::source::MirrorTable;
use crate::status_manager::StatusManager;
use crate::{logging, node, server, source};

/// Why the kubelet could not start.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The flags or the configuration file are wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Logging could not be set up.
    #[error("{0}")]
    Logging(String),
    /// The async runtime could not start.
    #[error("starting the async runtime")]
    Runtime(#[source] std::io::Error),
    /// The root directory could not be made.
    #[error("creating {}", path.display())]
    RootDir {
        /// `--root-dir`.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The kubelet API could not start (certificate, port).
    #[error("starting the kubelet API")]
    Api(#[source] server::secure::SecureError),
    /// A port the kubelet is configured to serve cannot be bound: fatal, as the Go kubelet's
    /// servers are, so that a second kubelet on the same ports does not run on unnoticed.
    #[error("listening for the {what} on {addr}: {source}")]
    Bind {
        /// `healthz server`, `read-only API`.
        what: &'static str,
        /// `address:port`.
        addr: SocketAddr,
        /// Why (`Address already in use`).
        source: std::io::Error,
    },
    /// The kubeconfig, the TLS bootstrap or the serving certificate failed.
    #[error("joining the cluster")]
    Cluster(#[source] crate::certificate::CertificateError),
    /// The cgroup tree could not be built (a missing controller or cgroup, bad reservations).
    #[error("starting the container manager: {0}")]
    ContainerManager(#[source] crate::cm::CmError),
    /// The CPU manager could not start: the machine's CPUs, the reservation, or its state
    /// file (another policy's, corrupt, or not matching the CPUs or the reservation), with
    /// Go's words.
    #[error("{}", cpu_manager_message(.0))]
    CpuManager(crate::cm::cpu_manager::CpuManagerError),
    /// The user namespace manager could not start (Go's `MakeUserNsManager` checks).
    #[error("user namespace manager: {0}")]
    Userns(crate::userns::UsernsError),
    /// A blocking start-up task failed.
    #[error("start-up task: {0}")]
    Join(#[source] tokio::task::JoinError),
    /// The device plugin registration socket could not be served.
    #[error("starting the device manager: {0}")]
    DeviceManager(#[source] crate::cm::devicemanager::registration::RegistrationError),
    /// The allocation checkpoint (in-place resize) could not be read.
    #[error("reading the pods' allocated resources: {0}")]
    Allocation(#[source] crate::allocation::AllocationError),
    /// The pod resources socket could not be served.
    #[error(transparent)]
    PodResources(#[from] server::pod_resources::PodResourcesError),
    /// The host is on cgroup v1 and `failCgroupV1` is set (Go's words).
    #[error(
        "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is \
         unsupported and will be removed in a future release"
    )]
    CgroupV1,
    /// The runtime drives cgroups with another driver than ours (its RuntimeConfig).
    #[error(
        "cgroup driver mismatch: ferrolet is configured with cgroupDriver {ours:?}, but the \
         container runtime reports {theirs:?} (CRI RuntimeConfig); configure both alike (for \
         containerd and ferrolet-cri: the runc option SystemdCgroup / systemd_cgroup = {})",
        *ours == "systemd"
    )]
    CgroupDriverMismatch {
        /// Our `cgroupDriver`.
        ours: String,
        /// The runtime's.
        theirs: &'static str,
    },
    /// Swap is on and `failSwapOn` is set (Go's words).
    #[error(
        "running with swap on is not supported, please disable swap or set --fail-swap-on flag \
         to false (/proc/swaps lists {0})"
    )]
    SwapOn(String),
    /// `ferrolet trace` failed.
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
}

/// Go prefixes the errors of the CPU manager's `Start` (its state file), not those of
/// building its policy.
fn cpu_manager_message(e: &crate::cm::cpu_manager::CpuManagerError) -> String {
    if e.at_start() {
        format!("start cpu manager error: {e}")
    } else {
        e.to_string()
    }
}

/// Builds the CPU manager and restores its state from `<root-dir>/cpu_manager_state` (Go's
/// `cpumanager.NewManager` + `Start`). The file is written for every policy, as Go does;
/// only `static` has anything to do afterwards, so `none` gives None.
/// The user namespace manager: the kubelet's range, the pods' ranges read back from their
/// directories, and the runtime's handlers as its Status reports them.
async fn start_userns_manager(
    config: &Config,
    cri: &Cri,
) -> Result<Arc<crate::userns::UsernsManager>, AppError> {
    let (root, enabled, ids, max_pods) = (
        config.root_dir.clone(),
        config.feature_gate_or(crate::userns::GATE, true),
        config.user_namespaces_ids_per_pod,
        config.max_pods,
    );
    let manager = tokio::task::spawn_blocking(move || {
        crate::userns::UsernsManager::new(&root, enabled, ids, max_pods)
    })
    .await
    .map_err(AppError::Join)?
    .map_err(AppError::Userns)?;
    match cri.status().await {
        Ok(status) => manager.observe_status(&status),
        Err(e) => tracing::warn!(error = %e, "reading the runtime's handlers"),
    }
    Ok(Arc::new(manager))
}

async fn start_cpu_manager(
    config: &Config,
    cri: &Cri,
) -> Result<Option<crate::cm::cpu_manager::CpuManager>, AppError> {
    use crate::cm::CpuManagerPolicy;
    use crate::cm::cpu_manager::{ContainerMap, CpuManager};
    let settings = config.cm_settings();
    // The runtime's containers, needed only to migrate an old (V1) state file; Go logs a
    // failed listing and starts with none.
    let mut containers = ContainerMap::new();
    match cri.runtime_pods().await {
        Ok(pods) => {
            for pod in pods {
                for c in pod.containers {
                    containers.insert(c.id, (pod.uid.clone(), c.name));
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "cpu manager: listing the runtime's containers"),
    }
    let root = config.root_dir.clone();
    let policy = settings.cpu_manager_policy;
    let manager = tokio::task::spawn_blocking(move || {
        CpuManager::from_settings(&settings, &root, &containers)
    })
    .await
    .map_err(AppError::Join)?
    .map_err(AppError::CpuManager)?;
    tracing::info!(
        policy = policy.as_str(),
        reserved = %manager.reserved_cpus(),
        allocatable = %manager.allocatable_cpus(),
        shared = %manager.shared_pool(),
        state = %manager.state_file().display(),
        "cpu manager: started"
    );
    Ok((policy == CpuManagerPolicy::Static).then_some(manager))
}

/// The containers the runtime runs as the kubelet starts, `(pod uid, name)`: after a restart
/// they already use their devices. Go logs a failed listing and starts with none.
async fn running_containers(cri: &Cri) -> std::collections::BTreeSet<(String, String)> {
    match cri.runtime_pods().await {
        Ok(pods) => pods
            .into_iter()
            .flat_map(|p| {
                let uid = p.uid;
                p.containers
                    .into_iter()
                    .filter(|c| c.state == ferrolet_proto::cri::ContainerState::ContainerRunning)
                    .map(move |c| (uid.clone(), c.name))
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "device manager: listing the runtime's containers");
            Default::default()
        }
    }
}

/// Validates the node's cgroups against the configuration and builds the `kubepods` tree
/// (None with `cgroupsPerQOS: false`), as Go's `NewContainerManager` + `Start` before any pod.
/// Go 1.31+'s stance on cgroup v1: a warning, or a refusal with `failCgroupV1`. The layout
/// found is the one the rest of start-up uses.
fn check_cgroup_version(config: &Config) -> Result<crate::cm::cgroup::Layout, AppError> {
    let layout = crate::cm::cgroup::Layout::detect()
        .map_err(|e| AppError::ContainerManager(crate::cm::CmError::Cgroup(e)))?;
    let mode = layout.mode();
    tracing::info!(
        cgroup_version = mode.as_str(),
        cgroup_driver = %config.cgroup_driver,
        "cgroups: {} hierarchy, {} driver",
        mode.as_str(),
        config.cgroup_driver
    );
    if mode.is_v2() {
        return Ok(layout);
    }
    if config.fail_cgroup_v1 {
        return Err(AppError::CgroupV1);
    }
    tracing::warn!(
        "cgroup v1 support is in maintenance mode, please migrate to cgroup v2 \
         (failCgroupV1: true refuses to start on it)"
    );
    Ok(layout)
}

/// The container side of the `MemoryQoS` gate (Go's `enforceMemoryQoS`: the gate, on
/// cgroup v2): the throttling factor and the node's allocatable memory (Go's
/// `GetNodeAllocatableAbsolute`, from the capacity the container manager started with) for
/// containers' `memory.high`.
fn memory_qos(
    config: &Config,
    capacity: &crate::cm::allocatable::Capacity,
    mode: crate::cm::cgroup::layout::Mode,
) -> Option<crate::podspec::resources::MemoryQos> {
    let settings = config.cm_settings();
    if !settings.memory_qos || !mode.is_v2() {
        return None;
    }
    // The container manager's start has already refused reservations that do not parse.
    let allocatable = crate::cm::allocatable::allocatable_absolute(
        capacity,
        &settings.kube_reserved,
        &settings.system_reserved,
    )
    .ok()?;
    Some(crate::podspec::resources::MemoryQos {
        throttling_factor: config.memory_throttling_factor,
        allocatable_memory: allocatable.memory,
    })
}

/// The container manager (none without `cgroupsPerQOS`), and the node's capacity it was
/// started with.
async fn start_container_manager(
    config: &Config,
    layout: crate::cm::cgroup::Layout,
) -> Result<
    (
        Option<Arc<crate::cm::ContainerManager>>,
        crate::cm::allocatable::Capacity,
    ),
    AppError,
> {
    let settings = config.cm_settings();
    let root = config.root_dir.clone();
    let eviction = config.eviction.clone();
    let started = tokio::task::spawn_blocking(move || {
        let machine = crate::node_status::machine::read(&root);
        let capacity = crate::cm::allocatable::Capacity::from_machine(
            &machine,
            crate::cm::allocatable::kernel_pid_max(),
        );
        // Go's validateNodeAllocatable: the reservations and hard eviction thresholds fit.
        let hard: Vec<_> = crate::eviction::EvictionManager::new(&eviction)
            .thresholds()
            .iter()
            .filter(|t| t.is_hard())
            .cloned()
            .collect();
        crate::cm::allocatable::validate_node_allocatable(
            &capacity,
            &settings.kube_reserved,
            &settings.system_reserved,
            &hard,
        )?;
        crate::cm::ContainerManager::start(settings, capacity.clone(), layout)
            .map(|cm| (cm, capacity))
    })
    .await
    .map_err(|e| AppError::ContainerManager(crate::cm::CmError::Join(e.to_string())))?;
    let (cm, capacity) = started.map_err(AppError::ContainerManager)?;
    if let Some(cm) = &cm {
        tracing::info!(
            root = %cm.kubepods(),
            cgroups = cm.cgroups().layout().mode().as_str(),
            driver = cm.cgroups().driver(),
            "container manager: the kubepods tree is set up"
        );
    }
    Ok((cm.map(Arc::new), capacity))
}

/// The plugin manager on `<root-dir>/plugins_registry`, with the CSI drivers' handler and the
/// device manager's (device plugins registering there); their
/// node identity goes to the API server when there is one; registered drivers go to
/// `drivers`.
fn spawn_plugin_manager(
    config: &Config,
    api: Option<crate::kube_client::ApiHandle>,
    drivers: crate::csi::registration::Drivers,
    devices: Arc<crate::cm::devicemanager::DeviceManager>,
) {
    use crate::csi::registration::{CsiRegistration, NodeInfo};
    use crate::plugin_manager::{PluginHandler, PluginManager};
    let node_info: Arc<dyn NodeInfo> = match api {
        Some(api) => Arc::new(crate::csi::node_info::ApiNodeInfo::new(api)),
        None => Arc::new(crate::csi::node_info::Standalone),
    };
    let csi: Arc<dyn PluginHandler> = Arc::new(CsiRegistration::new(drivers, node_info));
    let device_plugins: Arc<dyn PluginHandler> = Arc::new(
        crate::cm::devicemanager::watcher::WatcherHandler::new(devices),
    );
    let handlers = [
        (
            ferrolet_proto::pluginregistration::CSI_PLUGIN.to_string(),
            csi,
        ),
        (
            ferrolet_proto::pluginregistration::DEVICE_PLUGIN.to_string(),
            device_plugins,
        ),
    ]
    .into();
    Arc::new(PluginManager::new(
        config.root_dir.join("plugins_registry"),
        handlers,
    ))
    .spawn();
}

/// The binary's command line as clap describes it (every flag and `trace`), for what is made
/// from it outside the binary: the man page and shell completions of the packages.
pub fn command() -> clap::Command {
    <Flags as clap::CommandFactory>::command()
}

/// Runs the kubelet with the process's arguments until a termination signal.
pub fn main() -> Result<(), AppError> {
    crate::heap::tune();
    let flags = Flags::parse();
    if let Some(line) = flags.version_line() {
        println!("{line}");
        return Ok(());
    }
    match &flags.command {
        Some(crate::config::Command::Check(args)) => {
            // Every failed check has its line already: the summary and the exit code suffice.
            if let Err(e) = crate::check::main(&flags, args) {
                eprintln!("{e}");
                std::process::exit(1);
            }
            return Ok(());
        }
        Some(crate::config::Command::Trace { what }) => return Ok(crate::trace::run(what)?),
        None => {}
    }
    let (config, warnings) = Config::load(&flags)?;
    logging::init(config.verbosity, config.log_format.is_json()).map_err(AppError::Logging)?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Blocking work here is short file and mount I/O, but a hundred pods make it come in
        // bursts: uncapped, a burst leaves ~70 threads behind, and steady small work keeps
        // waking them in turn, so none ever reaches its idle timeout (each holds its stack).
        .max_blocking_threads(16)
        .enable_all()
        .build()
        .map_err(AppError::Runtime)?;
    runtime.block_on(run(config))
}

/// The secret and configMap managers with the configured change detection.
fn object_cache(config: &Config, api: ApiHandle) -> Arc<crate::object_cache::ObjectCache> {
    use crate::config::ChangeDetection;
    use crate::object_cache::{CacheOptions, ObjectCache, Strategy};
    let strategy = match config.config_map_and_secret_change_detection_strategy {
        ChangeDetection::Get => Strategy::Get,
        ChangeDetection::Cache => Strategy::Cache,
        ChangeDetection::Watch => Strategy::Watch,
    };
    let options = CacheOptions {
        strategy,
        resync_interval: config.sync_frequency,
        ..CacheOptions::default()
    };
    ObjectCache::new(api, options)
}

/// Connects to the runtime, retrying while it is not up yet (it may start after us).
async fn connect(config: &Config) -> Cri {
    let mut delay = Duration::from_millis(200);
    loop {
        match Cri::connect(
            &config.container_runtime_endpoint,
            &config.image_service_endpoint,
            config.runtime_request_timeout,
        )
        .await
        {
            Ok(cri) => match cri.version().await {
                Ok(v) => {
                    tracing::info!(runtime = %v.runtime_name, version = %v.runtime_version, "connected to the container runtime");
                    return cri;
                }
                Err(e) => tracing::warn!(error = %e, "the container runtime does not answer yet"),
            },
            Err(e) => tracing::warn!(error = %e, "the container runtime is not up yet"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// Fails when the runtime reports another cgroup driver than ours (Go reads the same
/// RuntimeConfig); a runtime without the call (containerd before 1.7) is taken at our word.
async fn check_runtime_cgroup_driver(cri: &Cri, ours: &str) -> Result<(), AppError> {
    let theirs = match cri.cgroup_driver().await {
        Ok(Some(driver)) => driver,
        Ok(None) => return Ok(()),
        Err(e) => {
            tracing::info!(error = %e, "the container runtime does not report its cgroup driver; using ours");
            return Ok(());
        }
    };
    if theirs != ours {
        return Err(AppError::CgroupDriverMismatch {
            ours: ours.to_string(),
            theirs,
        });
    }
    tracing::info!(
        cgroup_driver = theirs,
        "the container runtime's cgroup driver matches ours"
    );
    Ok(())
}

async fn run(config: Config) -> Result<(), AppError> {
    let swap = node::swap_in_use();
    if config.fail_swap_on && !swap.is_empty() {
        return Err(AppError::SwapOn(swap.join(", ")));
    }
    tokio::fs::create_dir_all(&config.root_dir)
        .await
        .map_err(|source| AppError::RootDir {
            path: config.root_dir.clone(),
            source,
        })?;
    // The cluster's credentials first (a TLS bootstrap waits here for its CSR's approval),
    // then the API server before the runtime is up, so a bad certificate or a taken port
    // fails the start at once.
    let credentials = match config.api_server_mode() {
        true => Some(join(&config).await?),
        false => None,
    };
    let secure = if config.enable_server {
        let (api, serving) = match &credentials {
            Some(c) => (Some(c.api.clone()), c.serving.clone()),
            None => (None, None),
        };
        let server = server::secure::SecureServer::bind_with_api(&config, api, serving).await;
        Some(server.map_err(AppError::Api)?)
    } else {
        None
    };
    let healthz = listen(
        "healthz server",
        config.healthz_port,
        config.healthz_bind_address,
    )
    .await?;
    let read_only = listen("read-only API", config.read_only_port, config.address).await?;
    let cgroup_layout = check_cgroup_version(&config)?;
    let cgroup_mode = cgroup_layout.mode();
    let cri = connect(&config).await;
    check_runtime_cgroup_driver(&cri, &config.cgroup_driver).await?;
    let mut node = NodeContext {
        node_name: config.node_name.clone(),
        // The node's address, as its status has it: `--node-ip` when given (Go's
        // getHostIPsAnyWay), for hostIP and for the IPs of host-network pods.
        host_ip: config
            .node_ips
            .first()
            .copied()
            .unwrap_or_else(node::host_ip)
            .to_string(),
        cluster_dns: config.cluster_dns.clone(),
        cluster_domain: config.cluster_domain.clone(),
        resolv_conf: config.resolv_conf.clone(),
        pod_logs_dir: config.pod_logs_dir.clone(),
        cgroup_root: config.cgroup_root.clone(),
        cgroups_per_qos: config.cgroups_per_qos,
        systemd_cgroups: config.cgroup_driver == crate::config::SYSTEMD,
        memory_capacity: node::memory_capacity(),
        // Known once the container manager has the node's capacity.
        memory_qos: None,
        seccomp_profile_root: config.root_dir.join("seccomp"),
    };
    tracing::info!(node = %node.node_name, host_ip = %node.host_ip, "starting");
    let (seams, statuses) = match &credentials {
        Some(c) => {
            let statuses = StatusManager::new(c.api.clone(), MirrorTable::default());
            statuses.spawn();
            let seams = Seams {
                events: crate::event_recorder::spawn(c.api.clone(), &config.node_name),
                status_sink: Arc::new(statuses.clone()),
                secrets: Arc::new(crate::credentials::api::ApiSecrets::new(c.api.clone())),
                objects: object_cache(&config, c.api.clone()),
                tokens: crate::token::TokenManager::new(c.api.clone()),
                storage: Arc::new(crate::storage_api::ApiStorage::new(c.api.clone())),
                csi_drivers: Default::default(),
            };
            (seams, Some(statuses))
        }
        None => (Seams::default(), None),
    };
    let csi_drivers = seams.csi_drivers.clone();
    let events = seams.events.clone();
    let streaming = server::streaming::Streaming::new(Arc::new(cri.clone()));
    let secure = secure.map(|s| s.with_streaming(streaming));
    let (cm, capacity) = start_container_manager(&config, cgroup_layout).await?;
    node.memory_qos = memory_qos(&config, &capacity, cgroup_mode);
    let cpu = start_cpu_manager(&config, &cri).await?;
    let running = running_containers(&cri).await;
    let userns = start_userns_manager(&config, &cri).await?;
    let kubelet = Kubelet::new(config.clone(), node, cri, seams, cm, cpu, userns).await;
    if config.in_place_resize() {
        // As Go's allocation manager, an unreadable checkpoint stops the start: what the pods
        // were allocated cannot be guessed.
        let root = config.root_dir.clone();
        let manager =
            tokio::task::spawn_blocking(move || crate::allocation::AllocationManager::load(&root))
                .await
                .map_err(AppError::Join)?
                .map_err(AppError::Allocation)?;
        let _ = kubelet.allocation.set(std::sync::Arc::new(manager));
    }
    kubelet.devices.set_running_at_start(running);
    crate::cm::devicemanager::registration::start(kubelet.devices.clone())
        .await
        .map_err(AppError::DeviceManager)?;
    server::pod_resources::start(&config.root_dir, kubelet.clone())?;
    tokio::spawn(crate::heap::release_free_pages());
    let (tx, rx) = mpsc::channel(64);
    if let (Some(c), Some(statuses)) = (&credentials, statuses) {
        start_cluster(&kubelet, c, statuses, events, tx.clone());
    }
    spawn_plugin_manager(
        &config,
        credentials.as_ref().map(|c| c.api.clone()),
        csi_drivers,
        kubelet.devices.clone(),
    );
    if let Some(dir) = &config.static_pod_path {
        source::spawn_file_source(
            dir.clone(),
            config.node_name.clone(),
            config.file_check_frequency,
            tx.clone(),
        );
    }
    if let Some(url) = &config.static_pod_url {
        source::spawn_url_source(
            url.clone(),
            config.static_pod_url_header.clone(),
            config.node_name.clone(),
            config.http_check_frequency,
            tx.clone(),
        );
    }
    let view: Arc<dyn server::NodeView> = kubelet.clone();
    // Endpoints other parts serve on the API ports (`/stats/…`, `/metrics…`, `/debug/pods/…`).
    let extra = server::ExtraRoutes::new();
    let extra = crate::server::metrics::add_routes(extra);
    let extra = extra.route(
        crate::server::stats::SUMMARY_PATH,
        crate::server::stats::endpoint(kubelet.clone()),
    );
    let extra = extra.route(
        crate::server::timeline::PATH,
        crate::server::timeline::endpoint(kubelet.timeline.clone()),
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    if let Some(listener) = healthz {
        let (view, stop) = (view.clone(), stopped(stop_rx.clone()));
        tokio::spawn(async move {
            if let Err(e) = server::serve_healthz_on(listener, view, stop).await {
                tracing::error!(error = %e, "healthz server");
            }
        });
    }
    if let Some(listener) = read_only {
        let (view, extra, stop) = (view.clone(), extra.clone(), stopped(stop_rx.clone()));
        tokio::spawn(async move {
            if let Err(e) = server::serve_read_only_with(listener, view, extra, stop).await {
                tracing::error!(error = %e, "read-only API server");
            }
        });
    }
    if let Some(secure) = secure {
        let (view, extra, stop) = (view.clone(), extra.clone(), stopped(stop_rx.clone()));
        tokio::spawn(async move {
            if let Err(e) = secure.serve(view, extra, stop).await {
                tracing::error!(error = %e, "kubelet API server");
            }
        });
    }
    // The sources hold the senders; the loop ends when they all stop, or on a signal.
    drop(tx);
    tokio::select! {
        () = kubelet.clone().run(rx) => {}
        () = termination_signal() => tracing::info!("stopping (pods keep running)"),
    }
    let _ = stop_tx.send(true);
    Ok(())
}

/// Binds `ip:port` for the server `what` at start-up (none when the port is 0), so that a
/// taken port stops the kubelet with the address named instead of leaving it running without
/// that server.
async fn listen(
    what: &'static str,
    port: u16,
    ip: std::net::IpAddr,
) -> Result<Option<tokio::net::TcpListener>, AppError> {
    if port == 0 {
        return Ok(None);
    }
    let addr = SocketAddr::new(ip, port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind { what, addr, source })?;
    tracing::info!(%addr, "{what} listening");
    Ok(Some(listener))
}

/// The cluster credentials: the API client (after a TLS bootstrap if needed), its rotation,
/// and the serving certificate with `serverTLSBootstrap`.
struct Credentials {
    api: ApiHandle,
    serving: Option<Arc<crate::certificate::ReloadingCert>>,
    /// Rotations stop when dropped: held for the process's lifetime.
    _rotations: Vec<crate::certificate::RotationTask>,
}

async fn join(config: &Config) -> Result<Credentials, AppError> {
    let node_ips = if config.node_ips.is_empty() {
        vec![node::host_ip()]
    } else {
        config.node_ips.clone()
    };
    let settings = crate::certificate::CertificateSettings {
        cert_dir: config.cert_dir(),
        kubeconfig: config.kubeconfig.clone().unwrap_or_default(),
        bootstrap_kubeconfig: config.bootstrap_kubeconfig.clone(),
        rotate_certificates: config.rotate_certificates,
        server_tls_bootstrap: config.server_tls_bootstrap,
        node_name: config.node_name.clone(),
        hostnames: vec![config.node_name.clone()],
        node_addresses: node_ips,
        bootstrap_timeout: crate::certificate::BOOTSTRAP_TIMEOUT,
    };
    let (api, rotation) = crate::certificate::connect(&settings)
        .await
        .map_err(AppError::Cluster)?;
    tracing::info!(node = %config.node_name, "connected to the API server");
    let mut rotations: Vec<_> = rotation.into_iter().collect();
    let serving = if settings.server_tls_bootstrap {
        let (cert, task) = crate::certificate::serving_certificate(&settings, api.clone())
            .await
            .map_err(AppError::Cluster)?;
        rotations.push(task);
        Some(cert)
    } else {
        None
    };
    Ok(Credentials {
        api,
        serving,
        _rotations: rotations,
    })
}

/// API-server mode's loops: the node's registration, status and lease, mirror pods, and the
/// API pod source (merged with the file and URL sources through `tx`).
fn start_cluster(
    kubelet: &Arc<Kubelet>,
    credentials: &Credentials,
    statuses: StatusManager,
    events: Arc<dyn crate::events::EventRecorder>,
    tx: mpsc::Sender<crate::types::PodUpdate>,
) {
    let config = &kubelet.config;
    let api = credentials.api.clone();
    let settings = crate::node_status::NodeStatusSettings {
        node_name: config.node_name.clone(),
        hostname: config.node_name.clone(),
        register_node: config.register_node,
        node_labels: config.node_labels.clone(),
        register_with_taints: config.registration_taints(),
        node_ip: config.node_ips.first().copied(),
        max_pods: config.max_pods,
        kube_reserved: config.kube_reserved.clone(),
        system_reserved: config.system_reserved.clone(),
        eviction_hard: kubelet
            .eviction
            .thresholds()
            .iter()
            .filter(|t| t.is_hard())
            .cloned()
            .collect(),
        kubelet_port: config.port,
        status_update_frequency: config.node_status_update_frequency,
        status_report_frequency: config.node_status_report_frequency,
        lease_duration_secs: config.node_lease_duration_seconds,
        max_images: config.node_status_max_images,
        root_dir: config.root_dir.clone(),
    };
    let facts = Arc::new(ClusterFacts::new(kubelet));
    let wake = kubelet.volumes.in_use_changed();
    let node_status = crate::node_status::spawn(api.clone(), settings, facts, events, wake);
    let mirror_table = statuses.mirror_table();
    let uid_of_node = node_status.clone();
    let mirrors = crate::mirror_pods::MirrorPods::new(
        &config.node_name,
        Arc::new(move || uid_of_node.node().and_then(|n| n.metadata.uid.clone())),
    );
    source::spawn_api_source(
        api.clone(),
        config.node_name.clone(),
        tx,
        mirror_table.clone(),
    );
    let cluster = Cluster {
        api,
        node_status,
        mirror_table,
        mirrors,
    };
    if kubelet.cluster.set(cluster).is_err() {
        tracing::warn!("the cluster parts were set twice");
    }
}

async fn termination_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The packages' `/etc/ferrolet/kubelet.yaml` (packaging/etc/ferrolet/) loads as ferrolet
    /// reads `--config`, with nothing ignored, and says what kubelet.service promises. Its
    /// `cgroupDriver: systemd` is checked as text and loaded as `cgroupfs`: the driver's own
    /// check wants systemd as PID 1, which the machine running the tests need not have.
    #[test]
    fn the_packaged_config_loads() {
        let text = include_str!("../../packaging/etc/ferrolet/kubelet.yaml");
        assert!(text.contains("\ncgroupDriver: systemd\n"), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kubelet.yaml");
        let cgroupfs = text.replace("\ncgroupDriver: systemd\n", "\ncgroupDriver: cgroupfs\n");
        std::fs::write(&file, cgroupfs).unwrap();
        let flags = Flags::parse_from(["ferrolet".as_ref(), "--config".as_ref(), file.as_os_str()]);
        let (config, warnings) = Config::load(&flags).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            config.static_pod_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(
            config.container_runtime_endpoint,
            "unix:///run/ferrolet/cri.sock"
        );
    }

    /// The command the man page and completions are made from is the one main parses with.
    #[test]
    fn the_command_is_the_flags() {
        let command = command();
        assert_eq!(command.get_name(), "ferrolet");
        assert!(command.get_arguments().any(|a| a.get_id() == "kubeconfig"));
        assert!(command.get_subcommands().any(|c| c.get_name() == "trace"));
        command.debug_assert();
    }
}
