//! Manifest media types, descriptors, and picking a platform out of an index.
//!
//! Only what a pull needs: classify a manifest body, read its config and layers, and choose one
//! entry of an OCI index or Docker manifest list. Docker schema1 is refused outright, as
//! containerd 1.6 deprecated it and registries have stopped serving it.

use std::collections::HashMap;

use ferrolet_proto::containerd::types::Descriptor as CdDescriptor;
use serde::Deserialize;
use serde_json::{Map, Value};

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

use oci_spec::image::{Arch, Os};
pub use oci_spec::image::{Descriptor, ImageIndex, ImageManifest, Platform};

/// What the code needs of an OCI descriptor, as plain strings and containerd's signed size.
pub trait DescriptorExt {
    /// `sha256:<hex>`.
    fn digest_str(&self) -> &str;
    /// The media type as written.
    fn media_type_str(&self) -> &str;
    /// The size as containerd's APIs take it (sizes past `i64::MAX` are refused at parse).
    fn size_i64(&self) -> i64;
    /// Checks the fields a registry controls before we put them in URLs or trust sizes.
    fn validate(&self) -> Result<(), String>;
    /// containerd's descriptor of the same blob (annotations are not carried over).
    fn to_containerd(&self) -> CdDescriptor;
}

impl DescriptorExt for Descriptor {
    fn digest_str(&self) -> &str {
        self.digest().as_ref()
    }

    fn media_type_str(&self) -> &str {
        self.media_type().as_ref()
    }

    fn size_i64(&self) -> i64 {
        i64::try_from(self.size()).unwrap_or(i64::MAX)
    }

    fn validate(&self) -> Result<(), String> {
        validate_digest(self.digest_str())
    }

    fn to_containerd(&self) -> CdDescriptor {
        CdDescriptor {
            media_type: self.media_type_str().to_string(),
            digest: self.digest_str().to_string(),
            size: self.size_i64(),
            annotations: HashMap::new(),
        }
    }
}

/// A descriptor of `media_type`, `digest` and `size`, failing as a bad digest does.
pub fn descriptor(media_type: &str, digest: &str, size: u64) -> Result<Descriptor, String> {
    validate_digest(digest)?;
    let digest =
        oci_spec::image::Digest::try_from(digest).map_err(|e| format!("digest {digest:?}: {e}"))?;
    Ok(Descriptor::new(media_type.into(), size, digest))
}

/// The platform this node runs containers for: linux on the build's architecture, named as
/// Go does (`x86_64` → `amd64`).
pub fn current_platform() -> Platform {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "arm" => "arm",
        other => other,
    };
    let mut p = Platform::default();
    p.set_architecture(Arch::from(architecture));
    p.set_os(Os::Linux);
    p
}

/// The variant an entry may carry and still be this architecture's baseline.
fn baseline_variant(p: &Platform) -> Option<&'static str> {
    match p.architecture() {
        Arch::Amd64 => Some("v1"),
        Arch::ARM64 => Some("v8"),
        _ => None,
    }
}

/// `os/arch[/variant]`, as error messages show a platform.
pub fn platform_string(p: &Platform) -> String {
    match p.variant() {
        Some(v) => format!("{}/{}/{v}", p.os(), p.architecture()),
        None => format!("{}/{}", p.os(), p.architecture()),
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

/// The descriptor fields a pull reads (`mediaType`, `digest`, `size`, and `platform` in an
/// index) of a raw JSON descriptor. The others are left out, so a malformed `annotations` or
/// `urls` is no reason to refuse an image, as it never was.
fn core_descriptor(raw: &Value) -> Value {
    let Value::Object(raw) = raw else {
        // Not an object: serde says why.
        return raw.clone();
    };
    let core = ["mediaType", "digest", "size", "platform"]
        .into_iter()
        .filter_map(|key| Some((key.to_string(), raw.get(key)?.clone())))
        .collect::<Map<_, _>>();
    Value::Object(core)
}

/// A bad digest or a negative size in a raw descriptor, in our own words rather than in
/// oci-spec's type errors.
fn check_raw_descriptor(raw: &Value) -> Result<(), String> {
    let Some(Value::String(d)) = raw.get("digest") else {
        return Ok(());
    };
    validate_digest(d)?;
    if raw
        .get("size")
        .and_then(Value::as_i64)
        .is_some_and(|s| s < 0)
    {
        return Err(format!("descriptor {d} has negative size"));
    }
    Ok(())
}

/// Parses an image manifest (OCI or Docker schema2; only `config` and `layers` are read) and
/// checks its descriptors are well-formed.
pub fn parse_manifest(body: &[u8]) -> Result<ImageManifest, String> {
    let bad = |e: serde_json::Error| format!("bad image manifest: {e}");
    let doc: Value = serde_json::from_slice(body).map_err(bad)?;
    let Value::Object(doc) = doc else {
        // Not an object: serde says why.
        return serde_json::from_value::<ImageManifest>(doc).map_err(bad);
    };
    let mut core = Map::new();
    // Docker schema2 and OCI both say 2; a missing or odd one was never a reason to refuse.
    core.insert("schemaVersion".to_string(), Value::from(2));
    if let Some(c) = doc.get("config") {
        core.insert("config".to_string(), core_descriptor(c));
    }
    let layers = match doc.get("layers") {
        Some(Value::Array(layers)) => Value::Array(layers.iter().map(core_descriptor).collect()),
        None => Value::Array(Vec::new()),
        Some(other) => other.clone(),
    };
    core.insert("layers".to_string(), layers);
    let core = Value::Object(core);
    let manifest: ImageManifest = match serde_json::from_value(core.clone()) {
        Ok(m) => m,
        Err(e) => {
            // A negative size or a bad digest used to parse and then fail our checks: keep
            // reporting them that way.
            if let Some(c) = core.get("config") {
                check_raw_descriptor(c)?;
            }
            for l in core
                .get("layers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                check_raw_descriptor(l)?;
            }
            return Err(bad(e));
        }
    };
    manifest.config().validate()?;
    for layer in manifest.layers() {
        layer.validate()?;
    }
    Ok(manifest)
}

/// Checks that a manifest is a container image we can unpack: a known config type and only
/// layer types containerd's applier handles.
pub fn check_supported(manifest: &ImageManifest) -> Result<(), String> {
    let config = manifest.config().media_type_str();
    if config != OCI_CONFIG && config != DOCKER_CONFIG {
        return Err(format!(
            "not a container image: config media type {config:?}"
        ));
    }
    for layer in manifest.layers() {
        if layer_compression(layer.media_type_str()).is_none() {
            return Err(format!(
                "unsupported layer media type {:?} ({})",
                layer.media_type_str(),
                layer.digest_str()
            ));
        }
    }
    Ok(())
}

/// Parses an index's entries (OCI index or Docker manifest list). Entries keep their
/// platform; their digests are checked when one is chosen.
pub fn parse_index(body: &[u8]) -> Result<Vec<Descriptor>, String> {
    let bad = |e: serde_json::Error| format!("bad index: {e}");
    let doc: Value = serde_json::from_slice(body).map_err(bad)?;
    let Some(manifests) = doc.get("manifests") else {
        // Not an object, or no entries: serde says why.
        return serde_json::from_value::<ImageIndex>(doc)
            .map(|i| i.manifests().clone())
            .map_err(bad);
    };
    let entries = match manifests {
        Value::Array(entries) => Value::Array(entries.iter().map(core_descriptor).collect()),
        // Not an array: serde says why.
        other => other.clone(),
    };
    serde_json::from_value(entries).map_err(bad)
}

/// Picks the entry for `want`: an image manifest for its OS and architecture, preferring no
/// variant, then the architecture's baseline variant, then the first other variant, as
/// containerd's default matcher does for the common cases.
pub fn select_platform<'a>(entries: &'a [Descriptor], want: &Platform) -> Option<&'a Descriptor> {
    let rank = |e: &Descriptor| -> Option<u8> {
        let p = e.platform().as_ref()?;
        if p.os() != want.os() || p.architecture() != want.architecture() {
            return None;
        }
        if kind_of(e.media_type_str()) != Some(Kind::Manifest) {
            return None;
        }
        match (want.variant(), p.variant().as_deref()) {
            (Some(v), Some(pv)) if v == pv => Some(0),
            (Some(_), _) => Some(2),
            (None, None) => Some(0),
            (None, Some(pv)) if Some(pv) == baseline_variant(want) => Some(1),
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
pub fn platforms_of(entries: &[Descriptor]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| e.platform().as_ref().map(platform_string))
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
        let mut p = Platform::default();
        p.set_architecture("amd64".into());
        p.set_os("linux".into());
        p
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
            select_platform(&entries, &amd64()).unwrap().digest_str(),
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
            select_platform(&entries, &amd64()).unwrap().digest_str(),
            digest('b')
        );
        let body = index(&[("linux", "amd64", Some("v3"), 'a')]);
        let entries = parse_index(&body).unwrap();
        assert_eq!(
            select_platform(&entries, &amd64()).unwrap().digest_str(),
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
        assert_eq!(e.size(), 7);
        assert_eq!(e.media_type_str(), DOCKER_MANIFEST);
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
        check_supported(&parsed).unwrap();
        assert_eq!(parsed.config().digest_str(), digest('c'));
        assert_eq!(parsed.layers().len(), 3);
        assert_eq!(
            layer_compression(parsed.layers()[2].media_type_str()),
            Some(Compression::Zstd)
        );

        let mut bad = m.clone();
        bad["layers"][0]["mediaType"] =
            serde_json::json!("application/vnd.docker.image.rootfs.foreign.diff.tar.gzip");
        let e = check_supported(&parse_manifest(&serde_json::to_vec(&bad).unwrap()).unwrap())
            .unwrap_err();
        assert!(e.contains("unsupported layer media type"), "{e}");

        let mut bad = m.clone();
        bad["config"]["mediaType"] = serde_json::json!("application/vnd.cncf.helm.config.v1+json");
        let e = check_supported(&parse_manifest(&serde_json::to_vec(&bad).unwrap()).unwrap())
            .unwrap_err();
        assert!(e.contains("not a container image"), "{e}");

        let mut bad = m;
        bad["layers"][1]["digest"] = serde_json::json!("sha256:../../etc");
        assert!(parse_manifest(&serde_json::to_vec(&bad).unwrap()).is_err());
    }
}
