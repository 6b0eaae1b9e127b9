"""The D-Bus client against a real ordod on a private dbus-daemon."""
import math
import threading
import time

import pytest
from jeepney import DBusAddress, HeaderFields, new_signal

import ordo
from conftest import wait_for

VALUES = {"v.b": True, "v.f": False, "v.i": -2**63, "v.j": 2**63 - 1, "v.d": -0.5, "v.s": "héllo ✓",
          "v.e": "", "v.y": b"\x00\xffab", "v.z": b""}


@pytest.fixture
def client(env):
    with ordo.Client(env.address, timeout=10) as c:
        yield c


def test_connect_defaults_and_properties(env, client):
    assert client.name == "dev.ordo.Bus"
    assert client.owner.startswith(":") and client.owner != client.unique_name
    assert client.transaction == 0
    assert client.version
    with pytest.raises(ordo.DBus, match="no service owns dev.ordo.Nobody"):
        ordo.Client(env.address, name="dev.ordo.Nobody")


def test_values_of_every_type_through_commit_get_snapshot_and_watch(client):
    w = client.watch(["v.*"])
    txn = client.commit(set=VALUES)
    assert txn == 1
    for k, v in VALUES.items():
        got = client.get(k)
        assert got == (v, 1) and type(got.value) is type(v), k
    snap = client.snapshot(["v.*"])
    assert snap.values == VALUES and snap.txn == 1
    assert {k: type(v) for k, v in snap.values.items()} == {k: type(v) for k, v in VALUES.items()}
    note = w.next(timeout=5)
    assert note.txn == 1 and note.kind == "notify" and sorted(note.changed) == sorted(VALUES)
    assert note.values == VALUES
    client.commit({"v.n": float("nan")})
    assert math.isnan(client.get("v.n").value)
    assert math.isnan(w.next(timeout=5).values["v.n"])


def test_unsupported_values_are_refused_before_sending(env, client):
    raw = env.peer()
    calls = raw.stats()["method-calls"]
    for bad in (None, [1], {"a": 1}, (1, 2), 2**63, "\udc80", 3j):
        with pytest.raises(ordo.InvalidArgument) as e:
            client.commit({"doc.ok": 1, "doc.bad": bad})
        assert "'doc.bad'" in str(e.value)
    with pytest.raises(ordo.InvalidArgument):
        client.commit(touch="doc.a")  # a str is not a list of keypaths
    with pytest.raises(ordo.InvalidArgument):
        client.get(5)
    # nothing reached the service (the Stats call itself is the one more)
    assert raw.stats()["method-calls"] == calls + 1
    assert client.transaction == 0


def test_nul_characters_are_refused_before_sending_and_the_connection_survives(env, client):
    # D-Bus strings cannot hold NUL: sent anyway, the bus daemon drops the
    # client's whole connection (every watch and writer with it).
    raw = env.peer()
    w = client.watch(["n.**"])
    before = raw.stats()
    with pytest.raises(ordo.InvalidArgument, match="NUL"):
        client.commit({"n.k": "a\x00b"})
    for bad in (lambda: client.get("n.k\x00"), lambda: client.commit({"n.k\x00": 1}),
                lambda: client.commit(touch=["n.\x00"]), lambda: client.commit(remove=["n\x00.**"]),
                lambda: client.snapshot(["n.\x00*"]), lambda: client.changes(0, ["\x00"]),
                lambda: client.watch(["n.\x00"]), lambda: client.trace(["n\x00"])):
        with pytest.raises(ordo.InvalidKeypath, match="NUL"):
            bad()
    with pytest.raises(ordo.InvalidArgument, match="NUL"):
        client.watch(["n.x"], name="nul\x00name")
    with pytest.raises(ordo.InvalidArgument, match="NUL"):
        client.call("Commit", "a{sv}asas", {"n.k": ("s", "\x00")}, [], [])
    # none of them reached the service (a watch reads the Epoch property first)
    after = raw.stats()
    assert (after["error-replies"], after["contracts"], after["transactions"]) == \
        (before["error-replies"], before["contracts"], before["transactions"])
    assert client._expect == {}
    # the connection and the watch are still there
    assert client.commit({"n.k": "ab"}) == 1
    assert w.next(timeout=5).values == {"n.k": "ab"}
    assert client.get("n.k").value == "ab"


def test_bad_input_raises_ordo_errors_and_takes_no_reply_slot(env, client):
    raw = env.peer()
    before = raw.stats()
    for bad in (lambda: client.get("p.\udcff"), lambda: client.commit({"p.\udcff": 1}),
                lambda: client.commit(touch=["p.\udcff"]), lambda: client.commit(remove=["p.\udcff"]),
                lambda: client.snapshot(["p.\udcff"]), lambda: client.changes(0, ["p.\udcff"]),
                lambda: client.watch(["p.\udcff"])):
        with pytest.raises(ordo.InvalidKeypath, match="UTF-8"):
            bad()
    with pytest.raises(ordo.InvalidArgument, match="out of range"):
        client.changes(2**64)
    with pytest.raises(ordo.InvalidArgument, match="object path"):
        client.unregister("notapath")
    with pytest.raises(ordo.InvalidArgument, match="UTF-8"):
        client.watch(["p.x"], name="\udcff")
    # what jeepney refuses to serialise is an OrdoError too, nothing is sent
    with pytest.raises(ordo.InvalidArgument):
        client.call("Get", "s", 5)
    with pytest.raises(ordo.InvalidArgument):
        client.call("Get", "s")
    with pytest.raises(ordo.InvalidArgument):
        client.call("Get", "z", 1)
    assert client._expect == {}
    after = raw.stats()
    assert (after["error-replies"], after["contracts"]) == (before["error-replies"], before["contracts"])
    with pytest.raises(ordo.NotFound):  # the connection is fine
        client.get("p.x")


def test_commit_touch_remove_and_snapshot_counters(client):
    assert client.commit({"doc.title": "Songs", "doc.n": 3, "doc.items.a": 1, "doc.items.b": 2}) == 1
    assert client.commit({"doc.n": 3}) == 0  # an equal value is no change
    assert client.commit(touch=["doc.sel"], remove=["doc.title", "doc.items.**"]) == 2
    snap = client.snapshot(["doc.**"])
    assert snap.values == {"doc.n": 3}
    assert snap.counters == {"doc.n": 1, "doc.sel": 1, "doc.title": 2, "doc.items.a": 2, "doc.items.b": 2}
    assert snap.txn == 2
    assert client.snapshot([]) == ({}, {}, 2)
    with pytest.raises(ordo.NotFound, match="counter is 2"):
        client.get("doc.title")


def test_watch_once_per_transaction_in_order_with_values(env, client):
    other = ordo.Client(env.address)
    try:
        w = client.watch(["doc.**"], priority=2)
        assert [c["priority"] for c in other.contracts() if c["path"] == w.path] == [2]
        assert other.commit({"doc.a": 1, "doc.b": "x"}) == 1
        assert other.commit({"unrelated.k": 1}) == 2  # not ours: no notification
        assert other.commit(set={"doc.a": 2}, touch=["doc.t"], remove=["doc.b"]) == 3
        assert other.commit({"doc.a": 2}) == 0
        n1, n3 = w.next(timeout=5), w.next(timeout=5)
        assert (n1.txn, n1.changed, n1.values) == (1, ("doc.a", "doc.b"), {"doc.a": 1, "doc.b": "x"})
        assert (n3.txn, set(n3.changed), n3.values) == (3, {"doc.a", "doc.t", "doc.b"}, {"doc.a": 2})
        assert set(n3.removed) == {"doc.t", "doc.b"}
        with pytest.raises(TimeoutError):
            w.next(timeout=0.3)
        assert w.position.txn == 3
    finally:
        other.close()


def test_watch_initial_snapshot_and_iteration(client):
    client.commit({"doc.a": 1, "doc.b": 2})
    client.commit(remove=["doc.b"])
    w = client.watch(["doc.*"], initial=True)
    first = w.next(timeout=5)
    assert first.kind == "snapshot" and first.txn == 2
    assert first.values == {"doc.a": 1} and first.changed == ("doc.a", "doc.b")
    got = []

    def consume():
        for note in w:
            got.append(note)
            if len(got) == 3:
                return
    t = threading.Thread(target=consume)
    t.start()
    for i in range(3):
        client.commit({"doc.a": 10 + i})
    t.join(timeout=10)
    assert [(n.txn, n.values) for n in got] == [(3, {"doc.a": 10}), (4, {"doc.a": 11}), (5, {"doc.a": 12})]


def test_contracts_stats_graph(env, client):
    w = client.watch(["doc.**"], name="my-view")
    cs = client.contracts()
    mine = [c for c in cs if c["name"] == "my-view"]
    assert len(mine) == 1 and mine[0]["owner"] == client.unique_name and mine[0]["reads"] == ["doc.**"]
    assert mine[0]["path"] == w.path
    client.commit({"doc.a": 1})
    w.next(timeout=5)
    stats = client.stats()
    assert stats["transactions"] == 1 and stats["contracts"] == 1 and stats["commits"] == 1
    assert "digraph" in client.graph() and "my-view" in client.graph()


def test_errors_are_typed(env, client):
    raw = env.peer()
    with pytest.raises(ordo.InvalidKeypath, match="doc..x"):
        client.commit({"doc..x": 1})
    with pytest.raises(ordo.NotFound):
        client.get("doc.none")
    with pytest.raises(ordo.NotFound):
        client.unregister("/dev/ordo/Bus/contract/999")
    client.watch(["a"], name="dup")
    with pytest.raises(ordo.DuplicateName) as e:
        client.watch(["b"], name="dup")
    assert e.value.dbus_name == "dev.ordo.Error.DuplicateName"
    theirs = raw.call("Register", "sasasa{sv}", "theirs", ["x"], [], {})[0]
    with pytest.raises(ordo.AccessDenied):
        client.unregister(theirs)
    with pytest.raises(ordo.Limit):
        client.snapshot([f"k{i}" for i in range(5000)])
    with pytest.raises(ordo.InvalidArgument) as e:
        client.call("Commit", "a{sv}asas", {"k": ("i", 3)}, [], [])
    assert e.value.dbus_name == "org.freedesktop.DBus.Error.InvalidArgs"
    with pytest.raises(ordo.InvalidArgument, match="write set"):
        client.add_writer(lambda n: None, "w", ["x"], [])
    w = client.add_writer(lambda n: None, "calc", ["in.a"], ["out.a"])
    with pytest.raises(ordo.Stale):
        client.call("Complete", "ota{sv}asas", w.path, 77, {}, [], [])
    # data writers in a cycle; a priority reader of what a data writer may write
    client.add_writer(lambda n: None, "back", ["out.a"], ["in.b"])
    with pytest.raises(ordo.Cycle, match="calc"):
        client.add_writer(lambda n: None, "loop", ["in.b"], ["in.a"])
    with pytest.raises(ordo.OrderConflict):
        client.watch(["out.a"], priority=1)
    assert client.transaction == 0


def test_call_timeout_is_typed(env):
    # a writer on a raw connection that never answers holds the pass; the
    # Commit queued behind it gets no reply within the client's timeout
    raw = env.peer()
    raw.call("Register", "sasasa{sv}", "silent", ["in.x"], ["in.y"], {"priority": ("i", -3),
                                                                      "timeout-ms": ("u", 3000)})
    with ordo.Client(env.address, timeout=0.5) as c:
        with pytest.raises(ordo.Timeout) as e:
            c.commit({"in.x": 1})
        assert isinstance(e.value, TimeoutError)
        wait_for(lambda: c.transaction == 1, 10, "the pass to time out")


def test_writer_answers_complete_and_later_contracts_see_its_writes(env, client):
    seen = []

    @client.writer("normalize", reads=["user.name"], writes=["user.name"], priority=-3, timeout_ms=5000)
    def normalize(note):
        seen.append(note)
        name = note.values.get("user.name")
        if name is None:
            return None
        clean = " ".join(name.split()).lower()
        return {"user.name": clean} if clean != name else {}

    client.start()  # another client commits: this one answers from its thread
    other = ordo.Client(env.address)
    try:
        view = other.watch(["user.**"])
        assert other.commit({"user.name": "  Ada   LOVELACE "}) == 1
        note = view.next(timeout=5)
        assert note.values == {"user.name": "ada lovelace"}
        assert other.get("user.name") == ("ada lovelace", 1)
        assert [(n.txn, n.changed, n.kind) for n in seen] == [(1, ("user.name",), "notify")]
        # The writer counts its Complete when the reply reaches its own
        # thread, which may come after the other client's Commit returns:
        # stopping the thread waits for it.
        client.stop()
        assert (normalize.calls, normalize.completed, normalize.refused) == (1, 1, 0)
        stats = other.stats()
        assert stats["completes"] == 1 and stats["timeouts"] == 0
    finally:
        other.close()


def test_notify_initial_writer_answers_its_initial_call(client):
    assert client.commit({"in.a": 2, "in.b": 3}) == 1
    seen = []

    def total(note):
        seen.append(note)
        return {"calc.total": sum(client.snapshot(["in.*"]).values.values())}

    w = client.add_writer(total, "total", ["in.*"], ["calc.total"], -1, timeout_ms=5000, notify_initial=True)
    wait_for(lambda: client.process(0.05) or w.completed, 10, "the initial call's Complete")
    assert [(n.txn, n.changed, n.initial, n.contract) for n in seen] == [(1, (), True, w.path)]
    assert (w.calls, w.completed, w.refused) == (1, 1, 0)
    assert client.get("calc.total") == (5, 1)
    assert client.commit({"in.b": 10}) == 3
    assert client.get("calc.total") == (12, 2)
    assert [(n.changed, n.initial) for n in seen[1:]] == [(("in.b",), False)]
    stats = client.stats()
    assert (stats["completes"], stats["timeouts"], stats["access-denied"]) == (2, 0, 0)


def test_writer_on_the_committing_connection_does_not_deadlock(client):
    client.add_writer(lambda n: ordo.Writes(set={"calc.double": n.values["in.n"] * 2}),
                      "double", ["in.n"], ["calc.double"], -1)
    for i in range(1, 4):
        assert client.commit({"in.n": i}) == i
        assert client.get("calc.double") == (2 * i, i)
    assert client.stats()["timeouts"] == 0


def test_writer_failures_are_reported_and_the_pass_goes_on(env):
    errors = []
    with ordo.Client(env.address, on_error=lambda src, e: errors.append((src, e))) as c:
        bad = c.add_writer(lambda n: {"elsewhere": 1}, "outside", ["a.in"], ["a.out"], -2)
        boom = c.add_writer(lambda n: 1 / 0, "raises", ["b.in"], ["b.out"], -2)
        c.commit({"a.in": 1, "b.in": 1})
        assert [(src.name, type(e)) for src, e in errors] == [("outside", ordo.ContractViolation),
                                                                ("raises", ZeroDivisionError)]
        with pytest.raises(ordo.NotFound):
            c.get("elsewhere")
        assert (bad.refused, boom.completed) == (1, 1)
        assert c.stats()["timeouts"] == 0
        # a write that an earlier contract reads: Stability, nothing applied
        c.watch(["s.x"], priority=-5)
        c.add_writer(lambda n: {"s.x": 2}, "late", ["s.in"], ["s.*"], -1)  # wildcard: checked at run time
        errors.clear()
        c.commit({"s.in": 1, "s.x": 1})
        assert [type(e) for _, e in errors] == [ordo.Stability]
        assert c.get("s.x").value == 1


def _forge(raw, client, path, member, sig, body, iface="dev.ordo.Bus1"):
    msg = new_signal(DBusAddress(path, interface=iface), member, sig, body)
    msg.header.fields[HeaderFields.destination] = client.unique_name
    raw.conn.send(msg)
    raw.call("GetId", iface="org.freedesktop.DBus", path="/org/freedesktop/DBus",
             dest="org.freedesktop.DBus")  # the daemon has routed it


def test_forged_notify_is_ignored_and_never_answered(env, client):
    raw = env.peer()
    w = client.watch(["doc.**"])
    calls = []
    writer = client.add_writer(lambda n: calls.append(n) or {"calc.x": 666}, "calc", ["in.x"], ["calc.x"], -1)
    _forge(raw, client, "/dev/ordo/Bus", "Notify", "otasa{sv}", (w.path, 50, ["doc.a"], {"doc.a": ("x", 666)}))
    _forge(raw, client, "/dev/ordo/Bus", "Notify", "otasa{sv}", (writer.path, 1, ["in.x"], {"in.x": ("x", 1)}))
    # a forged NameOwnerChanged that would hand the service's name to the forger
    _forge(raw, client, "/org/freedesktop/DBus", "NameOwnerChanged", "sss",
           ("dev.ordo.Bus", client.owner, raw.unique_name), iface="org.freedesktop.DBus")
    _forge(raw, client, "/dev/ordo/Bus", "Notify", "otasa{sv}", (w.path, 51, ["doc.b"], {"doc.b": ("x", 667)}))
    assert client.commit({"doc.a": 1}) == 1
    note = w.next(timeout=5)
    assert (note.txn, note.values) == (1, {"doc.a": 1})
    assert client.forged == 4
    assert client.owner == env.peer().call("GetNameOwner", "s", "dev.ordo.Bus", iface="org.freedesktop.DBus",
                                           path="/org/freedesktop/DBus", dest="org.freedesktop.DBus")[0]
    assert calls == [] and writer.calls == 0
    stats = raw.stats()
    assert stats["completes"] == 0 and stats["completes-refused"] == 0
    with pytest.raises(TimeoutError):
        w.next(timeout=0.3)


def test_context_manager_cleanup(env):
    raw = env.peer()
    with ordo.Client(env.address) as c:
        w = c.watch(["doc.**"])
        c.add_writer(lambda n: None, "wr", ["in.a"], ["out.a"])
        with c.watch(["x"]) as tmp:
            assert len([k for k in raw.contracts() if k["owner"] == c.unique_name]) == 3
        assert tmp.path is None
        mine = {k["path"]: k["name"] for k in raw.contracts() if k["owner"] == c.unique_name}
        assert len(mine) == 2 and w.path in mine and "wr" in mine.values()
        me = c.unique_name
    assert [k for k in raw.contracts() if k["owner"] == me] == []
    with pytest.raises(ordo.ConnectionLost):
        c.get("doc.a")


def test_watch_and_writer_come_back_after_the_service_restarts(env):
    with ordo.Client(env.address) as c:
        calls = []
        # its initial call after the restart (nothing to compute from: in.x is gone) answers nothing
        c.add_writer(lambda n: calls.append(n) or ({"calc.y": n.values["in.x"] + 1} if n.changed else None),
                     "inc", ["in.x"], ["calc.y"], -1)
        w = c.watch(["calc.**"], reconnect_timeout=20)
        c.commit({"in.x": 1})
        assert w.next(timeout=5).values == {"calc.y": 2}
        old = c.owner
        env.stop_ordod()
        env.start_ordod()
        note = w.next(timeout=20)  # registers again, reads the new bus: another epoch
        assert note.kind == "snapshot" and note.values == {} and c.owner != old
        assert c.commit({"in.x": 5}) == 1  # the writer is back too
        note = w.next(timeout=5)
        assert (note.kind, note.txn, note.values) == ("notify", 1, {"calc.y": 6})
        assert [n.initial for n in calls] == [False, True, False]


def test_without_reconnect_a_watch_and_a_writer_end_with_the_owner(env):
    errors = []
    with ordo.Client(env.address, on_error=lambda source, e: errors.append((source, e))) as c:
        w = c.watch(["doc.*"], reconnect=False)
        gone = c.add_writer(lambda n: None, "gone", ["in.x"], ["calc.x"], -1, reconnect=False)
        kept = c.add_writer(lambda n: None, "kept", ["in.y"], ["calc.y"], -1)
        with pytest.raises(ordo.InvalidArgument):
            c.add_writer(lambda n: None, "bad", ["in.z"], ["calc.z"], -1, reconnect=1)
        c.commit({"doc.a": 1})
        assert w.next(timeout=5).txn == 1
        env.stop_ordod()
        env.start_ordod()
        with pytest.raises(ordo.ConnectionLost, match="reconnect=False"):
            w.next(timeout=20)
        with pytest.raises(StopIteration):
            w.next(timeout=1)
        deadline = time.monotonic() + 20
        while kept.path is None and time.monotonic() < deadline:
            c.process(0.1)
        assert gone.ended and not kept.ended and gone.path is None
        assert [k["name"] for k in c.contracts() if k["owner"] == c.unique_name] == ["kept"]
        assert [(source, type(e)) for source, e in errors] == [(gone, ordo.ConnectionLost)]


def test_watch_reconnects_after_the_bus_daemon_restarts(env):
    with ordo.Client(env.address) as c:
        w = c.watch(["doc.*"], reconnect_timeout=20)
        c.commit({"doc.a": 1})
        assert w.next(timeout=5).txn == 1
        env.restart_daemon()
        note = w.next(timeout=20)  # a new connection, a new bus: read everything
        assert note.kind == "snapshot" and note.values == {}
        assert w.path in [k["path"] for k in c.contracts() if k["owner"] == c.unique_name]
        other = ordo.Client(env.address)
        try:
            other.commit({"doc.a": 7})
        finally:
            other.close()
        note = w.next(timeout=5)
        assert (note.txn, note.values) == (1, {"doc.a": 7})


def test_a_call_opens_a_lost_connection_again(env):
    """Only calls, no watch or writer: a call made after the bus daemon
    restarted opens a new connection at the same address first."""
    with ordo.Client(env.address) as c:
        assert c.commit({"doc.a": 1}) == 1
        env.restart_daemon()
        assert c.commit({"doc.a": 2}) == 1  # a new bus: a new history
        assert c.get("doc.a").value == 2
        assert c.owner is not None


def test_a_client_without_reconnection_reconnects_on_request(env):
    """reconnect=False: once the connection is lost each call raises
    ConnectionLost, until reconnect() opens a new one."""
    with pytest.raises(ordo.InvalidArgument):
        ordo.Client(env.address, reconnect=1)
    with ordo.Client(env.address, reconnect=False) as c:
        assert c.commit({"doc.a": 1}) == 1
        env.restart_daemon()
        with pytest.raises(ordo.ConnectionLost):
            c.commit({"doc.a": 2})
        with pytest.raises(ordo.ConnectionLost):
            c.get("doc.a")
        c.reconnect()
        assert c.commit({"doc.a": 3}) == 1
        assert c.get("doc.a").value == 3


def test_concurrent_calls_from_threads(env, client):
    w = client.watch(["t.**"])
    errors = []

    def worker(i):
        try:
            for j in range(20):
                client.commit({f"t.{i}": j})
                assert client.get(f"t.{i}").value == j
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    txns = [w.next(timeout=5).txn for _ in range(80)]
    assert txns == list(range(1, 81))
