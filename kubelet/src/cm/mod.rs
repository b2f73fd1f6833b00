//! The container manager, as the Go kubelet's `pkg/kubelet/cm` for the cgroupfs driver: the
//! `kubepods` cgroup tree (per QoS class, then per pod) with node allocatable, pod-level
//! limits and the QoS classes' shares, the static CPU manager, and OOM watching.
//!
//! - [`cgroup`]: the cgroupfs driver (v1, hybrid, v2): make, update, destroy cgroups, their
//!   processes and usage.
//! - [`resource_config`]: what a cgroup is given (Go's `ResourceConfig`), driver-neutral.
//! - [`settings`]: the configuration the container manager runs with.
//! - [`pod_config`]: a pod cgroup's resources (Go's `ResourceConfigForPod`).
//! - [`qos`]: the Burstable and BestEffort cgroups' resources (Go's QoS `UpdateCgroups`).
//! - [`allocatable`]: the `kubepods` and reserved cgroups' resources from node allocatable,
//!   and the check that reservations fit capacity.
//! - [`manager`]: [`ContainerManager`], the tree itself: start-up, pod cgroups, QoS updates,
//!   removal.
//! - [`checkpoint_file`]: what the checkpoints share with Go's checkpoint manager (atomic
//!   writes, the checksum's hash, Go's JSON strings and field matching).
//! - [`cpu_manager`]: the CPU manager (`none` and `static` policies, its state file).
//! - [`devicemanager`]: device plugins: registration, their devices as extended resources,
//!   allocation at admission, what containers are created with, the checkpoint.

pub mod allocatable;
pub mod cgroup;
pub mod checkpoint_file;
pub mod cpu_manager;
pub mod devicemanager;
pub mod manager;
pub mod pod_config;
pub mod qos;
pub mod resource_config;
pub mod settings;

pub use manager::{CmError, ContainerManager};
pub use resource_config::ResourceConfig;
pub use settings::{CgroupDriver, CpuManagerPolicy, Settings};
