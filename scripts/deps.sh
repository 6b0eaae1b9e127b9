#!/bin/sh
# Installs the Debian packages Ordo needs when they are missing.
# As root: apt-get install. Otherwise: prints the exact command and fails.
# Usage: scripts/deps.sh [package ...]   (default: the build and test set)
set -eu
pkgs="${*:-libdbus-1-dev libsqlite3-dev dbus pkg-config valgrind python3}"
missing=""
for p in $pkgs; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0
cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" = 0 ]; then
  echo "deps: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends $missing >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    apt-get install -y --no-install-recommends $missing >/dev/null
  fi
else
  echo "deps: missing Debian packages:$missing" >&2
  echo "deps: run as root:  $cmd" >&2
  exit 1
fi
