//! A process's stdio as containerd names it: FIFO paths (what CRI gives), `file://` and
//! `binary://` URIs (log files and logging binaries), or nothing.
//!
//! Unlike the Go shim, outputs are not copied through the shim: the process writes straight
//! into the FIFO or file. Each FIFO is opened read-write, so the process never gets EPIPE
//! while the reader (containerd's client) is away, as the Go shim's extra read end ensures;
//! the reader still sees EOF when the process and its children have closed it. Only stdin
//! (which must reach EOF on CloseIO) and terminals go through a [`crate::pump::Pump`].

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// A stdio setup that failed.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// Opening a FIFO or file failed.
    #[error("opening {path}: {source}")]
    Open {
        /// The path or URI.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A URI scheme this shim does not know.
    #[error("unsupported stdio uri {0:?}")]
    Scheme(String),
    /// Starting or waiting for a logging binary failed.
    #[error("logging binary {path}: {source}")]
    Logger {
        /// The binary.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Where an output goes.
enum Output<'a> {
    None,
    Fifo(&'a str),
    File(&'a str),
    Binary(&'a str),
}

fn classify(s: &str) -> Result<Output<'_>, StdioError> {
    if s.is_empty() {
        return Ok(Output::None);
    }
    match s.split_once("://") {
        None => Ok(Output::Fifo(s)),
        Some(("fifo", p)) => Ok(Output::Fifo(p)),
        Some(("file", p)) => Ok(Output::File(p)),
        Some(("binary", p)) => Ok(Output::Binary(p)),
        Some(_) => Err(StdioError::Scheme(s.to_string())),
    }
}

fn open_err(path: &str) -> impl FnOnce(std::io::Error) -> StdioError + '_ {
    move |source| StdioError::Open {
        path: path.to_string(),
        source,
    }
}

/// The write end a process gets for `path` (a FIFO or `file://`); None for no output.
/// `binary://` is set up by [`open_outputs`].
fn open_output(path: &str) -> Result<Option<OwnedFd>, StdioError> {
    match classify(path)? {
        Output::None => Ok(None),
        Output::Fifo(p) => OpenOptions::new()
            .read(true)
            .write(true)
            .open(p)
            .map(|f| Some(f.into()))
            .map_err(open_err(path)),
        Output::File(p) => {
            let p = p.split('?').next().unwrap_or(p);
            if let Some(dir) = Path::new(p).parent() {
                std::fs::create_dir_all(dir).map_err(open_err(path))?;
            }
            OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o644)
                .open(p)
                .map(|f| Some(f.into()))
                .map_err(open_err(path))
        }
        Output::Binary(_) => Err(StdioError::Scheme(path.to_string())),
    }
}

/// The stdout and stderr write ends for a process; with `binary://` the logging binary is
/// started (fds 3 and 4 its inputs, 5 closed when it is ready) and waited for.
pub fn open_outputs(
    stdout: &str,
    stderr: &str,
    container_id: &str,
    namespace: &str,
) -> Result<(Option<OwnedFd>, Option<OwnedFd>), StdioError> {
    if let Output::Binary(uri) = classify(stdout)? {
        return start_logger(uri, container_id, namespace);
    }
    let out = open_output(stdout)?;
    // A terminal merges stderr; the same path twice gets one open file.
    let err = if stderr == stdout {
        match &out {
            Some(fd) => Some(fd.try_clone().map_err(open_err(stderr))?),
            None => None,
        }
    } else {
        open_output(stderr)?
    };
    Ok((out, err))
}

/// Starts `binary://path?k=v` with the process's output pipes, as the Go shim's binary IO.
fn start_logger(
    uri: &str,
    container_id: &str,
    namespace: &str,
) -> Result<(Option<OwnedFd>, Option<OwnedFd>), StdioError> {
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let err = |source| StdioError::Logger {
        path: path.to_string(),
        source,
    };
    let (out_r, out_w) = std::io::pipe().map_err(err)?;
    let (err_r, err_w) = std::io::pipe().map_err(err)?;
    let (mut ready_r, ready_w) = std::io::pipe().map_err(err)?;
    let mut cmd = Command::new(path);
    // Each query key, then its value if it has one, as separate arguments (the Go shim's).
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        cmd.arg(k);
        if !v.is_empty() {
            cmd.arg(v);
        }
    }
    cmd.env("CONTAINER_ID", container_id)
        .env("CONTAINER_NAMESPACE", namespace)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let fds = [out_r.as_raw_fd(), err_r.as_raw_fd(), ready_w.as_raw_fd()];
    // SAFETY: between fork and exec this only calls fcntl and dup2 (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            // Out of the way first: a source may already sit on a target number.
            let mut high = [0; 3];
            for (h, fd) in high.iter_mut().zip(fds) {
                *h = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10);
                if *h < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (i, h) in high.iter().enumerate() {
                if libc::dup2(*h, 3 + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    // The child is reaped by the shim's reaper like any other; its pid is not tracked.
    cmd.spawn().map_err(err)?;
    drop((out_r, err_r, ready_w));
    // The logger closes (or writes to) fd 5 once it is reading.
    let mut byte = [0u8; 1];
    let _ = std::io::Read::read(&mut ready_r, &mut byte);
    Ok((Some(out_w.into()), Some(err_w.into())))
}

/// Opens a stdin FIFO for reading without waiting for its writer.
pub fn open_stdin(path: &str) -> Result<File, StdioError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(open_err(path))
}

/// Opens a FIFO for a terminal's output, read-write (see the module docs) and nonblocking.
pub fn open_pump_output(path: &str) -> Result<File, StdioError> {
    match classify(path)? {
        Output::Fifo(p) | Output::File(p) => OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(p)
            .map_err(open_err(path)),
        Output::None | Output::Binary(_) => Err(StdioError::Scheme(path.to_string())),
    }
}

/// A pipe whose write end is nonblocking (the shim's) and read end blocking (the process's).
pub fn stdin_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = std::io::pipe()?;
    let w: OwnedFd = w.into();
    set_nonblocking(&w)?;
    Ok((r.into(), w))
}

/// Sets O_NONBLOCK on `fd`.
pub fn set_nonblocking(fd: &impl AsRawFd) -> std::io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn schemes() {
        assert!(matches!(classify("").unwrap(), Output::None));
        assert!(matches!(classify("/a/b").unwrap(), Output::Fifo("/a/b")));
        assert!(matches!(classify("file:///x").unwrap(), Output::File("/x")));
        assert!(matches!(
            classify("binary:///l?a=b").unwrap(),
            Output::Binary("/l?a=b")
        ));
        assert!(classify("http://x").is_err());
    }

    #[test]
    fn file_uri_appends_and_stderr_shares_stdout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/out.log");
        let uri = format!("file://{}", p.display());
        let (out, err) = open_outputs(&uri, &uri, "c", "ns").unwrap();
        File::from(out.unwrap()).write_all(b"a").unwrap();
        File::from(err.unwrap()).write_all(b"b").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "ab");
    }

    #[test]
    fn fifo_output_opens_without_a_reader() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (out, err) = open_outputs(p.to_str().unwrap(), "", "c", "ns").unwrap();
        assert!(err.is_none());
        let mut reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p)
            .unwrap();
        File::from(out.unwrap()).write_all(b"hi").unwrap();
        let mut buf = [0; 2];
        reader.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hi");
    }

    #[test]
    fn logging_binary_gets_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("got");
        let script = dir.path().join("logger.sh");
        std::fs::write(
            &script,
            format!("#!/bin/sh\nexec 5>&-\ncat <&3 > {}\n", out.display()),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let uri = format!("binary://{}", script.display());
        let (o, e) = open_outputs(&uri, &uri, "c", "ns").unwrap();
        File::from(o.unwrap()).write_all(b"logged").unwrap();
        drop(e);
        for _ in 0..100 {
            if std::fs::read_to_string(&out).unwrap_or_default() == "logged" {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("logger did not write {}", out.display());
    }
}
