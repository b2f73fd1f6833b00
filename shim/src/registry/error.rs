//! Registry errors, each naming what it is about and mapping to one gRPC code.

use crate::reference::ReferenceError;

/// A boxed cause kept for `source()` chains.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a registry operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The image reference does not parse.
    #[error(transparent)]
    InvalidReference(#[from] ReferenceError),
    /// The repository, tag or blob does not exist.
    #[error("image {reference} not found: {detail}")]
    NotFound {
        /// The reference (or blob) asked for.
        reference: String,
        /// What the registry said.
        detail: String,
    },
    /// The image is an index with no manifest for this node's platform.
    #[error("image {reference} has no manifest for {platform} (it has: {available})")]
    NoMatchingPlatform {
        /// The reference asked for.
        reference: String,
        /// The platform wanted.
        platform: String,
        /// The platforms the index lists.
        available: String,
    },
    /// Credentials are missing or were rejected.
    #[error("registry {registry} requires authentication: {detail}")]
    Unauthenticated {
        /// The registry domain.
        registry: String,
        /// What happened.
        detail: String,
    },
    /// The credentials are fine but do not grant access.
    #[error("registry {registry} denied access: {detail}")]
    PermissionDenied {
        /// The registry domain.
        registry: String,
        /// What the registry said.
        detail: String,
    },
    /// The registry could not be reached, timed out, or answered 5xx/429.
    #[error("registry {address} is unavailable: {detail}")]
    Unavailable {
        /// `host:port` of the endpoint.
        address: String,
        /// What failed, including the cause chain.
        detail: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// The image uses a format we do not pull (schema1, non-container artifacts, foreign
    /// layers).
    #[error("image {reference} is not supported: {detail}")]
    Unsupported {
        /// The reference asked for.
        reference: String,
        /// What is unsupported.
        detail: String,
    },
    /// The registry answered something we cannot use: bad JSON, digest or size mismatch,
    /// an unexpected status.
    #[error("registry {registry}: {detail}")]
    Protocol {
        /// The registry domain or endpoint address.
        registry: String,
        /// What was wrong.
        detail: String,
    },
    /// The hosts configuration is invalid (reported at start-up).
    #[error("registry configuration: {detail}")]
    Config {
        /// What is wrong.
        detail: String,
    },
}

impl RegistryError {
    /// The gRPC status code the CRI ImageService should answer with.
    pub fn grpc_code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            RegistryError::InvalidReference(_) => Code::InvalidArgument,
            RegistryError::NotFound { .. } | RegistryError::NoMatchingPlatform { .. } => {
                Code::NotFound
            }
            RegistryError::Unauthenticated { .. } => Code::Unauthenticated,
            RegistryError::PermissionDenied { .. } => Code::PermissionDenied,
            RegistryError::Unavailable { .. } => Code::Unavailable,
            RegistryError::Unsupported { .. } => Code::FailedPrecondition,
            RegistryError::Protocol { .. } => Code::Internal,
            RegistryError::Config { .. } => Code::FailedPrecondition,
        }
    }

    /// An `Unavailable` for a transport error, with its whole cause chain in the message
    /// because gRPC clients only ever see the message.
    pub(crate) fn unavailable(address: &str, err: reqwest::Error) -> RegistryError {
        let mut detail = if err.is_timeout() {
            "timed out".to_string()
        } else if err.is_connect() {
            "cannot connect".to_string()
        } else {
            "request failed".to_string()
        };
        let mut cause: Option<&dyn std::error::Error> = Some(&err);
        let mut last = String::new();
        while let Some(c) = cause {
            let text = c.to_string();
            // reqwest and hyper repeat their cause's text; keep each distinct message once.
            if !text.is_empty() && !last.contains(&text) {
                detail.push_str(": ");
                detail.push_str(&text);
            }
            last = text;
            cause = c.source();
        }
        RegistryError::Unavailable {
            address: address.to_string(),
            detail,
            source: Some(Box::new(err)),
        }
    }
}

impl From<RegistryError> for tonic::Status {
    fn from(e: RegistryError) -> Self {
        tonic::Status::new(e.grpc_code(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_messages() {
        let e = RegistryError::NotFound {
            reference: "127.0.0.1:5000/x:1".into(),
            detail: "manifest unknown".into(),
        };
        assert_eq!(e.grpc_code(), tonic::Code::NotFound);
        assert!(e.to_string().contains("127.0.0.1:5000/x:1"));
        let e = RegistryError::Unavailable {
            address: "127.0.0.1:1".into(),
            detail: "cannot connect".into(),
            source: None,
        };
        let s: tonic::Status = e.into();
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert!(s.message().contains("127.0.0.1:1"));
        let e: RegistryError = crate::reference::Reference::parse("UPPER")
            .unwrap_err()
            .into();
        assert_eq!(e.grpc_code(), tonic::Code::InvalidArgument);
    }
}
