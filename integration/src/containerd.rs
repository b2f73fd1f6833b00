//! One private containerd per test binary: its own root, state and socket under a scratch dir,
//! its CRI plugin off, stopped (and everything under it unmounted) when the process exits.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::DeleteNamespaceRequest;
use ferrolet_proto::containerd::services::v1::snapshots::{Info, ListSnapshotsRequest};

use crate::leak::{self, LeakChecker};
use crate::scratch::{self, SCRATCH_ROOT};

/// Snapshotter every test uses (overlayfs works on this machine's ext4).
pub const SNAPSHOTTER: &str = "overlayfs";

/// Every snapshot of [`SNAPSHOTTER`] in `cd`'s namespace, all pages of the stream.
pub async fn list_snapshots(cd: &Containerd) -> Result<Vec<Info>, tonic::Status> {
    let mut stream = cd
        .snapshots()
        .list(ListSnapshotsRequest {
            snapshotter: SNAPSHOTTER.into(),
            filters: Vec::new(),
        })
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(page) = stream.message().await? {
        out.extend(page.info);
    }
    Ok(out)
}

/// The containerd the tests run: `containerd` on PATH (the system's), or the one in
/// `FERROLET_CONTAINERD_BIN` (containerd 2.x from `scripts/containerd2.sh`).
pub fn containerd_binary() -> std::path::PathBuf {
    match std::env::var_os("FERROLET_CONTAINERD_BIN") {
        Some(dir) if !dir.is_empty() => Path::new(&dir).join("containerd"),
        _ => "containerd".into(),
    }
}

/// `command` (running [`containerd_binary`]) with, first on PATH, the workspace's binary dir
/// (where the `ferrolet-cri` the tests run is, and beside it Ferrolet's shim
/// `containerd-shim-ferrolet-v1`), then that containerd's own dir: containerd looks for a
/// runtime type's shim (`containerd-shim-<name>-<version>`) on its PATH.
pub fn containerd_command(mut command: std::process::Command) -> std::process::Command {
    command.env("PATH", shim_path());
    command
}

/// The PATH [`containerd_command`] gives containerd.
fn shim_path() -> std::ffi::OsString {
    let mut paths = vec![crate::workspace_bin_dir()];
    if let Some(dir) = std::env::var_os("FERROLET_CONTAINERD_BIN").filter(|d| !d.is_empty()) {
        paths.push(PathBuf::from(dir));
    }
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    // A dir holding the PATH separator cannot be on a PATH; the system PATH then, which
    // finds the runc shim still.
    std::env::join_paths(paths).unwrap_or_else(|_| std::env::var_os("PATH").unwrap_or_default())
}

/// The `(major, minor)` version of [`containerd_binary`], from `containerd --version`
/// (`containerd github.com/containerd/containerd 1.6.20~ds1 ...`, `... v2.1.9 ...`).
///
/// # Panics
/// If containerd cannot be run or its version not read: a test that branches on it must not
/// guess.
pub fn containerd_version() -> (u32, u32) {
    let binary = containerd_binary();
    let out = std::process::Command::new(&binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("running {} --version: {e}", binary.display()));
    let text = String::from_utf8_lossy(&out.stdout);
    parse_version(&text).unwrap_or_else(|| panic!("no version in {text:?}"))
}

fn parse_version(text: &str) -> Option<(u32, u32)> {
    let word = text.split_whitespace().nth(2)?;
    let mut parts = word.trim_start_matches('v').split(['.', '~', '-', '+']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Says which containerd this test binary runs on, on stderr itself (not a test's captured
/// output), so every CI log shows it per binary.
pub fn record_version() {
    use std::io::Write;
    let binary = containerd_binary();
    let version = std::process::Command::new(&binary)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let _ = writeln!(
        std::io::stderr(),
        "[harness] tests run on {version} ({})",
        binary.display()
    );
}

/// A running private containerd.
#[derive(Debug)]
pub struct TestContainerd {
    dir: PathBuf,
    socket: PathBuf,
    pid: AtomicU32,
}

static DAEMON: OnceLock<Result<TestContainerd, String>> = OnceLock::new();
static CHILD: Mutex<Option<Child>> = Mutex::new(None);

/// The containerd of this test binary, started on first use.
///
/// # Panics
/// If containerd cannot be started: a test that needs it cannot run without it, and must
/// fail loudly rather than pass vacuously.
pub fn containerd() -> &'static TestContainerd {
    match DAEMON.get_or_init(TestContainerd::start) {
        Ok(d) => d,
        Err(e) => panic!("starting the test containerd: {e}"),
    }
}

impl TestContainerd {
    fn start() -> Result<Self, String> {
        let dir = Path::new(SCRATCH_ROOT).join(format!("containerd-{}", std::process::id()));
        scratch::remove_tree(&dir);
        for sub in ["root", "state", "opt"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| format!("creating {}: {e}", dir.join(sub).display()))?;
        }
        let socket = dir.join("containerd.sock");
        let config = dir.join("config.toml");
        std::fs::write(&config, config_toml(&dir, &socket))
            .map_err(|e| format!("writing {}: {e}", config.display()))?;
        let daemon = Self {
            dir,
            socket,
            pid: AtomicU32::new(0),
        };
        daemon.spawn()?;
        // Stop it however the test binary ends (a failed test exits through exit(3) too).
        // SAFETY: `stop_at_exit` is a plain `extern "C" fn` that never unwinds.
        unsafe { libc::atexit(stop_at_exit) };
        daemon.wait_ready(Duration::from_secs(30))?;
        record_version();
        Ok(daemon)
    }

    fn spawn(&self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("containerd.log"))
            .map_err(|e| format!("opening containerd.log: {e}"))?;
        let err_log = log.try_clone().map_err(|e| e.to_string())?;
        let child = containerd_command(crate::daemon_command(containerd_binary()))
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(|e| format!("spawning containerd (is it installed? run `make env`): {e}"))?;
        self.pid.store(child.id(), Ordering::Relaxed);
        leak::register_daemon(child.id());
        if let Ok(mut slot) = CHILD.lock() {
            *slot = Some(child);
        }
        Ok(())
    }

    /// Kills containerd with SIGKILL (a crash: its shims and their containers live on) and
    /// leaves it down until [`TestContainerd::start_again`]. The test binary's other tests
    /// lose it meanwhile: a test that kills containerd has its binary to itself.
    pub fn kill(&self) {
        if let Ok(mut slot) = CHILD.lock()
            && let Some(mut child) = slot.take()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops containerd with SIGTERM, as systemd stops it, and waits for it to exit (SIGKILL
    /// after 10 s); its shims and their containers live on. It stays down until
    /// [`TestContainerd::start_again`], as after [`TestContainerd::kill`].
    pub fn terminate(&self) {
        if let Ok(mut slot) = CHILD.lock()
            && let Some(mut child) = slot.take()
        {
            let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts containerd again after [`TestContainerd::kill`]; returns once it answers.
    ///
    /// # Panics
    /// If it does not come back.
    pub fn start_again(&self) {
        if let Err(e) = self
            .spawn()
            .and_then(|()| self.wait_ready(Duration::from_secs(30)))
        {
            panic!("restarting the test containerd: {e}");
        }
    }

    fn wait_ready(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            if let Ok(mut slot) = CHILD.lock()
                && let Some(child) = slot.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!(
                    "containerd exited with {status}; log:\n{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "containerd did not answer on {} within {limit:?}; log:\n{}",
            self.socket.display(),
            self.log_tail()
        ))
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The daemon's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Directory holding config, root, state and log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// containerd's state dir (runtime task bundles and rootfs mounts live under it).
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// containerd's pid.
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// Connects to the daemon, scoped to `namespace`. Connect per test: a channel lives on the
    /// runtime that made it, and every `#[tokio::test]` has its own runtime.
    pub async fn connect(&self, namespace: &str) -> Containerd {
        let endpoint = self.socket.to_string_lossy().into_owned();
        match Containerd::connect(&endpoint, namespace).await {
            Ok(c) => c,
            Err(e) => panic!("connecting to the test containerd: {e}"),
        }
    }

    /// A fresh namespace for one test, named after it.
    pub async fn namespace(&'static self, test: &str) -> TestNamespace {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("{test}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let client = self.connect(&name).await;
        TestNamespace {
            daemon: self,
            name,
            client,
        }
    }
}

/// The test containerd down until this is dropped: at the test's word, or when the test
/// panics meanwhile, so the binary's next test finds containerd running. A test that takes
/// containerd down has its binary to itself (its tests take turns).
pub struct ContainerdDown(());

impl ContainerdDown {
    /// Kills containerd with SIGKILL (a crash).
    pub fn killed() -> Self {
        containerd().kill();
        Self(())
    }

    /// Stops containerd with SIGTERM (a service stop or restart).
    pub fn terminated() -> Self {
        containerd().terminate();
        Self(())
    }
}

impl Drop for ContainerdDown {
    fn drop(&mut self) {
        containerd().start_again();
    }
}

/// A containerd namespace owned by one test.
pub struct TestNamespace {
    daemon: &'static TestContainerd,
    /// The namespace's name.
    pub name: String,
    /// A client scoped to it.
    pub client: Containerd,
}

impl TestNamespace {
    /// A leak checker covering this namespace: its containers, tasks, snapshots and leases,
    /// task mounts, and shim processes.
    pub fn leak_checker(&self) -> LeakChecker {
        LeakChecker::new()
            .containerd(self.client.clone())
            .mounts_under(
                self.daemon
                    .state()
                    .join("io.containerd.runtime.v2.task")
                    .join(&self.name),
            )
            .processes_mentioning(format!("-namespace {} ", self.name))
            .shims_of(self.daemon.socket(), &self.name)
    }

    /// Deletes the namespace; containerd refuses while anything is left in it, which makes
    /// this a final check as well. A namespace nothing was ever written to does not exist.
    pub async fn delete(self) -> Result<(), tonic::Status> {
        match self
            .client
            .namespaces()
            .delete(DeleteNamespaceRequest {
                name: self.name.clone(),
            })
            .await
        {
            Err(s) if s.code() != tonic::Code::NotFound => Err(s),
            _ => Ok(()),
        }
    }
}

extern "C" fn stop_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(Ok(d)) = DAEMON.get() {
            d.stop();
        }
    });
}

impl TestContainerd {
    fn stop(&self) {
        self.terminate();
        // Shims outlive containerd by design; any still running belong to a test that leaked
        // them (its leak check has already failed), so end them before unmounting.
        kill_processes_mentioning(&self.socket.to_string_lossy());
        scratch::remove_tree(&self.dir);
    }
}

/// SIGKILLs every process but this one whose command line (arguments joined by spaces, so
/// a needle may span two) contains `needle`.
pub(crate) fn kill_processes_mentioning(needle: &str) {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return;
    };
    for pid in rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if pid as u32 != std::process::id() && cmdline.contains(needle) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// containerd's config (the project's one template): everything under `dir`.
pub fn config_toml(dir: &Path, socket: &Path) -> String {
    include_str!("../../scripts/containerd.toml.in")
        .replace("@ROOT@", &dir.join("root").display().to_string())
        .replace("@STATE@", &dir.join("state").display().to_string())
        .replace("@SOCKET@", &socket.display().to_string())
        .replace("@OPT@", &dir.join("opt").display().to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::parse_version;

    #[test]
    fn versions_of_debian_and_upstream_builds() {
        assert_eq!(
            parse_version("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1\n"),
            Some((1, 6))
        );
        assert_eq!(
            parse_version("containerd github.com/containerd/containerd/v2 v2.1.9 abc\n"),
            Some((2, 1))
        );
        assert_eq!(parse_version("garbage"), None);
    }
}
