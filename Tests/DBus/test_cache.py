"""Consistent reads under concurrent committers (docs/dbus.md "Consistent
reads: the cache option"), through the Python package's ordo.Client: every
view a cached watch or writer is given (``note.cache``) equals the service's
state of its read set at the notified transaction.

Method. Committer processes each make a few hundred random commits (sets,
touches, removes and tree removals of leaves, ancestors and descendants)
over a small keyspace under ``m``, all at once, and log every commit with
the transaction id its reply gave. Meanwhile, in this process, three
cached contracts record their notifications: a watch that applies every
``Notify`` (no gap check), a watch with the gap check's ``Changes``
catch-ups and an initial snapshot, and a writer, called inside each pass,
that writes a keypath it reads (``m.a.n``, a count of the rest of its read
set) and records each answer with its txn. A last commit touches ``m``,
which every read set sees. Afterwards the logged commits, ordered by id,
are replayed on a model of the store (sets, then touches, then removes, as
``Commit`` applies them; ``k.**`` removes the tree), each followed by the
writer's answer in its pass, which gives the state after every transaction
and the state each answer was computed from. The model is checked
against the service before it is used: at the end, ``Changes(0, ["m.**"])``
has the model's values, and each keypath's counter is the number of
replayed transactions that changed it (a counter rises by exactly 1 per
transaction that changes its keypath, SPEC §2): a transaction missing from
the logs, or replayed wrongly, shows there. Each recorded view is then
compared, types included, with the model's state at its txn (for the
writer: the state it computed from, before its own answer) restricted to
the read patterns. (The ``Notify`` of an uncached ``**`` watch cannot serve
as the history: a tree removal lists only the keypath it was given.)

Run: python3 Tests/DBus/test_cache.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import bisect
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import spawn, stop  # noqa: E402
from test_dbus import DBusTest  # noqa: E402

PYTHON_SRC = os.path.join(harness.ROOT, "bindings", "python", "src")
sys.path.insert(0, PYTHON_SRC)
import ordo  # noqa: E402

# Leaves, ancestors and descendants: a value may sit at any level.
KEYS = ["m", "m.a", "m.a.b", "m.a.c", "m.a.b.d", "m.x", "m.x.1", "m.x.1.v", "m.x.2", "m.x.2.v", "m.x.2.w",
        "m.x.3.v", "m.x.3.v.z", "m.y"]

# A committer in a process of its own: `count` random commits of one to
# three writes each, then the log of those that committed, as JSON lines
# [txn, sets, touches, removes].
COMMITTER = r"""
import json, random, sys
sys.path.insert(0, sys.argv[1])
import ordo
keys, rng, count = sys.argv[2].split(","), random.Random(int(sys.argv[3])), int(sys.argv[4])
where = sys.argv[5:]
c = ordo.Client(direct=where[1]) if where[0] == "--direct" else ordo.Client(where[0])
for _ in range(count):
    sets, touch, remove = {}, [], []
    for _ in range(rng.randint(1, 3)):
        k, op = rng.choice(keys), rng.random()
        if op < 0.45:
            sets[k] = rng.choice([rng.randint(0, 3), "s%d" % rng.randint(0, 3)])
        elif op < 0.6:
            touch.append(k)
        elif op < 0.8:
            remove.append(k)
        else:
            remove.append(k + ".**")
    txn = c.commit(sets, touch, remove)
    if txn:
        print(json.dumps([txn, sets, touch, remove]))
"""


def matches(pattern, key):
    """SPEC §1: `*` is one segment, a last `**` the node and its descendants."""
    p, k = pattern.split("."), key.split(".")
    if p[-1] == "**":
        return len(k) >= len(p) - 1 and all(a in ("*", b) for a, b in zip(p[:-1], k))
    return len(p) == len(k) and all(a in ("*", b) for a, b in zip(p, k))


def typed(values, k):
    """k's value with its type (1 and "1" differ), None without one."""
    return (type(values[k]).__name__, values[k]) if k in values else None


def replay(commits, answers):
    """The state after each logged transaction -- its commit, then the
    writer's answer in its pass, if any -- as a list of (txn, {keypath:
    value}) from (0, {}); the state each answer was computed from (after the
    commit), by txn; and how many transactions changed each keypath."""
    state, at, computed, counters = {}, [(0, {})], {}, {}
    for txn, sets, touch, remove in sorted(commits):
        before = dict(state)
        state.update(sets)
        for k in remove:
            if k.endswith(".**"):
                root = k[:-3]
                for x in [x for x in state if x == root or x.startswith(root + ".")]:
                    del state[x]
            else:
                state.pop(k, None)
        if txn in answers:
            computed[txn] = dict(state)
            state.update(answers[txn])
        for k in set(touch) | {k for k in set(state) | set(before) if typed(state, k) != typed(before, k)}:
            counters[k] = counters.get(k, 0) + 1
        at.append((txn, dict(state)))
    return at, computed, counters


class Recorder(threading.Thread):
    """Takes a watch's notifications into `notes` until one at or past
    `until` (set once the last transaction is known)."""

    def __init__(self, watch, what):
        super().__init__(name=what, daemon=True)
        self.watch = watch
        self.notes = []
        self.until = None
        self.error = None

    def run(self):
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                try:
                    note = self.watch.next(timeout=0.2)
                except TimeoutError:
                    pass
                else:
                    self.notes.append(note)
                if self.until is not None and self.notes and self.notes[-1].txn >= self.until:
                    return
            raise AssertionError(f"{self.name}: not at transaction {self.until} in time; the last notifications: "
                                 f"{[(n.txn, n.kind) for n in self.notes[-5:]]}")
        except BaseException as e:  # noqa: BLE001 -- raised again by the test
            self.error = e


class ConcurrentCommitters(DBusTest):
    COMMITTERS = 4
    COMMITS = 250

    def client(self, **kw):
        c = ordo.Client(direct=self.env.direct, **kw) if self.env.direct else ordo.Client(self.env.address, **kw)
        self.addCleanup(c.close)
        return c

    def test_every_view_is_the_read_set_at_its_transaction(self):
        # Pure Notify application, and with the gap check's catch-ups.
        plain = ["m.a.b", "m.x.*.v", "m.y"]
        applied = Recorder(self.client().watch(plain, cache=True, gap_check=False), "applied")
        tree = ["m.a.**", "m.x.*.v"]
        checked = Recorder(self.client().watch(tree, cache=True, initial=True), "checked")
        # A writer that reads what it writes: m.a.n, the number of the other
        # keypaths of its read set (as a normalizer, it sees its own answers).
        writer_client = self.client()
        calls, answers = [], {}

        def count(note):
            calls.append(note)
            if note.initial:
                return None
            answers[note.txn] = {"m.a.n": sum(k != "m.a.n" for k in note.cache)}
            return answers[note.txn]

        writer = writer_client.add_writer(count, "count", tree, ["m.a.n"], timeout_ms=5000, cache=True)
        writer_client.start()
        for r in (applied, checked):
            r.start()

        procs = [spawn([sys.executable, "-c", COMMITTER, PYTHON_SRC, ",".join(KEYS), str(seed), str(self.COMMITS),
                        *self.env.peer_address()], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for seed in range(self.COMMITTERS)]
        commits = []
        for p in procs:
            self.addCleanup(stop, p)
        for p in procs:
            out, err = p.communicate(timeout=240)
            self.assertEqual(p.returncode, 0, err.decode())
            commits += [json.loads(line) for line in out.decode().splitlines()]
        # A last transaction that every read set sees (an ancestor of all).
        end = self.client().commit(touch=["m"])
        commits.append([end, {}, ["m"], []])
        for r in (applied, checked):
            r.until = end
        for r in (applied, checked):
            r.join(250)
            if r.error is not None:
                raise r.error

        # The model, checked against the service.
        self.assertGreaterEqual(len(commits), self.COMMITTERS * self.COMMITS * 3 // 4)
        self.assertEqual(len({c[0] for c in commits}), len(commits))
        self.assertLessEqual(set(answers), {c[0] for c in commits})
        at, computed, counters = replay(commits, answers)
        service = self.client().changes(0, ["m.**"])
        self.assertEqual(sorted(service.counters.items()), sorted(counters.items()))
        self.assertEqual({k: typed(service.values, k) for k in service.values},
                         {k: typed(at[-1][1], k) for k in at[-1][1]})
        txns = [t for t, _ in at]

        def check(what, patterns, notes, states=None):
            """Each view against the state at its txn (`states`: the state
            a writer's call computes from, by txn)."""
            self.assertTrue(notes, what)
            for n in notes:
                state = states[n.txn] if states and n.txn in states else at[bisect.bisect_right(txns, n.txn) - 1][1]
                want = {k: typed(state, k) for k in state if any(matches(p, k) for p in patterns)}
                got = {k: typed(n.cache, k) for k in n.cache}
                self.assertEqual(got, want, f"{what}: {n.kind} at transaction {n.txn}")
            return {kind: sum(n.kind == kind for n in notes) for kind in ("notify", "changes", "snapshot")}

        kinds = check("applied", plain, applied.notes)
        self.assertEqual(kinds["notify"], len(applied.notes))
        self.assertGreater(len(applied.notes), len(commits) // 4)
        kinds = check("checked", tree, checked.notes)
        self.assertEqual(checked.notes[0].kind, "snapshot")
        self.assertGreater(kinds["notify"], 0)
        # One initial call (at registration), then one call per transaction
        # that its read set saw, each answered and accepted.
        self.assertEqual([n.initial for n in calls], [True] + [False] * (len(calls) - 1))
        check("writer", tree, calls, computed)
        self.assertEqual((writer.refused, writer.completed), (0, len(calls)))
        self.assertGreater(len(answers), len(commits) // 4)


if __name__ == "__main__":
    harness.main("dbus cache")
