//! OCI runtime specs for pod sandboxes (the pause container) and application containers, built
//! the way containerd's CRI plugin builds them, so that what runs in a container (its user,
//! mounts, namespaces, capabilities, seccomp filter, cgroup limits) is what Kubernetes users
//! expect from containerd.
//!
//! - `defaults`: the base spec every container starts from (`populateDefaultUnixSpec`).
//! - `sandbox` / `container`: the two builders.
//! - `cgroups`: what the node's cgroups can enforce, from what is mounted (detected once).
//! - `resources`: CRI resources ↔ OCI cgroup resources for that node, updates, oom_score_adj
//!   clamping, RDT/blockio classes.
//! - `security`: capabilities, privileged mode, masked/readonly paths.
//! - `seccomp`: choosing a profile; the RuntimeDefault profile; Localhost profiles.
//! - `user`: uid/gid/additional groups from the image's passwd and group files.
//! - `mounts` / `devices`: CRI mounts and devices.
//! - `namespaces`: namespace paths per CRI mode, and sysctl checks against them.
//!
//! The builders are synchronous and do small blocking work (they stat devices and mount sources,
//! create missing host paths, read a Localhost seccomp profile, walk `/dev` for privileged
//! containers): call them from `spawn_blocking`.

mod cgroups;
mod container;
mod defaults;
mod devices;
#[cfg(test)]
mod gokubelet;
mod mounts;
mod namespaces;
mod resources;
mod sandbox;
mod seccomp;
mod security;
mod user;
pub mod userns;

use std::path::Path;
use std::sync::OnceLock;

pub use oci_spec::runtime::Spec;
use tonic::Code;

pub use self::cgroups::{CgroupMode, CgroupSupport};
pub use self::container::container_spec;
pub use self::mounts::ImageVolume;
pub use self::resources::{cri_resources, linux_resources, update_resources};
pub use self::sandbox::sandbox_spec;
pub use self::userns::{IdmappedBind, idmap_binds};
pub use crate::mount::EtcFiles;
pub use crate::sandbox::files::SandboxFiles;

/// A spec that cannot be built from the request (→ gRPC InvalidArgument), or a host read failing.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A request field holds a value we cannot turn into a spec.
    #[error("{field}{}: {reason}", quoted(value))]
    Invalid {
        /// Where in the request, e.g. `mounts[1].host_path`.
        field: String,
        /// The offending value, when there is one to show.
        value: Option<String>,
        /// Why it is refused.
        reason: String,
    },
    /// A request field asks for what this node or runtime cannot do (→ FailedPrecondition).
    #[error("{field}{}: {reason}", quoted(value))]
    Unsupported {
        /// Where in the request.
        field: String,
        /// The value asked for, when there is one to show.
        value: Option<String>,
        /// What is missing.
        reason: String,
    },
    /// A host file the spec depends on could not be read.
    #[error("{what} {path:?}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The host path.
        path: std::path::PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// A spec could not be encoded or decoded.
    #[error("runtime spec JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A stored spec or our own inputs are inconsistent (not the caller's fault).
    #[error("{0}")]
    Internal(String),
}

fn quoted(value: &Option<String>) -> String {
    match value {
        Some(v) => format!(" {v:?}"),
        None => String::new(),
    }
}

impl OciError {
    /// The gRPC code callers see.
    pub fn code(&self) -> Code {
        match self {
            OciError::Invalid { .. } => Code::InvalidArgument,
            OciError::Unsupported { .. } => Code::FailedPrecondition,
            OciError::Io { .. } | OciError::Json(_) | OciError::Internal(_) => Code::Internal,
        }
    }

    /// A refused field with the value that was given.
    pub(crate) fn invalid(
        field: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        OciError::Invalid {
            field: field.into(),
            value: Some(value.into()),
            reason: reason.into(),
        }
    }

    /// A field asking for what the node or runtime cannot do, with the value asked for.
    pub(crate) fn unsupported(
        field: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        OciError::Unsupported {
            field: field.into(),
            value: Some(value.into()),
            reason: reason.into(),
        }
    }

    /// A refused field where showing the value adds nothing.
    pub(crate) fn invalid_field(field: impl Into<String>, reason: impl Into<String>) -> Self {
        OciError::Invalid {
            field: field.into(),
            value: None,
            reason: reason.into(),
        }
    }
}

/// The type URL containerd expects for a runtime spec in an Any.
pub const SPEC_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/Spec";

/// The spec as the JSON `Any` containerd's Containers.Create takes.
pub fn to_any(spec: &Spec) -> Result<prost_types::Any, OciError> {
    Ok(prost_types::Any {
        type_url: SPEC_TYPE_URL.to_string(),
        value: serde_json::to_vec(spec)?,
    })
}

/// Parses a spec back from a container record's Any.
pub fn from_any(any: &prost_types::Any) -> Result<Spec, OciError> {
    // containerd itself stores the URL without a leading slash, but Any URLs may carry one.
    if any.type_url.trim_start_matches('/') != SPEC_TYPE_URL {
        return Err(OciError::Internal(format!(
            "container spec has type {:?}, not a runtime spec",
            any.type_url
        )));
    }
    Ok(serde_json::from_slice(&any.value)?)
}

/// Whether a pod's cgroup parent suits the systemd driver: none (runc's default slice), or a
/// path whose last part is a slice.
pub fn is_systemd_parent(parent: &str) -> bool {
    parent.is_empty() || parent.trim_end_matches('/').ends_with(".slice")
}

/// cgroups path of a container under the sandbox's parent (cgroupfs driver: "<parent>/<id>"; when the parent is empty, containerd's default "/k8s.io/<id>"-style path scoped by the namespace given, or with the systemd driver `system.slice:ferrolet-cri:<id>`, a scope in runc's default slice, named: crun 1.8 refuses an empty slice).
pub fn cgroups_path(parent: &str, namespace: &str, id: &str, systemd: bool) -> String {
    if parent.is_empty() {
        if systemd {
            return format!("system.slice:ferrolet-cri:{id}");
        }
        return format!("/{}/{id}", namespace.trim_matches('/'));
    }
    // A systemd-driver parent (`kubepods-burstable.slice`) needs runc's `slice:prefix:name` form.
    let base = parent
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("");
    if base.ends_with(".slice") {
        return format!("{base}:ferrolet-cri:{id}");
    }
    format!("{}/{id}", parent.trim_end_matches('/'))
}

/// Where a container's cgroup is under the hierarchy's root: a cgroupfs path as it is; runc's
/// systemd form `<slice>:<prefix>:<name>` as systemd lays it out, the slice expanded into its
/// parents and the scope `<prefix>-<name>.scope` below it
/// (`a-b.slice:p:id` → `/a.slice/a-b.slice/p-id.scope`; no slice is runc's `system.slice`).
pub fn cgroup_dir(cgroups_path: &str) -> String {
    let mut parts = cgroups_path.splitn(3, ':');
    let (Some(slice), Some(prefix), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return cgroups_path.to_string();
    };
    let mut dir = String::new();
    // runc's default slice for a scope given none.
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    let unit = slice.strip_suffix(".slice").unwrap_or(slice);
    if !unit.is_empty() && unit != "-" {
        let levels: Vec<&str> = unit.split('-').collect();
        for i in 1..=levels.len() {
            dir.push('/');
            dir.push_str(&levels[..i].join("-"));
            dir.push_str(".slice");
        }
    }
    format!("{dir}/{prefix}-{name}.scope")
}

/// This process's own oom_score_adj; requested values are clamped to at least it, since we lack CAP_SYS_RESOURCE (see ../shared/FACTS.md).
pub fn own_oom_score_adj() -> i32 {
    static OWN: OnceLock<i32> = OnceLock::new();
    *OWN.get_or_init(|| {
        match std::fs::read_to_string("/proc/self/oom_score_adj")
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            Some(v) => v,
            None => {
                // Clamping to 0 only ever raises scores, which the kernel always allows.
                tracing::warn!("cannot read /proc/self/oom_score_adj; clamping oom_score_adj to 0");
                0
            }
        }
    })
}

/// The first real-time signal as the kernel numbers it (Docker's and containerd's convention).
const SIGRTMIN: i32 = 34;
/// The last real-time signal.
const SIGRTMAX: i32 = 64;

/// Signal number for an image's StopSignal ("SIGTERM", "TERM", "15", "SIGRTMIN+3"); SIGTERM (15) when absent; an unknown name is an error.
pub fn stop_signal(name: Option<&str>) -> Result<i32, OciError> {
    let raw = match name.map(str::trim) {
        None | Some("") => return Ok(libc::SIGTERM),
        Some(raw) => raw,
    };
    let bad = |reason: &str| OciError::invalid("image.config.StopSignal", raw, reason);
    if let Ok(n) = raw.parse::<i32>() {
        return if (1..=SIGRTMAX).contains(&n) {
            Ok(n)
        } else {
            Err(bad("signal number out of range"))
        };
    }
    let upper = raw.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let realtime = |base: i32, rest: &str| -> Option<i32> {
        let n = if rest.is_empty() {
            base
        } else if let Some(off) = rest.strip_prefix('+') {
            base.checked_add(off.parse().ok()?)?
        } else if let Some(off) = rest.strip_prefix('-') {
            base.checked_sub(off.parse().ok()?)?
        } else {
            return None;
        };
        (SIGRTMIN..=SIGRTMAX).contains(&n).then_some(n)
    };
    if let Some(rest) = bare.strip_prefix("RTMIN") {
        return realtime(SIGRTMIN, rest).ok_or_else(|| bad("unknown signal"));
    }
    if let Some(rest) = bare.strip_prefix("RTMAX") {
        return realtime(SIGRTMAX, rest).ok_or_else(|| bad("unknown signal"));
    }
    // Linux aliases nix does not list under these names.
    match bare {
        "IOT" => return Ok(libc::SIGABRT),
        "POLL" => return Ok(libc::SIGIO),
        "CLD" => return Ok(libc::SIGCHLD),
        _ => {}
    }
    format!("SIG{bare}")
        .parse::<nix::sys::signal::Signal>()
        .map(|s| s as i32)
        .map_err(|_| bad("unknown signal"))
}

/// The pod sandbox's inputs.
pub struct SandboxSpecInput<'a> {
    /// Sandbox id.
    pub id: &'a str,
    /// The RunPodSandbox request's config.
    pub config: &'a ferrolet_proto::cri::PodSandboxConfig,
    /// The pause image's config: entrypoint/cmd/env/workdir/user.
    pub image: &'a crate::image_config::ImageConfig,
    /// The pinned netns; None = host network (NamespaceMode::Node).
    pub netns_path: Option<&'a Path>,
    /// hostname, hosts, resolv.conf, shm.
    pub files: &'a SandboxFiles,
    /// From [`cgroups_path`].
    pub cgroups_path: &'a str,
    /// From [`own_oom_score_adj`].
    pub min_oom_score_adj: i32,
    /// The pod's pinned user namespace (`hostUsers: false`), which the pause joins.
    pub userns: Option<&'a crate::sandbox::userns::PinnedUserns>,
}

/// Where a container finds its pod's IPC, UTS and PID namespaces.
#[derive(Clone, Copy, Debug)]
pub enum PodNamespaces<'a> {
    /// The pause process's, `/proc/<pid>/ns/*` (0: it does not run).
    Pause(u32),
    /// Pinned on files: a sandbox without a pause process, which has no PID namespace to
    /// share.
    Pinned(&'a crate::sandbox::namespaces::PinnedNamespaces),
}

/// An application container's inputs.
pub struct ContainerSpecInput<'a> {
    /// Container id.
    pub id: &'a str,
    /// The CreateContainer request's config.
    pub config: &'a ferrolet_proto::cri::ContainerConfig,
    /// The sandbox's config.
    pub sandbox_config: &'a ferrolet_proto::cri::PodSandboxConfig,
    /// The container image's config.
    pub image: &'a crate::image_config::ImageConfig,
    /// The image rootfs's /etc/passwd and /etc/group (empty strings if absent).
    pub etc: &'a EtcFiles,
    /// Where the pod's IPC, UTS and PID namespaces are.
    pub pod_namespaces: PodNamespaces<'a>,
    /// For `namespace_options.pid` TARGET: the target container's process (0: none runs).
    pub target_pid: u32,
    /// The sandbox netns (None = host network).
    pub netns_path: Option<&'a Path>,
    /// The sandbox's shared files.
    pub files: &'a SandboxFiles,
    /// The views of the request's image volumes.
    pub image_volumes: &'a [ImageVolume],
    /// From [`cgroups_path`].
    pub cgroups_path: &'a str,
    /// From [`own_oom_score_adj`].
    pub min_oom_score_adj: i32,
    /// What the node's cgroups can enforce ([`CgroupSupport::node`] outside tests).
    pub cgroups: &'a CgroupSupport,
    /// The pod's pinned user namespace (`hostUsers: false`), which the container joins.
    pub pod_userns: Option<&'a crate::sandbox::userns::PinnedUserns>,
}

/// The CRI view of a spec's process identity (for ContainerStatus.user): uid, gid, and the
/// supplementary groups, the primary one included.
pub fn cri_user(spec: &Spec) -> Option<ferrolet_proto::cri::ContainerUser> {
    let user = spec.process().as_ref()?.user();
    Some(ferrolet_proto::cri::ContainerUser {
        linux: Some(ferrolet_proto::cri::LinuxContainerUser {
            uid: i64::from(user.uid()),
            gid: i64::from(user.gid()),
            supplemental_groups: user
                .additional_gids()
                .iter()
                .flatten()
                .map(|&g| i64::from(g))
                .collect(),
        }),
    })
}

/// The node's hostname, for sandboxes that do not name one.
pub(crate) fn node_hostname() -> Result<String, OciError> {
    let path = Path::new("/proc/sys/kernel/hostname");
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| OciError::Io {
            what: "reading the node hostname from",
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn cgroups_paths_follow_the_driver() {
        assert_eq!(cgroups_path("", "k8s.io", "abc", false), "/k8s.io/abc");
        assert_eq!(
            cgroups_path("/kubepods/besteffort/pod1", "k8s.io", "abc", false),
            "/kubepods/besteffort/pod1/abc"
        );
        assert_eq!(
            cgroups_path("/kubepods/", "ns", "abc", false),
            "/kubepods/abc"
        );
        assert_eq!(
            cgroups_path("/kubepods.slice/kubepods-pod1.slice", "ns", "abc", false),
            "kubepods-pod1.slice:ferrolet-cri:abc"
        );
        assert_eq!(
            cgroups_path("", "ns", "abc", true),
            "system.slice:ferrolet-cri:abc"
        );
        assert_eq!(
            cgroup_dir(&cgroups_path("", "ns", "abc", true)),
            "/system.slice/ferrolet-cri-abc.scope"
        );
    }

    #[test]
    fn systemd_cgroups_paths_expand_as_systemd_lays_them_out() {
        assert_eq!(
            cgroup_dir("kubepods-burstable-pod1_2.slice:ferrolet-cri:abc"),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice/\
             ferrolet-cri-abc.scope"
        );
        assert_eq!(cgroup_dir("-.slice:p:x"), "/p-x.scope");
        assert_eq!(cgroup_dir(":p:x"), "/system.slice/p-x.scope");
        assert_eq!(cgroup_dir("/kubepods/pod1/abc"), "/kubepods/pod1/abc");
    }

    #[test]
    fn stop_signals_parse_like_docker() {
        assert_eq!(stop_signal(None).unwrap(), 15);
        assert_eq!(stop_signal(Some("")).unwrap(), 15);
        assert_eq!(stop_signal(Some("SIGTERM")).unwrap(), 15);
        assert_eq!(stop_signal(Some("TERM")).unwrap(), 15);
        assert_eq!(stop_signal(Some("sigquit")).unwrap(), 3);
        assert_eq!(stop_signal(Some("SIGKILL")).unwrap(), 9);
        assert_eq!(stop_signal(Some("15")).unwrap(), 15);
        assert_eq!(stop_signal(Some("SIGRTMIN+3")).unwrap(), 37);
        assert_eq!(stop_signal(Some("RTMIN")).unwrap(), 34);
        assert_eq!(stop_signal(Some("SIGRTMAX-1")).unwrap(), 63);
        assert_eq!(stop_signal(Some("SIGIOT")).unwrap(), 6);
        for bad in ["SIGFOO", "0", "65", "SIGRTMIN+40", "RTMIN*2"] {
            let err = stop_signal(Some(bad)).unwrap_err();
            assert_eq!(err.code(), Code::InvalidArgument, "{bad}");
        }
        assert_eq!(
            stop_signal(Some("SIGFOO")).unwrap_err().to_string(),
            "image.config.StopSignal \"SIGFOO\": unknown signal"
        );
    }

    #[test]
    fn specs_round_trip_through_any() {
        let spec = Spec::default();
        let any = to_any(&spec).unwrap();
        assert_eq!(any.type_url, SPEC_TYPE_URL);
        assert_eq!(from_any(&any).unwrap(), spec);
        let slashed = prost_types::Any {
            type_url: format!("/{SPEC_TYPE_URL}"),
            value: any.value.clone(),
        };
        assert_eq!(from_any(&slashed).unwrap(), spec);
        let wrong = prost_types::Any {
            type_url: "types.containerd.io/other".into(),
            value: any.value,
        };
        assert_eq!(from_any(&wrong).unwrap_err().code(), Code::Internal);
    }

    #[test]
    fn own_oom_score_adj_reads_proc() {
        let want: i32 = std::fs::read_to_string("/proc/self/oom_score_adj")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(own_oom_score_adj(), want);
    }

    #[test]
    fn cri_user_reports_the_process_identity() {
        let mut spec = Spec::default();
        let user = spec.process_mut().as_mut().unwrap().user_mut();
        user.set_uid(1000)
            .set_gid(1000)
            .set_additional_gids(Some(vec![1000, 1234, 50000]));
        let u = cri_user(&spec).unwrap().linux.unwrap();
        assert_eq!((u.uid, u.gid), (1000, 1000));
        assert_eq!(u.supplemental_groups, [1000, 1234, 50000]);
        spec.set_process(None);
        assert!(cri_user(&spec).is_none());
    }

    #[test]
    fn invalid_errors_name_field_and_value() {
        let e = OciError::invalid("mounts[1].host_path", "", "must not be empty");
        assert_eq!(e.to_string(), "mounts[1].host_path \"\": must not be empty");
        assert_eq!(e.code(), Code::InvalidArgument);
        let e = OciError::invalid_field("command", "no command specified");
        assert_eq!(e.to_string(), "command: no command specified");
    }
}
