#!/usr/bin/env bash
# bench_cli.sh: the sqlite-sentiment command against classify called
# directly, on the same rows in the same run, and the command's memory.
#
#   make wheel && bench/bench_cli.sh [--rows 100000] [--big 1000000] [--rounds 3]
#                                    [--chunks "256 1024 4096 16384"]
#
# 1. Install: a fresh venv from Debian's python3, `pip install --no-index`
#    of build/wheel/*.whl, then the first answer (python -c ... sentiment());
#    the time from the start of pip install to that answer.
# 2. Rate: ROWS takeaway reviews (waimai_10k/all.tsv from BENCH_DATA, texts
#    repeated in order to reach ROWS; the data stays outside the repository,
#    in BENCH_CACHE), as TSV. `sqlite-sentiment label` over the file against
#    SELECT id, label, score, probs FROM classify('t', 'text') over the same
#    rows in a table of an in-memory database (Python's sqlite3, every row
#    fetched), in ROUNDS alternating pairs. Both wall time and CPU time
#    (user + system, all threads): the command's whole process (start-up,
#    model load, reading, writing) against the query alone. Then the chunk
#    sweep (--chunk-size) on ROWS/5 rows, each size paired with a direct run.
# 3. Memory: peak RSS (/usr/bin/time -v) of the command on ROWS and on BIG
#    rows (the same texts repeated): flat when streaming.
# Threads: the extension's default (every core). On a machine shared with
# other work the wall times move with its load; the CPU-time ratio of a
# pair is the steadier figure.
set -euo pipefail

ROWS=100000
BIG=1000000
CHUNKS="256 1024 4096 16384"
ROUNDS=3
while [ $# -gt 0 ]; do
    case $1 in
        --rows) ROWS=$2; shift 2 ;;
        --big) BIG=$2; shift 2 ;;
        --chunks) CHUNKS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        *) echo "bench_cli.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
DATA=${BENCH_DATA:-../shared/data}
CACHE=${BENCH_CACHE:-$HOME/.cache/sentiment-bench}/cli
PY=${WHEEL_PYTHON:-/usr/bin/python3}
SRC=$DATA/waimai_10k/all.tsv
[ -f "$SRC" ] || { echo "bench_cli.sh: $SRC not found (set BENCH_DATA)" >&2; exit 1; }
set -- build/wheel/sqlite_sentiment-*.whl
[ -f "$1" ] || { echo "bench_cli.sh: no wheel; run make wheel" >&2; exit 1; }
WHEEL=$1
mkdir -p "$CACHE"
VENV=$CACHE/venv

echo "== install: pip install of $(basename "$WHEEL") to the first answer"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
start=$(date +%s.%N)
"$VENV/bin/pip" install -q --no-index --no-deps "$WHEEL"
mid=$(date +%s.%N)
answer=$("$VENV/bin/python" -c "import sqlite3, sqlite_sentiment
c = sqlite3.connect(':memory:'); sqlite_sentiment.load(c)
print(c.execute(\"SELECT sentiment('送餐很快，味道不错')\").fetchone()[0])")
end=$(date +%s.%N)
printf 'pip install %.1f s, then first answer (%s) %.2f s: %.1f s in all\n' \
    "$(echo "$mid - $start" | bc)" "$answer" "$(echo "$end - $mid" | bc)" "$(echo "$end - $start" | bc)"

# The inputs: ROWS, ROWS/5 and BIG rows of label<TAB>text, texts in order.
make_tsv() {  # n path
    [ -f "$2" ] && return
    "$VENV/bin/python" - "$SRC" "$1" "$2" <<'EOF'
import sys
src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [l.rstrip("\n") for l in open(src, encoding="utf-8")][1:]
with open(out + ".tmp", "w", encoding="utf-8") as f:
    f.write("label\ttext\n")
    for i in range(n):
        f.write(rows[i % len(rows)] + "\n")
import os; os.replace(out + ".tmp", out)
EOF
}
SMALL=$((ROWS / 5))
make_tsv "$ROWS" "$CACHE/rows-$ROWS.tsv"
make_tsv "$SMALL" "$CACHE/rows-$SMALL.tsv"
[ "$BIG" -gt 0 ] && make_tsv "$BIG" "$CACHE/rows-$BIG.tsv"

direct() {  # path -> "wall cpu rows"
    "$VENV/bin/python" - "$1" <<'EOF'
import resource, sqlite3, sys, time, sqlite_sentiment
c = sqlite3.connect(":memory:")
sqlite_sentiment.load(c)
c.execute("SELECT sentiment_config('progress', 'off')").fetchall()
c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT)")
with open(sys.argv[1], encoding="utf-8") as f:
    next(f)
    c.executemany("INSERT INTO t(text) VALUES (?)", ((l.rstrip("\n").split("\t", 1)[1],) for l in f))
c.execute("SELECT sentiment('预热')").fetchall()        # the model loaded
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t, u = time.perf_counter(), cpu()
n = len(c.execute("SELECT id, label, score, probs FROM classify('t', 'text')").fetchall())
print(f"{time.perf_counter() - t:.3f} {cpu() - u:.3f} {n}")
EOF
}
cli() {  # path chunk -> "wall cpu maxrss_kb"
    local out=$CACHE/out.tsv log=$CACHE/time.log
    /usr/bin/time -v "$VENV/bin/sqlite-sentiment" label "$1" --prefix p_ --chunk-size "$2" \
        --progress off -o "$out" 2>"$log"
    local wall cpu rss
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$log" |
           awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }')
    cpu=$(awk -F': ' '/User time \(seconds\)|System time \(seconds\)/ { s += $2 } END { print s }' "$log")
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log")
    echo "$wall $cpu $rss"
}
pct() { echo "100 * $1 / $2" | bc -l; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "== rate: $ROWS takeaway reviews, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $("$VENV/bin/python" -c "import sqlite3, sqlite_sentiment
c = sqlite3.connect(':memory:'); sqlite_sentiment.load(c); print(c.execute('SELECT sentiment_device()').fetchone()[0])")"
ratios_wall="" ratios_cpu=""
for round in $(seq "$ROUNDS"); do
    read -r dw dc n < <(direct "$CACHE/rows-$ROWS.tsv")
    read -r cw cc rss < <(cli "$CACHE/rows-$ROWS.tsv" 4096)
    printf 'round %d: classify %.1f s wall (%.0f rows/s), %.1f s CPU; label %.1f s wall (%.0f rows/s), %.1f s CPU: %.1f%% (wall), %.1f%% (CPU) of classify\n' \
        "$round" "$dw" "$(echo "$n / $dw" | bc -l)" "$dc" "$cw" "$(echo "$ROWS / $cw" | bc -l)" "$cc" \
        "$(pct "$dw" "$cw")" "$(pct "$dc" "$cc")"
    ratios_wall="$ratios_wall $(pct "$dw" "$cw")"
    ratios_cpu="$ratios_cpu $(pct "$dc" "$cc")"
done
printf "median: the command runs at %.1f%% of classify's rate by wall time, %.1f%% by CPU time\n" \
    "$(echo "$ratios_wall" | median)" "$(echo "$ratios_cpu" | median)"

echo "== chunk size: $SMALL rows, each paired with classify directly"
for ch in $CHUNKS; do
    read -r dw dc n < <(direct "$CACHE/rows-$SMALL.tsv")
    read -r cw cc rss < <(cli "$CACHE/rows-$SMALL.tsv" "$ch")
    printf -- '--chunk-size %6d: %.0f rows/s, %.1f%% (wall), %.1f%% (CPU) of classify; peak RSS %d MB\n' \
        "$ch" "$(echo "$SMALL / $cw" | bc -l)" "$(pct "$dw" "$cw")" "$(pct "$dc" "$cc")" "$((rss / 1024))"
done

echo "== memory: peak RSS of sqlite-sentiment label (chunk 4096)"
for n in "$ROWS" "$BIG"; do
    [ "$n" -gt 0 ] || continue
    read -r cw cc rss < <(cli "$CACHE/rows-$n.tsv" 4096)
    printf '%8d rows: %.1f s, peak RSS %d MB, output %d lines\n' "$n" "$cw" "$((rss / 1024))" \
        "$(wc -l < "$CACHE/out.tsv")"
done
rm -f "$CACHE/out.tsv"
