"""End-to-end tests of remote WRITER contracts (Notify → Complete) on
dev.ordo.Bus1, served by ordod and by a C host (tests/DBus/dbus_host.c),
driven by independent jeepney clients. Each writer peer answers on its own
thread and connection; every wait has a timeout.

Run: python3 Tests/DBus/test_writers.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (CHostCase, CONTRACT_PREFIX, DOC_XML, IFACE, NAME, ORDOD, Env, Monitor, Peer, RemoteError,  # noqa: E402
                     read_line, spawn, stop)
from test_dbus import DBusTest, E  # noqa: E402

from jeepney import HeaderFields, MessageType  # noqa: E402

STALE = "dev.ordo.Error.Stale"


class WriterPeer:
    """One connection holding writer contracts, answering their Notify with
    Complete on its own thread. `answer(peer, txn, changed, values)` returns
    (set, touch, remove), or None to leave the call unanswered."""

    def __init__(self, address):
        self.peer = Peer(address)
        self.answers = {}
        self.calls = []      # (name, txn, changed, values)
        self.replies = []    # (name, txn, "ok" or error name)
        self.errors = []
        self._stop = threading.Event()
        self._thread = None
        # One reader of the connection at a time: jeepney's blocking
        # connection is not thread-safe, and a reply read by the other
        # thread is dropped (its caller then times out).
        self._lock = threading.Lock()

    def add(self, name, reads, writes, answer, options=None):
        path = self.peer.register(name, reads, writes, options)
        self.answers[path] = (name, answer)
        return path

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        try:
            while not self._stop.is_set():
                try:
                    with self._lock:
                        path, txn, changed, values = self.peer.next_notify(timeout=0.1)
                except TimeoutError:
                    continue
                name, answer = self.answers[path]
                self.calls.append((name, txn, changed, values))
                a = answer(self, txn, changed, values)
                if a is None:
                    continue
                s, touch, remove = a
                try:
                    self.call("Complete", "ota{sv}asas", path, txn, s, list(touch), list(remove))
                    self.replies.append((name, txn, "ok"))
                except RemoteError as e:
                    self.replies.append((name, txn, e.name))
        except Exception as e:  # noqa: BLE001 - reported by the test
            if not self._stop.is_set():
                self.errors.append(e)

    def call(self, member, sig="", *args):
        """A method call on the writer's connection, from any thread (a
        Notify that arrives meanwhile is queued for the writer's thread)."""
        with self._lock:
            return self.peer.call(member, sig, *args)

    def wait_replies(self, n, timeout=10):
        deadline = time.monotonic() + timeout
        while len(self.replies) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"writer got {len(self.replies)} of {n} Complete replies: {self.replies}")
            time.sleep(0.01)
        return self.replies

    def close(self):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        self.peer.close()


def complete(peer, path, txn, s=None, touch=(), remove=()):
    return peer.call("Complete", "ota{sv}asas", path, txn, s or {}, list(touch), list(remove))


class BackgroundCommit:
    """A Commit sent from its own connection and thread (it returns only
    after the pass, which waits for writers)."""

    def __init__(self, address, s=None, touch=(), remove=()):
        self.peer = Peer(address)
        self.result = None
        self.started = time.monotonic()
        self.elapsed = None
        self._t = threading.Thread(target=self._run, args=(s, touch, remove), daemon=True)
        self._t.start()

    def _run(self, s, touch, remove):
        try:
            self.result = self.peer.commit(s, touch, remove)
        except Exception as e:  # noqa: BLE001
            self.result = e
        self.elapsed = time.monotonic() - self.started

    def join(self, timeout=15):
        self._t.join(timeout)
        if self._t.is_alive():
            raise AssertionError("the Commit did not return")
        self.peer.close()
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


class Writers(DBusTest):
    # Some tests answer by hand while a pass waits: allow long timeouts.
    ordod_args = ("--max-writer-timeout-ms", "20000")

    def writer(self):
        w = WriterPeer(self.env.address)
        self.addCleanup(w.close)
        return w

    def test_normalizer_rewrites_value(self):
        w = self.writer()

        def normalize(peer, txn, changed, values):
            sig, v = values["in.name"]
            n = v.strip().lower()
            return ({"in.name": ("s", n)} if n != v else {}), (), ()
        norm = w.add("normalize", ["in.name"], ["in.name"], normalize, {"priority": ("i", -3)})
        w.start()
        o, c = self.env.peer(), self.env.peer()
        view = o.register("view", ["in.name"])
        self.assertEqual(c.commit({"in.name": ("s", "  Hello World ")}), 1)
        self.assertEqual(o.next_notify(), (view, 1, ["in.name"], {"in.name": ("s", "hello world")}))
        self.assertEqual(c.get("in.name"), ("s", "hello world", 1))
        self.assertEqual(w.wait_replies(1), [("normalize", 1, "ok")])
        self.assertEqual(w.calls, [("normalize", 1, ["in.name"], {"in.name": ("s", "  Hello World ")})])
        # An already normalized value: an empty Complete.
        self.assertEqual(c.commit({"in.name": ("s", "abc")}), 2)
        self.assertEqual(o.next_notify()[1:], (2, ["in.name"], {"in.name": ("s", "abc")}))
        self.assertEqual(w.wait_replies(2)[1], ("normalize", 2, "ok"))
        st = c.stats()
        self.assertEqual((st["writer-calls"], st["completes"], st["timeouts"], st["failures"]), (2, 2, 0, 0))
        info = {x["name"]: x for x in c.contracts()}
        self.assertEqual(info["normalize"]["writes"], ["in.name"])
        self.assertEqual(info["normalize"]["timeout-ms"], 2000)
        self.assertEqual(info["normalize"]["calls"], 2)
        self.assertEqual(w.errors, [])
        self.assertTrue(norm.startswith(CONTRACT_PREFIX))

    def test_computed_data_read_by_view_and_snapshot_while_waiting(self):
        w = self.writer()

        def total(peer, txn, changed, values):
            # The pass waits for us: Snapshot is answered meanwhile and sees
            # the transaction's writes.
            vals, _, _ = peer.peer.snapshot(["cart.items.*"])
            return {"cart.total": ("x", sum(v for _, v in vals.values()))}, (), ()
        w.add("total", ["cart.items.*"], ["cart.total"], total, {"priority": ("i", -1)})
        w.start()
        o, c = self.env.peer(), self.env.peer()
        view = o.register("total-view", ["cart.total"])
        self.assertEqual(c.commit({"cart.items.a": ("x", 2), "cart.items.b": ("x", 3)}), 1)
        self.assertEqual(o.next_notify(), (view, 1, ["cart.total"], {"cart.total": ("x", 5)}))
        self.assertEqual(c.commit({"cart.items.b": ("x", 10)}), 2)
        self.assertEqual(o.next_notify(), (view, 2, ["cart.total"], {"cart.total": ("x", 12)}))
        self.assertEqual(c.get("cart.total"), ("x", 12, 2))
        self.assertEqual([r[2] for r in w.wait_replies(2)], ["ok", "ok"])
        self.assertEqual(w.errors, [])

    def test_notify_initial_writer_answers_its_initial_call(self):
        c = self.env.peer()
        self.assertEqual(c.commit({"cart.items.a": ("x", 2), "cart.items.b": ("x", 3)}), 1)
        w = self.writer()
        # Read before the writer's thread reads its connection (over a
        # direct connection the name takes calls of its own).
        writer_name = w.peer.unique_name

        def total(peer, txn, changed, values):
            vals, _, _ = peer.peer.snapshot(["cart.items.*"])
            return {"cart.total": ("x", sum(v for _, v in vals.values()))}, (), ()
        # Register returns the path first, then the initial call (empty
        # list, the last committed id) waits for this connection's Complete.
        path = w.add("total", ["cart.items.*"], ["cart.total"], total,
                     {"priority": ("i", -1), "notify-initial": ("b", True), "timeout-ms": ("u", 5000)})
        w.start()
        self.assertEqual(w.wait_replies(1), [("total", 1, "ok")])
        self.assertEqual(w.calls, [("total", 1, [], {})])
        self.assertEqual(c.get("cart.total"), ("x", 5, 1))
        self.assertEqual(c.call("Get", "ss", IFACE, "Transaction", iface="org.freedesktop.DBus.Properties")[0][1], 2)
        info = {x["name"]: x for x in c.contracts()}
        self.assertEqual((info["total"]["path"], info["total"]["owner"], info["total"]["suspended"]),
                         (path, writer_name, False))
        st = c.stats()
        self.assertEqual((st["completes"], st["timeouts"], st["access-denied"]), (1, 0, 0))
        # Its later calls are answered as usual.
        self.assertEqual(c.commit({"cart.items.b": ("x", 10)}), 3)
        self.assertEqual(w.wait_replies(2)[1], ("total", 3, "ok"))
        self.assertEqual(c.get("cart.total")[:2], ("x", 12))
        self.assertEqual(w.errors, [])

    def test_timeout_pass_goes_on_and_stats_count_it(self):
        w = self.writer()
        slow = w.add("slow", ["in.a"], ["out.b"], lambda *a: None,
                     {"priority": ("i", -1), "timeout-ms": ("u", 400)})
        w.start()
        o, c = self.env.peer(), self.env.peer()
        view = o.register("view", ["in.a", "out.b"])
        t0 = time.monotonic()
        self.assertEqual(c.commit({"in.a": ("x", 1)}), 1)
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 0.35)
        self.assertLess(elapsed, 5)
        self.assertEqual(o.next_notify(), (view, 1, ["in.a"], {"in.a": ("x", 1)}))
        st = c.stats()
        self.assertEqual((st["timeouts"], st["failures"], st["writer-calls"]), (1, 1, 1))
        log = self.env.log()
        self.assertRegex(log, r'writer contract \d+ "slow" of \S+ did not complete within 400 ms \(transaction 1\)')
        # A late answer is stale, and nothing is applied.
        self.assertRemoteError(STALE, complete, w_peer_call(w), slow, 1, {"out.b": ("x", 1)})
        self.assertRemoteError(E("NotFound"), c.get, "out.b")
        # Wrong types and ranges of timeout-ms.
        self.assertRemoteError("org.freedesktop.DBus.Error.InvalidArgs", c.register, "t1", ["a"], ["b"],
                               {"timeout-ms": ("i", 100)})
        self.assertRemoteError("org.freedesktop.DBus.Error.InvalidArgs", c.register, "t2", ["a"], ["b"],
                               {"timeout-ms": ("u", 0)})
        self.assertRemoteError(E("Limit"), c.register, "t3", ["a"], ["b"], {"timeout-ms": ("u", 3600000)})

    def test_disconnect_while_awaited(self):
        q = Peer(self.env.address)
        path = q.register("leaver", ["in.a"], ["out.b"], {"priority": ("i", -1), "timeout-ms": ("u", 20000)})
        o = self.env.peer()
        view = o.register("view", ["in.a"])
        bg = BackgroundCommit(self.env.address, {"in.a": ("x", 1)})
        self.assertEqual(q.next_notify()[:2], (path, 1))
        q.close()  # leaves while the pass waits for it
        self.assertEqual(bg.join(), 1)
        self.assertLess(bg.elapsed, 10)
        self.assertEqual(o.next_notify(), (view, 1, ["in.a"], {"in.a": ("x", 1)}))
        st = o.stats()
        self.assertEqual((st["timeouts"], st["remote-contracts"]), (1, 1))
        self.assertNotIn("leaver", [c["name"] for c in o.contracts()])
        self.assertIn('"leaver"', self.env.log())

    def test_stale_foreign_and_unknown_complete(self):
        a, b = self.env.peer(), self.env.peer()
        path = a.register("w", ["in.a"], ["out.*"], {"priority": ("i", -1), "timeout-ms": ("u", 8000)})
        # Nothing awaited yet.
        self.assertRemoteError(STALE, complete, a, path, 1)
        bg = BackgroundCommit(self.env.address, {"in.a": ("x", 1)})
        got = a.next_notify()
        self.assertEqual(got[:3], (path, 1, ["in.a"]))
        self.assertRemoteError(E("AccessDenied"), complete, b, path, 1, {"out.x": ("x", 1)}, contains=a.unique_name)
        self.assertRemoteError(STALE, complete, a, path, 7, {"out.x": ("x", 1)})
        self.assertRemoteError(E("NotFound"), complete, a, CONTRACT_PREFIX + "999", 1)
        self.assertEqual(complete(a, path, 1, {"out.x": ("x", 42)}), ())
        self.assertEqual(bg.join(), 1)
        self.assertEqual(a.get("out.x"), ("x", 42, 1))
        # Answered already: stale.
        self.assertRemoteError(STALE, complete, a, path, 1, {"out.x": ("x", 43)})
        self.assertEqual(a.get("out.x"), ("x", 42, 1))

    def test_complete_breaking_a_rule_applies_nothing(self):
        a, c = self.env.peer(), self.env.peer()
        early = c.register("early", ["out.x"], options={"priority": ("i", -2)})
        path = a.register("w", ["in.a"], ["out.*"], {"priority": ("i", -1), "timeout-ms": ("u", 8000)})
        late = c.register("late", ["in.a"])
        # Stability: out.x is read by "early", placed before "w".
        bg = BackgroundCommit(self.env.address, {"in.a": ("x", 1)})
        self.assertEqual(a.next_notify()[:2], (path, 1))
        self.assertRemoteError(E("Stability"), complete, a, path, 1, {"out.y": ("x", 1), "out.x": ("x", 2)},
                               contains="out.x")
        self.assertEqual(bg.join(), 1)
        self.assertEqual(c.next_notify(), (late, 1, ["in.a"], {"in.a": ("x", 1)}))
        self.assertRemoteError(E("NotFound"), c.get, "out.y")
        # ContractViolation: outside the write set; nothing of the batch applied.
        bg = BackgroundCommit(self.env.address, {"in.a": ("x", 2)})
        self.assertEqual(a.next_notify()[:2], (path, 2))
        self.assertRemoteError(E("ContractViolation"), complete, a, path, 2, {"out.y": ("x", 1), "elsewhere": ("x", 1)})
        self.assertEqual(bg.join(), 2)
        self.assertEqual(c.next_notify()[:2], (late, 2))
        self.assertRemoteError(E("NotFound"), c.get, "out.y")
        # InvalidKeypath, and a Complete over the per-call limit.
        bg = BackgroundCommit(self.env.address, {"in.a": ("x", 3)})
        self.assertEqual(a.next_notify()[:2], (path, 3))
        self.assertRemoteError(E("InvalidKeypath"), complete, a, path, 3, {"out..y": ("x", 1)})
        self.assertEqual(bg.join(), 3)
        bg = BackgroundCommit(self.env.address, {"in.a": ("x", 4)})
        self.assertEqual(a.next_notify()[:2], (path, 4))
        self.assertRemoteError(E("Limit"), complete, a, path, 4, None, [f"out.t{i}" for i in range(5000)])
        self.assertEqual(bg.join(), 4)
        self.assertEqual(c.notifies(2)[1][:2], (late, 4))
        st = c.stats()
        self.assertEqual((st["completes"], st["completes-refused"], st["failures"]), (0, 4, 4))
        # early was never called: nothing it reads changed.
        self.assertEqual({x["name"]: x["calls"] for x in c.contracts()}["early"], 0)
        self.assertTrue(early)

    @harness.bus_only("a monitor sees the order of Notify signals")
    def test_two_peers_writers_at_several_levels(self):
        a, b = self.writer(), self.writer()

        def val(peer, values, k):
            if k in values:
                return values[k][1]
            return peer.peer.get(k)[1]
        a.add("norm", ["in.v"], ["in.v"],
              lambda p, t, ch, vs: ({"in.v": ("x", 100)} if vs["in.v"][1] > 100 else {}, (), ()),
              {"priority": ("i", -3)})
        b.add("coord", ["in.v"], ["st.mode"],
              lambda p, t, ch, vs: ({"st.mode": ("s", "big" if vs["in.v"][1] > 50 else "small")}, (), ()),
              {"priority": ("i", -2)})
        a.add("calc1", ["in.v"], ["d.l1"], lambda p, t, ch, vs: ({"d.l1": ("x", vs["in.v"][1] + 1)}, (), ()))
        b.add("calc2", ["d.l1"], ["d.l2"], lambda p, t, ch, vs: ({"d.l2": ("x", vs["d.l1"][1] * 2)}, (), ()))
        a.add("calc3", ["d.l2", "st.mode"], ["d.l3"],
              lambda p, t, ch, vs: ({"d.l3": ("s", f"{val(p, vs, 'st.mode')}:{val(p, vs, 'd.l2')}")}, (), ()))
        a.start()
        b.start()
        m = self.env.peer()
        mon = Monitor(self.env.address)
        self.addCleanup(mon.close)
        view = m.register("view", ["d.l3"])
        levels = {x["name"]: x.get("level") for x in m.contracts()}
        self.assertEqual([levels[n] for n in ("calc1", "calc2", "calc3", "view")], [0, 1, 2, 3])
        self.assertEqual(m.commit({"in.v": ("x", 500)}), 1)
        self.assertEqual(m.next_notify(), (view, 1, ["d.l3"], {"d.l3": ("s", "big:202")}))
        names = {x["path"]: x["name"] for x in m.contracts()}
        order = [names[body[0]] for _, body in mon.notifies(6)]
        self.assertEqual(order, ["norm", "coord", "calc1", "calc2", "calc3", "view"])
        self.assertEqual(m.get("in.v"), ("x", 100, 1))
        self.assertEqual(m.commit({"in.v": ("x", 7)}), 2)
        self.assertEqual(m.next_notify(), (view, 2, ["d.l3"], {"d.l3": ("s", "small:16")}))
        self.assertEqual(m.stats()["completes"], 10)
        self.assertEqual(a.errors + b.errors, [])

    def test_commits_arriving_during_a_waiting_pass_are_queued(self):
        gate = threading.Event()
        w = self.writer()
        seen = {}

        def slow(peer, txn, changed, values):
            # The awaited writer reads the running transaction (what it
            # needs to compute): its values and id; counters rise when it
            # commits.
            seen["get"] = peer.peer.get("in.a")
            seen["snapshot"] = peer.peer.snapshot(["in.a"])
            seen["txn"] = peer.peer.call("Get", "ss", IFACE, "Transaction", iface="org.freedesktop.DBus.Properties")[0]
            gate.wait(10)
            return {"out.n": ("x", values["in.a"][1])}, (), ()
        w.add("slow", ["in.a"], ["out.n"], slow, {"priority": ("i", -1), "timeout-ms": ("u", 15000)})
        w.start()
        r, q, g = self.env.peer(), self.env.peer(), self.env.peer()
        tmp = r.register("tmp", ["zzz"])
        bg = BackgroundCommit(self.env.address, {"in.a": ("x", 1)})
        deadline = time.monotonic() + 10
        while not w.calls:
            self.assertLess(time.monotonic(), deadline, "the writer was not called")
            time.sleep(0.01)
        # Another peer's Register queues (its contract joins after the pass,
        # which its catch-up read then covers), then three Commits from q,
        # sent without waiting: queued, no reply yet.
        registered = {}
        reg = threading.Thread(target=lambda: registered.setdefault("obs", g.register("obs", ["k"])), daemon=True)
        reg.start()
        while r.stats()["queued-now"] < 1:
            self.assertLess(time.monotonic(), deadline, f"Register not queued: {r.stats()}")
            time.sleep(0.02)
        for i in range(3):
            q.conn.send(q.message("Commit", "a{sv}asas", ({"k": ("x", 10 + i)}, [], [])))
        while r.stats()["queued-now"] < 4:
            self.assertLess(time.monotonic(), deadline, f"Commits not queued: {r.stats()}")
            time.sleep(0.02)
        # Everything else is answered meanwhile. A peer that takes no part
        # in the pass sees the last committed state, as another thread would.
        self.assertRemoteError(E("NotFound"), r.get, "in.a")
        self.assertEqual(r.snapshot(["in.a"]), ({}, {}, 0))
        self.assertEqual(r.call("Get", "ss", IFACE, "Transaction", iface="org.freedesktop.DBus.Properties")[0],
                         ("t", 0))
        self.assertEqual(r.call("GetAll", "s", IFACE, iface="org.freedesktop.DBus.Properties")[0]["Transaction"],
                         ("t", 0))
        self.assertEqual(r.call("Introspect", iface="org.freedesktop.DBus.Introspectable")[0][:5], "<!DOC")
        self.assertNotIn("obs", [x["name"] for x in r.contracts()])
        r.unregister(tmp)  # Unregister is answered at once
        self.assertTrue(reg.is_alive(), "the Register was answered during the pass")
        # No reply to the queued Commits yet.
        end = time.monotonic() + 0.3
        while True:
            try:
                m = q.conn.receive(timeout=max(0.0, end - time.monotonic()))
            except TimeoutError:
                break
            self.assertNotIn(m.header.message_type, (MessageType.method_return, MessageType.error), m.body)
        gate.set()
        self.assertEqual(bg.join(), 1)
        reg.join(10)
        self.assertFalse(reg.is_alive(), "the queued Register was not answered")
        self.assertEqual(seen, {"get": ("x", 1, 0), "snapshot": ({"in.a": ("x", 1)}, {}, 1), "txn": ("t", 1)})
        replies = []
        deadline = time.monotonic() + 10
        while len(replies) < 3:
            m = q.conn.receive(timeout=max(0.01, deadline - time.monotonic()))
            if m.header.message_type == MessageType.method_return:
                replies.append(m.body[0])
            elif m.header.message_type == MessageType.error:
                self.fail(f"queued Commit failed: {m.body}")
        self.assertEqual(replies, [2, 3, 4])
        # The Register ran first (it came first): its contract saw them all.
        obs = registered["obs"]
        self.assertEqual(g.notifies(3),
                         [(obs, t, ["k"], {"k": ("x", 8 + t)}) for t in (2, 3, 4)])
        self.assertEqual(r.get("k"), ("x", 12, 3))
        self.assertEqual(r.get("out.n"), ("x", 1, 1))
        st = r.stats()
        self.assertEqual((st["queued"], st["queued-now"], st["timeouts"]), (4, 0, 0))

    def test_python_writer_example(self):
        example = os.path.join(os.path.dirname(DOC_XML), "..", "examples", "python", "ordo_writer.py")
        r = subprocess.run([sys.executable, example, "--demo"], capture_output=True, text=True, timeout=60,
                           env=self.env.env())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("completed txn=1 writes={'user.name': ('s', 'ada lovelace')}", r.stdout)
        self.assertIn("committed txn=1; user.name='ada lovelace' counter=1", r.stdout)


def w_peer_call(w):
    """The writer peer's connection (its thread is idle after a timeout)."""
    w._stop.set()
    w._thread.join(timeout=5)
    return w.peer


class CHostWriters(CHostCase):
    """Remote writers on a bus published by a C program with local contracts
    (Tests/DBus/dbus_host.c): "double" (-3) in.raw → in.norm, "sum" (data)
    in.norm → calc.sum, and commits from a host thread (ctl.burst)."""

    def test_remote_writer_output_read_by_host_contract(self):
        w = WriterPeer(self.env.address)
        self.addCleanup(w.close)
        w.add("remote-calc", ["in.raw"], ["in.norm"],
              lambda p, t, ch, vs: ({"in.norm": ("x", vs["in.raw"][1] * 10)}, (), ()), {"priority": ("i", -1)})
        w.start()
        o, c = self.peers(2)
        view = o.register("view", ["calc.sum"])
        self.assertEqual(c.commit({"in.raw": ("x", 5)}), 1)
        # The host's "sum" (a local data contract) read the remote writer's in.norm.
        self.assertEqual(o.next_notify(), (view, 1, ["calc.sum"], {"calc.sum": ("x", 51)}))
        self.assertEqual(c.get("in.norm"), ("x", 50, 1))
        self.assertEqual(w.wait_replies(1), [("remote-calc", 1, "ok")])
        self.finish(c)

    def test_writer_called_from_a_host_thread_pass(self):
        w = WriterPeer(self.env.address)
        self.addCleanup(w.close)
        w.add("bg-writer", ["bg.n"], ["bg.m"],
              lambda p, t, ch, vs: ({"bg.m": ("x", vs["bg.n"][1] * 10)}, (), ()),
              # The largest timeout a C host allows: on a loaded machine a Python writer can
              # miss 2 s once, and a timeout suspends it for the rest of the
              # burst (liveness); this test is about the host-thread pass.
              {"priority": ("i", -1), "timeout-ms": ("u", 5000)})
        w.start()
        o, c = self.peers(2)
        view = o.register("view", ["bg.m"])
        N = 30
        self.assertEqual(c.commit({"ctl.burst": ("x", N)}), 1)
        try:
            notes = o.notifies(N, timeout=60)
        except (AssertionError, TimeoutError) as e:
            # Says whether the writer missed its timeout (suspended) or a Notify went missing.
            raise AssertionError(f"{e!r}; stats {c.stats()}; writer replies {w.replies}") from e
        self.assert_series(notes, view, "bg.m", [10 * i for i in range(1, N + 1)])
        w.wait_replies(N)
        self.assertEqual({r[2] for r in w.replies}, {"ok"})
        st = c.stats()
        self.assertEqual((st["completes"], st["timeouts"]), (N, 0))
        self.finish(c)


if __name__ == "__main__":
    harness.main("dbus writers")
