//! containerd plumbing shared by sandboxes and containers: snapshots, container records and
//! tasks. Every "delete" here treats NotFound as done, so the callers' teardowns are
//! idempotent and can run after a half-finished create.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::container::Runtime;
use ferrolet_proto::containerd::services::v1::snapshots::{
    PrepareSnapshotRequest, RemoveSnapshotRequest, ViewSnapshotRequest,
};
use ferrolet_proto::containerd::services::v1::{
    Container, CreateContainerRequest, CreateTaskRequest, DeleteContainerRequest,
    DeleteTaskRequest, GetRequest, KillRequest, StartRequest, WaitRequest,
};
use ferrolet_proto::containerd::types::Mount;
use ferrolet_proto::containerd::types::v1::Status as ProcessStatus;
use tonic::Code;

use ferrolet_proto::containerd::InvalidScope;

use crate::lease::{Lease, LeaseError};

/// containerd's runc shim: the runtime type of every record made before the runtime type was
/// configurable (`runtime_type`), which keep it.
pub const RUNC_SHIM: &str = "io.containerd.runc.v2";

/// [`RUNC_SHIM`], for records that predate their runtime type field.
pub fn legacy_runtime_type() -> String {
    RUNC_SHIM.to_string()
}

/// A failed containerd call on a snapshot, container record or task.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// containerd refused the call; its code is kept for the CRI client.
    #[error("{op}: {}", status.message())]
    Containerd { op: String, status: tonic::Status },
    /// The snapshot's lease could not be made.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The lease id cannot go into a request header.
    #[error(transparent)]
    Scope(#[from] InvalidScope),
}

impl TaskError {
    /// Maps a containerd call's failure, naming what was being done.
    fn containerd(op: impl std::fmt::Display) -> impl FnOnce(tonic::Status) -> Self {
        move |status| Self::Containerd {
            op: op.to_string(),
            status,
        }
    }

    /// The gRPC code callers see: containerd's own, else internal.
    pub fn code(&self) -> Code {
        match self {
            TaskError::Containerd { status, .. } => status.code(),
            TaskError::Lease(_) | TaskError::Scope(_) => Code::Internal,
        }
    }
}

/// The result of a task call.
pub type Result<T, E = TaskError> = std::result::Result<T, E>;

/// A task's process as containerd reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// Created or running (paused counts as running for CRI).
    Running { pid: u32 },
    /// Exited, not yet deleted.
    Stopped { exit_status: u32, exited_at_ns: i64 },
}

/// Nanoseconds of a protobuf timestamp.
pub fn timestamp_ns(ts: Option<&ferrolet_proto::prost_types::Timestamp>) -> i64 {
    ts.map(|t| {
        t.seconds
            .saturating_mul(1_000_000_000)
            .saturating_add(i64::from(t.nanos))
    })
    .unwrap_or(0)
}

/// containerd's label prefix by which a record keeps a snapshot from its garbage collector
/// (`<prefix><snapshotter>/<anything>` = the snapshot's key).
pub const GC_SNAPSHOT_REF_LABEL: &str = "containerd.io/gc.ref.snapshot.";

/// A writable snapshot (and the read-only views of the container's image volumes) held by a
/// lease until a container record owns them, so containerd's garbage collector cannot take
/// them in between.
pub struct PreparedSnapshot {
    lease: Lease,
    snapshotter: String,
    key: String,
    /// Keys of the views made under the same lease, which the record keeps by label.
    views: Vec<String>,
    /// The rootfs mounts.
    pub mounts: Vec<Mount>,
}

/// The labels marking a snapshot ours, so the sweeper may remove it once nothing owns it.
fn owner_labels() -> HashMap<String, String> {
    HashMap::from([(
        crate::store::SNAPSHOT_OWNER_LABEL.to_string(),
        crate::store::SNAPSHOT_OWNER.to_string(),
    )])
}

/// Prepares the writable snapshot `key` on `parent`.
pub async fn prepare_snapshot(
    cd: &Containerd,
    snapshotter: &str,
    key: &str,
    parent: &str,
) -> Result<PreparedSnapshot> {
    let lease = Lease::create(cd, "container").await?;
    let prepared = async {
        cd.with_lease(&lease.id)?
            .snapshots()
            .prepare(PrepareSnapshotRequest {
                snapshotter: snapshotter.to_string(),
                key: key.to_string(),
                parent: parent.to_string(),
                labels: owner_labels(),
            })
            .await
            .map_err(TaskError::containerd(format!("preparing snapshot {key}")))
    }
    .await;
    match prepared {
        Ok(r) => Ok(PreparedSnapshot {
            lease,
            snapshotter: snapshotter.to_string(),
            key: key.to_string(),
            views: Vec::new(),
            mounts: r.into_inner().mounts,
        }),
        Err(e) => {
            drop_lease(cd, lease).await;
            Err(e)
        }
    }
}

async fn drop_lease(cd: &Containerd, lease: Lease) {
    if let Err(e) = lease.delete(cd).await {
        tracing::warn!(error = %e, "deleting a container lease; it expires by itself");
    }
}

impl PreparedSnapshot {
    /// Makes the read-only view `key` of the committed snapshot `parent` under the same
    /// lease; it goes with the writable snapshot on [`Self::abandon`], and the record made by
    /// [`Self::commit`] keeps it. Its mounts.
    pub async fn view(&mut self, cd: &Containerd, key: &str, parent: &str) -> Result<Vec<Mount>> {
        let mounts = cd
            .with_lease(&self.lease.id)?
            .snapshots()
            .view(ViewSnapshotRequest {
                snapshotter: self.snapshotter.clone(),
                key: key.to_string(),
                parent: parent.to_string(),
                labels: owner_labels(),
            })
            .await
            .map_err(TaskError::containerd(format!("making the view {key}")))?
            .into_inner()
            .mounts;
        self.views.push(key.to_string());
        Ok(mounts)
    }

    /// Creates the container record that owns the snapshot (and, by label, the views); on
    /// failure they go (or, if containerd cannot remove them now, the sweeper does: their
    /// keys start with the id).
    pub async fn commit(self, cd: &Containerd, mut record: Container) -> Result<Vec<Mount>> {
        for (n, key) in self.views.iter().enumerate() {
            let label = format!("{GC_SNAPSHOT_REF_LABEL}{}/view{n}", self.snapshotter);
            record.labels.insert(label, key.clone());
        }
        let id = record.id.clone();
        let created = cd
            .containers()
            .create(CreateContainerRequest {
                container: Some(record),
            })
            .await;
        if let Err(e) = created {
            if let Err(gone) = self.abandon(cd).await {
                tracing::warn!(id, error = %gone, "giving up a snapshot; the sweeper retries");
            }
            return Err(TaskError::containerd(format!(
                "creating containerd container {id}"
            ))(e));
        }
        // The record now holds the snapshot; the lease can go without making the caller wait.
        let (cd, lease) = (cd.clone(), self.lease);
        tokio::spawn(async move { drop_lease(&cd, lease).await });
        Ok(self.mounts)
    }

    /// Gives the snapshot and its views up; the lease goes whether or not they could.
    pub async fn abandon(self, cd: &Containerd) -> Result<()> {
        let mut removed = Ok(());
        for key in self.views.iter().chain(std::iter::once(&self.key)) {
            let result = remove_snapshot(cd, &self.snapshotter, key).await;
            if removed.is_ok() {
                removed = result;
            }
        }
        drop_lease(cd, self.lease).await;
        removed
    }
}

/// The runc shim's options for a task: none for the defaults, else `SystemdCgroup` and the
/// runtime binary of a handler that names one.
pub fn runc_options(
    systemd_cgroup: bool,
    binary_name: Option<String>,
) -> Option<ferrolet_proto::prost_types::Any> {
    use ferrolet_proto::task_shim::{RUNC_OPTIONS_TYPE, RuncOptions};
    use prost::Message;
    (systemd_cgroup || binary_name.is_some()).then(|| ferrolet_proto::prost_types::Any {
        type_url: RUNC_OPTIONS_TYPE.to_string(),
        value: RuncOptions {
            binary_name: binary_name.unwrap_or_default(),
            systemd_cgroup,
            ..Default::default()
        }
        .encode_to_vec(),
    })
}

/// What runs a record's task: containerd's runtime (shim) type and the shim's options
/// ([`runc_options`]).
pub struct RecordRuntime<'a> {
    /// `io.containerd.runc.v2`, `io.containerd.ferrolet.v1`, or a shim binary's path.
    pub runtime_type: &'a str,
    /// The runc shim's options.
    pub options: Option<ferrolet_proto::prost_types::Any>,
}

/// A containerd container record with our conventions.
pub fn container_record(
    id: &str,
    image: &str,
    snapshotter: &str,
    labels: HashMap<String, String>,
    spec: ferrolet_proto::prost_types::Any,
    metadata: ferrolet_proto::prost_types::Any,
    runtime: RecordRuntime<'_>,
) -> Container {
    Container {
        id: id.to_string(),
        labels,
        image: image.to_string(),
        runtime: Some(Runtime {
            name: runtime.runtime_type.to_string(),
            options: runtime.options,
        }),
        spec: Some(spec),
        snapshotter: snapshotter.to_string(),
        snapshot_key: id.to_string(),
        extensions: HashMap::from([(crate::store::METADATA_EXTENSION.to_string(), metadata)]),
        ..Default::default()
    }
}

/// Creates a container record that has no root filesystem (a sandbox without a pause
/// process: the record is what recovery finds it by).
pub async fn create_record(cd: &Containerd, mut record: Container) -> Result<()> {
    record.snapshotter.clear();
    record.snapshot_key.clear();
    let id = record.id.clone();
    cd.containers()
        .create(CreateContainerRequest {
            container: Some(record),
        })
        .await
        .map_err(TaskError::containerd(format!(
            "creating containerd container {id}"
        )))?;
    Ok(())
}

/// Removes a snapshot; one that is gone already is fine.
pub async fn remove_snapshot(cd: &Containerd, snapshotter: &str, key: &str) -> Result<()> {
    match cd
        .snapshots()
        .remove(RemoveSnapshotRequest {
            snapshotter: snapshotter.to_string(),
            key: key.to_string(),
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Code::NotFound => Ok(()),
        Err(e) => Err(TaskError::containerd(format!("removing snapshot {key}"))(e)),
    }
}

/// Deletes a container record (and, with it, containerd's reference to its snapshot).
pub async fn delete_record(cd: &Containerd, id: &str) -> Result<()> {
    match cd
        .containers()
        .delete(DeleteContainerRequest { id: id.to_string() })
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Code::NotFound => Ok(()),
        Err(e) => Err(TaskError::containerd(format!(
            "deleting containerd container {id}"
        ))(e)),
    }
}

/// IO for a task: FIFO paths, or none at all.
#[derive(Default)]
pub struct TaskIo {
    /// stdin FIFO or "".
    pub stdin: String,
    /// stdout FIFO or "".
    pub stdout: String,
    /// stderr FIFO or "".
    pub stderr: String,
    /// Allocate a terminal.
    pub terminal: bool,
    /// The runc shim's options ([`runc_options`]), as the container record has them.
    pub options: Option<ferrolet_proto::prost_types::Any>,
}

/// Attempts at creating a task whose pod's shim was shutting down ([`shim_was_going`]).
const CREATE_ATTEMPTS: u32 = 3;

/// Creates a container's task (runc create); returns its pid.
pub async fn create_task(cd: &Containerd, id: &str, rootfs: Vec<Mount>, io: TaskIo) -> Result<u32> {
    let request = CreateTaskRequest {
        container_id: id.to_string(),
        rootfs,
        stdin: io.stdin,
        stdout: io.stdout,
        stderr: io.stderr,
        terminal: io.terminal,
        options: io.options,
        ..Default::default()
    };
    let mut attempt = 1;
    loop {
        match cd.tasks().create(request.clone()).await {
            Ok(resp) => return Ok(resp.into_inner().pid),
            Err(e) if attempt < CREATE_ATTEMPTS && shim_was_going(&e) => {
                tracing::info!(id, attempt, error = %e.message(), "the pod's shim was going; creating the task again");
                tokio::time::sleep(std::time::Duration::from_millis(50 * u64::from(attempt))).await;
                attempt += 1;
            }
            Err(e) => return Err(TaskError::containerd(format!("creating task {id}"))(e)),
        }
    }
}

/// Whether a task create failed because the pod's shim, found by its socket, exited before
/// containerd could connect: a pod's containers share one shim, which exits with the pod's
/// last task, so a container created just as its predecessor's task was deleted (a
/// pause-less pod, a restart) can meet the socket of a shim that is going. Nothing was
/// created then, and the next attempt starts a shim of its own.
fn shim_was_going(e: &tonic::Status) -> bool {
    let m = e.message();
    m.contains("failed to start shim")
        && (m.contains("connect: no such file or directory")
            || m.contains("connect: connection refused"))
}

/// Starts a created task; returns its pid.
pub async fn start_task(cd: &Containerd, id: &str) -> Result<u32> {
    let resp = cd
        .tasks()
        .start(StartRequest {
            container_id: id.to_string(),
            exec_id: String::new(),
        })
        .await
        .map_err(TaskError::containerd(format!("starting task {id}")))?;
    Ok(resp.into_inner().pid)
}

/// Signals a task's init process; a task that is gone is not an error.
pub async fn kill(cd: &Containerd, id: &str, signal: u32) -> Result<()> {
    match cd
        .tasks()
        .kill(KillRequest {
            container_id: id.to_string(),
            exec_id: String::new(),
            signal,
            all: false,
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Code::NotFound => Ok(()),
        // runc answers "process already finished" for a task that exited.
        Err(e) if e.code() == Code::FailedPrecondition => Ok(()),
        // A concurrent reap (the exit follower, another stop) closed the shim under us
        // ("ttrpc: closed"): the task is gone or exited, which is what a kill wants.
        Err(e) => match task_state(cd, id).await {
            Ok(None | Some(TaskState::Stopped { .. })) => Ok(()),
            _ => Err(TaskError::containerd(format!("signalling task {id}"))(e)),
        },
    }
}

/// Per task id, the lock its deletes take turns on.
type DeleteLocks = HashMap<String, Weak<tokio::sync::Mutex<()>>>;

/// Task ids with a delete in flight. Two concurrent deletes of one task (the exit follower
/// and a stop both reaping it) race inside containerd 1.6's runc shim: one fails half-way,
/// the shim's shutdown check sees the task still listed, and the shim outlives its pod for
/// good (containerd#12344). Taking turns, the later delete finds no task and is done.
static DELETING: LazyLock<Mutex<DeleteLocks>> = LazyLock::new(Mutex::default);

/// The lock deletes of task `id` take turns on.
fn delete_lock(id: &str) -> Arc<tokio::sync::Mutex<()>> {
    let mut locks = DELETING.lock().unwrap_or_else(PoisonError::into_inner);
    locks.retain(|_, lock| lock.strong_count() > 0);
    if let Some(lock) = locks.get(id).and_then(Weak::upgrade) {
        return lock;
    }
    let lock = Arc::new(tokio::sync::Mutex::new(()));
    locks.insert(id.to_string(), Arc::downgrade(&lock));
    lock
}

/// Deletes a task (reaping its shim); the exit status when there was a task. Deletes of one
/// task never overlap (see [`DELETING`]).
pub async fn delete_task(cd: &Containerd, id: &str) -> Result<Option<(u32, i64)>> {
    let lock = delete_lock(id);
    let _turn = lock.lock().await;
    match cd
        .tasks()
        .delete(DeleteTaskRequest {
            container_id: id.to_string(),
        })
        .await
    {
        Ok(r) => {
            let r = r.into_inner();
            Ok(Some((r.exit_status, timestamp_ns(r.exited_at.as_ref()))))
        }
        Err(e) if e.code() == Code::NotFound => Ok(None),
        // Someone else (the exit follower, a stop) reaped it meanwhile; the shim closed under us.
        Err(e) => match task_state(cd, id).await {
            Ok(None) => Ok(None),
            _ => Err(TaskError::containerd(format!("deleting task {id}"))(e)),
        },
    }
}

/// Waits for a task's init process to exit; the exit status and time.
pub async fn wait(cd: &Containerd, id: &str) -> Result<Option<(u32, i64)>> {
    match cd
        .tasks()
        .wait(WaitRequest {
            container_id: id.to_string(),
            exec_id: String::new(),
        })
        .await
    {
        Ok(r) => {
            let r = r.into_inner();
            Ok(Some((r.exit_status, timestamp_ns(r.exited_at.as_ref()))))
        }
        Err(e) if e.code() == Code::NotFound => Ok(None),
        Err(e) => Err(TaskError::containerd(format!("waiting for task {id}"))(e)),
    }
}

/// The state of a container's task; `None` when it has none.
pub async fn task_state(cd: &Containerd, id: &str) -> Result<Option<TaskState>> {
    match cd
        .tasks()
        .get(GetRequest {
            container_id: id.to_string(),
            exec_id: String::new(),
        })
        .await
    {
        Ok(r) => {
            let Some(p) = r.into_inner().process else {
                return Ok(None);
            };
            Ok(Some(match ProcessStatus::try_from(p.status) {
                Ok(ProcessStatus::Stopped) => TaskState::Stopped {
                    exit_status: p.exit_status,
                    exited_at_ns: timestamp_ns(p.exited_at.as_ref()),
                },
                _ => TaskState::Running { pid: p.pid },
            }))
        }
        Err(e) if e.code() == Code::NotFound => Ok(None),
        Err(e) => Err(TaskError::containerd(format!("reading task {id}"))(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shim_that_was_going_is_told_from_other_failures() {
        let going = tonic::Status::unknown(
            "failed to start shim: start failed: dial unix /run/containerd/s/cf2b: connect: no such file or directory",
        );
        assert!(shim_was_going(&going));
        let refused = tonic::Status::unknown(
            "failed to start shim: start failed: dial unix /run/containerd/s/cf2b: connect: connection refused",
        );
        assert!(shim_was_going(&refused));
        let runc = tonic::Status::unknown(
            "failed to create shim task: OCI runtime create failed: exec: \"top\": executable file not found in $PATH",
        );
        assert!(!shim_was_going(&runc));
    }

    #[test]
    fn deletes_of_one_task_share_a_lock_only_while_one_is_in_flight() {
        let a = delete_lock("task-a");
        assert!(Arc::ptr_eq(&a, &delete_lock("task-a")));
        assert!(!Arc::ptr_eq(&a, &delete_lock("task-b")));
        drop(a);
        // Nothing in flight: the entry goes, so ids do not accumulate.
        let _fresh = delete_lock("task-c");
        let held = DELETING.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(!held.contains_key("task-a"));
    }

    #[test]
    fn runc_options_encode_as_containerd_s() {
        use prost::Message;
        assert_eq!(runc_options(false, None), None);
        let any = runc_options(true, Some("/usr/bin/crun".into())).unwrap();
        assert_eq!(any.type_url, "containerd.runc.v1.Options");
        // BinaryName is field 6 (string), SystemdCgroup field 9 (bool) of runc's Options.
        let mut want = vec![0x32, 13];
        want.extend_from_slice(b"/usr/bin/crun");
        want.extend_from_slice(&[0x48, 1]);
        assert_eq!(any.value, want);
        let back = ferrolet_proto::task_shim::RuncOptions::decode(any.value.as_slice()).unwrap();
        assert!(back.systemd_cgroup);
    }
}
