#!/bin/sh
# teacher.sh: the teacher stages of the built-in model's recipe (README.md,
# "Recipe"), through the sqlite3 shell and sentiment.so, resumable: each step
# stores what it made in DB and a rerun skips what is there.
#
#   recipe/teacher.sh train DB SPLIT [CHUNKS]
#   recipe/teacher.sh eval DB SPLIT
#   recipe/teacher.sh label DB SPLIT OUT.bin
#
# SPLIT is the directory `build/train_builtin --split-dir SPLIT --split-only 1`
# writes (train.tsv, eval_*.tsv, from ../shared/data; never committed).
#
# train: multilingual-e5-small with the trimmed vocabulary (make
#   e5-model-trimmed) is fine-tuned with train(), first 1 epoch on
#   chnsenticorp/train ('teacher0', the run of bench/e5_finetune.sh), then on the whole
#   training split in chunks of CHUNK_ROWS rows ('teacher1', 'teacher2', ...),
#   each chunk one train() call that starts from the previous chunk's model
#   (lr decaying linearly to 0 inside a chunk, peaks falling from chunk to
#   chunk). A killed run loses at most the chunk it was in. CHUNKS (default
#   all) bounds how many chunks this call may add; TEACHER_CHUNKS (default
#   all) the last chunk trained (the schedule stays that of all chunks). Each chunk's accuracy on
#   chnsenticorp/dev is kept in the table teacher_eval.
# eval: the newest teacher's report on every evaluation split, into
#   teacher_eval.
# PRECISION (default auto: fp32 for the teacher) is sentiment_config's.
# label: the newest teacher labels every text of the split's train.tsv and
#   the first UNLABELED_ROWS (default 0) of its unlabeled.tsv, in batches of
#   2,000, each committed; with ENSEMBLE_MODEL (a model directory: the
#   version 1 built-in model) that model labels them too, and each soft label
#   is (1 - ENSEMBLE_WEIGHT) * teacher + ENSEMBLE_WEIGHT * that model's
#   (default 0.3), that model running at ENSEMBLE_PRECISION (default int8,
#   as for the shipped labels; fp32 on a CPU without AVX512-VNNI). Writes OUT: the soft labels keyed by a hash of the
#   normalised text (recipe/soft_labels.h). Evaluation texts are
#   never in it.
# eval-ensemble: the same mix's accuracy on every evaluation split, into
#   ensemble_eval. P(positive) is the probability of label "1" (the teacher's
#   labels) or "positive".
set -eu
cmd=$1 db=$2 split=$3
so=${SO:-build/sentiment}
e5=${E5_DIR:-build/models/multilingual-e5-small-trimmed}
threads=${THREADS:-2}
chunk_rows=${CHUNK_ROWS:-6000}
lr0=${TEACHER_LR:-3e-5}
opts='"max_length":128,"seed":42,"group_by_length":true'

q_at() { # precision sql...
    prec=$1
    shift
    sqlite3 -bail "$db" ".load $so" "SELECT sentiment_config('threads', $threads);" \
        "SELECT sentiment_config('precision', '$prec');" "$@" >/dev/null
}
q() { q_at "${PRECISION:-auto}" "$@"; }
have() { [ "$(sqlite3 "$db" "SELECT count(*) FROM sentiment_model_store WHERE name = '$1'" 2>/dev/null || echo 0)" != 0 ]; }

import() { # table file: label<TAB>text rows, header skipped
    tail -n +2 "$2" > "$db.tmp"
    sqlite3 -bail "$db" "CREATE TABLE IF NOT EXISTS $1(label INTEGER, text TEXT)" \
        ".mode ascii" ".separator \"\t\" \"\n\"" ".import $db.tmp $1"
    rm -f "$db.tmp"
}

newest() {
    sqlite3 "$db" "SELECT name FROM sentiment_model_store WHERE name LIKE 'teacher%'
                     ORDER BY CAST(substr(name, 8) AS INTEGER) DESC LIMIT 1"
}

evaluate() { # model [glob]: one row per evaluation split into teacher_eval
    for f in "$split"/eval_${2:-*}.tsv; do
        t=$(basename "$f" .tsv)
        sqlite3 "$db" "SELECT 1 FROM $t LIMIT 1" >/dev/null 2>&1 || import "$t" "$f"
        q "CREATE TABLE IF NOT EXISTS teacher_eval(model TEXT, split TEXT, report TEXT,
               PRIMARY KEY (model, split))" \
          "INSERT OR REPLACE INTO teacher_eval
             SELECT '$1', '$t', sentiment_evaluate(text, label, '$1') FROM $t"
        sqlite3 "$db" "SELECT model, split, json_extract(report, '$.accuracy')
                         FROM teacher_eval WHERE model = '$1' AND split = '$t'"
    done
}

case $cmd in
train)
    sqlite3 "$db" "SELECT 1 FROM split_train LIMIT 1" >/dev/null 2>&1 || {
        import split_train "$split/train.tsv"
        import cs_train ../shared/data/chnsenticorp/train.tsv
    }
    if ! have teacher0; then
        echo "teacher0: 1 epoch on chnsenticorp/train"
        q "SELECT sentiment_load('e5', '$e5')" \
          "SELECT train('teacher0', text, label, '{\"base\":\"e5\",\"epochs\":1,\"seed\":42}')
             FROM (SELECT * FROM cs_train ORDER BY rowid)"
        evaluate teacher0 chnsenticorp_dev
    fi
    total=$(sqlite3 "$db" "SELECT count(*) FROM split_train")
    n=$(( (total + chunk_rows - 1) / chunk_rows ))
    added=0
    k=1
    last=${TEACHER_CHUNKS:-$n}
    while [ $k -le $n ] && [ $k -le "$last" ] && [ $added -lt "${4:-$n}" ]; do
        if ! have "teacher$k"; then
            lr=$(awk "BEGIN { printf \"%.3g\", $lr0 * ($n - $k + 1) / $n }")
            echo "teacher$k: rows $(( (k - 1) * chunk_rows )).., lr $lr ($(date -u +%H:%M:%S))"
            q "SELECT train('teacher$k', text, label,
                 '{\"base\":\"teacher$((k - 1))\",\"epochs\":1,\"lr\":$lr,\"warmup_ratio\":0,
                   \"valid_fraction\":0.02,$opts}')
                 FROM (SELECT * FROM split_train WHERE rowid > $(( (k - 1) * chunk_rows ))
                       ORDER BY rowid LIMIT $chunk_rows)"
            evaluate "teacher$k" chnsenticorp_dev
            added=$((added + 1))
        fi
        k=$((k + 1))
    done
    ;;
eval)
    evaluate "$(newest)"
    ;;
label)
    out=$4
    model=$(newest)
    echo "labelling with $model"
    sqlite3 -bail "$db" "CREATE TABLE IF NOT EXISTS label_texts(id INTEGER PRIMARY KEY, text TEXT UNIQUE)" \
        "CREATE TABLE IF NOT EXISTS soft(id INTEGER PRIMARY KEY, p REAL)"
    if [ "$(sqlite3 "$db" "SELECT count(*) FROM label_texts")" = 0 ]; then
        # the training rows, then the first UNLABELED_ROWS unlabeled texts
        tail -n +2 "$split/unlabeled.tsv" | cut -f 2- | head -n "${UNLABELED_ROWS:-0}" > "$db.tmp"
        sqlite3 -bail "$db" "INSERT OR IGNORE INTO label_texts(text) SELECT text FROM split_train" \
            "CREATE TEMP TABLE u(text TEXT)" ".mode ascii" ".separator \"\t\" \"\n\"" \
            ".import $db.tmp u" \
            "INSERT OR IGNORE INTO label_texts(text) SELECT text FROM u WHERE text <> ''"
        rm -f "$db.tmp"
    fi
    while :; do
        left=$(sqlite3 "$db" "SELECT count(*) FROM label_texts WHERE id NOT IN (SELECT id FROM soft)")
        [ "$left" = 0 ] && break
        echo "$left texts left ($(date -u +%H:%M:%S))"
        q "INSERT INTO soft
             SELECT id, coalesce(json_extract(probs, '$.\"1\"'), json_extract(probs, '$.positive'))
               FROM classify('SELECT id, text FROM label_texts
                               WHERE id NOT IN (SELECT id FROM soft) ORDER BY id LIMIT 2000',
                             '$model')"
    done
    p=soft.p
    if [ -n "${ENSEMBLE_MODEL:-}" ]; then
        sqlite3 -bail "$db" "CREATE TABLE IF NOT EXISTS soft_ensemble(id INTEGER PRIMARY KEY, p REAL)"
        while :; do
            left=$(sqlite3 "$db" "SELECT count(*) FROM label_texts WHERE id NOT IN (SELECT id FROM soft_ensemble)")
            [ "$left" = 0 ] && break
            echo "$left texts left for $ENSEMBLE_MODEL ($(date -u +%H:%M:%S))"
            q_at "${ENSEMBLE_PRECISION:-int8}" "SELECT sentiment_load('ensemble', '$ENSEMBLE_MODEL')" \
              "INSERT INTO soft_ensemble
                 SELECT id, score FROM classify('SELECT id, text FROM label_texts
                               WHERE id NOT IN (SELECT id FROM soft_ensemble) ORDER BY id LIMIT 20000',
                             'ensemble')"
        done
        w=${ENSEMBLE_WEIGHT:-0.3}
        p="(1 - $w) * soft.p + $w * soft_ensemble.p"
    fi
    sqlite3 -bail "$db" ".mode list" ".separator \"\t\" \"\n\"" ".output $db.soft.tsv" \
        "SELECT printf('%.6f', $p), text FROM soft JOIN label_texts USING (id)
           $( [ -n "${ENSEMBLE_MODEL:-}" ] && echo 'JOIN soft_ensemble USING (id)') ORDER BY id"
    ${TRAIN_BUILTIN:-build/train_builtin} --soft-write "$db.soft.tsv" --soft "$out"
    ;;
eval-ensemble)
    model=$(newest)
    w=${ENSEMBLE_WEIGHT:-0.3}
    for f in "$split"/eval_*.tsv; do
        t=$(basename "$f" .tsv)
        sqlite3 "$db" "SELECT 1 FROM $t LIMIT 1" >/dev/null 2>&1 || import "$t" "$f"
        q "CREATE TABLE IF NOT EXISTS ensemble_eval(split TEXT, id INTEGER, label INTEGER,
               p_teacher REAL, p_ensemble REAL, PRIMARY KEY (split, id))" \
          "INSERT OR IGNORE INTO ensemble_eval(split, id, label, p_teacher)
             SELECT '$t', c.id, e.label, coalesce(json_extract(c.probs, '$.\"1\"'), json_extract(c.probs, '$.positive'))
               FROM classify('SELECT rowid AS id, text FROM $t', '$model') AS c
               JOIN $t AS e ON e.rowid = c.id"
        q_at "${ENSEMBLE_PRECISION:-int8}" "SELECT sentiment_load('ensemble', '$ENSEMBLE_MODEL')" \
          "UPDATE ensemble_eval SET p_ensemble = (SELECT sentiment_score(text, 'ensemble')
             FROM $t WHERE rowid = ensemble_eval.id) WHERE split = '$t'"
        sqlite3 "$db" "SELECT split, count(*), avg((p_teacher > 0.5) = label),
                              avg((p_ensemble > 0.5) = label),
                              avg(((1 - $w) * p_teacher + $w * p_ensemble > 0.5) = label)
                         FROM ensemble_eval WHERE split = '$t'"
    done
    ;;
*)
    echo "usage: $0 train|eval|label|eval-ensemble DB SPLIT [...]" >&2
    exit 2
    ;;
esac
