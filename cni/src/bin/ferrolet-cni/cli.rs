//! `ferrolet-cni`'s command line, apart from what it does so that the packages' man page and
//! shell completions are made from the same definitions (`packaging/docgen` includes this
//! file).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use ferrolet_cni::{config, netns};

/// The whole command line.
#[derive(Parser, Debug)]
#[command(
    name = "ferrolet-cni",
    version,
    about = "Run and debug CNI networks and plugins",
    after_help = "Exit status: 0 success; 1 a plugin or network error, or `ls` finding no valid \
                  network config in --conf-dir; 2 a usage error."
)]
pub(crate) struct Cli {
    /// Directory of network configs (*.conf, *.conflist, *.json).
    #[arg(
        long,
        global = true,
        env = "NETCONFPATH",
        default_value = config::DEFAULT_CONF_DIR
    )]
    pub(crate) conf_dir: PathBuf,
    /// Plugin search path, `:`-separated.
    #[arg(
        long,
        global = true,
        env = "CNI_PATH",
        default_value = "/opt/cni/bin:/usr/lib/cni"
    )]
    pub(crate) bin_dir: String,
    /// Result cache directory (results under <dir>/results).
    #[arg(long, global = true, default_value = ferrolet_cni::cache::DEFAULT_CACHE_DIR)]
    pub(crate) cache_dir: PathBuf,
    /// Directory of named network namespaces.
    #[arg(long, global = true, default_value = netns::DEFAULT_NETNS_DIR)]
    pub(crate) netns_dir: PathBuf,
    /// Per-plugin-call timeout, in seconds.
    #[arg(long, global = true, default_value_t = 60)]
    pub(crate) timeout: u64,
    /// Print raw JSON instead of the human form.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// For every plugin call, print its stdin config, env, stdout, stderr, exit code, duration.
    #[arg(long, global = true)]
    pub(crate) trace: bool,
    /// What to do.
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Networks in the conf dir, their version and chain, and each plugin's binary and versions;
    /// exits 1, saying where it looked, when the conf dir holds no valid network config.
    Ls,
    /// Attach NETNS to NETWORK (ADD).
    Add(Attach),
    /// Check an attachment (CHECK).
    Check(Attach),
    /// Detach (DEL).
    Del(Attach),
    /// Whether the network's plugins are ready (STATUS, 1.1.0).
    Status { network: String },
    /// Garbage-collect cached attachments not listed with --valid (GC).
    Gc {
        network: String,
        /// A still-valid attachment, CONTAINERID:IFNAME (repeatable).
        #[arg(long = "valid")]
        valid: Vec<String>,
    },
    /// Named network namespaces.
    Netns {
        #[command(subcommand)]
        cmd: NetnsCmd,
    },
    /// Run a command inside a network namespace.
    Exec {
        /// Netns name (in --netns-dir) or path.
        netns: String,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// `netns` commands.
#[derive(Subcommand, Debug)]
pub(crate) enum NetnsCmd {
    /// Create a named netns.
    Add { name: String },
    /// Delete a named netns (name or path).
    Del { name: String },
    /// List live named netns.
    Ls,
}

/// What ADD, CHECK and DEL attach.
#[derive(Args, Debug)]
pub(crate) struct Attach {
    /// Network name.
    pub(crate) network: String,
    /// Netns name (in --netns-dir) or path.
    pub(crate) netns: String,
    /// Interface name inside the netns.
    #[arg(long, default_value = "eth0")]
    pub(crate) ifname: String,
    /// Container ID (default: derived from the netns path).
    #[arg(long)]
    pub(crate) container_id: Option<String>,
    /// CNI_ARGS, `K=V;K=V`.
    #[arg(long)]
    pub(crate) args: Option<String>,
    /// Capability args as a JSON object, e.g. '{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}'.
    #[arg(long)]
    pub(crate) cap_args: Option<String>,
}
