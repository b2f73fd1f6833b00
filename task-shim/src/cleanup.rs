//! `delete`: what containerd runs when a shim is gone (killed, or its start failed): the
//! task's runtime state and rootfs are removed from the bundle alone, and containerd gets the
//! `DeleteResponse` it reports as the task's exit (SIGKILL's status, as the Go shim's).

use std::path::Path;

use ferrolet_proto::task_shim::DeleteResponse;

use crate::runtime::Runtime;

/// The bundle file recording a task's runtime, for `delete` after the shim is gone.
const RUNTIME_FILE: &str = "ferrolet-runtime.json";

/// Records `runtime` in `bundle`.
pub fn write_runtime(bundle: &Path, runtime: &Runtime) -> std::io::Result<()> {
    let json = serde_json::to_string(runtime).map_err(std::io::Error::other)?;
    crate::address::write_atomic(bundle, RUNTIME_FILE, &json)
}

fn read_runtime(bundle: &Path, namespace: &str) -> Runtime {
    std::fs::read(bundle.join(RUNTIME_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| Runtime::from_options(&Default::default(), namespace))
}

/// Cleans up task `id` of `bundle`; the response to print.
pub fn delete(bundle: &Path, id: &str, namespace: &str) -> Result<DeleteResponse, String> {
    let runtime = read_runtime(bundle, namespace);
    if let Err(e) = runtime.delete(bundle, id, true) {
        let msg = e.to_string();
        if !msg.contains("does not exist") && !msg.contains("not found") {
            // Still unmount: a container that never got created leaves only its rootfs.
            crate::log::warn("runtime delete failed", &[("id", id), ("error", &msg)]);
        }
    }
    crate::rootfs::unmount_all(&bundle.join("rootfs"))
        .map_err(|e| format!("unmounting {}/rootfs: {e}", bundle.display()))?;
    remove_dead_socket(bundle);
    let pid = std::fs::read_to_string(bundle.join("init.pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    Ok(DeleteResponse {
        pid,
        exit_status: 128 + libc::SIGKILL as u32,
        exited_at: Some(crate::time::now()),
    })
}

/// Removes the socket the bundle's `address` names if no shim answers on it any more (the
/// shim was killed): a live one is the pod's other containers' and stays.
fn remove_dead_socket(bundle: &Path) {
    let Ok(address) = std::fs::read_to_string(bundle.join(crate::address::ADDRESS_FILE)) else {
        return;
    };
    let socket = crate::address::socket_of(address.trim());
    if socket.starts_with(crate::address::SOCKET_DIR)
        && std::os::unix::net::UnixStream::connect(socket).is_err()
    {
        let _ = std::fs::remove_file(socket);
    }
}
