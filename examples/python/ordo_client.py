#!/usr/bin/env python3
"""A Python client of an Ordo bus over D-Bus, with the `ordo` package.

    pip install ./bindings/python            # or run from a checkout as is
    ordod &                                  # prints DBUS_SESSION_BUS_ADDRESS=...
    DBUS_SESSION_BUS_ADDRESS=... python3 examples/python/ordo_client.py

It watches `doc.**`, commits two transactions, prints the notifications it
receives, reads a value and a snapshot, and leaves (leaving the `with`
block unregisters the watch and closes the connection).
"""
import os
import sys

try:
    import ordo
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python",
                                    "src"))
    import ordo


def main():
    address = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if not address:
        sys.exit("set DBUS_SESSION_BUS_ADDRESS to the address ordod printed")
    with ordo.Client(address, name=os.environ.get("ORDO_NAME", "dev.ordo.Bus")) as bus:
        # An observer of doc.**; initial=True: the first notification is a snapshot.
        watch = bus.watch(["doc.**"], initial=True)
        print("registered", watch.path)

        # Values are bool, int (int64), float (double), str or bytes.
        txn = bus.commit({"doc.title": "Songs", "doc.count": 3, "doc.ratio": 0.5})
        print("committed transaction", txn)
        bus.commit({"doc.count": 4}, touch=["doc.selection"])

        # The initial snapshot, then one notification per transaction, in order.
        for _ in range(3):
            note = watch.next(timeout=5)
            print(f"Notify txn={note.txn} changed={list(note.changed)} values={note.values}")

        value, counter = bus.get("doc.count")
        print(f"doc.count = {value!r}, counter {counter}")
        snap = bus.snapshot(["doc.*"])
        print("snapshot at", snap.txn, snap.values, snap.counters)

        try:
            bus.get("doc.missing")
        except ordo.NotFound as e:
            print(f"as expected: {e.dbus_name}: {e.message}")
        print("resume later from", watch.position)


if __name__ == "__main__":
    main()
