//! Image errors and the gRPC status each one becomes.

use tonic::{Code, Status};

use crate::content::ContentError;
use crate::lease::LeaseError;
use crate::oci_layout::LayoutError;
use crate::reference::ReferenceError;
use crate::registry::RegistryError;

/// What can go wrong serving images.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The image reference does not parse.
    #[error("invalid image reference {reference:?}: {source}")]
    Reference {
        reference: String,
        #[source]
        source: ReferenceError,
    },
    /// The registry refused or failed the pull.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The content store refused a blob.
    #[error(transparent)]
    Content(#[from] ContentError),
    /// The call's lease could not be made or released.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// An image layout could not be imported.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A containerd call failed.
    #[error("containerd: {op} {name}: {}", status.message())]
    Containerd {
        op: &'static str,
        name: String,
        status: Status,
    },
    /// A stored or fetched document is not what its media type promises.
    #[error("image {image}: {reason}")]
    Malformed { image: String, reason: String },
    /// A layer did not unpack to the diff id its config declares.
    #[error("image {image}: layer {layer} unpacked to {got}, but the config says {want}")]
    DiffIdMismatch {
        image: String,
        layer: String,
        got: String,
        want: String,
    },
    /// The image is pinned (the sandbox image) and may not be removed.
    #[error("image {image} is pinned and cannot be removed")]
    Pinned { image: String },
    /// A request is missing what it must carry.
    #[error("{0}")]
    InvalidArgument(String),
    /// A download another pull started, and failed, for a blob this pull needs too.
    #[error(transparent)]
    Shared(std::sync::Arc<ImageError>),
}

impl ImageError {
    /// A containerd failure of `op` on `name`.
    pub fn containerd(op: &'static str, name: impl Into<String>) -> impl FnOnce(Status) -> Self {
        let name = name.into();
        move |status| ImageError::Containerd { op, name, status }
    }

    /// The gRPC code callers see.
    pub fn code(&self) -> Code {
        match self {
            ImageError::Reference { .. } | ImageError::InvalidArgument(_) => Code::InvalidArgument,
            ImageError::Registry(e) => e.grpc_code(),
            ImageError::Containerd { status, .. } => match status.code() {
                Code::NotFound => Code::NotFound,
                Code::Unavailable => Code::Unavailable,
                _ => Code::Internal,
            },
            ImageError::Pinned { .. } => Code::FailedPrecondition,
            ImageError::Shared(e) => e.code(),
            ImageError::Content(_)
            | ImageError::Layout(_)
            | ImageError::Lease(_)
            | ImageError::Malformed { .. }
            | ImageError::DiffIdMismatch { .. } => Code::Internal,
        }
    }
}

impl From<ImageError> for Status {
    fn from(e: ImageError) -> Self {
        Status::new(e.code(), e.to_string())
    }
}
