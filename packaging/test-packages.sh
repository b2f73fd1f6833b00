#!/usr/bin/env bash
# Installs the .debs of packaging/deb.sh (the newest in <target>/debian/) with `dpkg -i` into a
# scratch root with an empty dpkg database of its own, checks what they put there, runs the
# installed binaries, then purges them and checks what is left. Nothing outside the scratch
# root is touched: dpkg runs with --root (its files and database there) and
# --force-script-chrootless, so the maintainer scripts run on this system's shell with
# DPKG_ROOT set to the scratch root; update-alternatives follows DPKG_ROOT by itself (the
# kubelet alternative is made and removed inside the root), and the scripts skip systemctl
# whenever DPKG_ROOT is set. --force-depends: the scratch database has none of the
# dependencies (libc6, containerd, ...). Needs root (dpkg).
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
target=$($CARGO metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
newest() { ls -t "$target"/debian/"$1"_*.deb 2>/dev/null | head -1; }
debs=("$(newest ferrolet)" "$(newest ferrolet-cri)")
for d in "${debs[@]}"; do [ -f "$d" ] || { echo "test-packages: no .deb in $target/debian: make deb" >&2; exit 1; }; done

root=$(mktemp -d /tmp/ferrolet-debroot.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/var/lib/dpkg/{info,updates,triggers,alternatives} "$root"/var/log "$root"/etc/alternatives
touch "$root"/var/lib/dpkg/status "$root"/var/lib/dpkg/available
# --log: dpkg would log to the host's /var/log/dpkg.log even with --root.
dpkg_root() { dpkg --root="$root" --log="$root/var/log/dpkg.log" --force-script-chrootless --force-depends "$@"; }
failures=0
fail() { echo "test-packages: FAIL: $*" >&2; failures=$((failures + 1)); }
has() { for f in "$@"; do [ -e "$root/$f" ] || fail "missing /$f"; done; }

t=$(date +%s)
dpkg_root -i "${debs[@]}"
echo "test-packages: dpkg -i into $root took $(( $(date +%s) - t ))s"

# Ferrolet's containerd shim beside ferrolet-cri, once the workspace builds it.
FERROLET_SHIM=containerd-shim-ferrolet-v1
if $CARGO metadata --format-version 1 --no-deps | grep -q "\"name\":\"$FERROLET_SHIM\""; then
	has "usr/bin/$FERROLET_SHIM"
	[ -x "$root/usr/bin/$FERROLET_SHIM" ] || fail "/usr/bin/$FERROLET_SHIM is not executable"
	dpkg-query --admindir="$root/var/lib/dpkg" -L ferrolet-cri | grep -qx "/usr/bin/$FERROLET_SHIM" ||
		fail "/usr/bin/$FERROLET_SHIM is not ferrolet-cri's"
fi
has usr/bin/ferrolet usr/bin/ferrolet-cri usr/bin/ferrolet-cni \
	usr/lib/systemd/system/kubelet.service usr/lib/systemd/system/ferrolet-cri.service \
	etc/ferrolet/kubelet.yaml etc/ferrolet/cri.toml etc/kubernetes/manifests
for bin in ferrolet ferrolet-cri ferrolet-cni; do
	has "usr/share/man/man1/$bin.1.gz" "usr/share/bash-completion/completions/$bin" \
		"usr/share/zsh/vendor-completions/_$bin" "usr/share/fish/vendor_completions.d/$bin.fish"
done
has usr/share/man/man1/ferrolet-trace-pod.1.gz usr/share/man/man1/ferrolet-cri-image-import.1.gz \
	usr/share/man/man1/ferrolet-cni-netns-add.1.gz
for page in "$root"/usr/share/man/man1/*.gz; do
	[ -L "$page" ] || gzip -t "$page" || fail "$page is not gzip"
done
# conffiles: dpkg keeps the admin's edits to these on upgrade.
for f in /etc/ferrolet/kubelet.yaml /etc/ferrolet/cri.toml; do
	dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Conffiles}\n' ferrolet ferrolet-cri | grep -q " $f " ||
		fail "$f is not a conffile"
done
# /usr/bin/kubelet → /etc/alternatives/kubelet → /usr/bin/ferrolet, inside the root (the links
# are absolute, as on a real system, so they are followed by hand).
[ "$(readlink "$root/usr/bin/kubelet")" = /etc/alternatives/kubelet ] || fail "/usr/bin/kubelet is not the alternative's link"
[ "$(readlink "$root/etc/alternatives/kubelet")" = /usr/bin/ferrolet ] || fail "the kubelet alternative is not ferrolet"
[ "$(readlink "$root/usr/share/man/man1/kubelet.1.gz")" = /etc/alternatives/kubelet.1.gz ] || fail "no kubelet(1)"
update-alternatives --admindir "$root/var/lib/dpkg/alternatives" --root "$root" --query kubelet | grep -q '^Value: /usr/bin/ferrolet$' ||
	fail "update-alternatives does not know the kubelet alternative"
if command -v systemd-analyze >/dev/null; then
	# The units as systemd reads them (keys, ExecStart's binary looked up in the root); the
	# scratch root has no sysinit.target for their default dependencies, which is all it says
	# about good units.
	if systemd-analyze verify --man=no --root="$root" kubelet.service ferrolet-cri.service 2>&1 |
		grep -v 'Unit sysinit.target not found' | grep .; then
		fail "systemd-analyze verify"
	fi
fi

for bin in ferrolet ferrolet-cri ferrolet-cni; do
	version=$("$root/usr/bin/$bin" --version) || fail "$bin --version"
	echo "test-packages: installed $bin --version: $version"
done
kubelet=$root$(readlink "$root/etc/alternatives/kubelet")
[ "$kubelet" = "$root/usr/bin/ferrolet" ] || fail "the kubelet alternative is $kubelet, not ferrolet"
# What kubeadm's preflight runs and parses (the whole output, one line).
"$kubelet" --version | grep -Eqx 'Kubernetes v[0-9]+\.[0-9]+\.[0-9]+' ||
	fail "kubelet --version is not the one line kubeadm parses"
# The package provides `kubelet` at the version the binary reports (kubeadm's package depends
# on kubelet >= its minor), kept in kubelet/Cargo.toml by hand: this holds the two together.
level=$("$kubelet" --version | sed 's/^Kubernetes v//')
dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Provides}\n' ferrolet | grep -qx "kubelet (= $level)" ||
	fail "ferrolet does not provide kubelet (= $level)"

t=$(date +%s)
dpkg_root --purge ferrolet ferrolet-cri
echo "test-packages: dpkg --purge took $(( $(date +%s) - t ))s"
[ ! -e "$root/usr/bin/kubelet" ] && [ ! -L "$root/usr/bin/kubelet" ] || fail "/usr/bin/kubelet left after purge"
[ ! -e "$root/usr/bin/ferrolet" ] || fail "/usr/bin/ferrolet left after purge"
[ ! -e "$root/usr/bin/$FERROLET_SHIM" ] || fail "/usr/bin/$FERROLET_SHIM left after purge"
[ ! -e "$root/etc/ferrolet/cri.toml" ] || fail "conffiles left after purge"

if [ "$failures" -gt 0 ]; then
	echo "test-packages: $failures check(s) failed" >&2
	exit 1
fi
echo "test-packages: ok (${debs[*]##*/})"
