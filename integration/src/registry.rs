//! Private registries for tests that must watch or break one (count blob downloads, stop it
//! mid-transfer): Debian's `docker-registry` on a free loopback port, storage in a scratch dir.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::leak;

/// Where `make env` keeps the test images' OCI layouts.
pub const IMAGES_DIR: &str = "/var/lib/ferrolet/images";
/// The environment's open registry.
pub const OPEN_REGISTRY: &str = "127.0.0.1:5000";
/// The environment's registry with basic auth.
pub const AUTH_REGISTRY: &str = "127.0.0.1:5001";
/// `user:password` for [`AUTH_REGISTRY`].
pub const AUTH_FILE: &str = "/var/lib/ferrolet/env/registry-auth";

/// Credentials of the environment's auth registry.
///
/// # Panics
/// If `make env` has not run.
pub fn auth_credentials() -> (String, String) {
    let text = std::fs::read_to_string(AUTH_FILE)
        .unwrap_or_else(|e| panic!("reading {AUTH_FILE} (run `make env`): {e}"));
    let (user, pass) = text
        .trim()
        .split_once(':')
        .unwrap_or_else(|| panic!("{AUTH_FILE} is not user:password"));
    (user.to_string(), pass.to_string())
}

/// A registry of one test, stopped on drop.
pub struct TestRegistry {
    child: Option<Child>,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    log: PathBuf,
    config: PathBuf,
}

impl TestRegistry {
    /// Starts a registry with its storage and log under `dir`.
    pub fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("finding a free port: {e}"));
        let addr = format!("127.0.0.1:{port}");
        let storage = dir.join("registry-data");
        let config = dir.join("registry.yml");
        std::fs::create_dir_all(&storage).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: info}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp:\n  addr: {addr}\n",
                storage.display()
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut registry = Self {
            child: None,
            addr,
            log: dir.join("registry.log"),
            config,
        };
        registry.restart();
        registry
    }

    /// Starts it (again, after [`TestRegistry::kill`]) on the same address and storage, and
    /// waits until it accepts connections.
    ///
    /// # Panics
    /// If it cannot be started or does not come up.
    pub fn restart(&mut self) {
        self.kill();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("{e}"));
        let err = out.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let child = crate::daemon_command("docker-registry")
            .arg("serve")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting docker-registry (run `make env`): {e}"));
        leak::register_daemon(child.id());
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while std::net::TcpStream::connect(&self.addr).is_err() {
            assert!(Instant::now() < deadline, "registry did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Pushes the OCI layout `layout` (tag `1`) as `<addr>/<repo>:1`, digests preserved.
    pub fn push(&self, layout: &Path, repo: &str) {
        let status = Command::new("skopeo")
            .args([
                "copy",
                "-q",
                "--preserve-digests",
                "--dest-tls-verify=false",
            ])
            .arg(format!("oci:{}:1", layout.display()))
            .arg(format!("docker://{}/{repo}:1", self.addr))
            .status()
            .unwrap_or_else(|e| panic!("running skopeo: {e}"));
        assert!(status.success(), "skopeo push of {repo} failed");
    }

    /// How many GETs of the blob `digest` the registry has logged.
    pub fn blob_gets(&self, digest: &str) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let needle = format!("/blobs/{digest}");
        log.lines()
            .filter(|l| l.contains("\"GET ") && l.contains(&needle))
            .count()
    }

    /// Kills it (an outage, or a transfer cut short).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        self.kill();
    }
}
