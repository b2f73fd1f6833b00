//! TCP probes, as the Go kubelet's `probe/tcp`: a connection opened within the timeout is
//! success; it is closed at once with a reset (see [`super::dial`]).

use std::time::Duration;

use super::check::{Outcome, join_host_port};

/// Connects to `host:port` within `timeout`.
pub async fn probe(host: &str, port: u16, timeout: Duration) -> (Outcome, String) {
    match tokio::time::timeout(timeout, super::dial::dial(host, port)).await {
        Ok(Ok(conn)) => {
            drop(conn);
            (Outcome::Success, String::new())
        }
        Ok(Err(e)) => (
            Outcome::Failure,
            format!("dial tcp {}: connect: {e}", join_host_port(host, port)),
        ),
        Err(_) => (
            Outcome::Failure,
            format!("dial tcp {}: i/o timeout", join_host_port(host, port)),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn open_ports_pass_and_closed_ones_fail() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(
            probe("127.0.0.1", port, Duration::from_secs(1)).await,
            (Outcome::Success, String::new())
        );
        drop(listener);
        let (outcome, message) = probe("127.0.0.1", port, Duration::from_secs(1)).await;
        assert_eq!(outcome, Outcome::Failure);
        assert!(
            message.starts_with(&format!("dial tcp 127.0.0.1:{port}: connect: ")),
            "{message}"
        );
    }

    #[tokio::test]
    async fn unanswered_connects_time_out() {
        // TEST-NET-1 is never routed: the SYN goes unanswered (or the route is refused at
        // once, which is a failure too).
        let (outcome, message) = probe("192.0.2.1", 9, Duration::from_millis(300)).await;
        assert_eq!(outcome, Outcome::Failure, "{message}");
        assert!(message.starts_with("dial tcp 192.0.2.1:9: "), "{message}");
    }
}
