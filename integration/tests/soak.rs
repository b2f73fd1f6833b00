//! The chaos soak, short and seeded (issue #33): ~50 pod lifecycles on a cluster node while
//! 10 faults hit every daemon (each kind at least once), then every invariant and leak check
//! of `ferrolet-soak`. `make soak` runs the long one.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::time::Duration;

use ferrolet_integration::soak::{SoakOptions, run_and_report};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_seeded_soak_keeps_every_invariant_and_leaks_nothing() {
    let opts = SoakOptions {
        cycles: 50,
        seed: 33,
        faults: Some(10),
        convergence: Duration::from_secs(150),
        name: "ci".into(),
        ..Default::default()
    };
    let report = run_and_report(opts, |r| println!("{r}")).await;
    assert_eq!(
        report.faults.len(),
        10,
        "every fault asked for was injected"
    );
    for kind in ferrolet_integration::soak::faults::ALL {
        assert!(
            report.faults.iter().any(|f| f.kind == kind),
            "no {} fault landed",
            kind.name()
        );
    }
    assert!(report.lifecycles >= 50, "{}", report.summary());
    assert!(
        report.violations.is_empty() && report.leaks.is_empty(),
        "{}",
        report.summary()
    );
}
