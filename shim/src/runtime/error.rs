//! The runtime's error: a gRPC code with a message naming the object and the cause.

use tonic::{Code, Status};

/// A failed runtime call, as the client will see it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct RuntimeError {
    code: Code,
    message: String,
}

impl RuntimeError {
    /// An error with an explicit code.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The request is malformed.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// The object does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    /// The object's state forbids the call.
    pub fn precondition(message: impl Into<String>) -> Self {
        Self::new(Code::FailedPrecondition, message)
    }

    /// Something failed on our side.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }

    /// The gRPC code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// Prefixes the message with what was being done.
    pub fn context(self, what: impl std::fmt::Display) -> Self {
        Self {
            code: self.code,
            message: format!("{what}: {}", self.message),
        }
    }

    /// Maps a containerd call's failure, keeping its code.
    pub fn containerd(op: impl std::fmt::Display) -> impl FnOnce(Status) -> Self {
        move |status| Self::new(status.code(), format!("{op}: {}", status.message()))
    }
}

impl From<RuntimeError> for Status {
    fn from(e: RuntimeError) -> Self {
        Status::new(e.code, e.message)
    }
}

/// Errors of the helper modules that know their own gRPC code.
macro_rules! coded {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for RuntimeError {
            fn from(e: $t) -> Self {
                Self::new(e.code(), e.to_string())
            }
        }
    )*};
}

coded!(
    crate::oci::OciError,
    crate::cdi::CdiError,
    crate::sandbox::files::FilesError,
    crate::sandbox::network::NetworkError,
    crate::container::exec::ExecError,
    crate::image::error::ImageError,
    crate::task::TaskError,
);

macro_rules! internal {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for RuntimeError {
            fn from(e: $t) -> Self {
                Self::internal(e.to_string())
            }
        }
    )*};
}

internal!(
    crate::store::StoreError,
    crate::mount::MountError,
    crate::container::io::IoError,
    crate::stats::StatsError,
    crate::oci_layout::LayoutError,
);

/// The result of a runtime call.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// The outcome of steps that all ran (a teardown goes as far as it can): the first failure's
/// code, with every failure's message, or success when none failed.
pub fn all_of(steps: impl IntoIterator<Item = Result<()>>) -> Result<()> {
    let failures: Vec<RuntimeError> = steps.into_iter().filter_map(Result::err).collect();
    let Some(first) = failures.first() else {
        return Ok(());
    };
    let message = failures
        .iter()
        .map(|e| e.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Err(RuntimeError::new(first.code, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_of_keeps_the_first_code_and_every_message() {
        assert!(all_of([Ok(()), Ok(())]).is_ok());
        let e = all_of([
            Ok(()),
            Err(RuntimeError::new(
                Code::Unavailable,
                "deleting task t: closed",
            )),
            Err(RuntimeError::internal("removing /x: busy")),
        ])
        .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
        assert_eq!(e.to_string(), "deleting task t: closed; removing /x: busy");
    }
}
