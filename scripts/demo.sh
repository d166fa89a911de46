#!/bin/sh
# demo.sh: a short tour of the sentiment extension in the sqlite3 shell
# (what `make demo` runs). Uses the built-in model when this build has one;
# otherwise it says so and uses the tiny random-weight test model, whose
# labels are arbitrary: it shows how things work, not how well.
set -eu
cd "$(dirname "$0")/.."
build=${BUILD:-build}
so="$build/sentiment"
[ -f "$so.so" ] || { echo "demo: $so.so not built; run make" >&2; exit 1; }

builtin=$(sqlite3 :memory: -cmd ".load $so" "SELECT json_extract(sentiment_debug(), '\$.builtin_model')")
if [ "$builtin" = "1" ]; then
    setup="SELECT 'model: built-in (default)';"
else
    echo "note: this build has no built-in model yet (model/builtin/ is empty)."
    echo "      The demo registers tests/fixtures/models/bert_tiny as 'default': a tiny"
    echo "      model with random weights, so its labels below mean nothing."
    echo
    setup="SELECT 'model: ' || sentiment_load('default', 'tests/fixtures/models/bert_tiny');"
fi

sqlite3 :memory: <<SQL
.load $so
.headers off
$setup
SELECT 'version: ' || sentiment_version() || ' (commit ' || json_extract(sentiment_debug(), '$.commit') || ')';
SELECT 'device:  ' || sentiment_device();
.print
.print -- one text at a time
.headers on
.mode box
SELECT sentiment('这家酒店很干净，服务也很周到') AS label,
       round(sentiment_score('这家酒店很干净，服务也很周到'), 3) AS score;
SELECT sentiment_tokens('外卖送得太慢了') AS tokens;
.print
.print -- a table, in batches: classify(), then the window form
.read examples/reviews.sql
SELECT id, label, round(score, 3) AS score, truncated
FROM classify('reviews', 'comment') LIMIT 5;
SELECT id, sentiment_batch(comment) OVER (ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING) AS label
FROM reviews LIMIT 3;
.print
.print -- agreement with the labels the 200 reviews' writers meant
SELECT json_extract(r, '\$.accuracy') AS accuracy, json_extract(r, '\$.macro_f1') AS macro_f1
FROM (SELECT sentiment_evaluate(comment, label) AS r FROM reviews);
.print
.print -- the models this connection can use
SELECT name, version, source, labels, layers, hidden_size, parameters FROM sentiment_models;
SQL
