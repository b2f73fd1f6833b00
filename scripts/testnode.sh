#!/usr/bin/env bash
# The test node: a User-Mode Linux guest with cgroup v2 and systemd as PID 1, where these VMs
# have neither (their cgroups are v1 and cannot be switched). The guest is a Debian bookworm
# made here with debootstrap from Debian's mirror (nothing prebuilt is downloaded), kept as an
# ext4 image keyed by its inputs and booted copy-on-write, so every run starts from the same
# disk and leaves the image untouched.
#
#   scripts/testnode.sh build          make the image if its inputs changed (cached otherwise)
#   scripts/testnode.sh run CMD...     boot a guest, run CMD as root in the workspace (mounted at
#                                      the same path), print its output, power off; exits with
#                                      CMD's status (124 when the guest overran TESTNODE_TIMEOUT)
#   scripts/testnode.sh info           what the guest is: cgroup fs, controllers, kernel,
#                                      systemd and containerd versions
#
# TESTNODE_DIR (default /var/lib/ferrolet/testnode) holds the images; TESTNODE_MEM (3G) is the
# guest's RAM, which UML keeps in /dev/shm; TESTNODE_TIMEOUT (3600) bounds a run in seconds;
# TESTNODE_KEEP=1 keeps a run's dir (the job, its output, the guest's console) in /tmp.
# TESTNODE_KERNEL boots another UML kernel than Debian's `linux` (one built with SMP, cpusets
# and PSI, for the CPU manager's suite and pressure stats: built in, as the image holds only
# the stock kernel's modules), with TESTNODE_KERNEL_ARGS added to its command line
# (`ncpus=2 seccomp=on` for such a kernel's two CPUs).
set -euo pipefail

ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
DIR=${TESTNODE_DIR:-/var/lib/ferrolet/testnode}
MEM=${TESTNODE_MEM:-3G}
KERNEL=${TESTNODE_KERNEL:-linux}
read -r -a KERNEL_ARGS <<<"${TESTNODE_KERNEL_ARGS:-}"
TIMEOUT=${TESTNODE_TIMEOUT:-3600}
SUITE=bookworm
MIRROR=${TESTNODE_MIRROR:-http://deb.debian.org/debian}
# What the guest needs to run the project's environment and tests offline: systemd and D-Bus,
# the container stack and everything scripts/env.sh would otherwise install.
PACKAGES=systemd,systemd-sysv,dbus,kmod,udev,procps,iproute2,iptables,containerd,runc,crun,containernetworking-plugins,docker-registry,busybox-static,skopeo,apache2-utils,curl,ca-certificates,openssl,protobuf-compiler,python3-venv,util-linux,e2fsprogs,make
IMAGE_SIZE=6G

log() { printf '[testnode] %s\n' "$*" >&2; }
die() { printf '[testnode] error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap and the guest's disk need it)"

kernel_version() { ls /usr/lib/uml/modules 2>/dev/null | sort -V | tail -n1; }

need_host_tools() {
  local missing=()
  command -v linux >/dev/null || missing+=(user-mode-linux)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# The image's name: a hash of everything it is made from (this script's build steps included),
# so a change to any of them makes a new image and an unchanged one is reused.
image_key() {
  {
    echo "$SUITE $MIRROR $PACKAGES $IMAGE_SIZE $(kernel_version)"
    sed -n '/^# build-steps-begin/,/^# build-steps-end/p' "$0"
  } | sha256sum | cut -c1-16
}

image_path() { echo "$DIR/base-$(image_key).img"; }

# build-steps-begin
configure_rootfs() { # ROOTFS
  local r=$1 kv
  kv=$(kernel_version)
  # The UML kernel's modules (overlay, veth, bridge, netfilter) where kmod looks for them.
  mkdir -p "$r/lib/modules"
  cp -a "/usr/lib/uml/modules/$kv" "$r/lib/modules/$kv"
  # The stock UML kernel has netfilter's legacy tables, not nf_tables: the bridge plugin's
  # ipMasq and portmap go through iptables.
  chroot "$r" update-alternatives --quiet --set iptables /usr/sbin/iptables-legacy
  chroot "$r" update-alternatives --quiet --set ip6tables /usr/sbin/ip6tables-legacy
  echo testnode >"$r/etc/hostname"
  printf '127.0.0.1 localhost testnode\n::1 localhost\n' >"$r/etc/hosts"
  : >"$r/etc/machine-id"
  printf 'LABEL=testnode / ext4 defaults 0 1\ntmpfs /tmp tmpfs defaults,size=50%% 0 0\n' >"$r/etc/fstab"
  # Debian's services for the packages we run as private instances, and consoles nobody uses.
  local unit
  for unit in containerd docker-registry getty@tty1 systemd-timesyncd; do
    ln -sf /dev/null "$r/etc/systemd/system/$unit.service"
  done
  for unit in apt-daily apt-daily-upgrade e2scrub_all fstrim; do
    ln -sf /dev/null "$r/etc/systemd/system/$unit.timer"
  done
  # The job: the host's share (testnode.share= on the kernel command line) mounted at
  # /testnode, its job.sh run once the system is up, the status written back, then power off.
  cat >"$r/usr/local/sbin/testnode-job" <<'EOF'
#!/bin/bash
share=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^testnode\.share=//p')
mkdir -p /testnode
mount -t hostfs -o "$share" none /testnode || exit 90
bash /testnode/job.sh >>/testnode/output 2>&1
echo $? >/testnode/status
EOF
  chmod 755 "$r/usr/local/sbin/testnode-job"
  cat >"$r/etc/systemd/system/testnode-job.service" <<'EOF'
[Unit]
Description=The test node's job, then power off
After=multi-user.target
Wants=multi-user.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/testnode-job
ExecStopPost=/bin/systemctl poweroff --no-block
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
  mkdir -p "$r/etc/systemd/system/multi-user.target.wants"
  ln -sf /etc/systemd/system/testnode-job.service "$r/etc/systemd/system/multi-user.target.wants/testnode-job.service"
}
# build-steps-end

build() {
  need_host_tools
  local img
  img=$(image_path)
  if [ -f "$img" ]; then log "image $img is current"; return; fi
  mkdir -p "$DIR"
  BUILD_WORK="$DIR/build.$$"
  trap 'rm -rf "$BUILD_WORK"' EXIT
  local work=$BUILD_WORK
  rm -rf "$work"
  mkdir -p "$work"
  log "debootstrap $SUITE from $MIRROR (about 2 minutes)"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
  configure_rootfs "$work/rootfs"
  apt_clean "$work/rootfs"
  mkfs.ext4 -q -F -L testnode -d "$work/rootfs" "$work/base.img" "$IMAGE_SIZE"
  mv "$work/base.img" "$img"
  rm -rf "$work"
  trap - EXIT
  # Older images are of inputs that changed.
  find "$DIR" -maxdepth 1 -name 'base-*.img' ! -path "$img" -delete
  log "image $img built"
}

apt_clean() { rm -rf "$1/var/cache/apt/archives/"*.deb "$1/var/lib/apt/lists/"*; }

# run CMD...: one guest, one command.
run() {
  [ $# -gt 0 ] || die "usage: $0 run CMD..."
  build
  local img share cow guest_status
  img=$(image_path)
  share=$(mktemp -d /tmp/testnode.XXXXXX)
  cow="$share/disk.cow"
  # Globals: the EXIT trap runs after this function's locals are gone.
  UML_PID=
  SHARE=$share
  trap 'if [ -n "$UML_PID" ]; then kill -9 -- "-$UML_PID" 2>/dev/null || true; fi; [ -n "${TESTNODE_KEEP:-}" ] || rm -rf "$SHARE"' EXIT
  {
    echo 'set -e'
    echo "mkdir -p $(printf '%q' "$ROOT_DIR")"
    echo "mount -t hostfs -o $(printf '%q' "$ROOT_DIR") none $(printf '%q' "$ROOT_DIR")"
    echo "cd $(printf '%q' "$ROOT_DIR")"
    echo 'set +e'
    printf '%q ' "$@"
    echo
  } >"$share/job.sh"
  : >"$share/output"
  # The guest's RAM is a file UML maps; /dev/shm keeps it off the disk.
  TMPDIR=/dev/shm setsid timeout --kill-after=30 "$TIMEOUT" "$KERNEL" "mem=$MEM" "ubd0=$cow,$img" \
    "${KERNEL_ARGS[@]}" root=/dev/ubda rw init=/lib/systemd/systemd systemd.unified_cgroup_hierarchy=1 \
    "testnode.share=$share" con=null con0=null,fd:1 </dev/null >"$share/console" 2>&1 &
  UML_PID=$!
  tail -n +1 -f --pid="$UML_PID" "$share/output" &
  local tail_pid=$!
  local uml_status=0
  wait "$UML_PID" || uml_status=$?
  UML_PID=
  wait "$tail_pid" 2>/dev/null || true
  if [ -f "$share/status" ]; then
    guest_status=$(cat "$share/status")
  elif [ "$uml_status" = 124 ]; then
    log "the guest overran ${TIMEOUT}s; its console's end:"
    tail -n 20 "$share/console" >&2
    guest_status=124
  else
    log "the guest stopped (status $uml_status) before its job ended; its console's end:"
    tail -n 20 "$share/console" >&2
    guest_status=125
  fi
  return "$guest_status"
}

info() {
  run bash -c 'echo "cgroup fs: $(stat -fc %T /sys/fs/cgroup)"
echo "controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "kernel: $(uname -sr), $(nproc) cpu"
echo "systemd: $(systemctl --version | head -n1), failed units: $(systemctl list-units --failed --no-legend | wc -l)"
echo "containerd: $(containerd --version)"
echo "runc: $(runc --version | head -n1)"'
}

# The integration suites that touch cgroups, stats and the container manager, plus a
# representative set of pod lifecycle, probe and streaming tests (make test-node).
# An entry is a suite, or `suite:test,test` for some of its tests (exact names).
# TESTNODE_SUITES (space-separated) picks others; FERROLET_CGROUP_DRIVER (systemd) is the
# driver of ferrolet, ferrolet-cri and containerd's CRI in the guest; TESTNODE_CONTAINERD2=1
# runs them on containerd 2.x (make test-node-containerd2). Not here: the CPU
# manager's suite (its tests pin one of two CPUs; the stock UML kernel has one CPU and no
# cpuset controller) and cri_node_resources (the missing v1 hugetlb hierarchy, a v1 matter).
# Probes and streaming run on ferrolet-cri only, and of the CRI suite the tests that touch
# cgroups; the task shim's event comparison with the Go shim and its recovery from a kill and
# from a containerd restart run on cgroup v2 too; all to keep the guest's part of CI near 15 minutes (a container run takes seconds in
# the guest).
read -r -a SUITES <<<"${TESTNODE_SUITES:-kubelet_cgroups kubelet_stats \
cri_runtime:stats_agree_with_the_cgroup_and_resources_update,a_pod_with_busybox_and_httpd_from_run_to_remove,stopping_a_container_and_its_pod_at_once_succeeds_and_leaks_nothing,exit_codes_reasons_oom_kills_and_the_image_stop_signal,a_handler_with_its_own_binary_runs_its_pods_under_crun \
kubelet_lifecycle kubelet_resize cri_resize \
kubelet_probes:a_failing_liveness_probe_restarts_the_container,readiness_follows_http_and_tcp_probes \
kubelet_streaming:streaming_over_spdy,streaming_over_websocket \
task_shim cri_shim_recovery:ferrolet_shim_a_killed_shim_s_containers_are_reported_exited,ferrolet_shim_a_containerd_restart_keeps_the_pod_running}"
DRIVER=${FERROLET_CGROUP_DRIVER:-systemd}

# suites: builds the binaries and the suites' test executables here, then runs them in a guest.
suites() {
  cd "$ROOT_DIR"
  cargo build -q --workspace --bins
  local list="$ROOT_DIR/target/testnode-suites.txt" args=()
  local s
  for s in "${SUITES[@]}"; do args+=(--test "${s%%:*}"); done
  cargo test -q -p ferrolet-integration --no-run --message-format=json "${args[@]}" 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["target"]["name"], m["executable"])' >"$list.exes"
  # One line per entry: name, executable, the tests picked (comma-separated; none for all).
  : >"$list"
  local name exe
  for s in "${SUITES[@]}"; do
    name=${s%%:*}
    exe=$(awk -v n="$name" '$1 == n {print $2}' "$list.exes")
    [ -n "$exe" ] || die "no test executable for $name"
    echo "$name $exe $([ "$s" = "$name" ] || echo "${s#*:}")" >>"$list"
  done
  [ -s "$list" ] || die "no test executables were built"
  # TESTNODE_CONTAINERD2=1: the suites' own containerd is 2.x (scripts/containerd2.sh's),
  # copied into the workspace the guest mounts.
  local containerd_bin=
  if [ -n "${TESTNODE_CONTAINERD2:-}" ]; then
    containerd_bin="$ROOT_DIR/target/testnode-containerd2"
    mkdir -p "$containerd_bin"
    cp -a "$(scripts/containerd2.sh)/." "$containerd_bin/"
  fi
  run bash scripts/testnode.sh guest-suites "$list" "$DRIVER" "$containerd_bin"
}

# guest-suites LIST DRIVER [CONTAINERD_BIN] (inside the guest): the environment, then each
# "name executable" of LIST; the suites' containerd from CONTAINERD_BIN when given.
guest_suites() {
  export FERROLET_OFFLINE=1 FERROLET_CGROUP_DRIVER=$2
  local containerd=containerd
  if [ -n "${3:-}" ]; then
    export FERROLET_CONTAINERD_BIN=$3
    containerd=$3/containerd
  fi
  echo "guest: cgroup fs $(stat -fc %T /sys/fs/cgroup) ($(cat /sys/fs/cgroup/cgroup.controllers)), $(uname -sr), $(nproc) cpu"
  echo "guest: $(systemctl --version | head -n1); the suites' $("$containerd" --version); $(runc --version | head -n1)"
  echo "guest: cgroup driver $2 (ferrolet cgroupDriver, ferrolet-cri systemd_cgroup, containerd's SystemdCgroup)"
  if ! scripts/env.sh up >/tmp/env.log 2>&1; then
    tail -n 40 /tmp/env.log
    return 1
  fi
  local failed=0 name exe tests out rc result filter
  while read -r name exe tests; do
    # As cargo runs them: from the package's dir; picked tests by their exact names.
    filter=()
    [ -z "$tests" ] || { IFS=, read -r -a filter <<<"$tests"; filter+=(--exact); }
    rc=0
    out=$(cd integration && "$exe" "${filter[@]}" 2>&1) || rc=$?
    # The whole output, for the host to read (the workspace is mounted read-write).
    mkdir -p target/testnode-logs && printf '%s\n' "$out" >"target/testnode-logs/$name.log"
    result=$(grep '^test result' <<<"$out" | tail -n1)
    printf '%-22s %s\n' "$name" "${result:-no result (exit $rc)}"
    if [ "$rc" != 0 ]; then
      failed=1
      grep -E -A3 '^(test .*FAILED|---- |thread .* panicked)' <<<"$out" | head -n 60 || true
    fi
  done <"$1"
  # Nothing of the kubelets' left behind: no unit, no cgroup. The tests' shared parent slice
  # (their cgroup roots' parent) goes first: every test is over.
  systemctl stop ferrolet_it.slice 2>/dev/null || true
  echo "guest: units left: $(systemctl list-units --all --no-legend '*kubepods*' '*ferrolet*' | wc -l)," \
    "cgroups left: $(find /sys/fs/cgroup -type d \( -name '*kubepods*' -o -name '*ferrolet*' \) | wc -l)"
  systemctl list-units --all --no-legend '*kubepods*' '*ferrolet*' | head -n 20
  scripts/env.sh down >/dev/null 2>&1 || true
  return "$failed"
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  info) info ;;
  suites) suites ;;
  guest-suites) guest_suites "$2" "${3:-systemd}" "${4:-}" ;;
  *) echo "usage: $0 build|run CMD...|info|suites" >&2; exit 2 ;;
esac
