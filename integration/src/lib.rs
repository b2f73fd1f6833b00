//! End-to-end test harness: every integration test runs against real containerd, runc, CNI
//! plugins and registries on this machine.
//!
//! - [`containerd`]: one private containerd per test binary (own root, state, socket), stopped
//!   and unmounted at process exit; each test gets its own namespace.
//! - [`cri`]: the real `ferrolet-cri` binary on a scratch socket, and CRI clients to it.
//! - [`leak`]: the leak checker every integration test calls after teardown.
//! - [`testimages`]: reproducible OCI image layouts built from Debian's static busybox
//!   (the `ferrolet-testimages` binary wraps it).
//! - [`registry`]: private registries for tests that watch or break one.
//! - [`scratch`]: per-test scratch directories that unmount and remove what is under them.
//! - [`network`]: per-test CNI networks (own bridge, subnet, conf, IPAM and cache dirs).

pub mod containerd;
pub mod cri;
pub mod leak;
pub mod network;
pub mod registry;
pub mod scratch;
pub mod testimages;
