#!/usr/bin/env bash
# Builds the ferrolet and ferrolet-cri .debs (cargo-deb) into <target>/debian/ from binaries of
# DEB_PROFILE: `dev` by default, the debug binaries `make build`/`make test` have already made
# (CI packages those rather than spend a release build on it; cargo-deb warns that it is not
# a release profile), `release` for packages to ship. ferrolet-docgen writes the man pages and
# completions under <target>/<profile dir>/packaging/, where the crates' [package.metadata.deb]
# assets (`target/release/packaging/…`, cargo-deb's name for the profile's dir) take them, and
# the binaries ferrolet-cri's package puts beside it (ferrolet-cni, containerd-shim-ferrolet-v1)
# are staged there too: a glob asset, so the shim is packaged exactly when the workspace builds it.
# DEB_FAST=1 compresses faster (2-3 s a package instead of 25-30 s, 20% larger): CI's choice.
# cargo-deb is installed (pinned: a later one may refuse the dev profile, as 3.8 warns it
# will) when missing, about 1.5 min from crates.io.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
profile=${DEB_PROFILE:-dev}
case "$profile" in dev) profile_dir=debug ;; *) profile_dir=$profile ;; esac
target=$($CARGO metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
out="$target/debian"
CARGO_DEB_VERSION=3.8.0
FERROLET_SHIM=containerd-shim-ferrolet-v1
step() { echo "deb: $1 took $(( $(date +%s) - $2 ))s"; }

if ! $CARGO deb --version 2>/dev/null | grep -q "^cargo-deb $CARGO_DEB_VERSION$"; then
	t=$(date +%s)
	$CARGO install cargo-deb --locked --version "$CARGO_DEB_VERSION"
	step "cargo install cargo-deb" "$t"
fi

t=$(date +%s)
# The whole workspace, as `make build`/`make test` build it: a subset would unify features
# differently and rebuild most dependencies (86 s in CI) instead of reusing theirs.
$CARGO build --profile "$profile" --workspace --bins
step "cargo build ($profile)" "$t"

t=$(date +%s)
gen="$target/$profile_dir/packaging"
rm -rf "$gen"
"$target/$profile_dir/ferrolet-docgen" "$gen"
# The binaries ferrolet-cri's package installs beside ferrolet-cri (its asset
# target/release/packaging/bin/*): ferrolet-cni, and Ferrolet's containerd shim
# (containerd finds it on its PATH, /usr/bin) once the workspace has a binary of that name.
mkdir -p "$gen/bin"
beside=(ferrolet-cni)
if $CARGO metadata --format-version 1 --no-deps | grep -q "\"name\":\"$FERROLET_SHIM\""; then
	beside+=("$FERROLET_SHIM")
fi
# A release package carries the static shim (`make shim`; Cargo.toml says why): built for the
# host triple explicitly, so the static flag stays off build scripts and proc macros.
static_shim=""
if [ "$profile" != dev ] && [[ " ${beside[*]} " == *" $FERROLET_SHIM "* ]]; then
	t=$(date +%s)
	host=$(rustc -vV | sed -n 's/^host: //p')
	RUSTFLAGS="-C target-feature=+crt-static" $CARGO build --profile "$profile" --target "$host" -p ferrolet-task-shim
	static_shim="$target/$host/$profile_dir/$FERROLET_SHIM"
	step "cargo build (static $FERROLET_SHIM)" "$t"
fi
for bin in "${beside[@]}"; do
	built="$target/$profile_dir/$bin"
	[ "$bin" = "$FERROLET_SHIM" ] && [ -n "$static_shim" ] && built=$static_shim
	[ -x "$built" ] || { echo "deb: $built is missing: the workspace declares $bin, but the build made no such binary" >&2; exit 1; }
	ln -f "$built" "$gen/bin/$bin" 2>/dev/null || cp -f "$built" "$gen/bin/$bin"
done
# Debian policy: man pages compressed, reproducibly (-n: no name or time stamp).
gzip -9n "$gen"/man/*.1
step "man pages and completions" "$t"

fast=()
[ "${DEB_FAST:-0}" = 1 ] && fast=(--fast)
mkdir -p "$out"
for package in ferrolet ferrolet-cri; do
	t=$(date +%s)
	$CARGO deb -p "$package" --no-build --profile "$profile" "${fast[@]}" --output "$out/"
	step "cargo deb -p $package" "$t"
done
ls -l "$out"/*.deb
