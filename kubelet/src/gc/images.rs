//! Image garbage collection, as the Go kubelet's image GC manager: when the image
//! filesystem's usage reaches `imageGCHighThresholdPercent`, unused images are removed,
//! least recently used first (ties: first detected first), until usage is back at
//! `imageGCLowThresholdPercent`. An image any container uses (running or not) is never
//! removed, nor one an image volume of a pod the kubelet knows mounts, nor a pinned one (the runtime's pause image), nor one first seen less than
//! `imageMinimumGCAge` ago (it may have just been pulled for a container about to start).
//!
//! [`ImageGcManager`] holds the records (first detected, last used, size) and the pure
//! selection; [`garbage_collect`] runs one pass against the runtime.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use ferrolet_proto::cri;

use crate::cri::{Cri, CriError};

/// The image GC policy (Go's `ImageGCPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// Usage (percent of the image filesystem) at which GC starts.
    pub high_threshold_percent: i32,
    /// Usage GC frees down to.
    pub low_threshold_percent: i32,
    /// Images first seen less than this long ago are kept.
    pub min_age: Duration,
}

/// Why an image GC pass failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageGcError {
    /// A CRI call failed.
    #[error(transparent)]
    Cri(#[from] CriError),
    /// ImageFsInfo named no filesystem.
    #[error("ImageFsInfo reported no image filesystem")]
    NoImageFs,
    /// The image filesystem's size could not be read.
    #[error("statfs {path}: {source}")]
    Statfs {
        /// The mountpoint ImageFsInfo reported.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The filesystem reports no capacity (Go's `InvalidDiskCapacity` event).
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
    /// Not enough could be removed (Go's `FreeDiskSpaceFailed` event).
    #[error(
        "Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, but only found {freed} bytes eligible to free."
    )]
    NotEnoughFreed {
        /// Bytes to free to reach the low threshold.
        wanted: u64,
        /// Bytes freed.
        freed: u64,
    },
}

/// An image as listed (ListImages).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageInfo {
    /// Image id.
    pub id: String,
    /// Tags.
    pub repo_tags: Vec<String>,
    /// Repo digests.
    pub repo_digests: Vec<String>,
    /// Size in bytes.
    pub size: u64,
    /// Pinned by the runtime: never removed.
    pub pinned: bool,
}

impl From<cri::Image> for ImageInfo {
    fn from(i: cri::Image) -> Self {
        Self {
            id: i.id,
            repo_tags: i.repo_tags,
            repo_digests: i.repo_digests,
            size: i.size,
            pinned: i.pinned,
        }
    }
}

/// What the GC knows of one image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// When first detected; None: present before the first detection ("long ago").
    pub first_detected: Option<Instant>,
    /// When last seen in use; None: never.
    pub last_used: Option<Instant>,
    /// Size in bytes.
    pub size: u64,
    /// Pinned.
    pub pinned: bool,
}

/// The image records and the selection of what to remove.
#[derive(Debug)]
pub struct ImageGcManager {
    policy: ImageGcPolicy,
    records: HashMap<String, Record>,
    /// Every name of every listed image (id, tags, digests) → its id.
    names: HashMap<String, String>,
    initialized: bool,
}

impl ImageGcManager {
    /// A manager with no records yet.
    pub fn new(policy: ImageGcPolicy) -> Self {
        Self {
            policy,
            records: HashMap::new(),
            names: HashMap::new(),
            initialized: false,
        }
    }

    /// The policy.
    pub fn policy(&self) -> ImageGcPolicy {
        self.policy
    }

    /// The record of an image.
    #[cfg(test)]
    pub fn record(&self, id: &str) -> Option<Record> {
        self.records.get(id).copied()
    }

    /// Go's `detectImages`: records new images (first detected `now`, or "long ago" on the
    /// first detection, so images from before the kubelet started are not young), forgets
    /// images no longer listed, and marks as used now every image one of `container_refs`
    /// (a container's image id, ref or name) names. Returns the ids in use.
    pub fn detect<'a>(
        &mut self,
        images: &[ImageInfo],
        container_refs: impl IntoIterator<Item = &'a str>,
        now: Instant,
    ) -> HashSet<String> {
        let detected = self.initialized.then_some(now);
        self.initialized = true;
        self.names.clear();
        for image in images {
            for name in image
                .repo_tags
                .iter()
                .chain(&image.repo_digests)
                .chain(std::iter::once(&image.id))
            {
                self.names.insert(name.clone(), image.id.clone());
            }
            let record = self.records.entry(image.id.clone()).or_insert(Record {
                first_detected: detected,
                last_used: None,
                size: image.size,
                pinned: image.pinned,
            });
            record.size = image.size;
            record.pinned = image.pinned;
        }
        let listed: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| listed.contains(id.as_str()));
        self.mark_used(container_refs, now)
    }

    /// Marks as used now the images `container_refs` name (names resolved through the last
    /// detection); returns their ids. The PLEG's view is fed here between detections, so
    /// last-used times follow the containers the kubelet sees.
    pub fn mark_used<'a>(
        &mut self,
        container_refs: impl IntoIterator<Item = &'a str>,
        now: Instant,
    ) -> HashSet<String> {
        let mut used = HashSet::new();
        for r in container_refs {
            if r.is_empty() {
                continue;
            }
            let id = self
                .names
                .get(r)
                .or_else(|| self.names.get(&format!("sha256:{r}")))
                .cloned();
            if let Some(id) = id
                && let Some(record) = self.records.get_mut(&id)
            {
                record.last_used = Some(now);
                used.insert(id);
            }
        }
        used
    }

    /// The images that may go, in the order they go: not in `in_use`, not pinned, least
    /// recently used first, then first detected first.
    pub fn eviction_order(&self, in_use: &HashSet<String>) -> Vec<(String, Record)> {
        let mut out: Vec<(String, Record)> = self
            .records
            .iter()
            .filter(|(id, r)| !r.pinned && !in_use.contains(*id))
            .map(|(id, r)| (id.clone(), *r))
            .collect();
        // None (never used / long ago) sorts before any time.
        out.sort_by(|a, b| {
            a.1.last_used
                .cmp(&b.1.last_used)
                .then(a.1.first_detected.cmp(&b.1.first_detected))
                .then(a.0.cmp(&b.0))
        });
        out
    }

    /// Whether an image is old enough to go at `now` (first detected at least the minimum
    /// age ago).
    pub fn old_enough(&self, record: &Record, now: Instant) -> bool {
        match record.first_detected {
            None => true,
            Some(at) => now.saturating_duration_since(at) >= self.policy.min_age,
        }
    }

    /// Forgets a removed image.
    pub fn forget(&mut self, id: &str) {
        self.records.remove(id);
    }
}

/// Go's threshold check: usage percent = 100 - available * 100 / capacity; at or above the
/// high threshold, the bytes to free to reach the low threshold. Errors on zero capacity.
pub fn amount_to_free(
    capacity: u64,
    available: u64,
    policy: &ImageGcPolicy,
) -> Result<Option<u64>, ImageGcError> {
    if capacity == 0 {
        return Err(ImageGcError::InvalidCapacity);
    }
    let available = available.min(capacity);
    let usage = usage_percent(capacity, available);
    if usage < i64::from(policy.high_threshold_percent) {
        return Ok(None);
    }
    let low = u128::try_from(policy.low_threshold_percent.clamp(0, 100)).unwrap_or(0);
    let target_free = u128::from(capacity) * (100 - low) / 100;
    let wanted = target_free.saturating_sub(u128::from(available));
    Ok(Some(u64::try_from(wanted).unwrap_or(u64::MAX)))
}

/// Used percent, rounded up as Go's `100 - int(available*100/capacity)` does.
pub fn usage_percent(capacity: u64, available: u64) -> i64 {
    if capacity == 0 {
        return 100;
    }
    let free_pct = u128::from(available.min(capacity)) * 100 / u128::from(capacity);
    100 - i64::try_from(free_pct).unwrap_or(100)
}

/// The image service calls of the image GC, each bounded by the request timeout and counted
/// in the runtime operation metrics.
#[derive(Clone, Debug)]
pub struct ImageCalls {
    cri: Cri,
    timeout: Duration,
}

impl ImageCalls {
    /// Calls on `cri`, each bounded by `timeout`.
    pub fn new(cri: Cri, timeout: Duration) -> Self {
        Self { cri, timeout }
    }

    /// ListImages.
    pub async fn list_images(&self) -> Result<Vec<ImageInfo>, CriError> {
        let mut client = self.cri.images();
        let req = cri::ListImagesRequest { filter: None };
        timed("ListImages", self.timeout, client.list_images(req))
            .await
            .map(|r| r.images.into_iter().map(ImageInfo::from).collect())
    }

    /// Every container's image names (id, ref, requested name), any state.
    pub async fn container_image_refs(&self) -> Result<Vec<String>, CriError> {
        let mut client = self.cri.runtime();
        let req = cri::ListContainersRequest { filter: None };
        let containers = timed("ListContainers", self.timeout, client.list_containers(req))
            .await?
            .containers;
        Ok(containers
            .into_iter()
            .flat_map(|c| {
                [
                    c.image_id,
                    c.image_ref,
                    c.image.map(|i| i.image).unwrap_or_default(),
                ]
            })
            .filter(|r| !r.is_empty())
            .collect())
    }

    /// The ids of the images `references` name (ImageStatus each). Those not present are
    /// left out, and so are those the runtime cannot look up (a reference it refuses must not
    /// stop every pass: such an image was never pulled).
    pub async fn image_ids(&self, references: &[String]) -> Vec<String> {
        let mut ids = Vec::new();
        for reference in references {
            let mut client = self.cri.images();
            let req = cri::ImageStatusRequest {
                image: Some(cri::ImageSpec {
                    image: reference.clone(),
                    ..Default::default()
                }),
                verbose: false,
            };
            match timed("ImageStatus", self.timeout, client.image_status(req)).await {
                Ok(status) => ids.extend(status.image.map(|i| i.id)),
                Err(e) => {
                    tracing::debug!(%reference, error = %e, "image GC: an image volume's image")
                }
            }
        }
        ids
    }

    /// RemoveImage by id.
    pub async fn remove_image(&self, id: &str) -> Result<(), CriError> {
        let mut client = self.cri.images();
        let req = cri::RemoveImageRequest {
            image: Some(cri::ImageSpec {
                image: id.to_string(),
                ..Default::default()
            }),
        };
        timed("RemoveImage", self.timeout, client.remove_image(req))
            .await
            .map(|_| ())
    }

    /// The image filesystem's mountpoint, from ImageFsInfo.
    pub async fn image_fs_mountpoint(&self) -> Result<String, ImageGcError> {
        let mut client = self.cri.images();
        let info = timed(
            "ImageFsInfo",
            self.timeout,
            client.image_fs_info(cri::ImageFsInfoRequest {}),
        )
        .await?;
        info.image_filesystems
            .into_iter()
            .filter_map(|fs| fs.fs_id.map(|id| id.mountpoint))
            .find(|m| !m.is_empty())
            .ok_or(ImageGcError::NoImageFs)
    }
}

/// One call with the timeout, recorded in the runtime operation metrics.
async fn timed<T>(
    method: &'static str,
    timeout: Duration,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, CriError> {
    let started = Instant::now();
    let result = match tokio::time::timeout(timeout, call).await {
        Ok(Ok(resp)) => Ok(resp.into_inner()),
        Ok(Err(status)) => Err(CriError::Call { method, status }),
        Err(_) => Err(CriError::Timeout { method, timeout }),
    };
    crate::metrics::runtime_operation(method, started, result.is_err());
    result
}

/// Capacity and available bytes (for unprivileged users) of the filesystem at `path`.
pub async fn fs_capacity(path: &str) -> Result<(u64, u64), ImageGcError> {
    let owned = path.to_string();
    let stat = tokio::task::spawn_blocking(move || nix::sys::statvfs::statvfs(Path::new(&owned)))
        .await
        .map_err(|e| ImageGcError::Statfs {
            path: path.to_string(),
            source: std::io::Error::other(e.to_string()),
        })?
        .map_err(|e| ImageGcError::Statfs {
            path: path.to_string(),
            source: std::io::Error::from(e),
        })?;
    // The field types differ between platforms; on Linux they are already u64.
    #[allow(clippy::useless_conversion)]
    let (blocks, available, frsize) = (
        u64::from(stat.blocks()),
        u64::from(stat.blocks_available()),
        u64::from(stat.fragment_size()),
    );
    Ok((
        blocks.saturating_mul(frsize),
        available.saturating_mul(frsize),
    ))
}

/// Lists images and containers and records them in `manager` (Go's `detectImages`); the
/// ids of the images in use: the containers' and those of the image volumes named by
/// `volume_images` (references resolved by the runtime, so any spelling of a name counts).
pub async fn detect(
    manager: &mut ImageGcManager,
    calls: &ImageCalls,
    volume_images: &[String],
    now: Instant,
) -> Result<HashSet<String>, ImageGcError> {
    let images = calls.list_images().await?;
    let mut refs = calls.container_image_refs().await?;
    refs.extend(calls.image_ids(volume_images).await);
    refs.extend(volume_images.iter().cloned());
    Ok(manager.detect(&images, refs.iter().map(String::as_str), now))
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageGcReport {
    /// Usage percent of the image filesystem when the pass started.
    pub usage_percent: i64,
    /// Bytes the pass set out to free (0: under the high threshold).
    pub wanted: u64,
    /// Bytes freed.
    pub freed: u64,
    /// Images removed.
    pub removed: Vec<String>,
}

/// One image GC pass (Go's `GarbageCollect`): reads the image filesystem's usage; at or
/// above the high threshold, detects images and their use afresh and removes eligible
/// images in eviction order until enough is freed. A pass under the threshold only
/// refreshes the records.
pub async fn garbage_collect(
    manager: &mut ImageGcManager,
    calls: &ImageCalls,
    volume_images: &[String],
) -> Result<ImageGcReport, ImageGcError> {
    let mountpoint = calls.image_fs_mountpoint().await?;
    let (capacity, available) = fs_capacity(&mountpoint).await?;
    let policy = manager.policy();
    let mut report = ImageGcReport {
        usage_percent: usage_percent(capacity, available),
        ..Default::default()
    };
    let wanted = amount_to_free(capacity, available, &policy)?;
    let free_time = Instant::now();
    let in_use = detect(manager, calls, volume_images, free_time).await?;
    let Some(wanted) = wanted else {
        return Ok(report);
    };
    report.wanted = wanted;
    tracing::info!(
        usage = report.usage_percent,
        high_threshold = policy.high_threshold_percent,
        amount_to_free = wanted,
        low_threshold = policy.low_threshold_percent,
        mountpoint,
        "Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
    );
    let mut removed_errors = Vec::new();
    for (id, record) in manager.eviction_order(&in_use) {
        if report.freed >= wanted {
            break;
        }
        if !manager.old_enough(&record, free_time) {
            tracing::debug!(image = %id, min_age = ?policy.min_age, "image GC: image too young to remove");
            continue;
        }
        tracing::info!(image = %id, size = record.size, "Removing image to free bytes");
        match calls.remove_image(&id).await {
            Ok(()) => {
                manager.forget(&id);
                report.freed = report.freed.saturating_add(record.size);
                report.removed.push(id);
            }
            Err(e) => {
                tracing::warn!(image = %id, error = %e, "image GC: removing an image");
                removed_errors.push(e);
            }
        }
    }
    crate::metrics::images_garbage_collected("space", report.removed.len());
    if report.freed < wanted {
        return Err(ImageGcError::NotEnoughFreed {
            wanted,
            freed: report.freed,
        });
    }
    Ok(report)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn image(id: &str, tag: &str, size: u64, pinned: bool) -> ImageInfo {
        ImageInfo {
            id: id.into(),
            repo_tags: vec![tag.into()],
            repo_digests: vec![format!("repo@{id}")],
            size,
            pinned,
        }
    }

    fn policy(min_age_s: u64) -> ImageGcPolicy {
        ImageGcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(min_age_s),
        }
    }

    fn order(m: &ImageGcManager, in_use: &HashSet<String>) -> Vec<String> {
        m.eviction_order(in_use)
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    #[test]
    fn thresholds_as_go_computes_them() {
        let p = policy(0);
        // 100 bytes, 20 free: 80 % used, under 85.
        assert_eq!(amount_to_free(100, 20, &p).unwrap(), None);
        // 10 free: 90 % used; free down to 80 % used = 20 free: 10 bytes.
        assert_eq!(amount_to_free(100, 10, &p).unwrap(), Some(10));
        // Exactly at the threshold counts.
        assert_eq!(amount_to_free(100, 15, &p).unwrap(), Some(5));
        // Usage rounds up: 14.9 % free is 86 % used.
        assert_eq!(usage_percent(1000, 149), 86);
        // Available above capacity is capped.
        assert_eq!(amount_to_free(100, 500, &p).unwrap(), None);
        assert!(matches!(
            amount_to_free(0, 0, &p),
            Err(ImageGcError::InvalidCapacity)
        ));
        let all = ImageGcPolicy {
            high_threshold_percent: 1,
            low_threshold_percent: 0,
            min_age: Duration::ZERO,
        };
        assert_eq!(amount_to_free(1000, 900, &all).unwrap(), Some(100));
        // Go's integer division: any use at all is at least 1 %.
        assert_eq!(amount_to_free(1000, 995, &all).unwrap(), Some(5));
        assert_eq!(amount_to_free(1000, 1000, &all).unwrap(), None);
    }

    #[test]
    fn in_use_and_pinned_images_never_go() {
        let mut m = ImageGcManager::new(policy(0));
        let t0 = Instant::now();
        let images = [
            image("sha256:a", "a:1", 10, false),
            image("sha256:b", "b:1", 10, false),
            image("sha256:pause", "pause:1", 1, true),
            image("sha256:c", "c:1", 10, false),
        ];
        // Containers name images by tag, by repo digest, or by bare id.
        let in_use = m.detect(&images, ["a:1", "repo@sha256:b", "unknown:9"], t0);
        assert_eq!(
            in_use,
            HashSet::from(["sha256:a".to_string(), "sha256:b".to_string()])
        );
        assert_eq!(order(&m, &in_use), ["sha256:c"]);
        let in_use = m.detect(&images, ["c"], t0 + Duration::from_secs(1));
        assert!(in_use.contains("sha256:c"), "{in_use:?}");
        assert_eq!(order(&m, &in_use), ["sha256:a", "sha256:b"]);
    }

    #[test]
    fn least_recently_used_first_then_first_detected() {
        let mut m = ImageGcManager::new(policy(0));
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // First detection: everything "long ago".
        m.detect(&[image("sha256:old", "old:1", 1, false)], [], t0);
        let all = [
            image("sha256:old", "old:1", 1, false),
            image("sha256:x", "x:1", 1, false),
            image("sha256:y", "y:1", 1, false),
            image("sha256:z", "z:1", 1, false),
        ];
        m.detect(&all, ["y:1"], t0 + s(10));
        m.detect(&all, ["x:1"], t0 + s(20));
        m.mark_used(["z:1"], t0 + s(15));
        // Never used first, then by last use: y (10 s), z (15 s), x (20 s).
        let none = HashSet::new();
        assert_eq!(
            order(&m, &none),
            ["sha256:old", "sha256:y", "sha256:z", "sha256:x"]
        );
        assert_eq!(m.record("sha256:old").unwrap().first_detected, None);
        assert_eq!(
            m.record("sha256:x").unwrap().first_detected,
            Some(t0 + s(10))
        );
        assert_eq!(m.record("sha256:x").unwrap().last_used, Some(t0 + s(20)));
    }

    #[test]
    fn minimum_age_and_forgotten_images() {
        let mut m = ImageGcManager::new(policy(120));
        let t0 = Instant::now();
        m.detect(&[image("sha256:pre", "pre:1", 5, false)], [], t0);
        m.detect(
            &[
                image("sha256:pre", "pre:1", 5, false),
                image("sha256:new", "new:1", 5, false),
            ],
            [],
            t0 + Duration::from_secs(1),
        );
        let pre = m.record("sha256:pre").unwrap();
        let new = m.record("sha256:new").unwrap();
        let later = t0 + Duration::from_secs(60);
        assert!(m.old_enough(&pre, later), "present at start-up");
        assert!(!m.old_enough(&new, later));
        assert!(m.old_enough(&new, t0 + Duration::from_secs(121)));
        // An image no longer listed is forgotten.
        m.detect(&[image("sha256:new", "new:1", 5, false)], [], later);
        assert!(m.record("sha256:pre").is_none());
        m.forget("sha256:new");
        assert!(m.record("sha256:new").is_none());
    }

    #[test]
    fn sizes_and_pins_follow_the_listing() {
        let mut m = ImageGcManager::new(policy(0));
        let t0 = Instant::now();
        m.detect(&[image("sha256:a", "a:1", 1, false)], [], t0);
        m.detect(&[image("sha256:a", "a:1", 7, true)], [], t0);
        let r = m.record("sha256:a").unwrap();
        assert_eq!((r.size, r.pinned), (7, true));
        assert!(order(&m, &HashSet::new()).is_empty());
    }

    #[tokio::test]
    async fn the_root_filesystem_has_a_capacity() {
        let (capacity, available) = fs_capacity("/").await.unwrap();
        assert!(capacity > 0 && available <= capacity);
        assert!(matches!(
            fs_capacity("/nonexistent/fs").await,
            Err(ImageGcError::Statfs { .. })
        ));
    }
}
