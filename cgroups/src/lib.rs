//! What ferrolet and ferrolet-cri both read from the kernel about cgroups, in one place so
//! the kubelet and the runtime never disagree on a format.
//!
//! Module map:
//! - [`oom`]: kernel OOM kills from `/dev/kmsg` (the kernel's `oom-kill:` summary line), with
//!   the victim's memory cgroup under either cgroup driver's naming.

pub mod oom;
