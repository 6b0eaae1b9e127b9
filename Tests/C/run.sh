#!/bin/sh
# Runs the C ABI tests against an installed Ordo (make test-c calls this
# after `make install PREFIX=...` into a temporary prefix).
#
#   Tests/C/run.sh WORKDIR PREFIX [CONFORMANCE_DIR...]
#
# 1. the exported symbols are exactly the functions ordo.h declares;
# 2. ordo.h compiles alone as C99 and as C++ (-Wall -Wextra -Werror -pedantic);
# 3. test_api.c, test_contracts.c, test_handles.c, test_devtools.c, test_resync.c, test_snapshot.c,
#    test_schema.c and test_conditions.c (C99) and test_header.cpp (C++) build
#    with `pkg-config --cflags --libs ordo` alone and run, without
#    LD_LIBRARY_PATH, under valgrind: any leak or invalid access fails;
# 4. the conformance scenarios run through the library with ctypes;
# 5. examples/c builds with one cc line and runs.
set -eu
work=$1
prefix=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CC=${CC:-cc}
CXX=${CXX:-c++}
unset LD_LIBRARY_PATH
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs ordo)
libdir=$(pkg-config --variable=libdir ordo)
lib="$libdir/libordo.so"
strict="-Wall -Wextra -Werror -pedantic -g"

echo "test-c: pkg-config --cflags --libs ordo = $flags"
[ "$(pkg-config --modversion ordo)" = "$(sed -n 's/^#define ORDO_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/ordo.h")" ] ||
  { echo "test-c: ordo.pc's version differs from ordo.h's" >&2; exit 1; }
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libordo.so.1" ] || { echo "test-c: SONAME is '$soname'" >&2; exit 1; }

# 1. Exports: the functions of the header, nothing else.
declared=$(sed -n 's/^[a-z][a-z0-9_ *]*[ *]\(ordo_[a-z0-9_]*\) *(.*/\1/p' "$prefix/include/ordo.h" | sort -u)
exported=$(nm -D --extern-only --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u)
if [ "$declared" != "$exported" ]; then
  echo "test-c: exported symbols differ from ordo.h's functions:" >&2
  echo "$declared" >"$work/declared.txt"
  echo "$exported" >"$work/exported.txt"
  diff "$work/declared.txt" "$work/exported.txt" >&2 || true
  exit 1
fi
echo "test-c: libordo.so exports exactly the $(echo "$declared" | wc -l) functions of ordo.h"

# 2. The header alone.
printf '#include <ordo.h>\nint main(void) { return ordo_version() == 0; }\n' >"$work/alone.c"
$CC -std=c99 $strict -o "$work/alone" "$work/alone.c" $flags
cp "$work/alone.c" "$work/alone.cpp"
$CXX -std=c++11 $strict -o "$work/alone_cxx" "$work/alone.cpp" $flags

# 3. The C and C++ tests, under valgrind (--fair-sched: the thread tests
#    wait for each other in loops that valgrind's default scheduler, which
#    runs one thread at a time, can starve).
$CC -std=c99 $strict -o "$work/test_api" "$here/test_api.c" $flags -lm
$CC -std=c99 $strict -o "$work/test_contracts" "$here/test_contracts.c" $flags -lpthread
$CXX -std=c++11 $strict -o "$work/test_header_cxx" "$here/test_header.cpp" $flags
$CC -std=c99 $strict -o "$work/regress_unregister_scheduled" "$here/regress_unregister_scheduled.c" $flags
$CC -std=c99 $strict -o "$work/test_handles" "$here/test_handles.c" $flags -lpthread
$CC -std=c99 $strict -o "$work/test_devtools" "$here/test_devtools.c" $flags
$CC -std=c99 $strict -o "$work/test_resync" "$here/test_resync.c" $flags
$CC -std=c99 $strict -o "$work/test_snapshot" "$here/test_snapshot.c" $flags
$CC -std=c99 $strict -D_POSIX_C_SOURCE=200809L -o "$work/test_schema" "$here/test_schema.c" $flags
$CC -std=c99 $strict -o "$work/test_conditions" "$here/test_conditions.c" $flags -lpthread
for t in test_api test_contracts test_header_cxx regress_unregister_scheduled test_handles test_devtools test_resync test_snapshot test_schema test_conditions; do
  valgrind -q --fair-sched=yes --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect,possible \
    --suppressions="$here/valgrind.supp" "$work/$t"
done

# 4. Conformance through the C ABI.
python3 "$here/conformance_ctypes.py" --lib "$lib" "$@"

# 5. The example, built the way the README shows.
(cd "$root/examples/c" && $CC -Wall -Wextra -Werror -o "$work/example" example.c $(pkg-config --cflags --libs ordo))
"$work/example" >"$work/example.out"
echo "test-c: examples/c/example runs:"
sed 's/^/  | /' "$work/example.out"
