#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::config::Flags;
use clap::Parser;
use std::io::Write;

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn load(yaml: &str, args: &[&str]) -> Result<(Config, Vec<String>), ConfigError> {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(format!("{HEAD}{yaml}").as_bytes()).unwrap();
    let path = f.path().to_str().unwrap().to_string();
    let mut all = vec!["ferrolet", "--hostname-override=node-a", "--config", &path];
    all.extend_from_slice(args);
    Config::load(&Flags::try_parse_from(all).unwrap())
}

fn loaded(yaml: &str, args: &[&str]) -> Config {
    let (c, warnings) = load(yaml, args).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    c
}

/// The refusal as Go's kubelet words it: `invalid configuration: <field> <reason>` for
/// validation errors (the reason names the field itself when Go's sentence does).
fn go_text(r: Result<(Config, Vec<String>), ConfigError>) -> (String, String) {
    match r {
        Err(ConfigError::Invalid { field, reason }) => {
            let text = if reason.contains(&field) {
                format!("invalid configuration: {reason}")
            } else {
                format!("invalid configuration: {field} {reason}")
            };
            (field, text)
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn refusal(r: Result<(Config, Vec<String>), ConfigError>) -> (String, String) {
    match r {
        Err(ConfigError::Invalid { field, reason }) => (field, reason),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_are_go_s_and_the_managers() {
    let c = Config::default();
    assert!(c.cgroups_per_qos && c.cpu_cfs_quota);
    assert_eq!(c.cgroup_driver, "cgroupfs");
    assert_eq!(c.enforce_node_allocatable, ["pods"]);
    assert_eq!(c.pod_pids_limit, -1);
    assert_eq!(c.cpu_manager_policy, CpuManagerPolicy::None);
    assert_eq!(c.cpu_manager_reconcile_period, Duration::from_secs(10));
    assert_eq!(c.cpu_cfs_quota_period, Duration::from_millis(100));
    assert!(c.qos_reserved.is_empty() && c.reserved_system_cpus.is_empty());
    assert!(c.kube_reserved_cgroup.is_empty() && c.system_reserved_cgroup.is_empty());
    // The container manager's own defaults say the same.
    assert_eq!(c.cm_settings(), Settings::default());
    // A file of only zero values keeps them, as Go's defaulting fills zero values in.
    let c = loaded(
        "cgroupDriver: \"\"\ncpuManagerPolicy: \"\"\ncpuManagerReconcilePeriod: 0s\n\
         podPidsLimit: null\nenforceNodeAllocatable: null\ncgroupsPerQOS: null\n",
        &[],
    );
    assert_eq!(c.cm_settings(), Settings::default());
}

#[test]
fn every_field_from_the_file() {
    let c = loaded(
        "cgroupsPerQOS: true\ncgroupDriver: cgroupfs\ncgroupRoot: /ferrolet\n\
         enforceNodeAllocatable: [pods, kube-reserved, system-reserved]\n\
         kubeReservedCgroup: /kube.slice\nsystemReservedCgroup: /system.slice\n\
         podPidsLimit: 1024\nqosReserved: {memory: 50%}\ncpuManagerPolicy: static\n\
         cpuManagerReconcilePeriod: 5s\nkubeReserved: {cpu: 500m}\nsystemReserved: {cpu: 500m}\n\
         cpuCFSQuota: false\ncpuCFSQuotaPeriod: 50ms\n\
         featureGates: {CustomCPUCFSQuotaPeriod: true, QOSReserved: true}\n",
        &[],
    );
    assert_eq!(
        c.enforce_node_allocatable,
        ["pods", "kube-reserved", "system-reserved"]
    );
    assert_eq!(
        (
            c.kube_reserved_cgroup.as_str(),
            c.system_reserved_cgroup.as_str()
        ),
        ("/kube.slice", "/system.slice")
    );
    assert_eq!(c.pod_pids_limit, 1024);
    assert_eq!(c.qos_reserved, map(&[("memory", "50%")]));
    assert_eq!(c.cpu_manager_policy, CpuManagerPolicy::Static);
    assert_eq!(c.cpu_manager_reconcile_period, Duration::from_secs(5));
    assert!(!c.cpu_cfs_quota);
    assert_eq!(c.cpu_cfs_quota_period, Duration::from_millis(50));
    assert!(c.feature_gate("QOSReserved") && !c.feature_gate("Other"));

    let c = loaded(
        "cgroupsPerQOS: false\nenforceNodeAllocatable: []\nreservedSystemCPUs: 0-1,3\n\
         podPidsLimit: -5\n",
        &[],
    );
    assert!(!c.cgroups_per_qos);
    assert!(
        c.enforce_node_allocatable.is_empty(),
        "an explicit [] is kept"
    );
    assert_eq!(c.reserved_system_cpus, "0-1,3");
    assert_eq!(
        c.pod_pids_limit, -1,
        "negative limits are -1, as Go defaults"
    );
    assert_eq!(loaded("podPidsLimit: 0\n", &[]).pod_pids_limit, 0);
}

#[test]
fn bad_values_in_the_file_are_named() {
    for (yaml, field) in [
        ("cgroupsPerQOS: yes please\n", "cgroupsPerQOS"),
        ("enforceNodeAllocatable: pods\n", "enforceNodeAllocatable"),
        (
            "enforceNodeAllocatable: [pods, 1]\n",
            "enforceNodeAllocatable[1]",
        ),
        ("podPidsLimit: many\n", "podPidsLimit"),
        ("qosReserved: [memory]\n", "qosReserved"),
        (
            "cpuManagerReconcilePeriod: 10\n",
            "cpuManagerReconcilePeriod",
        ),
        ("cpuCFSQuotaPeriod: soon\n", "cpuCFSQuotaPeriod"),
        ("reservedSystemCPUs: [0]\n", "reservedSystemCPUs"),
        (
            "featureGates: {QOSReserved: yes}\n",
            "featureGates.QOSReserved",
        ),
        ("featureGates: [QOSReserved]\n", "featureGates"),
    ] {
        assert_eq!(refusal(load(yaml, &[])).0, field, "{yaml}");
    }
}

#[test]
fn flags_override_the_file() {
    let yaml = "cgroupsPerQOS: false\nenforceNodeAllocatable: []\npodPidsLimit: 10\n\
                qosReserved: {memory: 10%}\ncpuManagerPolicy: none\ncpuManagerReconcilePeriod: 5s\n\
                reservedSystemCPUs: \"0\"\ncpuCFSQuota: true\nkubeReserved: {cpu: \"1\"}\n\
                featureGates: {CustomCPUCFSQuotaPeriod: true}\n";
    let c = loaded(
        yaml,
        &[
            "--cgroups-per-qos",
            "--cgroup-driver=cgroupfs",
            "--enforce-node-allocatable=pods,kube-reserved",
            "--enforce-node-allocatable",
            "system-reserved",
            "--kube-reserved-cgroup=/kube",
            "--system-reserved-cgroup=/system",
            "--pod-max-pids=-1",
            "--qos-reserved=memory=100%",
            "--cpu-manager-policy=static",
            "--cpu-manager-reconcile-period=1m",
            "--reserved-cpus=",
            "--cpu-cfs-quota=false",
            "--cpu-cfs-quota-period=1s",
        ],
    );
    assert!(c.cgroups_per_qos && !c.cpu_cfs_quota);
    assert_eq!(
        c.enforce_node_allocatable,
        ["pods", "kube-reserved", "system-reserved"],
        "comma-separated and repeatable, replacing the file's"
    );
    assert_eq!(
        (
            c.kube_reserved_cgroup.as_str(),
            c.system_reserved_cgroup.as_str()
        ),
        ("/kube", "/system")
    );
    assert_eq!(c.pod_pids_limit, -1);
    assert_eq!(c.qos_reserved, map(&[("memory", "100%")]));
    assert_eq!(c.cpu_manager_policy, CpuManagerPolicy::Static);
    assert_eq!(c.cpu_manager_reconcile_period, Duration::from_secs(60));
    assert_eq!(c.reserved_system_cpus, "");
    assert_eq!(c.cpu_cfs_quota_period, Duration::from_secs(1));

    // Not given, the file stands.
    let c = loaded(yaml, &[]);
    assert!(!c.cgroups_per_qos && c.enforce_node_allocatable.is_empty());
    assert_eq!(c.pod_pids_limit, 10);
    assert_eq!(c.reserved_system_cpus, "0");
    // "" empties the list, as Go's string-slice flag.
    let c = loaded(
        "",
        &["--cgroups-per-qos=false", "--enforce-node-allocatable="],
    );
    assert!(c.enforce_node_allocatable.is_empty());
    // A zero reconcile period is the default, as in the file.
    let c = loaded("", &["--cpu-manager-reconcile-period=0s"]);
    assert_eq!(c.cpu_manager_reconcile_period, Duration::from_secs(10));
}

#[test]
fn go_s_validation_word_for_word() {
    // Messages from pkg/kubelet/apis/config/validation/validation.go (1.28.7), formatted by
    // Go with the same values.
    let cases: &[(&str, &[&str], &str, &str)] = &[
        (
            "cgroupsPerQOS: false\n",
            &[],
            ENFORCE,
            "invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) is not \
             supported unless cgroupsPerQOS (--cgroups-per-qos) is set to true",
        ),
        (
            "",
            &["--cpu-cfs-quota-period=200ms"],
            CFS_QUOTA_PERIOD,
            "invalid configuration: cpuCFSQuotaPeriod (--cpu-cfs-quota-period) 200ms requires \
             feature gate CustomCPUCFSQuotaPeriod",
        ),
        (
            // An explicit zero is no default: Go keeps it, and refuses it.
            "cpuCFSQuotaPeriod: 0s\n",
            &[],
            CFS_QUOTA_PERIOD,
            "invalid configuration: cpuCFSQuotaPeriod (--cpu-cfs-quota-period) 0s requires \
             feature gate CustomCPUCFSQuotaPeriod",
        ),
        (
            "featureGates: {CustomCPUCFSQuotaPeriod: true}\ncpuCFSQuotaPeriod: 500us\n",
            &[],
            CFS_QUOTA_PERIOD,
            "invalid configuration: cpuCFSQuotaPeriod (--cpu-cfs-quota-period) 500µs must be \
             between 1ms and 1sec, inclusive",
        ),
        (
            "featureGates: {CustomCPUCFSQuotaPeriod: true}\n",
            &["--cpu-cfs-quota-period=1.5s"],
            CFS_QUOTA_PERIOD,
            "invalid configuration: cpuCFSQuotaPeriod (--cpu-cfs-quota-period) 1.5s must be \
             between 1ms and 1sec, inclusive",
        ),
        (
            "enforceNodeAllocatable: [Pods]\n",
            &[],
            ENFORCE,
            "invalid configuration: option \"Pods\" specified for enforceNodeAllocatable \
             (--enforce-node-allocatable). Valid options are \"pods\", \"system-reserved\", \
             \"kube-reserved\", or \"none\"",
        ),
        (
            "",
            &["--enforce-node-allocatable=pods,"],
            ENFORCE,
            "invalid configuration: option \"\" specified for enforceNodeAllocatable \
             (--enforce-node-allocatable). Valid options are \"pods\", \"system-reserved\", \
             \"kube-reserved\", or \"none\"",
        ),
        (
            "enforceNodeAllocatable: [pods, system-reserved]\n",
            &[],
            SYSTEM_RESERVED_CGROUP,
            "invalid configuration: systemReservedCgroup (--system-reserved-cgroup) must be \
             specified when \"system-reserved\" contained in enforceNodeAllocatable \
             (--enforce-node-allocatable)",
        ),
        (
            "",
            &["--enforce-node-allocatable=kube-reserved"],
            KUBE_RESERVED_CGROUP,
            "invalid configuration: kubeReservedCgroup (--kube-reserved-cgroup) must be \
             specified when \"kube-reserved\" contained in enforceNodeAllocatable \
             (--enforce-node-allocatable)",
        ),
        (
            "enforceNodeAllocatable: [none, pods]\n",
            &[],
            ENFORCE,
            "invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) may not \
             contain additional enforcements when \"none\" is specified",
        ),
        (
            "reservedSystemCPUs: \"0\"\nkubeReservedCgroup: /kube\n",
            &[],
            RESERVED_CPUS,
            "invalid configuration: can't use reservedSystemCPUs (--reserved-cpus) with \
             systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup \
             (--kube-reserved-cgroup)",
        ),
        (
            "",
            &["--reserved-cpus=x"],
            RESERVED_CPUS,
            "invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) x, \
             error: strconv.Atoi: parsing \"x\": invalid syntax",
        ),
        (
            "",
            &["--reserved-cpus=3-1"],
            RESERVED_CPUS,
            "invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) 3-1, \
             error: invalid range \"3-1\" (3 > 1)",
        ),
    ];
    for (yaml, args, field, want) in cases {
        let (got_field, text) = go_text(load(yaml, args));
        assert_eq!(
            (got_field.as_str(), text.as_str()),
            (*field, *want),
            "{yaml} {args:?}"
        );
    }
    // `none` alone, and the reserved levels with their cgroups, are fine.
    loaded("enforceNodeAllocatable: [none]\n", &[]);
    loaded(
        "enforceNodeAllocatable: [pods, kube-reserved, system-reserved]\n\
         kubeReservedCgroup: /k\nsystemReservedCgroup: /s\n",
        &[],
    );
    loaded(
        "featureGates: {CustomCPUCFSQuotaPeriod: true}\ncpuCFSQuotaPeriod: 1ms\n",
        &[],
    );
}

#[test]
fn go_s_container_manager_refusals() {
    // What Go's kubelet refuses when it builds the container manager (cmd/kubelet/app,
    // pkg/kubelet/cm, cm/cpumanager), with its texts.
    let cases: &[(&str, &[&str], &str, &str)] = &[
        (
            "qosReserved: {memory: \"50\"}\n",
            &[],
            QOS_RESERVED,
            "failed to parse percentage \"50\" for \"memory\" resource: percentage expected, \
             got '50'",
        ),
        (
            "",
            &["--qos-reserved=memory=101%"],
            QOS_RESERVED,
            "failed to parse percentage \"101%\" for \"memory\" resource: percentage must be \
             between 0 and 100",
        ),
        (
            "qosReserved: {memory: x%}\n",
            &[],
            QOS_RESERVED,
            "failed to parse percentage \"x%\" for \"memory\" resource: invalid number in \
             percentage 'x%'",
        ),
        (
            "qosReserved: {cpu: 50%}\n",
            &[],
            QOS_RESERVED,
            "cannot reserve \"cpu\" resource",
        ),
        (
            "cpuManagerPolicy: Static\n",
            &[],
            CPU_MANAGER_POLICY,
            "unknown policy: \"Static\"",
        ),
        (
            "",
            &["--cpu-manager-policy=best-effort"],
            CPU_MANAGER_POLICY,
            "unknown policy: \"best-effort\"",
        ),
        (
            "cpuManagerPolicy: static\n",
            &[],
            CPU_MANAGER_POLICY,
            "[cpumanager] unable to determine reserved CPU resources for static policy",
        ),
        (
            "cpuManagerPolicy: static\nkubeReserved: {cpu: \"0\", memory: 1Gi}\n",
            &[],
            CPU_MANAGER_POLICY,
            "[cpumanager] unable to determine reserved CPU resources for static policy",
        ),
    ];
    for (yaml, args, field, want) in cases {
        let (got_field, reason) = refusal(load(yaml, args));
        assert_eq!(
            (got_field.as_str(), reason.as_str()),
            (*field, *want),
            "{yaml} {args:?}"
        );
    }
    // The static policy starts with any CPU reserved, or with reserved CPUs.
    for (yaml, args) in [
        ("kubeReserved: {cpu: 100m}\n", &[][..]),
        ("systemReserved: {cpu: \"1\"}\n", &[]),
        ("", &["--reserved-cpus=1"]),
    ] {
        let c = loaded(yaml, &[&["--cpu-manager-policy=static"][..], args].concat());
        assert_eq!(c.cpu_manager_policy, CpuManagerPolicy::Static);
    }
}

#[test]
fn the_systemd_driver_is_taken_where_systemd_runs_and_refused_clearly_elsewhere() {
    let (field, reason) = refusal(Err::<(Config, Vec<String>), _>(
        check_cgroup_driver("systemd", false).unwrap_err(),
    ));
    assert_eq!(field, CGROUP_DRIVER);
    assert!(
        reason.contains("needs systemd as PID 1 (and its D-Bus API)")
            && reason.contains("this node does not run systemd")
            && reason.contains("use \"cgroupfs\""),
        "{reason}"
    );
    check_cgroup_driver("systemd", true).unwrap();
    let (_, reason) = refusal(Err(check_cgroup_driver("cgroupv2", false).unwrap_err()));
    assert!(
        reason.starts_with("unknown cgroup driver \"cgroupv2\""),
        "{reason}"
    );
    check_cgroup_driver("cgroupfs", false).unwrap();

    // At start-up, from the file or the flag, with the message for this machine.
    let systemd_runs = Path::new(SYSTEMD_RUNTIME_DIR).is_dir();
    for (yaml, args) in [
        ("cgroupDriver: systemd\n", &[][..]),
        ("", &["--cgroup-driver=systemd"]),
    ] {
        match check_cgroup_driver("systemd", systemd_runs) {
            Ok(()) => assert_eq!(loaded(yaml, args).cgroup_driver, "systemd"),
            Err(ConfigError::Invalid { reason, .. }) => {
                assert_eq!(refusal(load(yaml, args)), (CGROUP_DRIVER.into(), reason));
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    let c = loaded("cgroupDriver: systemd\n", &["--cgroup-driver=cgroupfs"]);
    assert_eq!(
        c.cgroup_driver, "cgroupfs",
        "the flag wins before the check"
    );
    assert_eq!(
        refusal(load("cgroupDriver: Cgroupfs\n", &[])).0,
        CGROUP_DRIVER
    );
}

#[test]
fn feature_gates_ferrolet_does_not_act_on_are_reported() {
    let (c, warnings) = load(
        "featureGates: {QOSReserved: true, CustomCPUCFSQuotaPeriod: false, MemoryQoS: true, \
         NodeSwap: false, PodLevelResources: true}\n",
        &[],
    )
    .unwrap();
    assert_eq!(c.feature_gates.len(), 5);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].ends_with(": featureGates.PodLevelResources"),
        "{warnings:?}"
    );
    assert!(c.cm_settings().memory_qos);
    assert!(c.in_place_resize(), "on by default, as Go 1.33");
    let (off, _) = load("featureGates: {InPlacePodVerticalScaling: false}\n", &[]).unwrap();
    assert!(!off.in_place_resize());
}

#[test]
fn the_memory_throttling_factor_is_go_s() {
    assert_eq!(loaded("", &[]).memory_throttling_factor, 0.9);
    assert_eq!(
        loaded("memoryThrottlingFactor: 0\n", &[]).memory_throttling_factor,
        0.9
    );
    assert_eq!(
        loaded("memoryThrottlingFactor: 1\n", &[]).memory_throttling_factor,
        1.0
    );
    assert_eq!(
        loaded("memoryThrottlingFactor: 0.5\n", &[]).memory_throttling_factor,
        0.5
    );
    let (field, reason) = refusal(load("memoryThrottlingFactor: 1.5\n", &[]));
    assert_eq!(field, "memoryThrottlingFactor");
    assert_eq!(
        reason,
        "1.5 must be greater than 0 and less than or equal to 1.0"
    );
    assert!(
        refusal(load("memoryThrottlingFactor: -0.1\n", &[]))
            .1
            .contains("-0.1")
    );
    assert!(
        refusal(load("memoryThrottlingFactor: high\n", &[]))
            .1
            .contains("number")
    );
}

#[test]
fn cpu_lists_as_go_s_cpuset_parse() {
    // Sizes and errors as k8s.io/utils/cpuset.Parse gives them (captured with Go 1.22).
    for (list, size) in [
        ("", 0),
        ("0", 1),
        ("0-1", 2),
        ("0,1", 2),
        ("+3", 1),
        ("0--0", 1),
        ("1-1", 1),
        ("0-2,1-3", 4),
        ("0-3,8,10-11", 7),
        ("5,5,5", 1),
    ] {
        assert_eq!(cpu_list_size(list), Ok(size), "{list}");
    }
    for (list, err) in [
        ("x", "strconv.Atoi: parsing \"x\": invalid syntax"),
        ("3-1", "invalid range \"3-1\" (3 > 1)"),
        ("1--3", "invalid range \"1--3\" (1 > -3)"),
        ("0,", "strconv.Atoi: parsing \"\": invalid syntax"),
        (",0", "strconv.Atoi: parsing \"\": invalid syntax"),
        (" 1", "strconv.Atoi: parsing \" 1\": invalid syntax"),
        ("-1", "strconv.Atoi: parsing \"\": invalid syntax"),
        ("1-", "strconv.Atoi: parsing \"\": invalid syntax"),
        ("+", "strconv.Atoi: parsing \"+\": invalid syntax"),
        (
            "99999999999999999999",
            "strconv.Atoi: parsing \"99999999999999999999\": value out of range",
        ),
        (
            "1234567890123456789012x",
            "strconv.Atoi: parsing \"1234567890123456789012x\": value out of range",
        ),
    ] {
        assert_eq!(cpu_list_size(list), Err(err.to_string()), "{list}");
    }
}

#[test]
fn percentages_as_go_s_parse_percentage() {
    // As Go's parsePercentage (pkg/kubelet/cm), captured with Go 1.22.
    for (v, want) in [
        ("50%", Ok(50)),
        ("50%%", Ok(50)),
        ("+50%", Ok(50)),
        ("-0%", Ok(0)),
        ("0%", Ok(0)),
        ("100%", Ok(100)),
        ("50", Err("percentage expected, got '50'")),
        ("101%", Err("percentage must be between 0 and 100")),
        ("-1%", Err("percentage must be between 0 and 100")),
        ("%", Err("invalid number in percentage '%'")),
        ("5 %", Err("invalid number in percentage '5 %'")),
    ] {
        assert_eq!(percentage(v), want.map_err(String::from), "{v}");
    }
    assert_eq!(qos_reserved_memory(&BTreeMap::new()), Ok(None));
    assert_eq!(
        qos_reserved_memory(&map(&[("memory", "25%")])),
        Ok(Some(25))
    );
}

#[test]
fn cm_settings_maps_every_field() {
    let c = loaded(
        "cgroupRoot: /ferrolet\nenforceNodeAllocatable: [pods, kube-reserved]\n\
         kubeReservedCgroup: /kube\nkubeReserved: {cpu: 500m, memory: 1Gi}\n\
         systemReserved: {memory: 512Mi}\npodPidsLimit: 4096\nqosReserved: {memory: 50%}\n\
         cpuManagerPolicy: static\ncpuManagerReconcilePeriod: 30s\ncpuCFSQuota: false\n\
         featureGates: {QOSReserved: true}\n",
        &[],
    );
    let want = Settings {
        cgroups_per_qos: true,
        cgroup_root: "/ferrolet".into(),
        cgroup_driver: crate::cm::CgroupDriver::Cgroupfs,
        enforce_node_allocatable: vec!["pods".into(), "kube-reserved".into()],
        kube_reserved: map(&[("cpu", "500m"), ("memory", "1Gi")]),
        system_reserved: map(&[("memory", "512Mi")]),
        kube_reserved_cgroup: "/kube".into(),
        system_reserved_cgroup: String::new(),
        pod_pids_limit: 4096,
        qos_reserved_memory_percent: Some(50),
        cpu_manager_policy: CpuManagerPolicy::Static,
        cpu_manager_reconcile_period: Duration::from_secs(30),
        reserved_system_cpus: String::new(),
        cpu_cfs_quota: false,
        cpu_cfs_quota_period: Duration::from_millis(100),
        memory_qos: false,
    };
    assert_eq!(c.cm_settings(), want);

    // Without the QOSReserved gate Go checks qosReserved but does not act on it.
    let c = loaded("qosReserved: {memory: 50%}\n", &[]);
    assert_eq!(c.cm_settings().qos_reserved_memory_percent, None);

    // Reserved CPUs replace the reservations' CPU, as Go's start-up does before it builds the
    // container manager.
    let c = loaded(
        "kubeReserved: {cpu: 500m, memory: 1Gi}\nsystemReserved: {cpu: \"2\"}\n\
         reservedSystemCPUs: 0-1,3\nenforceNodeAllocatable: [none]\n",
        &[],
    );
    let s = c.cm_settings();
    assert_eq!(s.kube_reserved, map(&[("memory", "1Gi")]));
    assert_eq!(s.system_reserved, map(&[("cpu", "3")]));
    assert_eq!(s.reserved_system_cpus, "0-1,3");
    assert_eq!(s.enforce_node_allocatable, ["none"]);
    assert_eq!(
        c.kube_reserved["cpu"], "500m",
        "the configuration itself is as given"
    );
}
