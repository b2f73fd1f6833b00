//! Versioned CNI results: parse any supported version, convert to the current form (1.1.0
//! shape) for callers, and render back to a config's version for `prevResult`.
//!
//! - 0.1.0/0.2.0 (legacy `ip4`/`ip6` objects) are accepted on input for robustness.
//! - 0.3.x/0.4.0 carry `"version": "4"|"6"` in each IP entry.
//! - 1.0.0+ drop `version`; 1.1.0 adds interface/route attributes, kept in `extra` maps.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::config::{CURRENT_VERSION, version_at_least};
use crate::error::CniError;

/// An interface created or configured by the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Netns path for container interfaces; absent for host interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// 1.1.0 attributes (`mtu`, `socketPath`, `pciID`) and anything else, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An IP address assigned by the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IpConfig {
    /// CIDR, e.g. `10.1.2.3/24`.
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Index into [`CniResult::interfaces`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

impl IpConfig {
    /// The address without its prefix length.
    pub fn ip(&self) -> Option<IpAddr> {
        self.address.split('/').next()?.parse().ok()
    }
}

/// A route to install in the container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    pub dst: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<String>,
    /// 1.1.0 attributes (`mtu`, `advmss`, `priority`, `table`, `scope`), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// DNS settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_none()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// A result in the current form; `cni_version` records the version the plugin spoke.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CniResult {
    pub cni_version: String,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

#[derive(Deserialize)]
struct WireIp {
    address: String,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    interface: Option<usize>,
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default, rename = "cniVersion")]
    cni_version: String,
    #[serde(default)]
    interfaces: Vec<Interface>,
    #[serde(default)]
    ips: Vec<WireIp>,
    #[serde(default)]
    routes: Vec<Route>,
    #[serde(default)]
    dns: Option<Dns>,
    // 0.1.0/0.2.0
    #[serde(default)]
    ip4: Option<LegacyIp>,
    #[serde(default)]
    ip6: Option<LegacyIp>,
}

#[derive(Deserialize)]
struct LegacyIp {
    ip: String,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    routes: Vec<Route>,
}

impl CniResult {
    /// Parse a result of any supported version (the version is read from `cniVersion`; an
    /// empty one is taken as `fallback_version`).
    pub fn parse(bytes: &[u8], fallback_version: &str) -> Result<Self, String> {
        let wire: Wire = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let version = if wire.cni_version.is_empty() {
            fallback_version.to_string()
        } else {
            wire.cni_version
        };
        let known = [
            "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
        ];
        if !known.contains(&version.as_str()) {
            return Err(format!("unsupported result cniVersion {version:?}"));
        }
        let mut r = CniResult {
            cni_version: version.clone(),
            interfaces: wire.interfaces,
            ips: wire
                .ips
                .into_iter()
                .map(|i| IpConfig {
                    address: i.address,
                    gateway: i.gateway,
                    interface: i.interface,
                })
                .collect(),
            routes: wire.routes,
            dns: wire.dns.unwrap_or_default(),
        };
        if !version_at_least(&version, "0.3.0") {
            for legacy in [wire.ip4, wire.ip6].into_iter().flatten() {
                r.ips.push(IpConfig {
                    address: legacy.ip,
                    gateway: legacy.gateway,
                    interface: None,
                });
                r.routes.extend(legacy.routes);
            }
        }
        for ip in &r.ips {
            if ip.ip().is_none() || !ip.address.contains('/') {
                return Err(format!("ips: invalid address {:?} (want CIDR)", ip.address));
            }
            if let Some(i) = ip.interface
                && i >= r.interfaces.len()
            {
                return Err(format!(
                    "ips: interface index {i} out of range ({} interfaces)",
                    r.interfaces.len()
                ));
            }
        }
        Ok(r)
    }

    /// Render in the wire form of `version` (used for `prevResult`, the cache and `--json`).
    pub fn to_version(&self, version: &str) -> Result<Value, CniError> {
        if !crate::config::is_supported(version) {
            return Err(CniError::UnsupportedVersion {
                version: version.into(),
            });
        }
        let with_v = !version_at_least(version, "1.0.0");
        let v11 = version_at_least(version, "1.1.0");
        let ifaces: Vec<Value> = self
            .interfaces
            .iter()
            .map(|i| {
                let mut m = Map::new();
                m.insert("name".into(), json!(i.name));
                if let Some(mac) = &i.mac {
                    m.insert("mac".into(), json!(mac));
                }
                if let Some(sb) = &i.sandbox {
                    m.insert("sandbox".into(), json!(sb));
                }
                for (k, v) in &i.extra {
                    // mtu exists since 1.0.0 in practice; socketPath/pciID since 1.1.0.
                    if v11 || (k == "mtu" && !with_v) {
                        m.insert(k.clone(), v.clone());
                    }
                }
                Value::Object(m)
            })
            .collect();
        let ips: Vec<Value> = self
            .ips
            .iter()
            .map(|ip| {
                let mut m = Map::new();
                if with_v {
                    let fam = match ip.ip() {
                        Some(IpAddr::V6(_)) => "6",
                        _ => "4",
                    };
                    m.insert("version".into(), json!(fam));
                }
                if let Some(i) = ip.interface {
                    m.insert("interface".into(), json!(i));
                }
                m.insert("address".into(), json!(ip.address));
                if let Some(gw) = &ip.gateway {
                    m.insert("gateway".into(), json!(gw));
                }
                Value::Object(m)
            })
            .collect();
        let routes: Vec<Value> = self
            .routes
            .iter()
            .map(|r| {
                let mut m = Map::new();
                m.insert("dst".into(), json!(r.dst));
                if let Some(gw) = &r.gw {
                    m.insert("gw".into(), json!(gw));
                }
                if v11 {
                    for (k, v) in &r.extra {
                        m.insert(k.clone(), v.clone());
                    }
                }
                Value::Object(m)
            })
            .collect();
        let mut out = Map::new();
        out.insert("cniVersion".into(), json!(version));
        if !ifaces.is_empty() {
            out.insert("interfaces".into(), Value::Array(ifaces));
        }
        if !ips.is_empty() {
            out.insert("ips".into(), Value::Array(ips));
        }
        if !routes.is_empty() {
            out.insert("routes".into(), Value::Array(routes));
        }
        out.insert(
            "dns".into(),
            serde_json::to_value(&self.dns).unwrap_or_else(|_| json!({})),
        );
        Ok(Value::Object(out))
    }

    /// Render in the current version.
    pub fn to_current(&self) -> Value {
        self.to_version(CURRENT_VERSION).unwrap_or(Value::Null)
    }

    /// The interface an IP is on, if it names one.
    pub fn interface_of(&self, ip: &IpConfig) -> Option<&Interface> {
        ip.interface.and_then(|i| self.interfaces.get(i))
    }

    /// The first IPv4 address (without prefix), the common question.
    pub fn first_ipv4(&self) -> Option<std::net::Ipv4Addr> {
        self.ips.iter().find_map(|ip| match ip.ip() {
            Some(IpAddr::V4(a)) => Some(a),
            _ => None,
        })
    }
}

impl std::fmt::Display for CniResult {
    /// Human form, as `ferrolet-cni` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "result (plugin spoke cniVersion {}):", self.cni_version)?;
        if !self.interfaces.is_empty() {
            writeln!(f, "  interfaces:")?;
            for (i, iface) in self.interfaces.iter().enumerate() {
                write!(f, "    [{i}] {}", iface.name)?;
                if let Some(mac) = &iface.mac {
                    write!(f, " mac {mac}")?;
                }
                match &iface.sandbox {
                    Some(sb) => write!(f, " in {sb}")?,
                    None => write!(f, " (host)")?,
                }
                for (k, v) in &iface.extra {
                    write!(f, " {k}={v}")?;
                }
                writeln!(f)?;
            }
        }
        if !self.ips.is_empty() {
            writeln!(f, "  ips:")?;
            for ip in &self.ips {
                write!(f, "    {}", ip.address)?;
                if let Some(gw) = &ip.gateway {
                    write!(f, " gateway {gw}")?;
                }
                if let Some(iface) = self.interface_of(ip) {
                    write!(f, " on {}", iface.name)?;
                }
                writeln!(f)?;
            }
        }
        if !self.routes.is_empty() {
            writeln!(f, "  routes:")?;
            for r in &self.routes {
                write!(f, "    {}", r.dst)?;
                if let Some(gw) = &r.gw {
                    write!(f, " via {gw}")?;
                }
                writeln!(f)?;
            }
        }
        if !self.dns.is_empty() {
            writeln!(
                f,
                "  dns: {}",
                serde_json::to_string(&self.dns).unwrap_or_default()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R040: &str = r#"{"cniVersion":"0.4.0","interfaces":[{"name":"cni0","mac":"aa"},{"name":"eth0","mac":"bb","sandbox":"/var/run/netns/x"}],
        "ips":[{"version":"4","interface":1,"address":"10.1.0.5/24","gateway":"10.1.0.1"},{"version":"6","address":"fd00::5/64"}],
        "routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}],"dns":{"nameservers":["1.1.1.1"]}}"#;

    #[test]
    fn parse_040_and_convert() {
        let r = CniResult::parse(R040.as_bytes(), "1.0.0").unwrap();
        assert_eq!(r.cni_version, "0.4.0");
        assert_eq!(r.ips.len(), 2);
        assert_eq!(r.first_ipv4().unwrap().to_string(), "10.1.0.5");
        let cur = r.to_current();
        assert_eq!(cur["cniVersion"], "1.1.0");
        assert!(cur["ips"][0].get("version").is_none());
        assert_eq!(cur["ips"][0]["interface"], 1);
        let old = r.to_version("0.3.1").unwrap();
        assert_eq!(old["ips"][0]["version"], "4");
        assert_eq!(old["ips"][1]["version"], "6");
        // Round trip through each version keeps the data.
        for v in crate::config::SUPPORTED_VERSIONS {
            let back =
                CniResult::parse(r.to_version(v).unwrap().to_string().as_bytes(), v).unwrap();
            assert_eq!(back.ips, r.ips, "{v}");
            assert_eq!(back.interfaces.len(), 2);
            assert_eq!(back.dns, r.dns);
        }
    }

    #[test]
    fn parse_legacy_and_110_extras() {
        let r = CniResult::parse(
            br#"{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/8","gateway":"10.0.0.1","routes":[{"dst":"0.0.0.0/0"}]}}"#,
            "0.2.0",
        )
        .unwrap();
        assert_eq!(r.ips[0].address, "10.0.0.2/8");
        assert_eq!(r.routes.len(), 1);

        let r = CniResult::parse(
            br#"{"cniVersion":"1.1.0","interfaces":[{"name":"e","mtu":1400,"socketPath":"/s"}],"routes":[{"dst":"1.0.0.0/8","table":5}]}"#,
            "1.1.0",
        )
        .unwrap();
        let v1 = r.to_version("1.0.0").unwrap();
        assert_eq!(v1["interfaces"][0]["mtu"], 1400);
        assert!(v1["interfaces"][0].get("socketPath").is_none());
        assert!(v1["routes"][0].get("table").is_none());
        assert_eq!(r.to_current()["routes"][0]["table"], 5);
    }

    #[test]
    fn rejects_bad_results() {
        assert!(CniResult::parse(b"{\"cniVersion\":\"7.0.0\"}", "1.0.0").is_err());
        assert!(
            CniResult::parse(
                b"{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"nope\"}]}",
                "1.0.0"
            )
            .is_err()
        );
        assert!(
            CniResult::parse(
                b"{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"1.2.3.4/8\",\"interface\":3}]}",
                "1.0.0"
            )
            .is_err()
        );
        assert!(CniResult::parse(b"not json", "1.0.0").is_err());
    }
}
