//! The in-memory image index: what CRI calls an image (one config digest, many names), kept
//! in step with containerd's image records and rebuilt from them at start-up.

use std::collections::{BTreeSet, HashMap};
use std::sync::RwLock;

use crate::image_config::ImageConfig;

/// One CRI image.
#[derive(Clone, Debug)]
pub struct Image {
    /// Image id: the config digest.
    pub id: String,
    /// Every name pointing at it: tag refs (`repo:tag`) and digest refs (`repo@sha256:...`).
    pub references: BTreeSet<String>,
    /// The top-level descriptor the names point at (a manifest, or an index).
    pub target: ferrolet_proto::containerd::types::Descriptor,
    /// The platform manifest's digest.
    pub manifest_digest: String,
    /// Layers of the platform manifest, base first.
    pub layers: Vec<crate::registry::manifest::Descriptor>,
    /// Chain id of the top layer: the snapshot containers start from.
    pub chain_id: String,
    /// Bytes of content the image holds (manifest, config, layers, as pulled).
    pub size: u64,
    /// The parsed config.
    pub config: ImageConfig,
    /// The config exactly as stored, for verbose status.
    pub config_json: serde_json::Value,
    /// Pinned images are never removed by RemoveImage or image GC.
    pub pinned: bool,
}

impl Image {
    /// `repo:tag` names.
    pub fn repo_tags(&self) -> Vec<String> {
        self.references
            .iter()
            .filter(|r| !r.contains('@'))
            .cloned()
            .collect()
    }

    /// `repo@digest` names.
    pub fn repo_digests(&self) -> Vec<String> {
        self.references
            .iter()
            .filter(|r| r.contains('@'))
            .cloned()
            .collect()
    }
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Image>,
    by_ref: HashMap<String, String>,
}

/// Images by id and by name.
#[derive(Default)]
pub struct Store {
    inner: RwLock<Inner>,
}

impl Store {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds or merges an image: names move to it from any image that held them before, and an
    /// image left with no name is dropped (containerd would collect it).
    pub fn insert(&self, image: Image) {
        let mut inner = self.write();
        for name in &image.references {
            if let Some(old) = inner.by_ref.insert(name.clone(), image.id.clone())
                && old != image.id
                && let Some(prev) = inner.by_id.get_mut(&old)
            {
                prev.references.remove(name);
                if prev.references.is_empty() {
                    inner.by_id.remove(&old);
                }
            }
        }
        match inner.by_id.get_mut(&image.id) {
            Some(existing) => {
                existing.references.extend(image.references);
                existing.pinned |= image.pinned;
                existing.target = image.target;
            }
            None => {
                inner.by_id.insert(image.id.clone(), image);
            }
        }
    }

    /// Finds an image by name (already normalized), full id, bare hex id or unique id prefix.
    pub fn get(&self, name_or_id: &str) -> Option<Image> {
        let inner = self.read();
        if let Some(id) = inner.by_ref.get(name_or_id) {
            return inner.by_id.get(id).cloned();
        }
        let hex = name_or_id.strip_prefix("sha256:").unwrap_or(name_or_id);
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut found = inner.by_id.values().filter(|i| {
            i.id.strip_prefix("sha256:")
                .unwrap_or(&i.id)
                .starts_with(hex)
        });
        match (found.next(), found.next()) {
            (Some(one), None) => Some(one.clone()),
            _ => None,
        }
    }

    /// Whether the store already indexes an image with target `target_digest` under every one
    /// of `names` (with no names: any image with that target).
    pub fn covers(&self, target_digest: &str, names: &BTreeSet<String>) -> bool {
        let inner = self.read();
        let at_target = |id: &String| {
            inner
                .by_id
                .get(id)
                .is_some_and(|i| i.target.digest == target_digest)
        };
        if names.is_empty() {
            return inner
                .by_id
                .values()
                .any(|i| i.target.digest == target_digest);
        }
        names
            .iter()
            .all(|n| inner.by_ref.get(n).is_some_and(at_target))
    }

    /// Every image.
    pub fn list(&self) -> Vec<Image> {
        let mut all: Vec<Image> = self.read().by_id.values().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// Forgets one name; an id name forgets the whole image (containerd's CRI keeps an image
    /// as long as its id record exists, even with no tag left).
    pub fn remove_name(&self, name: &str) {
        let mut inner = self.write();
        if inner.by_id.contains_key(name) {
            drop(inner);
            self.remove(name);
            return;
        }
        if let Some(id) = inner.by_ref.remove(name)
            && let Some(image) = inner.by_id.get_mut(&id)
        {
            image.references.remove(name);
        }
    }

    /// Forgets an image and all its names.
    pub fn remove(&self, id: &str) {
        let mut inner = self.write();
        if let Some(image) = inner.by_id.remove(id) {
            for name in image.references {
                inner.by_ref.remove(&name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(id: &str, refs: &[&str]) -> Image {
        Image {
            id: id.into(),
            references: refs.iter().map(|s| s.to_string()).collect(),
            target: Default::default(),
            manifest_digest: String::new(),
            layers: Vec::new(),
            chain_id: String::new(),
            size: 0,
            config: Default::default(),
            config_json: serde_json::Value::Null,
            pinned: false,
        }
    }

    #[test]
    fn finds_by_name_id_and_prefix() {
        let s = Store::new();
        let id = format!("sha256:{}", "ab".repeat(32));
        s.insert(image(&id, &["docker.io/library/busybox:1"]));
        assert!(s.get("docker.io/library/busybox:1").is_some());
        assert!(s.get(&id).is_some());
        assert!(s.get(&"ab".repeat(32)).is_some());
        assert!(s.get("abab").is_some());
        assert!(s.get("docker.io/library/busybox:2").is_none());
        assert!(s.get("zz").is_none());
    }

    #[test]
    fn covers_only_names_indexed_at_the_same_target() {
        let s = Store::new();
        let mut img = image(&format!("sha256:{}", "c".repeat(64)), &["x:1"]);
        img.target.digest = "sha256:m1".into();
        s.insert(img);
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert!(s.covers("sha256:m1", &names(&["x:1"])));
        assert!(s.covers("sha256:m1", &names(&[])));
        assert!(!s.covers("sha256:m2", &names(&["x:1"])));
        assert!(!s.covers("sha256:m1", &names(&["x:1", "x:2"])));
    }

    #[test]
    fn a_retagged_name_moves_and_an_unnamed_image_goes() {
        let s = Store::new();
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        s.insert(image(&a, &["x:1"]));
        s.insert(image(&b, &["x:1"]));
        assert_eq!(s.get("x:1").unwrap().id, b);
        assert!(s.get(&a).is_none());
        s.remove(&b);
        assert!(s.get("x:1").is_none());
        assert!(s.list().is_empty());
    }
}
