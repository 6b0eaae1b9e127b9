"""Resynchronization (SPEC §10): the Epoch property, Changes, and the watch's
automatic resume from a saved position and after a gap, against a real
ordod (run by `make test-python`).
"""
import signal

import pytest

import ordo
from conftest import Env


@pytest.fixture
def client(env):
    with ordo.Client(env.address) as c:
        yield c


def test_epoch_is_stable_and_new_for_a_new_store(env, client):
    e = client.epoch
    assert isinstance(e, str) and e and client.epoch == e
    env.stop_ordod()
    env.start_ordod()
    with ordo.Client(env.address) as c2:
        assert c2.epoch not in (None, e)


def test_changes_since(client):
    assert client.commit({"doc.a": 1, "doc.b": 2}) == 1
    assert client.commit({"doc.c": "x"}, remove=["doc.b"]) == 2
    assert client.commit({"other.z": True}, touch=["doc.t"]) == 3
    ch = client.changes(1, ["doc.*"])
    assert ch.values == {"doc.c": "x"}
    assert sorted(ch.removed) == ["doc.b", "doc.t"]
    assert ch.counters["doc.b"] == 2 and ch.counters["doc.c"] == 1 and ch.counters["doc.t"] == 1
    assert "doc.a" not in ch.values and "doc.a" not in ch.removed
    assert ch.txn == 3
    everything = client.changes(0, ["**"])
    assert set(everything.values) == {"doc.a", "doc.c", "other.z"} and everything.txn == 3
    assert client.changes(3, ["**"]).values == {}
    with pytest.raises(ordo.InvalidArgument):
        client.changes(4, ["**"])


def test_watch_resumes_from_a_saved_position_with_changes(client):
    w = client.watch(["doc.*"])
    client.commit({"doc.a": 1, "doc.b": 2})
    assert w.next(timeout=5).txn == 1
    saved = w.position
    assert saved.epoch == client.epoch and saved.txn == 1
    w.close()
    client.commit({"doc.a": 10})                # while away
    client.commit(remove=["doc.b"])
    client.commit({"elsewhere.x": 1})
    w2 = client.watch(["doc.*"], resume_from=saved)
    first = w2.next(timeout=5)
    assert first.kind == "changes" and first.txn == 4
    assert first.values == {"doc.a": 10} and set(first.changed) == {"doc.a", "doc.b"}
    assert first.removed == ("doc.b",)
    client.commit({"doc.b": 3})
    nxt = w2.next(timeout=5)
    assert (nxt.kind, nxt.txn, nxt.values) == ("notify", 5, {"doc.b": 3})


def test_watch_resume_from_another_epoch_reads_everything(client):
    client.commit({"doc.a": 1})
    w = client.watch(["doc.*"], resume_from=ordo.Position("some-other-epoch", 7))
    first = w.next(timeout=5)
    assert first.kind == "snapshot" and first.values == {"doc.a": 1} and first.txn == 1
    # a position past this bus's history is another history too
    w2 = client.watch(["doc.*"], resume_from=ordo.Position(client.epoch, 99))
    assert w2.next(timeout=5).kind == "snapshot"


def test_gap_from_dropped_signals_is_caught_up_with_changes():
    env = Env(max_outgoing=64 << 10)  # the daemon drops what a slow reader cannot take
    try:
        with ordo.Client(env.address) as slow, ordo.Client(env.address) as writer:
            w = slow.watch(["big.**"])
            blob = "x" * 8000
            for i in range(1, 201):
                writer.commit({f"big.k{i % 10}": f"{i}:{blob}"})
            state, kinds, marker = {}, [], None
            while True:
                try:
                    note = w.next(timeout=1)
                except TimeoutError:
                    # drained: the last Notify may have been dropped too; a gap
                    # is noticed at the next one
                    assert marker is None, "no notification after the marker"
                    marker = writer.commit({"big.end": True})
                    continue
                kinds.append(note.kind)
                if note.kind == "snapshot":
                    state = dict(note.values)
                else:
                    for k in note.changed:
                        state.pop(k, None)
                    state.update(note.values)
                if marker is not None and note.txn >= marker:
                    break
            assert "changes" in kinds  # signals were dropped, and noticed
            assert state == writer.snapshot(["big.**"]).values
    finally:
        env.close()


def _restart_rounds(env, restart):
    """A watch and a separate committing client across `restart()` (ordod
    killed and started again); returns the watch's notifications."""
    with ordo.Client(env.address) as c, ordo.Client(env.address) as committer:
        w = c.watch(["doc.*"], reconnect_timeout=20)
        notes = []
        for i in range(1, 4):
            assert committer.commit({f"doc.k{i}": i}) == i
        notes += [w.next(timeout=5) for _ in range(3)]
        assert committer.commit({"doc.k4": 4}) == 4
        restart()
        # committed while the watch is away (its client reads nothing meanwhile)
        first = committer.commit({"doc.k5": 5})
        committer.commit({"doc.k6": 6})
        notes.append(w.next(timeout=20))  # doc.k4's Notify if it was sent before the kill, or the catch-up
        while notes[-1].kind == "notify":
            notes.append(w.next(timeout=20))
        assert committer.commit({"doc.k7": 7}) == first + 2
        while notes[-1].txn != first + 2:
            notes.append(w.next(timeout=5))
        return notes


def test_watch_delivers_each_change_once_across_kill_9_with_state(tmp_path):
    env = Env(ordod_args=["--state", str(tmp_path / "state.db")])
    try:
        epoch = ordo.Client(env.address).epoch
        notes = _restart_rounds(env, lambda: (env.stop_ordod(signal.SIGKILL), env.start_ordod()))
        assert ordo.Client(env.address).epoch == epoch
    finally:
        env.close()
    # Same epoch: what the watch missed comes as one "changes" notification;
    # the Notify of doc.k4, if it was sent before the kill, is not repeated.
    kinds = [n.kind for n in notes]
    assert kinds.count("changes") == 1 and set(kinds) == {"notify", "changes"}
    catch_up = notes[kinds.index("changes")]
    assert set(catch_up.changed) >= {"doc.k5", "doc.k6"} and catch_up.txn == 6
    assert sorted(k for n in notes for k in n.changed) == [f"doc.k{i}" for i in range(1, 8)]
    assert [n.txn for n in notes] == sorted({n.txn for n in notes})
    assert (notes[-1].kind, notes[-1].changed, notes[-1].values) == ("notify", ("doc.k7",), {"doc.k7": 7})


def test_watch_reads_a_snapshot_after_a_kill_9_without_state(env):
    notes = _restart_rounds(env, lambda: (env.stop_ordod(signal.SIGKILL), env.start_ordod()))
    # Another epoch: the catch-up is a full snapshot of the new bus (which
    # holds what was committed after the restart), then live Notifys.
    assert [n.kind for n in notes[-2:]] == ["snapshot", "notify"]
    before, snap, last = notes[:-2], notes[-2], notes[-1]
    # doc.k4's Notify may have been lost with the killed ordod (and its state with it)
    assert [k for n in before for k in n.changed] in ([f"doc.k{i}" for i in range(1, 5)],
                                                      [f"doc.k{i}" for i in range(1, 4)])
    assert {n.kind for n in before} == {"notify"}
    assert (snap.txn, snap.values) == (2, {"doc.k5": 5, "doc.k6": 6})
    assert (last.txn, last.changed) == (3, ("doc.k7",))
