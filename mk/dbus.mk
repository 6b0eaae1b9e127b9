# D-Bus: the bridge (OrdoDBus), ordod and ordoctl. See docs/dbus.md.
#
#   make run        starts ordod, watches and writes with ordoctl, stops it
#   make test-dbus  end-to-end tests through jeepney, busctl, gdbus, dbus-send,
#                   a gdbus-codegen C client and ordoctl (each test runs its
#                   own dbus-daemon and ordod),
#                   the durable ordod's tests and ordoctl set --merge
#                   (merging writes, Tests/DBus/test_merge.py) included; the
#                   method, writer, liveness, policy, resync, conditions and
#                   cache (Tests/DBus/test_cache.py: consistent reads under
#                   concurrent committers) tests run again
#                   over direct connections (ORDO_TEST_TRANSPORT=direct: ordod
#                   --listen), and Tests/DBus/test_direct.py
#   make test-durable  only the durable ordod (ordod --state): kill -9, full
#                   disk, read-only mounts, refused state files

RUN_TARGET := run-ordod
TEST_TARGETS += test-dbus

# What the D-Bus tests run besides the build: the bus daemon and the stock
# clients (dbus-send: dbus-bin, gdbus: libglib2.0-bin, busctl: systemd);
# mount (package mount) mounts the durable tests' tmpfs; setpriv (util-linux) runs the policy tests' client as nobody, with the
# system python3 (it cannot read root's own Python).
DBUS_TEST_PACKAGES := dbus-daemon dbus-bin libglib2.0-bin systemd python3 util-linux mount
# ordoctl graph --svg/--png runs Graphviz's dot (test_devtools.py).
DBUS_TEST_PACKAGES += graphviz
# A C client built from the code gdbus-codegen generates from
# docs/dev.ordo.Bus1.xml (test_gdbus_codegen.py): the generator
# (libglib2.0-dev-bin), GIO's headers (libglib2.0-dev), pkg-config, a C compiler.
DBUS_TEST_PACKAGES += libglib2.0-dev-bin libglib2.0-dev pkg-config gcc

.PHONY: run-ordod test-dbus test-durable dbus-introspection

run-ordod: build
	@Tests/DBus/run-demo.sh "$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)"

test-dbus: build
	@scripts/deps.sh $(DBUS_TEST_PACKAGES)
	@python3 -c 'import jeepney' 2>/dev/null || python3 -m pip install --quiet jeepney
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 1200 python3 Tests/DBus/test_dbus.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 600 python3 Tests/DBus/test_writers.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_hostile.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_liveness.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_policy.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_resync.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 600 python3 Tests/DBus/test_durable.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_devtools.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_schema.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_merge.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_conditions.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_gdbus_codegen.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_direct.py
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 300 python3 Tests/DBus/test_cache.py
	for t in test_dbus test_writers test_liveness test_policy test_resync test_conditions test_cache; do \
	  ORDO_TEST_TRANSPORT=direct ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 600 python3 Tests/DBus/$$t.py || exit 1; \
	done

# The durable ordod alone (also part of test-dbus): kill -9 rounds, a full
# tmpfs, read-only mounts (root), refused state files, the busy poll after
# a sync. SPEC §11.
test-durable: build
	@scripts/deps.sh $(DBUS_TEST_PACKAGES)
	@python3 -c 'import jeepney' 2>/dev/null || python3 -m pip install --quiet jeepney
	ORDO_BIN="$$($(SWIFT) build $(SWIFTFLAGS) --show-bin-path)" timeout 600 python3 Tests/DBus/test_durable.py

# Regenerates the embedded copy of docs/dev.ordo.Bus1.xml after editing it.
dbus-introspection:
	@{ printf '// Generated from docs/dev.ordo.Bus1.xml (a test checks they are identical):\n//   make dbus-introspection\n\n/// The introspection XML of `/dev/ordo/Bus`, as shipped in `docs/dev.ordo.Bus1.xml`.\npublic let introspectionXML: String = #"""\n'; \
	   cat docs/dev.ordo.Bus1.xml; printf '"""# + "\\n"\n'; } > Sources/OrdoDBus/Introspection.swift
