//! Runs the real `ferrolet-cri` binary against the test containerd, on a socket in a scratch
//! dir, and connects CRI clients to it; [`RuntimeApi`] wraps the RuntimeService for tests,
//! [`poll`] waits on a condition with a deadline, and [`parse_cri_log`] reads container logs.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolet_proto::cri::image_service_client::ImageServiceClient;
use ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient;
use ferrolet_proto::cri::{
    Container, ContainerEventResponse, ContainerFilter, ContainerStats, ContainerStatsRequest,
    ContainerStatus, ContainerStatusRequest, CreateContainerRequest, ExecSyncRequest,
    ExecSyncResponse, GetEventsRequest, ListContainersRequest, ListPodSandboxRequest, PodSandbox,
    PodSandboxConfig, PodSandboxFilter, PodSandboxStats, PodSandboxStatsRequest,
    PodSandboxStatusRequest, PodSandboxStatusResponse, RemoveContainerRequest,
    RemovePodSandboxRequest, ReopenContainerLogRequest, RunPodSandboxRequest, RuntimeCondition,
    StartContainerRequest, StatusRequest, StopContainerRequest, StopPodSandboxRequest,
};
use ferrolet_proto::transport;
use tonic::Status;
use tonic::transport::Channel;

use crate::containerd::{TestNamespace, containerd};
use crate::scratch::Scratch;
use crate::{leak, workspace_binary};
use ferrolet_proto::containerd::services::v1::{
    DeleteImageRequest, ListImagesRequest as CdListImages,
};
use ferrolet_proto::cri::{ImageSpec, ListImagesRequest, RemoveImageRequest};

/// A running `ferrolet-cri`, killed on drop. Its calls take `&self`, so a fault injector can
/// kill and restart it while other tasks use the node.
pub struct CriServer {
    child: Mutex<Option<Child>>,
    socket: PathBuf,
    log: PathBuf,
    args: Vec<String>,
}

impl CriServer {
    /// Starts `ferrolet-cri` with `config` (TOML text) written into `dir`, serving on
    /// `dir/cri.sock`, and waits until the socket answers.
    pub fn start(dir: &Path, config: &str) -> Self {
        let config_path = dir.join("ferrolet-cri.toml");
        // A top-level key, so before any table of the test's.
        let config = if crate::cgroups::systemd_driver() {
            format!("systemd_cgroup = true\n{config}")
        } else {
            config.to_string()
        };
        std::fs::write(&config_path, config).unwrap_or_else(|e| panic!("writing config: {e}"));
        let socket = dir.join("cri.sock");
        let args = vec![
            "--config".to_string(),
            config_path.display().to_string(),
            "--listen".to_string(),
            format!("unix://{}", socket.display()),
        ];
        let server = Self {
            child: Mutex::new(None),
            socket,
            log: dir.join("ferrolet-cri.log"),
            args,
        };
        server.spawn();
        server
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spawn(&self) {
        if let Err(e) = self.try_spawn(Duration::from_secs(60)) {
            panic!("{e}");
        }
    }

    /// Starts it and waits up to `limit` for its socket to answer; says why it did not
    /// (it exited: containerd may be down) instead of panicking.
    pub fn try_spawn(&self, limit: Duration) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("opening {}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = crate::daemon_command(workspace_binary("ferrolet-cri"))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawning ferrolet-cri: {e}"))?;
        leak::register_daemon(child.id());
        *self.slot() = Some(child);
        self.wait_ready(limit)
    }

    fn wait_ready(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            let exited = self
                .slot()
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.slot().take();
                return Err(format!(
                    "ferrolet-cri exited with {status}:\n{}",
                    crate::pods::log_tail(&self.log_text(), 40)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "ferrolet-cri did not listen within {limit:?}:\n{}",
            crate::pods::log_tail(&self.log_text(), 40)
        ))
    }

    /// How it exited, if it did by itself (a crash: nothing here killed it).
    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        let mut slot = self.slot();
        let status = slot.as_mut()?.try_wait().ok().flatten()?;
        slot.take();
        Some(status)
    }

    /// Everything it has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The CRI endpoint.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Its pid (0 while it is not running).
    pub fn pid(&self) -> u32 {
        self.slot().as_ref().map(Child::id).unwrap_or_default()
    }

    /// Stops it with SIGTERM and waits; returns whether it exited 0.
    pub fn terminate(&self) -> bool {
        let Some(mut child) = self.slot().take() else {
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

    /// Kills it with SIGKILL (a crash) and reaps it, without starting it again.
    pub fn kill(&self) {
        if let Some(mut child) = self.slot().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again with the same arguments after [`CriServer::kill`] or
    /// [`CriServer::terminate`], and waits until the socket answers.
    pub fn respawn(&self) {
        self.kill();
        self.spawn();
    }

    /// Kills it with SIGKILL (a crash) and starts it again with the same arguments.
    pub fn restart_after_kill(&self) {
        self.kill();
        self.spawn();
    }

    /// Whether the socket file exists.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

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
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// RuntimeService helpers: a client wrapper whose calls take `&self` (so polling closures can
// share it), deadline polling, and the CRI container log format.

/// A RuntimeService client for tests: every call takes `&self` (the channel is cloned per
/// call), and every sandbox or container id it is handed back is remembered, so teardown and
/// the leak checks know what the test made.
#[derive(Clone)]
pub struct RuntimeApi {
    client: RuntimeServiceClient<Channel>,
    created: Arc<Mutex<Vec<String>>>,
}

impl RuntimeApi {
    /// Wraps a connected client; ids it creates are appended to `created`.
    pub fn new(client: RuntimeServiceClient<Channel>, created: Arc<Mutex<Vec<String>>>) -> Self {
        Self { client, created }
    }

    /// The raw client, for calls without a helper.
    pub fn client(&self) -> RuntimeServiceClient<Channel> {
        self.client.clone()
    }

    fn remember(&self, id: &str) {
        if let Ok(mut ids) = self.created.lock()
            && !ids.iter().any(|i| i == id)
        {
            ids.push(id.to_string());
        }
    }

    /// Every id this API (and its clones) has created.
    pub fn created_ids(&self) -> Vec<String> {
        self.created.lock().map(|i| i.clone()).unwrap_or_default()
    }

    /// RunPodSandbox with the default runtime handler.
    pub async fn run_pod(&self, config: &PodSandboxConfig) -> Result<String, Status> {
        self.run_pod_with_handler(config, "").await
    }

    /// RunPodSandbox with `handler`.
    pub async fn run_pod_with_handler(
        &self,
        config: &PodSandboxConfig,
        handler: &str,
    ) -> Result<String, Status> {
        let id = self
            .client()
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: handler.to_string(),
            })
            .await?
            .into_inner()
            .pod_sandbox_id;
        self.remember(&id);
        Ok(id)
    }

    /// PodSandboxStatus, verbose.
    pub async fn pod_status(&self, id: &str) -> Result<PodSandboxStatusResponse, Status> {
        Ok(self
            .client()
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: true,
            })
            .await?
            .into_inner())
    }

    /// StopPodSandbox.
    pub async fn stop_pod(&self, id: &str) -> Result<(), Status> {
        self.client()
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .map(drop)
    }

    /// RemovePodSandbox.
    pub async fn remove_pod(&self, id: &str) -> Result<(), Status> {
        self.client()
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .map(drop)
    }

    /// ListPodSandbox with `filter`.
    pub async fn list_pods(
        &self,
        filter: Option<PodSandboxFilter>,
    ) -> Result<Vec<PodSandbox>, Status> {
        Ok(self
            .client()
            .list_pod_sandbox(ListPodSandboxRequest { filter })
            .await?
            .into_inner()
            .items)
    }

    /// CreateContainer in `pod_id` (whose config was `pod`).
    pub async fn create_container(
        &self,
        pod_id: &str,
        pod: &PodSandboxConfig,
        config: &ferrolet_proto::cri::ContainerConfig,
    ) -> Result<String, Status> {
        let id = self
            .client()
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod_id.to_string(),
                config: Some(config.clone()),
                sandbox_config: Some(pod.clone()),
            })
            .await?
            .into_inner()
            .container_id;
        self.remember(&id);
        Ok(id)
    }

    /// StartContainer.
    pub async fn start_container(&self, id: &str) -> Result<(), Status> {
        self.client()
            .start_container(StartContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .map(drop)
    }

    /// CreateContainer then StartContainer.
    pub async fn run_container(
        &self,
        pod_id: &str,
        pod: &PodSandboxConfig,
        config: &ferrolet_proto::cri::ContainerConfig,
    ) -> Result<String, Status> {
        let id = self.create_container(pod_id, pod, config).await?;
        self.start_container(&id).await?;
        Ok(id)
    }

    /// StopContainer with a grace period of `timeout_secs`.
    pub async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), Status> {
        self.client()
            .stop_container(StopContainerRequest {
                container_id: id.to_string(),
                timeout: timeout_secs,
            })
            .await
            .map(drop)
    }

    /// RemoveContainer.
    pub async fn remove_container(&self, id: &str) -> Result<(), Status> {
        self.client()
            .remove_container(RemoveContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .map(drop)
    }

    /// ContainerStatus (not verbose); the status itself.
    pub async fn container_status(&self, id: &str) -> Result<ContainerStatus, Status> {
        self.container_status_verbose(id, false)
            .await
            .map(|(status, _)| status)
    }

    /// ContainerStatus with its `info` map.
    pub async fn container_status_verbose(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<(ContainerStatus, HashMap<String, String>), Status> {
        let r = self
            .client()
            .container_status(ContainerStatusRequest {
                container_id: id.to_string(),
                verbose,
            })
            .await?
            .into_inner();
        let status = r
            .status
            .ok_or_else(|| Status::internal(format!("ContainerStatus of {id}: no status")))?;
        Ok((status, r.info))
    }

    /// ListContainers with `filter`.
    pub async fn list_containers(
        &self,
        filter: Option<ContainerFilter>,
    ) -> Result<Vec<Container>, Status> {
        Ok(self
            .client()
            .list_containers(ListContainersRequest { filter })
            .await?
            .into_inner()
            .containers)
    }

    /// ExecSync of `cmd` with a timeout in seconds (0: none).
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: &[&str],
        timeout_secs: i64,
    ) -> Result<ExecSyncResponse, Status> {
        Ok(self
            .client()
            .exec_sync(ExecSyncRequest {
                container_id: id.to_string(),
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                timeout: timeout_secs,
            })
            .await?
            .into_inner())
    }

    /// `sh -c script` through ExecSync (30 s): the exit code and stdout followed by stderr.
    ///
    /// # Panics
    /// If the call fails.
    pub async fn sh(&self, id: &str, script: &str) -> (i32, String) {
        let r = self
            .exec_sync(id, &["sh", "-c", script], 30)
            .await
            .unwrap_or_else(|e| panic!("exec sh -c {script:?} in {id}: {e}"));
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&r.stdout),
            String::from_utf8_lossy(&r.stderr)
        );
        (r.exit_code, out)
    }

    /// ExecSync that must exit 0; returns stdout as text.
    ///
    /// # Panics
    /// If the call fails or the command exits non-zero.
    pub async fn exec_ok(&self, id: &str, cmd: &[&str]) -> String {
        match self.exec_sync(id, cmd, 30).await {
            Ok(r) if r.exit_code == 0 => String::from_utf8_lossy(&r.stdout).into_owned(),
            Ok(r) => panic!(
                "exec {cmd:?} in {id} exited {}: stdout {:?} stderr {:?}",
                r.exit_code,
                String::from_utf8_lossy(&r.stdout),
                String::from_utf8_lossy(&r.stderr)
            ),
            Err(e) => panic!("exec {cmd:?} in {id}: {e}"),
        }
    }

    /// ReopenContainerLog.
    pub async fn reopen_log(&self, id: &str) -> Result<(), Status> {
        self.client()
            .reopen_container_log(ReopenContainerLogRequest {
                container_id: id.to_string(),
            })
            .await
            .map(drop)
    }

    /// ContainerStats.
    pub async fn container_stats(&self, id: &str) -> Result<ContainerStats, Status> {
        self.client()
            .container_stats(ContainerStatsRequest {
                container_id: id.to_string(),
            })
            .await?
            .into_inner()
            .stats
            .ok_or_else(|| Status::internal(format!("ContainerStats of {id}: no stats")))
    }

    /// PodSandboxStats.
    pub async fn pod_stats(&self, id: &str) -> Result<PodSandboxStats, Status> {
        self.client()
            .pod_sandbox_stats(PodSandboxStatsRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await?
            .into_inner()
            .stats
            .ok_or_else(|| Status::internal(format!("PodSandboxStats of {id}: no stats")))
    }

    /// Status (verbose): the runtime's conditions.
    pub async fn conditions(&self) -> Result<Vec<RuntimeCondition>, Status> {
        Ok(self
            .client()
            .status(StatusRequest { verbose: true })
            .await?
            .into_inner()
            .status
            .map(|s| s.conditions)
            .unwrap_or_default())
    }

    /// A GetContainerEvents stream.
    pub async fn events(&self) -> Result<tonic::Streaming<ContainerEventResponse>, Status> {
        Ok(self
            .client()
            .get_container_events(GetEventsRequest {})
            .await?
            .into_inner())
    }

    /// Polls ContainerStatus until the container has exited.
    ///
    /// # Panics
    /// If it has not within `limit`, or the status call fails.
    pub async fn wait_exited(&self, id: &str, limit: Duration) -> ContainerStatus {
        poll(&format!("container {id} to exit"), limit, || async {
            let s = self
                .container_status(id)
                .await
                .map_err(|e| format!("ContainerStatus: {e}"))?;
            if s.state == ferrolet_proto::cri::ContainerState::ContainerExited as i32 {
                Ok(s)
            } else {
                Err(format!("state {}", s.state))
            }
        })
        .await
    }
}

impl CriServer {
    /// A [`RuntimeApi`] recording the ids it creates into `created`.
    pub async fn runtime_api(&self, created: Arc<Mutex<Vec<String>>>) -> RuntimeApi {
        RuntimeApi::new(self.runtime().await, created)
    }
}

/// Calls `attempt` until it returns `Ok`, sleeping between tries, for at most `limit`.
///
/// # Panics
/// If `limit` passes: the message names `what` and the last `Err` seen.
pub async fn poll<T, Fut>(what: &str, limit: Duration, mut attempt: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(50);
    loop {
        match attempt().await {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {limit:?} waiting for {what}; last: {last}")
            }
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        }
    }
}

/// One line of a CRI container log: `<RFC3339Nano> <stream> <P|F> <message>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// The timestamp, as written.
    pub timestamp: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// `P`: the message continues in the next line of this stream.
    pub partial: bool,
    /// The text (without the newline).
    pub message: String,
}

/// Parses a CRI log; every line must be well formed (an incomplete last line, one a writer
/// is still writing, is left out).
pub fn parse_cri_log(text: &str) -> Result<Vec<LogLine>, String> {
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => return Ok(Vec::new()),
    };
    complete
        .split('\n')
        .enumerate()
        .map(|(n, line)| {
            parse_log_line(line).map_err(|e| format!("log line {}: {e}: {line:.200?}", n + 1))
        })
        .collect()
}

fn parse_log_line(line: &str) -> Result<LogLine, String> {
    let mut fields = line.splitn(4, ' ');
    let timestamp = fields.next().unwrap_or_default();
    let stream = fields.next().ok_or("no stream")?;
    let tag = fields.next().ok_or("no tag")?;
    let message = fields.next().ok_or("no space after the tag")?;
    if !is_rfc3339(timestamp) {
        return Err(format!("timestamp {timestamp:?} is not RFC 3339"));
    }
    if stream != "stdout" && stream != "stderr" {
        return Err(format!("stream {stream:?}"));
    }
    let partial = match tag {
        "P" => true,
        "F" => false,
        // Tags may carry more flags after a ':' (reserved by the format); the first is P or F.
        t if t.starts_with("P:") => true,
        t if t.starts_with("F:") => false,
        t => return Err(format!("tag {t:?}")),
    };
    Ok(LogLine {
        timestamp: timestamp.to_string(),
        stream: stream.to_string(),
        partial,
        message: message.to_string(),
    })
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
pub fn is_rfc3339(ts: &str) -> bool {
    let b = ts.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    if b.len() < 20
        || !digits(0..4)
        || b[4] != b'-'
        || !digits(5..7)
        || b[7] != b'-'
        || !digits(8..10)
        || b[10] != b'T'
        || !digits(11..13)
        || b[13] != b':'
        || !digits(14..16)
        || b[16] != b':'
        || !digits(17..19)
    {
        return false;
    }
    let mut i = 19;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start || i - start > 9 {
            return false;
        }
    }
    match &b[i..] {
        [b'Z'] => true,
        [sign, h1, h2, b':', m1, m2] if (*sign == b'+' || *sign == b'-') => {
            [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit())
        }
        _ => false,
    }
}

/// Joins a stream's lines back into what the container wrote: partial lines continue, full
/// lines end with a newline.
pub fn reassemble(lines: &[LogLine], stream: &str) -> String {
    let mut out = String::new();
    for l in lines.iter().filter(|l| l.stream == stream) {
        out.push_str(&l.message);
        if !l.partial {
            out.push('\n');
        }
    }
    out
}

/// A ferrolet-cri of one test's own, without pods: its scratch dir, its containerd namespace
/// and the server, for the image service's tests and those of other CRI clients.
pub struct ScratchNode {
    pub scratch: Scratch,
    pub ns: TestNamespace,
    pub cri: CriServer,
}

impl ScratchNode {
    /// Starts ferrolet-cri for test `name` logging at `info`; `extra_config` is appended to
    /// its TOML.
    pub async fn start(name: &str, extra_config: &str) -> Self {
        Self::start_logging(name, "info", extra_config).await
    }

    /// The same with another log filter.
    pub async fn start_logging(name: &str, log_level: &str, extra_config: &str) -> Self {
        let scratch = Scratch::new(name);
        let ns = containerd().namespace(name).await;
        let config = format!(
            "containerd = \"{}\"\nnamespace = \"{}\"\nroot = \"{}/root\"\nlog_level = \"{log_level}\"\npull_progress_interval_secs = 1\n{extra_config}",
            containerd().socket().display(),
            ns.name,
            scratch.path().display(),
        );
        let cri = CriServer::start(scratch.path(), &config);
        Self { scratch, ns, cri }
    }

    /// Removes every image through CRI, stops ferrolet-cri, removes the pinned pause image
    /// through containerd, then checks that nothing at all is left in the namespace.
    pub async fn teardown(self) {
        let mut images = self.cri.images().await;
        let listed = list_images(&mut images).await;
        for image in listed.iter().filter(|i| !i.pinned) {
            let request = RemoveImageRequest {
                image: Some(ImageSpec {
                    image: image.id.clone(),
                    ..Default::default()
                }),
            };
            if let Err(e) = images.remove_image(request).await {
                panic!("removing image {}: {e}", image.id);
            }
        }
        let left = list_images(&mut images).await;
        assert!(
            left.iter().all(|i| i.pinned),
            "only the pause image may remain: {left:?}"
        );
        drop(self.cri);
        let records = self.ns.client.images().list(CdListImages::default()).await;
        let records = records.unwrap_or_else(|e| panic!("listing image records: {e}"));
        for record in records.into_inner().images {
            let delete = DeleteImageRequest {
                name: record.name,
                sync: true,
                target: None,
            };
            if let Err(e) = self.ns.client.images().delete(delete).await {
                panic!("deleting an image record: {e}");
            }
        }
        self.ns
            .leak_checker()
            .containerd_images()
            .assert_clean()
            .await;
        if let Err(e) = self.ns.delete().await {
            panic!("deleting namespace: {e}");
        }
        drop(self.scratch);
    }
}

async fn list_images(images: &mut ImageServiceClient<Channel>) -> Vec<ferrolet_proto::cri::Image> {
    match images.list_images(ListImagesRequest::default()).await {
        Ok(r) => r.into_inner().images,
        Err(e) => panic!("ListImages: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_log_lines_parse_with_their_tags() {
        let text = "2024-05-01T10:00:00.123456789Z stdout F hello world\n\
                    2024-05-01T10:00:00.2+02:00 stderr P part\n\
                    2024-05-01T10:00:01Z stderr F \n\
                    2024-05-01T10:00:01Z stdout F incomplete";
        let lines = parse_cri_log(text).unwrap_or_default();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0].message, "hello world");
        assert!(!lines[0].partial);
        assert_eq!(
            (lines[1].stream.as_str(), lines[1].partial),
            ("stderr", true)
        );
        assert_eq!(lines[2].message, "");
        assert_eq!(reassemble(&lines, "stderr"), "part\n");
        assert_eq!(reassemble(&lines, "stdout"), "hello world\n");
    }

    #[test]
    fn malformed_cri_log_lines_are_rejected() {
        for bad in [
            "2024-05-01 10:00:00Z stdout F x\n",
            "2024-05-01T10:00:00Z stdin F x\n",
            "2024-05-01T10:00:00Z stdout X x\n",
            "2024-05-01T10:00:00Z stdout F\n",
            "plain text\n",
        ] {
            assert!(parse_cri_log(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn rfc3339_timestamps() {
        assert!(is_rfc3339("2024-05-01T10:00:00Z"));
        assert!(is_rfc3339("2024-05-01T10:00:00.000000001-07:00"));
        assert!(!is_rfc3339("2024-05-01T10:00:00.Z"));
        assert!(!is_rfc3339("2024-05-01T10:00:00.1234567890Z"));
        assert!(!is_rfc3339("2024-05-01T10:00:00"));
    }
}
