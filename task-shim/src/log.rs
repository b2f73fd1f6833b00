//! The shim's log: logfmt lines (as the Go shim's logrus writes) to the `log` FIFO containerd
//! reads from each shim's first bundle, else stderr. The FIFO is opened read-write, so lines
//! written before containerd opens its end (or while it restarts) wait in the pipe rather than
//! fail; writes are nonblocking, so a full pipe drops a line instead of stalling the shim.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static SINK: Mutex<Option<File>> = Mutex::new(None);
static DEBUG: AtomicBool = AtomicBool::new(false);

/// Opens `log` in the working directory (the bundle) if containerd made it.
pub fn init(debug: bool) {
    DEBUG.store(debug, Ordering::Relaxed);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("log")
        .ok();
    if let Ok(mut sink) = SINK.lock() {
        *sink = file;
    }
}

/// Whether debug lines are wanted.
pub fn debug_enabled() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

/// Writes one line at `level` with `msg` and key=value `fields`.
pub fn line(level: &str, msg: &str, fields: &[(&str, &str)]) {
    let mut out = format!(
        "time=\"{}\" level={level} msg={msg:?}",
        crate::time::rfc3339_now()
    );
    for (k, v) in fields {
        out.push_str(&format!(" {k}={v:?}"));
    }
    out.push_str(" runtime=io.containerd.ferrolet.v1\n");
    let mut sink = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let written = match sink.as_mut() {
        Some(f) => f.write_all(out.as_bytes()).is_ok(),
        None => false,
    };
    if !written {
        let _ = std::io::stderr().write_all(out.as_bytes());
    }
}

/// An error line.
pub fn error(msg: &str, fields: &[(&str, &str)]) {
    line("error", msg, fields);
}

/// A warning line.
pub fn warn(msg: &str, fields: &[(&str, &str)]) {
    line("warning", msg, fields);
}

/// A debug line, if `-debug`.
pub fn debug(msg: &str, fields: &[(&str, &str)]) {
    if debug_enabled() {
        line("debug", msg, fields);
    }
}
