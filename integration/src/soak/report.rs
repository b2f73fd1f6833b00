//! The soak's figures: what ran, the faults by kind, the checks and their violations, what
//! leaked, the daemons' memory and descriptors over the run; and the one line a script reads.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::faults::{ALL, Fault};
use super::invariants::{CHECKS, Violation};

/// One sample of a daemon.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Seconds from the soak's start.
    pub at: f64,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
}

/// Everything the soak found.
#[derive(Debug, Default)]
pub struct SoakReport {
    /// The seed the run was drawn from.
    pub seed: u64,
    /// Wall time.
    pub wall: Duration,
    /// Pods made, by source.
    pub created: BTreeMap<&'static str, usize>,
    /// Lifecycles completed: made, deleted, seen gone.
    pub lifecycles: usize,
    /// Exec and port-forward sessions tried and how many worked.
    pub sessions: BTreeMap<&'static str, (usize, usize)>,
    /// The first few failures of each kind of session (expected while faults land).
    pub session_errors: BTreeMap<&'static str, Vec<String>>,
    /// Every fault, in order.
    pub faults: Vec<Fault>,
    /// How many times each check ran.
    pub check_runs: BTreeMap<&'static str, u64>,
    /// What broke an invariant.
    pub violations: Vec<Violation>,
    /// What was left at the end.
    pub leaks: Vec<String>,
    /// Samples per daemon.
    pub samples: BTreeMap<&'static str, Vec<Sample>>,
    /// The last fault healed this long before the pods had all converged.
    pub convergence: Option<Duration>,
}

impl SoakReport {
    /// The line a script reads.
    pub fn summary(&self) -> String {
        format!(
            "soak: {} lifecycles, {} faults, {} violations, {} leaked",
            self.lifecycles,
            self.faults.len(),
            self.violations.len(),
            self.leaks.len()
        )
    }
}

/// Least-squares slope of `ys` over `xs`, per unit of x; 0 with fewer than two points.
pub fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len().min(ys.len()) as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        num += (x - mx) * (y - my);
        den += (x - mx) * (x - mx);
    }
    if den == 0.0 { 0.0 } else { num / den }
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "soak report: seed {}, {:.0} s",
            self.seed,
            self.wall.as_secs_f64()
        )?;
        let made: Vec<String> = self
            .created
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        writeln!(
            f,
            "pods: {} made ({}), {} lifecycles completed",
            self.created.values().sum::<usize>(),
            made.join(", "),
            self.lifecycles
        )?;
        for (kind, (tried, ok)) in &self.sessions {
            writeln!(f, "sessions: {kind} {ok}/{tried} completed")?;
            for e in self.session_errors.get(kind).into_iter().flatten() {
                writeln!(f, "  failed: {e}")?;
            }
        }
        writeln!(f, "\nfaults: {}", self.faults.len())?;
        for kind in ALL {
            let of: Vec<&Fault> = self.faults.iter().filter(|x| x.kind == kind).collect();
            let total: Duration = of.iter().map(|x| x.lasted).sum();
            writeln!(
                f,
                "  {:<22} {:>4}   {:>7.1} s in all",
                kind.name(),
                of.len(),
                total.as_secs_f64()
            )?;
        }
        if let Some(c) = self.convergence {
            writeln!(
                f,
                "  every desired pod converged {:.1} s after the last fault",
                c.as_secs_f64()
            )?;
        }
        writeln!(f, "\ninvariant checks:")?;
        for check in CHECKS {
            let runs = self.check_runs.get(check).copied().unwrap_or(0);
            let v = self.violations.iter().filter(|v| v.check == check).count();
            writeln!(f, "  {check:<32} {runs:>6} runs  {v:>3} violations")?;
        }
        for v in &self.violations {
            writeln!(
                f,
                "  VIOLATION {} {} at {:.1} s: {}",
                v.check,
                v.object,
                v.at.as_secs_f64(),
                v.evidence
            )?;
        }
        writeln!(f, "\nleaks: {}", self.leaks.len())?;
        for l in &self.leaks {
            writeln!(f, "  - {l}")?;
        }
        writeln!(
            f,
            "\ndaemons (RSS KiB / fds: min median max; trend per hour over the run):"
        )?;
        for (daemon, samples) in &self.samples {
            if samples.is_empty() {
                continue;
            }
            let rss: Vec<u64> = samples.iter().map(|s| s.rss_kib).collect();
            let fds: Vec<u64> = samples.iter().map(|s| s.fds).collect();
            let xs: Vec<f64> = samples.iter().map(|s| s.at / 3600.0).collect();
            let rss_f: Vec<f64> = rss.iter().map(|&r| r as f64).collect();
            let fds_f: Vec<f64> = fds.iter().map(|&r| r as f64).collect();
            writeln!(
                f,
                "  {daemon:<12} {} samples  RSS {} {} {} ({:+.0}/h)  fds {} {} {} ({:+.1}/h)",
                samples.len(),
                rss.iter().min().unwrap_or(&0),
                median(rss.clone()),
                rss.iter().max().unwrap_or(&0),
                slope(&xs, &rss_f),
                fds.iter().min().unwrap_or(&0),
                median(fds.clone()),
                fds.iter().max().unwrap_or(&0),
                slope(&xs, &fds_f),
            )?;
        }
        write!(f, "\n{}", self.summary())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_nothing() {
        assert_eq!(slope(&[0.0, 1.0, 2.0], &[1.0, 3.0, 5.0]), 2.0);
        assert_eq!(slope(&[1.0], &[1.0]), 0.0);
        assert_eq!(slope(&[1.0, 1.0], &[1.0, 2.0]), 0.0);
    }

    #[test]
    fn the_last_line_is_the_summary() {
        let r = SoakReport {
            lifecycles: 3,
            leaks: vec!["x".into()],
            ..Default::default()
        };
        let text = r.to_string();
        assert_eq!(
            text.lines().last(),
            Some("soak: 3 lifecycles, 0 faults, 0 violations, 1 leaked")
        );
    }
}
