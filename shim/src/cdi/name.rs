//! CDI names: a spec's `kind` (`vendor.com/class`) and a fully qualified device name
//! (`vendor.com/class=name`), with the reference implementation's character rules, so a name
//! valid here is valid for containerd and the other way round.

/// A fully qualified device name split into its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QualifiedName<'a> {
    /// `vendor.com`.
    pub vendor: &'a str,
    /// `class`.
    pub class: &'a str,
    /// The device's own name within the kind.
    pub name: &'a str,
}

/// Splits and checks `vendor/class=name`; the error says which part is wrong.
pub fn parse_qualified(device: &str) -> Result<QualifiedName<'_>, String> {
    // Like the reference, an absolute path or a name without `=` is "unqualified", not
    // malformed: a client that sent a device path where a CDI name belongs reads that.
    let unqualified = |missing: &str| format!("unqualified device, missing {missing}");
    if device.is_empty() || device.starts_with('/') {
        return Err(unqualified("vendor"));
    }
    let Some((kind, name)) = device.split_once('=') else {
        return Err(unqualified("vendor"));
    };
    if kind.is_empty() || name.is_empty() {
        return Err(unqualified("vendor"));
    }
    let (vendor, class) = parse_kind(kind).ok_or_else(|| unqualified("vendor"))?;
    validate_vendor(vendor)?;
    validate_class(class)?;
    validate_device_name(name)?;
    Ok(QualifiedName {
        vendor,
        class,
        name,
    })
}

/// `vendor/class` split at its first `/`; `None` unless both parts are non-empty.
pub fn parse_kind(kind: &str) -> Option<(&str, &str)> {
    kind.split_once('/')
        .filter(|(vendor, class)| !vendor.is_empty() && !class.is_empty())
}

/// A vendor: a letter, then letters, digits, `_`, `-`, `.`, ending in a letter or digit.
pub fn validate_vendor(vendor: &str) -> Result<(), String> {
    vendor_or_class(vendor).map_err(|e| format!("invalid vendor: {e}"))
}

/// A class: the same characters as a vendor.
pub fn validate_class(class: &str) -> Result<(), String> {
    vendor_or_class(class).map_err(|e| format!("invalid class: {e}"))
}

fn vendor_or_class(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return Err("empty name".into());
    };
    if !first.is_ascii_alphabetic() {
        return Err(format!("{name:?} should start with a letter"));
    }
    if let Some(c) = inner(bytes).find(|&c| !(c.is_ascii_alphanumeric() || b"_-.".contains(&c))) {
        return Err(format!("invalid character {:?} in {name:?}", char::from(c)));
    }
    if !last.is_ascii_alphanumeric() {
        return Err(format!("{name:?} should end with a letter or digit"));
    }
    Ok(())
}

/// A device name: a letter or digit, then letters, digits, `_`, `-`, `.`, `:`, ending in a
/// letter or digit.
pub fn validate_device_name(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return Err("invalid (empty) device name".into());
    };
    if !first.is_ascii_alphanumeric() {
        return Err(format!(
            "invalid device name {name:?}: should start with a letter or digit"
        ));
    }
    if let Some(c) = inner(bytes).find(|&c| !(c.is_ascii_alphanumeric() || b"_-.:".contains(&c))) {
        return Err(format!(
            "invalid character {:?} in device name {name:?}",
            char::from(c)
        ));
    }
    if !last.is_ascii_alphanumeric() {
        return Err(format!(
            "invalid device name {name:?}: should end with a letter or digit"
        ));
    }
    Ok(())
}

/// The bytes between the first and the last (none for names of one or two bytes).
fn inner(bytes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let end = bytes.len().saturating_sub(1).max(1);
    bytes.get(1..end).unwrap_or_default().iter().copied()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn qualified_names_split_into_vendor_class_and_name() {
        let q = parse_qualified("vendor.com/gpu=0").unwrap();
        assert_eq!((q.vendor, q.class, q.name), ("vendor.com", "gpu", "0"));
        let q = parse_qualified("nvidia.com/gpu=GPU-1a2b:mig.3").unwrap();
        assert_eq!(q.name, "GPU-1a2b:mig.3");
        // The class may hold dots (spec 0.6), and the name may hold '=' past the first.
        assert_eq!(
            parse_qualified("a.b/c.d=x").unwrap().class,
            "c.d",
            "dotted class"
        );
        assert!(parse_qualified("v.com/c=x=y").is_err());
    }

    #[test]
    fn malformed_names_say_what_is_wrong() {
        for (bad, want) in [
            ("", "missing vendor"),
            ("/dev/null", "missing vendor"),
            ("vendor.com/gpu", "missing vendor"),
            ("gpu=0", "missing vendor"),
            ("/gpu=0", "missing vendor"),
            ("vendor.com/=0", "missing vendor"),
            ("vendor.com/gpu=", "missing vendor"),
            ("1vendor.com/gpu=0", "invalid vendor"),
            ("vendor.com-/gpu=0", "invalid vendor"),
            ("vendor.com/g pu=0", "invalid class"),
            ("vendor.com/gpu=-0", "invalid device name"),
            ("vendor.com/gpu=0-", "invalid device name"),
            ("vendor.com/gpu=a/b", "invalid character '/'"),
        ] {
            let err = parse_qualified(bad).unwrap_err();
            assert!(err.contains(want), "{bad:?}: {err}");
        }
    }

    #[test]
    fn short_names_are_checked_at_both_ends() {
        assert!(validate_device_name("a").is_ok());
        assert!(validate_device_name("0").is_ok());
        assert!(validate_device_name("ab").is_ok());
        assert!(validate_device_name("a:").is_err());
        assert!(validate_device_name("_").is_err());
        assert!(validate_vendor("v").is_ok());
        assert!(validate_vendor("9").is_err());
        assert!(validate_class("").is_err());
    }

    #[test]
    fn kinds_need_both_halves() {
        assert_eq!(parse_kind("a.com/b"), Some(("a.com", "b")));
        assert_eq!(parse_kind("a.com/b/c"), Some(("a.com", "b/c")));
        assert_eq!(parse_kind("a.com"), None);
        assert_eq!(parse_kind("/b"), None);
        assert_eq!(parse_kind("a/"), None);
    }
}
