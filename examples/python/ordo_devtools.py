#!/usr/bin/env python3
"""Devtools with the `ordo` package (docs/devtools.md): a small text editor
model on a live ordod -- a priority normalizer, a computed word count, views
and an every-transaction logger -- watched with pass traces, then drawn with
`ordoctl graph --svg`.

    python3 examples/python/ordo_devtools.py                     # prints two traces
    python3 examples/python/ordo_devtools.py --svg FILE [--ordoctl PATH]
                                                                 # and renders the graph

The bus address comes from DBUS_SESSION_BUS_ADDRESS (ordod prints it). `make
docs-graph` runs it against a fresh ordod to make docs/graph-example.svg.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

try:
    import ordo
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python",
                                    "src"))
    import ordo


def connect(timeout=10.0):
    """The service, once it owns its name (ordod may still be starting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ordo.Client()
        except (ordo.DBus, ordo.ConnectionLost):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--svg", help="render the contract graph into this file")
    ap.add_argument("--ordoctl", default=shutil.which("ordoctl") or "ordoctl")
    a = ap.parse_args()
    with connect() as bus, connect() as dev:
        @bus.writer("normalize-title", reads=["doc.title"], writes=["doc.title"], priority=0)
        def normalize(note):
            t = note.values.get("doc.title")
            if isinstance(t, str) and t != t.strip():
                return {"doc.title": t.strip()}

        @bus.writer("word-count", reads=["doc.text"], writes=["doc.words"])
        def count(note):
            return {"doc.words": len(str(note.values.get("doc.text", "")).split())}

        @bus.writer("status-line", reads=["doc.words", "doc.title"], writes=["ui.status"])
        def status(note):
            s = bus.snapshot(["doc.title", "doc.words"]).values
            return {"ui.status": f"{s.get('doc.title', '')}: {s.get('doc.words', 0)} words"}

        views = [bus.watch(["doc.title"], name="window-title"), bus.watch(["ui.status"], name="status-bar"),
                 bus.watch([], name="undo-log")]
        bus.start()
        with dev.trace(["doc.**"]) as traces:
            bus.commit({"doc.title": "  Songs  ", "doc.text": "one two three"})
            bus.commit({"doc.text": "one two three four"})
            for _ in range(2):
                t = traces.next(timeout=10)
                print(f"txn {t.txn}: " + ", ".join(
                    f"{s.name} {s.outcome} because {'/'.join(s.because) or '-'}"
                    + (f" wrote {'/'.join(s.writes)}" if s.writes else "") for s in t.steps), flush=True)
        print("status:", bus.get("ui.status").value, flush=True)
        if a.svg:
            env = dict(os.environ)
            subprocess.run([a.ordoctl, "graph", "--png" if a.svg.endswith(".png") else "--svg", a.svg], check=True, env=env, timeout=60)
            print("graph:", a.svg, flush=True)
        for v in views:
            v.close()
        bus.stop()


if __name__ == "__main__":
    main()
