//! The volume manager, in the Go kubelet's shape (`pkg/kubelet/volumemanager`): a desired
//! state of the world ([`desired`]: pods × used volumes, filled by the kubelet as pods come,
//! change and go), an actual state of the world ([`actual`]: what is set up), and a
//! [`reconciler`] task that sets up what is desired and not actual, writes again what must
//! follow its sources (on a pod sync, a changed secret or configMap, a renewed token), and
//! tears down what no pod wants any more, with a back-off per volume ([`retry`]) and Go's
//! `FailedMount` events. Set-ups read their inputs through the object and token seams first
//! ([`fetch`]), then run blocking. At start the actual state is rebuilt from disk
//! ([`reconstruct`]).
//!
//! Pod sync asks [`VolumeManager::wait_for_attach_and_mount`] for the pod's volumes; unlike
//! Go's, the wait ends early once every missing volume has failed an attempt made during it,
//! so a missing secret does not hold the pod's worker for two minutes: the pod waits in
//! `ContainerCreating`, the reconciler keeps retrying, and the pod is handed back for a sync
//! (the receiver [`VolumeManager::spawn`] returns) once its volumes are all set up.

pub mod actual;
pub mod claims;
pub mod csi_ops;
pub mod desired;
pub mod fetch;
pub mod reconciler;
pub mod reconstruct;
pub mod resize;
pub mod retry;
pub mod usage;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::events::EventRecorder;
use crate::objects::{ObjectSource, StorageSource, TokenSource};
use crate::podspec::NodeContext;
use crate::types::{Pod, uid_of};
use crate::volume::PodVolumes;

use actual::ActualState;
use desired::{DesiredState, VolumeKey};
use retry::Retries;

/// How long a wait for a pod's volumes lasts at most (Go's `podAttachAndMountTimeout`).
pub const POD_ATTACH_AND_MOUNT_TIMEOUT: Duration = Duration::from_secs(123);

/// Why a pod's volumes are not ready.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// Every volume still missing failed an attempt during the wait; the reconciler keeps
    /// retrying them.
    #[error("{}", .messages.join("; "))]
    SetUpFailed {
        /// The missing volumes, sorted.
        unmounted: Vec<String>,
        /// Their last failures (Go's `MountVolume.SetUp failed for volume ...`).
        messages: Vec<String>,
    },
    /// Go's timeout (its 1.28+ text: the wait's context ran out).
    #[error(
        "unmounted volumes=[{}], unattached volumes=[], failed to process volumes=[]: context deadline exceeded",
        .unmounted.join(" ")
    )]
    Timeout {
        /// The missing volumes, sorted.
        unmounted: Vec<String>,
    },
}

/// What the manager needs of the node.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `--root-dir`: volumes live under `<root>/pods/<uid>/volumes`.
    pub root_dir: PathBuf,
    /// Node-wide inputs (the downward API's defaults).
    pub node: NodeContext,
}

/// Where the manager reads what volumes are made of.
#[derive(Clone)]
pub struct Sources {
    /// Secrets and configMaps.
    pub objects: Arc<dyn ObjectSource>,
    /// Bound service-account tokens.
    pub tokens: Arc<dyn TokenSource>,
    /// Claims, persistent volumes, the node's labels, CSIDrivers, VolumeAttachments.
    pub storage: Arc<dyn StorageSource>,
    /// The registered CSI drivers.
    pub csi_drivers: crate::csi::registration::Drivers,
}

/// Everything the manager tracks, under one lock (never held across an await).
#[derive(Default)]
struct State {
    desired: DesiredState,
    actual: ActualState,
    retries: Retries,
    /// Volumes with an operation running.
    in_flight: BTreeSet<VolumeKey>,
    /// Pods whose volumes must go (removed, or orphaned once every source has spoken).
    removed: BTreeSet<String>,
    /// Pods whose last wait ended without their volumes: handed back when they are ready.
    failed_waits: BTreeSet<String>,
    /// Where those pods go.
    ready_tx: Option<mpsc::UnboundedSender<String>>,
    /// CSI volumes staged on this node, by unique name.
    devices: std::collections::BTreeMap<String, csi_ops::Device>,
    /// Set-ups of attachable CSI volumes past the attach decision, not yet staged.
    attaching: std::collections::BTreeMap<VolumeKey, String>,
    /// Whether the disk has been read (reconstruction done).
    reconstructed: bool,
    /// Where pods synced go for their volumes' resize check.
    resize_tx: Option<mpsc::UnboundedSender<String>>,
}

/// The volume manager.
pub struct VolumeManager {
    settings: Settings,
    objects: Arc<dyn ObjectSource>,
    tokens: Arc<dyn TokenSource>,
    storage: Arc<dyn StorageSource>,
    drivers: crate::csi::registration::Drivers,
    events: Arc<dyn EventRecorder>,
    state: Mutex<State>,
    /// Woken when the volumes in use change: the node status reports them at once.
    in_use_changed: Arc<Notify>,
    /// The persistent volumes' last usage readings.
    usage: Mutex<usage::UsageCache>,
    /// One lock per CSI device (staging, publishing from it, unstaging).
    device_locks: Mutex<std::collections::BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Wakes the reconciler.
    wake: Notify,
    /// Bumped whenever an operation ends; waits watch it.
    progress: watch::Sender<u64>,
}

/// The pod's namespace as the API reads it.
pub fn namespace_of(pod: &Pod) -> &str {
    pod.metadata
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
}

impl VolumeManager {
    /// A manager reading through `sources` and reporting to `events`; nothing happens until
    /// [`VolumeManager::spawn`].
    pub fn new(settings: Settings, sources: Sources, events: Arc<dyn EventRecorder>) -> Arc<Self> {
        Arc::new(Self {
            settings,
            objects: sources.objects,
            tokens: sources.tokens,
            storage: sources.storage,
            drivers: sources.csi_drivers,
            device_locks: Mutex::default(),
            usage: Mutex::default(),
            in_use_changed: Arc::new(Notify::new()),
            events,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            progress: watch::channel(0).0,
        })
    }

    /// Starts the reconciler (reconstruction first). The receiver gets the UIDs of pods whose
    /// last wait failed, once their volumes are all set up (sync them again).
    pub fn spawn(self: &Arc<Self>) -> mpsc::UnboundedReceiver<String> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().ready_tx = Some(tx);
        tokio::spawn(reconciler::run(self.clone()));
        tokio::spawn(usage::refresh(Arc::downgrade(self)));
        let (resize_tx, resize_rx) = mpsc::unbounded_channel();
        self.lock().resize_tx = Some(resize_tx);
        tokio::spawn(resize::run(Arc::downgrade(self), resize_rx));
        rx
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wants the volumes of `pod` (added, or updated: new labels and annotations reach its
    /// downward API). The kubelet calls it for every admitted pod its sources give.
    pub fn add_pod(&self, pod: &Arc<Pod>) {
        let uid = uid_of(pod);
        let changed = {
            let mut state = self.lock();
            state.removed.remove(&uid);
            state.desired.add_pod(&uid, pod)
        };
        if changed {
            self.wake.notify_one();
        }
    }

    /// No longer wants pod `uid`'s volumes: they are torn down. The kubelet calls it once the
    /// pod's containers are gone.
    pub fn remove_pod(&self, uid: &str) {
        {
            let mut state = self.lock();
            state.desired.remove_pod(uid);
            state.removed.insert(uid.to_string());
            state.failed_waits.remove(uid);
            // Set-up failures no longer matter; tear-downs start afresh.
            state.retries.retain(|k| k.uid != uid);
        }
        self.tokens.forget_pod(uid);
        self.wake.notify_one();
    }

    /// Whether anything of pod `uid` is still set up or being torn down.
    pub fn has_volumes(&self, uid: &str) -> bool {
        let state = self.lock();
        state.actual.has_pod(uid) || state.in_flight.iter().any(|k| k.uid == uid)
    }

    /// Once every source has spoken: the volumes of pods neither wanted nor `known` (found on
    /// disk at start, of pods deleted meanwhile) are torn down.
    pub fn remove_orphans(&self, known: impl Fn(&str) -> bool) {
        let mut found = false;
        {
            let mut state = self.lock();
            let orphans: Vec<String> = state
                .actual
                .pods()
                .filter(|uid| !state.desired.has_pod(uid) && !known(uid))
                .filter(|uid| !state.removed.contains(*uid))
                .map(str::to_string)
                .collect();
            for uid in orphans {
                tracing::info!(
                    uid,
                    "volume manager: tearing down the volumes of a pod no source wants"
                );
                state.removed.insert(uid);
                found = true;
            }
        }
        if found {
            self.wake.notify_one();
        }
    }

    /// Waits until every volume `pod`'s containers use is set up (Go's
    /// `WaitForAttachAndMount`, with its timeout): their host paths. Marks the pod's
    /// remountable volumes for writing again, as Go's does on every sync (`ReprocessPod`: the
    /// downward API, and secrets or configMaps read without a watch, follow their sources),
    /// and retries its failed ones at once. Ends early with the failures once every missing volume has failed an attempt
    /// made during the wait.
    pub async fn wait_for_attach_and_mount(&self, pod: &Arc<Pod>) -> Result<PodVolumes, WaitError> {
        let uid = uid_of(pod);
        let started = Instant::now();
        let mut progress = self.progress.subscribe();
        {
            let mut state = self.lock();
            if !state.desired.has_pod(&uid) {
                // Pods reach the manager through the kubelet's `add_pod`; a sync that comes
                // first must not wait for nothing.
                state.removed.remove(&uid);
                state.desired.add_pod(&uid, pod);
            }
            state.desired.mark_remount(&uid);
            // Go remounts a CSI volume on every sync when its driver requires republishing
            // (a NodePublishVolume again, with fresh tokens).
            let republish: Vec<VolumeKey> = state
                .actual
                .volumes()
                .filter(|(k, m)| k.uid == uid && m.republish)
                .map(|(k, _)| k)
                .collect();
            for key in &republish {
                state.desired.bump(key);
            }
            // Go's populator compares each claim's PV with the claim on every sync.
            if let Some(tx) = &state.resize_tx {
                let _ = tx.send(uid.clone());
            }
            // Missing or failed volumes are tried at once (after an attempt in flight, so a
            // failure the wait counts is one of an attempt made during it).
            let retry: Vec<VolumeKey> = state
                .desired
                .pod(&uid)
                .into_iter()
                .flat_map(|p| p.volumes.keys())
                .map(|name| VolumeKey::new(&uid, name))
                .filter(|k| {
                    state.retries.get(k).is_some()
                        || !state.actual.get(k).is_some_and(|m| m.confirmed())
                })
                .collect();
            for key in &retry {
                state.retries.retry_now(key, started);
            }
        }
        self.wake.notify_one();
        let deadline = started + POD_ATTACH_AND_MOUNT_TIMEOUT;
        loop {
            if let Some(done) = self.check(&uid, started, false) {
                return done;
            }
            let timed_out = tokio::time::timeout_at(deadline, progress.changed())
                .await
                .is_err();
            if timed_out && let Some(done) = self.check(&uid, started, true) {
                return done;
            }
        }
    }

    /// Where the wait for pod `uid` stands, counting failures of attempts made since
    /// `started`: its volumes, why they are not all there, or `None` to wait on. A pod whose
    /// wait fails is noted, under the same lock as the reconciler's, to be handed back.
    fn check(
        &self,
        uid: &str,
        started: Instant,
        timed_out: bool,
    ) -> Option<Result<PodVolumes, WaitError>> {
        let mut state = self.lock();
        let mut volumes = PodVolumes::default();
        let mut unmounted = Vec::new();
        let mut messages = Vec::new();
        let wanted = state
            .desired
            .pod(uid)
            .into_iter()
            .flat_map(|p| p.volumes.keys());
        for name in wanted {
            let key = VolumeKey::new(uid, name);
            if let Some(m) = state.actual.get(&key).filter(|m| m.confirmed()) {
                if m.block {
                    volumes.devices.insert(name.clone(), m.path.clone());
                } else {
                    volumes.dirs.insert(name.clone(), m.path.clone());
                }
                if m.read_only {
                    volumes.read_only.insert(name.clone());
                }
                continue;
            }
            unmounted.push(name.clone());
            if let Some(f) = state.retries.get(&key)
                && f.attempt_started >= started
                && !state.in_flight.contains(&key)
            {
                messages.push(f.message.clone());
            }
        }
        let result = if unmounted.is_empty() {
            Ok(volumes)
        } else if messages.len() == unmounted.len() {
            Err(WaitError::SetUpFailed {
                unmounted,
                messages,
            })
        } else if timed_out {
            Err(WaitError::Timeout { unmounted })
        } else {
            return None;
        };
        if result.is_ok() {
            state.failed_waits.remove(uid);
        } else {
            state.failed_waits.insert(uid.to_string());
        }
        Some(result)
    }

    /// What the node status loop waits on besides its period: the volumes in use changed.
    pub fn in_use_changed(&self) -> Arc<Notify> {
        self.in_use_changed.clone()
    }

    /// Go's `GetVolumesInUse`: the unique names of the attachable volumes staged or being
    /// set up, sorted; `None` before reconstruction (Go's `ReconcilerStatesHasBeenSynced`).
    pub fn volumes_in_use(&self) -> Option<Vec<String>> {
        let state = self.lock();
        if !state.reconstructed {
            return None;
        }
        let in_use: BTreeSet<String> = state
            .devices
            .iter()
            .filter(|(_, d)| d.attachable)
            .map(|(u, _)| u.clone())
            .chain(state.attaching.values().cloned())
            .collect();
        Some(in_use.into_iter().collect())
    }

    /// Waits until nothing of pod `uid` is set up, at most `timeout`; whether it got there.
    pub async fn wait_for_unmount(&self, uid: &str, timeout: Duration) -> bool {
        let mut progress = self.progress.subscribe();
        let deadline = Instant::now() + timeout;
        loop {
            if !self.has_volumes(uid) {
                return true;
            }
            if tokio::time::timeout_at(deadline, progress.changed())
                .await
                .is_err()
            {
                return false;
            }
        }
    }
}
