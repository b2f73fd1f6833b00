//! `ferrolet-docgen OUT`: the man pages (`OUT/man/<bin>.1`, one per subcommand as
//! `<bin>-<sub>.1`) and shell completions (`OUT/completions/{bash,zsh,fish}/…`) of ferrolet,
//! ferrolet-cri and ferrolet-cni, made from the clap definitions the binaries parse with, so
//! they cannot drift from the flags. The packages (`packaging/deb.sh`) ship what it writes.

use std::path::Path;

use anyhow::Context;
use clap::{Command, CommandFactory};
use clap_complete::Shell;

#[allow(dead_code, unreachable_pub)]
#[path = "../../../cni/src/bin/ferrolet-cni/cli.rs"]
mod cni_cli;

fn main() -> anyhow::Result<()> {
    let Some(out) = std::env::args_os().nth(1) else {
        anyhow::bail!("usage: ferrolet-docgen OUT_DIR");
    };
    let out = Path::new(&out);
    let commands = [
        ferrolet::app::command(),
        ferrolet_cri::cli::Cli::command(),
        cni_cli::Cli::command(),
    ];
    for command in commands {
        write_man_pages(command.clone(), &out.join("man"))?;
        write_completions(command, &out.join("completions"))?;
    }
    Ok(())
}

/// `<name>.1` and, for each visible subcommand (recursively), `<name>-<sub>.1`, as
/// `clap_mangen::generate_to` names them.
fn write_man_pages(command: Command, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    clap_mangen::generate_to(command, dir)
        .with_context(|| format!("man pages in {}", dir.display()))
}

/// Completions under the directories Debian's shells read them from, relative to `/usr/share`:
/// `bash-completion/completions/<name>`, `zsh/vendor-completions/_<name>`,
/// `fish/vendor_completions.d/<name>.fish`.
fn write_completions(mut command: Command, dir: &Path) -> anyhow::Result<()> {
    let name = command.get_name().to_string();
    for (shell, sub, file) in [
        (Shell::Bash, "bash-completion/completions", name.clone()),
        (Shell::Zsh, "zsh/vendor-completions", format!("_{name}")),
        (
            Shell::Fish,
            "fish/vendor_completions.d",
            format!("{name}.fish"),
        ),
    ] {
        let dir = dir.join(sub);
        std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
        let path = dir.join(file);
        let mut f = std::fs::File::create(&path).with_context(|| path.display().to_string())?;
        clap_complete::generate(shell, &mut command, &name, &mut f);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The packages' `/etc/ferrolet/cri.toml` is a valid ferrolet-cri configuration.
    #[test]
    fn the_packaged_cri_config_loads() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../etc/ferrolet/cri.toml");
        let config = ferrolet_cri::config::Config::load(Path::new(file)).unwrap();
        config.validate().unwrap();
        assert_eq!(config.listen, "unix:///run/ferrolet/cri.sock");
        assert_eq!(config.containerd, "/run/containerd/containerd.sock");
        assert!(config.systemd_cgroup);
    }

    /// Every page and completion, for each binary and subcommand.
    #[test]
    fn writes_pages_and_completions() {
        let out = std::env::temp_dir().join(format!("ferrolet-docgen-{}", std::process::id()));
        write_man_pages(cni_cli::Cli::command(), &out.join("man")).unwrap();
        write_completions(ferrolet_cri::cli::Cli::command(), &out.join("completions")).unwrap();
        let page = std::fs::read_to_string(out.join("man/ferrolet-cni-netns-add.1")).unwrap();
        assert!(page.contains(".TH ferrolet-cni-netns-add 1"), "{page}");
        let bash = out.join("completions/bash-completion/completions/ferrolet-cri");
        assert!(
            std::fs::read_to_string(bash)
                .unwrap()
                .contains("--stream-server-port")
        );
        assert!(
            out.join("completions/zsh/vendor-completions/_ferrolet-cri")
                .exists()
        );
        assert!(
            out.join("completions/fish/vendor_completions.d/ferrolet-cri.fish")
                .exists()
        );
        std::fs::remove_dir_all(&out).unwrap();
    }
}
