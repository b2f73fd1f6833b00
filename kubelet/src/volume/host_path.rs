//! `hostPath` volumes, as Go's `pkg/volume/hostpath`: the path itself is mounted, after the
//! check its `type` asks for (`DirectoryOrCreate` and `FileOrCreate` make it when missing).

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::HostPathVolumeSource;

use super::{VolumeError, mkdir_all};

/// What is at a path, in Go's `hostutil.FileType` terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    /// A directory.
    Directory,
    /// A regular file.
    File,
    /// A unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Something else (a FIFO).
    Other,
}

impl FileType {
    /// How Go's messages name it (`is not a directory`).
    pub fn describe(self) -> &'static str {
        match self {
            FileType::Directory => "directory",
            FileType::File => "file",
            FileType::Socket => "socket file",
            FileType::CharDevice => "character device",
            FileType::BlockDevice => "block device",
            FileType::Other => "other",
        }
    }
}

/// The message of a failed type check: Go's `path /x does not exist` or
/// `hostPath type check failed: /x is not a directory`.
pub(crate) fn type_message(path: &Path, expected: &str, found: &str) -> String {
    if found == "missing" {
        format!("path {} does not exist", path.display())
    } else {
        format!(
            "hostPath type check failed: {} is not a {expected}",
            path.display()
        )
    }
}

/// What is at `path`, following symlinks as Go's `os.Stat` does; None when nothing is.
pub fn file_type(path: &Path) -> std::io::Result<Option<FileType>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let t = meta.file_type();
    Ok(Some(if t.is_dir() {
        FileType::Directory
    } else if t.is_file() {
        FileType::File
    } else if t.is_socket() {
        FileType::Socket
    } else if t.is_char_device() {
        FileType::CharDevice
    } else if t.is_block_device() {
        FileType::BlockDevice
    } else {
        FileType::Other
    }))
}

/// Checks (and for the `OrCreate` types makes) the volume's path; returns it.
pub(crate) fn setup(volume: &str, src: &HostPathVolumeSource) -> Result<PathBuf, VolumeError> {
    let path = PathBuf::from(&src.path);
    if src.path.split('/').any(|c| c == "..") {
        return Err(VolumeError::Invalid {
            volume: volume.into(),
            reason: format!("invalid HostPath `{}`: must not contain '..'", src.path),
        });
    }
    check_type(volume, &path, src.type_.as_deref().unwrap_or(""))?;
    Ok(path)
}

/// The check of one `type`.
pub(crate) fn check_type(volume: &str, path: &Path, type_: &str) -> Result<(), VolumeError> {
    let expect = |want: FileType| -> Result<(), VolumeError> {
        let found = file_type(path).map_err(|e| VolumeError::io(volume, path, e))?;
        if found == Some(want) {
            return Ok(());
        }
        Err(VolumeError::HostPathType {
            volume: volume.into(),
            path: path.to_path_buf(),
            expected: want.describe().into(),
            found: found.map_or("missing", FileType::describe).into(),
        })
    };
    let exists = || matches!(file_type(path), Ok(Some(_)));
    match type_ {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            if !exists() {
                mkdir_all(volume, path, 0o755)?;
            }
            expect(FileType::Directory)
        }
        "Directory" => expect(FileType::Directory),
        "FileOrCreate" => {
            if !exists() {
                // The parent must exist: Go does not make it.
                match OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o644)
                    .open(path)
                {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(VolumeError::io(volume, path, e)),
                }
            }
            expect(FileType::File)
        }
        "File" => expect(FileType::File),
        "Socket" => expect(FileType::Socket),
        "CharDevice" => expect(FileType::CharDevice),
        "BlockDevice" => expect(FileType::BlockDevice),
        other => Err(VolumeError::Invalid {
            volume: volume.into(),
            reason: format!("{other} is an invalid volume type"),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn check(path: &Path, t: &str) -> Result<(), VolumeError> {
        check_type("v", path, t)
    }

    fn message(r: Result<(), VolumeError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn every_type() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dir");
        std::fs::create_dir(&dir).unwrap();
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let sock = tmp.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let null = Path::new("/dev/null");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let missing = tmp.path().join("missing");

        // Unset: no check at all.
        check(&missing, "").unwrap();

        check(&dir, "Directory").unwrap();
        check(&link, "Directory").unwrap();
        check(&file, "File").unwrap();
        check(&sock, "Socket").unwrap();
        check(null, "CharDevice").unwrap();

        let m = message(check(&file, "Directory"));
        assert_eq!(
            m,
            format!(
                "MountVolume.SetUp failed for volume \"v\" : hostPath type check failed: {} is not a directory",
                file.display()
            )
        );
        assert!(message(check(&dir, "File")).ends_with("is not a file"));
        assert!(message(check(&file, "Socket")).ends_with("is not a socket file"));
        assert!(message(check(&file, "CharDevice")).ends_with("is not a character device"));
        assert!(message(check(null, "BlockDevice")).ends_with("is not a block device"));
        assert_eq!(
            message(check(&missing, "File")),
            format!(
                "MountVolume.SetUp failed for volume \"v\" : path {} does not exist",
                missing.display()
            )
        );
        assert!(message(check(&missing, "Directory")).contains("does not exist"));
        assert!(message(check(&dir, "Bogus")).contains("Bogus is an invalid volume type"));
        // A block device, if the machine has one we can see.
        let block = ["/dev/loop0", "/dev/sda", "/dev/vda", "/dev/nvme0n1"]
            .into_iter()
            .map(Path::new)
            .find(|p| matches!(file_type(p), Ok(Some(FileType::BlockDevice))));
        if let Some(b) = block {
            check(b, "BlockDevice").unwrap();
        }
    }

    #[test]
    fn or_create_types_create() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/c");
        check(&dir, "DirectoryOrCreate").unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        assert!(meta.is_dir());
        // 0755 less the umask.
        assert_eq!(meta.permissions().mode() & 0o700, 0o700);
        assert_eq!(meta.permissions().mode() & 0o022, 0);
        // Existing: fine; existing as a file: refused.
        check(&dir, "DirectoryOrCreate").unwrap();
        let file = tmp.path().join("f");
        check(&file, "FileOrCreate").unwrap();
        assert!(std::fs::metadata(&file).unwrap().is_file());
        std::fs::write(&file, "keep").unwrap();
        check(&file, "FileOrCreate").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
        assert!(message(check(&file, "DirectoryOrCreate")).ends_with("is not a directory"));
        assert!(message(check(&dir, "FileOrCreate")).ends_with("is not a file"));
        // FileOrCreate does not make parents.
        let orphan = tmp.path().join("nope/f");
        let err = message(check(&orphan, "FileOrCreate"));
        assert!(err.contains("No such file or directory"), "{err}");
    }

    #[test]
    fn backsteps_are_refused() {
        let src = HostPathVolumeSource {
            path: "/var/../etc".into(),
            type_: None,
        };
        let err = setup("v", &src).unwrap_err().to_string();
        assert!(err.contains("must not contain '..'"), "{err}");
    }
}
