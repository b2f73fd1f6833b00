//! Ferrolet's fuzz targets: one `fn(&[u8])` per target, shared by the AFL++ binaries
//! (`fuzz_targets/`) and the corpus replay (`tests/replay.rs`). The ferrolet-proto and ferrolet
//! targets live in those crates' `fuzzing` modules (feature `fuzzing`), since they reach
//! crate-private parsers; the CNI and image targets need only public APIs, so they are here.
//! README.md maps each target to the code it reaches.

#[cfg(feature = "kubelet")]
pub use ferrolet::app::fuzzing::{certificate, kubelet_config, manifest, probe_http, server_query};
#[cfg(feature = "proto")]
pub use ferrolet_proto::fuzzing::{
    h2_authority, spdy_frames, spdy_session, stream_protocol, ws_session,
};

/// A target's entry point.
pub type Target = fn(&[u8]);

/// Every target by name, for the replay of `corpus/<name>/` and `regressions/<name>/`.
#[cfg(feature = "targets")]
pub const TARGETS: &[(&str, Target)] = &[
    ("h2_authority", h2_authority),
    ("spdy_frames", spdy_frames),
    ("spdy_session", spdy_session),
    ("ws_session", ws_session),
    ("stream_protocol", stream_protocol),
    ("quantity_duration", quantity_duration),
    ("probe_http", probe_http),
    ("manifest", manifest),
    ("kubelet_config", kubelet_config),
    ("server_query", server_query),
    ("certificate", certificate),
    ("cni", cni),
    ("image", image),
    ("registry_auth", registry_auth),
];

/// Kubernetes quantities (ferrolet's `manifest::quantity`) when the first byte is odd, else
/// Go durations (`ferrolet_proto::go_duration`); both check that what parses prints back to
/// text that parses to the same value.
#[cfg(all(feature = "proto", feature = "kubelet"))]
pub fn quantity_duration(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 1 {
        ferrolet::app::fuzzing::quantity(rest);
    } else {
        ferrolet_proto::fuzzing::go_duration(rest);
    }
}

/// CNI input from outside the process: the first byte picks a network configuration file
/// (`.conflist`, `.conf`, or either by content, as the conf dir is read), a plugin's result
/// (parsed from any version, then converted to every version, as ADD's output is), or a
/// result cache entry (as DEL, CHECK and GC read it, with the result inside it).
#[cfg(feature = "cni")]
pub fn cni(data: &[u8]) {
    use ferrolet_cni::{CachedAttachment, CniResult, NetworkConfigList};
    use std::path::Path;

    const VERSIONS: [&str; 7] = [
        "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
    ];
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let result = |bytes: &[u8], version: &str| {
        if let Ok(result) = CniResult::parse(bytes, version) {
            for v in VERSIONS {
                let _ = result.to_version(v);
            }
            let _ = result.to_current();
            let _ = result.first_ipv4();
            for ip in &result.ips {
                let _ = result.interface_of(ip);
            }
        }
    };
    match mode % 5 {
        0 => drop(NetworkConfigList::from_conflist_bytes(
            rest,
            Path::new("/etc/cni/net.d/10-fuzz.conflist"),
        )),
        1 => drop(NetworkConfigList::from_conf_bytes(
            rest,
            Path::new("/etc/cni/net.d/10-fuzz.conf"),
        )),
        2 => drop(NetworkConfigList::from_bytes(
            rest,
            Path::new("/etc/cni/net.d/10-fuzz.json"),
        )),
        3 => result(rest, VERSIONS[usize::from(mode >> 3) % VERSIONS.len()]),
        _ => {
            if let Ok(entry) = serde_json::from_slice::<CachedAttachment>(rest)
                && let Some(cached) = entry.result
            {
                result(cached.to_string().as_bytes(), "1.0.0");
            }
        }
    }
}

/// What a registry or an image archive hands the image service: the first byte picks a
/// manifest body (its media type from a `Content-Type` given in the first line, or from the
/// document, then parsed and checked as a pull does), an index (parsed, then a platform
/// chosen), an image config (parsed, its user and chain ids taken), or an image reference
/// (parsed and normalised; a reference must print as text that parses back to itself).
#[cfg(feature = "cri")]
pub fn image(data: &[u8]) {
    use ferrolet_cri::registry::manifest::{
        Kind, check_supported, current_platform, detect_media_type, kind_of, layer_compression,
        parse_index, parse_manifest, platforms_of, select_platform,
    };
    use ferrolet_cri::{image_config, reference};

    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => {
            let (content_type, body) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (std::str::from_utf8(&rest[..i]).ok(), &rest[i + 1..]),
                None => (None, rest),
            };
            let Ok(media_type) = detect_media_type(content_type, body) else {
                return;
            };
            if kind_of(&media_type) == Some(Kind::Manifest)
                && let Ok(manifest) = parse_manifest(body)
                && check_supported(&manifest).is_ok()
            {
                for layer in manifest.layers() {
                    let _ = layer_compression(layer.media_type().as_ref());
                }
            }
        }
        1 => {
            if let Ok(entries) = parse_index(rest) {
                let _ = select_platform(&entries, &current_platform());
                let _ = platforms_of(&entries);
            }
        }
        2 => {
            if let Ok(config) = image_config::parse(rest) {
                let _ = image_config::user(&config);
                let _ = image_config::chain_ids(config.rootfs().diff_ids());
            }
        }
        _ => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            let Ok(parsed) = reference::Reference::parse(text) else {
                return;
            };
            let printed = parsed.to_string();
            let again = reference::Reference::parse(&printed);
            assert!(
                again.as_ref().ok() == Some(&parsed),
                "{text:?} normalises to {printed:?}, which parses as {again:?}"
            );
            let _ = parsed.name();
            let _ = parsed.object();
            let _ = parsed.with_tag("v1");
            let _ = parsed.with_digest(
                "sha256:0000000000000000000000000000000000000000000000000000000000000000",
            );
        }
    }
}

/// A registry's `WWW-Authenticate` challenges, as the pull reads them to pick basic or bearer
/// auth and the token service's parameters.
#[cfg(feature = "cri")]
pub fn registry_auth(data: &[u8]) {
    let Ok(header) = std::str::from_utf8(data) else {
        return;
    };
    for challenge in ferrolet_cri::registry::auth::parse_www_authenticate(header) {
        for name in ["realm", "service", "scope"] {
            let _ = challenge.param(name);
        }
    }
}
