#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn pod(uid: &str, host_users: Option<bool>) -> Pod {
    let mut p = Pod::default();
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some(format!("p-{uid}"));
    p.metadata.namespace = Some("default".into());
    p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
        host_users,
        ..Default::default()
    });
    p
}

fn status(userns: bool) -> cri::StatusResponse {
    cri::StatusResponse {
        runtime_handlers: vec![cri::RuntimeHandler {
            name: String::new(),
            features: Some(cri::RuntimeHandlerFeatures {
                recursive_read_only_mounts: false,
                user_namespaces: userns,
            }),
        }],
        ..Default::default()
    }
}

const L: u32 = 65536;

fn manager(root: &Path, slots: u32) -> UsernsManager {
    let m = UsernsManager::with_range(root, true, None, 1, (L, slots * L)).unwrap();
    m.observe_status(&status(true));
    m
}

fn first_host_id(u: &cri::UserNamespace) -> u32 {
    assert_eq!(u.mode, cri::NamespaceMode::Pod as i32);
    assert_eq!(u.uids, u.gids);
    assert_eq!(u.uids[0].container_id, 0);
    assert_eq!(u.uids[0].length, L);
    u.uids[0].host_id
}

#[test]
fn pods_get_disjoint_ranges_kept_in_their_dir_and_read_back_after_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), 4);
    let a = first_host_id(&m.mappings(&pod("a", Some(false)), "").unwrap().unwrap());
    let b = first_host_id(&m.mappings(&pod("b", Some(false)), "").unwrap().unwrap());
    assert_ne!(a, b);
    assert_eq!((a % L, b % L), (0, 0));
    // The same pod asks again: the same range.
    let again = first_host_id(&m.mappings(&pod("a", Some(false)), "").unwrap().unwrap());
    assert_eq!(again, a);
    let file = root.path().join("pods/a/userns");
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains(&format!("\"hostId\":{a}"))
    );
    // A new manager (a restart) finds both and hands out neither range again.
    let m2 = manager(root.path(), 4);
    assert_eq!(
        first_host_id(&m2.mappings(&pod("b", Some(false)), "").unwrap().unwrap()),
        b
    );
    let c = first_host_id(&m2.mappings(&pod("c", Some(false)), "").unwrap().unwrap());
    assert!(c != a && c != b);
}

#[test]
fn release_frees_the_range_and_the_file() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), 1);
    let a = first_host_id(&m.mappings(&pod("a", Some(false)), "").unwrap().unwrap());
    let err = m.mappings(&pod("b", Some(false)), "").unwrap_err();
    assert!(matches!(err, UsernsError::Exhausted), "{err}");
    assert!(
        !root.path().join("pods/b/userns").exists(),
        "nothing written on failure"
    );
    m.release("a");
    assert!(!root.path().join("pods/a/userns").exists());
    let b = first_host_id(&m.mappings(&pod("b", Some(false)), "").unwrap().unwrap());
    assert_eq!(a, b);
}

#[test]
fn orphans_are_released_on_disk_and_in_memory() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), 3);
    m.mappings(&pod("a", Some(false)), "").unwrap();
    m.mappings(&pod("b", Some(false)), "").unwrap();
    // a's dir is still there but no source wants it; b's dir is gone.
    std::fs::remove_dir_all(root.path().join("pods/b")).unwrap();
    m.cleanup_orphans(|_| false, &["a".to_string()]);
    assert!(m.lock().pods().is_empty());
    assert!(!root.path().join("pods/a/userns").exists());
}

#[test]
fn node_mode_gate_and_runtime_support_as_go() {
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), 2);
    for host_users in [None, Some(true)] {
        let u = m.mappings(&pod("n", host_users), "").unwrap().unwrap();
        assert_eq!(u.mode, cri::NamespaceMode::Node as i32);
    }
    let err = m.mappings(&pod("x", Some(false)), "kata").unwrap_err();
    assert_eq!(
        err.to_string(),
        "can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces: the handler \"kata\" is not known"
    );
    m.observe_status(&status(false));
    let err = m.mappings(&pod("x", Some(false)), "").unwrap_err();
    assert_eq!(
        err.to_string(),
        "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
    );
    let off = UsernsManager::with_range(root.path(), false, None, 1, (L, L)).unwrap();
    assert_eq!(off.mappings(&pod("n", None), "").unwrap(), None);
    let err = off.mappings(&pod("n", Some(true)), "").unwrap_err();
    assert_eq!(
        err.to_string(),
        "the feature gate \"UserNamespacesSupport\" is disabled: can't set spec.HostUsers"
    );
}

#[test]
fn start_up_checks_are_gos() {
    let root = tempfile::tempdir().unwrap();
    let make = |ids: Option<i64>, range: (u32, u32), max_pods: u32| {
        UsernsManager::with_range(root.path(), true, ids, max_pods, range)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert!(make(Some(1000), (L, 10 * L), 1).contains("must be a positive multiple of 65536"));
    assert!(make(None, (L + 1, 10 * L), 1).contains("is not a multiple of"));
    assert!(make(Some(2 * L as i64), (2 * L, L), 1).contains("is not a multiple of"));
    assert!(make(None, (0, 10 * L), 1).contains("must be greater or equal to 65536"));
    assert!(make(None, (L, 10 * L), 11).contains("not enough to support 11 pods"));
    assert_eq!(make(None, (L, 10 * L), 10), "");
    // A file that is not ours stops the start, as in Go.
    std::fs::create_dir_all(root.path().join("pods/z")).unwrap();
    std::fs::write(root.path().join("pods/z/userns"), "{").unwrap();
    assert!(make(None, (L, 10 * L), 1).contains("invalid user namespace mappings file"));
}

#[test]
fn containers_and_mounts_carry_the_pods_mappings() {
    let u = cri::UserNamespace {
        mode: cri::NamespaceMode::Pod as i32,
        uids: vec![cri::IdMapping {
            host_id: 131072,
            container_id: 0,
            length: L,
        }],
        gids: vec![cri::IdMapping {
            host_id: 131072,
            container_id: 0,
            length: L,
        }],
    };
    let mut config = cri::ContainerConfig {
        linux: Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(cri::NamespaceOption::default()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        mounts: vec![cri::Mount {
            container_path: "/data".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    apply_to_container(&mut config, Some(&u));
    let ns = config
        .linux
        .as_ref()
        .unwrap()
        .security_context
        .as_ref()
        .unwrap()
        .namespace_options
        .as_ref()
        .unwrap();
    assert_eq!(ns.userns_options.as_ref(), Some(&u));
    assert_eq!(config.mounts[0].uid_mappings, u.uids);
    assert_eq!(config.mounts[0].gid_mappings, u.gids);
    let mut sandbox = cri::PodSandboxConfig {
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption::default()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    apply_to_sandbox(&mut sandbox, Some(u.clone()));
    assert_eq!(of_sandbox(&sandbox), Some(&u));
}
