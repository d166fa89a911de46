#!/bin/sh
# install-deps.sh: makes sure the Debian packages the build needs are present.
# Installs the missing ones with apt-get when run as root; otherwise names them
# and fails, so the build never half-works on a machine without them.
#
# The browser tests' packages (OPTIONAL_PKGS: Chromium, its driver and a CJK font, for
# python/tests/test_browser*.py) are installed too when run as root; they
# are not needed to build, so without root, or where apt-get cannot
# install them, this says so and goes on, and those tests skip saying why.
set -eu

PKGS="build-essential pkg-config libsqlite3-dev sqlite3 libutf8proc-dev libcmocka-dev libopenblas-dev libjansson-dev libcjson-dev patchelf"
OPTIONAL_PKGS="chromium chromium-driver fonts-wqy-microhei"

not_installed() {
    out=""
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            out="$out $p"
        fi
    done
    echo "$out"
}

# shellcheck disable=SC2086
missing=$(not_installed $PKGS)
# shellcheck disable=SC2086
optional=$(not_installed $OPTIONAL_PKGS)

if [ -n "$optional" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        echo "install-deps: installing (for the browser tests)$optional" >&2
        export DEBIAN_FRONTEND=noninteractive
        # shellcheck disable=SC2086
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends $optional >&2; } ||
            echo "install-deps: could not install$optional; the browser tests skip" >&2
    else
        echo "install-deps: note: not installed:$optional (the browser tests skip; as root," \
             "or: sudo apt-get install$optional)" >&2
    fi
fi

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
