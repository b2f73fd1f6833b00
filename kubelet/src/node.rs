//! Facts about this node the pod specs need: its IP and memory.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};

/// The node's primary address: the source address of its default route (no packet is sent),
/// or loopback on a node without one.
pub fn host_ip() -> IpAddr {
    UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("10.255.255.255:9")?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Total memory in bytes (/proc/meminfo MemTotal).
pub fn memory_capacity() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// The swap devices `/proc/swaps` lists (`swaps`: its text): empty when swap is off.
pub fn swap_devices(swaps: &str) -> Vec<String> {
    swaps
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The swap devices in use on this machine (none when /proc/swaps cannot be read).
pub fn swap_in_use() -> Vec<String> {
    std::fs::read_to_string("/proc/swaps")
        .map(|t| swap_devices(&t))
        .unwrap_or_default()
}
