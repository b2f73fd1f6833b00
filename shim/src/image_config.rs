//! The image config, the part of an image a runtime reads (index and manifest documents are
//! the registry module's `manifest`). It sits below both the image service, which stores it,
//! and `oci`, which builds container specs from it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
}
