//! The sweeper: what nobody owns any more goes.
//!
//! Every call that makes something reserves its object's name first and releases it only
//! once everything is made (indexed) or undone, so an id that is neither indexed nor reserved
//! belongs to no call and no object: it is left over from a crash (of ours, or of a call's
//! teardown step while containerd restarted). The sweeper compares what exists — containerd
//! records carrying our metadata, the snapshots we labelled, our leases, our directories
//! under root and state, our network namespaces and CNI attachments — with the ids in use,
//! and tears down the rest from the best record it has (the one under root, else the one
//! on containerd's record). It runs after start-up recovery, periodically, and soon after a
//! teardown step fails; what it cannot remove yet it tries again.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferrolet_proto::containerd::services::v1::snapshots::ListSnapshotsRequest;
use ferrolet_proto::containerd::services::v1::{
    Container as Record, DeleteRequest as DeleteLeaseRequest, ListContainersRequest,
    ListRequest as ListLeasesRequest,
};
use tonic::Code;

use super::{Result, RuntimeError, RuntimeInner, all_of};
use crate::container::{ContainerMeta, io, record_dir};
use crate::sandbox::{SandboxMeta, SandboxRecord, record_path};
use crate::store::{
    self, KIND_CONTAINER, KIND_LABEL, KIND_SANDBOX, METADATA_EXTENSION, SNAPSHOT_OWNER_LABEL,
};
use crate::task;

/// How soon a sweep that left something behind runs again.
const RETRY: Duration = Duration::from_secs(5);
/// How long a sweep waits after being asked, so a burst of failed teardowns (containerd
/// restarting) is swept once containerd is back rather than once per failure.
const SETTLE: Duration = Duration::from_secs(1);

/// What one sweep found and did.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// Ids (or names) torn down, by kind.
    pub removed: Vec<(&'static str, String)>,
    /// What could not be removed (it is tried again).
    pub failed: Vec<String>,
}

impl SweepReport {
    fn outcome(&mut self, kind: &'static str, id: &str, result: Result<()>) {
        match result {
            Ok(()) => self.removed.push((kind, id.to_string())),
            Err(e) => self.failed.push(format!("{kind} {id}: {e}")),
        }
    }
}

/// Sweeps now, then every `period` and soon after each [`RuntimeInner::request_sweep`],
/// for as long as the runtime lives.
pub async fn run(inner: Arc<RuntimeInner>, period: Duration) {
    loop {
        let report = sweep(&inner).await;
        let wait = if report.failed.is_empty() {
            period
        } else {
            RETRY
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = inner.sweep_wanted.notified() => tokio::time::sleep(SETTLE).await,
        }
    }
}

impl RuntimeInner {
    /// Asks the sweeper for a sweep soon: a teardown step failed and left its record.
    pub fn request_sweep(&self) {
        self.sweep_wanted.notify_one();
    }
}

/// What exists that may be ours, read before the ids in use (an object made after these
/// reads is not in them; one read here whose maker is still at work is reserved by then).
#[derive(Default)]
struct Found {
    /// containerd records carrying our metadata, by id.
    records: HashMap<String, Record>,
    /// Snapshot keys any containerd record (ours or not) uses, as its rootfs or by a
    /// garbage-collection label (the views of a container's image volumes).
    snapshot_keys_in_use: HashSet<String>,
    /// Keys of the snapshots we labelled.
    our_snapshots: BTreeSet<String>,
    /// Our lease ids.
    leases: Vec<String>,
    /// Ids with a directory under root or state.
    dirs: BTreeSet<String>,
    /// Our network namespace files.
    netns: Vec<PathBuf>,
    /// Container ids of CNI attachments in our network namespaces.
    attachments: BTreeSet<String>,
}

/// One sweep; its report is logged.
pub async fn sweep(inner: &RuntimeInner) -> SweepReport {
    let mut report = SweepReport::default();
    let found = match find(inner).await {
        Ok(found) => found,
        Err(e) => {
            report.failed.push(e.to_string());
            tracing::warn!(error = %e, "sweeper: reading what exists");
            return report;
        }
    };
    let mut in_use = inner.sandboxes.ids_in_use();
    in_use.extend(inner.containers.ids_in_use());
    let orphan = |id: &String| !in_use.contains(id);

    // Sandboxes and containers, from their records: containerd's or ours under root.
    let ids: BTreeSet<&String> = found
        .records
        .keys()
        .chain(found.dirs.iter())
        .filter(|id| orphan(id))
        .collect();
    let mut handled: HashSet<String> = HashSet::new();
    for id in ids {
        let record = found.records.get(id);
        let kind = record
            .and_then(|r| r.labels.get(KIND_LABEL))
            .map(String::as_str);
        let sandbox = read_sandbox(inner, id, record).await;
        let result = match (sandbox, kind) {
            (Some(meta), _) => ("sandbox", inner.destroy_sandbox(&meta, true).await),
            (None, Some(KIND_SANDBOX)) => ("sandbox", destroy_unreadable_sandbox(inner, id).await),
            (None, _) if kind == Some(KIND_CONTAINER) || has_container_dir(inner, id) => {
                let meta = read_container(inner, id, record).await;
                ("container", destroy_container(inner, id, meta).await)
            }
            // Only a state dir is left (a crash before the record was written).
            (None, _) => ("state dir", remove_state_dirs(inner, id).await),
        };
        report.outcome(result.0, id, result.1);
        handled.insert(id.clone());
    }

    // CNI attachments of sandboxes that have no record left: DEL from the cache.
    for id in found.attachments.iter().filter(|id| orphan(id)) {
        if handled.contains(id) {
            continue;
        }
        let netns = inner.network.netns_path(id);
        let result = inner
            .network
            .teardown(id, &netns, None)
            .await
            .map_err(RuntimeError::from);
        report.outcome("CNI attachment", id, result);
    }
    // Network namespaces nobody's id names.
    let owned_netns: HashSet<PathBuf> = in_use
        .iter()
        .map(|id| inner.network.netns_path(id))
        .collect();
    for path in found.netns.iter().filter(|p| !owned_netns.contains(*p)) {
        let result = ferrolet_cni::netns::delete(path)
            .await
            .map_err(|e| RuntimeError::internal(format!("{}: {e}", path.display())));
        report.outcome("netns", &path.display().to_string(), result);
    }
    // Snapshots we made that no record uses and no call is making (a view's key starts with
    // its container's id).
    for key in &found.our_snapshots {
        if in_use.contains(store::snapshot_owner(key)) || found.snapshot_keys_in_use.contains(key) {
            continue;
        }
        let result = task::remove_snapshot(&inner.cd, &inner.opts.snapshotter, key)
            .await
            .map_err(RuntimeError::from);
        report.outcome("snapshot", key, result);
    }
    // Leases whose maker is gone: what they held is collected with them.
    for id in found
        .leases
        .iter()
        .filter(|id| crate::lease::is_abandoned(id))
    {
        let result = inner
            .cd
            .leases()
            .delete(DeleteLeaseRequest {
                id: id.clone(),
                sync: true,
            })
            .await;
        let result = match result {
            Err(s) if s.code() != Code::NotFound => {
                Err(RuntimeError::containerd(format!("deleting lease {id}"))(s))
            }
            _ => Ok(()),
        };
        report.outcome("lease", id, result);
    }

    if !report.removed.is_empty() || !report.failed.is_empty() {
        tracing::info!(
            removed = ?report.removed,
            failed = ?report.failed,
            "sweeper: removed what nobody owned"
        );
    }
    report
}

/// Reads what exists (see [`Found`]).
async fn find(inner: &RuntimeInner) -> Result<Found> {
    let mut found = Found::default();
    let records = inner
        .cd
        .containers()
        .list(ListContainersRequest::default())
        .await
        .map_err(RuntimeError::containerd("listing containerd containers"))?
        .into_inner()
        .containers;
    for r in records {
        if !r.snapshot_key.is_empty() {
            found.snapshot_keys_in_use.insert(r.snapshot_key.clone());
        }
        let label_refs = r
            .labels
            .iter()
            .filter(|(k, _)| k.starts_with(task::GC_SNAPSHOT_REF_LABEL))
            .map(|(_, key)| key.clone());
        found.snapshot_keys_in_use.extend(label_refs);
        if r.extensions.contains_key(METADATA_EXTENSION) {
            found.records.insert(r.id.clone(), r);
        }
    }
    let mut pages = inner
        .cd
        .snapshots()
        .list(ListSnapshotsRequest {
            snapshotter: inner.opts.snapshotter.clone(),
            filters: vec![format!("labels.\"{SNAPSHOT_OWNER_LABEL}\"")],
        })
        .await
        .map_err(RuntimeError::containerd("listing snapshots"))?
        .into_inner();
    while let Some(page) = pages
        .message()
        .await
        .map_err(RuntimeError::containerd("listing snapshots"))?
    {
        found
            .our_snapshots
            .extend(page.info.into_iter().map(|i| i.name));
    }
    found.leases = inner
        .cd
        .leases()
        .list(ListLeasesRequest::default())
        .await
        .map_err(RuntimeError::containerd("listing leases"))?
        .into_inner()
        .leases
        .into_iter()
        .map(|l| l.id)
        .collect();
    let (root, state) = (inner.opts.root.clone(), inner.opts.state.clone());
    let network = &inner.network;
    let (dirs, netns, attachments) = tokio::join!(
        tokio::task::spawn_blocking(move || {
            let mut ids = BTreeSet::new();
            for base in [&root, &state] {
                for kind in ["sandboxes", "containers"] {
                    ids.extend(dir_names(&base.join(kind)).into_iter().filter(|n| is_id(n)));
                }
            }
            ids
        }),
        network.own_netns(),
        network.attachments(),
    );
    found.dirs = dirs.map_err(|e| RuntimeError::internal(format!("reading dirs: {e}")))?;
    found.netns = netns?;
    found.attachments = attachments?.into_iter().filter(|id| is_id(id)).collect();
    Ok(found)
}

/// Names in `dir` (none when it does not exist).
fn dir_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `name` is one of our ids (64 hex digits): nothing else in our dirs is swept.
fn is_id(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

fn has_container_dir(inner: &RuntimeInner, id: &str) -> bool {
    record_dir(&inner.opts.root, id).exists()
}

/// A sandbox's record: ours under root, else the one on containerd's record.
async fn read_sandbox(
    inner: &RuntimeInner,
    id: &str,
    record: Option<&Record>,
) -> Option<SandboxMeta> {
    if let Ok(Some(rec)) =
        store::read_record::<SandboxRecord>(&record_path(&inner.opts.root, id)).await
    {
        return Some(rec.meta);
    }
    let record = record.filter(|r| r.labels.get(KIND_LABEL).is_some_and(|k| k == KIND_SANDBOX))?;
    let any = record.extensions.get(METADATA_EXTENSION)?;
    store::from_json(id, &any.value).ok()
}

/// A container's record: ours under root, else the one on containerd's record.
async fn read_container(
    inner: &RuntimeInner,
    id: &str,
    record: Option<&Record>,
) -> Option<ContainerMeta> {
    let path = record_dir(&inner.opts.root, id).join("container.json");
    if let Ok(Some(meta)) = store::read_record(&path).await {
        return Some(meta);
    }
    let any = record?.extensions.get(METADATA_EXTENSION)?;
    store::from_json(id, &any.value).ok()
}

/// A container nobody owns: its task killed and deleted, its record, snapshot and FIFOs,
/// and last its record dir.
async fn destroy_container(
    inner: &RuntimeInner,
    id: &str,
    meta: Option<ContainerMeta>,
) -> Result<()> {
    inner.kill_and_delete_task(id).await?;
    // Its idmapped rootfs and volumes first: nothing below may be removed through them.
    inner
        .unmount_userns_views(&inner.opts.state.join("containers").join(id))
        .await?;
    let (record, snapshot) = tokio::join!(
        task::delete_record(&inner.cd, id),
        task::remove_snapshot(&inner.cd, &inner.opts.snapshotter, id),
    );
    // Views of a container whose metadata is lost go once the record is (the sweep's
    // snapshot pass).
    let views = match &meta {
        Some(meta) => inner.remove_image_volumes(id, &meta.config).await,
        None => Ok(()),
    };
    let fifos = match &meta {
        Some(meta) => io::remove(&meta.fifos).await.map_err(RuntimeError::from),
        None => Ok(()),
    };
    all_of([
        record.map_err(RuntimeError::from),
        snapshot.map_err(RuntimeError::from),
        views,
        fifos,
        remove_state_dirs(inner, id).await,
    ])?;
    Ok(store::remove_dir(&record_dir(&inner.opts.root, id)).await?)
}

/// A sandbox whose metadata cannot be read anywhere: what containerd has of it and its dirs
/// (its netns and CNI attachment, if any, are swept by name).
async fn destroy_unreadable_sandbox(inner: &RuntimeInner, id: &str) -> Result<()> {
    inner.kill_and_delete_task(id).await?;
    let (record, snapshot) = tokio::join!(
        task::delete_record(&inner.cd, id),
        task::remove_snapshot(&inner.cd, &inner.opts.snapshotter, id),
    );
    all_of([
        record.map_err(RuntimeError::from),
        snapshot.map_err(RuntimeError::from),
        remove_state_dirs(inner, id).await,
    ])?;
    Ok(store::remove_dir(&inner.opts.root.join("sandboxes").join(id)).await?)
}

/// An id's dirs under state (sandbox and container): whatever is mounted directly inside
/// them (a sandbox's shm, its pinned namespaces) unmounted first.
async fn remove_state_dirs(inner: &RuntimeInner, id: &str) -> Result<()> {
    for kind in ["sandboxes", "containers"] {
        let dir = inner.opts.state.join(kind).join(id);
        let names = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || dir_names(&dir))
                .await
                .unwrap_or_default()
        };
        for name in names {
            crate::mount::unmount(&dir.join(name)).await?;
        }
        inner.unmount_userns_views(&dir).await?;
        store::remove_dir(&dir).await?;
    }
    // A container's record dir is removed by its caller, last; a bare sandbox dir under root
    // has no record to keep.
    if !has_container_dir(inner, id) {
        store::remove_dir(&inner.opts.root.join("sandboxes").join(id)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_ids_are_swept() {
        assert!(is_id(&"a".repeat(64)));
        assert!(!is_id(&"a".repeat(63)));
        assert!(!is_id(&format!("{}g", "a".repeat(63))));
        assert!(!is_id("lost+found"));
    }
}
