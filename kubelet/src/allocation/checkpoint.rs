//! The allocation checkpoint: `{"data": {<uid>: {"containers": {<name>: <resources>},
//! "resize": …}}, "checksum": <fnv32a of data>}`, written atomically (Go's checkpoint
//! manager's file store), read back at start-up.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::ResourceRequirements;
use serde::{Deserialize, Serialize};

use super::AllocationError;
use crate::cm::checkpoint_file::{fnv32a, write_atomically};

/// One pod's allocation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodAllocation {
    /// Allocated resources by container name (app containers and sidecars).
    #[serde(default)]
    pub containers: BTreeMap<String, ResourceRequirements>,
    /// The state of a resize not yet done (pending or being applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<ResizeState>,
}

/// Where a resize stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status")]
pub enum ResizeState {
    /// Allocated; the runtime does not report the new resources yet. `error` is the last
    /// failure applying them (Go 1.33's `PodResizeInProgress` reason `Error`).
    InProgress {
        /// Why the last attempt failed, if it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Fits the node but not beside the other pods now: retried on later syncs.
    Deferred {
        /// Admission's message.
        message: String,
    },
    /// Can never fit this node.
    Infeasible {
        /// Why.
        message: String,
    },
}

#[derive(Serialize, Deserialize)]
struct File {
    data: BTreeMap<String, PodAllocation>,
    checksum: u32,
}

fn data_text(data: &BTreeMap<String, PodAllocation>) -> String {
    serde_json::to_string(data).unwrap_or_default()
}

/// The allocations in `path`; none when it does not exist.
pub fn read(path: &Path) -> Result<BTreeMap<String, PodAllocation>, AllocationError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => {
            return Err(AllocationError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let corrupt = |reason: String| AllocationError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let file: File = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    let sum = fnv32a(&data_text(&file.data));
    if sum != file.checksum {
        return Err(corrupt(format!(
            "checksum {} does not match the data's {sum}",
            file.checksum
        )));
    }
    Ok(file.data)
}

/// Writes `data` to `path` atomically (0600).
pub fn write(path: &Path, data: &BTreeMap<String, PodAllocation>) -> Result<(), AllocationError> {
    let file = File {
        checksum: fnv32a(&data_text(data)),
        data: data.clone(),
    };
    let text = serde_json::to_vec(&file).unwrap_or_default();
    write_atomically(path, &text).map_err(|source| AllocationError::Io {
        path: path.to_path_buf(),
        source,
    })
}
