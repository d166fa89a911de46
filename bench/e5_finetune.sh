#!/bin/sh
# e5_finetune.sh: fine-tunes a converted multilingual-e5-small (make e5-model,
# make e5-model-trimmed) with train() on chnsenticorp/train and scores it on
# chnsenticorp/dev, through the sqlite3 shell. The data is read from
# ../shared/data at run time (see its README), never copied.
#
#   bench/e5_finetune.sh MODEL_DIR DB [ROWS [EPOCHS [THREADS [OPTIONS_JSON]]]]
#
# ROWS limits the training rows (0 = all 7,855: a full epoch takes hours on
# 2 cores); OPTIONS_JSON is merged into train()'s options. Prints train()'s
# JSON report (examples/s) and sentiment_evaluate()'s on the dev split. The
# trained model stays in DB as 'e5cs'.
set -eu
dir=$1 db=$2 rows=${3:-0} epochs=${4:-1} threads=${5:-2} extra=${6:-'{}'}
data=${DATA:-../shared/data/chnsenticorp}
so=${SO:-build/sentiment}
limit=""
[ "$rows" -gt 0 ] && limit="LIMIT $rows"
sqlite3 "$db" <<SQL
.load $so
.mode tabs
CREATE TABLE IF NOT EXISTS train_rows(label INTEGER, text TEXT);
CREATE TABLE IF NOT EXISTS dev_rows(label INTEGER, text TEXT);
SQL
if [ "$(sqlite3 "$db" 'SELECT count(*) FROM train_rows')" = 0 ]; then
    tail -n +2 "$data/train.tsv" > "$db.train.tmp"
    tail -n +2 "$data/dev.tsv" > "$db.dev.tmp"
    # ascii mode: no CSV quote handling (the reviews contain '"')
    sqlite3 "$db" ".mode ascii" ".separator \"\t\" \"\n\"" \
        ".import $db.train.tmp train_rows" ".import $db.dev.tmp dev_rows"
    rm -f "$db.train.tmp" "$db.dev.tmp"
fi
sqlite3 "$db" <<SQL
.load $so
SELECT sentiment_config('threads', $threads);
SELECT sentiment_load('e5', '$dir');
SELECT train('e5cs', text, label,
             json_patch('{"base":"e5","epochs":$epochs,"seed":42}', '$extra'))
  FROM (SELECT * FROM train_rows ORDER BY rowid $limit);
SELECT sentiment_evaluate(text, label, 'e5cs') FROM dev_rows;
SQL
