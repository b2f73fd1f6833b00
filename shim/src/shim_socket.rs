//! containerd shims' sockets. containerd's runc shim (and Ferrolet's) listens on a socket
//! named by the pod it serves, `/run/containerd/s/<sha256 of "<containerd address>/<namespace>/<sandbox id>">`
//! (containerd's `shim.SocketAddress`, 1.6 and 2.x alike), and removes it when it exits. A
//! shim that was killed cannot: the file stays for good (containerd's own CRI leaves it), so a
//! pod's teardown removes it once nothing listens on it.

use std::path::{Path, PathBuf};

/// Where every shim socket is, whatever containerd's own state dir (containerd's
/// `defaults.DefaultStateDir` + `/s`).
const SOCKET_DIR: &str = "/run/containerd/s";

/// The socket of the shim serving group `group` (a pod's sandbox id) for the containerd on
/// `address` (its socket path; a `unix://` scheme is dropped) in `namespace`.
pub fn path(address: &str, namespace: &str, group: &str) -> PathBuf {
    use sha2::Digest;
    let address = address.strip_prefix("unix://").unwrap_or(address);
    // Go's filepath.Join: one separator between the parts, none left at the end.
    let key = Path::new(address).join(namespace).join(group);
    let digest = sha2::Sha256::digest(key.to_string_lossy().as_bytes());
    Path::new(SOCKET_DIR).join(hex::encode(digest))
}

/// Removes the socket at `path` if it is one that nothing listens on (its shim was killed);
/// a live shim's, a missing one or anything that is not a socket stays. Whether it removed it.
pub async fn remove_if_dead(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::FileTypeExt;
    match tokio::fs::symlink_metadata(path).await {
        Ok(m) if m.file_type().is_socket() => {}
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    }
    match tokio::net::UnixStream::connect(path).await {
        // A live shim (or one exiting, which removes its socket itself).
        Ok(_) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            match tokio::fs::remove_file(path).await {
                Ok(()) => Ok(true),
                // Its shim's own exit removed it meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(e),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_is_containerd_s_socket_address() {
        // sha256("/run/containerd/containerd.sock/k8s.io/abc"), as Go's shim.SocketAddress.
        let want = path("/run/containerd/containerd.sock", "k8s.io", "abc");
        assert_eq!(
            path("unix:///run/containerd/containerd.sock", "k8s.io", "abc"),
            want
        );
        assert_eq!(
            want,
            Path::new("/run/containerd/s")
                .join("a99a1752d3a0fadfb1f869026f16760475df03a572e20f4ccea9e6c1e5470b72")
        );
    }

    #[tokio::test]
    async fn only_a_socket_nothing_listens_on_goes() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live");
        let _listener = tokio::net::UnixListener::bind(&live).unwrap();
        assert!(!remove_if_dead(&live).await.unwrap());
        assert!(live.exists());

        let dead = dir.path().join("dead");
        drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
        assert!(remove_if_dead(&dead).await.unwrap());
        assert!(!dead.exists());

        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(!remove_if_dead(&file).await.unwrap());
        assert!(file.exists());
        assert!(!remove_if_dead(&dir.path().join("missing")).await.unwrap());
    }
}
