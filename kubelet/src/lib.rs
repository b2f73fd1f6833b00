//! `ferrolet`: a kubelet that drives pods to their desired state through CRI.
//!
//! Module map:
//! - [`types`]: pod updates, the runtime's view of a pod, the Go kubelet's label keys.
//! - [`cri`]: the CRI client (timeouts; the runtime's pods read back by label).

pub mod cri;
pub mod types;
