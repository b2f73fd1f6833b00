//! What ferrolet and ferrolet-cri both read from the kernel about cgroups, in one place so
//! the kubelet and the runtime never disagree on a format.
//!
//! Module map:
//! - [`usage`]: a cgroup's CPU, memory and pid counters from cgroupfs, v1 or v2, with
//!   cadvisor's working-set arithmetic.
//! - [`oom`]: kernel OOM kills from `/dev/kmsg` (the kernel's `oom-kill:` summary line), with
//!   the victim's memory cgroup under either cgroup driver's naming.

pub mod oom;
pub mod usage;
