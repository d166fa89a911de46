#!/bin/sh
# test_gpu_check_emulate.sh: scripts/gpu-check.sh end to end on this
# machine, with the CUDA emulator standing in for the GPU (--emulate), so
# the first run on a real GPU is known to work: every step passes and
# writes its log and summary.txt into $GPU_CHECK_OUT; with no device it
# stops after the versions step; when the tests fail the benchmark does not
# run. Part of make test (TEST_SCRIPTS); about 30 s.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
export BUILD
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
bad() {
    echo "test_gpu_check_emulate: FAILED: $*"
    fail=1
}
# has <file> <text>: the file contains the line fragment
has() { grep -q -- "$2" "$1" 2>/dev/null || bad "$1 lacks '$2'"; }

# 1. the whole run passes
GPU_CHECK_OUT=$out/ok scripts/gpu-check.sh --emulate >"$out/ok.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || { bad "gpu-check.sh --emulate exited $rc"; tail -n 30 "$out/ok.txt"; }
for f in gpu-check.log summary.txt versions.log test_cuda_sync1.log test_cuda_sync0.log bench_cuda.log; do
    [ -s "$out/ok/$f" ] || bad "no $f in the results folder"
done
has "$out/ok/versions.log" "cuBLAS: "
has "$out/ok/versions.log" "CUDA runtime: "
has "$out/ok/summary.txt" "^versions  *passed"
has "$out/ok/summary.txt" "^test_cuda_sync1  *passed"
has "$out/ok/summary.txt" "^test_cuda_sync0  *passed"
has "$out/ok/summary.txt" "^bench_cuda  *passed"
has "$out/ok/test_cuda_sync1.log" "SENTIMENT_CUDA_SYNC=1"
has "$out/ok/test_cuda_sync0.log" "unsynchronised"
has "$out/ok.txt" "all passed"

# 2. no device: it stops after the versions, failing
SENTIMENT_CUDA_EMU_DEVICES=0 GPU_CHECK_OUT=$out/nodev scripts/gpu-check.sh --emulate >"$out/nodev.txt" 2>&1 &&
    bad "gpu-check.sh passed without a device"
has "$out/nodev/summary.txt" "no CUDA device"
[ -e "$out/nodev/test_cuda_sync1.log" ] && bad "the tests ran without a device"

# 3. the tests fail (1 MiB of device memory): no benchmark
SENTIMENT_CUDA_EMU_MIB=1 GPU_CHECK_OUT=$out/small scripts/gpu-check.sh --emulate >"$out/small.txt" 2>&1 &&
    bad "gpu-check.sh passed with failing tests"
has "$out/small/summary.txt" "^test_cuda_sync1  *FAILED"
has "$out/small/summary.txt" "^bench_cuda  *skipped"
[ -e "$out/small/bench_cuda.log" ] && bad "the benchmark ran after failing tests"

if [ $fail -ne 0 ]; then
    echo "test_gpu_check_emulate: output of the passing run:"
    cat "$out/ok.txt"
    exit 1
fi
echo "test_gpu_check_emulate: passed (gpu-check.sh --emulate: all steps; no device; failing tests skip the benchmark)"
