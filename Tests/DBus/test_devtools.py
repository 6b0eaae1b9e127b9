"""Devtools over D-Bus (docs/devtools.md): the Trace signal of SubscribeTrace
compared with the Notify calls the contracts actually received (a monitor
connection sees every Notify in the order the daemon got them), with a
normalizer, computed data, views, an every-transaction observer and a
suspended writer; trace filtering by patterns and by the policy's read right
(a client as nobody); subscriptions ending with the peer; unused reads and
writes in Contracts(); ordoctl trace (text, --json, forged signals ignored),
ordoctl why (ran / did not run) and ordoctl graph --svg/--png.

Run: python3 Tests/DBus/test_devtools.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import json
import os
import subprocess
import sys
import time
import unittest
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IFACE, ORDOCTL, PATH, Env, Peer, RemoteError, read_line, spawn, stop  # noqa: E402
from test_dbus import DBusTest, E, INVALID_ARGS  # noqa: E402
from test_writers import WriterPeer  # noqa: E402
from test_policy import CONFIG, NOBODY, Nobody, PolicyTest  # noqa: E402

from jeepney import DBusAddress, HeaderFields, MatchRule, MessageType, new_method_call, new_signal  # noqa: E402
from jeepney.io.blocking import open_dbus_connection  # noqa: E402

class TracePeer(Peer):
    """A peer that also collects the Trace signals sent to it."""

    def __init__(self, address):
        super().__init__(address)
        self.traces = deque()
        self.conn.filter(MatchRule(type="signal", interface=IFACE, member="Trace"), queue=self.traces)

    def subscribe(self, *patterns):
        return self.call("SubscribeTrace", "as", list(patterns))

    def next_trace(self, timeout=5):
        """(txn, committed, changed, [step dicts with plain values], duration_ns)."""
        m = self.conn.recv_until_filtered(self.traces, timeout=timeout)
        assert m.header.fields.get(HeaderFields.sender) is not None
        txn, committed, changed, steps, dur = m.body
        return txn, committed, changed, [{k: v[1] for k, v in s.items()} for s in steps], dur

    def no_trace(self, wait=0.3):
        try:
            t = self.next_trace(timeout=wait)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected Trace {t}")


class NotifyMonitor:
    """Every Notify the service sends, in order: (destination, contract, txn, changed)."""

    def __init__(self, address):
        self.conn = open_dbus_connection(address)
        msg = new_method_call(
            DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus",
                        interface="org.freedesktop.DBus.Monitoring"),
            "BecomeMonitor", "asu", ([f"type='signal',interface='{IFACE}',member='Notify'"], 0))
        reply = self.conn.send_and_get_reply(msg, timeout=5)
        assert reply.header.message_type != MessageType.error, reply.body
        self.seen = []

    def until_txn(self, txn, count, timeout=10):
        """The Notify signals of transaction txn, once `count` of them came."""
        deadline = time.monotonic() + timeout
        while sum(1 for n in self.seen if n[2] == txn) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"monitor saw {[n for n in self.seen if n[2] == txn]} of {count} for txn {txn}")
            try:
                m = self.conn.receive(timeout=left)
            except TimeoutError:
                continue
            if m.header.fields.get(HeaderFields.member) == "Notify":
                path, t, changed, _ = m.body
                self.seen.append((m.header.fields.get(HeaderFields.destination), path, t, changed))
        return [n for n in self.seen if n[2] == txn]

    def close(self):
        self.conn.close()


def called(steps):
    return [s for s in steps if s["outcome"] in ("called", "failed")]


class Traces(DBusTest):
    ordod_args = ("--max-writer-timeout-ms", "20000")

    def peer(self):
        p = TracePeer(self.env.address)
        self.addCleanup(p.close)
        return p

    def writer(self):
        w = WriterPeer(self.env.address)
        self.addCleanup(w.close)
        return w

    def monitor(self):
        m = NotifyMonitor(self.env.address)
        self.addCleanup(m.close)
        return m

    def check_against_calls(self, trace, mon, names):
        """The trace's called steps are the Notify signals of its transaction,
        in order, each with the same keypaths (because = Notify's changed)."""
        txn, committed, changed, steps, dur = trace
        self.assertTrue(committed)
        notes = mon.until_txn(txn, len(called(steps)))
        self.assertEqual([names[s["contract"]] for s in called(steps)], [names[n[1]] for n in notes])
        for s, n in zip(called(steps), notes):
            self.assertEqual(s["contract"], n[1])
            self.assertEqual(sorted(s["because"]), sorted(n[3]), s["name"])
            self.assertEqual(s["txn"], txn)
            self.assertGreater(s["duration-ns"], 0)
            self.assertFalse(s["initial"])
        self.assertGreaterEqual(dur, sum(s["duration-ns"] for s in steps))
        return {s["name"]: s for s in steps}

    def test_trace_order_and_because_are_the_calls_made(self):
        mon = self.monitor()
        w = self.writer()

        def normalize(peer, txn, changed, values):
            v = values.get("in.name", ("s", ""))[1]
            return ({"in.name": ("s", v.lower())} if v != v.lower() else {}, [], [])

        def total(peer, txn, changed, values):
            snap = peer.peer.snapshot(["in.a", "in.b"])[0]
            return ({"out.sum": ("x", sum(v[1] for v in snap.values()))}, [], [])
        w.add("normalize", ["in.name"], ["in.name"], normalize, {"priority": ("i", -1)})
        w.add("total", ["in.a", "in.b"], ["out.sum"], total)
        w.start()
        v = self.env.peer()
        v.register("view", ["in.**", "out.sum"])
        v.register("sum-view", ["out.sum"])
        v.register("every", [])
        s = self.peer()
        self.assertEqual(s.stats()["trace-subscribers"], 0)
        self.assertEqual(s.subscribe("**"), ())
        self.assertEqual(s.stats()["trace-subscribers"], 1)
        names = {c["path"]: c["name"] for c in s.contracts()}
        c = self.env.peer()

        self.assertEqual(c.commit({"in.name": ("s", "ABC"), "in.a": ("x", 1), "in.b": ("x", 2)}), 1)
        t = s.next_trace()
        self.assertEqual(t[0], 1)
        self.assertEqual(sorted(t[2]), ["in.a", "in.b", "in.name", "out.sum"])
        steps = self.check_against_calls(t, mon, names)
        self.assertEqual([x["name"] for x in t[3]], ["normalize", "total", "view", "sum-view", "every"])
        self.assertEqual(steps["normalize"]["because"], ["in.name"])
        self.assertEqual(steps["normalize"]["writes"], ["in.name"])
        self.assertEqual(sorted(steps["total"]["because"]), ["in.a", "in.b"])
        self.assertEqual(steps["total"]["writes"], ["out.sum"])
        self.assertEqual(steps["sum-view"]["because"], ["out.sum"])
        self.assertEqual(sorted(steps["every"]["because"]), sorted(t[2]))
        self.assertEqual(c.get("in.name")[1], "abc")

        # Only in.a: the normalizer is not scheduled; the others are, in order.
        self.assertEqual(c.commit({"in.a": ("x", 5)}), 2)
        t = s.next_trace()
        steps = self.check_against_calls(t, mon, names)
        self.assertEqual([x["name"] for x in t[3]], ["total", "view", "sum-view", "every"])
        self.assertEqual(steps["view"]["because"], ["in.a", "out.sum"])

        # The normalizer's rewrite is a write of its step; views see the result.
        self.assertEqual(c.commit({"in.name": ("s", "XyZ")}), 3)
        t = s.next_trace()
        steps = self.check_against_calls(t, mon, names)
        self.assertEqual([x["name"] for x in t[3]], ["normalize", "view", "every"])
        self.assertEqual(steps["normalize"]["writes"], ["in.name"])
        self.assertEqual(w.errors, [])
        st = s.stats()
        self.assertEqual(st["trace-sent"], 3)

    def test_suspended_writer_fails_in_the_trace(self):
        mon = self.monitor()
        silent = self.peer()
        silent.register("slow", ["k.x"], ["k.y"], {"timeout-ms": ("u", 300)})
        v = self.env.peer()
        v.register("obs", ["k.**"])
        s = self.peer()
        s.subscribe("k.**")
        names = {c["path"]: c["name"] for c in s.contracts()}
        c = self.env.peer()
        self.assertEqual(c.commit({"k.x": ("x", 1)}), 1)
        t = s.next_trace()
        steps = self.check_against_calls(t, mon, names)
        self.assertEqual(steps["slow"]["outcome"], "failed")
        self.assertIn("did not complete within 300 ms", steps["slow"]["failure"])
        self.assertGreaterEqual(steps["slow"]["duration-ns"], 280_000_000)
        self.assertEqual(steps["obs"]["outcome"], "called")
        # Suspended: failed at once, without a Notify (the monitor sees only obs's).
        self.assertEqual(c.commit({"k.x": ("x", 2)}), 2)
        t = s.next_trace()
        steps = {x["name"]: x for x in t[3]}
        self.assertEqual(steps["slow"]["outcome"], "failed")
        self.assertIn("is suspended", steps["slow"]["failure"])
        self.assertLess(steps["slow"]["duration-ns"], 100_000_000)
        notes = mon.until_txn(2, 1)
        self.assertEqual([names[n[1]] for n in notes], ["obs"])
        self.assertEqual([x["name"] for x in t[3]], ["slow", "obs"])
        info = {x["name"]: x for x in s.contracts()}
        self.assertTrue(info["slow"]["suspended"])
        self.assertEqual(info["slow"]["failures"], 2)

    def test_patterns_select_passes_and_subscriptions_end(self):
        v = self.env.peer()
        v.register("a-view", ["a.**"])
        v.register("b-view", ["b.**"])
        sa = self.peer()
        sa.subscribe("a.**")
        sb = self.peer()
        sb.subscribe("b.x", "zzz")
        c = self.env.peer()
        self.assertEqual(c.commit({"a.x": ("x", 1)}), 1)
        t = sa.next_trace()
        self.assertEqual((t[0], [x["name"] for x in t[3]]), (1, ["a-view"]))
        sb.no_trace()
        self.assertEqual(c.commit({"b.x": ("x", 1), "a.y": ("x", 1)}), 2)
        self.assertEqual(sa.next_trace()[0], 2)
        t = sb.next_trace()
        # The whole pass, not only the matching steps.
        self.assertEqual((t[0], [x["name"] for x in t[3]]), (2, ["a-view", "b-view"]))
        # A new call replaces the patterns.
        sb.subscribe("a.y")
        self.assertEqual(c.commit({"b.x": ("x", 2)}), 3)
        sb.no_trace()
        self.assertEqual(c.commit({"a.y": ("x", 2)}), 4)
        self.assertEqual(sb.next_trace()[0], 4)
        self.assertEqual(sa.next_trace()[0], 4)
        # Unsubscribe: nothing more (and again: still fine).
        sa.call("UnsubscribeTrace")
        sa.call("UnsubscribeTrace")
        self.assertEqual(c.commit({"a.x": ("x", 3)}), 5)
        sa.no_trace()
        sb.no_trace()
        self.assertEqual(c.stats()["trace-subscribers"], 1)
        # The last subscriber leaving turns tracing off.
        sb.close()
        deadline = time.monotonic() + 5
        while c.stats()["trace-subscribers"] != 0:
            self.assertLess(time.monotonic(), deadline, "the subscription outlived its peer")
            time.sleep(0.02)
        self.assertIn("tracing off", self.env.log())
        sent = c.stats()["trace-sent"]
        self.assertEqual(c.commit({"a.x": ("x", 4)}), 6)
        self.assertEqual(c.stats()["trace-sent"], sent)

    def test_subscribe_validates(self):
        s = self.peer()
        self.assertRemoteError(E("InvalidArgument"), s.subscribe, contains='"**"')
        self.assertRemoteError(E("InvalidKeypath"), s.subscribe, "a..b")
        self.assertRemoteError(INVALID_ARGS, s.call, "SubscribeTrace", "s", "**")
        self.assertRemoteError(INVALID_ARGS, s.call, "UnsubscribeTrace", "s", "x")
        self.assertEqual(s.stats()["trace-subscribers"], 0)
        self.assertTrue(self.env.alive())

    def test_unused_reads_and_writes_in_contracts(self):
        w = self.writer()
        w.add("partial", ["p.in", "p.other"], ["p.out", "p.never"], lambda *a: ({"p.out": ("x", 1)}, [], []))
        w.start()
        c = self.env.peer()
        info = {x["name"]: x for x in c.contracts()}["partial"]
        self.assertEqual(info["unused-writes"], ["p.out", "p.never"])
        self.assertEqual(info["unused-reads"], ["p.in", "p.other"])
        self.assertEqual(c.commit({"p.in": ("x", 1)}), 1)
        w.wait_replies(1)
        info = {x["name"]: x for x in c.contracts()}["partial"]
        self.assertEqual(info["unused-writes"], ["p.never"])
        # The Notify carried p.in: that read pattern counts as used.
        self.assertEqual(info["unused-reads"], ["p.other"])
        out = self.env.ordoctl("contracts").stdout
        self.assertIn("unused-writes=[p.never]", out)
        self.assertIn("unused-reads=[p.other]", out)


class PolicyTraces(PolicyTest):
    def test_trace_shows_only_what_the_subscriber_may_read(self):
        v = self.env.peer()
        v.register("pub-view", ["pub.**"])
        v.register("secret-view", ["pub.secret.**"])
        v.register("other-view", ["other.**"])
        self.assertEqual(self.nobody.call("SubscribeTrace", "as", ["**"]), ())
        root = TracePeer(self.env.address)
        self.addCleanup(root.close)
        root.subscribe("**")
        self.assertEqual(self.root.commit({"pub.x": ("x", 1), "pub.secret.k": ("s", "hidden"), "other.z": ("x", 1)}), 1)
        full = root.next_trace()
        self.assertEqual([x["name"] for x in full[3]], ["pub-view", "secret-view", "other-view"])
        r = self.nobody.ask(("trace", 5))
        self.assertEqual(r[0], "trace")
        txn, committed, changed, steps, _ = r[1]
        self.assertEqual((txn, committed, changed), (1, True, ["pub.x"]))
        steps = [{k: v[1] for k, v in s.items()} for s in steps]
        self.assertEqual([s["name"] for s in steps], ["pub-view"])
        self.assertEqual(steps[0]["because"], ["pub.x"])
        # A pass of nothing it may read is not sent to it at all.
        self.assertEqual(self.root.commit({"other.z": ("x", 2), "pub.secret.k": ("s", "x")}), 2)
        self.assertEqual(root.next_trace()[0], 2)
        self.assertEqual(self.nobody.ask(("trace", 0.5)), ("timeout",))
        self.assertEqual(self.root.commit({"pub.x": ("x", 3)}), 3)
        r = self.nobody.ask(("trace", 5))
        self.assertEqual(r[1][0], 3)


def unique_name_of(env, pid):
    """The unique bus name of the connection of process `pid`."""
    p = Peer(env.address)
    try:
        dbus = dict(iface="org.freedesktop.DBus", path="/org/freedesktop/DBus")
        p.name = "org.freedesktop.DBus"
        for n in p.call("ListNames", **dbus)[0]:
            if n.startswith(":") and n != p.unique_name:
                try:
                    if p.call("GetConnectionUnixProcessID", "s", n, **dbus)[0] == pid:
                        return n
                except RemoteError:
                    pass
    finally:
        p.close()
    return None


class Ordoctl(DBusTest):
    ordod_args = ("--max-writer-timeout-ms", "20000")

    def start_trace(self, *args):
        p = spawn([ORDOCTL, "--address", self.env.address, "trace", *args], stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
        self.addCleanup(stop, p)
        c = self.env.peer()
        deadline = time.monotonic() + 10
        while c.stats()["trace-subscribers"] < 1:
            self.assertLess(time.monotonic(), deadline, "ordoctl trace did not subscribe")
            time.sleep(0.02)
        return p

    def test_trace_text_blocks_and_forged_signals_ignored(self):
        w = WriterPeer(self.env.address)
        self.addCleanup(w.close)
        w.add("norm", ["t.name"], ["t.name"], lambda p, txn, ch, vals: ({"t.name": ("s", vals["t.name"][1].lower())}
                                                                        if vals["t.name"][1] != vals["t.name"][1].lower() else {}, [], []),
              {"priority": ("i", 0)})
        w.start()
        v = self.env.peer()
        v.register("view", ["t.**"])
        p = self.start_trace("t.**", "--count", "2")
        # A Trace forged by another peer is not printed.
        target = unique_name_of(self.env, p.pid)
        self.assertIsNotNone(target)
        forger = self.env.peer()
        sig = new_signal(DBusAddress(PATH, interface=IFACE), "Trace", "tbasaa{sv}t",
                         (999, True, ["t.forged"], [], 1))
        sig.header.fields[HeaderFields.destination] = target
        forger.conn.send(sig)
        c = self.env.peer()
        self.assertEqual(c.commit({"t.name": ("s", "Hello")}), 1)
        self.assertEqual(c.commit({"t.other": ("x", 1)}), 2)
        self.assertEqual(p.wait(timeout=10), 0, p.stderr.read().decode())
        text = p.stdout.read().decode()
        blocks = [b for b in text.split("\n\n") if b.strip()]
        self.assertEqual(len(blocks), 2, text)
        self.assertNotIn("999", text)
        self.assertNotIn("forged", text)
        first = blocks[0].splitlines()
        self.assertRegex(first[0], r"^txn 1 committed in [0-9.]+(ns|us|ms|s): changed t.name$")
        self.assertRegex(first[1], r"^  1\. norm +called +[0-9.]+(ns|us|ms|s)  because t.name  wrote t.name$")
        self.assertRegex(first[2], r"^  2\. view +called +[0-9.]+(ns|us|ms|s)  because t.name$")
        second = blocks[1].splitlines()
        self.assertEqual(len(second), 2, second)
        self.assertTrue(second[0].startswith("txn 2 committed"))
        self.assertRegex(second[1], r"^  1\. view +called .* because t.other$")

    def test_trace_json(self):
        v = self.env.peer()
        v.register("view", ["j.**"])
        v.register("never", ["nothing.here"])
        p = self.start_trace("--json", "--count", "1")
        c = self.env.peer()
        self.assertEqual(c.commit({"j.a": ("x", 1)}, ["j.b"]), 1)
        self.assertEqual(p.wait(timeout=10), 0)
        lines = p.stdout.read().decode().splitlines()
        self.assertEqual(len(lines), 1)
        t = json.loads(lines[0])
        self.assertEqual((t["txn"], t["committed"], sorted(t["changed"])), (1, True, ["j.a", "j.b"]))
        self.assertEqual([(s["name"], s["outcome"], sorted(s["because"])) for s in t["steps"]],
                         [("view", "called", ["j.a", "j.b"])])
        self.assertIsNone(t["steps"][0]["failure"])
        self.assertGreater(t["steps"][0]["duration_ns"], 0)

    def test_trace_validates_arguments(self):
        r = self.env.ordoctl("trace", "--bogus", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown trace option --bogus", r.stderr)
        r = self.env.ordoctl("trace", "a..b", check=False, timeout=10)
        self.assertEqual(r.returncode, 1)
        self.assertIn("InvalidKeypath", r.stderr)

    def test_why_ran_and_did_not_run(self):
        w = WriterPeer(self.env.address)
        self.addCleanup(w.close)
        w.add("norm", ["d.title"], ["d.title"], lambda p, txn, ch, vals: ({}, [], []), {"priority": ("i", 1)})
        w.start()
        v = self.env.peer()
        v.register("title-view", ["d.title", "d.sub.**"])
        c = self.env.peer()
        self.assertEqual(c.commit({"d.title": ("s", "a"), "d.sub.x": ("x", 1)}), 1)
        self.assertEqual(c.commit({"d.sub.y": ("x", 1)}), 2)
        self.assertEqual(c.commit({"d.title": ("s", "b")}), 3)
        out = self.env.ordoctl("why", "title-view").stdout
        lines = out.splitlines()
        path = {x["name"]: x["path"] for x in c.contracts()}["title-view"]
        self.assertEqual(lines[0], f'contract {path} "title-view": observer, data level 0, position 1 of 2, owner {v.unique_name}')
        self.assertIn("  calls 3, failures 0, last called in transaction 3", lines)
        self.assertIn('  ordered after: "norm" (#0, priority 1, writes d.title)', lines)
        self.assertIn("ran in the last transaction, 3:", lines)
        self.assertIn("  because d.title changed in transaction 3", lines)
        i = lines.index("its reads, last changed:")
        self.assertRegex(lines[i + 1], r"^  d\.title +transaction 3  counter 2$")
        self.assertRegex(lines[i + 2], r"^  d\.sub\.y +transaction 2  counter 1$")
        self.assertRegex(lines[i + 3], r"^  d\.sub\.x +transaction 1  counter 1$")
        # The normalizer did not run in 2 nor 3's... it ran in 3; make a pass it misses.
        self.assertEqual(c.commit({"d.sub.z": ("x", 1)}), 4)
        out = self.env.ordoctl("why", path).stdout  # by path
        self.assertIn("ran in the last transaction, 4:", out)
        self.assertIn("  because d.sub.z changed in transaction 4", out)
        out = self.env.ordoctl("why", "norm").stdout
        lines = out.splitlines()
        self.assertIn("did not run in the last transaction, 4:", lines)
        self.assertIn("  none of its reads changed in it (it changed d.sub.z)", lines)
        self.assertIn("last ran in transaction 3:", lines)
        self.assertIn("  because d.title changed in transaction 3", lines)
        self.assertTrue(lines[0].endswith(f"priority writer, priority 1, position 0 of 2, owner {w.peer.unique_name}"), lines[0])
        self.assertIn("not suspended", out)
        # Unknown and missing.
        r = self.env.ordoctl("why", "nope", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn('no contract named "nope"', r.stderr)
        r = self.env.ordoctl("why", check=False)
        self.assertEqual(r.returncode, 2)

    def test_why_never_ran(self):
        v = self.env.peer()
        v.register("idle", ["i.x"])
        r = self.env.ordoctl("why", "idle").stdout
        self.assertIn("did not run: no transaction has committed yet", r)
        c = self.env.peer()
        self.assertEqual(c.commit({"i.y": ("x", 1)}), 1)
        lines = self.env.ordoctl("why", "idle").stdout.splitlines()
        self.assertIn("did not run in the last transaction, 1:", lines)
        self.assertIn("  none of its reads changed in it (it changed i.y)", lines)
        self.assertIn("it has never run", lines)

    def test_lint(self):
        peer = self.env.peer()
        r = self.env.ordoctl("lint")
        self.assertEqual((r.returncode, r.stdout), (0, ""))
        peer.register("norm", ["playlist.**"], ["playlist.x"], {"priority": ("i", -3)})
        peer.register("coord", ["app.go"], ["playlist.*"], {"priority": ("i", -2)})
        r = self.env.ordoctl("lint", check=False)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn('contract "coord" may write "playlist.x" (its write pattern "playlist.*"), which contract "norm"', r.stdout)
        r = self.env.ordoctl("lint", "--json", check=False)
        self.assertIn('"earlier":"norm"', r.stdout)
        self.assertIn('"later":"coord"', r.stdout)
        r = self.env.ordoctl("lint", "extra", check=False)
        self.assertEqual(r.returncode, 2)

    def test_graph_svg_and_png(self):
        w = WriterPeer(self.env.address)
        self.addCleanup(w.close)
        w.add("normalize-name", ["g.name"], ["g.name"], lambda *a: ({}, [], []), {"priority": ("i", 0)})
        w.add("word-count", ["g.text"], ["g.words"], lambda *a: ({}, [], []))
        w.start()
        v = self.env.peer()
        v.register("title-bar", ["g.name", "g.words"])
        v.register("logger", [])
        svg = os.path.join(self.env.dir, "g.svg")
        self.env.ordoctl("graph", "--svg", svg)
        with open(svg) as f:
            text = f.read().replace("&#45;", "-")
        self.assertIn("<svg", text)
        self.assertTrue(text.rstrip().endswith("</svg>"))
        for name in ("normalize-name", "word-count", "title-bar", "logger", "g.words"):
            self.assertIn(name, text)
        # Priority, writer and observer differ in fill colour.
        for colour in ("#f6b26b", "#9fc5e8"):
            self.assertIn(colour, text)
        png = os.path.join(self.env.dir, "g.png")
        self.env.ordoctl("graph", "--png", png)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        styled = self.env.ordoctl("graph", "--styled").stdout
        self.assertIn('{ rank=same; "c:normalize-name"; }', styled)
        # No dot on PATH: a clear message, non-zero, no file.
        env = dict(os.environ, PATH="/nonexistent")
        r = subprocess.run([ORDOCTL, "--address", self.env.address, "graph", "--svg", svg + "2"], capture_output=True,
                           text=True, env=env, timeout=20)
        self.assertEqual(r.returncode, 1)
        self.assertIn("needs Graphviz's dot, which is not on PATH", r.stderr)
        self.assertFalse(os.path.exists(svg + "2"))
        r = self.env.ordoctl("graph", "--svg", check=False)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    harness.main("test_devtools")
