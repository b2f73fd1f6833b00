//! The certificate file store (Go's `certificate.NewFileStore`): each issued pair is written
//! to `<dir>/<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (the certificate, then the key; 0600), and
//! `<prefix>-current.pem` is a symlink to the pair in use, replaced by renaming a fresh
//! `<prefix>-updated.pem` link over it, so a reader always finds a whole pair. Blocking.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::CertificateError;

/// The client certificate's prefix.
pub const CLIENT_PREFIX: &str = "kubelet-client";
/// The serving certificate's prefix.
pub const SERVER_PREFIX: &str = "kubelet-server";

/// One kind of pair in the cert dir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStore {
    dir: PathBuf,
    prefix: &'static str,
}

impl FileStore {
    /// The store of `prefix` pairs in `dir`.
    pub fn new(dir: &Path, prefix: &'static str) -> Self {
        Self {
            dir: dir.to_path_buf(),
            prefix,
        }
    }

    /// The symlink to the pair in use (what a kubeconfig written by bootstrap names).
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The file a pair issued at `at` is written to.
    pub fn pair_path(&self, at: jiff::Timestamp) -> PathBuf {
        // Go formats local time; UTC here (jiff is built without the time zone database).
        let stamp = at.strftime("%Y-%m-%d-%H-%M-%S");
        self.dir.join(format!("{}-{stamp}.pem", self.prefix))
    }

    /// The pair in use, if there is one.
    pub fn current(&self) -> Result<Option<Vec<u8>>, CertificateError> {
        let path = self.current_path();
        match std::fs::read(&path) {
            Ok(pem) => Ok(Some(pem)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CertificateError::io(path)(e)),
        }
    }

    /// Writes a new pair (issued `at`) and makes it the current one; its path.
    pub fn update(
        &self,
        cert_pem: &[u8],
        key_pem: &[u8],
        at: jiff::Timestamp,
    ) -> Result<PathBuf, CertificateError> {
        std::fs::create_dir_all(&self.dir).map_err(CertificateError::io(&self.dir))?;
        let path = self.pair_path(at);
        let mut data = cert_pem.to_vec();
        if !data.ends_with(b"\n") {
            data.push(b'\n');
        }
        data.extend_from_slice(key_pem);
        write_private(&path, &data)?;
        self.point_current_at(&path)?;
        Ok(path)
    }

    /// Swaps `<prefix>-current.pem` to `target`.
    fn point_current_at(&self, target: &Path) -> Result<(), CertificateError> {
        let current = self.current_path();
        let updated = self.dir.join(format!("{}-updated.pem", self.prefix));
        // Only links are ever replaced: a regular file there is someone else's.
        for link in [&current, &updated] {
            match std::fs::symlink_metadata(link) {
                Ok(m) if !m.file_type().is_symlink() => {
                    return Err(CertificateError::content(
                        link.display(),
                        "expected a symlink, found a file",
                    ));
                }
                Ok(_) if link == &updated => {
                    std::fs::remove_file(link).map_err(CertificateError::io(link))?
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(CertificateError::io(link)(e)),
            }
        }
        // Absolute, so the link resolves wherever it is read from (a relative cert dir).
        let target = std::path::absolute(target).map_err(CertificateError::io(target))?;
        std::os::unix::fs::symlink(&target, &updated).map_err(CertificateError::io(&updated))?;
        std::fs::rename(&updated, &current).map_err(CertificateError::io(&current))
    }
}

/// Writes `data` to `path` with mode 0600 (created with it, so the key is never readable by
/// others), replacing what is there.
pub fn write_private(path: &Path, data: &[u8]) -> Result<(), CertificateError> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(CertificateError::io(&tmp))?;
    f.write_all(data)
        .and_then(|()| f.sync_all())
        .map_err(CertificateError::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(CertificateError::io(path))
}
