"""MergingWriter (docs/dbus.md "Merging writes") against a real ordod on a
private dbus-daemon: writes issued while a Commit is in flight join the next
one, with the result of applying them one by one."""
import threading
import time

import pytest

import ordo
from conftest import wait_for


@pytest.fixture
def client(env):
    with ordo.Client(env.address, timeout=10) as c:
        yield c


@pytest.fixture
def slow(env):
    """A writer contract on another connection that takes 0.4 s to answer a
    Notify for ``slow.go``: a Commit writing ``slow.go`` is in flight that
    long, so the writes issued meanwhile are certain to merge."""
    with ordo.Client(env.address, timeout=10) as other:
        other.add_writer(lambda note: time.sleep(0.4), "slow", ["slow.go"], ["slow.out"], timeout_ms=5000)
        other.start()
        yield
        other.stop()


def test_burst_merges_and_every_keypath_has_its_last_value(env, client):
    w = client.watch(["burst.*"])
    expected = {}
    with client.merging_writer() as m:
        # With no Commit in flight a write goes out as its own Commit (its
        # batch alone once answered; without waiting, the sending thread may
        # not run before the whole burst has merged behind it).
        first = m.set("burst.k0", -1)
        assert first.result(timeout=5) > 0 and first.batch == 0
        tickets = [first]
        for i in range(2000):
            k = f"burst.k{i % 400}"
            tickets.append(m.set(k, i))
            expected[k] = i
    assert m.writes == 2001
    assert 2 <= m.commits < 200, m.commits
    batches = sorted({t.batch: t for t in tickets}.items())
    assert [b for b, _ in batches] == list(range(m.commits))
    assert [t.batch for t in tickets] == sorted(t.batch for t in tickets)
    txns = [t.result(timeout=0) for _, t in batches]
    assert txns == sorted(set(txns)) and 0 not in txns
    assert env.peer().stats()["commits"] == m.commits
    snap = client.snapshot(["burst.*"])
    assert snap.values == expected and snap.txn == txns[-1]
    seen = {}
    for _ in range(m.commits):
        note = w.next(timeout=5)
        seen.update(note.values)
    assert seen == expected
    w.close()


def test_merge_rules_give_the_result_of_the_writes_one_by_one(client, slow):
    client.commit({"t.old": 1, "gone": 1})
    with client.merging_writer() as m:
        first = m.set("slow.go", True)
        wait_for(lambda: m.commits == 1, what="the first Commit to go out")
        a = m.set("a", 1)
        m.remove("a")               # a remove after a set replaces it
        m.set("b", 1)
        m.set("b", 2)               # last write wins
        m.remove("gone")
        m.set("gone", "back")       # a set after a remove replaces it
        m.touch("c")
        m.set("c", 3)               # touches merge with anything
        m.set("t.x", 1)
        tree = m.remove("t.**")     # drops t.x, removes t.old
        after = m.set("t.y", 2)     # covered by t.** in the batch: a new batch
        r = m.write(set={"r": 1, "t.z": 3}, touch=["r"])
        assert m.commits == 1, "nothing more goes out while the first is in flight"
        assert (first.batch, a.batch, after.batch) == (0, 1, 2)
        assert tree is a and r is after
    assert m.commits == 3
    assert (first.result(), a.result(), after.result()) == (2, 3, 4)
    snap = client.snapshot(["**"])
    assert snap.values == {"slow.go": True, "b": 2, "gone": "back", "c": 3, "t.y": 2, "t.z": 3, "r": 1}
    assert snap.counters["b"] == 1 and snap.counters["c"] == 1 and snap.counters["t.old"] == 2


def test_malformed_writes_are_refused_alone_and_a_refused_commit_fails_its_batch(env, client, slow):
    m = client.merging_writer()
    for bad in ("a..b", "", "x.*", "**", "a.b."):
        with pytest.raises(ordo.InvalidKeypath):
            m.set(bad, 1)
        with pytest.raises(ordo.InvalidKeypath):
            m.remove(bad)
    with pytest.raises(ordo.InvalidArgument):
        m.set("ok", None)
    with pytest.raises(ordo.InvalidArgument):
        m.write()
    with pytest.raises(ordo.InvalidArgument):
        m.write(touch="a")
    assert m.writes == 0 and m.commits == 0 and m.idle
    first = m.set("slow.go", 1)
    wait_for(lambda: m.commits == 1, what="the first Commit to go out")
    ok1 = m.set("ok.one", 1)
    # 5000 entries in one write: a batch of its own, over the service's
    # max-keypaths-per-call (4096): refused with Limit.
    big = m.write(set={f"big.k{i}": i for i in range(5000)})
    ok2 = m.set("ok.two", 2)
    assert [t.batch for t in (first, ok1, big, ok2)] == [0, 1, 2, 3]
    with pytest.raises(ordo.Limit):
        m.flush(timeout=20)
    m.flush()  # reported once
    assert isinstance(big.exception(), ordo.Limit)
    with pytest.raises(ordo.Limit):
        big.result()
    assert (ok1.result(), ok2.result()) == (2, 3)
    assert client.snapshot(["big.**"]).values == {}
    assert client.get("ok.two").value == 2
    m.close()
    with pytest.raises(ordo.ConnectionLost):
        m.set("after.close", 1)


def test_a_nul_character_is_refused_to_its_caller_alone(env, client):
    m = client.merging_writer()
    ok1 = m.set("nul.ok1", 1)
    with pytest.raises(ordo.InvalidArgument, match="NUL"):
        m.set("nul.bad", "a\x00b")
    with pytest.raises(ordo.InvalidArgument, match="NUL"):
        m.write(set={"nul.ok3": 3, "nul.bad": "\x00"})
    with pytest.raises(ordo.InvalidKeypath):
        m.set("nul.bad\x00", 1)
    ok2 = m.set("nul.ok2", "a b")
    m.flush(timeout=10)
    assert ok1.result() > 0 and ok2.result() > 0
    assert m.writes == 2
    assert client.snapshot(["nul.*"]).values == {"nul.ok1": 1, "nul.ok2": "a b"}
    m.close()


def test_closing_the_client_closes_its_merging_writers(env):
    def alive():
        return [t for t in threading.enumerate() if t.name == "ordo-merging-writer"]

    before = len(alive())
    writers = []
    for i in range(3):
        with ordo.Client(env.address, timeout=10) as c:
            m = c.merging_writer()
            last = m.set("mw.k", i)
            writers.append((m, last))
    wait_for(lambda: len(alive()) == before, timeout=5, what="the merging writers' threads to end")
    for m, last in writers:
        assert not m._thread.is_alive()
        assert last.result(timeout=0) > 0  # written before the client closed: sent
        with pytest.raises(ordo.ConnectionLost):
            m.set("mw.after", 1)
    with pytest.raises(ordo.ConnectionLost):
        c.merging_writer()
    assert len(alive()) == before
    with ordo.Client(env.address) as c:
        assert c.get("mw.k").value == 2
        m = c.merging_writer()
        m.close()  # closed by hand first: the client does not keep it
        assert c._merging == []


def test_writes_from_many_threads(client):
    m = client.merging_writer()
    errors = []

    def run(t):
        try:
            for i in range(300):
                m.set(f"th.t{t}.k{i % 30}", i)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    m.flush(timeout=30)
    m.close()
    assert errors == []
    assert m.writes == 1200 and m.commits < 1200
    assert client.snapshot(["th.**"]).values == {f"th.t{t}.k{i}": 270 + i for t in range(4) for i in range(30)}
