//! A small CSI driver for the tests (issue #35), used where the real hostpath driver cannot
//! run: the CSI spec's Node service on a unix socket, backed by directories under its state
//! directory (`volumes/<volume id>`), and the registration socket node-driver-registrar would
//! serve in `<root-dir>/plugins_registry/`. It follows the spec's rules: calls are idempotent,
//! an unknown volume is `NotFound`, a publish of a volume that is not staged (for a staging
//! driver) is `FailedPrecondition`, a missing capability or path is `InvalidArgument`.
//! Volumes are made by the test ([`TestCsiDriver::create_volume`], the controller's part),
//! inline ephemeral ones by their first publish. A raw block volume
//! ([`TestCsiDriver::create_block_volume`]) is a sparse file behind a loop device: staged, the
//! loop device is attached; published, the device node is bind-mounted on the file the
//! kubelet names (what real block drivers do with their disks). Every call is recorded for the tests to
//! check what the kubelet sent. Its state is on disk, so a driver stopped and started again
//! keeps its volumes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ferrolet_proto::csi::node_service_capability::{self, rpc};
use ferrolet_proto::csi::{
    Answer, Node, NodeExpandVolumeRequest, NodeExpandVolumeResponse, NodeGetCapabilitiesResponse,
    NodeGetInfoResponse, NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse,
    NodePublishVolumeRequest, NodePublishVolumeResponse, NodeServer, NodeServiceCapability,
    NodeStageVolumeRequest, NodeStageVolumeResponse, NodeUnpublishVolumeRequest,
    NodeUnpublishVolumeResponse, NodeUnstageVolumeRequest, NodeUnstageVolumeResponse, Topology,
    VolumeUsage, volume_usage,
};
use ferrolet_proto::pluginregistration::{
    CSI_PLUGIN, PluginInfo, Registration, RegistrationServer, RegistrationStatus,
    RegistrationStatusResponse,
};
use nix::mount::{MntFlags, MsFlags};
use tonic::Status;

/// How the driver behaves.
#[derive(Clone, Debug)]
pub struct DriverOptions {
    /// The driver's name.
    pub name: String,
    /// Whether it has `STAGE_UNSTAGE_VOLUME`.
    pub stage: bool,
    /// The node id `NodeGetInfo` answers.
    pub node_id: String,
    /// The topology segments `NodeGetInfo` answers.
    pub topology: BTreeMap<String, String>,
    /// Whether it has `EXPAND_VOLUME` (`NodeExpandVolume` then answers the asked size).
    pub expand: bool,
}

/// One call the driver received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// `NodeStageVolume`, `NodePublishVolume`, ...
    pub method: &'static str,
    /// The volume id.
    pub volume_id: String,
    /// The target or staging path.
    pub path: String,
    /// The volume context (publish and stage).
    pub context: BTreeMap<String, String>,
    /// `readonly` (publish).
    pub readonly: bool,
}

#[derive(Clone)]
struct Inner {
    options: DriverOptions,
    state: PathBuf,
    calls: Arc<Mutex<Vec<Call>>>,
}

/// A running test driver: its Node service and registration sockets.
pub struct TestCsiDriver {
    inner: Inner,
    socket: PathBuf,
    registration: PathBuf,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    told: Arc<Mutex<Vec<RegistrationStatus>>>,
}

impl TestCsiDriver {
    /// Starts the driver with its state in `state`, its socket at
    /// `<root>/plugins/<name>/csi.sock` and its registration socket in
    /// `<root>/plugins_registry/` (so the kubelet registers it).
    pub fn start(root: &Path, state: &Path, options: DriverOptions) -> std::io::Result<Self> {
        let socket = root.join("plugins").join(&options.name).join("csi.sock");
        let registration = root
            .join("plugins_registry")
            .join(format!("{}-reg.sock", options.name));
        for dir in [
            socket.parent(),
            registration.parent(),
            Some(&state.join("volumes")),
        ]
        .into_iter()
        .flatten()
        {
            std::fs::create_dir_all(dir)?;
        }
        let inner = Inner {
            options,
            state: state.to_path_buf(),
            calls: Arc::default(),
        };
        let told = Arc::new(Mutex::new(Vec::new()));
        let node = serve(
            &socket,
            tonic::service::Routes::new(NodeServer::new(inner.clone())),
        )?;
        let registrar = Registrar {
            name: inner.options.name.clone(),
            endpoint: socket.display().to_string(),
            told: told.clone(),
        };
        let reg = serve(
            &registration,
            tonic::service::Routes::new(RegistrationServer::new(registrar)),
        )?;
        Ok(Self {
            inner,
            socket,
            registration,
            tasks: vec![node, reg],
            told,
        })
    }

    /// Makes volume `id` (the controller's `CreateVolume`).
    pub fn create_volume(&self, id: &str) -> std::io::Result<PathBuf> {
        let dir = self.inner.volume_dir(id);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Makes raw block volume `id` of `bytes` (a sparse `disk.img` in its directory).
    pub fn create_block_volume(&self, id: &str, bytes: u64) -> std::io::Result<PathBuf> {
        let dir = self.create_volume(id)?;
        let img = dir.join(DISK);
        std::fs::File::create(&img)?.set_len(bytes)?;
        Ok(img)
    }

    /// Where volume `id`'s data lives.
    pub fn volume_dir(&self, id: &str) -> PathBuf {
        self.inner.volume_dir(id)
    }

    /// The calls received so far.
    pub fn calls(&self) -> Vec<Call> {
        self.inner
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What the kubelet told the registrar.
    pub fn registration_statuses(&self) -> Vec<RegistrationStatus> {
        self.told.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops serving and removes both sockets (the driver's pod deleted); its volumes and
    /// their mounts stay.
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        let _ = std::fs::remove_file(&self.registration);
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for TestCsiDriver {
    fn drop(&mut self) {
        self.shut();
    }
}

/// Serves `router` on a unix socket at `socket` until the task is aborted.
fn serve(
    socket: &Path,
    router: tonic::service::Routes,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let _ = std::fs::remove_file(socket);
    let listener = ferrolet_proto::transport::bind(&socket.display().to_string(), 0o600)
        .map_err(std::io::Error::other)?;
    let server = tonic::transport::Server::builder()
        .add_routes(router)
        .serve_with_incoming(ferrolet_proto::transport::incoming(listener, true));
    Ok(tokio::spawn(async move {
        let _ = server.await;
    }))
}

/// The registration socket's service (what node-driver-registrar serves).
struct Registrar {
    name: String,
    endpoint: String,
    told: Arc<Mutex<Vec<RegistrationStatus>>>,
}

impl Registration for Registrar {
    fn get_info(&self) -> Answer<PluginInfo> {
        let info = PluginInfo {
            r#type: CSI_PLUGIN.into(),
            name: self.name.clone(),
            endpoint: self.endpoint.clone(),
            supported_versions: vec!["1.0.0".into()],
        };
        Box::pin(async move { Ok(info) })
    }

    fn notify_registration_status(
        &self,
        s: RegistrationStatus,
    ) -> Answer<RegistrationStatusResponse> {
        self.told.lock().unwrap_or_else(|p| p.into_inner()).push(s);
        Box::pin(async { Ok(RegistrationStatusResponse {}) })
    }
}

impl Inner {
    fn volume_dir(&self, id: &str) -> PathBuf {
        self.state.join("volumes").join(id)
    }

    fn record(&self, call: Call) {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(call);
    }

    /// The volume's directory, `NotFound` when it was never made.
    fn existing(&self, id: &str) -> Result<PathBuf, Status> {
        if id.is_empty() || id.contains('/') {
            return Err(Status::invalid_argument("volume id missing or invalid"));
        }
        let dir = self.volume_dir(id);
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(Status::not_found(format!("volume {id} does not exist")))
        }
    }
}

/// A block volume's backing file in its directory.
const DISK: &str = "disk.img";
/// The loop device a block volume is attached to, by name, in its directory.
const LOOP: &str = "loop";

/// Attaches `dir`'s disk to a loop device unless it is; the device's path.
fn attach_loop(dir: &Path) -> Result<PathBuf, Status> {
    if let Ok(dev) = std::fs::read_to_string(dir.join(LOOP)) {
        return Ok(PathBuf::from(dev.trim()));
    }
    let out = std::process::Command::new("losetup")
        .args(["--find", "--show"])
        .arg(dir.join(DISK))
        .output()
        .map_err(|e| Status::internal(format!("losetup: {e}")))?;
    if !out.status.success() {
        return Err(Status::internal(format!(
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    std::fs::write(dir.join(LOOP), &dev).map_err(|e| Status::internal(e.to_string()))?;
    Ok(PathBuf::from(dev))
}

/// Detaches `dir`'s loop device, if attached.
fn detach_loop(dir: &Path) -> Result<(), Status> {
    let Ok(dev) = std::fs::read_to_string(dir.join(LOOP)) else {
        return Ok(());
    };
    let out = std::process::Command::new("losetup")
        .arg("-d")
        .arg(dev.trim())
        .output()
        .map_err(|e| Status::internal(format!("losetup -d: {e}")))?;
    if !out.status.success() {
        return Err(Status::internal(format!(
            "losetup -d {}: {}",
            dev.trim(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let _ = std::fs::remove_file(dir.join(LOOP));
    Ok(())
}

fn is_mounted(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let Ok(path) = std::fs::canonicalize(path) else {
        return false;
    };
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|p| Path::new(p) == path)
}

fn bind(source: &Path, target: &Path, readonly: bool) -> Result<(), Status> {
    let internal = |e: nix::Error| Status::internal(format!("mounting {}: {e}", target.display()));
    nix::mount::mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(internal)?;
    if readonly {
        nix::mount::mount(
            None::<&str>,
            target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .map_err(internal)?;
    }
    Ok(())
}

fn unmount(target: &Path) -> Result<(), Status> {
    while is_mounted(target) {
        nix::mount::umount2(target, MntFlags::MNT_DETACH)
            .map_err(|e| Status::internal(format!("unmounting {}: {e}", target.display())))?;
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(e.to_string()))?
}

impl Inner {
    /// A block volume published: the loop device (attached at stage, or now for a driver
    /// that does not stage) bind-mounted on the file `target_path` names.
    async fn publish_block(
        &self,
        r: &NodePublishVolumeRequest,
        dir: PathBuf,
    ) -> Result<NodePublishVolumeResponse, Status> {
        let staged = dir.join(LOOP).exists();
        if self.options.stage && !staged {
            return Err(Status::failed_precondition(format!(
                "volume {} is not staged",
                r.volume_id
            )));
        }
        let target = PathBuf::from(&r.target_path);
        let readonly = r.readonly;
        blocking(move || {
            if is_mounted(&target) {
                return Ok(NodePublishVolumeResponse {});
            }
            let dev = attach_loop(&dir)?;
            std::fs::File::create(&target).map_err(|e| Status::internal(e.to_string()))?;
            bind(&dev, &target, readonly)?;
            Ok(NodePublishVolumeResponse {})
        })
        .await
    }
}

impl Node for Inner {
    fn node_stage_volume(&self, r: NodeStageVolumeRequest) -> Answer<NodeStageVolumeResponse> {
        let me = self.clone();
        Box::pin(async move {
            me.record(Call {
                method: "NodeStageVolume",
                volume_id: r.volume_id.clone(),
                path: r.staging_target_path.clone(),
                context: r.volume_context.clone(),
                readonly: false,
            });
            if !me.options.stage {
                return Err(Status::unimplemented("this driver does not stage"));
            }
            if r.volume_capability.is_none() || r.staging_target_path.is_empty() {
                return Err(Status::invalid_argument(
                    "volume capability and staging path are required",
                ));
            }
            let source = me.existing(&r.volume_id)?;
            let target = PathBuf::from(&r.staging_target_path);
            blocking(move || {
                if !target.is_dir() {
                    return Err(Status::invalid_argument(format!(
                        "staging path {} is not a directory",
                        target.display()
                    )));
                }
                if source.join(DISK).exists() {
                    attach_loop(&source)?;
                } else if !is_mounted(&target) {
                    bind(&source, &target, false)?;
                }
                Ok(NodeStageVolumeResponse {})
            })
            .await
        })
    }

    fn node_unstage_volume(
        &self,
        r: NodeUnstageVolumeRequest,
    ) -> Answer<NodeUnstageVolumeResponse> {
        let me = self.clone();
        Box::pin(async move {
            me.record(Call {
                method: "NodeUnstageVolume",
                volume_id: r.volume_id.clone(),
                path: r.staging_target_path.clone(),
                context: BTreeMap::new(),
                readonly: false,
            });
            let dir = me.existing(&r.volume_id)?;
            let target = PathBuf::from(&r.staging_target_path);
            blocking(move || {
                unmount(&target)?;
                detach_loop(&dir)?;
                Ok(NodeUnstageVolumeResponse {})
            })
            .await
        })
    }

    fn node_publish_volume(
        &self,
        r: NodePublishVolumeRequest,
    ) -> Answer<NodePublishVolumeResponse> {
        let me = self.clone();
        Box::pin(async move {
            me.record(Call {
                method: "NodePublishVolume",
                volume_id: r.volume_id.clone(),
                path: r.target_path.clone(),
                context: r.volume_context.clone(),
                readonly: r.readonly,
            });
            if r.volume_capability.is_none() || r.target_path.is_empty() {
                return Err(Status::invalid_argument(
                    "volume capability and target path are required",
                ));
            }
            let ephemeral = r
                .volume_context
                .get("csi.storage.k8s.io/ephemeral")
                .map(String::as_str)
                == Some("true");
            if ephemeral {
                std::fs::create_dir_all(me.volume_dir(&r.volume_id))
                    .map_err(|e| Status::internal(e.to_string()))?;
            }
            let dir = me.existing(&r.volume_id)?;
            if dir.join(DISK).exists() {
                return me.publish_block(&r, dir).await;
            }
            let source = if me.options.stage && !ephemeral {
                let staging = PathBuf::from(&r.staging_target_path);
                if r.staging_target_path.is_empty() || !is_mounted(&staging) {
                    return Err(Status::failed_precondition(format!(
                        "volume {} is not staged at {:?}",
                        r.volume_id, r.staging_target_path
                    )));
                }
                staging
            } else {
                dir
            };
            let target = PathBuf::from(&r.target_path);
            let readonly = r.readonly;
            blocking(move || {
                if is_mounted(&target) {
                    return Ok(NodePublishVolumeResponse {});
                }
                std::fs::create_dir_all(&target).map_err(|e| Status::internal(e.to_string()))?;
                bind(&source, &target, readonly)?;
                Ok(NodePublishVolumeResponse {})
            })
            .await
        })
    }

    fn node_unpublish_volume(
        &self,
        r: NodeUnpublishVolumeRequest,
    ) -> Answer<NodeUnpublishVolumeResponse> {
        let me = self.clone();
        Box::pin(async move {
            me.record(Call {
                method: "NodeUnpublishVolume",
                volume_id: r.volume_id.clone(),
                path: r.target_path.clone(),
                context: BTreeMap::new(),
                readonly: false,
            });
            let dir = me.existing(&r.volume_id)?;
            let target = PathBuf::from(&r.target_path);
            let ephemeral = r.volume_id.starts_with("csi-");
            let stage = me.options.stage;
            blocking(move || {
                unmount(&target)?;
                let block = dir.join(DISK).exists();
                let removed = if block {
                    std::fs::remove_file(&target)
                } else {
                    std::fs::remove_dir(&target)
                };
                match removed {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Status::internal(e.to_string())),
                }
                if block && !stage {
                    detach_loop(&dir)?;
                }
                if ephemeral {
                    // An inline volume lives and dies with its pod.
                    let _ = std::fs::remove_dir_all(&dir);
                }
                Ok(NodeUnpublishVolumeResponse {})
            })
            .await
        })
    }

    fn node_get_volume_stats(
        &self,
        r: NodeGetVolumeStatsRequest,
    ) -> Answer<NodeGetVolumeStatsResponse> {
        let me = self.clone();
        Box::pin(async move {
            me.existing(&r.volume_id)?;
            let st = nix::sys::statvfs::statvfs(Path::new(&r.volume_path))
                .map_err(|e| Status::not_found(format!("{}: {e}", r.volume_path)))?;
            let frsize = st.fragment_size() as i64;
            let bytes = VolumeUsage {
                available: st.blocks_available() as i64 * frsize,
                total: st.blocks() as i64 * frsize,
                used: (st.blocks() - st.blocks_free()) as i64 * frsize,
                unit: volume_usage::Unit::Bytes as i32,
            };
            let inodes = VolumeUsage {
                available: st.files_available() as i64,
                total: st.files() as i64,
                used: (st.files() - st.files_free()) as i64,
                unit: volume_usage::Unit::Inodes as i32,
            };
            Ok(NodeGetVolumeStatsResponse {
                usage: vec![bytes, inodes],
                volume_condition: None,
            })
        })
    }

    fn node_expand_volume(&self, r: NodeExpandVolumeRequest) -> Answer<NodeExpandVolumeResponse> {
        let me = self.clone();
        Box::pin(async move {
            me.record(Call {
                method: "NodeExpandVolume",
                volume_id: r.volume_id.clone(),
                path: r.volume_path.clone(),
                context: BTreeMap::new(),
                readonly: false,
            });
            if !me.options.expand {
                return Err(Status::unimplemented("this driver does not expand volumes"));
            }
            me.existing(&r.volume_id)?;
            if !Path::new(&r.volume_path).exists() {
                return Err(Status::not_found(format!(
                    "{} does not exist",
                    r.volume_path
                )));
            }
            let capacity_bytes = r.capacity_range.map_or(0, |c| c.required_bytes);
            Ok(NodeExpandVolumeResponse { capacity_bytes })
        })
    }

    fn node_get_capabilities(&self) -> Answer<NodeGetCapabilitiesResponse> {
        let mut types = vec![rpc::Type::GetVolumeStats];
        if self.options.stage {
            types.push(rpc::Type::StageUnstageVolume);
        }
        if self.options.expand {
            types.push(rpc::Type::ExpandVolume);
        }
        let capabilities = types
            .into_iter()
            .map(|t| NodeServiceCapability {
                r#type: Some(node_service_capability::Type::Rpc(
                    node_service_capability::Rpc { r#type: t as i32 },
                )),
            })
            .collect();
        Box::pin(async move { Ok(NodeGetCapabilitiesResponse { capabilities }) })
    }

    fn node_get_info(&self) -> Answer<NodeGetInfoResponse> {
        let node_id = self.options.node_id.clone();
        let segments = self.options.topology.clone();
        Box::pin(async move {
            Ok(NodeGetInfoResponse {
                node_id,
                max_volumes_per_node: 16,
                accessible_topology: Some(Topology { segments }),
            })
        })
    }
}
