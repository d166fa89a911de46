#!/bin/sh
# test_cuda_emu_sql.sh: the SQL functions on the CUDA plugin, run by the
# CUDA emulator (tests/gpu/cuda_emu, loaded through SENTIMENT_CUDA_PLUGIN as
# runtime/device.c allows): sentiment_device() names the emulated GPU;
# sentiment(), sentiment_score() and classify() give the CPU's labels and
# scores (fp32: within 1e-4; bf16, the default: within 2e-2); train() on
# the device gives the CPU's loss (fp32: within 1e-3 relative), says the
# device in its report, and the trained model classifies. Part of make test
# (TEST_SCRIPTS); a few seconds.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
PLUGIN=$BUILD/tests/sentiment_cuda_emu.so
if [ ! -f "$BUILD/sentiment.so" ] || [ ! -f "$PLUGIN" ] || ! command -v sqlite3 >/dev/null 2>&1; then
    echo "test_cuda_emu_sql: FAILED: needs $BUILD/sentiment.so, $PLUGIN and sqlite3"
    exit 1
fi
export SENTIMENT_CUDA_PLUGIN="$PLUGIN"
# A sanitizer build (make asan) needs its runtime loaded first in the
# uninstrumented sqlite3 shell, as scripts/run-sql-tests.sh does.
preload=$(ldd "$BUILD/sentiment.so" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {printf "%s ", $3}')
shell() {
    if [ -n "$preload" ]; then
        env LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" sqlite3 "$@"
    else
        sqlite3 "$@"
    fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# run <device> <precision>: every result line of the same SQL on one device
run() {
    rm -f "$tmp/db"
    shell "$tmp/db" <<EOF 2>&1
.load ./$BUILD/sentiment
SELECT 'config', sentiment_config('device', '$1') IS NOT NULL;
SELECT 'config', sentiment_config('precision', '$2') IS NOT NULL;
SELECT 'device', sentiment_device();
CREATE TABLE r(id INTEGER PRIMARY KEY, t TEXT, l TEXT);
INSERT INTO r(t, l) VALUES ('这家酒店很干净，服务也很周到', 'positive'), ('房间很脏，再也不来了', 'negative'),
  ('早餐很好吃', 'positive'), ('服务态度太差', 'negative'), ('位置方便，推荐', 'positive'),
  ('隔音很差，吵得睡不着', 'negative'), ('床很舒服', 'positive'), ('空调坏了没人修', 'negative'),
  ('前台很热情', 'positive'), ('价格太贵不值', 'negative');
SELECT 'one', sentiment('这家酒店很干净，服务也很周到'), sentiment_score('这家酒店很干净，服务也很周到');
SELECT 'classify', id, label, score FROM classify('r', 't');
SELECT 'train', json_extract(rep, '\$.train_loss[0]'), json_extract(rep, '\$.device')
  FROM (SELECT train('m', t, l, '{"epochs": 1}') AS rep FROM r);
SELECT 'trained', sentiment('早餐很好吃', 'm') IN ('positive', 'negative');
EOF
}

for prec in fp32 bf16; do
    run cpu "$prec" >"$tmp/cpu.$prec"
    run cuda "$prec" >"$tmp/cuda.$prec"
    if grep -qi 'error' "$tmp/cuda.$prec" "$tmp/cpu.$prec"; then
        echo "test_cuda_emu_sql: FAILED ($prec): an SQL error"
        cat "$tmp/cpu.$prec" "$tmp/cuda.$prec"
        fail=1
        continue
    fi
    grep -q "^device|cuda:0 CUDA emulator (CPU), $prec\$" "$tmp/cuda.$prec" ||
        { echo "test_cuda_emu_sql: FAILED ($prec): sentiment_device() is not the emulated GPU"; fail=1; }
    grep -q "^train|.*|cuda:0 CUDA emulator" "$tmp/cuda.$prec" ||
        { echo "test_cuda_emu_sql: FAILED ($prec): train() did not report the emulated GPU"; fail=1; }
    tol=1e-4
    [ "$prec" = bf16 ] && tol=2e-2
    # line by line: the same labels; scores within tol; the loss within 1e-3 relative (fp32)
    paste -d '\n' "$tmp/cpu.$prec" "$tmp/cuda.$prec" | awk -F'|' -v tol="$tol" -v prec="$prec" '
        NR % 2 == 1 { split($0, c, "|"); cn = NF; next }
        {
            if ($1 == "device" || $1 == "config") next
            if (NF != cn) { print "shape: " $0; bad++; next }
            for (i = 2; i <= NF; i++) {
                if ($i ~ /^-?[0-9.]+(e-?[0-9]+)?$/ && c[i] ~ /^-?[0-9.]+(e-?[0-9]+)?$/) {
                    d = $i - c[i]; if (d < 0) d = -d
                    lim = ($1 == "train") ? (prec == "fp32" ? 1e-3 * c[i] : 5e-2 * c[i]) : tol
                    if ($1 == "classify" && i == 2) lim = 0
                    if (d > lim) { print "cpu " c[i] " cuda " $i " (" $1 ", limit " lim ")"; bad++ }
                } else if ($1 != "train" && $i != c[i]) { print "cpu " c[i] " cuda " $i " (" $1 ")"; bad++ }
            }
            n++
        }
        END { if (bad || n < 13) { print bad + 0 " differences in " n " lines"; exit 1 } }' \
        >"$tmp/diff.$prec" ||
        { echo "test_cuda_emu_sql: FAILED ($prec): cuda differs from cpu:"; cat "$tmp/diff.$prec"; fail=1; }
done

# A GPU connection switched from bf16 (weights packed as BF16 once) to fp32
# answers as fp32 does: the packed weights are not used after the switch.
text='这家酒店很干净，服务也很周到'
rm -f "$tmp/db"
shell "$tmp/db" >"$tmp/switch" 2>&1 <<EOF
.load ./$BUILD/sentiment
SELECT sentiment_config('device', 'cuda') IS NOT NULL;
SELECT sentiment_config('precision', 'bf16') IS NOT NULL;
SELECT 'bf16', sentiment_score('$text');
SELECT sentiment_config('precision', 'fp32') IS NOT NULL;
SELECT 'fp32', sentiment_score('$text');
EOF
want=$(awk -F'|' '$1 == "one" { print $3 }' "$tmp/cpu.fp32")
awk -F'|' -v want="$want" '
    $1 == "bf16" { b = $2 } $1 == "fp32" { f = $2 }
    END {
        d = f - want; if (d < 0) d = -d
        e = b - want; if (e < 0) e = -e
        if (f == "" || d > 1e-6) { print "after the switch " f ", fp32 on the CPU " want; exit 1 }
        if (e <= 1e-6) { print "bf16 " b " cannot be told from fp32 " want; exit 1 }
    }' "$tmp/switch" >"$tmp/diff.switch" ||
    { echo "test_cuda_emu_sql: FAILED (bf16 -> fp32):"; cat "$tmp/diff.switch" "$tmp/switch"; fail=1; }
[ $fail -eq 0 ] || exit 1
echo "test_cuda_emu_sql: passed (sentiment, classify and train on the emulated GPU match the CPU, fp32 and bf16; bf16 -> fp32 on a live connection)"
