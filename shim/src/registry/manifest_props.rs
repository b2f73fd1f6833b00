//! Property tests for manifest and index parsing: whatever a registry sends, the parsers
//! answer with a value or an error, never a panic; well-formed documents parse back to what
//! they were built from.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use super::manifest::*;

/// Media types a registry may put anywhere, known and unknown.
fn media_type() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(OCI_MANIFEST.to_string()),
        Just(OCI_INDEX.to_string()),
        Just(DOCKER_MANIFEST.to_string()),
        Just(DOCKER_MANIFEST_LIST.to_string()),
        Just(DOCKER_SCHEMA1.to_string()),
        Just(OCI_CONFIG.to_string()),
        Just(DOCKER_CONFIG.to_string()),
        Just(DOCKER_LAYER_GZIP.to_string()),
        Just(OCI_LAYER_TAR.to_string()),
        Just(OCI_LAYER_ZSTD.to_string()),
        "[a-z./+-]{0,30}",
    ]
}

/// Digests, mostly well-formed.
fn digest() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[0-9a-f]{64}".prop_map(|h| format!("sha256:{h}")),
        1 => "\\PC{0,80}",
    ]
}

/// Any JSON value a field may hold instead of the one it should.
fn junk() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,20}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
    ]
}

fn size() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => junk(),
    ]
}

fn raw_descriptor() -> impl Strategy<Value = Value> {
    (media_type(), digest(), size())
        .prop_map(|(m, d, s)| json!({"mediaType": m, "digest": d, "size": s}))
}

fn platform() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just("linux".to_string()),
            Just("windows".to_string()),
            "[a-z]{0,8}"
        ],
        prop_oneof![
            Just("amd64".to_string()),
            Just("arm64".to_string()),
            "[a-z0-9]{0,8}"
        ],
        proptest::option::of(prop_oneof![
            Just("v1".to_string()),
            Just("v8".to_string()),
            "[a-z0-9]{0,4}"
        ]),
    )
        .prop_map(|(os, arch, variant)| {
            let mut p = json!({"os": os, "architecture": arch});
            if let Some(v) = variant {
                p["variant"] = json!(v);
            }
            p
        })
}

fn index_entry() -> impl Strategy<Value = Value> {
    (raw_descriptor(), proptest::option::of(platform())).prop_map(|(mut d, p)| {
        if let Some(p) = p {
            d["platform"] = p;
        }
        d
    })
}

/// Manifest- and index-shaped documents with arbitrary field values, and some fields missing.
fn document() -> impl Strategy<Value = Value> {
    (
        proptest::option::of(prop_oneof![Just(json!(2)), Just(json!(1)), junk()]),
        proptest::option::of(media_type()),
        proptest::option::of(prop_oneof![raw_descriptor(), junk()]),
        proptest::option::of(prop_oneof![
            proptest::collection::vec(raw_descriptor(), 0..4).prop_map(Value::from),
            junk()
        ]),
        proptest::option::of(prop_oneof![
            proptest::collection::vec(index_entry(), 0..5).prop_map(Value::from),
            junk()
        ]),
    )
        .prop_map(|(version, media_type, config, layers, manifests)| {
            let mut doc = serde_json::Map::new();
            let fields = [
                ("schemaVersion", version),
                ("mediaType", media_type.map(Value::from)),
                ("config", config),
                ("layers", layers),
                ("manifests", manifests),
            ];
            for (k, v) in fields {
                if let Some(v) = v {
                    doc.insert(k.to_string(), v);
                }
            }
            Value::Object(doc)
        })
}

/// Runs every parser on `body`, as a pull would.
fn parse_all(content_type: Option<&str>, body: &[u8]) {
    let _ = detect_media_type(content_type, body);
    if let Ok(m) = parse_manifest(body) {
        let _ = check_supported(&m);
        for l in m.layers() {
            let _ = layer_compression(l.media_type_str());
        }
    }
    if let Ok(entries) = parse_index(body) {
        let _ = select_platform(&entries, &current_platform());
        let _ = platforms_of(&entries);
        for e in &entries {
            let _ = e.validate();
        }
    }
}

proptest! {
    #[test]
    fn any_bytes_are_a_document_or_an_error(
        body in proptest::collection::vec(any::<u8>(), 0..256),
        content_type in proptest::option::of("\\PC{0,40}"),
    ) {
        parse_all(content_type.as_deref(), &body);
    }

    #[test]
    fn manifest_shaped_documents_are_a_value_or_an_error(doc in document()) {
        let body = serde_json::to_vec(&doc).unwrap();
        parse_all(None, &body);
        // A truncated body is an error, never a panic.
        for cut in [body.len() / 3, body.len() / 2, body.len().saturating_sub(1)] {
            parse_all(None, &body[..cut]);
        }
    }

    #[test]
    fn well_formed_manifests_parse_to_their_descriptors(
        config in ("[0-9a-f]{64}", 0i64..i64::MAX),
        layers in proptest::collection::vec(("[0-9a-f]{64}", 0i64..i64::MAX, media_type()), 0..6),
        docker in any::<bool>(),
    ) {
        let config = descriptor(OCI_CONFIG, &format!("sha256:{}", config.0), config.1 as u64).unwrap();
        let layers: Vec<Descriptor> = layers
            .into_iter()
            .map(|(h, size, media_type)| descriptor(&media_type, &format!("sha256:{h}"), size as u64).unwrap())
            .collect();
        let media_type = if docker { DOCKER_MANIFEST } else { OCI_MANIFEST };
        let body = serde_json::to_vec(&json!({
            "schemaVersion": 2, "mediaType": media_type, "config": config, "layers": layers,
        }))
        .unwrap();
        prop_assert_eq!(detect_media_type(None, &body).unwrap(), media_type);
        let parsed = parse_manifest(&body).unwrap();
        prop_assert_eq!(parsed.config(), &config);
        prop_assert_eq!(parsed.layers(), &layers);
    }

    #[test]
    fn a_selected_entry_matches_the_platform(entries in proptest::collection::vec(index_entry(), 0..8)) {
        let body = serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": entries})).unwrap();
        let mut want = Platform::default();
        want.set_architecture("amd64".into());
        want.set_os("linux".into());
        if let Ok(entries) = parse_index(&body)
            && let Some(e) = select_platform(&entries, &want)
        {
            let p = e.platform().as_ref().unwrap();
            prop_assert_eq!(p.os().to_string(), "linux");
            prop_assert_eq!(p.architecture().to_string(), "amd64");
            prop_assert_eq!(kind_of(e.media_type_str()), Some(Kind::Manifest));
        }
    }
}
