//! The specs we build for the requests the Go kubelet 1.28 really sends, on each node shape:
//! v1 without hugetlb (our VMs), v1 with hugetlb, v1 without swap accounting, v2 with and
//! without hugetlb. Each field of `LinuxContainerResources` and `LinuxPodSandboxConfig` the
//! kubelet fills is checked against what containerd 1.6/1.7 puts in the spec for it.
//!
//! Two kinds of fixtures (`shim/tests/fixtures/README.md`): requests captured as protobuf from
//! a real Go kubelet 1.28.7 on one of our VMs (`captured/gokubelet-1.28.7-*.pb`), and requests
//! derived by hand from its source (`gokubelet-1.28-*.json`) for what a v1 VM cannot show
//! (cgroup v2, huge pages asked for). `derived_fixtures_agree_with_the_captures` keeps the
//! derived ones true to the captured ones.
//!
//! The derived fixtures are in Go's JSON form (zero fields left out), which the prost types'
//! serde derive cannot read as is (every field is required there): [`from_go_json`] reads them
//! with missing fields as zero and unknown ones as errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use ferrolet_proto::cri;
use oci_spec::runtime::Spec;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess,
    Visitor,
};
use serde_json::{Map, Value};

use super::cgroups::tests::{v1_with_hugetlb, v1_without_hugetlb, v1_without_swap, v2};
use super::{
    CgroupSupport, ContainerSpecInput, SandboxFiles, SandboxSpecInput, container_spec, sandbox_spec,
};
use crate::image_config::{ContainerDefaults, ImageConfig};
use crate::mount::EtcFiles;

// ---------------------------------------------------------------------------------------------
// Go JSON → prost types.

/// Reads Go-encoded JSON of a CRI type: a missing field is the type's zero (Go's
/// `omitempty`), `null` is an empty list or map, an unknown field is an error.
pub(crate) fn from_go_json<T: DeserializeOwned>(value: Value) -> Result<T, serde_json::Error> {
    T::deserialize(GoJson(value))
}

/// A JSON value whose structs tolerate missing fields.
struct GoJson(Value);

/// An omitted field: the zero of whatever type is asked for.
struct Zero;

type Error = serde_json::Error;

macro_rules! forward_to_value {
    ($($method:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.0.$method(visitor)
        }
    )*};
}

impl<'de> Deserializer<'de> for GoJson {
    type Error = Error;

    forward_to_value!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_unit,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(GoJson(other)),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(Items(items.into_iter())),
            Value::Null => visitor.visit_seq(Items(Vec::new().into_iter())),
            other => other.deserialize_seq(visitor),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(Entries {
                entries: map.into_iter(),
                value: None,
            }),
            Value::Null => visitor.visit_map(Entries {
                entries: Map::new().into_iter(),
                value: None,
            }),
            other => other.deserialize_map(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let Value::Object(mut map) = self.0 else {
            return self.0.deserialize_struct(name, fields, visitor);
        };
        if let Some(unknown) = map.keys().find(|k| !fields.contains(&k.as_str())) {
            return Err(de::Error::unknown_field(unknown, fields));
        }
        let values = fields.iter().map(|f| map.remove(*f)).collect::<Vec<_>>();
        visitor.visit_map(Fields {
            fields: fields.iter().zip(values),
            value: None,
        })
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }
}

struct Items(std::vec::IntoIter<Value>);

impl<'de> SeqAccess<'de> for Items {
    type Error = Error;
    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        self.0
            .next()
            .map(|v| seed.deserialize(GoJson(v)))
            .transpose()
    }
}

struct Entries {
    entries: serde_json::map::IntoIter,
    value: Option<Value>,
}

impl<'de> MapAccess<'de> for Entries {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((k, v)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(v);
        seed.deserialize(k.into_deserializer()).map(Some)
    }
    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        seed.deserialize(GoJson(self.value.take().unwrap_or(Value::Null)))
    }
}

/// A struct's fields in declaration order, each present or not.
struct Fields<I> {
    fields: I,
    value: Option<Option<Value>>,
}

impl<'de, I: Iterator<Item = (&'static &'static str, Option<Value>)>> MapAccess<'de> for Fields<I> {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((name, value)) = self.fields.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize((*name).into_deserializer()).map(Some)
    }
    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        match self.value.take().flatten() {
            Some(v) => seed.deserialize(GoJson(v)),
            None => seed.deserialize(Zero),
        }
    }
}

macro_rules! zero {
    ($($method:ident => $visit:ident($value:expr)),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            visitor.$visit($value)
        }
    )*};
}

impl<'de> Deserializer<'de> for Zero {
    type Error = Error;

    zero!(
        deserialize_bool => visit_bool(false),
        deserialize_i8 => visit_i64(0),
        deserialize_i16 => visit_i64(0),
        deserialize_i32 => visit_i64(0),
        deserialize_i64 => visit_i64(0),
        deserialize_u8 => visit_u64(0),
        deserialize_u16 => visit_u64(0),
        deserialize_u32 => visit_u64(0),
        deserialize_u64 => visit_u64(0),
        deserialize_f32 => visit_f64(0.0),
        deserialize_f64 => visit_f64(0.0),
        deserialize_str => visit_str(""),
        deserialize_string => visit_str(""),
        deserialize_bytes => visit_bytes(&[]),
        deserialize_byte_buf => visit_bytes(&[]),
    );

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Error> {
        Err(de::Error::custom("an omitted field of no known type"))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_none()
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_seq(Items(Vec::new().into_iter()))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(Entries {
            entries: Map::new().into_iter(),
            value: None,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        GoJson(Value::Object(Map::new())).deserialize_struct(name, fields, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        char unit_struct tuple tuple_struct enum identifier ignored_any
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures and node shapes.

/// A fixture under `shim/tests/fixtures/`, read as `T`.
fn fixture<T: DeserializeOwned>(name: &str) -> T {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    from_go_json(value).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The CreateContainer fixtures for cgroup v1 nodes.
const V1_CONTAINERS: [&str; 3] = [
    "gokubelet-1.28-create-container-burstable-v1.json",
    "gokubelet-1.28-create-container-besteffort-v1.json",
    "gokubelet-1.28-create-container-guaranteed-hugepages-v1.json",
];

/// The CreateContainer fixtures for cgroup v2 nodes.
const V2_CONTAINERS: [&str; 1] = ["gokubelet-1.28-create-container-burstable-v2.json"];

/// v2 without hugetlb (a kernel without it, or not delegated).
fn v2_without_hugetlb() -> CgroupSupport {
    let mut node = v2();
    node.controllers.remove("hugetlb");
    node
}

/// (name, shape) of the v1 nodes.
fn v1_nodes() -> [(&'static str, CgroupSupport); 3] {
    [
        ("v1 without hugetlb", v1_without_hugetlb()),
        ("v1 with hugetlb", v1_with_hugetlb()),
        ("v1 without swap accounting", v1_without_swap()),
    ]
}

/// (name, shape) of the v2 nodes.
fn v2_nodes() -> [(&'static str, CgroupSupport); 2] {
    [("v2", v2()), ("v2 without hugetlb", v2_without_hugetlb())]
}

/// Sandbox files and an image for the builders (only paths; nothing is read from them).
struct Pod {
    _tmp: tempfile::TempDir,
    files: SandboxFiles,
    image: ImageConfig,
}

fn pod() -> Pod {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sandboxes").join("sb1");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["hostname", "hosts", "resolv.conf"] {
        std::fs::write(dir.join(f), "x\n").unwrap();
    }
    Pod {
        files: SandboxFiles {
            hostname: dir.join("hostname"),
            hosts: dir.join("hosts"),
            resolv_conf: dir.join("resolv.conf"),
            dir,
            shm: None,
        },
        image: {
            let mut defaults = ContainerDefaults::default();
            defaults.set_entrypoint(Some(vec!["/pause".into()]));
            let mut image = ImageConfig::default();
            image.set_config(Some(defaults));
            image
        },
        _tmp: tmp,
    }
}

/// The spec for a CreateContainer request on `node`, with our oom_score_adj floor at
/// `min_oom_score_adj`.
fn container(
    req: &cri::CreateContainerRequest,
    node: &CgroupSupport,
    min_oom_score_adj: i32,
) -> Spec {
    let p = pod();
    let mut config = req.config.clone().unwrap();
    // The kubelet's bind mounts name its pod dirs on the node; the builder would create them.
    // Mounts are not what these tests are about.
    config.mounts.clear();
    container_spec(&ContainerSpecInput {
        id: "c1",
        config: &config,
        sandbox_config: req.sandbox_config.as_ref().unwrap(),
        image: &p.image,
        etc: &EtcFiles::default(),
        pod_namespaces: crate::oci::PodNamespaces::Pause(4242),
        target_pid: 0,
        netns_path: Some(Path::new("/run/netns/cni-1")),
        files: &p.files,
        image_volumes: &[],
        cgroups_path: "/kubepods/burstable/pod1/c1",
        min_oom_score_adj,
        cgroups: node,
        pod_userns: None,
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn resources(spec: &Spec) -> &oci_spec::runtime::LinuxResources {
    spec.linux().as_ref().unwrap().resources().as_ref().unwrap()
}

fn request_resources(req: &cri::CreateContainerRequest) -> cri::LinuxContainerResources {
    req.config
        .as_ref()
        .and_then(|c| c.linux.as_ref())
        .and_then(|l| l.resources.clone())
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[test]
fn the_fixtures_carry_what_the_go_kubelet_sends() {
    // Guards the fixtures (and the Go JSON reader) against drifting from the kubelet's shape.
    let burstable: cri::CreateContainerRequest = fixture(V1_CONTAINERS[0]);
    let r = request_resources(&burstable);
    assert_eq!(
        (r.cpu_period, r.cpu_quota, r.cpu_shares),
        (100_000, 50_000, 102)
    );
    assert_eq!(r.memory_limit_in_bytes, 64 << 20);
    assert_eq!(r.memory_swap_limit_in_bytes, 64 << 20);
    assert_eq!(r.oom_score_adj, 999);
    let pages: Vec<_> = r
        .hugepage_limits
        .iter()
        .map(|h| (h.page_size.as_str(), h.limit))
        .collect();
    assert_eq!(pages, [("2MB", 0), ("1GB", 0)]);
    assert!(r.unified.is_empty() && r.cpuset_cpus.is_empty());
    let config = burstable.config.unwrap();
    assert_eq!(config.metadata.unwrap().name, "app");
    assert_eq!(config.mounts.len(), 2);
    assert!(!config.mounts[0].readonly);
    let sc = config.linux.unwrap().security_context.unwrap();
    assert_eq!(sc.run_as_user, Some(cri::Int64Value { value: 0 }));
    assert_eq!(
        sc.namespace_options.unwrap().pid,
        cri::NamespaceMode::Container as i32
    );
    assert_eq!(sc.masked_paths.len(), 10);

    let besteffort: cri::CreateContainerRequest = fixture(V1_CONTAINERS[1]);
    let r = request_resources(&besteffort);
    assert_eq!(
        (r.cpu_quota, r.cpu_shares, r.memory_limit_in_bytes),
        (0, 2, 0)
    );
    assert_eq!(r.oom_score_adj, 1000);

    let v2: cri::CreateContainerRequest = fixture(V2_CONTAINERS[0]);
    let r = request_resources(&v2);
    assert_eq!(r.unified["memory.oom.group"], "1");
    assert_eq!(r.unified["memory.swap.max"], "0");
    assert_eq!(r.memory_swap_limit_in_bytes, 0);

    // Unknown fields are refused, so a typo in a fixture cannot pass unnoticed.
    let err = from_go_json::<cri::LinuxContainerResources>(serde_json::json!({"cpu_sharez": 2}))
        .unwrap_err();
    assert!(err.to_string().contains("cpu_sharez"), "{err}");
}

/// Checks every field of a v1 or v2 fixture's resources in the spec against containerd's
/// rules for `node`.
fn assert_resources_as_containerd(name: &str, node_name: &str, node: &CgroupSupport) {
    let req: cri::CreateContainerRequest = fixture(name);
    assert_request_as_containerd(&req, &format!("{name} on {node_name}"), node);
}

/// Checks every field of a CreateContainer request's resources in the spec against
/// containerd's rules for `node`; `at` names the request and node in failures.
fn assert_request_as_containerd(req: &cri::CreateContainerRequest, at: &str, node: &CgroupSupport) {
    let asked = request_resources(req);
    let spec = container(req, node, -1000);
    let r = resources(&spec);

    // cpu: period, quota, shares as asked (0 = unset); no cpuset asked.
    let cpu = r.cpu().clone().unwrap_or_default();
    let set = |v: i64| (v != 0).then_some(v);
    assert_eq!(
        cpu.period().map(|p| p as i64),
        set(asked.cpu_period),
        "{at}"
    );
    assert_eq!(cpu.quota(), set(asked.cpu_quota), "{at}");
    assert_eq!(
        cpu.shares().map(|s| s as i64),
        set(asked.cpu_shares),
        "{at}"
    );
    assert!(cpu.cpus().is_none() && cpu.mems().is_none(), "{at}");

    // memory: the limit as asked; memory+swap only where swap is accounted: the asked value,
    // else the limit (no swapping).
    let mem = r.memory().unwrap_or_default();
    assert_eq!(mem.limit(), set(asked.memory_limit_in_bytes), "{at}");
    let want_swap = if !node.swap_accounting {
        None
    } else if asked.memory_swap_limit_in_bytes != 0 {
        Some(asked.memory_swap_limit_in_bytes)
    } else {
        set(asked.memory_limit_in_bytes)
    };
    assert_eq!(mem.swap(), want_swap, "{at}");

    // hugepages: every page size the kubelet listed, where hugetlb is; none where it is not.
    let pages: Vec<(String, i64)> = r
        .hugepage_limits()
        .iter()
        .flatten()
        .map(|h| (h.page_size().clone(), h.limit()))
        .collect();
    let want_pages: Vec<(String, i64)> = if node.has("hugetlb") {
        asked
            .hugepage_limits
            .iter()
            .map(|h| (h.page_size.clone(), h.limit as i64))
            .collect()
    } else {
        Vec::new()
    };
    assert_eq!(pages, want_pages, "{at}");

    // unified: as asked (the kubelet asks only on v2).
    let unified = r.unified().clone().unwrap_or_default();
    assert_eq!(unified, asked.unified, "{at}");

    // oom_score_adj: as asked, raised to our floor.
    let p = spec.process().as_ref().unwrap();
    assert_eq!(p.oom_score_adj(), Some(asked.oom_score_adj as i32), "{at}");
    let clamped = container(req, node, -500);
    let adj = clamped.process().as_ref().unwrap().oom_score_adj();
    assert_eq!(adj, Some((asked.oom_score_adj as i32).max(-500)), "{at}");

    // The default device rules stay; the cgroup is the pod's; a cgroup namespace on v2 only.
    assert!(r.devices().as_ref().is_some_and(|d| !d.is_empty()), "{at}");
    let linux = spec.linux().as_ref().unwrap();
    assert_eq!(
        linux.cgroups_path().as_deref(),
        Some(Path::new("/kubepods/burstable/pod1/c1")),
        "{at}"
    );
    let cgroupns = linux
        .namespaces()
        .iter()
        .flatten()
        .any(|n| n.typ() == oci_spec::runtime::LinuxNamespaceType::Cgroup);
    assert_eq!(cgroupns, node.unified(), "{at}");

    // What ContainerStatus reports back is what the spec holds.
    let back = super::cri_resources(&spec).unwrap();
    assert_eq!(back.cpu_shares, asked.cpu_shares, "{at}");
    assert_eq!(
        back.memory_limit_in_bytes, asked.memory_limit_in_bytes,
        "{at}"
    );
    assert_eq!(back.hugepage_limits.len(), want_pages.len(), "{at}");
}

#[test]
fn v1_requests_on_v1_nodes() {
    for name in V1_CONTAINERS {
        for (node_name, node) in v1_nodes() {
            assert_resources_as_containerd(name, node_name, &node);
        }
    }
}

#[test]
fn v2_requests_on_v2_nodes() {
    for name in V2_CONTAINERS {
        for (node_name, node) in v2_nodes() {
            assert_resources_as_containerd(name, node_name, &node);
        }
    }
}

#[test]
fn hugepage_limits_follow_the_node_not_the_request() {
    // The case of issue #14: the kubelet's 2MB and 1GB limits on this VM's shape.
    let req: cri::CreateContainerRequest = fixture(V1_CONTAINERS[0]);
    let spec = container(&req, &v1_without_hugetlb(), -1000);
    let json = serde_json::to_value(&spec).unwrap();
    assert!(
        json["linux"]["resources"].get("hugepageLimits").is_none(),
        "{json}"
    );

    // A pod that really asks for huge pages gets them where hugetlb is mounted.
    let req: cri::CreateContainerRequest = fixture(V1_CONTAINERS[2]);
    let spec = container(&req, &v1_with_hugetlb(), -1000);
    let json = serde_json::to_value(&spec).unwrap();
    assert_eq!(
        json["linux"]["resources"]["hugepageLimits"],
        serde_json::json!([
            {"pageSize": "2MB", "limit": 8 << 20},
            {"pageSize": "1GB", "limit": 0}
        ])
    );
}

#[test]
fn updates_apply_the_same_rules() {
    // UpdateContainerResources with the kubelet's resources (what in-place resize sends).
    for (name, nodes) in [
        (V1_CONTAINERS[0], v1_nodes().to_vec()),
        (V2_CONTAINERS[0], v2_nodes().to_vec()),
    ] {
        let req: cri::CreateContainerRequest = fixture(name);
        let asked = request_resources(&req);
        for (node_name, node) in nodes {
            let r = super::linux_resources(&asked, &node).unwrap();
            let at = format!("{name} on {node_name}");
            assert_eq!(r.hugepage_limits().is_some(), node.has("hugetlb"), "{at}");
            let swap = r.memory().and_then(|m| m.swap());
            // On v2 too: runc turns memory+swap = memory into memory.swap.max = 0, the
            // kubelet's own `unified` value.
            assert_eq!(swap.is_some(), node.swap_accounting, "{at}");
        }
    }
}

/// The pause container's spec for a sandbox request, as JSON, after checking what containerd
/// gives it: cpu shares 2 and no other resources (the pod's are the kubelet's pod cgroup's).
fn pause_spec_json(
    config: &cri::PodSandboxConfig,
    min_oom_score_adj: i32,
    at: &str,
) -> serde_json::Value {
    let linux = config.linux.as_ref().unwrap();
    let p = pod();
    let spec = sandbox_spec(&SandboxSpecInput {
        id: "sb1",
        config,
        image: &p.image,
        netns_path: Some(Path::new("/run/netns/cni-1")),
        files: &p.files,
        cgroups_path: &format!("{}/sb1", linux.cgroup_parent),
        min_oom_score_adj,
        userns: None,
    })
    .unwrap_or_else(|e| panic!("{at}: {e}"));
    let json = serde_json::to_value(&spec).unwrap();
    assert_eq!(
        json["linux"]["resources"]["cpu"],
        serde_json::json!({"shares": 2}),
        "{at}"
    );
    for absent in ["memory", "hugepageLimits", "unified"] {
        assert!(
            json["linux"]["resources"].get(absent).is_none(),
            "{at}: {absent}"
        );
    }
    json
}

#[test]
fn sandbox_resources_are_annotations_only() {
    // containerd gives the pause container cpu shares 2 and records the pod's resources as
    // annotations; overhead, unified, and the limits themselves are the kubelet's pod cgroup's.
    // The pause container's spec depends on no cgroup controller, so one node is enough.
    for name in [
        "gokubelet-1.28-run-pod-sandbox-burstable-v1.json",
        "gokubelet-1.28-run-pod-sandbox-burstable-v2.json",
    ] {
        let req: cri::RunPodSandboxRequest = fixture(name);
        let config = req.config.unwrap();
        let linux = config.linux.as_ref().unwrap();
        assert_eq!(
            linux.overhead,
            Some(cri::LinuxContainerResources::default())
        );
        {
            let json = pause_spec_json(&config, -1000, name);
            let at = name;
            let a = &json["annotations"];
            assert_eq!(a["io.kubernetes.cri.sandbox-cpu-period"], "100000", "{at}");
            assert_eq!(a["io.kubernetes.cri.sandbox-cpu-quota"], "50000", "{at}");
            assert_eq!(a["io.kubernetes.cri.sandbox-cpu-shares"], "102", "{at}");
            assert_eq!(
                a["io.kubernetes.cri.sandbox-memory"],
                (64u64 << 20).to_string(),
                "{at}"
            );
            assert_eq!(
                json["linux"]["cgroupsPath"],
                serde_json::json!(PathBuf::from(format!("{}/sb1", linux.cgroup_parent))),
                "{at}"
            );
            assert_eq!(json["process"]["oomScoreAdj"], -998, "{at}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Requests captured from a real Go kubelet 1.28.7 (`shim/tests/fixtures/captured/`): the raw
// protobuf bytes it sent, recorded by a proxy between it and ferrolet-cri on one of our VMs
// (cgroup v1 hybrid without hugetlb, swap accounted), for four static pods: `plain`
// (BestEffort), `initprobe` (two init containers, probes; BestEffort), `burstable` (cpu
// 100m/500m, memory 32Mi/64Mi) and `guaranteed` (cpu 250m, memory 64Mi).

/// Where the captured fixtures are.
const CAPTURED: &str = "tests/fixtures/captured";

/// File name prefixes of the captured CreateContainer and RunPodSandbox requests.
const CAPTURED_CONTAINER: &str = "gokubelet-1.28.7-create-container-";
const CAPTURED_SANDBOX: &str = "gokubelet-1.28.7-run-pod-sandbox-";

/// One captured request, decoded as `T`; every byte of it must be a field `T` knows.
fn captured_one<T: prost::Message + Default>(name: &str) -> T {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(CAPTURED)
        .join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let req = T::decode(bytes.as_slice()).unwrap_or_else(|e| panic!("{name}: {e}"));
    // prost skips fields it does not know; the same length back means there were none.
    assert_eq!(
        req.encoded_len(),
        bytes.len(),
        "{name}: fields prost does not know"
    );
    req
}

/// Every captured request named `<prefix><key>.pb`, as (key, request), by key.
fn captured<T: prost::Message + Default>(prefix: &str) -> Vec<(String, T)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(CAPTURED);
    let mut all: Vec<(String, T)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|name| {
            let key = name.strip_prefix(prefix)?.strip_suffix(".pb")?.to_owned();
            Some((key, captured_one(&name)))
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// What the kubelet asked for each captured container (`<pod>-<container>`): cpu period,
/// quota, shares, memory limit (0 = none), oom_score_adj (by QoS class).
const CAPTURED_RESOURCES: [(&str, i64, i64, i64, i64, i64); 7] = [
    ("burstable-app", 100_000, 50_000, 102, 64 << 20, 999),
    ("guaranteed-app", 100_000, 25_000, 256, 64 << 20, -997),
    ("initprobe-init-one", 100_000, 0, 2, 0, 1000),
    ("initprobe-init-two", 100_000, 0, 2, 0, 1000),
    ("initprobe-reader", 100_000, 0, 2, 0, 1000),
    ("initprobe-web", 100_000, 0, 2, 0, 1000),
    ("plain-sleeper", 100_000, 0, 2, 0, 1000),
];

fn page_limits(r: &cri::LinuxContainerResources) -> Vec<(&str, u64)> {
    r.hugepage_limits
        .iter()
        .map(|h| (h.page_size.as_str(), h.limit))
        .collect()
}

#[test]
fn the_captures_are_whole_and_as_the_kubelet_sent_them() {
    let containers = captured::<cri::CreateContainerRequest>(CAPTURED_CONTAINER);
    let keys: Vec<&str> = containers.iter().map(|(k, _)| k.as_str()).collect();
    let want: Vec<&str> = CAPTURED_RESOURCES.iter().map(|w| w.0).collect();
    assert_eq!(keys, want);
    let sandboxes = captured::<cri::RunPodSandboxRequest>(CAPTURED_SANDBOX);
    let keys: Vec<&str> = sandboxes.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["burstable", "guaranteed", "initprobe", "plain"]);

    for (key, req) in &containers {
        let r = request_resources(req);
        let (_, period, quota, shares, memory, adj) =
            *CAPTURED_RESOURCES.iter().find(|w| w.0 == key).unwrap();
        assert_eq!(
            (
                r.cpu_period,
                r.cpu_quota,
                r.cpu_shares,
                r.memory_limit_in_bytes
            ),
            (period, quota, shares, memory),
            "{key}"
        );
        assert_eq!(r.oom_score_adj, adj, "{key}");
        // memory+swap = memory (no NodeSwap); nothing of cgroup v2, cpusets or classes.
        assert_eq!(r.memory_swap_limit_in_bytes, memory, "{key}");
        assert!(r.unified.is_empty() && r.cpuset_cpus.is_empty(), "{key}");
        // Every page size of the node at limit 0, although this node has no hugetlb.
        assert_eq!(page_limits(&r), [("2MB", 0), ("1GB", 0)], "{key}");
        let config = req.config.as_ref().unwrap();
        let sc = config
            .linux
            .as_ref()
            .unwrap()
            .security_context
            .as_ref()
            .unwrap();
        assert_eq!(
            sc.seccomp.as_ref().unwrap().profile_type,
            cri::security_profile::ProfileType::Unconfined as i32,
            "{key}"
        );
        // The sandbox the container joins asks for the runtime's default profile.
        let sandbox_sc = req
            .sandbox_config
            .as_ref()
            .and_then(|s| s.linux.as_ref())
            .and_then(|l| l.security_context.as_ref())
            .unwrap();
        assert_eq!(
            sandbox_sc.seccomp.as_ref().unwrap().profile_type,
            cri::security_profile::ProfileType::RuntimeDefault as i32,
            "{key}"
        );
    }
}

#[test]
fn captured_requests_on_v1_nodes() {
    for (key, req) in captured::<cri::CreateContainerRequest>(CAPTURED_CONTAINER) {
        for (node_name, node) in v1_nodes() {
            assert_request_as_containerd(&req, &format!("{key} on {node_name}"), &node);
        }
    }
}

#[test]
fn captured_requests_on_this_vms_shape() {
    // The node they were captured on: v1 hybrid, no hugetlb, swap accounted, and ferrolet-cri
    // at oom_score_adj 0, which it may not go below (no CAP_SYS_RESOURCE).
    let node = v1_without_hugetlb();
    for (key, req) in captured::<cri::CreateContainerRequest>(CAPTURED_CONTAINER) {
        let (_, period, quota, shares, memory, adj) =
            *CAPTURED_RESOURCES.iter().find(|w| w.0 == key).unwrap();
        let spec = container(&req, &node, 0);
        let json = serde_json::to_value(&spec).unwrap();
        let r = &json["linux"]["resources"];
        assert!(r.get("hugepageLimits").is_none(), "{key}: {r}");
        assert!(r.get("unified").is_none(), "{key}: {r}");
        let set = |v: i64| (v != 0).then_some(v);
        assert_eq!(r["cpu"]["period"], period, "{key}");
        assert_eq!(r["cpu"]["quota"].as_i64(), set(quota), "{key}");
        assert_eq!(r["cpu"]["shares"], shares, "{key}");
        assert_eq!(r["memory"]["limit"].as_i64(), set(memory), "{key}");
        assert_eq!(r["memory"]["swap"].as_i64(), set(memory), "{key}");
        assert_eq!(json["process"]["oomScoreAdj"], adj.max(0), "{key}");

        // Where hugetlb is mounted the kubelet's zero limits go to runc as containerd's do.
        let spec = container(&req, &v1_with_hugetlb(), 0);
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            json["linux"]["resources"]["hugepageLimits"],
            serde_json::json!([{"pageSize": "2MB", "limit": 0}, {"pageSize": "1GB", "limit": 0}]),
            "{key}"
        );
    }
}

#[test]
fn captured_sandboxes_as_containerd() {
    for (key, req) in captured::<cri::RunPodSandboxRequest>(CAPTURED_SANDBOX) {
        let config = req.config.unwrap();
        let linux = config.linux.as_ref().unwrap();
        assert_eq!(
            linux.overhead,
            Some(cri::LinuxContainerResources::default()),
            "{key}"
        );
        let asked = linux.resources.clone().unwrap();
        let json = pause_spec_json(&config, 0, &key);
        let a = &json["annotations"];
        for (annotation, value) in [
            ("io.kubernetes.cri.sandbox-cpu-period", asked.cpu_period),
            ("io.kubernetes.cri.sandbox-cpu-quota", asked.cpu_quota),
            ("io.kubernetes.cri.sandbox-cpu-shares", asked.cpu_shares),
            (
                "io.kubernetes.cri.sandbox-memory",
                asked.memory_limit_in_bytes,
            ),
        ] {
            assert_eq!(a[annotation], value.to_string(), "{key}: {annotation}");
        }
        // RuntimeDefault, as the kubelet asks for every sandbox: the pause process is filtered.
        assert!(json["linux"].get("seccomp").is_some(), "{key}");
        // -998 asked by containerd's rule, raised to our floor.
        assert_eq!(json["process"]["oomScoreAdj"], 0, "{key}");
    }
}

#[test]
fn derived_fixtures_agree_with_the_captures() {
    // What does not depend on how the kubelet was run (API server or standalone, cluster DNS,
    // cgroupRoot, pod names) must be the same in the hand-derived fixtures as in the captures.
    for (derived, captured) in [
        (V1_CONTAINERS[0], "burstable-app"),
        (V1_CONTAINERS[1], "plain-sleeper"),
    ] {
        let d: cri::CreateContainerRequest = fixture(derived);
        let c: cri::CreateContainerRequest =
            captured_one(&format!("{CAPTURED_CONTAINER}{captured}.pb"));
        let (dc, cc) = (d.config.unwrap(), c.config.unwrap());
        let (dl, cl) = (dc.linux.unwrap(), cc.linux.unwrap());
        assert_eq!(dl.resources, cl.resources, "{derived}");
        assert_eq!(dl.security_context, cl.security_context, "{derived}");
        let paths = |m: &[cri::Mount]| {
            m.iter()
                .map(|m| m.container_path.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(paths(&dc.mounts), paths(&cc.mounts), "{derived}");
        let keys = |m: &std::collections::HashMap<String, String>| {
            let mut k: Vec<_> = m.keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&dc.labels), keys(&cc.labels), "{derived}");
        assert_eq!(keys(&dc.annotations), keys(&cc.annotations), "{derived}");
        let (ds, cs) = (d.sandbox_config.unwrap(), c.sandbox_config.unwrap());
        let (dsl, csl) = (ds.linux.unwrap(), cs.linux.unwrap());
        assert_eq!(dsl.resources, csl.resources, "{derived}");
        assert_eq!(dsl.overhead, csl.overhead, "{derived}");
        assert_eq!(dsl.security_context, csl.security_context, "{derived}");
        // A static pod's uid is its config hash; its hostname is its name.
        assert_eq!(
            ds.metadata.as_ref().unwrap().uid,
            ds.annotations["kubernetes.io/config.hash"]
        );
        assert_eq!(
            cs.metadata.as_ref().unwrap().uid,
            cs.annotations["kubernetes.io/config.hash"]
        );
        assert_eq!(ds.hostname, ds.metadata.unwrap().name, "{derived}");
        assert_eq!(cs.hostname, cs.metadata.unwrap().name, "{captured}");
    }
    let d: cri::RunPodSandboxRequest = fixture("gokubelet-1.28-run-pod-sandbox-burstable-v1.json");
    let c: cri::RunPodSandboxRequest = captured_one(&format!("{CAPTURED_SANDBOX}burstable.pb"));
    let (dl, cl) = (
        d.config.unwrap().linux.unwrap(),
        c.config.unwrap().linux.unwrap(),
    );
    assert_eq!(dl.resources, cl.resources);
    assert_eq!(dl.overhead, cl.overhead);
    assert_eq!(dl.security_context, cl.security_context);
}
