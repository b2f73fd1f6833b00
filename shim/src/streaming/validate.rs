//! What the streaming server checks before it hands out a URL, in the Go CRI streaming
//! server's words (`k8s.io/kubelet/pkg/cri/streaming/server.go`); the runtime checks the
//! container or sandbox itself first, as containerd does.

use ferrolet_proto::cri;

/// A request the streaming server refuses (gRPC InvalidArgument).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Invalid {
    /// No container named.
    #[error("missing required container_id")]
    NoContainer,
    /// No sandbox named.
    #[error("missing required pod_sandbox_id")]
    NoSandbox,
    /// A terminal has one output stream.
    #[error("tty and stderr cannot both be true")]
    TtyWithStderr,
    /// Exec with no stream at all.
    #[error("one of stdin, stdout, or stderr must be set")]
    NoExecStream,
    /// Attach with no stream at all (Go's wording differs from exec's by one word).
    #[error("one of stdin, stdout, and stderr must be set")]
    NoAttachStream,
    /// Exec with no command.
    #[error("cmd must not be empty")]
    NoCommand,
    /// A port outside 1..=65535.
    #[error("invalid port {0}")]
    Port(i32),
}

/// Checks an Exec request.
pub fn exec(r: &cri::ExecRequest) -> Result<(), Invalid> {
    if r.container_id.is_empty() {
        return Err(Invalid::NoContainer);
    }
    if r.tty && r.stderr {
        return Err(Invalid::TtyWithStderr);
    }
    if !r.stdin && !r.stdout && !r.stderr {
        return Err(Invalid::NoExecStream);
    }
    if r.cmd.is_empty() {
        return Err(Invalid::NoCommand);
    }
    Ok(())
}

/// Checks an Attach request.
pub fn attach(r: &cri::AttachRequest) -> Result<(), Invalid> {
    if r.container_id.is_empty() {
        return Err(Invalid::NoContainer);
    }
    if r.tty && r.stderr {
        return Err(Invalid::TtyWithStderr);
    }
    if !r.stdin && !r.stdout && !r.stderr {
        return Err(Invalid::NoAttachStream);
    }
    Ok(())
}

/// Checks a PortForward request (ports may be empty: WebSocket clients name them in the
/// URL's query, SPDY ones per stream).
pub fn port_forward(r: &cri::PortForwardRequest) -> Result<(), Invalid> {
    if r.pod_sandbox_id.is_empty() {
        return Err(Invalid::NoSandbox);
    }
    if let Some(&p) = r.port.iter().find(|&&p| !(1..=65535).contains(&p)) {
        return Err(Invalid::Port(p));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec_req(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> cri::ExecRequest {
        cri::ExecRequest {
            container_id: "c".into(),
            cmd: vec!["sh".into()],
            tty,
            stdin,
            stdout,
            stderr,
        }
    }

    #[test]
    fn exec_requests() {
        assert_eq!(exec(&exec_req(false, true, true, false)), Ok(()));
        assert_eq!(exec(&exec_req(true, true, false, true)), Ok(()));
        assert_eq!(exec(&exec_req(true, false, false, false)), Ok(()));
        assert_eq!(
            exec(&exec_req(false, true, true, true)),
            Err(Invalid::TtyWithStderr)
        );
        assert_eq!(
            exec(&exec_req(false, false, false, true)),
            Err(Invalid::NoExecStream)
        );
        let mut r = exec_req(false, true, false, false);
        r.cmd.clear();
        assert_eq!(exec(&r), Err(Invalid::NoCommand));
        r.container_id.clear();
        assert_eq!(exec(&r), Err(Invalid::NoContainer));
        assert_eq!(
            Invalid::TtyWithStderr.to_string(),
            "tty and stderr cannot both be true"
        );
    }

    #[test]
    fn attach_requests() {
        let mut r = cri::AttachRequest {
            container_id: "c".into(),
            stdin: true,
            tty: true,
            stdout: true,
            stderr: false,
        };
        assert_eq!(attach(&r), Ok(()));
        r.stderr = true;
        assert_eq!(attach(&r), Err(Invalid::TtyWithStderr));
        r = cri::AttachRequest {
            container_id: "c".into(),
            ..Default::default()
        };
        assert_eq!(attach(&r), Err(Invalid::NoAttachStream));
        assert_eq!(
            Invalid::NoAttachStream.to_string(),
            "one of stdin, stdout, and stderr must be set"
        );
    }

    #[test]
    fn port_forward_requests() {
        let mut r = cri::PortForwardRequest {
            pod_sandbox_id: "s".into(),
            port: vec![80, 65535],
        };
        assert_eq!(port_forward(&r), Ok(()));
        r.port.push(0);
        assert_eq!(port_forward(&r), Err(Invalid::Port(0)));
        r.port = vec![70000];
        assert_eq!(port_forward(&r), Err(Invalid::Port(70000)));
        r.port.clear();
        assert_eq!(port_forward(&r), Ok(()));
        r.pod_sandbox_id.clear();
        assert_eq!(port_forward(&r), Err(Invalid::NoSandbox));
    }
}
