# Ferrolet: the two set-up commands are `make node` and `make test` (as root, Debian 12).
SHELL := /bin/bash
CARGO ?= cargo
CRI_SOCK ?= unix:///run/ferrolet/cri.sock

.PHONY: node test deb shim test-packages test-node test-node-containerd2 test-containerd2 env stop status build lint unit images fuzz bench-cri bench-kubelet bench-api bench-stream bench-shim soak

## node: environment, build, then ferrolet-cri and ferrolet in standalone mode on examples/static-pods
node: env build
	@scripts/node.sh

## test: environment + formatting + lints + every test (unit and integration, real containerd,
# the fuzz corpora's replay)
# Binaries first: integration tests run the real ferrolet-cri and ferrolet-cni.
test: env lint
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --no-fail-fast
	$(CARGO) test -p ferrolet-fuzz --features targets --test replay

## deb: the ferrolet and ferrolet-cri .debs into target/debian/ (packaging/deb.sh: cargo-deb,
# installed if missing; man pages and completions by ferrolet-docgen). DEB_PROFILE=dev packages
# the debug binaries `make build` made (CI's; no second build), DEB_PROFILE=release a release
# build; DEB_FAST=1 compresses faster.
DEB_PROFILE ?= dev
DEB_FAST ?= 0
deb:
	DEB_PROFILE=$(DEB_PROFILE) DEB_FAST=$(DEB_FAST) CARGO=$(CARGO) packaging/deb.sh

## shim: containerd-shim-ferrolet-v1's static release build, what release packages and the
# benchmarks run (a dynamic one has 1.7 MiB of libc.so pages in every shim's RSS), in
# target/<host triple>/release/. For the host triple explicitly, so the static flag stays off
# build scripts and proc macros.
SHIM_TARGET ?= $(shell rustc -vV | sed -n 's/^host: //p')
shim:
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --release --target $(SHIM_TARGET) \
		-p ferrolet-task-shim

## test-packages: the .debs of `make deb` installed with dpkg into a scratch root (its own empty
# dpkg database; nothing outside it touched), their files, units, conffiles, the kubelet
# alternative and the installed binaries checked, then purged (packaging/test-packages.sh).
test-packages:
	CARGO=$(CARGO) packaging/test-packages.sh

## unit: every test that needs neither root nor containerd nor the registries: the crates'
# unit tests, the CNI library and CLI against fake plugins, the registry client against its
# in-test fakes, the module layers, the test-image builder and the replay of every committed
# fuzz input (fuzz/corpus, fuzz/regressions). Under 2 minutes after a build.
unit:
	$(CARGO) test --workspace --lib --bins
	$(CARGO) test -p ferrolet-cni --tests
	$(CARGO) test -p ferrolet-cri --test registry fake_
	$(CARGO) test -p ferrolet-integration --test module_layers --test testimages --test apiserver
	$(CARGO) test -p ferrolet-fuzz --features targets --test replay

## fuzz: one AFL++ target for a while, e.g. `make fuzz TARGET=spdy_frames SECONDS=600` (not part
# of `make test`; needs `cargo install cargo-afl`). Builds in target/fuzz, findings in
# target/fuzz/out/TARGET/default/{crashes,hangs}; targets and how to triage: fuzz/README.md.
TARGET ?= spdy_frames
SECONDS ?= 600
fuzz:
	@fuzz/run.sh $(TARGET) $(SECONDS)

## test-node: the suites that touch cgroups, stats and the container manager, and a
# representative set of pod lifecycle, probe and streaming tests, inside a User-Mode Linux guest
# with cgroup v2 and systemd as PID 1 (scripts/testnode.sh: the guest is built here from Debian's
# packages and cached; binaries and tests are built on the host and run in the guest).
test-node:
	scripts/testnode.sh suites

## test-node-containerd2: the test node's cgroup suites (kubelet_cgroups, and the CRI suite's
# cgroup, OOM-reason and crun tests) on containerd 2.x (scripts/containerd2.sh's) in the guest,
# with the systemd driver. About 7 minutes; not part of CI, whose 60 minutes it would crowd.
TESTNODE_CONTAINERD2_SUITES ?= kubelet_cgroups cri_runtime:stats_agree_with_the_cgroup_and_resources_update,exit_codes_reasons_oom_kills_and_the_image_stop_signal,a_handler_with_its_own_binary_runs_its_pods_under_crun
test-node-containerd2:
	TESTNODE_CONTAINERD2=1 TESTNODE_SUITES="$(TESTNODE_CONTAINERD2_SUITES)" scripts/testnode.sh suites

## test-containerd2: the CRI and kubelet suites again, on containerd 2.x (sid's, fetched by
# scripts/containerd2.sh into a private directory; the system's runc), ferrolet-cri's and
# containerd's own CRI alike. The harness prints which containerd each test binary ran on.
CONTAINERD2_SUITES ?= cri_runtime cri_faults cri_images cri_network cri_node_resources \
	cri_recovery cri_runtime_logs cri_streaming cri_clients cri_cdi kubelet_lifecycle kubelet_static_pods \
	kubelet_probes kubelet_hooks kubelet_stats kubelet_cgroups kubelet_cpu_manager kubelet_gc \
	kubelet_logs kubelet_streaming kubelet_volumes kubelet_timeline kubelet_devices kubelet_ephemeral \
	cri_image_volumes kubelet_image_volumes kubelet_resize cri_resize cri_userns kubelet_userns \
	cri_shim_recovery task_shim
test-containerd2: env
	$(CARGO) build --workspace --bins
	FERROLET_CONTAINERD_BIN=$$(scripts/containerd2.sh) $(CARGO) test -p ferrolet-integration \
		--no-fail-fast $(addprefix --test ,$(CONTAINERD2_SUITES))

## env: packages, private containerd, registries on 127.0.0.1:5000/5001 with test images, CNI config
env:
	@scripts/env.sh up

## stop: tear the environment down (and the reference containerd of bench-cri, if it runs)
stop:
	@scripts/node.sh down
	@scripts/containerd-cri.sh down
	@scripts/env.sh down

status:
	@scripts/env.sh status
	@scripts/containerd-cri.sh status

build:
	$(CARGO) build --workspace --bins

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

images:
	$(CARGO) run -q -p ferrolet-integration --bin ferrolet-testimages

## bench-cri: pod lifecycle benchmark, ferrolet-cri against containerd's own CRI (N = 30, 100),
# the two taking turns (BENCH_ALTERNATE). Release builds, of the same packages as the other
# bench targets so that switching between them recompiles nothing; the reference containerd
# (scripts/containerd-cri.sh) is stopped afterwards unless it was already running. Not part
# of `make test`.
bench-cri: env bench-shim
	$(CARGO) build --release -p ferrolet -p ferrolet-cri -p ferrolet-integration
	@BIN=$(BENCH_BIN) scripts/bench-cri.sh

## bench-kubelet: static-pod start latency of ferrolet (N = 1, 30, 100), RSS and idle CPU, on
# ferrolet-cri and on containerd's own CRI side by side. Release builds; what it starts it stops.
bench-kubelet: env bench-shim
	$(CARGO) build --release -p ferrolet -p ferrolet-cri -p ferrolet-integration
	@BIN=$(BENCH_BIN) scripts/bench-kubelet.sh

## bench-shim: `make shim`'s static shim installed beside the release ferrolet-cri, in the
# directory the benchmarks put first on their containerd's PATH; ferrolet-cri runs it by
# default (BENCH_RUNTIME_TYPE=io.containerd.runc.v2 runs its pods under the Go shim instead).
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
BENCH_BIN ?= $(abspath $(TARGET_DIR))/release
bench-shim: shim
	mkdir -p $(BENCH_BIN)
	install -m 0755 $(TARGET_DIR)/$(SHIM_TARGET)/release/containerd-shim-ferrolet-v1 $(BENCH_BIN)/

## bench-api: API pods (created → Running through a watch) on ferrolet joined to the in-memory
# test API server: N = 1, 30, 100, RSS, steady-state API requests per minute. Release builds.
bench-api: env
	$(CARGO) build --release -p ferrolet -p ferrolet-cri -p ferrolet-integration
	@scripts/bench-api.sh

## soak: the chaos soak (issue #33): pod churn on a cluster node while seeded faults hit every
# daemon, invariants checked all along, nothing left at the end; the report's last line is
# `soak: <n> lifecycles, <m> faults, <v> violations, <l> leaked`. SOAK_CYCLES sets the length,
# SOAK_SEED the draw (the same seed replays the same run). Debug builds (what CI tests). Not
# part of `make test`; tests/soak.rs runs a short one there.
SOAK_CYCLES ?= 1000
SOAK_SEED ?= 1
soak: env
	$(CARGO) build --workspace --bins
	target/debug/ferrolet-soak --cycles $(SOAK_CYCLES) --seed $(SOAK_SEED) --report target/soak-report.txt

## bench-stream: exec round trip (`true`, p50/p99) and port-forward throughput (MB/s, 1 and 4
# connections), SPDY and WebSocket, ferrolet-cri against containerd's own CRI, directly and
# through ferrolet's secure port. Release builds; what it starts it stops.
bench-stream: env
	$(CARGO) build --release -p ferrolet -p ferrolet-cri -p ferrolet-integration --bins
	@scripts/bench-stream.sh
