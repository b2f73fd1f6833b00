//! `ferrolet-stream-bench`: the streaming benchmark for any CRI endpoint (ferrolet-cri, containerd's
//! CRI plugin). In one pod of its own it measures the exec round trip of `true` (the CRI `Exec`
//! call, the upgrade, the streams, the exit code received) over SPDY and WebSocket, and
//! port-forward throughput to busybox's httpd serving a 64 MiB file (the `big` test image), with
//! one connection and with four at once. `compare A.json B.json` puts two runs side by side with
//! the ratios A/B.
//!
//! Everything a run creates carries the label `ferrolet.bench/run=<run id>` (as
//! `ferrolet-cri-bench`'s pods, so its `clean` finds them) and is removed at the end, also after
//! an error or Ctrl-C.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand, ValueEnum};
use ferrolet_integration::bench::{
    deadline, ensure_image, install_signal_thread, percentile, run_id,
};
use ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient;
use ferrolet_proto::cri::{
    ContainerConfig, ContainerMetadata, CreateContainerRequest, ExecRequest, ImageSpec,
    LinuxPodSandboxConfig, PodSandboxConfig, PodSandboxMetadata, PortForwardRequest,
    RemoveContainerRequest, RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest,
    StopContainerRequest, StopPodSandboxRequest, VersionRequest,
};
use ferrolet_proto::streaming::client::{self, ForwardedPort, Target, Transport};
use ferrolet_proto::streaming::{CommandResult, StreamOptions};
use ferrolet_proto::transport;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tonic::transport::Channel;

/// Label on the sandbox and containers a run creates; its value is the run id.
const RUN_LABEL: &str = "ferrolet.bench/run";
/// Kubernetes namespace of the benchmark's pod.
const POD_NAMESPACE: &str = "ferrolet-bench";
/// A long sleep that ends at once on SIGTERM (as PID 1 a plain `sleep` ignores it).
const SLEEP: &str = "trap 'exit 0' TERM; sleep 1000000 & wait";
/// The port busybox's httpd listens on inside the pod.
const HTTP_PORT: u16 = 8080;
/// What the port-forward fetches: the `big` image's file, served from `/`.
const BIG_PATH: &str = "/big.bin";
/// How long one exec or one fetch may take before the run fails.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Parser, Debug)]
#[command(
    name = "ferrolet-stream-bench",
    about = "Streaming benchmark for a CRI endpoint: exec round trip and port-forward throughput",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print two `--json` reports side by side with the ratios A/B.
    Compare {
        /// Report of the runtime under test (e.g. ferrolet-cri).
        a: PathBuf,
        /// Report of the reference runtime (e.g. containerd's CRI).
        b: PathBuf,
    },
    /// Print one `--json` report made of several runs' (short rounds of the same runtime,
    /// alternated with another's so that both meet the same machine): samples pooled, figures
    /// recomputed.
    Merge {
        /// The runs' reports, in order (the first gives the label and endpoint).
        #[arg(required = true)]
        reports: Vec<PathBuf>,
    },
    /// Write a client CA (`ca.crt`, for ferrolet's `clientCAFile`) and a client certificate
    /// signed by it (`client.crt`, `client.key`: user `stream-bench`, group `system:masters`).
    Pki {
        /// Directory to write them to (created if missing).
        dir: PathBuf,
    },
}

/// The transports a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TransportArg {
    Spdy,
    Websocket,
}

impl TransportArg {
    fn transport(self) -> Transport {
        match self {
            TransportArg::Spdy => Transport::Spdy,
            TransportArg::Websocket => Transport::WebSocket,
        }
    }

    fn name(self) -> &'static str {
        match self {
            TransportArg::Spdy => "SPDY",
            TransportArg::Websocket => "WebSocket",
        }
    }
}

/// Flags of a benchmark run.
#[derive(clap::Args, Debug, Clone)]
struct RunArgs {
    /// CRI endpoint (runtime and image service), unix:///path.
    #[arg(long, default_value = "unix:///run/ferrolet/cri.sock")]
    endpoint: String,
    /// Name of this run in the table and the JSON (default: the runtime's name).
    #[arg(long)]
    label: Option<String>,
    /// Print the report as JSON on stdout (the table then goes to stderr).
    #[arg(long)]
    json: bool,
    /// Timed exec round trips per transport.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    execs: u32,
    /// Untimed execs first, per transport.
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// Port-forward rounds per transport and connection count (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
    /// Concurrent connections of the multi-connection port-forward figure.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=64))]
    connections: u32,
    /// Transports to measure, in order.
    #[arg(long, value_delimiter = ',', default_value = "spdy,websocket")]
    transports: Vec<TransportArg>,
    /// Image of the exec container (needs `true` and `sh`).
    #[arg(long, default_value = "127.0.0.1:5000/ferrolet/busybox:1")]
    busybox_image: String,
    /// Image of the port-forward server: busybox with the file it serves at `/big.bin`.
    #[arg(long, default_value = "127.0.0.1:5000/ferrolet/big:1")]
    big_image: String,
    /// Client-side deadline of each RPC, seconds.
    #[arg(long, default_value_t = 120)]
    rpc_timeout: u64,
    /// Directory for the sandbox's log directory (a fresh temp dir inside it is used).
    #[arg(long, default_value = "/tmp")]
    log_root: PathBuf,
    /// Go through ferrolet's secure port (host:port) instead of calling the runtime: its
    /// `/exec` and `/portForward` on the static pod `--pod` (containers `box` and `web`, as
    /// scripts/bench-stream.sh writes it); the CRI endpoint is then not used.
    #[arg(long, requires_all = ["kubelet_ca", "pki", "pod"])]
    kubelet: Option<String>,
    /// The certificate ferrolet serves with (`<root-dir>/pki/kubelet.crt`), trusted alone.
    #[arg(long)]
    kubelet_ca: Option<PathBuf>,
    /// The directory `pki` wrote (the client certificate and key are read from it).
    #[arg(long)]
    pki: Option<PathBuf>,
    /// The pod, `namespace/name`.
    #[arg(long)]
    pod: Option<String>,
}

/// Exec round trips over one transport.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
struct ExecStats {
    transport: String,
    /// The subprotocol the server chose.
    protocol: String,
    n: usize,
    p50_ms: f64,
    p99_ms: f64,
    mean_ms: f64,
    max_ms: f64,
    samples_ms: Vec<f64>,
    /// Why this transport has no figures (e.g. the server does not speak it).
    error: Option<String>,
}

/// Port-forward throughput over one transport with a number of concurrent connections.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
struct ForwardStats {
    transport: String,
    connections: u32,
    /// Median over the rounds of all connections' bytes / wall time, MB/s (10^6 bytes).
    median_mb_s: f64,
    samples_mb_s: Vec<f64>,
    /// Body bytes each connection received per round.
    bytes_per_connection: u64,
    error: Option<String>,
}

impl ExecStats {
    /// Takes `samples` (ms, any order) and the figures computed from them.
    fn set_samples(&mut self, mut samples: Vec<f64>) {
        samples.sort_by(f64::total_cmp);
        self.n = samples.len();
        self.p50_ms = percentile(&samples, 50.0);
        self.p99_ms = percentile(&samples, 99.0);
        self.mean_ms = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
        self.max_ms = samples.last().copied().unwrap_or(0.0);
        self.samples_ms = samples;
    }
}

impl ForwardStats {
    /// Takes the rounds' `samples` (MB/s, in round order) and their median.
    fn set_samples(&mut self, samples: Vec<f64>) {
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        self.median_mb_s = percentile(&sorted, 50.0);
        self.samples_mb_s = samples;
    }
}

/// Pools several runs of one runtime into one report: per exec transport and per port-forward
/// (transport, connections), the samples of every run, the figures recomputed; an error
/// stands only where no run has samples.
fn merge_reports(reports: Vec<Report>) -> Result<Report> {
    let mut reports = reports.into_iter();
    let mut merged = reports
        .next()
        .ok_or_else(|| anyhow!("no report to merge"))?;
    for r in reports {
        for e in r.exec {
            match merged.exec.iter_mut().find(|m| m.transport == e.transport) {
                Some(m) => {
                    let mut samples = std::mem::take(&mut m.samples_ms);
                    samples.extend(e.samples_ms);
                    if m.protocol.is_empty() {
                        m.protocol = e.protocol;
                    }
                    m.error = if samples.is_empty() {
                        m.error.take().or(e.error)
                    } else {
                        None
                    };
                    m.set_samples(samples);
                }
                None => merged.exec.push(e),
            }
        }
        for f in r.port_forward {
            let same = |m: &&mut ForwardStats| {
                m.transport == f.transport && m.connections == f.connections
            };
            match merged.port_forward.iter_mut().find(same) {
                Some(m) => {
                    let mut samples = std::mem::take(&mut m.samples_mb_s);
                    samples.extend(f.samples_mb_s);
                    m.bytes_per_connection = m.bytes_per_connection.max(f.bytes_per_connection);
                    m.error = if samples.is_empty() {
                        m.error.take().or(f.error)
                    } else {
                        None
                    };
                    m.set_samples(samples);
                }
                None => merged.port_forward.push(f),
            }
        }
    }
    Ok(merged)
}

/// Everything one run measured; `--json` prints it, `compare` reads it back.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Report {
    label: String,
    endpoint: String,
    runtime: String,
    exec: Vec<ExecStats>,
    port_forward: Vec<ForwardStats>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Compare { a, b }) => {
            print!("{}", render_compare(&read_report(&a)?, &read_report(&b)?));
            Ok(())
        }
        Some(Command::Merge { reports }) => {
            let reports = reports
                .iter()
                .map(|p| read_report(p))
                .collect::<Result<Vec<_>>>()?;
            println!(
                "{}",
                serde_json::to_string_pretty(&merge_reports(reports)?)?
            );
            Ok(())
        }
        Some(Command::Pki { dir }) => write_pki(&dir),
        None => {
            let cancel = install_signal_thread("removing the benchmark's pod")?;
            let result = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .context("starting the async runtime")?
                .block_on(run(cli.run, cancel));
            if let Err(e) = &result
                && e.chain().any(|c| c.is::<Interrupted>())
            {
                eprintln!("interrupted: the benchmark's pod has been removed");
                std::process::exit(130);
            }
            result
        }
    }
}

fn read_report(path: &Path) -> Result<Report> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The run was interrupted by a signal.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
struct Interrupted;

/// The benchmark's pod: a sandbox with an exec container and the httpd one.
struct Pod {
    sandbox: String,
    containers: Vec<String>,
}

/// A run against one endpoint.
struct Bench {
    rt: Option<RuntimeServiceClient<Channel>>,
    via: Option<Kubelet>,
    rpc_timeout: Duration,
    cancel: Arc<AtomicBool>,
    args: RunArgs,
}

/// Ferrolet's secure port and the pod behind it.
struct Kubelet {
    addr: String,
    tls: TlsConnector,
    namespace: String,
    pod: String,
}

/// A connection to a streaming server: plain TCP (the runtime's URL) or TLS (ferrolet).
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// What a session is opened for.
enum Open<'a> {
    /// Exec `true` in this container (CRI: its id; ferrolet: its name).
    Exec(&'a str),
    /// Port-forward to the HTTP port of this sandbox (CRI: its id; ferrolet: unused).
    PortForward(&'a str),
}

impl Bench {
    fn rt(&self) -> Result<RuntimeServiceClient<Channel>> {
        self.rt
            .clone()
            .ok_or_else(|| anyhow!("no CRI endpoint in this mode"))
    }

    /// Connects to where a session starts: the URL the runtime returns, or ferrolet's path.
    async fn open(&self, what: Open<'_>, transport: Transport) -> Result<(Box<dyn Io>, Target)> {
        let port_query = format!("?port={HTTP_PORT}");
        let query = match (&what, transport) {
            // WebSocket port-forward takes its ports from the query.
            (Open::PortForward(_), Transport::WebSocket) => port_query.as_str(),
            _ => "",
        };
        if let Some(k) = &self.via {
            let path = match what {
                Open::Exec(container) => format!(
                    "/exec/{}/{}/{container}?command=true&output=1&error=1",
                    k.namespace, k.pod
                ),
                Open::PortForward(_) => format!("/portForward/{}/{}{query}", k.namespace, k.pod),
            };
            let tcp = TcpStream::connect(&k.addr)
                .await
                .with_context(|| format!("connecting to {}", k.addr))?;
            tcp.set_nodelay(true).context("TCP_NODELAY")?;
            // The serving certificate names the node and its addresses: verify the address.
            let host = k.addr.rsplit_once(':').map_or(k.addr.as_str(), |(h, _)| h);
            let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']))
                .map_err(|e| anyhow!("server name {host:?}: {e}"))?
                .to_owned();
            let tls = k.tls.connect(name, tcp).await.context("TLS handshake")?;
            return Ok((Box::new(tls), target(transport, path, &k.addr)));
        }
        let mut rt = self.rt()?;
        let url = match what {
            Open::Exec(container) => {
                deadline(
                    self.rpc_timeout,
                    "Exec",
                    rt.exec(ExecRequest {
                        container_id: container.into(),
                        cmd: vec!["true".into()],
                        tty: false,
                        stdin: false,
                        stdout: true,
                        stderr: true,
                    }),
                )
                .await?
                .url
            }
            Open::PortForward(sandbox) => {
                deadline(
                    self.rpc_timeout,
                    "PortForward",
                    rt.port_forward(PortForwardRequest {
                        pod_sandbox_id: sandbox.into(),
                        port: vec![i32::from(HTTP_PORT)],
                    }),
                )
                .await?
                .url
            }
        };
        let (tcp, target) = connect(&url, transport, query).await?;
        Ok((Box::new(tcp), target))
    }

    fn check(&self) -> Result<()> {
        if self.cancel.load(Ordering::SeqCst) {
            return Err(Interrupted.into());
        }
        Ok(())
    }

    /// Creates the sandbox and starts both containers; what exists is recorded in `pod` as it
    /// is created, so a failure half-way still cleans up.
    async fn start_pod(
        &self,
        run_id: &str,
        log_dir: &Path,
        images: [(&str, &str); 2],
        pod: &mut Pod,
    ) -> Result<[String; 2]> {
        let name = format!("stream-bench-{run_id}");
        let labels = std::collections::HashMap::from([(RUN_LABEL.to_string(), run_id.to_string())]);
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.clone(),
                uid: run_id.into(),
                namespace: POD_NAMESPACE.into(),
                attempt: 0,
            }),
            hostname: name,
            log_directory: log_dir.display().to_string(),
            labels: labels.clone(),
            linux: Some(LinuxPodSandboxConfig::default()),
            ..Default::default()
        };
        let mut rt = self.rt()?;
        let t = self.rpc_timeout;
        pod.sandbox = deadline(
            t,
            "RunPodSandbox",
            rt.run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            }),
        )
        .await?
        .pod_sandbox_id;
        let commands = [
            vec!["sh".to_string(), "-c".into(), SLEEP.into()],
            ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ];
        let mut ids = Vec::new();
        for ((name, (image_ref, image_name)), command) in
            ["box", "web"].into_iter().zip(images).zip(commands)
        {
            self.check()?;
            let id = deadline(
                t,
                "CreateContainer",
                rt.create_container(CreateContainerRequest {
                    pod_sandbox_id: pod.sandbox.clone(),
                    config: Some(ContainerConfig {
                        metadata: Some(ContainerMetadata {
                            name: name.into(),
                            attempt: 0,
                        }),
                        image: Some(ImageSpec {
                            image: image_ref.into(),
                            user_specified_image: image_name.into(),
                            ..Default::default()
                        }),
                        command,
                        log_path: format!("{name}.log"),
                        labels: labels.clone(),
                        ..Default::default()
                    }),
                    sandbox_config: Some(config.clone()),
                }),
            )
            .await?
            .container_id;
            pod.containers.push(id.clone());
            deadline(
                t,
                "StartContainer",
                rt.start_container(StartContainerRequest {
                    container_id: id.clone(),
                }),
            )
            .await?;
            ids.push(id);
        }
        let [exec, web]: [String; 2] = ids
            .try_into()
            .map_err(|_| anyhow!("expected two containers"))?;
        Ok([exec, web])
    }

    /// Stops and removes the pod; errors are reported, not returned.
    async fn remove_pod(&self, pod: &Pod) {
        let Ok(mut rt) = self.rt() else { return };
        let t = self.rpc_timeout;
        for id in &pod.containers {
            let stop = rt.stop_container(StopContainerRequest {
                container_id: id.clone(),
                timeout: 0,
            });
            if let Err(e) = deadline(t, "StopContainer", stop).await {
                eprintln!("cleanup: container {id}: {e:#}");
            }
            let remove = rt.remove_container(RemoveContainerRequest {
                container_id: id.clone(),
            });
            if let Err(e) = deadline(t, "RemoveContainer", remove).await {
                eprintln!("cleanup: container {id}: {e:#}");
            }
        }
        if pod.sandbox.is_empty() {
            return;
        }
        let id = &pod.sandbox;
        let stop = rt.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        });
        if let Err(e) = deadline(t, "StopPodSandbox", stop).await {
            eprintln!("cleanup: sandbox {id}: {e:#}");
        }
        let remove = rt.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.clone(),
        });
        if let Err(e) = deadline(t, "RemovePodSandbox", remove).await {
            eprintln!("cleanup: sandbox {id}: {e:#}");
        }
    }

    /// One exec of `true` with stdout and stderr, as `kubectl exec` without `-i`: from the CRI
    /// call (or ferrolet's `/exec`) to the exit code; returns the time and the subprotocol.
    async fn exec_once(&self, container: &str, transport: Transport) -> Result<(Duration, String)> {
        let start = Instant::now();
        let (tcp, target) = self.open(Open::Exec(container), transport).await?;
        let opts = StreamOptions {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let mut exec = client::exec(tcp, &target, opts).await?;
        let protocol = exec.protocol().to_string();
        let (out, err) = tokio::join!(drain(exec.stdout.take()), drain(exec.stderr.take()));
        out?;
        err?;
        match exec.wait().await? {
            CommandResult::Exited(0) => Ok((start.elapsed(), protocol)),
            other => bail!("`true` did not succeed: {other:?}"),
        }
    }

    /// The exec figures of one transport; a transport the server refuses is reported as such.
    async fn exec_stats(&self, container: &str, transport: TransportArg) -> Result<ExecStats> {
        let mut stats = ExecStats {
            transport: transport.name().into(),
            ..Default::default()
        };
        let mut samples = Vec::new();
        let total = self.args.warmup + self.args.execs;
        for i in 0..total {
            self.check()?;
            let once = tokio::time::timeout(
                STEP_TIMEOUT,
                self.exec_once(container, transport.transport()),
            )
            .await
            .unwrap_or_else(|_| Err(anyhow!("no exit code within {STEP_TIMEOUT:?}")));
            match once {
                Ok((took, protocol)) => {
                    stats.protocol = protocol;
                    if i >= self.args.warmup {
                        samples.push(took.as_secs_f64() * 1000.0);
                    }
                }
                // The first one failing: the server does not do this transport.
                Err(e) if i == 0 => {
                    eprintln!("exec over {}: {e:#}", transport.name());
                    stats.error = Some(format!("{e:#}"));
                    return Ok(stats);
                }
                Err(e) => return Err(e.context(format!("exec {i} over {}", transport.name()))),
            }
        }
        stats.set_samples(samples);
        Ok(stats)
    }

    /// A new port-forward session to the HTTP port (CRI call or ferrolet, connection, upgrade).
    async fn forward_session(&self, sandbox: &str, transport: Transport) -> Result<Session> {
        let (io, target) = self.open(Open::PortForward(sandbox), transport).await?;
        Ok(match transport {
            Transport::Spdy => Session::Spdy(client::port_forward_spdy(io, &target).await?),
            Transport::WebSocket => {
                let ports = client::port_forward_websocket(io, &target, &[HTTP_PORT]).await?;
                Session::WebSocket(ports)
            }
        })
    }

    /// `connections` forwarded connections, set up first (SPDY: streams on one session, as
    /// kubectl multiplexes its local connections; WebSocket: a session each, the protocol
    /// carries one connection per port), then all fetching the file at once.
    async fn forward_round(
        &self,
        sandbox: &str,
        transport: Transport,
        connections: u32,
        path: &str,
    ) -> Result<(Duration, Vec<u64>)> {
        let mut conns = Vec::new();
        // The SPDY session must outlive its streams.
        let mut keep = Vec::new();
        match transport {
            Transport::Spdy => {
                let session = self.forward_session(sandbox, transport).await?;
                let Session::Spdy(forwarder) = &session else {
                    bail!("expected a SPDY session");
                };
                for _ in 0..connections {
                    conns.push(forwarder.connect(HTTP_PORT).await?);
                }
                keep.push(session);
            }
            Transport::WebSocket => {
                for _ in 0..connections {
                    let session = self.forward_session(sandbox, transport).await?;
                    let Session::WebSocket(mut ports) = session else {
                        bail!("expected a WebSocket session");
                    };
                    conns.push(ports.pop().ok_or_else(|| anyhow!("no forwarded port"))?);
                }
            }
        }
        let start = Instant::now();
        let fetches: Vec<_> = conns
            .into_iter()
            .map(|conn| tokio::spawn(http_get(conn, path.to_string())))
            .collect();
        let mut bodies = Vec::new();
        for fetch in fetches {
            bodies.push(fetch.await.context("fetch task")??);
        }
        let took = start.elapsed();
        drop(keep);
        Ok((took, bodies))
    }

    async fn forward_stats(
        &self,
        sandbox: &str,
        transport: TransportArg,
        connections: u32,
    ) -> Result<ForwardStats> {
        let mut stats = ForwardStats {
            transport: transport.name().into(),
            connections,
            ..Default::default()
        };
        let mut samples = Vec::new();
        for round in 0..self.args.rounds {
            self.check()?;
            let outcome = tokio::time::timeout(
                STEP_TIMEOUT,
                self.forward_round(sandbox, transport.transport(), connections, BIG_PATH),
            )
            .await
            .unwrap_or_else(|_| Err(anyhow!("not done within {STEP_TIMEOUT:?}")));
            let (took, bodies) = match outcome {
                Ok(r) => r,
                Err(e) if round == 0 => {
                    eprintln!(
                        "port-forward over {} ({connections} connections): {e:#}",
                        transport.name()
                    );
                    stats.error = Some(format!("{e:#}"));
                    return Ok(stats);
                }
                Err(e) => return Err(e.context(format!("port-forward round {round}"))),
            };
            let first = bodies.first().copied().unwrap_or(0);
            if first == 0 || bodies.iter().any(|&b| b != first) {
                bail!("the connections received {bodies:?} bytes");
            }
            stats.bytes_per_connection = first;
            let total: u64 = bodies.iter().sum();
            samples.push(total as f64 / took.as_secs_f64() / 1e6);
        }
        stats.set_samples(samples);
        Ok(stats)
    }

    /// Waits until httpd answers through a port-forward (it listens a moment after its start).
    async fn wait_for_httpd(&self, sandbox: &str) -> Result<()> {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            self.check()?;
            let attempt = tokio::time::timeout(
                Duration::from_secs(10),
                self.forward_round(sandbox, Transport::Spdy, 1, "/"),
            )
            .await
            .unwrap_or_else(|_| Err(anyhow!("no answer")));
            match attempt {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > give_up => {
                    return Err(e.context("httpd never answered through port-forward"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    async fn measure(&self, exec_container: &str, sandbox: &str) -> Result<Report> {
        let mut exec = Vec::new();
        for &transport in &self.args.transports {
            exec.push(self.exec_stats(exec_container, transport).await?);
        }
        self.wait_for_httpd(sandbox).await?;
        let mut port_forward = Vec::new();
        for &transport in &self.args.transports {
            for connections in [1, self.args.connections] {
                port_forward.push(self.forward_stats(sandbox, transport, connections).await?);
            }
        }
        Ok(Report {
            label: String::new(),
            endpoint: self.args.endpoint.clone(),
            runtime: String::new(),
            exec,
            port_forward,
        })
    }
}

/// An open port-forward session.
enum Session {
    Spdy(client::PortForwarder),
    WebSocket(Vec<ForwardedPort>),
}

/// Opens a TCP connection to a streaming URL (`http://host:port/path`) and the upgrade target.
async fn connect(url: &str, transport: Transport, query: &str) -> Result<(TcpStream, Target)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("streaming URL {url:?}: only http:// is supported"))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let tcp = TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to {host}"))?;
    tcp.set_nodelay(true).context("TCP_NODELAY")?;
    Ok((tcp, target(transport, format!("{path}{query}"), host)))
}

/// The upgrade request's target; SPDY upgrades are POSTs, as kubectl and crictl send them.
fn target(transport: Transport, path_and_query: String, host: &str) -> Target {
    let mut target = Target::new(transport, path_and_query, host);
    if transport == Transport::Spdy {
        target.method = "POST".into();
    }
    target
}

/// Reads a stream to its end, discarding it.
async fn drain(stream: Option<Box<dyn AsyncRead + Send + Unpin>>) -> Result<u64> {
    match stream {
        Some(mut s) => Ok(tokio::io::copy(&mut s, &mut tokio::io::sink()).await?),
        None => Ok(0),
    }
}

/// `GET path` (HTTP/1.0: the server closes when done) over a forwarded connection; checks the
/// status and the body's length against Content-Length, returns the body's length.
async fn http_get(mut conn: ForwardedPort, path: String) -> Result<u64> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    conn.data.write_all(request.as_bytes()).await?;
    let mut head = Vec::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut body = 0u64;
    let mut header_end = None;
    loop {
        let n = conn.data.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        match header_end {
            Some(_) => body += n as u64,
            None => {
                head.extend_from_slice(&buf[..n]);
                if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                    header_end = Some(i + 4);
                    body = (head.len() - i - 4) as u64;
                    head.truncate(i + 4);
                }
            }
        }
    }
    let _ = conn.data.shutdown().await;
    let Some(_) = header_end else {
        let mut error = String::new();
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            conn.error.read_to_string(&mut error),
        )
        .await;
        bail!(
            "no HTTP answer ({} bytes){}",
            head.len(),
            if error.is_empty() {
                String::new()
            } else {
                format!(": {error}")
            }
        );
    };
    let head = String::from_utf8_lossy(&head);
    if !head.starts_with("HTTP/1.") {
        bail!("not an HTTP answer: {head:.100}");
    }
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<u64>().ok());
    if let Some(length) = length
        && length != body
    {
        bail!("received {body} of {length} bytes");
    }
    Ok(body)
}

async fn run(args: RunArgs, cancel: Arc<AtomicBool>) -> Result<()> {
    let t = Duration::from_secs(args.rpc_timeout);
    let report = match &args.kubelet {
        Some(addr) => run_through_kubelet(addr, &args, t, cancel).await?,
        None => run_direct(&args, t, cancel).await?,
    };
    let table = render_table(&report);
    if args.json {
        eprint!("{table}");
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{table}");
    }
    Ok(())
}

/// The runtime's own streaming server: a pod of our own, created and removed here.
async fn run_direct(args: &RunArgs, t: Duration, cancel: Arc<AtomicBool>) -> Result<Report> {
    let channel = transport::connect(&args.endpoint)
        .await
        .with_context(|| format!("connecting to {}", args.endpoint))?;
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let version = deadline(t, "Version", rt.version(VersionRequest::default())).await?;
    let runtime = format!("{} {}", version.runtime_name, version.runtime_version);
    let label = args
        .label
        .clone()
        .unwrap_or_else(|| version.runtime_name.clone());
    let busybox = ensure_image(channel.clone(), &args.busybox_image, t).await?;
    let big = ensure_image(channel, &args.big_image, t).await?;
    let run_id = run_id()?;
    let log_dir = tempfile::Builder::new()
        .prefix("ferrolet-stream-bench-")
        .tempdir_in(&args.log_root)
        .with_context(|| format!("creating a log dir in {}", args.log_root.display()))?;
    eprintln!(
        "{label}: {runtime} at {}, run {run_id}: {} execs, {} port-forward rounds",
        args.endpoint, args.execs, args.rounds
    );
    let bench = Bench {
        rt: Some(rt),
        via: None,
        rpc_timeout: t,
        cancel,
        args: args.clone(),
    };
    let mut pod = Pod {
        sandbox: String::new(),
        containers: Vec::new(),
    };
    let images = [
        (busybox.as_str(), args.busybox_image.as_str()),
        (big.as_str(), args.big_image.as_str()),
    ];
    let outcome = match bench
        .start_pod(&run_id, log_dir.path(), images, &mut pod)
        .await
    {
        Ok([exec, _web]) => {
            let sandbox = pod.sandbox.clone();
            bench.measure(&exec, &sandbox).await
        }
        Err(e) => Err(e),
    };
    bench.remove_pod(&pod).await;
    let mut report = outcome?;
    report.label = label;
    report.runtime = runtime;
    Ok(report)
}

/// Through ferrolet's secure port, on the static pod the caller runs there.
async fn run_through_kubelet(
    addr: &str,
    args: &RunArgs,
    t: Duration,
    cancel: Arc<AtomicBool>,
) -> Result<Report> {
    let (Some(ca), Some(pki), Some(pod)) = (&args.kubelet_ca, &args.pki, &args.pod) else {
        bail!("--kubelet needs --kubelet-ca, --pki and --pod");
    };
    let (namespace, name) = pod
        .split_once('/')
        .ok_or_else(|| anyhow!("--pod {pod:?}: expected namespace/name"))?;
    let label = args.label.clone().unwrap_or_else(|| "ferrolet".into());
    let bench = Bench {
        rt: None,
        via: Some(Kubelet {
            addr: addr.into(),
            tls: tls_connector(ca, pki)?,
            namespace: namespace.into(),
            pod: name.into(),
        }),
        rpc_timeout: t,
        cancel,
        args: args.clone(),
    };
    eprintln!(
        "{label}: ferrolet at {addr}, pod {pod}: {} execs, {} port-forward rounds",
        args.execs, args.rounds
    );
    // The static pod may still be starting: wait for a first exec to succeed.
    let give_up = Instant::now() + Duration::from_secs(180);
    loop {
        bench.check()?;
        match bench.exec_once("box", Transport::Spdy).await {
            Ok(_) => break,
            Err(e) if Instant::now() > give_up => {
                return Err(e.context(format!("exec in {pod} through ferrolet never succeeded")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let mut report = bench.measure("box", "").await?;
    report.label = label;
    report.endpoint = format!("https://{addr} ({pod})");
    report.runtime = format!("ferrolet on {}", args.endpoint);
    Ok(report)
}

/// TLS to ferrolet: trusting only its serving certificate, presenting our client certificate.
fn tls_connector(serving_cert: &Path, pki: &Path) -> Result<TlsConnector> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&read(serving_cert)?) {
        roots
            .add(cert.context("parsing the serving certificate")?)
            .context("trusting the serving certificate")?;
    }
    let chain = CertificateDer::pem_slice_iter(&read(&pki.join("client.crt"))?)
        .collect::<Result<Vec<_>, _>>()
        .context("parsing client.crt")?;
    let key = PrivateKeyDer::from_pem_slice(&read(&pki.join("client.key"))?)
        .context("parsing client.key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .context("the client certificate")?;
    Ok(TlsConnector::from(Arc::new(config)))
}

/// `pki DIR`: a client CA and a client certificate from it, for the run through ferrolet.
fn write_pki(dir: &Path) -> Result<()> {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        IsCa, Issuer, KeyPair,
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "ferrolet-stream-bench clients");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().context("generating the CA key")?;
    let ca_pem = ca.self_signed(&ca_key).context("signing the CA")?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let mut client = CertificateParams::default();
    client.distinguished_name = DistinguishedName::new();
    client
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    client
        .distinguished_name
        .push(DnType::CommonName, "stream-bench");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().context("generating the client key")?;
    let cert = client
        .signed_by(&key, &issuer)
        .context("signing the client certificate")?;
    for (file, text) in [
        ("ca.crt", ca_pem),
        ("client.crt", cert.pem()),
        ("client.key", key.serialize_pem()),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn render_table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} ({}) at {}", r.label, r.runtime, r.endpoint);
    let _ = writeln!(
        out,
        "  {:<34} {:>4} {:>9} {:>9} {:>9} {:>9}",
        "exec `true` round trip", "n", "p50 ms", "p99 ms", "mean ms", "max ms"
    );
    for e in &r.exec {
        let name = format!("{} ({})", e.transport, e.protocol);
        match &e.error {
            Some(err) => {
                let _ = writeln!(out, "  {name:<34} failed: {err}");
            }
            None => {
                let _ = writeln!(
                    out,
                    "  {name:<34} {:>4} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                    e.n, e.p50_ms, e.p99_ms, e.mean_ms, e.max_ms
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "  {:<34} {:>9} {:>30}",
        "port-forward throughput", "MB/s", "rounds MB/s"
    );
    for f in &r.port_forward {
        let name = format!("{}, {} connection(s)", f.transport, f.connections);
        match &f.error {
            Some(err) => {
                let _ = writeln!(out, "  {name:<34} failed: {err}");
            }
            None => {
                let rounds: Vec<String> =
                    f.samples_mb_s.iter().map(|s| format!("{s:.0}")).collect();
                let _ = writeln!(
                    out,
                    "  {name:<34} {:>9.1} {:>30}",
                    f.median_mb_s,
                    rounds.join(" ")
                );
            }
        }
    }
    out
}

/// One compared figure: its name, A's and B's values (None: not measured), and whether lower
/// is better.
struct Row {
    name: String,
    a: Option<f64>,
    b: Option<f64>,
    lower_is_better: bool,
}

fn compare_rows(a: &Report, b: &Report) -> Vec<Row> {
    let mut rows = Vec::new();
    let exec = |r: &Report, t: &str| {
        r.exec
            .iter()
            .find(|e| e.transport == t && e.error.is_none())
            .cloned()
    };
    let mut transports: Vec<String> = a.exec.iter().map(|e| e.transport.clone()).collect();
    for e in &b.exec {
        if !transports.contains(&e.transport) {
            transports.push(e.transport.clone());
        }
    }
    for t in &transports {
        let (ea, eb) = (exec(a, t), exec(b, t));
        for (what, pick) in [("p50", 50.0), ("p99", 99.0)] {
            let value = |e: &Option<ExecStats>| {
                e.as_ref()
                    .map(|e| if pick == 50.0 { e.p50_ms } else { e.p99_ms })
            };
            rows.push(Row {
                name: format!("exec `true` {what}, {t} (ms)"),
                a: value(&ea),
                b: value(&eb),
                lower_is_better: true,
            });
        }
    }
    let mut keys: Vec<(String, u32)> = a
        .port_forward
        .iter()
        .map(|f| (f.transport.clone(), f.connections))
        .collect();
    for f in &b.port_forward {
        let key = (f.transport.clone(), f.connections);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let forward = |r: &Report, (t, c): &(String, u32)| {
        r.port_forward
            .iter()
            .find(|f| &f.transport == t && f.connections == *c && f.error.is_none())
            .map(|f| f.median_mb_s)
    };
    for key in &keys {
        rows.push(Row {
            name: format!("port-forward {}, {} conn (MB/s)", key.0, key.1),
            a: forward(a, key),
            b: forward(b, key),
            lower_is_better: false,
        });
    }
    rows
}

fn render_compare(a: &Report, b: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<38} {:>14} {:>14} {:>7}  target",
        "", a.label, b.label, "ratio"
    );
    let cell = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2}"));
    for row in compare_rows(a, b) {
        let (ratio, verdict) = match (row.a, row.b) {
            (Some(x), Some(y)) if y > 0.0 => {
                let r = x / y;
                let ok = if row.lower_is_better {
                    r <= 1.0
                } else {
                    r >= 1.0
                };
                (
                    format!("{r:.2}"),
                    format!(
                        "{} {}",
                        if row.lower_is_better { "<= 1" } else { ">= 1" },
                        if ok { "ok" } else { "MISSED" }
                    ),
                )
            }
            _ => ("-".to_string(), String::new()),
        };
        let _ = writeln!(
            out,
            "{:<38} {:>14} {:>14} {:>7}  {verdict}",
            row.name,
            cell(row.a),
            cell(row.b),
            ratio
        );
    }
    for r in [a, b] {
        for e in r
            .exec
            .iter()
            .filter_map(|e| e.error.as_ref().map(|m| (&e.transport, m)))
        {
            let _ = writeln!(out, "{}: exec over {}: {}", r.label, e.0, e.1);
        }
        for f in &r.port_forward {
            if let Some(m) = &f.error {
                let _ = writeln!(
                    out,
                    "{}: port-forward over {} ({} conn): {m}",
                    r.label, f.transport, f.connections
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn merged_runs_pool_their_samples() {
        let mut a = report("a", 10.0, 100.0, true);
        a.exec[0].set_samples(vec![10.0, 30.0]);
        a.port_forward[0].set_samples(vec![100.0]);
        let mut b = report("b", 20.0, 300.0, false);
        b.exec[0].set_samples(vec![20.0]);
        b.port_forward[0].set_samples(vec![300.0, 200.0]);
        b.exec[1].set_samples(vec![5.0]);
        let m = merge_reports(vec![a, b]).unwrap();
        assert_eq!(m.label, "a");
        assert_eq!(m.exec[0].samples_ms, vec![10.0, 20.0, 30.0]);
        assert_eq!(
            (m.exec[0].n, m.exec[0].p50_ms, m.exec[0].max_ms),
            (3, 20.0, 30.0)
        );
        assert_eq!(m.port_forward[0].samples_mb_s, vec![100.0, 300.0, 200.0]);
        assert_eq!(m.port_forward[0].median_mb_s, 200.0);
        // WebSocket failed in the first run only: the second's samples stand, without the error.
        let ws = m.exec.iter().find(|e| e.transport == "WebSocket").unwrap();
        assert!(ws.error.is_none());
        assert_eq!((ws.n, ws.p50_ms), (1, 5.0));
        assert!(merge_reports(Vec::new()).is_err());
    }

    fn report(label: &str, p50: f64, mb_s: f64, ws_error: bool) -> Report {
        Report {
            label: label.into(),
            endpoint: "unix:///x".into(),
            runtime: "r 1".into(),
            exec: vec![
                ExecStats {
                    transport: "SPDY".into(),
                    protocol: "v4.channel.k8s.io".into(),
                    n: 3,
                    p50_ms: p50,
                    p99_ms: p50 * 2.0,
                    ..Default::default()
                },
                ExecStats {
                    transport: "WebSocket".into(),
                    error: ws_error.then(|| "upgrade refused".to_string()),
                    p50_ms: p50,
                    ..Default::default()
                },
            ],
            port_forward: vec![ForwardStats {
                transport: "SPDY".into(),
                connections: 4,
                median_mb_s: mb_s,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn compare_gives_ratios_and_verdicts() {
        let a = report("ours", 2.0, 900.0, false);
        let b = report("ref", 4.0, 600.0, true);
        let text = render_compare(&a, &b);
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} in {text}"))
                .to_string()
        };
        assert!(
            line("exec `true` p50, SPDY").contains("0.50  <= 1 ok"),
            "{text}"
        );
        assert!(
            line("port-forward SPDY, 4 conn").contains("1.50  >= 1 ok"),
            "{text}"
        );
        assert!(line("exec `true` p50, WebSocket").contains("n/a"), "{text}");
        assert!(
            text.contains("ref: exec over WebSocket: upgrade refused"),
            "{text}"
        );
        let worse = render_compare(&b, &a);
        assert!(worse.contains("MISSED"), "{worse}");
    }

    #[test]
    fn reports_round_trip_through_json() {
        let r = report("ours", 1.0, 2.0, true);
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
