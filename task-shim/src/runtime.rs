//! The OCI runtime binary (runc, or crun as a handler's `BinaryName`), run as the Go shim runs
//! it: `--root`, a JSON log in the bundle whose last error becomes the call's message.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ferrolet_proto::task_shim::RuncOptions;

/// runc's state root when the options name none (`/run/containerd/runc/<namespace>`).
const DEFAULT_ROOT: &str = "/run/containerd/runc";

/// How to run the OCI runtime for one container.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Runtime {
    /// The binary (`runc`, `/usr/bin/crun`, …).
    pub binary: String,
    /// `--root`.
    pub root: PathBuf,
    /// `--systemd-cgroup`.
    pub systemd_cgroup: bool,
    /// `--no-pivot` on create.
    pub no_pivot_root: bool,
    /// `--no-new-keyring` on create.
    pub no_new_keyring: bool,
}

/// A runtime command that failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The binary could not be started.
    #[error("starting {binary}: {source}")]
    Spawn {
        /// The binary.
        binary: String,
        /// The cause.
        source: std::io::Error,
    },
    /// It exited non-zero; `message` is its last logged error, else its output.
    #[error("{message}")]
    Failed {
        /// What it said.
        message: String,
    },
}

/// File descriptors a created or exec'd process gets as stdio (None: /dev/null).
#[derive(Debug, Default)]
pub struct ProcessStdio {
    /// Stdin.
    pub stdin: Option<OwnedFd>,
    /// Stdout.
    pub stdout: Option<OwnedFd>,
    /// Stderr.
    pub stderr: Option<OwnedFd>,
}

impl Runtime {
    /// The runtime the task options ask for, in `namespace`.
    pub fn from_options(options: &RuncOptions, namespace: &str) -> Self {
        let root = if options.root.is_empty() {
            Path::new(DEFAULT_ROOT).join(namespace)
        } else {
            Path::new(&options.root).join(namespace)
        };
        Self {
            binary: if options.binary_name.is_empty() {
                "runc".to_string()
            } else {
                options.binary_name.clone()
            },
            root,
            systemd_cgroup: options.systemd_cgroup,
            no_pivot_root: options.no_pivot_root,
            no_new_keyring: options.no_new_keyring,
        }
    }

    /// The runtime with its global flags, logging into `bundle`'s `log.json` (returned too).
    fn command(&self, bundle: &Path) -> (Command, PathBuf) {
        let log = bundle.join("log.json");
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--root")
            .arg(&self.root)
            .arg("--log")
            .arg(&log)
            .arg("--log-format")
            .arg("json");
        if self.systemd_cgroup {
            cmd.arg("--systemd-cgroup");
        }
        (cmd, log)
    }

    /// `create`: the container's init, stopped before the user's program.
    pub fn create(
        &self,
        id: &str,
        bundle: &Path,
        pid_file: &Path,
        console_socket: Option<&Path>,
        stdio: ProcessStdio,
    ) -> Result<(), RuntimeError> {
        let (mut cmd, log) = self.command(bundle);
        cmd.arg("create").arg("--bundle").arg(bundle);
        cmd.arg("--pid-file").arg(pid_file);
        if let Some(socket) = console_socket {
            cmd.arg("--console-socket").arg(socket);
        }
        if self.no_pivot_root {
            cmd.arg("--no-pivot");
        }
        if self.no_new_keyring {
            cmd.arg("--no-new-keyring");
        }
        cmd.arg(id);
        run(cmd, &log, Some(stdio), None)
    }

    /// `exec --detach`: `process` (an OCI Process JSON file) in the running container.
    pub fn exec(
        &self,
        id: &str,
        bundle: &Path,
        process: &Path,
        pid_file: &Path,
        console_socket: Option<&Path>,
        stdio: ProcessStdio,
    ) -> Result<(), RuntimeError> {
        let (mut cmd, log) = self.command(bundle);
        cmd.arg("exec")
            .arg("--detach")
            .arg("--process")
            .arg(process);
        cmd.arg("--pid-file").arg(pid_file);
        if let Some(socket) = console_socket {
            cmd.arg("--console-socket").arg(socket);
        }
        cmd.arg(id);
        run(cmd, &log, Some(stdio), None)
    }

    /// A subcommand taking just the id (`start`, `pause`, `resume`), or with extra args first.
    pub fn simple(&self, bundle: &Path, args: &[&str], id: &str) -> Result<(), RuntimeError> {
        let (mut cmd, log) = self.command(bundle);
        cmd.args(args).arg(id);
        run(cmd, &log, None, None)
    }

    /// Starts a created container (its init waits to `exec` the user's process). For runc,
    /// done as `runc start` does it without running runc again: read the `exec.fifo` in its
    /// state dir, which releases the init, and remove it (saving a runc start-up, ~7 ms, from
    /// every container start). Other runtimes, or no fifo: `<runtime> start`.
    pub fn start(&self, bundle: &Path, id: &str, pid: u32) -> Result<(), RuntimeError> {
        let is_runc = Path::new(&self.binary).file_name() == Some(std::ffi::OsStr::new("runc"));
        let fifo = self.root.join(id).join("exec.fifo");
        if is_runc && fifo.exists() {
            return release_through_fifo(&fifo, pid).map_err(|message| RuntimeError::Failed {
                message: format!("runc start (exec fifo): {message}"),
            });
        }
        self.simple(bundle, &["start"], id)
    }

    /// `kill [--all] id signal`.
    pub fn kill(
        &self,
        bundle: &Path,
        id: &str,
        signal: u32,
        all: bool,
    ) -> Result<(), RuntimeError> {
        let (mut cmd, log) = self.command(bundle);
        cmd.arg("kill");
        if all {
            cmd.arg("--all");
        }
        cmd.arg(id).arg(signal.to_string());
        run(cmd, &log, None, None)
    }

    /// `update --resources -`: `resources` is the OCI LinuxResources JSON.
    pub fn update(&self, bundle: &Path, id: &str, resources: &[u8]) -> Result<(), RuntimeError> {
        let (mut cmd, log) = self.command(bundle);
        cmd.arg("update").arg("--resources").arg("-").arg(id);
        run(cmd, &log, None, Some(resources))
    }

    /// `delete [--force] id`.
    pub fn delete(&self, bundle: &Path, id: &str, force: bool) -> Result<(), RuntimeError> {
        let (mut cmd, log) = self.command(bundle);
        cmd.arg("delete");
        if force {
            cmd.arg("--force");
        }
        cmd.arg(id);
        run(cmd, &log, None, None)
    }
}

/// Runs `cmd` to completion. With `stdio` (create, exec) those are its stdio, which it passes
/// on to the container's process, absent ones /dev/null; without, its own output is captured
/// for a failure that logged no error.
fn run(
    mut cmd: Command,
    log: &Path,
    stdio: Option<ProcessStdio>,
    input: Option<&[u8]>,
) -> Result<(), RuntimeError> {
    let binary = cmd.get_program().to_string_lossy().into_owned();
    let log_start = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    // The runtime's own output goes to one pipe, read after it exits: it is small (usage or
    // an error line), and the detached process does not hold it.
    let (mut out_r, out_w) = std::io::pipe().map_err(|source| RuntimeError::Spawn {
        binary: binary.clone(),
        source,
    })?;
    let out_w2 = out_w.try_clone().map_err(|source| RuntimeError::Spawn {
        binary: binary.clone(),
        source,
    })?;
    match stdio {
        Some(stdio) => {
            let or_null = |fd: Option<OwnedFd>| fd.map_or_else(Stdio::null, Stdio::from);
            cmd.stdin(or_null(stdio.stdin));
            cmd.stdout(or_null(stdio.stdout));
            cmd.stderr(or_null(stdio.stderr));
            drop((out_w, out_w2));
        }
        None => {
            cmd.stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
            cmd.stdout(Stdio::from(out_w));
            cmd.stderr(Stdio::from(out_w2));
        }
    }
    let mut child = cmd.spawn().map_err(|source| RuntimeError::Spawn {
        binary: binary.clone(),
        source,
    })?;
    // The command holds the only copies of the pipe's write end now.
    drop(cmd);
    if let (Some(data), Some(mut pipe)) = (input, child.stdin.take()) {
        let _ = pipe.write_all(data);
    }
    let status = child.wait().map_err(|source| RuntimeError::Spawn {
        binary: binary.clone(),
        source,
    })?;
    let mut output = String::new();
    if !status.success() {
        // Bounded: a runtime's error output is a line or a usage text.
        let _ = (&mut out_r).take(64 << 10).read_to_string(&mut output);
    }
    drop(out_r);
    if status.success() {
        return Ok(());
    }
    let message = last_error(log, log_start).unwrap_or_else(|| {
        let output = output.trim();
        if output.is_empty() {
            format!("{binary} did not terminate successfully: {status}")
        } else {
            format!("{binary} did not terminate successfully: {status}: {output}")
        }
    });
    Err(RuntimeError::Failed { message })
}

/// Reads runc's exec fifo: the waiting init writes "0" once a reader opens it, then runs the
/// user's process. An init that died first never writes, which is checked while waiting.
fn release_through_fifo(fifo: &Path, pid: u32) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // Nonblocking, so the open never waits; then poll for the init's "0" (a FIFO that never
    // had a writer reports neither data nor hang-up, so poll waits for the init's open).
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo)
        .map_err(|e| format!("opening {}: {e}", fifo.display()))?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut pfd = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd for a descriptor we own.
        let n = unsafe { libc::poll(&mut pfd, 1, 50) };
        if n > 0 {
            break;
        }
        if !alive(pid) {
            return Err("container process is already dead".into());
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "no word from the init on {} in 10 s",
                fifo.display()
            ));
        }
    }
    let mut data = Vec::new();
    loop {
        let mut buf = [0u8; 16];
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if !data.is_empty() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading {}: {e}", fifo.display())),
        }
    }
    if data != b"0" {
        return Err("container process is already dead".into());
    }
    std::fs::remove_file(fifo).map_err(|e| format!("removing {}: {e}", fifo.display()))
}

/// Whether `pid` runs (a zombie, not yet reaped, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// One line of the runtime's JSON log.
#[derive(serde::Deserialize)]
struct LogLine {
    #[serde(default)]
    level: String,
    #[serde(default)]
    msg: String,
}

/// The last `error` line the runtime logged after byte `from` of `log`.
fn last_error(log: &Path, from: u64) -> Option<String> {
    let mut file = std::fs::File::open(log).ok()?;
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut text = String::new();
    file.take(1 << 20).read_to_string(&mut text).ok()?;
    text.lines()
        .filter_map(|l| serde_json::from_str::<LogLine>(l).ok())
        .filter(|l| l.level == "error")
        .map(|l| l.msg)
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_go_shim() {
        let rt = Runtime::from_options(&RuncOptions::default(), "k8s.io");
        assert_eq!(rt.binary, "runc");
        assert_eq!(rt.root, Path::new("/run/containerd/runc/k8s.io"));
        let rt = Runtime::from_options(
            &RuncOptions {
                binary_name: "/usr/bin/crun".into(),
                root: "/run/x".into(),
                systemd_cgroup: true,
                ..Default::default()
            },
            "ns",
        );
        assert_eq!(
            (rt.binary.as_str(), rt.root.as_path(), rt.systemd_cgroup),
            ("/usr/bin/crun", Path::new("/run/x/ns"), true)
        );
    }

    #[test]
    fn last_error_reads_only_new_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log.json");
        std::fs::write(&log, "{\"level\":\"error\",\"msg\":\"old\"}\n").unwrap();
        let start = std::fs::metadata(&log).unwrap().len();
        assert_eq!(last_error(&log, start), None);
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        writeln!(f, "{{\"level\":\"warning\",\"msg\":\"w\"}}").unwrap();
        writeln!(
            f,
            "{{\"level\":\"error\",\"msg\":\"exec: \\\"nope\\\": not found\"}}"
        )
        .unwrap();
        writeln!(f, "not json").unwrap();
        assert_eq!(
            last_error(&log, start).as_deref(),
            Some("exec: \"nope\": not found")
        );
    }

    #[test]
    fn a_failing_binary_reports_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let rt = Runtime {
            binary: "false".into(),
            root: dir.path().into(),
            systemd_cgroup: false,
            no_pivot_root: false,
            no_new_keyring: false,
        };
        let err = rt.simple(dir.path(), &["start"], "x").unwrap_err();
        assert!(
            err.to_string().contains("did not terminate successfully"),
            "{err}"
        );
        let rt = Runtime {
            binary: "/nonexistent/runc".into(),
            ..rt
        };
        assert!(matches!(
            rt.simple(dir.path(), &["start"], "x"),
            Err(RuntimeError::Spawn { .. })
        ));
    }
}
