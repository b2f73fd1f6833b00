#!/usr/bin/env bash
# containerd 2.x for the tests, beside the system's 1.6: Debian's newest containerd (sid's,
# 2.1.x) taken from its .deb into a private directory with a private apt state, never
# installed into the system. Only containerd, its runc shim and ctr are kept: sid's runc needs
# a newer glibc than bookworm's, so the system's runc stays the one on PATH.
#
#   scripts/containerd2.sh          fetch (once; cached) and print the bin dir
#
# CONTAINERD2_DIR (default /var/lib/ferrolet/containerd2) holds it; CONTAINERD2_VERSION pins
# a version (default: sid's candidate). Tests run on it with FERROLET_CONTAINERD_BIN=<bin dir>.
set -euo pipefail

DIR=${CONTAINERD2_DIR:-/var/lib/ferrolet/containerd2}
MIRROR=${CONTAINERD2_MIRROR:-http://deb.debian.org/debian}
BIN="$DIR/bin"

log() { printf '[containerd2] %s\n' "$*" >&2; }

if [ -x "$BIN/containerd" ] && [ -x "$BIN/containerd-shim-runc-v2" ]; then
  echo "$BIN"
  exit 0
fi

apt_dir="$DIR/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/etc"
echo "deb $MIRROR sid main" >"$apt_dir/etc/sources.list"
apt_opts=(-q -o "Dir::Etc::sourcelist=$apt_dir/etc/sources.list" -o Dir::Etc::sourceparts=-
  -o "Dir::State::lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
  -o APT::Get::List-Cleanup=0)
log "reading sid's package lists (private state in $apt_dir)"
apt-get "${apt_opts[@]}" update >/dev/null
version=${CONTAINERD2_VERSION:-$(apt-cache "${apt_opts[@]}" policy containerd |
  awk '/Candidate:/ {print $2}')}
case "$version" in
  2.*) ;;
  *) log "sid's containerd is $version, not 2.x"; exit 1 ;;
esac
work=$(mktemp -d)
chmod 755 "$work" # apt downloads as _apt
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get "${apt_opts[@]}" download "containerd=$version" >/dev/null)
dpkg -x "$work"/containerd_*.deb "$work/root"
mkdir -p "$BIN"
for b in containerd containerd-shim-runc-v2 ctr; do
  install -m 0755 "$work/root/usr/bin/$b" "$BIN/$b"
done
"$BIN/containerd" --version >&2
echo "$BIN"
