#!/usr/bin/env bash
# bench.sh: our engine side by side with ONNX Runtime, PyTorch and
# PaddlePaddle on this machine's CPU (what `make bench` runs).
#
#   make bench                                  the full matrix (about 20 minutes on 2 cores)
#   make bench BENCH_ARGS=--quick               one shape (the built-in model's), a few minutes
#   scripts/bench.sh [--quick] [options]        the same, after `make bench` has built things
#
# Options (bench/peers.py run --help): --shapes builtin,ernie-medium,bert-base
# --threads 1,2 --batches 1,32 --inputs real,fixed --runs 5
# --engines ours,ours-int8,sql,onnxruntime,onnxruntime-int8,torch,paddle
# --no-train --train-shapes ...
# (ours-int8: our engine with INT8 linear layers, run and reported beside the
# FP32 engines on a CPU with AVX512-VNNI, left out with the reason elsewhere;
# onnxruntime-int8: ONNX Runtime on the same model.onnx quantized with
# quantize_dynamic, ONNX Runtime's own INT8, which ours INT8 gets a ratio to;
# onnxruntime-int8-pt (per-tensor weights) and onnxruntime-qdq (quantize_static,
# QDQ, calibrated on the run's own reviews) only when --engines names them.
# PaddlePaddle is installed only when paddle is to run.)
#
# The peers live in a Python virtual environment outside the repository,
# created and filled from PyPI on first use; they are never a dependency of the
# extension or its tests. Environment:
#   BENCH_VENV    the virtual environment (default ~/.cache/sentiment-bench-venv);
#                 an existing one with torch and transformers is reused, and
#                 what it lacks is installed into it
#   BENCH_CACHE   models and work files (default ~/.cache/sentiment-bench)
#   BENCH_DATA    the review data (default ../shared/data)
#   BENCH_TORCH   pip requirement for PyTorch (default "torch"; a CPU-only
#                 wheel file may be named instead)
#   BENCH_ARGS    extra options, for `make bench BENCH_ARGS=...`
#
# Results: printed, written to bench/out/results-<date>.md (+ .json), and, for
# a full run, copied to bench/RESULTS.md.
set -euo pipefail

# --help before anything is built or installed: this text
for a in "$@"; do
    case $a in
        -h|--help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    esac
done

cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${BENCH_VENV:-$HOME/.cache/sentiment-bench-venv}
CACHE=${BENCH_CACHE:-$HOME/.cache/sentiment-bench}
DATA=${BENCH_DATA:-$ROOT/../shared/data}
TORCH_REQ=${BENCH_TORCH:-torch}

# shellcheck disable=SC2206
ARGS=(${BENCH_ARGS:-} "$@")
# The command as the report states it, with the settings that were given.
PREFIX=""
for v in BENCH_VENV BENCH_CACHE BENCH_DATA BENCH_TORCH; do
    if [ -n "${!v:-}" ]; then PREFIX="$PREFIX$v=${!v} "; fi
done
# The single quotes are part of the command shown, around BENCH_ARGS's value.
# shellcheck disable=SC2016
if [ -n "${MAKELEVEL:-}" ]; then
    COMMAND="${PREFIX}make bench${BENCH_ARGS:+ BENCH_ARGS='$BENCH_ARGS'}"
else
    COMMAND="${PREFIX}${BENCH_ARGS:+BENCH_ARGS='$BENCH_ARGS' }scripts/bench.sh${*:+ $*}"
fi

say() { echo "bench: $*" >&2; }

for f in build/bench/bench_peers build/sentiment.so; do
    if [ ! -e "$f" ]; then
        say "$f is missing: run \`make bench\` (it builds everything first)"
        exit 1
    fi
    # a binary older than the engine library would time the engine as it was
    if [ build/libsentiment_model.a -nt "$f" ]; then
        say "$f is older than build/libsentiment_model.a: run \`make bench\` (it rebuilds it)"
        exit 1
    fi
done
if [ ! -f "$DATA/chnsenticorp/dev.tsv" ]; then
    say "no review data at $DATA/chnsenticorp/dev.tsv (set BENCH_DATA)"
    exit 1
fi

# --- the Python environment --------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    PY=$(command -v python3 || true)
    if [ -z "$PY" ]; then
        say "python3 is needed to create $VENV"
        exit 1
    fi
    say "creating the virtual environment $VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip >&2 || true
fi
PYV="$VENV/bin/python"

has() { "$PYV" -c "import $1" >/dev/null 2>&1; }
install() { # install REQUIREMENT...: quiet pip, its errors kept
    "$PYV" -m pip install -q "$@" >"$CACHE/pip.log" 2>&1
}
mkdir -p "$CACHE"
MISSING=""
# module:requirement; torch first (transformers needs it).
for spec in "torch:$TORCH_REQ" numpy:numpy safetensors:safetensors transformers:transformers \
            onnx:onnx onnxruntime:onnxruntime threadpoolctl:threadpoolctl; do
    mod=${spec%%:*}
    req=${spec#*:}
    if ! has "$mod"; then
        say "installing $req into $VENV"
        if ! install "$req"; then
            say "could not install $req:"
            tail -n 5 "$CACHE/pip.log" >&2
            case $mod in
                torch|numpy|safetensors|transformers)
                    say "$req is needed to build the models; stopping"
                    exit 1 ;;
                onnxruntime) MISSING="$MISSING;onnxruntime=pip install onnxruntime failed: $(tail -n 1 "$CACHE/pip.log")" ;;
            esac
        fi
    fi
done
# PaddlePaddle: optional; the others are reported without it. Not installed
# when --engines leaves paddle out.
want_paddle=1
prev=""
for a in "${ARGS[@]}"; do
    list=""
    case $a in
        --engines=*) list=${a#--engines=} ;;
        *) if [ "$prev" = --engines ]; then list=$a; fi ;;
    esac
    if [ -n "$list" ]; then
        case ",$list," in *,paddle,*) want_paddle=1 ;; *) want_paddle=0 ;; esac
    fi
    prev=$a
done
if [ "$want_paddle" = 1 ] && ! has paddle; then
    say "installing paddlepaddle into $VENV"
    if install paddlepaddle && has paddle; then
        :
    else
        why=$(tail -n 1 "$CACHE/pip.log" | tr ';' ',')
        say "PaddlePaddle is not available on this machine ($why); the other engines are measured"
        MISSING="$MISSING;paddle=pip install paddlepaddle failed on Python $("$PYV" -c 'import platform; print(platform.python_version())'): $why"
    fi
fi

# --- run ---------------------------------------------------------------------
# The peers bundle their own BLAS; bench/peers.py takes a preset
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE out of every engine's environment and
# says so in the report (--keep-blas-env keeps them).
exec "$PYV" bench/peers.py run --cache "$CACHE" --data "$DATA" --command "$COMMAND" \
    --missing "$MISSING" "${ARGS[@]}"
