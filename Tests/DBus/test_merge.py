"""Merging writes over D-Bus (docs/dbus.md "Merging writes"): `ordoctl set
--merge` against a real ordod on a private dbus-daemon. A burst read from
stdin takes far fewer Commits than writes (checked with Stats `commits`),
every keypath ends with its last value, an observer sees the final values;
lines arriving while the input is quiet are committed without waiting for
more; malformed lines and Commits the service refuses are reported with
their line numbers.

Run: python3 Tests/DBus/test_merge.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import os
import random
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import ORDOCTL, spawn, stop  # noqa: E402
from test_dbus import DBusTest, E  # noqa: E402

SUMMARY = re.compile(r"^writes=(\d+) commits=(\d+) txn=(\d+)$")


def wait_for(predicate, timeout=10, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        r = predicate()
        if r:
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class MergeCase(DBusTest):
    """Runs `ordoctl set --merge` (no tests of its own)."""

    def merge(self, text, *args, expect_rc=0):
        r = subprocess.run([ORDOCTL, "--address", self.env.address, "set", "--merge", *args], input=text,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, expect_rc, r.stderr)
        m = SUMMARY.match(r.stdout.strip())
        self.assertTrue(m, r.stdout)
        return tuple(int(x) for x in m.groups()), r.stderr


class MergedSet(MergeCase):
    def test_burst_takes_few_commits_and_every_keypath_has_its_last_value(self):
        observer = self.env.peer()
        path = observer.register("observer", ["bench.**"])
        rnd = random.Random(14)
        lines, expected = [], {}
        for i in range(1000):
            k = f"bench.k{rnd.randrange(300):04d}"
            if rnd.random() < 0.05 and k in expected:
                lines.append(f"rm {k}")
                del expected[k]
            else:
                lines.append(f"{k}=int64:{i}")
                expected[k] = ("x", i)
        lines += ["", "# a comment", "touch bench.touched", "bench.s=s:a b=c"]
        expected["bench.s"] = ("s", "a b=c")
        (writes, commits, txn), _ = self.merge("\n".join(lines))  # no final newline: the last line counts too
        self.assertEqual(writes, 1002)
        self.assertGreaterEqual(commits, 1)
        self.assertLessEqual(commits * 10, writes, f"{commits} Commits for {writes} writes")
        p = self.env.peer()
        stats = p.stats()
        self.assertEqual(stats["commits"], commits)
        values, counters, last = p.snapshot(["bench.**"])
        self.assertEqual(dict(values), expected)
        self.assertEqual(last, txn)
        self.assertEqual(counters["bench.touched"], 1)
        # The observer: one Notify per Commit, ending with the final values.
        seen = {}
        notes = observer.notifies(commits, timeout=20)
        for contract, _txn, changed, vals in notes:
            self.assertEqual(contract, path)
            for k in changed:
                seen[k] = vals.get(k)
        self.assertEqual([n[1] for n in notes], sorted(n[1] for n in notes))
        self.assertEqual(notes[-1][1], txn)
        observer.no_notify()
        self.assertEqual({k: v for k, v in seen.items() if v is not None}, expected)
        self.assertEqual(sorted(k for k, v in seen.items() if v is None and k in expected), [])

    def test_lines_arriving_while_the_input_is_quiet_are_committed(self):
        p = self.env.peer()
        w = spawn([ORDOCTL, "--address", self.env.address, "set", "--merge"], stdin=subprocess.PIPE,
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            # Two lines at once: the first goes out alone, the second waits
            # for its reply -- and must go out then, with no more input.
            w.stdin.write(b"q.a=1\nq.b=2\n")
            w.stdin.flush()
            wait_for(lambda: p.snapshot(["q.*"])[0] == {"q.a": ("x", 1), "q.b": ("x", 2)}, what="q.a and q.b")
            self.assertIsNone(w.poll(), "ordoctl is still reading")
            w.stdin.write(b"q.a=3\n")
            w.stdin.flush()
            wait_for(lambda: p.snapshot(["q.a"])[0] == {"q.a": ("x", 3)}, what="q.a=3")
            out, err = w.communicate(timeout=20)
        finally:
            stop(w)
        self.assertEqual(w.returncode, 0, err)
        writes, commits, txn = (int(x) for x in SUMMARY.match(out.decode().strip()).groups())
        self.assertEqual(writes, 3)
        self.assertIn(commits, (2, 3))
        self.assertEqual(txn, p.snapshot(["**"])[2])

    def test_malformed_line_stops_the_input_after_writing_the_lines_before_it(self):
        (writes, commits, txn), err = self.merge("m.a=1\nm.b=2\nthis is not a write\nm.c=3\n", expect_rc=2)
        self.assertEqual(writes, 2)
        self.assertIn("line 3", err)
        self.assertIn("not KEY=VALUE", err)
        p = self.env.peer()
        self.assertEqual(p.snapshot(["m.*"])[0], {"m.a": ("x", 1), "m.b": ("x", 2)})
        (writes, _, _), err = self.merge("m.d=1\nm..e=2\n", expect_rc=2)
        self.assertEqual(writes, 1)
        self.assertIn("line 2", err)
        self.assertIn(E("InvalidKeypath"), err)
        for bad in (["--max-batch", "0"], ["--max-batch"], ["k=v"]):
            r = subprocess.run([ORDOCTL, "--address", self.env.address, "set", "--merge", *bad], input="",
                               capture_output=True, text=True, timeout=20)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("ordoctl:", r.stderr)
        self.assertTrue(self.env.alive())


class MergedSetLimit(MergeCase):
    # A service that takes at most 3 entries per Commit.
    ordod_args = ("--max-keypaths-per-call", "3")

    def test_a_refused_commit_fails_its_lines_only_and_max_batch_avoids_it(self):
        lines = "".join(f"l.k{i}={i}\n" for i in range(40))
        (writes, commits, _), err = self.merge(lines, expect_rc=1)
        self.assertEqual(writes, 40)
        # The first line went alone and committed; the batches merged behind
        # it have more than 3 entries (unless a reply came in between) and
        # are refused with Limit, each named by its lines: exactly their
        # lines are missing, the others committed.
        failed = set()
        for line in err.splitlines():
            m = re.match(r"^ordoctl: lines? (\d+)(?:-(\d+))?: (\S+): ", line)
            self.assertTrue(m, err)
            self.assertEqual(m.group(3), E("Limit"), line)
            first, last = int(m.group(1)), int(m.group(2) or m.group(1))
            self.assertGreater(last - first + 1, 3, line)
            failed.update(range(first, last + 1))
        self.assertTrue(failed, err)
        self.assertNotIn(1, failed)
        p = self.env.peer()
        self.assertEqual(p.snapshot(["l.*"])[0],
                         {f"l.k{i}": ("x", i) for i in range(40) if i + 1 not in failed})
        self.assertEqual(p.stats()["commits"], commits - len(re.findall("Limit", err)))
        before = p.stats()["commits"]
        (writes, commits, txn), _ = self.merge(lines, "--max-batch", "3")
        self.assertEqual(writes, 40)
        self.assertGreaterEqual(commits, 14)
        self.assertEqual(p.snapshot(["l.*"])[0], {f"l.k{i}": ("x", i) for i in range(40)})
        self.assertEqual(p.stats()["commits"], before + commits)


if __name__ == "__main__":
    harness.main("dbus merge")
