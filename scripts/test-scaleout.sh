#!/bin/sh
# test-scaleout.sh: the Ray integration (python/sqlite_sentiment/ray.py)
# on a local Ray cluster of 2 workers. Builds the wheel (make wheel), installs
# it with no network into a virtual environment made from Debian's python3
# ($BUILD/scaleout-venv), with ray[data], pyarrow, pandas and pytest from
# PyPI, and runs python/tests_scaleout there, from outside the source tree,
# over reviews built at run time from ../shared/data (synthetic ones, said
# so, when that directory is absent; SENTIMENT_DATA_DIR names another). The venv is kept between runs while
# its requirements are unchanged; the wheel is installed afresh every run.
# Skips, exiting 0 and saying why on a line starting "test-scaleout:
# SKIPPED:" (also written to $BUILD/test-scaleout.status), when that Python
# cannot load SQLite extensions or make a venv, when PyPI has no ray for it,
# or for a sanitizer build.
#   SCALEOUT_ROWS   rows of the main corpus (default 50000)
set -eu
BUILD=${BUILD:-build}
PY=${SCALEOUT_PYTHON:-/usr/bin/python3}
VENV=$BUILD/scaleout-venv
STATUS=$BUILD/test-scaleout.status
REQUIREMENTS="ray[data] pyarrow pandas pytest"
mkdir -p "$BUILD"

skip() {
    echo "test-scaleout: SKIPPED: $*" | tee "$STATUS"
    exit 0
}

[ -z "${SAN:-}" ] || skip "sanitizer build ($SAN): the wheel is built from a plain build"
[ -x "$PY" ] || skip "$PY not found"
"$PY" -c 'import sqlite3; sqlite3.connect(":memory:").enable_load_extension' 2>/dev/null ||
    skip "$PY's sqlite3 cannot load extensions"
"$PY" -c 'import venv, ensurepip' 2>/dev/null ||
    skip "$PY has no venv support (apt-get install python3-venv)"

make -s wheel BUILD="$BUILD"
set -- "$BUILD"/wheel/sqlite_sentiment-*.whl
[ -f "$1" ] || { echo "test-scaleout: make wheel made no wheel" >&2; exit 1; }
wheel=$1

want="$("$PY" --version 2>&1) $REQUIREMENTS"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.requirements" 2>/dev/null)" != "$want" ]; then
    rm -rf "$VENV"
    "$PY" -m venv "$VENV" || skip "$PY -m venv failed"
    log=$BUILD/test-scaleout.pip.log
    # shellcheck disable=SC2086
    "$VENV/bin/pip" install -q $REQUIREMENTS >"$log" 2>&1 ||
        skip "$REQUIREMENTS not installable from PyPI ($(tail -n 1 "$log"))"
    echo "$want" >"$VENV/.requirements"
fi
"$VENV/bin/pip" uninstall -q -y sqlite-sentiment >/dev/null 2>&1 || true
rm -rf "$VENV"/lib/python3*/site-packages/sqlite_sentiment
"$VENV/bin/pip" install -q --no-index --no-deps "$wheel"
pkg=$("$VENV/bin/python" -c 'import os, sqlite_sentiment; print(os.path.dirname(sqlite_sentiment.__file__))')
if ! "$VENV/bin/python" -c 'import sys, zipfile; sys.exit("sqlite_sentiment/ray.py" not in zipfile.ZipFile(sys.argv[1]).namelist())' "$wheel"; then
    # A wheel built before build_wheel.py packaged every module of the package.
    echo "test-scaleout: note: $(basename "$wheel") has no sqlite_sentiment/ray.py; installed from python/"
    cp python/sqlite_sentiment/ray.py "$pkg/"
fi

data=${SENTIMENT_DATA_DIR:-$(cd .. && pwd)/shared/data}
if [ -d "$data" ]; then
    SENTIMENT_DATA_DIR=$data
else
    echo "test-scaleout: note: no $data; the tests label synthetic reviews"
    SENTIMENT_DATA_DIR=
fi
export SENTIMENT_DATA_DIR

tests=$(cd python/tests_scaleout && pwd)
cd "$VENV"
rm -f "../$(basename "$STATUS")"
./bin/python -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning --durations=6 "$tests"
echo "test-scaleout: passed ($(basename "$wheel"))" >"../$(basename "$STATUS")"
