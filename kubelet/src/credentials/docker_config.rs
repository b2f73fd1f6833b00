//! Docker's credential files as the Go kubelet reads them (`pkg/credentialprovider/config.go`):
//! `config.json` (`{"auths": {<registry>: <entry>}}`) and the legacy `.dockercfg` (the map
//! alone). An entry's `auth` is `base64(user:password)` and wins over `username`/`password`.
//!
//! Parsing walks a `serde_json::Value` by hand instead of deriving, so no error message can
//! ever quote a credential back (serde's type errors print the offending value).

use serde_json::{Map, Value};

/// One registry's credentials from a Docker config file or pull secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credential {
    /// User name (from `username`, or decoded from `auth`).
    pub username: String,
    /// Password (from `password`, or decoded from `auth`).
    pub password: String,
    /// `email`: kept because the files carry it; CRI has no field for it.
    pub email: String,
    /// `identitytoken`: an OAuth2 refresh token for the registry's token server.
    pub identity_token: String,
    /// `registrytoken`: a bearer token sent to the registry as is.
    pub registry_token: String,
}

impl std::fmt::Debug for Credential {
    // Credentials must never reach a log, so Debug says only which fields are set.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |s: &str| if s.is_empty() { "<empty>" } else { "<set>" };
        f.debug_struct("Credential")
            .field("username", &set(&self.username))
            .field("password", &set(&self.password))
            .field("email", &set(&self.email))
            .field("identity_token", &set(&self.identity_token))
            .field("registry_token", &set(&self.registry_token))
            .finish()
    }
}

/// The registries of one file or secret with their credentials, in the file's order.
pub type DockerConfig = Vec<(String, Credential)>;

/// Why a Docker config could not be read. Messages name registries and fields, never values.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not JSON at all.
    #[error("not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// JSON of the wrong shape.
    #[error("{0} is not a JSON object")]
    NotAnObject(String),
    /// A field that must be a string is something else.
    #[error("registry {registry:?}: field {field:?} is not a string")]
    NotAString {
        /// The entry's registry key.
        registry: String,
        /// The field.
        field: String,
    },
    /// `auth` is not `base64(user:password)`.
    #[error("registry {registry:?}: unable to parse auth field: {reason}")]
    Auth {
        /// The entry's registry key.
        registry: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Parses a `config.json` (or a `.dockerconfigjson` secret value): its `auths` map. A file
/// without `auths` is valid and holds no credentials, as in Go.
pub fn parse_config_json(bytes: &[u8]) -> Result<DockerConfig, ConfigError> {
    let value: Value = serde_json::from_slice(bytes)?;
    let Value::Object(top) = value else {
        return Err(ConfigError::NotAnObject("the document".into()));
    };
    // Go's encoding/json matches field names case-insensitively.
    match field(&top, "auths") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(auths)) => parse_auths(auths),
        Some(_) => Err(ConfigError::NotAnObject("\"auths\"".into())),
    }
}

/// Parses a legacy `.dockercfg` (or a `.dockercfg` secret value): the registry map itself.
pub fn parse_dockercfg(bytes: &[u8]) -> Result<DockerConfig, ConfigError> {
    let value: Value = serde_json::from_slice(bytes)?;
    match value {
        Value::Object(auths) => parse_auths(&auths),
        Value::Null => Ok(Vec::new()),
        _ => Err(ConfigError::NotAnObject("the document".into())),
    }
}

fn parse_auths(auths: &Map<String, Value>) -> Result<DockerConfig, ConfigError> {
    auths
        .iter()
        .map(|(registry, entry)| Ok((registry.clone(), parse_entry(registry, entry)?)))
        .collect()
}

fn field<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).or_else(|| {
        object
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

fn parse_entry(registry: &str, entry: &Value) -> Result<Credential, ConfigError> {
    let object = match entry {
        Value::Object(o) => o,
        Value::Null => return Ok(Credential::default()),
        _ => return Err(ConfigError::NotAnObject(format!("registry {registry:?}"))),
    };
    let text = |name: &str| -> Result<String, ConfigError> {
        match field(object, name) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(ConfigError::NotAString {
                registry: registry.to_string(),
                field: name.to_string(),
            }),
        }
    };
    let mut credential = Credential {
        username: text("username")?,
        password: text("password")?,
        email: text("email")?,
        identity_token: text("identitytoken")?,
        registry_token: text("registrytoken")?,
    };
    let auth = text("auth")?;
    if !auth.is_empty() {
        let (user, password) = decode_auth(&auth).map_err(|reason| ConfigError::Auth {
            registry: registry.to_string(),
            reason,
        })?;
        credential.username = user;
        credential.password = password;
    }
    Ok(credential)
}

/// `base64(user:password)` → (user, password). Padded when the length is a multiple of four,
/// unpadded otherwise, as Go's decoder accepts.
fn decode_auth(field: &str) -> Result<(String, String), &'static str> {
    let bytes = decode_base64(field).ok_or("not base64")?;
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8")?;
    let (user, password) = text
        .split_once(':')
        .ok_or("no ':' between user and password")?;
    Ok((user.to_string(), password.to_string()))
}

/// Standard-alphabet base64; `=` padding is required exactly when the input length is a
/// multiple of four (Go's `StdEncoding` vs `RawStdEncoding` choice). Line breaks are skipped,
/// as Go's decoder skips them.
fn decode_base64(input: &str) -> Option<Vec<u8>> {
    let clean: Vec<u8> = input
        .bytes()
        .filter(|b| *b != b'\r' && *b != b'\n')
        .collect();
    let body = if clean.len().is_multiple_of(4) {
        let pad = clean.iter().rev().take_while(|b| **b == b'=').count();
        if pad > 2 {
            return None;
        }
        &clean[..clean.len() - pad]
    } else {
        &clean[..]
    };
    if body.len() % 4 == 1 {
        return None;
    }
    let sextet = |b: u8| -> Option<u32> {
        Some(match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.chunks(4) {
        let mut acc = 0u32;
        for &b in chunk {
            acc = (acc << 6) | sextet(b)?;
        }
        // A short final chunk carries 12 or 18 bits: 1 or 2 bytes.
        match chunk.len() {
            4 => out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]),
            3 => out.extend_from_slice(&[(acc >> 10) as u8, (acc >> 2) as u8]),
            2 => out.push((acc >> 4) as u8),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn one(config: DockerConfig) -> (String, Credential) {
        assert_eq!(config.len(), 1, "{config:?}");
        config.into_iter().next().unwrap()
    }

    #[test]
    fn config_json_auth_is_decoded_and_wins_over_username() {
        // base64("alice:s3cr:et") — the password may itself hold a colon.
        let (key, c) = one(parse_config_json(
            br#"{"auths": {"https://index.docker.io/v1/": {
                    "auth": "YWxpY2U6czNjcjpldA==", "username": "bob", "password": "x",
                    "email": "a@example.com"}}}"#,
        )
        .unwrap());
        assert_eq!(key, "https://index.docker.io/v1/");
        assert_eq!(c.username, "alice");
        assert_eq!(c.password, "s3cr:et");
        assert_eq!(c.email, "a@example.com");
    }

    #[test]
    fn unpadded_auth_and_plain_fields_and_tokens() {
        // base64("u:pq") is "dTpwcQ==": here without its padding.
        let (_, c) = one(parse_config_json(br#"{"auths": {"r.io": {"auth": "dTpwcQ"}}}"#).unwrap());
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "pq"));
        let (_, c) = one(parse_config_json(
            br#"{"Auths": {"r.io": {"Username": "u", "password": "p",
                    "identitytoken": "idt", "registrytoken": "rt", "unknown": 1}}}"#,
        )
        .unwrap());
        assert_eq!(c.username, "u");
        assert_eq!(c.password, "p");
        assert_eq!(c.identity_token, "idt");
        assert_eq!(c.registry_token, "rt");
    }

    #[test]
    fn config_json_without_auths_is_empty_but_valid() {
        assert!(
            parse_config_json(br#"{"credHelpers": {"x.io": "helper"}}"#)
                .unwrap()
                .is_empty()
        );
        assert!(parse_config_json(br#"{"auths": null}"#).unwrap().is_empty());
    }

    #[test]
    fn legacy_dockercfg_is_the_bare_map() {
        let (key, c) =
            one(parse_dockercfg(br#"{"quay.io": {"auth": "dTpw", "email": "e@x"}}"#).unwrap());
        assert_eq!(key, "quay.io");
        assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p"));
    }

    #[test]
    fn bad_documents_are_refused_without_quoting_values() {
        for (doc, want) in [
            (
                &br#"{"auths": {"r.io": {"auth": "!!!!"}}}"#[..],
                "unable to parse auth field",
            ),
            (
                br#"{"auths": {"r.io": {"auth": "bm9jb2xvbg=="}}}"#,
                "no ':'",
            ),
            (
                br#"{"auths": {"r.io": {"password": 12345}}}"#,
                "not a string",
            ),
            (br#"{"auths": ["r.io"]}"#, "not a JSON object"),
            (br#"{"auths": {"r.io": "p4ss"}}"#, "not a JSON object"),
            (b"not json", "not valid JSON"),
        ] {
            let err = parse_config_json(doc).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
            assert!(!err.contains("12345") && !err.contains("p4ss"), "{err}");
        }
        assert!(parse_dockercfg(b"[1]").is_err());
    }

    #[test]
    fn base64_rules() {
        assert_eq!(decode_base64("").unwrap(), b"");
        assert_eq!(decode_base64("Zg==").unwrap(), b"f");
        assert_eq!(decode_base64("Zg").unwrap(), b"f");
        assert_eq!(decode_base64("Zm8=").unwrap(), b"fo");
        assert_eq!(decode_base64("Zm9v").unwrap(), b"foo");
        assert_eq!(decode_base64("Zm9v\nYmFy").unwrap(), b"foobar");
        assert!(decode_base64("Z").is_none());
        assert!(decode_base64("Zg=").is_none());
        assert!(decode_base64("Z===").is_none());
        assert!(decode_base64("Zm9-").is_none());
    }

    #[test]
    fn debug_never_shows_secrets() {
        let c = Credential {
            username: "alice".into(),
            password: "hunter2".into(),
            ..Default::default()
        };
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("alice") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
