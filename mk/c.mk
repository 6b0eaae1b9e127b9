# The C ABI: libordo.so, include/ordo.h, ordo.pc (SPEC §6; docs/c-api.md).
#
#   make libordo                     build the self-contained libordo.so
#   make install PREFIX=/usr/local   install the library, header and ordo.pc
#                                    (DESTDIR, LIBDIR, INCLUDEDIR, PKGCONFIGDIR
#                                    override the usual places)
#   make install-strip PREFIX=...    the same with the library stripped
#   make uninstall PREFIX=...        remove what install put there
#   make test-c                      C and C++ tests under valgrind, the
#                                    conformance scenarios through ctypes, the
#                                    example; against a temporary install
#   make example-c                   build and run examples/c
#   make test-c-client               the C client (ordo_client_*) against a
#                                    real ordod on a private dbus-daemon,
#                                    under valgrind, and examples/c-client
#
# libordo.so links the Swift runtime statically (-static-stdlib) so that it
# needs nothing but the C/C++ runtime of the system; that build lives in its
# own scratch path because -static-stdlib must not mix with the default
# build. A linker version script exports the ordo_* functions only. Why and
# what it costs: docs/c-api.md.

LIBORDO_SCRATCH  ?= .build-libordo
LIBORDO_VERSION  := $(shell sed -n 's/^\#define ORDO_VERSION_STRING "\(.*\)"/\1/p' include/ordo.h)
LIBORDO_SOVERSION := $(shell sed -n 's/^\#define ORDO_VERSION_MAJOR \([0-9][0-9]*\)/\1/p' include/ordo.h)
LIBORDO_SONAME   := libordo.so.$(LIBORDO_SOVERSION)
LIBORDO          := $(LIBORDO_SCRATCH)/release/libordo.so
LIBORDO_MAP      := $(LIBORDO_SCRATCH)/libordo.map
LIBORDO_FLAGS     = -c release --product ordo --scratch-path $(LIBORDO_SCRATCH) \
                    -Xswiftc -static-stdlib \
                    -Xlinker -soname=$(LIBORDO_SONAME) \
                    -Xlinker --version-script=$(CURDIR)/$(LIBORDO_MAP)

DESTDIR      ?=
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL      ?= install
C_STRIP      ?=

.PHONY: libordo install install-strip uninstall test-c example-c test-c-client
TEST_TARGETS += test-c test-c-client

$(LIBORDO_MAP): mk/c.mk
	@mkdir -p $(LIBORDO_SCRATCH)
	@printf '{\n  global: ordo_*;\n  local: *;\n};\n' >$@

libordo: deps $(LIBORDO_MAP)
	$(SWIFT) build $(SWIFTFLAGS) $(LIBORDO_FLAGS)

install: libordo install-service
	$(INSTALL) -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	$(INSTALL) -m 0755 $(LIBORDO) $(DESTDIR)$(LIBDIR)/$(LIBORDO_SONAME)
	$(if $(C_STRIP),strip --strip-unneeded $(DESTDIR)$(LIBDIR)/$(LIBORDO_SONAME))
	ln -sf $(LIBORDO_SONAME) $(DESTDIR)$(LIBDIR)/libordo.so
	$(INSTALL) -m 0644 include/ordo.h $(DESTDIR)$(INCLUDEDIR)/ordo.h
	printf '%s\n' \
	  'prefix=$(PREFIX)' \
	  'libdir=$(LIBDIR)' \
	  'includedir=$(INCLUDEDIR)' \
	  '' \
	  'Name: ordo' \
	  'Description: Ordo change-notification bus (C API)' \
	  'Version: $(LIBORDO_VERSION)' \
	  'Cflags: -I$${includedir}' \
	  'Libs: -L$${libdir} -Wl,-rpath,$${libdir} -lordo' \
	  | sed -e 's|^libdir=$(PREFIX)/|libdir=$${prefix}/|' -e 's|^includedir=$(PREFIX)/|includedir=$${prefix}/|' \
	  >$(DESTDIR)$(PKGCONFIGDIR)/ordo.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/ordo.pc

install-strip:
	$(MAKE) --no-print-directory install C_STRIP=1

uninstall: uninstall-service
	rm -f $(DESTDIR)$(LIBDIR)/$(LIBORDO_SONAME) $(DESTDIR)$(LIBDIR)/libordo.so \
	  $(DESTDIR)$(INCLUDEDIR)/ordo.h $(DESTDIR)$(PKGCONFIGDIR)/ordo.pc

# The tests install into a fresh temporary prefix, build every C test with
# `pkg-config --cflags --libs ordo` from it, run them (Tests/C/run.sh), then
# uninstall and check that nothing is left.
test-c: deps libordo
	@set -e; mkdir -p $(LIBORDO_SCRATCH); \
	tmp=$$(mktemp -d $(CURDIR)/$(LIBORDO_SCRATCH)/test.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory install PREFIX=$$tmp/prefix >$$tmp/install.log 2>&1 || { cat $$tmp/install.log; exit 1; }; \
	CC="$(CC)" CXX="$(CXX)" Tests/C/run.sh $$tmp $$tmp/prefix $(CONFORMANCE_DIRS); \
	$(MAKE) --no-print-directory uninstall PREFIX=$$tmp/prefix >/dev/null; \
	left=$$(find $$tmp/prefix -type f -o -type l); \
	if [ -n "$$left" ]; then echo "test-c: make uninstall left: $$left"; exit 1; fi; \
	echo "test-c: install, uninstall, C, C++, valgrind, ctypes conformance and example passed"

example-c: deps libordo
	@set -e; mkdir -p $(LIBORDO_SCRATCH); \
	tmp=$$(mktemp -d $(CURDIR)/$(LIBORDO_SCRATCH)/example.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory install PREFIX=$$tmp/prefix >/dev/null; \
	export PKG_CONFIG_PATH=$$tmp/prefix/lib/pkgconfig; \
	echo "cc -o example examples/c/example.c \$$(pkg-config --cflags --libs ordo)"; \
	$(CC) -Wall -Wextra -Werror -o $$tmp/example examples/c/example.c $$(pkg-config --cflags --libs ordo); \
	$$tmp/example

# Tests/DBus/test_c_client.py builds Tests/C/test_client.c and
# examples/c-client/follow.c against a temporary install and runs them
# against the debug build's ordod (DBUS_TEST_PACKAGES: mk/dbus.mk).
test-c-client: build libordo
	@scripts/deps.sh $(DBUS_TEST_PACKAGES) valgrind
	@python3 -c 'import jeepney' 2>/dev/null || python3 -m pip install --quiet jeepney
	@set -e; mkdir -p $(LIBORDO_SCRATCH); \
	tmp=$$(mktemp -d $(CURDIR)/$(LIBORDO_SCRATCH)/client.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory install PREFIX=$$tmp/prefix >$$tmp/install.log 2>&1 || { cat $$tmp/install.log; exit 1; }; \
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" ORDO_LIB_DIR=$$tmp/prefix/lib \
	  timeout 600 python3 Tests/DBus/test_c_client.py
