"""Consistent reads (docs/dbus.md "Consistent reads: the cache option"):
watches and writers registered with ``cache=True`` see their whole read set
as of each notified transaction in ``note.cache``, against a real ordod (run
by `make test-python`).
"""
import signal

import pytest

import ordo
from conftest import Env, wait_for

DOC = {"doc.title": "Songs", "doc.count": 3, "doc.items.a.name": "A", "doc.items.b.name": "B"}


@pytest.fixture
def client(env):
    with ordo.Client(env.address) as c:
        yield c


def step(client, w, **commit):
    """Commits, takes the watch's next notification and checks its cache
    against a Snapshot of the read set (nothing else commits meanwhile)."""
    txn = client.commit(**commit)
    note = w.next(timeout=5)
    assert note.txn == txn
    assert dict(note.cache) == client.snapshot(w.patterns).values
    return note


def test_without_the_option_there_is_no_cache(client):
    w = client.watch(["doc.*"])
    client.commit({"doc.title": "x"})
    assert w.next(timeout=5).cache is None


def test_the_initial_notify_fills_the_cache(client):
    client.commit(DOC)
    w = client.watch(["doc.**"], cache=True, initial=True)
    first = w.next(timeout=5)
    assert (first.kind, first.txn, dict(first.cache)) == ("snapshot", 1, DOC)
    assert first.values == DOC
    # Without initial=True nothing is delivered, and the first Notify comes
    # with everything it did not change.
    w2 = client.watch(["doc.**"], cache=True)
    note = step(client, w2, set={"doc.count": 4})
    assert note.changed == ("doc.count",) and note.values == {"doc.count": 4}
    assert dict(note.cache) == {**DOC, "doc.count": 4}


def test_set_touch_remove_and_remove_tree_of_leaves_ancestors_and_descendants(client):
    client.commit(DOC)
    w = client.watch(["doc.**"], cache=True)
    step(client, w, set={"doc.title": "Albums"})                       # a leaf
    step(client, w, set={"doc.items.c.name": "C"})                     # a new keypath
    note = step(client, w, set={"doc.items": "list"})                  # an ancestor of values it keeps
    assert note.cache["doc.items"] == "list" and note.cache["doc.items.a.name"] == "A"
    note = step(client, w, touch=["doc.items"])                        # a touch resends the values under it
    assert set(note.values) >= {"doc.items.a.name", "doc.items.b.name", "doc.items.c.name"}
    step(client, w, remove=["doc.items.b.name"])                       # a leaf removed
    note = step(client, w, remove=["doc.items.**"])                    # a tree removed
    assert dict(note.cache) == {"doc.title": "Albums", "doc.count": 3}
    step(client, w, set={"doc.items.a.name": "A2"}, remove=["doc.count"])
    note = step(client, w, remove=["doc.**"])
    assert dict(note.cache) == {}


def test_an_ancestor_write_keeps_what_a_narrow_reader_reads(client):
    client.commit({"doc.title": "Songs", "doc": 1, "doc.other": 2})
    w = client.watch(["doc.title"], cache=True)
    note = step(client, w, set={"doc": 2})
    # The ancestor's own value is not the reader's; its descendant is resent.
    assert note.changed == ("doc",) and dict(note.cache) == {"doc.title": "Songs"}
    note = step(client, w, touch=["doc"])
    assert dict(note.cache) == {"doc.title": "Songs"}
    note = step(client, w, remove=["doc.**"])
    assert dict(note.cache) == {}


def test_patterns_with_a_star(client):
    client.commit({"m.x.1.v": 1, "m.x.1.w": "no", "m.x.2.v": 2, "m.x.2": "parent", "m.y": 0})
    w = client.watch(["m.x.*.v", "m.y"], cache=True, initial=True)
    assert dict(w.next(timeout=5).cache) == {"m.x.1.v": 1, "m.x.2.v": 2, "m.y": 0}
    note = step(client, w, set={"m.x.2": "parent2"})   # an ancestor: resends m.x.2.v
    assert note.values == {"m.x.2.v": 2}
    step(client, w, set={"m.x.3.v": 3, "m.y": 1})
    step(client, w, remove=["m.x.1.**"])
    note = step(client, w, touch=["m.x"])
    assert dict(note.cache) == {"m.x.2.v": 2, "m.x.3.v": 3, "m.y": 1}
    note = step(client, w, remove=["m.x.**"])
    assert dict(note.cache) == {"m.y": 1}
    client.commit({"m.x.1.w": "unread"})                 # not read: no Notify
    step(client, w, set={"m.x.9.v": 9})


def test_a_notification_keeps_its_view(client):
    client.commit({"doc.a": 1, "doc.b": 1})
    w = client.watch(["doc.*"], cache=True)
    client.commit({"doc.a": 2})
    client.commit(remove=["doc.b"])
    first, second = w.next(timeout=5), w.next(timeout=5)
    assert dict(first.cache) == {"doc.a": 2, "doc.b": 1}
    assert dict(second.cache) == {"doc.a": 2}
    with pytest.raises(TypeError):
        first.cache["doc.a"] = 3  # read-only


def test_cache_with_an_empty_read_set_is_refused_before_any_call(client):
    with pytest.raises(ordo.InvalidArgument, match='option "cache" needs a read set'):
        client.watch([], cache=True)
    with pytest.raises(ordo.InvalidArgument, match='option "cache" needs a read set'):
        client.add_writer(lambda n: None, "w", [], ["out.x"], cache=True)
    with pytest.raises(ordo.InvalidArgument, match="cache: a bool"):
        client.watch(["doc.*"], cache="yes")
    assert client.contracts() == []
    # The service refuses it too, for a client that asks anyway.
    with pytest.raises(ordo.InvalidArgument, match='option "cache" needs a read set'):
        client.call("Register", "sasasa{sv}", "raw", [], [], {"cache": ("b", True)})


def test_a_writer_computes_from_its_cache(client):
    client.commit({"in.a": 2, "in.b": 3})
    seen = []

    @client.writer("sum", reads=["in.*"], writes=["out.sum"], cache=True)
    def total(note):
        seen.append((note.kind, note.initial, dict(note.cache)))
        return {"out.sum": sum(note.cache.values())}

    # its initial call (implied by cache)
    wait_for(lambda: client.process(0.05) or total.completed, 10, "the initial call's Complete")
    assert client.get("out.sum").value == 5
    assert seen[0] == ("notify", True, {"in.a": 2, "in.b": 3})
    client.commit({"in.c": 10})
    assert client.get("out.sum").value == 15
    client.commit(remove=["in.a"])
    assert client.get("out.sum").value == 13
    client.commit({"in": "parent"})                  # an ancestor: the read set resent
    client.commit(remove=["in.**"])
    assert client.get("out.sum").value == 0
    assert seen[-1] == ("notify", False, {})
    assert total.refused == 0


def test_a_notify_too_large_is_read_again_as_a_snapshot():
    # The Notify lists 100 touched ancestors (too large); the read set itself
    # is small enough for the Snapshot that replaces it.
    env = Env(ordod_args=["--max-message-bytes", "1000"])
    try:
        with ordo.Client(env.address) as c:
            c.commit({"a.k1.v": 1})
            w = c.watch(["a.*.v"], cache=True)
            sums = []
            counter = c.add_writer(lambda n: sums.append((n.kind, dict(n.cache))) or {"out.n": len(n.cache)},
                                   "count", ["a.*.v"], ["out.n"], cache=True)
            wait_for(lambda: c.process(0.05) or counter.completed, 10, "the initial call's Complete")
            assert sums == [("notify", {"a.k1.v": 1})]
            touched = [f"a.k{i}" for i in range(1, 101)]
            txn = c.commit(touch=touched)
            note = w.next(timeout=5)
            # changed: the keypaths whose value differs from before (none)
            assert (note.kind, note.txn, note.changed, dict(note.cache)) == ("snapshot", txn, (), {"a.k1.v": 1})
            assert sums[-1] == ("snapshot", {"a.k1.v": 1})
            assert c.stats()["notify-truncated"] >= 2
            # read again while later transactions were committed: the
            # snapshot is the state then, and what it covers is not repeated
            c.commit(touch=touched)
            last = c.commit({"a.k2.v": 2})
            note = w.next(timeout=5)
            assert (note.kind, note.txn, dict(note.cache)) == ("snapshot", last, {"a.k1.v": 1, "a.k2.v": 2})
            assert note.changed == ("a.k2.v",) and note.values == {"a.k1.v": 1, "a.k2.v": 2}
            note = step(c, w, set={"a.k3.v": 3})
            assert (note.kind, dict(note.cache)) == ("notify", {"a.k1.v": 1, "a.k2.v": 2, "a.k3.v": 3})
            assert c.get("out.n").value == 3
    finally:
        env.close()


def test_a_write_it_may_not_read_refills_the_cache(tmp_path):
    # Under a policy, a tree removed under a keypath this client may not
    # read comes as a Notify without changed keypaths and with the whole
    # read set: the cache is replaced, not added to.
    policy = tmp_path / "policy"
    policy.write_text("allow everyone read,write,writer **\ndeny everyone read x.y.z\n")
    env = Env(ordod_args=["--policy", str(policy)])
    try:
        with ordo.Client(env.address) as c:
            c.commit({"x.y.z.w": 1, "x.y.z.v": 2, "x.q": 0})
            w = c.watch(["x.y.z.*", "x.q"], cache=True, initial=True)
            assert dict(w.next(timeout=5).cache) == {"x.y.z.w": 1, "x.y.z.v": 2, "x.q": 0}
            note = step(c, w, set={"x.q": 5}, remove=["x.y.z.**"])
            assert (note.changed, dict(note.cache)) == ((), {"x.q": 5})
            step(c, w, set={"x.y.z.w": 3})
    finally:
        env.close()


def test_a_pattern_too_large_to_read_again_is_left_out():
    # The read set does not fit in one Notify (its initial one is "**"), nor
    # big.* alone in a Snapshot: the cache holds the rest, and says why.
    env = Env(ordod_args=["--max-message-bytes", "1000"])
    errors = []
    try:
        with ordo.Client(env.address, on_error=lambda source, e: errors.append((source, e))) as c:
            for i in range(3):
                c.commit({f"big.k{i}": "x" * 400})
            c.commit({"a.k1.v": 1})
            w = c.watch(["a.*.v", "big.*"], cache=True, initial=True)
            first = w.next(timeout=5)
            assert (first.kind, first.txn, dict(first.cache)) == ("snapshot", 4, {"a.k1.v": 1})
            assert [(source, type(e)) for source, e in errors] == [("cache: the read set of 'big.*'", ordo.Limit)]
            c.commit({"a.k2.v": 2}, remove=["big.k0"])
            note = w.next(timeout=5)
            assert note.changed == ("a.k2.v", "big.k0") and dict(note.cache) == {"a.k1.v": 1, "a.k2.v": 2}
    finally:
        env.close()


def test_a_normalizer_sees_its_own_answer(client):
    seen = []

    @client.writer("normalize", reads=["user.*"], writes=["user.name"], cache=True)
    def normalize(note):
        seen.append(dict(note.cache))
        name = note.cache.get("user.name")
        if isinstance(name, str) and name != name.strip().lower():
            return {"user.name": name.strip().lower()}
        return None

    wait_for(lambda: client.process(0.05) or normalize.completed, 10, "the initial call's Complete")
    client.commit({"user.name": "  Bob "})
    assert client.get("user.name").value == "bob"
    # Its own write came in no Notify: the cache took the accepted answer.
    client.commit({"user.age": 3})
    assert seen == [{}, {"user.name": "  Bob "}, {"user.name": "bob", "user.age": 3}]
    client.commit(remove=["user.**"])
    client.commit({"user.name": "ANN"})
    assert seen[-2:] == [{}, {"user.name": "ANN"}]
    client.commit({"user.age": 4})
    assert seen[-1] == {"user.name": "ann", "user.age": 4}


def test_a_writers_removals_enter_its_cache(client):
    seen = []

    # Drops "draft" entries: a keypath it removes, and a tree.
    @client.writer("prune", reads=["box.**"], writes=["box.**"], cache=True)
    def prune(note):
        seen.append(dict(note.cache))
        if note.cache.get("box.draft") is not None:
            return ordo.Writes(remove=["box.draft", "box.tmp.**"])
        return None

    wait_for(lambda: client.process(0.05) or prune.completed, 10, "the initial call's Complete")
    client.commit({"box.keep": 1, "box.tmp.a": 2, "box.tmp.b.c": 3, "box.draft": True})
    assert client.snapshot(["box.**"]).values == {"box.keep": 1}
    # Its own removals came in no Notify: the cache took them.
    client.commit({"box.more": 4})
    assert seen[-1] == {"box.keep": 1, "box.more": 4}


def _after_a_restart(env, restart):
    """A cached watch across `restart()` (ordod killed and started again),
    with commits while it is away; returns the catch-up notification and the
    committing client's Snapshot at its txn."""
    with ordo.Client(env.address) as c, ordo.Client(env.address) as committer:
        committer.commit(DOC)
        w = c.watch(["doc.**"], cache=True, reconnect_timeout=20)
        step(committer, w, set={"doc.count": 4})
        restart()
        committer.commit({"doc.title": "Albums", "doc.items.c.name": "C"})
        committer.commit(remove=["doc.items.a.**"])
        note = w.next(timeout=20)
        assert dict(note.cache) == committer.snapshot(["doc.**"]).values
        assert note.txn == committer.transaction
        after = step(committer, w, set={"doc.count": 5})
        assert after.kind == "notify"
        return note


def test_the_cache_is_refilled_after_a_restart_with_state(tmp_path):
    env = Env(ordod_args=["--state", str(tmp_path / "state.db")])
    try:
        note = _after_a_restart(env, lambda: (env.stop_ordod(signal.SIGKILL), env.start_ordod()))
    finally:
        env.close()
    assert note.kind == "changes"
    assert set(note.changed) == {"doc.title", "doc.items.a.name", "doc.items.c.name"}


def test_the_cache_is_refilled_after_a_restart_without_state(env):
    note = _after_a_restart(env, lambda: (env.stop_ordod(signal.SIGKILL), env.start_ordod()))
    assert note.kind == "snapshot"
