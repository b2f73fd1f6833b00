//! Copies between two nonblocking descriptors as readiness allows: a stdin FIFO into the
//! process's pipe or terminal, and a terminal's output into its FIFO.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::OwnedFd;

/// Bytes held between a read and the write that drains them.
const BUFFER: usize = 32 << 10;

/// One direction of copying.
#[derive(Debug)]
pub struct Pump {
    /// Read side.
    pub from: std::fs::File,
    /// Write side.
    pub to: std::fs::File,
    buf: Vec<u8>,
    start: usize,
    /// The read side has reported readiness since its last WouldBlock. A FIFO with no writer
    /// reads as EOF before any writer came, so only readiness (data, or a hang-up after a
    /// writer left) may lead to a read.
    read_ready: bool,
}

/// What a [`Pump::drive`] left.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Waiting for readiness on either side.
    Blocked,
    /// The read side ended (EOF, or EIO from a terminal whose processes are gone) and all
    /// it gave was written; or the write side is gone.
    Done,
}

impl Pump {
    /// A pump from `from` to `to`; both must be nonblocking.
    pub fn new(from: OwnedFd, to: OwnedFd) -> Self {
        Self {
            from: from.into(),
            to: to.into(),
            buf: Vec::new(),
            start: 0,
            read_ready: false,
        }
    }

    /// Notes readiness of the read side.
    pub fn readable(&mut self) {
        self.read_ready = true;
    }

    /// Moves what it can.
    pub fn drive(&mut self) -> Progress {
        loop {
            while self.start < self.buf.len() {
                match self.to.write(&self.buf[self.start..]) {
                    Ok(n) => self.start += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Progress::Blocked,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return Progress::Done,
                }
            }
            self.buf.clear();
            self.start = 0;
            if !self.read_ready {
                self.buf = Vec::new();
                return Progress::Blocked;
            }
            self.buf.resize(BUFFER, 0);
            match self.from.read(&mut self.buf) {
                Ok(0) => {
                    self.buf.clear();
                    return Progress::Done;
                }
                Ok(n) => self.buf.truncate(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    // Nothing held between reads: an idle pump keeps no buffer.
                    self.buf = Vec::new();
                    self.read_ready = false;
                    return Progress::Blocked;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => self.buf.clear(),
                Err(_) => {
                    self.buf.clear();
                    return Progress::Done;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_until_eof() {
        let (r1, mut w1) = std::io::pipe().unwrap();
        let (mut r2, w2) = std::io::pipe().unwrap();
        let r1: OwnedFd = r1.into();
        let w2: OwnedFd = w2.into();
        crate::stdio::set_nonblocking(&r1).unwrap();
        crate::stdio::set_nonblocking(&w2).unwrap();
        let mut p = Pump::new(r1, w2);
        assert_eq!(p.drive(), Progress::Blocked);
        w1.write_all(b"hello").unwrap();
        assert_eq!(p.drive(), Progress::Blocked, "no read before readiness");
        p.readable();
        assert_eq!(p.drive(), Progress::Blocked);
        drop(w1);
        p.readable();
        assert_eq!(p.drive(), Progress::Done);
        drop(p);
        let mut s = String::new();
        r2.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
    }
}
