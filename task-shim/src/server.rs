//! The shim daemon's event loop: one thread, epoll (mio) over the ttrpc listener and its
//! connections, a signalfd for SIGCHLD (the shim is its containers' subreaper), stdio pumps,
//! OOM watches and the event publisher's connection.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferrolet_proto::task_shim::{SERVICE_V2, SERVICE_V3};
use ferrolet_proto::ttrpc::{self, FrameHeader, Request, Response};
use mio::net::{UnixListener, UnixStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use prost::Message;

use crate::error::{CallError, Code};
use crate::io::Source;
use crate::publisher::{self, Publisher};
use crate::pump::Progress;
use crate::service::{Reply, Shim};

const LISTENER: Token = Token(0);
const SIGNALS: Token = Token(1);
/// Connection tokens start here; pumps and OOM watches take theirs from [`Shim::token`],
/// which starts at 16 and counts up, so connections use the top half.
const CONN_BASE: usize = 1 << 40;
/// How long a shutting-down shim keeps trying to deliver its last events.
const DRAIN: Duration = Duration::from_secs(5);

struct Conn {
    stream: UnixStream,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
}

/// Serves on the listener passed as fd 3 until containerd shuts the shim down.
pub fn serve(namespace: String, ttrpc_address: PathBuf) -> std::io::Result<()> {
    // SAFETY: `start` passed the bound listener as fd 3, owned by nobody else here.
    let std_listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(3) };
    // Removed on the way out, as the Go shim removes its socket.
    let socket = std_listener
        .local_addr()?
        .as_pathname()
        .map(PathBuf::from)
        .unwrap_or_default();
    std_listener.set_nonblocking(true)?;
    let mut listener = UnixListener::from_std(std_listener);
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;

    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.thread_block().map_err(std::io::Error::from)?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(std::io::Error::from)?;
    poll.registry().register(
        &mut SourceFd(&signals.as_raw_fd()),
        SIGNALS,
        Interest::READABLE,
    )?;
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };

    let publisher = Publisher::new(ttrpc_address, namespace.clone());
    let mut shim = Shim::new(namespace, publisher, poll.registry().try_clone()?);
    let mut conns: HashMap<usize, Conn> = HashMap::new();
    let mut next_conn = CONN_BASE;
    let mut events = Events::with_capacity(64);
    let mut shutdown_at: Option<Instant> = None;

    loop {
        let timeout = [shim.publisher.deadline(), shutdown_at.map(|t| t + DRAIN)]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t.saturating_duration_since(Instant::now()));
        if let Err(e) = poll.poll(&mut events, timeout)
            && e.kind() != ErrorKind::Interrupted
        {
            return Err(e);
        }
        // OOM events first: a kill and the exit it causes arrive together, and containerd
        // should hear of the OOM before the exit.
        let mut ordered: Vec<(Token, bool, bool)> = events
            .iter()
            .map(|e| {
                (
                    e.token(),
                    e.is_readable() || e.is_read_closed() || e.is_error(),
                    e.is_writable(),
                )
            })
            .collect();
        ordered.sort_by_key(|(t, _, _)| !matches!(shim.sources.get(&t.0), Some(Source::Oom(_))));
        for (token, readable, writable) in ordered {
            match token {
                LISTENER => accept(&mut listener, &mut shim, &mut conns, &mut next_conn),
                SIGNALS => {
                    while let Ok(Some(_)) = signals.read_signal() {}
                    reap(&mut shim);
                }
                publisher::TOKEN => shim.publisher.pump(&shim.registry),
                Token(t) if t >= CONN_BASE => {
                    if let Some(conn) = conns.get_mut(&t) {
                        let open = (!readable || read_conn(conn, t, &mut shim))
                            && (!writable || flush(conn));
                        if !open {
                            close_conn(&mut shim, &mut conns, t);
                        } else if shim_shutdown_requested(&mut shim) {
                            shutdown_at.get_or_insert_with(Instant::now);
                        }
                    }
                }
                Token(t) => on_source(&mut shim, t, readable),
            }
        }
        // A handler may have run a runtime command whose process exited meanwhile.
        reap(&mut shim);
        for (conn, stream, payload) in std::mem::take(&mut shim.answers) {
            if let Some(c) = conns.get_mut(&conn) {
                let frame = ttrpc::frame(
                    stream,
                    ttrpc::TYPE_RESPONSE,
                    &Response {
                        status: None,
                        payload,
                    },
                );
                c.wbuf.extend_from_slice(&frame);
                if !flush(c) {
                    close_conn(&mut shim, &mut conns, conn);
                }
            }
        }
        shim.publisher.pump(&shim.registry);
        if let Some(at) = shutdown_at
            && (shim.publisher.idle() || at.elapsed() >= DRAIN)
        {
            for c in conns.values_mut() {
                flush(c);
            }
            let _ = std::fs::remove_file(&socket);
            crate::log::debug("shim shutting down", &[]);
            return Ok(());
        }
    }
}

fn shim_shutdown_requested(shim: &mut Shim) -> bool {
    shim.shutdown_requested && shim.is_empty()
}

fn accept(
    listener: &mut UnixListener,
    shim: &mut Shim,
    conns: &mut HashMap<usize, Conn>,
    next: &mut usize,
) {
    loop {
        match listener.accept() {
            Ok((mut stream, _)) => {
                *next += 1;
                let token = *next;
                if shim
                    .registry
                    .register(
                        &mut stream,
                        Token(token),
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .is_ok()
                {
                    conns.insert(
                        token,
                        Conn {
                            stream,
                            rbuf: Vec::new(),
                            wbuf: Vec::new(),
                        },
                    );
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn close_conn(shim: &mut Shim, conns: &mut HashMap<usize, Conn>, token: usize) {
    if let Some(mut c) = conns.remove(&token) {
        let _ = shim.registry.deregister(&mut c.stream);
    }
    shim.forget_connection(token);
}

/// Reads and answers what arrived; false once the peer is gone or broke the protocol.
fn read_conn(conn: &mut Conn, token: usize, shim: &mut Shim) -> bool {
    let mut chunk = [0u8; 4096];
    let mut open = true;
    loop {
        match conn.stream.read(&mut chunk) {
            Ok(0) => {
                open = false;
                break;
            }
            Ok(n) => conn.rbuf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    while conn.rbuf.len() >= ttrpc::HEADER_LEN {
        let mut head = [0u8; ttrpc::HEADER_LEN];
        head.copy_from_slice(&conn.rbuf[..ttrpc::HEADER_LEN]);
        let h = FrameHeader::decode(&head);
        if h.length as usize > ttrpc::MAX_PAYLOAD {
            return false;
        }
        let end = ttrpc::HEADER_LEN + h.length as usize;
        if conn.rbuf.len() < end {
            break;
        }
        let body: Vec<u8> = conn.rbuf.drain(..end).skip(ttrpc::HEADER_LEN).collect();
        if h.kind != ttrpc::TYPE_REQUEST {
            continue;
        }
        let result = match Request::decode(body.as_slice()) {
            Err(e) => Err(CallError::new(
                Code::InvalidArgument,
                format!("decoding ttrpc request: {e}"),
            )),
            Ok(req) if req.service != SERVICE_V2 && req.service != SERVICE_V3 => {
                Err(CallError::new(
                    Code::Unimplemented,
                    format!("service {} is not served", req.service),
                ))
            }
            Ok(req) => {
                // containerd asks after each task's delete; the shim goes with the pod's last.
                if req.method == "Shutdown" && shim.is_empty() {
                    shim.shutdown_requested = true;
                }
                match shim.dispatch(token, h.stream_id, &req.method, &req.payload) {
                    Reply::Later => continue,
                    Reply::Now(r) => r,
                }
            }
        };
        let response = match result {
            Ok(payload) => Response {
                status: None,
                payload,
            },
            Err(e) => {
                crate::log::debug("call failed", &[("error", &e.message)]);
                Response {
                    status: Some(e.status()),
                    payload: Vec::new(),
                }
            }
        };
        conn.wbuf
            .extend_from_slice(&ttrpc::frame(h.stream_id, ttrpc::TYPE_RESPONSE, &response));
    }
    flush(conn) && open
}

/// Writes what is pending; false if the peer is gone.
fn flush(conn: &mut Conn) -> bool {
    while !conn.wbuf.is_empty() {
        match conn.stream.write(&conn.wbuf) {
            Ok(0) => return false,
            Ok(n) => {
                conn.wbuf.drain(..n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

/// Reaps every exited child.
fn reap(shim: &mut Shim) {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => shim.on_exit(pid.as_raw() as u32, code as u32),
            Ok(WaitStatus::Signaled(pid, sig, _)) => {
                shim.on_exit(pid.as_raw() as u32, 128 + sig as u32)
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn on_source(shim: &mut Shim, token: usize, readable: bool) {
    match shim.sources.get(&token).cloned() {
        Some(Source::Oom(id)) => {
            let hit = shim
                .containers
                .get_mut(&id)
                .and_then(|c| c.oom.as_mut())
                .is_some_and(|w| w.check());
            if hit {
                shim.on_oom(&id);
            }
        }
        Some(Source::Pump {
            container,
            exec,
            output,
            read_side,
        }) => {
            let Some(p) = shim
                .containers
                .get_mut(&container)
                .and_then(|c| c.process_mut(&exec))
            else {
                return;
            };
            let pump = if output {
                p.output.as_mut()
            } else {
                p.stdin.as_mut()
            };
            let Some(pump) = pump else { return };
            if read_side && readable {
                pump.readable();
            }
            if pump.drive() == Progress::Done {
                // stdin at EOF: the process reads EOF. A terminal's output ended: its
                // processes are gone, and the FIFO's reader now sees EOF. stdin ending on a
                // terminal hangs it up, as the Go shim closes the console.
                let hang_up = !output;
                crate::service::finish_pump(shim, &container, &exec, output);
                if hang_up {
                    crate::service::close_stdin(shim, &container, &exec, true);
                }
            }
        }
        None => {}
    }
}
