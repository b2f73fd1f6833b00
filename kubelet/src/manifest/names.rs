//! Syntax rules for names in the Kubernetes API (RFC 1123 labels and subdomains, label keys
//! and values, IANA service names, environment variable names), with the API server's own
//! messages so users see the words they already know.

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_MAX: usize = 63;
const IANA_SVC_NAME_MAX: usize = 15;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const QUALIFIED_NAME_SLASHES_MSG: &str = "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const ENV_VAR_NAME_MSG: &str = "a valid environment variable name must consist only of printable ASCII characters other than '='";

fn max_len(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn dns_label_syntax(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
        }
        _ => false,
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn qualified_syntax(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// An RFC 1123 label (container, volume, namespace names): the reasons it is not one.
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX {
        errs.push(max_len(DNS1123_LABEL_MAX));
    }
    if !dns_label_syntax(s) {
        errs.push(DNS1123_LABEL_MSG.to_string());
    }
    errs
}

/// An RFC 1123 subdomain (pod names, label-key prefixes): the reasons it is not one.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len(DNS1123_SUBDOMAIN_MAX));
    }
    if s.is_empty() || !s.split('.').all(dns_label_syntax) {
        errs.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    errs
}

/// A qualified name (`[prefix/]name`, label and annotation keys): the reasons it is not one.
pub fn qualified_name(s: &str) -> Vec<String> {
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                return vec!["prefix part must be non-empty".to_string()];
            }
            let prefix_errs = dns1123_subdomain(prefix);
            if !prefix_errs.is_empty() {
                return prefix_errs
                    .into_iter()
                    .map(|e| format!("prefix part {e}"))
                    .collect();
            }
            *name
        }
        _ => return vec![QUALIFIED_NAME_SLASHES_MSG.to_string()],
    };
    let mut errs = Vec::new();
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len(QUALIFIED_NAME_MAX)));
    }
    if !name.is_empty() && !qualified_syntax(name) {
        errs.push(QUALIFIED_NAME_MSG.to_string());
    }
    errs
}

/// A label value: the reasons it is not one.
pub fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > LABEL_VALUE_MAX {
        errs.push(max_len(LABEL_VALUE_MAX));
    }
    if !s.is_empty() && !qualified_syntax(s) {
        errs.push(LABEL_VALUE_MSG.to_string());
    }
    errs
}

/// An IANA service name (named container ports): the reasons it is not one.
pub fn iana_svc_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > IANA_SVC_NAME_MAX {
        errs.push(max_len(IANA_SVC_NAME_MAX));
    }
    if !s
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if s.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if !s.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if s.starts_with('-') || s.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

/// An environment variable name under the 1.32 default (relaxed) rule: printable ASCII
/// without `=`.
pub fn env_var_name(s: &str) -> Vec<String> {
    if s.is_empty() || !s.bytes().all(|c| (b' '..=b'~').contains(&c) && c != b'=') {
        vec![ENV_VAR_NAME_MSG.to_string()]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(dns1123_label("web-1").is_empty());
        assert!(!dns1123_label("Web").is_empty());
        assert!(!dns1123_label("-a").is_empty());
        assert!(!dns1123_label("").is_empty());
        assert_eq!(
            dns1123_label(&"a".repeat(64))[0],
            "must be no more than 63 characters"
        );
        assert!(dns1123_subdomain("web.example-1.com").is_empty());
        assert!(!dns1123_subdomain("web..com").is_empty());
        assert!(!dns1123_subdomain("web_1").is_empty());
    }

    #[test]
    fn qualified_names_and_values() {
        assert!(qualified_name("app").is_empty());
        assert!(qualified_name("example.com/My_name").is_empty());
        assert!(!qualified_name("a/b/c").is_empty());
        assert!(qualified_name("Bad_/x")[0].starts_with("prefix part"));
        assert!(!qualified_name("bad key").is_empty());
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_x").is_empty());
        assert!(!label_value("-x").is_empty());
    }

    #[test]
    fn service_and_env_names() {
        assert!(iana_svc_name("http").is_empty());
        assert!(!iana_svc_name("8080").is_empty());
        assert!(!iana_svc_name("a--b").is_empty());
        assert!(!iana_svc_name("way-too-long-port-name").is_empty());
        assert!(env_var_name("MY_VAR.x-1").is_empty());
        assert!(env_var_name("1abc").is_empty());
        assert!(!env_var_name("A=B").is_empty());
        assert!(!env_var_name("").is_empty());
        assert!(!env_var_name("tab\t").is_empty());
    }
}
