//! Streaming Exec, as containerd's CRI runs it (`container_exec.go`, `execInternal`): an exec
//! process with the container's process spec (args replaced, a terminal when asked), FIFOs
//! for the streams the client asked for, started; then the client's stdin goes to the
//! process, its output to the client, terminal resizes to `Tasks.ResizePty`, and its exit
//! code back. When the client goes away first, the process is SIGKILLed; on every path the
//! exec process is deleted and its FIFOs removed (the [`super::exec`] cleanup guard).

use std::future::Future;
use std::path::PathBuf;

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::{CloseIoRequest, ResizePtyRequest, WaitRequest};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::exec::{Cleanup, ExecError, Stage, classify, new_exec_id, start_process};
use super::io::{Fifos, OpenedIo};

/// A terminal size, in character cells.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtySize {
    /// Columns.
    pub width: u16,
    /// Rows.
    pub height: u16,
}

/// A client's ends of a session's streams (any transport).
#[derive(Default)]
pub struct ClientIo {
    /// What the client types; EOF when it closes its stdin.
    pub stdin: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// Where the process's stdout goes (with a tty: the terminal's output).
    pub stdout: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Where the process's stderr goes; None with a tty.
    pub stderr: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Terminal resizes, with a tty.
    pub resize: Option<mpsc::Receiver<PtySize>>,
}

/// One streaming exec.
#[derive(Clone, Debug)]
pub struct StreamExecSpec {
    /// The container whose task runs the command.
    pub container_id: String,
    /// The command and its arguments.
    pub cmd: Vec<String>,
    /// Run it on a terminal.
    pub tty: bool,
    /// The container's process, the template.
    pub process: oci_spec::runtime::Process,
    /// Where the exec's FIFOs go (created if missing; removed afterwards).
    pub fifo_dir: PathBuf,
}

/// Runs `spec` with the client's streams; returns the exit code. `gone` resolves when the
/// client has gone away: the process is then killed and [`ExecError::ClientGone`] returned.
pub async fn exec_stream(
    containerd: &Containerd,
    spec: StreamExecSpec,
    client: ClientIo,
    gone: impl Future<Output = ()>,
) -> Result<i32, ExecError> {
    let exec_id = new_exec_id();
    let fifos = Fifos::new(&spec.fifo_dir, &exec_id, client.stdin.is_some(), spec.tty);
    let mut cleanup = Cleanup::new(containerd, &spec.container_id, &exec_id, &fifos);
    // The start is not raced against the client's departure: a start cancelled while its
    // Tasks.Start was in flight would leave a process running that the cleanup, still at the
    // Created stage, would not kill. A client gone meanwhile is seen right after it.
    let started = start_process(
        containerd,
        &spec.container_id,
        &exec_id,
        &fifos,
        &spec.process,
        &spec.cmd,
        spec.tty,
        &mut cleanup.stage,
    )
    .await;
    let opened = match started {
        Ok(opened) => opened,
        Err(e) => {
            cleanup.run().await;
            return Err(e);
        }
    };
    let result = tokio::select! {
        r = run(containerd, &spec.container_id, &exec_id, opened, client, &mut cleanup.stage) => r,
        () = gone => Err(ExecError::ClientGone { exec_id: exec_id.clone() }),
    };
    // Kills it if it still runs (the client left), deletes it, removes the FIFOs. After an
    // exit that is bookkeeping the client need not wait for: its exit code goes out first.
    match result {
        Ok(_) => cleanup.spawn(),
        Err(_) => cleanup.run().await,
    }
    result
}

/// Serves a started exec process: the client's streams, resizes, then its exit code.
async fn run(
    cd: &Containerd,
    container_id: &str,
    exec_id: &str,
    mut opened: OpenedIo,
    client: ClientIo,
    stage: &mut Stage,
) -> Result<i32, ExecError> {
    let err = |op: &'static str| move |s: tonic::Status| classify(op, container_id, exec_id, s);

    let ClientIo {
        stdin,
        stdout,
        stderr,
        resize,
    } = client;
    let stdin_fifo = opened.take_stdin();
    let stdin_copy = async {
        if feed_stdin(stdin, stdin_fifo).await {
            // The shim keeps the FIFO's read end open for another writer, so our EOF alone
            // never reaches the process: containerd's CRI closes its stdin the same way.
            let closed = cd
                .tasks()
                .close_io(CloseIoRequest {
                    container_id: container_id.into(),
                    exec_id: exec_id.into(),
                    stdin: true,
                })
                .await;
            if let Err(e) = closed {
                tracing::debug!(error = %e.message(), "closing the exec's stdin");
            }
        }
    };
    let resizes = follow_resizes(cd, container_id, exec_id, resize);
    let output = async {
        tokio::join!(
            forward_output(opened.take_stdout(), stdout),
            forward_output(opened.take_stderr(), stderr)
        )
    };
    let wait = async {
        cd.tasks()
            .wait(WaitRequest {
                container_id: container_id.into(),
                exec_id: exec_id.into(),
            })
            .await
            .map(|r| r.into_inner().exit_status)
    };
    // Input and resizes matter only while the process runs; the output is read to its EOF
    // (the shim closes it once the process and whatever inherited it are gone).
    let ran = async {
        let side = async {
            tokio::join!(stdin_copy, resizes);
            std::future::pending().await
        };
        tokio::select! {
            w = wait => w,
            w = side => w,
        }
    };
    let (exit, _) = tokio::join!(ran, output);
    let status = exit.map_err(err("wait for"))?;
    *stage = Stage::Exited;
    // containerd's CRI converts the same way.
    Ok(status as i32)
}

/// Copies the client's stdin into the process's FIFO; at the client's EOF, closes it, so the
/// process sees EOF too.
/// Whether there was a stdin to copy (and the client has now ended it).
pub async fn feed_stdin(
    client: Option<Box<dyn AsyncRead + Send + Unpin>>,
    fifo: Option<tokio::net::unix::pipe::Sender>,
) -> bool {
    let (Some(mut client), Some(mut fifo)) = (client, fifo) else {
        return false;
    };
    if let Err(e) = tokio::io::copy(&mut client, &mut fifo).await {
        tracing::debug!(error = %e, "copying stdin to the process");
    }
    true
}

/// Copies one output FIFO to the client to EOF; if the client stops taking it, the rest is
/// read and dropped, so the process never blocks on a full pipe.
pub async fn forward_output(
    fifo: Option<tokio::net::unix::pipe::Receiver>,
    client: Option<Box<dyn AsyncWrite + Send + Unpin>>,
) {
    let Some(mut fifo) = fifo else {
        // Nothing to read: still close the client's stream, so it sees the end.
        if let Some(mut c) = client {
            let _ = c.shutdown().await;
        }
        return;
    };
    match client {
        Some(mut c) => {
            if let Err(e) = tokio::io::copy(&mut fifo, &mut c).await {
                tracing::debug!(error = %e, "copying output to the client");
                let _ = tokio::io::copy(&mut fifo, &mut tokio::io::sink()).await;
            }
            let _ = c.shutdown().await;
        }
        None => {
            let _ = tokio::io::copy(&mut fifo, &mut tokio::io::sink()).await;
        }
    }
}

/// Applies resizes to the process's terminal until the channel closes (sizes with a zero
/// side are skipped, as containerd does).
pub async fn follow_resizes(
    cd: &Containerd,
    container_id: &str,
    exec_id: &str,
    resize: Option<mpsc::Receiver<PtySize>>,
) {
    let Some(mut resize) = resize else { return };
    while let Some(size) = resize.recv().await {
        if size.width == 0 || size.height == 0 {
            continue;
        }
        let r = cd
            .tasks()
            .resize_pty(ResizePtyRequest {
                container_id: container_id.into(),
                exec_id: exec_id.into(),
                width: size.width.into(),
                height: size.height.into(),
            })
            .await;
        if let Err(s) = r {
            tracing::warn!(container = %container_id, exec = %exec_id, error = %s.message(), "resizing the terminal");
        }
    }
}
