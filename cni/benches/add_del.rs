//! ADD+DEL latency of the default chain (bridge + host-local + portmap) with the real plugins
//! in /usr/lib/cni, and the library's own overhead: operation wall time minus the wall time
//! of the plugin processes (measured around each spawn..wait by the invoker's tracer).
//!
//! Run as root: `cargo bench -p ferrolet-cni --bench add_del [-- CYCLES]`. Uses bridge
//! `flcbench` and 10.199.255.0/24 (outside the integration tests' 10.199.1-250.0/24).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrolet_cni::{Cni, NetworkConfigList, RuntimeConf, netns};
use serde_json::json;

const BRIDGE: &str = "flcbench";

struct Sample {
    total: Duration,
    plugins: Duration,
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn row(name: &str, samples: &[Sample]) {
    let mut total: Vec<Duration> = samples.iter().map(|s| s.total).collect();
    let mut plugins: Vec<Duration> = samples.iter().map(|s| s.plugins).collect();
    let mut over: Vec<Duration> = samples
        .iter()
        .map(|s| s.total.saturating_sub(s.plugins))
        .collect();
    total.sort();
    plugins.sort();
    over.sort();
    let sum_total: Duration = samples.iter().map(|s| s.total).sum();
    let sum_over: Duration = samples
        .iter()
        .map(|s| s.total.saturating_sub(s.plugins))
        .sum();
    let share = 100.0 * sum_over.as_secs_f64() / sum_total.as_secs_f64().max(1e-9);
    println!(
        "| {name:<8} | {:>9} | {:>9} | {:>11} | {:>12} | {:>12} | {:>12} | {:>8.2}% |",
        ms(pct(&total, 0.5)),
        ms(pct(&total, 0.99)),
        ms(pct(&plugins, 0.5)),
        ms(pct(&over, 0.5)),
        ms(pct(&over, 0.99)),
        ms(sum_over / samples.len().max(1) as u32),
        share
    );
}

fn main() -> anyhow::Result<()> {
    let cycles: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    anyhow::ensure!(nix::unistd::geteuid().is_root(), "the benchmark needs root");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let result = rt.block_on(bench(dir.path(), cycles));
    let _ = std::process::Command::new("ip")
        .args(["link", "del", BRIDGE])
        .status();
    result
}

async fn bench(dir: &std::path::Path, cycles: usize) -> anyhow::Result<()> {
    let conf = json!({
        "cniVersion": "1.0.0", "name": "flcbench",
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": true, "ipMasq": false,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.199.255.0/24"}]],
                      "dataDir": dir.join("ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
        ]
    });
    let net = NetworkConfigList::from_conflist_bytes(
        conf.to_string().as_bytes(),
        &dir.join("bench.conflist"),
    )?;
    let plugin_nanos = Arc::new(AtomicU64::new(0));
    let pn = plugin_nanos.clone();
    let cni = Cni::new(
        vec!["/opt/cni/bin".into(), "/usr/lib/cni".into()],
        dir.join("cache"),
    )
    .with_tracer(Arc::new(move |r| {
        pn.fetch_add(r.duration.as_nanos() as u64, Ordering::Relaxed);
    }));
    let nsdir = dir.join("netns");
    let mut adds = Vec::new();
    let mut dels = Vec::new();
    let mut both = Vec::new();
    let warmup = 5;
    for i in 0..cycles + warmup {
        let ns = netns::create(&nsdir, &format!("b{i}")).await?;
        let rtc = RuntimeConf::new(format!("bench{i}"), ns.display().to_string(), "eth0")
            .with_capability(
                "portMappings",
                json!([{"hostPort": 39999, "containerPort": 80, "protocol": "tcp"}]),
            );
        plugin_nanos.store(0, Ordering::Relaxed);
        let t = Instant::now();
        cni.add(&net, &rtc).await?;
        let add = Sample {
            total: t.elapsed(),
            plugins: Duration::from_nanos(plugin_nanos.swap(0, Ordering::Relaxed)),
        };
        let t = Instant::now();
        cni.del(&net, &rtc).await?;
        let del = Sample {
            total: t.elapsed(),
            plugins: Duration::from_nanos(plugin_nanos.swap(0, Ordering::Relaxed)),
        };
        netns::delete(&ns).await?;
        if i >= warmup {
            both.push(Sample {
                total: add.total + del.total,
                plugins: add.plugins + del.plugins,
            });
            adds.push(add);
            dels.push(del);
        }
    }
    println!(
        "ferrolet-cni ADD+DEL benchmark: bridge + host-local + portmap, {cycles} cycles (+{warmup} warm-up), times in ms"
    );
    println!(
        "| op       | total p50 | total p99 | plugins p50 | overhead p50 | overhead p99 | overhead avg | overhead |"
    );
    println!(
        "|----------|-----------|-----------|-------------|--------------|--------------|--------------|----------|"
    );
    row("ADD", &adds);
    row("DEL", &dels);
    row("ADD+DEL", &both);
    Ok(())
}
