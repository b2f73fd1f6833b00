//! Port-forward's backend: a TCP connection to `localhost:<port>` inside a sandbox's network
//! namespace, then bytes copied both ways, as containerd's `sandbox_portforward_linux.go`.
//!
//! A socket belongs to the namespace it was created in, whichever thread later uses it. So
//! each dial runs on a thread of our own that enters the namespace, connects (IPv4 first,
//! then IPv6, serially as containerd does: `localhost` may be served on one family only) and
//! ends; the connected socket is handed to tokio. The thread is never a tokio worker or a
//! `spawn_blocking` one, which tokio would reuse for other work while still in the pod's
//! namespace; it dies with its namespace, so nothing needs restoring.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How long a connect inside the pod may take (localhost answers at once unless its
/// listen backlog is full).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// After one direction has ended, how long the other may still run (containerd's 1 s, as
/// socat's default): a peer that half-closes but never finishes does not hold the stream.
const LINGER: Duration = Duration::from_secs(1);

/// A dial that failed; the text goes to the client's error stream.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// Neither family connected (containerd's words, trailing space included).
    #[error(
        "failed to connect to localhost:{port} inside namespace {sandbox_id:?}, IPv4: {v4} IPv6 {v6} "
    )]
    Connect {
        /// The port.
        port: u16,
        /// The sandbox.
        sandbox_id: String,
        /// The IPv4 attempt's error.
        v4: String,
        /// The IPv6 attempt's error.
        v6: String,
    },
    /// The namespace could not be entered (gone with its sandbox, say).
    #[error("entering network namespace {path}: {reason}")]
    Netns {
        /// The namespace's path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The dialing thread could not be started, or died.
    #[error("port-forward dial thread: {0}")]
    Thread(String),
}

/// Where to dial: inside a namespace, or the host's for host-network sandboxes.
#[derive(Clone, Debug)]
pub struct Target {
    /// The sandbox (for messages).
    pub sandbox_id: String,
    /// Its network namespace; None for host network.
    pub netns: Option<PathBuf>,
}

/// Connects to `localhost:port` in the target's namespace.
pub async fn dial(target: &Target, port: u16) -> Result<tokio::net::TcpStream, DialError> {
    let std_stream = match &target.netns {
        Some(path) => dial_in_netns(path.clone(), target.sandbox_id.clone(), port).await?,
        None => {
            let id = target.sandbox_id.clone();
            // Host network: no namespace to enter, but connect is still a blocking call.
            tokio::task::spawn_blocking(move || connect_localhost(&id, port))
                .await
                .map_err(|e| DialError::Thread(e.to_string()))??
        }
    };
    std_stream
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpStream::from_std(std_stream))
        .map_err(|e| DialError::Thread(format!("registering the connection: {e}")))
}

async fn dial_in_netns(
    path: PathBuf,
    sandbox_id: String,
    port: u16,
) -> Result<TcpStream, DialError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("portfwd-dial".into())
        .spawn(move || {
            let r = enter(&path).and_then(|()| connect_localhost(&sandbox_id, port));
            // The receiver is gone only when the client left; the socket then just closes.
            let _ = tx.send(r);
        })
        .map_err(|e| DialError::Thread(e.to_string()))?;
    rx.await
        .map_err(|_| DialError::Thread("the dial thread ended without an answer".into()))?
}

fn enter(path: &Path) -> Result<(), DialError> {
    ferrolet_cni::netns::enter_current_thread(path).map_err(|e| DialError::Netns {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn connect_localhost(sandbox_id: &str, port: u16) -> Result<TcpStream, DialError> {
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let v4_err = match TcpStream::connect_timeout(&v4, CONNECT_TIMEOUT) {
        Ok(s) => return Ok(s),
        Err(e) => go_dial_error("tcp4", &v4, &e),
    };
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&v6, CONNECT_TIMEOUT).map_err(|e| DialError::Connect {
        port,
        sandbox_id: sandbox_id.into(),
        v4: v4_err,
        v6: go_dial_error("tcp6", &v6, &e),
    })
}

/// An error as Go's net.Dial words it: `dial tcp4 127.0.0.1:80: connect: connection refused`.
fn go_dial_error(net: &str, addr: &SocketAddr, e: &std::io::Error) -> String {
    let what = match e.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_lowercase(),
        None => e.to_string(),
    };
    format!("dial {net} {addr}: connect: {what}")
}

/// Copies both ways until both directions ended (or one ended and the other did not
/// within [`LINGER`]); each side's write half is shut down when its source ends, so a
/// half-close travels through. Returns the bytes copied (to the pod, from the pod).
pub async fn splice<C, P>(client: C, pod: P) -> std::io::Result<(u64, u64)>
where
    C: AsyncRead + AsyncWrite + Unpin,
    P: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_r, mut client_w) = tokio::io::split(client);
    let (mut pod_r, mut pod_w) = tokio::io::split(pod);
    let up = copy_then_shutdown(&mut client_r, &mut pod_w);
    let down = copy_then_shutdown(&mut pod_r, &mut client_w);
    tokio::pin!(up, down);
    tokio::select! {
        r = &mut up => {
            let up_n = r?;
            let down_n = tokio::time::timeout(LINGER, down).await.unwrap_or(Ok(0))?;
            Ok((up_n, down_n))
        }
        r = &mut down => {
            let down_n = r?;
            let up_n = tokio::time::timeout(LINGER, up).await.unwrap_or(Ok(0))?;
            Ok((up_n, down_n))
        }
    }
}

async fn copy_then_shutdown<R, W>(r: &mut R, w: &mut W) -> std::io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        w.write_all(&buf[..n]).await?;
        total += n as u64;
    }
    w.shutdown().await?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[tokio::test]
    async fn host_network_dial_and_splice() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let echo = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(&got).await.unwrap();
        });
        let target = Target {
            sandbox_id: "sb".into(),
            netns: None,
        };
        let pod = dial(&target, port).await.unwrap();
        let (client, mut far) = tokio::io::duplex(1024);
        let spliced = tokio::spawn(splice(client, pod));
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (mut far_r, mut far_w) = tokio::io::split(&mut far);
        let send = async {
            far_w.write_all(&data).await.unwrap();
            far_w.shutdown().await.unwrap();
        };
        let mut back = Vec::new();
        let recv = far_r.read_to_end(&mut back);
        let ((), r) = tokio::join!(send, recv);
        r.unwrap();
        assert_eq!(back, data);
        let (up, down) = spliced.await.unwrap().unwrap();
        assert_eq!((up, down), (300_000, 300_000));
        echo.await.unwrap();
    }

    #[tokio::test]
    async fn refused_reads_like_containerd() {
        // Bind then drop: the port is very likely free for a moment.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let target = Target {
            sandbox_id: "sb1".into(),
            netns: None,
        };
        let e = dial(&target, port).await.unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "failed to connect to localhost:{port} inside namespace \"sb1\", IPv4: dial tcp4 127.0.0.1:{port}: connect: connection refused IPv6 dial tcp6 [::1]:{port}: connect: "
            )),
            "{e}"
        );
        assert!(e.ends_with(' '));
    }

    #[tokio::test]
    async fn a_missing_namespace_is_an_error_not_a_hang() {
        let target = Target {
            sandbox_id: "sb".into(),
            netns: Some("/nonexistent/netns".into()),
        };
        assert!(matches!(
            dial(&target, 80).await,
            Err(DialError::Netns { .. })
        ));
    }
}
