//! An application container's spec: process (args, env, cwd, user, terminal), mounts and
//! devices, security context, resources, and the sandbox namespaces it joins.

use std::path::PathBuf;

use ferrolet_proto::cri::{self, NamespaceMode};
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use super::defaults::{DEFAULT_PATH_ENV, default_spec, without_default_security};
use super::namespaces::{self, Ns, proc_ns};
use super::resources::{check_resource_classes, clamp_oom_score_adj, update_resources};
use super::sandbox::{namespace_options, pod_annotations};
use super::user::{self, UserRequest};
use super::userns;
use super::{
    ContainerSpecInput, OciError, PodNamespaces, SandboxFiles, devices, mounts, node_hostname,
    seccomp, security,
};
use crate::image_config::ContainerDefaults;

const SC: &str = "linux.security_context";

/// Kubernetes' command/args rules over the image's ENTRYPOINT/CMD: `command` replaces the
/// entrypoint and drops CMD; `args` alone replace CMD; neither runs ENTRYPOINT + CMD. An image
/// `ENTRYPOINT [""]` means no entrypoint.
fn process_args(
    config: &cri::ContainerConfig,
    image: &ContainerDefaults,
) -> Result<Vec<String>, OciError> {
    let mut command = config.command.clone();
    let mut args = config.args.clone();
    if command.is_empty() {
        if args.is_empty() {
            args = image.cmd().clone().unwrap_or_default();
        }
        let entrypoint = image.entrypoint().clone().unwrap_or_default();
        if entrypoint != [""] {
            command = entrypoint;
        }
    }
    command.extend(args);
    if command.is_empty() {
        return Err(OciError::invalid_field("command", "no command specified"));
    }
    Ok(command)
}

/// Sets each `KEY=value` of `overrides` over `base` in place (a later value for a key replaces
/// the earlier one where it stands); a bare `KEY` unsets it.
fn merge_env(base: &mut Vec<String>, overrides: impl IntoIterator<Item = String>) {
    let key = |e: &str| e.split_once('=').map_or(e, |(k, _)| k).to_string();
    for e in overrides {
        let k = key(&e);
        let pos = base.iter().position(|b| key(b) == k);
        match (e.contains('='), pos) {
            (true, Some(i)) => base[i] = e,
            (true, None) => base.push(e),
            (false, Some(i)) => {
                base.remove(i);
            }
            (false, None) => {}
        }
    }
}

/// The environment: default PATH, TERM for a terminal, HOSTNAME, then the image's, then the
/// request's (which win).
fn process_env(
    config: &cri::ContainerConfig,
    image: &ContainerDefaults,
    hostname: &str,
) -> Result<Vec<String>, OciError> {
    let mut env = vec![DEFAULT_PATH_ENV.to_string()];
    if config.tty {
        env.push("TERM=xterm".into());
    }
    merge_env(&mut env, [format!("HOSTNAME={hostname}")]);
    merge_env(&mut env, image.env().clone().unwrap_or_default());
    let mut requested = Vec::with_capacity(config.envs.len());
    for (i, kv) in config.envs.iter().enumerate() {
        if kv.key.is_empty() || kv.key.contains('=') {
            return Err(OciError::invalid(
                format!("envs[{i}].key"),
                &kv.key,
                "must be a non-empty name without '='",
            ));
        }
        requested.push(format!("{}={}", kv.key, kv.value));
    }
    merge_env(&mut env, requested);
    Ok(env)
}

/// Joins the sandbox's network, IPC and UTS namespaces and the PID namespace the request
/// names.
fn set_namespaces(
    spec: &mut Spec,
    input: &ContainerSpecInput<'_>,
    privileged: bool,
) -> Result<(), OciError> {
    let own = input
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default();
    userns::join_pod(
        spec,
        input.config,
        input.pod_userns,
        &format!("{SC}.namespace_options"),
    )?;
    let pod = namespace_options(input.sandbox_config);
    let pod_ipc = namespaces::mode(pod.ipc, "sandbox namespace_options.ipc")?;
    let pod_pid = namespaces::mode(pod.pid, "sandbox namespace_options.pid")?;
    let pid_mode = namespaces::mode(own.pid, &format!("{SC}.namespace_options.pid"))?;

    let join = |kind: &str| match input.pod_namespaces {
        PodNamespaces::Pause(0) => Err(OciError::Internal(
            "the sandbox has no running pause process to join".into(),
        )),
        PodNamespaces::Pause(pid) => Ok(Ns::Join(proc_ns(pid, kind))),
        PodNamespaces::Pinned(pinned) => {
            let path = match kind {
                "ipc" => pinned.ipc.as_ref(),
                "uts" => pinned.uts.as_ref(),
                _ => None,
            };
            path.map(|p| Ns::Join(p.clone())).ok_or_else(|| {
                OciError::Internal(format!("the pod sandbox has no {kind} namespace to join"))
            })
        }
    };
    let (net, uts) = match input.netns_path {
        Some(path) => (Ns::Join(path.to_path_buf()), join("uts")?),
        None => (Ns::Host, Ns::Host),
    };
    let ipc = match pod_ipc {
        NamespaceMode::Node => Ns::Host,
        _ => join("ipc")?,
    };
    let pid_ns = match pid_mode {
        NamespaceMode::Node => Ns::Host,
        NamespaceMode::Container => Ns::New,
        NamespaceMode::Pod => match (input.pod_namespaces, pod_pid) {
            (PodNamespaces::Pause(_), _) => join("pid")?,
            // No pause: the pod has no PID namespace to share, and its own mode says where
            // its containers' go (a client that leaves the container's options unset asks
            // for POD).
            (PodNamespaces::Pinned(_), NamespaceMode::Node) => Ns::Host,
            (PodNamespaces::Pinned(_), _) => Ns::New,
        },
        NamespaceMode::Target if input.target_pid > 0 => Ns::Join(proc_ns(input.target_pid, "pid")),
        NamespaceMode::Target => {
            return Err(OciError::invalid(
                format!("{SC}.namespace_options.target_id"),
                own.target_id.as_str(),
                "names no running container of this pod",
            ));
        }
    };
    namespaces::set(spec, LinuxNamespaceType::Network, net);
    namespaces::set(spec, LinuxNamespaceType::Uts, uts);
    namespaces::set(spec, LinuxNamespaceType::Ipc, ipc);
    namespaces::set(spec, LinuxNamespaceType::Pid, pid_ns);
    // On cgroup v2 a cgroup namespace hides the node's hierarchy; v1 and privileged
    // containers keep the host's, as containerd does.
    if input.cgroups.unified() && !privileged {
        namespaces::set(spec, LinuxNamespaceType::Cgroup, Ns::New);
    }
    Ok(())
}

/// The sandbox's id: the name of its files directory (`<root>/sandboxes/<id>`), since the
/// input carries no separate field for it.
fn sandbox_id(files: &SandboxFiles) -> String {
    files
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// An application container's spec.
pub fn container_spec(input: &ContainerSpecInput<'_>) -> Result<Spec, OciError> {
    let config = input.config;
    let lc = config.linux.clone().unwrap_or_default();
    let sc = lc.security_context.clone().unwrap_or_default();
    let sandbox_privileged = input
        .sandbox_config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .is_some_and(|s| s.privileged);
    if sc.privileged && !sandbox_privileged {
        return Err(OciError::invalid(
            format!("{SC}.privileged"),
            "true",
            "a privileged container needs a privileged sandbox",
        ));
    }
    let image = input.image.config().clone().unwrap_or_default();

    let mut spec = default_spec();
    without_default_security(&mut spec);
    let root = spec.root_mut().get_or_insert_with(Default::default);
    root.set_path(PathBuf::from("rootfs"))
        .set_readonly(sc.readonly_rootfs.then_some(true));

    let hostname = match input.sandbox_config.hostname.as_str() {
        "" => node_hostname()?,
        h => h.to_string(),
    };
    let args = process_args(config, &image)?;
    let env = process_env(config, &image, &hostname)?;
    let cwd = [
        config.working_dir.as_str(),
        image.working_dir().as_deref().unwrap_or(""),
    ]
    .into_iter()
    .find(|w| !w.is_empty())
    .unwrap_or("/")
    .to_string();
    if let Some(p) = spec.process_mut() {
        p.set_args(Some(args))
            .set_env(Some(env))
            .set_cwd(PathBuf::from(cwd))
            .set_terminal(config.tty.then_some(true))
            .set_no_new_privileges(Some(sc.no_new_privs));
    }

    mounts::apply(
        &mut spec,
        config,
        input.image_volumes,
        input.files,
        sc.readonly_rootfs,
    )?;
    security::apply_paths(&mut spec, &sc);
    devices::apply(&mut spec, &config.devices)?;
    security::apply_capabilities(
        &mut spec,
        sc.capabilities.as_ref(),
        &format!("{SC}.capabilities"),
    )?;
    if sc.privileged {
        security::apply_privileged(&mut spec);
        devices::apply_host_devices(&mut spec)?;
    }

    let name = config.metadata.as_ref().map_or("", |m| m.name.as_str());
    check_resource_classes(name, &config.annotations, &input.sandbox_config.annotations)?;
    if let Some(res) = &lc.resources {
        update_resources(&mut spec, res, input.min_oom_score_adj, input.cgroups)?;
        let adj = clamp_oom_score_adj(res.oom_score_adj, input.min_oom_score_adj)?;
        if let Some(p) = spec.process_mut() {
            p.set_oom_score_adj(Some(adj));
        }
    }
    if !input.cgroups_path.is_empty()
        && let Some(l) = spec.linux_mut()
    {
        l.set_cgroups_path(Some(PathBuf::from(input.cgroups_path)));
    }
    set_namespaces(&mut spec, input, sc.privileged)?;

    let ids = user::resolve(
        &UserRequest {
            username: &sc.run_as_username,
            uid: sc.run_as_user.map(|v| v.value),
            gid: sc.run_as_group.map(|v| v.value),
            supplemental_groups: &sc.supplemental_groups,
            merge_image_groups: sc.supplemental_groups_policy
                != cri::SupplementalGroupsPolicy::Strict as i32,
            image_user: image.user().as_deref().unwrap_or(""),
            field: SC,
        },
        input.etc,
    )?;
    if let Some(p) = spec.process_mut() {
        p.user_mut()
            .set_uid(ids.uid)
            .set_gid(ids.gid)
            .set_additional_gids(Some(ids.additional_gids));
    }

    #[allow(deprecated)]
    let choice = seccomp::choose(sc.seccomp.as_ref(), &sc.seccomp_profile_path, SC)?;
    seccomp::apply(&mut spec, &choice, sc.privileged, SC)?;

    let mut annotations = config.annotations.clone();
    annotations.extend(pod_annotations(
        &sandbox_id(input.files),
        input.sandbox_config,
    ));
    let image_name = config
        .image
        .as_ref()
        .map(|i| {
            if i.user_specified_image.is_empty() {
                i.image.clone()
            } else {
                i.user_specified_image.clone()
            }
        })
        .unwrap_or_default();
    for (k, v) in [
        ("io.kubernetes.cri.container-type", "container".to_string()),
        (
            "io.kubernetes.cri.container-name",
            config
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default(),
        ),
        ("io.kubernetes.cri.image-name", image_name),
    ] {
        annotations.insert(k.to_string(), v);
    }
    spec.set_annotations(Some(annotations));
    Ok(spec)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::HashMap;
    use std::path::Path;

    use oci_spec::runtime::Capability;

    use super::super::CgroupSupport;
    use super::super::cgroups::tests::{v1_without_hugetlb, v2};
    use super::*;
    use crate::image_config::ImageConfig;
    use crate::mount::EtcFiles;

    fn image(entrypoint: Option<&[&str]>, cmd: Option<&[&str]>) -> ContainerDefaults {
        let v = |x: Option<&[&str]>| x.map(|a| a.iter().map(|s| s.to_string()).collect());
        let mut defaults = ContainerDefaults::default();
        defaults.set_entrypoint(v(entrypoint));
        defaults.set_cmd(v(cmd));
        defaults
    }

    fn cfg(command: &[&str], args: &[&str]) -> cri::ContainerConfig {
        cri::ContainerConfig {
            command: command.iter().map(|s| s.to_string()).collect(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn command_and_args_merge_like_kubernetes() {
        let ep = Some(&["/ep", "-x"][..]);
        let cmd = Some(&["c1", "c2"][..]);
        // (command, args, image entrypoint, image cmd, expected process args)
        type Case<'a> = (
            &'a [&'a str],
            &'a [&'a str],
            Option<&'a [&'a str]>,
            Option<&'a [&'a str]>,
            &'a [&'a str],
        );
        let table: &[Case<'_>] = &[
            // neither: entrypoint + cmd
            (&[], &[], ep, cmd, &["/ep", "-x", "c1", "c2"]),
            // args only: entrypoint + args
            (&[], &["a"], ep, cmd, &["/ep", "-x", "a"]),
            // command only: command, cmd dropped
            (&["/bin/sh"], &[], ep, cmd, &["/bin/sh"]),
            // both: command + args
            (&["/bin/sh"], &["-c", "x"], ep, cmd, &["/bin/sh", "-c", "x"]),
            // no entrypoint: cmd alone, or args alone
            (&[], &[], None, cmd, &["c1", "c2"]),
            (&[], &["a"], None, cmd, &["a"]),
            // ENTRYPOINT [""] is no entrypoint
            (&[], &[], Some(&[""][..]), cmd, &["c1", "c2"]),
            // entrypoint without cmd
            (&[], &[], ep, None, &["/ep", "-x"]),
        ];
        for (command, args, ep, cmd, want) in table {
            let got = process_args(&cfg(command, args), &image(*ep, *cmd)).unwrap();
            assert_eq!(&got, want, "command={command:?} args={args:?}");
        }
        let err = process_args(&cfg(&[], &[]), &image(None, None)).unwrap_err();
        assert_eq!(err.to_string(), "command: no command specified");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn env_merges_image_then_request() {
        let mut image = ContainerDefaults::default();
        image.set_env(Some(vec![
            "PATH=/img/bin".into(),
            "A=img".into(),
            "B=img".into(),
            "A=img2".into(),
        ]));
        let mut config = cfg(&["x"], &[]);
        config.envs = vec![
            cri::KeyValue {
                key: "B".into(),
                value: "req".into(),
            },
            cri::KeyValue {
                key: "C".into(),
                value: "a=b".into(),
            },
            cri::KeyValue {
                key: "B".into(),
                value: "req2".into(),
            },
        ];
        config.tty = true;
        let env = process_env(&config, &image, "pod-host").unwrap();
        assert_eq!(
            env,
            [
                "PATH=/img/bin",
                "TERM=xterm",
                "HOSTNAME=pod-host",
                "A=img2",
                "B=req2",
                "C=a=b"
            ]
        );
        config.envs = vec![cri::KeyValue {
            key: String::new(),
            value: "x".into(),
        }];
        assert!(process_env(&config, &image, "h").is_err());

        let mut base = vec!["A=1".to_string(), "B=2".to_string()];
        merge_env(&mut base, ["A".to_string(), "C=3".to_string()]);
        assert_eq!(base, ["B=2", "C=3"]);
    }

    struct Fixture {
        _tmp: tempfile::TempDir,
        files: SandboxFiles,
        sandbox: cri::PodSandboxConfig,
        image: ImageConfig,
        etc: EtcFiles,
        cgroups: CgroupSupport,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sandboxes").join("sb1");
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["hostname", "hosts", "resolv.conf"] {
            std::fs::write(dir.join(f), "x\n").unwrap();
        }
        let shm = tmp.path().join("shm");
        std::fs::create_dir(&shm).unwrap();
        let files = SandboxFiles {
            hostname: dir.join("hostname"),
            hosts: dir.join("hosts"),
            resolv_conf: dir.join("resolv.conf"),
            dir,
            shm: Some(shm),
        };
        let sandbox = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "pod".into(),
                uid: "uid-1".into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            hostname: "pod-host".into(),
            ..Default::default()
        };
        let mut defaults = ContainerDefaults::default();
        defaults.set_cmd(Some(vec!["sh".into()]));
        defaults.set_user(Some("app".into()));
        defaults.set_working_dir(Some("/srv".into()));
        defaults.set_env(Some(vec!["PATH=/bin".into()]));
        let mut image = ImageConfig::default();
        image.set_config(Some(defaults));
        let etc = EtcFiles {
            passwd: "root:x:0:0::/:/bin/sh\napp:x:1000:1000::/:/bin/sh\n".into(),
            group: "root:x:0:\napp:x:1000:\nwheel:x:10:app\n".into(),
        };
        Fixture {
            _tmp: tmp,
            files,
            sandbox,
            image,
            etc,
            cgroups: v1_without_hugetlb(),
        }
    }

    /// The fixture's inputs for `config` in a pod whose namespaces are `pod_namespaces`.
    fn input<'a>(
        f: &'a Fixture,
        config: &'a cri::ContainerConfig,
        pod_namespaces: PodNamespaces<'a>,
        netns: Option<&'a Path>,
    ) -> ContainerSpecInput<'a> {
        ContainerSpecInput {
            id: "c1",
            config,
            sandbox_config: &f.sandbox,
            image: &f.image,
            etc: &f.etc,
            pod_namespaces,
            target_pid: 0,
            netns_path: netns,
            files: &f.files,
            image_volumes: &[],
            cgroups_path: "/kubepods/c1",
            min_oom_score_adj: -500,
            cgroups: &f.cgroups,
            pod_userns: None,
        }
    }

    fn build(
        f: &Fixture,
        config: &cri::ContainerConfig,
        netns: Option<&Path>,
    ) -> Result<Spec, OciError> {
        container_spec(&input(f, config, PodNamespaces::Pause(4242), netns))
    }

    fn ns_map(spec: &Spec) -> HashMap<String, Option<PathBuf>> {
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

    fn with_sc(sc: cri::LinuxContainerSecurityContext) -> cri::ContainerConfig {
        cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: "sha256:abc".into(),
                user_specified_image: "busybox:1".into(),
                ..Default::default()
            }),
            linux: Some(cri::LinuxContainerConfig {
                resources: None,
                security_context: Some(sc),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_default_container() {
        let f = fixture();
        let mut config = with_sc(Default::default());
        config.annotations = HashMap::from([("user/note".into(), "hi".into())]);
        let spec = build(&f, &config, Some(Path::new("/run/netns/cni-x"))).unwrap();
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["process"]["args"], serde_json::json!(["sh"]));
        assert_eq!(json["process"]["cwd"], "/srv");
        assert_eq!(json["process"]["noNewPrivileges"], false);
        assert!(json["process"].get("terminal").is_none());
        assert_eq!(json["process"]["user"]["uid"], 1000);
        assert_eq!(json["process"]["user"]["gid"], 1000);
        assert_eq!(
            json["process"]["user"]["additionalGids"],
            serde_json::json!([10, 1000])
        );
        assert!(json["process"].get("oomScoreAdj").is_none());
        assert!(json["root"].get("readonly").is_none());
        assert!(
            json.get("hostname").is_none(),
            "the UTS namespace is the sandbox's"
        );
        assert!(json["linux"].get("seccomp").is_none());
        assert_eq!(json["linux"]["maskedPaths"], serde_json::json!([]));
        assert_eq!(json["linux"]["cgroupsPath"], "/kubepods/c1");
        let env = json["process"]["env"].as_array().unwrap();
        assert!(env.contains(&serde_json::json!("HOSTNAME=pod-host")));

        let ns = ns_map(&spec);
        assert_eq!(ns["net"], Some(PathBuf::from("/run/netns/cni-x")));
        assert_eq!(ns["ipc"], Some(PathBuf::from("/proc/4242/ns/ipc")));
        assert_eq!(ns["uts"], Some(PathBuf::from("/proc/4242/ns/uts")));
        assert_eq!(ns["pid"], Some(PathBuf::from("/proc/4242/ns/pid")));
        assert_eq!(ns["mnt"], None);

        let a = &json["annotations"];
        assert_eq!(a["io.kubernetes.cri.container-type"], "container");
        assert_eq!(a["io.kubernetes.cri.sandbox-id"], "sb1");
        assert_eq!(a["io.kubernetes.cri.sandbox-name"], "pod");
        assert_eq!(a["io.kubernetes.cri.sandbox-namespace"], "ns");
        assert_eq!(a["io.kubernetes.cri.sandbox-uid"], "uid-1");
        assert_eq!(a["io.kubernetes.cri.container-name"], "app");
        assert_eq!(a["io.kubernetes.cri.image-name"], "busybox:1");
        assert_eq!(a["user/note"], "hi");

        let dests: Vec<_> = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m.destination().to_string_lossy().into_owned())
            .collect();
        for d in [
            "/etc/hostname",
            "/etc/hosts",
            "/etc/resolv.conf",
            "/dev/shm",
            "/proc",
        ] {
            assert!(dests.iter().any(|x| x == d), "{d}");
        }
    }

    #[test]
    fn namespace_modes() {
        let f = fixture();
        let sc = |pid: NamespaceMode| cri::LinuxContainerSecurityContext {
            namespace_options: Some(cri::NamespaceOption {
                pid: pid as i32,
                ..Default::default()
            }),
            ..Default::default()
        };
        let spec = build(
            &f,
            &with_sc(sc(NamespaceMode::Container)),
            Some(Path::new("/n")),
        )
        .unwrap();
        assert_eq!(ns_map(&spec)["pid"], None);
        let spec = build(&f, &with_sc(sc(NamespaceMode::Node)), Some(Path::new("/n"))).unwrap();
        assert!(!ns_map(&spec).contains_key("pid"));
        // TARGET joins the target container's, not the pause's; no running target is refused.
        let mut target = with_sc(sc(NamespaceMode::Target));
        target
            .linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .namespace_options
            .as_mut()
            .unwrap()
            .target_id = "c0".into();
        let input = |target_pid| ContainerSpecInput {
            target_pid,
            ..input(
                &f,
                &target,
                PodNamespaces::Pause(4242),
                Some(Path::new("/n")),
            )
        };
        let spec = container_spec(&input(4343)).unwrap();
        assert_eq!(
            ns_map(&spec)["pid"],
            Some(PathBuf::from("/proc/4343/ns/pid"))
        );
        let err = container_spec(&input(0)).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");

        // Host network: no net or uts entry; host IPC follows the sandbox's mode.
        let mut f = fixture();
        f.sandbox.linux = Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: NamespaceMode::Node as i32,
                    ipc: NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        f.files.shm = None;
        let spec = build(&f, &with_sc(Default::default()), None).unwrap();
        let ns = ns_map(&spec);
        for t in ["net", "uts", "ipc"] {
            assert!(!ns.contains_key(t), "{t}");
        }
        let shm = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.destination() == Path::new("/dev/shm"))
            .unwrap();
        assert_eq!(shm.source().as_deref(), Some(Path::new("/dev/shm")));
    }

    #[test]
    fn without_a_pause_the_pinned_namespaces_are_joined() {
        use crate::sandbox::namespaces::PinnedNamespaces;
        let f = fixture();
        let pinned = PinnedNamespaces::paths(Path::new("/s/sb1"), true, true);
        // Options left unset ask for POD: with no pod PID namespace, a new one.
        let config = with_sc(Default::default());
        let pod = PodNamespaces::Pinned(&pinned);
        let ns = ns_map(&container_spec(&input(&f, &config, pod, Some(Path::new("/n")))).unwrap());
        assert_eq!(ns["ipc"], Some(PathBuf::from("/s/sb1/ipc")));
        assert_eq!(ns["uts"], Some(PathBuf::from("/s/sb1/uts")));
        assert_eq!(ns["net"], Some(PathBuf::from("/n")));
        assert_eq!(ns["pid"], None);
    }

    #[test]
    fn joining_needs_a_pause_process() {
        let f = fixture();
        let config = with_sc(Default::default());
        let pod = PodNamespaces::Pause(0);
        let err = container_spec(&input(&f, &config, pod, Some(Path::new("/n")))).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Internal);
    }

    #[test]
    fn security_context_options() {
        let f = fixture();
        let sc = cri::LinuxContainerSecurityContext {
            capabilities: Some(cri::Capability {
                add_capabilities: vec!["SYS_ADMIN".into()],
                drop_capabilities: vec!["CHOWN".into()],
                add_ambient_capabilities: vec![],
            }),
            readonly_rootfs: true,
            no_new_privs: true,
            masked_paths: vec!["/bin/ls".into()],
            readonly_paths: vec!["/tmp".into()],
            seccomp: Some(cri::SecurityProfile::default()),
            run_as_user: Some(cri::Int64Value { value: 0 }),
            supplemental_groups: vec![1234],
            ..Default::default()
        };
        let mut config = with_sc(sc);
        config.tty = true;
        config.working_dir = "/w".into();
        let spec = build(&f, &config, Some(Path::new("/n"))).unwrap();
        let p = spec.process().as_ref().unwrap();
        assert_eq!(p.terminal(), Some(true));
        assert_eq!(p.no_new_privileges(), Some(true));
        assert_eq!(p.cwd(), Path::new("/w"));
        assert_eq!((p.user().uid(), p.user().gid()), (0, 0));
        assert_eq!(p.user().additional_gids().as_deref(), Some(&[0, 1234][..]));
        assert_eq!(spec.root().as_ref().unwrap().readonly(), Some(true));
        let caps = security::bounding(&spec);
        assert!(caps.contains(&Capability::SysAdmin) && !caps.contains(&Capability::Chown));
        let l = spec.linux().as_ref().unwrap();
        assert_eq!(
            l.masked_paths().as_deref(),
            Some(&["/bin/ls".to_string()][..])
        );
        assert_eq!(
            l.readonly_paths().as_deref(),
            Some(&["/tmp".to_string()][..])
        );
        // RuntimeDefault widened by CAP_SYS_ADMIN.
        let sec = l.seccomp().as_ref().unwrap();
        assert!(
            sec.syscalls()
                .as_ref()
                .unwrap()
                .iter()
                .any(|r| r.names().iter().any(|n| n == "mount"))
        );
        let hostname = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.destination() == Path::new("/etc/hostname"))
            .unwrap();
        assert!(
            hostname
                .options()
                .as_ref()
                .unwrap()
                .contains(&"ro".to_string())
        );
    }

    #[test]
    fn privileged_needs_a_privileged_sandbox() {
        let mut f = fixture();
        let sc = cri::LinuxContainerSecurityContext {
            privileged: true,
            seccomp: Some(cri::SecurityProfile::default()),
            masked_paths: vec!["/proc/kcore".into()],
            ..Default::default()
        };
        let err = build(&f, &with_sc(sc.clone()), Some(Path::new("/n"))).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.to_string().contains("privileged sandbox"), "{err}");

        f.sandbox.linux = Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                privileged: true,
                ..Default::default()
            }),
            ..Default::default()
        });
        let spec = build(&f, &with_sc(sc), Some(Path::new("/n"))).unwrap();
        let l = spec.linux().as_ref().unwrap();
        assert!(l.seccomp().is_none());
        assert!(l.masked_paths().is_none() && l.readonly_paths().is_none());
        assert!(security::bounding(&spec).contains(&Capability::SysAdmin));
        assert!(
            l.devices()
                .as_ref()
                .unwrap()
                .iter()
                .any(|d| d.path() == Path::new("/dev/null"))
        );
        let rules = l.resources().as_ref().unwrap().devices().as_ref().unwrap();
        assert_eq!(rules.len(), 1);
        assert!(rules[0].allow());
        assert!(!ns_map(&spec).contains_key("cgroup"));
        let sys = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.destination() == Path::new("/sys"))
            .unwrap();
        assert!(sys.options().as_ref().unwrap().contains(&"rw".to_string()));
    }

    #[test]
    fn resources_and_oom_score_adj() {
        let f = fixture();
        let mut config = with_sc(Default::default());
        config.linux.as_mut().unwrap().resources = Some(cri::LinuxContainerResources {
            cpu_shares: 256,
            memory_limit_in_bytes: 16 << 20,
            oom_score_adj: -997,
            ..Default::default()
        });
        let spec = build(&f, &config, Some(Path::new("/n"))).unwrap();
        assert_eq!(spec.process().as_ref().unwrap().oom_score_adj(), Some(-500));
        let r = spec.linux().as_ref().unwrap().resources().as_ref().unwrap();
        assert_eq!(r.cpu().as_ref().unwrap().shares(), Some(256));
        assert_eq!(r.memory().unwrap().limit(), Some(16 << 20));
        assert!(
            r.devices().as_ref().unwrap().len() > 1,
            "default device rules kept"
        );
        let back = super::super::cri_resources(&spec).unwrap();
        assert_eq!(back.oom_score_adj, -500);
        assert_eq!(back.cpu_shares, 256);

        config.linux.as_mut().unwrap().resources = Some(cri::LinuxContainerResources {
            cpuset_cpus: "abc".into(),
            ..Default::default()
        });
        let err = build(&f, &config, Some(Path::new("/n"))).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("linux.resources.cpuset_cpus \"abc\""),
            "{err}"
        );
    }

    #[test]
    fn a_cgroup_namespace_only_on_a_unified_node() {
        let mut f = fixture();
        let config = with_sc(Default::default());
        let spec = build(&f, &config, Some(Path::new("/n"))).unwrap();
        assert!(!ns_map(&spec).contains_key("cgroup"), "v1: the host's");
        f.cgroups = v2();
        let spec = build(&f, &config, Some(Path::new("/n"))).unwrap();
        assert_eq!(ns_map(&spec)["cgroup"], None, "v2: a new one");
    }

    #[test]
    fn resource_class_annotations_refuse_the_container() {
        let mut f = fixture();
        f.sandbox.annotations =
            HashMap::from([("rdt.resources.beta.kubernetes.io/pod".into(), "gold".into())]);
        let err = build(&f, &with_sc(Default::default()), Some(Path::new("/n"))).unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert!(
            err.to_string().contains("RDT classes are not enabled"),
            "{err}"
        );
    }

    #[test]
    fn user_errors_and_overrides() {
        let f = fixture();
        let sc = cri::LinuxContainerSecurityContext {
            run_as_username: "ghost".into(),
            ..Default::default()
        };
        let err = build(&f, &with_sc(sc), Some(Path::new("/n"))).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        let sc = cri::LinuxContainerSecurityContext {
            run_as_group: Some(cri::Int64Value { value: 5 }),
            ..Default::default()
        };
        assert!(build(&f, &with_sc(sc), Some(Path::new("/n"))).is_err());
        let sc = cri::LinuxContainerSecurityContext {
            run_as_user: Some(cri::Int64Value { value: 1000 }),
            run_as_group: Some(cri::Int64Value { value: 2000 }),
            supplemental_groups_policy: cri::SupplementalGroupsPolicy::Strict as i32,
            ..Default::default()
        };
        let spec = build(&f, &with_sc(sc), Some(Path::new("/n"))).unwrap();
        let u = spec.process().as_ref().unwrap().user();
        assert_eq!((u.uid(), u.gid()), (1000, 2000));
        assert_eq!(u.additional_gids().as_deref(), Some(&[2000][..]));
    }

    #[test]
    fn the_spec_survives_the_any_round_trip() {
        let f = fixture();
        let spec = build(&f, &with_sc(Default::default()), Some(Path::new("/n"))).unwrap();
        let any = super::super::to_any(&spec).unwrap();
        assert_eq!(super::super::from_any(&any).unwrap(), spec);
    }
}
