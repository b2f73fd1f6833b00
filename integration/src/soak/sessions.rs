//! Exec and port-forward sessions through ferrolet's secure port, as the API server opens
//! them for `kubectl exec` and `kubectl port-forward`, kept in flight while faults land.
//! A session that fails under a fault is expected; one that never ends, or leaves a process
//! or descriptor behind, is caught by the end's checks.

use std::time::Duration;

use ferrolet_proto::streaming::StreamOptions;
use ferrolet_proto::streaming::client::{self, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::streaming::{TlsClient, pem_blocks, query_escape};

/// How long a session may take, faults included.
pub const LIMIT: Duration = Duration::from_secs(30);

/// Who the sessions run as: the API server's kubelet client, in `system:masters`.
#[derive(Clone)]
pub struct Identity {
    /// Its certificate chain, DER.
    pub chain: Vec<Vec<u8>>,
    /// Its PKCS#8 key, DER.
    pub key: Vec<u8>,
}

impl Identity {
    /// From the PEM certificate and key the test API server issued.
    pub fn from_pem(cert: &str, key: &str) -> Option<Self> {
        let chain = pem_blocks(cert.as_bytes(), "CERTIFICATE");
        let key = pem_blocks(key.as_bytes(), "PRIVATE KEY")
            .into_iter()
            .next()?;
        (!chain.is_empty()).then_some(Self { chain, key })
    }
}

/// The query of `sh -c script` with stdout and stderr.
fn exec_query(script: &str) -> String {
    format!(
        "command=sh&command=-c&command={}&output=1&error=1",
        query_escape(script)
    )
}

/// Runs `echo <marker>; sleep 1` in `pod`'s `container`; whether the marker came back and
/// the command exited 0 within `limit`.
#[allow(clippy::too_many_arguments)] // one session's every parameter, named at the call
pub async fn exec(
    addr: std::net::SocketAddr,
    serving_cert: &[u8],
    identity: &Identity,
    pod: &str,
    container: &str,
    transport: Transport,
    marker: u64,
    limit: Duration,
) -> Result<(), String> {
    let tls = TlsClient::new(
        serving_cert,
        Some((identity.chain.clone(), identity.key.clone())),
    );
    let path = format!(
        "/exec/{}/{pod}/{container}?{}",
        super::workload::NAMESPACE,
        exec_query(&format!("echo soak-{marker}; sleep 1"))
    );
    let session = async {
        let (io, target) = tls.try_dial(addr, &path, transport).await?;
        let opts = StreamOptions {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let mut e = client::exec(io, &target, opts)
            .await
            .map_err(|e| e.to_string())?;
        let mut out = String::new();
        let mut err = String::new();
        let (o, r) = (e.stdout.take(), e.stderr.take());
        let read_out = async {
            if let Some(mut o) = o {
                o.read_to_string(&mut out).await.map(drop)
            } else {
                Ok(())
            }
        };
        let read_err = async {
            if let Some(mut r) = r {
                r.read_to_string(&mut err).await.map(drop)
            } else {
                Ok(())
            }
        };
        let (a, b) = tokio::join!(read_out, read_err);
        a.and(b).map_err(|e| e.to_string())?;
        let result = e.wait().await.map_err(|e| e.to_string())?;
        match result {
            ferrolet_proto::streaming::CommandResult::Exited(0)
                if out.contains(&format!("soak-{marker}")) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}, stdout {out:?}, stderr {err:?}")),
        }
    };
    tokio::time::timeout(limit, session)
        .await
        .map_err(|_| format!("not done within {limit:?}"))?
}

/// Forwards `pod`'s port 8080 (httpd's) over SPDY and GETs `/`; whether an HTTP answer came back.
pub async fn port_forward(
    addr: std::net::SocketAddr,
    serving_cert: &[u8],
    identity: &Identity,
    pod: &str,
) -> Result<(), String> {
    let tls = TlsClient::new(
        serving_cert,
        Some((identity.chain.clone(), identity.key.clone())),
    );
    let path = format!("/portForward/{}/{pod}", super::workload::NAMESPACE);
    let session = async {
        let (io, target) = tls.try_dial(addr, &path, Transport::Spdy).await?;
        let forwarder = client::port_forward_spdy(io, &target)
            .await
            .map_err(|e| e.to_string())?;
        let mut port = forwarder.connect(8080).await.map_err(|e| e.to_string())?;
        port.data
            .write_all(b"GET / HTTP/1.0\r\nHost: soak\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        port.data
            .read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        if answer.starts_with(b"HTTP/1.") {
            Ok(())
        } else {
            let mut error = String::new();
            let _ = port.error.read_to_string(&mut error).await;
            Err(format!(
                "answer {:?}, error stream {error:?}",
                String::from_utf8_lossy(&answer[..answer.len().min(80)])
            ))
        }
    };
    tokio::time::timeout(LIMIT, session)
        .await
        .map_err(|_| format!("not done within {LIMIT:?}"))?
}
