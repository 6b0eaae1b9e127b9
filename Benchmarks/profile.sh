#!/bin/sh
# Where the time of one benchmark workload goes, with callgrind.
#
#   Benchmarks/profile.sh WORKLOAD [TOP]
#
# WORKLOAD: commit:N (the scale scenario's commits with N contracts;
# commit-handles:N and commit-typed:N the same through handles and typed
# properties), delivery (scenario 2's transactions through the Swift API;
# delivery-handles, delivery-typed the same through handles and typed
# properties), register:N
# (registrations of the memory scenario), or c-abi (scenario 2 through
# libordo.so; needs `make bench` to have built .build-bench/ordo-c-bench).
# Prints the instructions of the measured part by function, inclusive, with
# names demangled; the raw profile stays in .build-bench/callgrind.WORKLOAD.
# With CACHE=1 it also simulates the caches (D1mr = first-level data misses).
set -eu
cd "$(dirname "$0")/.."
work=${1:?usage: Benchmarks/profile.sh WORKLOAD [TOP]}
top=${2:-40}
scratch=${BENCH_SCRATCH:-.build-bench}
out="$scratch/callgrind.$(echo "$work" | tr ':' '-')"
cache=""
[ "${CACHE:-0}" = 1 ] && cache="--cache-sim=yes"
if [ "$work" = c-abi ]; then
  [ -x "$scratch/ordo-c-bench" ] || { echo "profile.sh: run make bench first (no $scratch/ordo-c-bench)" >&2; exit 1; }
  # 100 transactions of 1 000 changes after registering 1 000 contracts.
  echo 100 | valgrind --tool=callgrind $cache --callgrind-out-file="$out" "$scratch/ordo-c-bench" 1000 >/dev/null 2>"$out.log"
else
  [ -x "$scratch/release/ordo-bench" ] || { echo "profile.sh: run make bench-build first" >&2; exit 1; }
  valgrind --tool=callgrind $cache --toggle-collect='*profiled*' --callgrind-out-file="$out" \
    "$scratch/release/ordo-bench" --profile "$work" 2>"$out.log"
fi
grep -E 'refs|profile' "$out.log" || true
events=Ir
[ -n "$cache" ] && events=Ir,D1mr,D1mw
callgrind_annotate --inclusive=yes --show="$events" "$out" 2>/dev/null \
  | grep -E '^ *[0-9,]+ \([ 0-9.]+%\)( +[0-9,.]+ \([ 0-9.]+%\))*  (\?\?\?|\.|/)[^ ]*:' | grep -v 'unidentified lines' \
  | sed -E 's/ \[[^]]*\]$//' | awk '!seen[$0]++' \
  | swift demangle --simplified | head -n "$top"
