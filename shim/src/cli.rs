//! `ferrolet-cri`'s command line. Settings come from three layers: [`Config::default`], then
//! the `--config` file, then the flags given. Every flag is an `Option` so that one not given
//! leaves the file's value alone; the defaults `--help` shows are written into the help text
//! (and checked against [`Config::default`] by the tests) rather than set with clap's
//! `default_value`, which would make every flag look given and override the file.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, ConfigError, LogFormat};

/// The whole command line.
#[derive(Parser, Debug)]
#[command(
    name = "ferrolet-cri",
    version,
    about = "A CRI v1 runtime and image service on containerd",
    after_help = "Settings: the defaults shown, overridden by the --config file, overridden by \
                  the flags given."
)]
pub struct Cli {
    /// Flags of every command.
    #[command(flatten)]
    pub common: CommonArgs,
    /// The server's flags, when no command is named (`serve` is the default).
    #[command(flatten)]
    pub server: ServerArgs,
    /// What to do; none = serve.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Flags every command reads: the config file, containerd and logging. Global, so they may
/// come before or after the command's name (`--config F image import ...`).
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct CommonArgs {
    /// TOML config file; flags override what it sets.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// containerd's socket [default: /run/containerd/containerd.sock].
    #[arg(long, global = true, value_name = "SOCKET")]
    pub containerd: Option<String>,
    /// containerd namespace [default: k8s.io].
    #[arg(long, global = true, value_name = "NAME")]
    pub namespace: Option<String>,
    /// Log filter: error, warn, info, debug, trace, or EnvFilter directives [default: info].
    #[arg(long, global = true, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Log format [default: text].
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
}

/// Flags only the server reads.
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct ServerArgs {
    /// CRI endpoint to serve (unix:///path) [default: unix:///run/ferrolet/cri.sock].
    #[arg(long, value_name = "ENDPOINT")]
    pub listen: Option<String>,
    /// Directory of ferrolet-cri's own records [default: /var/lib/ferrolet/cri].
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Sandbox (pause) image; the built-in one needs no registry.
    #[arg(
        long,
        value_name = "IMAGE",
        help = concat!(
            "Sandbox (pause) image; the built-in one needs no registry [default: ferrolet.local/pause:",
            env!("CARGO_PKG_VERSION"),
            "]"
        )
    )]
    pub sandbox_image: Option<String>,
    /// Address of the streaming server (exec, attach, port-forward URLs) [default: 127.0.0.1].
    #[arg(long, value_name = "IP")]
    pub stream_server_address: Option<String>,
    /// Port of the streaming server, 0 for a free one [default: 0].
    #[arg(long, value_name = "PORT")]
    pub stream_server_port: Option<String>,
    /// containerd runtime (shim) type of the default handler.
    #[arg(
        long,
        value_name = "TYPE",
        help = concat!(
            "containerd runtime (shim) type of the default handler and of handlers naming none: \
             io.containerd.<name>.<version> (containerd runs containerd-shim-<name>-<version> \
             from its PATH; io.containerd.ferrolet.v1 is Ferrolet's own, installed beside \
             ferrolet-cri) or a shim's absolute path [default: ",
            crate::config::default_runtime_type!(),
            "]"
        )
    )]
    pub runtime_type: Option<String>,
}

/// The commands.
#[derive(Subcommand, Debug, PartialEq)]
pub enum Command {
    /// Serve CRI (the default).
    Serve(ServerArgs),
    /// Image tools for air-gapped nodes.
    Image {
        /// The image command.
        #[command(subcommand)]
        command: ImageCommand,
    },
}

/// `ferrolet-cri image ...`.
#[derive(Subcommand, Debug, PartialEq)]
pub enum ImageCommand {
    /// Import an OCI image layout directory, an OCI archive or a Docker archive (.tar).
    Import {
        /// Layout directory or archive.
        path: PathBuf,
        /// Name for the image (default: the layout's ref name annotation).
        #[arg(long)]
        name: Option<String>,
    },
}

/// A command line that parses but makes no sense.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Server flags before a command that is not the server.
    #[error("{0} only applies to the server (ferrolet-cri [serve]), not to `image`")]
    ServerFlagElsewhere(&'static str),
    /// The settings are not usable.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl ServerArgs {
    /// `later`'s flags where given, else ours: `ferrolet-cri --listen A serve --root B`.
    fn or(self, later: ServerArgs) -> ServerArgs {
        ServerArgs {
            listen: later.listen.or(self.listen),
            root: later.root.or(self.root),
            sandbox_image: later.sandbox_image.or(self.sandbox_image),
            stream_server_address: later.stream_server_address.or(self.stream_server_address),
            stream_server_port: later.stream_server_port.or(self.stream_server_port),
            runtime_type: later.runtime_type.or(self.runtime_type),
        }
    }

    /// The first flag given, for error messages.
    fn first_given(&self) -> Option<&'static str> {
        if self.listen.is_some() {
            Some("--listen")
        } else if self.root.is_some() {
            Some("--root")
        } else if self.sandbox_image.is_some() {
            Some("--sandbox-image")
        } else if self.stream_server_address.is_some() {
            Some("--stream-server-address")
        } else if self.stream_server_port.is_some() {
            Some("--stream-server-port")
        } else if self.runtime_type.is_some() {
            Some("--runtime-type")
        } else {
            None
        }
    }
}

impl Cli {
    /// The settings: defaults, then the file, then the flags given; validated.
    pub fn config(&self) -> Result<Config, CliError> {
        let server = match &self.command {
            None => Some(self.server.clone()),
            Some(Command::Serve(args)) => Some(self.server.clone().or(args.clone())),
            Some(Command::Image { .. }) => {
                if let Some(flag) = self.server.first_given() {
                    return Err(CliError::ServerFlagElsewhere(flag));
                }
                None
            }
        };
        let c = &self.common;
        let mut config = match &c.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        fn set<T: Clone>(slot: &mut T, flag: &Option<T>) {
            if let Some(v) = flag {
                *slot = v.clone();
            }
        }
        set(&mut config.containerd, &c.containerd);
        set(&mut config.namespace, &c.namespace);
        set(&mut config.log_level, &c.log_level);
        set(&mut config.log_format, &c.log_format);
        if let Some(s) = server {
            set(&mut config.listen, &s.listen);
            set(&mut config.root, &s.root);
            set(&mut config.sandbox_image, &s.sandbox_image);
            set(&mut config.stream_server_address, &s.stream_server_address);
            set(&mut config.stream_server_port, &s.stream_server_port);
            set(&mut config.runtime_type, &s.runtime_type);
        }
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::io::Write;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("ferrolet-cri").chain(args.iter().copied())).unwrap()
    }

    fn help(path: &[&str]) -> String {
        let mut cmd = Cli::command();
        cmd.build();
        let mut cmd = &mut cmd;
        for name in path {
            cmd = cmd.find_subcommand_mut(name).unwrap();
        }
        cmd.render_long_help().to_string()
    }

    /// The `[default: ...]` the help of `--long` shows, if any.
    fn shown_default(help: &str, long: &str) -> Option<String> {
        let head = format!("--{long} <");
        let mut lines = help.lines().skip_while(|l| !l.contains(&head));
        let first = lines.next()?;
        // An option's text ends where the next option starts.
        let text = std::iter::once(first)
            .chain(lines.take_while(|l| !l.trim_start().starts_with('-')))
            .collect::<Vec<_>>()
            .join(" ");
        let from = text.find("[default: ")? + "[default: ".len();
        let to = text[from..].find(']')? + from;
        Some(text[from..to].to_string())
    }

    #[test]
    fn help_shows_every_default_of_the_config_layer() {
        let d = Config::default();
        let top = help(&[]);
        assert!(
            top.contains("[default: unix:///run/ferrolet/cri.sock]"),
            "{top}"
        );
        let format = match d.log_format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        };
        let expected = [
            ("listen", d.listen.clone()),
            ("containerd", d.containerd.clone()),
            ("namespace", d.namespace.clone()),
            ("root", d.root.display().to_string()),
            ("sandbox-image", d.sandbox_image.clone()),
            ("stream-server-address", d.stream_server_address.clone()),
            ("stream-server-port", d.stream_server_port.clone()),
            ("runtime-type", d.runtime_type.clone()),
            ("log-level", d.log_level.clone()),
            ("log-format", format.to_string()),
        ];
        for (long, want) in &expected {
            assert_eq!(
                shown_default(&top, long).as_deref(),
                Some(want.as_str()),
                "--{long} in\n{top}"
            );
        }
        let serve = help(&["serve"]);
        for (long, want) in &expected {
            assert_eq!(
                shown_default(&serve, long).as_deref(),
                Some(want.as_str()),
                "serve --{long} in\n{serve}"
            );
        }
    }

    #[test]
    fn image_import_help_lists_only_what_the_import_reads() {
        let h = help(&["image", "import"]);
        for flag in [
            "--config",
            "--containerd",
            "--namespace",
            "--log-level",
            "--log-format",
            "--name",
        ] {
            assert!(h.contains(flag), "{flag} missing from\n{h}");
        }
        for flag in [
            "--listen",
            "--root",
            "--sandbox-image",
            "--stream-server-port",
            "--runtime-type",
        ] {
            assert!(!h.contains(flag), "{flag} in\n{h}");
        }
        assert!(!help(&["image"]).contains("--listen"));
    }

    #[test]
    fn flags_override_the_file_which_overrides_the_defaults() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(
            b"listen = \"unix:///tmp/file.sock\"\ncontainerd = \"/tmp/file-containerd.sock\"\n\
              root = \"/tmp/file-root\"\nlog_format = \"json\"\n",
        )
        .unwrap();
        let file = f.path().to_str().unwrap();

        // No flags: the file wins where it speaks, the defaults elsewhere.
        let c = parse(&["--config", file]).config().unwrap();
        assert_eq!(c.listen, "unix:///tmp/file.sock");
        assert_eq!(c.containerd, "/tmp/file-containerd.sock");
        assert_eq!(c.root, PathBuf::from("/tmp/file-root"));
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.namespace, Config::default().namespace);
        assert_eq!(c.sandbox_image, Config::default().sandbox_image);

        // Flags given win over the file, before or after `serve`.
        let c = parse(&[
            "--config",
            file,
            "--listen",
            "unix:///tmp/flag.sock",
            "serve",
            "--root",
            "/tmp/flag-root",
            "--namespace",
            "flag-ns",
        ])
        .config()
        .unwrap();
        assert_eq!(c.listen, "unix:///tmp/flag.sock");
        assert_eq!(c.root, PathBuf::from("/tmp/flag-root"));
        assert_eq!(c.namespace, "flag-ns");
        assert_eq!(c.containerd, "/tmp/file-containerd.sock");
        assert_eq!(c.runtime_type, crate::config::DEFAULT_RUNTIME_TYPE);

        let c = parse(&["serve", "--runtime-type", crate::config::FERROLET_SHIM])
            .config()
            .unwrap();
        assert_eq!(c.runtime_type, "io.containerd.ferrolet.v1");
        let err = parse(&["--runtime-type", "runc"]).config().unwrap_err();
        assert!(err.to_string().contains("runtime_type"), "{err}");

        // Without a file: the defaults.
        assert_eq!(parse(&[]).config().unwrap(), Config::default());
    }

    #[test]
    fn image_import_takes_the_common_flags_anywhere_and_no_server_flag() {
        let cli = parse(&[
            "--config",
            "/nonexistent.toml",
            "image",
            "import",
            "/tmp/layout",
            "--containerd",
            "/tmp/c.sock",
            "--name",
            "x:1",
        ]);
        assert_eq!(cli.common.config, Some("/nonexistent.toml".into()));
        assert_eq!(cli.common.containerd.as_deref(), Some("/tmp/c.sock"));
        assert_eq!(
            cli.command,
            Some(Command::Image {
                command: ImageCommand::Import {
                    path: "/tmp/layout".into(),
                    name: Some("x:1".into()),
                }
            })
        );
        assert!(
            Cli::try_parse_from(["ferrolet-cri", "image", "import", "/x", "--listen", "y"])
                .is_err()
        );
        let cli = parse(&["--listen", "unix:///x.sock", "image", "import", "/x"]);
        assert!(matches!(
            cli.config(),
            Err(CliError::ServerFlagElsewhere("--listen"))
        ));
    }
}
