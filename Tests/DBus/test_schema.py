"""ordod --schema (SPEC §14, docs/schema.md) with real processes: every
refusal as a dev.ordo.Error.Schema (or TypeMismatch) reply with the state
unchanged (Commit, Complete, Register), the Schema property, Get's
defaults, SIGHUP reload accepted and refused, and --state over a state the
schema does not allow (refused with the list, or --remove-invalid).

Run: python3 Tests/DBus/test_schema.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import json
import os
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import ORDOD, Env, RemoteError  # noqa: E402
from test_dbus import DBusTest, E  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = os.path.join(ROOT, "examples", "schema", "playlist.json")
NARROW = {"ordo-schema": 1, "keys": {"playlist.total": {"type": "int64", "max": 5}}}


class SchemaTest(DBusTest):
    ordod_args = ("--schema", SCHEMA)

    def test_schema_property(self):
        peer = self.env.peer()
        (sig, text), = peer.call("Get", "ss", "dev.ordo.Bus1", "Schema", iface="org.freedesktop.DBus.Properties")
        self.assertEqual(sig, "s")
        self.assertEqual(json.loads(text)["keys"]["playlist.mode"]["choices"], ["list", "grid"])
        with open(SCHEMA) as f:
            self.assertEqual(json.loads(text)["keys"].keys(), json.load(f)["keys"].keys())
        (props,) = peer.call("GetAll", "s", "dev.ordo.Bus1", iface="org.freedesktop.DBus.Properties")
        self.assertEqual(props["Schema"], ("s", text))
        self.assertIn('<property name="Schema" type="s" access="read">',
                      peer.call("Introspect", iface="org.freedesktop.DBus.Introspectable")[0])

    def test_commit_refusals_change_nothing(self):
        peer = self.env.peer()
        self.assertRemoteError(E("Schema"), peer.commit, {"playlist.titel": ("s", "x")},
                               contains='did you mean "playlist.title"?')
        self.assertRemoteError(E("TypeMismatch"), peer.commit, {"playlist.total": ("s", "3")})
        self.assertRemoteError(E("Schema"), peer.commit, {"playlist.mode": ("s", "tile")}, contains="choices")
        # All or nothing: a valid write beside a refused one is not applied.
        self.assertRemoteError(E("Schema"), peer.commit, {"playlist.title": ("s", "A"), "playlist.total": ("x", -1)})
        self.assertRemoteError(E("Schema"), peer.commit, {"ui.refresh": ("b", True)}, contains="event")
        self.assertRemoteError(E("Schema"), peer.commit, touch=["playlist.nothing"])
        self.assertRemoteError(E("Schema"), peer.commit, remove=["playlist.trucks.**"], contains="nor a prefix")
        values, counters, txn = peer.snapshot(["**"])
        self.assertEqual((values, counters, txn), ({}, {}, 0))
        self.assertEqual(peer.commit({"playlist.tracks.t1.title": ("s", "Intro")}, touch=["ui.refresh"]), 1)
        self.assertEqual(peer.commit(remove=["playlist.tracks.t1.**"]), 2)

    def test_get_returns_defaults(self):
        peer = self.env.peer()
        self.assertEqual(peer.get("playlist.mode"), ("s", "list", 0))
        self.assertEqual(peer.get("playlist.tracks.t9.duration"), ("x", 0, 0))
        self.assertRemoteError(E("NotFound"), peer.get, "playlist.tracks.t9.title")
        # A Snapshot holds stored values only: that tells a default apart.
        self.assertEqual(peer.snapshot(["playlist.mode"])[0], {})
        peer.commit({"playlist.mode": ("s", "grid")})
        self.assertEqual(peer.get("playlist.mode"), ("s", "grid", 1))
        peer.commit(remove=["playlist.mode"])
        self.assertEqual(peer.get("playlist.mode"), ("s", "list", 2))

    def test_register_refused_for_a_typo(self):
        peer = self.env.peer()
        self.assertRemoteError(E("Schema"), peer.register, "typo", ["playlist.tracks.*.titel"],
                               contains='did you mean "playlist.tracks.*.title"?')
        self.assertRemoteError(E("Schema"), peer.register, "typo", ["playlist.tracks.*.duration"], ["playlist.totl"],
                               {"priority": ("i", -1)})
        self.assertEqual(peer.contracts(), [])
        peer.register("ok", ["playlist.tracks.**"])
        self.assertEqual([c["name"] for c in peer.contracts()], ["ok"])

    def test_complete_refused_changes_nothing(self):
        writer = self.env.peer()
        path = writer.register("total", ["playlist.tracks.*.duration"], ["playlist.total"], {"priority": ("i", -1)})
        committer = self.env.peer()
        reply = []
        t = threading.Thread(target=lambda: reply.append(committer.commit({"playlist.tracks.a.duration": ("x", 3)})))
        t.start()
        note = writer.next_notify(timeout=10)
        txn = note[1]
        # A refused Complete answers the call: none of its writes applied.
        self.assertRemoteError(E("Schema"), writer.call, "Complete", "ota{sv}asas", path, txn,
                               {"playlist.tracks.a.duration": ("x", 3), "playlist.total": ("x", -3)}, [], [])
        t.join(timeout=10)
        self.assertEqual(reply, [1])
        self.assertEqual(writer.get("playlist.total"), ("x", 0, 0))
        self.assertEqual(writer.snapshot(["playlist.**"])[1], {"playlist.tracks.a.duration": 1})

    def test_reload(self):
        # ordod reads the file named at start: serve a copy to edit.
        self.env.close()
        self.env = Env(start_ordod=False)
        path = os.path.join(self.env.dir, "schema.json")
        with open(SCHEMA) as f:
            original = f.read()
        with open(path, "w") as f:
            f.write(original)
        self.env.ordod = self.env.start_ordod(["--schema", path])
        peer = self.env.peer()
        peer.register("mode", ["playlist.mode"])
        peer.commit({"playlist.total": ("x", 7)})
        # Refused: the stored 7 is over max 5 and "mode" reads an undeclared keypath.
        with open(path, "w") as f:
            json.dump(NARROW, f)
        log = self.env.sighup("schema refused")
        self.assertIn("7 is above max 5", log)
        self.assertIn('contract "mode"', log)
        self.assertRemoteError(E("Schema"), peer.commit, {"playlist.titel": ("s", "x")})
        # A file that does not validate: refused, the old schema stays.
        with open(path, "w") as f:
            f.write("{")
        self.assertIn("JSON error", self.env.sighup("schema refused"))
        # Accepted: a wider schema; its rules apply at once.
        wider = json.loads(original)
        wider["keys"]["playlist.rating"] = {"type": "int64", "default": 3}
        with open(path, "w") as f:
            json.dump(wider, f)
        self.env.sighup("reloaded the schema")
        self.assertEqual(peer.get("playlist.rating"), ("x", 3, 0))
        self.assertEqual(peer.commit({"playlist.rating": ("x", 4)}), 2)

    def test_ordoctl(self):
        tree = self.env.ordoctl("schema").stdout.splitlines()
        self.assertIn("playlist", tree)
        self.assertIn('  mode  string default="list" choices="list","grid"', tree)
        self.assertIn("      duration  int64 default=0 min=0 # a track's length in seconds", tree)
        self.assertIn("  refresh  event # asks every view to redraw", tree)
        only = self.env.ordoctl("schema", "playlist.tracks.**").stdout.splitlines()
        self.assertEqual(only[:3], ["playlist", "  tracks", "    *"])
        self.assertNotIn("ui", only)
        # A bare value is read as the declared type.
        self.assertEqual(self.env.ordoctl("set", "playlist.total=5", "playlist.title=42", "playlist.mode=grid").stdout, "1\n")
        peer = self.env.peer()
        self.assertEqual(peer.get("playlist.total"), ("x", 5, 1))
        self.assertEqual(peer.get("playlist.title"), ("s", "42", 1))
        r = self.env.ordoctl("set", "playlist.total=many", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn('"many" is not an int64', r.stderr)
        r = self.env.ordoctl("set", "playlist.totl=5", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn('dev.ordo.Error.Schema: keypath "playlist.totl" is not declared', r.stderr)
        # get marks defaults.
        self.assertEqual(self.env.ordoctl("get", "playlist.total", "playlist.selection").stdout,
                         'playlist.total=int64:5\nplaylist.selection=string: (default)\n')
        # schema --check needs no bus.
        r = subprocess.run([harness.ORDOCTL, "schema", "--check", SCHEMA], capture_output=True, text=True, timeout=20)
        self.assertEqual((r.returncode, r.stdout), (0, SCHEMA + ": a valid schema of 8 keypath(s)\n"))
        bad = os.path.join(self.env.dir, "bad.json")
        with open(bad, "w") as f:
            f.write('{"ordo-schema": 1, "keys": {"a": {"type": "int64", "min": 3, "max": 1}}}')
        r = subprocess.run([harness.ORDOCTL, "schema", "--check", bad], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 1)
        self.assertIn('schema entry "a": min 3 is greater than max 1', r.stderr)


class SchemaAndState(unittest.TestCase):
    def setUp(self):
        self.env = Env(start_ordod=False)
        self.addCleanup(self.env.close)
        self.state = os.path.join(self.env.dir, "state.ordo")
        self.narrow = os.path.join(self.env.dir, "narrow.json")
        with open(self.narrow, "w") as f:
            json.dump(NARROW, f)

    def run_ordod(self, *args):
        return subprocess.run([ORDOD, "--address", self.env.address, "--state", self.state, *args],
                              capture_output=True, text=True, timeout=30)

    def test_state_that_breaks_the_schema(self):
        # A state written without a schema: two values the narrow schema refuses.
        self.env.ordod = self.env.start_ordod(["--state", self.state])
        peer = self.env.peer()
        peer.commit({"playlist.total": ("x", 7), "other.key": ("s", "x")})
        peer.commit({"playlist.total": ("x", 4)})
        peer.commit({"playlist.total": ("x", 9)})
        peer.close()
        self.assertEqual(harness.stop(self.env.ordod), 0)
        self.env.ordod = None
        r = self.run_ordod("--schema", self.narrow)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("2 stored value(s)", r.stderr)
        self.assertIn('"other.key" is not declared', r.stderr)
        self.assertIn("9 is above max 5", r.stderr)
        self.assertIn("--remove-invalid", r.stderr)
        self.assertEqual(self.run_ordod("--remove-invalid").returncode, 2)  # needs --schema
        # Nothing was dropped by the refusal: the state serves without a schema.
        self.env.ordod = self.env.start_ordod(["--state", self.state])
        peer = self.env.peer()
        self.assertEqual(peer.get("other.key"), ("s", "x", 1))
        peer.close()
        self.assertEqual(harness.stop(self.env.ordod), 0)
        # On purpose: removed in one transaction, stored, and the schema serves.
        self.env.ordod = self.env.start_ordod(["--state", self.state, "--schema", self.narrow, "--remove-invalid"])
        self.assertIn("--remove-invalid: removed", self.env.log())
        peer = self.env.peer()
        values, counters, txn = peer.snapshot(["**"])
        self.assertEqual(values, {})
        self.assertEqual(txn, 4)
        self.assertEqual(counters, {"playlist.total": 4, "other.key": 2})
        peer.close()
        self.assertEqual(harness.stop(self.env.ordod), 0)
        self.env.ordod = None
        # The removal was stored: a restart needs no --remove-invalid.
        self.env.ordod = self.env.start_ordod(["--state", self.state, "--schema", self.narrow])

    def test_schema_file_that_does_not_validate(self):
        bad = os.path.join(self.env.dir, "bad.json")
        with open(bad, "w") as f:
            f.write('{"ordo-schema": 1, "keys": {"a": {"type": "float"}}}')
        r = subprocess.run([ORDOD, "--address", self.env.address, "--schema", bad], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn('schema refused: ' + bad + ': schema entry "a": unknown type "float"', r.stderr)


if __name__ == "__main__":
    harness.main("test_schema")
