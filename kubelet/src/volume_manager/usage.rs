//! What the persistent volumes set up on this node hold (Go's volume stat calculator for
//! the Summary API and the `kubelet_volume_stats_*` metrics): a CSI volume through the
//! driver's `NodeGetVolumeStats` when it has `GET_VOLUME_STATS` (none otherwise, as Go), a
//! local volume by statfs of its mount. hostPath volumes have no metrics in Go either.
//! Results are kept for [`USAGE_TTL`]: a Summary scrape does not call every driver.

use std::path::PathBuf;
use std::time::Duration;

use ferrolet_proto::csi::{NodeGetVolumeStatsRequest, volume_usage};
use tokio::time::Instant;

use super::VolumeManager;
use super::csi_ops::CsiMounted;
use crate::csi::client::CsiClient;
use crate::volume::persistent::LOCAL_PLUGIN;

/// How long a reading is served again.
pub const USAGE_TTL: Duration = Duration::from_secs(10);
/// How often the readings are taken without a Summary asking (Go's
/// `volumeStatsAggPeriod`), for the metrics.
pub const REFRESH_PERIOD: Duration = Duration::from_secs(60);
/// How long one driver may take to answer.
const STATS_TIMEOUT: Duration = Duration::from_secs(10);

/// One persistent volume's usage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeUsage {
    /// The pod's UID.
    pub uid: String,
    /// The volume's name in the pod spec (the PV's for one found on disk at start).
    pub name: String,
    /// The claim's namespace and name, when it came through one.
    pub pvc: Option<(String, String)>,
    /// Bytes of the volume's filesystem.
    pub capacity_bytes: u64,
    /// Bytes free.
    pub available_bytes: u64,
    /// Bytes used.
    pub used_bytes: u64,
    /// Inodes of the filesystem.
    pub inodes: u64,
    /// Inodes free.
    pub inodes_free: u64,
    /// Inodes used.
    pub inodes_used: u64,
}

/// The last readings and when they were taken.
#[derive(Default)]
pub struct UsageCache {
    /// When, and at which of the manager's progress counts (a volume set up or torn down
    /// since makes the readings stale whatever their age).
    taken: Option<(Instant, u64)>,
    readings: Vec<VolumeUsage>,
}

impl VolumeManager {
    /// The usage of every persistent volume set up here, at most [`USAGE_TTL`] old.
    pub async fn persistent_volume_usage(&self) -> Vec<VolumeUsage> {
        let progress = *self.progress.borrow();
        {
            let cache = self.usage.lock().unwrap_or_else(|p| p.into_inner());
            if cache
                .taken
                .is_some_and(|(t, p)| t.elapsed() < USAGE_TTL && p == progress)
            {
                return cache.readings.clone();
            }
        }
        let targets: Vec<(VolumeUsage, PathBuf, Option<CsiMounted>, Option<PathBuf>)> = {
            let state = self.lock();
            state
                .actual
                .volumes()
                .filter(|(_, m)| {
                    m.confirmed()
                        && !m.block
                        && (m.csi.is_some() || m.plugin.as_deref() == Some(LOCAL_PLUGIN))
                })
                .map(|(key, m)| {
                    let staging = m
                        .csi
                        .as_ref()
                        .and_then(|c| c.device.as_ref())
                        .and_then(|d| state.devices.get(d))
                        .map(|d| d.path.clone());
                    let usage = VolumeUsage {
                        uid: key.uid.clone(),
                        name: key.name.clone(),
                        pvc: m.pvc.clone(),
                        ..Default::default()
                    };
                    (usage, m.path.clone(), m.csi.clone(), staging)
                })
                .collect()
        };
        let mut readings = Vec::new();
        for (usage, path, csi, staging) in targets {
            let read = match &csi {
                Some(c) => self.csi_usage(usage, &path, c, staging).await,
                None => statfs_usage(usage, path).await,
            };
            readings.extend(read);
        }
        crate::metrics::set_claim_usage(
            readings
                .iter()
                .filter_map(|u| {
                    let (namespace, claim) = u.pvc.clone()?;
                    Some(crate::metrics::ClaimUsage {
                        namespace,
                        claim,
                        values: [
                            u.capacity_bytes,
                            u.available_bytes,
                            u.used_bytes,
                            u.inodes,
                            u.inodes_free,
                            u.inodes_used,
                        ],
                    })
                })
                .collect(),
        );
        let mut cache = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        cache.taken = Some((Instant::now(), progress));
        cache.readings = readings.clone();
        readings
    }

    async fn csi_usage(
        &self,
        mut usage: VolumeUsage,
        path: &std::path::Path,
        csi: &CsiMounted,
        staging: Option<PathBuf>,
    ) -> Option<VolumeUsage> {
        let call = async {
            let client = CsiClient::connect(&self.drivers, &csi.driver).await.ok()?;
            if !client.capabilities().await.ok()?.volume_stats {
                return None;
            }
            let req = NodeGetVolumeStatsRequest {
                volume_id: csi.handle.clone(),
                volume_path: path.to_string_lossy().into_owned(),
                staging_target_path: staging
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            };
            client.volume_stats(req).await.ok()
        };
        let got = match tokio::time::timeout(STATS_TIMEOUT, call).await {
            Ok(Some(got)) => got,
            Ok(None) | Err(_) => {
                tracing::debug!(
                    volume = usage.name,
                    uid = usage.uid,
                    "no volume stats from the CSI driver"
                );
                return None;
            }
        };
        let clamp = |v: i64| u64::try_from(v).unwrap_or(0);
        for u in got.usage {
            match volume_usage::Unit::try_from(u.unit) {
                Ok(volume_usage::Unit::Bytes) => {
                    usage.capacity_bytes = clamp(u.total);
                    usage.available_bytes = clamp(u.available);
                    usage.used_bytes = clamp(u.used);
                }
                Ok(volume_usage::Unit::Inodes) => {
                    usage.inodes = clamp(u.total);
                    usage.inodes_free = clamp(u.available);
                    usage.inodes_used = clamp(u.used);
                }
                _ => {}
            }
        }
        Some(usage)
    }
}

/// Takes the readings every [`REFRESH_PERIOD`] while the manager lives.
pub async fn refresh(manager: std::sync::Weak<VolumeManager>) {
    let mut tick = tokio::time::interval(REFRESH_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(manager) = manager.upgrade() else {
            return;
        };
        manager.persistent_volume_usage().await;
    }
}

/// Go's `MetricsStatFS`: the filesystem's figures, used = total - free.
async fn statfs_usage(mut usage: VolumeUsage, path: PathBuf) -> Option<VolumeUsage> {
    let st = tokio::task::spawn_blocking(move || nix::sys::statvfs::statvfs(&path).ok())
        .await
        .ok()??;
    let frsize = st.fragment_size();
    usage.capacity_bytes = st.blocks() * frsize;
    usage.available_bytes = st.blocks_available() * frsize;
    usage.used_bytes = (st.blocks() - st.blocks_free()) * frsize;
    usage.inodes = st.files();
    usage.inodes_free = st.files_free();
    usage.inodes_used = st.files() - st.files_free();
    Some(usage)
}
