#!/usr/bin/env bash
# gpu-check.sh: the CUDA backend's whole check on a machine with an NVIDIA
# GPU, in one command (`make gpu-check`) that fits one 10-minute session
# with room to run it again: about 2-3 minutes on an H200 once built, never
# more than GPU_CHECK_BUDGET seconds (default 330, building excluded) in all.
#
# In order, each step only when the ones before it passed, so no GPU time
# goes to a run that cannot succeed:
#   1. versions: the GPU and driver (nvidia-smi), then `test_cuda --versions`:
#      the plugin loads, the CUDA driver, runtime and cuBLAS versions it
#      sees, the device (seconds; stops here when the plugin does not load,
#      cuBLAS is missing or there is no device);
#   2. build/tests/test_cuda with SENTIMENT_CUDA_SYNC=1 (every op
#      synchronised, so a fault is reported by the op that caused it), then
#      without (the real asynchronous order); each op forward and backward
#      against the CPU backend, the fixture models' logits, a 10-step
#      training curve;
#   3. only when both passed: build/bench/bench_cuda (BERT-base shape, seq
#      128: inference at batch 1, 32, 256 and fine-tuning at batch 32, bf16
#      and fp32, against the cuBLAS rate).
# Every step runs under `timeout`, cut to what is left of the budget. The
# logs and summary.txt go to one folder to copy back: $GPU_CHECK_OUT, else
# $OUT, else build/gpu-check. Exits non-zero when a step failed.
#
#   scripts/gpu-check.sh                 use build/gpu-bundle when present, else
#                                        build with make, then run
#   scripts/gpu-check.sh --make-bundle   (on a build machine) build and put the
#                                        binaries and the shared libraries they
#                                        need into build/gpu-bundle, for a GPU
#                                        machine that cannot build
#   scripts/gpu-check.sh --emulate       the same run end to end on this machine
#                                        with the CUDA emulator's plugin and test
#                                        (build/tests/*_emu*) and the benchmark's
#                                        --dry-run: a dry run of this script
#                                        (tests/gpu/test_gpu_check_emulate.sh, part
#                                        of make test)
#
# cuBLAS 13 is found, in this order, in the bundle's lib/, in the
# `nvidia-cublas` Python package (its lib folder), in the toolkit's lib64.
# Environment: GPU_CHECK_BUDGET (seconds, default 330), GPU_CHECK_SECONDS
# (the benchmark's seconds per figure, default 1), GPU_CHECK_SANITIZE=1 (also
# compute-sanitizer memcheck, after the tests, within the budget), BUILD (the
# build folder, default build).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

BUILD=${BUILD:-build}
BUNDLE=$BUILD/gpu-bundle
OUTDIR=${GPU_CHECK_OUT:-${OUT:-$BUILD/gpu-check}}
BUDGET=${GPU_CHECK_BUDGET:-330}
SECONDS_PER=${GPU_CHECK_SECONDS:-1}
JOBS=$(nproc 2>/dev/null || echo 2)
MODE=gpu
case "${1:-}" in
--make-bundle) MODE=bundle ;;
--emulate) MODE=emulate ;;
"") ;;
*)
    echo "usage: $0 [--make-bundle | --emulate]" >&2
    exit 2
    ;;
esac

say() { echo "gpu-check: $*"; }
t_start=$(date +%s)
# Seconds left of the budget.
left() { echo $((BUDGET - ($(date +%s) - t_start))); }
# A step's timeout: at most $1 seconds, and no more than is left.
limit() {
    local want=$1 l
    l=$(left)
    [ "$l" -lt "$want" ] && want=$l
    [ "$want" -lt 1 ] && want=1
    echo "$want"
}

# ---- a bundle for a machine without the build dependencies -------------------
if [ "$MODE" = bundle ]; then
    make -j"$JOBS" all "$BUILD/tests/test_cuda" "$BUILD/bench/bench_cuda" || exit 1
    if [ ! -f "$BUILD/sentiment_cuda.so" ]; then
        say "$BUILD/sentiment_cuda.so was not built (is nvcc on PATH?)"
        exit 1
    fi
    rm -rf "$BUNDLE"
    mkdir -p "$BUNDLE/lib"
    cp "$BUILD/sentiment_cuda.so" "$BUILD/tests/test_cuda" "$BUILD/bench/bench_cuda" "$BUNDLE/"
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
# Everything printed also goes to $OUTDIR/gpu-check.log.
exec > >(tee "$OUTDIR/gpu-check.log") 2>&1
tee_pid=$!
SUMMARY=$OUTDIR/summary.txt
: >"$SUMMARY"
status=0
# record <step> <result> <seconds> <log>
record() {
    printf '%-22s %-30s %5s s  %s\n' "$1" "$2" "$3" "$4" | tee -a "$SUMMARY"
}
# Runs "$@" with timeout $1 seconds into log $2; sets rc and secs.
run_step() {
    local t=$1 log=$2
    shift 2
    local t0
    t0=$(date +%s)
    timeout --kill-after=10 "$t" "$@" >"$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
}
result_of() { # rc timeout
    case $1 in
    0) echo passed ;;
    124 | 137) echo "TIMED OUT (limit $2 s)" ;;
    *) echo "FAILED (exit $1)" ;;
    esac
}
finish() {
    echo
    echo "== summary (also $SUMMARY; logs in $OUTDIR), $(($(date +%s) - t_start)) s in all:"
    cat "$SUMMARY"
    if [ "$status" -eq 0 ]; then say "all passed"; else say "FAILED"; fi
    exec >&- 2>&-
    wait "$tee_pid" 2>/dev/null
    exit "$status"
}

say "mode $MODE, budget $BUDGET s, results in $OUTDIR"

# ---- 1. the GPU, the driver, the binaries, cuBLAS ------------------------------
if [ "$MODE" = emulate ]; then
    say "GPU: none, the CUDA emulator (tests/gpu/cuda_emu) stands in"
    PLUGIN=$BUILD/tests/sentiment_cuda_emu.so
    TEST=$BUILD/tests/test_cuda_emu
    BENCH=$BUILD/bench/bench_cuda
    BENCH_ARGS=(--dry-run --seconds 0.05)
    if [ ! -x "$TEST" ] || [ ! -x "$BENCH" ] || [ ! -f "$PLUGIN" ]; then
        make -j"$JOBS" BUILD="$BUILD" "$TEST" "$BENCH" >"$OUTDIR/build.log" 2>&1 ||
            { tail -n 30 "$OUTDIR/build.log"; say "the build failed"; exit 1; }
    fi
else
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 |
            sed 's/^/gpu-check: GPU: /'
        nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n 1 | sed 's/^/gpu-check: driver supports /'
    else
        say "nvidia-smi not found"
    fi
    BENCH_ARGS=(--seconds "$SECONDS_PER")
    t0=$(date +%s)
    if [ -d "$BUNDLE" ]; then
        say "using the prebuilt $BUNDLE"
        export LD_LIBRARY_PATH="$PWD/$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        PLUGIN=$BUNDLE/sentiment_cuda.so
        TEST=$BUNDLE/test_cuda
        BENCH=$BUNDLE/bench_cuda
    else
        PLUGIN=$BUILD/sentiment_cuda.so
        TEST=$BUILD/tests/test_cuda
        BENCH=$BUILD/bench/bench_cuda
        run_step 600 "$OUTDIR/build.log" make -j"$JOBS" all "$TEST" "$BENCH"
        record build "$(result_of $rc 600)" "$secs" "$OUTDIR/build.log"
        t_start=$(date +%s) # the budget is for the GPU steps
        if [ $rc -ne 0 ]; then
            tail -n 30 "$OUTDIR/build.log"
            say "the build failed. On a machine without the build dependencies, make a bundle"
            say "where they are (scripts/gpu-check.sh --make-bundle) and carry $BUNDLE here."
            status=1
            finish
        fi
    fi
    if [ ! -f "$PLUGIN" ]; then
        say "$PLUGIN was not built: nvcc is not on PATH"
        status=1
        finish
    fi
    # cuBLAS 13: the nvidia-cublas Python package, then the toolkit
    pylib=$(python3 -c 'import os, nvidia.cublas as m; p = list(getattr(m, "__path__", []) or [os.path.dirname(m.__file__)]); print(os.path.join(p[0], "lib"))' 2>/dev/null || true)
    if [ -n "$pylib" ] && [ -d "$pylib" ]; then
        say "cuBLAS from the nvidia-cublas Python package: $pylib"
        export LD_LIBRARY_PATH="$pylib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
    done
    ldd "$PLUGIN" 2>/dev/null | grep -E 'cublas|cudart' | sed 's/^[[:space:]]*/gpu-check: plugin needs /'
fi
export SENTIMENT_CUDA_PLUGIN=$PLUGIN

run_step "$(limit 60)" "$OUTDIR/versions.log" "$TEST" --versions
sed 's/^/gpu-check: /' "$OUTDIR/versions.log"
case $rc in
0) record versions passed "$secs" "$OUTDIR/versions.log" ;;
2)
    record versions "FAILED: no CUDA device" "$secs" "$OUTDIR/versions.log"
    status=1
    finish
    ;;
*)
    record versions "FAILED: the plugin does not load" "$secs" "$OUTDIR/versions.log"
    say "is libcublas.so.13 on LD_LIBRARY_PATH? pip install nvidia-cublas (cuBLAS 13), or the CUDA 13 toolkit"
    status=1
    finish
    ;;
esac

# ---- 2. the tests, synchronised, then not ---------------------------------------
tests_ok=1
for sync in 1 0; do
    name=test_cuda_sync$sync
    lim=$(limit $((sync ? 150 : 120)))
    say "running $TEST with SENTIMENT_CUDA_SYNC=$sync (limit $lim s)"
    run_step "$lim" "$OUTDIR/$name.log" env SENTIMENT_CUDA_SYNC=$sync "$TEST"
    res=$(result_of $rc "$lim")
    if [ $rc -eq 0 ] && grep -q "skipped: no CUDA device" "$OUTDIR/$name.log"; then
        res="FAILED: no CUDA device"
        rc=1
    fi
    record "$name" "$res" "$secs" "$OUTDIR/$name.log"
    if [ $rc -ne 0 ]; then
        grep -E "FAILED|FAULT|^\[  (PASSED|FAILED)" "$OUTDIR/$name.log" | head -n 20
        tail -n 5 "$OUTDIR/$name.log"
        tests_ok=0
        status=1
        break # the unsynchronised run cannot tell more
    fi
done

if [ $tests_ok -eq 1 ] && [ "${GPU_CHECK_SANITIZE:-0}" = 1 ] && [ "$MODE" = gpu ] &&
    command -v compute-sanitizer >/dev/null 2>&1; then
    lim=$(limit 240)
    run_step "$lim" "$OUTDIR/sanitizer.log" compute-sanitizer --tool memcheck --error-exitcode 3 "$TEST"
    record compute-sanitizer "$(result_of $rc "$lim")" "$secs" "$OUTDIR/sanitizer.log"
    [ $rc -eq 0 ] || { tail -n 20 "$OUTDIR/sanitizer.log"; status=1; }
fi

# ---- 3. the benchmark, only after the tests passed --------------------------------
if [ $tests_ok -eq 1 ]; then
    lim=$(limit 120)
    say "running $BENCH ${BENCH_ARGS[*]} (limit $lim s)"
    run_step "$lim" "$OUTDIR/bench_cuda.log" "$BENCH" "${BENCH_ARGS[@]}"
    record bench_cuda "$(result_of $rc "$lim")" "$secs" "$OUTDIR/bench_cuda.log"
    if [ $rc -eq 0 ]; then
        sed -n '/^GPU benchmark/,$p' "$OUTDIR/bench_cuda.log"
    else
        tail -n 20 "$OUTDIR/bench_cuda.log"
        status=1
    fi
else
    record bench_cuda "skipped: the tests failed" 0 -
fi
finish
