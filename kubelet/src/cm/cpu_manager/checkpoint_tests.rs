//! The checkpoint format against files the Go kubelet wrote.
//!
//! The `GO_*` texts were printed by Kubernetes 1.28.7's own code (`state.CPUManagerCheckpoint`
//! `MarshalCheckpoint`, and `state.NewCheckpointState` + the static policy writing the file),
//! built from the vendored tree with Go 1.22 (`GOFLAGS=-mod=vendor`, a test file added to
//! `pkg/kubelet/cm/cpumanager` through `go test -overlay`; the program is not kept here).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn cp(policy: &str, default: &str, entries: &[(&str, &[(&str, &str)])]) -> Checkpoint {
    Checkpoint {
        policy_name: policy.into(),
        default_cpu_set: default.into(),
        entries: entries
            .iter()
            .map(|(pod, cs)| {
                let m = cs.iter().map(|(c, s)| (c.to_string(), s.to_string()));
                (pod.to_string(), m.collect())
            })
            .collect(),
    }
}

/// `none` policy, fresh state (what Go writes at first start with `none`).
const GO_NONE: &str = r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#;
/// `static` before the policy starts.
const GO_STATIC_EMPTY: &str = r#"{"policyName":"static","defaultCpuSet":"","checksum":3083571066}"#;
/// `static` on 2 CPUs, nothing assigned.
const GO_STATIC_0_1: &str =
    r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":1636926438}"#;
/// One pod, one container.
const GO_ONE: &str = r#"{"policyName":"static","defaultCpuSet":"0,2-3","entries":{"0b3d2c9a-1111-4f6e-9d7e-5a1b2c3d4e5f":{"app":"1"}},"checksum":3466164429}"#;
/// Three pods, several containers, keys whose byte order differs from their case-folded
/// order (Go inserted them in another order).
const GO_SEVERAL: &str = r#"{"policyName":"static","defaultCpuSet":"0,5-7","entries":{"Pod-Upper":{"c":"14"},"pod-alpha":{"a":"12","m":"13,15","z":"8-11"},"pod-zeta":{"Init-A":"1-3","app":"1-2","init-b":"3","sidecar":"4"}},"checksum":3676673380}"#;
/// A pod with an empty map of containers.
const GO_EMPTY_POD: &str =
    r#"{"policyName":"static","defaultCpuSet":"","entries":{"p":{}},"checksum":910851842}"#;
/// Characters Go's JSON escapes (the checksum is over the unescaped text).
const GO_ESCAPED: &str = r#"{"policyName":"static","defaultCpuSet":"0-3","entries":{"a\u003cb\u003e\u0026c":{"x\"y":"1"}},"checksum":2676307896}"#;
/// A V1 file as a kubelet before 1.18 wrote it (entries by container id).
const GO_V1: &str = r#"{"policyName":"static","defaultCpuSet":"0,3","entries":{"cid-1":"1","cid-2":"2"},"checksum":1356566350}"#;

fn written_by_go() -> Vec<(&'static str, Checkpoint)> {
    vec![
        (GO_NONE, cp("none", "", &[])),
        (GO_STATIC_EMPTY, cp("static", "", &[])),
        (GO_STATIC_0_1, cp("static", "0-1", &[])),
        (
            GO_ONE,
            cp(
                "static",
                "0,2-3",
                &[("0b3d2c9a-1111-4f6e-9d7e-5a1b2c3d4e5f", &[("app", "1")])],
            ),
        ),
        (
            GO_SEVERAL,
            cp(
                "static",
                "0,5-7",
                &[
                    (
                        "pod-zeta",
                        &[
                            ("sidecar", "4"),
                            ("app", "1-2"),
                            ("init-b", "3"),
                            ("Init-A", "1-3"),
                        ],
                    ),
                    ("pod-alpha", &[("z", "8-11"), ("a", "12"), ("m", "13,15")]),
                    ("Pod-Upper", &[("c", "14")]),
                ],
            ),
        ),
        (GO_EMPTY_POD, cp("static", "", &[("p", &[])])),
        (
            GO_ESCAPED,
            cp("static", "0-3", &[("a<b>&c", &[("x\"y", "1")])]),
        ),
    ]
}

#[test]
fn writes_what_go_writes() {
    for (go, checkpoint) in written_by_go() {
        assert_eq!(checkpoint.marshal(), go);
    }
}

#[test]
fn reads_what_go_writes() {
    for (go, checkpoint) in written_by_go() {
        let read = Checkpoint::unmarshal(go.as_bytes(), &ContainerMap::new()).unwrap();
        assert_eq!(read, checkpoint, "{go}");
    }
}

#[test]
fn go_policy_run_files_round_trip() {
    // Files Go's static policy wrote while allocating on 4 CPUs (2 cores × 2 threads).
    let files = [
        r#"{"policyName":"static","defaultCpuSet":"0-3","checksum":611748604}"#,
        r#"{"policyName":"static","defaultCpuSet":"0,2","entries":{"pod-a":{"init":"1,3"}},"checksum":2148913289}"#,
        r#"{"policyName":"static","defaultCpuSet":"0","entries":{"pod-a":{"app1":"2","app2":"1","init":"1,3"}},"checksum":492983619}"#,
        r#"{"policyName":"static","defaultCpuSet":"0,2-3","entries":{"pod-a":{"app2":"1"}},"checksum":927395101}"#,
        r#"{"policyName":"static","defaultCpuSet":"0,2,4,6-7","entries":{"pod-c":{"a":"1","i1":"1","i2":"1,5"},"pod-e":{"y":"3"}},"checksum":636757950}"#,
    ];
    for f in files {
        let read = Checkpoint::unmarshal(f.as_bytes(), &ContainerMap::new()).unwrap();
        assert_eq!(read.marshal(), f);
    }
}

#[test]
fn corrupted_checksum_is_refused_with_gos_error() {
    let bad = GO_ONE.replace("3466164429", "3466164428");
    let err = Checkpoint::unmarshal(bad.as_bytes(), &ContainerMap::new()).unwrap_err();
    assert_eq!(err.to_string(), "checkpoint is corrupted");
    let tampered = GO_ONE.replace(r#""app":"1""#, r#""app":"2""#);
    assert!(matches!(
        Checkpoint::unmarshal(tampered.as_bytes(), &ContainerMap::new()),
        Err(CheckpointError::Corrupted)
    ));
}

#[test]
fn gos_own_restore_fixtures() {
    // state_checkpoint_test.go TestCheckpointStateRestore: note `defaultCPUSet` (Go matches
    // field names case-insensitively) and whitespace.
    let none = ContainerMap::new();
    let ok = |text: &str, containers: &ContainerMap| {
        Checkpoint::unmarshal(text.as_bytes(), containers).unwrap()
    };
    assert_eq!(
        ok(
            r#"{ "policyName": "none", "defaultCPUSet": "4-6", "entries": {}, "checksum": 354655845 }"#,
            &none
        ),
        cp("none", "4-6", &[])
    );
    assert_eq!(
        ok(
            r#"{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"pod": {"container1": "4-6", "container2": "1-3"}}, "checksum": 3610638499}"#,
            &none
        ),
        cp(
            "none",
            "1-3",
            &[("pod", &[("container1", "4-6"), ("container2", "1-3")])]
        )
    );
    assert!(matches!(
        Checkpoint::unmarshal(
            br#"{"policyName": "none", "defaultCPUSet": "4-6", "entries": {}, "checksum": 1337}"#,
            &none
        ),
        Err(CheckpointError::Corrupted)
    ));
    assert!(matches!(
        Checkpoint::unmarshal(b"{", &none),
        Err(CheckpointError::Json(_))
    ));
    assert_eq!(
        ok(
            r#"{"policyName": "other", "defaultCPUSet": "1-3", "entries": {}, "checksum": 1394507217}"#,
            &none
        ),
        cp("other", "1-3", &[])
    );
    assert_eq!(
        ok(
            r#"{"policyName": "none", "defaultCPUSet": "1.3", "entries": {}, "checksum": 3021697696}"#,
            &none
        )
        .default_cpu_set,
        "1.3"
    );
    // A V1 checksum, no entries.
    assert_eq!(
        ok(
            r#"{"policyName": "none", "defaultCPUSet": "1-3", "checksum": 1694838852}"#,
            &none
        ),
        cp("none", "1-3", &[])
    );
    // V1 with migration.
    let containers: ContainerMap = [
        ("containerID1".into(), ("pod".into(), "container1".into())),
        ("containerID2".into(), ("pod".into(), "container2".into())),
    ]
    .into();
    assert_eq!(
        ok(
            r#"{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"containerID1": "4-6", "containerID2": "1-3"}, "checksum": 3680390589}"#,
            &containers
        ),
        cp(
            "none",
            "1-3",
            &[("pod", &[("container1", "4-6"), ("container2", "1-3")])]
        )
    );
}

#[test]
fn v1_is_migrated_with_the_runtimes_containers() {
    let containers: ContainerMap = [
        ("cid-1".into(), ("pod-x".into(), "c1".into())),
        ("cid-2".into(), ("pod-x".into(), "c2".into())),
    ]
    .into();
    let read = Checkpoint::unmarshal(GO_V1.as_bytes(), &containers).unwrap();
    assert_eq!(
        read,
        cp("static", "0,3", &[("pod-x", &[("c1", "1"), ("c2", "2")])])
    );
    // Go: "containerID 'cid-1' not found in initial containers list".
    let err = Checkpoint::unmarshal(GO_V1.as_bytes(), &ContainerMap::new()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "error migrating v1 checkpoint state to v2 checkpoint state: containerID 'cid-1' not found in initial containers list"
    );
}

#[test]
fn go_json_decoding_rules() {
    let none = ContainerMap::new();
    // A checksum of 0 is not checked; unknown fields are ignored.
    let read = Checkpoint::unmarshal(
        br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"p":{"c":"1"}},"checksum":0,"x":[1]}"#,
        &none,
    )
    .unwrap();
    assert_eq!(read, cp("static", "0-1", &[("p", &[("c", "1")])]));
    // Field names fold as Go's do (long s, Kelvin sign).
    let read = Checkpoint::unmarshal(
        "{\"POLICYNAME\":\"static\",\"defaultCpu\u{17f}et\":\"0\",\"chec\u{212a}sum\":0}"
            .as_bytes(),
        &none,
    )
    .unwrap();
    assert_eq!(read, cp("static", "0", &[]));
    // The wrong types are errors.
    for bad in [
        r#"{"policyName":1}"#,
        r#"{"checksum":-1}"#,
        r#"{"checksum":1.5}"#,
        r#"{"entries":[]}"#,
        r#"{"entries":{"p":{"c":1}}}"#,
        r#"[]"#,
        r#"{"policyName":"none"} x"#,
    ] {
        assert!(
            matches!(
                Checkpoint::unmarshal(bad.as_bytes(), &none),
                Err(CheckpointError::Json(_))
            ),
            "{bad}"
        );
    }
}

#[test]
fn nil_maps_hash_as_go_spews_them() {
    // Hand-made files (Go never writes null) whose checksums Go computed with a nil entries
    // map and a nil pod map (spew's "<nil>"); Go's restore accepted both.
    let none = ContainerMap::new();
    let nil_entries =
        r#"{"policyName":"static","defaultCpuSet":"0","entries":null,"checksum":3084097631}"#;
    let read = Checkpoint::unmarshal(nil_entries.as_bytes(), &none).unwrap();
    assert_eq!(read, cp("static", "0", &[]));
    let nil_pod =
        r#"{"policyName":"static","defaultCpuSet":"0","entries":{"p":null},"checksum":1132175473}"#;
    let read = Checkpoint::unmarshal(nil_pod.as_bytes(), &none).unwrap();
    assert_eq!(read, cp("static", "0", &[("p", &[])]));
}

#[test]
fn checksum_is_fnv32a_over_the_spew_text() {
    // The text Go's dump.ForHash printed for GO_ONE (with the checksum zeroed).
    let spew = "(*state.CPUManagerCheckpoint){PolicyName:(string)static DefaultCPUSet:(string)0,2-3 Entries:(map[string]map[string]string)map[0b3d2c9a-1111-4f6e-9d7e-5a1b2c3d4e5f:map[app:1]] Checksum:(checksum.Checksum)0}";
    assert_eq!(fnv32a(spew), 3466164429);
    assert_eq!(fnv32a(""), 0x811c_9dc5);
}
