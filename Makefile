# Ordo — build, test, run, install.
#
#   make run        install missing Debian packages, build, show Ordo working
#   make check      the quick tests: Swift unit tests and conformance scenarios
#   make test       install missing Debian packages, build, run every test
#   make bench      benchmarks (release build)
#   make install PREFIX=/usr/local   (see mk/c.mk)
#
# Each area of the project adds its own rules in mk/*.mk and appends its test
# rule to TEST_TARGETS.

SWIFT    ?= swift
PREFIX   ?= /usr/local
# Swift build flags shared by every rule; warnings are errors.
SWIFTFLAGS ?= -Xswiftc -warnings-as-errors

.PHONY: all deps build check test run run-demo test-swift test-conformance clean
all: build

deps:
	@scripts/deps.sh

# The Debian packages the build needs are installed by `make test`, `make
# check` and `make run` (scripts/deps.sh); `make build` only builds.
build:
	$(SWIFT) build $(SWIFTFLAGS)

TEST_TARGETS := test-swift test-conformance
# What `make run` shows; mk/dbus.mk points it at the daemon.
RUN_TARGET := run-demo
include $(sort $(wildcard mk/*.mk))

test: deps $(TEST_TARGETS)
	@echo "make test: all tests passed"

check: deps test-swift test-conformance
	@echo "make check: the unit tests and the conformance scenarios passed"

test-swift: build
	$(SWIFT) test $(SWIFTFLAGS)

# The conformance scenarios through the Swift API: the project's own, and the
# shared ones when they are present beside the checkout.
CONFORMANCE_DIRS := Tests/Conformance $(wildcard ../shared/conformance)
test-conformance: build
	$(SWIFT) run ordo-conformance $(CONFORMANCE_DIRS)

run: deps $(RUN_TARGET)

run-demo: build
	$(SWIFT) run $(SWIFTFLAGS) ordo-demo

clean:
	rm -rf .build .build-*
