//! CNI library for Ferrolet, following the containernetworking/cni SPEC (0.3.0–1.1.0): the
//! shim networks every pod sandbox through it, and `ferrolet-cni` debugs networks with it.
//!
//! Module map:
//! - [`config`]: network configuration lists — parsing, validation with precise errors
//!   (file, field, reason), conf-dir loading like libcni (`*.conf`, `*.conflist`, `*.json`).
//! - [`invoke`]: one plugin process — lookup across the plugin path, the `CNI_*` environment
//!   contract, stdin/stdout, per-call timeout, structured plugin errors, `--trace` records.
//! - [`chain`]: the operations on a list — [`Cni::add`], [`Cni::del`], [`Cni::check`],
//!   [`Cni::status`], [`Cni::gc`], [`Cni::version`]; per-plugin stdin (`prevResult`,
//!   `runtimeConfig` from declared capabilities).
//! - [`result`]: versioned results, parsed from any version into one current form.
//! - [`cache`]: the on-disk result cache (`<dir>/results/<net>-<id>-<ifname>`).
//! - [`netns`]: persistent named network namespaces (create without moving any thread of
//!   ours, delete, list, tell a live one).
//! - [`error`]: [`CniError`] and the plugin's own [`PluginError`].

pub mod cache;
pub mod chain;
pub mod config;
pub mod error;
pub mod invoke;
pub mod netns;
pub mod result;
#[cfg(test)]
mod result_props;

pub use cache::{CachedAttachment, ResultCache};
pub use chain::{Cni, GcAttachment, RuntimeConf, VersionInfo};
pub use config::{NetworkConfigList, PluginConf};
pub use error::{CniError, PluginError, Result};
pub use invoke::{Command, TraceRecord, Tracer};
pub use result::CniResult;
