//! Terminals: the OCI runtime sends the pty master over a unix socket we listen on
//! (`--console-socket`); we keep it to copy through and to resize.

use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};

/// A listening console socket, removed when dropped.
#[derive(Debug)]
pub struct ConsoleSocket {
    listener: UnixListener,
    /// Its path, for `--console-socket`.
    pub path: PathBuf,
}

impl ConsoleSocket {
    /// Listens on a fresh path under the temp dir (bundle paths are too long for a socket).
    pub fn new() -> std::io::Result<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "ferrolet-pty-{}-{}.sock",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        Ok(Self { listener, path })
    }

    /// The master the runtime sent; it has already connected by the time it exits.
    pub fn receive_master(&self) -> std::io::Result<OwnedFd> {
        self.listener.set_nonblocking(true)?;
        let (conn, _) = self.listener.accept()?;
        conn.set_nonblocking(false)?;
        let mut buf = [0u8; 4096];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let msg = recvmsg::<()>(
            conn.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(std::io::Error::from)?;
        for cmsg in msg.cmsgs().map_err(std::io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = cmsg
                && let Some(&fd) = fds.first()
            {
                for extra in &fds[1..] {
                    // SAFETY: received descriptors are ours to close.
                    drop(unsafe { OwnedFd::from_raw_fd(*extra) });
                }
                // SAFETY: the kernel gave us this descriptor; nobody else owns it.
                return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        Err(std::io::Error::other("the runtime sent no terminal"))
    }
}

impl Drop for ConsoleSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sets a terminal's size.
pub fn resize(master: &impl AsRawFd, width: u32, height: u32) -> std::io::Result<()> {
    let ws = libc::winsize {
        ws_row: u16::try_from(height).unwrap_or(u16::MAX),
        ws_col: u16::try_from(width).unwrap_or(u16::MAX),
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize from the pointer.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
