#!/bin/sh
# bench-sql.sh [bench_sql options]: builds sentiment.so and bench_sql, then
# times sentiment(), classify, the window form and the engine called
# directly, on 20,000 real review texts read from ../shared/data at run time
# (see bench/bench_sql.c for the options, e.g. --threads 1 --model DIR).
set -eu
cd "$(dirname "$0")/.."
build=${BUILD:-build}
make -s BUILD="$build" "$build/sentiment.so" "$build/bench/bench_sql"
exec "$build/bench/bench_sql" --ext "$build/sentiment" "$@"
