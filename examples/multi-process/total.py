#!/usr/bin/env python3
"""Computed data in its own process: keeps playlist.total equal to the sum of
playlist.tracks.*.duration, as a writer contract of priority -1 (computed
data) over D-Bus. The service calls it inside each pass that changed a
duration and waits for its answer, so every later contract (the views) sees
the new total in the same transaction. Registered with a cache of what it
reads (which implies an initial call), it computes once at start from every
duration, with no call back to the service; the client registers it again
(again with an initial call) when ordod restarts, so the total comes back
in line by itself (docs/dbus.md, "Computed data across processes" and
"Consistent reads").

    python3 examples/multi-process/total.py [ADDRESS]    # runs until Ctrl-C

ADDRESS defaults to DBUS_SESSION_BUS_ADDRESS (ordod prints it).
"""
import os
import signal
import sys

try:
    import ordo
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python",
                                    "src"))
    import ordo


def main():
    address = sys.argv[1] if len(sys.argv) > 1 else None
    with ordo.Client(address) as bus:
        @bus.writer("playlist-total", reads=["playlist.tracks.*.duration"], writes=["playlist.total"],
                    priority=-1, cache=True)
        def total(note):
            # Every duration as of this transaction, kept by the client.
            return {"playlist.total": sum(note.cache.values())}

        print("computing playlist.total", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while True:
                bus.process(1.0)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
