//! In-memory indexes of sandboxes and containers, and their records on disk.
//!
//! containerd holds what exists (container records carry our metadata as an extension); the
//! files under `<root>` hold what changes (a sandbox's addresses, a container's start and
//! exit), so that a restarted `ferrolet-cri` reports the same ids, states and times.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use base64::Engine;
use ferrolet_proto::cri;
use ferrolet_proto::prost::Message;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

/// Label marking what a containerd container record is to CRI (as containerd's CRI does).
pub const KIND_LABEL: &str = "io.cri-containerd.kind";
/// [`KIND_LABEL`] of pause containers.
pub const KIND_SANDBOX: &str = "sandbox";
/// [`KIND_LABEL`] of application containers.
pub const KIND_CONTAINER: &str = "container";
/// Label naming a container's sandbox.
pub const SANDBOX_ID_LABEL: &str = "io.cri-containerd.sandbox-id";
/// Extension key under which our metadata rides on the containerd record.
pub const METADATA_EXTENSION: &str = "io.ferrolet.cri.metadata";
/// Type URL of that extension.
pub const METADATA_TYPE_URL: &str = "ferrolet.dev/cri/Metadata";
/// Label on the snapshots we make: writable ones keyed by container and sandbox ids, and the
/// read-only views of image volumes ([`image_volume_key`]).
pub const SNAPSHOT_OWNER_LABEL: &str = "io.ferrolet.cri.owner";
/// [`SNAPSHOT_OWNER_LABEL`]'s value.
pub const SNAPSHOT_OWNER: &str = "ferrolet-cri";

/// The key of the view container `id` mounts for its `index`-th CRI mount (an image volume):
/// the id first, so the sweeper knows whose it is.
pub fn image_volume_key(id: &str, index: usize) -> String {
    format!("{id}-image-volume-{index}")
}

/// The sandbox or container id a snapshot of ours belongs to (its key up to the first `-`).
pub fn snapshot_owner(key: &str) -> &str {
    key.split_once('-').map_or(key, |(id, _)| id)
}

/// A record that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Disk I/O failed.
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A record's bytes are not what we wrote.
    #[error("decoding {what}: {reason}")]
    Decode { what: String, reason: String },
}

/// A prost message carried inside JSON as base64 of its wire form.
pub mod proto_b64 {
    use super::*;

    /// Serializes a message.
    pub fn serialize<M: Message, S: serde::Serializer>(m: &M, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(m.encode_to_vec()))
    }

    /// Deserializes a message.
    pub fn deserialize<'de, M: Message + Default, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<M, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)?;
        M::decode(bytes.as_slice()).map_err(serde::de::Error::custom)
    }
}

/// An optional prost message inside JSON (`null` when absent).
pub mod proto_b64_opt {
    use super::*;

    /// Serializes a message, or null.
    pub fn serialize<M: Message, S: serde::Serializer>(
        m: &Option<M>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match m {
            Some(m) => proto_b64::serialize(m, s),
            None => s.serialize_none(),
        }
    }

    /// Deserializes a message, or null.
    pub fn deserialize<'de, M: Message + Default, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<M>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped<M: Message + Default>(#[serde(with = "proto_b64")] M);
        Ok(Option::<Wrapped<M>>::deserialize(d)?.map(|Wrapped(m)| m))
    }
}

/// JSON of a record.
pub fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Our record types always serialize.
    serde_json::to_vec(value).unwrap_or_default()
}

/// A record from JSON.
pub fn from_json<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Decode {
        what: what.to_string(),
        reason: e.to_string(),
    })
}

/// The metadata extension for a containerd record.
pub fn metadata_any<T: Serialize>(value: &T) -> ferrolet_proto::prost_types::Any {
    ferrolet_proto::prost_types::Any {
        type_url: METADATA_TYPE_URL.into(),
        value: to_json(value),
    }
}

/// Writes a record atomically (temp file, then rename), creating its directory.
pub async fn write_record<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    let bytes = to_json(value);
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let io = |what, source| StoreError::Io {
            what,
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("creating the dir of", e))?;
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &bytes).map_err(|e| io("writing", e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io("renaming into", e))
    })
    .await
    .map_err(|e| StoreError::Decode {
        what: "record write".into(),
        reason: e.to_string(),
    })?
}

/// Reads a record; `None` when the file does not exist.
pub async fn read_record<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    match tokio::fs::read(path).await {
        Ok(bytes) => from_json(&path.display().to_string(), &bytes).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::Io {
            what: "reading",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Removes a record directory; gone already is fine.
pub async fn remove_dir(dir: &Path) -> Result<(), StoreError> {
    match tokio::fs::remove_dir_all(dir).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StoreError::Io {
            what: "removing",
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// The CRI reservation key of a sandbox: two live sandboxes may not share it.
pub fn sandbox_name(meta: &cri::PodSandboxMetadata) -> String {
    format!(
        "{}_{}_{}_{}",
        meta.name, meta.namespace, meta.uid, meta.attempt
    )
}

/// The CRI reservation key of a container within its sandbox.
pub fn container_name(meta: &cri::ContainerMetadata, sandbox: &cri::PodSandboxMetadata) -> String {
    format!(
        "{}_{}_{}_{}_{}",
        meta.name, sandbox.name, sandbox.namespace, sandbox.uid, meta.attempt
    )
}

/// Something indexed by id with a reserved name.
pub trait Named {
    /// Its id.
    fn id(&self) -> &str;
}

/// Why a lookup found nothing usable.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No such id or id prefix.
    NotFound,
    /// The prefix matches more than one id.
    Ambiguous,
}

/// Ids (and unique id prefixes, as crictl users type them) to entries, plus name
/// reservations that live from the start of a create until the remove.
pub struct Index<T> {
    entries: RwLock<HashMap<String, Arc<T>>>,
    names: RwLock<HashMap<String, String>>,
}

impl<T> Default for Index<T> {
    fn default() -> Self {
        Self {
            entries: RwLock::new(HashMap::new()),
            names: RwLock::new(HashMap::new()),
        }
    }
}

impl<T: Named> Index<T> {
    /// Reserves `name` for `id`; the id holding it otherwise.
    pub fn reserve(&self, name: &str, id: &str) -> Result<(), String> {
        let mut names = self.names.write().unwrap_or_else(|p| p.into_inner());
        match names.get(name) {
            Some(holder) if holder != id => Err(holder.clone()),
            _ => {
                names.insert(name.to_string(), id.to_string());
                Ok(())
            }
        }
    }

    /// Releases `name` if `id` holds it.
    pub fn release(&self, name: &str, id: &str) {
        let mut names = self.names.write().unwrap_or_else(|p| p.into_inner());
        if names.get(name).is_some_and(|holder| holder == id) {
            names.remove(name);
        }
    }

    /// Adds or replaces an entry.
    pub fn insert(&self, entry: Arc<T>) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        entries.insert(entry.id().to_string(), entry);
    }

    /// Removes an entry by full id.
    pub fn remove(&self, id: &str) -> Option<Arc<T>> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        entries.remove(id)
    }

    /// Finds an entry by its full id only (for ids containerd reports).
    pub fn get_exact(&self, id: &str) -> Option<Arc<T>> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.get(id).cloned()
    }

    /// Finds an entry by id or unique id prefix.
    pub fn get(&self, id_or_prefix: &str) -> Result<Arc<T>, Lookup> {
        if id_or_prefix.is_empty() {
            return Err(Lookup::NotFound);
        }
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = entries.get(id_or_prefix) {
            return Ok(e.clone());
        }
        let mut found = entries
            .iter()
            .filter(|(id, _)| id.starts_with(id_or_prefix))
            .map(|(_, e)| e);
        match (found.next(), found.next()) {
            (Some(e), None) => Ok(e.clone()),
            (Some(_), Some(_)) => Err(Lookup::Ambiguous),
            _ => Err(Lookup::NotFound),
        }
    }

    /// Every entry.
    pub fn list(&self) -> Vec<Arc<T>> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.values().cloned().collect()
    }

    /// Every id that is indexed or holds a name reservation: the objects a call is making
    /// (reserved before anything is made) or that exist. What is not among them is nobody's.
    pub fn ids_in_use(&self) -> std::collections::HashSet<String> {
        let mut ids: std::collections::HashSet<String> = self
            .entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        ids.extend(
            self.names
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned(),
        );
        ids
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.entries.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether every label in `selector` is on `labels` with the same value (CRI filters).
pub fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Nanoseconds since the epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A new random 64-hex-digit id, as containerd's CRI makes them.
pub fn new_id() -> String {
    let mut bytes = [0u8; 32];
    if let Err(e) = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
    {
        // Without urandom, time and a counter still give unique ids on this node.
        tracing::warn!(error = %e, "reading /dev/urandom for an id");
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&now_ns().to_le_bytes());
        bytes[8..16].copy_from_slice(&n.to_le_bytes());
        bytes[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    }
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    struct E(String);
    impl Named for E {
        fn id(&self) -> &str {
            &self.0
        }
    }

    #[test]
    fn prefixes_and_reservations() {
        let idx = Index::<E>::default();
        idx.insert(Arc::new(E("abc123".into())));
        idx.insert(Arc::new(E("abd456".into())));
        assert_eq!(idx.get("abc").unwrap().0, "abc123");
        assert_eq!(idx.get("ab").err(), Some(Lookup::Ambiguous));
        assert_eq!(idx.get("x").err(), Some(Lookup::NotFound));
        assert_eq!(idx.get("").err(), Some(Lookup::NotFound));
        idx.reserve("pod", "abc123").unwrap();
        assert_eq!(idx.reserve("pod", "other").unwrap_err(), "abc123");
        idx.reserve("pod", "abc123").unwrap();
        idx.release("pod", "other");
        assert!(idx.reserve("pod", "other").is_err());
        idx.release("pod", "abc123");
        idx.reserve("pod", "other").unwrap();
    }

    #[test]
    fn ids_are_64_hex_and_differ() {
        let (a, b) = (new_id(), new_id());
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Rec {
        #[serde(with = "proto_b64")]
        config: cri::PodSandboxMetadata,
    }

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Maybe {
        #[serde(default, with = "proto_b64_opt")]
        config: Option<cri::PodSandboxMetadata>,
    }

    #[test]
    fn optional_protos_ride_in_json() {
        let some = Maybe {
            config: Some(cri::PodSandboxMetadata {
                name: "n".into(),
                ..Default::default()
            }),
        };
        assert_eq!(from_json::<Maybe>("m", &to_json(&some)).unwrap(), some);
        let none = Maybe { config: None };
        assert_eq!(from_json::<Maybe>("m", &to_json(&none)).unwrap(), none);
        assert_eq!(from_json::<Maybe>("m", b"{}").unwrap(), none);
    }

    #[test]
    fn protos_ride_in_json() {
        let r = Rec {
            config: cri::PodSandboxMetadata {
                name: "n".into(),
                uid: "u".into(),
                namespace: "ns".into(),
                attempt: 2,
            },
        };
        let back: Rec = from_json("rec", &to_json(&r)).unwrap();
        assert_eq!(back, r);
    }
}
