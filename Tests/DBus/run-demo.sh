#!/bin/sh
# `make run`: starts ordod (a private dbus-daemon when there is no session
# bus), watches with ordoctl, writes a few values, shows what the watchers
# printed, and stops everything. Usage: Tests/DBus/run-demo.sh BIN_DIR
set -eu
BIN=${1:?usage: run-demo.sh BIN_DIR}
SCHEMA=$(cd "$(dirname "$0")/../.." && pwd)/examples/schema/playlist.json
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ordo-run.XXXXXX")
cd "$tmp"
ORDOD_PID= W1= W2=
cleanup() {
  for p in $W1 $W2; do kill "$p" 2>/dev/null || true; done
  if [ -n "$ORDOD_PID" ] && kill -0 "$ORDOD_PID" 2>/dev/null; then
    kill -TERM "$ORDOD_PID" 2>/dev/null || true
    i=0; while kill -0 "$ORDOD_PID" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
    kill -KILL "$ORDOD_PID" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '\n== %s\n' "$*"; }
# The arguments as a shell reads them back: one with anything but letters,
# digits and _./:=+,@- in it is single-quoted, so every command the demo
# prints can be copied and run as it is.
quoted() {
  line=
  for a in "$@"; do
    case $a in
      '' | *[!A-Za-z0-9_./:=+,@-]*) a="'$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'" ;;
    esac
    line="$line${line:+ }$a"
  done
  printf '%s' "$line"
}
show() { printf '$ %s\n' "$(quoted "$@")"; }
run() { show "$@"; "$@"; }

say "starting ordod"
printf '$ %s &\n' "$(quoted "$BIN/ordod" --log-level info)"
"$BIN/ordod" --log-level info >"$tmp/ordod.out" 2>"$tmp/ordod.log" &
ORDOD_PID=$!
i=0
until grep -q '^DBUS_SESSION_BUS_ADDRESS=' "$tmp/ordod.out" 2>/dev/null; do
  i=$((i+1))
  if [ $i -gt 100 ] || ! kill -0 "$ORDOD_PID" 2>/dev/null; then
    echo "ordod did not start:"; cat "$tmp/ordod.log"; exit 1
  fi
  sleep 0.1
done
ADDR=$(sed -n 's/^DBUS_SESSION_BUS_ADDRESS=//p' "$tmp/ordod.out")
echo "ordod serves dev.ordo.Bus on $ADDR; the commands below use it:"
show export DBUS_SESSION_BUS_ADDRESS="$ADDR"
export DBUS_SESSION_BUS_ADDRESS="$ADDR"
ctl() { "$BIN/ordoctl" "$@"; }

# The watchers stop after --count notifications: one for each of the five
# transactions below on doc.**, one for each of the four that change
# doc.title (the first, the touch, the rm and the last).
say "two watchers: a data contract on doc.** and a priority-1 contract on doc.title (JSON)"
printf '$ %s >w1.out 2>&1 &\n' "$(quoted "$BIN/ordoctl" watch 'doc.**' --count 5)"
ctl watch 'doc.**' --count 5 >"$tmp/w1.out" 2>&1 &
W1=$!
printf '$ %s >w2.out 2>&1 &\n' "$(quoted "$BIN/ordoctl" watch doc.title --priority 1 --json --count 4)"
ctl watch doc.title --priority 1 --json --count 4 >"$tmp/w2.out" 2>&1 &
W2=$!
i=0
until [ "$(ctl contracts | wc -l)" -ge 2 ]; do
  i=$((i+1)); [ $i -gt 100 ] && { echo "the watchers did not register"; exit 1; }
  sleep 0.1
done
run "$BIN/ordoctl" contracts

say "five transactions"
run "$BIN/ordoctl" set doc.title=s:Songs doc.count=int64:3 doc.ratio=d:0.5
run "$BIN/ordoctl" set doc.count=4
run "$BIN/ordoctl" touch doc.title
run "$BIN/ordoctl" rm 'doc.**'
run "$BIN/ordoctl" set doc.title="s:Songs, again"

say "reads"
run "$BIN/ordoctl" get doc.title
run "$BIN/ordoctl" snapshot
run "$BIN/ordoctl" stats

# The watchers exit after --count notifications.
for p in $W1 $W2; do
  i=0; while kill -0 "$p" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
done
say "what the watchers printed (one line per Notify)"
run cat w1.out
run cat w2.out
W1= W2=

say "stopping ordod (SIGTERM)"
kill -TERM "$ORDOD_PID"
i=0; while kill -0 "$ORDOD_PID" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
wait "$ORDOD_PID" && rc=0 || rc=$?
ORDOD_PID=
echo "ordod exited with status $rc; its log:"
cat "$tmp/ordod.log"
[ "$rc" -eq 0 ]

# An ordod of its own, on a private bus, with these options.
start_private() {
  : >"$tmp/ordod.out"
  printf '$ %s &\n' "$(quoted "$BIN/ordod" --private --log-level info "$@")"
  "$BIN/ordod" --private --log-level info "$@" >"$tmp/ordod.out" 2>"$tmp/ordod.log" &
  ORDOD_PID=$!
  i=0
  until grep -q '^DBUS_SESSION_BUS_ADDRESS=' "$tmp/ordod.out" 2>/dev/null; do
    i=$((i+1))
    if [ $i -gt 100 ] || ! kill -0 "$ORDOD_PID" 2>/dev/null; then
      echo "ordod did not start:"; cat "$tmp/ordod.log"; exit 1
    fi
    sleep 0.1
  done
  DBUS_SESSION_BUS_ADDRESS=$(sed -n 's/^DBUS_SESSION_BUS_ADDRESS=//p' "$tmp/ordod.out")
  show export DBUS_SESSION_BUS_ADDRESS="$DBUS_SESSION_BUS_ADDRESS"
  export DBUS_SESSION_BUS_ADDRESS
}
# Durable state (SPEC §11): the model survives a restart.
start_durable() {
  start_private --state "$tmp/state.ordo"
  grep 'state file' "$tmp/ordod.log" || true
}
stop_durable() {
  kill -TERM "$ORDOD_PID"
  wait "$ORDOD_PID" && rc=0 || rc=$?
  ORDOD_PID=
  [ "$rc" -eq 0 ] || { echo "ordod exited with status $rc:"; cat "$tmp/ordod.log"; exit 1; }
}

say "durable: ordod --state $tmp/state.ordo, three transactions, stop"
start_durable
run "$BIN/ordoctl" set doc.title=s:Kept doc.count=int64:7
run "$BIN/ordoctl" set doc.count=8
show "$BIN/ordoctl" set doc.ratio=d:0.25
last=$("$BIN/ordoctl" set doc.ratio=d:0.25)
echo "$last"
stop_durable
echo "ordod stopped"

say "durable: ordod started again on the same state file"
start_durable
run "$BIN/ordoctl" get doc.title doc.count doc.ratio
run "$BIN/ordoctl" snapshot 'doc.**'
now=$(gdbus call --address "$DBUS_SESSION_BUS_ADDRESS" --dest dev.ordo.Bus --object-path /dev/ordo/Bus \
  --method org.freedesktop.DBus.Properties.Get dev.ordo.Bus1 Transaction 2>/dev/null \
  | sed -n 's/.*uint64 \([0-9]*\).*/\1/p')
[ -n "$now" ] || now=$("$BIN/ordoctl" stats | sed -n 's/^transactions *[=:]* *//p')
echo "last transaction before the restart: $last; after: $now"
[ "$now" = "$last" ] || { echo "the transaction id did not survive the restart"; exit 1; }
[ "$("$BIN/ordoctl" get doc.count)" = "int64:8" ] || { echo "doc.count did not survive the restart"; exit 1; }
stop_durable
echo "the model survived the restart"

# A schema (SPEC §14, docs/schema.md): the model's keypaths, types,
# defaults and constraints, enforced on every call.
say "a schema: ordod --schema $SCHEMA"
start_private --schema "$SCHEMA"
run "$BIN/ordoctl" schema 'playlist.*'
run "$BIN/ordoctl" get playlist.mode
show "$BIN/ordoctl" set playlist.titel=Songs
! "$BIN/ordoctl" set playlist.titel=Songs || { echo "a misspelt keypath was accepted"; exit 1; }
show "$BIN/ordoctl" set playlist.total=-5
! "$BIN/ordoctl" set playlist.total=-5 || { echo "a value below min was accepted"; exit 1; }
run "$BIN/ordoctl" set playlist.title=Songs playlist.total=448 playlist.mode=grid
run "$BIN/ordoctl" get playlist.title playlist.total playlist.mode playlist.selection
stop_durable
echo "the schema refused the typo (with its suggestion) and the negative total, and read the defaults"
