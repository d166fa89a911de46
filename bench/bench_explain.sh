#!/usr/bin/env bash
# bench_explain.sh: what an explanation costs, against classifying: rows/s
# of classify, of sentiment_explain with gradient x input, and with
# integrated gradients at a few step counts, on real reviews with the
# built-in model, and from those the cost of one integrated-gradients step.
#
#   make all && bench/bench_explain.sh [--rows 200] [--runs 3] [--threads 2]
#
# Method: the first ROWS texts of chnsenticorp/dev.tsv (from BENCH_DATA,
# read at run time, never copied into the repository) in a temporary
# database; each configuration runs as a whole sqlite3 process, the
# configurations in turn, RUNS rounds; the median of each is reported.
# Not a test: it asserts nothing.
set -euo pipefail

ROWS=200
RUNS=3
THREADS=2
while [ $# -gt 0 ]; do
    case $1 in
        --rows) ROWS=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "bench_explain.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
DATA=${BENCH_DATA:-../shared/data}
TSV="$DATA/chnsenticorp/dev.tsv"
for f in build/sentiment.so "$TSV"; do
    [ -e "$f" ] || { echo "bench_explain.sh: $f is missing" >&2; exit 1; }
done
command -v sqlite3 >/dev/null || { echo "bench_explain.sh: needs the sqlite3 shell" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
DB="$TMP/reviews.db"
awk -F '\t' -v n="$ROWS" 'NR > 1 && NR <= n + 1 { print $2 }' "$TSV" > "$TMP/texts.txt"
sqlite3 "$DB" "CREATE TABLE r(id INTEGER PRIMARY KEY, body TEXT); CREATE TABLE r_in(body TEXT)"
# one field a line: a separator no text has, and no CSV quoting
sqlite3 "$DB" ".mode ascii" ".separator \"\037\" \"\n\"" ".import $TMP/texts.txt r_in" \
    "INSERT INTO r(body) SELECT * FROM r_in; DROP TABLE r_in"
n=$(sqlite3 "$DB" "SELECT count(*) FROM r")

declare -A SQL=(
    [classify]="SELECT count(label) FROM classify('r', 'body')"
    [gradient_x_input]="SELECT count(sentiment_explain(body, 'default', '{\"method\":\"gxi\"}')) FROM r"
    [ig_8]="SELECT count(sentiment_explain(body, 'default', '{\"steps\":8}')) FROM r"
    [ig_32]="SELECT count(sentiment_explain(body, 'default', '{\"steps\":32}')) FROM r"
)
ORDER=(classify gradient_x_input ig_8 ig_32)
declare -A TIMES
for ((run = 0; run < RUNS; run++)); do
    for k in "${ORDER[@]}"; do
        t0=$(date +%s.%N)
        sqlite3 "$DB" -cmd ".load build/sentiment" "SELECT sentiment_config('threads', $THREADS)" \
            "${SQL[$k]}" > /dev/null
        t1=$(date +%s.%N)
        TIMES[$k]+="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }') "
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "rows: $n (chnsenticorp/dev), threads: $THREADS, runs: $RUNS (median seconds of a whole sqlite3 process)"
printf '%-18s %10s %10s\n' config seconds rows/s
declare -A MED
for k in "${ORDER[@]}"; do
    MED[$k]=$(echo "${TIMES[$k]}" | median)
    printf '%-18s %10.3f %10.1f\n' "$k" "${MED[$k]}" "$(awk -v n="$n" -v s="${MED[$k]}" 'BEGIN { print n / s }')"
done
awk -v a="${MED[ig_8]}" -v b="${MED[ig_32]}" -v n="$n" \
    'BEGIN { printf "one integrated-gradients step: %.2f ms per text ((ig_32 - ig_8) / 24)\n", 1000 * (b - a) / 24 / n }'
