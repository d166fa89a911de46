#!/bin/sh
# lint.sh [--fix]: the static checks of `make lint` (part of CI, .ci/run).
# Each must find nothing:
#   clang-format  the product code (model/, cpu/, gpu/, runtime/, ext/, recipe/: .c, .h,
#                 .cu, .cuh) against .clang-format; tests/ and bench/ are not
#                 product code and are not checked
#   cppcheck      the product C (model/, cpu/, runtime/, ext/, recipe/), each room with
#                 its include view: --enable=warning,performance,portability
#   clang-tidy    the same files, with .clang-tidy's checks and the include
#                 view each file is compiled with (make print-cppflags)
#   ShellCheck    scripts/*.sh, .ci/run, tests/**/*.sh, recipe/*.sh, bench/*.sh
# It prints what it finds and exits 1, or one summary line and exits 0.
#
# To fix: `scripts/lint.sh --fix` reformats the product code in place
# (clang-format -i) and then checks; the others are fixed in the code, or,
# for a false positive, suppressed where it is with the reason:
#   cppcheck    /* cppcheck-suppress ID ; reason */     (the line before)
#   clang-tidy  /* NOLINTNEXTLINE(check): reason */     (the line before)
#   ShellCheck  a disable=SCnnnn directive, and a comment saying why
# or, for a check that is noise here, left out in .clang-tidy with a reason.
#
# Needs Debian 12's clang-format and clang-tidy (14), cppcheck and shellcheck
# (scripts/install-deps.sh installs them as root) and the include views
# (make makes them: $BUILD/rooms, BUILD default build). LINT_JOBS files are
# checked at a time (default: the number of CPUs).
set -eu
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
JOBS=${LINT_JOBS:-$(nproc 2>/dev/null || echo 2)}
t_start=$(date +%s)

fix=0
case "${1:-}" in
--fix) fix=1 ;;
"") ;;
*)
    echo "usage: scripts/lint.sh [--fix]" >&2
    exit 2
    ;;
esac

missing=""
for t in clang-format clang-tidy cppcheck shellcheck; do # Debian names them so
    command -v "$t" >/dev/null 2>&1 || missing="$missing $t"
done
if [ -n "$missing" ]; then
    echo "lint: missing Debian packages:$missing (scripts/install-deps.sh as root, or:" \
        "sudo apt-get install$missing)" >&2
    exit 1
fi
if [ ! -f "$BUILD/rooms/.ok" ]; then
    echo "lint: no include views in $BUILD/rooms: run make first" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=""

# The product code, in the Makefile's rooms; for each room its include view
# as make compiles its files (MAKEFLAGS cleared: no jobserver of a calling
# make) in flags.N, its C files in files.N, and every C file with its flags
# in c-files.
ROOMS="model/core model/format model/tokenize model/encoder model/train cpu runtime ext recipe"
find model cpu gpu runtime ext recipe \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
    -type f | LC_ALL=C sort >"$tmp/format-files"
: >"$tmp/c-files"
n=0
for r in $ROOMS; do
    n=$((n + 1))
    MAKEFLAGS='' make -s --no-print-directory BUILD="$BUILD" print-cppflags FILE="$r/x.c" \
        >"$tmp/flags.$n"
    find "$r" -maxdepth 1 -name '*.c' -type f | LC_ALL=C sort >"$tmp/files.$n"
    while read -r f; do echo "$f $(cat "$tmp/flags.$n")"; done <"$tmp/files.$n" >>"$tmp/c-files"
done

# 1. clang-format
if [ "$fix" = 1 ]; then
    xargs -P "$JOBS" -n 16 clang-format -i <"$tmp/format-files"
fi
if ! xargs -P "$JOBS" -n 16 clang-format --dry-run --Werror <"$tmp/format-files" \
    >"$tmp/format.log" 2>&1; then
    cat "$tmp/format.log"
    v=$(clang-format --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
    [ "$v" = 14 ] || echo "lint: note: clang-format $v; .clang-format is set for 14 (Debian 12)"
    echo "lint: clang-format: the code above is not formatted (scripts/lint.sh --fix formats it)"
    failed="$failed clang-format"
fi

# 2. cppcheck, room by room (each with its include view)
bad=0
i=0
for r in $ROOMS; do
    i=$((i + 1))
    # shellcheck disable=SC2046 # the room's flags and files: lists of words
    cppcheck --quiet --std=c11 --enable=warning,performance,portability --inline-suppr \
        --error-exitcode=1 -j "$JOBS" --template='{file}:{line}:{column}: {severity}: {message} [{id}]' \
        $(cat "$tmp/flags.$i" "$tmp/files.$i") >"$tmp/cppcheck.log" 2>&1 || bad=1
    cat "$tmp/cppcheck.log"
done
[ "$bad" = 0 ] || failed="$failed cppcheck"

# 3. clang-tidy, file by file, LINT_JOBS at a time; each file's output kept
# apart so that they do not mix.
mkdir -p "$tmp/tidy"
# shellcheck disable=SC2016 # the inner script is the child sh's
xargs -P "$JOBS" -L 1 sh -c '
    out=$0/tidy/$(echo "$1" | tr / _).log
    f=$1
    shift
    clang-tidy --quiet "$f" -- "$@" -std=gnu11 -fopenmp-simd >"$out" 2>&1 || echo "$f" >"$out.failed"
' "$tmp" <"$tmp/c-files"
if ls "$tmp"/tidy/*.failed >/dev/null 2>&1; then
    # headers named by their place in the tree, not in the include view
    for f in "$tmp"/tidy/*.failed; do
        grep -v '^[0-9]* warnings\? \(and [0-9]* errors\? \)\?generated\.$' "${f%.failed}" |
            sed -E "s#^$PWD/##; s#^[^ :]*/rooms/[a-z]+/(core|format|tokenize|encoder|train)/#model/\1/#;
                    s#^[^ :]*/rooms/[a-z]+/(cpu|gpu|runtime|ext|recipe)/#\1/#" || true
    done
    failed="$failed clang-tidy"
fi

# 4. shellcheck
{
    ls scripts/*.sh recipe/*.sh bench/*.sh 2>/dev/null
    echo .ci/run
    find tests -name '*.sh' -type f
} | LC_ALL=C sort >"$tmp/scripts"
# shellcheck disable=SC2046 # file names without spaces
if ! shellcheck -f gcc $(cat "$tmp/scripts") >"$tmp/shellcheck.log" 2>&1; then
    cat "$tmp/shellcheck.log"
    failed="$failed shellcheck"
fi

if [ -n "$failed" ]; then
    echo "lint: FAILED:$failed"
    exit 1
fi
echo "lint: ok: clang-format $(wc -l <"$tmp/format-files") files," \
    "cppcheck and clang-tidy $(wc -l <"$tmp/c-files") C files," \
    "shellcheck $(wc -l <"$tmp/scripts") scripts, in $(($(date +%s) - t_start)) s"
