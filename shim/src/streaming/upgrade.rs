//! The upgrade: the protocol negotiated (`ferrolet_proto::streaming::negotiate`: SPDY/3.1 or
//! WebSocket), the 101 sent, and the session run on the upgraded connection in its own task.

use std::sync::Arc;
use std::time::Duration;

use ferrolet_proto::streaming::{
    self, CommandResult, ForwardRequest, IdleTimeout, RemoteCommand, StreamOptions,
};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

use super::session::{self, Outcome};
use super::{Admitted, Backend, Cached};
use crate::container::exec_stream::{ClientIo, PtySize};

pub use ferrolet_proto::streaming::Endpoint;

/// Answers an upgrade request for `cached` and, once hyper hands the connection over, runs
/// its session (ended after `idle_timeout` without traffic).
pub(super) fn start(
    mut req: Request<Incoming>,
    endpoint: Endpoint,
    admitted: Admitted,
    backend: Arc<dyn Backend>,
    idle_timeout: Option<Duration>,
) -> Response<String> {
    // The session keeps the place its URL held until it ends.
    let Admitted {
        request: cached,
        permit,
    } = admitted;
    let negotiated = match streaming::negotiate(&req, endpoint) {
        Ok(n) => n,
        Err(e) => {
            let r = e.response();
            tracing::debug!(status = %r.status(), "streaming handshake refused");
            return r;
        }
    };
    let query_ports = query_ports(req.uri().query().unwrap_or(""));
    let upgrade = hyper::upgrade::on(&mut req);
    let answer = negotiated.response().map(|()| String::new());
    tokio::spawn(async move {
        let _place = permit;
        let io = match upgrade.await {
            Ok(u) => IdleTimeout::new(TokioIo::new(u), idle_timeout),
            Err(e) => {
                tracing::debug!(error = %e, "streaming upgrade");
                return;
            }
        };
        match cached {
            Cached::Exec(r) => {
                let opts = StreamOptions {
                    stdin: r.stdin,
                    stdout: r.stdout,
                    stderr: r.stderr,
                    tty: r.tty,
                };
                match negotiated.remote_command(io, opts).await {
                    Ok(rc) => run_exec(backend.as_ref(), r, rc).await,
                    Err(e) => tracing::debug!(error = %e, "exec streams"),
                }
            }
            Cached::Attach(r) => {
                let opts = StreamOptions {
                    stdin: r.stdin,
                    stdout: r.stdout,
                    stderr: r.stderr,
                    tty: r.tty,
                };
                match negotiated.remote_command(io, opts).await {
                    Ok(rc) => run_attach(backend.as_ref(), r, rc).await,
                    Err(e) => tracing::debug!(error = %e, "attach streams"),
                }
            }
            Cached::PortForward(r) => {
                // The request's ports, as Go's BuildV4Options; the query's when it named none.
                let ports = if r.port.is_empty() {
                    query_ports
                } else {
                    r.port
                        .iter()
                        .filter_map(|&p| u16::try_from(p).ok())
                        .collect()
                };
                match negotiated.port_forward(io, ports).await {
                    Ok(pf) => run_port_forward(backend.as_ref(), &r.pod_sandbox_id, pf).await,
                    Err(e) => tracing::debug!(error = %e, "port-forward streams"),
                }
            }
        }
    });
    answer
}

/// `port=80&port=8080` (Go also accepts comma-separated lists in one value).
fn query_ports(query: &str) -> Vec<u16> {
    query
        .split('&')
        .filter_map(|kv| kv.strip_prefix("port="))
        .flat_map(|v| v.split(',').map(str::to_string).collect::<Vec<_>>())
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

/// The client's streams in the backends' terms (terminal sizes through a small relay).
fn client_io(rc: &mut RemoteCommand) -> ClientIo {
    let resize = rc.resize.take().map(|mut from| {
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            while let Some(s) = from.recv().await {
                let size = PtySize {
                    width: s.width,
                    height: s.height,
                };
                if tx.send(size).await.is_err() {
                    break;
                }
            }
        });
        rx
    });
    ClientIo {
        stdin: rc.stdin.take(),
        stdout: rc.stdout.take(),
        stderr: rc.stderr.take(),
        resize,
    }
}

async fn run_exec(
    backend: &dyn Backend,
    req: ferrolet_proto::cri::ExecRequest,
    mut rc: RemoteCommand,
) {
    let gone = rc.closed();
    let io = client_io(&mut rc);
    let outcome = session::exec(backend, &req, io, gone).await;
    let result = match outcome {
        Outcome::Exited(0) => CommandResult::Exited(0),
        Outcome::Exited(code) => CommandResult::CommandExited {
            command: req.cmd.clone(),
            code,
        },
        Outcome::Failed(m) => CommandResult::Failed(m),
    };
    rc.finish(result).await;
}

async fn run_attach(
    backend: &dyn Backend,
    req: ferrolet_proto::cri::AttachRequest,
    mut rc: RemoteCommand,
) {
    let gone = rc.closed();
    let io = client_io(&mut rc);
    let result = match session::attach(backend, &req, io, gone).await {
        Outcome::Exited(code) => CommandResult::Exited(code),
        Outcome::Failed(m) => CommandResult::Failed(m),
    };
    rc.finish(result).await;
}

async fn run_port_forward(backend: &dyn Backend, sandbox_id: &str, mut pf: streaming::PortForward) {
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(request) = pf.next().await {
        // Checked per connection: the sandbox may stop while the session lasts.
        let target = session::forward_target(backend, sandbox_id);
        tasks.spawn(forward_one(sandbox_id.to_string(), target, request));
        // Reap finished connections as we go, so a long session holds no dead tasks.
        while tasks.try_join_next().is_some() {}
    }
    // The client has gone: its connections end with it.
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
}

/// One forwarded connection: dialed in the pod, then copied both ways until both sides
/// closed; a failure goes to the request's error stream in the Go streaming server's words.
async fn forward_one(
    sandbox_id: String,
    target: Result<super::portforward::Target, String>,
    request: ForwardRequest,
) {
    let port = request.port;
    let dialed = match target {
        Ok(t) => super::portforward::dial(&t, port)
            .await
            .map(|pod| (t, pod))
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let (target, pod) = match dialed {
        Ok(d) => d,
        Err(e) => {
            let message = format!("error forwarding port {port} to pod {sandbox_id}, uid : {e}");
            tracing::debug!(sandbox = %sandbox_id, port, error = %e, "port-forward dial");
            request.fail(&message).await;
            return;
        }
    };
    if let Err(e) = super::portforward::splice(request.data, pod).await {
        tracing::debug!(sandbox = %target.sandbox_id, port, error = %e, "port-forward connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_from_the_query() {
        assert_eq!(query_ports("port=80&port=8080"), vec![80, 8080]);
        assert_eq!(query_ports("port=80,443&x=1"), vec![80, 443]);
        assert_eq!(query_ports(""), Vec::<u16>::new());
        assert_eq!(query_ports("port=http"), Vec::<u16>::new());
    }
}
