#!/usr/bin/env python3
"""Builds and runs examples/swift/ as a user would: a separate SwiftPM package
copied to a temporary directory, depending on an Ordo checkout by path
(ORDO_PATH), built in Swift 6 language mode with warnings as errors, run with
`swift run` on its schema (songs.json). Checks what the run printed against
the behaviour the example demonstrates (`make test-examples-swift`; that its
generated SongsModel.swift is current is `make test-codegen`'s)."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--swift", default="swift")
ap.add_argument("--checkout", default=os.path.dirname(os.path.dirname(here)))
args = ap.parse_args()

with tempfile.TemporaryDirectory(prefix="ordo-example-") as tmp:
    pkg = os.path.join(tmp, "songs")
    shutil.copytree(here, pkg, ignore=shutil.ignore_patterns(".build", "check.py", "*.pyc"))
    env = dict(os.environ, ORDO_PATH=os.path.abspath(args.checkout))
    cmd = [args.swift, "run", "--package-path", pkg, "-Xswiftc", "-warnings-as-errors", "songs",
           os.path.join(pkg, "songs.json")]
    print("$ ORDO_PATH=%s %s" % (env["ORDO_PATH"], " ".join(cmd)), flush=True)
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    if run.returncode != 0:
        sys.stdout.write(run.stdout + run.stderr)
        sys.exit("examples/swift: swift run failed with status %d" % run.returncode)
    if "warning:" in run.stderr:
        sys.stdout.write(run.stderr)
        sys.exit("examples/swift: the build printed warnings")
    lines = run.stdout.splitlines()
    print("\n".join("  | " + l for l in lines))

failures = []
def expect(ok, what):
    if not ok:
        failures.append(what)

# The computed-data contract keeps the count, read by the main-actor header.
expect("transaction 1: header = Songs (3 items), redraws = 1" in lines,
       "after the first transaction the header shows the title and 3 items, drawn once")
expect("transaction 2: header = More songs (4 items), redraws = 2" in lines,
       "after the second transaction the header shows 4 items, drawn once more")
# The owner-bound view is called while its owner lives, then never again.
expect("items saw 3 changed item(s) in transaction 1" in lines, "the items view saw the 3 items of transaction 1")
expect(not any(l.startswith("items saw") and l.endswith("transaction 2") for l in lines),
       "the items view was called after its owner was released")
expect("contracts = count,header,title-log" in lines, "the released owner's contract is still registered")
# The end-of-pass hook runs once per pass, after the contracts.
for t in (1, 2):
    expect(lines.count("end of pass %d" % t) == 1, "the end-of-pass hook of transaction %d ran once" % t)
    hook = lines.index("end of pass %d" % t) if ("end of pass %d" % t) in lines else -1
    report = next((i for i, l in enumerate(lines) if l.startswith("transaction %d:" % t)), -1)
    expect(0 <= hook < report, "the hook of transaction %d ran before commit returned" % t)
# The async observer saw each transaction once, with its value.
expect('title log = 1:string "Songs" 2:string "More songs"' in lines, "the title stream delivered both transactions")
# The schema: defaults before any write, a typo refused with a suggestion.
expect("before any write: title = untitled" in lines, "a read before any write returns the declared default")
expect(any(l.startswith("typo: SCHEMA:") and 'did you mean "doc.title"?' in l for l in lines),
       "a contract reading a misspelt keypath is refused with SCHEMA and the nearest declared keypath")
# A typed write outside a transaction is an error, not a crash.
expect("outside a transaction: NO_TRANSACTION" in lines, "a write outside a transaction failed with NO_TRANSACTION")

for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit("examples/swift: %d check(s) failed" % len(failures))
print("examples/swift: all checks passed")
