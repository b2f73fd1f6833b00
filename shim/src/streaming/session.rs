//! One session behind a used URL, given the client's streams (whatever the transport): an
//! exec or attach on a container that must still be running, or where a sandbox's ports
//! are dialed. The words of the failures are containerd's.

use std::future::Future;

use ferrolet_proto::cri;

use super::Backend;
use super::portforward::Target;
use crate::container::exec_stream::{ClientIo, StreamExecSpec, exec_stream};
use crate::container::{ContainerState, attach};
use crate::sandbox::SandboxState;

/// How a command session ended, for the client's error stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The process exited with this code (attach: 0 once the session ends).
    Exited(i32),
    /// It could not run.
    Failed(String),
}

fn not_running(state: ContainerState) -> String {
    format!("container is in {} state", state.to_cri().as_str_name())
}

/// Runs an exec for the client; the command's exit code, or why it could not run.
pub async fn exec(
    backend: &dyn Backend,
    req: &cri::ExecRequest,
    client: ClientIo,
    gone: impl Future<Output = ()>,
) -> Outcome {
    let Some(c) = backend.container(&req.container_id) else {
        return Outcome::Failed(format!(
            "failed to exec in container: failed to find container {:?} in store: not found",
            req.container_id
        ));
    };
    let state = c.status().state;
    if state != ContainerState::Running {
        return Outcome::Failed(format!(
            "failed to exec in container: {}",
            not_running(state)
        ));
    }
    let spec = StreamExecSpec {
        container_id: c.meta.id.clone(),
        cmd: req.cmd.clone(),
        tty: req.tty,
        process: c.meta.process.clone(),
        fifo_dir: backend.exec_fifo_dir(&c.meta.id),
    };
    match exec_stream(backend.containerd(), spec, client, gone).await {
        Ok(code) => Outcome::Exited(code),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// Attaches the client to a running container.
pub async fn attach(
    backend: &dyn Backend,
    req: &cri::AttachRequest,
    client: ClientIo,
    gone: impl Future<Output = ()>,
) -> Outcome {
    let Some(c) = backend.container(&req.container_id) else {
        return Outcome::Failed(format!(
            "failed to find container {:?} in store: not found",
            req.container_id
        ));
    };
    let state = c.status().state;
    if state != ContainerState::Running {
        return Outcome::Failed(not_running(state));
    }
    match attach::attach(backend.containerd(), &c, client, gone).await {
        Ok(()) => Outcome::Exited(0),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// Where a sandbox's ports are dialed; an error when it is gone or stopped.
pub fn forward_target(backend: &dyn Backend, sandbox_id: &str) -> Result<Target, String> {
    let Some(sb) = backend.sandbox(sandbox_id) else {
        return Err(format!(
            "failed to find sandbox {sandbox_id:?} in store: not found"
        ));
    };
    if sb.status().state != SandboxState::Ready {
        return Err("sandbox container is not running".into());
    }
    let host_network = sb.namespace_options().network == cri::NamespaceMode::Node as i32;
    let netns = if host_network {
        None
    } else {
        match &sb.meta.netns {
            Some(p) => Some(p.clone()),
            None => {
                return Err(format!(
                    "network namespace for sandbox {sandbox_id:?} is closed"
                ));
            }
        }
    };
    Ok(Target {
        sandbox_id: sb.meta.id.clone(),
        netns,
    })
}
