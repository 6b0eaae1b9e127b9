#!/usr/bin/env python3
"""Every public symbol of a module has a documentation comment.

Reads the symbol graphs that swift-symbolgraph-extract wrote (DIR/*.symbols.json)
and lists the public symbols declared in this project's sources (they have a
source location under the given prefix) that have no doc comment. Symbols
the compiler synthesizes (no source location: memberwise conformances,
inherited protocol requirements) are not ours to document. Exit status 1 when
any is missing.

usage: check-doc-coverage.py SYMBOL_DIR SOURCE_PREFIX
"""
import glob
import json
import sys

symbol_dir, prefix = sys.argv[1], sys.argv[2]
missing, total = [], 0
for path in sorted(glob.glob(f"{symbol_dir}/*.symbols.json")):
    graph = json.load(open(path))
    for s in graph["symbols"]:
        if s.get("accessLevel") not in ("public", "open"):
            continue
        uri = s.get("location", {}).get("uri", "")
        if prefix not in uri:
            continue
        total += 1
        doc = s.get("docComment", {}).get("lines", [])
        if not any(line.get("text", "").strip() for line in doc):
            name = ".".join(s["pathComponents"])
            line = s["location"]["position"]["line"] + 1
            missing.append(f"{uri.split(prefix, 1)[1]}:{line}: {s['kind']['displayName'].lower()} {name} has no documentation comment")
for m in missing:
    print(m)
print(f"doc coverage: {total - len(missing)} of {total} public symbols documented")
sys.exit(1 if missing else 0)
