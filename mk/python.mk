# The Python package `ordo` (bindings/python): a D-Bus client over jeepney
# and an in-process binding of libordo.so through ctypes. See
# bindings/python/README.md.
#
#   make test-python   installs the package (with pytest and jeepney) into a
#                      venv under $(PYTHON_VENV) and runs its tests against a
#                      real ordod on private dbus-daemons and the real
#                      libordo.so, installed into a temporary prefix
#   make python-venv   only makes the venv with the package installed
#
# One file alone: make test-python PYTEST_FILES=tests/test_resume.py

PYTHON        ?= python3
PYTHON_VENV   ?= .build-python/venv
PYTHON_PKGS   := python3 python3-venv dbus-daemon
PYTEST_FILES  ?= tests/test_values_errors.py tests/test_client.py tests/test_native.py tests/test_examples.py \
                 tests/test_devtools.py tests/test_schema.py \
                 tests/test_resume.py tests/test_merging.py tests/test_conditions.py tests/test_cache.py
PYTEST_ARGS   ?= -q

.PHONY: test-python python-venv
TEST_TARGETS += test-python

# The venv: made once, then pytest/jeepney/setuptools only when missing, and
# the package (re)installed from the tree on every run.
python-venv:
	@scripts/deps.sh $(PYTHON_PKGS)
	@set -e; \
	if [ ! -x $(PYTHON_VENV)/bin/python ]; then \
	  echo "python: making $(PYTHON_VENV)"; \
	  $(PYTHON) -m venv $(PYTHON_VENV); \
	fi; \
	if ! $(PYTHON_VENV)/bin/python -c 'import pytest, jeepney, setuptools, wheel' 2>/dev/null; then \
	  echo "python: installing pytest, jeepney, setuptools and wheel into $(PYTHON_VENV)"; \
	  $(PYTHON_VENV)/bin/python -m pip install --quiet --disable-pip-version-check 'pytest>=7' 'jeepney>=0.8' 'setuptools>=61' wheel; \
	fi; \
	$(PYTHON_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-build-isolation \
	  --no-deps --force-reinstall ./bindings/python >$(PYTHON_VENV)/install.log 2>&1 || \
	  { cat $(PYTHON_VENV)/install.log; exit 1; }; \
	rm -rf bindings/python/build bindings/python/src/*.egg-info

test-python: build libordo python-venv
	@set -e; mkdir -p $(LIBORDO_SCRATCH); \
	tmp=$$(mktemp -d $(CURDIR)/$(LIBORDO_SCRATCH)/python.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory install PREFIX=$$tmp/prefix >$$tmp/install.log 2>&1 || { cat $$tmp/install.log; exit 1; }; \
	bin=$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path); \
	cd bindings/python && \
	ORDO_BIN=$$bin ORDO_LIBRARY=$$tmp/prefix/lib/libordo.so timeout 900 $(CURDIR)/$(PYTHON_VENV)/bin/python -m pytest $(PYTEST_ARGS) -p no:cacheprovider $(PYTEST_FILES)
