//! Running one probe, as the Go kubelet's `prober.runProbe`: the handler (exec, httpGet,
//! tcpSocket, grpc) against a container instance, within the probe's timeout; a handler that
//! could not run at all is an error, retried up to three times, and never a verdict.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cri::{Cri, CriError};
use crate::pleg::BoxFut;

/// How often a probe whose handler errors is run again before the round is given up (Go's
/// `maxProbeRetries`).
pub const MAX_RETRIES: usize = 3;

/// What one run of a probe handler found (Go's `probe.Result` less `Unknown`, which is a
/// [`CheckError`] here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Healthy.
    Success,
    /// Healthy, with something worth telling (an HTTP redirect not followed).
    Warning,
    /// Unhealthy.
    Failure,
}

/// Why a probe handler could not run (the round's result is thrown away, as in Go).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The probe's port names no port of the container and is no number.
    #[error("{0}")]
    Port(String),
    /// The runtime failed the exec for another reason than the command's exit or timeout.
    #[error(transparent)]
    Cri(#[from] CriError),
    /// The HTTP request could not be made (bad header, URL).
    #[error("{0}")]
    Request(String),
    /// The probe names no handler.
    #[error("probe has no handler")]
    NoHandler,
}

/// The container instance a probe runs against.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// Its spec.
    pub container: &'a Container,
    /// The CRI container id.
    pub container_id: &'a str,
    /// The pod's primary IP (the host's for host-network pods).
    pub pod_ip: &'a str,
    /// The probe's HTTP request, built already for this pod IP (a worker keeps it from run
    /// to run); `None` builds it here.
    pub http: Option<&'a super::http::HttpGet>,
}

/// Runs probe handlers; the worker's only way to reach containers (tests script one).
pub trait Checker: Send + Sync + 'static {
    /// Runs `probe`'s handler once against `target`: the outcome and its output.
    fn check<'a>(
        &'a self,
        probe: &'a Probe,
        target: Target<'a>,
    ) -> BoxFut<'a, Result<(Outcome, String), CheckError>>;
}

/// The real handlers: exec through CRI, HTTP, TCP and gRPC from the node.
#[derive(Clone, Debug)]
pub struct Probes {
    cri: Cri,
    /// `Err` when the HTTP client could not be built (HTTP probes then fail with it).
    http: Result<reqwest::Client, String>,
}

impl Probes {
    /// Handlers on `cri`, with the probes' HTTP client.
    pub fn new(cri: Cri) -> Self {
        let http = super::http::client().map_err(|e| e.to_string());
        if let Err(e) = &http {
            tracing::error!(error = %e, "building the HTTP probe client; httpGet probes will fail");
        }
        Self { cri, http }
    }

    /// An httpGet probe's run.
    async fn http_get(
        &self,
        get: &HTTPGetAction,
        target: Target<'_>,
        timeout: Duration,
    ) -> Result<(Outcome, String), CheckError> {
        let client = match &self.http {
            Ok(c) => c,
            Err(e) => return Ok((Outcome::Failure, format!("HTTP probe client: {e}"))),
        };
        match target.http {
            Some(req) => Ok(super::http::probe(client, req, timeout).await),
            // Boxed so that the request built here does not grow the common case's future.
            None => {
                let req = super::http::HttpGet::new(get, target.container, target.pod_ip, "probe")?;
                Ok(Box::pin(super::http::probe(client, &req, timeout)).await)
            }
        }
    }
}

impl Checker for Probes {
    fn check<'a>(
        &'a self,
        probe: &'a Probe,
        target: Target<'a>,
    ) -> BoxFut<'a, Result<(Outcome, String), CheckError>> {
        // Each handler's future is boxed on its own, so a run allocates what its handler
        // needs rather than what the largest (an exec through CRI) does: at hundreds of probes
        // a second, allocations of several KiB showed in profiles.
        let timeout = probe_timeout(probe);
        if let Some(exec) = &probe.exec {
            let cmd = super::exec::expand_static(
                exec.command.as_deref().unwrap_or_default(),
                target.container,
            );
            return Box::pin(super::exec::probe(
                &self.cri,
                target.container_id,
                cmd,
                timeout,
            ));
        }
        if let Some(get) = &probe.http_get {
            return Box::pin(self.http_get(get, target, timeout));
        }
        if let Some(tcp) = &probe.tcp_socket {
            return Box::pin(async move {
                let port = resolve_port(&tcp.port, target.container)?;
                let host = tcp
                    .host
                    .as_deref()
                    .filter(|h| !h.is_empty())
                    .unwrap_or(target.pod_ip);
                Ok(super::tcp::probe(host, port, timeout).await)
            });
        }
        if let Some(grpc) = &probe.grpc {
            return Box::pin(async move {
                let port = valid_port(i64::from(grpc.port))?;
                let service = grpc.service.as_deref().unwrap_or_default();
                Ok(super::grpc::probe(target.pod_ip, port, service, timeout).await)
            });
        }
        Box::pin(std::future::ready(Err(CheckError::NoHandler)))
    }
}

impl<T: Checker> Checker for Arc<T> {
    fn check<'a>(
        &'a self,
        probe: &'a Probe,
        target: Target<'a>,
    ) -> BoxFut<'a, Result<(Outcome, String), CheckError>> {
        (**self).check(probe, target)
    }
}

/// Runs a probe handler, again (up to [`MAX_RETRIES`] runs) while it errors; the last error
/// when it never ran.
pub async fn check_with_retries(
    checker: &dyn Checker,
    probe: &Probe,
    target: Target<'_>,
) -> Result<(Outcome, String), CheckError> {
    let mut last = Err(CheckError::NoHandler);
    for _ in 0..MAX_RETRIES {
        last = checker.check(probe, target).await;
        if last.is_ok() {
            break;
        }
    }
    last
}

/// The probe's `timeoutSeconds` (1 s when unset or not positive, the API default).
pub fn probe_timeout(probe: &Probe) -> Duration {
    let secs = probe.timeout_seconds.unwrap_or(1).max(1);
    Duration::from_secs(u64::try_from(secs).unwrap_or(1))
}

fn valid_port(port: i64) -> Result<u16, CheckError> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| CheckError::Port(format!("invalid port number: {port}")))
}

/// A probe's or hook's port: a number, or the name of one of the container's ports (a name
/// that is no port but a number in a string also works), as Go's `ResolveContainerPort`.
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, CheckError> {
    match port {
        IntOrString::Int(n) => valid_port(i64::from(*n)),
        IntOrString::String(name) => {
            let named = container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port);
            match named {
                Some(n) => valid_port(i64::from(n)),
                None => match name.parse::<i64>() {
                    Ok(n) => valid_port(n),
                    Err(_) => Err(CheckError::Port(format!(
                        "strconv.Atoi: parsing {}: invalid syntax",
                        crate::podspec::env::go_quote(name)
                    ))),
                },
            }
        }
    }
}

/// `host:port`, with an IPv6 address in brackets (Go's `net.JoinHostPort`).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;
    use std::sync::Mutex;

    fn container() -> Container {
        Container {
            name: "c".into(),
            ports: Some(vec![
                ContainerPort {
                    name: Some("http".into()),
                    container_port: 8080,
                    ..Default::default()
                },
                ContainerPort {
                    name: Some("bad".into()),
                    container_port: 0,
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }
    }

    #[test]
    fn ports_resolve_by_number_or_name() {
        let c = container();
        let port = |p: IntOrString| resolve_port(&p, &c).map_err(|e| e.to_string());
        assert_eq!(port(IntOrString::Int(80)), Ok(80));
        assert_eq!(port(IntOrString::String("http".into())), Ok(8080));
        assert_eq!(port(IntOrString::String("9090".into())), Ok(9090));
        assert_eq!(
            port(IntOrString::String("nope".into())),
            Err("strconv.Atoi: parsing \"nope\": invalid syntax".into())
        );
        assert_eq!(
            port(IntOrString::Int(70000)),
            Err("invalid port number: 70000".into())
        );
        assert_eq!(
            port(IntOrString::String("bad".into())),
            Err("invalid port number: 0".into())
        );
        assert_eq!(
            port(IntOrString::Int(-1)),
            Err("invalid port number: -1".into())
        );
    }

    #[test]
    fn hosts_join_as_go_does() {
        assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
        assert_eq!(join_host_port("fd00::1", 80), "[fd00::1]:80");
        assert_eq!(join_host_port("localhost", 8080), "localhost:8080");
    }

    #[test]
    fn timeouts_default_to_one_second() {
        let mut p = Probe::default();
        assert_eq!(probe_timeout(&p), Duration::from_secs(1));
        p.timeout_seconds = Some(0);
        assert_eq!(probe_timeout(&p), Duration::from_secs(1));
        p.timeout_seconds = Some(5);
        assert_eq!(probe_timeout(&p), Duration::from_secs(5));
    }

    /// Errors twice, then answers.
    struct Flaky(Mutex<usize>);

    impl Checker for Flaky {
        fn check<'a>(
            &'a self,
            _probe: &'a Probe,
            _target: Target<'a>,
        ) -> BoxFut<'a, Result<(Outcome, String), CheckError>> {
            Box::pin(async move {
                let mut n = self.0.lock().unwrap();
                *n += 1;
                if *n < 3 {
                    Err(CheckError::Request(format!("attempt {n}")))
                } else {
                    Ok((Outcome::Success, "ok".into()))
                }
            })
        }
    }

    #[tokio::test]
    async fn errors_are_retried_up_to_three_runs() {
        let c = container();
        let target = Target {
            container: &c,
            container_id: "id",
            pod_ip: "10.0.0.1",
            http: None,
        };
        let flaky = Flaky(Mutex::new(0));
        let got = check_with_retries(&flaky, &Probe::default(), target).await;
        assert_eq!(got.unwrap(), (Outcome::Success, "ok".into()));
        // Always erroring: the last error comes back after three runs.
        struct Never(Mutex<usize>);
        impl Checker for Never {
            fn check<'a>(
                &'a self,
                _probe: &'a Probe,
                _target: Target<'a>,
            ) -> BoxFut<'a, Result<(Outcome, String), CheckError>> {
                Box::pin(async move {
                    let mut n = self.0.lock().unwrap();
                    *n += 1;
                    Err(CheckError::Request(format!("attempt {n}")))
                })
            }
        }
        let never = Never(Mutex::new(0));
        let got = check_with_retries(&never, &Probe::default(), target).await;
        assert_eq!(got.unwrap_err().to_string(), "attempt 3");
        assert_eq!(*never.0.lock().unwrap(), 3);
    }
}
