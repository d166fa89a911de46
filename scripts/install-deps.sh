#!/bin/sh
# install-deps.sh: makes sure the Debian packages the build needs are present.
# Installs the missing ones with apt-get when run as root; otherwise names them
# and fails, so the build never half-works on a machine without them.
#
# The browser tests' packages (OPTIONAL_PKGS: Chromium, its driver and a CJK font, for
# python/tests/test_browser*.py) and the linters (LINT_PKGS, for make lint:
# scripts/lint.sh) are installed too when run as root; they are not needed
# to build, so without root, or where apt-get cannot install them, this says
# so and goes on: those tests skip saying why, and make lint names what is
# missing.
set -eu

PKGS="build-essential pkg-config libsqlite3-dev sqlite3 libutf8proc-dev libcmocka-dev libopenblas-dev libjansson-dev libcjson-dev patchelf"
OPTIONAL_PKGS="chromium chromium-driver fonts-wqy-microhei"
LINT_PKGS="clang-format clang-tidy cppcheck shellcheck"

not_installed() {
    out=""
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            out="$out $p"
        fi
    done
    echo "$out"
}

# optional FOR WITHOUT PKG...: installs the missing ones of PKG... (needed
# FOR) as root; otherwise, or when apt-get fails, says so (WITHOUT: what
# happens without them) and goes on.
optional() {
    for_what=$1 without=$2
    shift 2
    absent=$(not_installed "$@")
    [ -n "$absent" ] || return 0
    if [ "$(id -u)" -eq 0 ]; then
        echo "install-deps: installing (for $for_what)$absent" >&2
        export DEBIAN_FRONTEND=noninteractive
        # shellcheck disable=SC2086
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends $absent >&2; } ||
            echo "install-deps: could not install$absent; $without" >&2
    else
        echo "install-deps: note: not installed:$absent ($without; as root," \
             "or: sudo apt-get install$absent)" >&2
    fi
}

# shellcheck disable=SC2086
missing=$(not_installed $PKGS)
# shellcheck disable=SC2086
optional "the browser tests" "the browser tests skip" $OPTIONAL_PKGS
# shellcheck disable=SC2086
optional "make lint" "make lint cannot run" $LINT_PKGS

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
    echo "install-deps: installing$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >&2
else
    echo "install-deps: missing Debian packages:$missing" >&2
    echo "install-deps: run as root, or: sudo apt-get install$missing" >&2
    exit 1
fi
