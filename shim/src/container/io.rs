//! A process's stdio as named FIFOs, the way containerd's CRI hands them to the runc shim:
//! we create `<dir>/<id>-stdin|stdout|stderr`, pass the paths in `CreateTaskRequest` /
//! `ExecProcessRequest`, and the shim opens the other ends when it sets up the process.
//!
//! Who opens what (see containerd's `cmd/containerd-shim-runc-v2/process/io.go`): the shim
//! opens each output FIFO write-only (blocking until a reader exists) and also read-only, so
//! its writes never fail with EPIPE while we are away; it opens stdin read-only nonblocking.
//! We therefore open our read ends first, so the shim's opens never wait on us.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::stat::Mode;
use tokio::net::unix::pipe::{Receiver, Sender};

/// FIFO paths for one process (a container's main process, or one exec).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Fifos {
    /// The directory holding them (the caller's: it may be shared with other processes).
    pub dir: PathBuf,
    /// Present when the process gets a stdin.
    pub stdin: Option<PathBuf>,
    /// Always present.
    pub stdout: PathBuf,
    /// None with a tty: the terminal merges stderr into stdout.
    pub stderr: Option<PathBuf>,
}

/// A failure to set up, open or remove FIFOs, or to write a log file.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The FIFO directory could not be created.
    #[error("creating fifo directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `mkfifo` failed.
    #[error("creating fifo {path}: {source}")]
    Mkfifo {
        /// The FIFO.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Something that is not a FIFO sits where one should be.
    #[error("{path} exists and is not a fifo")]
    NotFifo {
        /// The path.
        path: PathBuf,
    },
    /// Opening one end of a FIFO failed.
    #[error("opening fifo {path}: {source}")]
    Open {
        /// The FIFO.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Removing a FIFO failed.
    #[error("removing fifo {path}: {source}")]
    Remove {
        /// The FIFO.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The container's log file could not be opened.
    #[error("opening log file {path}: {source}")]
    OpenLog {
        /// The log file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The log pumps have finished: the process's output has ended.
    #[error("container {container_id} is not running: its output has ended")]
    LogClosed {
        /// The container.
        container_id: String,
    },
    /// Called outside a tokio runtime.
    #[error("no tokio runtime to run the log pumps on")]
    NoRuntime,
    /// A blocking helper task panicked or was cancelled.
    #[error("blocking io task failed: {0}")]
    Join(String),
}

impl IoError {
    /// The gRPC code a CRI client should see (containerd answers FailedPrecondition when the
    /// log of a container that is not running is reopened).
    pub fn code(&self) -> tonic::Code {
        match self {
            IoError::LogClosed { .. } => tonic::Code::FailedPrecondition,
            _ => tonic::Code::Internal,
        }
    }
}

impl From<tokio::task::JoinError> for IoError {
    fn from(e: tokio::task::JoinError) -> Self {
        IoError::Join(e.to_string())
    }
}

impl Fifos {
    /// Names `<dir>/<id>-stdin|stdout|stderr` (no I/O).
    pub fn new(dir: &Path, id: &str, stdin: bool, tty: bool) -> Self {
        Self {
            dir: dir.to_path_buf(),
            stdin: stdin.then(|| dir.join(format!("{id}-stdin"))),
            stdout: dir.join(format!("{id}-stdout")),
            stderr: (!tty).then(|| dir.join(format!("{id}-stderr"))),
        }
    }

    /// The stdin string for CreateTaskRequest / ExecProcessRequest (empty when absent).
    pub fn stdin_str(&self) -> String {
        path_str(self.stdin.as_deref())
    }

    /// The stdout string for CreateTaskRequest / ExecProcessRequest.
    pub fn stdout_str(&self) -> String {
        path_str(Some(&self.stdout))
    }

    /// The stderr string for CreateTaskRequest / ExecProcessRequest (empty with a tty).
    pub fn stderr_str(&self) -> String {
        path_str(self.stderr.as_deref())
    }

    /// Every FIFO path of the set.
    fn paths(&self) -> impl Iterator<Item = &Path> {
        self.stdin
            .as_deref()
            .into_iter()
            .chain(std::iter::once(self.stdout.as_path()))
            .chain(self.stderr.as_deref())
    }
}

fn path_str(p: Option<&Path>) -> String {
    p.map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Opened ends; the readers are async (tokio `net::unix::pipe::Receiver`).
#[derive(Debug)]
pub struct OpenedIo {
    stdin: Option<Sender>,
    stdout: Option<Receiver>,
    stderr: Option<Receiver>,
    placeholders: Vec<File>,
}

impl OpenedIo {
    /// Call once containerd has created the task (or started the exec, which is when the
    /// shim opens an exec's FIFOs), or once creating it failed: drops our placeholder write
    /// ends, so the readers see EOF as soon as the shim's own write ends are closed.
    pub fn task_created(&mut self) {
        self.placeholders.clear();
    }

    /// Our write end of stdin (held open so the process's stdin stays open, as containerd does).
    pub fn take_stdin(&mut self) -> Option<Sender> {
        self.stdin.take()
    }

    /// The stdout reader.
    pub fn take_stdout(&mut self) -> Option<Receiver> {
        self.stdout.take()
    }

    /// The stderr reader (None with a tty).
    pub fn take_stderr(&mut self) -> Option<Receiver> {
        self.stderr.take()
    }

    /// Moves the placeholder write ends out, for whoever takes over the readers.
    pub(crate) fn take_placeholders(&mut self) -> Vec<File> {
        std::mem::take(&mut self.placeholders)
    }
}

/// Files opened off the runtime, registered with the reactor afterwards.
struct RawIo {
    stdin: Option<File>,
    stdout: File,
    stderr: Option<File>,
    placeholders: Vec<File>,
}

/// Creates the FIFOs (mode 0600, dir 0700) and opens our ends so the shim's opens never
/// block: read ends nonblocking, plus a write end we hold on each output FIFO until
/// [`OpenedIo::task_created`], so that we see EOF only once the shim has opened and later
/// closed its end; for stdin we hold a write end open (no attach yet, like containerd keeping
/// stdin open). FIFOs that already exist are reused (restart recovery).
pub async fn open(fifos: &Fifos) -> Result<OpenedIo, IoError> {
    let set = fifos.clone();
    let raw = tokio::task::spawn_blocking(move || open_blocking(&set)).await??;
    let stdin = match (raw.stdin, &fifos.stdin) {
        (Some(f), Some(path)) => Some(Sender::from_file(f).map_err(open_err(path))?),
        _ => None,
    };
    let stdout = Receiver::from_file(raw.stdout).map_err(open_err(&fifos.stdout))?;
    let stderr = match (raw.stderr, &fifos.stderr) {
        (Some(f), Some(path)) => Some(Receiver::from_file(f).map_err(open_err(path))?),
        _ => None,
    };
    Ok(OpenedIo {
        stdin,
        stdout: Some(stdout),
        stderr,
        placeholders: raw.placeholders,
    })
}

fn open_err(path: &Path) -> impl FnOnce(std::io::Error) -> IoError + '_ {
    move |source| IoError::Open {
        path: path.to_path_buf(),
        source,
    }
}

fn open_blocking(fifos: &Fifos) -> Result<RawIo, IoError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&fifos.dir)
        .map_err(|source| IoError::CreateDir {
            path: fifos.dir.clone(),
            source,
        })?;
    for path in fifos.paths() {
        create_or_reuse(path)?;
    }
    let mut placeholders = Vec::new();
    // The reader must exist before a nonblocking write-only open, which fails with ENXIO
    // otherwise.
    let mut output = |path: &Path| -> Result<File, IoError> {
        let reader = open_fifo(path, libc::O_RDONLY)?;
        placeholders.push(open_fifo(path, libc::O_WRONLY)?);
        Ok(reader)
    };
    let stdout = output(&fifos.stdout)?;
    let stderr = fifos.stderr.as_deref().map(&mut output).transpose()?;
    // Read-write never blocks on Linux, so stdin needs no reader yet; the shim's read end
    // then receives whatever is written through this descriptor.
    let stdin = fifos
        .stdin
        .as_deref()
        .map(|p| open_fifo(p, libc::O_RDWR))
        .transpose()?;
    Ok(RawIo {
        stdin,
        stdout,
        stderr,
        placeholders,
    })
}

fn create_or_reuse(path: &Path) -> Result<(), IoError> {
    match nix::unistd::mkfifo(path, Mode::S_IRUSR | Mode::S_IWUSR) {
        Ok(()) => Ok(()),
        Err(Errno::EEXIST) => {
            let meta = std::fs::symlink_metadata(path).map_err(|source| IoError::Mkfifo {
                path: path.to_path_buf(),
                source,
            })?;
            if meta.file_type().is_fifo() {
                Ok(())
            } else {
                Err(IoError::NotFifo {
                    path: path.to_path_buf(),
                })
            }
        }
        Err(e) => Err(IoError::Mkfifo {
            path: path.to_path_buf(),
            source: e.into(),
        }),
    }
}

fn open_fifo(path: &Path, access: libc::c_int) -> Result<File, IoError> {
    let mut opts = OpenOptions::new();
    match access {
        libc::O_RDONLY => opts.read(true),
        libc::O_WRONLY => opts.write(true),
        _ => opts.read(true).write(true),
    };
    opts.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| IoError::Open {
            path: path.to_path_buf(),
            source,
        })
}

/// Removes the FIFOs (not their directory, which may be shared); idempotent.
pub async fn remove(fifos: &Fifos) -> Result<(), IoError> {
    let set = fifos.clone();
    tokio::task::spawn_blocking(move || {
        for path in set.paths() {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(IoError::Remove {
                        path: path.to_path_buf(),
                        source,
                    });
                }
            }
        }
        Ok(())
    })
    .await?
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use tokio::io::AsyncReadExt;

    use super::*;

    #[test]
    fn names_and_strings() {
        let f = Fifos::new(Path::new("/run/x"), "c1", true, false);
        assert_eq!(f.stdin_str(), "/run/x/c1-stdin");
        assert_eq!(f.stdout_str(), "/run/x/c1-stdout");
        assert_eq!(f.stderr_str(), "/run/x/c1-stderr");
        let t = Fifos::new(Path::new("/run/x"), "c1", false, true);
        assert_eq!(t.stdin_str(), "");
        assert_eq!(t.stderr_str(), "");
        assert_eq!(t.stdout, PathBuf::from("/run/x/c1-stdout"));
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<Fifos>(&json).unwrap(), f);
    }

    /// Plays the shim: opens the write end (blocking, as the shim does), writes, closes.
    fn shim_write(path: PathBuf, data: &'static [u8]) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let mut w = OpenOptions::new().write(true).open(path).unwrap();
            w.write_all(data).unwrap();
        })
    }

    async fn read_all(rx: &mut Receiver) -> Vec<u8> {
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), rx.read_to_end(&mut out))
            .await
            .expect("EOF in time")
            .unwrap();
        out
    }

    #[tokio::test]
    async fn modes_and_eof_only_after_task_created_and_shim_close() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("io");
        let fifos = Fifos::new(&dir, "c", false, false);
        let mut io = open(&fifos).await.unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&fifos.stdout), 0o600);
        assert!(
            std::fs::metadata(fifos.stderr.as_ref().unwrap())
                .unwrap()
                .file_type()
                .is_fifo()
        );
        assert!(io.take_stdin().is_none());

        let mut out = io.take_stdout().unwrap();
        // No writer but our placeholder: the read must wait, not report EOF.
        let mut b = [0u8; 8];
        assert!(
            tokio::time::timeout(Duration::from_millis(100), out.read(&mut b))
                .await
                .is_err()
        );

        let shim = shim_write(fifos.stdout.clone(), b"hello\n");
        shim.join().unwrap();
        // The shim closed, but our placeholder still holds the FIFO open.
        let n = out.read(&mut b).await.unwrap();
        assert_eq!(&b[..n], b"hello\n");
        assert!(
            tokio::time::timeout(Duration::from_millis(100), out.read(&mut b))
                .await
                .is_err()
        );

        io.task_created();
        assert_eq!(read_all(&mut out).await, b"");
        let mut err = io.take_stderr().unwrap();
        assert_eq!(read_all(&mut err).await, b"");

        remove(&fifos).await.unwrap();
        assert!(!fifos.stdout.exists());
        remove(&fifos).await.unwrap();
        assert!(dir.exists(), "the directory is the caller's");
    }

    #[tokio::test]
    async fn shim_opening_after_task_created_is_read_to_eof() {
        let tmp = tempfile::tempdir().unwrap();
        let fifos = Fifos::new(tmp.path(), "e", false, true);
        assert!(fifos.stderr.is_none());
        let mut io = open(&fifos).await.unwrap();
        // The shim opens its end while we still hold ours, then writes after we let go.
        let path = fifos.stdout.clone();
        let (opened_tx, opened_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let shim = std::thread::spawn(move || {
            let mut w = OpenOptions::new().write(true).open(path).unwrap();
            opened_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            w.write_all(b"late\n").unwrap();
        });
        opened_rx.recv().unwrap();
        io.task_created();
        go_tx.send(()).unwrap();
        let mut out = io.take_stdout().unwrap();
        assert_eq!(read_all(&mut out).await, b"late\n");
        shim.join().unwrap();
        remove(&fifos).await.unwrap();
    }

    #[tokio::test]
    async fn stdin_is_held_open_and_reaches_the_reader() {
        let tmp = tempfile::tempdir().unwrap();
        let fifos = Fifos::new(tmp.path(), "s", true, false);
        let mut io = open(&fifos).await.unwrap();
        let stdin = io.take_stdin().unwrap();
        // The shim's end: read-only nonblocking, as in containerd's copyPipes.
        let mut shim_in = open_fifo(fifos.stdin.as_ref().unwrap(), libc::O_RDONLY).unwrap();
        stdin.writable().await.unwrap();
        assert_eq!(stdin.try_write(b"in").unwrap(), 2);
        let mut b = [0u8; 4];
        assert_eq!(std::io::Read::read(&mut shim_in, &mut b).unwrap(), 2);
        // Our write end keeps it open: no EOF, just nothing to read yet.
        let e = std::io::Read::read(&mut shim_in, &mut b).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        remove(&fifos).await.unwrap();
    }

    #[tokio::test]
    async fn reopens_existing_fifos_and_rejects_other_files() {
        let tmp = tempfile::tempdir().unwrap();
        let fifos = Fifos::new(tmp.path(), "r", true, false);
        let first = open(&fifos).await.unwrap();
        drop(first);
        // Recovery after a restart: the same paths open again.
        let mut again = open(&fifos).await.unwrap();
        let shim = shim_write(fifos.stdout.clone(), b"x");
        shim.join().unwrap();
        again.task_created();
        let mut out = again.take_stdout().unwrap();
        assert_eq!(read_all(&mut out).await, b"x");

        let other = Fifos::new(tmp.path(), "plain", false, false);
        std::fs::write(&other.stdout, b"").unwrap();
        match open(&other).await {
            Err(IoError::NotFifo { path }) => assert_eq!(path, other.stdout),
            r => panic!("expected NotFifo, got {r:?}"),
        }
    }

    #[test]
    fn error_codes() {
        assert_eq!(
            IoError::LogClosed {
                container_id: "c".into()
            }
            .code(),
            tonic::Code::FailedPrecondition
        );
        assert_eq!(IoError::NoRuntime.code(), tonic::Code::Internal);
    }
}
