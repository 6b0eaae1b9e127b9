"""Liveness of ordod (SPEC §12) and forged signals, tried as a hostile peer
would: silent writers cannot stall other peers' Commits for long, a writer
that answers again is called again, and a Notify sent by anyone but the
service is ignored by the clients the project ships.

Run: python3 Tests/DBus/test_liveness.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IFACE, ORDOCTL, PATH, Peer, read_line, spawn, stop  # noqa: E402
from test_dbus import DBusTest, E  # noqa: E402
from test_writers import WriterPeer  # noqa: E402

from jeepney import DBusAddress, HeaderFields, new_signal  # noqa: E402

# The limits as shipped (ordod's defaults; the test uses them, not lower ones).
MAX_PER_PEER = 256
MAX_TIMEOUT_MS = 5000


# A computed-data writer in a process of its own (the `ordo` package from
# the checkout): playlist.total is the sum of playlist.durations.*, read
# with Snapshot at each call, so that an initial call computes it whole.
TOTAL_WRITER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import ordo
c = ordo.Client(sys.argv[2], timeout=5)
c.add_writer(lambda note: {"playlist.total": sum(c.snapshot(["playlist.durations.*"]).values.values())},
             "playlist-total", ["playlist.durations.*"], ["playlist.total"], -1, timeout_ms=300,
             notify_initial=sys.argv[3] == "initial")
print("ready", flush=True)
while True:
    try:
        c.process(1.0)
    except ordo.ConnectionLost:
        break
"""
PYTHON_SRC = os.path.join(harness.ROOT, "bindings", "python", "src")


class ConvergingWriters(DBusTest):
    """A writer that missed transactions computes again what it writes: when
    its peer is back after a suspension, and when it registers again after
    the service restarted."""

    def total_writer(self, initial=True):
        p = spawn([sys.executable, "-c", TOTAL_WRITER, PYTHON_SRC, self.env.address,
                   "initial" if initial else "plain"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(stop, p, signal.SIGKILL)
        self.assertEqual(read_line(p.stdout, 20, "the writer's ready line"), "ready")
        return p

    def wait_total(self, c, expected, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = c.get("playlist.total")[1]
            except harness.RemoteError:
                got = None
            if got == expected:
                return
            if time.monotonic() > deadline:
                self.fail(f"playlist.total is {got}, not {expected}:\n{self.env_log_tail()}")
            time.sleep(0.05)

    def test_a_stopped_writer_computes_again_when_it_is_back(self):
        c = self.env.peer()
        self.assertEqual(c.commit({"playlist.durations.a": ("x", 200), "playlist.durations.b": ("x", 248)}), 1)
        w = self.total_writer()
        self.wait_total(c, 448)  # its initial call
        w.send_signal(signal.SIGSTOP)
        self.assertEqual(c.commit({"playlist.durations.c": ("x", 30)}), 3)  # times out: suspended
        self.assertTrue({x["name"]: x for x in c.contracts()}["playlist-total"]["suspended"])
        self.assertEqual(c.commit({"playlist.durations.b": ("x", 288)}), 4)  # skipped
        self.assertEqual(c.get("playlist.total")[1], 448)
        w.send_signal(signal.SIGCONT)
        # Its late Complete is stale, and shows that it is alive: it is
        # called again (initially) and the total comes back in line.
        self.wait_total(c, 518)
        self.assertFalse({x["name"]: x for x in c.contracts()}["playlist-total"]["suspended"])
        st = c.stats()
        self.assertEqual((st["suspensions"], st["resumes"], st["writers-skipped"]), (1, 1, 1))
        self.assertEqual(c.commit({"playlist.durations.a": ("x", 100)}), 6)
        self.assertEqual(c.get("playlist.total")[1], 418)

    def test_a_writer_registered_again_after_a_restart_computes_again(self):
        self.env.close()
        state_dir = tempfile.mkdtemp(prefix="ordo-dbus-test-state-", dir="/tmp")
        self.addCleanup(shutil.rmtree, state_dir, True)
        state = os.path.join(state_dir, "state.db")
        self.env = harness.Env(("--state", state))
        c = self.env.peer()
        self.assertEqual(c.commit({"playlist.durations.a": ("x", 200), "playlist.durations.b": ("x", 248)}), 1)
        # Registered without notify-initial: the next change computes the total.
        self.total_writer(initial=False)
        self.assertEqual(c.commit({"playlist.durations.c": ("x", 30)}), 2)
        self.assertEqual(c.get("playlist.total")[1], 478)
        # ordod is killed; the durations change while the writer is away (on
        # a service under another name, so that the writer does not see it).
        stop(self.env.ordod, signal.SIGKILL)
        aside = self.env.start_ordod(("--state", state), name="dev.ordo.Aside")
        other = Peer(self.env.address, name="dev.ordo.Aside")
        self.assertEqual(other.commit({"playlist.durations.b": ("x", 288)}), 3)
        other.close()
        self.assertEqual(stop(aside), 0)
        # Back under its name: the writer registers again and is called
        # initially, so the total counts what changed while it was away.
        self.env.ordod = self.env.start_ordod(("--state", state))
        c = self.env.peer()
        self.wait_total(c, 518)
        self.assertEqual(c.commit({"playlist.durations.a": ("x", 100)}), 5)
        self.assertEqual(c.get("playlist.total")[1], 418)


class SilentWriters(DBusTest):
    def test_max_silent_writers_at_max_timeout_delay_one_commit_once(self):
        hostile = self.env.peer()
        paths = [hostile.register(f"silent-{i}", ["k.x"], [f"w.w{i}"], {"timeout-ms": ("u", MAX_TIMEOUT_MS)})
                 for i in range(MAX_PER_PEER)]
        # The limits are the shipped ones: one more writer, or a longer timeout, is refused.
        self.assertRemoteError(E("Limit"), hostile.register, "one-more", ["k.x"], ["w.more"])
        self.assertRemoteError(E("Limit"), self.env.peer().register, "longer", ["k.x"], ["w.l"],
                               {"timeout-ms": ("u", MAX_TIMEOUT_MS + 1)})
        innocent = self.env.peer()
        t0 = time.monotonic()
        self.assertEqual(innocent.commit({"k.x": ("x", 1)}), 1)
        first = time.monotonic() - t0
        t0 = time.monotonic()
        self.assertEqual(innocent.commit({"k.x": ("x", 2)}), 2)
        second = time.monotonic() - t0
        print(f"\n  {MAX_PER_PEER} silent writers at {MAX_TIMEOUT_MS} ms: first Commit {first * 1000:.0f} ms, "
              f"next Commit {second * 1000:.1f} ms", file=sys.stderr)
        self.assertGreaterEqual(first, MAX_TIMEOUT_MS / 1000 - 0.05, "the first pass waits for the writer once")
        self.assertLess(first, MAX_TIMEOUT_MS / 1000 + 1.0)
        self.assertLess(second, 0.1)
        # Visible in Contracts() and ordoctl contracts.
        info = {c["name"]: c for c in innocent.contracts()}
        self.assertTrue(all(info[f"silent-{i}"]["suspended"] for i in range(MAX_PER_PEER)))
        out = self.env.ordoctl("contracts").stdout
        self.assertEqual(out.count("suspended=true"), MAX_PER_PEER, out[:500])
        st = innocent.stats()
        self.assertEqual((st["timeouts"], st["writer-calls"], st["suspensions"]), (1, 1, 1))
        self.assertEqual(st["writers-skipped"], 2 * MAX_PER_PEER - 1)
        self.assertIn("suspended (not called) until it calls the service again", self.env.log())
        # Any call from the hostile peer resumes its writers (and costs it a wait again).
        hostile.stats()
        self.assertFalse(any(c["suspended"] for c in innocent.contracts() if c["name"].startswith("silent-")))
        self.assertEqual(len(paths), MAX_PER_PEER)

    def test_writer_answering_again_is_called_again(self):
        w = WriterPeer(self.env.address)
        self.addCleanup(w.close)
        answering = threading.Event()

        def answer(peer, txn, changed, values):
            if not answering.is_set():
                return None
            # An initial call carries no values: read what it computes from.
            a = values["in.a"][1] if changed else peer.peer.get("in.a")[1]
            return ({"out.n": ("x", a * 10)}, [], [])
        path = w.add("norm", ["in.a"], ["out.n"], answer, {"priority": ("i", -1), "timeout-ms": ("u", 300)})
        w.start()
        c = self.env.peer()
        t0 = time.monotonic()
        self.assertEqual(c.commit({"in.a": ("x", 1)}), 1)
        self.assertGreaterEqual(time.monotonic() - t0, 0.28)
        info = {x["name"]: x for x in c.contracts()}
        self.assertTrue(info["norm"]["suspended"])
        # Suspended: not sent a Notify, not awaited.
        t0 = time.monotonic()
        self.assertEqual(c.commit({"in.a": ("x", 2)}), 2)
        self.assertLess(time.monotonic() - t0, 0.25)
        time.sleep(0.2)
        self.assertEqual([x[1:3] for x in w.calls], [(1, ["in.a"])])
        # The peer shows it is alive (any method call): called again at
        # once as an initial call (empty list, the last committed id), which
        # computes what the skipped transactions left behind, then awaited
        # as usual.
        answering.set()
        w.call("Stats")
        self.assertEqual(w.wait_replies(1), [("norm", 2, "ok")])
        self.assertEqual(c.get("out.n")[:2], ("x", 20))
        self.assertFalse({x["name"]: x for x in c.contracts()}["norm"]["suspended"])
        self.assertEqual(c.commit({"in.a": ("x", 3)}), 4)
        self.assertEqual(w.wait_replies(2)[1], ("norm", 4, "ok"))
        self.assertEqual(c.get("out.n")[:2], ("x", 30))
        self.assertEqual([x[1:3] for x in w.calls], [(1, ["in.a"]), (2, []), (4, ["in.a"])])
        self.assertEqual(path, info["norm"]["path"])
        self.assertEqual(w.errors, [])

    def test_one_peers_writers_share_one_budget_per_pass(self):
        # Three writers of one peer, each answering after 450 ms (within its
        # own 1000 ms timeout): together they may hold the pass 1000 ms, not 1350.
        w = WriterPeer(self.env.address)
        self.addCleanup(w.close)

        def slow(i):
            def answer(peer, txn, changed, values):
                time.sleep(0.45)
                return ({f"out.s{i}": ("x", txn)}, [], [])
            return answer
        for i in range(3):
            w.add(f"slow{i}", ["in.a"], [f"out.s{i}"], slow(i), {"priority": ("i", -3 + i), "timeout-ms": ("u", 1000)})
        w.start()
        c = self.env.peer()
        t0 = time.monotonic()
        self.assertEqual(c.commit({"in.a": ("x", 1)}), 1)
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 0.95)
        self.assertLess(elapsed, 1.3)
        self.assertEqual(c.get("out.s0")[:2], ("x", 1))
        self.assertEqual(c.get("out.s1")[:2], ("x", 1))
        self.assertRemoteError(E("NotFound"), c.get, "out.s2")
        self.assertRegex(self.env.log(), r'"slow2" of \S+ did not complete within the \d+ ms left of its peer\'s budget')


class ForgedSignals(DBusTest):
    def forge(self, sender, destination, contract, txn, value):
        msg = new_signal(DBusAddress(PATH, interface=IFACE), "Notify", "otasa{sv}",
                         (contract, txn, ["k"], {"k": ("s", value)}))
        msg.header.fields[HeaderFields.destination] = destination
        sender.conn.send(msg)

    def test_ordoctl_watch_ignores_a_forged_notify(self):
        watch = spawn([ORDOCTL, "--address", self.env.address, "watch", "k"], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE)
        self.addCleanup(stop, watch)
        p = self.env.peer()
        deadline = time.monotonic() + 10
        while not p.contracts():
            self.assertLess(time.monotonic(), deadline, "ordoctl watch did not register")
            time.sleep(0.02)
        c = p.contracts()[0]
        forger = Peer(self.env.address)
        self.addCleanup(forger.close)
        self.forge(forger, c["owner"], c["path"], 99, "forged")
        self.forge(forger, c["owner"], c["path"], 100, "forged-again")
        forger.call("Stats")  # the forged signals went out before this reply
        p.commit({"k": ("s", "real")})
        line = read_line(watch.stdout, 10, "ordoctl watch's line")
        self.assertRegex(line, r'^txn=1 k=\S*"real"$')
        self.assertEqual(stop(watch), 0)
        rest = watch.stdout.read().decode()
        self.assertNotIn("forged", rest)

    def test_a_forged_notify_does_not_count_for_watch_count(self):
        # ordoctl watch --count 1 ends after one line: a forged Notify must
        # not be that line.
        watch = spawn([ORDOCTL, "--address", self.env.address, "watch", "k", "--count", "1"],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(stop, watch)
        p = self.env.peer()
        deadline = time.monotonic() + 10
        while not p.contracts():
            self.assertLess(time.monotonic(), deadline, "ordoctl watch did not register")
            time.sleep(0.02)
        c = p.contracts()[0]
        # Forged with the real service's object path, from a peer that owns another name.
        forger = Peer(self.env.address)
        self.addCleanup(forger.close)
        self.forge(forger, c["owner"], c["path"], 1, "forged")
        forger.call("Stats")
        time.sleep(0.3)
        self.assertIsNone(watch.poll(), "ordoctl watch took a forged Notify as its one line")
        p.commit({"k": ("s", "real")})
        self.assertRegex(read_line(watch.stdout, 10, "ordoctl watch's line"), r'^txn=1 k=\S*"real"$')
        self.assertEqual(watch.wait(timeout=10), 0)


if __name__ == "__main__":
    harness.main("dbus liveness")
