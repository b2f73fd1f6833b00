//! What the container manager's checkpoints (the CPU manager's state, the device manager's
//! `kubelet_internal_checkpoint`) share with Go's `pkg/kubelet/checkpointmanager`: the atomic
//! file write, the checksum's hash, and the two `encoding/json` rules they need to read and
//! write files a Go kubelet reads and writes.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Go's `FileStore.Write`: a `.`-prefixed temporary file beside the target (mode 0600),
/// written, fsynced, closed, renamed over the target.
pub fn write_atomically(path: &Path, data: &[u8]) -> io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    // A crash's leftover would make create_new fail for ever.
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(data).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// FNV-32a, the hash of Go's `checksum.New` (over go-spew's rendering of the data).
pub fn fnv32a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// A string as Go's `encoding/json` writes it: HTML-safe, and `\b`/`\f` as `\u0008`/`\u000c`
/// as the Go 1.20/1.21 that builds kubelet 1.28 does (1.22 writes `\b`, `\f`).
pub fn go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' | '\0'..='\u{1f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Go's case-insensitive field match against an ASCII field name (Unicode simple folding,
/// under which only `ſ` and the Kelvin sign fold onto ASCII letters).
pub fn go_fold_eq(key: &str, field: &str) -> bool {
    let fold = |c: char| match c {
        'ſ' => 's',
        '\u{212a}' => 'k',
        c => c.to_ascii_lowercase(),
    };
    key.chars().map(fold).eq(field.chars().map(fold))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv32a_and_go_strings() {
        assert_eq!(fnv32a(""), 0x811c_9dc5);
        let mut s = String::new();
        go_json_string(&mut s, "a<\u{8}\"");
        assert_eq!(s, r#""a\u003c\u0008\"""#);
        assert!(go_fold_eq("policyNaMe", "policyname"));
        assert!(go_fold_eq("\u{212a}ey", "key"));
    }

    #[test]
    fn writes_replace_the_file_and_leave_no_temporary() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
