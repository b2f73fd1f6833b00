//! Wiring a process's stdio: what the OCI runtime gets, what the shim keeps (stdin and
//! terminal pumps, the console), and their poll registrations.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use mio::unix::SourceFd;
use mio::{Interest, Token};

use crate::console::ConsoleSocket;
use crate::error::{CallError, unknown};
use crate::pump::Pump;
use crate::runtime::ProcessStdio;
use crate::service::Shim;
use crate::stdio;
use crate::task::{Container, Process, StdioNames};

/// What a poll token stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// One side of a process's pump.
    Pump {
        /// Container id.
        container: String,
        /// Exec id (empty: init).
        exec: String,
        /// The terminal-output pump (else stdin).
        output: bool,
        /// The read side (else the write side).
        read_side: bool,
    },
    /// A container's OOM watch.
    Oom(String),
}

/// A process's stdio while it is being created.
pub struct ProcessIo {
    runtime: ProcessStdio,
    stdin_pump: Option<Pump>,
    console: Option<ConsoleSocket>,
    names: StdioNames,
}

fn io_err(e: impl std::fmt::Display) -> stdio::StdioError {
    stdio::StdioError::Open {
        path: "stdio".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

impl ProcessIo {
    /// Opens what `names` describe for container `id`.
    pub fn open(names: &StdioNames, id: &str, namespace: &str) -> Result<Self, stdio::StdioError> {
        let mut io = ProcessIo {
            runtime: ProcessStdio::default(),
            stdin_pump: None,
            console: None,
            names: names.clone(),
        };
        if names.terminal {
            io.console = Some(ConsoleSocket::new().map_err(io_err)?);
            return Ok(io);
        }
        if !names.stdin.is_empty() {
            let fifo = stdio::open_stdin(&names.stdin)?;
            let (r, w) = stdio::stdin_pipe().map_err(io_err)?;
            io.runtime.stdin = Some(r);
            io.stdin_pump = Some(Pump::new(fifo.into(), w));
        }
        let (out, err) = stdio::open_outputs(&names.stdout, &names.stderr, id, namespace)?;
        io.runtime.stdout = out;
        io.runtime.stderr = err;
        Ok(io)
    }

    /// The descriptors the runtime passes to the process (taken: the shim keeps no copy).
    pub fn take_runtime_fds(&mut self) -> ProcessStdio {
        std::mem::take(&mut self.runtime)
    }

    /// `--console-socket`, for a terminal.
    pub fn console_path(&self) -> Option<&Path> {
        self.console.as_ref().map(|c| c.path.as_path())
    }

    /// After the runtime made the process: its terminal and pumps go to `p`.
    pub fn finish(self, p: &mut Process) -> Result<(), CallError> {
        p.stdin = self.stdin_pump;
        let Some(socket) = self.console else {
            return Ok(());
        };
        let fail = |e: &dyn std::fmt::Display| unknown(format!("receiving the terminal: {e}"));
        let master: OwnedFd = socket.receive_master().map_err(|e| fail(&e))?;
        stdio::set_nonblocking(&master).map_err(|e| fail(&e))?;
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(|e| fail(&e));
        if !self.names.stdout.is_empty() {
            let out = stdio::open_pump_output(&self.names.stdout).map_err(|e| fail(&e))?;
            p.output = Some(Pump::new(dup(&master)?, out.into()));
        }
        if !self.names.stdin.is_empty() {
            let fifo = stdio::open_stdin(&self.names.stdin).map_err(|e| fail(&e))?;
            p.stdin = Some(Pump::new(fifo.into(), dup(&master)?));
        }
        p.console = Some(master.into());
        Ok(())
    }
}

fn register_fd(shim: &mut Shim, fd: i32, interest: Interest, source: Source) {
    let token = shim.token();
    if shim
        .registry
        .register(&mut SourceFd(&fd), Token(token), interest)
        .is_ok()
    {
        shim.sources.insert(token, source);
    }
}

/// Registers a new container's OOM watch and init pumps.
pub fn register_container(shim: &mut Shim, c: &mut Container) {
    if let Some(oom) = &c.oom {
        let fd = oom.fd();
        if shim
            .registry
            .register(&mut SourceFd(&fd), Token(c.token), Interest::READABLE)
            .is_ok()
        {
            shim.sources.insert(c.token, Source::Oom(c.id.clone()));
        }
    }
    register_process(shim, &c.id.clone(), c, "");
}

/// Registers the pumps of process `exec` (empty: init) of `c`.
pub fn register_process(shim: &mut Shim, id: &str, c: &mut Container, exec: &str) {
    let Some(p) = c.process_mut(exec) else {
        return;
    };
    let pumps = [(false, p.stdin.as_ref()), (true, p.output.as_ref())];
    for (output, pump) in pumps {
        let Some(pump) = pump else { continue };
        for (read_side, fd, interest) in [
            (true, pump.from.as_raw_fd(), Interest::READABLE),
            (false, pump.to.as_raw_fd(), Interest::WRITABLE),
        ] {
            let source = Source::Pump {
                container: id.to_string(),
                exec: exec.to_string(),
                output,
                read_side,
            };
            register_fd(shim, fd, interest, source);
        }
    }
}

fn deregister_pump(shim: &mut Shim, id: &str, exec: &str, output: bool, pump: &Pump) {
    for fd in [pump.from.as_raw_fd(), pump.to.as_raw_fd()] {
        let _ = shim.registry.deregister(&mut SourceFd(&fd));
    }
    shim.sources.retain(|_, s| {
        !matches!(s, Source::Pump { container, exec: e, output: o, .. }
            if container == id && e == exec && *o == output)
    });
}

/// Stops feeding a process's stdin: the process reads EOF. With `hang_up` (CloseIO on a
/// terminal, as the Go shim) the terminal is closed too, so its processes get SIGHUP.
pub fn close_stdin(shim: &mut Shim, id: &str, exec: &str, hang_up: bool) {
    let Some(p) = shim
        .containers
        .get_mut(id)
        .and_then(|c| c.process_mut(exec))
    else {
        return;
    };
    let stdin = p.stdin.take();
    let (output, console) = if hang_up && p.stdio.terminal {
        (p.output.take(), p.console.take())
    } else {
        (None, None)
    };
    if let Some(pump) = stdin {
        deregister_pump(shim, id, exec, false, &pump);
    }
    if let Some(pump) = output {
        deregister_pump(shim, id, exec, true, &pump);
    }
    drop(console);
}

/// Drops a finished pump.
pub fn finish_pump(shim: &mut Shim, id: &str, exec: &str, output: bool) {
    let Some(p) = shim
        .containers
        .get_mut(id)
        .and_then(|c| c.process_mut(exec))
    else {
        return;
    };
    let pump = if output {
        p.output.take()
    } else {
        p.stdin.take()
    };
    if let Some(pump) = pump {
        deregister_pump(shim, id, exec, output, &pump);
    }
}

/// Releases a deleted exec's stdio.
pub fn release_process(shim: &mut Shim, id: &str, mut p: Process) {
    let exec = p.exec_id.clone();
    if let Some(pump) = p.stdin.take() {
        deregister_pump(shim, id, &exec, false, &pump);
    }
    if let Some(pump) = p.output.take() {
        deregister_pump(shim, id, &exec, true, &pump);
    }
}

/// Releases a deleted container's stdio and OOM watch.
pub fn release_container(shim: &mut Shim, mut c: Container) {
    if let Some(oom) = c.oom.take() {
        let fd = oom.fd();
        let _ = shim.registry.deregister(&mut SourceFd(&fd));
        shim.sources.remove(&c.token);
    }
    let id = c.id.clone();
    release_process(
        shim,
        &id,
        std::mem::replace(&mut c.init, Process::new("", StdioNames::default())),
    );
    for (_, e) in std::mem::take(&mut c.execs) {
        release_process(shim, &id, e);
    }
}
