//! Pulling from OCI/Docker registries: the v2 distribution protocol, client side.
//!
//! containerd 1.6 has no server-side pull, so ferrolet-cri speaks to registries itself:
//! [`client::Session::resolve`] turns a [`crate::reference::Reference`] into an image manifest
//! for this node's platform, and [`client::Session::fetch_blob`] streams its config and layers
//! for the caller to write into containerd's content store. Mirrors, plain HTTP, TLS trust and
//! default credentials come from [`hosts::HostsConfig`].

pub mod auth;
pub mod client;
pub mod error;
pub mod hosts;
pub mod manifest;
#[cfg(test)]
mod manifest_props;

pub use auth::Credentials;
pub use client::{BlobProgress, BlobStream, RegistryClient, Resolved, Session};
pub use error::RegistryError;
pub use hosts::{HostConfig, HostsConfig};
pub use manifest::{Descriptor, DescriptorExt, Platform};
