"""Fixtures: a private dbus-daemon and a real ordod per test, the real
libordo.so, and a raw jeepney peer (an independent D-Bus client used to
forge signals and to check what the service sees).

ORDO_BIN     the directory of ordod (make: `swift build --show-bin-path`)
ORDO_LIBRARY libordo.so (make: the one installed into a temporary prefix)

Every process started here is killed when its test ends; every wait has a
timeout.
"""
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
from jeepney.io.blocking import open_dbus_connection

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.environ.get("ORDO_BIN", os.path.join(ROOT, ".build", "debug"))
ORDOD = os.path.join(BIN, "ordod")
LIBRARY = os.environ.get("ORDO_LIBRARY") or os.path.join(ROOT, ".build-libordo", "release", "libordo.so")

DAEMON_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
  <limit name="max_outgoing_bytes">{max_outgoing}</limit>
</busconfig>
"""


def read_line(stream, timeout, what):
    deadline = time.monotonic() + timeout
    buf = b""
    fd = stream.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out waiting for {what}")
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        b = os.read(fd, 1)
        if not b:
            raise AssertionError(f"{what}: the process closed its output (got {buf!r})")
        buf += b
    return buf.decode().rstrip("\n")


def stop(p, sig=signal.SIGTERM, timeout=10):
    if p is not None and p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    return None if p is None else p.returncode


class Env:
    """A private dbus-daemon at a fixed socket path (so that it can be
    restarted at the same address) and an ordod on it."""

    def __init__(self, max_outgoing=64 << 20, ordod_args=()):
        self.dir = tempfile.mkdtemp(prefix="ordo-python-test-")
        self.socket = os.path.join(self.dir, "bus")
        self.address = "unix:path=" + self.socket
        self.max_outgoing = max_outgoing
        self.ordod_args = list(ordod_args)
        self.daemon = None
        self.ordod = None
        self.peers = []
        self.start_daemon()
        self.start_ordod()

    def start_daemon(self):
        conf = os.path.join(self.dir, "bus.conf")
        with open(conf, "w") as f:
            f.write(DAEMON_CONFIG.format(socket=self.socket, max_outgoing=self.max_outgoing))
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.daemon = subprocess.Popen(
            ["dbus-daemon", "--config-file=" + conf, "--nofork", "--nopidfile", "--print-address=1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = read_line(self.daemon.stdout, 10, "the dbus-daemon address")
        assert line.startswith(self.address), line

    def start_ordod(self, args=None):
        log = open(os.path.join(self.dir, "ordod.log"), "ab")
        cmd = [ORDOD, "--address", self.address, "--log-level", "debug", *(self.ordod_args if args is None else args)]
        self.ordod = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
        log.close()
        line = read_line(self.ordod.stdout, 20, "ordod's ready line")
        assert line == "DBUS_SESSION_BUS_ADDRESS=" + self.address, line
        return self.ordod

    def stop_ordod(self, sig=signal.SIGTERM):
        rc = stop(self.ordod, sig)
        self.ordod = None
        return rc

    def restart_daemon(self):
        """Kills ordod and the bus daemon, starts both again at the same address."""
        self.stop_ordod(signal.SIGKILL)
        stop(self.daemon, signal.SIGKILL)
        self.start_daemon()
        self.start_ordod()

    def log(self):
        with open(os.path.join(self.dir, "ordod.log"), errors="replace") as f:
            return f.read()

    def peer(self):
        p = RawPeer(self.address)
        self.peers.append(p)
        return p

    def close(self):
        for p in self.peers:
            p.close()
        try:
            rc = self.stop_ordod()
        finally:
            stop(self.daemon)
            shutil.rmtree(self.dir, ignore_errors=True)
        return rc


class RawPeer:
    """A plain jeepney connection: calls dev.ordo.Bus1 and sends anything."""

    def __init__(self, address):
        self.conn = open_dbus_connection(address)
        self.unique_name = self.conn.unique_name
        self.closed = False

    def call(self, member, sig="", *args, iface="dev.ordo.Bus1", path="/dev/ordo/Bus", dest="dev.ordo.Bus"):
        msg = new_method_call(DBusAddress(path, bus_name=dest, interface=iface), member, sig or None, args)
        reply = self.conn.send_and_get_reply(msg, timeout=10)
        if reply.header.message_type == MessageType.error:
            raise AssertionError(f"{member}: {reply.header.fields.get(HeaderFields.error_name)}: {reply.body}")
        return reply.body

    def contracts(self):
        return [{k: v[1] for k, v in d.items()} for d in self.call("Contracts")[0]]

    def stats(self):
        return {k: v[1] for k, v in self.call("Stats")[0].items()}

    def close(self):
        if not self.closed:
            self.closed = True
            self.conn.close()


@pytest.fixture
def env():
    e = Env()
    yield e
    rc = e.close()
    assert rc in (0, None), f"ordod exited with {rc}:\n{e.log()[-3000:]}"


@pytest.fixture
def library():
    assert os.path.exists(LIBRARY), f"libordo.so not found at {LIBRARY} (make libordo, or set ORDO_LIBRARY)"
    return LIBRARY


def wait_for(predicate, timeout=10, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        r = predicate()
        if r:
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
