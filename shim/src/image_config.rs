//! The image config, the part of an image a runtime reads (index and manifest documents are
//! the registry module's `manifest`): oci-spec's `ImageConfiguration` and `Config`, under the
//! names the code has used for them. It sits below both the image service, which stores it,
//! and `oci`, which builds container specs from it.

pub use oci_spec::image::{Config as ContainerDefaults, ImageConfiguration as ImageConfig};

/// Parses an image config. oci-spec insists on `architecture`, `os` and `rootfs.type`, which a
/// runtime never needed: a config without them is read as if they were empty, as before.
pub fn parse(bytes: &[u8]) -> Result<ImageConfig, serde_json::Error> {
    let mut doc: serde_json::Value = serde_json::from_slice(bytes)?;
    if let Some(obj) = doc.as_object_mut() {
        obj.entry("architecture").or_insert("".into());
        obj.entry("os").or_insert("".into());
        if let Some(rootfs) = obj.get_mut("rootfs").and_then(|r| r.as_object_mut()) {
            rootfs.entry("type").or_insert("".into());
            rootfs.entry("diff_ids").or_insert(serde_json::json!([]));
        }
    }
    serde_json::from_value(doc)
}

/// The image's user, split into CRI's uid or username (the group part is dropped, as CRI
/// reports only the user).
pub fn user(config: &ImageConfig) -> (Option<i64>, String) {
    let user = config
        .config()
        .as_ref()
        .and_then(|c| c.user().as_deref())
        .unwrap_or("");
    let name = user.split(':').next().unwrap_or("");
    match name.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, name.to_string()),
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
        let with = |u: &str| {
            let mut defaults = ContainerDefaults::default();
            defaults.set_user(Some(u.into()));
            let mut config = ImageConfig::default();
            config.set_config(Some(defaults));
            config
        };
        assert_eq!(user(&with("1000")), (Some(1000), String::new()));
        assert_eq!(user(&with("1000:1000")), (Some(1000), String::new()));
        assert_eq!(user(&with("app")), (None, "app".into()));
        assert_eq!(user(&with("app:staff")), (None, "app".into()));
        assert_eq!(user(&ImageConfig::default()), (None, String::new()));
    }

    #[test]
    fn configs_without_platform_fields_parse() {
        let c = parse(br#"{"rootfs":{"diff_ids":["sha256:aa"]},"config":{"Cmd":["sh"]}}"#).unwrap();
        assert_eq!(c.rootfs().diff_ids(), &["sha256:aa".to_string()]);
        assert_eq!(
            c.config().as_ref().unwrap().cmd().as_deref(),
            Some(&["sh".to_string()][..])
        );
        assert!(
            parse(br#"{"architecture":"amd64"}"#).is_err(),
            "rootfs stays required"
        );
        assert!(parse(b"[]").is_err());
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
