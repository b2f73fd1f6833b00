//! Wiring a process's stdio: what the OCI runtime gets and what the shim keeps (stdin and
//! terminal pumps, the console).

use std::os::fd::OwnedFd;
use std::path::Path;

use crate::console::ConsoleSocket;
use crate::error::{CallError, unknown};
use crate::pump::Pump;
use crate::runtime::ProcessStdio;
use crate::stdio;
use crate::task::{Process, StdioNames};

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
