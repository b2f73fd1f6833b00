//! The error stream's texts: from v4 on a `metav1.Status` JSON (NonZeroExitCode with the
//! ExitCode cause, InternalError, Success), before v4 the status message as plain text and
//! nothing on success; and the client's reading of them (client-go's error decoders).

use serde::{Deserialize, Serialize};

use super::remote_command::CommandResult;

/// `metav1.Status` as it goes over the error stream (fields in Go's JSON order; empty ones
/// omitted as Go's `omitempty`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Always `{}` (Go's ListMeta has no omitempty).
    #[serde(default)]
    pub metadata: Empty,
    /// `Success` or `Failure`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Human-readable description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Machine-readable reason (`NonZeroExitCode`, `InternalError`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Causes (the exit code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Details>,
    /// HTTP-like code (500 for internal errors).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: i32,
}

/// An empty JSON object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Empty {}

/// `metav1.StatusDetails` (only the causes matter here).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Details {
    /// The causes, e.g. `{"reason":"ExitCode","message":"3"}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<Cause>,
}

/// `metav1.StatusCause`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cause {
    /// Cause type (`ExitCode`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Cause text (the exit code in decimal).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

fn is_zero(code: &i32) -> bool {
    *code == 0
}

/// Go's reason for a command that exited non-zero.
pub const NON_ZERO_EXIT_CODE_REASON: &str = "NonZeroExitCode";
/// Go's cause type carrying the exit code.
pub const EXIT_CODE_CAUSE_TYPE: &str = "ExitCode";

impl Status {
    /// The Status Go's ServeExec writes for a result.
    pub fn for_result(result: &CommandResult) -> Status {
        match result {
            CommandResult::Exited(0) => Status {
                status: "Success".into(),
                ..Status::default()
            },
            CommandResult::Exited(code) => non_zero(*code, format!("exit code {code}")),
            CommandResult::CommandExited { command, code: 0 } => {
                let _ = command;
                Status {
                    status: "Success".into(),
                    ..Status::default()
                }
            }
            CommandResult::CommandExited { command, code } => non_zero(
                *code,
                // containerd's CRI exit error, formatted as Go prints a []string.
                format!(
                    "error executing command [{}], exit code {code}",
                    command.join(" ")
                ),
            ),
            CommandResult::Failed(err) => {
                let err = format!("error executing command in container: {err}");
                Status {
                    status: "Failure".into(),
                    message: format!("Internal error occurred: {err}"),
                    reason: "InternalError".into(),
                    details: Some(Details {
                        causes: vec![Cause {
                            reason: String::new(),
                            message: err,
                        }],
                    }),
                    code: 500,
                    ..Status::default()
                }
            }
        }
    }

    /// Whether this is a Success status.
    pub fn is_success(&self) -> bool {
        self.status == "Success"
    }

    /// Go's JSON text of this status.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// How a client reads it: the exit code, or the failure message.
    pub fn to_result(&self) -> CommandResult {
        if self.is_success() {
            return CommandResult::Exited(0);
        }
        if self.reason == NON_ZERO_EXIT_CODE_REASON
            && let Some(code) = self
                .details
                .iter()
                .flat_map(|d| &d.causes)
                .find(|c| c.reason == EXIT_CODE_CAUSE_TYPE)
                .and_then(|c| c.message.parse().ok())
        {
            return CommandResult::Exited(code);
        }
        CommandResult::Failed(self.message.clone())
    }
}

fn non_zero(code: i32, exit_error: String) -> Status {
    Status {
        status: "Failure".into(),
        message: format!("command terminated with non-zero exit code: {exit_error}"),
        reason: NON_ZERO_EXIT_CODE_REASON.into(),
        details: Some(Details {
            causes: vec![Cause {
                reason: EXIT_CODE_CAUSE_TYPE.into(),
                message: code.to_string(),
            }],
        }),
        ..Status::default()
    }
}

/// What the server writes on the error stream for `result` (None: nothing, v1–v3 success).
pub(crate) fn error_stream_bytes(result: &CommandResult, v4: bool) -> Option<Vec<u8>> {
    let status = Status::for_result(result);
    if v4 {
        Some(status.to_json().into_bytes())
    } else if status.is_success() {
        None
    } else {
        Some(status.message.into_bytes())
    }
}

/// How a client reads the whole error stream (client-go's errorDecoderV4 / V1).
pub(crate) fn parse_error_stream(bytes: &[u8], v4: bool) -> CommandResult {
    if bytes.is_empty() {
        return CommandResult::Exited(0);
    }
    if v4 {
        match serde_json::from_slice::<Status>(bytes) {
            Ok(status) => status.to_result(),
            Err(err) => CommandResult::Failed(format!(
                "error stream protocol error: {err} in {:?}",
                String::from_utf8_lossy(bytes)
            )),
        }
    } else {
        CommandResult::Failed(String::from_utf8_lossy(bytes).into_owned())
    }
}
