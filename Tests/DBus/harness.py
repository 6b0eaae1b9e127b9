"""Test harness for the D-Bus surface: a private dbus-daemon and an ordod per
test, and a small jeepney client (an independent implementation of D-Bus).

ORDO_TEST_TRANSPORT=direct runs the same tests with every ordod also
listening on a socket of its own (ordod --listen) and the harness's peers,
and Env.ordoctl, connecting there peer to peer instead of through the bus
daemon (make test-dbus runs the method, policy, liveness and resync tests
both ways). Tests that need the bus daemon itself (a monitor, unique
names, stock bus tools) are marked @bus_only.

Every process started here is killed when the test ends, when the run ends
and when the runner is interrupted. Every wait has a timeout.
"""
import atexit
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from collections import deque

try:
    import jeepney  # noqa: F401
except ImportError:  # the test setup installs it from PyPI
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "jeepney"], check=True)

from jeepney import DBusAddress, MatchRule, MessageType, HeaderFields, new_method_call
from jeepney.io.blocking import open_dbus_connection

from direct import DirectConnection

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("ORDO_BIN", os.path.join(ROOT, ".build", "debug"))
ORDOD = os.path.join(BIN, "ordod")
ORDOCTL = os.path.join(BIN, "ordoctl")
DOC_XML = os.path.join(ROOT, "docs", "dev.ordo.Bus1.xml")

NAME = "dev.ordo.Bus"
PATH = "/dev/ordo/Bus"
IFACE = "dev.ordo.Bus1"
CONTRACT_PREFIX = "/dev/ordo/Bus/contract/"

_live = []  # processes to kill whatever happens

#: "bus" (through the dbus-daemon) or "direct" (ordod --listen)
TRANSPORT = os.environ.get("ORDO_TEST_TRANSPORT", "bus")
_direct = {}  # (bus address, service name) -> that ordod's direct address


def bus_only(reason):
    """Skips a test over the direct transport."""
    return unittest.skipIf(TRANSPORT == "direct", "needs the bus daemon: " + reason)


def _kill_all():
    for p in list(_live):
        if p.poll() is None:
            p.kill()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    _live.clear()


atexit.register(_kill_all)


def _on_signal(signum, frame):
    _kill_all()
    sys.exit(128 + signum)


for _s in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(_s, _on_signal)


def spawn(args, **kw):
    p = subprocess.Popen(args, **kw)
    _live.append(p)
    return p


def stop(p, sig=signal.SIGTERM, timeout=10):
    """Stops a process; returns its exit code (killing it after timeout)."""
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
            if p in _live:
                _live.remove(p)
            raise AssertionError(f"{p.args[0]} did not exit within {timeout}s of signal {sig}")
    if p in _live:
        _live.remove(p)
    return p.returncode


def read_line(stream, timeout, what):
    """Reads one line from a pipe within timeout seconds."""
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


DAEMON_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir={dir}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
  <limit name="max_outgoing_bytes">{max_outgoing}</limit>
  <limit name="max_message_size">134217728</limit>
  <!-- as the standard session.conf: pipelined calls beyond the built-in 128
       pending replies would get LimitsExceeded from the daemon -->
  <limit name="max_replies_per_connection">50000</limit>
</busconfig>
"""


#: A bus daemon at a fixed socket path, so that it can come back at the same address.
FIXED_SOCKET_CONFIG = DAEMON_CONFIG.replace("<listen>unix:dir={dir}</listen>", "<listen>unix:path={dir}/bus</listen>")


class Env:
    """A private dbus-daemon and an ordod serving on it."""

    def __init__(self, ordod_args=(), max_outgoing=64 << 20, start_ordod=True, config=DAEMON_CONFIG):
        """`config` is the dbus-daemon configuration ({dir}: this test's
        directory, which is made readable by every user when it is not the
        default, so that an unprivileged client can reach the socket)."""
        self.dir = tempfile.mkdtemp(prefix="ordo-dbus-test-", dir="/tmp")
        if config is not DAEMON_CONFIG or TRANSPORT == "direct":
            os.chmod(self.dir, 0o755)
        conf = os.path.join(self.dir, "bus.conf")
        with open(conf, "w") as f:
            f.write(config.format(dir=self.dir, max_outgoing=max_outgoing))
        self._start_daemon()
        self.log_path = os.path.join(self.dir, "ordod.log")
        self.ordod = None
        #: the first ordod's direct address (ORDO_TEST_TRANSPORT=direct)
        self.direct = None
        self.peers = []
        if start_ordod:
            self.start_ordod(ordod_args)

    def _start_daemon(self):
        conf = os.path.join(self.dir, "bus.conf")
        self.daemon = spawn(
            ["dbus-daemon", "--config-file=" + conf, "--nofork", "--nopidfile", "--print-address=1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.address = read_line(self.daemon.stdout, 10, "the dbus-daemon address")

    def restart_daemon(self):
        """Stops the bus daemon (ordod exits with status 1: its bus is gone)
        and starts another with the same configuration: with a fixed socket
        path (FIXED_SOCKET_CONFIG) at the same address, with a new guid.
        The peers are closed; start ordod again."""
        for p in self.peers:
            p.close()
        self.peers = []
        old = self.address
        assert stop(self.daemon) == 0
        if self.ordod is not None:
            assert self.ordod.wait(10) == 1
            self.ordod = None
        self._start_daemon()
        assert self.address.split(",guid=")[0] == old.split(",guid=")[0], (old, self.address)
        assert self.address != old

    def start_ordod(self, args=(), name=None):
        log = open(self.log_path, "ab")
        cmd = [ORDOD, "--address", self.address, "--log-level", "debug", *args]
        if name:
            cmd += ["--name", name]
        if TRANSPORT == "direct":
            cmd += ["--listen", f"unix:path={self.dir}/ordod-{name or NAME}.socket"]
        p = spawn(cmd, stdout=subprocess.PIPE, stderr=log)
        log.close()
        line = read_line(p.stdout, 20, "ordod's ready line")
        assert line == "DBUS_SESSION_BUS_ADDRESS=" + self.address, line
        if TRANSPORT == "direct":
            line = read_line(p.stdout, 20, "ordod's direct address")
            assert line.startswith("ORDO_ADDRESS="), line
            _direct[(self.address, name or NAME)] = line[len("ORDO_ADDRESS="):]
        if self.ordod is None:
            self.ordod = p
            self.direct = _direct.get((self.address, name or NAME))
        return p

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def sighup(self, expect, timeout=10):
        """Sends ordod SIGHUP and waits for `expect` in its log; returns the
        log written since."""
        before = len(self.log())
        self.ordod.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while expect not in self.log()[before:]:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {expect!r} in the log after SIGHUP")
            time.sleep(0.02)
        return self.log()[before:]

    def peer(self):
        p = Peer(self.address)
        self.peers.append(p)
        return p

    def env(self):
        e = dict(os.environ)
        e["DBUS_SESSION_BUS_ADDRESS"] = self.address
        return e

    def peer_address(self):
        """How a client reaches the first ordod: ["--direct", ADDRESS] or
        [the bus daemon's address]."""
        return ["--direct", self.direct] if self.direct else [self.address]

    def ordoctl(self, *args, timeout=20, check=True):
        where = ["--direct", self.direct] if self.direct else ["--address", self.address]
        r = subprocess.run([ORDOCTL, *where, *args], capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"ordoctl {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    def tool(self, *args, timeout=20, check=True):
        """Runs a stock D-Bus tool against the private bus."""
        r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=self.env())
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    def alive(self):
        return self.ordod is not None and self.ordod.poll() is None

    def close(self):
        """Stops everything; returns ordod's exit code (None if not started)."""
        for p in self.peers:
            p.close()
        rc = None
        try:
            if self.ordod is not None:
                rc = stop(self.ordod)
        finally:
            stop(self.daemon)
            shutil.rmtree(self.dir, ignore_errors=True)
        return rc


class RemoteError(Exception):
    def __init__(self, name, message):
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


class Peer:
    """A jeepney connection with helpers for dev.ordo.Bus1: to the bus
    daemon at `address`, or (ORDO_TEST_TRANSPORT=direct) straight to the
    ordod serving `name` there, or to `direct`."""

    def __init__(self, address, name=NAME, direct=None):
        """`direct`: connect straight to ordod's socket at that address."""
        if direct is None and TRANSPORT == "direct":
            direct = _direct.get((address, name))
        self.conn = DirectConnection(direct) if direct else open_dbus_connection(address)
        self.name = name
        self._unique_name = self.conn.unique_name
        self.notes = deque()
        self._filter = self.conn.filter(MatchRule(type="signal", interface=IFACE, member="Notify"),
                                        queue=self.notes)
        self.closed = False

    @property
    def unique_name(self):
        """The peer's name as the service knows it: its unique name on the
        bus; over a direct connection, the owner of a probe contract (the
        service names direct peers, and nothing tells them)."""
        if not self._unique_name:
            path = self.register(f"harness-name-probe-{id(self)}", ["harness.name-probe"])
            self._unique_name = next(c["owner"] for c in self.contracts() if c["path"] == path)
            self.unregister(path)
        return self._unique_name

    def close(self):
        if not self.closed:
            self.closed = True
            self.conn.close()

    def message(self, member, sig="", args=(), iface=IFACE, path=PATH):
        return new_method_call(DBusAddress(path, bus_name=self.name, interface=iface), member, sig, tuple(args))

    def call(self, member, sig="", *args, iface=IFACE, path=PATH, timeout=10):
        reply = self.conn.send_and_get_reply(self.message(member, sig, args, iface, path), timeout=timeout)
        if reply.header.message_type == MessageType.error:
            raise RemoteError(reply.header.fields.get(HeaderFields.error_name), reply.body[0] if reply.body else "")
        return reply.body

    def register(self, name, reads, writes=(), options=None):
        return self.call("Register", "sasasa{sv}", name, list(reads), list(writes), options or {})[0]

    def unregister(self, path):
        return self.call("Unregister", "o", path)

    def commit(self, set=None, touch=(), remove=()):
        return self.call("Commit", "a{sv}asas", set or {}, list(touch), list(remove))[0]

    def get(self, keypath):
        (sig, value), counter = self.call("Get", "s", keypath)
        return sig, value, counter

    def snapshot(self, patterns):
        return self.call("Snapshot", "as", list(patterns))

    def contracts(self):
        return [{k: v[1] for k, v in d.items()} for d in self.call("Contracts")[0]]

    def stats(self):
        return {k: v[1] for k, v in self.call("Stats")[0].items()}

    def next_notify(self, timeout=5):
        """The next Notify: (contract, txn, changed, {key: (sig, value)})."""
        msg = self.conn.recv_until_filtered(self.notes, timeout=timeout)
        return tuple(msg.body)

    def notifies(self, count, timeout=10):
        deadline = time.monotonic() + timeout
        out = []
        while len(out) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"got {len(out)} of {count} Notify signals in {timeout}s: {out[-3:]}")
            out.append(self.next_notify(timeout=left))
        return out

    def no_notify(self, wait=0.3):
        """Asserts that no Notify arrives within `wait` seconds."""
        try:
            n = self.next_notify(timeout=wait)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected Notify {n}")


class Monitor:
    """A monitor connection (BecomeMonitor): sees every Notify the service
    sends, in the order the daemon received them."""

    def __init__(self, address):
        self.conn = open_dbus_connection(address)
        msg = new_method_call(
            DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus",
                        interface="org.freedesktop.DBus.Monitoring"),
            "BecomeMonitor", "asu", ([f"type='signal',interface='{IFACE}',member='Notify'"], 0))
        reply = self.conn.send_and_get_reply(msg, timeout=5)
        assert reply.header.message_type != MessageType.error, reply.body

    def notifies(self, count, timeout=10):
        deadline = time.monotonic() + timeout
        out = []
        while len(out) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"monitor saw {len(out)} of {count} Notify signals")
            m = self.conn.receive(timeout=left)
            if m.header.fields.get(HeaderFields.member) == "Notify":
                out.append((m.header.fields.get(HeaderFields.destination), tuple(m.body)))
        return out

    def close(self):
        self.conn.close()


def start_c_host(test):
    """Builds Tests/DBus/dbus_host.c against the built libordo, starts it on
    a private bus of its own (without ordod) and waits for its "ready" line.
    Sets test.env and test.host; both are cleaned up with the test."""
    test.env = Env(start_ordod=False)
    test.addCleanup(test.env.close)
    root = os.path.dirname(os.path.dirname(DOC_XML))
    lib = os.path.dirname(ORDOD)
    exe = os.path.join(test.env.dir, "dbus_host")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-o", exe,
                    os.path.join(root, "Tests", "DBus", "dbus_host.c"), "-I", os.path.join(root, "include"),
                    "-L", lib, "-lordo", "-Wl,-rpath," + lib, "-lpthread"], check=True, timeout=120)
    env = dict(os.environ)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    test.host = spawn([exe, test.env.address, NAME], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    test.addCleanup(stop, test.host, signal.SIGKILL)
    line = read_line(test.host.stdout, 20, "dbus_host's ready line")
    test.assertEqual(line, "ready", test.host.stderr.read().decode() if test.host.poll() is not None else "")


class CHostCase(unittest.TestCase):
    """Base of the tests that drive Tests/DBus/dbus_host.c (no tests of its own)."""

    def setUp(self):
        start_c_host(self)

    def peers(self, n):
        """n peers on the host's bus, each closed with the test."""
        ps = [Peer(self.env.address) for _ in range(n)]
        for p in ps:
            self.addCleanup(p.close)
        return ps

    def assert_series(self, notes, path, key, values):
        """The Notify signals of a burst of host commits: one per commit to
        contract `path`, transaction ids 2, 3, … and `key` taking `values`."""
        self.assertEqual([n[3][key][1] for n in notes], list(values))
        self.assertEqual([n[1] for n in notes], list(range(2, len(notes) + 2)))
        self.assertTrue(all(n[0] == path for n in notes))

    def finish(self, p):
        """Asks the host to quit through peer p and checks it ends cleanly."""
        p.commit({"ctl.quit": ("b", True)})
        self.assertEqual(read_line(self.host.stdout, 20, "dbus_host's bye"), "bye")
        self.assertEqual(self.host.wait(timeout=20), 0, self.host.stderr.read().decode())


def main(label):
    """Runs the test module's tests and prints "LABEL: N passed, M failed"
    (the line make test-dbus shows); exits non-zero on a failure."""
    runner = unittest.TextTestRunner(verbosity=2)
    prog = unittest.main(testRunner=runner, exit=False)
    r = prog.result
    failed = len(r.failures) + len(r.errors)
    print(f"{label}: {r.testsRun - failed - len(r.skipped)} passed, {failed} failed")
    sys.exit(0 if r.wasSuccessful() else 1)
