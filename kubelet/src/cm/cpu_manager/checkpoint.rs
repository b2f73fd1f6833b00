//! The `cpu_manager_state` file's format, byte for byte as the Go kubelet 1.28 writes and
//! reads it (`cpumanager/state/checkpoint.go` over `pkg/kubelet/checkpointmanager`).
//!
//! The checksum is Go's `checksum.New(cp)`: FNV-32a over `dump.ForHash(cp)`, which is
//! go-spew's `%#v` of the `*CPUManagerCheckpoint` with `Checksum` 0, map keys sorted, no
//! quoting of strings. For this one struct that text is
//! `(*state.CPUManagerCheckpoint){PolicyName:(string)P DefaultCPUSet:(string)D
//! Entries:(map[string]map[string]string)map[pod:map[ctr:cpus ...] ...]
//! Checksum:(checksum.Checksum)0}` (one line), a nil map being `<nil>`.
//!
//! Reading follows Go's order: the file is first taken as the old V1 form (entries keyed by
//! container id, checksum computed on the same type name) and migrated with the runtime's
//! containers; failing that, as V2. Go's JSON decoding rules that matter here are kept:
//! field names match case-insensitively, unknown fields are ignored, `null` leaves a string
//! as it was and makes a map nil, a repeated `entries` merges, a checksum of 0 is not checked.

use std::collections::BTreeMap;
use std::fmt::{self, Write};

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::cm::checkpoint_file::{fnv32a, go_fold_eq, go_json_string};

/// Container id → (pod UID, container name): the runtime's containers at start-up (Go's
/// `containermap.ContainerMap`), needed only to migrate a V1 file.
pub type ContainerMap = BTreeMap<String, (String, String)>;

/// Pod UID → container name → CPU list, as the file holds them.
pub type Entries = BTreeMap<String, BTreeMap<String, String>>;

/// Why a checkpoint's bytes are not a usable checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Not JSON, or JSON of the wrong shape.
    #[error("{0}")]
    Json(String),
    /// The checksum does not match the content (Go's `ErrCorruptCheckpoint`).
    #[error("checkpoint is corrupted")]
    Corrupted,
    /// A V1 entry names a container the runtime does not have.
    #[error(
        "error migrating v1 checkpoint state to v2 checkpoint state: containerID '{0}' not found in initial containers list"
    )]
    UnknownContainer(String),
}

/// One checkpoint (Go's `CPUManagerCheckpoint`, V2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// The policy that wrote it (`none`, `static`).
    pub policy_name: String,
    /// The shared pool (`defaultCpuSet`), in list form.
    pub default_cpu_set: String,
    /// Exclusive assignments.
    pub entries: Entries,
}

impl Checkpoint {
    /// Go's `checksum.New` of this checkpoint.
    pub fn checksum(&self) -> u32 {
        let entries = self
            .entries
            .iter()
            .map(|(pod, m)| (pod.clone(), Some(m.clone())))
            .collect();
        checksum_v2(&self.policy_name, &self.default_cpu_set, Some(&entries))
    }

    /// Go's `MarshalCheckpoint`: compact JSON, fields in Go's order, `entries` left out when
    /// empty, no trailing newline.
    pub fn marshal(&self) -> String {
        let mut out = String::from("{\"policyName\":");
        go_json_string(&mut out, &self.policy_name);
        out.push_str(",\"defaultCpuSet\":");
        go_json_string(&mut out, &self.default_cpu_set);
        if !self.entries.is_empty() {
            out.push_str(",\"entries\":{");
            for (i, (pod, containers)) in self.entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_string(&mut out, pod);
                out.push_str(":{");
                for (j, (name, cpus)) in containers.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    go_json_string(&mut out, name);
                    out.push(':');
                    go_json_string(&mut out, cpus);
                }
                out.push('}');
            }
            out.push('}');
        }
        let _ = write!(out, ",\"checksum\":{}}}", self.checksum());
        out
    }

    /// Reads a file's bytes as Go's `restoreState` does (V1 with migration, else V2), the
    /// checksum verified.
    pub fn unmarshal(blob: &[u8], containers: &ContainerMap) -> Result<Self, CheckpointError> {
        let fields = serde_json::from_slice::<TopLevel>(blob)
            .map_err(|e| CheckpointError::Json(e.to_string()))?
            .0;
        let raw = Raw::decode(&fields)?;
        if let Ok(v1) = raw.as_v1() {
            return migrate(v1, containers);
        }
        let v2 = raw.as_v2()?;
        if raw.checksum != 0
            && raw.checksum
                != u64::from(checksum_v2(
                    &raw.policy_name,
                    &raw.default_cpu_set,
                    v2.as_ref(),
                ))
        {
            return Err(CheckpointError::Corrupted);
        }
        let entries = v2
            .unwrap_or_default()
            .into_iter()
            .map(|(pod, m)| (pod, m.unwrap_or_default()))
            .collect();
        Ok(Checkpoint {
            policy_name: raw.policy_name,
            default_cpu_set: raw.default_cpu_set,
            entries,
        })
    }
}

/// V2 entries as decoded: either level may be a nil map.
type NilableEntries = BTreeMap<String, Option<BTreeMap<String, String>>>;

fn checksum_v2(policy: &str, default: &str, entries: Option<&NilableEntries>) -> u32 {
    let mut spewed = String::new();
    match entries {
        None => spewed.push_str("<nil>"),
        Some(m) => spew_map(
            &mut spewed,
            m.iter().map(|(k, v)| (k, v.as_ref())),
            |o, v| match v {
                None => o.push_str("<nil>"),
                Some(inner) => spew_map(o, inner.iter(), |o, s| o.push_str(s)),
            },
        ),
    }
    fnv32a(&spew_checkpoint(
        policy,
        default,
        "map[string]map[string]string",
        &spewed,
    ))
}

fn checksum_v1(policy: &str, default: &str, entries: Option<&BTreeMap<String, String>>) -> u32 {
    let mut spewed = String::new();
    match entries {
        None => spewed.push_str("<nil>"),
        Some(m) => spew_map(&mut spewed, m.iter(), |o, s| o.push_str(s)),
    }
    // Go hashes V1 under the V2 type name: V1 files predate the rename.
    fnv32a(&spew_checkpoint(
        policy,
        default,
        "map[string]string",
        &spewed,
    ))
}

/// go-spew `%#v` of `*state.CPUManagerCheckpoint` with checksum 0.
fn spew_checkpoint(policy: &str, default: &str, entries_type: &str, entries: &str) -> String {
    format!(
        "(*state.CPUManagerCheckpoint){{PolicyName:(string){policy} DefaultCPUSet:(string){default} Entries:({entries_type}){entries} Checksum:(checksum.Checksum)0}}"
    )
}

/// go-spew's map form (types shown only at the top): `map[k:v k:v]`, keys in byte order.
fn spew_map<'a, V: 'a>(
    out: &mut String,
    items: impl Iterator<Item = (&'a String, V)>,
    value: impl Fn(&mut String, V),
) {
    out.push_str("map[");
    for (i, (k, v)) in items.enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(k);
        out.push(':');
        value(out, v);
    }
    out.push(']');
}

/// The top-level object's members in document order (`None` for a JSON `null`, which Go
/// decodes into nothing).
struct TopLevel(Option<Vec<(String, Value)>>);

impl<'de> Deserialize<'de> for TopLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TopLevel;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a checkpoint object")
            }
            fn visit_unit<E: de::Error>(self) -> Result<TopLevel, E> {
                Ok(TopLevel(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevel, A::Error> {
                let mut fields = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    fields.push(entry);
                }
                Ok(TopLevel(Some(fields)))
            }
        }
        d.deserialize_any(V)
    }
}

/// The fields as Go would have set them, `entries` kept raw (V1 and V2 read it differently).
struct Raw {
    policy_name: String,
    default_cpu_set: String,
    entries: Vec<Value>,
    checksum: u64,
}

impl Raw {
    fn decode(fields: &Option<Vec<(String, Value)>>) -> Result<Self, CheckpointError> {
        let mut raw = Raw {
            policy_name: String::new(),
            default_cpu_set: String::new(),
            entries: Vec::new(),
            checksum: 0,
        };
        for (key, value) in fields.iter().flatten() {
            if go_fold_eq(key, "policyName") {
                set_string(&mut raw.policy_name, value, "policyName")?;
            } else if go_fold_eq(key, "defaultCpuSet") {
                set_string(&mut raw.default_cpu_set, value, "defaultCpuSet")?;
            } else if go_fold_eq(key, "entries") {
                raw.entries.push(value.clone());
            } else if go_fold_eq(key, "checksum") {
                match value {
                    Value::Null => {}
                    v => {
                        raw.checksum = v
                            .as_u64()
                            .ok_or_else(|| type_error(v, "checksum", "checksum.Checksum"))?;
                    }
                }
            }
        }
        Ok(raw)
    }

    /// Entries as V1's `map[string]string`, checksum verified.
    fn as_v1(&self) -> Result<V1, CheckpointError> {
        let mut entries = Some(BTreeMap::new());
        for value in &self.entries {
            match value {
                Value::Null => entries = None,
                Value::Object(o) => {
                    let m = entries.get_or_insert_with(BTreeMap::new);
                    for (k, v) in o {
                        let mut s = String::new();
                        set_string(&mut s, v, "entries")?;
                        m.insert(k.clone(), s);
                    }
                }
                v => return Err(type_error(v, "entries", "map[string]string")),
            }
        }
        if self.checksum != 0
            && self.checksum
                != u64::from(checksum_v1(
                    &self.policy_name,
                    &self.default_cpu_set,
                    entries.as_ref(),
                ))
        {
            return Err(CheckpointError::Corrupted);
        }
        Ok(V1 {
            policy_name: self.policy_name.clone(),
            default_cpu_set: self.default_cpu_set.clone(),
            entries: entries.unwrap_or_default(),
        })
    }

    /// Entries as V2's `map[string]map[string]string` (either level possibly nil).
    fn as_v2(&self) -> Result<Option<NilableEntries>, CheckpointError> {
        let mut entries: Option<NilableEntries> = Some(BTreeMap::new());
        for value in &self.entries {
            match value {
                Value::Null => entries = None,
                Value::Object(pods) => {
                    let m = entries.get_or_insert_with(BTreeMap::new);
                    for (pod, containers) in pods {
                        let inner = match containers {
                            Value::Null => None,
                            Value::Object(o) => {
                                let mut inner = BTreeMap::new();
                                for (name, cpus) in o {
                                    let mut s = String::new();
                                    set_string(&mut s, cpus, "entries")?;
                                    inner.insert(name.clone(), s);
                                }
                                Some(inner)
                            }
                            v => return Err(type_error(v, "entries", "map[string]string")),
                        };
                        m.insert(pod.clone(), inner);
                    }
                }
                v => {
                    return Err(type_error(v, "entries", "map[string]map[string]string"));
                }
            }
        }
        Ok(entries)
    }
}

struct V1 {
    policy_name: String,
    default_cpu_set: String,
    entries: BTreeMap<String, String>,
}

/// Go's `migrateV1CheckpointToV2Checkpoint`.
fn migrate(v1: V1, containers: &ContainerMap) -> Result<Checkpoint, CheckpointError> {
    let mut entries = Entries::new();
    for (id, cpus) in v1.entries {
        let (pod, name) = containers
            .get(&id)
            .ok_or_else(|| CheckpointError::UnknownContainer(id.clone()))?;
        entries
            .entry(pod.clone())
            .or_default()
            .insert(name.clone(), cpus);
    }
    Ok(Checkpoint {
        policy_name: v1.policy_name,
        default_cpu_set: v1.default_cpu_set,
        entries,
    })
}

/// Go's decoding of a JSON value into a string field: `null` changes nothing.
fn set_string(field: &mut String, value: &Value, name: &str) -> Result<(), CheckpointError> {
    match value {
        Value::Null => Ok(()),
        Value::String(s) => {
            s.clone_into(field);
            Ok(())
        }
        v => Err(type_error(v, name, "string")),
    }
}

fn type_error(value: &Value, field: &str, go_type: &str) -> CheckpointError {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    CheckpointError::Json(format!(
        "json: cannot unmarshal {kind} into Go struct field CPUManagerCheckpoint.{field} of type {go_type}"
    ))
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
