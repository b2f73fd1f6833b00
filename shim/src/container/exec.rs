//! ExecSync: runs one command in a running container's task and collects its output, as
//! containerd's CRI does (`internal/cri/server/container_execsync.go`): an exec process with
//! the container's process spec (args replaced, no terminal) and FIFOs for stdout/stderr,
//! started, waited for within the timeout, SIGKILLed when the timeout passes. The exec process
//! and its FIFOs are removed on every path, including when the caller stops polling.
//!
//! The pieces every exec shares (the process spec, ids, the cleanup guard, error
//! classification) are also what [`super::exec_stream`] (streaming Exec) builds on.

use std::time::Duration;

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::{
    DeleteProcessRequest, ExecProcessRequest, KillRequest, StartRequest, WaitRequest,
};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe::Receiver;

use super::io::{self, Fifos, IoError};

/// The type URL containerd's client gives a runtime-spec `Process` (a JSON body).
const PROCESS_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/Process";

/// Bytes kept per stream, as containerd's ExecSync: more would not fit in a CRI response
/// (the kubelet's gRPC message limit), so the rest is read and dropped.
pub const MAX_EXEC_OUTPUT: usize = 16 * 1024 * 1024;

/// How long cleanup waits for a killed exec to exit before deleting it anyway.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// One ExecSync.
#[derive(Clone, Debug)]
pub struct ExecSpec {
    /// The container whose task runs the command.
    pub container_id: String,
    /// The command and its arguments.
    pub cmd: Vec<String>,
    /// None or zero: wait as long as it takes.
    pub timeout: Option<Duration>,
    /// The container's process; its args are replaced by `cmd` and its terminal turned off.
    pub process: oci_spec::runtime::Process,
    /// Where the exec's FIFOs go (created if missing; the FIFOs are removed afterwards).
    pub fifo_dir: std::path::PathBuf,
}

/// What an exec produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Its stdout, at most [`MAX_EXEC_OUTPUT`] bytes.
    pub stdout: Vec<u8>,
    /// Its stderr, at most [`MAX_EXEC_OUTPUT`] bytes.
    pub stderr: Vec<u8>,
    /// Its exit status (128 + signal when a signal ended it).
    pub exit_code: i32,
}

/// A failed ExecSync. Messages start like containerd's (`failed to exec in container: ...`).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The command outlived the timeout and was killed.
    #[error(
        "failed to exec in container: timeout {} exceeded: context deadline exceeded",
        go_duration(*timeout)
    )]
    Timeout {
        /// The exec process.
        exec_id: String,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// containerd has no task for the container.
    #[error("failed to exec in container: container {container_id} has no running task: {message}")]
    NotFound {
        /// The container.
        container_id: String,
        /// containerd's words.
        message: String,
    },
    /// The container's task exists but its process has stopped.
    #[error("failed to exec in container: container {container_id} is not running: {message}")]
    NotRunning {
        /// The container.
        container_id: String,
        /// containerd's words.
        message: String,
    },
    /// A containerd call failed.
    #[error("failed to exec in container: failed to {op} exec {exec_id:?}: {}", status.message())]
    Containerd {
        /// What was being done (`create`, `start`, `wait for`, `kill`).
        op: &'static str,
        /// The exec process.
        exec_id: String,
        /// containerd's answer.
        status: tonic::Status,
    },
    /// The FIFOs could not be set up.
    #[error("failed to exec in container: {0}")]
    Io(#[from] IoError),
    /// The process spec could not be encoded.
    #[error("failed to exec in container: encoding the process spec: {0}")]
    Spec(#[from] serde_json::Error),
    /// A streaming client went away before the command ended; it was killed.
    #[error("failed to exec in container: the client went away; exec {exec_id:?} was killed")]
    ClientGone {
        /// The exec process.
        exec_id: String,
    },
}

impl ExecError {
    /// The gRPC code: DeadlineExceeded on timeout (what the kubelet reads as a probe
    /// timeout), NotFound without a task, FailedPrecondition when the process has stopped,
    /// containerd's own code when one of its calls failed.
    pub fn code(&self) -> tonic::Code {
        match self {
            ExecError::Timeout { .. } => tonic::Code::DeadlineExceeded,
            ExecError::NotFound { .. } => tonic::Code::NotFound,
            ExecError::NotRunning { .. } => tonic::Code::FailedPrecondition,
            ExecError::Containerd { status, .. } => status.code(),
            ExecError::Io(e) => e.code(),
            ExecError::Spec(_) => tonic::Code::Internal,
            ExecError::ClientGone { .. } => tonic::Code::Cancelled,
        }
    }
}

/// A duration as Go prints one (`1s`, `1m30s`, `1.5s`, `500ms`), for containerd's messages.
fn go_duration(d: Duration) -> String {
    fn frac(whole: u128, rest: u128, digits: usize) -> String {
        let f = format!("{rest:0digits$}");
        let f = f.trim_end_matches('0');
        if f.is_empty() {
            whole.to_string()
        } else {
            format!("{whole}.{f}")
        }
    }
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", frac(ns / 1_000, ns % 1_000, 3));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", frac(ns / 1_000_000, ns % 1_000_000, 6));
    }
    let secs = ns / 1_000_000_000;
    let s = frac(secs % 60, ns % 1_000_000_000, 9);
    match (secs / 3600, secs / 60 % 60) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

/// A fresh exec id: 64 hex digits, as containerd's CRI makes them (within containerd's
/// 76-character identifier limit).
pub(super) fn new_exec_id() -> String {
    crate::store::new_id()
}

/// The exec's process: the container's, running `cmd`, with a terminal when `tty`.
pub(super) fn exec_process(
    template: &oci_spec::runtime::Process,
    cmd: &[String],
    tty: bool,
) -> oci_spec::runtime::Process {
    let mut p = template.clone();
    p.set_args(Some(cmd.to_vec()));
    p.set_terminal(Some(tty));
    p.set_console_size(None);
    // A command line would override args on runtimes that read it.
    p.set_command_line(None);
    p
}

pub(super) fn process_any(
    p: &oci_spec::runtime::Process,
) -> Result<ferrolet_proto::prost_types::Any, serde_json::Error> {
    Ok(ferrolet_proto::prost_types::Any {
        type_url: PROCESS_TYPE_URL.into(),
        value: serde_json::to_vec(p)?,
    })
}

/// How far the exec process got, so cleanup undoes exactly that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Stage {
    /// Only FIFOs (maybe) exist.
    Fifos,
    /// containerd knows the exec process.
    Created,
    /// It may be running.
    Started,
    /// It has exited.
    Exited,
}

/// Removes the exec process and its FIFOs; when dropped before [`Cleanup::run`] (the caller
/// stopped polling), it does so on a spawned task.
pub(super) struct Cleanup {
    containerd: Containerd,
    container_id: String,
    exec_id: String,
    fifos: Fifos,
    /// How far the exec got; the caller advances it.
    pub(super) stage: Stage,
    armed: bool,
}

impl Cleanup {
    /// A guard for an exec that has nothing yet but (maybe) its FIFOs.
    pub(super) fn new(
        containerd: &Containerd,
        container_id: &str,
        exec_id: &str,
        fifos: &Fifos,
    ) -> Self {
        Self {
            containerd: containerd.clone(),
            container_id: container_id.into(),
            exec_id: exec_id.into(),
            fifos: fifos.clone(),
            stage: Stage::Fifos,
            armed: true,
        }
    }

    /// Undoes what the exec got to in a task of its own, without waiting for it.
    pub(super) fn spawn(mut self) {
        self.armed = false;
        tokio::spawn(cleanup(
            self.containerd.clone(),
            std::mem::take(&mut self.container_id),
            std::mem::take(&mut self.exec_id),
            self.fifos.clone(),
            self.stage,
        ));
    }

    /// Undoes what the exec got to, now.
    pub(super) async fn run(mut self) {
        self.armed = false;
        cleanup(
            self.containerd.clone(),
            self.container_id.clone(),
            self.exec_id.clone(),
            self.fifos.clone(),
            self.stage,
        )
        .await;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                exec = %self.exec_id,
                "exec abandoned outside a runtime; its process and fifos are left behind"
            );
            return;
        };
        rt.spawn(cleanup(
            self.containerd.clone(),
            std::mem::take(&mut self.container_id),
            std::mem::take(&mut self.exec_id),
            self.fifos.clone(),
            self.stage,
        ));
    }
}

async fn cleanup(
    cd: Containerd,
    container_id: String,
    exec_id: String,
    fifos: Fifos,
    stage: Stage,
) {
    if stage == Stage::Started {
        let _ = kill(&cd, &container_id, &exec_id).await;
        let mut tasks = cd.tasks();
        let wait = tasks.wait(WaitRequest {
            container_id: container_id.clone(),
            exec_id: exec_id.clone(),
        });
        if tokio::time::timeout(KILL_WAIT, wait).await.is_err() {
            tracing::warn!(container = %container_id, exec = %exec_id, "killed exec did not exit in time; deleting it anyway");
        }
    }
    if stage >= Stage::Created {
        let deleted = cd
            .tasks()
            .delete_process(DeleteProcessRequest {
                container_id: container_id.clone(),
                exec_id: exec_id.clone(),
            })
            .await;
        if let Err(s) = deleted
            && s.code() != tonic::Code::NotFound
        {
            tracing::warn!(container = %container_id, exec = %exec_id, error = %s.message(), "deleting exec process");
        }
    }
    if let Err(e) = io::remove(&fifos).await {
        tracing::warn!(container = %container_id, exec = %exec_id, error = %e, "removing exec fifos");
    }
}

pub(super) async fn kill(
    cd: &Containerd,
    container_id: &str,
    exec_id: &str,
) -> Result<(), tonic::Status> {
    match cd
        .tasks()
        .kill(KillRequest {
            container_id: container_id.into(),
            exec_id: exec_id.into(),
            signal: libc::SIGKILL as u32,
            all: false,
        })
        .await
    {
        // The process may have exited by itself meanwhile.
        Err(s) if s.code() != tonic::Code::NotFound => Err(s),
        _ => Ok(()),
    }
}

/// Reads `rx` to EOF, keeping the first `cap` bytes.
async fn read_capped(rx: Option<Receiver>, cap: usize) -> Vec<u8> {
    let Some(mut rx) = rx else { return Vec::new() };
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match rx.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(error = %e, "reading exec output");
                break;
            }
        }
    }
    kept
}

/// Runs a command in a running container's task and collects its output, each stream capped
/// at [`MAX_EXEC_OUTPUT`] bytes (the rest is drained and dropped, as containerd does), killing
/// it with SIGKILL when `timeout` passes. Once the process exits, its output is read to EOF
/// with no further limit, as containerd does by default (`drain_exec_sync_io_timeout` 0).
pub async fn exec_sync(containerd: &Containerd, spec: ExecSpec) -> Result<ExecOutput, ExecError> {
    let exec_id = new_exec_id();
    let fifos = Fifos::new(&spec.fifo_dir, &exec_id, false, false);
    let mut cleanup = Cleanup::new(containerd, &spec.container_id, &exec_id, &fifos);
    let result = run(containerd, &spec, &exec_id, &fifos, &mut cleanup.stage).await;
    cleanup.run().await;
    result
}

async fn run(
    cd: &Containerd,
    spec: &ExecSpec,
    exec_id: &str,
    fifos: &Fifos,
    stage: &mut Stage,
) -> Result<ExecOutput, ExecError> {
    let container_id = spec.container_id.as_str();
    let containerd_err =
        |op: &'static str| move |status: tonic::Status| classify(op, container_id, exec_id, status);
    let mut opened = start_process(
        cd,
        container_id,
        exec_id,
        fifos,
        &spec.process,
        &spec.cmd,
        false,
        stage,
    )
    .await?;

    let stdout = opened.take_stdout();
    let stderr = opened.take_stderr();
    let collect = async {
        tokio::join!(
            read_capped(stdout, MAX_EXEC_OUTPUT),
            read_capped(stderr, MAX_EXEC_OUTPUT)
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
    let timeout = spec.timeout.filter(|t| !t.is_zero());
    let waited = async {
        match timeout {
            Some(t) => tokio::time::timeout(t, wait).await.ok(),
            None => Some(wait.await),
        }
    };
    tokio::pin!(collect, waited);
    let mut output = None;
    let exit = loop {
        tokio::select! {
            o = &mut collect, if output.is_none() => output = Some(o),
            w = &mut waited => break w,
        }
    };
    match exit {
        Some(Ok(status)) => {
            *stage = Stage::Exited;
            let (stdout, stderr) = match output {
                Some(o) => o,
                None => collect.await,
            };
            Ok(ExecOutput {
                stdout,
                stderr,
                // containerd's CRI converts the same way.
                exit_code: status as i32,
            })
        }
        Some(Err(status)) => Err(containerd_err("wait for")(status)),
        None => {
            kill(cd, container_id, exec_id)
                .await
                .map_err(containerd_err("kill"))?;
            // Report only once it is gone, so a follow-up exec cannot still see it.
            let _ = cd
                .tasks()
                .wait(WaitRequest {
                    container_id: container_id.into(),
                    exec_id: exec_id.into(),
                })
                .await;
            *stage = Stage::Exited;
            Err(ExecError::Timeout {
                exec_id: exec_id.into(),
                timeout: timeout.unwrap_or_default(),
            })
        }
    }
}

/// Opens an exec's FIFOs, then creates and starts its process in containerd (`Tasks.Exec`,
/// `Tasks.Start`) with `cmd` over the container's `template` process, advancing `stage` as
/// each step lands so the caller's cleanup undoes exactly what was done; the FIFOs, open.
#[allow(clippy::too_many_arguments)]
pub(super) async fn start_process(
    cd: &Containerd,
    container_id: &str,
    exec_id: &str,
    fifos: &Fifos,
    template: &oci_spec::runtime::Process,
    cmd: &[String],
    tty: bool,
    stage: &mut Stage,
) -> Result<io::OpenedIo, ExecError> {
    let err = |op: &'static str| move |s: tonic::Status| classify(op, container_id, exec_id, s);
    let mut opened = io::open(fifos).await?;
    let process = process_any(&exec_process(template, cmd, tty))?;
    cd.tasks()
        .exec(ExecProcessRequest {
            container_id: container_id.into(),
            stdin: fifos.stdin_str(),
            stdout: fifos.stdout_str(),
            stderr: fifos.stderr_str(),
            terminal: tty,
            spec: Some(process),
            exec_id: exec_id.into(),
        })
        .await
        .map_err(err("create"))?;
    *stage = Stage::Created;
    cd.tasks()
        .start(StartRequest {
            container_id: container_id.into(),
            exec_id: exec_id.into(),
        })
        .await
        .map_err(err("start"))?;
    *stage = Stage::Started;
    // The shim opened the FIFOs while starting the exec.
    opened.task_created();
    Ok(opened)
}

/// Tells "the container is not running" apart from other containerd failures.
pub(super) fn classify(
    op: &'static str,
    container_id: &str,
    exec_id: &str,
    status: tonic::Status,
) -> ExecError {
    let message = status.message().to_string();
    match (op, status.code()) {
        ("create", tonic::Code::NotFound) => ExecError::NotFound {
            container_id: container_id.into(),
            message,
        },
        ("create" | "start", tonic::Code::FailedPrecondition) => ExecError::NotRunning {
            container_id: container_id.into(),
            message,
        },
        // The runc shim refuses with a plain error: "cannot exec in a stopped state".
        ("create" | "start", _) if message.contains("stopped") => ExecError::NotRunning {
            container_id: container_id.into(),
            message,
        },
        _ => ExecError::Containerd {
            op,
            exec_id: exec_id.into(),
            status,
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn exec_ids_are_unique_hex_within_containerd_limits() {
        let a = new_exec_id();
        let b = new_exec_id();
        assert_ne!(a, b);
        for id in [a, b] {
            assert_eq!(id.len(), 64);
            assert!(
                id.bytes()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(1)), "1s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(go_duration(Duration::from_nanos(1500)), "1.5µs");
        assert_eq!(go_duration(Duration::from_nanos(7)), "7ns");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn error_codes_and_messages() {
        let t = ExecError::Timeout {
            exec_id: "e".into(),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(t.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(
            t.to_string(),
            "failed to exec in container: timeout 1s exceeded: context deadline exceeded"
        );
        let nf = classify(
            "create",
            "c",
            "e",
            tonic::Status::not_found("task c not found"),
        );
        assert!(matches!(nf, ExecError::NotFound { .. }));
        assert_eq!(nf.code(), tonic::Code::NotFound);
        let stopped = classify(
            "create",
            "c",
            "e",
            tonic::Status::unknown("cannot exec in a stopped state: unknown"),
        );
        assert_eq!(stopped.code(), tonic::Code::FailedPrecondition);
        let pre = classify("start", "c", "e", tonic::Status::failed_precondition("no"));
        assert_eq!(pre.code(), tonic::Code::FailedPrecondition);
        let other = classify("wait for", "c", "e", tonic::Status::unavailable("gone"));
        assert_eq!(other.code(), tonic::Code::Unavailable);
        assert_eq!(
            other.to_string(),
            "failed to exec in container: failed to wait for exec \"e\": gone"
        );
        let io: ExecError = IoError::NoRuntime.into();
        assert_eq!(io.code(), tonic::Code::Internal);
    }

    #[test]
    fn process_spec_replaces_args_and_drops_the_terminal() {
        let mut template = oci_spec::runtime::Process::default();
        template.set_args(Some(vec!["/pause".into()]));
        template.set_terminal(Some(true));
        template.set_command_line(Some("pause".into()));
        template.set_env(Some(vec!["A=1".into()]));
        let p = exec_process(
            &template,
            &["sh".into(), "-c".into(), "echo hi".into()],
            false,
        );
        let any = process_any(&p).unwrap();
        assert_eq!(any.type_url, PROCESS_TYPE_URL);
        let json: serde_json::Value = serde_json::from_slice(&any.value).unwrap();
        assert_eq!(json["args"], serde_json::json!(["sh", "-c", "echo hi"]));
        assert_eq!(json["terminal"], false);
        assert_eq!(json["env"], serde_json::json!(["A=1"]));
        assert!(json.get("commandLine").is_none());
        assert!(json.get("cwd").is_some());
    }

    #[tokio::test]
    async fn output_is_capped_but_drained() {
        let tmp = tempfile::tempdir().unwrap();
        let fifos = Fifos::new(tmp.path(), "x", false, true);
        let mut opened = io::open(&fifos).await.unwrap();
        // The shim opens its end before Start returns, so before task_created.
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .open(&fifos.stdout)
            .unwrap();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            w.write_all(&[b'a'; 300_000]).unwrap();
        });
        opened.task_created();
        let got = read_capped(opened.take_stdout(), 100_000).await;
        writer.join().unwrap();
        assert_eq!(got.len(), 100_000);
        io::remove(&fifos).await.unwrap();
    }
}
