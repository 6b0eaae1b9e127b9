"""The durable ordod (SPEC §11), with real processes: `ordod --state PATH` on a
private dbus-daemon, clients through jeepney, kill -9, a tiny tmpfs filled
up, read-only mounts, and state files that must be refused.

Run as root (the storage tests mount tmpfs file systems):
  python3 Tests/DBus/test_durable.py [-k NAME]   (ORDO_BIN = the build's bin dir)
"""
import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IFACE, NAME, ORDOD, PATH, Env, Peer, RemoteError, read_line, spawn, stop  # noqa: E402

from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call  # noqa: E402
from jeepney.io.blocking import open_dbus_connection  # noqa: E402

STORAGE = "dev.ordo.Error.Storage"
STORE_TOOL = os.path.join(os.path.dirname(ORDOD), "ordo-store-tool")
KEYS = 37


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_state(path):
    """The state file as SQLite holds it (read-only; ordod may be running):
    epoch, last transaction, {keypath: (value, counter, changed_at)}."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        meta = dict(db.execute("SELECT name, value FROM meta"))
        rows = {k: (None if t == 0 else v, c, a)
                for k, t, v, c, a in db.execute("SELECT keypath, type, value, counter, changed_at FROM keypath")}
    finally:
        db.close()
    return meta["epoch"], int(meta["last_transaction"]), rows


class Model:
    """What the bus must hold after a sequence of transactions: values,
    counters and changed-at (tombstones keep their counter), SPEC §2, §10."""

    def __init__(self):
        self.values, self.counters, self.changed_at = {}, {}, {}
        self.last = 0

    def apply(self, txn, sets, touch, remove):
        changed = set()
        for k, v in sets.items():
            if self.values.get(k) != v:
                self.values[k] = v
                changed.add(k)
        for k in touch:
            changed.add(k)
        for k in remove:
            if k in self.values:
                del self.values[k]
                changed.add(k)
        for k in changed:
            self.counters[k] = self.counters.get(k, 0) + 1
            self.changed_at[k] = txn
        self.last = txn


def writes(n):
    """The n-th commit of the crash test: two sets, a touch, sometimes a
    remove (a value set by an earlier commit)."""
    a = n % KEYS
    b = (a + 1 + n % 5) % KEYS
    sets = {f"k.{a}": n, f"k.{b}": -n}
    remove = [f"k.{(a + 20) % KEYS}"] if n % 7 == 0 else []
    return sets, ["t.all"], remove


class Pipeliner(threading.Thread):
    """One client connection sending Commits with up to `window` in flight
    until stopped; records which were acknowledged with which id."""

    def __init__(self, address, first, window=64):
        super().__init__(daemon=True)
        self.conn = open_dbus_connection(address)
        self.first = first
        self.window = window
        self.sent = []          # commit numbers, in sending order
        self.acked = {}         # commit number -> txn id
        self.errors = {}        # commit number -> error name
        self.stopping = threading.Event()
        self.serial = 1_000_000

    def message(self, n):
        sets, touch, remove = writes(n)
        return new_method_call(DBusAddress(PATH, bus_name=NAME, interface=IFACE), "Commit", "a{sv}asas",
                               ({k: ("x", v) for k, v in sets.items()}, touch, remove))

    def run(self):
        pending = {}
        n = self.first
        deadline = None
        while True:
            if self.stopping.is_set() and deadline is None:
                deadline = time.monotonic() + 10
            while not self.stopping.is_set() and len(pending) < self.window:
                self.serial += 1
                self.conn.send(self.message(n), serial=self.serial)
                pending[self.serial] = n
                self.sent.append(n)
                n += 1
            if not pending or (deadline is not None and time.monotonic() > deadline):
                break
            try:
                m = self.conn.receive(timeout=0.5)
            except TimeoutError:
                continue
            r = m.header.fields.get(HeaderFields.reply_serial)
            if r not in pending:
                continue
            k = pending.pop(r)
            if m.header.message_type == MessageType.method_return:
                self.acked[k] = m.body[0]
            else:
                self.errors[k] = m.header.fields.get(HeaderFields.error_name)
        self.unresolved = list(pending.values())
        self.conn.close()


class Observer(threading.Thread):
    """Registers an observer on k.** and t.all and records every Notify."""

    def __init__(self, address):
        super().__init__(daemon=True)
        self.peer = Peer(address)
        self.path = self.peer.register("durable-observer", ["k.**", "t.all"])
        self.seen = []
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.is_set():
            try:
                m = self.peer.conn.receive(timeout=0.2)
            except TimeoutError:
                continue
            except (OSError, EOFError):
                break
            if m.header.fields.get(HeaderFields.member) == "Notify":
                self.seen.append(tuple(m.body))
        self.peer.close()


class DurableCase(unittest.TestCase):
    def setUp(self):
        self.env = Env(start_ordod=False)
        self.addCleanup(self.env.close)
        self.state = os.path.join(self.env.dir, "state.ordo")

    def start(self, *args, state=None):
        p = self.env.start_ordod(["--state", state or self.state, *args])
        self.env.ordod = p
        return p

    def refused(self, *args, state=None):
        """Starts ordod expecting it to refuse: returns its exit code and stderr."""
        r = subprocess.run([ORDOD, "--address", self.env.address, "--state", state or self.state, *args],
                           capture_output=True, text=True, timeout=30)
        return r.returncode, r.stderr


class Crash(DurableCase):
    ROUNDS = 5

    def test_kill_9_rounds_lose_nothing_acknowledged(self):
        rng = random.Random(int(os.environ.get("ORDO_TEST_SEED", "0")) or None)
        model = Model()
        sent_total = acked_total = 0
        epoch = None
        first = 1
        notify_checked = 0
        values_at = {}   # txn -> the set values of that commit
        for rnd in range(self.ROUNDS):
            sync = "normal" if rnd % 2 else "full"
            ordod = self.start("--sync", sync)
            peer = self.env.peer()
            # The state before this round: everything the model says.
            self.check_state(peer, model, epoch)
            e, _, _ = read_state(self.state)
            epoch = epoch or e
            self.assertEqual(e, epoch, "the epoch changed across a restart")
            observer = Observer(self.env.address)
            observer.start()
            client = Pipeliner(self.env.address, first)
            client.start()
            time.sleep(rng.uniform(0.3, 1.5))
            ordod.send_signal(signal.SIGKILL)
            ordod.wait(timeout=10)
            harness._live.remove(ordod)
            client.stopping.set()
            client.join(timeout=30)
            self.assertFalse(client.is_alive(), "the committing client did not finish")
            observer.stopping.set()
            observer.join(timeout=10)

            # Which commits survived: the state file's last id says how many
            # of this round's commits (ids are given in sending order). A
            # --sync full ordod acknowledges once a commit is in the state's
            # commit log; an open (ordo-store-tool open, as ordod's next
            # start) writes what the log holds into the database.
            self.assertEqual(subprocess.run([STORE_TOOL, "open", self.state], capture_output=True, text=True,
                                            timeout=60).stdout.strip(), "opened")
            _, last, _ = read_state(self.state)
            survived = last - model.last
            acked = sorted(client.acked)
            self.assertGreater(len(acked), 0, f"round {rnd}: no Commit was acknowledged before the kill")
            for i, n in enumerate(client.sent):
                if n in client.acked:
                    self.assertEqual(client.acked[n], model.last + i + 1, f"round {rnd}: commit {n}'s id")
            self.assertGreaterEqual(survived, len(acked), f"round {rnd}: an acknowledged transaction was lost")
            self.assertEqual(acked, client.sent[:len(acked)], "acknowledged out of order")
            self.assertLessEqual(survived, len(client.sent))
            for i, n in enumerate(client.sent[:survived]):
                sets, touch, remove = writes(n)
                model.apply(model.last + 1, sets, touch, remove)
                values_at[model.last] = sets
            # An observer never saw a Notify of a transaction that did not survive.
            for contract, txn, changed, values in observer.seen:
                self.assertLessEqual(txn, model.last, f"round {rnd}: Notify of transaction {txn}, which was lost")
                self.assertEqual({k: v[1] for k, v in values.items()},
                                 {k: v for k, v in values_at[txn].items()}, f"Notify of transaction {txn}")
                notify_checked += 1
            sent_total += len(client.sent)
            acked_total += len(acked)
            print(f"\n  round {rnd} (--sync {sync}): {len(client.sent)} sent, {len(acked)} acknowledged, "
                  f"{survived} survived, {len(observer.seen)} Notify seen", file=sys.stderr)
            first = client.sent[-1] + 1
        ordod = self.start()
        peer = self.env.peer()
        self.check_state(peer, model, epoch)
        st = peer.stats()
        self.assertGreater(acked_total, 1000, "thousands of transactions")
        self.assertGreater(notify_checked, 0)
        # A last round without a kill: group commit shares syncs.
        client = Pipeliner(peer_address := self.env.address, first)
        client.start()
        time.sleep(0.5)
        client.stopping.set()
        client.join(timeout=30)
        st = peer.stats()
        print(f"  after {st['commits']} pipelined commits: {st['syncs']} syncs", file=sys.stderr)
        self.assertEqual(len(client.acked), len(client.sent), peer_address)
        self.assertLess(st["syncs"], st["commits"], "pipelined Commits did not share syncs")
        self.assertEqual(stop(ordod), 0)

    def check_state(self, peer, model, epoch):
        values, counters, txn = peer.snapshot(["**"])
        self.assertEqual(txn, model.last, "Snapshot's transaction id")
        self.assertEqual(peer.call("Get", "ss", IFACE, "Transaction", iface="org.freedesktop.DBus.Properties")[0][1],
                         model.last, "the Transaction property")
        self.assertEqual({k: v[1] for k, v in values.items()}, model.values, "values")
        self.assertEqual({k: c for k, c in counters.items() if k in model.values},
                         {k: c for k, c in model.counters.items() if k in model.values}, "counters")
        e, last, rows = read_state(self.state)
        if epoch is not None:
            self.assertEqual(e, epoch, "the epoch")
        self.assertEqual(last, model.last)
        self.assertEqual(rows, {k: (model.values.get(k), model.counters[k], model.changed_at[k]) for k in model.counters},
                         "values, counters and changed-at (tombstones included) in the state file")
        if model.values:
            k = sorted(model.values)[0]
            self.assertEqual(peer.get(k)[1:], (model.values[k], model.counters[k]))


class Memory(DurableCase):
    def test_without_state_a_new_epoch_each_start(self):
        epochs = []
        for _ in range(2):
            p = self.env.start_ordod([])
            self.env.ordod = p
            peer = self.env.peer()
            self.assertEqual(peer.commit({"a.b": ("x", 1)}), 1)
            self.assertEqual(stop(p), 0)
            epochs.append([line for line in self.env.log().splitlines() if "model lives in memory" in line][-1])
        self.assertNotEqual(epochs[0], epochs[1])
        self.assertFalse(os.path.exists(self.state))


def cpu_ticks(pid):
    """The CPU time (user + system, in clock ticks) process `pid` has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class BusyPoll(DurableCase):
    """After a sync the service polls for the next call for --busy-poll-us
    microseconds, then sleeps (docs/dbus.md, "Durable state")."""

    def cpu_after_a_commit(self, *args):
        """Starts ordod with `args`, commits once and returns the CPU ticks
        ordod used in the second after the reply (100 ticks a second)."""
        ordod = self.start(*args)
        peer = self.env.peer()
        value = len(args) + 1
        self.assertGreater(peer.commit({"a.b": ("x", value)}), 0)
        before = cpu_ticks(ordod.pid)
        time.sleep(1.0)
        used = cpu_ticks(ordod.pid) - before
        self.assertEqual(peer.get("a.b")[1], value)
        return used

    def test_the_service_polls_for_the_limit_then_sleeps(self):
        # 300 ms of polling after the sync: about 30 ticks, then nothing.
        used = self.cpu_after_a_commit("--busy-poll-us", "300000")
        self.assertGreaterEqual(used, 10, "no busy poll after the sync")
        self.assertLessEqual(used, 60, "the busy poll did not end")

    def test_by_default_and_with_0_the_service_sleeps_soon_after_a_sync(self):
        self.assertLessEqual(self.cpu_after_a_commit(), 5)
        stop(self.env.ordod)
        self.env.ordod = None
        self.assertLessEqual(self.cpu_after_a_commit("--busy-poll-us", "0"), 5)

    def test_bad_busy_poll_setting(self):
        for value in ("-1", "1000001", "50us", ""):
            rc, err = self.refused("--busy-poll-us", value)
            self.assertEqual(rc, 2, value)
            self.assertIn(f'--busy-poll-us needs a number of microseconds from 0 to 1000000, got "{value}"', err)
        self.assertFalse(os.path.exists(self.state))
        r = subprocess.run([ORDOD, "--address", self.env.address, "--busy-poll-us", "50"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--busy-poll-us needs --state PATH", r.stderr)


class Tmpfs:
    """A tmpfs of `size` mounted for one test (root only)."""

    def __init__(self, test, size, ro=False):
        self.dir = os.path.join(test.env.dir, "mnt")
        os.makedirs(self.dir, exist_ok=True)
        opts = f"size={size}" + (",ro" if ro else "")
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", self.dir], check=True)
        test.addCleanup(self.umount)

    def remount(self, opts):
        subprocess.run(["mount", "-o", "remount," + opts, self.dir], check=True)

    def umount(self):
        subprocess.run(["umount", "-l", self.dir], check=False)


@unittest.skipUnless(os.geteuid() == 0, "mounting tmpfs needs root (make test runs as root)")
class StorageFailure(DurableCase):
    def test_full_disk_commit_gets_storage_error_and_service_goes_on(self):
        fs = Tmpfs(self, "3m")
        state = os.path.join(fs.dir, "state.ordo")
        ordod = self.start(state=state)
        peer = self.env.peer()
        watcher = self.env.peer()
        watch = watcher.register("w", ["big.**"])
        self.assertEqual(peer.commit({"big.v": ("s", "small")}), 1)
        self.assertEqual(watcher.next_notify()[1], 1)
        # Fill the file system.
        filler = os.path.join(fs.dir, "filler")
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        big = "x" * 700_000
        with self.assertRaises(RemoteError) as cm:
            peer.commit({"big.v": ("s", big), "big.w": ("x", 2)})
        self.assertEqual(cm.exception.name, STORAGE)
        self.assertIn("transaction 2 was not stored", cm.exception.message)
        self.assertIn(state, cm.exception.message)
        self.assertIn("full", cm.exception.message)
        # Applied nowhere: memory is as before, no Notify, the service serves.
        self.assertEqual(peer.get("big.v")[1:], ("small", 1))
        self.assertRaises(RemoteError, peer.get, "big.w")
        self.assertEqual(peer.snapshot(["big.**"])[2], 1)
        watcher.no_notify(0.5)
        st = peer.stats()
        self.assertEqual((st["sync-failures"], st["storage-errors"]), (1, 1))
        self.assertTrue(self.env.alive())
        # Space back: the same commit works, with the id that was not given.
        os.unlink(filler)
        self.assertEqual(peer.commit({"big.v": ("s", big), "big.w": ("x", 2)}), 2)
        n = watcher.next_notify()
        self.assertEqual((n[0], n[1], n[3]["big.w"][1]), (watch, 2, 2))
        self.assertEqual(stop(ordod), 0)
        self.start(state=state)
        self.assertEqual(self.env.peer().get("big.v")[1:], (big, 2))

    def test_read_only_state_directory_refused_at_start(self):
        fs = Tmpfs(self, "1m", ro=True)
        state = os.path.join(fs.dir, "state.ordo")
        rc, err = self.refused(state=state)
        self.assertNotEqual(rc, 0)
        self.assertIn(state, err)
        self.assertIn("Read-only file system", err)
        self.assertFalse(os.path.exists(state))
        # An existing state on a file system made read-only.
        fs.remount("rw")
        ordod = self.start(state=state)
        self.assertEqual(self.env.peer().commit({"a.b": ("x", 1)}), 1)
        self.assertEqual(stop(ordod), 0)
        before = digest(state)
        fs.remount("ro")
        rc, err = self.refused(state=state)
        self.assertNotEqual(rc, 0)
        self.assertIn(state, err)
        self.assertIn("Read-only file system", err)
        self.assertEqual(digest(state), before)


class Refusals(DurableCase):
    def assert_refused(self, words, *args):
        before = digest(self.state)
        rc, err = self.refused(*args)
        self.assertNotEqual(rc, 0, err)
        self.assertIn("refusing to start", err)
        self.assertIn(self.state, err)
        for w in words:
            self.assertIn(w, err)
        self.assertEqual(digest(self.state), before, "the refused state file was changed")
        return err

    def test_corrupt_file(self):
        with open(self.state, "wb") as f:
            f.write(os.urandom(8192))
        self.assert_refused(["is not an Ordo state file"])

    def test_damaged_rows(self):
        ordod = self.start()
        self.env.peer().commit({"a.b": ("x", 1)})
        self.assertEqual(stop(ordod), 0)
        db = sqlite3.connect(self.state)
        db.execute("UPDATE keypath SET changed_at = 99")
        db.commit()
        db.close()
        self.assert_refused(["damaged"])

    def test_future_format(self):
        ordod = self.start()
        self.env.peer().commit({"a.b": ("x", 1)})
        self.assertEqual(stop(ordod), 0)
        db = sqlite3.connect(self.state)
        db.execute("PRAGMA user_version = 7")
        db.close()
        self.assert_refused(["format version 7", "newer"])

    def test_foreign_database(self):
        db = sqlite3.connect(self.state)
        db.execute("CREATE TABLE songs(title TEXT)")
        db.commit()
        db.close()
        self.assert_refused(["another application"])

    def test_second_ordod_on_the_same_state_is_refused(self):
        ordod = self.start()
        peer = self.env.peer()
        self.assertEqual(peer.commit({"a.b": ("x", 1)}), 1)
        err = self.assert_refused(["locked by another ordod"], "--name", "dev.ordo.Other")
        self.assertTrue(self.env.alive())
        self.assertEqual(peer.commit({"a.b": ("x", 2)}), 2)
        self.assertEqual(stop(ordod), 0)
        self.assertNotIn("serving", err)

    def test_bad_sync_setting(self):
        rc, err = self.refused("--sync", "sometimes")
        self.assertEqual(rc, 2)
        self.assertIn('unknown sync setting "sometimes"', err)
        self.assertFalse(os.path.exists(self.state))


if __name__ == "__main__":
    harness.main("test_durable")
