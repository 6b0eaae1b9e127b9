# Durable state: OrdoStore (SPEC §10, §11; docs/storage.md).
#
#   make test-store    the OrdoStore tests alone (also part of test-swift)
#   make bench-store   group commit: transactions/s with one sync per 1, 8,
#                      64 or all 2 000 transactions, in both sync settings,
#                      on the StateFile alone and through a Bus with a
#                      DurableState (each-commit and grouped modes)
#   make bench-dconf   builds Benchmarks/c/dconf-bench.c (installs
#                      dconf-service and libdconf-dev) and runs
#                      Benchmarks/durable-bench.py: dconf, ordod --state
#                      and the durable floor, through the bus daemon and
#                      over direct connections (ordod --no-bus --listen,
#                      the floor on a socket of its own), a round of each
#                      in turn; ordod --state --sync normal and the
#                      in-memory ordod; the 3-message floor (a trivial
#                      service sending ordod's Notify and reply:
#                      write-and-wait, latency, burst) and the in-memory
#                      ordod, of both transports; group commit (8
#                      committers vs 1); the burst again through a
#                      client-side merging writer (beside dconf's
#                      write_fast); the composed floors (in-memory ordod or
#                      the bus daemon's floor + one write + fdatasync in
#                      the state file's directory). Ratios to dconf, the
#                      durable write-and-wait of each transport against
#                      its durable floor and the burst of one Commit per
#                      write against dconf's on stdout, JSON in
#                      $(BENCH_SCRATCH)/bench-durable.json; part of make bench
# Both benchmarks keep their files under $(BENCH_SCRATCH), on the disk of
# the checkout.

BENCH_SCRATCH   ?= .build-bench
BENCH_CC        ?= cc
STORE_BENCH_DIR := $(BENCH_SCRATCH)/store-bench
DCONF_BENCH     := $(BENCH_SCRATCH)/dconf-bench
DCONF_BENCH_ROUNDS ?= 3

.PHONY: test-store bench-store dconf-bench bench-dconf

test-store: deps
	$(SWIFT) test $(SWIFTFLAGS) --filter OrdoStoreTests

bench-store: deps
	$(SWIFT) build -c release --scratch-path $(BENCH_SCRATCH) --product ordo-store-tool $(SWIFTFLAGS)
	@mkdir -p $(STORE_BENCH_DIR)
	$(BENCH_SCRATCH)/release/ordo-store-tool bench $(STORE_BENCH_DIR) 2000
	$(BENCH_SCRATCH)/release/ordo-store-tool bus-bench $(STORE_BENCH_DIR) 2000

dconf-bench: deps
	@scripts/deps.sh dconf-service libdconf-dev
	@mkdir -p $(BENCH_SCRATCH)
	$(BENCH_CC) -std=gnu11 -O2 -Wall -Wextra -Werror -o $(DCONF_BENCH) Benchmarks/c/dconf-bench.c \
	  $$(pkg-config --cflags --libs dconf dbus-1)

bench-dconf: dconf-bench
	$(SWIFT) build -c release --scratch-path $(BENCH_SCRATCH) --product ordod $(SWIFTFLAGS)
	python3 Benchmarks/durable-bench.py $(DCONF_BENCH) $(BENCH_SCRATCH)/release/ordod $(BENCH_SCRATCH) \
	  $(BENCH_SCRATCH)/bench-durable.json $(DCONF_BENCH_ROUNDS)
