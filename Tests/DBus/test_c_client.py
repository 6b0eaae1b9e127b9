"""The C client of libordo (ordo_client_*, include/ordo.h "C client") with
real processes: Tests/C/test_client.c under valgrind against an ordod on a
private dbus-daemon, which the test stops, then the daemon, while the
program runs; and examples/c-client/follow.c built and run against ordod
while a jeepney peer commits.

Run: python3 Tests/DBus/test_c_client.py [-k NAME]
     (ORDO_BIN = the build's bin dir; ORDO_LIB_DIR = the directory of the
     libordo.so to link, default ORDO_BIN)
"""
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FIXED_SOCKET_CONFIG, ORDOD, ROOT, Env, read_line, spawn, stop  # noqa: E402

LIB_DIR = os.environ.get("ORDO_LIB_DIR", os.path.dirname(ORDOD))
VALGRIND = ["valgrind", "-q", "--error-exitcode=1", "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect,possible",
            "--suppressions=" + os.path.join(ROOT, "Tests", "C", "valgrind.supp")]


def build(test, source, exe, *extra):
    """Compiles a C program against include/ordo.h and LIB_DIR's libordo.so."""
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-o", exe, source,
                    "-I", os.path.join(ROOT, "include"), *extra,
                    "-L", LIB_DIR, "-lordo", "-Wl,-rpath," + LIB_DIR, "-lpthread"], check=True, timeout=120)


class CClientTest(unittest.TestCase):
    def setUp(self):
        self.env = Env()
        self.addCleanup(self.env.close)

    def start_test_client(self, *args):
        exe = os.path.join(self.env.dir, "test_client")
        build(self, os.path.join(ROOT, "Tests", "C", "test_client.c"), exe, "-I", os.path.join(ROOT, "Tests", "C"))
        cmd = [exe, self.env.address, *args]
        if shutil.which("valgrind"):
            cmd = VALGRIND + cmd
        p = spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(stop, p, signal.SIGKILL)
        return p

    def test_client_under_valgrind(self):
        p = self.start_test_client()

        def step(expect, then):
            line = read_line(p.stdout, 120, expect)
            self.assertEqual(line, expect, p.stderr.read().decode() if p.poll() is not None else "")
            then()
            p.stdin.write(b"go\n")
            p.stdin.flush()

        step("stop-ordod", lambda: self.assertEqual(stop(self.env.ordod), 0))
        step("stop-daemon", lambda: stop(self.env.daemon))
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err.decode() + out.decode())
        self.assertIn("checks passed", out.decode())

    # A writer answers the initial call made during its Register.
    def test_notify_initial_writer_answers_its_initial_call(self):
        p = self.start_test_client("initial")
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err.decode() + out.decode())
        self.assertIn("checks passed", out.decode())

    def test_follow_example(self):
        exe = os.path.join(self.env.dir, "follow")
        build(self, os.path.join(ROOT, "examples", "c-client", "follow.c"), exe)
        peer = self.env.peer()
        peer.commit({"playlist.title": ("s", "Road trip")})
        p = spawn([exe, self.env.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(stop, p, signal.SIGKILL)
        first = read_line(p.stdout, 20, "follow's first line")
        self.assertEqual(first, "txn 1: Road trip, 0 s")
        # Both in one transaction: one line; one of them: one line; others: none.
        t2 = peer.commit({"playlist.title": ("s", "Night drive"), "playlist.total": ("x", 300)})
        peer.commit({"playlist.other": ("x", 1)})
        t4 = peer.commit({"playlist.total": ("x", 420)})
        self.assertEqual(read_line(p.stdout, 20, "follow's line"), f"txn {t2}: Night drive, 300 s")
        self.assertEqual(read_line(p.stdout, 20, "follow's line"), f"txn {t4}: Night drive, 420 s")
        self.assertEqual(stop(p, signal.SIGTERM), 0)
        self.assertEqual(p.stdout.read(), b"")


class CClientDirectTest(unittest.TestCase):
    """follow.c connected straight to ordod's socket (ordod --listen,
    ordo_client_connect_direct), and through ORDO_ADDRESS with no address."""

    def test_follow_over_a_direct_connection(self):
        env = Env(start_ordod=False)
        self.addCleanup(env.close)
        socket_path = os.path.join(env.dir, "direct")
        env.start_ordod(["--listen", "unix:path=" + socket_path])
        exe = os.path.join(env.dir, "follow")
        build(self, os.path.join(ROOT, "examples", "c-client", "follow.c"), exe)
        peer = env.peer()
        for argv, extra in [([exe, "--direct", "unix:path=" + socket_path], {}),
                            ([exe], {"ORDO_ADDRESS": "unix:path=" + socket_path})]:
            e = {k: v for k, v in os.environ.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
            e.update(extra)
            p = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
            self.addCleanup(stop, p, signal.SIGKILL)
            self.assertRegex(read_line(p.stdout, 20, "follow's first line"), r"^txn \d+: ")
            t = peer.commit({"playlist.total": ("x", len(argv) * 100)})
            self.assertEqual(read_line(p.stdout, 20, "follow's line"), f"txn {t}: , {len(argv) * 100} s")
            self.assertEqual(stop(p, signal.SIGTERM), 0)


class CClientRestartTest(unittest.TestCase):
    """The C client across an ordod killed with SIGKILL and restarted: its
    contract is registered again by itself and caught up, each change
    printed once (same state: Changes; no state: a new epoch, Snapshot).
    Through the bus daemon the client sees the name's owner change; over a
    direct connection (ordod --listen) it sees the connection close and
    opens it again at the same address while ordod is away."""

    def follow_across_a_restart(self, state, direct=False):
        env = Env(start_ordod=False)
        self.addCleanup(env.close)
        socket = "unix:path=" + os.path.join(env.dir, "direct")
        args = (["--state", os.path.join(env.dir, "state.db")] if state else []) + \
            (["--listen", socket] if direct else [])
        env.start_ordod(args)
        exe = os.path.join(env.dir, "follow")
        build(self, os.path.join(ROOT, "examples", "c-client", "follow.c"), exe)
        peer = env.peer()
        t1 = peer.commit({"playlist.title": ("s", "Road trip"), "playlist.total": ("x", 300)})
        p = spawn([exe, "--direct", socket] if direct else [exe, env.address],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(stop, p, signal.SIGKILL)
        self.assertEqual(read_line(p.stdout, 20, "follow's first line"), f"txn {t1}: Road trip, 300 s")
        peer.close()
        stop(env.ordod, signal.SIGKILL)
        env.ordod = None
        if direct:
            time.sleep(0.5)  # the client tries the socket meanwhile, every 100 ms
        env.ordod = env.start_ordod(args)
        peer = env.peer()
        t2 = peer.commit({"playlist.total": ("x", 518)})
        # Caught up (the commit came before the client registered again) or
        # notified: once either way. With a new epoch the client first reads
        # everything again (a snapshot, possibly of the empty bus).
        title = "Road trip" if state else ""
        line = read_line(p.stdout, 30, "follow's line after the restart")
        if not state and line == "txn 0: , 0 s (caught up)":
            line = read_line(p.stdout, 30, "follow's line after the snapshot")
        self.assertIn(line, [f"txn {t2}: {title}, 518 s", f"txn {t2}: {title}, 518 s (caught up)"])
        t3 = peer.commit({"playlist.title": ("s", "Night drive")})
        self.assertEqual(read_line(p.stdout, 20, "follow's next line"), f"txn {t3}: Night drive, 518 s")
        self.assertEqual(stop(p, signal.SIGTERM), 0)
        self.assertEqual(p.stdout.read(), b"")

    def test_same_state(self):
        self.follow_across_a_restart(state=True)

    def test_new_epoch(self):
        self.follow_across_a_restart(state=False)

    def test_bus_daemon_restarted(self):
        """The bus daemon goes (and ordod with it) and comes back at the
        same socket: follow opens its connection again (without the old
        guid), registers again and catches up."""
        env = Env(config=FIXED_SOCKET_CONFIG, start_ordod=False)
        self.addCleanup(env.close)
        args = ["--state", os.path.join(env.dir, "state.db")]
        env.start_ordod(args)
        exe = os.path.join(env.dir, "follow")
        build(self, os.path.join(ROOT, "examples", "c-client", "follow.c"), exe)
        t1 = env.peer().commit({"playlist.title": ("s", "Road trip"), "playlist.total": ("x", 300)})
        p = spawn([exe, env.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(stop, p, signal.SIGKILL)
        self.assertEqual(read_line(p.stdout, 20, "follow's first line"), f"txn {t1}: Road trip, 300 s")
        env.restart_daemon()
        time.sleep(0.3)  # the client tries the bus meanwhile, every 100 ms
        env.start_ordod(args)
        t2 = env.peer().commit({"playlist.total": ("x", 518)})
        line = read_line(p.stdout, 30, "follow's line after the bus came back")
        self.assertIn(line, [f"txn {t2}: Road trip, 518 s", f"txn {t2}: Road trip, 518 s (caught up)"])
        self.assertEqual(stop(p, signal.SIGTERM), 0)
        self.assertEqual(p.stdout.read(), b"")

    def test_same_state_direct(self):
        self.follow_across_a_restart(state=True, direct=True)

    def test_new_epoch_direct(self):
        self.follow_across_a_restart(state=False, direct=True)


class MultiProcessApp(unittest.TestCase):
    """The README's multi-process playlist: ordod with the playlist schema,
    examples/multi-process/total.py computing playlist.total in its own
    process, examples/c-client/follow.c showing title and total, ordoctl
    as the editor: one line per transaction, the total already computed."""

    def test_three_processes(self):
        env = Env(start_ordod=False)
        self.addCleanup(env.close)
        env.start_ordod(["--schema", os.path.join(ROOT, "examples", "schema", "playlist.json")])
        writer = spawn([sys.executable, os.path.join(ROOT, "examples", "multi-process", "total.py"), env.address],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(stop, writer, signal.SIGKILL)
        self.assertEqual(read_line(writer.stdout, 20, "total.py's ready line"), "computing playlist.total")
        exe = os.path.join(env.dir, "follow")
        build(self, os.path.join(ROOT, "examples", "c-client", "follow.c"), exe)
        view = spawn([exe, env.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(stop, view, signal.SIGKILL)
        self.assertRegex(read_line(view.stdout, 20, "follow's first line"), r"^txn \d+: , 0 s$")
        t = env.ordoctl("set", "playlist.title=Road trip", "playlist.tracks.t1.duration=200",
                        "playlist.tracks.t2.duration=340").stdout.strip()
        self.assertEqual(read_line(view.stdout, 20, "follow's line"), f"txn {t}: Road trip, 540 s")
        t = env.ordoctl("set", "playlist.tracks.t2.duration=318").stdout.strip()
        self.assertEqual(read_line(view.stdout, 20, "follow's line"), f"txn {t}: Road trip, 518 s")
        self.assertEqual(env.ordoctl("get", "playlist.total").stdout.strip(), "int64:518")


if __name__ == "__main__":
    from harness import main
    main("test_c_client")
