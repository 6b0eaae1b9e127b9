"""Direct connections (ordod --listen, SPEC §16) beyond what the parameterized
suites cover (ORDO_TEST_TRANSPORT=direct): ordod with no bus daemon at all,
the socket's mode, its removal and its refusal while another ordod holds it,
ORDO_ADDRESS and its precedence, the Python client's direct=, systemd socket
activation (an inherited listening fd), and hostile peers on the socket: a
malformed message, a peer that never reads, 500 connections opened and
dropped, half a message and a stall. After each, the service keeps serving
others and frees what the hostile peer held.

Run: python3 Tests/DBus/test_direct.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import ORDOCTL, ORDOD, PATH, IFACE, Env, read_line, spawn, stop  # noqa: E402
from direct import DirectConnection  # noqa: E402

from jeepney import DBusAddress, new_method_call  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))
import ordo  # noqa: E402


def DirectPeer(address):
    """A harness peer connected straight to ordod's socket at `address`."""
    return harness.Peer(None, direct=address)


def raw_connect(path, authenticate=True):
    """A bare socket to ordod's listening socket, past the EXTERNAL
    authentication when `authenticate`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    if authenticate:
        s.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() + b"\r\n")
        reply = s.recv(4096)
        assert reply.startswith(b"OK "), reply
        s.sendall(b"BEGIN\r\n")
    return s


def value_of(client, keypath):
    """The keypath's value through an ordo.Client, None while it has none."""
    try:
        return client.get(keypath).value
    except ordo.NotFound:
        return None


def closed_by_peer(s, timeout=10):
    """Whether the other end closes the socket within `timeout` seconds."""
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


class DirectTest(unittest.TestCase):
    """An ordod on no bus daemon, listening on env.dir/ordod.socket."""

    def setUp(self):
        self.env = Env(start_ordod=False)
        self.addCleanup(self.env.close)
        self.path = os.path.join(self.env.dir, "ordod.socket")
        self.address = "unix:path=" + self.path
        self.env.ordod = self.start(*self.ordod_args())

    def ordod_args(self):
        return ()

    def start(self, *args, expect_ready=True):
        log = open(self.env.log_path, "ab")
        p = spawn([ORDOD, "--no-bus", "--listen", self.address, "--log-level", "debug", *args],
                  stdout=subprocess.PIPE, stderr=log)
        log.close()
        if expect_ready:
            self.assertEqual(read_line(p.stdout, 20, "ordod's ready line"), "ORDO_ADDRESS=" + self.address)
        return p

    def peer(self):
        p = DirectPeer(self.address)
        self.addCleanup(p.close)
        return p

    def assert_serving(self):
        """Another peer is answered, and sees no contract but its own."""
        p = self.peer()
        txn = p.commit({"alive": ("x", 1)})
        self.assertGreater(txn, 0)
        self.assertEqual(p.get("alive")[1], 1)
        p.close()

    def wait_for(self, what, fn, timeout=10):
        deadline = time.monotonic() + timeout
        while not fn():
            self.assertLess(time.monotonic(), deadline, what)
            time.sleep(0.02)


class BadAddress(unittest.TestCase):
    def test_a_bad_listen_address_is_refused_before_anything_starts(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, XDG_RUNTIME_DIR=d)
            env.pop("DBUS_SESSION_BUS_ADDRESS", None)
            for address, says in (("tcp:host=localhost,port=1", "a direct address is unix:path="),
                                  ("unix:path=/tmp/a;unix:path=/tmp/b", "give one address per --listen"),
                                  ("nonsense", "cannot listen at \"nonsense\"")):
                r = subprocess.run([ORDOD, "--private", "--listen", address], capture_output=True, text=True,
                                   env=env, timeout=20)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(says, r.stderr)
            self.assertEqual(os.listdir(d), [])  # no private bus daemon was started


class NoBus(DirectTest):
    def test_methods_notify_and_leaving_without_a_bus_daemon(self):
        a, b = self.peer(), self.peer()
        path = a.register("view", ["doc.*"])
        b.commit({"doc.title": ("s", "Songs")})
        contract, txn, changed, values = a.next_notify()
        self.assertEqual((contract, changed, values["doc.title"]), (path, ["doc.title"], ("s", "Songs")))
        owner = a.contracts()[0]["owner"]
        self.assertTrue(owner.startswith(":direct."), owner)
        a.close()
        self.wait_for("the closed peer's contract is removed", lambda: b.contracts() == [])
        self.assertIn(f"{owner} left", self.env.log())

    def test_socket_mode_0600_without_policy_and_removed_on_exit(self):
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)
        self.assertEqual(stop(self.env.ordod), 0)
        self.assertFalse(os.path.exists(self.path))

    def test_refused_while_another_ordod_listens_and_a_stale_socket_replaced(self):
        second = self.start(expect_ready=False)
        self.assertEqual(second.wait(timeout=20), 1)
        self.assertIn(f"cannot listen at {self.path}: another process (another ordod?) accepts connections there",
                      self.env.log())
        self.assert_serving()  # the first one keeps its socket
        self.env.ordod.kill()
        self.env.ordod.wait(timeout=10)
        self.assertTrue(os.path.exists(self.path))  # left behind by kill -9
        self.env.ordod = self.start()
        self.assert_serving()

    def test_ordoctl_direct_and_ordo_address(self):
        r = subprocess.run([ORDOCTL, "--direct", self.address, "set", "a=1"], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        env = dict(os.environ, ORDO_ADDRESS=self.address)
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        r = subprocess.run([ORDOCTL, "get", "a"], capture_output=True, text=True, timeout=20, env=env)
        self.assertEqual((r.returncode, r.stdout), (0, "int64:1\n"), r.stderr)
        # An explicit --address wins over ORDO_ADDRESS.
        r = subprocess.run([ORDOCTL, "--address", "unix:path=" + self.path + ".none", "get", "a"],
                           capture_output=True, text=True, timeout=20, env=env)
        self.assertEqual(r.returncode, 1)
        self.assertIn(".none", r.stderr)

    def test_python_client_direct_and_ordo_address(self):
        with ordo.Client(direct=self.address) as c:
            w = c.watch(["doc.*"])
            c.commit({"doc.n": 1})
            note = next(iter(w))
            self.assertEqual(note.values, {"doc.n": 1})
            self.assertEqual(c.forged, 0)
        old = os.environ.get("ORDO_ADDRESS")
        os.environ["ORDO_ADDRESS"] = self.address
        try:
            with ordo.Client() as c:
                self.assertEqual(c.get("doc.n").value, 1)
        finally:
            if old is None:
                del os.environ["ORDO_ADDRESS"]
            else:
                os.environ["ORDO_ADDRESS"] = old

    def test_python_calls_reach_an_ordod_restarted_behind_the_socket(self):
        """A client with only calls: after kill -9 of ordod and a new one on
        the same socket, its next call opens a new connection first."""
        with ordo.Client(direct=self.address) as c:
            self.assertEqual(c.commit({"doc.n": 1}), 1)
            self.env.ordod.kill()
            self.env.ordod.wait(timeout=10)
            with self.assertRaises(ordo.ConnectionLost):
                c.get("doc.n")  # nobody listens: one try, then the error
            self.env.ordod = self.start()
            self.assertEqual(c.commit({"doc.n": 2}), 1)  # in memory: a new history
            self.assertEqual(c.get("doc.n").value, 2)

    def test_python_writer_comes_back_with_an_ordod_restarted_behind_the_socket(self):
        """A client with only a writer, served by its own thread: after kill -9
        of ordod and a new one on the same socket, the thread opens a new
        connection, and the writer registers again (an initial call) and
        computes."""
        calls = []
        with ordo.Client(direct=self.address) as c:
            c.add_writer(lambda n: calls.append(n.initial) or ({"calc.y": n.values["in.x"] + 1} if n.changed else None),
                         "inc", ["in.x"], ["calc.y"], -1)
            c.start()
            other = ordo.Client(direct=self.address)
            self.assertEqual(other.commit({"in.x": 1}), 1)
            self.wait_for("calc.y computed", lambda: value_of(other, "calc.y") == 2)
            other.close()
            self.env.ordod.kill()
            self.env.ordod.wait(timeout=10)
            self.env.ordod = self.start()
            self.wait_for("the writer registered again", lambda: calls[-1:] == [True], timeout=20)
            with ordo.Client(direct=self.address) as other:
                other.commit({"in.x": 5})
                self.wait_for("calc.y computed again", lambda: value_of(other, "calc.y") == 6)
        self.assertEqual(calls, [False, True, False])


class WithPolicy(DirectTest):
    def ordod_args(self):
        path = os.path.join(self.env.dir, "policy")
        with open(path, "w") as f:
            f.write("allow everyone read,write,writer **\n")
        return ("--policy", path)

    def test_socket_mode_0666_with_policy(self):
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o666)
        self.assert_serving()


class SocketActivation(unittest.TestCase):
    def test_inherited_listening_fd_as_systemd_passes_it(self):
        env = Env(start_ordod=False)
        self.addCleanup(env.close)
        path = os.path.join(env.dir, "activated.socket")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen(16)
        log = open(env.log_path, "ab")
        # systemd passes the socket as fd 3 with LISTEN_FDS=1 and LISTEN_PID=the service's pid
        # (bash: dash's redirections take one-digit descriptors only).
        p = spawn(["bash", "-c", f'exec 3<&{s.fileno()}; LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"', ORDOD,
                   "--no-bus", "--listen", "systemd:", "--log-level", "debug"],
                  stdout=subprocess.PIPE, stderr=log, pass_fds=(s.fileno(),))
        log.close()
        s.close()
        env.ordod = p
        self.assertEqual(read_line(p.stdout, 20, "ordod's ready line"), "ORDO_ADDRESS=unix:path=" + path)
        peer = DirectPeer("unix:path=" + path)
        self.addCleanup(peer.close)
        self.assertGreater(peer.commit({"k": ("x", 1)}), 0)
        peer.close()
        self.assertEqual(stop(p), 0)
        self.assertTrue(os.path.exists(path))  # systemd's socket: not ordod's to remove


class PrivateBusRestart(unittest.TestCase):
    """ordod's private dbus-daemon under $XDG_RUNTIME_DIR: one address across
    restarts, the daemon a killed ordod left taken over (its clients stay
    connected), a second ordod for the same name refused."""

    def test_stable_address_takeover_after_kill_and_clean_exit(self):
        env = Env(start_ordod=False)
        self.addCleanup(env.close)
        run = os.path.join(env.dir, "run")
        os.mkdir(run, 0o700)
        e = dict(os.environ, XDG_RUNTIME_DIR=run)
        e.pop("DBUS_SESSION_BUS_ADDRESS", None)
        bus_dir = os.path.join(run, "ordo", harness.NAME)
        address = "unix:path=" + os.path.join(bus_dir, "bus")

        def start():
            log = open(env.log_path, "ab")
            p = spawn([ORDOD, "--log-level", "debug"], stdout=subprocess.PIPE, stderr=log, env=e)
            log.close()
            return p

        first = start()
        self.assertEqual(read_line(first.stdout, 20, "ordod's address"), "DBUS_SESSION_BUS_ADDRESS=" + address)
        with open(os.path.join(bus_dir, "dbus-daemon.pid")) as f:
            daemon_pid = int(f.read())
        self.addCleanup(lambda: os.kill(daemon_pid, 9) if os.path.exists(f"/proc/{daemon_pid}") else None)
        second = start()
        self.assertEqual(second.wait(timeout=20), 1)
        self.assertIn("another ordod serves the private bus at " + bus_dir, env.log())
        client = harness.Peer(address)
        self.addCleanup(client.close)
        self.assertGreater(client.commit({"a": ("x", 1)}), 0)
        first.kill()
        first.wait(timeout=10)
        self.assertTrue(os.path.exists(f"/proc/{daemon_pid}"))  # left behind by kill -9
        again = start()
        env.ordod = again
        self.assertEqual(read_line(again.stdout, 20, "ordod's address"), "DBUS_SESSION_BUS_ADDRESS=" + address)
        self.assertIn(f"took over the private dbus-daemon a previous ordod left (pid {daemon_pid})", env.log())
        # The client connected before the kill reaches the new ordod on the same daemon.
        self.assertGreater(client.commit({"a": ("x", 2)}), 0)
        client.close()
        self.assertEqual(stop(again), 0)
        env.ordod = None
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{daemon_pid}") and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertFalse(os.path.exists(f"/proc/{daemon_pid}"), "the private dbus-daemon outlived a clean exit")
        self.assertFalse(os.path.exists(bus_dir))


class HostilePeers(DirectTest):
    def ordod_args(self):
        return ("--max-outgoing-bytes", "1000000")

    def test_malformed_message_closes_that_connection_only(self):
        held = self.peer()
        held.register("held", ["k"])
        s = raw_connect(self.path)
        s.sendall(b"l\x01\x00\x01" + b"\xff" * 12 + b"\x00garbage" * 32)
        self.assertTrue(closed_by_peer(s), "ordod kept a connection that sent a malformed message")
        s.close()
        self.assertEqual([c["name"] for c in held.contracts()], ["held"])
        self.assert_serving()

    def test_half_a_message_then_a_stall(self):
        stalled = self.peer()
        stalled.register("stalled", ["k"])
        msg = new_method_call(DBusAddress(PATH, bus_name="x.y", interface=IFACE), "Get", "s", ("k",))
        data = msg.serialise(serial=99)
        stalled.conn.sock.sendall(data[: len(data) // 2])
        self.assert_serving()
        other = self.peer()
        self.assertEqual(len(other.contracts()), 1)
        stalled.close()
        self.wait_for("the stalled peer's contract is removed", lambda: other.contracts() == [])

    def test_peer_that_never_reads_is_dropped_and_freed(self):
        reader = self.peer()
        reader.register("never-reads", ["big"])
        writer = self.peer()
        big = "x" * 20000
        # Notify signals to it beyond --max-outgoing-bytes are dropped...
        for i in range(200):
            writer.commit({"big": ("s", big + str(i))})
        # ...and replies it does not read disconnect it.
        try:
            for i in range(200):
                reader.conn.send(reader.message("Get", "s", ("big",)), serial=1000 + i)
        except (BrokenPipeError, ConnectionResetError):
            pass  # disconnected before all were sent
        self.wait_for("the peer that never reads is disconnected", lambda: writer.contracts() == [], timeout=20)
        self.assertIn("does not read", self.env.log())
        self.assert_serving()

    def test_a_peer_that_does_not_authenticate_is_disconnected(self):
        stalled = raw_connect(self.path, authenticate=False)
        stalled.sendall(b"\0AUTH EXTERNAL ")  # and nothing more
        self.assert_serving()
        started = time.monotonic()
        self.assertTrue(closed_by_peer(stalled, timeout=15), "ordod kept a connection that never authenticated")
        self.assertGreater(time.monotonic() - started, 3)  # after its auth timeout (5 s), not at once
        stalled.close()
        self.wait_for("ordod logs why", lambda: "did not authenticate within 5000 ms" in self.env.log())

    def test_five_hundred_connections_opened_and_dropped(self):
        keep = self.peer()
        keep.register("keep", ["k"])
        pid = self.env.ordod.pid
        fds_before = len(os.listdir(f"/proc/{pid}/fd"))
        for i in range(500):
            kind = i % 4
            if kind == 0:  # dropped before authenticating
                raw_connect(self.path, authenticate=False).close()
            elif kind == 1:  # dropped mid-authentication
                s = raw_connect(self.path, authenticate=False)
                s.sendall(b"\0AUTH EXTERNAL ")
                s.close()
            elif kind == 2:  # dropped right after authenticating
                raw_connect(self.path).close()
            else:  # dropped holding a contract
                p = DirectPeer(self.address)
                p.register(f"dropped-{i}", ["k"])
                p.close()
        self.wait_for("every dropped peer's contract is removed",
                      lambda: [c["name"] for c in keep.contracts()] == ["keep"], timeout=30)
        self.wait_for("ordod closes the dropped connections",
                      lambda: len(os.listdir(f"/proc/{pid}/fd")) <= fds_before, timeout=30)
        self.assert_serving()


if __name__ == "__main__":
    harness.main("dbus direct")
