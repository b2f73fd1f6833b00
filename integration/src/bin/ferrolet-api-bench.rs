//! `ferrolet-api-bench`: how fast a node running ferrolet turns API pods into Running ones
//! (issue #16), measured as a cluster user sees it: a pod is created through the API with
//! `spec.nodeName` set (the scheduler's part), and the clock stops when a watch on the node's
//! pods delivers it with `status.phase: Running`. Reports, for N = 1 (repeated, one pod at a
//! time) and each burst size, p50/p99 per pod and the time until all are Running; the
//! kubelet's RSS with the largest burst running; and, against the in-memory test API server,
//! the API requests the node makes per minute in steady state.
//!
//! With `--volumes` (issue #17) every pod mounts a secret, a configMap and the projected
//! service-account token volume (`kube-api-access`, as the ServiceAccount admission plugin
//! adds it); after the steady-state window the configMap is updated and the time until each
//! pod's volume shows the new content is measured on the node's disk
//! (`<root-dir>/pods/<uid>/volumes/kubernetes.io~configmap/cfg`, what the containers see
//! through their bind mounts), p50 and max.
//!
//! With `--pvc-storage-class SC` (issue #35) every pod mounts a claim of its own: the claim is
//! created and waited for until Bound (the provisioner's part, as a scheduler waits for it
//! before binding a pod), then the pod is created and timed, so the figure is the kubelet's
//! part of a persistent volume: the attach wait, stage, publish. Claims go with their pods.
//!
//! Two ways to run it:
//! - `--test-server`: starts the in-memory test API server in this process, writes the node's
//!   kubeconfig, and starts the kubelet itself (`--kubelet BIN` plus the kubelet arguments
//!   after `--`; `--kubeconfig <file>` is added). The requests per minute come from the
//!   server's own counter.
//! - `--kubeconfig ADMIN --node NAME --kubelet-pid PID`: a real cluster where the node already
//!   runs (ferrolet or the Go kubelet, for the comparison); requests per minute are read from
//!   the API server's audit log when `--audit-log FILE` is given (entries of user
//!   `system:node:NAME`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use ferrolet_integration::apiserver::{ApiServerOptions, TestApiServer};
use ferrolet_integration::bench::{install_signal_thread, percentile};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Mutex;

#[derive(Parser, Debug)]
#[command(about = "API pod created → Running observed through a watch, per pod and per burst")]
struct Args {
    /// Run the in-memory test API server here and start the kubelet ourselves.
    #[arg(long)]
    test_server: bool,
    /// The kubelet binary to start (with --test-server).
    #[arg(long)]
    kubelet: Option<PathBuf>,
    /// Where to write the node's kubeconfig (with --test-server).
    #[arg(long, default_value = "/run/ferrolet/bench-api/kubelet.conf")]
    node_kubeconfig: PathBuf,
    /// An admin kubeconfig of a real cluster (without --test-server).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The node's name.
    #[arg(long, default_value = "bench-api")]
    node: String,
    /// The kubelet's pid, for its RSS (without --test-server).
    #[arg(long)]
    kubelet_pid: Option<u32>,
    /// The real API server's audit log, for the node's requests per minute.
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// The pod image.
    #[arg(long, default_value = "127.0.0.1:5000/ferrolet/busybox:1")]
    image: String,
    /// Namespace of the pods.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Runs of the N = 1 case.
    #[arg(long, default_value_t = 10)]
    single_runs: usize,
    /// Burst sizes.
    #[arg(long, value_delimiter = ',', default_value = "30,100")]
    bursts: Vec<usize>,
    /// Steady-state window for requests per minute, in seconds.
    #[arg(long, default_value_t = 60)]
    steady_secs: u64,
    /// Pods mount a secret, a configMap and the service-account token; measures configMap
    /// update propagation.
    #[arg(long)]
    volumes: bool,
    /// Each pod mounts a claim of its own of this StorageClass, Bound before the pod is made.
    #[arg(long)]
    pvc_storage_class: Option<String>,
    /// The kubelet's root dir (for `--volumes` without --test-server; with it, taken from the
    /// kubelet's `--root-dir` argument).
    #[arg(long)]
    kubelet_root_dir: Option<PathBuf>,
    /// The kubelet's arguments (with --test-server), after `--`.
    #[arg(last = true)]
    kubelet_args: Vec<String>,
}

/// When each pod was created and first seen Running.
#[derive(Default)]
struct Clock {
    created: BTreeMap<String, Instant>,
    running: BTreeMap<String, Instant>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let cancel = install_signal_thread("deleting the benchmark's pods")?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run(args, cancel))
}

async fn run(args: Args, cancel: Arc<AtomicBool>) -> Result<()> {
    let mut server = None;
    let mut kubelet: Option<Child> = None;
    let client = if args.test_server {
        let api = TestApiServer::start(ApiServerOptions {
            // Real servers send a bookmark about once a minute; a second would inflate counts.
            bookmark_interval: Duration::from_secs(60),
            ..Default::default()
        })
        .await?;
        if let Some(dir) = args.node_kubeconfig.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        api.write_kubeconfig(
            &args.node_kubeconfig,
            &format!("system:node:{}", args.node),
            &["system:nodes"],
        )?;
        let admin = args.node_kubeconfig.with_file_name("admin.conf");
        api.write_kubeconfig(&admin, "bench-admin", &["system:masters"])?;
        let bin = args
            .kubelet
            .as_ref()
            .ok_or_else(|| anyhow!("--test-server needs --kubelet BIN"))?;
        let child = Command::new(bin)
            .args(&args.kubelet_args)
            .arg("--kubeconfig")
            .arg(&args.node_kubeconfig)
            .arg("--hostname-override")
            .arg(&args.node)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        kubelet = Some(child);
        server = Some(api);
        client_from(&admin).await?
    } else {
        let admin = args
            .kubeconfig
            .as_ref()
            .ok_or_else(|| anyhow!("give --test-server, or --kubeconfig of a real cluster"))?;
        client_from(admin).await?
    };
    let kubelet_pid = kubelet.as_ref().map(Child::id).or(args.kubelet_pid);
    let result = measure(&args, &client, server.as_ref(), kubelet_pid, &cancel).await;
    let cleanup = delete_all(&client, &args).await;
    if let Some(mut child) = kubelet {
        // SIGKILL: the kubelet inherited the signal thread's blocked mask, so it would not
        // see a SIGTERM; its pods are deleted already and the script removes what is left.
        let _ = child.kill();
        let _ = child.wait();
    }
    if let Some(api) = server {
        api.stop().await;
    }
    result.and(cleanup)
}

async fn client_from(path: &PathBuf) -> Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

async fn measure(
    args: &Args,
    client: &Client,
    server: Option<&TestApiServer>,
    kubelet_pid: Option<u32>,
    cancel: &AtomicBool,
) -> Result<()> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let ready = wait_for(Duration::from_secs(120), || async {
        nodes
            .get_opt(&args.node)
            .await
            .ok()
            .flatten()
            .is_some_and(|n| {
                n.status
                    .and_then(|s| s.conditions)
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
    })
    .await;
    if !ready {
        bail!("node {} did not become Ready within 120 s", args.node);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.namespace);
    if args.volumes {
        create_volume_objects(client, args, server).await?;
    }
    let clock = Arc::new(Mutex::new(Clock::default()));
    let watch = tokio::spawn(watch_running(
        pods.clone(),
        args.node.clone(),
        clock.clone(),
    ));
    println!(
        "# ferrolet-api-bench: node {}, image {}",
        args.node, args.image
    );
    println!(
        "{:>6} {:>10} {:>10} {:>12}",
        "N", "p50_ms", "p99_ms", "all_ms"
    );

    let mut singles = Vec::new();
    for i in 0..args.single_runs {
        if cancel.load(Ordering::SeqCst) {
            break;
        }
        // Random gaps, so the kubelet's periodic work is met at every phase.
        tokio::time::sleep(Duration::from_millis(300 + (i as u64 * 137) % 700)).await;
        let (per_pod, _) = burst(&pods, args, &clock, &format!("single-{i}"), 1).await?;
        singles.extend(per_pod);
        delete_all(client, args).await?;
    }
    report(1, &mut singles, None);

    let mut last_burst = 0;
    for &n in &args.bursts {
        if cancel.load(Ordering::SeqCst) {
            break;
        }
        let (mut per_pod, all) = burst(&pods, args, &clock, &format!("burst{n}"), n).await?;
        report(n, &mut per_pod, Some(all));
        last_burst = n;
        if n != *args.bursts.last().unwrap_or(&n) {
            delete_all(client, args).await?;
        }
    }
    if let Some(pid) = kubelet_pid {
        // Settled: a few status rounds after the burst.
        tokio::time::sleep(Duration::from_secs(10)).await;
        println!("rss_kib_with_{last_burst}_pods {}", rss_kib(pid)?);
    }
    if let Some(api) = server {
        let before = api.request_counts();
        let total_before = api.request_count();
        steady_window(args.steady_secs, kubelet_pid, last_burst).await;
        let total = api.request_count() - total_before;
        let per_min = total as f64 * 60.0 / args.steady_secs as f64;
        println!("api_requests_per_min_steady_{last_burst}_pods {per_min:.1}");
        for (verb, count) in api.request_counts() {
            let d = count - before.get(&verb).copied().unwrap_or(0);
            if d > 0 {
                println!("  {verb} {d}");
            }
        }
    } else if let Some(audit) = &args.audit_log {
        let user = format!("system:node:{}", args.node);
        let before = count_audit(audit, &user)?;
        steady_window(args.steady_secs, kubelet_pid, last_burst).await;
        let after = count_audit(audit, &user)?;
        let total: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
        let per_min = total as f64 * 60.0 / args.steady_secs as f64;
        println!("api_requests_per_min_steady_{last_burst}_pods {per_min:.1}");
        for (kind, count) in &after {
            let d = count - before.get(kind).copied().unwrap_or(0);
            if d > 0 {
                println!("  {kind} {d}");
            }
        }
    }
    if args.volumes && !cancel.load(Ordering::SeqCst) {
        let root = args
            .kubelet_root_dir
            .clone()
            .or_else(|| root_dir_arg(&args.kubelet_args))
            .ok_or_else(|| {
                anyhow!(
                    "--volumes needs --kubelet-root-dir (or --root-dir in the kubelet's arguments)"
                )
            })?;
        let mut times = config_map_propagation(client, args, &root, last_burst).await?;
        times.sort_by(f64::total_cmp);
        println!(
            "config_map_update_seen_by_{}_pods_ms p50 {:.0} max {:.0}",
            times.len(),
            percentile(&times, 50.0),
            times.last().copied().unwrap_or(0.0)
        );
    }
    watch.abort();
    Ok(())
}

/// The secret, configMap and projected token volumes of a `--volumes` pod, mounted as a
/// cluster's pods mount them.
fn add_volumes(pod: &mut serde_json::Value) {
    pod["spec"]["volumes"] = json!([
        {"name": "sec", "secret": {"secretName": BENCH_SECRET}},
        {"name": "cfg", "configMap": {"name": BENCH_CONFIG}},
        {"name": "kube-api-access-bench", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}},
    ]);
    pod["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "sec", "mountPath": "/v/sec", "readOnly": true},
        {"name": "cfg", "mountPath": "/v/cfg", "readOnly": true},
        {"name": "kube-api-access-bench", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
    ]);
}

const BENCH_SECRET: &str = "bench-secret";
const BENCH_CONFIG: &str = "bench-config";

/// What `--volumes` pods read: the service account, the cluster CA configMap (a real
/// cluster's controller manager publishes it; the test server needs it made), a secret and
/// a configMap. Existing ones are reused.
async fn create_volume_objects(
    client: &Client,
    args: &Args,
    server: Option<&TestApiServer>,
) -> Result<()> {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
    let ns = &args.namespace;
    let created = |r: kube::Result<()>| match r {
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        other => other,
    };
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
    created(sas.create(&PostParams::default(), &sa).await.map(drop))?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    if let Some(api) = server {
        let ca: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": api.ca_pem()}}),
        )?;
        created(cms.create(&PostParams::default(), &ca).await.map(drop))?;
    }
    let cfg: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": BENCH_CONFIG}, "data": {"version": "v0"}}),
    )?;
    created(cms.create(&PostParams::default(), &cfg).await.map(drop))?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": BENCH_SECRET}, "data": {"password": "YmVuY2g="}}),
    )?;
    created(
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .map(drop),
    )?;
    Ok(())
}

/// The kubelet's `--root-dir` among its arguments.
fn root_dir_arg(args: &[String]) -> Option<PathBuf> {
    args.iter()
        .position(|a| a == "--root-dir")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .or_else(|| {
            args.iter()
                .find_map(|a| a.strip_prefix("--root-dir="))
                .map(PathBuf::from)
        })
}

/// Updates the benchmark configMap and returns, for each of the node's `--volumes` pods, the
/// ms until its volume on disk shows the new value.
async fn config_map_propagation(
    client: &Client,
    args: &Args,
    root: &std::path::Path,
    expected: usize,
) -> Result<Vec<f64>> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.namespace);
    let list = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={}", args.node)))
        .await?;
    let files: Vec<PathBuf> = list
        .items
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .map(|uid| {
            root.join("pods")
                .join(uid)
                .join("volumes/kubernetes.io~configmap/cfg/version")
        })
        .collect();
    if files.len() != expected {
        bail!("{} pods on the node, expected {expected}", files.len());
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &args.namespace);
    let mut cfg = cms.get(BENCH_CONFIG).await?;
    let next = format!("v{}", jiff::Timestamp::now().as_millisecond());
    cfg.data = Some([("version".to_string(), next.clone())].into());
    let start = Instant::now();
    cms.replace(BENCH_CONFIG, &PostParams::default(), &cfg)
        .await?;
    let mut seen: BTreeMap<usize, f64> = BTreeMap::new();
    let limit = Duration::from_secs(180);
    while seen.len() < files.len() && start.elapsed() < limit {
        for (i, f) in files.iter().enumerate() {
            if !seen.contains_key(&i) && std::fs::read_to_string(f).is_ok_and(|v| v == next) {
                seen.insert(i, start.elapsed().as_secs_f64() * 1e3);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if seen.len() < files.len() {
        bail!(
            "only {} of {} pods saw the configMap update within {limit:?}",
            seen.len(),
            files.len()
        );
    }
    Ok(seen.into_values().collect())
}

/// Creates `n` pods at once; returns each one's create → Running time (ms) and the time
/// until all ran (ms).
async fn burst(
    pods: &Api<Pod>,
    args: &Args,
    clock: &Mutex<Clock>,
    prefix: &str,
    n: usize,
) -> Result<(Vec<f64>, f64)> {
    let start = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    if let Some(class) = &args.pvc_storage_class {
        bound_claims(pods, args, class, &names).await?;
    }
    let start = if args.pvc_storage_class.is_some() {
        Instant::now()
    } else {
        start
    };
    let creates = names.iter().map(|name| async move {
        let mut spec = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": args.node,
                "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": false,
                "containers": [{
                    "name": "main",
                    "image": args.image,
                    "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
                }],
            },
        });
        if args.volumes {
            add_volumes(&mut spec);
        }
        if args.pvc_storage_class.is_some() {
            spec["spec"]["volumes"] =
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim_name(name)}}]);
            spec["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "data", "mountPath": "/data"}]);
        }
        let pod: Pod = serde_json::from_value(spec)?;
        clock
            .lock()
            .await
            .created
            .insert(name.clone(), Instant::now());
        pods.create(&PostParams::default(), &pod).await?;
        anyhow::Ok(())
    });
    for r in futures::future::join_all(creates).await {
        r?;
    }
    let limit = Duration::from_secs(60 + 2 * n as u64);
    let all_ran = wait_for(limit, || async {
        let c = clock.lock().await;
        names.iter().all(|n| c.running.contains_key(n))
    })
    .await;
    if !all_ran {
        bail!("{prefix}: not all {n} pods Running within {limit:?}");
    }
    let c = clock.lock().await;
    let per_pod = names
        .iter()
        .filter_map(|n| Some((*c.running.get(n)? - *c.created.get(n)?).as_secs_f64() * 1e3))
        .collect();
    let all = names
        .iter()
        .filter_map(|n| c.running.get(n))
        .max()
        .map(|t| (*t - start).as_secs_f64() * 1e3)
        .unwrap_or(0.0);
    Ok((per_pod, all))
}

/// Notes the first time each pod is seen Running through a watch of the node's pods.
async fn watch_running(pods: Api<Pod>, node: String, clock: Arc<Mutex<Clock>>) {
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut stream = watcher(pods, config).boxed();
    while let Some(event) = stream.next().await {
        let pods = match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
            _ => continue,
        };
        for p in pods {
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if let (true, Some(name)) = (running, p.metadata.name) {
                let mut c = clock.lock().await;
                c.running.entry(name).or_insert_with(Instant::now);
            }
        }
    }
}

/// The claim of pod `pod` in `--pvc-storage-class` mode.
fn claim_name(pod: &str) -> String {
    format!("{pod}-data")
}

/// Creates a claim of `class` for each pod and waits until all are Bound.
async fn bound_claims(pods: &Api<Pod>, args: &Args, class: &str, names: &[String]) -> Result<()> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(pods.clone().into_client(), &args.namespace);
    for name in names {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": claim_name(name)},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": "1Mi"}}},
        }))?;
        claims.create(&PostParams::default(), &claim).await?;
    }
    let bound = wait_for(Duration::from_secs(60 + 2 * names.len() as u64), || async {
        let mut all = true;
        for name in names {
            let phase = claims
                .get_opt(&claim_name(name))
                .await
                .ok()
                .flatten()
                .and_then(|c| c.status)
                .and_then(|s| s.phase);
            all &= phase.as_deref() == Some("Bound");
        }
        all
    })
    .await;
    if !bound {
        bail!("the claims of {class} were not all Bound in time");
    }
    Ok(())
}

async fn delete_all(client: &Client, args: &Args) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.namespace);
    let list = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={}", args.node)))
        .await?;
    let ours: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .filter(|n| n.starts_with("single-") || n.starts_with("burst"))
        .collect();
    for name in &ours {
        let _ = pods.delete(name, &DeleteParams::default()).await;
    }
    let gone = wait_for(Duration::from_secs(120), || async {
        match pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={}", args.node)))
            .await
        {
            Ok(l) => !l
                .items
                .iter()
                .any(|p| p.metadata.name.as_ref().is_some_and(|n| ours.contains(n))),
            Err(_) => false,
        }
    })
    .await;
    if !gone {
        bail!("the benchmark's pods were not all gone within 120 s of their deletion");
    }
    if args.pvc_storage_class.is_some() {
        use k8s_openapi::api::core::v1::PersistentVolumeClaim;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &args.namespace);
        for name in &ours {
            let _ = claims
                .delete(&claim_name(name), &DeleteParams::default())
                .await;
        }
    }
    Ok(())
}

async fn wait_for<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn report(n: usize, samples: &mut [f64], all: Option<f64>) {
    samples.sort_by(f64::total_cmp);
    let all = all.map(|a| format!("{a:.0}")).unwrap_or_else(|| "-".into());
    println!(
        "{n:>6} {:>10.0} {:>10.0} {all:>12}",
        percentile(samples, 50.0),
        percentile(samples, 99.0)
    );
}

/// Waits out the steady-state window, sampling the kubelet's RSS every second: the heap
/// breathes with periodic work (status and volume passes), so one sample can miss a peak.
async fn steady_window(secs: u64, kubelet_pid: Option<u32>, pods: usize) {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut samples = Vec::new();
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1).min(end - Instant::now())).await;
        if let Some(rss) = kubelet_pid.and_then(|pid| rss_kib(pid).ok()) {
            samples.push(rss as f64);
        }
    }
    if samples.is_empty() {
        return;
    }
    samples.sort_by(f64::total_cmp);
    println!(
        "rss_kib_steady_{pods}_pods p50 {:.0} max {:.0} ({} samples)",
        percentile(&samples, 50.0),
        samples.last().copied().unwrap_or(0.0),
        samples.len()
    );
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS in /proc/{pid}/status"))
}

/// Completed requests of `user` in the audit log (one JSON object a line), by
/// "verb resource[/subresource]".
fn count_audit(path: &PathBuf, user: &str) -> Result<BTreeMap<String, u64>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut counts = BTreeMap::new();
    for event in text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        if event["user"]["username"] != user || event["stage"] != "ResponseComplete" {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or("?");
        let object = &event["objectRef"];
        let mut resource = object["resource"].as_str().unwrap_or("-").to_string();
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        *counts.entry(format!("{verb} {resource}")).or_insert(0) += 1;
    }
    Ok(counts)
}
