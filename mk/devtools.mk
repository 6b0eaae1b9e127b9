# Devtools (docs/devtools.md): the rendered example graph.
#
#   make docs-graph   starts a private session bus and a real ordod, registers
#                     the contracts of examples/python/ordo_devtools.py (a
#                     normalizer, computed data, views, an every-transaction
#                     logger) and renders their graph with ordoctl graph --svg
#                     into docs/graph-example.svg (commit the result)

# ordoctl graph runs Graphviz's dot; dbus-run-session gives a private bus.
DEVTOOLS_PACKAGES := graphviz dbus-daemon
GRAPH_EXAMPLE     := docs/graph-example.svg

.PHONY: docs-graph

docs-graph: build python-venv
	@scripts/deps.sh $(DEVTOOLS_PACKAGES)
	@bin=$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path); \
	timeout 120 dbus-run-session -- sh -c '"$$1/ordod" >/dev/null & pid=$$!; \
	  "$$2" examples/python/ordo_devtools.py --ordoctl "$$1/ordoctl" --svg "$$3"; rc=$$?; \
	  kill $$pid; wait $$pid; exit $$rc' sh "$$bin" "$(PYTHON_VENV)/bin/python" "$(GRAPH_EXAMPLE)"
	@echo "docs-graph: wrote $(GRAPH_EXAMPLE)"
