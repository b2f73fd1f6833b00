//! `ferrolet-soak`: the chaos soak (issue #33) at any length. A ferrolet node joined to the
//! in-memory API server, on ferrolet-cri and a containerd of its own, runs a churn of static
//! and API pods while seeded faults hit every daemon; invariants are checked all along, and
//! at the end nothing may be left. The report ends with the line
//! `soak: <n> lifecycles, <m> faults, <v> violations, <l> leaked`; the exit status is 1 when
//! anything was violated or leaked. Needs root and `make env` (the test images).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Parser;
use ferrolet_integration::soak::faults::{ALL, FaultKind};
use ferrolet_integration::soak::{SoakOptions, run_and_report};

#[derive(Parser, Debug)]
#[command(
    about = "Pod churn on a ferrolet node while faults hit every daemon; invariants and leaks checked"
)]
struct Args {
    /// Pod lifecycles (made, deleted, gone) to run.
    #[arg(long, default_value_t = 1000)]
    cycles: usize,
    /// Seed of every random choice (pods, gaps, faults): the same seed replays the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Faults to inject over the run [default: one per 9 lifecycles].
    #[arg(long)]
    faults: Option<usize>,
    /// Fault kinds to draw from, comma-separated [default: all].
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Desired pods at once.
    #[arg(long, default_value_t = 8)]
    max_pods: usize,
    /// Seconds after the last fault by which every desired pod must have converged.
    #[arg(long, default_value_t = 180)]
    convergence_secs: u64,
    /// Also write the report to this file.
    #[arg(long)]
    report: Option<PathBuf>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let kinds = if args.kinds.is_empty() {
        ALL.to_vec()
    } else {
        let mut kinds = Vec::new();
        for name in &args.kinds {
            match FaultKind::parse(name) {
                Some(k) => kinds.push(k),
                None => bail!(
                    "unknown fault kind {name:?}; known: {}",
                    ALL.map(FaultKind::name).join(", ")
                ),
            }
        }
        kinds
    };
    let cancel =
        ferrolet_integration::bench::install_signal_thread("the pods go and the end's checks run")?;
    let opts = SoakOptions {
        cancel: Some(cancel),
        cycles: args.cycles,
        seed: args.seed,
        faults: args.faults,
        kinds,
        max_pods: args.max_pods,
        convergence: Duration::from_secs(args.convergence_secs),
        ..Default::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let path = args.report.clone();
    let report = runtime.block_on(run_and_report(opts, |report| {
        let text = report.to_string();
        println!("\n{text}");
        if let Some(path) = &path
            && let Err(e) = std::fs::write(path, format!("{text}\n"))
        {
            eprintln!("writing {}: {e}", path.display());
        }
    }));
    if !report.violations.is_empty() || !report.leaks.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
