//! Registry credentials and `WWW-Authenticate` challenges.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Credentials for one pull, with the fields of CRI's `AuthConfig`. Empty strings mean "not
/// given", as in the CRI message.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// User name for basic auth or the token server.
    pub username: String,
    /// Password for basic auth or the token server.
    pub password: String,
    /// `base64("user:pass")`, used when `username` is empty.
    pub auth: String,
    /// OAuth2 refresh token, exchanged at the token server (`grant_type=refresh_token`).
    pub identity_token: String,
    /// A bearer token sent to the registry as is.
    pub registry_token: String,
}

impl Credentials {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        self.username.is_empty()
            && self.password.is_empty()
            && self.auth.is_empty()
            && self.identity_token.is_empty()
            && self.registry_token.is_empty()
    }

    /// User and password from `username`/`password`, else decoded from `auth`.
    pub fn basic(&self) -> Result<Option<(String, String)>, String> {
        if !self.username.is_empty() {
            return Ok(Some((self.username.clone(), self.password.clone())));
        }
        if self.auth.is_empty() {
            return Ok(None);
        }
        let raw = STANDARD
            .decode(self.auth.trim())
            .map_err(|e| format!("auth is not base64: {e}"))?;
        let text = String::from_utf8(raw).map_err(|_| "auth is not UTF-8".to_string())?;
        match text.split_once(':') {
            Some((u, p)) if !u.is_empty() => Ok(Some((u.to_string(), p.to_string()))),
            _ => Err("auth does not decode to user:password".to_string()),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets must not reach logs through a {:?}.
        let set = |s: &str| if s.is_empty() { "" } else { "<redacted>" };
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &set(&self.password))
            .field("auth", &set(&self.auth))
            .field("identity_token", &set(&self.identity_token))
            .field("registry_token", &set(&self.registry_token))
            .finish()
    }
}

/// The `Authorization` value for basic auth.
pub fn basic_header(user: &str, password: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{user}:{password}")))
}

/// One challenge of a `WWW-Authenticate` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// Auth scheme, lowercased (`basic`, `bearer`).
    pub scheme: String,
    /// Parameters in order, names lowercased.
    pub params: Vec<(String, String)>,
}

impl Challenge {
    /// The value of parameter `name` (lowercase).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses a `WWW-Authenticate` value (RFC 7235): one or more challenges, each a scheme
/// followed by comma-separated `name=value` or `name="quoted value"` parameters.
pub fn parse_www_authenticate(header: &str) -> Vec<Challenge> {
    let b = header.as_bytes();
    let mut i = 0;
    let mut out: Vec<Challenge> = Vec::new();
    let is_sep = |c: u8| c == b',' || c == b'=' || c.is_ascii_whitespace() || c == b'"';
    loop {
        while i < b.len() && (b[i] == b',' || b[i].is_ascii_whitespace()) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let start = i;
        while i < b.len() && !is_sep(b[i]) {
            i += 1;
        }
        let token = &header[start..i];
        if token.is_empty() {
            // A stray quote or '=': skip it rather than loop forever.
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if j < b.len() && b[j] == b'=' && !out.is_empty() {
            i = j + 1;
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            let value = if i < b.len() && b[i] == b'"' {
                i += 1;
                let mut v = String::new();
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        i += 1;
                    }
                    // Push whole UTF-8 characters, not bytes.
                    let ch = header[i..].chars().next().unwrap_or('\u{fffd}');
                    v.push(ch);
                    i += ch.len_utf8();
                }
                i += 1;
                v
            } else {
                let s = i;
                while i < b.len() && b[i] != b',' && !b[i].is_ascii_whitespace() {
                    i += 1;
                }
                header[s..i].to_string()
            };
            if let Some(c) = out.last_mut() {
                c.params.push((token.to_ascii_lowercase(), value));
            }
        } else {
            out.push(Challenge {
                scheme: token.to_ascii_lowercase(),
                params: Vec::new(),
            });
        }
    }
    out
}

/// The token server's answer; registries use either field name.
#[derive(serde::Deserialize)]
pub(crate) struct TokenResponse {
    #[serde(default)]
    pub token: String,
    #[serde(default)]
    pub access_token: String,
}

impl TokenResponse {
    /// The token, whichever field carries it.
    pub(crate) fn into_token(self) -> Option<String> {
        [self.token, self.access_token]
            .into_iter()
            .find(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenge() {
        let c = parse_www_authenticate(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull""#,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].scheme, "bearer");
        assert_eq!(c[0].param("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(c[0].param("service"), Some("registry.docker.io"));
        assert_eq!(c[0].param("scope"), Some("repository:library/busybox:pull"));
    }

    #[test]
    fn basic_and_odd_spacing() {
        let c = parse_www_authenticate(r#"Basic realm="ferrolet-registry""#);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].scheme, "basic");
        assert_eq!(c[0].param("realm"), Some("ferrolet-registry"));

        let c = parse_www_authenticate(
            r#"BEARER  Realm = "http://a/t" , Service=svc,scope="repository:a/b:pull,push""#,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].scheme, "bearer");
        assert_eq!(c[0].param("realm"), Some("http://a/t"));
        assert_eq!(c[0].param("service"), Some("svc"));
        assert_eq!(c[0].param("scope"), Some("repository:a/b:pull,push"));
    }

    #[test]
    fn several_challenges_and_escapes() {
        let c = parse_www_authenticate(
            r#"Basic realm="a \"quoted\" realm", Bearer realm="https://t/x",service="é""#,
        );
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].param("realm"), Some(r#"a "quoted" realm"#));
        assert_eq!(c[1].scheme, "bearer");
        assert_eq!(c[1].param("service"), Some("é"));
    }

    #[test]
    fn garbage_does_not_panic() {
        for h in [
            "",
            "=",
            "\"",
            "Bearer realm=\"unterminated",
            "Bearer ,,, =x",
            "a=b",
        ] {
            let _ = parse_www_authenticate(h);
        }
        assert!(parse_www_authenticate("").is_empty());
    }

    #[test]
    fn credentials() {
        let c = Credentials {
            auth: STANDARD.encode("user:pa:ss"),
            ..Default::default()
        };
        assert_eq!(
            c.basic().unwrap(),
            Some(("user".to_string(), "pa:ss".to_string()))
        );
        let c = Credentials {
            username: "u".into(),
            password: "p".into(),
            auth: "ignored".into(),
            ..Default::default()
        };
        assert_eq!(c.basic().unwrap(), Some(("u".into(), "p".into())));
        assert!(
            Credentials {
                auth: "!!!".into(),
                ..Default::default()
            }
            .basic()
            .is_err()
        );
        assert_eq!(Credentials::default().basic().unwrap(), None);
        assert!(Credentials::default().is_empty());
        let dbg = format!(
            "{:?}",
            Credentials {
                password: "secret".into(),
                ..Default::default()
            }
        );
        assert!(!dbg.contains("secret"), "{dbg}");
        assert_eq!(
            basic_header("user", "password"),
            "Basic dXNlcjpwYXNzd29yZA=="
        );
    }
}
