#!/usr/bin/env python3
"""The durable-ordod scenario of `make bench` (SPEC §9, §11; docs/performance.md):
dconf vs ordod --state (default sync), ordod --state --sync normal and the
in-memory ordod, all measured by Benchmarks/c/dconf-bench.c in one run on
the same private dbus-daemon setup and the same disk; the bus daemon's own
floor (three messages per write); group commit (8 committers vs 1 against
the durable ordod); the burst again through a client-side merging writer
(dconf's write_fast semantics: writes issued while a Commit is in flight
join the next one; dconf's own burst is its merged figure). Prints a table
with ratios to dconf and writes JSON.

usage: durable-bench.py BENCH ORDOD SCRATCH_DIR JSON_OUT [ROUNDS]
"""
import json
import os
import subprocess
import sys

bench, ordod, scratch, out = sys.argv[1:5]
rounds = sys.argv[5] if len(sys.argv) > 5 else "3"
scratch = os.path.abspath(scratch)
state = os.path.join(scratch, "durable-bench-state.ordo")


def run(*args, state_args=()):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(state + suffix):
            os.unlink(state + suffix)
    cmd = [bench, *args, "--dir", scratch]
    if "ordod" in args:
        cmd += ["--ordod", ordod, "--ordod-arg", "--log-level", "--ordod-arg", "warning"]
        for a in state_args:
            cmd += ["--ordod-arg", a]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"durable-bench: {' '.join(cmd)} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


targets = {
    "dconf": run("--target", "dconf", "--rounds", rounds),
    "ordod --state": run("--target", "ordod", "--rounds", rounds, state_args=("--state", state)),
    "ordod --state --sync normal": run("--target", "ordod", "--rounds", rounds,
                                       state_args=("--state", state, "--sync", "normal")),
    "ordod (memory)": run("--target", "ordod", "--rounds", rounds),
}
floor = run("--target", "floor", "--rounds", rounds)
group = {n: run("--target", "ordod", "--keys", "300", "--committers", str(n), state_args=("--state", state))
         for n in (1, 8)}

d = targets["dconf"]
# dconf's write_fast burst is merged already: it is dconf's merged figure.
for key in ("acked_writes_per_s", "visible_writes_per_s", "notifications"):
    d["merged_" + key] = d["burst_" + key]
rows = [("write-and-wait writes/s", "write_wait_writes_per_s", True),
        ("write-and-wait notifications/s", "write_wait_notifications_per_s", True),
        ("latency p50 (µs)", "latency_p50_us", False),
        ("latency p99 (µs)", "latency_p99_us", False),
        ("burst of 1 000: acked writes/s", "burst_acked_writes_per_s", True),
        ("burst of 1 000: visible writes/s", "burst_visible_writes_per_s", True),
        ("burst of 1 000: notifications", "burst_notifications", None),
        ("merged burst: acked writes/s", "merged_acked_writes_per_s", True),
        ("merged burst: visible writes/s", "merged_visible_writes_per_s", True),
        ("merged burst: notifications", "merged_notifications", None),
        ("merged burst: Commits sent", "merged_commits", None)]
print("\ndurable ordod vs dconf (ratio to dconf in brackets; latency ratio = dconf / ordod)")
names = list(targets)
print(f"{'':34}" + "".join(f"{n:>30}" for n in names))
report = {"targets": targets, "floor": floor, "group_commit": {str(k): v for k, v in group.items()}, "ratios": {}}
for label, key, higher in rows:
    cells = []
    for n in names:
        v = targets[n].get(key)
        if v is None:
            cells.append(f"{'—':>30}")
            continue
        if higher is None or n == "dconf":
            cells.append(f"{v:>30.1f}")
            continue
        ratio = (v / d[key]) if higher else (d[key] / v)
        report["ratios"].setdefault(n, {})[key] = round(ratio, 2)
        cells.append(f"{v:>21.1f} ({ratio:5.2f}×)")
    print(f"{label:34}" + "".join(cells))
fl = floor["burst_visible_writes_per_s"]
report["ratios"]["floor"] = {"burst_visible_writes_per_s": round(fl / d["burst_visible_writes_per_s"], 2)}
print(f"{'floor: 3 messages per write/s':34}{fl:>30.1f}  ({fl / d['burst_visible_writes_per_s']:.2f}× dconf's burst; "
      f"durable ordod is {targets['ordod --state']['burst_visible_writes_per_s'] / fl:.2f}× the floor)")
g1, g8 = group[1]["commits_per_s"], group[8]["commits_per_s"]
report["group_commit"]["speedup_8_vs_1"] = round(g8 / g1, 2)
print(f"group commit, ordod --state: 1 committer {g1:.0f} commits/s, 8 committers {g8:.0f} commits/s ({g8 / g1:.2f}×)")
with open(out, "w") as f:
    json.dump(report, f, indent=2)
print(f"JSON: {out}")
