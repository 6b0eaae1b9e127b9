"""Devtools in the Python package: handles, contract info and pass traces
through the real libordo.so (ctypes), and pass traces from a real ordod
over D-Bus (SubscribeTrace, the Trace signal). docs/devtools.md."""
import pytest

import ordo
from conftest import wait_for
from test_client import _forge


@pytest.fixture
def bus(library):
    errors = []
    with ordo.Bus(library, on_error=lambda c, e: errors.append((c, e))) as b:
        b.errors = errors
        yield b


@pytest.fixture
def client(env):
    with ordo.Client(env.address, timeout=10) as c:
        yield c


# -- handles ------------------------------------------------------------------

def test_handles_read_and_write_like_keypaths(bus):
    h = bus.resolve("doc.title")
    assert h.keypath == "doc.title" and repr(h) == "<ordo.Handle 'doc.title'>"
    assert bus.resolve("doc.title") == h and len({h, bus.resolve("doc.title")}) == 1
    n = bus.resolve("doc.n")
    with pytest.raises(ordo.NoTransaction):
        h.set("x")
    with bus.transaction() as t:
        h.set("Songs")
        n.set(5)
        bus.resolve("doc.raw").set(b"\x00\x01")
        bus.resolve("doc.ok").set(True)
        bus.resolve("doc.r").set(0.5)
    assert t.txn == 1
    assert h.get() == "Songs" and bus.get("doc.title") == "Songs"
    assert (n.get(), n.get(int), n.type_of(), n.counter) == (5, 5, "int64", 1)
    assert bus.resolve("doc.raw").get() == b"\x00\x01"
    assert bus.resolve("doc.ok").get() is True and bus.resolve("doc.r").get() == 0.5
    with pytest.raises(ordo.TypeMismatch):
        n.get(str)
    with bus.transaction():
        n.touch()
        h.remove()
    assert n.counter == 2 and bus.counter("doc.n") == 2
    with pytest.raises(ordo.NotFound):
        h.get()
    for bad in ("a..b", "a.*", ""):
        with pytest.raises(ordo.InvalidKeypath):
            bus.resolve(bad)
    with pytest.raises(ordo.InvalidArgument):
        bus.resolve(5)
    bus.begin()
    with pytest.raises(ordo.InvalidArgument):
        n.set(None)
    bus.rollback()


def test_handles_follow_the_contract_rules(bus):
    out = bus.resolve("calc.out")
    other = bus.resolve("calc.other")

    def calc(note):
        with bus.transaction():
            out.set(bus.resolve("calc.in").get() * 2)
            with pytest.raises(ordo.ContractViolation):
                other.set(1)
    bus.register("calc", ["calc.in"], ["calc.out"], calc)
    with bus.transaction():
        bus.set("calc.in", 21)
    assert out.get() == 42 and bus.errors == []
    with pytest.raises(ordo.NotFound):
        other.get()


def test_handle_of_a_closed_bus_is_refused(library):
    b = ordo.Bus(library)
    h = b.resolve("x")
    b.close()
    with pytest.raises(ordo.InvalidArgument, match="closed"):
        h.get()


# -- contract info ------------------------------------------------------------

def test_contract_info_reports_unused_reads_and_writes(bus):
    def view(note):
        bus.get("in.a")
        with bus.transaction():
            bus.set("out.a", 1)
    c = bus.register("view", ["in.a", "in.b"], ["out.a", "out.b"], view)
    p = bus.register("first", ["in.a"], [], lambda n: None, priority=3)
    e = bus.register("every", [], [], lambda n: None)
    info = bus.contract_info(c)
    assert (info.name, info.kind, info.priority, info.calls, info.last_txn) == ("view", "data", None, 0, 0)
    assert info.reads == ("in.a", "in.b") and info.writes == ("out.a", "out.b")
    assert info.unused_reads == ("in.a", "in.b") and info.unused_writes == ("out.a", "out.b")
    with bus.transaction():
        bus.set("in.a", 1)
    info = bus.contract_info(c.id)
    assert (info.calls, info.last_txn, info.failures) == (1, 1, 0)
    assert info.unused_reads == ("in.b",) and info.unused_writes == ("out.b",)
    pi = bus.contract_info(p)
    assert (pi.kind, pi.priority, pi.position) == ("priority", 3, 0)
    assert info.position == 1
    assert bus.contract_info(e).kind == "every-transaction"
    with pytest.raises(ordo.NotFound):
        bus.contract_info(999)
    with pytest.raises(ordo.InvalidArgument):
        bus.contract_info("view")


# -- traces in-process ----------------------------------------------------------

def test_trace_order_and_because_are_the_calls_made(bus):
    calls = []

    def normalize(note):
        calls.append(("normalize", note.txn, note.changed))
        v = bus.get("user.name")
        if v != v.lower():
            with bus.transaction():
                bus.set("user.name", v.lower())

    def greet(note):
        calls.append(("greet", note.txn, note.changed))
        with bus.transaction():
            bus.set("ui.greeting", "hi " + bus.get("user.name"))
            with pytest.raises(ordo.ContractViolation):
                bus.set("user.other", 1)  # refused: outside its write set

    bus.register("normalize", ["user.name"], ["user.name"], normalize, priority=0)
    bus.register("greet", ["user.**"], ["ui.greeting"], greet)
    bus.register("title", ["ui.greeting"], [], lambda n: calls.append(("title", n.txn, n.changed)))
    with bus.tracing() as traces:
        with bus.transaction():
            bus.set("user.name", "ADA")
        with bus.transaction():
            bus.set("user.age", 36)
    assert len(traces) == 2
    for t in traces:
        made = [c for c in calls if c[1] == t.txn]
        assert t.called == tuple(c[0] for c in made)
        for s, c in zip([s for s in t.steps if s.outcome == "called"], made):
            assert sorted(s.because) == sorted(c[2]), s.name
            assert s.txn == t.txn and s.duration_ns > 0 and not s.initial
    first = {s.name: s for s in traces[0].steps}
    assert traces[0].called == ("normalize", "greet", "title")
    assert first["normalize"].writes == ("user.name",)
    assert first["greet"].writes == ("ui.greeting",)
    assert len(first["greet"].refused) == 1 and first["greet"].refused[0].startswith("user.other: ")
    assert first["title"].because == ("ui.greeting",)
    assert traces[0].committed and set(traces[0].changed) == {"user.name", "ui.greeting"}
    assert traces[1].called == ("greet",)  # its greeting did not change: title is not scheduled
    assert traces[1].steps[0].contract == bus.contracts[1].id
    # Removed: nothing more is recorded.
    with bus.transaction():
        bus.set("user.age", 37)
    assert len(traces) == 2


def test_trace_function_errors_go_to_on_error(bus):
    def broken(trace):
        raise RuntimeError("boom")
    bus.on_trace(broken)
    with bus.transaction():
        bus.set("a", 1)
    assert [(c, str(e)) for c, e in bus.errors] == [("trace", "boom")]
    bus.on_trace(None)
    with pytest.raises(ordo.InvalidArgument):
        bus.on_trace(5)


# -- traces over D-Bus -----------------------------------------------------------

def test_dbus_trace_iterator_matches_the_notifications(env, client):
    raw = env.peer()
    w = client.watch(["doc.**"], name="view")
    client.add_writer(lambda n: {"doc.words": len(n.values.get("doc.text", "").split())}, "count",
                      ["doc.text"], ["doc.words"])
    client.start()
    with ordo.Client(env.address) as dev:
        with dev.trace(["doc.**"]) as traces:
            assert raw.stats()["trace-subscribers"] == 1
            _forge(raw, dev, "/dev/ordo/Bus", "Trace", "tbasaa{sv}t", (77, True, ["doc.x"], [], 1))
            assert client.commit({"doc.text": "a b c"}) == 1
            t = traces.next(timeout=5)
            assert t.txn == 1 and dev.forged == 1
            assert t.called == ("count", "view")
            note = w.next(timeout=5)
            view = t.steps[1]
            assert sorted(view.because) == sorted(note.changed) == ["doc.text", "doc.words"]
            assert t.steps[0].writes == ("doc.words",) and t.steps[0].contract == \
                [c for c in raw.contracts() if c["name"] == "count"][0]["path"]
            assert client.commit({"other": 1}) == 2
            assert client.commit({"doc.title": "x"}) == 3
            t = next(traces)
            assert (t.txn, t.called) == (3, ("view",))
            with pytest.raises(TimeoutError):
                traces.next(timeout=0.3)
        wait_for(lambda: raw.stats()["trace-subscribers"] == 0, what="UnsubscribeTrace")
    client.stop()


def test_dbus_trace_validates(client):
    with pytest.raises(ordo.InvalidArgument):
        client.trace([])
    with pytest.raises(ordo.InvalidKeypath):
        client.trace(["a..b"])
    with pytest.raises(ordo.InvalidArgument):
        client.trace("doc.**")
