# Benchmarks (SPEC §9; docs/performance.md).
#
#   make bench        release build, every scenario, table on stdout, JSON in
#                     $(BENCH_JSON); then the durable-ordod scenario against
#                     dconf (make bench-dconf, mk/store.mk); under 5 minutes
#                     on 2 cores
#   make test-bench   the quick mode (part of `make test`): checks that it runs
#                     and writes well-formed JSON, never a performance target
#
# The c-abi scenario drives libordo.so from C (Benchmarks/c), built against
# a private install prefix when include/ordo.h and `make install` exist; the
# dbus scenario runs a release ordod, a C host publishing its own bus through
# that libordo.so (ordo-host-bench) and a libdbus observer (Benchmarks/c);
# the dbus-c-client scenario runs that ordod and a program using the C client
# of that libordo.so beside plain libdbus (ordo-client-bench).
# The c-gobject scenario runs that program beside gobject-bench
# (Benchmarks/c/gobject-bench.c, GObject property notification, built with
# libglib2.0-dev, which bench-gobject installs), found in the same directory.
# When their parts are missing the report says they are not available.

BENCH_SCRATCH ?= .build-bench
BENCH_BIN     := $(BENCH_SCRATCH)/release/ordo-bench
BENCH_JSON    ?= $(BENCH_SCRATCH)/bench.json
BENCH_PREFIX  := $(CURDIR)/$(BENCH_SCRATCH)/prefix
BENCH_C       := $(BENCH_SCRATCH)/ordo-c-bench
BENCH_GOBJECT := $(BENCH_SCRATCH)/gobject-bench
BENCH_CC      ?= cc
BENCH_ORDOD   := $(BENCH_SCRATCH)/release/ordod
BENCH_DBUS    := $(BENCH_SCRATCH)/ordo-dbus-bench
BENCH_HOST    := $(BENCH_SCRATCH)/ordo-host-bench
BENCH_CLIENT  := $(BENCH_SCRATCH)/ordo-client-bench
# Scenario programs are passed only when they were built.
BENCH_ARGS     = $$(test -x $(BENCH_C) && echo --c-bench $(BENCH_C)) \
                 $$(test -x $(BENCH_ORDOD) && test -x $(BENCH_DBUS) && echo --ordod $(BENCH_ORDOD) --dbus-bench $(BENCH_DBUS)) \
                 $$(test -x $(BENCH_HOST) && echo --host-bench $(BENCH_HOST)) \
                 $$(test -x $(BENCH_CLIENT) && echo --client-bench $(BENCH_CLIENT))

.PHONY: bench bench-build bench-c bench-gobject bench-dbus test-bench
TEST_TARGETS += test-bench

bench-build:
	$(SWIFT) build -c release --scratch-path $(BENCH_SCRATCH) --product ordo-bench $(SWIFTFLAGS)

bench-c:
	@mkdir -p $(BENCH_SCRATCH); rm -f $(BENCH_C) $(BENCH_HOST) $(BENCH_CLIENT)
	@if [ -f include/ordo.h ] && $(MAKE) -n install PREFIX=$(BENCH_PREFIX) >/dev/null 2>&1; then \
	  echo "bench: installing libordo into $(BENCH_PREFIX) for the c-abi scenario"; \
	  if $(MAKE) --no-print-directory install PREFIX=$(BENCH_PREFIX) >$(BENCH_SCRATCH)/install.log 2>&1; then \
	    pc=$$(find $(BENCH_PREFIX) -name ordo.pc | head -n 1); \
	    if [ -n "$$pc" ]; then \
	      flags="$$(PKG_CONFIG_PATH=$$(dirname $$pc) pkg-config --cflags --libs ordo) -Wl,-rpath,$$(PKG_CONFIG_PATH=$$(dirname $$pc) pkg-config --variable=libdir ordo)"; \
	    else \
	      lib=$$(dirname $$(find $(BENCH_PREFIX) -name 'libordo.so*' | head -n 1)); \
	      flags="-I$(BENCH_PREFIX)/include -L$$lib -lordo -Wl,-rpath,$$lib"; \
	    fi; \
	    $(BENCH_CC) -std=c99 -O2 -Wall -Wextra -Werror -o $(BENCH_C) Benchmarks/c/ordo-c-bench.c $$flags \
	      || echo "bench: building the C benchmark failed: c-abi not available"; \
	    $(BENCH_CC) -std=c99 -O2 -Wall -Wextra -Werror -o $(BENCH_HOST) Benchmarks/c/ordo-host-bench.c $$flags \
	      $$(pkg-config --cflags --libs dbus-1) \
	      || echo "bench: building the D-Bus host benchmark failed: dbus notify_per_s not available"; \
	    $(BENCH_CC) -std=c99 -O2 -Wall -Wextra -Werror -o $(BENCH_CLIENT) Benchmarks/c/ordo-client-bench.c $$flags \
	      $$(pkg-config --cflags --libs dbus-1) \
	      || echo "bench: building the C client benchmark failed: dbus-c-client not available"; \
	  else \
	    echo "bench: make install failed (see $(BENCH_SCRATCH)/install.log): c-abi not available"; \
	  fi; \
	else \
	  echo "bench: include/ordo.h or the install rule is missing: c-abi not available"; \
	fi

bench-gobject:
	@scripts/deps.sh libglib2.0-dev
	@mkdir -p $(BENCH_SCRATCH); rm -f $(BENCH_GOBJECT)
	@$(BENCH_CC) -std=c99 -O2 -Wall -Wextra -Werror -o $(BENCH_GOBJECT) Benchmarks/c/gobject-bench.c \
	  $$(pkg-config --cflags --libs gobject-2.0) || echo "bench: building the GObject benchmark failed: c-gobject not available"

bench-dbus:
	@mkdir -p $(BENCH_SCRATCH); rm -f $(BENCH_DBUS)
	@if [ -d Sources/ordod ] && $(SWIFT) build -c release --scratch-path $(BENCH_SCRATCH) --product ordod $(SWIFTFLAGS) \
	    >$(BENCH_SCRATCH)/ordod-build.log 2>&1; then \
	  $(BENCH_CC) -std=c99 -O2 -Wall -Wextra -Werror -o $(BENCH_DBUS) Benchmarks/c/ordo-dbus-bench.c \
	    $$(pkg-config --cflags --libs dbus-1) || echo "bench: building the D-Bus benchmark failed: dbus not available"; \
	else \
	  rm -f $(BENCH_ORDOD); \
	  echo "bench: ordod not built (see $(BENCH_SCRATCH)/ordod-build.log): dbus not available"; \
	fi

bench: deps bench-build bench-c bench-gobject bench-dbus
	$(BENCH_BIN) --json $(BENCH_JSON) $(BENCH_ARGS)
	@$(MAKE) --no-print-directory bench-dconf

test-bench: deps bench-build bench-c bench-gobject bench-dbus
	$(BENCH_BIN) --quick --json $(BENCH_SCRATCH)/bench-quick.json $(BENCH_ARGS) >$(BENCH_SCRATCH)/bench-quick.txt
	@cat $(BENCH_SCRATCH)/bench-quick.txt
	@python3 Benchmarks/check-json.py $(BENCH_SCRATCH)/bench-quick.json
