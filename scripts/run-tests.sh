#!/bin/sh
# run-tests.sh: runs each test binary given, then the SQL scripts in sql/tests
# (when sentiment.so exists), the Python wheel's tests (scripts/test-wheel.sh),
# the Ray scale-out suite (scripts/test-scaleout.sh; it skips, passing, where
# it cannot run), and prints one summary line, the last line of its output
# (and of `make test`'s). Exits non-zero when anything failed.
set -u
passed=0
failed=0
failed_names=""
for t in "$@"; do
    echo "== $t"
    if "$t"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failed_names="$failed_names $t"
    fi
done
if [ -x ./scripts/run-sql-tests.sh ] && [ -f "${BUILD:-build}/sentiment.so" ]; then
    echo "== sql/tests"
    if ./scripts/run-sql-tests.sh "${BUILD:-build}"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failed_names="$failed_names sql/tests"
    fi
fi
# The Python wheel, installed into a fresh venv (it skips, passing, when
# Debian's python3 or PyPI cannot serve; the reason is in the output).
if [ -x ./scripts/test-wheel.sh ] && [ -f "${BUILD:-build}/sentiment.so" ]; then
    echo "== python wheel"
    if ./scripts/test-wheel.sh; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failed_names="$failed_names python-wheel"
    fi
fi
# The scale-out suite last before the summary, so that the summary stays
# the last line. SCALEOUT=0 leaves it out; SCALEOUT_SCRIPT names another
# script (tests/scripts/test_run_tests_summary.sh uses a stand-in).
scaleout=${SCALEOUT_SCRIPT:-./scripts/test-scaleout.sh}
if [ "${SCALEOUT:-1}" != 0 ] && [ -x "$scaleout" ]; then
    echo "== scale-out ($scaleout)"
    if BUILD="${BUILD:-build}" SAN="${SAN:-}" "$scaleout"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failed_names="$failed_names scale-out"
    fi
fi
echo
[ "$failed" -gt 0 ] && echo "failed:$failed_names"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
