#!/bin/sh
# install-deps.sh: makes sure the Debian packages the build needs are present.
# Installs the missing ones with apt-get when run as root; otherwise names them
# and fails, so the build never half-works on a machine without them.
set -eu

PKGS="build-essential pkg-config libsqlite3-dev sqlite3 libutf8proc-dev libcmocka-dev libopenblas-dev libjansson-dev libcjson-dev patchelf"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

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
