#!/bin/sh
# The generated accessors in each language (make test-codegen; docs/schema.md,
# "Generated accessors"):
#
#   Tests/Codegen/run.sh WORKDIR ORDOCTL LIBORDO SWIFT_BIN_PATH PYTHON
#
# 1. `ordoctl codegen` gives the checked-in files of examples/playlist/ and
#    examples/swift/ (no stale generated code), and refuses what it cannot
#    generate;
# 2. removing or retyping playlist.total in the schema makes the Swift and C
#    examples, which use its accessors, fail to compile (and they compile
#    with the schema as it is);
# 3. a schema of awkward names gives code that compiles;
# 4. the C example builds as C11 and as C++ with -Wall -Wextra -Werror and
#    runs under valgrind, the Python example runs, both printing the
#    expected lines; the Python accessors' tests run under pytest, over
#    ordo.Bus (in-process) and ordo.Client (against `ordod --schema` on a
#    private dbus-daemon).
set -eu
work=$1
ordoctl=$2
libordo=$3
swift_bin=$4
python=$5
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
example="$root/examples/playlist"
schema="$root/examples/schema/playlist.json"
CC=${CC:-cc}
CXX=${CXX:-c++}
SWIFTC=${SWIFTC:-swiftc}
strict="-Wall -Wextra -Werror -pedantic -g"

# 1. The checked-in code is what the generator gives.
for lang in swift c python; do
  mkdir -p "$work/gen/$lang"
  "$ordoctl" codegen --$lang --output "$work/gen/$lang" "$schema" >/dev/null
done
diff -u "$example/swift/Sources/playlist/PlaylistModel.swift" "$work/gen/swift/PlaylistModel.swift"
diff -u "$example/c/playlist_model.h" "$work/gen/c/playlist_model.h"
diff -u "$example/python/playlist_model.py" "$work/gen/python/playlist_model.py"
mkdir -p "$work/gen/songs"
"$ordoctl" codegen --swift --output "$work/gen/songs" "$root/examples/swift/songs.json" >/dev/null
diff -u "$root/examples/swift/Sources/songs/SongsModel.swift" "$work/gen/songs/SongsModel.swift"
echo "test-codegen: the checked-in accessors of examples/playlist and examples/swift are current"
# A usage error is status 2; a shape without accessors is refused (status 1)
# naming the keypath.
status=0; "$ordoctl" codegen --swift --c "$schema" 2>/dev/null || status=$?
[ $status -eq 2 ] || { echo "test-codegen: codegen with two languages exited $status, not 2" >&2; exit 1; }
printf '{"ordo-schema": 1, "keys": {"a.*": {"type": "event"}}}' >"$work/events.json"
if "$ordoctl" codegen --c "$work/events.json" >/dev/null 2>"$work/events.log"; then
  echo "test-codegen: codegen accepted a collection of events" >&2
  exit 1
fi
grep -q '"a.\*": a collection of events' "$work/events.log" || { cat "$work/events.log" >&2; exit 1; }

# 2. A schema without playlist.total, and one where it is a string: the
#    examples that use its accessors do not compile.
swift_check() { # DIR: typecheck the Swift example with DIR's accessors
  "$SWIFTC" -typecheck -swift-version 6 -warnings-as-errors -I "$swift_bin/Modules" -I "$root/Sources/CCacheHint" \
    "$example/swift/Sources/playlist/main.swift" "$1/PlaylistModel.swift"
}
c_check() { # DIR: compile the C example with DIR's header
  cp "$example/c/playlist.c" "$1/playlist.c"
  $CC -std=c11 $strict -I "$root/include" -fsyntax-only "$1/playlist.c"
}
swift_check "$work/gen/swift"
c_check "$work/gen/c"
for change in removed retyped; do
  "$python" - "$schema" "$work/$change.json" "$change" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
if sys.argv[3] == "removed":
    del doc["keys"]["playlist.total"]
else:
    doc["keys"]["playlist.total"] = {"type": "string"}
json.dump(doc, open(sys.argv[2], "w"))
PY
  for lang in swift c; do
    mkdir -p "$work/$change/$lang"
    "$ordoctl" codegen --$lang --name playlist --output "$work/$change/$lang" "$work/$change.json" >/dev/null
  done
  if swift_check "$work/$change/swift" >"$work/$change-swift.log" 2>&1; then
    echo "test-codegen: the Swift example compiles with playlist.total $change" >&2
    exit 1
  fi
  grep -q "error:.*total" "$work/$change-swift.log" || { cat "$work/$change-swift.log" >&2; exit 1; }
  if c_check "$work/$change/c" >"$work/$change-c.log" 2>&1; then
    echo "test-codegen: the C example compiles with playlist.total $change" >&2
    exit 1
  fi
  grep -q "error:.*total" "$work/$change-c.log" || { cat "$work/$change-c.log" >&2; exit 1; }
  echo "test-codegen: with playlist.total $change, the Swift and C examples do not compile:"
  grep -m1 "error:" "$work/$change-swift.log" | sed 's/^/  | /'
  grep -m1 "error:" "$work/$change-c.log" | sed 's/^/  | /'
done

# 3. A schema of awkward names (keywords, names of Swift types and modules,
#    a leading digit, escapes in defaults, "*/" in a description) gives
#    code that compiles, and Python code that reads the defaults back.
awkward="$here/awkward.json"
mkdir -p "$work/awkward"
for lang in swift c python; do
  "$ordoctl" codegen --$lang --output "$work/awkward" "$awkward" >/dev/null
done
cat >"$work/awkward/main.swift" <<'SWIFT'
import Ordo
let m = try AwkwardModel(bus: Bus(schema: try Schema(json: CommandLine.arguments[1])))
let text: String = try m.string.default_Value
let record = AwkwardModel.Ordo_.Class.Record(for_: [1], in_: 2, xY: true)
try m.ordo.class_.set("c1", record)
try m.ordo.list.set("l1", "x")
let items: [String: String] = try m.ordo.list.values()
let size: [UInt8]? = try m.ordo.sizes["s1"]
print(text, record, try m.ordo.int.value(or: 0), m.xY._2nd, m.type.self_, items, size ?? [], m.ordo.list.anyElement)
SWIFT
"$SWIFTC" -typecheck -swift-version 6 -warnings-as-errors -I "$swift_bin/Modules" -I "$root/Sources/CCacheHint" \
  "$work/awkward/main.swift" "$work/awkward/AwkwardModel.swift"
printf '#include "awkward_model.h"\nint main(void) { return 0; }\n' >"$work/awkward/use.c"
$CC -std=c11 $strict -I "$root/include" -fsyntax-only "$work/awkward/use.c"
cp "$work/awkward/use.c" "$work/awkward/use.cpp"
$CXX -std=c++11 $strict -I "$root/include" -fsyntax-only "$work/awkward/use.cpp"
echo "test-codegen: the accessors of Tests/Codegen/awkward.json compile in Swift, C and C++"

# 4. The C, C++ and Python examples run.
mkdir -p "$work/lib"
ln -sf "$libordo" "$work/lib/libordo.so.1"
ln -sf libordo.so.1 "$work/lib/libordo.so"
link="-L$work/lib -Wl,-rpath,$work/lib -lordo"
cat >"$work/expected.txt" <<'OUT'
after adding 3 tracks: total = 635, title views = 1
after shortening t2: total = 595, title views = 1
selected: Drive
refresh counter = 1
OUT
expect() { # NAME OUTPUT: every expected line is in OUTPUT
  sed 's/^/  | /' "$2"
  while IFS= read -r line; do
    grep -qxF "$line" "$2" || { echo "test-codegen: $1 did not print \"$line\"" >&2; exit 1; }
  done <"$work/expected.txt"
}
$CC -std=c11 $strict -I "$root/include" -o "$work/playlist" "$example/c/playlist.c" $link
cp "$example/c/playlist.c" "$work/playlist.cpp"
$CXX -std=c++11 $strict -I "$root/include" -I "$example/c" -o "$work/playlist_cxx" "$work/playlist.cpp" $link
for program in playlist playlist_cxx; do
  valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect,possible \
    --suppressions="$root/Tests/C/valgrind.supp" "$work/$program" "$schema" >"$work/$program.out"
  echo "test-codegen: examples/playlist/c as $program, under valgrind:"
  expect "$program" "$work/$program.out"
done
PYTHONPATH="$example/python:$root/bindings/python/src" ORDO_LIBRARY="$work/lib/libordo.so.1" "$python" "$example/python/playlist.py" "$schema" >"$work/python.out"
PYTHONPATH="$work/awkward:$root/bindings/python/src" ORDO_LIBRARY="$work/lib/libordo.so.1" "$python" - "$awkward" <<'PY'
import json, sys
import ordo
from awkward_model import AwkwardModel, AwkwardModelOrdoClassRecord as Record
bus = ordo.Bus(schema_file=sys.argv[1])
m = AwkwardModel(bus)
want = json.load(open(sys.argv[1]))["keys"]["string.default"]["default"]
assert m.string.default.get() == m.string.default.default == want, (m.string.default.get(), want)
assert m.ordo.int.get() == -2 ** 63
m.ordo.class_.set("c1", Record(x_y=True))
assert m.ordo.class_.get("c1") == Record(for_=b"\x00\xff", in_=1.5, x_y=True)
m.x_y._2nd.touch()
assert m.ordo.list.get("l1") == "none"
m.ordo.list.set("l1", "one")
assert m.ordo.list.get("l1") == "one" and m.ordo.list.any_element == "ordo.list.*"
m.ordo.list.set("l0", "zero")
assert list(m.ordo.list.values().items()) == [("l0", "zero"), ("l1", "one")]
m.ordo.list.remove("l0")
m.ordo.list.remove("l1")
assert not bus.is_stored("ordo.list.l1")
bus.close()
PY
echo "test-codegen: examples/playlist/python:"
expect "playlist.py" "$work/python.out"
cd "$here"
PYTHONPATH="$example/python:$root/bindings/python/src" ORDO_LIBRARY="$work/lib/libordo.so.1" ORDO_SCHEMA="$schema" ORDO_BIN="$swift_bin" \
  "$python" -m pytest -q -p no:cacheprovider test_codegen_python.py
