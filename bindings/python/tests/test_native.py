"""The in-process binding: the real libordo.so through ctypes."""
import gc
import math
import os
import threading
import weakref

import pytest

import ordo
from ordo import native


@pytest.fixture
def bus(library):
    errors = []
    with ordo.Bus(library, on_error=lambda c, e: errors.append((c.name, e))) as b:
        b.errors = errors
        yield b


def test_finding_the_library(library, monkeypatch, tmp_path):
    monkeypatch.setenv("ORDO_LIBRARY", library)
    with ordo.Bus() as b:
        assert b.version == "1.0.0"
    monkeypatch.setenv("ORDO_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(ordo.LibraryNotFound, match="ORDO_LIBRARY"):
        ordo.Bus()
    with pytest.raises(ordo.LibraryNotFound, match="library= argument"):
        ordo.Bus(str(tmp_path / "other.so"))
    monkeypatch.delenv("ORDO_LIBRARY")
    monkeypatch.setattr(native.ctypes.util, "find_library", lambda name: None)
    with pytest.raises(ordo.LibraryNotFound, match="find_library"):
        ordo.Bus()


def test_values_of_every_type(bus):
    values = {"v.b": True, "v.f": False, "v.i": -2**63, "v.j": 2**63 - 1, "v.d": -0.25, "v.s": "héllo ✓",
              "v.e": "", "v.y": b"\x00\xffab", "v.z": b""}
    with bus.transaction() as t:
        for k, v in values.items():
            bus.set(k, v)
    assert t.txn == 1
    for k, v in values.items():
        got = bus.get(k)
        assert got == v and type(got) is type(v), k
        assert bus.counter(k) == 1
    assert [bus.type_of(k) for k in ("v.b", "v.i", "v.d", "v.s", "v.y")] == \
        ["bool", "int64", "double", "string", "bytes"]
    with bus.transaction():
        bus.set("v.n", float("nan"))
    assert math.isnan(bus.get("v.n"))
    assert bus.get("v.i", int) == -2**63
    with pytest.raises(ordo.TypeMismatch, match="v.s"):
        bus.get("v.s", int)
    with pytest.raises(ordo.InvalidArgument):
        bus.get("v.s", list)


def test_snapshot_reads_values_and_counters_at_one_moment(bus):
    values = {"v.b": False, "v.i": -2**63, "v.d": -0.25, "v.s": "héllo ✓", "v.e": "", "v.y": b"\x00\xff", "v.z": b""}
    with bus.transaction():
        for k, v in values.items():
            bus.set(k, v)
        bus.set("v.gone", 1)
        bus.set("other", 1)
    with bus.transaction():
        bus.remove("v.gone")
        bus.touch("v.event")
        bus.set("v.i", 7)
    values["v.i"] = 7
    snap = bus.snapshot(["v.**"])
    assert isinstance(snap, ordo.Snapshot)
    assert snap == ordo.Snapshot(values, {**{k: 1 for k in values}, "v.i": 2, "v.gone": 2, "v.event": 1}, 2)
    assert all(type(snap.values[k]) is type(v) for k, v in values.items())
    assert bus.snapshot().values == {**values, "other": 1}
    assert bus.snapshot(["v.i", "v.s", "v.i"]) == ordo.Snapshot({"v.i": 7, "v.s": "héllo ✓"}, {"v.i": 2, "v.s": 1}, 2)
    assert bus.snapshot([]) == ordo.Snapshot({}, {}, 2)
    # The thread's own transaction: its writes, no counter yet for a new value.
    with bus.transaction():
        bus.set("v.new", "x")
        bus.remove("v.s")
        assert bus.snapshot(["v.new", "v.s"]) == ordo.Snapshot({"v.new": "x"}, {"v.s": 1}, 2)
    with pytest.raises(ordo.InvalidKeypath):
        bus.snapshot(["v..x"])
    with pytest.raises(ordo.InvalidArgument):
        bus.snapshot("v.**")


def test_snapshot_inside_a_callback_obeys_the_read_set(bus):
    seen = {}

    def reader(note):
        seen["snapshot"] = bus.snapshot(["in.*"])
        try:
            bus.snapshot(["secret"])
        except ordo.OrdoError as e:
            seen["outside"] = type(e)
    bus.register("reader", ["in.*"], [], reader)
    with bus.transaction():
        bus.set("in.a", 4)
        bus.set("secret", 1)
    assert seen == {"snapshot": ordo.Snapshot({"in.a": 4}, {}, 1), "outside": ordo.ContractViolation}


def test_errors_are_typed_with_the_library_message(bus):
    with pytest.raises(ordo.NoTransaction):
        bus.set("a", 1)
    with pytest.raises(ordo.NoTransaction):
        bus.commit()
    bus.begin()
    for bad in (None, [1], 2**63, "\udc80", "nul\0inside"):
        with pytest.raises(ordo.InvalidArgument):
            bus.set("a", bad)
    with pytest.raises(ordo.InvalidKeypath, match="a..b"):
        bus.set("a..b", 1)
    with pytest.raises(ordo.InvalidKeypath):
        bus.touch("a.*")  # patterns are not write targets
    bus.rollback()
    with pytest.raises(ordo.NotFound, match="a"):
        bus.get("a")
    with pytest.raises(ordo.NotFound):
        bus.unregister(12345)
    assert bus.counter("a") == 0 and bus.transaction_id == 0
    bus.register("c", ["x"], [], lambda n: None)
    with pytest.raises(ordo.DuplicateName):
        bus.register("c", ["y"], [], lambda n: None)
    bus.register("d1", ["p"], ["q"], lambda n: None)
    with pytest.raises(ordo.Cycle, match="d1"):
        bus.register("d2", ["q"], ["p"], lambda n: None)
    with pytest.raises(ordo.OrderConflict):
        bus.register("prio", ["q"], [], lambda n: None, priority=1)
    with pytest.raises(ordo.InvalidKeypath):
        bus.register("bad", ["a.**.b"], [], lambda n: None)
    with pytest.raises(ordo.InvalidArgument):
        bus.register("nocb", ["a"], [], None)
    with pytest.raises(ordo.InvalidArgument):
        bus.register("every", [], ["w"], lambda n: None)  # every-transaction contracts may not write
    assert sorted(c.name for c in bus.contracts) == ["c", "d1"]


def test_callbacks_once_per_transaction_in_order(bus):
    calls = []

    def rec(label):
        return lambda n: calls.append((label, n.txn, n.changed))
    bus.register("view", ["doc.**"], [], rec("view"))                      # data, level 1 (reads calc.sum)
    bus.register("deep", ["doc.title"], [], rec("deep"), priority=2)
    bus.register("norm", ["doc.title"], ["doc.title"], rec("norm"), priority=-3)

    @bus.contract("sum", ["doc.items.*"], ["doc.calc.sum"])
    def total(note):
        calls.append(("sum", note.txn, note.changed))
        bus.set("doc.calc.sum", sum(bus.get(k) for k in ("doc.items.a", "doc.items.b")))
    bus.register("log", [], [], rec("log"))                                 # every transaction
    with bus.transaction() as t:
        bus.set("doc.title", "x")
        with bus.transaction() as inner:  # nested: joins, one pass at the outermost commit
            bus.set("doc.items.a", 1)
            bus.set("doc.items.b", 2)
        assert inner.txn == 0 and calls == []
    assert t.txn == 1
    assert [c[0] for c in calls] == ["norm", "deep", "sum", "view", "log"]
    assert calls[2] == ("sum", 1, ("doc.items.a", "doc.items.b"))
    assert set(calls[3][2]) == {"doc.title", "doc.items.a", "doc.items.b", "doc.calc.sum"}
    assert bus.get("doc.calc.sum") == 3 and bus.counter("doc.calc.sum") == 1
    calls.clear()
    with bus.transaction() as t:
        bus.set("doc.title", "x")  # equal value: no change, no id, nobody called
    assert t.txn == 0 and calls == []
    with bus.transaction() as t:
        bus.touch("doc.title")
    assert [c[:2] for c in calls] == [("norm", 2), ("deep", 2), ("view", 2), ("log", 2)]
    assert bus.errors == []


def test_rollback_and_the_transaction_context_manager(bus):
    calls = []
    bus.register("v", ["k.**"], [], lambda n: calls.append(n.txn))
    with pytest.raises(RuntimeError, match="boom"):
        with bus.transaction():
            bus.set("k.a", 1)
            raise RuntimeError("boom")
    with pytest.raises(ordo.NotFound):
        bus.get("k.a")
    assert calls == [] and bus.counter("k.a") == 0 and bus.transaction_id == 0
    bus.begin()
    bus.begin()
    bus.set("k.a", 1)
    bus.rollback()  # the whole transaction, whatever the depth
    with pytest.raises(ordo.NoTransaction):
        bus.commit()
    assert calls == [] and bus.counter("k.a") == 0
    with bus.transaction():
        bus.set("k.a", 2)
    assert calls == [1] and bus.get("k.a") == 2


def test_rules_inside_callbacks(bus):
    seen = {}

    def first(note):
        pass

    def writer(note):
        for what, f in (("outside", lambda: bus.set("elsewhere", 1)),
                        ("stable", lambda: bus.set("in.a", 5)),
                        ("read", lambda: bus.get("secret")),
                        ("rollback", bus.rollback),
                        ("close", bus.close)):
            try:
                f()
            except ordo.OrdoError as e:
                seen[what] = type(e)
        bus.set("out.b", bus.get("in.a") * 10)
        assert bus.current_contract == note.contract
    bus.register("first", ["in.a"], [], first, priority=-3)
    bus.register("writer", ["in.a"], ["out.*", "in.*"], writer, priority=-1)
    with bus.transaction():
        bus.set("in.a", 4)
        bus.set("secret", 1)
    assert seen == {"outside": ordo.ContractViolation, "stable": ordo.Stability, "read": ordo.ContractViolation,
                    "rollback": ordo.InvalidArgument, "close": ordo.InvalidArgument}
    assert bus.get("out.b") == 40 and bus.get("in.a") == 4 and not bus.closed
    assert bus.current_contract == 0


def test_a_failing_callback_is_reported_and_the_pass_goes_on(bus):
    calls = []
    bus.register("bad", ["a"], [], lambda n: 1 / 0, priority=-1)
    bus.register("good", ["a"], [], lambda n: calls.append(n.txn))
    with bus.transaction():
        bus.set("a", 1)
    assert calls == [1]
    assert [(name, type(e)) for name, e in bus.errors] == [("bad", ZeroDivisionError)]


def test_callbacks_are_released_by_the_destroy_hook(library):
    class Callback:
        def __init__(self, calls):
            self.calls = calls

        def __call__(self, note):
            self.calls.append(note.txn)
    calls = []
    b = ordo.Bus(library)
    cb = Callback(calls)
    ref = weakref.ref(cb)
    c = b.register("c", ["a"], [], cb)
    del cb
    gc.collect()
    assert ref() is not None  # kept alive while registered
    with b.transaction():
        b.set("a", 1)
    assert calls == [1]
    c.unregister()
    assert c.gone
    del c
    gc.collect()
    assert ref() is None
    with b.transaction():
        b.set("a", 2)
    assert calls == [1]
    # self-unregistering from its own callback, and contracts released by close()
    once = []

    def self_remove(note):
        once.append(note.txn)
        b.unregister(note.contract)
    me = b.register("me", ["a"], [], self_remove)
    left = b.register("left", ["z"], [], Callback([]))
    for i in (3, 4):
        with b.transaction():
            b.set("a", i)
    assert once == [3] and me.gone and not left.gone
    tokens = set(native._contracts)
    b.close()
    assert left.gone and b.closed and not (set(native._contracts) & tokens)
    with pytest.raises(ordo.InvalidArgument, match="closed"):
        b.get("a")
    b.close()  # twice: no-op


def test_notify_initial_carries_the_id(bus):
    notes = []
    with bus.transaction():
        bus.set("a", 1)
    c = bus.register("init", ["a"], [], notes.append, notify_initial=True)
    assert notes == [ordo.Note(1, c.id, ())]


def test_commits_from_threads_call_back_on_the_committing_thread(bus):
    seen = []
    bus.register("t", ["n.**"], [], lambda n: seen.append((threading.get_ident(), n.changed)))
    idents = {}
    done = threading.Barrier(3, timeout=60)  # all alive together: distinct idents

    def worker(i):
        idents[i] = threading.get_ident()
        for j in range(50):
            with bus.transaction():
                bus.set(f"n.{i}", j)
        done.wait()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(seen) == 150 and bus.transaction_id == 150
    for i, ident in idents.items():
        assert [ch for tid, ch in seen if tid == ident] == [(f"n.{i}",)] * 50


def test_published_bus_serves_the_dbus_client(env, library):
    """The two halves together: a ctypes bus published on the private bus
    daemon (ordo_dbus_publish) under another name, used by ordo.Client."""
    with ordo.Bus(library) as b:
        host_calls = []
        b.register("host-view", ["doc.**"], [], lambda n: host_calls.append((n.txn, b.get("doc.a"))))
        b.publish(env.address, "dev.ordo.PyHost")
        stop = threading.Event()

        def loop():
            while not stop.is_set():
                b.dispatch(100)
        t = threading.Thread(target=loop)
        t.start()
        try:
            with ordo.Client(env.address, name="dev.ordo.PyHost") as c:
                w = c.watch(["doc.*"])
                assert c.commit({"doc.a": 41}) == 1
                assert w.next(timeout=5).values == {"doc.a": 41}
                assert host_calls == [(1, 41)]
                assert [k["name"] for k in c.contracts() if k["owner"] == ""] == ["host-view"]
        finally:
            stop.set()
            t.join(timeout=10)
        assert os.path.exists(env.socket)
