#!/usr/bin/env bash
# bench_cpu_side.sh: what one classify worker spends outside the encoder
# (reading rows, tokenizing, batching, writing the result table), per row,
# on one CPU thread: the ceiling a GPU worker with one CPU thread meets
# however fast its GPU is.
#
#   make all build/bench/bench_encoder && bench/bench_cpu_side.sh [--rows 50000] [--runs 3]
#
# Method: classify over ROWS real reviews (waimai_10k, then
# online_shopping_10_cats, from BENCH_DATA; copied at run time into
# BENCH_CACHE, never into the repository) with the smallest model at hand
# (tests/fixtures/models/bert_tiny: 2 layers, hidden 64, 62 tokens at most),
# one thread, into a new table, as a whole sqlite3 process; and, alternated
# with it, bench_encoder on a random model of the same shape over the same
# texts' lengths (capped alike), one thread. The difference of the medians
# is the time outside the encoder. Not a test: it asserts nothing.
set -euo pipefail

ROWS=50000
RUNS=3
while [ $# -gt 0 ]; do
    case $1 in
        --rows) ROWS=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        *) echo "bench_cpu_side.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
DATA=${BENCH_DATA:-../shared/data}
CACHE=${BENCH_CACHE:-$HOME/.cache/sentiment-bench}
MODEL=tests/fixtures/models/bert_tiny
for f in build/sentiment.so build/bench/bench_encoder "$DATA/waimai_10k/all.tsv" \
         "$DATA/online_shopping_10_cats/all.tsv"; do
    [ -e "$f" ] || { echo "bench_cpu_side.sh: $f is missing" >&2; exit 1; }
done
command -v sqlite3 >/dev/null || { echo "bench_cpu_side.sh: needs the sqlite3 shell" >&2; exit 1; }
mkdir -p "$CACHE"
TSV="$CACHE/cpu_side_$ROWS.tsv"
DB="$CACHE/cpu_side_$ROWS.db"
# label<TAB>text, the texts of both sets (their second column), in order
{ tail -n +2 "$DATA/waimai_10k/all.tsv"; tail -n +2 "$DATA/online_shopping_10_cats/all.tsv"; } |
    awk -F'\t' -v n="$ROWS" 'NR <= n && $2 != "" {print "1\t" $2}' >"$TSV"
rm -f "$DB"
sqlite3 "$DB" "CREATE TABLE raw(label TEXT, text TEXT);" ".mode tabs" ".import $TSV raw" \
    "CREATE TABLE r(id INTEGER PRIMARY KEY, text TEXT);" \
    "INSERT INTO r(text) SELECT text FROM raw;" "DROP TABLE raw;"
rows=$(sqlite3 "$DB" "SELECT count(*) FROM r;")

now() { date +%s.%N; }
classify_once() { # seconds of one whole classify process
    cp "$DB" "$CACHE/cpu_side_run.db"
    local s e
    s=$(now)
    sqlite3 "$CACHE/cpu_side_run.db" ".load build/sentiment.so" \
        "SELECT sentiment_config('threads', 1);" "SELECT sentiment_load('tiny', '$MODEL');" \
        "CREATE TABLE out AS SELECT id, label, score FROM classify('r', 'text', 'tiny');" \
        >/dev/null
    e=$(now)
    awk -v s="$s" -v e="$e" 'BEGIN {printf "%.3f\n", e - s}'
}
encoder_once() { # seconds of the encoder alone, same shape and lengths
    build/bench/bench_encoder --layers 2 --hidden 64 --heads 4 --intermediate 128 --batch 32 \
        --seq 62 --threads 1 --runs 1 --lanes 1 --lengths "$TSV" |
        sed -n 's/.*median of 1 runs: \([0-9.]*\) s.*/\1/p'
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

c_all=""
e_all=""
for ((i = 0; i < RUNS; i++)); do
    c_all="$c_all $(classify_once)"
    e_all="$e_all $(encoder_once)"
done
c=$(echo "$c_all" | tr ' ' '\n' | grep . | median)
e=$(echo "$e_all" | tr ' ' '\n' | grep . | median)
echo "rows: $rows reviews ($DATA: waimai_10k, online_shopping_10_cats), model $MODEL, 1 thread"
echo "classify, whole process (s):$c_all  median $c"
echo "encoder alone (s):$e_all  median $e"
awk -v c="$c" -v e="$e" -v n="$rows" 'BEGIN {
    d = c - e
    printf "outside the encoder: %.2f s, %.1f us a row, %.0f rows/s a thread\n", d, 1e6 * d / n, n / d
}'
