#!/usr/bin/env python3
"""A remote WRITER contract over D-Bus with the `ordo` package: a normalizer
(priority -3) that trims and lower-cases `user.name`. The service sends its
Notify inside the pass and waits for its Complete; the writes join the same
transaction, so every later contract sees the normalized value.

    python3 examples/python/ordo_writer.py            # runs until Ctrl-C
    python3 examples/python/ordo_writer.py --demo     # commits once itself, prints, exits

The bus address comes from DBUS_SESSION_BUS_ADDRESS (ordod prints it).
"""
import os
import sys

try:
    import ordo
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python",
                                    "src"))
    import ordo
from ordo.values import to_variant

done = []  # (txn, writes) of each answered call


def refused(source, error):
    # All or nothing: a write that breaks a rule (outside the write set,
    # stability) refuses the whole Complete; none of it is applied.
    print(f"Complete refused: {error}", flush=True)


def main():
    with ordo.Client(on_error=refused) as bus:
        # A non-empty write set makes a writer; timeout_ms bounds the wait (default 2000).
        @bus.writer("normalize-name", reads=["user.name"], writes=["user.name"], priority=-3, timeout_ms=1000)
        def normalize(note):
            writes = {}
            name = note.values.get("user.name")
            if name is not None:
                clean = " ".join(name.split()).lower()
                if clean != name:
                    writes["user.name"] = clean
            done.append((note.txn, writes))
            return writes   # the client answers with Complete(contract, txn, writes, [], [])

        print(f"registered {normalize.path}", flush=True)
        if "--demo" not in sys.argv:
            try:
                while True:
                    bus.process(1.0)   # reads the connection, answers each call
                    while done:
                        txn, writes = done.pop(0)
                        print(f"completed txn={txn} writes={writes}", flush=True)
            except KeyboardInterrupt:
                pass
            return
        # Demo: another connection commits. Its Commit returns after the pass,
        # which waits for our Complete: this client answers from its own thread.
        bus.start()
        with ordo.Client() as other:
            txn = other.commit({"user.name": "  Ada   LOVELACE "})
            value, counter = other.get("user.name")
        # Our thread counts its Complete when the reply reaches it, which can
        # be after the other connection's Commit returned: stop() waits for it.
        bus.stop()
        for t, writes in done:
            print(f"completed txn={t} writes={ {k: to_variant(v) for k, v in writes.items()} }", flush=True)
        print(f"committed txn={txn}; user.name={value!r} counter={counter}", flush=True)
        print(f"calls={normalize.calls} completed={normalize.completed} refused={normalize.refused}")


if __name__ == "__main__":
    main()
