//! Probe connections, as Go's probe dialer: a fresh TCP connection per run whose close is a
//! reset (zero linger), so neither side keeps it in TIME_WAIT.
//!
//! Why not `TcpStream::connect`: to a pod over a veth, the whole handshake (our SYN, the
//! pod's SYN-ACK, our ACK) is handled in the softirq that `connect()` itself runs, so the
//! socket is usually established by the time the call returns `EINPROGRESS`. Checking that at
//! once, and registering with the reactor only when the handshake is still under way, spares
//! each probe an epoll registration and a task wake-up: at hundreds of probes a second that
//! is a good share of what a probe costs the kubelet.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// An open probe connection: still outside the reactor when the handshake finished inside
/// `connect()`, registered with it otherwise.
#[derive(Debug)]
pub enum Conn {
    /// Established at once; not registered.
    Ready(Socket),
    /// Established after waiting on the reactor.
    Registered(TcpStream),
}

impl Conn {
    /// Writes all of `bytes`: straight away on a socket outside the reactor (a probe's
    /// request fits a fresh connection's send buffer), through the reactor for the rest.
    /// The connection is then registered, ready for reading the answer.
    pub async fn send(self, bytes: &[u8]) -> io::Result<TcpStream> {
        let (mut stream, sent) = match self {
            Conn::Registered(stream) => (stream, 0),
            Conn::Ready(socket) => {
                let sent = match socket.send(bytes) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                    Err(e) => return Err(e),
                };
                (TcpStream::from_std(socket.into())?, sent)
            }
        };
        if sent < bytes.len() {
            stream.write_all(&bytes[sent..]).await?;
        }
        Ok(stream)
    }
}

/// Connects to `host:port` (an IP address, or a name tried address by address as Go's
/// dialer does).
pub async fn dial(host: &str, port: u16) -> io::Result<Conn> {
    let host = host.trim_matches(['[', ']']);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return dial_addr(SocketAddr::new(ip, port)).await;
    }
    // Boxed: a lookup's future is large, and rare next to pod IPs.
    Box::pin(dial_name(host, port)).await
}

/// Connects to the first address of `host` that accepts.
async fn dial_name(host: &str, port: u16) -> io::Result<Conn> {
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        format!("lookup {host}: no such host"),
    );
    for addr in tokio::net::lookup_host((host, port)).await? {
        match dial_addr(addr).await {
            Ok(conn) => return Ok(conn),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Connects to `addr`.
pub async fn dial_addr(addr: SocketAddr) -> io::Result<Conn> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    socket.set_linger(Some(Duration::ZERO))?;
    match socket.connect(&SockAddr::from(addr)) {
        Ok(()) => return Ok(Conn::Ready(socket)),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    if socket.peer_addr().is_ok() {
        return Ok(Conn::Ready(socket));
    }
    if let Some(e) = socket.take_error()? {
        return Err(e);
    }
    // Still shaking hands: wait for the socket to turn writable, then read its verdict.
    let stream = TcpStream::from_std(socket.into())?;
    stream.writable().await?;
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    stream.peer_addr()?;
    Ok(Conn::Registered(stream))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_listening_port_connects_and_a_closed_one_is_refused() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Loopback, like a veth, usually finishes the handshake inside connect() (Ready);
        // under load the kernel may defer it (Registered). Either is a connection.
        let conn = dial("127.0.0.1", port).await.unwrap();
        drop(conn);
        drop(listener);
        let e = dial("127.0.0.1", port).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    }

    #[tokio::test]
    async fn sent_bytes_arrive_and_closing_resets() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let conn = dial("localhost", port).await.unwrap();
        let stream = conn.send(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let (mut peer, _) = listener.accept().await.unwrap();
        let mut got = [0u8; 18];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1\r\n\r\n");
        drop(stream);
        // A zero linger turns the close into a reset, which the peer reads as an error.
        let mut rest = Vec::new();
        let e = peer.read_to_end(&mut rest).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
    }
}
