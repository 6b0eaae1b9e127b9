#!/usr/bin/env python3
"""An in-process Ordo bus with a model schema, from Python (ctypes over
libordo.so; set ORDO_LIBRARY if it is not installed):

    python3 examples/python/ordo_schema.py

The bus is made from examples/schema/playlist.json: a computed-data contract
keeps playlist.total the sum of two tracks' durations, a view prints the
total once per transaction, reads return the declared defaults, and a
misspelt keypath or a negative duration is refused with ordo.Schema.
"""
import os
import sys

try:
    import ordo
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python",
                                    "src"))
    import ordo

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schema", "playlist.json")
TRACKS = ["t1", "t2"]


def main():
    with ordo.Bus(schema_file=SCHEMA) as bus:
        print("mode before any write:", bus.get("playlist.mode"), "(stored: %s)" % bus.is_stored("playlist.mode"))

        # Computed data (priority -1): the total follows the durations.
        def total(note):
            bus.set("playlist.total", sum(bus.get("playlist.tracks.%s.duration" % t) for t in TRACKS))
        bus.register("total", reads=["playlist.tracks.*.duration"], writes=["playlist.total"], callback=total,
                     priority=-1)
        # View content: once per transaction, after the total is stable.
        bus.register("header", reads=["playlist.total", "playlist.title"],
                     callback=lambda note: print("header: %s, %d s (txn %d)" % (
                         bus.get("playlist.title"), bus.get("playlist.total"), note.txn)))

        with bus.transaction():
            bus.set("playlist.title", "Songs")
            bus.set("playlist.tracks.t1.duration", 200)
            bus.set("playlist.tracks.t2.duration", 248)
        with bus.transaction():
            bus.set("playlist.tracks.t2.duration", 318)

        for keypath, value in [("playlist.titel", "Songs"), ("playlist.tracks.t1.duration", -5)]:
            try:
                with bus.transaction():
                    bus.set(keypath, value)
            except ordo.Schema as e:
                print("refused:", e.message)


if __name__ == "__main__":
    main()
