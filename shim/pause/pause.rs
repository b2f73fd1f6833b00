//! pause: PID 1 of every pod sandbox. It holds the sandbox's namespaces open, reaps the
//! zombies of processes reparented to it, and exits 0 on SIGINT or SIGTERM.
//!
//! Built by `shim/build.rs` with `rustc` alone (no crates) into a static binary, so it runs in
//! an empty root filesystem.

use std::os::raw::c_int;

const SIGINT: c_int = 2;
const SIGTERM: c_int = 15;
const SIGCHLD: c_int = 17;
const WNOHANG: c_int = 1;

unsafe extern "C" {
    fn signal(sig: c_int, handler: extern "C" fn(c_int)) -> usize;
    fn pause() -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn getpid() -> c_int;
    fn _exit(code: c_int) -> !;
}

extern "C" fn terminate(_: c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { _exit(0) }
}

extern "C" fn reap(_: c_int) {
    let mut status = 0;
    // SAFETY: waitpid is async-signal-safe; WNOHANG never blocks.
    while unsafe { waitpid(-1, &mut status, WNOHANG) } > 0 {}
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("-v") {
        println!("pause (ferrolet) {}", env!("FERROLET_VERSION"));
        return;
    }
    // SAFETY: plain libc calls with valid handlers.
    unsafe {
        if getpid() != 1 {
            eprintln!("Warning: pause should be the first process");
        }
        signal(SIGINT, terminate);
        signal(SIGTERM, terminate);
        signal(SIGCHLD, reap);
        loop {
            pause();
        }
    }
}
