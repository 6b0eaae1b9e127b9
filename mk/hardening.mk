# Hardening: differential testing, fuzzing, sanitizers, thread stress.
# What each rule checks and what it found: docs/reliability.md.
#
#   make differential   the model-vs-bus differential tests with more sequences
#                       (DIFF_SEQUENCES, default 2000; DIFF_SEED to start elsewhere)
#   make fuzz           every libFuzzer target for FUZZ_SECONDS (default 60) each
#   make test-fuzz      every fuzz target for FUZZ_TEST_SECONDS (10) each   [make test]
#   make tsan           the Swift test suite under ThreadSanitizer          [make test]
#   make asan           the Swift test suite under AddressSanitizer and
#                       LeakSanitizer (memory errors and leaks)
#   make stress         release build: DIFF_STRESS_SEQUENCES (10000) differential
#                       sequences and STRESS_THREADS (4) × STRESS_TRANSACTIONS
#                       (100000) thread stress
#   make fuzz-build     build the fuzz targets only (.build-fuzz/release/)

HARD_SCRATCH ?= .build-hard
TSAN_SCRATCH ?= .build-tsan
ASAN_SCRATCH ?= .build-asan
FUZZ_BUILD ?= .build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TEST_SECONDS ?= 10
DIFF_SEQUENCES ?= 2000
DIFF_SEED ?= 1
DIFF_STRESS_SEQUENCES ?= 10000
STRESS_THREADS ?= 4
STRESS_TRANSACTIONS ?= 100000
# Differential sequences per `swift test` run under TSan (it is ~10x slower).
TSAN_DIFF_SEQUENCES ?= 30

FUZZ_TARGETS := keypath scenario dbus schema
# The fuzz targets are SwiftPM executables (Package.swift, declared when
# ORDO_FUZZ is set), built in release with libFuzzer and AddressSanitizer in
# their own scratch path; -enable-testing lets the D-Bus target reach the
# service's decoder.
FUZZ_SWIFTFLAGS := $(SWIFTFLAGS) -c release --scratch-path $(FUZZ_BUILD) \
  -Xswiftc -g -Xswiftc -sanitize=fuzzer,address -Xswiftc -enable-testing -Xswiftc -use-ld=lld
FUZZ_BIN = $(FUZZ_BUILD)/release
# libFuzzer options: a hang is a finding (10 s per input), memory is bounded.
FUZZ_RUN_FLAGS := -timeout=10 -rss_limit_mb=2048 -print_final_stats=1

.PHONY: differential fuzz fuzz-build test-fuzz tsan test-tsan asan stress

differential:
	ORDO_DIFF_SEQUENCES=$(DIFF_SEQUENCES) ORDO_DIFF_SEED=$(DIFF_SEED) \
	  $(SWIFT) test $(SWIFTFLAGS) --scratch-path $(HARD_SCRATCH) --filter 'OrdoDifferentialTests\.(DifferentialTests|ModelTests)'

# --- Fuzzing (libFuzzer + AddressSanitizer/LeakSanitizer, through SwiftPM) --

fuzz-build: deps
	@for t in $(FUZZ_TARGETS); do \
	  echo "ORDO_FUZZ=1 $(SWIFT) build $(FUZZ_SWIFTFLAGS) --product fuzz-$$t"; \
	  ORDO_FUZZ=1 $(SWIFT) build $(FUZZ_SWIFTFLAGS) --product fuzz-$$t || exit 1; \
	done

# Runs every target for FUZZ_RUN_SECONDS. New inputs go to
# $(FUZZ_BUILD)/corpus-<target>; the committed seeds in Fuzz/corpus/<target>
# are only read. A crash, leak, hang or reference disagreement fails the rule
# and leaves the input in $(FUZZ_BUILD)/artifacts/.
fuzz: FUZZ_RUN_SECONDS = $(FUZZ_SECONDS)
test-fuzz: FUZZ_RUN_SECONDS = $(FUZZ_TEST_SECONDS)
fuzz test-fuzz: fuzz-build
	@mkdir -p $(FUZZ_BUILD)/artifacts
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus-$$t; \
	  dict=; if [ -f Fuzz/$$t.dict ]; then dict=-dict=Fuzz/$$t.dict; fi; \
	  printf 'fuzz-%s (%s s): ' $$t $(FUZZ_RUN_SECONDS); \
	  if $(FUZZ_BIN)/fuzz-$$t -max_total_time=$(FUZZ_RUN_SECONDS) $(FUZZ_RUN_FLAGS) $$dict \
	      -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t- \
	      $(FUZZ_BUILD)/corpus-$$t Fuzz/corpus/$$t >$(FUZZ_BUILD)/fuzz-$$t.log 2>&1; then \
	    grep -E '^(Done|stat::average_exec_per_sec)' $(FUZZ_BUILD)/fuzz-$$t.log | tr '\n' ' '; echo; \
	  else \
	    echo FAILED; tail -60 $(FUZZ_BUILD)/fuzz-$$t.log; \
	    echo "fuzz-$$t: FAILED (log: $(FUZZ_BUILD)/fuzz-$$t.log, input in $(FUZZ_BUILD)/artifacts/)"; exit 1; \
	  fi; \
	done

# --- ThreadSanitizer ---------------------------------------------------------

tsan:
	ORDO_DIFF_SEQUENCES=$(TSAN_DIFF_SEQUENCES) \
	  $(SWIFT) test $(SWIFTFLAGS) --sanitize=thread --scratch-path $(TSAN_SCRATCH)

test-tsan: tsan

# The hot path names key nodes and contracts without retaining them
# (docs/reliability.md, "Unretained references"): a use after free would
# show here. Leak detection is on: callbacks read and write through their
# context (docs/swift.md), so no test forms a cycle with its bus.
asan:
	ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/Tests/lsan-suppressions.txt ORDO_DIFF_SEQUENCES=$(TSAN_DIFF_SEQUENCES) \
	  $(SWIFT) test $(SWIFTFLAGS) --sanitize=address --scratch-path $(ASAN_SCRATCH)

# --- Stress (release) --------------------------------------------------------

stress:
	ORDO_DIFF_SEQUENCES=$(DIFF_STRESS_SEQUENCES) ORDO_DIFF_SEED=$(DIFF_SEED) \
	ORDO_STRESS_THREADS=$(STRESS_THREADS) ORDO_STRESS_TRANSACTIONS=$(STRESS_TRANSACTIONS) \
	  $(SWIFT) test -c release $(SWIFTFLAGS) -Xswiftc -enable-testing --scratch-path $(HARD_SCRATCH)-release \
	  --filter 'OrdoDifferentialTests\.(DifferentialTests|ThreadStressTests)'

TEST_TARGETS += test-fuzz test-tsan

# --- The C ABI under ThreadSanitizer -----------------------------------------
#
# libordo.so built with -sanitize=thread (debug, dynamic Swift runtime) and
# the C tests that use threads built with the toolchain's clang and
# -fsanitize=thread: the C shim's lock-free callback entry (docs/reliability.md)
# under a race detector. A canary with a deliberate race must be reported
# first, so a sanitizer that is not on fails the rule. (The canary links
# libordo.so too: the shared TSan runtime needs its libdispatch.)

CTSAN_SCRATCH ?= .build-ctsan
CTSAN_CC ?= $(dir $(shell command -v $(SWIFT) 2>/dev/null || echo /opt/swift/usr/bin/swift))clang
CTSAN_TESTS := test_contracts regress_unregister_scheduled test_handles

.PHONY: test-c-tsan
TEST_TARGETS += test-c-tsan

test-c-tsan: deps
	$(SWIFT) build $(SWIFTFLAGS) --product ordo --sanitize=thread --scratch-path $(CTSAN_SCRATCH)
	@set -e; lib=$$(dirname $$(find $(CURDIR)/$(CTSAN_SCRATCH) -name libordo.so -path '*debug*' | head -n 1)); \
	rt=$$(dirname $$($(CTSAN_CC) -print-file-name=libclang_rt.tsan-x86_64.so)); \
	flags="-std=c99 -Wall -Wextra -Werror -g -fsanitize=thread -shared-libsan -Iinclude -Wl,-rpath,$$rt"; \
	$(CTSAN_CC) $$flags -o $(CTSAN_SCRATCH)/tsan_canary Tests/C/tsan_canary.c -Wl,--no-as-needed -L$$lib -lordo -Wl,-rpath,$$lib -lpthread; \
	if TSAN_OPTIONS=exitcode=66 $(CTSAN_SCRATCH)/tsan_canary >$(CTSAN_SCRATCH)/canary.log 2>&1 || [ $$? -ne 66 ] \
	   || ! grep -q "data race" $(CTSAN_SCRATCH)/canary.log; then \
	  echo "test-c-tsan: ThreadSanitizer did not report the canary's race"; cat $(CTSAN_SCRATCH)/canary.log; exit 1; fi; \
	for t in $(CTSAN_TESTS); do \
	  $(CTSAN_CC) $$flags -o $(CTSAN_SCRATCH)/$$t Tests/C/$$t.c -L$$lib -lordo -Wl,-rpath,$$lib -lpthread; \
	  TSAN_OPTIONS="halt_on_error=1 exitcode=66" $(CTSAN_SCRATCH)/$$t; \
	done; \
	echo "test-c-tsan: the canary's race was reported; $(CTSAN_TESTS) ran clean under ThreadSanitizer"
