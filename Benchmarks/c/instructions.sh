#!/bin/sh
# Instructions (and with CACHE=1 first- and last-level data-cache read
# misses, as callgrind's cache simulation counts them) per
# operation of one command of ordo-c-bench or gobject-bench, with callgrind:
# the program runs twice, OPS and 2×OPS operations of the command after a
# warm-up of OPS, and the difference of the totals is divided by OPS, so
# start-up and registration cancel out.
#
#   Benchmarks/c/instructions.sh PROGRAM N WORD OPS [PER]
#
# PER divides further (1000 changes per delivery transaction: 1000).
# Example, after `make bench`:
#   Benchmarks/c/instructions.sh .build-bench/ordo-c-bench 1000 handles 50 1000
#   Benchmarks/c/instructions.sh .build-bench/gobject-bench 1000 pspec 50 1000
set -eu
prog=${1:?usage: instructions.sh PROGRAM N WORD OPS [PER]}
n=${2:?N}
word=${3:?WORD}
ops=${4:?OPS}
per=${5:-1}
cache=""
[ "${CACHE:-0}" = 1 ] && cache="--cache-sim=yes"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # $1: operations measured after the warm-up; prints "Ir D1mr DLmr"
  printf '%s %s\n%s %s\n' "$word" "$ops" "$word" "$1" \
    | valgrind --tool=callgrind $cache --callgrind-out-file="$tmp/out" "$prog" "$n" >/dev/null 2>"$tmp/log"
  callgrind_annotate "$tmp/out" 2>/dev/null | awk '
    /^Events shown:/ { for (i = 3; i <= NF; i++) { if ($i == "D1mr") d = i - 2; if ($i == "DLmr") l = i - 2 } }
    /PROGRAM TOTALS/ { gsub(",", ""); gsub(/\([^)]*\)/, ""); print $1, (d ? $d : 0), (l ? $l : 0); exit }'
}
set -- $(count "$ops") $(count $((2 * ops)))
awk -v a="$1" -v b="$4" -v ma="$2" -v mb="$5" -v la="$3" -v lb="$6" -v ops="$ops" -v per="$per" -v cache="$cache" 'BEGIN {
  printf "%.0f instructions", (b - a) / ops / per
  if (cache != "") printf ", %.1f D1 and %.1f LL read misses", (mb - ma) / ops / per, (lb - la) / ops / per
  printf " per operation\n"
}'
