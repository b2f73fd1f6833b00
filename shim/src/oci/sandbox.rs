//! The pause container's spec: the pod's namespaces (network, IPC, UTS, PID unless shared with
//! the node), its sysctls, hostname, /dev/shm, security context and cgroup.

use std::collections::HashMap;
use std::path::PathBuf;

use ferrolet_proto::cri::{self, NamespaceMode};
use oci_spec::runtime::{LinuxCpu, LinuxNamespaceType, Spec};

use super::defaults::{default_spec, mount, without_default_security};
use super::namespaces::{self, Ns};
use super::resources::clamp_oom_score_adj;
use super::user::{self, UserRequest};
use super::userns;
use super::{EtcFiles, OciError, SandboxSpecInput, seccomp};

/// containerd's oom_score_adj for pause containers: only the kubelet and runtime rank higher.
pub(crate) const SANDBOX_OOM_SCORE_ADJ: i64 = -998;

/// The pause container's CPU weight: it sleeps, and must not take from the pod.
const SANDBOX_CPU_SHARES: u64 = 2;

/// Annotations every runtime shares with the pod: which sandbox, which pod.
pub(crate) fn pod_annotations(
    sandbox_id: &str,
    config: &cri::PodSandboxConfig,
) -> HashMap<String, String> {
    let meta = config.metadata.clone().unwrap_or_default();
    HashMap::from([
        ("io.kubernetes.cri.sandbox-id".into(), sandbox_id.into()),
        ("io.kubernetes.cri.sandbox-name".into(), meta.name),
        ("io.kubernetes.cri.sandbox-namespace".into(), meta.namespace),
        ("io.kubernetes.cri.sandbox-uid".into(), meta.uid),
    ])
}

/// The pod's namespace options (defaults: everything POD).
pub(crate) fn namespace_options(config: &cri::PodSandboxConfig) -> cri::NamespaceOption {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default()
}

/// The pause container's spec.
pub fn sandbox_spec(input: &SandboxSpecInput<'_>) -> Result<Spec, OciError> {
    const SC: &str = "linux.security_context";
    let config = input.config;
    let linux = config.linux.clone().unwrap_or_default();
    let sc = linux.security_context.clone().unwrap_or_default();
    let ns_opts = sc.namespace_options.clone().unwrap_or_default();
    let host_network = input.netns_path.is_none();
    let pid_mode = namespaces::mode(ns_opts.pid, &format!("{SC}.namespace_options.pid"))?;
    let ipc_mode = namespaces::mode(ns_opts.ipc, &format!("{SC}.namespace_options.ipc"))?;
    let userns = userns::requested(Some(&ns_opts), &format!("{SC}.namespace_options"))?;
    let image = input.image.config().clone().unwrap_or_default();

    let mut spec = default_spec();
    without_default_security(&mut spec);
    let root = spec.root_mut().get_or_insert_with(Default::default);
    root.set_path(PathBuf::from("rootfs"))
        .set_readonly(Some(true));

    let mut args = image.entrypoint().clone().unwrap_or_default();
    args.extend(image.cmd().clone().unwrap_or_default());
    if args.is_empty() {
        return Err(OciError::Internal(
            "the sandbox image has neither an entrypoint nor a command".into(),
        ));
    }
    let workdir = image.working_dir().clone().filter(|w| !w.is_empty());
    if let Some(p) = spec.process_mut() {
        p.set_args(Some(args))
            .set_env(Some(image.env().clone().unwrap_or_default()))
            .set_cwd(PathBuf::from(workdir.unwrap_or_else(|| "/".into())));
    }

    // Without its own UTS namespace (host network) a hostname would rename the node.
    if !host_network && !config.hostname.is_empty() {
        spec.set_hostname(Some(config.hostname.clone()));
    }
    if !input.cgroups_path.is_empty()
        && let Some(l) = spec.linux_mut()
    {
        l.set_cgroups_path(Some(PathBuf::from(input.cgroups_path)));
    }

    match input.netns_path {
        Some(path) => namespaces::set(
            &mut spec,
            LinuxNamespaceType::Network,
            Ns::Join(path.to_path_buf()),
        ),
        None => {
            namespaces::set(&mut spec, LinuxNamespaceType::Network, Ns::Host);
            namespaces::set(&mut spec, LinuxNamespaceType::Uts, Ns::Host);
        }
    }
    if pid_mode == NamespaceMode::Node {
        namespaces::set(&mut spec, LinuxNamespaceType::Pid, Ns::Host);
    }
    if let Some(mappings) = &userns {
        let ns = match input.userns {
            Some(pinned) => Ns::Join(pinned.path.clone()),
            None => Ns::New,
        };
        userns::set(&mut spec, ns, mappings);
    }
    let host_ipc = ipc_mode == NamespaceMode::Node;
    if host_ipc {
        namespaces::set(&mut spec, LinuxNamespaceType::Ipc, Ns::Host);
    }

    // The pause container sees the pod's /dev/shm and resolv.conf read-only (kata-style
    // runtimes read DNS from the sandbox spec).
    let shm = input
        .files
        .shm
        .clone()
        .unwrap_or_else(|| PathBuf::from("/dev/shm"));
    let bind_ro = ["rbind", "ro", "nosuid", "nodev", "noexec"];
    let mut mounts: Vec<_> = spec
        .mounts()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.destination() != &PathBuf::from("/dev/shm"))
        .collect();
    mounts.push(mount("/dev/shm", "bind", &shm.to_string_lossy(), &bind_ro));
    mounts.push(mount(
        "/etc/resolv.conf",
        "bind",
        &input.files.resolv_conf.to_string_lossy(),
        &bind_ro,
    ));
    spec.set_mounts(Some(mounts));

    let sysctls = namespaces::check_sysctls(&linux.sysctls, host_network, host_ipc)?;
    if let Some(l) = spec.linux_mut() {
        if !sysctls.is_empty() {
            l.set_sysctl(Some(sysctls));
        }
        let resources = l.resources_mut().get_or_insert_with(Default::default);
        let mut cpu = resources.cpu().clone().unwrap_or_else(LinuxCpu::default);
        cpu.set_shares(Some(SANDBOX_CPU_SHARES));
        resources.set_cpu(Some(cpu));
    }

    let ids = user::resolve(
        &UserRequest {
            username: "",
            uid: sc.run_as_user.map(|v| v.value),
            gid: sc.run_as_group.map(|v| v.value),
            supplemental_groups: &sc.supplemental_groups,
            // The pause image has no group database; nothing to merge.
            merge_image_groups: false,
            image_user: image.user().as_deref().unwrap_or(""),
            field: SC,
        },
        &EtcFiles::default(),
    )?;
    let adj = clamp_oom_score_adj(SANDBOX_OOM_SCORE_ADJ, input.min_oom_score_adj)?;
    if let Some(p) = spec.process_mut() {
        let u = p.user_mut();
        u.set_uid(ids.uid)
            .set_gid(ids.gid)
            .set_additional_gids(Some(ids.additional_gids));
        p.set_oom_score_adj(Some(adj));
    }

    #[allow(deprecated)]
    let choice = seccomp::choose(sc.seccomp.as_ref(), &sc.seccomp_profile_path, SC)?;
    seccomp::apply(&mut spec, &choice, sc.privileged, SC)?;

    let mut annotations = pod_annotations(input.id, config);
    annotations.insert("io.kubernetes.cri.container-type".into(), "sandbox".into());
    annotations.insert(
        "io.kubernetes.cri.sandbox-log-directory".into(),
        config.log_directory.clone(),
    );
    if let Some(res) = &linux.resources {
        for (key, value) in [
            ("io.kubernetes.cri.sandbox-cpu-period", res.cpu_period),
            ("io.kubernetes.cri.sandbox-cpu-quota", res.cpu_quota),
            ("io.kubernetes.cri.sandbox-cpu-shares", res.cpu_shares),
            (
                "io.kubernetes.cri.sandbox-memory",
                res.memory_limit_in_bytes,
            ),
        ] {
            annotations.insert(key.into(), value.to_string());
        }
    }
    spec.set_annotations(Some(annotations));
    Ok(spec)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use super::*;
    use crate::image_config::{ContainerDefaults, ImageConfig};
    use crate::sandbox::files::SandboxFiles;

    fn pause() -> ImageConfig {
        let mut defaults = ContainerDefaults::default();
        defaults.set_entrypoint(Some(vec!["/pause".into()]));
        defaults.set_env(Some(vec!["PATH=/bin".into()]));
        let mut image = ImageConfig::default();
        image.set_config(Some(defaults));
        image
    }

    fn files() -> SandboxFiles {
        SandboxFiles {
            dir: "/r/sandboxes/s1".into(),
            hostname: "/r/sandboxes/s1/hostname".into(),
            hosts: "/r/sandboxes/s1/hosts".into(),
            resolv_conf: "/r/sandboxes/s1/resolv.conf".into(),
            shm: Some("/s/sandboxes/s1/shm".into()),
        }
    }

    fn config(ns: cri::NamespaceOption) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: "u-1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: "web-0".into(),
            log_directory: "/var/log/pods/x".into(),
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: "/kubepods".into(),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(ns),
                    ..Default::default()
                }),
                sysctls: HashMap::from([("kernel.shm_rmid_forced".into(), "1".into())]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn build(config: &cri::PodSandboxConfig, netns: Option<&Path>) -> Result<Spec, OciError> {
        let image = pause();
        let files = files();
        sandbox_spec(&SandboxSpecInput {
            id: "s1",
            config,
            image: &image,
            netns_path: netns,
            files: &files,
            cgroups_path: "/kubepods/s1",
            min_oom_score_adj: -999,
            userns: None,
        })
    }

    fn ns_list(spec: &Spec) -> Vec<(String, Option<PathBuf>)> {
        spec.linux()
            .as_ref()
            .unwrap()
            .namespaces()
            .as_ref()
            .unwrap()
            .iter()
            .map(|n| (n.typ().to_string(), n.path().clone()))
            .collect()
    }

    #[test]
    fn pod_network_sandbox() {
        let cfg = config(cri::NamespaceOption::default());
        let spec = build(&cfg, Some(Path::new("/run/netns/cni-1"))).unwrap();
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["process"]["args"], serde_json::json!(["/pause"]));
        assert_eq!(json["process"]["env"], serde_json::json!(["PATH=/bin"]));
        assert_eq!(json["process"]["oomScoreAdj"], -998);
        assert_eq!(json["process"]["user"]["uid"], 0);
        assert!(json["process"].get("rlimits").is_none());
        assert_eq!(json["root"]["readonly"], true);
        assert_eq!(json["hostname"], "web-0");
        assert_eq!(json["linux"]["cgroupsPath"], "/kubepods/s1");
        assert_eq!(json["linux"]["resources"]["cpu"]["shares"], 2);
        assert_eq!(json["linux"]["sysctl"]["kernel.shm_rmid_forced"], "1");
        assert!(json["linux"].get("seccomp").is_none());
        let ns = ns_list(&spec);
        assert!(ns.contains(&("net".into(), Some("/run/netns/cni-1".into()))));
        for t in ["pid", "ipc", "uts", "mnt"] {
            assert!(ns.contains(&(t.into(), None)), "{t}");
        }
        let a = &json["annotations"];
        assert_eq!(a["io.kubernetes.cri.container-type"], "sandbox");
        assert_eq!(a["io.kubernetes.cri.sandbox-id"], "s1");
        assert_eq!(a["io.kubernetes.cri.sandbox-name"], "web");
        assert_eq!(a["io.kubernetes.cri.sandbox-namespace"], "default");
        assert_eq!(a["io.kubernetes.cri.sandbox-uid"], "u-1");
        assert_eq!(
            a["io.kubernetes.cri.sandbox-log-directory"],
            "/var/log/pods/x"
        );

        let mounts = spec.mounts().as_ref().unwrap();
        let shm: Vec<_> = mounts
            .iter()
            .filter(|m| m.destination() == Path::new("/dev/shm"))
            .collect();
        assert_eq!(shm.len(), 1);
        assert_eq!(
            shm[0].source().as_deref(),
            Some(Path::new("/s/sandboxes/s1/shm"))
        );
        assert_eq!(shm[0].typ().as_deref(), Some("bind"));
        assert!(
            mounts
                .iter()
                .any(|m| m.destination() == Path::new("/etc/resolv.conf")
                    && m.source().as_deref() == Some(Path::new("/r/sandboxes/s1/resolv.conf")))
        );
    }

    #[test]
    fn host_namespaces() {
        let cfg = config(cri::NamespaceOption {
            network: NamespaceMode::Node as i32,
            pid: NamespaceMode::Node as i32,
            ipc: NamespaceMode::Node as i32,
            ..Default::default()
        });
        let mut cfg = cfg;
        cfg.linux.as_mut().unwrap().sysctls.clear();
        let mut files = files();
        files.shm = None;
        let image = pause();
        let spec = sandbox_spec(&SandboxSpecInput {
            id: "s1",
            config: &cfg,
            image: &image,
            netns_path: None,
            files: &files,
            cgroups_path: "",
            min_oom_score_adj: 0,
            userns: None,
        })
        .unwrap();
        let ns: Vec<_> = ns_list(&spec).into_iter().map(|(t, _)| t).collect();
        assert_eq!(ns, ["mnt"]);
        assert!(
            spec.hostname().is_none(),
            "no hostname without a UTS namespace"
        );
        assert!(spec.linux().as_ref().unwrap().cgroups_path().is_none());
        let shm = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.destination() == Path::new("/dev/shm"))
            .unwrap();
        assert_eq!(shm.source().as_deref(), Some(Path::new("/dev/shm")));
        // Clamped up to what we may set.
        assert_eq!(spec.process().as_ref().unwrap().oom_score_adj(), Some(0));
    }

    #[test]
    fn sysctls_conflicting_with_host_namespaces_are_refused() {
        let mut cfg = config(cri::NamespaceOption {
            network: NamespaceMode::Node as i32,
            ..Default::default()
        });
        cfg.linux
            .as_mut()
            .unwrap()
            .sysctls
            .insert("net.core.somaxconn".into(), "1024".into());
        let err = build(&cfg, None).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.to_string().contains("net.core.somaxconn"), "{err}");
        // The same sysctl is fine in the pod's own netns.
        assert!(build(&cfg, Some(Path::new("/run/netns/x"))).is_ok());
    }

    #[test]
    fn security_context() {
        let mut cfg = config(cri::NamespaceOption::default());
        let sc = cfg
            .linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap();
        sc.run_as_user = Some(cri::Int64Value { value: 65535 });
        sc.run_as_group = Some(cri::Int64Value { value: 65534 });
        sc.supplemental_groups = vec![5];
        sc.seccomp = Some(cri::SecurityProfile::default());
        let spec = build(&cfg, Some(Path::new("/n"))).unwrap();
        let u = spec.process().as_ref().unwrap().user();
        assert_eq!((u.uid(), u.gid()), (65535, 65534));
        assert_eq!(u.additional_gids().as_deref(), Some(&[5, 65534][..]));
        assert!(spec.linux().as_ref().unwrap().seccomp().is_some());

        let sc = cfg
            .linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap();
        sc.privileged = true;
        let spec = build(&cfg, Some(Path::new("/n"))).unwrap();
        assert!(spec.linux().as_ref().unwrap().seccomp().is_none());

        let sc = cfg
            .linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap();
        sc.run_as_user = None;
        let err = build(&cfg, Some(Path::new("/n"))).unwrap_err();
        assert!(err.to_string().contains("run_as_group"), "{err}");
    }

    #[test]
    fn resource_annotations_and_bad_images() {
        let mut cfg = config(cri::NamespaceOption::default());
        cfg.linux.as_mut().unwrap().resources = Some(cri::LinuxContainerResources {
            cpu_shares: 1024,
            memory_limit_in_bytes: 1 << 30,
            ..Default::default()
        });
        let spec = build(&cfg, Some(Path::new("/n"))).unwrap();
        let a = spec.annotations().as_ref().unwrap();
        assert_eq!(a["io.kubernetes.cri.sandbox-cpu-shares"], "1024");
        assert_eq!(
            a["io.kubernetes.cri.sandbox-memory"],
            (1u64 << 30).to_string()
        );
        assert_eq!(a["io.kubernetes.cri.sandbox-cpu-quota"], "0");

        let image = ImageConfig::default();
        let files = files();
        let err = sandbox_spec(&SandboxSpecInput {
            id: "s1",
            config: &cfg,
            image: &image,
            netns_path: None,
            files: &files,
            cgroups_path: "",
            min_oom_score_adj: 0,
            userns: None,
        })
        .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Internal);
    }

    #[test]
    fn pod_user_namespaces_need_mappings() {
        let cfg = config(cri::NamespaceOption {
            userns_options: Some(cri::UserNamespace {
                mode: NamespaceMode::Pod as i32,
                ..Default::default()
            }),
            ..Default::default()
        });
        let err = build(&cfg, Some(Path::new("/n"))).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    }
}
