//! `start`: finds the pod's shim or starts it, and prints its address for containerd.
//!
//! A pod's containers share one shim (grouped by the CRI sandbox id annotation, as the Go runc
//! shim): the first container's `start` binds the socket and starts the daemon (this binary
//! with no command, the listener as fd 3); later ones find the socket answering and reuse it.

use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::address::{self, ADDRESS_FILE, PID_FILE};
use crate::args::Args;
use crate::task::BundleSpec;

/// Annotations that name a container's group, in order (the Go shim's `groupLabels`).
const GROUP_ANNOTATIONS: [&str; 2] = [
    "io.containerd.runc.v2.group",
    "io.kubernetes.cri.sandbox-id",
];

/// A start that failed.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct StartError {
    what: String,
    source: std::io::Error,
}

fn err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StartError {
    let what = what.into();
    move |source| StartError { what, source }
}

/// Runs `start` in `bundle` (the working directory containerd gave); returns the address.
pub fn start(args: &Args, bundle: &Path) -> Result<String, StartError> {
    let spec = BundleSpec::read(bundle)
        .map_err(err(format!("reading {}/config.json", bundle.display())))?;
    let group = GROUP_ANNOTATIONS
        .iter()
        .find_map(|a| spec.annotations.get(*a))
        .cloned()
        .unwrap_or_else(|| args.id.clone());
    let socket = address::socket_path(&args.address, &args.namespace, &group);
    let address = address::address_of(&socket);
    std::fs::create_dir_all(address::SOCKET_DIR).map_err(err("creating the socket directory"))?;
    let listener = loop {
        match UnixListener::bind(&socket) {
            Ok(l) => break l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if UnixStream::connect(&socket).is_ok() {
                    // The pod's shim is up: this container joins it.
                    address::write_atomic(bundle, ADDRESS_FILE, &address)
                        .map_err(err("writing the address file"))?;
                    return Ok(address);
                }
                // A dead shim's socket.
                std::fs::remove_file(&socket).map_err(err("removing a stale socket"))?;
            }
            Err(e) => return Err(err(format!("listening on {}", socket.display()))(e)),
        }
    };
    std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(err("restricting the socket"))?;
    let started = spawn_daemon(args, bundle, &listener);
    let pid = match started {
        Ok(pid) => pid,
        Err(e) => {
            let _ = std::fs::remove_file(&socket);
            return Err(e);
        }
    };
    adjust_oom_score(pid);
    address::write_atomic(bundle, ADDRESS_FILE, &address)
        .map_err(err("writing the address file"))?;
    address::write_atomic(bundle, PID_FILE, &pid.to_string())
        .map_err(err("writing the pid file"))?;
    Ok(address)
}

fn spawn_daemon(args: &Args, bundle: &Path, listener: &UnixListener) -> Result<u32, StartError> {
    let exe = std::env::current_exe().map_err(err("finding this binary"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("-namespace")
        .arg(&args.namespace)
        .arg("-id")
        .arg(&args.id)
        .arg("-address")
        .arg(&args.address);
    if !args.publish_binary.is_empty() {
        cmd.arg("-publish-binary").arg(&args.publish_binary);
    }
    if args.debug {
        cmd.arg("-debug");
    }
    cmd.current_dir(bundle)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let fd = listener.as_raw_fd();
    // SAFETY: between fork and exec only dup2 and fcntl, both async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself keeps close-on-exec, so clear it instead.
            let ok = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0) >= 0
            } else {
                libc::dup2(fd, 3) >= 0
            };
            if !ok {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(err("starting the shim daemon"))?;
    Ok(child.id())
}

/// Gives the daemon containerd's OOM score adjustment plus one, as the Go shim: under memory
/// pressure the shim goes before containerd.
fn adjust_oom_score(pid: u32) {
    let parent = std::os::unix::process::parent_id();
    let Some(score) = std::fs::read_to_string(format!("/proc/{parent}/oom_score_adj"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    else {
        return;
    };
    let _ = std::fs::write(
        format!("/proc/{pid}/oom_score_adj"),
        (score + 1).min(1000).to_string(),
    );
}
