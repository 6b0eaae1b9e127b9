#!/usr/bin/env python3
"""Builds and runs examples/playlist/swift/ as a user would: a separate SwiftPM
package copied to a temporary directory, depending on an Ordo checkout by path
(ORDO_PATH), built in Swift 6 language mode with warnings as errors, run with
`swift run` on examples/schema/playlist.json. Checks what the run printed
(`make test-codegen`)."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--swift", default="swift")
ap.add_argument("--checkout", default=os.path.dirname(os.path.dirname(os.path.dirname(here))))
args = ap.parse_args()
schema = os.path.join(os.path.abspath(args.checkout), "examples", "schema", "playlist.json")

with tempfile.TemporaryDirectory(prefix="ordo-playlist-") as tmp:
    pkg = os.path.join(tmp, "playlist")
    shutil.copytree(here, pkg, ignore=shutil.ignore_patterns(".build", "check.py", "*.pyc"))
    env = dict(os.environ, ORDO_PATH=os.path.abspath(args.checkout))
    cmd = [args.swift, "run", "--package-path", pkg, "-Xswiftc", "-warnings-as-errors", "playlist", schema]
    print("$ ORDO_PATH=%s %s" % (env["ORDO_PATH"], " ".join(cmd)), flush=True)
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    if run.returncode != 0:
        sys.stdout.write(run.stdout + run.stderr)
        sys.exit("examples/playlist/swift: swift run failed with status %d" % run.returncode)
    if "warning:" in run.stderr:
        sys.stdout.write(run.stderr)
        sys.exit("examples/playlist/swift: the build printed warnings")
    lines = run.stdout.splitlines()
    print("\n".join("  | " + l for l in lines))

expected = [
    "before any write: total = 0, mode = list",
    "after adding 3 tracks: total = 635, title views = 1",
    "after shortening t2: total = 595, title views = 1",
    "after removing t3: tracks = t1,t2, total = 500",
    "selected: Drive",
    "refresh counter = 1",
]
missing = [l for l in expected if l not in lines]
if missing:
    sys.exit("examples/playlist/swift: missing lines:\n" + "\n".join("  " + l for l in missing))
print("examples/playlist/swift: ok")
