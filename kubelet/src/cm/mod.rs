//! The container manager, as the Go kubelet's `pkg/kubelet/cm` for the cgroupfs driver: the
//! `kubepods` cgroup tree (per QoS class, then per pod) with node allocatable, pod-level
//! limits and the QoS classes' shares, the static CPU manager, and OOM watching.
//!
//! - [`resource_config`]: what a cgroup is given (Go's `ResourceConfig`), driver-neutral.
//! - [`settings`]: the configuration the container manager runs with.
//! - [`cpu_manager`]: the CPU manager (`none` and `static` policies, its state file).

// Parts land before the kubelet calls them (issue #19 is built in steps); this goes once the
// container manager is wired into start-up and the pod sync.
#![allow(dead_code, unused_imports)]

pub mod cpu_manager;
pub mod resource_config;
pub mod settings;

pub use resource_config::ResourceConfig;
pub use settings::{CpuManagerPolicy, Settings};
