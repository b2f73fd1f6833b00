//! Security contexts as CRI sees them: the sandbox's (namespaces, pod user and groups,
//! sysctls' companions) and each container's (the pod's settings overridden by the
//! container's, as Go's `DetermineEffectiveSecurityContext`), with the namespace modes,
//! seccomp and AppArmor profiles and default masked paths the Go kubelet sends.

use ferrolet_proto::cri;
use ferrolet_proto::cri::security_profile::ProfileType;
use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities, Container, PodSecurityContext, PodSpec, SELinuxOptions,
    SeccompProfile, SecurityContext,
};

use super::{SpecError, spec_of};
use crate::types::Pod;

/// /proc and /sys paths masked in every container unless `procMount: Unmasked` (Go's
/// `defaultMaskedPaths`; runtimes drop them for privileged containers).
pub const DEFAULT_MASKED_PATHS: [&str; 11] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// /proc paths made read-only in every container unless `procMount: Unmasked`.
pub const DEFAULT_READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The AppArmor annotation prefix static pods may still use instead of the field.
const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The pod's namespace modes (Go's `NamespacesForPod`): network and IPC shared by the pod or
/// the node's, PID per container unless `hostPID` (node) or `shareProcessNamespace` (pod).
pub fn namespace_options(spec: &PodSpec) -> Result<cri::NamespaceOption, SpecError> {
    use cri::NamespaceMode::{Container as Own, Node, Pod as Shared};
    let mode = |host: Option<bool>, otherwise: cri::NamespaceMode| {
        if host == Some(true) { Node } else { otherwise }
    };
    let pid = if spec.host_pid == Some(true) {
        Node
    } else if spec.share_process_namespace == Some(true) {
        Shared
    } else {
        Own
    };
    Ok(cri::NamespaceOption {
        network: mode(spec.host_network, Shared) as i32,
        pid: pid as i32,
        ipc: mode(spec.host_ipc, Shared) as i32,
        target_id: String::new(),
        userns_options: None,
    })
}

/// Whether any container of the pod is privileged (the sandbox then is too).
pub fn has_privileged_container(spec: &PodSpec) -> bool {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(is_privileged)
}

/// Whether the container asks for `privileged: true`.
pub fn is_privileged(c: &Container) -> bool {
    c.security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false)
}

fn selinux(o: &SELinuxOptions) -> cri::SeLinuxOption {
    cri::SeLinuxOption {
        user: o.user.clone().unwrap_or_default(),
        role: o.role.clone().unwrap_or_default(),
        r#type: o.type_.clone().unwrap_or_default(),
        level: o.level.clone().unwrap_or_default(),
    }
}

/// `fsGroup` then `supplementalGroups` of the pod.
fn supplemental_groups(psc: Option<&PodSecurityContext>) -> Vec<i64> {
    let Some(psc) = psc else {
        return Vec::new();
    };
    psc.fs_group
        .into_iter()
        .chain(psc.supplemental_groups.iter().flatten().copied())
        .collect()
}

fn profile(kind: ProfileType, localhost_ref: String) -> cri::SecurityProfile {
    cri::SecurityProfile {
        profile_type: kind as i32,
        localhost_ref,
    }
}

/// The sandbox's security context (Go's `generatePodSandboxLinuxConfig`): namespaces, pod
/// user/group, groups, SELinux, privileged when a container is, and always the runtime's
/// default seccomp profile for the pause container.
pub fn sandbox_security_context(pod: &Pod) -> Result<cri::LinuxSandboxSecurityContext, SpecError> {
    let spec = spec_of(pod)?;
    let psc = spec.security_context.as_ref();
    Ok(cri::LinuxSandboxSecurityContext {
        namespace_options: Some(namespace_options(spec)?),
        selinux_options: psc.and_then(|s| s.se_linux_options.as_ref()).map(selinux),
        run_as_user: psc
            .and_then(|s| s.run_as_user)
            .map(|value| cri::Int64Value { value }),
        run_as_group: psc
            .and_then(|s| s.run_as_group)
            .map(|value| cri::Int64Value { value }),
        readonly_rootfs: false,
        supplemental_groups: supplemental_groups(psc),
        privileged: has_privileged_container(spec),
        seccomp: Some(profile(ProfileType::RuntimeDefault, String::new())),
        ..Default::default()
    })
}

/// The pod's settings overridden by the container's (Go's
/// `DetermineEffectiveSecurityContext`).
pub fn effective_security_context(pod: &Pod, container: &Container) -> SecurityContext {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut eff = SecurityContext::default();
    if let Some(p) = psc {
        eff.se_linux_options = p.se_linux_options.clone();
        eff.windows_options = p.windows_options.clone();
        eff.run_as_user = p.run_as_user;
        eff.run_as_group = p.run_as_group;
        eff.run_as_non_root = p.run_as_non_root;
    }
    let Some(c) = container.security_context.as_ref() else {
        return eff;
    };
    macro_rules! over {
        ($($f:ident),*) => {$(
            if c.$f.is_some() {
                eff.$f = c.$f.clone();
            }
        )*};
    }
    over!(
        se_linux_options,
        windows_options,
        capabilities,
        privileged,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount
    );
    eff
}

/// Whether the container must not run as root (`runAsNonRoot`, container over pod); the
/// caller checks it against the user the image would run as.
#[cfg(test)]
pub fn run_as_non_root(pod: &Pod, container: &Container) -> bool {
    effective_security_context(pod, container)
        .run_as_non_root
        .unwrap_or(false)
}

/// The uid the pod spec sets for the container (`runAsUser`, container over pod), if any.
#[cfg(test)]
pub fn run_as_user(pod: &Pod, container: &Container) -> Option<i64> {
    effective_security_context(pod, container).run_as_user
}

fn capabilities(c: &Capabilities) -> cri::Capability {
    cri::Capability {
        add_capabilities: c.add.clone().unwrap_or_default(),
        drop_capabilities: c.drop.clone().unwrap_or_default(),
        add_ambient_capabilities: Vec::new(),
    }
}

/// The container's CRI security context (Go's `determineEffectiveSecurityContext`).
// The deprecated AppArmor string is still set, as Go does, for runtimes that read only it.
#[allow(deprecated)]
/// `Localhost` seccomp profiles are looked up under `seccomp_root` (`<root-dir>/seccomp`).
pub fn container_security_context(
    pod: &Pod,
    container: &Container,
    seccomp_root: &std::path::Path,
) -> Result<cri::LinuxContainerSecurityContext, SpecError> {
    let spec = spec_of(pod)?;
    let psc = spec.security_context.as_ref();
    let eff = effective_security_context(pod, container);
    let unmasked = eff.proc_mount.as_deref() == Some("Unmasked");
    let paths = |defaults: &[&str]| -> Vec<String> {
        if unmasked {
            Vec::new()
        } else {
            defaults.iter().map(|p| p.to_string()).collect()
        }
    };
    let field = |what: &str| format!("spec.containers[{}].securityContext.{what}", container.name);
    let (apparmor, apparmor_profile) = apparmor(pod, container, &field)?;
    Ok(cri::LinuxContainerSecurityContext {
        capabilities: eff.capabilities.as_ref().map(capabilities),
        privileged: eff.privileged.unwrap_or(false),
        namespace_options: Some(namespace_options(spec)?),
        selinux_options: eff.se_linux_options.as_ref().map(selinux),
        run_as_user: eff.run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: eff.run_as_group.map(|value| cri::Int64Value { value }),
        run_as_username: String::new(),
        readonly_rootfs: eff.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: supplemental_groups(psc),
        // Unset means escalation is allowed, so no_new_privs only on an explicit false.
        no_new_privs: eff.allow_privilege_escalation == Some(false),
        masked_paths: paths(&DEFAULT_MASKED_PATHS),
        readonly_paths: paths(&DEFAULT_READONLY_PATHS),
        seccomp: Some(seccomp(pod, container, seccomp_root, &field)?),
        apparmor,
        apparmor_profile,
        ..Default::default()
    })
}

/// The container's seccomp profile (Go's `getSeccompProfile` with `seccompDefault: false`):
/// the container's field, else the pod's, else Unconfined.
fn seccomp(
    pod: &Pod,
    container: &Container,
    seccomp_root: &std::path::Path,
    field: &dyn Fn(&str) -> String,
) -> Result<cri::SecurityProfile, SpecError> {
    let from_container = container
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref());
    let from_pod = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.seccomp_profile.as_ref());
    let Some(p) = from_container.or(from_pod) else {
        return Ok(profile(ProfileType::Unconfined, String::new()));
    };
    seccomp_field(p, seccomp_root, field)
}

fn seccomp_field(
    p: &SeccompProfile,
    seccomp_root: &std::path::Path,
    field: &dyn Fn(&str) -> String,
) -> Result<cri::SecurityProfile, SpecError> {
    match p.type_.as_str() {
        "RuntimeDefault" => Ok(profile(ProfileType::RuntimeDefault, String::new())),
        "Localhost" => match p.localhost_profile.as_deref().filter(|s| !s.is_empty()) {
            Some(name) => {
                let path = seccomp_root.join(name);
                Ok(profile(
                    ProfileType::Localhost,
                    path.to_string_lossy().into_owned(),
                ))
            }
            None => Err(SpecError::invalid(
                field("seccompProfile"),
                "localhostProfile must be set if seccompProfile type is Localhost.",
            )),
        },
        _ => Ok(profile(ProfileType::Unconfined, String::new())),
    }
}

/// The container's AppArmor profile and its deprecated string form (Go's
/// `getAppArmorProfile`): the container's field, else the pod's annotation for it, else the
/// pod's field; none leaves it to the runtime.
fn apparmor(
    pod: &Pod,
    container: &Container,
    field: &dyn Fn(&str) -> String,
) -> Result<(Option<cri::SecurityProfile>, String), SpecError> {
    let from_annotation = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&format!("{APPARMOR_ANNOTATION_PREFIX}{}", container.name)))
        .and_then(|v| {
            let (type_, localhost_profile) = match v.as_str() {
                "runtime/default" => ("RuntimeDefault", None),
                "unconfined" => ("Unconfined", None),
                other => (
                    "Localhost",
                    Some(other.strip_prefix("localhost/")?.to_string()),
                ),
            };
            Some(AppArmorProfile {
                type_: type_.into(),
                localhost_profile,
            })
        });
    let chosen = container
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
        .or(from_annotation)
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .and_then(|s| s.app_armor_profile.clone())
        });
    let Some(p) = chosen else {
        return Ok((None, String::new()));
    };
    match p.type_.as_str() {
        "RuntimeDefault" => Ok((
            Some(profile(ProfileType::RuntimeDefault, String::new())),
            "runtime/default".into(),
        )),
        "Unconfined" => Ok((
            Some(profile(ProfileType::Unconfined, String::new())),
            "unconfined".into(),
        )),
        "Localhost" => match p.localhost_profile {
            Some(name) => Ok((
                Some(profile(ProfileType::Localhost, name.clone())),
                format!("localhost/{name}"),
            )),
            None => Err(SpecError::invalid(
                field("appArmorProfile"),
                "missing localhost apparmor profile name",
            )),
        },
        other => Err(SpecError::invalid(
            field("appArmorProfile"),
            format!("unknown apparmor profile type: {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::podspec::testutil::pod;
    use cri::NamespaceMode;

    /// The default root dir's `seccomp/`.
    const ROOT_DIR: &str = "/var/lib/kubelet/seccomp";

    fn modes(spec_yaml: &str) -> (NamespaceMode, NamespaceMode, NamespaceMode) {
        let p = pod(&format!(
            "metadata: {{name: p, uid: u}}\nspec: {{containers: [{{name: c}}], {spec_yaml}}}"
        ));
        let o = namespace_options(p.spec.as_ref().unwrap()).unwrap();
        let m = |v: i32| NamespaceMode::try_from(v).unwrap();
        (m(o.network), m(o.pid), m(o.ipc))
    }

    #[test]
    fn namespaces_follow_host_flags() {
        use NamespaceMode::{Container, Node, Pod};
        assert_eq!(modes(""), (Pod, Container, Pod));
        assert_eq!(modes("hostNetwork: true"), (Node, Container, Pod));
        assert_eq!(modes("hostPID: true"), (Pod, Node, Pod));
        assert_eq!(modes("hostIPC: true"), (Pod, Container, Node));
        assert_eq!(modes("shareProcessNamespace: true"), (Pod, Pod, Pod));
        assert_eq!(
            modes("hostPID: true, shareProcessNamespace: true"),
            (Pod, Node, Pod)
        );
        // The user namespace is the userns manager's (it needs the pod's range).
        let p =
            pod("metadata: {name: p, uid: u}\nspec: {hostUsers: false, containers: [{name: c}]}");
        let o = namespace_options(p.spec.as_ref().unwrap()).unwrap();
        assert_eq!(o.userns_options, None);
    }

    const POD: &str = "metadata:
  name: p
  uid: u
  annotations: {container.apparmor.security.beta.kubernetes.io/b: localhost/prof}
spec:
  securityContext:
    runAsUser: 1000
    runAsGroup: 2000
    runAsNonRoot: true
    fsGroup: 3000
    supplementalGroups: [4000, 4001]
    seccompProfile: {type: RuntimeDefault}
    seLinuxOptions: {level: 's0:c1'}
  containers:
  - name: a
    securityContext:
      runAsUser: 0
      runAsNonRoot: false
      privileged: true
      capabilities: {add: [NET_ADMIN], drop: [ALL]}
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      seccompProfile: {type: Localhost, localhostProfile: audit.json}
      procMount: Unmasked
  - name: b
";

    #[test]
    #[allow(deprecated)]
    fn container_overrides_pod() {
        let p = pod(POD);
        let spec = p.spec.as_ref().unwrap();
        let a = container_security_context(&p, &spec.containers[0], std::path::Path::new(ROOT_DIR))
            .unwrap();
        assert_eq!(a.run_as_user.as_ref().unwrap().value, 0);
        assert_eq!(a.run_as_group.as_ref().unwrap().value, 2000);
        assert!(a.privileged);
        assert!(a.readonly_rootfs);
        assert!(a.no_new_privs);
        let caps = a.capabilities.as_ref().unwrap();
        assert_eq!(caps.add_capabilities, ["NET_ADMIN"]);
        assert_eq!(caps.drop_capabilities, ["ALL"]);
        assert_eq!(a.supplemental_groups, [3000, 4000, 4001]);
        let sc = a.seccomp.as_ref().unwrap();
        assert_eq!(sc.profile_type, ProfileType::Localhost as i32);
        assert_eq!(sc.localhost_ref, "/var/lib/kubelet/seccomp/audit.json");
        // Another --root-dir has its own seccomp/ (Go's seccompProfileRoot).
        let other = container_security_context(
            &p,
            &spec.containers[0],
            std::path::Path::new("/srv/kubelet/seccomp"),
        )
        .unwrap();
        assert_eq!(
            other.seccomp.unwrap().localhost_ref,
            "/srv/kubelet/seccomp/audit.json"
        );
        assert!(a.masked_paths.is_empty() && a.readonly_paths.is_empty());
        assert_eq!(a.selinux_options.as_ref().unwrap().level, "s0:c1");
        assert!(a.apparmor.is_none());
        assert!(!run_as_non_root(&p, &spec.containers[0]));

        let b = container_security_context(&p, &spec.containers[1], std::path::Path::new(ROOT_DIR))
            .unwrap();
        assert_eq!(b.run_as_user.as_ref().unwrap().value, 1000);
        assert!(!b.privileged && !b.readonly_rootfs && !b.no_new_privs);
        assert!(b.capabilities.is_none());
        assert_eq!(b.masked_paths.len(), DEFAULT_MASKED_PATHS.len());
        assert_eq!(b.readonly_paths, DEFAULT_READONLY_PATHS);
        assert_eq!(
            b.seccomp.as_ref().unwrap().profile_type,
            ProfileType::RuntimeDefault as i32
        );
        let aa = b.apparmor.as_ref().unwrap();
        assert_eq!(aa.profile_type, ProfileType::Localhost as i32);
        assert_eq!(aa.localhost_ref, "prof");
        assert_eq!(b.apparmor_profile, "localhost/prof");
        assert!(run_as_non_root(&p, &spec.containers[1]));
        assert_eq!(run_as_user(&p, &spec.containers[1]), Some(1000));
        let ns = b.namespace_options.as_ref().unwrap();
        assert_eq!(ns.pid, NamespaceMode::Container as i32);

        let sb = sandbox_security_context(&p).unwrap();
        assert!(sb.privileged);
        assert_eq!(sb.run_as_user.as_ref().unwrap().value, 1000);
        assert_eq!(sb.run_as_group.as_ref().unwrap().value, 2000);
        assert_eq!(sb.supplemental_groups, [3000, 4000, 4001]);
        assert_eq!(
            sb.seccomp.as_ref().unwrap().profile_type,
            ProfileType::RuntimeDefault as i32
        );
    }

    #[test]
    fn defaults_without_security_contexts() {
        let p = pod("metadata: {name: p, uid: u}\nspec: {containers: [{name: c}]}");
        let c = &p.spec.as_ref().unwrap().containers[0];
        let sc = container_security_context(&p, c, std::path::Path::new(ROOT_DIR)).unwrap();
        assert_eq!(
            sc.seccomp.as_ref().unwrap().profile_type,
            ProfileType::Unconfined as i32
        );
        assert!(sc.run_as_user.is_none() && sc.run_as_group.is_none());
        assert!(!sc.no_new_privs && !sc.privileged);
        assert_eq!(sc.masked_paths.len(), DEFAULT_MASKED_PATHS.len());
        assert!(sc.supplemental_groups.is_empty());
        let sb = sandbox_security_context(&p).unwrap();
        assert!(!sb.privileged && sb.run_as_user.is_none());
    }

    #[test]
    fn localhost_seccomp_needs_a_name() {
        let p = pod("metadata: {name: p, uid: u}
spec: {containers: [{name: c, securityContext: {seccompProfile: {type: Localhost}}}]}");
        let c = &p.spec.as_ref().unwrap().containers[0];
        let err = container_security_context(&p, c, std::path::Path::new(ROOT_DIR))
            .unwrap_err()
            .to_string();
        assert!(err.contains("localhostProfile must be set"), "{err}");
    }
}
