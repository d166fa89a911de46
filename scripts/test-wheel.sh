#!/bin/sh
# test-wheel.sh: builds the Python wheel (make wheel), installs it with no
# network into a fresh virtual environment made from Debian's python3
# ($BUILD/wheel-venv), installs pytest and the test tooling there from PyPI,
# and runs python/tests against the installed package. Skips, exiting 0 and
# saying why on a line starting "test-wheel: SKIPPED:" (also written to
# $BUILD/test-wheel.status), when that Python cannot load SQLite extensions
# or make a venv, when pytest cannot be installed, or for a sanitizer build.
# Each optional tool (sqlite-utils, datasette, datasette-enrichments,
# pytest-asyncio, pyarrow, selenium, sqlean.py, pysqlite3-binary) that PyPI
# cannot give is named in a "test-wheel: note:" line and its tests skip with
# that reason (pytest -rs prints every skip). The browser test also needs
# Debian's chromium and chromium-driver (scripts/install-deps.sh installs them as root).
set -eu
BUILD=${BUILD:-build}
PY=${WHEEL_PYTHON:-/usr/bin/python3}
VENV=$BUILD/wheel-venv
STATUS=$BUILD/test-wheel.status
mkdir -p "$BUILD"

skip() {
    echo "test-wheel: SKIPPED: $*" | tee "$STATUS"
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
[ -f "$1" ] || { echo "test-wheel: make wheel made no wheel" >&2; exit 1; }

rm -rf "$VENV"
"$PY" -m venv "$VENV" || skip "$PY -m venv failed"
log=$BUILD/test-wheel.pip.log
: >"$log"
# The test tooling comes from PyPI once, into a wheelhouse kept in $BUILD
# (rm -rf $BUILD/wheel-tools to refresh it), and is installed from there
# with no index on every run: a fresh venv in seconds, not a resolve over
# the network each time. Optional, each with tests that skip without it:
# the other connection types (sqlean.py, pysqlite3, each with its own
# SQLite), sqlite-vec (sentiment_embed's BLOBs), the hosts of the plugins, the async test client, Parquet, the
# browser driver.
TOOLS="sqlean.py pysqlite3-binary sqlite-vec sqlite-utils datasette datasette-enrichments pytest-asyncio pyarrow selenium"
HOUSE=$BUILD/wheel-tools
if [ "$(cat "$HOUSE/.list" 2>/dev/null)" != "pytest $TOOLS" ]; then
    rm -rf "$HOUSE"
    mkdir -p "$HOUSE"
    "$VENV/bin/pip" download -q -d "$HOUSE" pytest >>"$log" 2>&1 ||
        skip "pytest not installable from PyPI ($(tail -n 1 "$log"))"
    # Complete: kept. Not: what came is used, and the next run asks again.
    # shellcheck disable=SC2086 # $TOOLS: a list of words, split on purpose
    if "$VENV/bin/pip" download -q -d "$HOUSE" $TOOLS >>"$log" 2>&1; then
        echo "pytest $TOOLS" >"$HOUSE/.list"
    else
        for m in $TOOLS; do "$VENV/bin/pip" download -q -d "$HOUSE" "$m" >>"$log" 2>&1 || true; done
    fi
fi
"$VENV/bin/pip" install -q --no-index --find-links "$HOUSE" pytest >>"$log" 2>&1 ||
    skip "pytest not installable from PyPI ($(tail -n 1 "$log"))"
# shellcheck disable=SC2086 # $TOOLS: a list of words, split on purpose
if ! "$VENV/bin/pip" install -q --no-index --find-links "$HOUSE" $TOOLS >>"$log" 2>&1; then
    for m in $TOOLS; do
        "$VENV/bin/pip" install -q --no-index --find-links "$HOUSE" "$m" >>"$log" 2>&1 ||
            echo "test-wheel: note: $m not installable from PyPI; its tests skip"
    done
fi
# The wheel itself installs with no index: no network, no apt package. With
# sqlite-utils present, through `sqlite-utils install`, as its users would.
if [ -x "$VENV/bin/sqlite-utils" ]; then
    PIP_NO_INDEX=1 "$VENV/bin/sqlite-utils" install "$1" >>"$log" 2>&1 ||
        { echo "test-wheel: sqlite-utils install $1 failed:" >&2; tail -n 5 "$log" >&2; exit 1; }
else
    "$VENV/bin/pip" install -q --no-index --no-deps "$1"
fi
"$VENV/bin/python" -c 'import sqlite_sentiment' ||
    { echo "test-wheel: the wheel did not install" >&2; exit 1; }
[ -x "$VENV/bin/sqlite-sentiment" ] ||
    { echo "test-wheel: no sqlite-sentiment command after installing the wheel" >&2; exit 1; }
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; else
    echo "test-wheel: note: no chromium/chromedriver (scripts/install-deps.sh installs them as root; or apt-get install chromium chromium-driver); the browser tests skip"
fi

# A real Python whose sqlite3 cannot load extensions, when there is one.
if [ -z "${SENTIMENT_NOLOAD_PYTHON:-}" ]; then
    for p in "$(command -v python3 || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/python3; do
        if [ -x "$p" ] && ! "$p" -c 'import sqlite3; sqlite3.connect(":memory:").enable_load_extension' 2>/dev/null &&
           [ "$("$p" -c 'import sys; print(sys.version_info[0])' 2>/dev/null)" = 3 ]; then
            SENTIMENT_NOLOAD_PYTHON=$p
            export SENTIMENT_NOLOAD_PYTHON
            break
        fi
    done
fi

# Run from outside the source tree, so only the installed package is seen.
tests=$(cd python/tests && pwd)
cd "$VENV"
./bin/python -m pytest -q -rs -p no:cacheprovider "$tests"

# Again as on a machine with none of the Debian packages: in a private mount
# namespace (root), every system copy of a library the wheel carries is
# replaced by an empty file, so only the wheel's copies can load. The
# package's tests and the command line's run there (the plugins load the
# same library the same way).
hidden=""
if [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null; then
    pkg=$(./bin/python -c 'import os, sqlite_sentiment; print(os.path.dirname(sqlite_sentiment.__file__))')
    for lib in "$pkg"/libs/*; do
        sys=$(/sbin/ldconfig -p | sed -n "s|^[[:space:]]*$(basename "$lib") (.*x86-64.*) => ||p" | head -n 1)
        [ -n "$sys" ] && hidden="$hidden $(readlink -f "$sys")"
    done
fi
if [ -n "$hidden" ]; then
    echo "test-wheel: again with the system's copies hidden:$hidden"
    # The inner script is the child sh's: its variables expand there.
    # shellcheck disable=SC2016
    SENTIMENT_HIDDEN_LIBS=${hidden# } unshare -m sh -c '
        for f in $SENTIMENT_HIDDEN_LIBS; do mount --bind /dev/null "$f" || exit 1; done
        exec ./bin/python -m pytest -q -rs -p no:cacheprovider "$0/test_package.py" "$0/test_cli.py::test_label_csv"' "$tests"
else
    echo "test-wheel: note: system copies of the libraries not hidden (needs root and unshare -m)"
fi
echo "test-wheel: passed ($(basename "$1"))" >"../test-wheel.status"
