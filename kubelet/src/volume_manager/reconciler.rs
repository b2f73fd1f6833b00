//! The reconciler (Go's `reconciler`): one task that compares the desired and actual states
//! and starts operations — set up what is wanted and missing or out of date, tear down what no
//! pod wants — each in a task of its own (at most [`MAX_IN_FLIGHT`] at once, one per volume).
//! Event-driven: it runs when the kubelet adds, changes or removes a pod, when an operation
//! ends, when a referenced secret or configMap changes ([`ObjectSource::changes`]), when a
//! back-off window closes, and every [`TOKEN_CHECK_PERIOD`] to see whether a token was
//! renewed.
//!
//! [`ObjectSource::changes`]: crate::objects::ObjectSource::changes

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Volume;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::actual::MountedVolume;
use super::claims::{self, BoundClaim, ClaimError};
use super::csi_ops::CsiMounted;
use super::desired::VolumeKey;
use super::fetch::{fetch_inputs, token_fingerprint};
use super::{VolumeManager, namespace_of};
use crate::csi::volume::CsiVolume;
use crate::events::{EventType, pod_ref, reason};
use crate::objects::ObjectChange;
use crate::types::Pod;
use crate::volume::ownership::ChangePolicy;
use crate::volume::persistent::{self, PodOwnership, pv_name};
use crate::volume::{VolumeError, VolumeReferences, blocking};

/// How many operations run at once (a burst of pods is set up a few at a time, not all).
pub const MAX_IN_FLIGHT: usize = 16;
/// How often tokens are read again to see whether the token manager renewed one.
pub const TOKEN_CHECK_PERIOD: Duration = Duration::from_secs(10);

/// One operation.
enum Op {
    SetUp {
        pod: Arc<Pod>,
        volume: Box<Volume>,
        references: VolumeReferences,
        generation: u64,
    },
    TearDown {
        path: PathBuf,
        plugin: Option<String>,
        csi: Option<CsiMounted>,
    },
    /// A CSI device no pod volume uses any more (keyed by [`device_key`]).
    Unstage { unique: String },
}

/// The operation key of CSI device `unique` (no pod has an empty UID).
pub fn device_key(unique: &str) -> VolumeKey {
    VolumeKey::new("", unique)
}

/// How an operation ended.
enum Outcome {
    SetUp {
        pod: Arc<Pod>,
        generation: u64,
        result: Result<Box<MountedVolume>, String>,
    },
    TearDown(Result<(), String>),
    Unstage(Result<(), String>),
}

/// Go's message for a claim that cannot be used: the populator's errors reach the pod's
/// sync as `Unable to attach or mount volumes: ...`; a node affinity mismatch is a failed
/// mount.
pub fn claim_failed_message(volume: &str, e: &ClaimError) -> String {
    match e {
        ClaimError::NodeAffinity { .. } => e.to_string(),
        _ => format!(
            "Unable to attach or mount volumes: unmounted volumes=[{volume}], unattached volumes=[], failed to process volumes=[{volume}]: {e}"
        ),
    }
}

/// Go's event message for a failed set-up, whether or not the error already says it.
pub fn mount_failed_message(volume: &str, e: &VolumeError) -> String {
    let text = e.to_string();
    if text.starts_with("MountVolume.SetUp failed for volume") {
        text
    } else {
        format!("MountVolume.SetUp failed for volume {volume:?} : {text}")
    }
}

/// The reconciler's loop; runs for the life of the process.
pub async fn run(manager: Arc<VolumeManager>) {
    let mut changes = Some(manager.objects.changes());
    manager.reconstruct().await;
    let mut token_check =
        tokio::time::interval_at(Instant::now() + TOKEN_CHECK_PERIOD, TOKEN_CHECK_PERIOD);
    token_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let checking_tokens = Arc::new(AtomicBool::new(false));
    let mut tasks = JoinSet::new();
    loop {
        let next_retry = manager.schedule(&mut tasks);
        tokio::select! {
            () = manager.wake.notified() => {}
            Some(done) = tasks.join_next() => match done {
                Ok((key, started, outcome)) => manager.apply(key, started, outcome),
                // Panics are caught inside; only a cancelled task ends here.
                Err(e) => tracing::warn!(error = %e, "volume operation task ended"),
            },
            () = sleep_until(next_retry) => {}
            change = next_change(&mut changes) => manager.on_object_change(change),
            _ = token_check.tick() => {
                if !checking_tokens.swap(true, Ordering::AcqRel) {
                    let manager = manager.clone();
                    let running = checking_tokens.clone();
                    tokio::spawn(async move {
                        manager.check_tokens().await;
                        running.store(false, Ordering::Release);
                    });
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The next change of a referenced object; never, once the feed is closed.
async fn next_change(
    rx: &mut Option<broadcast::Receiver<ObjectChange>>,
) -> Result<ObjectChange, RecvError> {
    let Some(r) = rx else {
        return std::future::pending().await;
    };
    let got = r.recv().await;
    if matches!(got, Err(RecvError::Closed)) {
        *rx = None;
    }
    got
}

impl VolumeManager {
    /// Puts the volumes found on disk into the actual state.
    async fn reconstruct(&self) {
        let root = self.settings.root_dir.clone();
        let (found, devices) = blocking(move || {
            Ok((
                super::reconstruct::scan(&root),
                super::reconstruct::scan_devices(&root),
            ))
        })
        .await
        .unwrap_or_default();
        if !found.is_empty() {
            tracing::info!(
                volumes = found.len(),
                "volume manager: volumes found on disk"
            );
        }
        let mut state = self.lock();
        state.reconstructed = true;
        for (unique, device) in devices {
            state.devices.entry(unique).or_insert(device);
        }
        for (key, mut volume) in found {
            if state.actual.get(&key).is_some() {
                continue;
            }
            if let Some(csi) = &mut volume.csi
                && let Some(device) = &csi.device
            {
                match state.devices.get_mut(device) {
                    Some(d) => {
                        d.users.insert(key.clone());
                    }
                    None => csi.device = None,
                }
            }
            state.actual.mark_mounted(&key, volume);
        }
    }

    /// Starts what is due; the next time a back-off window closes.
    fn schedule(
        self: &Arc<Self>,
        tasks: &mut JoinSet<(VolumeKey, Instant, Outcome)>,
    ) -> Option<Instant> {
        let now = Instant::now();
        let ops = {
            let mut state = self.lock();
            let ops = plan(&mut state, &self.settings.root_dir, now);
            for (key, _) in &ops {
                state.in_flight.insert(key.clone());
                state.retries.started(key);
            }
            ops
        };
        for (key, op) in ops {
            let manager = self.clone();
            tasks.spawn(async move {
                let run = AssertUnwindSafe(manager.execute(&key, op)).catch_unwind();
                let outcome = run.await.unwrap_or_else(|_| {
                    Outcome::TearDown(Err("volume operation panicked".to_string()))
                });
                (key, now, outcome)
            });
        }
        self.lock().retries.next_retry(now)
    }

    /// Runs one operation.
    async fn execute(&self, key: &VolumeKey, op: Op) -> Outcome {
        match op {
            Op::SetUp {
                pod,
                volume,
                references,
                generation,
            } => {
                let result = self.set_up(key, &pod, *volume, &references).await;
                Outcome::SetUp {
                    pod,
                    generation,
                    result: result.map(Box::new),
                }
            }
            Op::TearDown { path, plugin, csi } => {
                Outcome::TearDown(self.tear_down(key, path, plugin, csi).await)
            }
            Op::Unstage { unique } => Outcome::Unstage(self.unstage(&unique).await),
        }
    }

    async fn set_up(
        &self,
        key: &VolumeKey,
        pod: &Arc<Pod>,
        volume: Volume,
        references: &VolumeReferences,
    ) -> Result<MountedVolume, String> {
        let claim = super::claims::resolve(&*self.storage, pod, &volume)
            .await
            .map_err(|e| claim_failed_message(&volume.name, &e))?;
        if let Some(claim) = claim {
            let pvc = super::claims::claim_name(pod, &volume)
                .map(|name| (namespace_of(pod).to_string(), name));
            let mut mounted = match CsiVolume::from_pv(&claim.volume, claim.read_only) {
                Some(csi) => self.set_up_csi(key, pod, csi).await?,
                None => self.set_up_persistent(pod, claim).await?,
            };
            mounted.pvc = pvc;
            return Ok(mounted);
        }
        if let Some(csi) = CsiVolume::inline(pod, &volume) {
            return self.set_up_csi(key, pod, csi).await;
        }
        let namespace = namespace_of(pod);
        let inputs = fetch_inputs(&*self.objects, &*self.tokens, namespace, references).await;
        let token_fingerprint = token_fingerprint(&inputs.tokens);
        let plugin = crate::volume::plugin_dir_name(&volume).map(str::to_string);
        let (root, node, p) = (
            self.settings.root_dir.clone(),
            self.settings.node.clone(),
            pod.clone(),
        );
        let name = volume.name.clone();
        let result =
            blocking(move || crate::volume::setup_volume(&root, &p, &volume, &inputs, &node)).await;
        match result {
            Ok(path) => Ok(MountedVolume {
                path,
                plugin,
                generation: None,
                token_fingerprint,
                read_only: false,
                csi: None,
                pvc: None,
                block: false,
                republish: false,
            }),
            Err(e) => Err(mount_failed_message(&name, &e)),
        }
    }

    /// Sets up a claim's PersistentVolume (named by it in paths and messages, as Go's),
    /// after its node affinity check.
    async fn set_up_persistent(
        &self,
        pod: &Arc<Pod>,
        claim: BoundClaim,
    ) -> Result<MountedVolume, String> {
        let pv = claim.volume;
        if claims::has_node_affinity(&pv) {
            let labels = self.storage.node_labels().await.map_err(|e| {
                ClaimError::NodeAffinity {
                    volume: pv_name(&pv).into(),
                    reason: e.to_string(),
                }
                .to_string()
            })?;
            claims::check_node_affinity(&pv, &self.settings.node.node_name, &labels)
                .map_err(|e| e.to_string())?;
        }
        let name = pv_name(&pv).to_string();
        let ownership = PodOwnership {
            fs_group: crate::volume::fs_group(&name, pod).map_err(|e| e.to_string())?,
            policy: ChangePolicy::from_api(
                pod.spec
                    .as_ref()
                    .and_then(|s| s.security_context.as_ref())
                    .and_then(|s| s.fs_group_change_policy.as_deref()),
            ),
        };
        let root = self.settings.root_dir.clone();
        let uid = crate::types::uid_of(pod);
        let read_only = claim.read_only;
        let set_up =
            blocking(move || persistent::setup(&root, &uid, &pv, read_only, ownership)).await;
        match set_up {
            Ok(s) => Ok(MountedVolume {
                path: s.path,
                plugin: s.plugin.map(str::to_string),
                generation: None,
                token_fingerprint: None,
                read_only: s.read_only,
                csi: None,
                pvc: None,
                block: false,
                republish: false,
            }),
            Err(e) => Err(mount_failed_message(&name, &e)),
        }
    }

    async fn tear_down(
        &self,
        key: &VolumeKey,
        path: PathBuf,
        plugin: Option<String>,
        csi: Option<CsiMounted>,
    ) -> Result<(), String> {
        // A CSI volume is the driver's to take down (a block volume's link is under the
        // pod's volumeDevices dir).
        if let Some(csi) = csi {
            return self
                .tear_down_csi(key, path.clone(), &csi)
                .await
                .map_err(|e| {
                    format!(
                        "UnmountVolume.TearDown failed for volume {:?} ({}): {e}",
                        key.name,
                        path.display()
                    )
                });
        }
        // A hostPath is the host's; and nothing outside the pod's volumes dir is ever removed.
        let volumes = crate::volume::pod_dir(&self.settings.root_dir, &key.uid).join("volumes");
        if plugin.is_none() || !path.starts_with(&volumes) {
            return Ok(());
        }
        let p = path.clone();
        // A persistent volume's directory is only ever unmounted and removed empty: its
        // data is the volume's, not the pod's.
        let persistent = plugin.as_deref() == Some(persistent::LOCAL_PLUGIN);
        blocking(move || {
            if persistent {
                persistent::teardown(&p)
            } else {
                crate::volume::teardown_volume(&p)
            }
        })
        .await
        .map_err(|e| {
            format!(
                "UnmountVolume.TearDown failed for volume {:?} ({}): {e}",
                key.name,
                path.display()
            )
        })
    }

    /// Records how an operation ended; reports a failed set-up; hands back the pods whose
    /// volumes are now all there after a failed wait.
    fn apply(&self, key: VolumeKey, started: Instant, outcome: Outcome) {
        let now = Instant::now();
        let mut event = None;
        let mut ready = None;
        {
            let mut state = self.lock();
            state.in_flight.remove(&key);
            match outcome {
                Outcome::SetUp {
                    generation,
                    result: Ok(mut volume),
                    ..
                } => {
                    tracing::debug!(
                        uid = key.uid,
                        volume = key.name,
                        "MountVolume.SetUp succeeded"
                    );
                    volume.generation = Some(generation);
                    let twins = state.actual.forget_reconstructed_at(&key, &volume.path);
                    if let Some(device) = volume.csi.as_ref().and_then(|c| c.device.as_ref())
                        && let Some(d) = state.devices.get_mut(device)
                    {
                        for twin in &twins {
                            d.users.remove(twin);
                        }
                        d.users.insert(key.clone());
                    }
                    state.actual.mark_mounted(&key, *volume);
                    state.retries.succeeded(&key);
                    if !state.desired.has_pod(&key.uid) {
                        // Removed while being set up: it goes again.
                        state.removed.insert(key.uid.clone());
                    }
                    let all_there = state.desired.pod(&key.uid).is_some_and(|p| {
                        p.volumes.keys().all(|n| {
                            let key = VolumeKey::new(&key.uid, n);
                            state.actual.get(&key).is_some_and(MountedVolume::confirmed)
                        })
                    });
                    if all_there && state.failed_waits.remove(&key.uid) {
                        ready = state.ready_tx.clone().map(|tx| (tx, key.uid.clone()));
                    }
                }
                Outcome::SetUp {
                    pod,
                    result: Err(message),
                    ..
                } => {
                    tracing::warn!(uid = key.uid, volume = key.name, "{message}");
                    if state.desired.contains(&key) {
                        state.retries.failed(&key, message.clone(), started, now);
                        event = Some((pod, message));
                    }
                }
                Outcome::TearDown(Ok(())) => {
                    tracing::debug!(
                        uid = key.uid,
                        volume = key.name,
                        "UnmountVolume.TearDown succeeded"
                    );
                    state.actual.mark_unmounted(&key);
                    state.retries.succeeded(&key);
                }
                Outcome::TearDown(Err(message)) | Outcome::Unstage(Err(message)) => {
                    tracing::warn!(uid = key.uid, volume = key.name, "{message}");
                    state.retries.failed(&key, message, started, now);
                }
                Outcome::Unstage(Ok(())) => {
                    tracing::debug!(device = key.name, "UnmountDevice succeeded");
                    state.retries.succeeded(&key);
                }
            }
        }
        if let Some((pod, message)) = event {
            self.events.record(
                &pod_ref(&pod),
                EventType::Warning,
                reason::FAILED_MOUNT,
                &message,
            );
        }
        if let Some((tx, uid)) = ready {
            let _ = tx.send(uid);
        }
        self.progress.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A referenced secret or configMap changed: the volumes made from it are written again
    /// at once (whatever their back-off: the change may be what they waited for).
    fn on_object_change(&self, change: Result<ObjectChange, RecvError>) {
        let now = Instant::now();
        let mut state = self.lock();
        let keys = match change {
            Ok(change) => state.desired.mark_object_changed(&change),
            Err(RecvError::Lagged(_)) => state.desired.mark_all_objects_changed(),
            Err(RecvError::Closed) => return,
        };
        for key in &keys {
            state.retries.retry_now(key, now);
        }
        drop(state);
        if !keys.is_empty() {
            self.wake.notify_one();
        }
    }

    /// Reads the tokens of the volumes that hold one; those whose token changed (renewed
    /// by the token manager) are written again.
    async fn check_tokens(&self) {
        let holders: Vec<(VolumeKey, String, VolumeReferences, Option<u64>)> = {
            let state = self.lock();
            state
                .desired
                .volumes()
                .filter(|(_, _, v)| !v.references.tokens.is_empty())
                .filter_map(|(key, pod, v)| {
                    let mounted = state.actual.get(&key)?;
                    let refs = VolumeReferences {
                        tokens: v.references.tokens.clone(),
                        ..Default::default()
                    };
                    let ns = namespace_of(&pod.pod).to_string();
                    Some((key, ns, refs, mounted.token_fingerprint))
                })
                .collect()
        };
        let mut renewed = Vec::new();
        for (key, namespace, refs, had) in holders {
            let inputs = fetch_inputs(&*self.objects, &*self.tokens, &namespace, &refs).await;
            let now = token_fingerprint(&inputs.tokens);
            if now.is_some() && now != had {
                renewed.push(key);
            }
        }
        if renewed.is_empty() {
            return;
        }
        {
            let mut state = self.lock();
            for key in &renewed {
                tracing::debug!(
                    uid = key.uid,
                    volume = key.name,
                    "token renewed; writing it again"
                );
                state.desired.bump(key);
            }
        }
        self.wake.notify_one();
    }
}

/// The operations due at `now`, up to the free slots.
fn plan(
    state: &mut super::State,
    root_dir: &std::path::Path,
    now: Instant,
) -> Vec<(VolumeKey, Op)> {
    let mut ops = Vec::new();
    let free = MAX_IN_FLIGHT.saturating_sub(state.in_flight.len());
    // Pods to forget: nothing of theirs set up or in flight.
    let busy: std::collections::BTreeSet<String> = state
        .actual
        .pods()
        .map(str::to_string)
        .chain(state.in_flight.iter().map(|k| k.uid.clone()))
        .collect();
    state.removed.retain(|uid| busy.contains(uid));

    // Tear-downs first: they give back what new pods may need.
    for (key, mounted) in state.actual.volumes() {
        if ops.len() >= free {
            break;
        }
        if state.in_flight.contains(&key) || !state.retries.ready(&key, now) {
            continue;
        }
        let stale_reconstructed = mounted.generation.is_none()
            && mounted.plugin.is_some()
            && state.desired.pod(&key.uid).is_some_and(|p| {
                p.spec(&key.name).is_some_and(|v| {
                    !crate::volume::is_claim(v)
                        && crate::volume::volume_path(root_dir, &key.uid, v) != mounted.path
                })
            });
        let unwanted = !state.desired.contains(&key) && state.removed.contains(&key.uid);
        if unwanted || stale_reconstructed {
            let op = Op::TearDown {
                path: mounted.path.clone(),
                plugin: mounted.plugin.clone(),
                csi: mounted.csi.clone(),
            };
            ops.push((key, op));
        }
    }
    // Devices no pod volume uses (their last user torn down, a publish that failed, or found
    // so at start).
    for (unique, device) in &state.devices {
        let key = device_key(unique);
        if ops.len() >= free {
            break;
        }
        if device.users.is_empty()
            && !state.in_flight.contains(&key)
            && state.retries.ready(&key, now)
        {
            let op = Op::Unstage {
                unique: unique.clone(),
            };
            ops.push((key, op));
        }
    }
    let tearing: Vec<VolumeKey> = ops.iter().map(|(k, _)| k.clone()).collect();

    for (key, pod, wanted) in state.desired.volumes() {
        if ops.len() >= free {
            break;
        }
        if state.in_flight.contains(&key) || tearing.contains(&key) {
            continue;
        }
        // Found on disk at start (generation unknown): set up once more, which finds it in
        // place (no second tmpfs, no rewrite of an unchanged payload) or mends what a reboot
        // took (the tmpfs under a secret's mount point).
        let due = state
            .actual
            .get(&key)
            .is_none_or(|m| m.generation < Some(wanted.generation));
        if due && state.retries.ready(&key, now) {
            let Some(spec) = pod.spec(&key.name) else {
                continue;
            };
            let op = Op::SetUp {
                pod: pod.pod.clone(),
                volume: Box::new(spec.clone()),
                references: wanted.references.clone(),
                generation: wanted.generation,
            };
            ops.push((key, op));
        }
    }
    ops
}
