"""label_sqlite_files on a local Ray cluster: many SQLite files, one shard
each, labelled in place into a new table; a worker killed half-way through
a file; a process killed between chunks leaves no output table; reruns skip
finished files; files that cannot be labelled are reported."""

import multiprocessing
import os
import signal
import sqlite3

import pytest

import sqlite_sentiment.ray as sr
from conftest import assert_same_labels

SHARDS = 6
# Rows the tests add to each shard, with what label_sqlite_files says of them
# (inserted as SQL so they are stored with exactly these types).
BAD_ROWS = [("NULL", "text is NULL"), ("''", "text is blank"), ("42", "text is integer, not a string"),
            ("4.5", "text is real, not a string"),
            ("CAST(x'e688bfff' AS TEXT)", "invalid UTF-8 at byte 3"),
            ("x'e688bfe997b4e5be88e5b9b2e58780'", None)]          # a BLOB of UTF-8: text


def make_shards(directory, rows, shards=SHARDS):
    """shards files, each with reviews(id INTEGER PRIMARY KEY, comment) holding
    a slice of rows (their ids) and, after them, the BAD_ROWS; returns
    (paths, {path: [(id, comment)] of the good rows}, {path: {id: error}})."""
    os.makedirs(directory, exist_ok=True)
    per = (len(rows) + shards - 1) // shards
    paths, good, bad = [], {}, {}
    next_id = len(rows) + 1
    for k in range(shards):
        path = os.path.join(directory, f"shard-{k:02d}.db")
        part = [r[:2] for r in rows[k * per:(k + 1) * per]]
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE reviews(id INTEGER PRIMARY KEY, comment)")
        conn.executemany("INSERT INTO reviews VALUES (?, ?)", part)
        bad[path] = {}
        for expr, why in BAD_ROWS:
            conn.execute(f"INSERT INTO reviews VALUES (?, {expr})", (next_id,))
            bad[path][next_id] = why
            next_id += 1
        conn.commit()
        conn.close()
        paths.append(path)
        good[path] = part
    return paths, good, bad


def read_output(path, table="review_labels"):
    conn = sqlite3.connect(path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        if table not in tables:
            return None, tables
        return conn.execute(f"SELECT id, label, score, error FROM {table} ORDER BY id").fetchall(), tables
    finally:
        conn.close()


def check_shard(path, good_rows, bad_rows, want):
    out, tables = read_output(path)
    assert out is not None, f"{path}: no review_labels; tables {tables}"
    assert not any(t.startswith("sentiment_staging_") for t in tables), tables
    ids = [r[0] for r in out]
    assert ids == sorted([r[0] for r in good_rows] + list(bad_rows)), f"{path}: ids differ"
    got = {r[0]: (r[1], r[2]) for r in out if r[0] not in bad_rows}
    assert_same_labels(got, {r[0]: want[r[0]] for r in good_rows}, path)
    errors = {r[0]: r[3] for r in out if r[0] in bad_rows}
    assert errors == bad_rows, f"{path}: errors {errors}"
    assert all((r[1] is None) == (r[3] is not None) for r in out)


def test_shards_labelled_in_place_killed_worker_and_rerun(ray_cluster, corpus, reference, tmp_path):
    rows = corpus[:4800]
    paths, good, bad = make_shards(str(tmp_path / "shards"), rows)
    flag = str(tmp_path / "kill-flag")
    open(flag, "w").close()
    from killers import KillOnceShardLabeller
    report = sr.label_sqlite_files(paths, "reviews", "comment", "review_labels", num_workers=2,
                                   chunk_rows=400, labeller_cls=KillOnceShardLabeller,
                                   labeller_kwargs={"kill_flag": flag})
    assert os.path.exists(flag + ".taken"), "no worker was killed"
    pid = int(open(flag + ".taken").read())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert [r["path"] for r in report] == paths
    assert all(r["status"] == "labelled" and r["error"] is None for r in report), report
    assert [r["rows"] for r in report] == [len(good[p]) + len(bad[p]) for p in paths]
    assert [r["errors"] for r in report] == [sum(1 for w in bad[p].values() if w) for p in paths]
    want = {r[0]: reference[r[0]] for r in rows}
    for p in paths:
        check_shard(p, good[p], bad[p], want)
    # A rerun does nothing more.
    again = sr.label_sqlite_files(paths, "reviews", "comment", "review_labels", num_workers=2)
    assert [r["status"] for r in again] == ["skipped"] * len(paths)
    assert [r["rows"] for r in again] == [r["rows"] for r in report]


def _label_and_die(path, kill_after_chunks):
    """In a child process: labels path, SIGKILLed after a few chunks."""
    engine = sr.Engine()
    chunks = []

    def on_chunk(p, done):
        chunks.append(done)
        if len(chunks) == kill_after_chunks:
            os.kill(os.getpid(), signal.SIGKILL)
    sr.label_sqlite_file(engine, path, "reviews", "comment", "review_labels",
                         chunk_rows=200, on_chunk=on_chunk)


def test_killed_between_chunks_leaves_no_output_table(corpus, reference, tmp_path):
    # Without Ray: the file as a killed process leaves it, then a rerun.
    rows = corpus[:1000]
    (path,), good, bad = make_shards(str(tmp_path / "one"), rows, shards=1)
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=_label_and_die, args=(path, 2))
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL
    out, tables = read_output(path)
    assert out is None and "sentiment_staging_review_labels" in tables, tables
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM sentiment_staging_review_labels").fetchone()[0] == 400
    conn.close()
    engine = sr.Engine()
    try:
        r = sr.label_sqlite_file(engine, path, "reviews", "comment", "review_labels", chunk_rows=200)
        assert r["status"] == "labelled" and r["rows"] == len(rows) + len(BAD_ROWS)
        check_shard(path, good[path], bad[path], {x[0]: reference[x[0]] for x in rows})
        assert sr.label_sqlite_file(engine, path, "reviews", "comment",
                                    "review_labels")["status"] == "skipped"
    finally:
        engine.close()


def test_files_that_cannot_be_labelled_are_reported(ray_cluster, corpus, tmp_path):
    paths, good, bad = make_shards(str(tmp_path / "s"), corpus[:200], shards=2)
    no_table = str(tmp_path / "empty.db")
    sqlite3.connect(no_table).close()
    missing = str(tmp_path / "missing.db")
    with pytest.raises(sr.ShardsFailed) as e:
        sr.label_sqlite_files(paths + [no_table, missing], "reviews", "comment", "review_labels",
                              num_workers=1)
    report = e.value.report
    assert [r["status"] for r in report] == ["labelled", "labelled", "failed", "failed"]
    assert "no table 'reviews'" in report[2]["error"]
    assert "no database file" in report[3]["error"] and not os.path.exists(missing)
    wrong = sr.label_sqlite_files(paths, "reviews", "body", "other", num_workers=1,
                                  raise_on_failure=False)
    assert all("has no column 'body'" in r["error"] for r in wrong)
