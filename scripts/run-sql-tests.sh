#!/bin/sh
# run-sql-tests.sh BUILD_DIR [--update]: runs each sql/tests/*.sql through
# the sqlite3 shell with BUILD_DIR/sentiment loaded (from the repository
# root) and compares stdout+stderr with sql/tests/NAME.expected. Then runs
# examples/label_table.py with a Python whose sqlite3 module can load
# extensions. Exits non-zero on any difference or failure. --update
# rewrites the .expected files from the current output instead.
set -u
cd "$(dirname "$0")/.." || exit 1
build=${1:-build}
update=${2:-}
so="$build/sentiment"
if [ ! -f "$so.so" ]; then
    echo "run-sql-tests: $so.so not built" >&2
    exit 1
fi
if ! command -v sqlite3 >/dev/null 2>&1; then
    echo "run-sql-tests: the sqlite3 shell is not installed" >&2
    exit 1
fi
# A sanitizer build of sentiment.so (make asan) needs its runtime loaded
# first in the uninstrumented sqlite3 shell and python.
preload=$(ldd "$so.so" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {printf "%s ", $3}')
run() {
    if [ -n "$preload" ]; then
        env LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" "$@"
    else
        "$@"
    fi
}
failed=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for sql in sql/tests/*.sql; do
    name=${sql%.sql}
    { echo ".load $so"; cat "$sql"; } | run sqlite3 -batch :memory: >"$tmp" 2>&1
    if [ "$update" = "--update" ]; then
        cp "$tmp" "$name.expected"
        echo "updated $name.expected"
    elif diff -u "$name.expected" "$tmp"; then
        echo "ok   $sql"
    else
        echo "FAIL $sql (diff above: - expected, + got)"
        failed=$((failed + 1))
    fi
done

# Python's sqlite3 module, where it was built with extension loading.
py=""
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 &&
        "$p" -c 'import sqlite3; sqlite3.connect(":memory:").enable_load_extension' >/dev/null 2>&1; then
        py=$p
        break
    fi
done
if [ -n "$py" ]; then
    if run "$py" examples/label_table.py --extension "$so" \
        --model tests/fixtures/models/bert_tiny >"$tmp" 2>&1 &&
        grep -q "labelled" "$tmp"; then
        echo "ok   examples/label_table.py ($py)"
    else
        cat "$tmp"
        echo "FAIL examples/label_table.py ($py)"
        failed=$((failed + 1))
    fi
else
    echo "note: no python3 with sqlite3 extension loading; examples/label_table.py not run"
fi
[ "$failed" -eq 0 ]
