//! What can go wrong driving cgroupfs: every error names the cgroup (its cgroupfs name), the
//! file or directory, and the cause.

use std::io;
use std::path::PathBuf;

/// An error of a cgroup driver.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// systemd (the systemd driver) did not make, change or stop a unit.
    #[error(transparent)]
    Systemd(#[from] super::systemd::SystemdError),
    /// A cgroup file or directory could not be read, made or removed.
    #[error("cgroup {cgroup}: {op} {}: {source}", path.display())]
    Io {
        /// The cgroup's cgroupfs name (`/kubepods/burstable`), or the hierarchy for node-wide
        /// files.
        cgroup: String,
        /// What was tried (`read`, `mkdir`, `rmdir`).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A value could not be written to a cgroup file.
    #[error("cgroup {cgroup}: failed to write {value:?} to {}: {source}", path.display())]
    Write {
        /// The cgroup's cgroupfs name.
        cgroup: String,
        /// The file.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The cause.
        source: io::Error,
    },
    /// A cgroup file held something we cannot read a number from.
    #[error("cgroup {cgroup}: {}: unexpected content {content:?}", path.display())]
    Parse {
        /// The cgroup's cgroupfs name.
        cgroup: String,
        /// The file.
        path: PathBuf,
        /// What it held (its offending part).
        content: String,
    },
    /// The kernel kept other shares than those written (runc's read-back check).
    #[error("cgroup {cgroup}: the {bound} allowed cpu-shares is {actual}")]
    CpuShares {
        /// The cgroup's cgroupfs name.
        cgroup: String,
        /// `maximum` or `minimum`.
        bound: &'static str,
        /// What the kernel kept.
        actual: u64,
    },
    /// The memory limit is below what the cgroup already uses (v1 EBUSY, runc's words).
    #[error(
        "cgroup {cgroup}: unable to set memory limit to {limit} (current usage: {usage}, peak usage: {peak})"
    )]
    MemoryBelowUsage {
        /// The cgroup's cgroupfs name.
        cgroup: String,
        /// The limit asked for.
        limit: i64,
        /// Current usage in bytes.
        usage: u64,
        /// Peak usage in bytes.
        peak: u64,
    },
    /// A setting needs a controller this node does not have.
    #[error("cgroup {cgroup}: cannot set {setting}: the {controller} controller is not available")]
    MissingController {
        /// The cgroup's cgroupfs name.
        cgroup: String,
        /// The controller (`memory`, `cpu`).
        controller: &'static str,
        /// The file that would have been written or read.
        setting: &'static str,
    },
    /// Controllers the kubelet needs are not mounted (Go's validateSystemRequirements words).
    #[error("system validation failed - Following Cgroup subsystem not mounted: [{}]", .0.join(" "))]
    NotMounted(Vec<String>),
    /// No cgroup hierarchy in the mount table.
    #[error("failed to find cgroup mounts")]
    NoMounts,
    /// The mount table could not be read.
    #[error("read {}: {source}", path.display())]
    Mountinfo {
        /// The mountinfo file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A cgroup name component that cannot name a cgroup (Go's NewCgroupName panics).
    #[error("invalid character in component [{0:?}] of CgroupName")]
    InvalidName(String),
    /// Destroying the root would remove every cgroup of the node.
    #[error("refusing to destroy the root cgroup")]
    DestroyRoot,
}

/// The cause of a failed `op` on `path` of `cgroup`.
pub(super) fn io_error(
    cgroup: &str,
    op: &'static str,
    path: PathBuf,
    source: io::Error,
) -> CgroupError {
    CgroupError::Io {
        cgroup: cgroup.to_string(),
        op,
        path,
        source,
    }
}
