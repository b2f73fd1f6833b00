//! Poll registrations of the shim's stdio pumps and OOM watches, and their release with the
//! processes and containers they belong to.

use std::os::fd::AsRawFd;

use mio::unix::SourceFd;
use mio::{Interest, Token};

use super::Shim;
use crate::io::Source;
use crate::pump::Pump;
use crate::task::{Container, Process, StdioNames};

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
