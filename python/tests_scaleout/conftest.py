"""Fixtures of the scale-out tests (scripts/test-scaleout.sh runs them): one
local Ray cluster of 2 CPUs for the session, the review corpus, and labels
computed in this process with classify, the reference every Ray result is
compared with."""

import os
import sqlite3
import sys

import pytest

import sqlite_sentiment
import reviews as reviews_mod

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = int(os.environ.get("SCALEOUT_ROWS", "50000"))


def pytest_report_header(config):
    return f"scale-out corpus: {ROWS} rows, {reviews_mod.source()}"


@pytest.fixture(scope="session")
def ray_cluster():
    import ray
    import ray.data

    # Workers import this directory's helper modules (killers.py).
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": HERE}})
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def corpus():
    rows = reviews_mod.reviews(ROWS)
    print(f"corpus: {len(rows)} rows, {reviews_mod.source()}", file=sys.stderr)
    return rows


def classify_in_process(rows, model="default", database=":memory:", threads=2):
    """{id: (label, score)} from one classify over rows [(id, text, ...)] in
    this process: the reference."""
    conn = sqlite3.connect(database)
    try:
        sqlite_sentiment.load(conn)
        conn.execute("SELECT sentiment_config('threads', ?)", (threads,))
        conn.execute("CREATE TEMP TABLE ref_rows(id INTEGER PRIMARY KEY, text)")
        conn.executemany("INSERT INTO temp.ref_rows VALUES (?, ?)", [r[:2] for r in rows])
        return {i: (label, score) for i, label, score in conn.execute(
            "SELECT id, label, score FROM classify('SELECT id, text FROM temp.ref_rows', ?)",
            (model,))}
    finally:
        conn.close()


@pytest.fixture(scope="session")
def reference(corpus):
    return classify_in_process(corpus)


def assert_same_labels(got, want, what):
    """got, want: {id: (label, score)}; equal ids, labels, scores within 1e-5."""
    assert set(got) == set(want), f"{what}: ids differ: {len(set(got) ^ set(want))} not in both"
    bad = [i for i in want if got[i][0] != want[i][0]]
    assert not bad, f"{what}: {len(bad)} labels differ, e.g. id {bad[0]}: {got[bad[0]]} vs {want[bad[0]]}"
    worst = max((abs(got[i][1] - want[i][1]) for i in want if want[i][1] is not None), default=0.0)
    assert worst <= 1e-5, f"{what}: a score differs by {worst}"
    return worst
