//! The kubelet's `Registration` service on `<root-dir>/device-plugins/kubelet.sock` (Go's
//! device plugin server): at start every socket in the directory is removed, the plugins'
//! too, which tells plugins watching it that a new kubelet wants them to register again.
//! A registration is checked (API version, an extended resource name, an endpoint inside the
//! directory), then the plugin is dialled; its error, in Go's words, is the call's answer.

use std::path::{Component, Path};
use std::sync::Arc;

use ferrolet_proto::deviceplugin::{
    Answer, DEVICE_PLUGIN_DIR, Empty, KUBELET_SOCKET, RegisterRequest, Registration,
    RegistrationServer, VERSION,
};
use tonic::Status;

use super::{DeviceManager, endpoint};

/// Why the registration service could not start.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// The directory could not be made or cleaned.
    #[error("device plugin directory {path}: {source}")]
    Dir {
        /// The directory or the file in it.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The socket could not be bound.
    #[error("serving the device plugin registration socket: {0}")]
    Bind(#[from] ferrolet_proto::transport::TransportError),
}

/// Starts serving registrations for `manager`; the server runs as long as the runtime.
pub async fn start(manager: Arc<DeviceManager>) -> Result<(), RegistrationError> {
    let dir = manager.dir().to_path_buf();
    let cleaned = dir.clone();
    tokio::task::spawn_blocking(move || clean(&cleaned))
        .await
        .map_err(|e| RegistrationError::Dir {
            path: dir.display().to_string(),
            source: std::io::Error::other(e.to_string()),
        })??;
    let socket = dir.join(KUBELET_SOCKET);
    let listener = ferrolet_proto::transport::bind(&socket.display().to_string(), 0o600)?;
    tracing::info!(socket = %socket.display(), "device plugin registration: serving");
    let server = tonic::transport::Server::builder()
        .add_service(RegistrationServer::new(Registrar { manager }))
        .serve_with_incoming(ferrolet_proto::transport::incoming(listener, true));
    tokio::spawn(async move {
        if let Err(e) = server.await {
            tracing::error!(error = %e, "device plugin registration server stopped");
        }
    });
    Ok(())
}

/// Makes the directory (0750, as Go) and removes the sockets in it.
fn clean(dir: &Path) -> Result<(), RegistrationError> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
    let err = |path: &Path| {
        let path = path.display().to_string();
        move |source| RegistrationError::Dir { path, source }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
        .map_err(err(dir))?;
    for entry in std::fs::read_dir(dir).map_err(err(dir))? {
        let entry = entry.map_err(err(dir))?;
        let path = entry.path();
        let is_socket = entry.file_type().is_ok_and(|t| t.is_socket());
        if is_socket {
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!(socket = %path.display(), "removed a stale device plugin socket")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(err(&path)(e)),
            }
        }
    }
    Ok(())
}

/// Go's `IsExtendedResourceName`: a qualified name outside the `kubernetes.io` domain, not a
/// quota's `requests.` form.
pub fn is_extended_resource_name(name: &str) -> bool {
    let Some((prefix, local)) = name.split_once('/') else {
        return false;
    };
    if name.contains("kubernetes.io/") || name.starts_with("requests.") {
        return false;
    }
    let dns_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    // The quota form `requests.<name>` must be a qualified name too: its prefix then has
    // `requests.` in front, so the prefix gets 9 bytes less.
    let prefix_ok = prefix.len() + "requests.".len() <= 253 && prefix.split('.').all(dns_label);
    let local_ok = !local.is_empty()
        && local.len() <= 63
        && local
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && local.as_bytes()[0].is_ascii_alphanumeric()
        && local.as_bytes()[local.len() - 1].is_ascii_alphanumeric();
    prefix_ok && local_ok
}

/// A plugin's endpoint as a file in the directory: no absolute path, no `..`.
fn endpoint_in_dir(endpoint: &str) -> bool {
    let p = Path::new(endpoint);
    !endpoint.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

struct Registrar {
    manager: Arc<DeviceManager>,
}

impl Registration for Registrar {
    fn register(&self, r: RegisterRequest) -> Answer<Empty> {
        let manager = self.manager.clone();
        Box::pin(async move {
            tracing::info!(resource = %r.resource_name, endpoint = %r.endpoint, version = %r.version, "device plugin registration request");
            crate::metrics::device_plugin_registration(&r.resource_name);
            let refuse = |message: String| {
                tracing::warn!(resource = %r.resource_name, "bad device plugin registration: {message}");
                Err(Status::unknown(message))
            };
            if r.version != VERSION {
                return refuse(format!(
                    "requested API version {:?} is not supported by kubelet. Supported version is [{VERSION:?}]",
                    r.version
                ));
            }
            if !is_extended_resource_name(&r.resource_name) {
                return refuse(format!("the ResourceName {:?} is invalid", r.resource_name));
            }
            if !endpoint_in_dir(&r.endpoint) {
                return refuse(format!(
                    "the endpoint {:?} is not a socket in the {DEVICE_PLUGIN_DIR} directory",
                    r.endpoint
                ));
            }
            let socket = manager.dir().join(&r.endpoint);
            if let Err(e) = endpoint::connect(&manager, &r.resource_name, &socket).await {
                return refuse(e.to_string());
            }
            Ok(Empty {})
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resource_names_are_gos() {
        for ok in ["example.com/resource", "nvidia.com/gpu", "a.b/c_d.e-f"] {
            assert!(is_extended_resource_name(ok), "{ok}");
        }
        for bad in [
            "gpu",
            "kubernetes.io/gpu",
            "requests.example.com/x",
            "example.com/",
            "Example.com/x",
            "example.com/-x",
            "/x",
        ] {
            assert!(!is_extended_resource_name(bad), "{bad}");
        }
    }

    #[test]
    fn endpoints_stay_in_the_directory() {
        assert!(endpoint_in_dir("plugin.sock"));
        assert!(!endpoint_in_dir("../kubelet.sock"));
        assert!(!endpoint_in_dir("/run/x.sock"));
        assert!(!endpoint_in_dir(""));
    }
}
