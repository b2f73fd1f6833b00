//! Property tests for plugin result parsing: whatever a plugin prints, parsing answers with a
//! result or an error, never a panic, and a result printed in the current version parses back
//! to itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::result::{CniResult, Dns, Interface, IpConfig, Route};

const VERSIONS: [&str; 8] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0", "",
];

fn version() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(&VERSIONS[..]).prop_map(str::to_string),
        1 => "[0-9.]{0,8}",
    ]
}

fn junk() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        "\\PC{0,20}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
    ]
}

fn cidr() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<[u8; 4]>(), 0u8..=32)
            .prop_map(|(a, p)| format!("{}/{p}", std::net::Ipv4Addr::from(a))),
        (any::<[u16; 8]>(), 0u8..=128)
            .prop_map(|(a, p)| format!("{}/{p}", std::net::Ipv6Addr::from(a))),
        "\\PC{0,20}",
    ]
}

/// Result-shaped JSON with arbitrary values, some of the wrong type.
fn wire() -> impl Strategy<Value = Value> {
    let ip = (
        cidr(),
        proptest::option::of(prop_oneof![any::<u64>().prop_map(Value::from), junk()]),
        proptest::option::of(cidr()),
    )
        .prop_map(|(address, interface, gateway)| {
            let mut m = json!({"address": address, "version": "4"});
            if let Some(i) = interface {
                m["interface"] = i;
            }
            if let Some(g) = gateway {
                m["gateway"] = json!(g);
            }
            m
        });
    let iface = ("[a-z0-9]{0,6}", proptest::option::of(junk())).prop_map(|(name, mtu)| {
        let mut m = json!({"name": name});
        if let Some(mtu) = mtu {
            m["mtu"] = mtu;
        }
        m
    });
    (
        version(),
        proptest::collection::vec(iface, 0..3),
        prop_oneof![
            proptest::collection::vec(ip, 0..4).prop_map(Value::from),
            junk()
        ],
        proptest::option::of(cidr().prop_map(|c| json!({"ip": c}))),
        proptest::option::of(prop_oneof![
            junk(),
            Just(json!({"nameservers": ["1.1.1.1"]}))
        ]),
    )
        .prop_map(|(v, ifaces, ips, ip4, dns)| {
            let mut m = json!({"cniVersion": v, "interfaces": ifaces, "ips": ips});
            if let Some(ip4) = ip4 {
                m["ip4"] = ip4;
            }
            if let Some(dns) = dns {
                m["dns"] = dns;
            }
            m
        })
}

fn extra(keys: &'static [&'static str]) -> impl Strategy<Value = Map<String, Value>> {
    proptest::collection::btree_map(proptest::sample::select(keys), any::<u32>(), 0..keys.len())
        .prop_map(|m| {
            m.into_iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect()
        })
}

/// A valid result in the current form.
fn result() -> impl Strategy<Value = CniResult> {
    let iface = (
        "[a-z0-9]{1,6}",
        proptest::option::of("[0-9a-f:]{17}"),
        proptest::option::of("/[a-z/]{1,12}"),
        extra(&["mtu", "socketPath", "pciID"]),
    )
        .prop_map(|(name, mac, sandbox, extra)| Interface {
            name,
            mac,
            sandbox,
            extra,
        });
    let route = (
        cidr(),
        proptest::option::of("[0-9.]{7,15}"),
        extra(&["mtu", "advmss", "priority", "table", "scope"]),
    )
        .prop_map(|(dst, gw, extra)| Route { dst, gw, extra });
    let dns = (
        proptest::collection::vec("[0-9.]{7,15}", 0..3),
        proptest::option::of("[a-z.]{0,12}"),
        proptest::collection::vec("[a-z.]{1,12}", 0..3),
        proptest::collection::vec("[a-z:0-9]{1,12}", 0..3),
    )
        .prop_map(|(nameservers, domain, search, options)| Dns {
            nameservers,
            domain,
            search,
            options,
        });
    (
        proptest::collection::vec(iface, 0..3),
        proptest::collection::vec(route, 0..3),
        dns,
        proptest::collection::vec(
            (
                any::<[u8; 4]>(),
                0u8..=32,
                any::<Option<u8>>(),
                any::<bool>(),
            ),
            0..4,
        ),
    )
        .prop_map(|(interfaces, routes, dns, ips)| {
            let n = interfaces.len();
            let ips = ips
                .into_iter()
                .map(|(a, p, iface, gw)| IpConfig {
                    address: format!("{}/{p}", std::net::Ipv4Addr::from(a)),
                    gateway: gw.then(|| "10.0.0.1".to_string()),
                    interface: iface.and_then(|i| (n > 0).then(|| usize::from(i) % n)),
                })
                .collect();
            CniResult {
                cni_version: "1.1.0".into(),
                interfaces,
                ips,
                routes,
                dns,
            }
        })
}

proptest! {
    #[test]
    fn any_bytes_are_a_result_or_an_error(
        body in proptest::collection::vec(any::<u8>(), 0..256),
        fallback in version(),
    ) {
        let _ = CniResult::parse(&body, &fallback);
    }

    #[test]
    fn result_shaped_json_is_a_result_or_an_error(doc in wire(), fallback in version()) {
        let body = serde_json::to_vec(&doc).unwrap();
        if let Ok(r) = CniResult::parse(&body, &fallback) {
            // What parses is usable: every printer and accessor works on it.
            for ip in &r.ips {
                let _ = r.interface_of(ip);
            }
            let _ = r.first_ipv4();
            let _ = r.to_string();
            for v in VERSIONS.iter().filter(|v| !v.is_empty()) {
                let _ = r.to_version(v);
            }
        }
        for cut in [body.len() / 2, body.len().saturating_sub(1)] {
            let _ = CniResult::parse(&body[..cut], &fallback);
        }
    }

    #[test]
    fn current_results_round_trip(r in result()) {
        let printed = r.to_current().to_string();
        prop_assert_eq!(CniResult::parse(printed.as_bytes(), "1.0.0").unwrap(), r);
    }
}
