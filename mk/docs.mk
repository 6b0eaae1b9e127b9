# Documentation: the Swift API's DocC archive and example (docs/swift.md), and the
# links between the Markdown documents.
#
#   make docs                 the DocC archive of the Ordo module in
#                             $(DOCS_OUT), built with the toolchain's
#                             swift-symbolgraph-extract and docc (there is no
#                             package plugin); a warning fails it, and so does
#                             a public symbol without a documentation comment
#   make test-examples-swift  copies examples/swift/ (a SwiftPM package that
#                             depends on Ordo by path) to a temporary
#                             directory, points it at this checkout, runs it
#                             with `swift run` and checks what it printed
#   make test-doc-links       every relative link of the Markdown files
#                             points at a file and heading that exist
#   make test-docs            all three                              [make test]

SWIFT_BIN_DIR ?= $(dir $(realpath $(shell command -v $(SWIFT))))
SYMBOLGRAPH_EXTRACT ?= $(SWIFT_BIN_DIR)swift-symbolgraph-extract
DOCC ?= $(SWIFT_BIN_DIR)docc
DOCS_SCRATCH ?= .build-docs
DOCS_OUT ?= $(DOCS_SCRATCH)/Ordo.doccarchive
DOCS_TRIPLE = $(shell $(SWIFT) -print-target-info | python3 -c 'import json,sys; print(json.load(sys.stdin)["target"]["triple"])')

.PHONY: docs test-docs test-doc-links test-examples-swift
TEST_TARGETS += test-docs

docs:
	$(SWIFT) build $(SWIFTFLAGS) --target Ordo
	@rm -rf $(DOCS_SCRATCH)/symbols $(DOCS_OUT) && mkdir -p $(DOCS_SCRATCH)/symbols
	$(SYMBOLGRAPH_EXTRACT) -module-name Ordo -target $(DOCS_TRIPLE) -I $$($(SWIFT) build --show-bin-path)/Modules \
	  -I Sources/CCacheHint \
	  -output-dir $(DOCS_SCRATCH)/symbols -minimum-access-level public -skip-inherited-docs
	$(DOCC) convert Sources/Ordo/Ordo.docc --additional-symbol-graph-dir $(DOCS_SCRATCH)/symbols \
	  --output-path $(DOCS_OUT) --fallback-display-name Ordo --fallback-bundle-identifier dev.ordo.Ordo \
	  --warnings-as-errors >$(DOCS_SCRATCH)/docc.log 2>&1 || { cat $(DOCS_SCRATCH)/docc.log; exit 1; }
	@if grep -q 'warning:' $(DOCS_SCRATCH)/docc.log; then cat $(DOCS_SCRATCH)/docc.log; exit 1; fi
	python3 scripts/check-doc-coverage.py $(DOCS_SCRATCH)/symbols $(CURDIR)/Sources/Ordo/
	@echo "docs: $(DOCS_OUT)"

test-examples-swift:
	python3 examples/swift/check.py --swift $(SWIFT) --checkout $(CURDIR)

test-doc-links:
	python3 scripts/check-doc-links.py $$(git ls-files '*.md' 2>/dev/null || find . -name '*.md' -not -path './.build*')

test-docs: test-doc-links docs test-examples-swift
