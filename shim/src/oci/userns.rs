//! User namespaces in specs (`hostUsers: false`): the CRI `UserNamespace` checked and turned
//! into mappings, the pod's pinned user namespace joined with them, and which bind mounts
//! are seen through an idmapped mount (the CRI mounts that carry the pod's mappings, and the
//! sandbox's /etc files, as containerd 2.x).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use ferrolet_proto::cri::{self, NamespaceMode};
use oci_spec::runtime::{LinuxIdMapping, LinuxIdMappingBuilder, LinuxNamespaceType, Spec};

use super::OciError;
use super::namespaces::{self, Ns};
use crate::sandbox::files::SandboxFiles;
use crate::sandbox::userns::{IdMap, PinnedUserns};

/// A pod's uid and gid mappings.
pub type Mappings = (Vec<IdMap>, Vec<IdMap>);

fn maps(raw: &[cri::IdMapping], field: &str) -> Result<Vec<IdMap>, OciError> {
    if raw.is_empty() {
        return Err(OciError::invalid_field(
            field,
            "user namespace mode POD needs at least one mapping",
        ));
    }
    let mut out = Vec::with_capacity(raw.len());
    for (i, m) in raw.iter().enumerate() {
        let bad = |why: &str| {
            OciError::invalid(
                format!("{field}[{i}]"),
                format!("{} {} {}", m.container_id, m.host_id, m.length),
                why,
            )
        };
        if m.length == 0 {
            return Err(bad("length must not be zero"));
        }
        if m.host_id.checked_add(m.length - 1).is_none()
            || m.container_id.checked_add(m.length - 1).is_none()
        {
            return Err(bad("the range goes past 2^32"));
        }
        if m.host_id == 0 {
            return Err(bad("maps the host's root: the pod would not be isolated"));
        }
        out.push(IdMap {
            container_id: m.container_id,
            host_id: m.host_id,
            size: m.length,
        });
    }
    if IdMap::to_host(&out, 0).is_none() {
        return Err(OciError::invalid_field(
            field,
            "id 0 (the pod's root) must be mapped",
        ));
    }
    Ok(out)
}

/// The user namespace `opts` asks for: `None` for the node's (NODE, or unset), the mappings
/// for POD; other modes are refused.
pub(crate) fn requested(
    opts: Option<&cri::NamespaceOption>,
    field: &str,
) -> Result<Option<Mappings>, OciError> {
    let Some(userns) = opts.and_then(|o| o.userns_options.as_ref()) else {
        return Ok(None);
    };
    let field = format!("{field}.userns_options");
    match namespaces::mode(userns.mode, &format!("{field}.mode"))? {
        NamespaceMode::Node => Ok(None),
        NamespaceMode::Pod => Ok(Some((
            maps(&userns.uids, &format!("{field}.uids"))?,
            maps(&userns.gids, &format!("{field}.gids"))?,
        ))),
        other => Err(OciError::invalid(
            format!("{field}.mode"),
            other.as_str_name(),
            "unsupported user namespace mode (NODE or POD)",
        )),
    }
}

fn oci_maps(maps: &[IdMap]) -> Vec<LinuxIdMapping> {
    maps.iter()
        .filter_map(|m| {
            LinuxIdMappingBuilder::default()
                .container_id(m.container_id)
                .host_id(m.host_id)
                .size(m.size)
                .build()
                .ok()
        })
        .collect()
}

/// Puts `ns` (a new user namespace, or the pod's to join) and the mappings in the spec.
pub(crate) fn set(spec: &mut Spec, ns: Ns, mappings: &Mappings) {
    namespaces::set(spec, LinuxNamespaceType::User, ns);
    if let Some(l) = spec.linux_mut() {
        l.set_uid_mappings(Some(oci_maps(&mappings.0)))
            .set_gid_mappings(Some(oci_maps(&mappings.1)));
    }
}

/// A container of a user-namespaced pod: its own request must be the pod's (or say nothing),
/// and so must each mount's mappings; then it joins the pod's user namespace.
pub(crate) fn join_pod(
    spec: &mut Spec,
    config: &cri::ContainerConfig,
    pod: Option<&PinnedUserns>,
    field: &str,
) -> Result<(), OciError> {
    let own_opts = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref());
    let own = requested(own_opts, field)?;
    let asked_pod = own_opts
        .and_then(|o| o.userns_options.as_ref())
        .is_some_and(|u| u.mode == NamespaceMode::Pod as i32);
    let Some(pod) = pod else {
        if asked_pod {
            return Err(OciError::invalid_field(
                format!("{field}.userns_options"),
                "the pod sandbox has no user namespace",
            ));
        }
        for (i, m) in config.mounts.iter().enumerate() {
            if !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty() {
                return Err(OciError::invalid_field(
                    format!("mounts[{i}].uid_mappings"),
                    "id-mapped mounts need a pod with a user namespace",
                ));
            }
        }
        return Ok(());
    };
    let mappings: Mappings = (pod.uids.clone(), pod.gids.clone());
    let explicit_node = own_opts
        .and_then(|o| o.userns_options.as_ref())
        .is_some_and(|u| u.mode == NamespaceMode::Node as i32);
    if explicit_node || own.as_ref().is_some_and(|o| *o != mappings) {
        return Err(OciError::invalid_field(
            format!("{field}.userns_options"),
            "differs from the pod sandbox's user namespace (a pod's containers share one)",
        ));
    }
    for (i, m) in config.mounts.iter().enumerate() {
        if m.uid_mappings.is_empty() && m.gid_mappings.is_empty() {
            continue;
        }
        let f = format!("mounts[{i}]");
        let theirs = (
            maps(&m.uid_mappings, &format!("{f}.uid_mappings"))?,
            maps(&m.gid_mappings, &format!("{f}.gid_mappings"))?,
        );
        if theirs != mappings {
            return Err(OciError::invalid_field(
                format!("{f}.uid_mappings"),
                "an idmapped mount must use the pod's user namespace mappings",
            ));
        }
    }
    set(spec, Ns::Join(pod.path.clone()), &mappings);
    Ok(())
}

/// One bind mount to be seen through the pod's idmapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdmappedBind {
    /// The host path the request named.
    pub source: PathBuf,
    /// Where the idmapped mount of it goes (the spec's source from now on).
    pub target: PathBuf,
}

/// Rewrites the spec's idmapped binds to come from `<dir>/<n>` and says what to mount there:
/// the request's mounts that carry mappings, and the sandbox's hostname, hosts and
/// resolv.conf (not /dev/shm, a tmpfs shared with the pod, as containerd leaves it).
pub fn idmap_binds(
    spec: &mut Spec,
    config: &cri::ContainerConfig,
    files: &SandboxFiles,
    dir: &Path,
) -> Vec<IdmappedBind> {
    let sandbox_files: HashSet<PathBuf> = [&files.hostname, &files.hosts, &files.resolv_conf]
        .into_iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    let mapped: HashSet<PathBuf> = config
        .mounts
        .iter()
        .filter(|m| !m.uid_mappings.is_empty())
        .map(|m| clean(&m.container_path))
        .collect();
    let mut out = Vec::new();
    let Some(mounts) = spec.mounts_mut().as_mut() else {
        return out;
    };
    for m in mounts.iter_mut() {
        if m.typ().as_deref() != Some("bind") {
            continue;
        }
        let Some(source) = m.source().clone() else {
            continue;
        };
        let dest = clean(&m.destination().to_string_lossy());
        if !(mapped.contains(&dest) || sandbox_files.contains(&source)) {
            continue;
        }
        let target = dir.join(out.len().to_string());
        m.set_source(Some(target.clone()));
        out.push(IdmappedBind { source, target });
    }
    out
}

fn clean(path: &str) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in Path::new(path).components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::defaults::default_spec;
    use super::*;

    fn idm(c: u32, h: u32, l: u32) -> cri::IdMapping {
        cri::IdMapping {
            container_id: c,
            host_id: h,
            length: l,
        }
    }

    fn opts(mode: NamespaceMode, m: Vec<cri::IdMapping>) -> cri::NamespaceOption {
        cri::NamespaceOption {
            userns_options: Some(cri::UserNamespace {
                mode: mode as i32,
                uids: m.clone(),
                gids: m,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_mode_needs_sane_mappings() {
        assert_eq!(requested(None, "x").unwrap(), None);
        assert_eq!(
            requested(Some(&opts(NamespaceMode::Node, vec![])), "x").unwrap(),
            None
        );
        let got = requested(
            Some(&opts(NamespaceMode::Pod, vec![idm(0, 65536, 65536)])),
            "x",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            got.0,
            [IdMap {
                container_id: 0,
                host_id: 65536,
                size: 65536
            }]
        );
        for (bad, why) in [
            (vec![], "at least one mapping"),
            (vec![idm(0, 65536, 0)], "zero"),
            (vec![idm(0, u32::MAX, 2)], "2^32"),
            (vec![idm(0, 0, 65536)], "host's root"),
            (vec![idm(1, 65536, 10)], "must be mapped"),
        ] {
            let err = requested(Some(&opts(NamespaceMode::Pod, bad)), "x").unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(err.to_string().contains(why), "{err}");
        }
        let err = requested(Some(&opts(NamespaceMode::Container, vec![])), "x").unwrap_err();
        assert!(
            err.to_string().contains("unsupported user namespace mode"),
            "{err}"
        );
    }

    fn pod() -> PinnedUserns {
        let m = vec![IdMap {
            container_id: 0,
            host_id: 131072,
            size: 65536,
        }];
        PinnedUserns {
            path: "/s/sb/user".into(),
            netns: None,
            uids: m.clone(),
            gids: m,
        }
    }

    fn config(
        userns: Option<cri::NamespaceOption>,
        mounts: Vec<cri::Mount>,
    ) -> cri::ContainerConfig {
        cri::ContainerConfig {
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    namespace_options: userns,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            mounts,
            ..Default::default()
        }
    }

    #[test]
    fn containers_join_the_pods_user_namespace_with_its_mappings() {
        let same = opts(NamespaceMode::Pod, vec![idm(0, 131072, 65536)]);
        let mut spec = default_spec();
        join_pod(
            &mut spec,
            &config(Some(same.clone()), vec![]),
            Some(&pod()),
            "sc",
        )
        .unwrap();
        let linux = spec.linux().as_ref().unwrap();
        let user = linux
            .namespaces()
            .as_ref()
            .unwrap()
            .iter()
            .find(|n| n.typ() == LinuxNamespaceType::User)
            .unwrap();
        assert_eq!(user.path().as_deref(), Some(Path::new("/s/sb/user")));
        let uid = &linux.uid_mappings().as_ref().unwrap()[0];
        assert_eq!(
            (uid.container_id(), uid.host_id(), uid.size()),
            (0, 131072, 65536)
        );
        // Unset is the pod's too (a client that leaves it out).
        join_pod(
            &mut default_spec(),
            &config(None, vec![]),
            Some(&pod()),
            "sc",
        )
        .unwrap();
        // Another mapping, or NODE, is refused.
        let other = opts(NamespaceMode::Pod, vec![idm(0, 196608, 65536)]);
        for o in [other, opts(NamespaceMode::Node, vec![])] {
            let err = join_pod(
                &mut default_spec(),
                &config(Some(o), vec![]),
                Some(&pod()),
                "sc",
            )
            .unwrap_err();
            assert!(
                err.to_string().contains("differs from the pod sandbox"),
                "{err}"
            );
        }
        // POD without a user-namespaced sandbox, or a mapped mount there, is refused.
        let err =
            join_pod(&mut default_spec(), &config(Some(same), vec![]), None, "sc").unwrap_err();
        assert!(err.to_string().contains("has no user namespace"), "{err}");
        let mount = cri::Mount {
            container_path: "/data".into(),
            host_path: "/h".into(),
            uid_mappings: vec![idm(0, 196608, 65536)],
            gid_mappings: vec![idm(0, 196608, 65536)],
            ..Default::default()
        };
        let err = join_pod(
            &mut default_spec(),
            &config(None, vec![mount.clone()]),
            None,
            "sc",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("need a pod with a user namespace"),
            "{err}"
        );
        let err = join_pod(
            &mut default_spec(),
            &config(None, vec![mount]),
            Some(&pod()),
            "sc",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("pod's user namespace mappings"),
            "{err}"
        );
    }

    #[test]
    fn mapped_mounts_and_sandbox_files_are_idmapped() {
        let d = tempfile::tempdir().unwrap();
        for f in ["hostname", "hosts", "resolv.conf"] {
            std::fs::write(d.path().join(f), "x").unwrap();
        }
        let files = SandboxFiles {
            dir: d.path().to_path_buf(),
            hostname: d.path().join("hostname"),
            hosts: d.path().join("hosts"),
            resolv_conf: d.path().join("resolv.conf"),
            shm: None,
        };
        let m = vec![idm(0, 131072, 65536)];
        let mounted = cri::Mount {
            container_path: "/data/".into(),
            host_path: "/vol/a".into(),
            uid_mappings: m.clone(),
            gid_mappings: m,
            ..Default::default()
        };
        let plain = cri::Mount {
            container_path: "/plain".into(),
            host_path: "/vol/b".into(),
            ..Default::default()
        };
        let mut spec = default_spec();
        let bind = |dest: &str, src: &Path| {
            let mut m = oci_spec::runtime::Mount::default();
            m.set_destination(dest.into())
                .set_typ(Some("bind".into()))
                .set_source(Some(src.to_path_buf()));
            m
        };
        let mut mounts = spec.mounts().clone().unwrap();
        mounts.extend([
            bind("/data", Path::new("/vol/a")),
            bind("/plain", Path::new("/vol/b")),
            bind("/etc/hosts", &std::fs::canonicalize(&files.hosts).unwrap()),
        ]);
        spec.set_mounts(Some(mounts));
        let cfg = config(None, vec![mounted, plain]);
        let got = idmap_binds(&mut spec, &cfg, &files, Path::new("/st/idmap"));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].source, PathBuf::from("/vol/a"));
        assert_eq!(got[0].target, PathBuf::from("/st/idmap/0"));
        assert_eq!(got[1].target, PathBuf::from("/st/idmap/1"));
        let sources: Vec<_> = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .filter_map(|m| m.source().clone())
            .collect();
        assert!(sources.contains(&PathBuf::from("/vol/b")));
        assert!(!sources.contains(&PathBuf::from("/vol/a")));
    }
}
