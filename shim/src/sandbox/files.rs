//! Files a sandbox shares with its containers: hostname, hosts, resolv.conf (under the
//! sandbox's directory in `--root`) and the /dev/shm tmpfs (under `--state`, which does not
//! outlive a reboot, like the mount itself).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ferrolet_proto::cri::{self, NamespaceMode, PodSandboxConfig};
use serde::{Deserialize, Serialize};
use tonic::Code;

use crate::mount::{self, MountError};

/// containerd's /dev/shm size for pods.
const SHM_SIZE: u64 = 64 << 20;

/// What Kubernetes allows in a resolv.conf (DNS config validation, `MaxDNSSearchPaths` and
/// `MaxDNSSearchListChars`).
const MAX_SEARCHES: usize = 32;
const MAX_SEARCH_CHARS: usize = 2048;

/// Files a sandbox shares with its containers.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SandboxFiles {
    /// `<root>/sandboxes/<id>`: hostname, hosts, resolv.conf.
    pub dir: PathBuf,
    /// The pod's hostname.
    pub hostname: PathBuf,
    /// A copy of the node's /etc/hosts.
    pub hosts: PathBuf,
    /// The pod's resolver configuration.
    pub resolv_conf: PathBuf,
    /// `<state>/sandboxes/<id>/shm` tmpfs; None when IPC is NODE (containers use the host's /dev/shm).
    pub shm: Option<PathBuf>,
}

/// Why the sandbox's files could not be set up or removed.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// The request's DNS config cannot become a resolv.conf.
    #[error("{field} {value:?}: {reason}")]
    Invalid {
        /// Where in the request.
        field: String,
        /// The offending value.
        value: String,
        /// Why.
        reason: String,
    },
    /// A file operation failed.
    #[error("{op} {path:?}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// Mounting or unmounting /dev/shm failed.
    #[error(transparent)]
    Mount(#[from] MountError),
    /// The blocking task died.
    #[error("blocking file task failed: {0}")]
    Join(String),
}

impl FilesError {
    /// The gRPC code callers see.
    pub fn code(&self) -> Code {
        match self {
            FilesError::Invalid { .. } => Code::InvalidArgument,
            FilesError::Io { .. } | FilesError::Mount(_) | FilesError::Join(_) => Code::Internal,
        }
    }
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FilesError {
    let path = path.to_path_buf();
    move |source| FilesError::Io { op, path, source }
}

fn host_ipc(config: &PodSandboxConfig) -> bool {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .is_some_and(|n| n.ipc == NamespaceMode::Node as i32)
}

impl SandboxFiles {
    /// Paths for a sandbox (no I/O).
    pub fn paths(root: &Path, state: &Path, id: &str, config: &PodSandboxConfig) -> Self {
        let dir = root.join("sandboxes").join(id);
        let shm = (!host_ipc(config)).then(|| state.join("sandboxes").join(id).join("shm"));
        SandboxFiles {
            hostname: dir.join("hostname"),
            hosts: dir.join("hosts"),
            resolv_conf: dir.join("resolv.conf"),
            dir,
            shm,
        }
    }
}

/// resolv.conf text for a DNS config: `search`, `nameserver` lines, `options` (containerd's
/// layout); empty when the config lists nothing.
fn resolv_conf(dns: &cri::DnsConfig) -> Result<String, FilesError> {
    let invalid = |field: String, value: &str, reason: &str| FilesError::Invalid {
        field,
        value: value.to_string(),
        reason: reason.to_string(),
    };
    // One token per entry: whitespace or a newline would forge extra resolv.conf lines.
    let token = |field: String, v: &str| {
        if v.is_empty() || v.chars().any(char::is_whitespace) {
            Err(invalid(field, v, "must be one non-empty word"))
        } else {
            Ok(())
        }
    };
    for (i, s) in dns.servers.iter().enumerate() {
        if s.parse::<IpAddr>().is_err() {
            return Err(invalid(
                format!("dns_config.servers[{i}]"),
                s,
                "not an IP address",
            ));
        }
    }
    for (i, s) in dns.searches.iter().enumerate() {
        token(format!("dns_config.searches[{i}]"), s)?;
    }
    if dns.searches.len() > MAX_SEARCHES {
        return Err(invalid(
            "dns_config.searches".into(),
            &dns.searches.join(" "),
            &format!("more than {MAX_SEARCHES} search domains"),
        ));
    }
    let search = dns.searches.join(" ");
    if search.len() > MAX_SEARCH_CHARS {
        return Err(invalid(
            "dns_config.searches".into(),
            &search,
            &format!("longer than {MAX_SEARCH_CHARS} characters"),
        ));
    }
    for (i, o) in dns.options.iter().enumerate() {
        token(format!("dns_config.options[{i}]"), o)?;
    }
    let mut out = String::new();
    if !dns.searches.is_empty() {
        out.push_str(&format!("search {search}\n"));
    }
    for s in &dns.servers {
        out.push_str(&format!("nameserver {s}\n"));
    }
    if !dns.options.is_empty() {
        out.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    Ok(out)
}

/// A node file's content; a missing one reads as empty (a node without /etc/hosts still runs
/// pods).
async fn node_file(path: &Path) -> Result<Vec<u8>, FilesError> {
    match tokio::fs::read(path).await {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io("reading", path)(e)),
    }
}

async fn write_file(path: &Path, content: &[u8]) -> Result<(), FilesError> {
    // Containers read these as any user; 0644 as containerd writes them.
    tokio::fs::write(path, content)
        .await
        .map_err(io("writing", path))?;
    set_mode(path, 0o644).await
}

async fn set_mode(path: &Path, mode: u32) -> Result<(), FilesError> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .await
        .map_err(io("setting the mode of", path))
}

async fn create_inner(files: &SandboxFiles, config: &PodSandboxConfig) -> Result<(), FilesError> {
    // Validate before writing anything.
    let resolv = match &config.dns_config {
        Some(dns) => Some(resolv_conf(dns)?),
        None => None,
    };
    tokio::fs::create_dir_all(&files.dir)
        .await
        .map_err(io("creating", &files.dir))?;

    let hostname = if config.hostname.is_empty() {
        let h = node_file(Path::new("/proc/sys/kernel/hostname")).await?;
        String::from_utf8_lossy(&h).trim().to_string()
    } else {
        config.hostname.clone()
    };
    write_file(&files.hostname, format!("{hostname}\n").as_bytes()).await?;
    write_file(&files.hosts, &node_file(Path::new("/etc/hosts")).await?).await?;
    let resolv = match resolv {
        Some(text) => text.into_bytes(),
        // No DNS config means the node's resolver, as containerd does.
        None => node_file(Path::new("/etc/resolv.conf")).await?,
    };
    write_file(&files.resolv_conf, &resolv).await?;

    match &files.shm {
        Some(shm) => mount::mount_shm(shm, SHM_SIZE).await?,
        None => {
            tokio::fs::metadata("/dev/shm")
                .await
                .map_err(io("host IPC needs the node's", Path::new("/dev/shm")))?;
        }
    }
    Ok(())
}

/// Writes hostname (config.hostname; the node's hostname for host network), hosts (a copy of the host's /etc/hosts, as containerd does), resolv.conf (from DNSConfig servers/searches/options; the host's /etc/resolv.conf copied when DNSConfig is absent) and mounts shm (64 MiB, unless IPC is NODE). Partial work is undone on failure.
pub async fn create(files: &SandboxFiles, config: &PodSandboxConfig) -> Result<(), FilesError> {
    let result = create_inner(files, config).await;
    if let Err(e) = &result
        && let Err(undo) = remove(files).await
    {
        tracing::warn!(error = %undo, after = %e, "undoing sandbox files");
    }
    result
}

async fn remove_file(path: &Path) -> Result<(), FilesError> {
    match tokio::fs::remove_file(path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("removing", path)(e)),
    }
}

/// Unmounts shm and deletes the files; idempotent.
///
/// `dir` itself stays: the sandbox record lives there too and its owner removes it.
pub async fn remove(files: &SandboxFiles) -> Result<(), FilesError> {
    // Every step runs even when one fails, so a retry has as little left to do as possible.
    let mut first_error = None;
    if let Some(shm) = &files.shm {
        let unmounted = mount::unmount(shm).await.map_err(FilesError::from);
        let removed = match unmounted {
            Ok(()) => match tokio::fs::remove_dir(shm).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing", shm)(e)),
                _ => Ok(()),
            },
            Err(e) => Err(e),
        };
        first_error = removed.err();
    }
    for f in [&files.hostname, &files.hosts, &files.resolv_conf] {
        if let Err(e) = remove_file(f).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn config(ipc: NamespaceMode, dns: Option<cri::DnsConfig>) -> PodSandboxConfig {
        PodSandboxConfig {
            hostname: "web-0".into(),
            dns_config: dns,
            linux: Some(cri::LinuxPodSandboxConfig {
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        ipc: ipc as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn dns() -> cri::DnsConfig {
        cri::DnsConfig {
            servers: vec!["10.0.0.10".into(), "fd00::a".into()],
            searches: vec!["ns.svc.cluster.local".into(), "cluster.local".into()],
            options: vec!["ndots:5".into(), "edns0".into()],
        }
    }

    fn mounted(path: &Path) -> bool {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(&*path.to_string_lossy()))
    }

    #[test]
    fn paths_follow_the_layout() {
        let cfg = config(NamespaceMode::Pod, None);
        let f = SandboxFiles::paths(Path::new("/r"), Path::new("/s"), "abc", &cfg);
        assert_eq!(f.dir, Path::new("/r/sandboxes/abc"));
        assert_eq!(f.hostname, Path::new("/r/sandboxes/abc/hostname"));
        assert_eq!(f.hosts, Path::new("/r/sandboxes/abc/hosts"));
        assert_eq!(f.resolv_conf, Path::new("/r/sandboxes/abc/resolv.conf"));
        assert_eq!(f.shm.as_deref(), Some(Path::new("/s/sandboxes/abc/shm")));
        let host = config(NamespaceMode::Node, None);
        let f = SandboxFiles::paths(Path::new("/r"), Path::new("/s"), "abc", &host);
        assert!(f.shm.is_none());
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<SandboxFiles>(&json).unwrap(), f);
    }

    #[test]
    fn resolv_conf_layout_and_validation() {
        assert_eq!(
            resolv_conf(&dns()).unwrap(),
            "search ns.svc.cluster.local cluster.local\n\
             nameserver 10.0.0.10\nnameserver fd00::a\n\
             options ndots:5 edns0\n"
        );
        assert_eq!(resolv_conf(&cri::DnsConfig::default()).unwrap(), "");
        let bad = |d: cri::DnsConfig| resolv_conf(&d).unwrap_err();
        let e = bad(cri::DnsConfig {
            servers: vec!["dns.example".into()],
            ..dns()
        });
        assert_eq!(
            e.to_string(),
            "dns_config.servers[0] \"dns.example\": not an IP address"
        );
        assert_eq!(e.code(), Code::InvalidArgument);
        let e = bad(cri::DnsConfig {
            options: vec!["ndots:1\nnameserver 6.6.6.6".into()],
            ..dns()
        });
        assert!(e.to_string().starts_with("dns_config.options[0]"), "{e}");
        let e = bad(cri::DnsConfig {
            searches: vec!["a b".into()],
            ..dns()
        });
        assert!(e.to_string().starts_with("dns_config.searches[0]"), "{e}");
        let e = bad(cri::DnsConfig {
            searches: (0..33).map(|i| format!("d{i}")).collect(),
            ..dns()
        });
        assert!(e.to_string().contains("more than 32"), "{e}");
    }

    #[tokio::test]
    async fn create_and_remove_for_real() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(NamespaceMode::Pod, Some(dns()));
        let files = SandboxFiles::paths(
            &tmp.path().join("root"),
            &tmp.path().join("state"),
            "sb",
            &cfg,
        );
        create(&files, &cfg).await.unwrap();
        assert_eq!(std::fs::read_to_string(&files.hostname).unwrap(), "web-0\n");
        assert_eq!(
            std::fs::read(&files.hosts).unwrap(),
            std::fs::read("/etc/hosts").unwrap_or_default()
        );
        assert!(
            std::fs::read_to_string(&files.resolv_conf)
                .unwrap()
                .contains("nameserver 10.0.0.10\n")
        );
        assert_eq!(
            std::fs::metadata(&files.hosts).unwrap().mode() & 0o777,
            0o644
        );
        let shm = files.shm.clone().unwrap();
        assert!(mounted(&shm));
        let shm_meta = std::fs::metadata(&shm).unwrap();
        assert_eq!(shm_meta.mode() & 0o7777, 0o1777);

        remove(&files).await.unwrap();
        assert!(!mounted(&shm));
        assert!(!shm.exists() && !files.hostname.exists() && !files.hosts.exists());
        assert!(!files.resolv_conf.exists());
        assert!(
            files.dir.exists(),
            "the record's directory is not ours to remove"
        );
        remove(&files).await.unwrap();
    }

    #[tokio::test]
    async fn host_ipc_and_node_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = config(NamespaceMode::Node, None);
        cfg.hostname.clear();
        let files = SandboxFiles::paths(
            &tmp.path().join("root"),
            &tmp.path().join("state"),
            "sb",
            &cfg,
        );
        create(&files, &cfg).await.unwrap();
        let node = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(
            std::fs::read_to_string(&files.hostname).unwrap(),
            format!("{}\n", node.trim())
        );
        assert_eq!(
            std::fs::read(&files.resolv_conf).unwrap(),
            std::fs::read("/etc/resolv.conf").unwrap_or_default()
        );
        assert!(files.shm.is_none());
        remove(&files).await.unwrap();
    }

    #[tokio::test]
    async fn failures_undo_partial_work() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(NamespaceMode::Pod, None);
        let state = tmp.path().join("state");
        let files = SandboxFiles::paths(&tmp.path().join("root"), &state, "sb", &cfg);
        // shm's parent is a file: the mount step fails after the files were written.
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join("sandboxes"), "not a dir").unwrap();
        let err = create(&files, &cfg).await.unwrap_err();
        assert_eq!(err.code(), Code::Internal);
        assert!(!files.hostname.exists() && !files.hosts.exists() && !files.resolv_conf.exists());

        // An invalid DNS config is refused before anything is written.
        let mut files = SandboxFiles::paths(&tmp.path().join("root"), &state, "other", &cfg);
        files.shm = None;
        let bad = config(
            NamespaceMode::Pod,
            Some(cri::DnsConfig {
                servers: vec!["x".into()],
                ..Default::default()
            }),
        );
        let err = create(&files, &bad).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(!files.dir.exists());
    }
}
