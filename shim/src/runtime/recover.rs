//! Start-up recovery: every sandbox and container containerd still has is indexed again with
//! its id, state, addresses and log path; exits that happened while we were down are recorded
//! with their real status; and running containers' logs resume into the same files. What a
//! crash left half-made is not indexed, so the sweeper (which runs next) removes it.

use std::sync::Arc;

use ferrolet_proto::containerd::services::v1::{Container as Record, ListContainersRequest};

use super::{Result, RuntimeError, RuntimeInner};
use crate::container::{Container, ContainerMeta, ContainerState, ContainerStatus, io, log};
use crate::sandbox::{Sandbox, SandboxRecord, SandboxState, record_path};
use crate::store::{self, KIND_CONTAINER, KIND_LABEL, KIND_SANDBOX, METADATA_EXTENSION};
use crate::task::{self, TaskState};

/// Rebuilds the indexes from containerd and the records under root.
pub async fn recover(inner: &RuntimeInner) -> Result<()> {
    let records = inner
        .cd
        .containers()
        .list(ListContainersRequest {
            filters: vec![format!("labels.\"{KIND_LABEL}\"")],
        })
        .await
        .map_err(RuntimeError::containerd("listing containerd containers"))?
        .into_inner()
        .containers;
    let kind = |r: &Record| r.labels.get(KIND_LABEL).cloned().unwrap_or_default();
    for r in records.iter().filter(|r| kind(r) == KIND_SANDBOX) {
        if let Err(e) = recover_sandbox(inner, r).await {
            skip_or_fail(&r.id, "pod sandbox", e)?;
        }
    }
    for r in records.iter().filter(|r| kind(r) == KIND_CONTAINER) {
        if let Err(e) = recover_container(inner, r).await {
            skip_or_fail(&r.id, "container", e)?;
        }
    }
    tracing::info!(
        sandboxes = inner.sandboxes.len(),
        containers = inner.containers.len(),
        "recovered runtime state"
    );
    Ok(())
}

/// A record that cannot be recovered is skipped (and, being nobody's, swept) when the record
/// itself is unusable; when containerd could not be asked, start-up fails instead, so that a
/// live sandbox is never mistaken for a leftover.
fn skip_or_fail(id: &str, what: &str, e: RuntimeError) -> Result<()> {
    use tonic::Code;
    if matches!(
        e.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
    ) {
        return Err(e.context(format_args!("recovering {what} {id}")));
    }
    tracing::warn!(id, error = %e, "cannot recover this {what}; the sweeper removes it");
    Ok(())
}

fn extension<T: serde::de::DeserializeOwned>(r: &Record) -> Result<T> {
    let any = r.extensions.get(METADATA_EXTENSION).ok_or_else(|| {
        RuntimeError::internal(format!(
            "containerd container {} has no ferrolet metadata",
            r.id
        ))
    })?;
    Ok(store::from_json(&r.id, &any.value)?)
}

/// The runtime (shim) type containerd runs the record's tasks with: what it was made with,
/// whatever the config says now.
fn runtime_type(r: &Record) -> Option<String> {
    r.runtime
        .as_ref()
        .map(|rt| rt.name.clone())
        .filter(|name| !name.is_empty())
}

async fn recover_sandbox(inner: &RuntimeInner, r: &Record) -> Result<()> {
    let path = record_path(&inner.opts.root, &r.id);
    // An unreadable record under root falls back to the one on containerd's record.
    let mut record = match store::read_record::<SandboxRecord>(&path).await {
        Ok(Some(rec)) => rec,
        Ok(None) | Err(_) => SandboxRecord {
            meta: extension(r)?,
            status: Default::default(),
        },
    };
    if let Some(runtime_type) = runtime_type(r) {
        record.meta.runtime_type = runtime_type;
    }
    let mut status = record.status;
    if let Some(pinned) = &record.meta.pinned {
        // No pause process: it is up if its RunPodSandbox finished (the record says Ready)
        // and its namespaces are still there (a reboot takes them).
        let netns_live = record
            .meta
            .netns
            .as_deref()
            .is_none_or(ferrolet_cni::netns::is_netns);
        let userns_live = record.meta.userns.as_ref().is_none_or(|u| u.live());
        let up = status.state == SandboxState::Ready
            && !status.stopped
            && netns_live
            && pinned.live()
            && userns_live;
        status.state = if up {
            SandboxState::Ready
        } else {
            SandboxState::NotReady
        };
        status.pid = 0;
        return index_sandbox(inner, record.meta, status).await;
    }
    match task::task_state(&inner.cd, &r.id).await? {
        Some(TaskState::Running { pid }) => {
            status.state = SandboxState::Ready;
            status.pid = pid;
        }
        Some(TaskState::Stopped { .. }) => {
            task::delete_task(&inner.cd, &r.id).await?;
            status.state = SandboxState::NotReady;
            status.pid = 0;
        }
        None => {
            status.state = SandboxState::NotReady;
            status.pid = 0;
        }
    }
    index_sandbox(inner, record.meta, status).await
}

async fn index_sandbox(
    inner: &RuntimeInner,
    meta: crate::sandbox::SandboxMeta,
    status: crate::sandbox::SandboxStatus,
) -> Result<()> {
    let sb = Arc::new(Sandbox::new(meta, status));
    // Best effort: a failed write only costs the next recovery a re-read of the task.
    let _ = sb.persist(&inner.opts.root).await;
    let _ = inner.sandboxes.reserve(&sb.meta.name, &sb.meta.id);
    inner.sandboxes.insert(sb);
    Ok(())
}

async fn recover_container(inner: &RuntimeInner, r: &Record) -> Result<()> {
    let dir = crate::container::record_dir(&inner.opts.root, &r.id);
    let mut meta: ContainerMeta = match store::read_record(&dir.join("container.json")).await {
        Ok(Some(m)) => m,
        Ok(None) | Err(_) => extension(r)?,
    };
    if let Some(runtime_type) = runtime_type(r) {
        meta.runtime_type = runtime_type;
    }
    let status: ContainerStatus = match store::read_record(&dir.join("status.json")).await {
        // None: it never started (its status is first written at the start).
        Ok(status) => status.unwrap_or_default(),
        // Unreadable: as if running, so its task decides (a live one keeps running, an exit
        // is recorded); never as created, which would kill it.
        Err(e) => {
            tracing::warn!(id = %r.id, error = %e, "unreadable container status; asking its task");
            ContainerStatus {
                state: ContainerState::Running,
                ..Default::default()
            }
        }
    };
    let state = status.state;
    let c = Arc::new(Container::new(meta, status));
    let _ = inner.containers.reserve(&c.meta.name, &c.meta.id);
    inner.containers.insert(c.clone());
    match state {
        ContainerState::Running => match task::task_state(&inner.cd, &r.id).await? {
            Some(TaskState::Running { .. }) => resume_logs(&c).await?,
            _ => inner.recheck_container(&c).await,
        },
        // Crashed between creating and starting the task: back to a clean "created".
        ContainerState::Created => {
            let _ = task::kill(&inner.cd, &r.id, libc::SIGKILL as u32).await;
            if task::task_state(&inner.cd, &r.id).await?.is_some() {
                let _ = task::wait(&inner.cd, &r.id).await;
                task::delete_task(&inner.cd, &r.id).await?;
            }
        }
        ContainerState::Exited | ContainerState::Unknown => {
            task::delete_task(&inner.cd, &r.id).await?;
        }
    }
    Ok(())
}

/// Reattaches to a running container's FIFOs; its log continues in the same file.
async fn resume_logs(c: &Container) -> Result<()> {
    let mut opened = io::open(&c.meta.fifos).await?;
    // The shim has held its ends open all along.
    opened.task_created();
    c.set_stdin(opened.take_stdin());
    let handle = log::start(
        opened,
        c.meta.log_path.clone(),
        c.meta.id.clone(),
        c.meta.log_max_size,
    )?;
    c.set_log_handle(Some(handle));
    Ok(())
}
