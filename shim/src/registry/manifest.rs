//! Manifest media types, descriptors, and picking a platform out of an index.
//!
//! Only what a pull needs: classify a manifest body, read its config and layers, and choose one
//! entry of an OCI index or Docker manifest list. Docker schema1 is refused outright, as
//! containerd 1.6 deprecated it and registries have stopped serving it.

use serde::{Deserialize, Serialize};

use crate::reference::validate_digest;

/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker image manifest, schema 2.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker manifest list, schema 2.
pub const DOCKER_MANIFEST_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Docker schema1 manifest (unsupported).
pub const DOCKER_SCHEMA1: &str = "application/vnd.docker.distribution.manifest.v1+json";
/// Signed Docker schema1 manifest (unsupported).
pub const DOCKER_SCHEMA1_SIGNED: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";
/// OCI image config.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Docker image config.
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
/// Docker gzip layer.
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
/// OCI uncompressed layer.
pub const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// OCI gzip layer.
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// OCI zstd layer.
pub const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";

/// The `Accept` header for manifest requests: every type we can use, none we cannot, so a
/// registry that could convert to schema1 does not.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// A content descriptor: what a manifest says about a blob.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the blob.
    pub media_type: String,
    /// Content digest (`sha256:<hex>`).
    pub digest: String,
    /// Size in bytes.
    pub size: i64,
}

impl Descriptor {
    /// Checks the fields a registry controls before we put them in URLs or trust sizes.
    pub(crate) fn validate(&self) -> Result<(), String> {
        validate_digest(&self.digest)?;
        if self.size < 0 {
            return Err(format!("descriptor {} has negative size", self.digest));
        }
        Ok(())
    }
}

/// An OS/architecture pair (plus optional variant) as in an index entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    /// `amd64`, `arm64`, ...
    pub architecture: String,
    /// `linux`, `windows`, ...
    pub os: String,
    /// CPU variant (`v8`, `v7`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// The platform this node runs containers for: linux on the build's architecture,
    /// named as Go does (`x86_64` → `amd64`).
    pub fn current() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            "arm" => "arm",
            other => other,
        };
        Platform {
            architecture: architecture.to_string(),
            os: "linux".to_string(),
            variant: None,
        }
    }

    /// The variant an entry may carry and still be this architecture's baseline.
    fn baseline_variant(&self) -> Option<&'static str> {
        match self.architecture.as_str() {
            "amd64" => Some("v1"),
            "arm64" => Some("v8"),
            _ => None,
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// What kind of document a manifest body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An image manifest (OCI or Docker schema2).
    Manifest,
    /// An OCI index or Docker manifest list.
    Index,
    /// Docker schema1, which we refuse.
    Schema1,
}

/// Layer compression, as containerd's diff service needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain tar.
    None,
    /// gzip.
    Gzip,
    /// zstd.
    Zstd,
}

/// The compression of a layer media type we can unpack, or `None` if we cannot.
pub fn layer_compression(media_type: &str) -> Option<Compression> {
    match media_type {
        DOCKER_LAYER_GZIP | OCI_LAYER_GZIP => Some(Compression::Gzip),
        OCI_LAYER_TAR => Some(Compression::None),
        OCI_LAYER_ZSTD => Some(Compression::Zstd),
        _ => None,
    }
}

/// Classifies a media type; `None` for anything that is not a manifest type.
pub fn kind_of(media_type: &str) -> Option<Kind> {
    match media_type {
        OCI_MANIFEST | DOCKER_MANIFEST => Some(Kind::Manifest),
        OCI_INDEX | DOCKER_MANIFEST_LIST => Some(Kind::Index),
        DOCKER_SCHEMA1 | DOCKER_SCHEMA1_SIGNED => Some(Kind::Schema1),
        _ => None,
    }
}

/// The fields of any manifest-like document that tell its kind apart.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Probe {
    schema_version: Option<i64>,
    media_type: Option<String>,
    manifests: Option<serde_json::Value>,
    config: Option<serde_json::Value>,
    layers: Option<serde_json::Value>,
}

/// Works out the media type of a manifest body from the response's `Content-Type` (without
/// parameters) and, when that is missing or generic, the document itself; OCI makes
/// `mediaType` optional, and some registries answer `application/json`.
pub fn detect_media_type(content_type: Option<&str>, body: &[u8]) -> Result<String, String> {
    let header = content_type
        .map(|ct| {
            ct.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|ct| !ct.is_empty());
    if let Some(ct) = &header
        && kind_of(ct).is_some()
    {
        return Ok(ct.clone());
    }
    let probe: Probe =
        serde_json::from_slice(body).map_err(|e| format!("manifest is not valid JSON: {e}"))?;
    if probe.schema_version == Some(1) {
        return Ok(DOCKER_SCHEMA1.to_string());
    }
    if let Some(mt) = probe.media_type {
        return Ok(mt);
    }
    if probe.manifests.is_some() {
        Ok(OCI_INDEX.to_string())
    } else if probe.config.is_some() || probe.layers.is_some() {
        Ok(OCI_MANIFEST.to_string())
    } else {
        Err(format!(
            "cannot tell the manifest type (Content-Type {:?}, no mediaType)",
            header.unwrap_or_default()
        ))
    }
}

/// An image manifest's parts.
#[derive(Debug, Clone)]
pub struct ImageManifest {
    /// The image config blob.
    pub config: Descriptor,
    /// Layers, base first.
    pub layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct RawManifest {
    config: Descriptor,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

/// Parses an image manifest and checks its descriptors are well-formed.
pub fn parse_manifest(body: &[u8]) -> Result<ImageManifest, String> {
    let raw: RawManifest =
        serde_json::from_slice(body).map_err(|e| format!("bad image manifest: {e}"))?;
    raw.config.validate()?;
    for layer in &raw.layers {
        layer.validate()?;
    }
    Ok(ImageManifest {
        config: raw.config,
        layers: raw.layers,
    })
}

impl ImageManifest {
    /// Checks that this is a container image we can unpack: a known config type and only
    /// layer types containerd's applier handles.
    pub fn check_supported(&self) -> Result<(), String> {
        if self.config.media_type != OCI_CONFIG && self.config.media_type != DOCKER_CONFIG {
            return Err(format!(
                "not a container image: config media type {:?}",
                self.config.media_type
            ));
        }
        for layer in &self.layers {
            if layer_compression(&layer.media_type).is_none() {
                return Err(format!(
                    "unsupported layer media type {:?} ({})",
                    layer.media_type, layer.digest
                ));
            }
        }
        Ok(())
    }
}

/// One entry of an index.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexEntry {
    /// Media type of the child manifest.
    pub media_type: String,
    /// Digest of the child manifest.
    pub digest: String,
    /// Size of the child manifest.
    pub size: i64,
    /// Platform, absent for non-image entries such as attestations.
    #[serde(default)]
    pub platform: Option<Platform>,
}

impl IndexEntry {
    /// The entry as a plain descriptor.
    pub fn descriptor(&self) -> Descriptor {
        Descriptor {
            media_type: self.media_type.clone(),
            digest: self.digest.clone(),
            size: self.size,
        }
    }
}

#[derive(Deserialize)]
struct RawIndex {
    manifests: Vec<IndexEntry>,
}

/// Parses an index's entries.
pub fn parse_index(body: &[u8]) -> Result<Vec<IndexEntry>, String> {
    let raw: RawIndex = serde_json::from_slice(body).map_err(|e| format!("bad index: {e}"))?;
    Ok(raw.manifests)
}

/// Picks the entry for `want`: an image manifest for its OS and architecture, preferring no
/// variant, then the architecture's baseline variant, then the first other variant, as
/// containerd's default matcher does for the common cases.
pub fn select_platform<'a>(entries: &'a [IndexEntry], want: &Platform) -> Option<&'a IndexEntry> {
    let rank = |e: &IndexEntry| -> Option<u8> {
        let p = e.platform.as_ref()?;
        if p.os != want.os || p.architecture != want.architecture {
            return None;
        }
        if kind_of(&e.media_type) != Some(Kind::Manifest) {
            return None;
        }
        match (&want.variant, p.variant.as_deref()) {
            (Some(v), Some(pv)) if v == pv => Some(0),
            (Some(_), _) => Some(2),
            (None, None) => Some(0),
            (None, Some(pv)) if Some(pv) == want.baseline_variant() => Some(1),
            (None, Some(_)) => Some(2),
        }
    };
    // min_by_key keeps the first of equal ranks, so index order breaks ties.
    entries
        .iter()
        .filter_map(|e| rank(e).map(|r| (r, e)))
        .min_by_key(|(r, _)| *r)
        .map(|(_, e)| e)
}

/// `os/arch[/variant]` of every entry, for an error message.
pub fn platforms_of(entries: &[IndexEntry]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| e.platform.as_ref().map(|p| p.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn index(entries: &[(&str, &str, Option<&str>, char)]) -> Vec<u8> {
        let manifests: Vec<serde_json::Value> = entries
            .iter()
            .map(|(os, arch, variant, d)| {
                let mut p = serde_json::json!({"os": os, "architecture": arch});
                if let Some(v) = variant {
                    p["variant"] = serde_json::json!(v);
                }
                serde_json::json!({
                    "mediaType": OCI_MANIFEST, "digest": digest(*d), "size": 100, "platform": p
                })
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests
        }))
        .unwrap()
    }

    fn amd64() -> Platform {
        Platform {
            architecture: "amd64".into(),
            os: "linux".into(),
            variant: None,
        }
    }

    #[test]
    fn selects_variantless_amd64() {
        let body = index(&[
            ("linux", "arm64", Some("v8"), 'a'),
            ("linux", "amd64", Some("v3"), 'b'),
            ("windows", "amd64", None, 'c'),
            ("linux", "amd64", None, 'd'),
            ("linux", "amd64", None, 'e'),
        ]);
        let entries = parse_index(&body).unwrap();
        assert_eq!(
            select_platform(&entries, &amd64()).unwrap().digest,
            digest('d')
        );
    }

    #[test]
    fn selects_variant_when_only_variants() {
        let body = index(&[
            ("linux", "amd64", Some("v3"), 'a'),
            ("linux", "amd64", Some("v1"), 'b'),
        ]);
        let entries = parse_index(&body).unwrap();
        assert_eq!(
            select_platform(&entries, &amd64()).unwrap().digest,
            digest('b')
        );
        let body = index(&[("linux", "amd64", Some("v3"), 'a')]);
        let entries = parse_index(&body).unwrap();
        assert_eq!(
            select_platform(&entries, &amd64()).unwrap().digest,
            digest('a')
        );
    }

    #[test]
    fn no_match_and_attestations() {
        // buildkit attestations sit in the index as unknown/unknown; they never match.
        let body = index(&[
            ("linux", "arm64", None, 'a'),
            ("unknown", "unknown", None, 'b'),
        ]);
        let entries = parse_index(&body).unwrap();
        assert!(select_platform(&entries, &amd64()).is_none());
        assert_eq!(platforms_of(&entries), ["linux/arm64", "unknown/unknown"]);
    }

    #[test]
    fn docker_manifest_list() {
        let body = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST_LIST,
            "manifests": [
                {"mediaType": DOCKER_MANIFEST, "digest": digest('a'), "size": 7,
                 "platform": {"architecture": "amd64", "os": "linux"}},
            ]
        });
        let body = serde_json::to_vec(&body).unwrap();
        assert_eq!(
            detect_media_type(None, &body).unwrap(),
            DOCKER_MANIFEST_LIST
        );
        let entries = parse_index(&body).unwrap();
        let e = select_platform(&entries, &amd64()).unwrap();
        assert_eq!(e.descriptor().size, 7);
        assert_eq!(e.descriptor().media_type, DOCKER_MANIFEST);
    }

    #[test]
    fn media_type_detection() {
        let oci = br#"{"schemaVersion":2,"config":{},"layers":[]}"#;
        assert_eq!(
            detect_media_type(Some("application/vnd.oci.image.manifest.v1+json"), oci).unwrap(),
            OCI_MANIFEST
        );
        assert_eq!(
            detect_media_type(
                Some("application/vnd.docker.distribution.manifest.v2+json; charset=utf-8"),
                oci
            )
            .unwrap(),
            DOCKER_MANIFEST
        );
        // Generic or missing Content-Type: fall back to the document.
        assert_eq!(
            detect_media_type(Some("application/json"), oci).unwrap(),
            OCI_MANIFEST
        );
        assert_eq!(
            detect_media_type(None, br#"{"schemaVersion":2,"manifests":[]}"#).unwrap(),
            OCI_INDEX
        );
        let s1 = br#"{"schemaVersion":1,"name":"x","fsLayers":[]}"#;
        assert_eq!(
            kind_of(&detect_media_type(None, s1).unwrap()),
            Some(Kind::Schema1)
        );
        assert_eq!(
            kind_of(&detect_media_type(Some(DOCKER_SCHEMA1_SIGNED), s1).unwrap()),
            Some(Kind::Schema1)
        );
        assert!(detect_media_type(None, b"not json").is_err());
        assert!(detect_media_type(None, b"{}").is_err());
    }

    #[test]
    fn manifest_parsing() {
        let m = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": {"mediaType": DOCKER_CONFIG, "digest": digest('c'), "size": 10},
            "layers": [
                {"mediaType": DOCKER_LAYER_GZIP, "digest": digest('1'), "size": 1},
                {"mediaType": OCI_LAYER_TAR, "digest": digest('2'), "size": 2},
                {"mediaType": OCI_LAYER_ZSTD, "digest": digest('3'), "size": 3},
            ]
        });
        let parsed = parse_manifest(&serde_json::to_vec(&m).unwrap()).unwrap();
        parsed.check_supported().unwrap();
        assert_eq!(parsed.config.digest, digest('c'));
        assert_eq!(parsed.layers.len(), 3);
        assert_eq!(
            layer_compression(&parsed.layers[2].media_type),
            Some(Compression::Zstd)
        );

        let mut bad = m.clone();
        bad["layers"][0]["mediaType"] =
            serde_json::json!("application/vnd.docker.image.rootfs.foreign.diff.tar.gzip");
        let e = parse_manifest(&serde_json::to_vec(&bad).unwrap())
            .unwrap()
            .check_supported()
            .unwrap_err();
        assert!(e.contains("unsupported layer media type"), "{e}");

        let mut bad = m.clone();
        bad["config"]["mediaType"] = serde_json::json!("application/vnd.cncf.helm.config.v1+json");
        let e = parse_manifest(&serde_json::to_vec(&bad).unwrap())
            .unwrap()
            .check_supported()
            .unwrap_err();
        assert!(e.contains("not a container image"), "{e}");

        let mut bad = m;
        bad["layers"][1]["digest"] = serde_json::json!("sha256:../../etc");
        assert!(parse_manifest(&serde_json::to_vec(&bad).unwrap()).is_err());
    }
}
