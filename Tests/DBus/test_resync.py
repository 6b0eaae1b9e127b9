"""Resynchronization over D-Bus (SPEC §10, docs/dbus.md "Changes, Epoch and
resuming"): the Changes method and the Epoch property through jeepney and
busctl, Changes under an access policy (ordod --policy), `ordoctl changes`,
and `ordoctl watch --resume FILE`: a watcher killed with SIGKILL and
restarted while commits go on, ordod killed and restarted (a new epoch), and
Notify signals dropped by the bus daemon (a gap) -- each change printed
exactly once.

Run: python3 Tests/DBus/test_resync.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IFACE, NAME, ORDOCTL, PATH, Env, RemoteError, read_line, spawn, stop  # noqa: E402
from test_dbus import INVALID_ARGS, DBusTest, E  # noqa: E402
from test_policy import NOBODY, Nobody, PolicyTest  # noqa: E402

PROPS = "org.freedesktop.DBus.Properties"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def changes(peer, since, patterns):
    values, removed, counters, txn = peer.call("Changes", "tas", since, list(patterns))
    return {k: v for k, v in values.items()}, sorted(removed), dict(counters), txn


def epoch(peer):
    sig, value = peer.call("Get", "ss", IFACE, "Epoch", iface=PROPS)[0]
    assert sig == "s", sig
    return value


class ChangesMethod(DBusTest):
    def test_values_removed_counters_and_txn(self):
        p = self.env.peer()
        self.assertEqual(p.commit({"doc.a": ("x", 1), "doc.b": ("x", 2), "doc.s.t": ("s", "deep")}), 1)
        self.assertEqual(p.commit({"doc.c": ("s", "x")}, [], ["doc.b"]), 2)
        self.assertEqual(p.commit({"other.z": ("b", True)}, ["doc.t"]), 3)
        self.assertEqual(p.commit({"doc.a": ("x", 1)}), 0)  # equal value: no transaction
        values, removed, counters, txn = changes(p, 1, ["doc.*"])
        self.assertEqual(values, {"doc.c": ("s", "x")})
        self.assertEqual(removed, ["doc.b", "doc.t"])  # removed, and touched without a value
        self.assertEqual(counters, {"doc.b": 2, "doc.c": 1, "doc.t": 1})
        self.assertEqual(txn, 3)
        values, removed, counters, txn = changes(p, 0, ["**"])
        self.assertEqual(sorted(values), ["doc.a", "doc.c", "doc.s.t", "other.z"])
        self.assertEqual(removed, ["doc.b", "doc.t"])
        self.assertEqual(counters["doc.a"], 1)
        # since = the last id: nothing; several patterns, overlapping.
        self.assertEqual(changes(p, 3, ["**"]), ({}, [], {}, 3))
        self.assertEqual(changes(p, 2, ["other.*", "**"])[0], {"other.z": ("b", True)})
        self.assertEqual(changes(p, 0, []), ({}, [], {}, 3))
        # A tree removal leaves tombstones that Changes reports.
        self.assertEqual(p.commit({}, [], ["doc.**"]), 4)
        values, removed, counters, txn = changes(p, 3, ["doc.**"])
        self.assertEqual((values, removed, txn), ({}, ["doc.a", "doc.c", "doc.s.t"], 4))
        self.assertEqual(counters, {"doc.a": 2, "doc.c": 2, "doc.s.t": 2})
        # The same through busctl (an independent client).
        out = self.env.tool("busctl", "--user", "call", NAME, PATH, IFACE, "Changes", "tas", "3", "1", "other.**").stdout
        self.assertEqual(out.strip(), "a{sv}asa{st}t 0 0 0 4")

    def test_errors(self):
        p = self.env.peer()
        p.commit({"a": ("x", 1)})
        e = self.assertRemoteError(E("InvalidArgument"), changes, p, 2, ["**"])
        self.assertIn("since transaction 2", e.message)
        self.assertIn("last committed transaction is 1", e.message)
        self.assertIn(epoch(p), e.message)
        self.assertRemoteError(E("InvalidArgument"), changes, p, 2**64 - 1, ["**"])
        self.assertRemoteError(E("InvalidKeypath"), changes, p, 0, ["a..b"])
        self.assertRemoteError(INVALID_ARGS, p.call, "Changes", "as", ["**"], contains="Changes expects arguments (tas)")
        self.assertRemoteError(INVALID_ARGS, p.call, "Changes", "ts", 0, "**")
        # Limits as Snapshot: patterns per call, and the size of the reply.
        self.assertRemoteError(E("Limit"), changes, p, 0, ["a"] * 5000, contains="max-keypaths-per-call")
        self.assertEqual(p.get("a"), ("x", 1, 1))  # nothing changed, service alive

    def test_reply_size_limit(self):
        env = self.env
        stop(env.ordod)
        env.ordod = None
        env.start_ordod(["--max-message-bytes", "4096"])
        p = env.peer()
        for i in range(3):
            p.commit({f"big.k{i}": ("s", "x" * 2000)})
        self.assertEqual(len(changes(p, 2, ["big.*"])[0]), 1)
        self.assertRemoteError(E("Limit"), changes, p, 0, ["big.*"], contains="max-message-bytes")
        self.assertRemoteError(E("Limit"), p.snapshot, ["big.*"])


class EpochProperty(DBusTest):
    def test_get_getall_busctl_and_a_new_epoch_per_start(self):
        env = self.env
        p = env.peer()
        e = epoch(p)
        self.assertRegex(e, UUID)
        p.commit({"a": ("x", 1)})
        self.assertEqual(epoch(p), e, "the epoch changes only with the store")
        allp = p.call("GetAll", "s", IFACE, iface=PROPS)[0]
        self.assertEqual(allp["Epoch"], ("s", e))
        self.assertEqual(sorted(allp), ["Epoch", "Schema", "Transaction", "Version"])
        self.assertEqual(allp["Schema"], ("s", ""), "without --schema the Schema property is empty")
        self.assertEqual(env.tool("busctl", "--user", "get-property", NAME, PATH, IFACE, "Epoch").stdout.strip(),
                         f's "{e}"')
        self.assertRemoteError("org.freedesktop.DBus.Error.PropertyReadOnly", p.call, "Set", "ssv", IFACE, "Epoch",
                               ("s", "mine"), iface=PROPS)
        # In memory, every start is a new history.
        stop(env.ordod)
        env.ordod = None
        env.start_ordod()
        p2 = env.peer()
        e2 = epoch(p2)
        self.assertRegex(e2, UUID)
        self.assertNotEqual(e2, e)


class ChangesUnderPolicy(PolicyTest):
    def test_changes_carry_only_what_the_peer_may_read(self):
        r = self.root
        self.assertEqual(r.commit({"pub.x": ("x", 1), "pub.secret.k": ("s", "hidden"), "app.a": ("x", 3),
                                   "other.z": ("x", 9)}), 1)
        self.assertEqual(r.commit({}, [], ["pub.secret.k", "app.a"]), 2)
        self.assertEqual(r.commit({"pub.y": ("x", 2)}, ["other.t"]), 3)
        values, removed, counters, txn = self.nobody.call("Changes", "tas", 0, ["**"])
        self.assertEqual(sorted(values), ["pub.x", "pub.y"])
        self.assertEqual(sorted(removed), ["app.a"])  # pub.secret.k and other.t stay hidden
        self.assertEqual(sorted(counters), ["app.a", "pub.x", "pub.y"])
        self.assertEqual(txn, 3)
        # A pattern over what it may not read needs no right: it is filtered.
        self.assertEqual(self.nobody.call("Changes", "tas", 1, ["pub.secret.**", "other.**"]), ({}, [], {}, 3))
        # Root sees everything.
        values, removed, counters, txn = r.call("Changes", "tas", 1, ["**"])
        self.assertEqual((sorted(values), sorted(removed)), (["pub.y"], ["app.a", "other.t", "pub.secret.k"]))


class OrdoctlChanges(DBusTest):
    def test_text_and_json(self):
        env = self.env
        env.ordoctl("set", "doc.a=1", "doc.b=s:two words", "x=true")
        env.ordoctl("rm", "doc.b")
        env.ordoctl("touch", "doc.t")
        self.assertEqual(env.ordoctl("changes", "1", "doc.*").stdout.splitlines(),
                         ["doc.b removed counter=2", "doc.t removed counter=1", "txn=3"])
        self.assertEqual(env.ordoctl("changes", "0").stdout.splitlines(),
                         ["doc.a=int64:1 counter=1", "doc.b removed counter=2", "doc.t removed counter=1",
                          "x=bool:true counter=1", "txn=3"])
        js = json.loads(env.ordoctl("changes", "0", "doc.**", "--json").stdout)
        self.assertEqual(js, {"txn": 3, "values": {"doc.a": {"type": "int64", "value": 1}},
                              "removed": ["doc.b", "doc.t"], "counters": {"doc.a": 1, "doc.b": 2, "doc.t": 1}})
        r = env.ordoctl("changes", "4", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("dev.ordo.Error.InvalidArgument", r.stderr)
        r = env.ordoctl("changes", "x", check=False)
        self.assertEqual(r.returncode, 2)
        r = env.ordoctl("changes", check=False)
        self.assertEqual(r.returncode, 2)


# --- ordoctl watch --resume ---------------------------------------------------

class Lines:
    """Reads a watcher's JSON lines on a thread (the test never blocks on it)."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = []
        self.cond = threading.Condition()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for raw in self.proc.stdout:
            with self.cond:
                self.lines.append(json.loads(raw))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, pred, timeout=20, what="a line"):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not any(pred(l) for l in self.lines):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {what} within {timeout}s; got {self.lines[-5:]}")
                self.cond.wait(left)

    def finish(self):
        self.t.join(10)
        return list(self.lines)


class Model:
    """What the test committed: per transaction id, {keypath: value or None}."""

    def __init__(self):
        self.txns = {}

    def record(self, txn, writes):
        assert txn == len(self.txns) + 1, (txn, len(self.txns))
        self.txns[txn] = writes

    def keys_between(self, a, b):
        """Keypaths changed by the transactions a+1 .. b."""
        out = set()
        for t in range(a + 1, b + 1):
            out |= set(self.txns[t])
        return out

    def value_at(self, key, t):
        v = None
        for i in range(1, t + 1):
            if key in self.txns[i]:
                v = self.txns[i][key]
        return v


def plain(jv):
    return jv["value"]


def check_line(test, model, line, since):
    """A line covering transactions since+1 .. line.txn reports exactly the
    keypaths they changed, each with its value at line.txn (bare: none)."""
    t = line["txn"]
    expect = model.keys_between(since, t)
    test.assertEqual(set(line["changed"]), expect, f"line {line} covering ({since}, {t}]")
    for k in expect:
        v = model.value_at(k, t)
        if v is None:
            test.assertNotIn(k, line["values"], line)
        else:
            test.assertEqual(plain(line["values"][k]), v, line)


def wait_position(path, expect, timeout=10):
    """The position file once it holds `expect` (it is renamed right after the line is printed)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = read_position(path)
        except FileNotFoundError:
            got = None
        if got == expect or time.monotonic() > deadline:
            return got
        time.sleep(0.01)


def read_position(path):
    with open(path) as f:
        lines = f.read().splitlines()
    assert len(lines) == 2 and lines[0].startswith("epoch ") and lines[1].startswith("txn "), lines
    return lines[0][6:], int(lines[1][4:])


class ResumeTest(DBusTest):
    def watcher(self, pos, patterns=("w.**",), *extra):
        p = spawn([ORDOCTL, "--address", self.env.address, "watch", *patterns, "--json", "--resume", pos, *extra],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(stop, p, signal.SIGKILL)
        return p, Lines(p)


class WatcherRestart(ResumeTest):
    def test_killed_watcher_prints_each_change_once(self):
        env = self.env
        pos = os.path.join(env.dir, "watch.pos")
        committer = env.peer()
        model = Model()
        # Some history before the first start: the first line is a snapshot of it.
        for i in range(1, 6):
            model.record(committer.commit({f"w.k{i}": ("x", i)}), {f"w.k{i}": i})
        stop_commits = threading.Event()
        errors = []

        def commit_loop():
            try:
                i = len(model.txns)
                while not stop_commits.is_set():
                    i += 1
                    k = f"w.k{i - 3}"
                    if i % 5 == 0 and model.value_at(k, len(model.txns)) is not None:  # remove an earlier one
                        model.record(committer.commit({}, [], [k]), {k: None})
                    elif i % 7 == 0:  # a keypath outside the watch
                        model.record(committer.commit({f"other.k{i}": ("x", i)}), {})
                    else:
                        model.record(committer.commit({f"w.k{i}": ("x", i)}), {f"w.k{i}": i})
                    time.sleep(random.uniform(0.001, 0.006))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        runs = []     # (lines of one run, position saved when it was killed)
        rng = random.Random(os.environ.get("ORDO_TEST_SEED", str(time.time())))
        proc, lines = self.watcher(pos)
        lines.wait_for(lambda l: l["kind"] == "snapshot", what="the first snapshot")
        t = threading.Thread(target=commit_loop)
        t.start()
        try:
            for round_ in range(5):
                time.sleep(rng.uniform(0.15, 0.6))
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                runs.append((lines.finish(), read_position(pos)))
                time.sleep(rng.uniform(0.0, 0.3))  # commits go on while it is away
                proc, lines = self.watcher(pos)
                try:
                    lines.wait_for(lambda l: True, what=f"a line after restart {round_ + 1}")
                except AssertionError:
                    proc.kill()
                    raise AssertionError(f"{errors} {proc.stderr.read()}")
            time.sleep(0.3)
        finally:
            stop_commits.set()
            t.join(10)
        self.assertEqual(errors, [])
        model.record(committer.commit({"w.end": ("x", 0)}), {"w.end": 0})
        final = len(model.txns)
        lines.wait_for(lambda l: l["txn"] >= final, what=f"the last transaction {final}")
        self.assertEqual(stop(proc, signal.SIGTERM), 0)
        runs.append((lines.finish(), read_position(pos)))
        # Every run's lines tile the history: each covers (previous txn, its
        # txn] and reports exactly what changed there; a restart resumes from
        # the saved position. The only repeat allowed: the last line of a run
        # killed between printing it and renaming its position file, which
        # the next run's catch-up covers again.
        e = epoch(committer)
        since = 0
        repeats = 0
        for n, (run, (ep, saved)) in enumerate(runs):
            self.assertEqual(ep, e)
            self.assertTrue(run, f"run {n} printed nothing")
            # First a catch-up (a notify when nothing was missed).
            self.assertIn(run[0]["kind"], ("snapshot",) if n == 0 else ("changes", "notify"), run[0])
            for i, line in enumerate(run):
                if i > 0:  # live; "changes" when a txn jump's check read later commits too
                    self.assertIn(line["kind"], ("notify", "changes"), line)
                check_line(self, model, line, since)
                since = line["txn"]
            if saved != since:
                # Killed in the window: the position is the line before.
                self.assertGreaterEqual(len(run), 2, run)
                self.assertEqual(saved, run[-2]["txn"], (saved, run[-2:]))
                repeats += 1
                since = saved
        self.assertEqual(since, final)
        self.assertLessEqual(repeats, 1, "more than one kill landed in the print-then-rename window")
        self.assertGreater(sum(l["kind"] == "changes" for run, _ in runs for l in run), 0)
        self.assertFalse(os.path.exists(pos + ".tmp"), "the temporary position file stays after SIGTERM")


class OrdodRestart(ResumeTest):
    def test_new_epoch_gives_a_full_snapshot_then_live(self):
        env = self.env
        pos = os.path.join(env.dir, "watch.pos")
        p = env.peer()
        p.commit({"w.a": ("x", 1), "w.b": ("s", "b")})
        proc, lines = self.watcher(pos)
        lines.wait_for(lambda l: l["kind"] == "snapshot")
        p.commit({"w.a": ("x", 2)})
        lines.wait_for(lambda l: l["kind"] == "notify" and l["txn"] == 2)
        old = epoch(p)
        self.assertEqual(wait_position(pos, (old, 2)), (old, 2))
        # ordod dies while the watcher is stopped; a new ordod (a new, empty
        # store: a new epoch) gets a commit before the watcher runs again.
        proc.send_signal(signal.SIGSTOP)
        env.ordod.send_signal(signal.SIGKILL)
        env.ordod.wait(10)
        env.ordod = None
        env.start_ordod()
        q = env.peer()
        new = epoch(q)
        self.assertNotEqual(new, old)
        self.assertEqual(q.commit({"w.c": ("x", 3), "elsewhere": ("x", 0)}), 1)
        proc.send_signal(signal.SIGCONT)
        lines.wait_for(lambda l: l["kind"] == "snapshot" and l.get("epoch") == new, what="the new snapshot")
        q.commit({"w.c": ("x", 4)}, [], ["w.nothing"])
        lines.wait_for(lambda l: l["kind"] == "notify" and l["txn"] == 2 and len(lines.lines) >= 4)
        self.assertEqual(stop(proc, signal.SIGTERM), 0)
        out = lines.finish()
        self.assertEqual([(l["kind"], l["txn"]) for l in out], [("snapshot", 1), ("notify", 2), ("snapshot", 1),
                                                                 ("notify", 2)])
        self.assertEqual(out[0]["epoch"], old)
        self.assertEqual(out[2], {"kind": "snapshot", "epoch": new, "txn": 1, "changed": ["w.c"],
                                  "values": {"w.c": {"type": "int64", "value": 3}}, "counters": {"w.c": 1}})
        self.assertEqual(out[3]["values"], {"w.c": {"type": "int64", "value": 4}})
        self.assertEqual(wait_position(pos, (new, 2)), (new, 2))

    def test_same_epoch_restart_of_the_watcher_and_text_output(self):
        env = self.env
        pos = os.path.join(env.dir, "watch.pos")
        p = env.peer()
        p.commit({"w.a": ("x", 1)})
        w = spawn([ORDOCTL, "--address", env.address, "watch", "w.**", "--resume", pos, "--count", "2"],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(read_line(w.stdout, 10, "snapshot"), "txn=1 snapshot: w.a=int64:1")
        p.commit({"w.b": ("s", "two words")})
        self.assertEqual(read_line(w.stdout, 10, "notify"), 'txn=2 w.b=string:"two words"')
        self.assertEqual(w.wait(10), 0)  # --count 2
        p.commit({}, [], ["w.a"])
        p.commit({"w.c": ("b", True)})
        p.commit({"x": ("b", True)})
        w = spawn([ORDOCTL, "--address", env.address, "watch", "w.**", "--resume", pos, "--count", "1"],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(read_line(w.stdout, 10, "catch-up"), "txn=5 changes: w.a w.c=bool:true")
        self.assertEqual(w.wait(10), 0)
        self.assertEqual(read_position(pos), (epoch(p), 5))
        # Nothing new: no line, and the position stays valid.
        w = spawn([ORDOCTL, "--address", env.address, "watch", "w.**", "--resume", pos, "--count", "1"],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        p.commit({"w.d": ("x", 1)})
        self.assertEqual(read_line(w.stdout, 10, "notify"), "txn=6 w.d=int64:1")
        self.assertEqual(w.wait(10), 0)
        # A position from another history: a full snapshot; so is a file that is not a position.
        with open(pos, "w") as f:
            f.write("epoch 00000000-0000-4000-8000-000000000000\ntxn 3\n")
        r = env.ordoctl("watch", "w.a", "--resume", pos, "--count", "1")
        self.assertEqual(r.stdout, "txn=6 snapshot: w.a\n")
        with open(pos, "w") as f:
            f.write("garbage\n")
        r = env.ordoctl("watch", "w.d", "--resume", pos, "--count", "1")
        self.assertEqual(r.stdout, "txn=6 snapshot: w.d=int64:1\n")
        self.assertIn("does not hold a position", r.stderr)
        self.assertEqual(env.ordoctl("watch", "w.d", "--resume", pos, "--initial", check=False).returncode, 2)
        self.assertEqual(env.ordoctl("watch", "w.d", "--resume", check=False).returncode, 2)


class BusRestart(ResumeTest):
    def setUp(self):
        # A daemon at a fixed socket path, so that it can come back at the same address.
        self.env = Env(config=harness.FIXED_SOCKET_CONFIG)
        self.addCleanup(self._finish)

    def test_watcher_reconnects_when_the_bus_daemon_comes_back(self):
        env = self.env
        pos = os.path.join(env.dir, "watch.pos")
        env.peer().commit({"w.a": ("x", 1)})
        proc, lines = self.watcher(pos)
        lines.wait_for(lambda l: l["kind"] == "snapshot")
        # The bus daemon goes away (ordod exits, the watcher waits) and comes
        # back at the same socket with a new guid, which the watcher drops to
        # reconnect.
        env.restart_daemon()
        env.start_ordod()
        q = env.peer()
        q.commit({"w.b": ("x", 2)})
        lines.wait_for(lambda l: l["kind"] == "snapshot" and l["epoch"] == epoch(q), what="the snapshot after reconnecting")
        q.commit({"w.c": ("x", 3)})
        lines.wait_for(lambda l: l["kind"] == "notify" and l["txn"] == 2, what="a live line after reconnecting")
        self.assertEqual(stop(proc, signal.SIGTERM), 0)
        out = lines.finish()
        self.assertEqual([(l["kind"], l["txn"], l["changed"]) for l in out],
                         [("snapshot", 1, ["w.a"]), ("snapshot", 1, ["w.b"]), ("notify", 2, ["w.c"])])
        self.assertIn("is back", proc.stderr.read())

    def test_gives_up_after_the_reconnect_timeout(self):
        env = self.env
        pos = os.path.join(env.dir, "watch.pos")
        proc, lines = self.watcher(pos, ("w.**",), "--reconnect-timeout", "1")
        lines.wait_for(lambda l: l["kind"] == "snapshot")
        stop(env.ordod, signal.SIGKILL)
        env.ordod = None
        self.assertEqual(proc.wait(15), 1)
        self.assertIn("did not come back within 1 s", proc.stderr.read())
        env.start_ordod()   # for the cleanup's checks


class DroppedNotify(ResumeTest):
    max_outgoing = 64 << 10   # the daemon drops what a stopped reader cannot take

    def test_gap_is_caught_up_with_changes(self):
        env = self.env
        pos = os.path.join(env.dir, "watch.pos")
        p = env.peer()
        model = Model()
        proc, lines = self.watcher(pos, ("big.**",))
        lines.wait_for(lambda l: l["kind"] == "snapshot")
        proc.send_signal(signal.SIGSTOP)
        blob = "x" * 8000
        for i in range(1, 201):
            k = f"big.k{i % 10}"
            v = f"{i}:{blob}"
            model.record(p.commit({k: ("s", v)}), {k: v})
        proc.send_signal(signal.SIGCONT)
        time.sleep(1.0)
        # The last Notify the daemon took came long before the end; the next
        # one shows the gap.
        k = "big.end"
        model.record(p.commit({k: ("b", True)}), {k: True})
        lines.wait_for(lambda l: l["txn"] >= 201, what="the line of transaction 201")
        self.assertEqual(stop(proc, signal.SIGTERM), 0)
        out = lines.finish()
        kinds = [l["kind"] for l in out]
        self.assertIn("changes", kinds, "no Notify was dropped, or the gap went unnoticed")
        self.assertLess(len(out), 100, "the daemon dropped nothing")
        since = 0
        for line in out:
            check_line(self, model, line, since)
            since = line["txn"]
        self.assertEqual(since, 201)
        self.assertEqual(wait_position(pos, (epoch(p), 201)), (epoch(p), 201))


class ResumeFile(ResumeTest):
    def test_a_position_that_cannot_be_saved_is_refused_before_any_line(self):
        env = self.env
        env.peer().commit({"w.a": ("x", 1)})
        d = os.path.join(env.dir, "a-directory")
        os.mkdir(d)
        r = env.ordoctl("watch", "w.**", "--resume", d, check=False)
        self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
        self.assertIn("is a directory", r.stderr)
        r = env.ordoctl("watch", "w.**", "--resume", os.path.join(env.dir, "no-such-dir", "pos"), check=False)
        self.assertEqual((r.returncode, r.stdout), (1, ""), r.stderr)
        self.assertIn("cannot write the position file", r.stderr)


class WaitingPass(ResumeTest):
    def test_catching_up_while_a_pass_waits_for_a_writer(self):
        """A watcher that starts while a pass waits for a writer of another
        peer prints every change of that pass once: its Register waits for
        the pass, so its catch-up read covers the whole transaction (with a
        position: Changes; without: Snapshot)."""
        for with_position in (True, False):
            with self.subTest(with_position=with_position):
                env = self.env
                tag = "p" if with_position else "s"
                pos = os.path.join(env.dir, f"race-{tag}.pos")
                p, w = env.peer(), env.peer()
                base = p.commit({f"{tag}.base": ("x", 1)})
                if with_position:
                    with open(pos, "w") as f:
                        f.write(f"epoch {epoch(p)}\ntxn {base}\n")
                writer = w.register(f"{tag}-writer", [f"{tag}.in"], [f"{tag}.out"],
                                    {"priority": ("i", -3), "timeout-ms": ("u", 4000)})
                done = {}
                bg = threading.Thread(target=lambda: done.setdefault("txn", env.peer().commit({f"{tag}.in": ("x", 1)})),
                                      daemon=True)
                bg.start()
                note = w.next_notify()
                txn = note[1]
                self.assertEqual(txn, base + 1)
                queued = p.stats()["queued"]
                proc, lines = self.watcher(pos, (f"{tag}.**",))
                deadline = time.monotonic() + 10
                while p.stats()["queued"] == queued:  # the watcher's Register waits for the pass
                    self.assertLess(time.monotonic(), deadline, "the watcher's Register was not queued")
                    time.sleep(0.02)
                w.call("Complete", "ota{sv}asas", writer, txn, {f"{tag}.out": ("x", 7)}, [], [])
                bg.join(10)
                self.assertEqual(done.get("txn"), txn)
                kind = "changes" if with_position else "snapshot"
                lines.wait_for(lambda l: l["kind"] == kind, what=f"the {kind} line")
                later = p.commit({f"{tag}.later": ("x", 3)})
                lines.wait_for(lambda l: l["txn"] == later)
                self.assertEqual(stop(proc, signal.SIGTERM), 0)
                out = lines.finish()
                self.assertEqual([(l["kind"], l["txn"]) for l in out], [(kind, txn), ("notify", later)])
                caught = {k: plain(v) for k, v in out[0]["values"].items()}
                expect = {f"{tag}.in": 1, f"{tag}.out": 7}
                if not with_position:
                    expect[f"{tag}.base"] = 1
                self.assertEqual(caught, expect)
                self.assertEqual(out[1]["changed"], [f"{tag}.later"])
                w.unregister(writer)


if __name__ == "__main__":
    harness.main("dbus resync")
