#!/bin/sh
# include-views.sh: the include path of each room, as folders of links, so
# that the compiler enforces which rooms a file may include.
#
#   scripts/include-views.sh DIR      (make does it: DIR = $(BUILD)/rooms)
#
# Every project header is included with its room, "core/errors.h",
# "encoder/bert.h", "cpu/backend_cpu.h", and a file is compiled with
# -I DIR/VIEW only, VIEW being its room's view (the Makefile's VIEW_*). A
# view holds a link for each room its files may include and nothing else,
# so a wrong-way include is "No such file or directory":
#
#   view      rooms it sees                           who compiles with it
#   core      core                                    model/core
#   format    core format                             model/format
#   tokenize  core format tokenize                    model/tokenize
#   encoder   core format tokenize encoder            model/encoder
#   train     core format tokenize encoder train      model/train
#   cpu       core cpu                                cpu/
#   gpu       core gpu                                gpu/ (nvcc, the emulator)
#   runtime   the five model rooms, runtime, of cpu/  runtime/
#             only backend_cpu.h, of gpu/ only the
#             plugin's ABI, sentiment_cuda.h
#   ext       the five model rooms, runtime, ext      ext/
#   recipe    the five model rooms, recipe, cpu/      recipe/
#             backend_cpu.h only
#   all       every room, and tests/support           tests/, bench/, fuzz targets
#
# model/ (core/ the backend table, errors, RNG, threads; then format/,
# tokenize/, encoder/, train/) depends one way; cpu/ and gpu/ see only
# model/core/ (the backend table they fill); runtime/ is the one room
# above them that sees a device's header, so ext/ reaches hardware only
# through runtime/ and the backend table; nothing below ext/ sees ext/.
# tests/scripts/test_layering.sh builds planted wrong-way includes and
# expects each to fail. Made afresh each time; the links are relative.
set -eu
dir=$1
root=$(cd "$(dirname "$0")/.." && pwd)
# made afresh, so a link a view no longer has is gone
rm -rf "$dir"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# link VIEW NAME TARGET: DIR/VIEW/NAME -> TARGET (a folder or file of the tree)
link() {
    mkdir -p "$dir/$1/$(dirname "$2")"
    rel=$(realpath -m --relative-to="$dir/$1/$(dirname "$2")" "$root/$3")
    ln -sfn "$rel" "$dir/$1/$2"
}
model_rooms="core format tokenize encoder train"
seen=""
for r in $model_rooms; do
    seen="$seen $r"
    for s in $seen; do link "$r" "$s" "model/$s"; done
done
link cpu core model/core
link cpu cpu cpu
link gpu core model/core
link gpu gpu gpu
for v in runtime ext recipe all; do
    for s in $model_rooms; do link "$v" "$s" "model/$s"; done
done
link runtime runtime runtime
link runtime cpu/backend_cpu.h cpu/backend_cpu.h
link runtime gpu/sentiment_cuda.h gpu/sentiment_cuda.h
link ext runtime runtime
link ext ext ext
link recipe recipe recipe
link recipe cpu/backend_cpu.h cpu/backend_cpu.h
for r in cpu gpu runtime ext recipe; do link all "$r" "$r"; done
link all support tests/support
touch "$dir/.ok"
