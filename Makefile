# GNU make. `make demo` and `make test` work on a fresh Debian machine with Rust (rustup),
# gcc, python3 and apt (root or sudo): both start with `make setup`.
#
#   make setup              install what is missing (apt packages, rustfmt/clippy, the VM image)
#   make build              cargo build --workspace
#   make demo               the example services over TCP on this machine
#   make demo-rdma          the same over RDMA verbs, inside the Soft-RoCE VM
#   make test               fmt check, module check, sync check, clippy, doc links, cargo test,
#                           loom models,
#                           gRPC's interop cases over TCP and gRPC, the tonic port (porting/),
#                           the VM's fallback from KVM to TCG, then
#                           the verbs suite in the VM (one host, then two hosts)
#   make check-modules      scripts/check-modules: no import cycle between the source files of a
#                           library crate and no runtime file over 800 lines, beyond the shrinking
#                           list in scripts/module-cycles.allowed (`scripts/check-modules --graph`
#                           prints the module DAG)
#   make check-sync         scripts/check-sync: no parking_lot and no atomic ordering stronger
#                           than Relaxed outside rpc-sync, beyond the shrinking list in
#                           scripts/check-sync.allowed
#   make test-softroce-fallback  scripts/softroce-vm boots again under TCG when KVM is not ready
#                           by the boot deadline (one TCG boot)
#   make interop-tcp        gRPC's interop cases (interop-client against interop-server) over TCP
#   make porting            porting/'s tonic applications and their ports: changed lines, every pair
#   make test-verbs         the verbs tests + the interop cases inside scripts/softroce-vm (one guest)
#   make test-verbs-2hosts  two-host verbs tests + the examples and the interop cases across two
#                           guests
#   make test-verbs-native  the verbs tests on this machine (real RDMA NIC or rdma_rxe loaded)
#   make bench              the benchmarks of BENCHMARKS.md (host TCP, callgrind, criterion, then
#                           verbs in the VM); not part of make test
#   make fuzz               the protocol core's fuzzer for FUZZ_SECONDS (default 60) or FUZZ_RUNS
#                           executions, one core; not part of make test (which replays its
#                           corpus, fuzz/corpus/core)

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.NOTPARALLEL:
.DEFAULT_GOAL := build

CARGO ?= cargo
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
VM := scripts/softroce-vm
# Cargo features for every build and test: the verbs transport is what this project is about,
# so it is built, linted and tested even while it is not a default feature of rpc-core.
FEATURES ?= --features rpc-core/verbs
# Seconds a VM run may take before it is killed.
VM_TIMEOUT ?= 1800
# The echo demo's load: `make demo ECHO_COUNT=100000`.
ECHO_SIZE ?= 64
ECHO_COUNT ?= 20000
ECHO_CONCURRENCY ?= 8
# Fewer calls across two emulated guests (one CPU each, debug build).
ECHO_COUNT_2HOSTS ?= 2000
# Address of this machine's RDMA netdev for test-verbs-native (default: found via `rdma link`).
VERBS_ADDR ?=
# Seconds the VM part of make bench may take (4 to 8 minutes here; a round took 7.5 minutes
# instead of 2 with the host's load average at 8, and 900 s then cut the third round off).
BENCH_VM_TIMEOUT ?= 1800
export ECHO_SIZE ECHO_CONCURRENCY
# Where scripts/softroce-vm remembers, for the rest of this make run, that a guest under KVM
# was not ready by its boot deadline (SOFTROCE_BOOT_DEADLINE) and it fell back to TCG: later VM
# steps then boot under TCG at once. One name per make run (make's pid and start time), so a
# file from an earlier run is never read; the file exists only after a fallback.
ifndef SOFTROCE_ACCEL_FILE
SOFTROCE_ACCEL_FILE := $(abspath $(TARGET_DIR))/softroce-accel.$(shell echo "$$PPID.$$(date +%s)")
endif
export SOFTROCE_ACCEL_FILE

TEST_LIST := $(TARGET_DIR)/verbs-tests.list

.PHONY: setup build release demo demo-rdma test fmt-check check-modules check-sync clippy unit-test \
	loom interop-tcp bins interop-grpc porting test-softroce-fallback test-verbs test-verbs-2hosts \
	test-verbs-native test-list bench fuzz doc-check

setup:
	scripts/setup

build:
	$(CARGO) build --workspace $(FEATURES)

release:
	$(CARGO) build --release -p rpc-examples --bins $(FEATURES)

demo: setup release
	@if compgen -G '/sys/class/infiniband/*' >/dev/null; then \
	  echo "==> running the demo over TCP (make demo-rdma runs it over RDMA verbs in the Soft-RoCE VM)"; \
	else \
	  echo "==> running the demo over TCP, because this machine has no RDMA device (/sys/class/infiniband is empty);"; \
	  echo "    make demo-rdma runs the same demo over RDMA verbs inside the Soft-RoCE VM (scripts/softroce-vm)"; \
	fi
	ECHO_COUNT=$(ECHO_COUNT) scripts/demo --transport tcp --addr 127.0.0.1 --bin $(TARGET_DIR)/release

demo-rdma: setup release
	@echo "==> running the demo over RDMA verbs: client and server in one Soft-RoCE guest, rxe0 on 192.0.2.1"
	$(VM) --timeout $(VM_TIMEOUT) --env ECHO_SIZE --env ECHO_CONCURRENCY --env ECHO_COUNT=$(ECHO_COUNT) -- \
	  scripts/demo --transport verbs --addr 192.0.2.1 --bin $(TARGET_DIR)/release --counters

test: setup fmt-check check-modules check-sync clippy doc-check unit-test loom interop-tcp interop-grpc \
	porting test-softroce-fallback \
	test-verbs test-verbs-2hosts

fmt-check:
	$(CARGO) fmt --all --check

check-modules:
	scripts/check-modules

# Every hand-off between threads is an rpc-sync primitive with a loom model: library code
# outside rpc-sync uses no parking_lot and no atomic ordering stronger than Relaxed, except
# the files scripts/check-sync.allowed lists (which may only shrink).
check-sync:
	scripts/check-sync

clippy:
	$(CARGO) clippy --workspace --all-targets $(FEATURES) -- -D warnings

# The API docs build without a warning: no broken or private intra-doc link.
doc-check:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps $(FEATURES)

unit-test:
	$(CARGO) test --workspace $(FEATURES)

# The loom models of rpc-sync's hand-off primitives (their own target dir: --cfg loom rebuilds
# every dependency).
loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(TARGET_DIR)/loom CARGO_PROFILE_RELEASE_LTO=false \
	  CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 $(CARGO) test -p rpc-sync --release --test loom

# The workspace's binaries (debug), which the interop runs and the two-host demo use.
bins:
	$(CARGO) build --workspace --bins $(FEATURES)

# gRPC's interop cases over TCP on this machine: interop-server on a free port of 127.0.0.1,
# interop-client with every case against it (scripts/interop).
interop-tcp: bins
	scripts/interop --transport tcp --addr 127.0.0.1 --bin $(TARGET_DIR)/debug

# The same cases over standard gRPC (scripts/interop-grpc): our client against our gRPC face,
# Python's grpcio, Node's @grpc/grpc-js and a client on the tonic crate (interop/tonic) against
# it, grpcurl through its reflection, and our client and the tonic one against grpcio's server;
# the stock side is installed into target/interop.
interop-grpc: bins
	scripts/interop-grpc --bin $(TARGET_DIR)/debug

# The tonic applications of porting/ and their ports (docs/PORTING.md): the lines each port
# changed, and every client against every server (scripts/porting).
porting: bins
	scripts/porting --bin $(TARGET_DIR)/debug

# The test executables, built on the host; one line per binary: target, package dir, path.
test-list:
	mkdir -p $(TARGET_DIR)
	scripts/test-executables $(FEATURES) > $(TEST_LIST).tmp
	mv $(TEST_LIST).tmp $(TEST_LIST)
	@echo "==> $$(wc -l < $(TEST_LIST)) test executables listed in $(TEST_LIST)"

# The VM's fallback: a boot under KVM that is not ready by its deadline is killed and booted
# again under TCG (scripts/test-softroce-fallback forces it; one TCG boot, 15-30 s).
test-softroce-fallback: setup
	scripts/test-softroce-fallback

test-verbs: setup test-list bins
	$(VM) --timeout $(VM_TIMEOUT) -- scripts/verbs-tests --interop $(TARGET_DIR)/debug $(TEST_LIST)

test-verbs-2hosts: setup test-list bins
	sync=$$(mktemp -d "$${TMPDIR:-/tmp}/rpc-2hosts.XXXXXX"); \
	trap 'rm -rf "$$sync"' EXIT; \
	$(VM) --hosts --timeout $(VM_TIMEOUT) --env ECHO_SIZE --env ECHO_CONCURRENCY \
	  --env ECHO_COUNT=$(ECHO_COUNT_2HOSTS) -- \
	  scripts/verbs-2hosts $(TEST_LIST) "$$sync" $(TARGET_DIR)/debug

# Without the VM: on a machine with an RDMA NIC, or one that can run
#   sudo modprobe rdma_rxe && sudo rdma link add rxe0 type rxe netdev eth0
# (`ulimit -l` must allow registering memory: unlimited is simplest).
test-verbs-native: test-list bins
	RPC_TEST_VERBS_ADDR=$(VERBS_ADDR) scripts/verbs-tests --interop $(TARGET_DIR)/debug $(TEST_LIST)

# The benchmarks (BENCHMARKS.md), about 7 minutes after the build: TCP on this machine (ours,
# a raw TCP ping-pong, tonic; at 64 B also our gRPC face and one server stream), idle CPU,
# instructions per call (callgrind), allocations per call (sync and async handlers),
# criterion micro-benchmarks, then ours next to perftest over verbs in one Soft-RoCE VM boot.
# Writes $(TARGET_DIR)/bench/results.json and results.md; fails if any part did. The A/B
# comparison of two commits is separate: scripts/bench-ab [OLD [NEW]] (BENCHMARKS.md).
bench: setup
	$(CARGO) build --release -p rpc-benches $(FEATURES)
	CARGO='$(CARGO)' FEATURES='$(FEATURES)' TARGET_DIR='$(TARGET_DIR)' \
	  VM_TIMEOUT=$(BENCH_VM_TIMEOUT) scripts/bench

# The fuzzer of frame decoding and the connection core (fuzz/, cargo-fuzz; the script it runs is
# rpc-proto/src/fuzz.rs). RUSTC_BOOTSTRAP=1 lets the stable toolchain take the
# nightly flags cargo-fuzz passes. No sanitizer (the core is safe Rust, and it halves the
# executions), but debug assertions, so overflows panic. New inputs go to $(FUZZ_DIR)/corpus
# (the committed fuzz/corpus/core seeds it), crashes to $(FUZZ_DIR)/artifacts; to keep new
# inputs, merge them into the committed corpus with `cargo fuzz cmin` and commit it.
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?= -1
# Longest input: 512 bytes are scripts of about a hundred operations; longer ones mostly run
# slower (several times fewer executions per second) without reaching new states.
FUZZ_MAX_LEN ?= 512
FUZZ_DIR := $(abspath $(TARGET_DIR))/fuzz
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install --locked cargo-fuzz
	mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/artifacts
	@echo "==> fuzzing the protocol core (seconds: $(FUZZ_SECONDS), runs: $(FUZZ_RUNS); 0 and -1 mean no limit; log: $(FUZZ_DIR)/fuzz.log)"
	cd fuzz && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run -s none --debug-assertions \
	  --target-dir $(FUZZ_DIR)/build core $(FUZZ_DIR)/corpus corpus/core -- \
	  -max_total_time=$(FUZZ_SECONDS) -runs=$(FUZZ_RUNS) -max_len=$(FUZZ_MAX_LEN) -timeout=10 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_DIR)/artifacts/ > $(FUZZ_DIR)/fuzz.log 2>&1 \
	  || { tail -n 60 $(FUZZ_DIR)/fuzz.log; \
	       echo "==> the fuzzer failed: see $(FUZZ_DIR)/artifacts"; exit 1; }
	grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)' \
	  $(FUZZ_DIR)/fuzz.log
