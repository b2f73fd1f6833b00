//! The runtime's checks: the CRI endpoint answering Version and Status, its cgroup driver
//! against ours (RuntimeConfig), and the CNI configuration the runtime will load (read with
//! `ferrolet-cni`'s loader, the one ferrolet-cri uses).

use std::path::Path;
use std::time::Duration;

use super::Finding;
use crate::config::Config;
use crate::cri::Cri;

/// How long the runtime has to answer each call.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Version, Status and RuntimeConfig of the configured runtime.
pub async fn checks(config: &Config) -> Vec<Finding> {
    let endpoint = &config.container_runtime_endpoint;
    let cri = match Cri::connect(endpoint, &config.image_service_endpoint, TIMEOUT).await {
        Ok(c) => c,
        Err(e) => {
            return vec![Finding::fail(
                "CRI",
                format!("container runtime is not running: {}", with_causes(&e)),
            )];
        }
    };
    let version = match cri.version().await {
        Ok(v) => v,
        Err(e) => {
            return vec![Finding::fail(
                "CRI",
                format!("container runtime is not running: {endpoint}: {e}"),
            )];
        }
    };
    let mut out = vec![Finding::pass(
        "CRI",
        format!(
            "{} {} (CRI {}) answers on {endpoint}",
            version.runtime_name, version.runtime_version, version.runtime_api_version
        ),
    )];
    match cri.status().await {
        Ok(status) => {
            out.push(user_namespaces(
                config.feature_gate_or(crate::userns::GATE, true),
                &status,
            ));
            for c in status.status.map(|s| s.conditions).unwrap_or_default() {
                let text = format!("{}={}", c.r#type, c.status);
                let why = [c.reason, c.message]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(": ");
                out.push(match (c.status, c.r#type.as_str()) {
                    (true, _) => Finding::pass("CRI-Status", text),
                    // No pod network yet: the node stays NotReady until one is configured.
                    (false, "NetworkReady") => {
                        Finding::warn("CRI-Status", format!("{text} ({why})"))
                    }
                    (false, _) => Finding::fail("CRI-Status", format!("{text} ({why})")),
                });
            }
        }
        Err(e) => out.push(Finding::fail("CRI-Status", format!("Status failed: {e}"))),
    }
    out.push(match cri.cgroup_driver().await {
        Ok(Some(theirs)) => {
            if theirs == config.cgroup_driver {
                Finding::pass(
                    "CgroupDriver",
                    format!("the runtime and ferrolet both use {theirs}"),
                )
            } else {
                Finding::fail(
                    "CgroupDriver",
                    format!(
                        "cgroupDriver is {:?} but the container runtime reports {theirs:?}",
                        config.cgroup_driver
                    ),
                )
            }
        }
        _ => Finding::warn(
            "CgroupDriver",
            "the runtime does not report its cgroup driver (RuntimeConfig): make sure it \
             matches cgroupDriver",
        ),
    });
    out
}

/// Whether pods with `hostUsers: false` can run: the gate, and what the runtime's default
/// handler says of user namespaces (its own probe of the kernel and file systems).
fn user_namespaces(gate: bool, status: &ferrolet_proto::cri::StatusResponse) -> Finding {
    const NAME: &str = "UserNamespaces";
    if !gate {
        return Finding::warn(
            NAME,
            format!(
                "the feature gate {} is off: pods with hostUsers: false are refused",
                crate::userns::GATE
            ),
        );
    }
    let supported: Vec<String> = status
        .runtime_handlers
        .iter()
        .filter(|h| h.features.is_some_and(|f| f.user_namespaces))
        .map(|h| format!("{:?}", h.name))
        .collect();
    let default = status
        .runtime_handlers
        .iter()
        .find(|h| h.name.is_empty())
        .and_then(|h| h.features)
        .is_some_and(|f| f.user_namespaces);
    if default {
        Finding::pass(
            NAME,
            format!(
                "the runtime supports user namespaces (hostUsers: false) for handlers {}",
                supported.join(", ")
            ),
        )
    } else {
        Finding::warn(
            NAME,
            "the runtime does not report user namespace support: pods with hostUsers: false \
             will fail to start",
        )
    }
}

/// `e` and the causes its message leaves out (a transport error's "No such file or
/// directory"), joined as Go's wrapped errors read.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// The CNI configuration in `dir`: the first valid file (by name) is the pod network, as the
/// runtime picks it.
pub fn cni(dir: &Path) -> Finding {
    let files = match ferrolet_cni::config::scan_dir(dir) {
        Ok(f) => f,
        Err(e) => return Finding::fail("CNI", format!("{}: {e}", dir.display())),
    };
    let mut bad = Vec::new();
    for (file, result) in files {
        match result {
            Ok(net) => {
                let plugins: Vec<&str> =
                    net.plugins.iter().map(|p| p.plugin_type.as_str()).collect();
                let mut message = format!(
                    "network {:?} from {} (cniVersion {}, plugins {})",
                    net.name,
                    file.display(),
                    net.cni_version,
                    plugins.join(", ")
                );
                if !bad.is_empty() {
                    message.push_str(&format!("; skipped before it: {}", bad.join("; ")));
                }
                return Finding::pass("CNI", message);
            }
            Err(e) => bad.push(format!("{}: {e}", file.display())),
        }
    }
    let mut message = format!("no network config found in {}", dir.display());
    if !bad.is_empty() {
        message.push_str(&format!(" ({})", bad.join("; ")));
    }
    Finding::fail("CNI", message)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::check::Level;

    #[test]
    fn cni_dir_empty_bad_and_good() {
        let dir = tempfile::tempdir().unwrap();
        let f = cni(dir.path());
        assert_eq!(f.level, Level::Fail);
        assert_eq!(
            f.message,
            format!("no network config found in {}", dir.path().display())
        );
        std::fs::write(dir.path().join("05-bad.conflist"), "{not json").unwrap();
        let f = cni(dir.path());
        assert_eq!(f.level, Level::Fail);
        assert!(f.message.contains("05-bad.conflist"), "{}", f.message);
        std::fs::write(
            dir.path().join("10-net.conflist"),
            r#"{"cniVersion": "1.0.0", "name": "podnet", "plugins": [{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}}]}"#,
        )
        .unwrap();
        let f = cni(dir.path());
        assert_eq!(f.level, Level::Pass, "{f}");
        assert!(f.message.starts_with("network \"podnet\" from "), "{f}");
        assert!(f.message.contains("plugins bridge, portmap"), "{f}");
    }
}
