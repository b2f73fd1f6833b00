//! Start-up recovery: every sandbox and container containerd still has is indexed again with
//! its id, state, addresses and log path; exits that happened while we were down are recorded
//! with their real status; running containers' logs resume into the same files; and whatever
//! a crash left half-made is removed.

use std::collections::HashSet;
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
    let mut known = HashSet::new();
    for r in records.iter().filter(|r| kind(r) == KIND_SANDBOX) {
        known.insert(r.id.clone());
        if let Err(e) = recover_sandbox(inner, r).await {
            tracing::warn!(id = %r.id, error = %e, "recovering a pod sandbox");
        }
    }
    for r in records.iter().filter(|r| kind(r) == KIND_CONTAINER) {
        known.insert(r.id.clone());
        if let Err(e) = recover_container(inner, r).await {
            tracing::warn!(id = %r.id, error = %e, "recovering a container");
        }
    }
    remove_half_made(inner, &known).await;
    tracing::info!(
        sandboxes = inner.sandboxes.len(),
        containers = inner.containers.len(),
        "recovered runtime state"
    );
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

async fn recover_sandbox(inner: &RuntimeInner, r: &Record) -> Result<()> {
    let path = record_path(&inner.opts.root, &r.id);
    let record = match store::read_record::<SandboxRecord>(&path).await? {
        Some(rec) => rec,
        None => SandboxRecord {
            meta: extension(r)?,
            status: Default::default(),
        },
    };
    let mut status = record.status;
    if let Some(pinned) = &record.meta.pinned {
        // No pause process: it is up if its RunPodSandbox finished (the record says Ready)
        // and its namespaces are still there (a reboot takes them).
        let netns_live = record
            .meta
            .netns
            .as_deref()
            .is_none_or(ferrolet_cni::netns::is_netns);
        let up =
            status.state == SandboxState::Ready && !status.stopped && netns_live && pinned.live();
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
    let meta: ContainerMeta = match store::read_record(&dir.join("container.json")).await? {
        Some(m) => m,
        None => extension(r)?,
    };
    let status: ContainerStatus = store::read_record(&dir.join("status.json"))
        .await?
        .unwrap_or_default();
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
    let handle = log::start(opened, c.meta.log_path.clone(), c.meta.id.clone())?;
    c.set_log_handle(Some(handle));
    Ok(())
}

/// Sandboxes and containers recorded on disk that containerd does not have: a crash came
/// between recording and creating them (or after removing them). Their network, netns and
/// files go.
async fn remove_half_made(inner: &RuntimeInner, known: &HashSet<String>) {
    for (kind, dir) in [
        (KIND_SANDBOX, inner.opts.root.join("sandboxes")),
        (KIND_CONTAINER, inner.opts.root.join("containers")),
    ] {
        let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
            continue;
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            let id = entry.file_name().to_string_lossy().into_owned();
            if known.contains(&id) {
                continue;
            }
            tracing::info!(id, kind, "removing what a crash left half-made");
            if kind == KIND_SANDBOX {
                if let Ok(Some(rec)) =
                    store::read_record::<SandboxRecord>(&record_path(&inner.opts.root, &id)).await
                {
                    inner.destroy_sandbox(&rec.meta, true).await;
                    continue;
                }
            } else {
                let state_dir = inner.opts.state.join("containers").join(&id);
                let _ = store::remove_dir(&state_dir).await;
                task::remove_snapshot(&inner.cd, &inner.opts.snapshotter, &id).await;
            }
            let _ = store::remove_dir(&entry.path()).await;
        }
    }
}
