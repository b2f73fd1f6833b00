//! CSI volumes in the volume manager (Go's `csiAttacher` and `csiMountMgr` as the operation
//! executor drives them). A persistent volume is waited for until its VolumeAttachment is
//! attached (when the CSIDriver requires attaching), staged once per node at its global mount
//! (`MountDevice`; `NodeStageVolume` when the driver stages), then published into each pod
//! that uses it; an inline (`Ephemeral`) volume is only published. Teardown unpublishes; a
//! staged device no pod volume uses any more is unstaged by the reconciler's sweep
//! ([`VolumeManager::unstage`]).
//!
//! A device's operations are serialised by a lock of its own, and a pod volume is counted
//! as a device's user before its publish starts, so a sweep never unstages under a publish.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferrolet_proto::csi::{NodePublishVolumeRequest, NodeStageVolumeRequest};
use tokio::time::Instant;

use super::VolumeManager;
use super::actual::MountedVolume;
use super::desired::VolumeKey;
use crate::csi::client::{Capabilities, CsiClient};
use crate::csi::volume::{
    self as csi_volume, CsiVolume, DriverPolicy, Lifecycle, SecretRef, VolumeData,
};
use crate::types::Pod;
use crate::volume::blocking;
use crate::volume::ownership::{ChangePolicy, set_volume_ownership};

/// How long a volume waits for its VolumeAttachment (Go's `csiTimeout` for `WaitForAttach`).
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(120);

/// Go's `log()` prefix of CSI messages.
fn log(message: impl std::fmt::Display) -> String {
    format!("kubernetes.io/csi: {message}")
}

/// What a pod volume set up through CSI keeps for its teardown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsiMounted {
    /// The driver.
    pub driver: String,
    /// The volume id.
    pub handle: String,
    /// Its staged device's unique name (persistent volumes).
    pub device: Option<String>,
    /// A raw block volume's name in its paths (`volumeDevices/publish/<name>/<uid>`).
    pub block_spec: Option<String>,
}

/// A volume staged (or, for drivers that do not stage, given its global directory) on this
/// node.
#[derive(Clone, Debug)]
pub struct Device {
    /// The driver.
    pub driver: String,
    /// The volume id.
    pub handle: String,
    /// The global mount (`.../globalmount`).
    pub path: PathBuf,
    /// The pod volumes published from it.
    pub users: BTreeSet<VolumeKey>,
    /// Whether its driver requires attaching (it is then reported in `volumesInUse`).
    pub attachable: bool,
    /// A raw block volume's name in its paths (staged at `volumeDevices/staging/<name>`).
    pub block_spec: Option<String>,
    /// Staged by this process; one found on disk at start is staged again before its next
    /// publish (NodeStageVolume is idempotent; a reboot took the mount), as Go treats an
    /// uncertain device.
    pub confirmed: bool,
}

/// Where and how a volume is published (the inputs of its `NodePublishVolumeRequest`).
struct PublishTarget<'a> {
    pod: &'a Pod,
    volume: &'a CsiVolume,
    policy: &'a DriverPolicy,
    caps: &'a Capabilities,
    /// The staging path, for drivers that stage.
    staging: Option<&'a std::path::Path>,
    target: &'a std::path::Path,
    /// The fsGroup, for drivers with `VOLUME_MOUNT_GROUP`.
    mount_group: Option<u32>,
}

impl VolumeManager {
    /// The lock of device `unique`.
    fn device_lock(&self, unique: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.device_locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(unique.to_string()).or_default().clone()
    }

    /// Sets up a CSI volume of `pod` as volume `key`.
    pub(super) async fn set_up_csi(
        &self,
        key: &VolumeKey,
        pod: &Arc<Pod>,
        volume: CsiVolume,
    ) -> Result<MountedVolume, String> {
        let setup_failed = |e: String| {
            format!(
                "MountVolume.SetUp failed for volume {:?} : {e}",
                volume.spec_name
            )
        };
        let driver_object = self.storage.csi_driver(&volume.driver).await.map_err(|e| {
            setup_failed(log(format!(
                "mounter.SetupAt failed to check volume lifecycle mode: {e}"
            )))
        })?;
        let policy = DriverPolicy::from_object(driver_object.as_ref());
        policy
            .check_lifecycle(&volume.driver, volume.lifecycle)
            .map_err(|e| {
                setup_failed(log(format!(
                    "mounter.SetupAt failed to check volume lifecycle mode: {e}"
                )))
            })?;
        let client = CsiClient::connect(&self.drivers, &volume.driver)
            .await
            .map_err(|e| {
                setup_failed(log(format!(
                    "mounter.SetUpAt failed to get CSI client: {e}"
                )))
            })?;
        let caps = client.capabilities().await.map_err(|e| {
            setup_failed(log(format!(
                "mounter.SetUpAt failed to check for STAGE_UNSTAGE_VOLUME capability: {e}"
            )))
        })?;
        let persistent = volume.lifecycle == Lifecycle::Persistent;
        let publish_context = if persistent && policy.attach_required {
            // In use from the decision on, so the controller never detaches it under the
            // set-up (Go reports the desired state's attachable volumes too).
            self.lock()
                .attaching
                .insert(key.clone(), volume.unique_name());
            self.in_use_changed.notify_one();
            let attached = self.wait_attached(&volume).await;
            if attached.is_err() {
                self.lock().attaching.remove(key);
            }
            attached?
        } else {
            BTreeMap::new()
        };
        if volume.block {
            return self
                .set_up_block(key, pod, &volume, &client, &caps, &policy, publish_context)
                .await;
        }
        let fs_group =
            crate::volume::fs_group(&volume.spec_name, pod).map_err(|e| e.to_string())?;
        let mount_group = fs_group.filter(|_| caps.volume_mount_group);
        let unique = volume.unique_name();
        // Persistent volumes: the device's lock for staging and publishing.
        let lock = persistent.then(|| self.device_lock(&unique));
        let _guard = match &lock {
            Some(l) => Some(l.lock().await),
            None => None,
        };
        let staging = if persistent {
            // Staged once per node (Go's device mount state), whatever the pods.
            let staged = self
                .lock()
                .devices
                .get(&unique)
                .filter(|d| d.confirmed)
                .map(|d| d.path.clone());
            let path = match staged {
                Some(path) => path,
                None => {
                    let staged = self
                        .mount_device(&client, &caps, &volume, &publish_context, mount_group)
                        .await;
                    if staged.is_err() {
                        self.lock().attaching.remove(key);
                    }
                    staged?
                }
            };
            let mut state = self.lock();
            let device = state
                .devices
                .entry(unique.clone())
                .or_insert_with(|| Device {
                    driver: volume.driver.clone(),
                    handle: volume.handle.clone(),
                    path: path.clone(),
                    users: BTreeSet::new(),
                    confirmed: true,
                    attachable: policy.attach_required,
                    block_spec: None,
                });
            device.confirmed = true;
            device.attachable = policy.attach_required;
            device.users.insert(key.clone());
            state.attaching.remove(key);
            caps.stage_unstage.then_some(path)
        } else {
            None
        };
        let published = self
            .publish(
                &client,
                &caps,
                pod,
                &volume,
                &policy,
                staging,
                publish_context,
                mount_group,
            )
            .await;
        let target = match published {
            Ok(t) => t,
            Err(e) => {
                if persistent {
                    let mut state = self.lock();
                    let still_mounted = state.actual.get(key).is_some();
                    if let Some(d) = state.devices.get_mut(&unique)
                        && !still_mounted
                    {
                        d.users.remove(key);
                    }
                }
                return Err(setup_failed(e));
            }
        };
        if !caps.volume_mount_group && policy.applies_fs_group(&volume, fs_group) {
            let policy = ChangePolicy::from_api(
                pod.spec
                    .as_ref()
                    .and_then(|s| s.security_context.as_ref())
                    .and_then(|s| s.fs_group_change_policy.as_deref()),
            );
            let (name, dir) = (volume.spec_name.clone(), target.clone());
            blocking(move || set_volume_ownership(&name, &dir, fs_group, policy, false))
                .await
                .map_err(|e| {
                    setup_failed(format!(
                        "applyFSGroup failed for vol {}: {e}",
                        volume.handle
                    ))
                })?;
        }
        Ok(MountedVolume {
            path: target,
            plugin: Some(csi_volume::POD_PLUGIN_DIR.to_string()),
            generation: None,
            token_fingerprint: None,
            read_only: volume.read_only,
            republish: policy.requires_republish,
            csi: Some(CsiMounted {
                driver: volume.driver.clone(),
                handle: volume.handle.clone(),
                device: persistent.then_some(unique),
                block_spec: None,
            }),
            pvc: None,
            block: false,
        })
    }

    /// Go's block mapper (`SetUpDevice`, `MapPodDevice`, `MapBlockVolume`): the volume's
    /// `vol_data.json`, `NodeStageVolume` at `volumeDevices/staging/<name>` once per node (for
    /// staging drivers), `NodePublishVolume` to the file `volumeDevices/publish/<name>/<uid>`,
    /// then the links the container's device is made from (`pods/<uid>/volumeDevices/
    /// kubernetes.io~csi/<name>`) and the global map's (`volumeDevices/<name>/dev/<uid>`).
    #[allow(clippy::too_many_arguments)]
    async fn set_up_block(
        &self,
        key: &VolumeKey,
        pod: &Arc<Pod>,
        volume: &CsiVolume,
        client: &CsiClient,
        caps: &Capabilities,
        policy: &DriverPolicy,
        publish_context: BTreeMap<String, String>,
    ) -> Result<MountedVolume, String> {
        let root = self.settings.root_dir.clone();
        let spec = volume.spec_name.clone();
        let uid = crate::types::uid_of(pod);
        let unique = volume.unique_name();
        let device_failed =
            |e: String| format!("MapVolume.SetUpDevice failed for volume {spec:?} : {e}");
        let lock = self.device_lock(&unique);
        let _guard = lock.lock().await;
        let node = self.settings.node.node_name.clone();
        let data = VolumeData {
            spec_name: spec.clone(),
            handle: volume.handle.clone(),
            driver: volume.driver.clone(),
            attachment_id: csi_volume::attachment_name(&volume.handle, &volume.driver, &node),
            node_name: node,
            lifecycle: volume.lifecycle.as_str().to_string(),
        };
        let staging = csi_volume::block_staging_path(&root, &spec);
        let (data_dir, stage_dir) = (
            csi_volume::block_volume_dir(&root, &spec).join("data"),
            staging.clone(),
        );
        let made = blocking(move || {
            csi_volume::save_volume_data(&data_dir, &data)
                .map_err(|e| crate::volume::VolumeError::io("", &data_dir, e))?;
            crate::volume::mkdir_all("", &stage_dir, 0o750)
        })
        .await;
        if let Err(e) = made {
            self.lock().attaching.remove(key);
            return Err(device_failed(e.to_string()));
        }
        let confirmed = self
            .lock()
            .devices
            .get(&unique)
            .is_some_and(|d| d.confirmed);
        if !confirmed && caps.stage_unstage {
            let secrets = match &volume.stage_secret {
                Some(r) => match self.secret_data(r).await {
                    Ok(s) => s,
                    Err(e) => {
                        self.lock().attaching.remove(key);
                        return Err(device_failed(e));
                    }
                },
                None => BTreeMap::new(),
            };
            let req = NodeStageVolumeRequest {
                volume_id: volume.handle.clone(),
                publish_context: publish_context.clone(),
                staging_target_path: staging.to_string_lossy().into_owned(),
                volume_capability: Some(csi_volume::capability(volume, caps, None)),
                secrets,
                volume_context: volume.attributes.clone(),
            };
            if let Err(e) = client.stage(req).await {
                self.lock().attaching.remove(key);
                return Err(device_failed(log(format!(
                    "blockMapper.stageVolumeForBlock failed: {e}"
                ))));
            }
        }
        {
            let mut state = self.lock();
            let device = state
                .devices
                .entry(unique.clone())
                .or_insert_with(|| Device {
                    driver: volume.driver.clone(),
                    handle: volume.handle.clone(),
                    path: staging.clone(),
                    users: BTreeSet::new(),
                    confirmed: true,
                    attachable: policy.attach_required,
                    block_spec: Some(spec.clone()),
                });
            device.confirmed = true;
            device.attachable = policy.attach_required;
            device.users.insert(key.clone());
            state.attaching.remove(key);
        }
        let target = csi_volume::block_publish_path(&root, &spec, &uid);
        let published = self
            .publish_block(
                client,
                caps,
                pod,
                volume,
                policy,
                &staging,
                &target,
                publish_context,
            )
            .await;
        if let Err(e) = published {
            let mut state = self.lock();
            let still_mounted = state.actual.get(key).is_some();
            if let Some(d) = state.devices.get_mut(&unique)
                && !still_mounted
            {
                d.users.remove(key);
            }
            return Err(format!(
                "MapVolume.MapPodDevice failed for volume {spec:?} : {e}"
            ));
        }
        let link = csi_volume::pod_device_path(&root, &uid, &spec);
        let global = csi_volume::block_volume_dir(&root, &spec)
            .join("dev")
            .join(&uid);
        let (l, g, t) = (link.clone(), global, target.clone());
        blocking(move || {
            for at in [&l, &g] {
                replace_link(&t, at).map_err(|e| crate::volume::VolumeError::io("", at, e))?;
            }
            Ok(())
        })
        .await
        .map_err(|e| format!("MapVolume.MapBlockVolume failed for volume {spec:?} : {e}"))?;
        Ok(MountedVolume {
            path: link,
            plugin: Some(csi_volume::POD_PLUGIN_DIR.to_string()),
            generation: None,
            token_fingerprint: None,
            read_only: volume.read_only,
            republish: policy.requires_republish,
            csi: Some(CsiMounted {
                driver: volume.driver.clone(),
                handle: volume.handle.clone(),
                device: Some(unique),
                block_spec: Some(spec.clone()),
            }),
            pvc: None,
            block: true,
        })
    }

    /// `NodePublishVolume` of a block volume to `target` (its directory made first, as Go's
    /// `MapPodDevice`).
    #[allow(clippy::too_many_arguments)]
    async fn publish_block(
        &self,
        client: &CsiClient,
        caps: &Capabilities,
        pod: &Pod,
        volume: &CsiVolume,
        policy: &DriverPolicy,
        staging: &std::path::Path,
        target: &std::path::Path,
        publish_context: BTreeMap<String, String>,
    ) -> Result<(), String> {
        let dir = target.parent().map(PathBuf::from).unwrap_or_default();
        blocking(move || crate::volume::mkdir_all("", &dir, 0o750))
            .await
            .map_err(|e| e.to_string())?;
        let staging = caps.stage_unstage.then_some(staging);
        let req = self
            .publish_request(
                PublishTarget {
                    pod,
                    volume,
                    policy,
                    caps,
                    staging,
                    target,
                    mount_group: None,
                },
                publish_context,
                |e| e,
            )
            .await?;
        client
            .publish(req)
            .await
            .map_err(|e| log(format!("blockMapper.publishVolumeForBlock failed: {e}")))
    }

    /// Waits until the volume's VolumeAttachment is attached, then (Go's
    /// `VerifyControllerAttachedVolume`) until the Node's status lists it both in use (this
    /// kubelet's report, sent at once when the volume comes into use) and attached (the
    /// attach/detach controller's), so the controller never detaches a volume this node is
    /// about to mount. Its attachment metadata (the publish context).
    async fn wait_attached(&self, volume: &CsiVolume) -> Result<BTreeMap<String, String>, String> {
        let node = &self.settings.node.node_name;
        let id = csi_volume::attachment_name(&volume.handle, &volume.driver, node);
        let unique = volume.unique_name();
        let deadline = Instant::now() + ATTACH_TIMEOUT;
        let mut delay = Duration::from_millis(50);
        let mut last = None;
        let mut metadata = None;
        loop {
            if metadata.is_none() {
                match self.storage.volume_attachment(&id).await {
                    Ok(Some(va)) => {
                        let status = va.status.unwrap_or_default();
                        if status.attached {
                            metadata = Some(status.attachment_metadata.unwrap_or_default());
                        } else {
                            last = status.attach_error.and_then(|e| e.message);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => last = Some(e.to_string()),
                }
            }
            if metadata.is_some() {
                match self.storage.node_volumes().await {
                    Ok(v) if v.in_use.contains(&unique) && v.attached.contains(&unique) => {
                        return Ok(metadata.unwrap_or_default());
                    }
                    Ok(v) if !v.in_use.contains(&unique) => {
                        self.in_use_changed.notify_one();
                        last = Some("volume is not reported in use".to_string());
                    }
                    Ok(_) => {
                        last = Some("Volume not attached according to node status".to_string())
                    }
                    Err(e) => last = Some(e.to_string()),
                }
            }
            if Instant::now() + delay > deadline {
                let why = last.map(|l| format!(": {l}")).unwrap_or_default();
                return Err(format!(
                    "MountVolume.WaitForAttach failed for volume {:?} : {}{why}",
                    volume.spec_name,
                    log(format!(
                        "attacher.WaitForAttach timeout after {ATTACH_TIMEOUT:?} [volume={}; attachment.ID={id}]",
                        volume.handle
                    ))
                ));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }

    /// Go's `MountDevice`: the global directory and its `vol_data.json`, then
    /// `NodeStageVolume` when the driver stages. The global mount's path.
    async fn mount_device(
        &self,
        client: &CsiClient,
        caps: &Capabilities,
        volume: &CsiVolume,
        publish_context: &BTreeMap<String, String>,
        mount_group: Option<u32>,
    ) -> Result<PathBuf, String> {
        let failed = |e: String| {
            format!(
                "MountVolume.MountDevice failed for volume {:?} : {e}",
                volume.spec_name
            )
        };
        let path =
            csi_volume::device_mount_path(&self.settings.root_dir, &volume.driver, &volume.handle);
        let data = VolumeData {
            handle: volume.handle.clone(),
            driver: volume.driver.clone(),
            ..Default::default()
        };
        let dir = path.clone();
        blocking(move || {
            crate::volume::mkdir_all("", &dir, 0o750)?;
            let parent = dir.parent().unwrap_or(&dir);
            csi_volume::save_volume_data(parent, &data)
                .map_err(|e| crate::volume::VolumeError::io("", parent, e))
        })
        .await
        .map_err(|e| {
            failed(log(format!(
                "attacher.MountDevice failed to create dir {:?}: {e}",
                path.display()
            )))
        })?;
        if !caps.stage_unstage {
            return Ok(path);
        }
        let secrets = match &volume.stage_secret {
            Some(r) => self.secret_data(r).await.map_err(|e| {
                failed(format!(
                    "fetching NodeStageSecretRef {}/{} failed: {e}",
                    r.namespace, r.name
                ))
            })?,
            None => BTreeMap::new(),
        };
        let req = NodeStageVolumeRequest {
            volume_id: volume.handle.clone(),
            publish_context: publish_context.clone(),
            staging_target_path: path.to_string_lossy().into_owned(),
            volume_capability: Some(csi_volume::capability(volume, caps, mount_group)),
            secrets,
            volume_context: volume.attributes.clone(),
        };
        if let Err(e) = client.stage(req).await {
            // A final answer leaves nothing behind; a timeout may still be staging.
            if e != crate::csi::client::CsiError::Timeout {
                let p = path.clone();
                let _ = blocking(move || {
                    csi_volume::remove_mount_dir(&p)
                        .map_err(|e| crate::volume::VolumeError::io("", &p, e))
                })
                .await;
            }
            return Err(failed(e.to_string()));
        }
        Ok(path)
    }

    /// Go's `SetUpAt`: `vol_data.json` beside the target, then `NodePublishVolume`. The
    /// target's path.
    #[allow(clippy::too_many_arguments)]
    async fn publish(
        &self,
        client: &CsiClient,
        caps: &Capabilities,
        pod: &Pod,
        volume: &CsiVolume,
        policy: &DriverPolicy,
        staging: Option<PathBuf>,
        publish_context: BTreeMap<String, String>,
        mount_group: Option<u32>,
    ) -> Result<PathBuf, String> {
        let uid = crate::types::uid_of(pod);
        let node = self.settings.node.node_name.clone();
        let target = csi_volume::pod_mount_path(&self.settings.root_dir, &uid, &volume.spec_name);
        let data = VolumeData {
            spec_name: volume.spec_name.clone(),
            handle: volume.handle.clone(),
            driver: volume.driver.clone(),
            attachment_id: csi_volume::attachment_name(&volume.handle, &volume.driver, &node),
            node_name: node,
            lifecycle: volume.lifecycle.as_str().to_string(),
        };
        let parent = target.parent().map(PathBuf::from).unwrap_or_default();
        let dir = parent.clone();
        blocking(move || {
            csi_volume::save_volume_data(&dir, &data)
                .map_err(|e| crate::volume::VolumeError::io("", &dir, e))
        })
        .await
        .map_err(|e| {
            log(format!(
                "mounter.SetUpAt failed to save volume info data: {e}"
            ))
        })?;
        let secret_failed = |e: String| match &volume.publish_secret {
            Some(r) => format!(
                "fetching NodePublishSecretRef {}/{} failed: {e}",
                r.namespace, r.name
            ),
            None => e,
        };
        let req = self
            .publish_request(
                PublishTarget {
                    pod,
                    volume,
                    policy,
                    caps,
                    staging: staging.as_deref(),
                    target: &target,
                    mount_group,
                },
                publish_context,
                secret_failed,
            )
            .await?;
        if let Err(e) = client.publish(req).await {
            if e != crate::csi::client::CsiError::Timeout {
                let t = target.clone();
                let _ = blocking(move || {
                    csi_volume::remove_mount_dir(&t)
                        .map_err(|e| crate::volume::VolumeError::io("", &t, e))
                })
                .await;
            }
            return Err(e.to_string());
        }
        Ok(target)
    }

    /// The pod's service-account tokens the CSIDriver's `tokenRequests` ask for, as Go's
    /// `podServiceAccountTokenAttrs` hands them to the driver: JSON of audience →
    /// `{token, expirationTimestamp}`; `None` when it asks for none.
    async fn service_account_tokens(
        &self,
        pod: &Pod,
        policy: &DriverPolicy,
    ) -> Result<Option<String>, String> {
        if policy.token_requests.is_empty() {
            return Ok(None);
        }
        let failed = |e: String| {
            log(format!(
                "mounter.SetUpAt failed to get service accoount token attributes: {e}"
            ))
        };
        let m = &pod.metadata;
        let service_account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let mut out = serde_json::Map::new();
        for (audience, expiration) in &policy.token_requests {
            let spec = crate::objects::TokenRequestSpec {
                namespace: super::namespace_of(pod).to_string(),
                service_account: service_account.clone(),
                audience: Some(audience.clone()).filter(|a| !a.is_empty()),
                // The API's default when the request names none.
                expiration_seconds: expiration.unwrap_or(3600),
                pod_name: m.name.clone().unwrap_or_default(),
                pod_uid: m.uid.clone().unwrap_or_default(),
            };
            let token = self
                .tokens
                .token(&spec)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let expires = token_expiry(&token).unwrap_or_default();
            out.insert(
                audience.clone(),
                serde_json::json!({"token": token, "expirationTimestamp": expires}),
            );
        }
        Ok(Some(serde_json::Value::Object(out).to_string()))
    }

    /// The `NodePublishVolumeRequest` of a filesystem or block volume: the
    /// `nodePublishSecretRef`'s data (a failure to read it through `secret_failed`), the
    /// source's attributes with the pod's info and tokens when the CSIDriver asks for them.
    async fn publish_request(
        &self,
        at: PublishTarget<'_>,
        publish_context: BTreeMap<String, String>,
        secret_failed: impl Fn(String) -> String,
    ) -> Result<NodePublishVolumeRequest, String> {
        let PublishTarget {
            pod,
            volume,
            policy,
            caps,
            staging,
            target,
            mount_group,
        } = at;
        let secrets = match &volume.publish_secret {
            Some(r) => self.secret_data(r).await.map_err(secret_failed)?,
            None => BTreeMap::new(),
        };
        let mut context = volume.attributes.clone();
        if policy.pod_info_on_mount {
            context.extend(csi_volume::pod_info(pod, volume.lifecycle));
        }
        if let Some(tokens) = self.service_account_tokens(pod, policy).await? {
            context.insert(csi_volume::TOKENS_ATTRIBUTE.to_string(), tokens);
        }
        Ok(NodePublishVolumeRequest {
            volume_id: volume.handle.clone(),
            publish_context,
            staging_target_path: staging
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            target_path: target.to_string_lossy().into_owned(),
            volume_capability: Some(csi_volume::capability(volume, caps, mount_group)),
            readonly: volume.read_only,
            secrets,
            volume_context: context,
        })
    }

    /// A secret's data as a CSI call carries it (Go's `getCredentialsFromSecret`).
    async fn secret_data(&self, r: &SecretRef) -> Result<BTreeMap<String, String>, String> {
        match self.storage.secret(&r.namespace, &r.name).await {
            Ok(Some(s)) => Ok(s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect()),
            Ok(None) => Err(format!(
                "failed to find the secret {} in the namespace {} with error: secrets {:?} not found",
                r.name, r.namespace, r.name
            )),
            Err(e) => Err(format!(
                "failed to find the secret {} in the namespace {} with error: {e}",
                r.name, r.namespace
            )),
        }
    }

    /// Go's `TearDownAt`: `NodeUnpublishVolume`, then the target's directory and
    /// `vol_data.json`; the volume stops counting as its device's user.
    pub(super) async fn tear_down_csi(
        &self,
        key: &VolumeKey,
        target: PathBuf,
        csi: &CsiMounted,
    ) -> Result<(), String> {
        let client = CsiClient::connect(&self.drivers, &csi.driver)
            .await
            .map_err(|e| {
                log(format!(
                    "Unmounter.TearDownAt failed to get CSI client: {e}"
                ))
            })?;
        let lock = csi.device.as_deref().map(|d| self.device_lock(d));
        let _guard = match &lock {
            Some(l) => Some(l.lock().await),
            None => None,
        };
        if let Some(spec) = &csi.block_spec {
            self.unmap_block(&client, key, &target, csi, spec).await?;
        } else {
            client
                .unpublish(&csi.handle, &target.to_string_lossy())
                .await
                .map_err(|e| log(format!("Unmounter.TearDownAt failed: {e}")))?;
            let t = target.clone();
            blocking(move || {
                csi_volume::remove_mount_dir(&t)
                    .map_err(|e| crate::volume::VolumeError::io("", &t, e))
            })
            .await
            .map_err(|e| {
                log(format!(
                    "Unmounter.TearDownAt failed to clean mount dir [{}]: {e}",
                    target.display()
                ))
            })?;
        }
        if let Some(device) = &csi.device {
            let mut state = self.lock();
            if let Some(d) = state.devices.get_mut(device) {
                d.users.remove(key);
            }
        }
        Ok(())
    }

    /// Go's `UnmapPodDevice` and `UnmapBlockVolume`: `NodeUnpublishVolume` of the pod's
    /// publish path, then its links and the publish file (the driver's to remove; left only
    /// if it is not still a mount).
    async fn unmap_block(
        &self,
        client: &CsiClient,
        key: &VolumeKey,
        link: &std::path::Path,
        csi: &CsiMounted,
        spec: &str,
    ) -> Result<(), String> {
        let root = self.settings.root_dir.clone();
        let publish = csi_volume::block_publish_path(&root, spec, &key.uid);
        client
            .unpublish(&csi.handle, &publish.to_string_lossy())
            .await
            .map_err(|e| log(format!("blockMapper.unpublishVolumeForBlock failed: {e}")))?;
        let global = csi_volume::block_volume_dir(&root, spec)
            .join("dev")
            .join(&key.uid);
        let link = link.to_path_buf();
        blocking(move || {
            let io = |at: &std::path::Path, e| crate::volume::VolumeError::io("", at, e);
            for l in [&link, &global] {
                match std::fs::remove_file(l) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(l, e)),
                    _ => {}
                }
            }
            if crate::volume::persistent::is_mount_point(&publish).map_err(|e| io(&publish, e))? {
                return Err(io(
                    &publish,
                    std::io::Error::other("still mounted after NodeUnpublishVolume"),
                ));
            }
            match std::fs::remove_file(&publish) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&publish, e)),
                _ => {}
            }
            if let Some(dir) = publish.parent() {
                let _ = std::fs::remove_dir(dir);
            }
            Ok(())
        })
        .await
        .map_err(|e| log(format!("blockMapper.UnmapPodDevice failed: {e}")))
    }

    /// Go's `UnmountDevice` for a device no pod volume uses: `NodeUnstageVolume` when the
    /// driver stages, then the global directory and its `vol_data.json`.
    pub(super) async fn unstage(&self, unique: &str) -> Result<(), String> {
        let lock = self.device_lock(unique);
        let _guard = lock.lock().await;
        let device = {
            let state = self.lock();
            match state.devices.get(unique) {
                Some(d) if d.users.is_empty() => d.clone(),
                // Used again, or gone: nothing to do.
                _ => return Ok(()),
            }
        };
        let client = CsiClient::connect(&self.drivers, &device.driver)
            .await
            .map_err(|e| {
                log(format!(
                    "attacher.UnmountDevice failed to create newCsiDriverClient: {e}"
                ))
            })?;
        let caps = client.capabilities().await.map_err(|e| {
            log(format!(
                "attacher.UnmountDevice failed to check whether STAGE_UNSTAGE_VOLUME set: {e}"
            ))
        })?;
        if caps.stage_unstage {
            client
                .unstage(&device.handle, &device.path.to_string_lossy())
                .await
                .map_err(|e| log(format!("attacher.UnmountDevice failed: {e}")))?;
        }
        let p = device.path.clone();
        let block_dir = device
            .block_spec
            .as_deref()
            .map(|spec| csi_volume::block_volume_dir(&self.settings.root_dir, spec));
        blocking(move || {
            let io = |at: &std::path::Path, e| crate::volume::VolumeError::io("", at, e);
            match &block_dir {
                Some(dir) => remove_block_device_dirs(&p, dir).map_err(|e| io(&p, e)),
                None => csi_volume::remove_mount_dir(&p).map_err(|e| io(&p, e)),
            }
        })
        .await
        .map_err(|e| {
            log(format!(
                "failed to clean up global mount {}: {e}",
                device.path.display()
            ))
        })?;
        let mut state = self.lock();
        if state
            .devices
            .get(unique)
            .is_some_and(|d| d.users.is_empty())
        {
            state.devices.remove(unique);
            // No longer in use: reported at once, so the controller may detach it.
            self.in_use_changed.notify_one();
        }
        Ok(())
    }
}

/// A block volume's staging directory (only once nothing is mounted on it: its contents are
/// the driver's) and its own directory's `data/vol_data.json`, `data`, `dev` (empty) and
/// itself (empty).
fn remove_block_device_dirs(
    staging: &std::path::Path,
    dir: &std::path::Path,
) -> std::io::Result<()> {
    use std::io::ErrorKind;
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        other => other,
    };
    if crate::volume::persistent::is_mount_point(staging)? {
        return Err(std::io::Error::other(format!(
            "{} is still mounted",
            staging.display()
        )));
    }
    gone(std::fs::remove_dir_all(staging))?;
    gone(std::fs::remove_file(
        dir.join("data").join(csi_volume::VOL_DATA_FILE),
    ))?;
    for d in [dir.join("data"), dir.join("dev"), dir.to_path_buf()] {
        gone(std::fs::remove_dir(&d))?;
    }
    Ok(())
}

/// Makes `at` a symbolic link to `target`, replacing what was there (Go's `MapBlockVolume`
/// links; a restart may find an old one).
fn replace_link(target: &std::path::Path, at: &std::path::Path) -> std::io::Result<()> {
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::symlink_metadata(at) {
        Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(at)?,
        Ok(_) => {
            return Err(std::io::Error::other(format!(
                "{} exists and is not a link",
                at.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::os::unix::fs::symlink(target, at)
}

/// A JWT's `exp` as an RFC 3339 time (what TokenRequest's status says); `None` when it
/// cannot be read.
fn token_expiry(token: &str) -> Option<String> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = claims.get("exp")?.as_i64()?;
    Some(jiff::Timestamp::from_second(exp).ok()?.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use base64::Engine;

    use super::*;

    #[test]
    fn a_tokens_expiry_is_read_from_its_exp_claim() {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwt = format!("{}.{}.sig", b64("{}"), b64(r#"{"exp":1767225600}"#));
        assert_eq!(token_expiry(&jwt).as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(token_expiry("not-a-jwt"), None);
        assert_eq!(token_expiry(&format!("a.{}.c", b64("{}"))), None);
    }
}
