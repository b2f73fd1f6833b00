//! Where a pod's shim listens, and the files that tell containerd: the same scheme as the Go
//! shim (`shim.SocketAddress`), so one address per (containerd, namespace, group).

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Directory of shim sockets (containerd's default state dir's `s/`, as the Go shim uses
/// whatever state dir containerd has).
pub const SOCKET_DIR: &str = "/run/containerd/s";
/// File in each bundle naming the shim's address; containerd reads it to reconnect.
pub const ADDRESS_FILE: &str = "address";
/// File in each bundle with the shim daemon's pid.
pub const PID_FILE: &str = "shim.pid";

/// The socket path for `group` (a pod's sandbox id) of containerd at `containerd_address`.
pub fn socket_path(containerd_address: &str, namespace: &str, group: &str) -> PathBuf {
    let joined = Path::new(containerd_address).join(namespace).join(group);
    let digest = Sha256::digest(joined.as_os_str().as_encoded_bytes());
    Path::new(SOCKET_DIR).join(hex::encode(digest))
}

/// The address string containerd takes (`unix://<path>`).
pub fn address_of(socket: &Path) -> String {
    format!("unix://{}", socket.display())
}

/// The socket path in an address string.
pub fn socket_of(address: &str) -> &Path {
    Path::new(address.strip_prefix("unix://").unwrap_or(address))
}

/// Writes `contents` to `dir/name` through a temporary file, so a reader never sees half.
pub fn write_atomic(dir: &Path, name: &str, contents: &str) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, dir.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_is_the_go_shims() {
        // sha256("/run/containerd/containerd.sock/k8s.io/abc")
        let want = hex::encode(Sha256::digest(
            b"/run/containerd/containerd.sock/k8s.io/abc",
        ));
        assert_eq!(
            socket_path("/run/containerd/containerd.sock", "k8s.io", "abc"),
            Path::new("/run/containerd/s").join(want)
        );
    }

    #[test]
    fn address_round_trips() {
        let p = Path::new("/run/containerd/s/ff");
        assert_eq!(socket_of(&address_of(p)), p);
    }
}
