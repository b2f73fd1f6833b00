//! Pull benchmark: `big:1` (one 64 MiB layer) from the environment's registry, by ferrolet-cri
//! (CRI PullImage) and by `ctr images pull --plain-http`, against the same private containerd
//! in the same run, cold every time (image removed and content collected between runs).
//!
//! Run as root after `make env`: `cargo bench -p ferrolet-integration --bench pull`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark reports failure by panicking

use std::process::Command;
use std::time::{Duration, Instant};

use ferrolet_integration::containerd::containerd;
use ferrolet_integration::cri::CriServer;
use ferrolet_integration::registry::OPEN_REGISTRY;
use ferrolet_integration::scratch::Scratch;
use ferrolet_proto::cri::{ImageSpec, PullImageRequest, RemoveImageRequest};

const RUNS: usize = 5;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ctr(args: &[&str]) {
    let sock = containerd().socket().display().to_string();
    let out = Command::new("ctr")
        .args(["--address", &sock, "-n", "bench-ctr"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ctr {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::main]
async fn main() {
    // `cargo test --benches` runs this binary without `--bench`: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let image = format!("{OPEN_REGISTRY}/ferrolet/big:1");
    let scratch = Scratch::new("bench-pull");
    let config = format!(
        "containerd = \"{}\"\nnamespace = \"bench-ferrolet\"\nroot = \"{}/root\"\nlog_level = \"warn\"\n",
        containerd().socket().display(),
        scratch.path().display()
    );
    let cri = CriServer::start(scratch.path(), &config);
    let mut images = cri.images().await;
    let spec = || {
        Some(ImageSpec {
            image: image.clone(),
            ..Default::default()
        })
    };

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        // Alternate who goes first, so neither always meets a warmer page cache.
        for turn in 0..2 {
            if (run + turn) % 2 == 0 {
                let t = Instant::now();
                images
                    .pull_image(PullImageRequest {
                        image: spec(),
                        auth: None,
                        sandbox_config: None,
                    })
                    .await
                    .unwrap();
                ours.push(t.elapsed());
                // RemoveImage deletes every name and collects synchronously: cold next time.
                images
                    .remove_image(RemoveImageRequest { image: spec() })
                    .await
                    .unwrap();
            } else {
                let t = Instant::now();
                ctr(&["images", "pull", "--plain-http", &image]);
                theirs.push(t.elapsed());
                ctr(&["images", "rm", "--sync", &image]);
            }
        }
    }
    let (a, b) = (median(ours.clone()), median(theirs.clone()));
    println!("pull of {image} (64 MiB layer), cold, {RUNS} runs each");
    println!("  ferrolet-cri PullImage : median {a:>8.1?}  runs {ours:.1?}");
    println!("  ctr images pull        : median {b:>8.1?}  runs {theirs:.1?}");
    println!(
        "  ratio ferrolet-cri / ctr = {:.2} (goal <= 1.0)",
        a.as_secs_f64() / b.as_secs_f64()
    );
}
