"""End-to-end tests of dev.ordo.Bus1 served by ordod, through independent
clients: jeepney (pure-Python D-Bus), busctl, gdbus, dbus-send, and ordoctl.

Each test starts its own private dbus-daemon and ordod and stops them.
Run: python3 Tests/DBus/test_dbus.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import json
import math
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (CHostCase, CONTRACT_PREFIX, DOC_XML, IFACE, NAME, ORDOCTL, ORDOD, PATH, Env, Monitor, Peer,  # noqa: E402
                     RemoteError, read_line, spawn, stop)

INVALID_ARGS = "org.freedesktop.DBus.Error.InvalidArgs"


def E(name):
    return "dev.ordo.Error." + name


class DBusTest(unittest.TestCase):
    ordod_args = ()
    max_outgoing = 64 << 20

    def setUp(self):
        self.env = Env(self.ordod_args, max_outgoing=self.max_outgoing)
        self.addCleanup(self._finish)

    def _finish(self):
        alive = self.env.alive()
        rc = self.env.close()
        self.assertTrue(alive, "ordod died during the test:\n" + self.env_log_tail())
        self.assertEqual(rc, 0, "ordod did not exit cleanly on SIGTERM")

    def env_log_tail(self):
        try:
            return self.env.log()[-3000:]
        except OSError:
            return ""

    def assertRemoteError(self, name, fn, *args, contains=None, **kw):
        with self.assertRaises(RemoteError) as cm:
            fn(*args, **kw)
        self.assertEqual(cm.exception.name, name, cm.exception.message)
        self.assertTrue(cm.exception.message, "an error reply must carry a message")
        if contains:
            self.assertIn(contains, cm.exception.message)
        return cm.exception


class Basics(DBusTest):
    def test_introspect_equals_shipped_xml(self):
        p = self.env.peer()
        xml = p.call("Introspect", iface="org.freedesktop.DBus.Introspectable")[0]
        with open(DOC_XML) as f:
            self.assertEqual(xml, f.read())
        # Parents of the object answer with their child node (busctl tree).
        root = p.call("Introspect", iface="org.freedesktop.DBus.Introspectable", path="/")[0]
        self.assertIn('<node name="dev"/>', root)
        tree = self.env.tool("busctl", "--user", "tree", NAME).stdout
        self.assertIn("/dev/ordo/Bus", tree)

    def test_properties(self):
        p = self.env.peer()
        self.assertEqual(p.call("Get", "ss", IFACE, "Transaction", iface="org.freedesktop.DBus.Properties")[0], ("t", 0))
        p.commit({"a": ("x", 1)})
        self.assertEqual(p.call("Get", "ss", IFACE, "Transaction", iface="org.freedesktop.DBus.Properties")[0], ("t", 1))
        allp = p.call("GetAll", "s", IFACE, iface="org.freedesktop.DBus.Properties")[0]
        self.assertEqual(allp["Transaction"], ("t", 1))
        self.assertEqual(allp["Version"][0], "s")
        self.assertRegex(allp["Version"][1], r"^\d+\.\d+\.\d+")
        self.assertRemoteError("org.freedesktop.DBus.Error.PropertyReadOnly", p.call, "Set", "ssv", IFACE,
                               "Transaction", ("t", 5), iface="org.freedesktop.DBus.Properties")
        self.assertRemoteError("org.freedesktop.DBus.Error.UnknownProperty", p.call, "Get", "ss", IFACE, "Nope",
                               iface="org.freedesktop.DBus.Properties")
        # Set of what does not exist gets the error Get gives for it.
        self.assertRemoteError("org.freedesktop.DBus.Error.UnknownProperty", p.call, "Set", "ssv", IFACE, "Nope",
                               ("t", 5), iface="org.freedesktop.DBus.Properties")
        self.assertRemoteError("org.freedesktop.DBus.Error.UnknownInterface", p.call, "Set", "ssv",
                               "org.example.None", "Transaction", ("t", 5), iface="org.freedesktop.DBus.Properties")
        out = self.env.tool("busctl", "--user", "get-property", NAME, PATH, IFACE, "Transaction").stdout
        self.assertEqual(out.strip(), "t 1")

    def test_values_roundtrip_in_get_snapshot_and_notify(self):
        w, r = self.env.peer(), self.env.peer()
        c = r.register("all", ["v.**"])
        values = {
            "v.b": ("b", True), "v.x": ("x", -(2 ** 63)), "v.xmax": ("x", 2 ** 63 - 1), "v.d": ("d", 0.5),
            "v.negzero": ("d", -0.0), "v.s": ("s", "héllo ✓"), "v.empty": ("s", ""),
            "v.ay": ("ay", bytes([0, 1, 255])), "v.noay": ("ay", b""),
        }
        txn = w.commit(values)
        self.assertEqual(txn, 1)
        path, ntxn, changed, nvalues = r.next_notify()
        self.assertEqual((path, ntxn), (c, 1))
        self.assertEqual(sorted(changed), sorted(values))
        self.assertEqual(nvalues, values)
        self.assertEqual(struct.pack("<d", nvalues["v.negzero"][1]), struct.pack("<d", -0.0))
        for k, v in values.items():
            sig, val, counter = w.get(k)
            self.assertEqual(((sig, val), counter), (v, 1))
        vals, counters, stxn = w.snapshot(["v.**"])
        self.assertEqual((vals, stxn), (values, 1))
        self.assertEqual(counters, {k: 1 for k in values})
        # NaN round-trips bit for bit enough to stay NaN.
        w.commit({"v.d": ("d", float("nan"))})
        _, _, _, nv = r.next_notify()
        self.assertTrue(math.isnan(nv["v.d"][1]))

    def test_counters_remove_touch_and_remove_tree(self):
        w, r = self.env.peer(), self.env.peer()
        c = r.register("obs", ["doc.**"])
        self.assertEqual(w.commit({"doc.a": ("x", 1), "doc.b.c": ("s", "x"), "other": ("b", True)}), 1)
        self.assertEqual(r.next_notify()[:3], (c, 1, ["doc.a", "doc.b.c"]))
        # Equal value: no change, no id, no Notify.
        self.assertEqual(w.commit({"doc.a": ("x", 1)}), 0)
        r.no_notify()
        self.assertEqual(w.commit(touch=["doc.t"]), 2)
        self.assertEqual(r.next_notify()[:4], (c, 2, ["doc.t"], {}))
        self.assertEqual(w.commit(remove=["doc.a"]), 3)
        self.assertEqual(r.next_notify()[:4], (c, 3, ["doc.a"], {}))
        self.assertRemoteError(E("NotFound"), w.get, "doc.a")
        self.assertEqual(w.commit(remove=["doc.**"]), 4)
        self.assertEqual(r.next_notify()[:3], (c, 4, ["doc"]))
        vals, counters, txn = w.snapshot(["**"])
        self.assertEqual(vals, {"other": ("b", True)})
        self.assertEqual(counters, {"doc.a": 2, "doc.b.c": 2, "doc.t": 1, "other": 1})
        self.assertEqual(txn, 4)
        # Removing what is not there changes nothing.
        self.assertEqual(w.commit(remove=["doc.a", "nothing.**"]), 0)

    def test_remove_tree_of_a_value_less_keypath(self):
        """SPEC §2: removeTree(k) of a k that holds no value does
        not notify an exact reader of k; readers of the removed values (and
        of k.**) are notified with k as written."""
        w, r = self.env.peer(), self.env.peer()
        exact = r.register("exact", ["t"])
        child = r.register("child", ["t.a"])
        empty = r.register("empty-child", ["t.never"])
        tree = r.register("tree", ["t.**"])
        self.assertEqual(w.commit({"t.a": ("x", 1)}), 1)
        first = {n[0]: n[2] for n in r.notifies(2)}
        self.assertEqual(first, {child: ["t.a"], tree: ["t.a"]})
        self.assertEqual(w.commit(remove=["t.**"]), 2)
        second = {n[0]: (n[1], n[2]) for n in r.notifies(2)}
        self.assertEqual(second, {child: (2, ["t"]), tree: (2, ["t"])})
        r.no_notify()
        self.assertNotIn(exact, second)
        self.assertNotIn(empty, second)

    def test_commit_is_atomic(self):
        p = self.env.peer()
        e = self.assertRemoteError(E("InvalidKeypath"), p.commit, {"ok": ("x", 1), "bad key": ("x", 2)})
        self.assertIn("bad key", e.message)
        self.assertRemoteError(E("NotFound"), p.get, "ok")
        self.assertEqual(p.stats()["transactions"], 0)
        self.assertRemoteError(E("InvalidKeypath"), p.commit, {"a": ("x", 1)}, touch=["a.*"])
        self.assertRemoteError(E("NotFound"), p.get, "a")


class Ordering(DBusTest):
    def test_one_peer_priority_then_data_then_every_transaction(self):
        p, w = self.env.peer(), self.env.peer()
        names = {}
        # Registered out of order on purpose.
        names[p.register("data1", ["k.*"])] = "data1"
        names[p.register("every", [])] = "every"
        names[p.register("view2", ["k.a"], options={"priority": ("i", 2)})] = "view2"
        names[p.register("norm", ["k.**"], options={"priority": ("i", -3)})] = "norm"
        names[p.register("data2", ["k.a", "k.b"])] = "data2"
        names[p.register("view1", ["k.b"], options={"priority": ("i", 1)})] = "view1"
        names[p.register("computed", ["k.a"], options={"priority": ("i", -1)})] = "computed"
        names[p.register("unrelated", ["z"])] = "unrelated"
        order = ["norm", "computed", "view1", "view2", "data1", "data2", "every"]
        self.assertEqual([c["name"] for c in w.contracts() if c["name"] in order], order)
        for i in range(1, 4):
            self.assertEqual(w.commit({"k.a": ("x", i), "k.b": ("x", i)}), i)
            got = p.notifies(len(order))
            self.assertEqual([names[n[0]] for n in got], order)
            self.assertTrue(all(n[1] == i for n in got))
            p.no_notify(0.2)  # at most one per contract per transaction
        self.assertEqual(got[-1][2], ["k.a", "k.b"])  # every-transaction: all changed keypaths

    @harness.bus_only("a monitor sees the order of Notify signals")
    def test_several_peers_follow_pass_order(self):
        a, b, c, w = self.env.peer(), self.env.peer(), self.env.peer(), self.env.peer()
        mon = Monitor(self.env.address)
        self.addCleanup(mon.close)
        regs = [
            (b, "b-data", ["x"], {}), (a, "a-prio2", ["x"], {"priority": ("i", 2)}), (c, "c-every", [], {}),
            (c, "c-data", ["x.**"], {}), (a, "a-data", ["x"], {}), (b, "b-prio-2", ["x"], {"priority": ("i", -2)}),
            (c, "c-prio2", ["x"], {"priority": ("i", 2)}),
        ]
        paths = {}
        for peer, name, reads, opts in regs:
            paths[peer.register(name, reads, options=opts)] = (peer, name)
        expected = ["b-prio-2", "a-prio2", "c-prio2", "b-data", "c-data", "a-data", "c-every"]
        self.assertEqual([x["name"] for x in w.contracts()], expected)
        self.assertEqual(w.commit({"x": ("s", "v")}), 1)
        seen = mon.notifies(len(expected))
        self.assertEqual([paths[body[0]][1] for _, body in seen], expected)
        for dest, body in seen:
            self.assertEqual(dest, paths[body[0]][0].unique_name)  # unicast to the owner
        # Each peer gets exactly its own, in pass order.
        for peer in (a, b, c):
            mine = [n for n in expected if any(v == (peer, n) for v in paths.values())]
            got = peer.notifies(len(mine))
            self.assertEqual([paths[g[0]][1] for g in got], mine)
            peer.no_notify(0.2)
        w.no_notify(0.1)

    def test_notify_initial_after_register_reply(self):
        w, r = self.env.peer(), self.env.peer()
        w.commit({"a": ("x", 7)})
        w.commit({"a": ("x", 8)})
        path = r.register("init", ["a"], options={"notify-initial": ("b", True)})
        self.assertEqual(r.next_notify(), (path, 2, [], {}))
        path2 = r.register("no-init", ["a"], options={"notify-initial": ("b", False)})
        r.no_notify()
        w.commit({"a": ("x", 9)})
        got = r.notifies(2)
        self.assertEqual([g[0] for g in got], [path, path2])
        self.assertEqual(got[0][3], {"a": ("x", 9)})

    def test_unregister_stops_notify(self):
        w, r = self.env.peer(), self.env.peer()
        path = r.register("o", ["a"])
        self.assertTrue(path.startswith(CONTRACT_PREFIX) and path[len(CONTRACT_PREFIX):].isdigit(), path)
        # Only the path handed out names the contract: no leading zeros.
        alias = CONTRACT_PREFIX + "000" + path[len(CONTRACT_PREFIX):]
        self.assertRemoteError(E("NotFound"), r.unregister, alias)
        r.unregister(path)
        w.commit({"a": ("x", 1)})
        r.no_notify()
        self.assertRemoteError(E("NotFound"), r.unregister, path)
        # The name is free again.
        r.register("o", ["a"])


class CacheOption(DBusTest):
    """Register's option "cache": each Notify carries what a client-side
    cache of the read set needs (docs/dbus.md, "Consistent reads")."""
    ordod_args = ("--max-message-bytes", "2000")
    CACHE = {"cache": ("b", True)}

    def test_notify_carries_the_read_set_under_each_change(self):
        w, r = self.env.peer(), self.env.peer()
        w.commit({"doc.title": ("s", "T"), "doc.items.1.name": ("s", "a"), "doc.items.2.name": ("s", "b"),
                  "doc.items.2.size": ("x", 3), "doc": ("x", 0), "other": ("x", 1)})
        path = r.register("c", ["doc.title", "doc.items.*.name"], options=self.CACHE)
        # Initial call (implied): every value of the read set, nothing else.
        self.assertEqual(r.next_notify(), (path, 1, [], {
            "doc.items.1.name": ("s", "a"), "doc.items.2.name": ("s", "b"), "doc.title": ("s", "T")}))
        self.assertEqual(w.commit({"doc.items.1.name": ("s", "c")}), 2)
        self.assertEqual(r.next_notify(), (path, 2, ["doc.items.1.name"], {"doc.items.1.name": ("s", "c")}))
        # A tree removed: its keypath, and what is left of the read set under it (nothing).
        self.assertEqual(w.commit(remove=["doc.items.2.**"]), 3)
        self.assertEqual(r.next_notify(), (path, 3, ["doc.items.2"], {}))
        # An ancestor touched, set or removed: the read set under it, not the ancestor's value.
        self.assertEqual(w.commit(touch=["doc.items"]), 4)
        self.assertEqual(r.next_notify(), (path, 4, ["doc.items"], {"doc.items.1.name": ("s", "c")}))
        self.assertEqual(w.commit({"doc": ("x", 1)}), 5)
        self.assertEqual(r.next_notify(), (path, 5, ["doc"], {"doc.items.1.name": ("s", "c"), "doc.title": ("s", "T")}))
        self.assertEqual(w.commit(remove=["doc.title"]), 6)
        self.assertEqual(r.next_notify(), (path, 6, ["doc.title"], {}))
        # Without the option, the same write carries the changed keypath's own value.
        plain = r.register("plain", ["doc.title", "doc.items.*.name"])
        self.assertEqual(w.commit({"doc": ("x", 2)}), 7)
        got = {n[0]: n for n in r.notifies(2)}
        self.assertEqual(got[path], (path, 7, ["doc"], {"doc.items.1.name": ("s", "c")}))
        self.assertEqual(got[plain], (plain, 7, ["doc"], {"doc": ("x", 2)}))
        self.assertIs([c for c in w.contracts() if c["name"] == "c"][0]["cache"], True)
        self.assertNotIn("cache", [c for c in w.contracts() if c["name"] == "plain"][0])
        lines = self.env.ordoctl("contracts").stdout.splitlines()
        self.assertEqual([("cache=true" in line) for line in lines], [True, False], lines)

    def test_too_large_is_marked(self):
        w, r = self.env.peer(), self.env.peer()
        big = "x" * 700
        for i in range(4):  # one value a Commit: a direct peer's messages obey max-message-bytes too
            w.commit({f"m.{i}": ("s", big)})
        path = r.register("c", ["m.*"], options=self.CACHE)
        # The initial read set does not fit in 2000 bytes: "**", no values.
        self.assertEqual(r.next_notify(), (path, 4, ["**"], {}))
        self.assertEqual(w.commit({"m.0": ("s", "small")}), 5)
        self.assertEqual(r.next_notify(), (path, 5, ["m.0"], {"m.0": ("s", "small")}))
        # The whole read set under a touched ancestor does not fit either.
        self.assertEqual(w.commit(touch=["m"]), 6)
        self.assertEqual(r.next_notify(), (path, 6, ["**"], {}))
        self.assertEqual(w.stats()["notify-truncated"], 2)

    def test_refused_without_a_read_set(self):
        r = self.env.peer()
        e = self.assertRemoteError(E("InvalidArgument"), r.register, "every", [], options=self.CACHE)
        self.assertIn('"cache"', e.message)
        self.assertRemoteError(INVALID_ARGS, r.register, "typed", ["a"], options={"cache": ("i", 1)})
        self.assertEqual([c["name"] for c in r.contracts()], [])


class Errors(DBusTest):
    ordod_args = ("--max-contracts-per-peer", "20", "--max-keypaths-per-call", "100", "--max-value-bytes", "1000")

    def test_every_error_name(self):
        p, q = self.env.peer(), self.env.peer()
        # InvalidKeypath: a pattern and a keypath.
        e = self.assertRemoteError(E("InvalidKeypath"), p.register, "bad", ["a..b"])
        self.assertIn("a..b", e.message)
        self.assertRemoteError(E("InvalidKeypath"), p.get, "a.*")
        self.assertRemoteError(E("InvalidKeypath"), p.snapshot, ["**.a"])
        # NotFound.
        self.assertRemoteError(E("NotFound"), p.get, "missing", contains="missing")
        self.assertRemoteError(E("NotFound"), p.unregister, CONTRACT_PREFIX + "999")
        self.assertRemoteError(E("NotFound"), p.unregister, "/some/other/path")
        # DuplicateName across peers.
        p.register("same", ["a"])
        self.assertRemoteError(E("DuplicateName"), q.register, "same", ["b"], contains="same")
        # InvalidArgument: empty name; an every-transaction contract that writes.
        self.assertRemoteError(E("InvalidArgument"), p.register, "", ["a"])
        e = self.assertRemoteError(E("InvalidArgument"), p.register, "writer", [], ["b"])
        self.assertIn("every-transaction", e.message)
        # AccessDenied.
        path = p.register("mine", ["a"])
        self.assertRemoteError(E("AccessDenied"), q.unregister, path, contains=p.unique_name)
        self.assertRemoteError(E("AccessDenied"), q.call, "Complete", "ota{sv}asas", path, 1, {}, [], [])
        # Complete on an observer.
        self.assertRemoteError(E("InvalidArgument"), p.call, "Complete", "ota{sv}asas", path, 1, {}, [], [])
        # Limit: keypaths per call, value size, contracts per peer.
        self.assertRemoteError(E("Limit"), p.commit, touch=[f"k{i}" for i in range(101)], contains="max-keypaths-per-call")
        self.assertRemoteError(E("Limit"), p.commit, {f"s{i}": ("x", i) for i in range(60)},
                               remove=[f"k{i}" for i in range(41)],
                               contains="more than 100 entries in set, touch and remove together")
        self.assertRemoteError(E("Limit"), p.snapshot, [f"k{i}" for i in range(101)])
        self.assertRemoteError(E("Limit"), p.register, "big", [f"k{i}" for i in range(101)])
        self.assertRemoteError(E("Limit"), p.commit, {"s": ("s", "x" * 1001)}, contains="max-value-bytes")
        self.assertRemoteError(E("Limit"), p.commit, {"s": ("ay", b"x" * 1001)})
        for i in range(18):
            p.register(f"n{i}", ["a"])
        self.assertRemoteError(E("Limit"), p.register, "one-too-many", ["a"], contains="max-contracts-per-peer")
        q.register("q-still-can", ["a"])  # another peer is not affected
        self.assertEqual(p.stats()["transactions"], 0)
        # Standard errors for unknown things.
        self.assertRemoteError("org.freedesktop.DBus.Error.UnknownMethod", p.call, "Nope")
        self.assertRemoteError("org.freedesktop.DBus.Error.UnknownObject", p.call, "Get", "s", "a", path="/x")

    def test_wrong_signatures_and_types(self):
        p = self.env.peer()
        cases = [
            ("Register", "ss", ("a", "b")),
            ("Register", "sasas", ("a", ["x"], [])),
            ("Unregister", "s", (CONTRACT_PREFIX + "1",)),
            ("Commit", "a{ss}asas", ({"a": "b"}, [], [])),
            ("Commit", "", ()),
            ("Get", "i", (5,)),
            ("Get", "ss", ("a", "b")),
            ("Snapshot", "s", ("**",)),
            ("Contracts", "s", ("x",)),
            ("Graph", "i", (1,)),
            ("Stats", "b", (True,)),
            ("Complete", "o", ("/dev/ordo/Bus/contract/1",)),
        ]
        for member, sig, args in cases:
            e = self.assertRemoteError(INVALID_ARGS, p.call, member, sig, *args)
            self.assertIn(member, e.message)
        # Values of other types, nested variants.
        for sig, val in [("i", 5), ("u", 5), ("t", 5), ("y", 5), ("n", 5), ("q", 5), ("o", "/a"), ("g", "s"),
                         ("as", ["a"]), ("v", ("x", 5)), ("a{sv}", {"a": ("x", 1)}), ("(xx)", (1, 2)), ("ai", [1])]:
            e = self.assertRemoteError(INVALID_ARGS, p.commit, {"k": (sig, val)})
            self.assertIn("k", e.message)
        # Options of the wrong type, unknown options.
        self.assertRemoteError(INVALID_ARGS, p.register, "o1", ["a"], options={"priority": ("x", 1)}, contains="priority")
        self.assertRemoteError(INVALID_ARGS, p.register, "o2", ["a"], options={"notify-initial": ("i", 1)})
        self.assertRemoteError(INVALID_ARGS, p.register, "o3", ["a"], options={"timeout-ms": ("i", 1)})
        self.assertRemoteError(INVALID_ARGS, p.register, "o4", ["a"], options={"colour": ("s", "red")}, contains="colour")
        self.assertRemoteError(INVALID_ARGS, p.register, "o5", ["a"], [], [("notify-initial", ("b", False))] * 2,
                               contains='option "notify-initial" is given twice')
        self.assertEqual(p.contracts(), [])
        self.assertEqual(p.stats()["transactions"], 0)
        # Still serving.
        self.assertEqual(p.commit({"a": ("x", 1)}), 1)


class Peers(DBusTest):
    def test_disconnect_removes_contracts(self):
        a, b, w = self.env.peer(), self.env.peer(), self.env.peer()
        for i in range(3):
            a.register(f"a{i}", ["k"])
        kept = b.register("b0", ["k"])
        self.assertEqual(len(w.contracts()), 4)
        a.close()
        deadline = time.monotonic() + 5
        while len(w.contracts()) != 1:
            self.assertLess(time.monotonic(), deadline, "the departed peer's contracts were not removed")
            time.sleep(0.02)
        self.assertEqual([c["path"] for c in w.contracts()], [kept])
        st = w.stats()
        self.assertEqual((st["peers"], st["peers-left"], st["contracts"]), (1, 1, 1))
        w.commit({"k": ("x", 1)})
        self.assertEqual(b.next_notify()[:2], (kept, 1))
        # The names are free again.
        w.register("a0", ["k"])
        self.assertIn("left the bus: removed its 3 contracts", self.env.log())

    def test_access_denied_leaves_state_alone(self):
        a, b = self.env.peer(), self.env.peer()
        path = a.register("a", ["k"])
        self.assertRemoteError(E("AccessDenied"), b.unregister, path)
        self.assertEqual([c["path"] for c in b.contracts()], [path])
        self.assertEqual(b.contracts()[0]["owner"], a.unique_name)
        a.unregister(path)
        self.assertEqual(b.contracts(), [])

    def test_contracts_graph_stats(self):
        a, w = self.env.peer(), self.env.peer()
        pa = a.register("view", ["doc.title"], options={"priority": ("i", 1)})
        pb = a.register("content", ["doc.*"])
        w.commit({"doc.title": ("s", "x")})
        a.notifies(2)
        cs = w.call("Contracts")[0]
        self.assertEqual(cs[0]["path"], ("o", pa))
        self.assertEqual(cs[0]["name"], ("s", "view"))
        self.assertEqual(cs[0]["owner"], ("s", a.unique_name))
        self.assertEqual(cs[0]["reads"], ("as", ["doc.title"]))
        self.assertEqual(cs[0]["writes"], ("as", []))
        self.assertEqual(cs[0]["priority"], ("i", 1))
        self.assertEqual(cs[0]["level"], ("u", 0))
        self.assertEqual(cs[0]["calls"], ("t", 1))
        self.assertNotIn("priority", cs[1])
        self.assertEqual(cs[1]["path"], ("o", pb))
        dot = w.call("Graph")[0]
        self.assertTrue(dot.startswith("digraph"))
        self.assertIn('"c:view"', dot)
        self.assertIn('"k:doc.*" -> "c:content"', dot)
        st = w.stats()
        for k in ("contracts", "peers", "transactions", "notifications", "failures", "timeouts"):
            self.assertIn(k, st)
        self.assertEqual((st["contracts"], st["peers"], st["transactions"], st["notifications"]), (2, 1, 1, 2))


class Burst(DBusTest):
    N = 5000

    def test_burst_of_commits_no_notify_lost_or_duplicated(self):
        w, r1, r2 = self.env.peer(), self.env.peer(), self.env.peer()
        c1 = r1.register("burst-prio", ["burst.**"], options={"priority": ("i", 1)})
        c2 = r2.register("burst-data", ["burst.*"])
        N = self.N
        cpu0 = self.ordod_cpu()
        got = {1: [], 2: []}
        errors = []

        def reader(peer, key):
            try:
                got[key].extend(peer.notifies(N, timeout=120))
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(r1, 1)), threading.Thread(target=reader, args=(r2, 2))]
        for t in threads:
            t.start()
        start = time.monotonic()
        # Pipelined commits: a window of outstanding calls.
        window, sent, replies = 64, 0, {}
        serials = {}
        from jeepney import HeaderFields, MessageType
        while len(replies) < N:
            while sent < N and sent - len(replies) < window:
                i = sent + 1
                msg = w.message("Commit", "a{sv}asas", ({f"burst.k{i % 7}": ("x", i)}, [], []))
                serial = next(w.conn.outgoing_serial)
                serials[serial] = i
                w.conn.send(msg, serial=serial)
                sent += 1
            m = w.conn.receive(timeout=30)
            rs = m.header.fields.get(HeaderFields.reply_serial)
            if rs in serials:
                self.assertNotEqual(m.header.message_type, MessageType.error, m.body)
                replies[serials.pop(rs)] = m.body[0]
        commit_time = time.monotonic() - start
        for t in threads:
            t.join(timeout=150)
            self.assertFalse(t.is_alive(), "reader thread hung")
        total = time.monotonic() - start
        self.assertEqual(errors, [])
        self.assertEqual(sorted(replies.values()), list(range(1, N + 1)))
        for key, path in ((1, c1), (2, c2)):
            notes = got[key]
            self.assertEqual([n[1] for n in notes], list(range(1, N + 1)))  # none lost, none duplicated, in order
            self.assertTrue(all(n[0] == path for n in notes))
            for n in notes:
                i = n[1]  # txn i carries commit i (one writer, serialized)
                self.assertEqual(n[2], [f"burst.k{i % 7}"])
                self.assertEqual(n[3], {f"burst.k{i % 7}": ("x", i)})
        r1.no_notify(0.2)
        st = w.stats()
        self.assertEqual(st["notify-dropped"], 0)
        self.assertEqual(st["notify-sent"], 2 * N)
        cpu = self.ordod_cpu() - cpu0
        print(f"\n  burst: {N} commits in {commit_time:.2f}s ({N / commit_time:.0f} commits/s); "
              f"{2 * N} Notify received by 2 jeepney peers in {total:.2f}s ({2 * N / total:.0f} Notify/s); "
              f"ordod CPU {cpu:.2f}s ({cpu / N * 1e6:.0f} us per commit with 2 Notify)",
              file=sys.stderr)

    def ordod_cpu(self):
        with open(f"/proc/{self.env.ordod.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Hostile(DBusTest):
    ordod_args = ("--max-contracts-per-peer", "256")
    max_outgoing = 2 << 20

    def test_ten_thousand_contracts_from_one_peer(self):
        h, other = self.env.peer(), self.env.peer()
        from jeepney import HeaderFields, MessageType
        serials = {}
        ok, limited = 0, 0
        pending = 0
        for i in range(10000):
            serial = next(h.conn.outgoing_serial)
            serials[serial] = i
            h.conn.send(h.message("Register", "sasasa{sv}", (f"h{i}", ["a"], [], {})), serial=serial)
            pending += 1
            while pending > 200 or (i == 9999 and pending > 0):
                m = h.conn.receive(timeout=30)
                if m.header.fields.get(HeaderFields.reply_serial) in serials:
                    pending -= 1
                    if m.header.message_type == MessageType.error:
                        self.assertEqual(m.header.fields.get(HeaderFields.error_name), E("Limit"))
                        limited += 1
                    else:
                        ok += 1
        self.assertEqual((ok, limited), (256, 10000 - 256))
        path = other.register("other", ["a"])
        h.commit({"a": ("x", 1)})
        self.assertEqual(other.next_notify()[:2], (path, 1))
        h.close()
        deadline = time.monotonic() + 10
        while len(other.contracts()) != 1:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)

    def test_peer_that_never_reads(self):
        # A peer registers on everything and never reads its socket; the
        # daemon's queue for it (4 MiB here) fills up and overflows.
        stalled, w, r = self.env.peer(), self.env.peer(), self.env.peer()
        stalled.register("stalled", ["**"])
        big = "x" * 200_000  # max-value-bytes default is 1 MiB
        t0 = time.monotonic()
        for i in range(40):
            self.assertEqual(w.commit({"big": ("s", big + str(i))}), i + 1)
        # The service still answers promptly and others are served.
        path = r.register("late", ["small"])
        sig, val, counter = w.get("big")
        self.assertEqual((val[-2:], counter), ("39", 40))
        w.commit({"small": ("x", 1)})
        self.assertEqual(r.next_notify()[:2], (path, 41))
        self.assertLess(time.monotonic() - t0, 60)

    def test_invalid_utf8_and_garbage(self):
        bad, good = self.env.peer(), self.env.peer()
        path = good.register("good", ["a"])
        msg = bad.message("Get", "s", ("AAAAAAAA",))
        from jeepney import HeaderFields
        data = msg.serialise(serial=next(bad.conn.outgoing_serial))
        self.assertIn(b"AAAAAAAA", data)
        bad.conn.sock.sendall(data.replace(b"AAAAAAAA", b"\xff\xfeA\xc3(AAA"))
        # The daemon rejects the message (and drops that connection); if it
        # ever reached the service it would get InvalidArgs. Either way the
        # service goes on and the other peer is untouched.
        try:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                m = bad.conn.receive(timeout=deadline - time.monotonic())
                if m.header.message_type.name == "error":
                    self.assertEqual(m.header.fields.get(HeaderFields.error_name), INVALID_ARGS)
                    break
        except (ConnectionError, OSError, TimeoutError, EOFError):
            pass
        good.commit({"a": ("x", 1)})
        self.assertEqual(good.next_notify()[:2], (path, 1))
        self.assertEqual([c["path"] for c in good.contracts()], [path])
        # A string with an embedded NUL cannot be sent either; a wrong body
        # signature vs. content is rejected by libdbus before we see it.
        self.assertEqual(good.get("a")[1], 1)


class StockTools(DBusTest):
    def test_busctl_gdbus_dbus_send(self):
        env = self.env
        out = env.tool("busctl", "--user", "call", NAME, PATH, IFACE, "Commit", "a{sv}asas",
                       "2", "a.n", "x", "5", "a.s", "s", "hello", "0", "0").stdout
        self.assertEqual(out.strip(), "t 1")
        out = env.tool("busctl", "--user", "call", NAME, PATH, IFACE, "Get", "s", "a.n").stdout
        self.assertEqual(out.strip(), "vt x 5 1")
        out = env.tool("gdbus", "call", "--session", "-d", NAME, "-o", PATH, "-m", IFACE + ".Get", "a.s").stdout
        self.assertEqual(out.strip(), "(<'hello'>, uint64 1)")
        out = env.tool("gdbus", "call", "--session", "-d", NAME, "-o", PATH, "-m", IFACE + ".Commit",
                       "{'a.d': <2.5>, 'a.b': <true>}", "[]", "['a.n']").stdout
        self.assertEqual(out.strip(), "(uint64 2,)")
        out = env.tool("dbus-send", "--session", "--print-reply", "--dest=" + NAME, PATH, IFACE + ".Snapshot",
                       "array:string:a.*").stdout
        self.assertIn('string "a.d"', out)
        self.assertIn("double 2.5", out)
        self.assertIn("uint64 2", out)
        # An error through a stock tool: name and message.
        r = env.tool("busctl", "--user", "call", NAME, PATH, IFACE, "Get", "s", "a.n", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("holds no value", r.stderr)
        r = env.tool("gdbus", "call", "--session", "-d", NAME, "-o", PATH, "-m", IFACE + ".Commit",
                     "{'a.i': <int32 3>}", "[]", "[]", check=False)
        self.assertIn("org.freedesktop.DBus.Error.InvalidArgs", r.stderr)
        r = env.tool("dbus-send", "--session", "--print-reply", "--dest=" + NAME, PATH, IFACE + ".Unregister",
                     "objpath:/dev/ordo/Bus/contract/77", check=False)
        self.assertIn("dev.ordo.Error.NotFound", r.stderr)
        # gdbus registers; its connection closes at once, so the contract goes.
        out = env.tool("gdbus", "call", "--session", "-d", NAME, "-o", PATH, "-m", IFACE + ".Register",
                       "short", "['a.*']", "[]", "{'priority': <int32 1>}").stdout
        self.assertRegex(out.strip(), r"^\(objectpath '/dev/ordo/Bus/contract/\d+',\)$")
        p = env.peer()
        deadline = time.monotonic() + 5
        while p.contracts():
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        xml = env.tool("gdbus", "introspect", "--session", "-d", NAME, "-o", PATH, "--xml").stdout
        self.assertIn('<method name="Register">', xml)


class Ordoctl(DBusTest):
    def test_set_get_watch_snapshot(self):
        env = self.env
        watch = spawn([ORDOCTL, "--address", env.address, "watch", "doc.**", "--json", "--count", "3"],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        text = spawn([ORDOCTL, "--address", env.address, "watch", "doc.title", "--priority", "1", "--initial"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            p = env.peer()
            deadline = time.monotonic() + 10
            while len(p.contracts()) < 2:
                self.assertLess(time.monotonic(), deadline, "ordoctl watch did not register")
                time.sleep(0.02)
            self.assertEqual(read_line(text.stdout, 5, "initial line"), "txn=0")
            r = env.ordoctl("set", "doc.title=s:Songs: a list", "doc.n=5", "doc.r=0.25", "doc.on=b:true",
                            "doc.raw=ay:00ff", "doc.plain=hello")
            self.assertEqual(r.stdout.strip(), "1")
            self.assertEqual(env.ordoctl("get", "doc.title").stdout, "string:Songs: a list\n")
            self.assertEqual(env.ordoctl("get", "doc.n", "doc.r", "doc.on", "doc.raw", "doc.plain").stdout,
                             "doc.n=int64:5\ndoc.r=double:0.25\ndoc.on=bool:true\ndoc.raw=bytes:00ff\n"
                             "doc.plain=string:hello\n")
            self.assertEqual(env.ordoctl("touch", "doc.n").stdout.strip(), "2")
            self.assertEqual(env.ordoctl("rm", "doc.**").stdout.strip(), "3")
            lines = [json.loads(read_line(watch.stdout, 10, "watch line")) for _ in range(3)]
            self.assertEqual([l["txn"] for l in lines], [1, 2, 3])
            self.assertEqual(lines[0]["values"]["doc.n"], {"type": "int64", "value": 5})
            self.assertEqual(lines[0]["values"]["doc.raw"], {"type": "bytes", "value": "00ff"})
            self.assertEqual(lines[0]["values"]["doc.title"], {"type": "string", "value": "Songs: a list"})
            self.assertEqual(lines[1]["changed"], ["doc.n"])
            self.assertEqual(lines[2], {"contract": lines[2]["contract"], "txn": 3, "changed": ["doc"], "values": {}})
            self.assertEqual(watch.wait(timeout=10), 0)  # --count 3
            self.assertEqual(read_line(text.stdout, 5, "text line"), 'txn=1 doc.title=string:"Songs: a list"')
            self.assertEqual(read_line(text.stdout, 5, "text line"), "txn=3 doc")
            self.assertEqual(stop(text, signal.SIGINT), 0)
            snap = env.ordoctl("snapshot").stdout.splitlines()
            self.assertIn("doc.n counter=3", snap)  # set, touch, removed by rm doc.**
            self.assertEqual(snap[-1], "txn=3")
            env.ordoctl("set", "x=int64:-5")
            js = json.loads(env.ordoctl("snapshot", "x", "--json").stdout)
            self.assertEqual(js, {"txn": 4, "values": {"x": {"type": "int64", "value": -5}}, "counters": {"x": 1}})
            self.assertIn("digraph", env.ordoctl("graph").stdout)
            self.assertIn("transactions=4", env.ordoctl("stats").stdout.splitlines())
            r = env.ordoctl("get", "nope", check=False)
            self.assertEqual(r.returncode, 1)
            self.assertIn("dev.ordo.Error.NotFound", r.stderr)
            r = env.ordoctl("set", "k=int64:abc", check=False)
            self.assertEqual(r.returncode, 2)
            self.assertIn("not an int64", r.stderr)
        finally:
            stop(watch, signal.SIGKILL)
            stop(text, signal.SIGKILL)

    def test_usage_errors_change_nothing(self):
        env = self.env
        env.ordoctl("set", "a=1")
        cases = [
            (("snapshot", "a", "--jsno"), "unknown snapshot option --jsno"),
            (("get", "--json", "a"), "unknown get option --json"),
            (("set", "--x=1"), "unknown set option --x=1"),
            (("touch", "--a"), "unknown touch option --a"),
            (("rm", "a", "--all"), "unknown rm option --all"),
            (("changes", "0", "--xml"), "unknown changes option --xml"),
            (("trace", "--js"), "unknown trace option --js"),
            (("watch", "a", "--priority"), "watch --priority needs a value"),
            (("watch", "a", "--count", "0"), "--count needs a positive number"),
            (("trace", "--count", "x"), "--count needs a positive number"),
            (("set", b"u.v=s:a\xffb"), "argument 4 is not valid UTF-8"),
        ]
        for args, message in cases:
            r = subprocess.run([ORDOCTL.encode(), b"--address", env.address.encode(),
                                *[a if isinstance(a, bytes) else a.encode() for a in args]],
                               capture_output=True, timeout=20)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(message, r.stderr.decode(errors="replace"), args)
        # After a lone --, an argument that starts with -- is a keypath.
        self.assertEqual(env.ordoctl("set", "--", "--x=int64:7").stdout.strip(), "2")
        self.assertEqual(env.ordoctl("get", "--", "--x").stdout, "int64:7\n")
        self.assertEqual(env.ordoctl("snapshot", "--json", "--", "--x").stdout.count('"--x"'), 2)
        self.assertEqual(env.ordoctl("rm", "--", "--x").stdout.strip(), "3")
        self.assertEqual(env.peer().call("Get", "s", "a")[0], ("x", 1))  # nothing else changed
        self.assertEqual(env.ordoctl("stats").stdout.count("transactions=3"), 1)

    def test_invalid_service_name_is_a_usage_error(self):
        # libdbus aborts the process on a message to an invalid bus name:
        # ordoctl must refuse it first.
        for name in ("", "bad name", "dev..ordo", "1abc.def"):
            r = self.env.ordoctl("--name", name, "stats", check=False)
            self.assertEqual(r.returncode, 2, (name, r.stderr))
            self.assertIn("is not a D-Bus bus name", r.stderr)

    @harness.bus_only("--name picks the service on the bus")
    def test_plain_watch_exits_when_the_service_goes_away(self):
        # A second ordod under its own name, stopped while the watch runs.
        env = self.env
        name = "org.example.Watched"
        second = env.start_ordod(name=name)
        watch = spawn([ORDOCTL, "--address", env.address, "--name", name, "watch", "doc.**"],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            peer = Peer(env.address, name=name)
            deadline = time.monotonic() + 10
            while len(peer.contracts()) < 1:
                self.assertLess(time.monotonic(), deadline, "ordoctl watch did not register")
                time.sleep(0.02)
            peer.close()
            env.ordoctl("--name", name, "set", "doc.a=1")
            self.assertEqual(read_line(watch.stdout, 5, "watch line"), "txn=1 doc.a=int64:1")
            self.assertEqual(stop(second), 0)
            self.assertEqual(watch.wait(timeout=10), 1)
            err = watch.stderr.read().decode()
            self.assertIn(f"the service {name} left the bus", err)
            self.assertIn("--resume", err)
        finally:
            stop(watch, signal.SIGKILL)
            stop(second, signal.SIGKILL)

    def test_contracts_listing(self):
        env = self.env
        p = env.peer()
        p.register("alpha", ["a.*"], options={"priority": ("i", -1)})
        out = env.ordoctl("contracts").stdout
        self.assertRegex(out, r'^/dev/ordo/Bus/contract/\d+ name="alpha" kind=priority priority=-1 owner=:\S+ reads=\[a\.\*\]')


class OrdoctlWithoutBus(unittest.TestCase):
    """ordoctl checks its command and options before it connects: with no
    bus to connect to, a usage error is still a usage error (status 2)."""

    def ordoctl(self, *args):
        env = {k: v for k, v in os.environ.items() if k not in ("DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS")}
        return subprocess.run([ORDOCTL, *args], capture_output=True, text=True, timeout=20, env=env)

    def test_unknown_command_lists_the_commands(self):
        r = self.ordoctl("frobnicate")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn('unknown command "frobnicate"', r.stderr)
        self.assertIn("commands:", r.stderr)
        self.assertIn("watch PATTERN", r.stderr)
        self.assertNotIn("bus", r.stderr.splitlines()[0])

    def test_unknown_options_and_bad_arguments(self):
        cases = [
            (("--frob", "stats"), "unknown option --frob"),
            (("stats", "--json"), "unknown stats option --json"),
            (("contracts", "--all"), "unknown contracts option --all"),
            (("get", "--json", "a"), "unknown get option --json"),
            (("watch", "a", "--jsno"), "unknown watch option --jsno"),
            (("watch", "a", "--initial", "--resume", "f"), "--initial and --resume do not go together"),
            (("set", "--merge", "extra"), "no other arguments"),
            (("set", "a"), '"a" is not KEY=VALUE'),
            (("why",), "why needs one contract"),
            (("why", "--x", "c"), "unknown why option --x"),
            (("graph", "--dot"), "unknown graph argument --dot"),
            (("trace", "--count", "0"), "--count needs a positive number"),
            ((), "no command"),
        ]
        for args, message in cases:
            r = self.ordoctl(*args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(message, r.stderr, args)

    def test_a_good_command_line_then_fails_to_connect(self):
        r = self.ordoctl("stats")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("dev.ordo.Error.Dbus", r.stderr)


class Examples(DBusTest):
    def test_python_example(self):
        example = os.path.join(os.path.dirname(DOC_XML), "..", "examples", "python", "ordo_client.py")
        r = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=60, env=self.env.env())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Notify txn=0 changed=[] values={}", r.stdout)
        self.assertIn("Notify txn=2 changed=['doc.count', 'doc.selection'] values={'doc.count': 4}", r.stdout)
        self.assertIn("as expected: dev.ordo.Error.NotFound", r.stdout)


class CHost(CHostCase):
    """A C program publishing its own bus (ordo_dbus_publish/fd/dispatch)."""

    @harness.bus_only("a monitor sees the order of Notify signals")
    def test_levels_priorities_and_host_contracts(self):
        a, b, w = self.peers(3)
        mon = Monitor(self.env.address)
        self.addCleanup(mon.close)
        sum_view = a.register("sum-view", ["calc.sum"])  # data level 1: calc.sum is written by data contract "sum"
        norm_view = b.register("norm-view", ["in.norm"])  # data level 0
        raw_prio = a.register("raw-prio", ["in.raw"], options={"priority": ("i", -1)})
        cs = w.contracts()
        self.assertEqual([c["name"] for c in cs], ["double", "raw-prio", "sum", "control", "norm-view", "sum-view"])
        self.assertEqual({c["name"]: c["level"] for c in cs}["sum-view"], 1)
        self.assertEqual({c["name"]: c["owner"] for c in cs}["double"], "")
        self.assertEqual(w.commit({"in.raw": ("x", 5)}), 1)
        seen = mon.notifies(3)
        self.assertEqual([body for _, body in seen], [
            (raw_prio, 1, ["in.raw"], {"in.raw": ("x", 5)}),
            (norm_view, 1, ["in.norm"], {"in.norm": ("x", 10)}),
            (sum_view, 1, ["calc.sum"], {"calc.sum": ("x", 11)}),
        ])
        self.assertEqual(w.get("calc.sum"), ("x", 11, 1))
        # A priority contract may not read what a data contract may write.
        with self.assertRaises(RemoteError) as cm:
            w.register("prio-sum", ["calc.sum"], options={"priority": ("i", 1)})
        self.assertEqual(cm.exception.name, E("OrderConflict"))
        self.assertIn("sum", cm.exception.message)
        # The host's own contracts belong to the host.
        with self.assertRaises(RemoteError) as cm:
            w.unregister(cs[0]["path"])
        self.assertEqual(cm.exception.name, E("AccessDenied"))
        self.assertEqual(w.stats()["contracts"], 6)
        self.finish(w)

    def burst(self, control, key, n, timeout):
        """Asks the host, through `control`, for n commits of `key` = 1..n and
        checks that a remote observer gets them all, in order."""
        r, w = self.peers(2)
        path = r.register("observer", [key])
        self.assertEqual(w.commit({control: ("x", n)}), 1)
        self.assert_series(r.notifies(n, timeout=timeout), path, key, range(1, n + 1))
        self.finish(w)

    def test_commits_from_another_host_thread(self):
        self.burst("ctl.burst", "bg.n", 2000, 60)

    def test_commits_on_the_dispatching_thread_between_dispatches(self):
        # The host commits on the thread that calls ordo_dbus_dispatch, then
        # waits on ordo_dbus_fd without a timeout: the Notify signals must
        # leave without another dispatch.
        self.burst("ctl.local", "loc.n", 500, 20)


class Daemon(unittest.TestCase):
    """ordod's own bus handling, without the per-test Env ordod."""

    def test_private_daemon_mode_and_clean_exit(self):
        env = dict(os.environ)
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        env.pop("XDG_RUNTIME_DIR", None)  # a temporary directory (test_direct.py: the stable one)
        p = spawn([ORDOD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            line = read_line(p.stdout, 20, "ordod's address line")
            self.assertTrue(line.startswith("DBUS_SESSION_BUS_ADDRESS=unix:"), line)
            address = line.split("=", 1)[1]
            r = subprocess.run([ORDOCTL, "--address", address, "set", "a=1"], capture_output=True, text=True,
                               timeout=20)
            self.assertEqual(r.stdout.strip(), "1", r.stderr)
            sock = re.search(r"path=([^,]+)", address)
            self.assertEqual(stop(p, signal.SIGINT), 0)
            err = p.stderr.read().decode()
            self.assertIn("stopped the private dbus-daemon", err)
            if sock:
                self.assertFalse(os.path.exists(sock.group(1)), "the private daemon's socket is left over")
            r = subprocess.run([ORDOCTL, "--address", address, "get", "a"], capture_output=True, text=True, timeout=20)
            self.assertNotEqual(r.returncode, 0)
        finally:
            stop(p, signal.SIGKILL)

    def test_name_taken_and_custom_name(self):
        env = Env(start_ordod=False)
        try:
            env.start_ordod(name="org.example.Model")
            second = spawn([ORDOD, "--address", env.address, "--name", "org.example.Model"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.assertEqual(second.wait(timeout=20), 1)
            self.assertIn("org.example.Model", second.stderr.read().decode())
            p = Peer(env.address, name="org.example.Model")
            self.assertEqual(p.commit({"a": ("x", 1)}), 1)
            p.close()
            r = subprocess.run([ORDOCTL, "--address", env.address, "--name", "org.example.Model", "get", "a"],
                               capture_output=True, text=True, timeout=20)
            self.assertEqual(r.stdout, "int64:1\n")
        finally:
            self.assertEqual(env.close(), 0)

    def test_invalid_name_is_refused_before_anything_starts(self):
        for name in ("", "dev..ordo", "no-dots"):
            r = subprocess.run([ORDOD, "--address", "unix:path=/nonexistent", "--name", name],
                               capture_output=True, text=True, timeout=20)
            self.assertEqual(r.returncode, 2, (name, r.stderr))
            self.assertIn(f'--name: "{name}" is not a D-Bus bus name', r.stderr)

    def test_bus_daemon_going_away(self):
        env = Env()
        try:
            stop(env.daemon, signal.SIGKILL)
            self.assertEqual(env.ordod.wait(timeout=20), 1)
            self.assertIn("lost", env.log())
        finally:
            env.close()


if __name__ == "__main__":
    harness.main("dbus")
