//! The command line containerd gives a shim: Go `flag` style (`-namespace k8s.io -id X start`),
//! single-dash long flags that clap does not parse, so read here.

use std::path::PathBuf;

/// What containerd asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// containerd namespace (`-namespace`).
    pub namespace: String,
    /// Task (container) id (`-id`).
    pub id: String,
    /// containerd's gRPC socket (`-address`).
    pub address: String,
    /// containerd's binary, for publishing (`-publish-binary`; we publish over ttrpc instead).
    pub publish_binary: String,
    /// The bundle, when not the working directory (`-bundle`).
    pub bundle: Option<PathBuf>,
    /// Verbose logs (`-debug`).
    pub debug: bool,
    /// `start`, `delete`, or none to serve.
    pub action: Option<Action>,
}

/// The shim commands containerd runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start (or find) the pod's shim and print its address.
    Start,
    /// Clean up after a dead shim's task and print a `DeleteResponse`.
    Delete,
}

/// A command line this shim does not understand.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    /// A flag with no value after it.
    #[error("flag -{0} needs a value")]
    MissingValue(String),
    /// An unknown flag or command.
    #[error("unknown argument {0:?}")]
    Unknown(String),
}

impl Args {
    /// Parses the arguments after the program name.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, ArgsError> {
        let mut out = Args::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
                out.action = Some(match arg.as_str() {
                    "start" => Action::Start,
                    "delete" => Action::Delete,
                    _ => return Err(ArgsError::Unknown(arg)),
                });
                continue;
            };
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (flag, None),
            };
            if name == "debug" {
                out.debug = inline.is_none_or(|v| v == "true");
                continue;
            }
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| ArgsError::MissingValue(name.to_string()))
            };
            match name {
                "namespace" => out.namespace = value()?,
                "id" => out.id = value()?,
                "address" => out.address = value()?,
                "publish-binary" => out.publish_binary = value()?,
                "bundle" => out.bundle = Some(value()?.into()),
                // Accepted and unused: the Go shim's socket override and v1 flags.
                "socket" | "containerd-binary" | "runtime-root" | "criu" | "systemd-cgroup" => {
                    value()?;
                }
                _ => return Err(ArgsError::Unknown(arg)),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Args, ArgsError> {
        Args::parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn reads_containerd_s_start_line() {
        let a = parse("-namespace k8s.io -address /run/c.sock -publish-binary /usr/bin/containerd -debug -id abc start").unwrap();
        assert_eq!(a.namespace, "k8s.io");
        assert_eq!(a.address, "/run/c.sock");
        assert_eq!(a.id, "abc");
        assert!(a.debug);
        assert_eq!(a.action, Some(Action::Start));
    }

    #[test]
    fn serve_has_no_action_and_takes_inline_values() {
        let a = parse("-namespace=ns --id=x -bundle /b").unwrap();
        assert_eq!((a.namespace.as_str(), a.id.as_str()), ("ns", "x"));
        assert_eq!(a.bundle, Some("/b".into()));
        assert_eq!(a.action, None);
    }

    #[test]
    fn refuses_unknown_and_valueless_flags() {
        assert!(matches!(parse("-bogus 1"), Err(ArgsError::Unknown(_))));
        assert!(matches!(parse("-id"), Err(ArgsError::MissingValue(_))));
        assert!(matches!(parse("restart"), Err(ArgsError::Unknown(_))));
    }
}
