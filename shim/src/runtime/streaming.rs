//! Exec, Attach and PortForward: checked as containerd checks them (the container exists and
//! runs, the sandbox exists and is ready; then the streaming server's own checks), stored in
//! the streaming server's cache, answered with the URL to use. Also the runtime's face to
//! the streaming sessions ([`crate::streaming::Backend`]).

use std::path::PathBuf;
use std::sync::Arc;

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::cri;
use tonic::Code;

use super::{Result, RuntimeError, RuntimeInner};
use crate::container::{Container, ContainerState};
use crate::sandbox::{Sandbox, SandboxState};
use crate::store::Lookup;
use crate::streaming::{self, Cached, validate};

impl From<validate::Invalid> for RuntimeError {
    fn from(e: validate::Invalid) -> Self {
        RuntimeError::invalid(e.to_string())
    }
}

impl From<streaming::Refused> for RuntimeError {
    fn from(e: streaming::Refused) -> Self {
        RuntimeError::new(Code::ResourceExhausted, e.to_string())
    }
}

fn require_running(c: &Container) -> Result<()> {
    let state = c.status().state;
    if state != ContainerState::Running {
        return Err(RuntimeError::precondition(format!(
            "container is in {} state",
            state.to_cri().as_str_name()
        )));
    }
    Ok(())
}

impl RuntimeInner {
    /// A container for Exec/Attach, in containerd's words when it is not there.
    fn streaming_container(&self, id: &str, with_id: bool) -> Result<Arc<Container>> {
        self.containers.get(id).map_err(|e| {
            let what = if with_id {
                format!("failed to find container {id:?} in store")
            } else {
                "failed to find container in store".into()
            };
            match e {
                Lookup::NotFound => RuntimeError::not_found(format!("{what}: not found")),
                Lookup::Ambiguous => {
                    RuntimeError::invalid(format!("{what}: id prefix matches more than one"))
                }
            }
        })
    }

    /// Exec: the URL where the client runs the command.
    pub async fn exec(&self, mut req: cri::ExecRequest) -> Result<cri::ExecResponse> {
        if req.container_id.is_empty() {
            return Err(validate::Invalid::NoContainer.into());
        }
        let c = self.streaming_container(&req.container_id, true)?;
        require_running(&c)?;
        validate::exec(&req)?;
        // The session finds it by its full id, even when the client gave a prefix.
        req.container_id = c.meta.id.clone();
        let url = self.streams.insert(Cached::Exec(req))?;
        Ok(cri::ExecResponse { url })
    }

    /// Attach: the URL where the client attaches.
    pub async fn attach(&self, mut req: cri::AttachRequest) -> Result<cri::AttachResponse> {
        if req.container_id.is_empty() {
            return Err(validate::Invalid::NoContainer.into());
        }
        let c = self.streaming_container(&req.container_id, false)?;
        require_running(&c)?;
        validate::attach(&req)?;
        req.container_id = c.meta.id.clone();
        let url = self.streams.insert(Cached::Attach(req))?;
        Ok(cri::AttachResponse { url })
    }

    /// PortForward: the URL where the client forwards ports.
    pub async fn port_forward(
        &self,
        mut req: cri::PortForwardRequest,
    ) -> Result<cri::PortForwardResponse> {
        if req.pod_sandbox_id.is_empty() {
            return Err(validate::Invalid::NoSandbox.into());
        }
        let id = req.pod_sandbox_id.clone();
        let sb = self.sandboxes.get(&id).map_err(|e| match e {
            Lookup::NotFound => {
                RuntimeError::not_found(format!("failed to find sandbox {id:?}: not found"))
            }
            Lookup::Ambiguous => RuntimeError::invalid(format!(
                "failed to find sandbox {id:?}: id prefix matches more than one"
            )),
        })?;
        if sb.status().state != SandboxState::Ready {
            return Err(RuntimeError::precondition(
                "sandbox container is not running",
            ));
        }
        validate::port_forward(&req)?;
        req.pod_sandbox_id = sb.meta.id.clone();
        let url = self.streams.insert(Cached::PortForward(req))?;
        Ok(cri::PortForwardResponse { url })
    }
}

impl streaming::Backend for RuntimeInner {
    fn containerd(&self) -> &Containerd {
        &self.cd
    }

    fn container(&self, id: &str) -> Option<Arc<Container>> {
        self.containers.get_exact(id)
    }

    fn sandbox(&self, id: &str) -> Option<Arc<Sandbox>> {
        self.sandboxes.get_exact(id)
    }

    fn exec_fifo_dir(&self, container_id: &str) -> PathBuf {
        self.opts
            .state
            .join("containers")
            .join(container_id)
            .join("exec")
    }
}
