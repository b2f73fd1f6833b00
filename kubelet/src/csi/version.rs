//! CSI drivers' versions as the Go kubelet reads them (`utilversion.ParseGeneric` and
//! `HighestSupportedVersion`): two or more dot-separated numbers, an optional leading `v`,
//! anything after the numbers ignored; only 1.x is supported.

use std::fmt;

/// A generic version: its numeric components.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(Vec<u64>);

impl Version {
    /// The major component.
    pub fn major(&self) -> u64 {
        self.0.first().copied().unwrap_or_default()
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

/// Go's `ParseGeneric`, with its messages.
pub fn parse_generic(text: &str) -> Result<Version, String> {
    let trimmed = text.trim_start();
    let rest = trimmed.strip_prefix('v').unwrap_or(trimmed);
    // The numbers: digits and dots, up to the first other character.
    let end = rest
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(rest.len());
    let mut numbers = &rest[..end];
    // A trailing dot belongs to what follows, as Go's regexp leaves it.
    while numbers.ends_with('.') {
        numbers = &numbers[..numbers.len() - 1];
    }
    if numbers.is_empty() || numbers.starts_with('.') || numbers.contains("..") {
        return Err(format!("could not parse {text:?} as version"));
    }
    let parts: Vec<&str> = numbers.split('.').collect();
    if parts.len() < 2 {
        return Err(format!("illegal version string {text:?}"));
    }
    let mut components = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        if i == 0 && part.len() > 1 && part.starts_with('0') {
            return Err(format!(
                "illegal zero-prefixed version component {part:?} in {text:?}"
            ));
        }
        let n = part.parse::<u64>().map_err(|e| {
            format!("illegal non-numeric version component {part:?} in {text:?}: {e}")
        })?;
        components.push(n);
    }
    Ok(Version(components))
}

/// Go's `HighestSupportedVersion`: the highest 1.x (or lower) version offered.
pub fn highest_supported(versions: &[String]) -> Result<Version, String> {
    if versions.is_empty() {
        return Err("empty array for supported versions".into());
    }
    let mut highest: Option<Version> = None;
    let mut last_error: Option<String> = None;
    for text in versions.iter().rev() {
        match parse_generic(text) {
            Ok(v) if v.major() > 1 => {}
            Ok(v) => {
                if highest.as_ref().is_none_or(|h| *h < v) {
                    highest = Some(v);
                }
            }
            Err(e) => last_error = Some(e),
        }
    }
    let Some(highest) = highest else {
        return Err(format!(
            "could not find a highest supported version from versions ([{}]) reported: {}",
            versions.join(" "),
            last_error.as_deref().unwrap_or("<nil>")
        ));
    };
    if highest.major() != 1 {
        return Err(format!(
            "highest supported version reported is {highest}, must be v1.x"
        ));
    }
    Ok(highest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        parse_generic(s).unwrap()
    }

    #[test]
    fn versions_parse_as_go_s_generic_ones() {
        assert_eq!(v("1.0.0").to_string(), "1.0.0");
        assert_eq!(v("v1.5").to_string(), "1.5");
        assert_eq!(v("1.2.3-beta.1").to_string(), "1.2.3");
        assert!(v("1.10.0") > v("1.9.0"));
        assert_eq!(
            parse_generic("1").unwrap_err(),
            "illegal version string \"1\""
        );
        assert_eq!(
            parse_generic("abc").unwrap_err(),
            "could not parse \"abc\" as version"
        );
        assert_eq!(
            parse_generic("01.2").unwrap_err(),
            "illegal zero-prefixed version component \"01\" in \"01.2\""
        );
    }

    #[test]
    fn the_highest_1_x_is_chosen() {
        let s = |l: &[&str]| l.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            highest_supported(&s(&["1.0.0", "1.2.0", "2.0.0"])).unwrap(),
            v("1.2.0")
        );
        assert_eq!(
            highest_supported(&s(&[])).unwrap_err(),
            "empty array for supported versions"
        );
        assert_eq!(
            highest_supported(&s(&["2.0.0", "3.0.0"])).unwrap_err(),
            "could not find a highest supported version from versions ([2.0.0 3.0.0]) \
             reported: <nil>"
        );
        assert_eq!(
            highest_supported(&s(&["0.3.0"])).unwrap_err(),
            "highest supported version reported is 0.3.0, must be v1.x"
        );
        assert_eq!(
            highest_supported(&s(&["x"])).unwrap_err(),
            "could not find a highest supported version from versions ([x]) reported: \
             could not parse \"x\" as version"
        );
    }
}
