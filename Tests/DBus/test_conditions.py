"""Conditional commits and owned values over D-Bus (SPEC §15, docs/dbus.md
"CommitWith and Owners"): CommitWith through jeepney, busctl and gdbus; a
condition that fails applies nothing and notifies no one; read-modify-write
from several processes retrying on Conflict loses no update (jeepney and
the Python package); owned values removed in one Notify when their peer
closes or is killed with SIGKILL; ownership ended by a plain write and handed
over by an owned one; Owners, `ordoctl owners`, `ordoctl set --expect`;
option errors; the rights they need under a policy; owned values of a
durable ordod removed in the first transaction after a restart.

Run: python3 Tests/DBus/test_conditions.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import os
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IFACE, NAME, PATH, Env, read_line, spawn, stop  # noqa: E402
from test_dbus import INVALID_ARGS, DBusTest, E  # noqa: E402
from test_policy import PolicyTest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFLICT = E("Conflict")


def commit_with(peer, set=None, touch=(), remove=(), options=None):
    return peer.call("CommitWith", "a{sv}asasa{sv}", set or {}, list(touch), list(remove), options or {})[0]


def expect(counters):
    return {"expect": ("a{st}", dict(counters))}


OWNED = {"owned": ("b", True)}

# A provider in its own process: commits its values as owned, says so, and
# waits to be killed.
PROVIDER = """
import sys, time
sys.path.insert(0, {here!r})
from harness import Peer
p = Peer(sys.argv[1])
p.call("CommitWith", "a{{sv}}asasa{{sv}}", {{k: ("b", True) for k in sys.argv[2:]}}, [], [], {{"owned": ("b", True)}})
print(p.unique_name, flush=True)
time.sleep(600)
"""

# Read-modify-write increments through jeepney: Get, then CommitWith with the
# counter read, retried on Conflict; prints the number of conflicts.
INCREMENTER = """
import sys
sys.path.insert(0, {here!r})
from harness import Peer, RemoteError
p = Peer(sys.argv[1])
conflicts = 0
for _ in range(int(sys.argv[2])):
    while True:
        try:
            (sig, value), counter = p.call("Get", "s", "cart.count")
        except RemoteError:
            value, counter = 0, 0
        try:
            p.call("CommitWith", "a{{sv}}asasa{{sv}}", {{"cart.count": ("x", value + 1)}}, [], [],
                   {{"expect": ("a{{st}}", {{"cart.count": counter}})}})
            break
        except RemoteError as e:
            assert e.name == "dev.ordo.Error.Conflict", e
            conflicts += 1
print(conflicts, flush=True)
"""

# The same through the Python package's ordo.Client.
INCREMENTER_CLIENT = """
import sys
sys.path.insert(0, {lib!r})
import ordo
c = ordo.Client(sys.argv[1])
conflicts = 0
for _ in range(int(sys.argv[2])):
    while True:
        try:
            e = c.get("cart.count")
            value, counter = e.value, e.counter
        except ordo.NotFound:
            value, counter = 0, 0
        try:
            c.commit({{"cart.count": value + 1}}, expect={{"cart.count": counter}})
            break
        except ordo.Conflict:
            conflicts += 1
print(conflicts, flush=True)
"""


class Conditions(DBusTest):
    def test_a_condition_that_holds_commits_and_one_that_fails_applies_nothing(self):
        p = self.env.peer()
        watcher = self.env.peer()
        watcher.register("w", ["cart.**"])
        self.assertEqual(commit_with(p, {"cart.count": ("x", 1)}, options=expect({"cart.count": 0})), 1)
        self.assertEqual(watcher.next_notify()[1], 1)
        e = self.assertRemoteError(CONFLICT, commit_with, p, {"cart.count": ("x", 5), "cart.note": ("s", "x")},
                                   options=expect({"cart.count": 0}))
        self.assertIn('"cart.count" was expected at counter 0 but is at 1', e.message)
        self.assertEqual(p.get("cart.count"), ("x", 1, 1))
        self.assertRemoteError(E("NotFound"), p.get, "cart.note")
        watcher.no_notify()
        stats = p.stats()
        self.assertEqual(stats["conflicts"], 1)
        self.assertEqual(stats["transactions"], 1)
        # No id was used; an empty expect and no options are a plain commit.
        self.assertEqual(commit_with(p, {"cart.count": ("x", 2)}, options=expect({})), 2)
        self.assertEqual(commit_with(p, {"cart.count": ("x", 3)}), 3)

    def test_stock_tools_call_it(self):
        p = self.env.peer()
        p.commit({"k": ("x", 1)})
        out = self.env.tool("busctl", "--user", "call", NAME, PATH, IFACE, "CommitWith", "a{sv}asasa{sv}",
                            "1", "k", "x", "2", "0", "0", "1", "expect", "a{st}", "1", "k", "1").stdout
        self.assertEqual(out.strip(), "t 2")
        r = self.env.tool("busctl", "--user", "call", NAME, PATH, IFACE, "CommitWith", "a{sv}asasa{sv}",
                          "1", "k", "x", "3", "0", "0", "1", "expect", "a{st}", "1", "k", "1", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("expected at counter 1 but is at 2", r.stderr)
        out = self.env.tool("gdbus", "call", "--session", "--dest", NAME, "--object-path", PATH, "--method",
                            IFACE + ".CommitWith", "{'k': <int64 4>}", "@as []", "@as []",
                            "{'expect': <@a{st} {'k': 2}>, 'owned': <true>}").stdout
        self.assertEqual(out.strip(), "(uint64 3,)")
        self.assertIn("<method name=\"CommitWith\">", p.call("Introspect", iface="org.freedesktop.DBus.Introspectable")[0])

    def test_option_errors_change_nothing(self):
        p = self.env.peer()
        p.commit({"k": ("x", 1)})
        for options, text in [
            ({"bogus": ("b", True)}, 'unknown option "bogus"; the options are expect (a{st}), owned (b)'),
            ({"owned": ("s", "yes")}, "option \"owned\" must be of type 'b', got 's'"),
            ({"expect": ("a{sx}", {"k": 1})}, "option \"expect\" must be of type 'a{st}', got 'a{sx}'"),
        ]:
            self.assertRemoteError(INVALID_ARGS, commit_with, p, {"k": ("x", 9)}, options=options, contains=text)
        self.assertRemoteError(E("InvalidKeypath"), commit_with, p, {"k": ("x", 9)}, options=expect({"a..b": 0}))
        self.assertEqual(p.get("k"), ("x", 1, 1))

    def test_read_modify_write_from_processes_loses_no_update(self):
        p = self.env.peer()
        lib = os.path.join(ROOT, "bindings", "python", "src")
        procs = [spawn([sys.executable, "-c", INCREMENTER.format(here=HERE), self.env.address, "40"],
                       stdout=subprocess.PIPE) for _ in range(3)]
        procs += [spawn([sys.executable, "-c", INCREMENTER_CLIENT.format(lib=lib), self.env.address, "40"],
                        stdout=subprocess.PIPE) for _ in range(2)]
        conflicts = 0
        for proc in procs:
            conflicts += int(read_line(proc.stdout, 120, "an incrementer's conflict count"))
            self.assertEqual(proc.wait(30), 0)
        self.assertEqual(p.get("cart.count")[1], 200)
        self.assertEqual(p.stats()["conflicts"], conflicts)
        self.assertEqual(p.call("Get", "ss", IFACE, "Transaction", iface="org.freedesktop.DBus.Properties")[0][1], 200)

    def test_ordoctl_set_expect(self):
        self.env.ordoctl("set", "n=1")
        self.assertEqual(self.env.ordoctl("set", "n=2", "--expect", "n=1").stdout.strip(), "2")
        r = self.env.ordoctl("set", "n=3", "--expect", "n=1", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("Conflict", r.stderr)
        self.assertIn('"n" was expected at counter 1 but is at 2', r.stderr)
        r = self.env.ordoctl("set", "n=3", "--expect", "n", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("is not KEY=COUNTER", r.stderr)
        self.assertEqual(self.env.ordoctl("get", "n").stdout.strip(), "int64:2")


class Owned(DBusTest):
    def provider(self, *keys):
        proc = spawn([sys.executable, "-c", PROVIDER.format(here=HERE), self.env.address, *keys],
                     stdout=subprocess.PIPE)
        self.addCleanup(stop, proc, signal.SIGKILL)
        return proc, read_line(proc.stdout, 20, "the provider's unique name")

    def test_values_of_a_killed_provider_go_in_one_notify(self):
        reader = self.env.peer()
        reader.register("r", ["presence.**"])
        a, name_a = self.provider("presence.alice", "presence.bob")
        b, name_b = self.provider("presence.carol")
        self.assertEqual(len(reader.notifies(2)), 2)
        self.assertEqual(reader.call("Owners", "as", ["**"])[0],
                         {"presence.alice": name_a, "presence.bob": name_a, "presence.carol": name_b})
        self.assertEqual(reader.stats()["owned-values"], 3)
        out = self.env.ordoctl("owners", "presence.alice", "presence.bob").stdout
        self.assertEqual(out, f"presence.alice\t{name_a}\npresence.bob\t{name_a}\n")
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        _, txn, changed, values = reader.next_notify()
        self.assertEqual((txn, sorted(changed), values), (3, ["presence.alice", "presence.bob"], {}))
        reader.no_notify()
        self.assertEqual(reader.call("Owners", "as", ["**"])[0], {"presence.carol": name_b})
        self.assertEqual(reader.get("presence.carol")[:2], ("b", True))

    def test_a_plain_write_ends_ownership_and_an_owned_one_hands_it_over(self):
        owner = self.env.peer()
        other = self.env.peer()
        commit_with(owner, {"x": ("x", 1), "y": ("x", 1), "z": ("x", 1)}, options=OWNED)
        other.commit({"x": ("x", 1)})  # equal value: no transaction, still a plain write
        commit_with(other, {"y": ("x", 2)}, options=OWNED)
        self.assertEqual(other.call("Owners", "as", ["**"])[0], {"y": other.unique_name, "z": owner.unique_name})
        reader = self.env.peer()
        reader.register("r", ["x", "y", "z"])
        owner.close()
        _, _, changed, _ = reader.next_notify()
        self.assertEqual(changed, ["z"])
        self.assertEqual(reader.get("x")[:2], ("x", 1))
        self.assertEqual(reader.get("y")[:2], ("x", 2))


class OwnedDurable(unittest.TestCase):
    """Owned values of a durable ordod are removed in the first transaction
    after a restart: their owners are gone."""

    def test_restart_removes_owned_values(self):
        env = Env(start_ordod=False)
        self.addCleanup(env.close)
        state = os.path.join(env.dir, "state.db")
        first = env.start_ordod(["--state", state])
        p = Peer(env.address)
        commit_with(p, {"own.a": ("x", 1), "own.b": ("x", 2)}, options=OWNED)
        p.commit({"plain": ("x", 3)})
        stop(first, signal.SIGKILL)
        env.ordod = None
        p.close()
        env.ordod = env.start_ordod(["--state", state])
        q = Peer(env.address)
        self.addCleanup(q.close)
        self.assertEqual(q.call("Owners", "as", ["**"])[0], {})
        values, removed, counters, txn = q.call("Changes", "tas", 2, ["**"])
        self.assertEqual((dict(values), sorted(removed), txn), ({}, ["own.a", "own.b"], 3))
        self.assertEqual(q.get("plain")[:2], ("x", 3))


class Rights(PolicyTest):
    policy = """allow uid:0 read,write,writer **
allow uid:{uid} write w.**
allow uid:{uid} read pub.**
"""

    def test_expect_needs_read_and_owned_needs_write(self):
        self.root.commit({"w.a": ("x", 1), "pub.b": ("x", 1)})
        self.denied(self.nobody.call, "CommitWith", "a{sv}asasa{sv}", {"w.a": ("x", 2)}, [], [],
                    expect({"w.a": 1}), contains=("w.a", "read"))
        self.assertEqual(self.nobody.call("CommitWith", "a{sv}asasa{sv}", {"w.a": ("x", 2)}, [], [],
                                          {"expect": ("a{st}", {"pub.b": 1}), "owned": ("b", True)})[0], 2)
        # The service's name for nobody's connection (over a direct
        # connection only the service names it): the owner of its contract.
        probe = self.nobody.register("probe", ["pub.b"])
        nobody = next(c["owner"] for c in self.root.contracts() if c["path"] == probe)
        self.assertEqual(self.root.call("Owners", "as", ["**"])[0], {"w.a": nobody})
        self.assertEqual(self.nobody.call("Owners", "as", ["**"])[0], {})
        self.denied(self.nobody.call, "CommitWith", "a{sv}asasa{sv}", {"pub.b": ("x", 2)}, [], [], OWNED)


Peer = harness.Peer

if __name__ == "__main__":
    harness.main("dbus conditions")
