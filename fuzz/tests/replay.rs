//! Every committed fuzz input, replayed without AFL: each file under `corpus/<target>/` and
//! `regressions/<target>/` goes through the target's entry function, which must return (no
//! panic) within the time budget. Part of `make unit`; needs neither root nor containerd.
//!
//! The budget is per input, for a debug build: AFL counts more than 1 s in an optimised build
//! as a hang, and a debug build runs these parsers 5-20 times slower, so 5 s here
//! (FUZZ_REPLAY_BUDGET_MS overrides it) still catches an input that does not end.

#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ferrolet_fuzz::TARGETS;

const DEFAULT_BUDGET: Duration = Duration::from_secs(5);

fn budget() -> Duration {
    std::env::var("FUZZ_REPLAY_BUDGET_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(DEFAULT_BUDGET, Duration::from_millis)
}

/// The files of `dir`, sorted (none if it does not exist).
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
        .collect();
    files.sort();
    files
}

/// Runs `target` on `data` on a thread of its own; the failure, if it panicked or overran.
fn run(target: fn(&[u8]), data: Vec<u8>, budget: Duration) -> Result<Duration, String> {
    let (done, wait) = mpsc::channel();
    let started = Instant::now();
    std::thread::Builder::new()
        .name("fuzz-input".into())
        .spawn(move || {
            let outcome = std::panic::catch_unwind(|| target(&data));
            let _ = done.send(outcome.map_err(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into())
            }));
        })
        .map_err(|e| format!("spawning a thread: {e}"))?;
    match wait.recv_timeout(budget) {
        Ok(Ok(())) => Ok(started.elapsed()),
        Ok(Err(panic)) => Err(format!("panicked: {panic}")),
        // The thread is left running; the test fails, and the process ends with it.
        Err(_) => Err(format!("still running after {budget:?}")),
    }
}

#[test]
fn every_corpus_and_regression_input_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let budget = budget();
    let mut failures = Vec::new();
    let mut total = 0;
    for (name, target) in TARGETS {
        for kind in ["corpus", "regressions"] {
            for file in inputs(&root.join(kind).join(name)) {
                let data = std::fs::read(&file).expect("reading an input");
                total += 1;
                if let Err(why) = run(*target, data, budget) {
                    failures.push(format!("{}: {why}", file.display()));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} inputs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{total} inputs replayed");
}

#[test]
fn every_target_has_a_corpus_and_a_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, _) in TARGETS {
        assert!(
            !inputs(&root.join("corpus").join(name)).is_empty(),
            "fuzz/corpus/{name}/ has no seeds"
        );
        assert!(
            root.join("fuzz_targets")
                .join(format!("{name}.rs"))
                .is_file(),
            "fuzz/fuzz_targets/{name}.rs is missing"
        );
    }
}
