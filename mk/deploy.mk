# Deployment of the D-Bus service: ordod, ordoctl, their man pages, the
# system bus policy, systemd units and D-Bus activation files (SPEC §12;
# docs/dbus.md "System bus"). `make install`/`make uninstall` (mk/c.mk) run
# install-service/uninstall-service too.
#
#   make install-service PREFIX=/usr [DESTDIR=...]   ordod, ordoctl (release
#        build, Swift runtime linked in), man pages, data/ files
#   make uninstall-service PREFIX=/usr [DESTDIR=...]
#   make test-deploy   install into a temporary DESTDIR, check every file and
#        `man -l`, D-Bus activation on a private dbus-daemon, uninstall
#
# Paths (override as usual): BINDIR, SBINDIR, DATADIR, MANDIR, SYSCONFDIR
# (/etc for PREFIX=/usr), DBUS_SYSTEM_CONFDIR, DBUS_SERVICESDIR,
# DBUS_SYSTEM_SERVICESDIR, SYSTEMD_SYSTEMUNITDIR, SYSTEMD_USERUNITDIR.

BINDIR      ?= $(PREFIX)/bin
SBINDIR     ?= $(PREFIX)/sbin
DATADIR     ?= $(PREFIX)/share
MANDIR      ?= $(DATADIR)/man
SYSCONFDIR  ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
DBUS_SYSTEM_CONFDIR     ?= $(DATADIR)/dbus-1/system.d
DBUS_SERVICESDIR        ?= $(DATADIR)/dbus-1/services
DBUS_SYSTEM_SERVICESDIR ?= $(DATADIR)/dbus-1/system-services
SYSTEMD_SYSTEMUNITDIR   ?= $(PREFIX)/lib/systemd/system
SYSTEMD_USERUNITDIR     ?= $(PREFIX)/lib/systemd/user

# The executables share libordo's release scratch path and its
# -static-stdlib compile (same Swift flags, so the modules are built once):
# an installed ordod needs no Swift toolchain.
SERVICE_FLAGS = -c release --scratch-path $(LIBORDO_SCRATCH) -Xswiftc -static-stdlib
SERVICE_BIN   = $(LIBORDO_SCRATCH)/release
DEPLOY_SUBST  = sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g'

# Every installed file, for uninstall and the test.
SERVICE_FILES = $(SBINDIR)/ordod $(BINDIR)/ordoctl $(MANDIR)/man8/ordod.8 $(MANDIR)/man1/ordoctl.1 \
  $(DBUS_SYSTEM_CONFDIR)/dev.ordo.Bus.conf $(DBUS_SERVICESDIR)/dev.ordo.Bus.service \
  $(DBUS_SYSTEM_SERVICESDIR)/dev.ordo.Bus.service $(SYSTEMD_SYSTEMUNITDIR)/ordod.service \
  $(SYSTEMD_USERUNITDIR)/ordod.service $(SYSTEMD_SYSTEMUNITDIR)/ordod-direct.socket \
  $(SYSTEMD_SYSTEMUNITDIR)/ordod-direct.service $(SYSCONFDIR)/ordo/policy.example

.PHONY: service-build install-service uninstall-service test-deploy
TEST_TARGETS += test-deploy

service-build: deps
	$(SWIFT) build $(SWIFTFLAGS) $(SERVICE_FLAGS) --product ordod
	$(SWIFT) build $(SWIFTFLAGS) $(SERVICE_FLAGS) --product ordoctl

install-service: service-build
	$(INSTALL) -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(MANDIR)/man1 \
	  $(DESTDIR)$(DBUS_SYSTEM_CONFDIR) $(DESTDIR)$(DBUS_SERVICESDIR) $(DESTDIR)$(DBUS_SYSTEM_SERVICESDIR) \
	  $(DESTDIR)$(SYSTEMD_SYSTEMUNITDIR) $(DESTDIR)$(SYSTEMD_USERUNITDIR) $(DESTDIR)$(SYSCONFDIR)/ordo
	$(INSTALL) -m 0755 $(SERVICE_BIN)/ordod $(DESTDIR)$(SBINDIR)/ordod
	$(INSTALL) -m 0755 $(SERVICE_BIN)/ordoctl $(DESTDIR)$(BINDIR)/ordoctl
	$(INSTALL) -m 0644 data/ordod.8 $(DESTDIR)$(MANDIR)/man8/ordod.8
	$(INSTALL) -m 0644 data/ordoctl.1 $(DESTDIR)$(MANDIR)/man1/ordoctl.1
	$(INSTALL) -m 0644 data/dev.ordo.Bus.conf $(DESTDIR)$(DBUS_SYSTEM_CONFDIR)/dev.ordo.Bus.conf
	$(INSTALL) -m 0644 data/policy.example $(DESTDIR)$(SYSCONFDIR)/ordo/policy.example
	$(INSTALL) -m 0644 data/ordod-direct.socket $(DESTDIR)$(SYSTEMD_SYSTEMUNITDIR)/ordod-direct.socket
	$(DEPLOY_SUBST) data/dev.ordo.Bus.session.service.in >$(DESTDIR)$(DBUS_SERVICESDIR)/dev.ordo.Bus.service
	$(DEPLOY_SUBST) data/dev.ordo.Bus.system.service.in >$(DESTDIR)$(DBUS_SYSTEM_SERVICESDIR)/dev.ordo.Bus.service
	$(DEPLOY_SUBST) data/ordod.service.in >$(DESTDIR)$(SYSTEMD_SYSTEMUNITDIR)/ordod.service
	$(DEPLOY_SUBST) data/ordod.user.service.in >$(DESTDIR)$(SYSTEMD_USERUNITDIR)/ordod.service
	$(DEPLOY_SUBST) data/ordod-direct.service.in >$(DESTDIR)$(SYSTEMD_SYSTEMUNITDIR)/ordod-direct.service
	chmod 0644 $(DESTDIR)$(DBUS_SERVICESDIR)/dev.ordo.Bus.service $(DESTDIR)$(DBUS_SYSTEM_SERVICESDIR)/dev.ordo.Bus.service \
	  $(DESTDIR)$(SYSTEMD_SYSTEMUNITDIR)/ordod.service $(DESTDIR)$(SYSTEMD_USERUNITDIR)/ordod.service \
	  $(DESTDIR)$(SYSTEMD_SYSTEMUNITDIR)/ordod-direct.service

uninstall-service:
	rm -f $(addprefix $(DESTDIR),$(SERVICE_FILES))
	rmdir $(DESTDIR)$(SYSCONFDIR)/ordo 2>/dev/null || true

# Installs with DESTDIR (PREFIX=/usr, as a distribution would) and checks
# the files; installs again without DESTDIR into a temporary PREFIX to run
# the activation test (the .service file's Exec must be that prefix's ordod);
# uninstalls both and checks that nothing is left.
test-deploy: deps
	@scripts/deps.sh dbus-daemon man-db groff-base python3
	@python3 -c 'import jeepney' 2>/dev/null || python3 -m pip install --quiet jeepney
	@$(MAKE) --no-print-directory service-build >/dev/null
	timeout 600 python3 Tests/DBus/test_deploy.py
