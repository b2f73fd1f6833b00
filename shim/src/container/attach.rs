//! Attach, as containerd's CRI does it (`container_attach.go`, `internal/cri/io`): the
//! client's stdin goes into the container's stdin FIFO through the write end the shim keeps
//! (only for containers created with `stdin`), its output comes from the log pumps' fan-out
//! ([`super::log::LogHandle::attach`]), so the CRI log still gets every byte, and terminal
//! resizes go to `Tasks.ResizePty` on the container's task. With `stdin_once`, the
//! container's stdin is closed when the first attach that had stdin ends.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::CloseIoRequest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::unix::pipe::Sender;
use tokio::sync::mpsc;

use super::Container;
use super::exec_stream::{ClientIo, follow_resizes};

/// An attach that could not start.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The container's process has ended (or never started): nothing to attach to.
    #[error("container {0} is not running")]
    NotRunning(String),
}

/// Attaches the client to `c` until its output ends (the process exited), the client goes
/// away (`gone`), or, when it asked for no output, its stdin ends.
pub async fn attach(
    containerd: &Containerd,
    c: &Container,
    client: ClientIo,
    gone: impl Future<Output = ()>,
) -> Result<(), AttachError> {
    let id = c.meta.id.as_str();
    let Some(log) = c.log_handle().filter(|h| h.running()) else {
        return Err(AttachError::NotRunning(id.into()));
    };
    let ClientIo {
        stdin,
        stdout,
        stderr,
        resize,
    } = client;
    let outputs = log.attach(stdout.is_some(), stderr.is_some());
    let wants_output = stdout.is_some() || stderr.is_some();
    // A container created without stdin gets none: the client's input is not read.
    let container_stdin = stdin.as_ref().and_then(|_| c.stdin());
    let had_stdin = container_stdin.is_some();
    let stdin_once = c.meta.config.stdin_once;
    let input = async {
        if let (Some(client), Some(fifo)) = (stdin, container_stdin) {
            copy_to_shared_fifo(client, &fifo).await;
            drop(fifo);
            // As containerd: without a tty the client's EOF is the container's at once (its
            // process may be waiting for it before it ends the output this attach waits for);
            // with a tty, stdin closes when the attach ends.
            if stdin_once && !c.meta.config.tty {
                close_stdin(containerd, c).await;
            }
        }
    };
    let output = async {
        tokio::join!(
            forward(outputs.stdout, stdout),
            forward(outputs.stderr, stderr)
        );
    };
    let resizes = follow_resizes(containerd, id, "", resize);
    let session = async {
        if wants_output {
            // Input and resizes run while the output lasts; the output decides the end.
            let side = async {
                tokio::join!(input, resizes);
                std::future::pending::<()>().await
            };
            tokio::select! {
                () = output => {}
                () = side => {}
            }
        } else {
            tokio::select! {
                () = input => {}
                () = async { resizes.await; std::future::pending::<()>().await } => {}
            }
        }
    };
    tokio::select! {
        () = session => {}
        () = gone => {}
    }
    if had_stdin && stdin_once {
        close_stdin(containerd, c).await;
    }
    Ok(())
}

/// Closes the container's stdin for good (`stdin_once`): our write end goes, and the shim is
/// told too, as containerd's `CloseIO(WithStdinCloser)`.
async fn close_stdin(cd: &Containerd, c: &Container) {
    if !c.close_stdin() {
        return;
    }
    let r = cd
        .tasks()
        .close_io(CloseIoRequest {
            container_id: c.meta.id.clone(),
            exec_id: String::new(),
            stdin: true,
        })
        .await;
    if let Err(s) = r
        && s.code() != tonic::Code::NotFound
    {
        tracing::warn!(container = %c.meta.id, error = %s.message(), "closing stdin");
    }
}

/// Writes the client's input into a FIFO other attaches may share, until the client's EOF.
async fn copy_to_shared_fifo(mut client: Box<dyn AsyncRead + Send + Unpin>, fifo: &Arc<Sender>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = match client.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "reading an attached client's stdin");
                return;
            }
        };
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            if let Err(e) = fifo.writable().await {
                tracing::debug!(error = %e, "waiting for the container's stdin");
                return;
            }
            match fifo.try_write(rest) {
                Ok(k) => rest = &rest[k..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, "writing the container's stdin");
                    return;
                }
            }
        }
    }
}

/// Copies one output subscription to the client until it ends; then closes the client's
/// stream.
async fn forward(
    chunks: Option<mpsc::Receiver<Bytes>>,
    client: Option<Box<dyn AsyncWrite + Send + Unpin>>,
) {
    let Some(mut client) = client else { return };
    if let Some(mut chunks) = chunks {
        while let Some(chunk) = chunks.recv().await {
            if client.write_all(&chunk).await.is_err() {
                // Dropping the receiver unsubscribes us at the pump's next read.
                break;
            }
        }
    }
    let _ = client.shutdown().await;
}
