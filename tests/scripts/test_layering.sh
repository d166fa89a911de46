#!/bin/sh
# test_layering.sh: the compiler enforces the rooms (scripts/include-views.sh).
# Each case prepends one include to a real file of a room and compiles it
# with the flags the Makefile gives that file (make print-cppflags): a
# wrong-way include must fail to build, and the control cases (includes the
# room may use) must build. Part of make test; a few seconds.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
CC=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0

# case FILE INCLUDE ok|refused
case_() {
    file=$1 inc=$2 want=$3
    n=$((n + 1))
    flags=$(make -s --no-print-directory print-cppflags FILE="$file" BUILD="$BUILD") || {
        echo "test_layering: FAILED: make print-cppflags FILE=$file"; fail=1; return; }
    src=$tmp/case$n.c
    { printf '#include "%s"\n' "$inc"; cat "$file"; } >"$src"
    lang=""
    case $file in *.cu) lang="-x c++ -DSM_CUDA_EMU=1 -Itests/gpu/cuda_emu" ;; esac
    # shellcheck disable=SC2086 # flags are words
    if ${lang:+g++} ${lang:-$CC} $flags $lang -fsyntax-only -w "$src" 2>"$tmp/err$n"; then got=ok; else got=refused; fi
    if [ "$got" != "$want" ]; then
        echo "test_layering: FAILED: $file with #include \"$inc\": $got, want $want"
        sed -n '1,5p' "$tmp/err$n"
        fail=1
    elif [ "$got" = refused ] && ! grep -q "No such file or directory" "$tmp/err$n"; then
        echo "test_layering: FAILED: $file with #include \"$inc\" failed for another reason:"
        sed -n '1,5p' "$tmp/err$n"
        fail=1
    fi
}

# model/: each room sees core and the rooms before it, no cpu/, gpu/, ext/
case_ model/core/errors.c       "format/config.h"       refused
case_ model/format/config.c     "core/errors.h"         ok
case_ model/format/config.c     "encoder/bert.h"        refused
case_ model/tokenize/vocab.c    "format/json_in.h"      ok
case_ model/tokenize/vocab.c    "train/trainer.h"       refused
case_ model/encoder/wide.c      "tokenize/ngram_hash.h" ok
case_ model/encoder/wide.c      "train/trainer.h"       refused
case_ model/encoder/classifier.c "ext/conn.h"           refused
case_ model/encoder/classifier.c "cpu/cpu_ctx.h"        refused
case_ model/train/trainer.c     "encoder/bert.h"        ok
case_ model/train/trainer.c     "cpu/backend_cpu.h"     refused
case_ model/train/trainer.c     "gpu/sentiment_cuda.h"  refused
# cpu/ and gpu/: the backend table (core/) and their own room
case_ cpu/backend_cpu.c         "core/backend.h"        ok
case_ cpu/backend_cpu.c         "encoder/bert.h"        refused
case_ cpu/backend_cpu.c         "ext/conn.h"            refused
case_ cpu/backend_cpu.c         "gpu/sentiment_cuda.h"  refused
case_ gpu/linear_packed.cu      "gpu/gemm_plan.h"       ok
case_ gpu/linear_packed.cu      "format/config.h"       refused
case_ gpu/linear_packed.cu      "cpu/backend_cpu.h"     refused
# runtime/: model/, of cpu/ only backend_cpu.h, of gpu/ only the plugin's
# ABI sentiment_cuda.h; never ext/ (it knows no SQLite surface)
case_ runtime/engine.c          "train/trainer.h"       ok
case_ runtime/device.c          "cpu/backend_cpu.h"     ok
case_ runtime/device.c          "gpu/sentiment_cuda.h"  ok
case_ runtime/engine.c          "cpu/blas.h"            refused
case_ runtime/engine.c          "cpu/cpu_ctx.h"         refused
case_ runtime/engine.c          "gpu/cuda_ctx.h"        refused
case_ runtime/registry.c        "ext/conn.h"            refused
# ext/: model/ and runtime/; the hardware door is closed: no cpu/, no gpu/
case_ ext/conn_engine.c         "runtime/engine.h"      ok
case_ ext/conn_engine.c         "train/trainer.h"       ok
case_ ext/conn_engine.c         "cpu/backend_cpu.h"     refused
case_ ext/conn_engine.c         "gpu/sentiment_cuda.h"  refused
case_ ext/train_int8.c          "cpu/cpu_ctx.h"         refused
# nothing below runtime/ sees it
case_ model/encoder/inference.c "runtime/engine.h"      refused
case_ cpu/backend_cpu.c         "runtime/registry.h"    refused
# recipe/: model/ and backend_cpu.h, not ext/
case_ recipe/reviews.c          "cpu/backend_cpu.h"     ok
case_ recipe/reviews.c          "cpu/blas.h"            refused
case_ recipe/reviews.c          "ext/conn.h"            refused
case_ recipe/reviews.c          "runtime/engine.h"      refused

# scripts/check-layout.sh: a backend's name read outside a message, however
# spelled, is refused; the tree as it is passes
mkdir -p "$tmp/ext"
printf '%s\n' 'static int on_cpu(const backend *be)' '{' \
    '    const char *n = be->name; /* through a variable */' \
    '    return !strcmp(n, "cpu");' '}' >"$tmp/ext/planted.c"
if CHECK_LAYOUT_EXTRA="$tmp/ext/planted.c" sh scripts/check-layout.sh >/dev/null 2>&1; then
    echo "test_layering: FAILED: check-layout.sh let a backend's name be compared"; fail=1
fi
sh scripts/check-layout.sh >/dev/null || { echo "test_layering: FAILED: check-layout.sh on the tree"; fail=1; }

[ $fail -eq 0 ] || exit 1
echo "test_layering: passed ($n cases: wrong-way includes refused by the compiler, the rooms' own" \
    "includes built; a backend's name compared through a variable refused by check-layout.sh)"
