//! Unix-socket transport for gRPC: the client connector and the server listener, whose
//! connections accept any `:authority` ([`AuthorityRewrite`]).

pub(crate) mod authority;
pub(crate) mod hpack;

pub use authority::AuthorityRewrite;
pub use hpack::HpackError;

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};
use tonic::transport::{Channel, Endpoint};

/// Mode of sockets we create unless told otherwise: owner and group only.
pub const DEFAULT_SOCKET_MODE: u32 = 0o660;

/// Errors of the unix-socket transport.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The endpoint is neither `unix:///abs/path` nor an absolute path.
    #[error("endpoint {endpoint:?} is not a unix socket: use unix:///absolute/path")]
    UnsupportedEndpoint { endpoint: String },
    /// Another server answers on the socket we were asked to own.
    #[error("socket {path} is in use by another server")]
    InUse { path: PathBuf },
    /// The path exists and is not a socket, so removing it could destroy data.
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
    /// A filesystem or socket call failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The gRPC channel could not be established.
    #[error("connecting to {path}: {source}")]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> TransportError + 'a {
    move |source| TransportError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Parses a CRI-style endpoint (`unix:///run/x.sock`, or a bare absolute path) into a path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, TransportError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(TransportError::UnsupportedEndpoint {
            endpoint: endpoint.to_string(),
        })
    }
}

/// Opens a gRPC channel to a unix-socket endpoint, connecting eagerly so that a missing server
/// is reported here rather than at the first call.
pub async fn connect(endpoint: &str) -> Result<Channel, TransportError> {
    let path = socket_path(endpoint)?;
    let target = path.clone();
    // The URI is required by the API but never used: the connector below dials the socket.
    Endpoint::from_static("http://[::]:0")
        .connect_with_connector(tower::service_fn(move |_| {
            let target = target.clone();
            async move {
                UnixStream::connect(target)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .map_err(|source| TransportError::Connect { path, source })
}

/// The socket file a server placed, known by its inode and change time (a freed inode number
/// is reused at once): a server that stops removes its path only while the path is still that
/// file, so a successor that took the path over while this one drained keeps its socket.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    identity: (u64, u64, i64, i64),
}

fn identity(meta: &std::fs::Metadata) -> (u64, u64, i64, i64) {
    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
}

impl SocketFile {
    /// The path the socket was placed at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the path if it is still this socket; a missing path, or another file there, is
    /// left alone.
    pub fn remove(self) -> Result<(), TransportError> {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if identity(&meta) == self.identity => {
                match std::fs::remove_file(&self.path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        Err(io_err("removing", &self.path)(e))
                    }
                    _ => Ok(()),
                }
            }
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("inspecting", &self.path)(e)),
        }
    }
}

/// Binds a unix socket at `endpoint` with the given mode, owning the path: the parent directory
/// is created, a stale socket from a dead server is removed, a live one is refused.
pub fn bind(endpoint: &str, mode: u32) -> Result<UnixListener, TransportError> {
    bind_owned(endpoint, mode).map(|(listener, _)| listener)
}

/// As [`bind`], with the [`SocketFile`] to remove when the server stops.
pub fn bind_owned(endpoint: &str, mode: u32) -> Result<(UnixListener, SocketFile), TransportError> {
    let path = socket_path(endpoint)?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io_err("creating directory", parent))?;
    }
    remove_stale(&path)?;
    // Bind under a private name, set the mode, then rename into place, so the final path never
    // exists with wider permissions than requested.
    let staging = path.with_file_name(format!(
        ".{}.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("sock"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&staging);
    let listener = UnixListener::bind(&staging).map_err(io_err("binding", &staging))?;
    // The identity is read once the rename (which changes the ctime) has placed it.
    let placed = std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(mode))
        .map_err(io_err("setting mode of", &staging))
        .and_then(|()| std::fs::rename(&staging, &path).map_err(io_err("renaming", &staging)))
        .and_then(|()| std::fs::symlink_metadata(&path).map_err(io_err("inspecting", &path)));
    match placed {
        Ok(meta) => {
            let file = SocketFile {
                path,
                identity: identity(&meta),
            };
            Ok((listener, file))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&staging);
            Err(e)
        }
    }
}

fn remove_stale(path: &Path) -> Result<(), TransportError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("inspecting", path)(e)),
    };
    if !meta.file_type().is_socket() {
        return Err(TransportError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(TransportError::InUse {
            path: path.to_path_buf(),
        }),
        Err(_) => std::fs::remove_file(path).map_err(io_err("removing stale socket", path)),
    }
}

/// Turns a listener into the stream of connections tonic's server accepts, each taking any
/// `:authority` a client sends unless `rewrite_authority` is false (measurements only: then
/// clients that send the socket path are refused by h2).
pub fn incoming(
    listener: UnixListener,
    rewrite_authority: bool,
) -> impl tokio_stream::Stream<Item = io::Result<AuthorityRewrite<UnixStream>>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::UnixListenerStream::new(listener)
        .map(move |conn| conn.map(|io| AuthorityRewrite::new(io, rewrite_authority)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints() {
        assert_eq!(
            socket_path("unix:///run/x.sock").unwrap(),
            PathBuf::from("/run/x.sock")
        );
        assert_eq!(
            socket_path("/run/x.sock").unwrap(),
            PathBuf::from("/run/x.sock")
        );
        assert!(matches!(
            socket_path("tcp://127.0.0.1:1"),
            Err(TransportError::UnsupportedEndpoint { .. })
        ));
        assert!(socket_path("unix://relative.sock").is_err());
    }

    #[tokio::test]
    async fn bind_sets_mode_creates_parent_and_replaces_stale_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/dir/cri.sock");
        let endpoint = format!("unix://{}", path.display());

        let listener = bind(&endpoint, DEFAULT_SOCKET_MODE).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);

        // A live server keeps its socket.
        assert!(matches!(
            bind(&endpoint, DEFAULT_SOCKET_MODE),
            Err(TransportError::InUse { .. })
        ));

        // Once the server is gone its socket file is stale and is replaced.
        drop(listener);
        let listener = bind(&endpoint, 0o600).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        drop(listener);
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("cri.sock")]);
    }

    #[tokio::test]
    async fn a_stopping_server_leaves_its_successor_s_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cri.sock");
        let endpoint = format!("unix://{}", path.display());

        let (old, old_file) = bind_owned(&endpoint, DEFAULT_SOCKET_MODE).unwrap();
        // The old server stops accepting while it drains; a successor takes the path over.
        drop(old);
        let (_new, new_file) = bind_owned(&endpoint, DEFAULT_SOCKET_MODE).unwrap();
        old_file.remove().unwrap();
        assert!(
            std::os::unix::net::UnixStream::connect(&path).is_ok(),
            "the successor's socket must survive the old server's exit"
        );
        new_file.remove().unwrap();
        assert!(!path.exists());
        // Twice, or after someone else removed it: nothing to do.
        let (_l, file) = bind_owned(&endpoint, DEFAULT_SOCKET_MODE).unwrap();
        std::fs::remove_file(&path).unwrap();
        file.remove().unwrap();
    }

    #[test]
    fn bind_refuses_to_replace_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        std::fs::write(&path, b"keep me").unwrap();
        let err = bind(path.to_str().unwrap(), DEFAULT_SOCKET_MODE).unwrap_err();
        assert!(matches!(err, TransportError::NotASocket { .. }), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
    }

    #[tokio::test]
    async fn connect_reports_a_missing_server_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("none.sock");
        let err = connect(path.to_str().unwrap()).await.unwrap_err();
        assert!(err.to_string().contains("none.sock"), "{err}");
    }
}
