#!/usr/bin/env python3
"""Runs examples/playlist/swift/ as a user would: a SwiftPM package of its
own that depends on this checkout by path, built in Swift 6 language mode
with warnings as errors (in a temporary scratch path, so the tree gets no
.build), run on examples/schema/playlist.json. Checks the lines it prints
(`make test-codegen`)."""
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
schema = os.path.join(here, "..", "..", "schema", "playlist.json")
swift = sys.argv[1] if len(sys.argv) > 1 else "swift"
expected = [
    "before any write: total = 0, mode = list",
    "after adding 3 tracks: total = 635, title views = 1",
    "after shortening t2: total = 595, title views = 1",
    "after removing t3: tracks = t1,t2, total = 500",
    "selected: Drive",
    "refresh counter = 1",
]

with tempfile.TemporaryDirectory(prefix="ordo-playlist-") as scratch:
    cmd = [swift, "run", "--package-path", here, "--scratch-path", scratch, "-Xswiftc", "-warnings-as-errors",
           "playlist", schema]
    print("$ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
printed = done.stdout.splitlines()
print("\n".join("  | " + line for line in printed))
problems = ["swift run failed with status %d" % done.returncode] if done.returncode else []
problems += ["the build printed warnings"] if "warning:" in done.stderr else []
problems += ["it did not print %r" % line for line in expected if line not in printed]
if problems:
    sys.stdout.write(done.stderr)
    sys.exit("examples/playlist/swift: " + "; ".join(problems))
print("examples/playlist/swift: ok")
