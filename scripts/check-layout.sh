#!/bin/sh
# check-layout.sh: checks the rooms' include rule (DESIGN: model/ reaches
# hardware only through the backend table, model/backend.h).
#
#   - no file of model/ includes a header of cpu/ or gpu/ (programs, such as
#     recipe/train_builtin, make their CPU backend through cpu/backend_cpu.h
#     as tests and benchmarks do);
#   - model/'s rooms depend one way, in the order model/ itself (backend
#     table, errors, RNG, threads), format/, tokenize/, encoder/, train/: a
#     file includes headers of its own room and of rooms before it only;
#   - ext/ includes of gpu/ only the plugin's ABI header sentiment_cuda.h
#     (the CUDA plugin is dlopen'd; its exports are cast to its typedefs) and of
#     cpu/ only backend_cpu.h (ext/device.c makes the CPU backend there);
#   - no file outside cpu/ and gpu/ tests a backend's name
#     (strcmp(be->name, "cpu") and the like): a backend's name is for
#     messages, its slots say what it can do.
#
# Prints each offending line and exits 1, else one line saying what it
# checked. Run by make test (TEST_SCRIPTS).
set -eu
cd "$(dirname "$0")/.."

fail=0
# Offending lines of $2 (grep -E pattern) in files $3...: printed with $1.
report() {
    why=$1
    pattern=$2
    shift 2
    [ $# -gt 0 ] || return 0
    hits=$(grep -n -E "$pattern" "$@" /dev/null || true)
    if [ -n "$hits" ]; then
        printf '%s\n' "$hits" | sed "s|^|check-layout: $why: |" >&2
        fail=1
    fi
}

# The headers of a room as one alternation: backend_cpu\.h|blas\.h|...
headers_of() {
    for h in "$1"/*.h "$1"/*.cuh; do
        [ -f "$h" ] && printf '%s\n' "${h##*/}"
    done | sed 's/\./\\./g' | paste -sd '|' -
}
cpu_h=$(headers_of cpu)
gpu_h=$(headers_of gpu)
if [ -z "$cpu_h" ] || [ -z "$gpu_h" ]; then
    echo "check-layout: no headers in cpu/ or gpu/" >&2
    exit 1
fi
# #include "name" or "some/path/name" of one of the headers
inc() {
    printf '^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*/)?(%s)"' "$1"
}

model_files=$(find model -type f \( -name '*.c' -o -name '*.h' \) -print | sort)
ext_files=$(find ext -type f \( -name '*.c' -o -name '*.h' \) -print | sort)
outside_files=$(find . -path ./.git -prune -o -path ./build -prune -o -path './build-*' -prune \
    -o -path ./cpu -prune -o -path ./gpu -prune -o -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||' | sort)

# shellcheck disable=SC2086 # the lists are file names without spaces
report "model/ includes a cpu/ or gpu/ header" "$(inc "$cpu_h|$gpu_h")" $model_files
ext_gpu_h=$(printf '%s' "$gpu_h" | tr '|' '\n' | grep -v -x 'sentiment_cuda\\\.h' | paste -sd '|' -)
# shellcheck disable=SC2086
report "ext/ includes a gpu/ header other than the plugin's ABI, sentiment_cuda.h" \
    "$(inc "$ext_gpu_h")" $ext_files
# model/'s rooms, in order: each may include only its own and earlier rooms' headers
rooms="model model/format model/tokenize model/encoder model/train"
n_rooms=0
for room in $rooms; do
    later=""
    seen=0
    for r in $rooms; do
        if [ "$seen" -eq 1 ]; then
            h=$(headers_of "$r")
            [ -z "$h" ] || later="${later:+$later|}$h"
        fi
        [ "$r" = "$room" ] && seen=1
    done
    files=$(find "$room" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \) -print | sort)
    # shellcheck disable=SC2086
    [ -z "$later" ] || report "$room/ includes a header of a later room of model/" "$(inc "$later")" $files
    n_rooms=$((n_rooms + 1))
done
ext_cpu_h=$(printf '%s' "$cpu_h" | tr '|' '\n' | grep -v -x 'backend_cpu\\\.h' | paste -sd '|' -)
# shellcheck disable=SC2086
[ -z "$ext_cpu_h" ] || report "ext/ includes a cpu/ header other than backend_cpu.h" "$(inc "$ext_cpu_h")" $ext_files
name='->[[:space:]]*name'
backend='"(cpu|cuda)[":]'
# shellcheck disable=SC2086
report "a backend's name is tested" \
    "str(n|case)?cmp[[:space:]]*\([^;]*${name}[[:space:]]*,[[:space:]]*${backend}|str(n|case)?cmp[[:space:]]*\([[:space:]]*${backend}[^;]*${name}" \
    $outside_files

[ "$fail" -eq 0 ] || exit 1
n_model=$(printf '%s\n' "$model_files" | grep -c .)
n_ext=$(printf '%s\n' "$ext_files" | grep -c .)
n_out=$(printf '%s\n' "$outside_files" | grep -c .)
echo "check-layout: ok: $n_model model/ files include no cpu/ or gpu/ header and its $n_rooms rooms" \
    "depend one way, $n_ext ext/ files" \
    "only cpu/backend_cpu.h and gpu/sentiment_cuda.h, $n_out files outside cpu/ and gpu/ test no backend's name"
