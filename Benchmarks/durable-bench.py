#!/usr/bin/env python3
"""The durable-ordod scenario of `make bench` (SPEC §9, §11; docs/performance.md):
dconf vs ordod --state (default sync), ordod --state --sync normal and the
in-memory ordod, all measured by Benchmarks/c/dconf-bench.c in one run on
the same private dbus-daemon setup and the same disk; the bus daemon's own
floor (a trivial libdbus service sending what ordod sends for a Commit, a
Notify to the watcher and the reply, measured like ordod: write-and-wait,
latency, burst); group commit (8 committers vs 1 against
the durable ordod); the burst again through a client-side merging writer
(dconf's write_fast semantics: writes issued while a Commit is in flight
join the next one; dconf's own burst is its merged figure); and the floor
of any durable design that syncs once per acknowledged write, measured in
the same run: the in-memory ordod's write-and-wait figures plus one
write + fdatasync (the sync SQLite's WAL makes per COMMIT) of a file in the
directory of the state file, and the same for the bus daemon's floor (its
write-and-wait figures plus one sync: the bound of any durable service
behind this dbus-daemon); and, measured as such a service runs rather
than composed from parts (the tightest bound measured here: it includes
the idle gaps and wakeups around each sync), the durable floor: the same
trivial service made durable the simplest way (the Commits of one socket
read share one 4 KiB write + fdatasync in place before their Notify and
reply go out). The durable ordod, the in-memory ordod, the floor and the
durable floor are measured again over direct connections (dconf-bench
--direct: ordod --no-bus --listen, the floor services on a socket of their
own, peer-to-peer clients, no bus daemon). dconf, the durable ordod and
durable floor of both transports and the direct floor run a round each in
turn (ROUNDS times), so that the machine's drift weighs on all six alike.
Prints the tables with ratios to dconf, the durable write-and-wait of each
transport against its durable floor (target: within 1.2× of the floor's
writes/s, and 10× dconf wherever the floor reaches it) and the burst of
one Commit per write against dconf's merged burst (target: 0.5× over
direct connections), and writes JSON.

usage: durable-bench.py BENCH ORDOD SCRATCH_DIR JSON_OUT [ROUNDS]
"""
import json
import os
import random
import statistics
import subprocess
import sys

bench, ordod, scratch, out = sys.argv[1:5]
rounds = sys.argv[5] if len(sys.argv) > 5 else "3"
scratch = os.path.abspath(scratch)
state = os.path.join(scratch, "durable-bench-state.ordo")


def run(*args, state_args=(), samples=None, fresh=True):
    """One dconf-bench run; its JSON line. `fresh`: from a new state file
    (otherwise ordod starts from the state the previous run left)."""
    for suffix in ("", "-wal", "-shm", "-log"):
        if fresh and os.path.exists(state + suffix):
            os.unlink(state + suffix)
    cmd = [bench, *args, "--dir", scratch]
    if samples:
        cmd += ["--samples", samples]
    if "ordod" in args:
        cmd += ["--ordod", ordod, "--ordod-arg", "--log-level", "--ordod-arg", "warning"]
        for a in state_args:
            cmd += ["--ordod-arg", a]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"durable-bench: {' '.join(cmd)} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def read_samples(path):
    with open(path) as f:
        xs = [float(line) for line in f if line.strip()]
    os.unlink(path)
    return xs


def quantile(xs, q):
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1) + 0.5)]


# The sync is measured right before and right after the durable ordod and
# the in-memory one, so that the floor and what it bounds see the same disk.
mem_samples = os.path.join(scratch, "durable-bench-memory-latencies.txt")
floor_samples = os.path.join(scratch, "durable-bench-floor-latencies.txt")
sync_samples = [os.path.join(scratch, f"durable-bench-sync-{i}.txt") for i in (1, 2)]


def interleaved(specs, n):
    """Runs the targets of `specs` (name -> (dconf-bench arguments, ordod
    state arguments)) one round each, in turn, `n` times, so that the
    machine's speed, which drifts from one minute to the next on these
    VMs, weighs on each of them alike. Returns each target's figures as
    dconf-bench gives them for `n` rounds: a rate is the median of the
    rounds', a latency quantile is taken over every round's writes. A
    durable ordod starts each later round from the state file as the last
    durable ordod left it (as a restarted ordod does; over the bus daemon
    and direct, one model served both ways), so that only the first round
    pays for a new database."""
    runs = {name: [] for name in specs}
    lat = {name: [] for name in specs}
    path = os.path.join(scratch, "durable-bench-round-latencies.txt")
    for i in range(n):
        for name, (args, state_args) in specs.items():
            runs[name].append(run(*args, "--rounds", "1", state_args=state_args, samples=path, fresh=i == 0))
            lat[name] += read_samples(path)
    figures = {}
    for name, rs in runs.items():
        f = {k: (round(statistics.median(r[k] for r in rs), 1) if isinstance(v, (int, float)) else v)
             for k, v in rs[0].items()}
        f["rounds"] = n
        f["latency_p50_us"] = round(quantile(lat[name], 0.5), 1)
        f["latency_p99_us"] = round(quantile(lat[name], 0.99), 1)
        f["interleaved"] = list(specs)
        figures[name] = f
    return figures


load_before = os.getloadavg()
sync_runs = [run("--target", "sync", "--rounds", rounds, samples=sync_samples[0])]
# dconf, the durable ordod and the durable floor (the bus daemon's floor
# service with a sync of its own per socket read, before its messages: the
# bound of any durable service behind this dbus-daemon, its idle gaps and
# wakeups included, which the composed floors below leave out), a round
# of each in turn: their ratios are the targets.
# The same two over direct connections (--direct: ordod --no-bus --listen,
# the floor service on a socket of its own, no bus daemon) in the same
# rounds, and the direct floor (the trivial service sending ordod's Notify
# and reply, not durable), which bounds the burst's target.
DURABLE_FLOOR = "durable floor"
DIRECT_STATE, DIRECT_DURABLE_FLOOR = "ordod --state (direct)", "durable floor (direct)"
DIRECT_MEMORY, DIRECT_FLOOR = "ordod (memory, direct)", "direct floor"
targets = interleaved({"dconf": (("--target", "dconf"), ()),
                       "ordod --state": (("--target", "ordod"), ("--state", state)),
                       DURABLE_FLOOR: (("--target", "durable-floor"), ()),
                       DIRECT_STATE: (("--target", "ordod", "--direct"), ("--state", state)),
                       DIRECT_DURABLE_FLOOR: (("--target", "durable-floor", "--direct"), ()),
                       DIRECT_FLOOR: (("--target", "floor", "--direct"), ())}, int(rounds))
memory = run("--target", "ordod", "--rounds", rounds, samples=mem_samples)
direct_memory = run("--target", "ordod", "--direct", "--rounds", rounds)
# The bus daemon's floor right after the in-memory ordod: the trivial
# service sending ordod's messages (Notify, then the reply) and nothing else.
floor = run("--target", "floor", "--rounds", rounds, samples=floor_samples)
sync_runs.append(run("--target", "sync", "--rounds", rounds, samples=sync_samples[1]))
targets["ordod --state --sync normal"] = run("--target", "ordod", "--rounds", rounds,
                                             state_args=("--state", state, "--sync", "normal"))
targets["ordod (memory)"] = memory
targets["bus daemon floor"] = floor
targets[DIRECT_MEMORY] = direct_memory
targets[DIRECT_FLOOR] = targets.pop(DIRECT_FLOOR)
group = {n: run("--target", "ordod", "--keys", "300", "--committers", str(n), state_args=("--state", state))
         for n in (1, 8)}

# The floor: in-memory ordod + one sync per acknowledged write. Rates: the
# in-memory time per write plus the mean sync, taken like the rates (the
# median of the mean of each round's worth of syncs, KEYS each, so that a
# burst of load in one round does not decide it); latencies: each in-memory
# write->notification latency plus a sync time drawn from this run's
# syncs (20 draws each, a fixed seed), quantiles of those sums.
syncs = read_samples(sync_samples[0]) + read_samples(sync_samples[1])
mem_lat = read_samples(mem_samples)
floor_lat = read_samples(floor_samples)
chunk = max(1, len(syncs) // (2 * int(rounds)))
sync_mean = quantile([sum(syncs[i:i + chunk]) / len(syncs[i:i + chunk]) for i in range(0, len(syncs), chunk)], 0.5)



def plus_sync(m, lat):
    """Write-and-wait figures `m` (latencies `lat`) plus one of this run's
    syncs per write."""
    rng = random.Random(14)
    sums = [x + rng.choice(syncs) for x in lat for _ in range(20)]
    return {
        "write_wait_writes_per_s": round(1e6 / (1e6 / m["write_wait_writes_per_s"] + sync_mean), 1),
        "write_wait_notifications_per_s": round(1e6 / (1e6 / m["write_wait_notifications_per_s"] + sync_mean), 1),
        "latency_p50_us": round(quantile(sums, 0.5), 1),
        "latency_p99_us": round(quantile(sums, 0.99), 1),
    }


FLOOR = "floor: memory + 1 sync"
targets[FLOOR] = plus_sync(targets["ordod (memory)"], mem_lat)
# The floor of any durable service behind this dbus-daemon that syncs once
# per acknowledged write: the bus daemon's write-and-wait floor + one sync.
BUS_FLOOR = "floor: bus daemon + 1 sync"
targets[BUS_FLOOR] = plus_sync(floor, floor_lat)
sync = {"syncs": len(syncs), "write_bytes": 4096, "sync_call": "fdatasync", "directory": scratch,
        "sync_mean_us": round(sync_mean, 1), "sync_mean_all_us": round(sum(syncs) / len(syncs), 1), "sync_p50_us": round(quantile(syncs, 0.5), 1),
        "sync_p99_us": round(quantile(syncs, 0.99), 1), "runs": sync_runs}

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
report = {"targets": targets, "floor": floor, "sync": sync, "group_commit": {str(k): v for k, v in group.items()},
          "ratios": {}}
DIRECT = ("dconf", DIRECT_STATE, DIRECT_DURABLE_FLOOR, DIRECT_MEMORY, DIRECT_FLOOR)


def table(title, names):
    """Prints the rows of `names` with their ratios to dconf (kept in
    report["ratios"])."""
    print(f"\n{title} (ratio to dconf in brackets; latency ratio = dconf / ordod)")
    w = max(30, max(len(n) for n in names) + 2)
    print(f"{'':34}" + "".join(f"{n:>{w}}" for n in names))
    for label, key, higher in rows:
        cells = []
        for n in names:
            v = targets[n].get(key)
            if v is None:
                cells.append(f"{'—':>{w}}")
                continue
            if higher is None or n == "dconf":
                cells.append(f"{v:>{w}.1f}")
                continue
            ratio = (v / d[key]) if higher else (d[key] / v)
            report["ratios"].setdefault(n, {})[key] = round(ratio, 2)
            cells.append(f"{v:>{w - 9}.1f} ({ratio:5.2f}×)")
        print(f"{label:34}" + "".join(cells))


table("durable ordod vs dconf, through the bus daemon", [n for n in targets if n not in DIRECT[1:]])
table("over direct connections (no bus daemon)", DIRECT)
fr = report["ratios"][FLOOR]
reachable = fr["write_wait_writes_per_s"] >= 10 and fr["latency_p99_us"] >= 10
durable = targets["ordod --state"]
report["sync_floor"] = {
    "sync": {k: sync[k] for k in ("sync_mean_us", "sync_p50_us", "sync_p99_us")},
    "ratios_to_dconf": fr,
    "ordod_state_share_of_floor": {
        "write_wait_writes_per_s": round(durable["write_wait_writes_per_s"] / targets[FLOOR]["write_wait_writes_per_s"], 2),
        "latency_p50_us": round(targets[FLOOR]["latency_p50_us"] / durable["latency_p50_us"], 2),
        "latency_p99_us": round(targets[FLOOR]["latency_p99_us"] / durable["latency_p99_us"], 2)},
    "ten_x_reachable_with_one_sync_per_write": reachable,
}
share = report["sync_floor"]["ordod_state_share_of_floor"]
print(f"one sync (this run): write + fdatasync of a 4 KiB block in place, in {scratch}: "
      f"p50 {sync['sync_p50_us']:.0f} µs, p99 {sync['sync_p99_us']:.0f} µs, mean {sync['sync_mean_us']:.0f} µs "
      f"(median of the rounds' means; over all {sync['sync_mean_all_us']:.0f} µs) "
      f"({len(syncs)} syncs)")
print(f"'{FLOOR}' = in-memory ordod + one sync per write (composed from parts; the durable floor below is measured): {fr['write_wait_writes_per_s']:.2f}× dconf in write-and-wait, "
      f"{fr['latency_p99_us']:.2f}× in p99; ordod --state is at {share['write_wait_writes_per_s']:.2f}× the floor's "
      f"writes/s, {share['latency_p50_us']:.2f}× / {share['latency_p99_us']:.2f}× its p50 / p99 latency")
for what, key in (("write-and-wait", "write_wait_writes_per_s"), ("p99 latency", "latency_p99_us")):
    if fr[key] >= 10:
        print(f"10× dconf in {what}: within the floor in this run ({fr[key]:.2f}×)")
    else:
        print(f"10× dconf in {what}: OUT OF REACH in this run with one sync per acknowledged write on this disk "
              f"(the floor itself is {fr[key]:.2f}×)")
# On a busy machine the disk's sync time swings from run to run: then the
# floor (measured minutes apart from what it bounds) is no bound.
p50s = [r["sync_p50_us"] for r in sync_runs]
steady = max(p50s) <= 1.25 * min(p50s) and max(share.values()) <= 1.05
report["sync_floor"]["steady"] = steady
if not steady:
    print(f"(the machine was busy: the two sync measurements had p50 {p50s[0]:.0f} and {p50s[1]:.0f} µs, and/or "
          "ordod --state beat the floor: this run's floor is no bound; use a quiet run)")
bf = report["ratios"][BUS_FLOOR]
report["sync_floor"]["bus_floor_ratios_to_dconf"] = bf
report["sync_floor"]["ten_x_reachable_behind_dbus_daemon"] = bf["write_wait_writes_per_s"] >= 10 and bf["latency_p99_us"] >= 10
print(f"bus daemon write-and-wait floor (a trivial libdbus service sending ordod's Notify and reply): "
      f"{floor['write_wait_writes_per_s']:.0f} writes/s ({1e6 / floor['write_wait_writes_per_s']:.0f} µs per write; "
      f"in-memory ordod {1e6 / memory['write_wait_writes_per_s']:.0f} µs), latency p50 {floor['latency_p50_us']:.0f} / "
      f"p99 {floor['latency_p99_us']:.0f} µs (in-memory ordod {memory['latency_p50_us']:.0f} / {memory['latency_p99_us']:.0f})")
print(f"'{BUS_FLOOR}' = that floor + one sync per write (composed from parts): "
      f"{bf['write_wait_writes_per_s']:.2f}× dconf in write-and-wait, {bf['latency_p99_us']:.2f}× in p99")


def against_durable_floor(ordod_name, floor_name):
    """Durable write-and-wait of `ordod_name` against dconf and against
    the durable floor measured in the same rounds: within 1.2× of the
    floor's writes/s, and 10× dconf wherever the floor itself reaches it
    (None where it does not). Prints it; returns it for the JSON."""
    o, f = targets[ordod_name], targets[floor_name]
    fr, orr = report["ratios"][floor_name], report["ratios"][ordod_name]
    share = {"write_wait_writes_per_s": round(o["write_wait_writes_per_s"] / f["write_wait_writes_per_s"], 2),
             "latency_p50_us": round(f["latency_p50_us"] / o["latency_p50_us"], 2),
             "latency_p99_us": round(f["latency_p99_us"] / o["latency_p99_us"], 2),
             "burst_visible_writes_per_s": round(o["burst_visible_writes_per_s"] / f["burst_visible_writes_per_s"], 2)}
    floor_over_ordod = round(f["write_wait_writes_per_s"] / o["write_wait_writes_per_s"], 2)
    ten_x = {key: (orr[key] >= 10 if fr[key] >= 10 else None) for key in ("write_wait_writes_per_s", "latency_p99_us")}
    print(f"'{floor_name}' (the floor service made durable: one 4 KiB write + fdatasync per socket read, before its "
          f"messages), in turn with dconf and '{ordod_name}': {fr['write_wait_writes_per_s']:.2f}× dconf in "
          f"write-and-wait, {fr['latency_p99_us']:.2f}× in p99; '{ordod_name}' is at {share['write_wait_writes_per_s']:.2f}× "
          f"its writes/s, {share['latency_p50_us']:.2f}× / {share['latency_p99_us']:.2f}× its p50 / p99 latency, "
          f"{share['burst_visible_writes_per_s']:.2f}× its burst")
    print(f"  within 1.2× of that floor's writes/s: {'met' if floor_over_ordod <= 1.2 else 'NOT MET'} "
          f"(the floor is {floor_over_ordod:.2f}× '{ordod_name}')")
    for what, key in (("write-and-wait", "write_wait_writes_per_s"), ("p99 latency", "latency_p99_us")):
        verdict = ("out of the floor's reach in this run, not a target" if ten_x[key] is None
                   else "met" if ten_x[key] else "NOT MET")
        print(f"  10× dconf in {what}: {verdict} ('{ordod_name}' {orr[key]:.2f}×, its floor {fr[key]:.2f}×)")
    return {"ratios_to_dconf": orr, "floor_ratios_to_dconf": fr, "share_of_floor": share,
            "floor_over_ordod_writes_per_s": floor_over_ordod, "within_1_2x_of_floor": floor_over_ordod <= 1.2,
            "ten_x_dconf": ten_x}


report["durable_write_wait"] = {"daemon": against_durable_floor("ordod --state", DURABLE_FLOOR),
                                "direct": against_durable_floor(DIRECT_STATE, DIRECT_DURABLE_FLOOR)}
# One Commit per write in a burst against dconf's burst (merged by
# write_fast): the target is 0.5× over direct connections, beside the
# floors of both transports (the 3-message floor is what any service
# answering like ordod reaches; the daemon's caps the daemon path).
key = "burst_visible_writes_per_s"
burst = {n: round(targets[n][key] / d[key], 2)
         for n in ("ordod --state", "bus daemon floor", DIRECT_STATE, DIRECT_MEMORY, DIRECT_FLOOR, DIRECT_DURABLE_FLOOR)}
burst_met = burst[DIRECT_STATE] >= 0.5
burst_share = {"daemon": round(burst["ordod --state"] / burst["bus daemon floor"], 2),
         "direct": round(burst[DIRECT_STATE] / burst[DIRECT_FLOOR], 2)}
report["burst_one_commit_per_write"] = {"ratios_to_dconf": burst, "target": 0.5, "met_direct": burst_met,
                                        "ordod_state_share_of_floor": burst_share}
print(f"burst, one Commit per write, against dconf's merged burst (visible writes/s), target 0.5× over direct connections: "
      f"{'met' if burst_met else 'NOT MET'}: '{DIRECT_STATE}' {burst[DIRECT_STATE]:.2f}× (the direct floor "
      f"{burst[DIRECT_FLOOR]:.2f}×, ordod at {burst_share['direct']:.2f}× of it; durable floor {burst[DIRECT_DURABLE_FLOOR]:.2f}×; "
      f"in-memory ordod {burst[DIRECT_MEMORY]:.2f}×); through the bus daemon 'ordod --state' {burst['ordod --state']:.2f}× "
      f"(the bus daemon floor {burst['bus daemon floor']:.2f}×, ordod at {burst_share['daemon']:.2f}× of it)")
g1, g8 = group[1]["commits_per_s"], group[8]["commits_per_s"]
report["group_commit"]["speedup_8_vs_1"] = round(g8 / g1, 2)
print(f"group commit, ordod --state: 1 committer {g1:.0f} commits/s, 8 committers {g8:.0f} commits/s ({g8 / g1:.2f}×)")
report["load_average"] = {"before": [round(x, 2) for x in load_before],
                          "after": [round(x, 2) for x in os.getloadavg()]}
print(f"load average (1, 5, 15 min): before {report['load_average']['before']}, after {report['load_average']['after']}")
with open(out, "w") as f:
    json.dump(report, f, indent=2)
print(f"JSON: {out}")
