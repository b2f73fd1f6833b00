//! Volume validation: unique DNS-label names, exactly one source, and the emptyDir,
//! hostPath and image sources this node agent mounts (the projected kinds:
//! [`super::projection`]).

use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, HostPathVolumeSource, ImageVolumeSource, Volume,
};

use super::{Errs, VolumeNames, has_backsteps, is_absolute, projection, quote};
use crate::manifest::defaults::source_count;
use crate::manifest::names;
use crate::manifest::quantity::parse_quantity;

const HOST_PATH_TYPES: &[&str] = &[
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
];

/// Validates the pod's volumes; returns the names mounts may refer to.
pub(super) fn volumes(errs: &mut Errs, volumes: &[Volume]) -> VolumeNames {
    let mut seen = VolumeNames::default();
    for (i, v) in volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}]");
        let name_path = format!("{path}.name");
        if v.name.is_empty() {
            errs.required(&name_path, "");
        } else {
            errs.name_check(&name_path, &v.name, names::dns1123_label(&v.name));
            if !seen.insert(&v.name, v.image.is_some()) {
                errs.duplicate(&name_path, &v.name);
            }
        }
        match source_count(v) {
            0 => errs.required(&path, "must specify a volume type"),
            1 => {}
            _ => errs.forbidden(&path, "may not specify more than 1 volume type"),
        }
        if let Some(h) = &v.host_path {
            host_path(errs, &format!("{path}.hostPath"), h);
        }
        if let Some(e) = &v.empty_dir {
            empty_dir(errs, &format!("{path}.emptyDir"), e);
        }
        if let Some(i) = &v.image {
            image(errs, &format!("{path}.image"), i);
        }
        if let Some(s) = &v.secret {
            projection::secret(errs, &format!("{path}.secret"), s);
        }
        if let Some(c) = &v.config_map {
            projection::config_map(errs, &format!("{path}.configMap"), c);
        }
        if let Some(d) = &v.downward_api {
            projection::downward_api(errs, &format!("{path}.downwardAPI"), d);
        }
        if let Some(p) = &v.projected {
            projection::projected(errs, &format!("{path}.projected"), p);
        }
    }
    seen
}

fn host_path(errs: &mut Errs, path: &str, h: &HostPathVolumeSource) {
    let p = format!("{path}.path");
    if h.path.is_empty() {
        errs.required(&p, "");
    } else {
        if !is_absolute(&h.path) {
            errs.invalid(&p, &quote(&h.path), "must be an absolute path");
        }
        if has_backsteps(&h.path) {
            errs.invalid(&p, &quote(&h.path), "must not contain '..'");
        }
    }
    let t = h.type_.as_deref().unwrap_or("");
    if !HOST_PATH_TYPES.contains(&t) {
        errs.not_supported(&format!("{path}.type"), t, HOST_PATH_TYPES);
    }
}

/// Go's validateImageVolumeSource: a reference, and a known pull policy.
fn image(errs: &mut Errs, path: &str, i: &ImageVolumeSource) {
    if i.reference.as_deref().unwrap_or("").is_empty() {
        errs.required(&format!("{path}.reference"), "");
    }
    errs.one_of(
        &format!("{path}.pullPolicy"),
        i.pull_policy.as_deref(),
        &["Always", "IfNotPresent", "Never"],
    );
}

fn empty_dir(errs: &mut Errs, path: &str, e: &EmptyDirVolumeSource) {
    let medium = e.medium.as_deref().unwrap_or("");
    if !(medium.is_empty() || medium == "Memory" || medium.starts_with("HugePages")) {
        errs.not_supported(
            &format!("{path}.medium"),
            medium,
            &["", "Memory", "HugePages"],
        );
    }
    if let Some(limit) = &e.size_limit {
        let p = format!("{path}.sizeLimit");
        match parse_quantity(&limit.0) {
            Err(err) => errs.invalid(&p, &quote(&limit.0), &err.to_string()),
            Ok(q) if q.is_negative() => {
                errs.forbidden(&p, "SizeLimit field must be a valid resource quantity")
            }
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{GOOD, errors, has};

    #[test]
    fn volume_rules() {
        let bad = GOOD
            .replace("name: host\n", "name: data\n")
            .replace("hostPath: {path: /var/tmp, type: DirectoryOrCreate}", "hostPath: {path: var/../tmp, type: Dir}\n    emptyDir: {medium: Disk, sizeLimit: -1Mi}");
        let e = errors(&bad);
        assert!(
            has(&e, "spec.volumes[1].name: Duplicate value: \"data\""),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.volumes[1]: Forbidden: may not specify more than 1 volume type"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.volumes[1].hostPath.path: Invalid value: \"var/../tmp\": must be an absolute path"
            ),
            "{e:?}"
        );
        assert!(has(&e, "must not contain '..'"), "{e:?}");
        assert!(
            has(
                &e,
                "spec.volumes[1].hostPath.type: Unsupported value: \"Dir\""
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.volumes[1].emptyDir.medium: Unsupported value: \"Disk\""
            ),
            "{e:?}"
        );
        assert!(
            has(&e, "spec.volumes[1].emptyDir.sizeLimit: Forbidden"),
            "{e:?}"
        );

        let e = errors(&GOOD.replace("sizeLimit: 16Mi", "sizeLimit: 16Zi"));
        assert!(
            has(
                &e,
                "spec.volumes[0].emptyDir.sizeLimit: Invalid value: \"16Zi\""
            ),
            "{e:?}"
        );
        let e = errors(&GOOD.replace("name: host\n", "name: Host_1\n"));
        assert!(
            has(&e, "spec.volumes[1].name: Invalid value: \"Host_1\""),
            "{e:?}"
        );
    }

    #[test]
    fn image_volume_rules() {
        // A good one (its pull policy defaulted), mounted without a subPath.
        let image = GOOD.replace(
            "hostPath: {path: /var/tmp, type: DirectoryOrCreate}",
            "image: {reference: 'example.com/tools:1'}",
        );
        let good = image.replace(", subPath: sub}", "}");
        assert_eq!(errors(&good), Vec::<String>::new());
        // subPath (and subPathExpr) not allowed; reference required; pull policy known.
        let e = errors(&image);
        assert!(
            has(
                &e,
                "spec.containers[0].volumeMounts[1].subPath: Invalid value: \"sub\": not allowed in image volume sources"
            ),
            "{e:?}"
        );
        let bad = good.replace(
            "image: {reference: 'example.com/tools:1'}",
            "image: {pullPolicy: Sometimes}",
        );
        let e = errors(&bad);
        assert!(
            has(&e, "spec.volumes[1].image.reference: Required value"),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.volumes[1].image.pullPolicy: Unsupported value: \"Sometimes\""
            ),
            "{e:?}"
        );
    }
}
