#!/bin/sh
# test_run_tests_summary.sh: the last line of `make test` is the overall
# summary: scripts/run-tests.sh runs the scale-out suite before it (a
# stand-in script here, one passing and one failing), counts it, and the
# Makefile's test recipe runs nothing after run-tests.sh.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_run_tests_summary: FAILED: $*"; exit 1; }

printf '#!/bin/sh\necho "scale-out stand-in ran"\nexit 0\n' >"$tmp/ok.sh"
printf '#!/bin/sh\necho "scale-out stand-in failed"\nexit 1\n' >"$tmp/bad.sh"
chmod +x "$tmp/ok.sh" "$tmp/bad.sh"

BUILD="$tmp" SCALEOUT_SCRIPT="$tmp/ok.sh" ./scripts/run-tests.sh /bin/true >"$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "run-tests.sh exited $rc with a passing stand-in"
grep -q "scale-out stand-in ran" "$tmp/out" || fail "the scale-out suite did not run"
last=$(tail -n 1 "$tmp/out")
[ "$last" = "2 passed, 0 failed" ] || fail "last line is '$last', expected '2 passed, 0 failed'"

BUILD="$tmp" SCALEOUT_SCRIPT="$tmp/bad.sh" ./scripts/run-tests.sh /bin/true >"$tmp/out" 2>&1
rc=$?
[ "$rc" -ne 0 ] || fail "run-tests.sh exited 0 with a failing scale-out suite"
last=$(tail -n 1 "$tmp/out")
[ "$last" = "1 passed, 1 failed" ] || fail "last line is '$last', expected '1 passed, 1 failed'"
grep -q "^failed: scale-out" "$tmp/out" || fail "the failed list does not name scale-out"

# The Makefile's test recipe: run-tests.sh is its last command.
recipe=$(awk '/^test:/ {on = 1; next} on && /^\t/ {print; next} on {exit}' Makefile)
lastcmd=$(printf '%s\n' "$recipe" | tail -n 1)
case "$lastcmd" in
*scripts/run-tests.sh*) ;;
*) fail "the test recipe's last command is '$lastcmd', not scripts/run-tests.sh" ;;
esac
echo "test_run_tests_summary: passed"
