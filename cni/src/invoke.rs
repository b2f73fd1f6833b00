//! Running one plugin binary: lookup across the plugin path, the CNI environment contract
//! (`CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`, `CNI_ARGS`, `CNI_PATH`),
//! config on stdin, result or error object on stdout, a per-call timeout (the plugin is
//! killed when it expires), and an optional trace of every call.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::error::{CniError, PluginError, Result};

/// Default plugin search path (libcni's `/opt/cni/bin`, plus Debian's `/usr/lib/cni`).
pub const DEFAULT_PLUGIN_DIRS: &[&str] = &["/opt/cni/bin", "/usr/lib/cni"];

/// Default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The CNI verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
}

impl Command {
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
            Command::Gc => "GC",
            Command::Version => "VERSION",
        }
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The per-attachment part of the environment contract.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// `CNI_ARGS`, already joined (`K=V;K=V`).
    pub args: String,
}

/// What one plugin call did, for `--trace` and for measuring time spent in plugins.
#[derive(Debug, Clone)]
pub struct TraceRecord {
    pub plugin: String,
    pub binary: PathBuf,
    pub command: Command,
    /// The CNI_* variables set (the rest of the environment is inherited).
    pub env: Vec<(String, String)>,
    pub stdin: String,
    pub stdout: String,
    pub stderr: String,
    /// Exit code, or `None` when killed by a signal / timed out / not started.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Wall time from spawn to exit.
    pub duration: Duration,
    /// Error spawning or waiting, if any.
    pub error: Option<String>,
}

/// Receives a [`TraceRecord`] after every plugin call.
pub type Tracer = Arc<dyn Fn(&TraceRecord) + Send + Sync>;

/// Finds and runs plugin binaries.
#[derive(Clone)]
pub struct Invoker {
    pub plugin_dirs: Vec<PathBuf>,
    pub timeout: Duration,
    pub tracer: Option<Tracer>,
    cni_path: String,
}

impl std::fmt::Debug for Invoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invoker")
            .field("plugin_dirs", &self.plugin_dirs)
            .field("timeout", &self.timeout)
            .field("tracer", &self.tracer.is_some())
            .finish()
    }
}

impl Invoker {
    pub fn new(plugin_dirs: Vec<PathBuf>) -> Self {
        let cni_path = join_paths(&plugin_dirs);
        Invoker {
            plugin_dirs,
            timeout: DEFAULT_TIMEOUT,
            tracer: None,
            cni_path,
        }
    }

    /// Find `plugin_type` in the plugin dirs (first executable regular file wins).
    pub fn find_plugin(&self, plugin_type: &str) -> Result<PathBuf> {
        find_plugin(plugin_type, &self.plugin_dirs)
    }

    /// Run one plugin: returns its stdout on exit 0, a typed error otherwise.
    pub async fn exec(
        &self,
        plugin_type: &str,
        command: Command,
        env: &Env,
        stdin: &[u8],
    ) -> Result<Vec<u8>> {
        let binary = self.find_plugin(plugin_type)?;
        let mut vars: Vec<(&'static str, String)> = vec![("CNI_COMMAND", command.as_str().into())];
        if command != Command::Version {
            vars.push(("CNI_CONTAINERID", env.container_id.clone()));
            vars.push(("CNI_NETNS", env.netns.clone()));
            vars.push(("CNI_IFNAME", env.ifname.clone()));
            vars.push(("CNI_ARGS", env.args.clone()));
        }
        vars.push(("CNI_PATH", self.cni_path.clone()));

        let mut cmd = tokio::process::Command::new(&binary);
        for k in [
            "CNI_CONTAINERID",
            "CNI_NETNS",
            "CNI_IFNAME",
            "CNI_ARGS",
            "CNI_PATH",
        ] {
            cmd.env_remove(k);
        }
        cmd.envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);

        let start = Instant::now();
        let outcome = run(cmd, stdin, self.timeout).await;
        let duration = start.elapsed();
        // Per-plugin time for a pod's start timeline (ferrolet-cri at debug level).
        tracing::debug!(
            plugin = plugin_type,
            command = command.as_str(),
            duration_ms = duration.as_secs_f64() * 1000.0,
            "CNI plugin call"
        );

        let mut rec = self.tracer.as_ref().map(|_| TraceRecord {
            plugin: plugin_type.into(),
            binary: binary.clone(),
            command,
            env: vars
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
            stdin: String::from_utf8_lossy(stdin).into_owned(),
            stdout: String::new(),
            stderr: String::new(),
            exit_code: None,
            signal: None,
            duration,
            error: None,
        });
        let result = match outcome {
            Err(RunError::Timeout) => {
                if let Some(r) = rec.as_mut() {
                    r.error = Some(format!("timed out after {:?}; killed", self.timeout));
                }
                Err(CniError::Timeout {
                    plugin: plugin_type.into(),
                    command: command.as_str(),
                    timeout: self.timeout,
                })
            }
            Err(RunError::Io(e)) => {
                if let Some(r) = rec.as_mut() {
                    r.error = Some(e.to_string());
                }
                Err(CniError::io(
                    format!("running plugin {} ({})", plugin_type, binary.display()),
                    e,
                ))
            }
            Ok(out) => {
                if let Some(r) = rec.as_mut() {
                    r.stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                    r.stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                    r.exit_code = out.status.code();
                    r.signal = out.status.signal();
                }
                if out.status.success() {
                    Ok(out.stdout)
                } else {
                    Err(plugin_failure(plugin_type, command, &out))
                }
            }
        };
        if let (Some(t), Some(r)) = (&self.tracer, rec) {
            t(&r);
        }
        result
    }
}

fn plugin_failure(plugin: &str, command: Command, out: &std::process::Output) -> CniError {
    // SPEC: the error object is printed on stdout; some plugins print it on stderr.
    for stream in [&out.stdout, &out.stderr] {
        if let Ok(error) = serde_json::from_slice::<PluginError>(stream) {
            return CniError::Plugin {
                plugin: plugin.into(),
                command: command.as_str(),
                error,
            };
        }
    }
    let status = match (out.status.code(), out.status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown status".into(),
    };
    CniError::PluginExit {
        plugin: plugin.into(),
        command: command.as_str(),
        status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

enum RunError {
    Timeout,
    Io(std::io::Error),
}

/// Starts `cmd`, again after a moment when its binary is busy (ETXTBSY): a plugin being
/// installed, or a write descriptor to it that a fork elsewhere in this process has not
/// closed yet. libcni retries the same way.
async fn spawn(cmd: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let mut delay = Duration::from_millis(100);
    for _ in 0..5 {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => return other,
        }
    }
    cmd.spawn()
}

async fn run(
    mut cmd: tokio::process::Command,
    stdin: &[u8],
    timeout: Duration,
) -> std::result::Result<std::process::Output, RunError> {
    let mut child = spawn(&mut cmd).await.map_err(RunError::Io)?;
    let mut pipe = child.stdin.take();
    let write = async move {
        if let Some(p) = pipe.as_mut() {
            // A plugin that exits without reading its stdin gives EPIPE: not our error.
            let _ = p.write_all(stdin).await;
        }
        drop(pipe);
    };
    let work = async move {
        let ((), out) = tokio::join!(write, child.wait_with_output());
        out
    };
    // On timeout the future (and the child, kill_on_drop) is dropped: SIGKILL + reaped.
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r.map_err(RunError::Io),
        Err(_) => Err(RunError::Timeout),
    }
}

/// Find `plugin_type` in `dirs`.
pub fn find_plugin(plugin_type: &str, dirs: &[PathBuf]) -> Result<PathBuf> {
    if plugin_type.is_empty() || plugin_type.contains('/') {
        return Err(CniError::InvalidArgument {
            what: "plugin type".into(),
            reason: format!("{plugin_type:?} must be a plain binary name"),
        });
    }
    for dir in dirs {
        let cand = dir.join(plugin_type);
        if is_executable(&cand) {
            return Ok(cand);
        }
    }
    Err(CniError::PluginNotFound {
        plugin: plugin_type.into(),
        searched: dirs.to_vec(),
    })
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Split a `:`-separated path list (empty elements dropped).
pub fn split_paths(s: &str) -> Vec<PathBuf> {
    s.split(':')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

fn join_paths(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// Default plugin dirs as paths.
pub fn default_plugin_dirs() -> Vec<PathBuf> {
    DEFAULT_PLUGIN_DIRS.iter().map(PathBuf::from).collect()
}
