//! The leak checker: after a test tears down what it made, nothing it made may remain.
//!
//! Each check is opt-in, so a test names exactly the resources it is responsible for (its own
//! netns dir, bridge, IPAM dir, containerd namespace, ...) and is never blamed for another
//! test running beside it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::{
    ListContainersRequest, ListContentRequest, ListImagesRequest, ListRequest as ListLeasesRequest,
    ListTasksRequest,
};

use crate::scratch;

/// Pids of daemons the harness runs on purpose (containerd, registries): never leaks.
static DAEMONS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Records a process the harness owns, so process checks do not report it.
pub fn register_daemon(pid: u32) {
    if let Ok(mut d) = DAEMONS.lock() {
        d.push(pid);
    }
}

fn is_daemon(pid: u32) -> bool {
    DAEMONS.lock().map(|d| d.contains(&pid)).unwrap_or(false)
}

/// One thing left behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leak {
    /// A network namespace file (bind mount or leftover file).
    Netns(PathBuf),
    /// An interface still attached to the test bridge (a pod's veth end).
    BridgePort { bridge: String, iface: String },
    /// A host-local IPAM reservation file.
    IpReservation(PathBuf),
    /// A CNI result-cache file.
    CniCache(PathBuf),
    /// A mount point.
    Mount(PathBuf),
    /// A process.
    Process { pid: u32, cmdline: String },
    /// A runtime v2 shim's socket left for a sandbox (or ungrouped task) id.
    ShimSocket { id: String, path: PathBuf },
    /// A containerd object in the test's namespace.
    Containerd { kind: &'static str, id: String },
    /// The checker itself could not look (an unreadable dir, a failed containerd call).
    CheckFailed(String),
}

impl fmt::Display for Leak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leak::Netns(p) => write!(f, "netns {}", p.display()),
            Leak::BridgePort { bridge, iface } => write!(f, "interface {iface} on bridge {bridge}"),
            Leak::IpReservation(p) => write!(f, "IP reservation {}", p.display()),
            Leak::CniCache(p) => write!(f, "CNI cache file {}", p.display()),
            Leak::Mount(p) => write!(f, "mount {}", p.display()),
            Leak::Process { pid, cmdline } => write!(f, "process {pid}: {cmdline}"),
            Leak::ShimSocket { id, path } => write!(f, "shim socket of {id}: {}", path.display()),
            Leak::Containerd { kind, id } => write!(f, "containerd {kind} {id}"),
            Leak::CheckFailed(why) => write!(f, "could not check: {why}"),
        }
    }
}

/// Collects the checks a test asks for; [`LeakChecker::check`] runs them all.
#[derive(Clone, Debug, Default)]
pub struct LeakChecker {
    netns_dirs: Vec<PathBuf>,
    bridges: Vec<String>,
    ipam_dirs: Vec<PathBuf>,
    cni_cache_dirs: Vec<PathBuf>,
    mount_roots: Vec<PathBuf>,
    process_needles: Vec<String>,
    shims: Vec<ShimScope>,
    shim_sockets: Vec<(ShimScope, String)>,
    children: bool,
    containerd: Option<Containerd>,
    containerd_images: bool,
}

impl LeakChecker {
    /// A checker with no checks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Any entry in `dir` is a leaked netns.
    pub fn netns_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.netns_dirs.push(dir.into());
        self
    }

    /// Any interface attached to bridge `name` is a leaked veth.
    pub fn bridge(mut self, name: impl Into<String>) -> Self {
        self.bridges.push(name.into());
        self
    }

    /// Any reservation file under host-local's data dir `dir` is a leaked IP.
    pub fn ipam_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.ipam_dirs.push(dir.into());
        self
    }

    /// Any file under `dir` is a leaked CNI cache entry.
    pub fn cni_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cni_cache_dirs.push(dir.into());
        self
    }

    /// Any mount point at or under `dir` is a leak.
    pub fn mounts_under(mut self, dir: impl Into<PathBuf>) -> Self {
        self.mount_roots.push(dir.into());
        self
    }

    /// Any process (other than this one and the harness's daemons) whose command line contains
    /// `needle` is a leak: shims and containers of a test carry its paths or namespace.
    pub fn processes_mentioning(mut self, needle: impl Into<String>) -> Self {
        self.process_needles.push(needle.into());
        self
    }

    /// Any runtime v2 shim of the containerd on `address` for `namespace` is a leak: a
    /// process whose arguments carry `-address <address>` and `-namespace <namespace>`, as
    /// containerd starts every shim (its runc shim, Ferrolet's), in any order.
    pub fn shims_of(mut self, address: impl Into<PathBuf>, namespace: impl Into<String>) -> Self {
        self.shims.push(ShimScope {
            address: address.into(),
            namespace: namespace.into(),
        });
        self
    }

    /// A shim socket left for any of `ids` (sandbox ids: a pod's shim is found by its
    /// sandbox id) of the containerd on `address` and `namespace` is a leak:
    /// [`shim_socket`] of each.
    pub fn shim_sockets(
        mut self,
        address: impl Into<PathBuf>,
        namespace: impl Into<String>,
        ids: impl IntoIterator<Item = String>,
    ) -> Self {
        let scope = ShimScope {
            address: address.into(),
            namespace: namespace.into(),
        };
        for id in ids {
            self.shim_sockets.push((scope.clone(), id));
        }
        self
    }

    /// Any child of this process other than the harness's daemons is a leak (zombies too:
    /// a child nobody waited for).
    pub fn child_processes(mut self) -> Self {
        self.children = true;
        self
    }

    /// No container, task, snapshot (overlayfs) or lease may remain in `client`'s namespace.
    pub fn containerd(mut self, client: Containerd) -> Self {
        self.containerd = Some(client);
        self
    }

    /// With [`LeakChecker::containerd`]: no image record or content blob may remain either.
    pub fn containerd_images(mut self) -> Self {
        self.containerd_images = true;
        self
    }

    /// Runs every check and returns what was left behind.
    pub async fn check(&self) -> Vec<Leak> {
        let mut leaks = Vec::new();
        for dir in &self.netns_dirs {
            for path in dir_entries(dir, &mut leaks) {
                leaks.push(Leak::Netns(path));
            }
        }
        for bridge in &self.bridges {
            let brif = Path::new("/sys/class/net").join(bridge).join("brif");
            for path in dir_entries(&brif, &mut leaks) {
                leaks.push(Leak::BridgePort {
                    bridge: bridge.clone(),
                    iface: file_name(&path),
                });
            }
        }
        for dir in &self.ipam_dirs {
            for path in files_under(dir, &mut leaks) {
                let name = file_name(&path);
                if !name.starts_with("last_reserved_ip") && name != "lock" {
                    leaks.push(Leak::IpReservation(path));
                }
            }
        }
        for dir in &self.cni_cache_dirs {
            for path in files_under(dir, &mut leaks) {
                leaks.push(Leak::CniCache(path));
            }
        }
        for root in &self.mount_roots {
            leaks.extend(scratch::mounts_under(root).into_iter().map(Leak::Mount));
        }
        if !self.process_needles.is_empty() || !self.shims.is_empty() || self.children {
            leaks.extend(self.process_leaks());
        }
        for (scope, id) in &self.shim_sockets {
            let path = shim_socket(&scope.address, &scope.namespace, id);
            match std::fs::symlink_metadata(&path) {
                Ok(_) => leaks.push(Leak::ShimSocket {
                    id: id.clone(),
                    path,
                }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => leaks.push(Leak::CheckFailed(format!("{}: {e}", path.display()))),
            }
        }
        if let Some(cd) = &self.containerd {
            leaks.extend(containerd_leaks(cd, self.containerd_images).await);
        }
        leaks
    }

    /// Runs [`LeakChecker::check`] and panics with the list if anything was left behind.
    pub async fn assert_clean(&self) {
        let leaks = self.check().await;
        if !leaks.is_empty() {
            let list: Vec<String> = leaks.iter().map(|l| format!("  - {l}")).collect();
            panic!(
                "leak checker: {} leak(s):\n{}",
                leaks.len(),
                list.join("\n")
            );
        }
    }

    fn process_leaks(&self) -> Vec<Leak> {
        let me = std::process::id();
        let mut leaks = Vec::new();
        for (pid, ppid, argv) in processes() {
            if pid == me || is_daemon(pid) {
                continue;
            }
            let cmdline = argv.join(" ");
            let child = self.children && ppid == me;
            let mentions = self.process_needles.iter().any(|n| cmdline.contains(n));
            let shim = self.shims.iter().any(|s| s.started(&argv));
            if child || mentions || shim {
                leaks.push(Leak::Process { pid, cmdline });
            }
        }
        leaks
    }
}

/// Pids of the running shims of the containerd on `address` for `namespace` (see
/// [`LeakChecker::shims_of`]).
pub fn shim_pids(address: &Path, namespace: &str) -> Vec<u32> {
    let scope = ShimScope {
        address: address.to_path_buf(),
        namespace: namespace.to_string(),
    };
    processes()
        .into_iter()
        .filter(|(_, _, argv)| scope.started(argv))
        .map(|(pid, _, _)| pid)
        .collect()
}

/// The containerd and namespace shims are looked for in.
#[derive(Clone, Debug)]
struct ShimScope {
    address: PathBuf,
    namespace: String,
}

impl ShimScope {
    /// Whether `argv` is a shim containerd started for this scope.
    fn started(&self, argv: &[String]) -> bool {
        let address = self.address.to_string_lossy();
        flag_value(argv, "address") == Some(&*address)
            && flag_value(argv, "namespace") == Some(self.namespace.as_str())
    }
}

/// The value of Go-style flag `name` in `argv`: `-name v`, `--name v`, `-name=v`.
fn flag_value<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    let mut args = argv.iter();
    while let Some(arg) = args.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        if flag == name {
            return args.next().map(String::as_str);
        }
        if let Some(value) = flag.strip_prefix(name).and_then(|v| v.strip_prefix('=')) {
            return Some(value);
        }
    }
    None
}

/// Where containerd's shims (its runc shim, Ferrolet's) listen for grouping id `id` (a pod's
/// sandbox id) of the containerd on `address` in `namespace`: `/run/containerd/s/` and the
/// SHA-256 of `<address>/<namespace>/<id>`, as containerd's `shim.SocketAddress` (1.6 and 2.x
/// alike, whatever containerd's own state dir).
pub fn shim_socket(address: &Path, namespace: &str, id: &str) -> PathBuf {
    use sha2::Digest;
    let key = address.join(namespace).join(id);
    let digest = sha2::Sha256::digest(key.to_string_lossy().as_bytes());
    Path::new("/run/containerd/s").join(hex::encode(digest))
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Entries of `dir`; a missing dir has none, an unreadable one is a failed check.
fn dir_entries(dir: &Path, leaks: &mut Vec<Leak>) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            leaks.push(Leak::CheckFailed(format!("reading {}: {e}", dir.display())));
            Vec::new()
        }
    }
}

/// Every non-directory under `dir`, recursively.
fn files_under(dir: &Path, leaks: &mut Vec<Leak>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for path in dir_entries(&d, leaks) {
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => stack.push(path),
                Ok(_) => files.push(path),
                Err(_) => {}
            }
        }
    }
    files.sort();
    files
}

/// `(pid, ppid, argv)` of every process we can read (a kernel thread's argv: `[name]`).
fn processes() -> Vec<(u32, u32, Vec<String>)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The command name may contain spaces and parentheses: fields follow the last ')'.
            let after = &stat[stat.rfind(')')? + 2..];
            let ppid = after.split(' ').nth(1)?.parse().ok()?;
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let mut argv: Vec<String> = raw
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            // The NUL that ends the last argument leaves an empty one.
            while argv.last().is_some_and(String::is_empty) {
                argv.pop();
            }
            if argv.is_empty() {
                argv.push(format!(
                    "[{}]",
                    &stat[stat.find('(')? + 1..stat.rfind(')')?]
                ));
            }
            Some((pid, ppid, argv))
        })
        .collect()
}

async fn containerd_leaks(cd: &Containerd, images: bool) -> Vec<Leak> {
    let mut leaks = Vec::new();
    let failed = |what: &str, e: tonic::Status| {
        Leak::CheckFailed(format!("listing containerd {what}: {}", e.message()))
    };
    match cd.containers().list(ListContainersRequest::default()).await {
        Ok(r) => leaks.extend(
            r.into_inner()
                .containers
                .into_iter()
                .map(|c| Leak::Containerd {
                    kind: "container",
                    id: c.id,
                }),
        ),
        Err(e) => leaks.push(failed("containers", e)),
    }
    match cd.tasks().list(ListTasksRequest::default()).await {
        Ok(r) => leaks.extend(r.into_inner().tasks.into_iter().map(|t| Leak::Containerd {
            kind: "task",
            id: format!("{} (pid {})", t.id, t.pid),
        })),
        Err(e) => leaks.push(failed("tasks", e)),
    }
    match list_snapshots(cd).await {
        Ok(keys) => leaks.extend(keys.into_iter().map(|id| Leak::Containerd {
            kind: "snapshot",
            id,
        })),
        Err(e) => leaks.push(failed("snapshots", e)),
    }
    match cd.leases().list(ListLeasesRequest::default()).await {
        Ok(r) => leaks.extend(r.into_inner().leases.into_iter().map(|l| Leak::Containerd {
            kind: "lease",
            id: l.id,
        })),
        Err(e) => leaks.push(failed("leases", e)),
    }
    if images {
        match cd.images().list(ListImagesRequest::default()).await {
            Ok(r) => leaks.extend(r.into_inner().images.into_iter().map(|i| Leak::Containerd {
                kind: "image",
                id: i.name,
            })),
            Err(e) => leaks.push(failed("images", e)),
        }
        match list_content(cd).await {
            Ok(digests) => leaks.extend(digests.into_iter().map(|id| Leak::Containerd {
                kind: "content",
                id,
            })),
            Err(e) => leaks.push(failed("content", e)),
        }
    }
    leaks
}

async fn list_snapshots(cd: &Containerd) -> Result<Vec<String>, tonic::Status> {
    let snapshots = crate::containerd::list_snapshots(cd).await?;
    Ok(snapshots.into_iter().map(|i| i.name).collect())
}

async fn list_content(cd: &Containerd) -> Result<Vec<String>, tonic::Status> {
    let mut stream = cd
        .content()
        .list(ListContentRequest::default())
        .await?
        .into_inner();
    let mut digests = Vec::new();
    while let Some(page) = stream.message().await? {
        digests.extend(page.info.into_iter().map(|i| i.digest));
    }
    Ok(digests)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn argv(line: &str) -> Vec<String> {
        line.split(' ').map(String::from).collect()
    }

    #[test]
    fn a_shim_of_either_kind_is_told_by_its_address_and_namespace() {
        let scope = ShimScope {
            address: "/tmp/c/containerd.sock".into(),
            namespace: "t-1".into(),
        };
        // The Go shim as containerd 1.6 and 2.x start it, and a shim putting the flags in
        // another order or spelling.
        for line in [
            "/usr/bin/containerd-shim-runc-v2 -namespace t-1 -id abc -address /tmp/c/containerd.sock",
            "containerd-shim-ferrolet-v1 -id abc -address /tmp/c/containerd.sock -namespace t-1",
            "containerd-shim-x-v1 --namespace=t-1 --address /tmp/c/containerd.sock",
        ] {
            assert!(scope.started(&argv(line)), "{line}");
        }
        for line in [
            // Another test's namespace, whose name ours is a prefix of.
            "containerd-shim-runc-v2 -namespace t-10 -id abc -address /tmp/c/containerd.sock",
            // Another containerd.
            "containerd-shim-runc-v2 -namespace t-1 -id abc -address /run/containerd/containerd.sock",
            "sleep 100",
        ] {
            assert!(!scope.started(&argv(line)), "{line}");
        }
    }

    #[test]
    fn shim_sockets_are_named_as_containerd_names_them() {
        // sha256("/run/containerd/containerd.sock/k8s.io/abc"), as Go's shim.SocketAddress.
        assert_eq!(
            shim_socket(
                Path::new("/run/containerd/containerd.sock"),
                "k8s.io",
                "abc"
            ),
            Path::new(
                "/run/containerd/s/a99a1752d3a0fadfb1f869026f16760475df03a572e20f4ccea9e6c1e5470b72"
            )
        );
    }
}
