//! Interface counters of a pod's network namespace, from `/proc/<pid>/net/dev` of a process
//! inside it (the same kernel counters containerd reads over netlink, without entering the
//! netns).

use ferrolet_proto::cri;

/// The interface CRI calls the pod's own.
const DEFAULT_INTERFACE: &str = "eth0";

/// One row of `/proc/net/dev`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
}

/// Interface counters of the netns a process lives in (/proc/<pid>/net/dev; eth0 as the default interface, all listed), in spawn_blocking.
///
/// Loopback is left out as containerd does; the default is `eth0`, else the first interface.
/// `None` when the file cannot be read (the process is gone). Do not call it for host-network
/// pods: containerd reports no network for them.
pub async fn network_usage(pid: u32, timestamp_ns: i64) -> Option<cri::NetworkUsage> {
    let text = tokio::task::spawn_blocking(move || {
        std::fs::read_to_string(format!("/proc/{pid}/net/dev"))
    })
    .await
    .ok()?
    .ok()?;
    Some(to_cri(parse_net_dev(&text), timestamp_ns))
}

pub(crate) fn to_cri(counters: Vec<Counters>, timestamp_ns: i64) -> cri::NetworkUsage {
    let interfaces: Vec<cri::NetworkInterfaceUsage> = counters
        .into_iter()
        .filter(|c| c.name != "lo")
        .map(|c| cri::NetworkInterfaceUsage {
            name: c.name,
            rx_bytes: super::value(c.rx_bytes),
            rx_errors: super::value(c.rx_errors),
            tx_bytes: super::value(c.tx_bytes),
            tx_errors: super::value(c.tx_errors),
        })
        .collect();
    let default_interface = interfaces
        .iter()
        .find(|i| i.name == DEFAULT_INTERFACE)
        .or_else(|| interfaces.first())
        .cloned();
    cri::NetworkUsage {
        timestamp: timestamp_ns,
        default_interface,
        interfaces,
    }
}

/// Rows of `/proc/net/dev`; the two header lines and malformed rows are skipped.
pub(crate) fn parse_net_dev(text: &str) -> Vec<Counters> {
    text.lines()
        .filter_map(|line| {
            // A long byte count runs into the colon ("eth0:123456789"), so split on it, not on
            // whitespace; interface names cannot contain ':'.
            let (name, rest) = line.split_once(':')?;
            let fields: Vec<u64> = rest
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            // receive: bytes packets errs drop fifo frame compressed multicast; then transmit.
            if fields.len() < 16 {
                return None;
            }
            Some(Counters {
                name: name.trim().to_string(),
                rx_bytes: fields[0],
                rx_errors: fields[2],
                tx_bytes: fields[8],
                tx_errors: fields[10],
            })
        })
        .collect()
}
