//! A call's failure as the ttrpc status containerd maps to its errdefs.

use ferrolet_proto::ttrpc::Status;

/// gRPC codes the Task service answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Code {
    /// Anything without a better code (runtime failures, as the Go shim's).
    Unknown = 2,
    /// A malformed request.
    InvalidArgument = 3,
    /// No such container or process, or it has already exited.
    NotFound = 5,
    /// The id is taken.
    AlreadyExists = 6,
    /// Not in a state that allows the call.
    FailedPrecondition = 9,
    /// A method or feature this shim does not have.
    Unimplemented = 12,
}

/// A failed call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CallError {
    /// The code.
    pub code: Code,
    /// What went wrong, naming the object.
    pub message: String,
}

impl CallError {
    /// A failure with `code`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The ttrpc status.
    pub fn status(&self) -> Status {
        Status {
            code: self.code as i32,
            message: self.message.clone(),
            details: Vec::new(),
        }
    }
}

/// Shorthand constructors.
pub fn not_found(message: impl Into<String>) -> CallError {
    CallError::new(Code::NotFound, message)
}

/// See [`not_found`].
pub fn precondition(message: impl Into<String>) -> CallError {
    CallError::new(Code::FailedPrecondition, message)
}

/// See [`not_found`].
pub fn unknown(message: impl Into<String>) -> CallError {
    CallError::new(Code::Unknown, message)
}

/// See [`not_found`].
pub fn invalid(message: impl Into<String>) -> CallError {
    CallError::new(Code::InvalidArgument, message)
}
