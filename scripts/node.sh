#!/usr/bin/env bash
# Brings up a Ferrolet node on the environment from `scripts/env.sh up`: ferrolet-cri on
# /run/ferrolet/cri.sock, then ferrolet in standalone mode on examples/static-pods.
set -euo pipefail
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT_DIR/target/debug

missing=()
for b in ferrolet-cri ferrolet; do [ -x "$BIN/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -gt 0 ]; then
  cat <<MSG

make node: the environment is up (private containerd, registries on 127.0.0.1:5000/5001 with the
test images, CNI config in /etc/ferrolet/cni/net.d), but these binaries do not exist yet:
  ${missing[*]}
ferrolet (kubelet/) comes with the kubelet issues (#6, #7), and ferrolet-cri runs pods once
its RuntimeService lands (#5); today it serves images only. Until then, 'make test' runs
everything that exists, and 'make stop' tears the environment down.
MSG
  exit 1
fi
echo "make node: starting the node is wired up by the kubelet issue (#6)." >&2
exit 1
