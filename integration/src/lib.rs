//! End-to-end test harness: every integration test runs against real containerd, runc, CNI
//! plugins and registries on this machine.
//!
//! - [`apiserver`]: an in-memory Kubernetes API server (HTTPS, client certificates and
//!   tokens, watches, CSR signing) that the kubelet's kube-rs client talks to as to a cluster.
//! - [`bench`]: what the benchmark programs share (signals, deadlines, percentiles, CPU ticks,
//!   the runtime stack's processes: shims found by their containerd's socket, pause processes).
//! - [`cgroups`]: the host's cgroups as tests read them, v1 or v2 alike.
//! - [`containerd`]: one private containerd per test binary (own root, state, socket), stopped
//!   and unmounted at process exit; each test gets its own namespace.
//! - [`cri`]: the real `ferrolet-cri` binary on a scratch socket, and CRI clients to it.
//! - [`leak`]: the leak checker every integration test calls after teardown.
//! - [`testimages`]: reproducible OCI image layouts built from Debian's static busybox
//!   (the `ferrolet-testimages` binary wraps it).
//! - [`registry`]: private registries for tests that watch or break one.
//! - [`scratch`]: per-test scratch directories that unmount and remove what is under them.
//! - [`network`]: per-test CNI networks (own bridge, subnet, conf, IPAM and cache dirs).
//! - [`containerd_cri`]: containerd's own CRI plugin as a test node (the reference runtime).
//! - [`csi_driver`]: a spec-following CSI Node service backed by directories, with its
//!   registration socket, for the kubelet's CSI tests.
//! - [`device_plugin`]: a spec-following device plugin (`v1beta1.DevicePlugin`) that
//!   registers with the kubelet's `kubelet.sock` and again with each new kubelet, for the
//!   kubelet's device manager tests.
//! - [`kubelet`]: the real `ferrolet` per test, on either runtime node.
//! - [`cluster`]: a ferrolet node joined to its own in-memory test API server.
//! - [`pods`]: a ferrolet-cri node per test (all its dirs in scratch), pod and container
//!   config builders, and the pod leak checks.
//! - [`prometheus`]: a strict parser of the Prometheus text format (`/metrics`).
//! - [`task_events`]: when tasks really started, from containerd's `/tasks/start` events
//!   (runtime- and kubelet-neutral start times for the benchmarks).
//! - [`soak`]: the chaos soak: pod churn on a cluster node while faults hit every daemon,
//!   with continuous invariant checks and the end's leak checks (`ferrolet-soak`).
//! - [`streaming`]: exec, attach and port-forward sessions for the tests over the repo's own
//!   streaming client (SPDY or WebSocket, plain or TLS), ranged transfers, fd counts.

pub mod apiserver;
pub mod bench;
pub mod cgroups;
pub mod cluster;
pub mod containerd;
pub mod containerd_cri;
pub mod cri;
pub mod csi_driver;
pub mod device_plugin;
pub mod kubelet;
pub mod leak;
pub mod network;
pub mod pods;
pub mod prometheus;
pub mod registry;
pub mod scratch;
pub mod soak;
pub mod streaming;
pub mod task_events;
pub mod testimages;

use std::path::{Path, PathBuf};

/// A workspace binary beside the running executable: a test's (`target/<profile>/deps`, the
/// binaries one level up) or a program's of this crate (`target/<profile>`, beside it).
///
/// # Panics
/// If it has not been built: `make test` builds every binary before testing.
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [dir.join(name), dir.parent().unwrap_or(dir).join(name)];
    match candidates.iter().find(|c| c.is_file()) {
        Some(found) => found.clone(),
        None => panic!(
            "{} not found: build it first (`cargo build --workspace --bins`, which `make test` does)",
            candidates[1].display()
        ),
    }
}

/// The directory of the workspace's binaries (`target/<profile>`), where the built
/// `ferrolet-cri` is (or would be): containerd finds Ferrolet's shim there ([`containerd::containerd_command`]).
pub fn workspace_bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().unwrap_or(Path::new("."));
    if dir.join("ferrolet-cri").is_file() {
        return dir.to_path_buf();
    }
    // A test binary in `target/<profile>/deps`.
    dir.parent().unwrap_or(dir).to_path_buf()
}

/// A command for a daemon the harness runs: in a process group of its own, as a service
/// manager starts each daemon. A daemon stopped by a test (SIGSTOP) would otherwise leave our
/// group orphaned with a stopped member, and the kernel then SIGHUPs the whole group.
pub fn daemon_command(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(program);
    command.process_group(0);
    command
}
