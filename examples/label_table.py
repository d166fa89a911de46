#!/usr/bin/env python3
"""label_table.py: label a table offline from Python's sqlite3 module.

    python3 examples/label_table.py [--db build/reviews.db] [--extension build/sentiment]
                                    [--model path/to/hf_model_dir]

Loads the sentiment extension into a connection, fills the sample `reviews`
table from examples/reviews.sql when the database has none, writes
`review_labels(id, label, score)` with classify() and prints a summary.
--model registers a Hugging Face model directory as 'default' (needed when
the build has no built-in model). Run from the repository root.

Python's sqlite3 must have been built with extension loading (Debian's
/usr/bin/python3 is); otherwise this prints how to proceed and exits 2.
"""
import argparse
import os
import sqlite3
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=":memory:", help="database file (default: in memory)")
    ap.add_argument("--extension", default="build/sentiment", help="path to sentiment.so without .so")
    ap.add_argument("--model", help="model directory to register as 'default'")
    args = ap.parse_args()

    conn = sqlite3.connect(args.db)
    if not hasattr(conn, "enable_load_extension"):
        print("this Python's sqlite3 module cannot load extensions; "
              "try /usr/bin/python3", file=sys.stderr)
        return 2
    conn.enable_load_extension(True)
    conn.load_extension(args.extension)
    conn.enable_load_extension(False)

    if args.model:
        (summary,) = conn.execute("SELECT sentiment_load('default', ?)", (args.model,)).fetchone()
        print("model:", summary)
    has_reviews = conn.execute(
        "SELECT count(*) FROM sqlite_schema WHERE name = 'reviews'").fetchone()[0]
    if not has_reviews:
        with open(os.path.join(HERE, "reviews.sql"), encoding="utf-8") as f:
            conn.executescript(f.read())

    with conn:
        conn.execute("DROP TABLE IF EXISTS review_labels")
        conn.execute("CREATE TABLE review_labels AS "
                     "SELECT id, label, score FROM classify('reviews', 'comment')")

    n, agree = conn.execute(
        "SELECT count(*), avg(l.label = r.label) "
        "FROM review_labels l JOIN reviews r USING (id)").fetchone()
    print(f"labelled {n} rows on {conn.execute('SELECT sentiment_device()').fetchone()[0]}")
    print(f"agreement with the written labels: {agree:.3f}")
    for label, count in conn.execute(
            "SELECT label, count(*) FROM review_labels GROUP BY label ORDER BY label"):
        print(f"  {label}: {count}")
    for rid, label, score, comment in conn.execute(
            "SELECT l.id, l.label, l.score, r.comment FROM review_labels l "
            "JOIN reviews r USING (id) ORDER BY l.id LIMIT 3"):
        print(f"  #{rid} {label} {score:.3f} {comment}")
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
