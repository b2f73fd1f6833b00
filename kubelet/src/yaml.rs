//! YAML from files and URLs read within a bound on flow nesting. libyaml (under
//! `serde_yaml_ng`) looks over every open flow collection (`[`, `{`) at each token for keys
//! gone stale, so a document of nested brackets costs its depth times its length: 7 KB of
//! `[` took 1.5 s in an optimised build, and 70 KB would take minutes (found by the
//! `manifest` fuzz target). The Go kubelet's YAML reader bounds depth too. A pod nests a
//! dozen levels; [`MAX_FLOW_DEPTH`] leaves room for any real one.

/// The deepest flow nesting a document may have.
pub(crate) const MAX_FLOW_DEPTH: usize = 64;

/// A document nested past [`MAX_FLOW_DEPTH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "flow collections ('[' or '{{') nested deeper than {MAX_FLOW_DEPTH} levels at byte {offset}"
)]
pub(crate) struct TooDeep {
    /// Where the bracket past the bound is.
    pub offset: usize,
}

/// Checks `text`'s flow nesting before a YAML parser sees it. Brackets in quoted scalars
/// and comments do not count; one in a plain or block scalar may, which only makes the
/// count larger than libyaml's, never smaller, and no real manifest has 64 of those open.
pub(crate) fn check_flow_depth(text: &[u8]) -> Result<(), TooDeep> {
    #[derive(Clone, Copy, PartialEq)]
    enum In {
        Plain,
        Single,
        Double,
        Comment,
    }
    let mut state = In::Plain;
    let mut depth = 0usize;
    let mut prev = b'\n';
    let mut bytes = text.iter().enumerate().peekable();
    while let Some((offset, &b)) = bytes.next() {
        match state {
            In::Plain => match b {
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_FLOW_DEPTH {
                        return Err(TooDeep { offset });
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                // A quote or a comment starts only where a scalar or a token may: `it's` is
                // a plain scalar and `a#b` has no comment.
                b'\'' | b'"' | b'#' if b" \t\r\n[{,:".contains(&prev) => {
                    state = match b {
                        b'\'' => In::Single,
                        b'"' => In::Double,
                        _ => In::Comment,
                    };
                }
                _ => {}
            },
            // `''` is a quote inside single quotes.
            In::Single if b == b'\'' && bytes.next_if(|&(_, &next)| next == b'\'').is_none() => {
                state = In::Plain;
            }
            In::Double if b == b'\\' => {
                bytes.next();
            }
            In::Double if b == b'"' => state = In::Plain,
            In::Comment if b == b'\n' => state = In::Plain,
            _ => {}
        }
        prev = b;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_documents_pass() {
        let pod = br#"
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: "a[b"}, annotations: {x: '[[[[{'}}
spec:
  containers:
  - name: c   # a comment with [[[[ in it
    image: busybox
    command: ["sh", "-c", "echo it's [fine] \"[[\""]
    args: [a[b, 'it''s [[[[']
    env: [{name: A, value: "{{{{"}]
"#;
        assert_eq!(check_flow_depth(pod), Ok(()));
        let nested = format!(
            "{}{}",
            "[".repeat(MAX_FLOW_DEPTH),
            "]".repeat(MAX_FLOW_DEPTH)
        );
        assert_eq!(check_flow_depth(nested.as_bytes()), Ok(()));
    }

    #[test]
    fn deep_nesting_is_refused_at_the_bracket_past_the_bound() {
        let deep = "a: ".to_string() + &"[{".repeat(MAX_FLOW_DEPTH);
        let err = check_flow_depth(deep.as_bytes()).unwrap_err();
        assert_eq!(err.offset, 3 + MAX_FLOW_DEPTH);
        assert!(err.to_string().contains("deeper than 64 levels"), "{err}");
        // Closing what was opened makes room again, however long the document.
        let wide = "[[]]".repeat(100_000);
        assert_eq!(check_flow_depth(wide.as_bytes()), Ok(()));
    }
}
