//! `ferrolet check`: a preflight of the node, run with the flags the kubelet runs with
//! (`ferrolet [FLAGS] check`). It reads the configuration as the kubelet would, then reports
//! one `pass`/`warn`/`fail` line per check — the host ([`host`]: cgroups, swap, kernel modules,
//! sysctls, ports), the runtime ([`runtime`]: CRI Version/Status/RuntimeConfig, the CNI
//! configuration) and the cluster ([`cluster`]: certificate files, clock skew against the API
//! server) — and fails when any check does. Names and wording follow kubeadm's preflight
//! (`Swap`, `CRI`, `Port-10250`, `FileContent--proc-sys-net-ipv4-ip_forward`) where it has the
//! check.

mod cluster;
mod host;
mod runtime;

use crate::config::{CheckArgs, Config, Flags};

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Fine.
    Pass,
    /// Works, but not as it should (the kubelet starts).
    Warn,
    /// The kubelet will not start or will not work.
    Fail,
}

/// One check's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Pass, warn or fail.
    pub level: Level,
    /// The check's name (kubeadm's where it has one).
    pub name: String,
    /// What was found.
    pub message: String,
}

impl Finding {
    fn new(level: Level, name: impl Into<String>, message: impl Into<String>) -> Self {
        Finding {
            level,
            name: name.into(),
            message: message.into(),
        }
    }
    /// A passed check.
    pub fn pass(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Level::Pass, name, message)
    }
    /// A warning.
    pub fn warn(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Level::Warn, name, message)
    }
    /// A failed check.
    pub fn fail(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Level::Fail, name, message)
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let level = match self.level {
            Level::Pass => "pass",
            Level::Warn => "warn",
            Level::Fail => "fail",
        };
        write!(f, "[{level}] {}: {}", self.name, self.message)
    }
}

/// Why `ferrolet check` exits non-zero.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Some checks failed (each printed above).
    #[error("preflight: {failed} of {total} checks failed")]
    Failed {
        /// How many failed.
        failed: usize,
        /// How many ran.
        total: usize,
    },
    /// The async runtime for the runtime and cluster checks could not start.
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// Runs every check, printing each line as it completes; Err when any failed.
pub fn main(flags: &Flags, args: &CheckArgs) -> Result<(), CheckError> {
    let mut findings = Vec::new();
    let mut report = |f: Finding| {
        println!("{f}");
        findings.push(f);
    };
    let config = match Config::load(flags) {
        Ok((config, warnings)) => {
            let source = match &flags.config {
                Some(p) => format!("{} and the flags", p.display()),
                None => "the flags (no --config)".to_string(),
            };
            report(Finding::pass("Config", format!("read {source}")));
            for w in warnings {
                report(Finding::warn("Config", w));
            }
            Some(config)
        }
        Err(e) => {
            report(Finding::fail("Config", e.to_string()));
            None
        }
    };
    let proc = host::Proc::system();
    report(host::swap(&proc, config.as_ref()));
    for f in host::kernel(&proc) {
        report(f);
    }
    if let Some(config) = &config {
        report(host::cgroups(config));
        for f in host::ports(config) {
            report(f);
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CheckError::Runtime)?;
        for f in rt.block_on(runtime::checks(config)) {
            report(f);
        }
        for f in rt.block_on(cluster::checks(config)) {
            report(f);
        }
    }
    report(runtime::cni(&args.cni_conf_dir));
    let failed = findings.iter().filter(|f| f.level == Level::Fail).count();
    let warned = findings.iter().filter(|f| f.level == Level::Warn).count();
    println!(
        "ferrolet check: {} passed, {warned} warnings, {failed} failed",
        findings.len() - failed - warned
    );
    match failed {
        0 => Ok(()),
        failed => Err(CheckError::Failed {
            failed,
            total: findings.len(),
        }),
    }
}
