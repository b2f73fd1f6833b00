//! Runs the real `ferrolet-cri` binary against the test containerd, on a socket in a scratch
//! dir, and connects CRI clients to it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferrolet_proto::cri::image_service_client::ImageServiceClient;
use ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient;
use ferrolet_proto::transport;
use tonic::transport::Channel;

use crate::{leak, workspace_binary};

/// A running `ferrolet-cri`, killed on drop.
pub struct CriServer {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
    args: Vec<String>,
}

impl CriServer {
    /// Starts `ferrolet-cri` with `config` (TOML text) written into `dir`, serving on
    /// `dir/cri.sock`, and waits until the socket answers.
    pub fn start(dir: &Path, config: &str) -> Self {
        let config_path = dir.join("ferrolet-cri.toml");
        std::fs::write(&config_path, config).unwrap_or_else(|e| panic!("writing config: {e}"));
        let socket = dir.join("cri.sock");
        let args = vec![
            "--config".to_string(),
            config_path.display().to_string(),
            "--listen".to_string(),
            format!("unix://{}", socket.display()),
        ];
        let mut server = Self {
            child: None,
            socket,
            log: dir.join("ferrolet-cri.log"),
            args,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.log.display()));
        let err = log.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(workspace_binary("ferrolet-cri"))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning ferrolet-cri: {e}"));
        leak::register_daemon(child.id());
        self.child = Some(child);
        self.wait_ready(Duration::from_secs(60));
    }

    fn wait_ready(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("ferrolet-cri exited with {status}:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "ferrolet-cri did not listen within {limit:?}:\n{}",
            self.log_text()
        );
    }

    /// Everything it has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The CRI endpoint.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or_default()
    }

    /// Stops it with SIGTERM and waits; returns whether it exited 0.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }

    /// Kills it with SIGKILL (a crash) and starts it again with the same arguments.
    pub fn restart_after_kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.spawn();
    }

    /// Whether the socket file exists.
    pub fn socket_exists(&self) -> bool {
        self.socket.exists()
    }

    /// A connected channel.
    pub async fn channel(&self) -> Channel {
        transport::connect(&self.endpoint())
            .await
            .unwrap_or_else(|e| panic!("connecting to ferrolet-cri: {e}"))
    }

    /// An ImageService client.
    pub async fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel().await)
    }

    /// A RuntimeService client.
    pub async fn runtime(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.channel().await)
    }
}

impl Drop for CriServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
