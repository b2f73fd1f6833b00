//! `ferrolet`, the kubelet: pod sources, sync loop, pod workers, PLEG, probes, volumes and
//! status, driving pods through any CRI endpoint.
//!
//! Not built yet: the kubelet issues fill in this crate. Until then it has no binary, and
//! `make node` says so.
