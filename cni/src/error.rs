//! Typed errors of the CNI library.
//!
//! Every error names what it is about: config errors carry the file and the field, plugin
//! errors carry the plugin type, its path and the structured CNI error (`code`, `msg`,
//! `details`) it printed.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Result alias of this crate.
pub type Result<T, E = CniError> = std::result::Result<T, E>;

/// The error object a plugin prints on stdout when it fails (SPEC "Error").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginError {
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cni_version: String,
    pub code: u32,
    #[serde(default)]
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl PluginError {
    /// The well-known meaning of a CNI error code (SPEC "Error"), if any.
    pub fn code_meaning(&self) -> Option<&'static str> {
        Some(match self.code {
            1 => "incompatible CNI version",
            2 => "unsupported field in network configuration",
            3 => "container unknown or does not exist",
            4 => "invalid necessary environment variables",
            5 => "I/O failure",
            6 => "failed to decode content",
            7 => "invalid network config",
            11 => "try again later",
            50 => "plugin not available",
            51 => "plugin not available, limited connectivity",
            _ => return None,
        })
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "code {}", self.code)?;
        if let Some(m) = self.code_meaning() {
            write!(f, " ({m})")?;
        }
        write!(f, ": {}", self.msg)?;
        if !self.details.is_empty() {
            write!(f, "; details: {}", self.details)?;
        }
        Ok(())
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum CniError {
    /// A config file is not valid JSON (or not a JSON object).
    #[error("{}: invalid JSON: {reason}", file.display())]
    InvalidJson { file: PathBuf, reason: String },

    /// A config file is valid JSON but a field is missing or wrong.
    #[error("{}: field `{field}`: {reason}", file.display())]
    InvalidConfig {
        file: PathBuf,
        field: String,
        reason: String,
    },

    /// Two config files define the same network name.
    #[error("duplicate network name {name:?}: defined in {} and {}", first.display(), second.display())]
    DuplicateName {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },

    /// No config in the conf dir defines this network.
    #[error("network {name:?} not found in {}", dir.display())]
    NetworkNotFound { name: String, dir: PathBuf },

    /// The plugin binary was not found in any of the plugin dirs.
    #[error("plugin {plugin:?}: binary not found; searched {}", searched_list(.searched))]
    PluginNotFound {
        plugin: String,
        searched: Vec<PathBuf>,
    },

    /// The plugin exited non-zero and printed a CNI error object.
    #[error("plugin {plugin} ({command}) failed: {error}")]
    Plugin {
        plugin: String,
        command: &'static str,
        error: PluginError,
    },

    /// The plugin exited non-zero without a parseable CNI error object.
    #[error("plugin {plugin} ({command}) exited with {status}: {}", exit_text(.stdout, .stderr))]
    PluginExit {
        plugin: String,
        command: &'static str,
        status: String,
        stdout: String,
        stderr: String,
    },

    /// The plugin did not finish within the per-call timeout (it was killed).
    #[error("plugin {plugin} ({command}) timed out after {timeout:?} and was killed")]
    Timeout {
        plugin: String,
        command: &'static str,
        timeout: Duration,
    },

    /// The plugin succeeded but its output is not a valid result.
    #[error("plugin {plugin} ({command}): invalid output: {reason}")]
    InvalidResult {
        plugin: String,
        command: &'static str,
        reason: String,
    },

    /// A result or version is not one this library understands.
    #[error("unsupported CNI version {version:?} (supported: {})", crate::config::SUPPORTED_VERSIONS.join(", "))]
    UnsupportedVersion { version: String },

    /// The operation is not available for this network (version too old, or disabled).
    #[error("network {network:?}: {op} not supported: {reason}")]
    NotSupported {
        network: String,
        op: &'static str,
        reason: String,
    },

    /// An argument given by the caller is invalid.
    #[error("invalid argument {what}: {reason}")]
    InvalidArgument { what: String, reason: String },

    /// CHECK requires a cached ADD result.
    #[error(
        "network {network:?}: no cached result for container {container_id:?} ifname {ifname:?} (was ADD run?)"
    )]
    NoCachedResult {
        network: String,
        container_id: String,
        ifname: String,
    },

    /// A file system or system-call failure, with what was being done.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// GC or a chained DEL failed for several attachments.
    #[error("{} error(s): {}", .0.len(), .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Multiple(Vec<CniError>),
}

impl CniError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        CniError::Io {
            context: context.into(),
            source,
        }
    }

    /// The structured plugin error, if this is one.
    pub fn plugin_error(&self) -> Option<&PluginError> {
        match self {
            CniError::Plugin { error, .. } => Some(error),
            _ => None,
        }
    }
}

fn searched_list(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        return "no directories (empty plugin path)".into();
    }
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn exit_text(stdout: &str, stderr: &str) -> String {
    let stderr = stderr.trim();
    let stdout = stdout.trim();
    match (stdout.is_empty(), stderr.is_empty()) {
        (true, true) => "no output".into(),
        (false, true) => format!("stdout: {stdout}"),
        (true, false) => format!("stderr: {stderr}"),
        (false, false) => format!("stdout: {stdout}; stderr: {stderr}"),
    }
}
