"""Conditional commits and owned values (SPEC §15) from Python: ordo.Bus
(ctypes: Bus.expect, transaction(expect=, owner=), Owner) and ordo.Client
(D-Bus: commit(expect=, owned=), owners())."""
import threading

import pytest

import ordo


@pytest.fixture
def bus(library):
    with ordo.Bus(library) as b:
        yield b


def test_a_failed_condition_applies_nothing(bus):
    calls = []
    bus.register("watch", ["cart.**"], callback=lambda note: calls.append(note.txn))
    with bus.transaction(expect={"cart.count": 0}) as t:
        bus.set("cart.count", 1)
    assert t.txn == 1
    with pytest.raises(ordo.Conflict, match='"cart.count" was expected at counter 0 but is at 1'):
        with bus.transaction(expect={"cart.count": 0}):
            bus.set("cart.count", 9)
            bus.set("cart.note", "x")
    assert bus.get("cart.count") == 1
    assert bus.counter("cart.count") == 1
    with pytest.raises(ordo.NotFound):
        bus.get("cart.note")
    assert calls == [1]
    bus.begin()
    bus.expect("cart.count", 1)
    bus.set("cart.count", 2)
    assert bus.commit() == 2
    with pytest.raises(ordo.NoTransaction):
        bus.expect("cart.count", 2)
    for bad, error in ((-1, ordo.InvalidArgument), ([("cart.count", 1)], ordo.InvalidArgument)):
        with pytest.raises(error):
            with bus.transaction(expect=bad if isinstance(bad, list) else {"cart.count": bad}):
                pass
    with pytest.raises(ordo.InvalidKeypath):
        with bus.transaction(expect={"cart\0count": 1}):
            pass
    # Refused before begin: the bus is free for the next transaction.
    with bus.transaction() as t:
        bus.set("cart.count", 3)
    assert t.txn == 3


def test_read_modify_write_from_threads_loses_no_update(bus):
    def increment():
        for _ in range(100):
            while True:
                # The counter first: a commit between the two reads then
                # makes the value newer than the counter, which the
                # condition refuses (read the other way round, a stale
                # value could pass with a fresh counter).
                counter = bus.counter("n")
                try:
                    value = bus.get("n")
                except ordo.NotFound:
                    value = 0
                try:
                    with bus.transaction(expect={"n": counter}):
                        bus.set("n", value + 1)
                    break
                except ordo.Conflict:
                    pass
    threads = [threading.Thread(target=increment) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bus.get("n") == 400


def test_an_owners_values_go_with_it(bus):
    calls = []
    bus.register("watch", ["presence.**"], callback=lambda note: calls.append((note.txn, sorted(note.changed))))
    with bus.owner("provider") as provider:
        with bus.transaction(owner=provider):
            bus.set("presence.alice", True)
            bus.set("presence.bob", True)
        with bus.transaction():
            bus.set("presence.bob", True)  # a plain write ends bob's ownership
        assert repr(provider) == "Owner('provider')"
    assert calls == [(1, ["presence.alice", "presence.bob"]), (2, ["presence.alice"])]
    assert bus.get("presence.bob") is True
    with pytest.raises(ordo.NotFound):
        bus.get("presence.alice")
    provider.release()  # a second release does nothing
    with pytest.raises(ordo.InvalidArgument):
        with bus.transaction(owner=provider):
            pass


def test_client_commit_with_conditions_and_ownership(env):
    with ordo.Client(env.address, timeout=10) as a, ordo.Client(env.address, timeout=10) as reader:
        watch = reader.watch(["k.**"])

        def next_note():
            n = watch.next(10)
            return n.txn, sorted(n.changed)

        assert a.commit({"k.count": 1}, expect={"k.count": 0}) == 1
        assert next_note() == (1, ["k.count"])
        with pytest.raises(ordo.Conflict, match='"k.count" was expected at counter 0 but is at 1'):
            a.commit({"k.count": 5}, expect={"k.count": 0})
        assert a.get("k.count").value == 1
        with ordo.Client(env.address, timeout=10) as provider:
            assert provider.commit({"k.owned": "here"}, owned=True) == 2
            assert next_note() == (2, ["k.owned"])
            assert a.owners() == {"k.owned": provider.unique_name}
            assert a.owners(["other.**"]) == {}
        # The provider's connection closed: its value goes in one transaction.
        assert next_note() == (3, ["k.owned"])
        assert a.owners() == {}
        with pytest.raises(ordo.InvalidArgument):
            a.commit({"k.count": 2}, expect={"k.count": -1})
        with pytest.raises(ordo.InvalidArgument):
            a.commit({"k.count": 2}, owned="yes")
        with pytest.raises(ordo.InvalidArgument):
            a.commit({"k.count": 2}, expect=[("k.count", 1)])
        with pytest.raises(ordo.InvalidKeypath):
            a.commit({"k.count": 2}, expect={"k\0count": 1})
        with pytest.raises(ordo.InvalidKeypath):
            a.commit({"k\0x": 2}, owned=True)
        with pytest.raises(ordo.InvalidKeypath):
            a.owners(["k\0x"])
        assert a.get("k.count").value == 1
