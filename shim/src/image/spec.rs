//! The OCI image documents ferrolet-cri reads: index, manifest and image config.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// OCI image index media type.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker manifest list media type.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// Whether a media type is an index (a list of per-platform manifests).
pub fn is_index(media_type: &str) -> bool {
    media_type == OCI_INDEX || media_type == DOCKER_LIST
}

/// A content descriptor as it appears in JSON documents.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the blob.
    #[serde(default)]
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Size in bytes.
    pub size: i64,
    /// Platform, in an index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

/// The platform an index entry is for.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Platform {
    /// CPU architecture (`amd64`).
    #[serde(default)]
    pub architecture: String,
    /// Operating system (`linux`).
    #[serde(default)]
    pub os: String,
    /// CPU variant (`v8`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// An image index or manifest list.
#[derive(Clone, Debug, Deserialize)]
pub struct Index {
    /// Per-platform manifests.
    pub manifests: Vec<Descriptor>,
}

impl Index {
    /// The manifest for linux/amd64, preferring an entry without a variant.
    pub fn linux_amd64(&self) -> Option<&Descriptor> {
        let mut matching = self.manifests.iter().filter(|d| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
        });
        let first = matching.next();
        first
            .into_iter()
            .chain(matching)
            .find(|d| d.platform.as_ref().is_some_and(|p| p.variant.is_none()))
            .or(first)
    }
}

/// An image manifest.
#[derive(Clone, Debug, Deserialize)]
pub struct Manifest {
    /// The image config blob.
    pub config: Descriptor,
    /// Layers, base first.
    pub layers: Vec<Descriptor>,
}

/// An image config (the parts a runtime uses).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ImageConfig {
    /// CPU architecture.
    #[serde(default)]
    pub architecture: String,
    /// Operating system.
    #[serde(default)]
    pub os: String,
    /// Defaults for containers run from the image.
    #[serde(default)]
    pub config: Option<ContainerDefaults>,
    /// Layer diff ids.
    pub rootfs: RootFs,
}

/// The image's defaults for its containers (Docker's `config` object).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerDefaults {
    /// `user`, `uid`, `user:group` or `uid:gid`.
    #[serde(default)]
    pub user: Option<String>,
    /// `KEY=value` pairs.
    #[serde(default)]
    pub env: Option<Vec<String>>,
    /// Entrypoint.
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    /// Default arguments.
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    /// Working directory.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Signal that stops the container.
    #[serde(default)]
    pub stop_signal: Option<String>,
    /// Volumes the image declares.
    #[serde(default)]
    pub volumes: Option<BTreeMap<String, serde_json::Value>>,
}

/// Layer diff ids.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct RootFs {
    /// Always `layers`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// sha256 of each uncompressed layer tar, base first.
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

impl ImageConfig {
    /// The image's user, split into CRI's uid or username (the group part is dropped, as CRI
    /// reports only the user).
    pub fn user(&self) -> (Option<i64>, String) {
        let user = self
            .config
            .as_ref()
            .and_then(|c| c.user.as_deref())
            .unwrap_or("");
        let name = user.split(':').next().unwrap_or("");
        match name.parse::<i64>() {
            Ok(uid) => (Some(uid), String::new()),
            Err(_) => (None, name.to_string()),
        }
    }

    /// Chain ids of the layers: the snapshot each layer becomes once applied on its parents.
    pub fn chain_ids(&self) -> Vec<String> {
        chain_ids(&self.rootfs.diff_ids)
    }
}

/// `chain[0] = diff[0]`, `chain[i] = sha256(chain[i-1] + " " + diff[i])`, per the OCI spec.
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    use sha2::{Digest, Sha256};
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for diff in diff_ids {
        let next = match out.last() {
            None => diff.clone(),
            Some(parent) => format!(
                "sha256:{}",
                hex::encode(Sha256::digest(format!("{parent} {diff}").as_bytes()))
            ),
        };
        out.push(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_split_into_uid_or_name() {
        let with = |u: &str| ImageConfig {
            config: Some(ContainerDefaults {
                user: Some(u.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(with("1000").user(), (Some(1000), String::new()));
        assert_eq!(with("1000:1000").user(), (Some(1000), String::new()));
        assert_eq!(with("app").user(), (None, "app".into()));
        assert_eq!(with("app:staff").user(), (None, "app".into()));
        assert_eq!(ImageConfig::default().user(), (None, String::new()));
    }

    #[test]
    fn chain_ids_follow_the_spec() {
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        let chain = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(chain[0], a);
        use sha2::{Digest, Sha256};
        let expect = hex::encode(Sha256::digest(format!("{a} {b}").as_bytes()));
        assert_eq!(chain[1], format!("sha256:{expect}"));
    }

    #[test]
    fn index_prefers_plain_linux_amd64() {
        let idx: Index = serde_json::from_str(
            r#"{"manifests":[
              {"mediaType":"m","digest":"sha256:1","size":1,"platform":{"architecture":"arm64","os":"linux"}},
              {"mediaType":"m","digest":"sha256:2","size":1,"platform":{"architecture":"amd64","os":"linux","variant":"v3"}},
              {"mediaType":"m","digest":"sha256:3","size":1,"platform":{"architecture":"amd64","os":"linux"}}
            ]}"#,
        )
        .unwrap();
        assert_eq!(idx.linux_amd64().unwrap().digest, "sha256:3");
    }
}
