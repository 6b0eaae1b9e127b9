# Typed accessors generated from a schema (docs/schema.md, "Generated
# accessors"; `ordoctl codegen`).
#
#   make test-codegen       the checked-in accessors of examples/playlist and
#                           examples/swift are what `ordoctl codegen`
#                           gives; removing or retyping a keypath makes
#                           the Swift and C code that uses it fail to
#                           compile; the C example
#                           (as C11 and as C++, under valgrind), the Python
#                           example and its pytest tests, and the Swift
#                           example (a separate package, Swift 6, warnings
#                           as errors) run                       [make test]
#   make codegen-examples   regenerate the accessors of examples/playlist and
#                           examples/swift
#
# The Swift accessors' behaviour is tested by OrdoCodegenTests (make test-swift).

SWIFTC ?= $(SWIFT)c
CODEGEN_SCHEMA := examples/schema/playlist.json

.PHONY: test-codegen codegen-examples
TEST_TARGETS += test-codegen

test-codegen: build libordo python-venv
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	bin=$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path); \
	SWIFTC=$(SWIFTC) Tests/Codegen/run.sh "$$tmp" "$$bin/ordoctl" $(CURDIR)/$(LIBORDO) "$$bin" $(CURDIR)/$(PYTHON_VENV)/bin/python
	python3 examples/playlist/swift/check.py $(SWIFT)

codegen-examples: build
	@set -e; bin=$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path); \
	$$bin/ordoctl codegen --swift --output examples/playlist/swift/Sources/playlist $(CODEGEN_SCHEMA); \
	$$bin/ordoctl codegen --c --output examples/playlist/c $(CODEGEN_SCHEMA); \
	$$bin/ordoctl codegen --python --output examples/playlist/python $(CODEGEN_SCHEMA); \
	$$bin/ordoctl codegen --swift --output examples/swift/Sources/songs examples/swift/songs.json
