#!/usr/bin/env python3
"""Checks the shape of ordo-bench's JSON report (make test-bench).

Fails on a malformed report or a missing scenario, never on a missed
performance target: `met` may be true, false or null.
"""
import json
import math
import sys

SCENARIOS = ["memory", "scale", "delivery", "coalescing", "c-abi", "c-gobject", "dbus", "dbus-c-client"]
KEYS = ["scenario", "metric", "ordo", "comparators", "ratios", "target", "met"]


def fail(msg):
    print(f"check-json: {msg}", file=sys.stderr)
    sys.exit(1)


def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def main(path):
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(report, dict) or sorted(report) != ["machine", "results"]:
        fail("top level must be {machine, results}")
    if not isinstance(report["machine"], str) or not report["machine"]:
        fail("machine must be a non-empty string")
    results = report["results"]
    if not isinstance(results, list) or not results:
        fail("results must be a non-empty list")
    for i, r in enumerate(results):
        if not isinstance(r, dict) or sorted(r) != sorted(KEYS):
            fail(f"result {i}: keys must be {KEYS}")
        where = f"result {i} ({r['scenario']} {r['metric']})"
        if not isinstance(r["scenario"], str) or not isinstance(r["metric"], str) or not isinstance(r["target"], str):
            fail(f"{where}: scenario, metric and target must be strings")
        if r["ordo"] is not None and not (number(r["ordo"]) and r["ordo"] >= 0):
            fail(f"{where}: ordo must be a non-negative number or null")
        for key in ("comparators", "ratios"):
            if not isinstance(r[key], dict) or not all(isinstance(k, str) and number(v) for k, v in r[key].items()):
                fail(f"{where}: {key} must map names to numbers")
        if r["met"] not in (True, False, None):
            fail(f"{where}: met must be true, false or null")
        if r["ordo"] is None and r["met"] is not None:
            fail(f"{where}: a line without a figure cannot meet a target")
        if r["ordo"] is not None and r["comparators"] and not r["ratios"]:
            fail(f"{where}: comparators without ratios")
    for s in SCENARIOS:
        if not any(r["scenario"] == s or r["scenario"].startswith(s + "-") for r in results):
            fail(f"scenario {s} missing")
    missed = [f"{r['scenario']} {r['metric']}" for r in results if r["met"] is False]
    print(f"check-json: {path}: {len(results)} results, well-formed"
          + (f"; targets missed (not a failure): {', '.join(missed)}" if missed else ""))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        fail("usage: check-json.py REPORT.json")
    main(sys.argv[1])
