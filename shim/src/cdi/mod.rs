//! CDI, the Container Device Interface: devices a container asks for by qualified name
//! (`vendor.com/class=name`, CRI's `cdi_devices` or `cdi.k8s.io/*` annotations), resolved
//! against the spec files vendors put in `/etc/cdi` and `/var/run/cdi`, and the edits those
//! files describe (device nodes, mounts, env, hooks, groups) applied to the container's OCI
//! spec, as containerd's CRI plugin does since 1.7.
//!
//! Our own implementation of the reference's (`tags.cncf.io/container-device-interface`)
//! rules, not the `container-device-interface` crate: see ARCHITECTURE.md for why.
//!
//! - `name`: qualified names and kinds, with their character rules.
//! - `request`: the device names a CreateContainer request carries.
//! - `spec`, `version`, `validate`: the spec file format, which versions have which fields,
//!   and what makes a file valid.
//! - `cache`: the [`Registry`] of spec directories, re-read as files change.
//! - `edits`: applying a spec's edits to an OCI spec.

mod cache;
mod edits;
mod name;
mod request;
mod spec;
mod validate;
mod version;

use std::path::PathBuf;
use std::sync::Arc;

use tonic::Code;

pub use self::cache::{Registry, Resolved};
pub use self::request::{ANNOTATION_PREFIX, requested_devices};

/// Why a container's CDI devices cannot be given to it.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// A `cdi_devices` entry is not a fully qualified device name.
    #[error("CDI device {device:?}: {reason}")]
    InvalidName {
        /// The name as given.
        device: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `cdi.k8s.io/*` annotation holds something that is not a qualified device name.
    #[error("annotation {key:?}: invalid CDI device name {device:?}: {reason}")]
    InvalidAnnotation {
        /// The annotation's key.
        key: String,
        /// The offending entry of its value.
        device: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Devices no spec file defines, or that two of the same priority define.
    #[error("{}", unresolved_message(problems, broken))]
    Unresolved {
        /// Each device that could not be resolved, and why.
        problems: Vec<Unresolved>,
        /// Spec files that could not be loaded, which may be where a device was meant to be.
        broken: Vec<PathBuf>,
    },
    /// A device's edits could not be applied (its host node is missing, or it asks for what
    /// this runtime cannot express).
    #[error("CDI device {device:?}: injection failed: {reason}")]
    Edit {
        /// The device whose edits failed.
        device: String,
        /// What failed.
        reason: String,
    },
    /// The blocking resolution task died.
    #[error("CDI device resolution: {0}")]
    Internal(String),
}

/// One device that could not be resolved.
#[derive(Debug)]
pub enum Unresolved {
    /// No spec file defines it.
    Unknown(String),
    /// Two spec files of the same priority define it.
    Ambiguous {
        /// The device.
        device: String,
        /// One file defining it.
        first: PathBuf,
        /// Another.
        second: PathBuf,
    },
}

fn unresolved_message(problems: &[Unresolved], broken: &[PathBuf]) -> String {
    let mut text = problems
        .iter()
        .map(|p| match p {
            Unresolved::Unknown(device) => format!("CDI device {device:?}: unresolvable"),
            Unresolved::Ambiguous {
                device,
                first,
                second,
            } => format!(
                "CDI device {device:?}: unresolvable: defined by both {first:?} and {second:?} \
                 at the same priority"
            ),
        })
        .collect::<Vec<_>>()
        .join("; ");
    if !broken.is_empty() {
        let paths: Vec<String> = broken.iter().map(|p| format!("{p:?}")).collect();
        text.push_str(&format!(
            " (CDI spec files that could not be loaded: {})",
            paths.join(", ")
        ));
    }
    text
}

impl CdiError {
    /// The gRPC code CreateContainer answers with: the request's fault for names that do not
    /// resolve (InvalidArgument, as the issue and containerd's message put it), the node's for
    /// edits that cannot be made.
    pub fn code(&self) -> Code {
        match self {
            CdiError::InvalidName { .. }
            | CdiError::InvalidAnnotation { .. }
            | CdiError::Unresolved { .. } => Code::InvalidArgument,
            CdiError::Edit { .. } => Code::FailedPrecondition,
            CdiError::Internal(_) => Code::Internal,
        }
    }
}

impl Registry {
    /// [`Registry::resolve`] on a blocking thread: it lists directories and may read files.
    pub async fn resolve_async(
        self: &Arc<Self>,
        devices: Vec<String>,
    ) -> Result<Resolved, CdiError> {
        let registry = self.clone();
        tokio::task::spawn_blocking(move || registry.resolve(&devices))
            .await
            .map_err(|e| CdiError::Internal(e.to_string()))?
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn unresolved_devices_are_each_named() {
        let err = CdiError::Unresolved {
            problems: vec![
                Unresolved::Unknown("v.com/c=x".into()),
                Unresolved::Ambiguous {
                    device: "v.com/c=y".into(),
                    first: "/etc/cdi/a.yaml".into(),
                    second: "/etc/cdi/b.yaml".into(),
                },
            ],
            broken: vec![],
        };
        assert_eq!(
            err.to_string(),
            "CDI device \"v.com/c=x\": unresolvable; CDI device \"v.com/c=y\": unresolvable: \
             defined by both \"/etc/cdi/a.yaml\" and \"/etc/cdi/b.yaml\" at the same priority"
        );
        assert_eq!(err.code(), Code::InvalidArgument);
    }

    #[tokio::test]
    async fn resolution_runs_off_the_runtime() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = Arc::new(Registry::new(vec![tmp.path().to_path_buf()]));
        let err = registry
            .resolve_async(vec!["v.com/c=x".into()])
            .await
            .err()
            .unwrap();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(
            registry.resolve_async(vec![]).await.is_ok(),
            "nothing asked, nothing to resolve"
        );
    }
}
