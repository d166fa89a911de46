#!/usr/bin/env bash
# gpu-check.sh: the CUDA backend's whole check on a machine with an NVIDIA
# GPU, in one command (`make gpu-check`), in about a minute on an H200 once
# built: builds the plugin, the CUDA test and the benchmark; runs
# build/tests/test_cuda (every op forward and backward against the CPU
# backend, the fixture models' logits, a 10-step training curve) and
# build/bench/bench_cuda (BERT-base shape, seq 128: inference at batch 1, 32,
# 256 and fine-tuning at batch 32, bf16 and fp32, against the cuBLAS rate);
# prints a summary table. Exits non-zero when a test or the benchmark fails.
#
#   scripts/gpu-check.sh                 build with make, then run
#   scripts/gpu-check.sh --make-bundle   (on a build machine) build and put the
#                                        binaries and the shared libraries they
#                                        need into build/gpu-bundle, for a GPU
#                                        machine that cannot build
#
# When build/gpu-bundle exists it is used instead of building (carry it to
# the GPU machine; the CUDA toolkit's cuBLAS there must be version 13).
# Environment: GPU_CHECK_OUT (default build/gpu-check) receives the logs;
# GPU_CHECK_SECONDS (default 1) is the benchmark's time per figure;
# GPU_CHECK_SANITIZE=1 also runs the test under compute-sanitizer.
set -uo pipefail
cd "$(dirname "$0")/.."

BUNDLE=build/gpu-bundle
OUTDIR=${GPU_CHECK_OUT:-build/gpu-check}
SECONDS_PER=${GPU_CHECK_SECONDS:-1}
JOBS=$(nproc 2>/dev/null || echo 2)

say() { echo "gpu-check: $*"; }

# ---- a bundle for a machine without the build dependencies -------------------
if [ "${1:-}" = "--make-bundle" ]; then
    make -j"$JOBS" all build/tests/test_cuda build/bench/bench_cuda || exit 1
    if [ ! -f build/sentiment_cuda.so ]; then
        say "build/sentiment_cuda.so was not built (is nvcc on PATH?)"
        exit 1
    fi
    rm -rf "$BUNDLE"
    mkdir -p "$BUNDLE/lib"
    cp build/sentiment_cuda.so build/tests/test_cuda build/bench/bench_cuda "$BUNDLE/"
    # Shared libraries of the binaries, except the C runtime and CUDA's own.
    skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libstdc\+\+|libgcc_s|libcublas|libcudart)'
    add_lib() {
        local name=$1 path=$2
        [ -e "$BUNDLE/lib/$name" ] && return
        echo "$name" | grep -Eq "$skip" && return
        cp -L "$path" "$BUNDLE/lib/$name"
        # its own dependencies
        ldd "$path" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
            while read -r n p; do add_lib "$n" "$p"; done
    }
    for bin in "$BUNDLE/test_cuda" "$BUNDLE/bench_cuda"; do
        while read -r n p; do add_lib "$n" "$p"; done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
    done
    # OpenBLAS is dlopen'd by the CPU backend (cpu/blas.c), so ldd misses it.
    blas=$(ldconfig -p | awk '/libopenblas\.so\.0 / {print $NF; exit}')
    if [ -n "$blas" ]; then
        add_lib libopenblas.so.0 "$blas"
    else
        say "warning: libopenblas.so.0 not found; the CPU reference needs it on the GPU machine"
    fi
    say "bundle in $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)):"
    ls "$BUNDLE" "$BUNDLE/lib"
    exit 0
fi

mkdir -p "$OUTDIR"
status=0

# ---- the device ------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
        sed 's/^/gpu-check: GPU: /'
else
    say "nvidia-smi not found"
fi

# ---- build (or use the bundle) ---------------------------------------------
t0=$(date +%s)
if [ -d "$BUNDLE" ]; then
    say "using the prebuilt $BUNDLE"
    export LD_LIBRARY_PATH="$PWD/$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    PLUGIN=$BUNDLE/sentiment_cuda.so
    TEST=$BUNDLE/test_cuda
    BENCH=$BUNDLE/bench_cuda
else
    if ! make -j"$JOBS" all build/tests/test_cuda build/bench/bench_cuda >"$OUTDIR/build.log" 2>&1; then
        tail -n 30 "$OUTDIR/build.log"
        say "the build failed (log: $OUTDIR/build.log). On a machine without the build"
        say "dependencies, make a bundle where they are: scripts/gpu-check.sh --make-bundle,"
        say "and carry build/gpu-bundle here."
        exit 1
    fi
    PLUGIN=build/sentiment_cuda.so
    TEST=build/tests/test_cuda
    BENCH=build/bench/bench_cuda
fi
if [ ! -f "$PLUGIN" ]; then
    say "$PLUGIN was not built: nvcc is not on PATH"
    exit 1
fi
# cuBLAS from the toolkit when the loader does not know it already
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
export SENTIMENT_CUDA_PLUGIN=$PLUGIN
say "built in $(( $(date +%s) - t0 )) s"

# ---- the CUDA tests ----------------------------------------------------------
t0=$(date +%s)
say "running $TEST (every op synchronised: SENTIMENT_CUDA_SYNC=1)"
SENTIMENT_CUDA_SYNC=1 timeout 300 "$TEST" >"$OUTDIR/test_cuda.log" 2>&1
test_rc=$?
cat "$OUTDIR/test_cuda.log"
test_s=$(( $(date +%s) - t0 ))
[ $test_rc -eq 0 ] || status=1
if grep -q "skipped: no CUDA device" "$OUTDIR/test_cuda.log"; then
    say "the test found no CUDA device"
    status=1
fi

if [ "${GPU_CHECK_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
    say "compute-sanitizer --tool memcheck"
    timeout 600 compute-sanitizer --tool memcheck --error-exitcode 3 "$TEST" >"$OUTDIR/sanitizer.log" 2>&1
    san_rc=$?
    tail -n 20 "$OUTDIR/sanitizer.log"
    [ $san_rc -eq 0 ] || status=1
fi

# ---- the benchmark -----------------------------------------------------------
t0=$(date +%s)
say "running $BENCH --seconds $SECONDS_PER"
timeout 300 "$BENCH" --seconds "$SECONDS_PER" >"$OUTDIR/bench_cuda.log" 2>&1
bench_rc=$?
bench_s=$(( $(date +%s) - t0 ))
[ $bench_rc -eq 0 ] || status=1

# ---- summary -------------------------------------------------------------------
echo
echo "== test_cuda: $([ $test_rc -eq 0 ] && echo passed || echo "FAILED (exit $test_rc)") in ${test_s} s; log $OUTDIR/test_cuda.log"
grep -E "FAILED|^\[  (PASSED|FAILED)" "$OUTDIR/test_cuda.log" | head -n 20
echo "== bench_cuda: $([ $bench_rc -eq 0 ] && echo done || echo "FAILED (exit $bench_rc)") in ${bench_s} s; log $OUTDIR/bench_cuda.log"
if [ $bench_rc -eq 0 ]; then
    sed -n '/^GPU benchmark/,$p' "$OUTDIR/bench_cuda.log"
else
    tail -n 20 "$OUTDIR/bench_cuda.log"
fi
exit $status
