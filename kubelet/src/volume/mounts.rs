//! The CRI mounts of one container, as the Go kubelet's `makeMounts` (kubelet_pods.go) and
//! kuberuntime's `makeMounts` make them: each volumeMount (with `subPath`/`subPathExpr`,
//! `readOnly`, `mountPropagation`, `recursiveReadOnly`; an image volume as CRI's
//! `Mount.image`, always read-only), then the kubelet-managed `/etc/hosts`, then the
//! termination-message file.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use nix::sys::stat::SFlag;

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::{Container, HostAlias, VolumeMount};

use super::{PodVolumes, VolumeError, blocking, check_uid, mkdir_all, pod_dir};
use crate::podspec::container::DEFAULT_TERMINATION_MESSAGE_PATH;
use crate::podspec::env::expand;
use crate::podspec::security::is_privileged;
use crate::types::Pod;

/// Where containers see the hosts file.
const ETC_HOSTS: &str = "/etc/hosts";
/// The node's hosts file (copied for host-network pods).
const NODE_HOSTS: &str = "/etc/hosts";
const MANAGED_HOSTS_HEADER: &str = "# Kubernetes-managed hosts file.\n";
const MANAGED_HOSTS_HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

/// What the hosts file and `subPathExpr` need beyond the pod.
#[derive(Clone, Copy, Debug)]
pub struct MountContext<'a> {
    /// The pod's IPs (an `/etc/hosts` is managed once the pod has one).
    pub pod_ips: &'a [String],
    /// The pod's hostname ([`crate::podspec::pod_hostname`]).
    pub hostname: &'a str,
    /// Its domain (`<subdomain>.<ns>.svc.<clusterDomain>`, or "";
    /// [`crate::podspec::hostname_and_domain`]).
    pub host_domain: &'a str,
    /// The container's environment, for `subPathExpr`
    /// ([`crate::podspec::container_env`]).
    pub envs: &'a [cri::KeyValue],
    /// The pulled images of the pod's image volumes, by volume name.
    pub images: &'a BTreeMap<String, cri::ImageSpec>,
}

/// CRI mounts for a container, knowing only the primary pod IP: the hosts file gets no
/// subdomain entry and `subPathExpr` sees no environment (use [`container_mounts_with`] for
/// those).
#[cfg(test)]
pub async fn container_mounts(
    root_dir: &Path,
    pod: &Pod,
    container: &Container,
    volumes: &PodVolumes,
    pod_ip: &str,
) -> Result<Vec<cri::Mount>, VolumeError> {
    let hostname = crate::podspec::dns::pod_hostname(pod).map_err(|e| VolumeError::Invalid {
        volume: "etc-hosts".into(),
        reason: e.to_string(),
    })?;
    let ips: Vec<String> = if pod_ip.is_empty() {
        Vec::new()
    } else {
        vec![pod_ip.to_string()]
    };
    let ctx = MountContext {
        pod_ips: &ips,
        hostname: &hostname,
        host_domain: "",
        envs: &[],
        images: &BTreeMap::new(),
    };
    container_mounts_with(root_dir, pod, container, volumes, &ctx).await
}

/// CRI mounts for a container: each volumeMount → host path (+ subPath), container path,
/// readonly, propagation; the kubelet's `/etc/hosts` unless the container mounts its own;
/// the termination-message file at `terminationMessagePath`.
pub async fn container_mounts_with(
    root_dir: &Path,
    pod: &Pod,
    container: &Container,
    volumes: &PodVolumes,
    ctx: &MountContext<'_>,
) -> Result<Vec<cri::Mount>, VolumeError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    check_uid(&uid)?;
    let job = Job {
        pod_dir: pod_dir(root_dir, &uid),
        container: container.clone(),
        volumes: volumes.clone(),
        read_only_volumes: pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter(|v| super::is_projected_kind(v))
            .map(|v| v.name.clone())
            .chain(volumes.read_only.iter().cloned())
            .collect(),
        host_network: pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false),
        host_aliases: pod
            .spec
            .as_ref()
            .and_then(|s| s.host_aliases.clone())
            .unwrap_or_default(),
        pod_ips: ctx.pod_ips.to_vec(),
        hostname: ctx.hostname.to_string(),
        host_domain: ctx.host_domain.to_string(),
        envs: ctx
            .envs
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect(),
        node_hosts: PathBuf::from(NODE_HOSTS),
        images: ctx.images.clone(),
    };
    blocking(move || job.run()).await
}

/// Everything the blocking part needs, owned.
struct Job {
    pod_dir: PathBuf,
    container: Container,
    volumes: PodVolumes,
    /// Volumes mounted read-only whatever the mount says (secret, configMap, ...).
    read_only_volumes: BTreeSet<String>,
    host_network: bool,
    host_aliases: Vec<HostAlias>,
    pod_ips: Vec<String>,
    hostname: String,
    host_domain: String,
    envs: HashMap<String, String>,
    node_hosts: PathBuf,
    images: BTreeMap<String, cri::ImageSpec>,
}

impl Job {
    fn run(&self) -> Result<Vec<cri::Mount>, VolumeError> {
        let c = &self.container;
        let mut mounts = Vec::new();
        // Host-network pods always have IPs (the node's) in Go, so they always get one.
        let mut manage_hosts = self.host_network || !self.pod_ips.is_empty();
        for (index, vm) in c.volume_mounts.iter().flatten().enumerate() {
            manage_hosts &= vm.mount_path != ETC_HOSTS;
            mounts.push(self.volume_mount(index, vm)?);
        }
        if manage_hosts {
            mkdir_all("", &self.pod_dir, 0o750)?;
            let path = self.pod_dir.join("etc-hosts");
            let content = hosts_file(
                self.host_network,
                &self.node_hosts,
                &self.pod_ips,
                &self.hostname,
                &self.host_domain,
                &self.host_aliases,
            )
            .map_err(|e| VolumeError::io("", &self.node_hosts, e))?;
            write_if_changed(&path, content.as_bytes(), 0o644)?;
            mounts.push(cri::Mount {
                container_path: ETC_HOSTS.into(),
                host_path: path.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        let term = c
            .termination_message_path
            .clone()
            .unwrap_or_else(|| DEFAULT_TERMINATION_MESSAGE_PATH.into());
        if !term.is_empty() {
            let host = self.termination_log_file()?;
            mounts.push(cri::Mount {
                container_path: absolute(&term),
                host_path: host.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        Ok(mounts)
    }

    /// One volumeMount, the `index`-th of the container's.
    fn volume_mount(&self, index: usize, vm: &VolumeMount) -> Result<cri::Mount, VolumeError> {
        let c = &self.container;
        if let Some(image) = self.images.get(&vm.name) {
            return self.image_mount(vm, image);
        }
        let volume_path = self
            .volumes
            .dirs
            .get(&vm.name)
            .ok_or_else(|| VolumeError::NotFound {
                volume: vm.name.clone(),
                container: c.name.clone(),
            })?;
        let sub_err = |reason: String| VolumeError::SubPath {
            volume: vm.name.clone(),
            container: c.name.clone(),
            reason,
        };
        let mut sub = vm.sub_path.clone().unwrap_or_default();
        if let Some(expr) = vm.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            sub = self.expand_sub_path(expr).map_err(sub_err)?;
        }
        let host_path = if sub.is_empty() {
            volume_path.clone()
        } else {
            let bind = self
                .pod_dir
                .join(SUBPATHS_DIR)
                .join(&vm.name)
                .join(&c.name)
                .join(index.to_string());
            sub_path(volume_path, &sub, &vm.name, &c.name, &bind).map_err(sub_err)?
        };
        let invalid = |reason: String| VolumeError::Invalid {
            volume: vm.name.clone(),
            reason,
        };
        let propagation = match vm.mount_propagation.as_deref() {
            None | Some("None") => cri::MountPropagation::PropagationPrivate,
            Some("HostToContainer") => cri::MountPropagation::PropagationHostToContainer,
            Some("Bidirectional") => {
                if !is_privileged(c) {
                    return Err(invalid(
                        "Bidirectional mount propagation is available only to privileged containers"
                            .into(),
                    ));
                }
                cri::MountPropagation::PropagationBidirectional
            }
            Some(other) => {
                return Err(invalid(format!("invalid MountPropagation mode: {other:?}")));
            }
        };
        let read_only = vm.read_only.unwrap_or(false);
        let recursive_read_only = recursive_read_only(vm, read_only).map_err(invalid)?;
        Ok(cri::Mount {
            container_path: absolute(&vm.mount_path),
            host_path: host_path.to_string_lossy().into_owned(),
            readonly: read_only || self.read_only_volumes.contains(&vm.name),
            selinux_relabel: false,
            propagation: propagation as i32,
            recursive_read_only,
            ..Default::default()
        })
    }

    /// A volumeMount of an image volume: no host path, the image for the runtime to mount,
    /// read-only whatever the mount says (Go's image plugin's `ReadOnly` attribute). A
    /// `subPath` needs CRI's `image_sub_path` (cri-api 0.33, Kubernetes 1.33), which the CRI
    /// this kubelet speaks (cri-api 0.32) does not have: refused, as Go before 1.33 refuses it.
    fn image_mount(
        &self,
        vm: &VolumeMount,
        image: &cri::ImageSpec,
    ) -> Result<cri::Mount, VolumeError> {
        let has = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
        if has(&vm.sub_path) || has(&vm.sub_path_expr) {
            return Err(VolumeError::SubPath {
                volume: vm.name.clone(),
                container: self.container.name.clone(),
                reason: "subPath is not allowed in image volume sources".into(),
            });
        }
        let invalid = |reason: String| VolumeError::Invalid {
            volume: vm.name.clone(),
            reason,
        };
        let propagation = match vm.mount_propagation.as_deref() {
            None | Some("None") => cri::MountPropagation::PropagationPrivate,
            Some(other) => {
                return Err(invalid(format!(
                    "mountPropagation {other:?} is not available for image volumes"
                )));
            }
        };
        Ok(cri::Mount {
            container_path: absolute(&vm.mount_path),
            image: Some(image.clone()),
            readonly: true,
            propagation: propagation as i32,
            recursive_read_only: recursive_read_only(vm, vm.read_only.unwrap_or(false))
                .map_err(invalid)?,
            ..Default::default()
        })
    }

    /// `subPathExpr` with `$(VAR)` from the container's environment; a variable unset or
    /// empty is an error (Go's `ExpandContainerVolumeMounts`).
    fn expand_sub_path(&self, expr: &str) -> Result<String, String> {
        let missing: RefCell<BTreeSet<String>> = RefCell::new(BTreeSet::new());
        let out = expand(expr, |name| {
            let v = self.envs.get(name).cloned().unwrap_or_default();
            if v.is_empty() {
                missing.borrow_mut().insert(name.to_string());
            }
            Some(v)
        });
        let missing = missing.into_inner();
        if !missing.is_empty() {
            let names: Vec<String> = missing.into_iter().collect();
            return Err(format!("missing value for {}", names.join(", ")));
        }
        Ok(out)
    }

    /// A new, empty, world-writable file under `containers/<name>/` for the termination
    /// message (a new one per instance, as Go does).
    fn termination_log_file(&self) -> Result<PathBuf, VolumeError> {
        let dir = self.pod_dir.join("containers").join(&self.container.name);
        mkdir_all("", &dir, 0o750)?;
        for _ in 0..8 {
            let path = dir.join(random_id().map_err(|e| VolumeError::io("", &dir, e))?);
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(_) => {
                    // 0666 whatever our umask: the container may run as any user.
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
                        .map_err(|e| VolumeError::io("", &path, e))?;
                    return Ok(path);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(VolumeError::io("", &path, e)),
            }
        }
        Err(VolumeError::io(
            "",
            &dir,
            std::io::Error::other("no free termination-log name"),
        ))
    }
}

/// Eight hex digits from the kernel's random pool (Go's `makeUID`).
fn random_id() -> std::io::Result<String> {
    let mut b = [0u8; 4];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(hex::encode(b))
}

/// `path` made absolute as Go's `MakeAbsolutePath` (`/` + path, cleaned).
fn absolute(path: &str) -> String {
    if path.starts_with('/') {
        return path.to_string();
    }
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Go's `resolveRecursiveReadOnly`, for a runtime whose support we do not know (so
/// `IfPossible` is plain read-only and `Enabled` is refused).
fn recursive_read_only(vm: &VolumeMount, read_only: bool) -> Result<bool, String> {
    let mode = match vm.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(m) => m,
    };
    if !read_only {
        return Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not read-only",
            vm.name
        ));
    }
    if let Some(p) = vm.mount_propagation.as_deref().filter(|p| *p != "None") {
        return Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not compatible with propagation {p:?}",
            vm.name
        ));
    }
    match mode {
        "IfPossible" => Ok(false),
        "Enabled" => Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not supported by the runtime",
            vm.name
        )),
        other => Err(format!("unknown recursive read-only mode {other:?}")),
    }
}

/// Where a pod's subPath bind mounts live, under its pod dir (Go's `volume-subpaths`); the
/// pod dir's teardown unmounts them.
pub const SUBPATHS_DIR: &str = "volume-subpaths";

/// The host path the runtime mounts for `sub` inside a volume: relative and without `..`;
/// made (as directories with the volume's mode) when missing, as Go does; refused if, through
/// symlinks, it resolves outside the volume.
///
/// Checking a path and handing it to the runtime leaves a window: a container that can write
/// the volume may swap a checked directory for a symlink to `/` before runc mounts it
/// (CVE-2017-1002101, CVE-2021-25741). So, as Go does, the checked path is opened component
/// by component without following symlinks, and what was opened is bind-mounted (through
/// its descriptor) at `bind`, a path under the pod dir no container can write; the runtime
/// mounts that.
fn sub_path(
    volume: &Path,
    sub: &str,
    volume_name: &str,
    container: &str,
    bind: &Path,
) -> Result<PathBuf, String> {
    if sub.starts_with('/') {
        return Err(format!(
            "error SubPath `{sub}` must not be an absolute path"
        ));
    }
    if Path::new(sub)
        .components()
        .any(|c| c == Component::ParentDir)
    {
        return Err(format!(
            "unable to provision SubPath `{sub}`: must not contain '..'"
        ));
    }
    let base = std::fs::canonicalize(volume).map_err(|e| format!("{}: {e}", volume.display()))?;
    let prepare_err = || {
        format!(
            "failed to prepare subPath for volumeMount {volume_name:?} of container {container:?}"
        )
    };
    let target = base.join(sub);
    if std::fs::metadata(&target).is_err() {
        let mode = std::fs::metadata(&base)
            .map(|m| m.permissions().mode() & 0o7777)
            .map_err(|e| format!("{}: {e}", base.display()))?;
        safe_make_dir(&base, sub, mode).map_err(|e| {
            tracing::warn!(error = %e, volume = volume_name, container, "creating subPath directory");
            format!(
                "failed to create subPath directory for volumeMount {volume_name:?} of container {container:?}"
            )
        })?;
    }
    let real = std::fs::canonicalize(&target).map_err(|_| prepare_err())?;
    let Ok(inside) = real.strip_prefix(&base) else {
        tracing::warn!(path = %real.display(), base = %base.display(), "subPath leaves its volume");
        return Err(format!(
            "{} (it resolves outside the volume)",
            prepare_err()
        ));
    };
    let opened = open_no_follow(&base, inside).map_err(|e| {
        // A component turned into a symlink since it was resolved: someone is racing us.
        tracing::warn!(path = %real.display(), error = %e, "subPath changed while being opened");
        format!("{} (it changed while being opened: {e})", prepare_err())
    })?;
    bind_opened(&opened, bind).map_err(|e| {
        tracing::warn!(bind = %bind.display(), error = %e, "binding a subPath");
        format!("{}: {e}", prepare_err())
    })?;
    Ok(bind.to_path_buf())
}

/// Opens `inside` (relative, already resolved) under `base` one component at a time with
/// `O_NOFOLLOW`, so no component can be a symlink by the time it is opened; the descriptor
/// (`O_PATH`) names exactly the inode that was checked.
fn open_no_follow(base: &Path, inside: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::{Mode, SFlag, fstat};
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut fd = open(base, flags | OFlag::O_DIRECTORY, Mode::empty())?;
    for comp in inside.components() {
        let Component::Normal(name) = comp else {
            return Err(std::io::Error::other(format!(
                "unexpected component in {}",
                inside.display()
            )));
        };
        let next = openat(&fd, name, flags, Mode::empty())?;
        // O_PATH|O_NOFOLLOW opens a symlink itself rather than failing: refuse it here.
        let kind = SFlag::from_bits_truncate(fstat(&next)?.st_mode) & SFlag::S_IFMT;
        if kind == SFlag::S_IFLNK {
            return Err(std::io::Error::other(format!(
                "{} is a symlink",
                Path::new(name).display()
            )));
        }
        fd = next;
    }
    Ok(fd)
}

/// Bind-mounts what `opened` names at `target` (made as an empty dir or file to match),
/// replacing an earlier bind there (a restarted container's).
fn bind_opened(opened: &std::os::fd::OwnedFd, target: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let is_dir = nix::sys::stat::fstat(opened)
        .map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)?;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // Stacked binds come off one per call; none left is EINVAL.
    while nix::mount::umount2(target, nix::mount::MntFlags::MNT_DETACH).is_ok() {}
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() == is_dir && !m.file_type().is_symlink() => {}
        Ok(m) => {
            if m.is_dir() {
                std::fs::remove_dir(target)?;
            } else {
                std::fs::remove_file(target)?;
            }
            make_target(target, is_dir)?;
        }
        Err(e) if e.kind() == ErrorKind::NotFound => make_target(target, is_dir)?,
        Err(e) => return Err(e),
    }
    let source = PathBuf::from(format!("/proc/self/fd/{}", opened.as_raw_fd()));
    nix::mount::mount(
        Some(&source),
        target,
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )?;
    Ok(())
}

fn make_target(target: &Path, is_dir: bool) -> std::io::Result<()> {
    if is_dir {
        std::fs::create_dir(target)
    } else {
        std::fs::File::create(target).map(drop)
    }
}

/// Makes `sub` under `base` one component at a time, never through a symlink that leaves
/// `base` (Go's `doSafeMakeDir`).
fn safe_make_dir(base: &Path, sub: &str, mode: u32) -> std::io::Result<()> {
    let mut cur = base.to_path_buf();
    for comp in Path::new(sub).components() {
        let Component::Normal(name) = comp else {
            continue;
        };
        let next = cur.join(name);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.is_dir() => cur = next,
            Ok(m) if m.file_type().is_symlink() => {
                let resolved = std::fs::canonicalize(&next)?;
                if !resolved.starts_with(base) || !resolved.is_dir() {
                    return Err(std::io::Error::other(format!(
                        "{} leaves the volume or is not a directory",
                        next.display()
                    )));
                }
                cur = resolved;
            }
            Ok(_) => {
                return Err(std::io::Error::other(format!(
                    "{} exists and is not a directory",
                    next.display()
                )));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                match std::fs::create_dir(&next) {
                    Ok(()) => {
                        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(mode))?;
                    }
                    // Made meanwhile: take it if it is a real directory.
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                        if !std::fs::symlink_metadata(&next)?.is_dir() {
                            return Err(e);
                        }
                    }
                    Err(e) => return Err(e),
                }
                cur = next;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The pod's hosts file (Go's `managedHostsFileContent` / `nodeHostsFileContent`).
fn hosts_file(
    host_network: bool,
    node_hosts: &Path,
    pod_ips: &[String],
    hostname: &str,
    domain: &str,
    aliases: &[HostAlias],
) -> std::io::Result<String> {
    let mut out = String::new();
    if host_network {
        out.push_str(MANAGED_HOSTS_HEADER_HOST_NETWORK);
        out.push_str(&std::fs::read_to_string(node_hosts)?);
    } else {
        out.push_str(MANAGED_HOSTS_HEADER);
        out.push_str("127.0.0.1\tlocalhost\n");
        out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\n");
        out.push_str("fe00::0\tip6-mcastprefix\n");
        out.push_str("fe00::1\tip6-allnodes\n");
        out.push_str("fe00::2\tip6-allrouters\n");
        for ip in pod_ips.iter().filter(|ip| !ip.is_empty()) {
            if domain.is_empty() {
                out.push_str(&format!("{ip}\t{hostname}\n"));
            } else {
                out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
            }
        }
    }
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.clone().unwrap_or_default().join("\t");
            out.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
    Ok(out)
}

/// Writes a file in place (running containers have it bind-mounted, so it keeps its inode)
/// unless it already holds `content`.
fn write_if_changed(path: &Path, content: &[u8], mode: u32) -> Result<(), VolumeError> {
    if std::fs::read(path).is_ok_and(|old| old == content) {
        return Ok(());
    }
    std::fs::write(path, content).map_err(|e| VolumeError::io("", path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| VolumeError::io("", path, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::volume::setup;
    use crate::volume::tests::pod;

    const POD: &str = "metadata: {name: web, namespace: prod, uid: m1}
spec:
  hostname: www
  hostAliases: [{ip: 10.1.2.3, hostnames: [foo.local, bar.local]}]
  containers:
  - name: app
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
    - {name: scratch, mountPath: /sub, subPath: a/b, readOnly: true}
    - {name: scratch, mountPath: data, mountPropagation: HostToContainer}
    - {name: scratch, mountPath: /expr, subPathExpr: 'logs/$(POD_NAME)'}
  volumes:
  - {name: scratch, emptyDir: {}}
";

    fn mount_of<'a>(mounts: &'a [cri::Mount], path: &str) -> &'a cri::Mount {
        mounts
            .iter()
            .find(|m| m.container_path == path)
            .unwrap_or_else(|| panic!("no mount at {path}: {mounts:?}"))
    }

    #[tokio::test]
    async fn mounts_hosts_and_termination_log() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: subPaths are bind-mounted, which needs root");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let p = pod(POD);
        let c = &p.spec.as_ref().unwrap().containers[0];
        let vols = setup(root.path(), &p).await.unwrap();
        let scratch = std::fs::canonicalize(&vols.dirs["scratch"]).unwrap();
        let envs = [cri::KeyValue {
            key: "POD_NAME".into(),
            value: "web".into(),
        }];
        let ips = ["10.88.0.7".to_string()];
        let ctx = MountContext {
            pod_ips: &ips,
            hostname: "www",
            host_domain: "sub.prod.svc.cluster.local",
            envs: &envs,
            images: &BTreeMap::new(),
        };
        let mounts = container_mounts_with(root.path(), &p, c, &vols, &ctx)
            .await
            .unwrap();
        let paths: Vec<&str> = mounts.iter().map(|m| m.container_path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/scratch",
                "/sub",
                "/data",
                "/expr",
                "/etc/hosts",
                "/dev/termination-log"
            ]
        );

        let m = mount_of(&mounts, "/scratch");
        assert_eq!(Path::new(&m.host_path), vols.dirs["scratch"]);
        assert!(!m.readonly);
        assert_eq!(
            m.propagation,
            cri::MountPropagation::PropagationPrivate as i32
        );

        // subPath: made under the volume with the volume's mode, and handed to the runtime as
        // a bind of what was checked, under the pod dir.
        let m = mount_of(&mounts, "/sub");
        assert_eq!(
            Path::new(&m.host_path),
            root.path().join("pods/m1/volume-subpaths/scratch/app/1")
        );
        assert!(same_file(Path::new(&m.host_path), &scratch.join("a/b")));
        assert!(m.readonly);
        let mode = std::fs::metadata(scratch.join("a/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o777);

        let m = mount_of(&mounts, "/data");
        assert_eq!(
            m.propagation,
            cri::MountPropagation::PropagationHostToContainer as i32
        );
        assert!(same_file(
            Path::new(&mount_of(&mounts, "/expr").host_path),
            &scratch.join("logs/web")
        ));

        let hosts = std::fs::read_to_string(&mount_of(&mounts, "/etc/hosts").host_path).unwrap();
        assert_eq!(
            hosts,
            "# Kubernetes-managed hosts file.
127.0.0.1\tlocalhost
::1\tlocalhost ip6-localhost ip6-loopback
fe00::0\tip6-localnet
fe00::0\tip6-mcastprefix
fe00::1\tip6-allnodes
fe00::2\tip6-allrouters
10.88.0.7\twww.sub.prod.svc.cluster.local\twww

# Entries added by HostAliases.
10.1.2.3\tfoo.local\tbar.local
"
        );
        assert_eq!(
            mount_of(&mounts, "/etc/hosts").host_path,
            root.path().join("pods/m1/etc-hosts").to_string_lossy()
        );

        let term = Path::new(&mount_of(&mounts, "/dev/termination-log").host_path).to_path_buf();
        assert_eq!(
            term.parent().unwrap(),
            root.path().join("pods/m1/containers/app")
        );
        assert_eq!(term.file_name().unwrap().len(), 8);
        let meta = std::fs::metadata(&term).unwrap();
        assert_eq!(meta.len(), 0);
        assert_eq!(meta.permissions().mode() & 0o777, 0o666);

        // A second instance gets its own termination log; the simple form works too.
        let again = container_mounts(root.path(), &p, c, &vols, "10.88.0.7").await;
        // subPathExpr has no environment there.
        let err = again.unwrap_err().to_string();
        assert!(err.contains("missing value for POD_NAME"), "{err}");
        let mut p2 = p.clone();
        p2.spec.as_mut().unwrap().containers[0]
            .volume_mounts
            .as_mut()
            .unwrap()
            .pop();
        let c2 = &p2.spec.as_ref().unwrap().containers[0];
        let mounts2 = container_mounts(root.path(), &p2, c2, &vols, "10.88.0.7")
            .await
            .unwrap();
        let term2 = &mount_of(&mounts2, "/dev/termination-log").host_path;
        assert_ne!(Path::new(term2), term);
        let hosts = std::fs::read_to_string(&mount_of(&mounts2, "/etc/hosts").host_path).unwrap();
        assert!(hosts.contains("10.88.0.7\twww\n"), "{hosts}");

        crate::volume::teardown(root.path(), "m1").await.unwrap();
    }

    #[tokio::test]
    async fn hosts_file_rules() {
        let root = tempfile::tempdir().unwrap();
        // No pod IP yet: no hosts file; the container's own /etc/hosts mount wins.
        let p = pod("metadata: {name: web, uid: m2}
spec:
  containers:
  - name: app
    terminationMessagePath: ''
    volumeMounts: [{name: h, mountPath: /etc/hosts}]
  volumes: [{name: h, emptyDir: {}}]");
        let c = &p.spec.as_ref().unwrap().containers[0];
        let vols = setup(root.path(), &p).await.unwrap();
        let m = container_mounts(root.path(), &p, c, &vols, "")
            .await
            .unwrap();
        assert_eq!(m.len(), 1);
        let m = container_mounts(root.path(), &p, c, &vols, "10.0.0.1")
            .await
            .unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(Path::new(&m[0].host_path), vols.dirs["h"]);

        // Host network: the node's hosts file with its own header.
        let node_hosts = root.path().join("node-hosts");
        std::fs::write(&node_hosts, "127.0.0.1 localhost\n").unwrap();
        let text = hosts_file(true, &node_hosts, &[], "x", "", &[]).unwrap();
        assert_eq!(
            text,
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
        );
        let p = pod("metadata: {name: web, uid: m3}
spec: {hostNetwork: true, containers: [{name: app, terminationMessagePath: ''}]}");
        let c = &p.spec.as_ref().unwrap().containers[0];
        let m = container_mounts(root.path(), &p, c, &PodVolumes::default(), "")
            .await
            .unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].container_path, "/etc/hosts");
        let text = std::fs::read_to_string(&m[0].host_path).unwrap();
        assert!(text.starts_with(MANAGED_HOSTS_HEADER_HOST_NETWORK));
    }

    #[tokio::test]
    async fn image_volumes_go_to_the_runtime_read_only() {
        let root = tempfile::tempdir().unwrap();
        let p = pod("metadata: {name: web, uid: m4}
spec:
  containers:
  - name: app
    terminationMessagePath: ''
    volumeMounts:
    - {name: tools, mountPath: /tools}
    - {name: tools, mountPath: /sub, subPath: bin}
    - {name: tools, mountPath: /shared, mountPropagation: HostToContainer}
  volumes: [{name: tools, image: {reference: 'example.com/tools:1'}}]");
        let spec = cri::ImageSpec {
            image: "sha256:abc".into(),
            user_specified_image: "example.com/tools:1".into(),
            ..Default::default()
        };
        let images = BTreeMap::from([("tools".to_string(), spec.clone())]);
        let ctx = MountContext {
            pod_ips: &[],
            hostname: "web",
            host_domain: "",
            envs: &[],
            images: &images,
        };
        let mut c = p.spec.as_ref().unwrap().containers[0].clone();
        let all = c.volume_mounts.clone().unwrap();
        let vols = PodVolumes::default();
        c.volume_mounts = Some(all[..1].to_vec());
        let mounts = container_mounts_with(root.path(), &p, &c, &vols, &ctx)
            .await
            .unwrap();
        assert_eq!(
            mounts,
            [cri::Mount {
                container_path: "/tools".into(),
                image: Some(spec),
                readonly: true,
                ..Default::default()
            }]
        );
        c.volume_mounts = Some(all[1..2].to_vec());
        let err = container_mounts_with(root.path(), &p, &c, &vols, &ctx)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("not allowed in image volume sources"),
            "{err}"
        );
        c.volume_mounts = Some(all[2..].to_vec());
        let err = container_mounts_with(root.path(), &p, &c, &vols, &ctx)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("not available for image volumes"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn sub_path_refusals() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: subPaths are bind-mounted, which needs root");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let base = "metadata: {name: web, uid: m4}
spec:
  containers:
  - name: app
    volumeMounts: [MOUNT]
  volumes: [{name: v, emptyDir: {}}]";
        let p = pod(&base.replace("MOUNT", "{name: v, mountPath: /x}"));
        let vols = setup(root.path(), &p).await.unwrap();
        std::os::unix::fs::symlink(&outside, vols.dirs["v"].join("escape")).unwrap();
        std::fs::write(vols.dirs["v"].join("file"), "").unwrap();
        let table = [
            (
                "{name: v, mountPath: /x, subPath: /abs}",
                "must not be an absolute path",
            ),
            (
                "{name: v, mountPath: /x, subPath: a/../../b}",
                "must not contain '..'",
            ),
            (
                "{name: v, mountPath: /x, subPath: escape}",
                "resolves outside the volume",
            ),
            (
                "{name: v, mountPath: /x, subPath: escape/deeper}",
                "failed to create subPath directory",
            ),
            (
                "{name: v, mountPath: /x, subPath: file/below}",
                "failed to create subPath directory",
            ),
            (
                "{name: nope, mountPath: /x}",
                "cannot find volume \"nope\" to mount into container \"app\"",
            ),
            (
                "{name: v, mountPath: /x, mountPropagation: Bidirectional}",
                "available only to privileged containers",
            ),
            (
                "{name: v, mountPath: /x, mountPropagation: Sideways}",
                "invalid MountPropagation mode",
            ),
            (
                "{name: v, mountPath: /x, recursiveReadOnly: Enabled, readOnly: true}",
                "not supported by the runtime",
            ),
            (
                "{name: v, mountPath: /x, recursiveReadOnly: IfPossible}",
                "it is not read-only",
            ),
        ];
        for (mount, want) in table {
            let p = pod(&base.replace("MOUNT", mount));
            let c = &p.spec.as_ref().unwrap().containers[0];
            let err = container_mounts(root.path(), &p, c, &vols, "")
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{mount}: {err}");
        }
        // Nothing was made outside.
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // A file subPath is fine, as is a symlink that stays inside.
        std::os::unix::fs::symlink("file", vols.dirs["v"].join("inside")).unwrap();
        for sub in ["file", "inside"] {
            let p = pod(&base.replace(
                "MOUNT",
                &format!("{{name: v, mountPath: /x, subPath: {sub}}}"),
            ));
            let c = &p.spec.as_ref().unwrap().containers[0];
            let m = container_mounts(root.path(), &p, c, &vols, "")
                .await
                .unwrap();
            let real = std::fs::canonicalize(vols.dirs["v"].join("file")).unwrap();
            assert!(same_file(Path::new(&m[0].host_path), &real), "{sub}");
        }
        crate::volume::teardown(root.path(), "m4").await.unwrap();
        assert!(outside.exists());
    }

    /// Whether two paths name one inode.
    fn same_file(a: &Path, b: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        let (a, b) = (std::fs::metadata(a).unwrap(), std::fs::metadata(b).unwrap());
        (a.dev(), a.ino()) == (b.dev(), b.ino())
    }

    /// The race of CVE-2017-1002101: a container that writes the volume swaps a checked
    /// subPath for a symlink to the host before the runtime mounts it. What the runtime is
    /// handed is a bind of the directory that was checked, so the swap changes nothing.
    #[tokio::test]
    async fn a_sub_path_swapped_for_a_symlink_after_the_check_stays_what_was_checked() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: bind mounts need root");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let host = root.path().join("host-secrets");
        std::fs::create_dir(&host).unwrap();
        std::fs::write(host.join("shadow"), "host only").unwrap();
        let p = pod("metadata: {name: web, uid: m5}
spec:
  containers:
  - name: app
    volumeMounts: [{name: v, mountPath: /x, subPath: data}]
  volumes: [{name: v, emptyDir: {}}]");
        let c = &p.spec.as_ref().unwrap().containers[0];
        let vols = setup(root.path(), &p).await.unwrap();
        let data = vols.dirs["v"].join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("mine"), "pod data").unwrap();
        let m = container_mounts(root.path(), &p, c, &vols, "")
            .await
            .unwrap();
        let handed = PathBuf::from(&m[0].host_path);
        // The swap, after the check and before the runtime's mount.
        std::fs::rename(&data, vols.dirs["v"].join("moved")).unwrap();
        std::os::unix::fs::symlink(&host, &data).unwrap();
        assert_eq!(
            std::fs::read_to_string(handed.join("mine")).unwrap(),
            "pod data"
        );
        assert!(
            !handed.join("shadow").exists(),
            "the host's dir showed through"
        );
        // The next start checks again and refuses the symlink.
        let err = container_mounts(root.path(), &p, c, &vols, "")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("resolves outside the volume"), "{err}");
        // Teardown unmounts the bind before removing the pod dir: the host's file stays.
        crate::volume::teardown(root.path(), "m5").await.unwrap();
        assert!(host.join("shadow").exists());
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !table.contains(&root.path().display().to_string()),
            "{table}"
        );
    }

    #[test]
    fn absolute_paths() {
        assert_eq!(absolute("/a/b"), "/a/b");
        assert_eq!(absolute("data"), "/data");
        assert_eq!(absolute("./a//b/../c"), "/a/c");
    }
}
