"""The Datasette plugin through Datasette's own test client: the functions
on every connection, the admin functions turned off for visitors' SQL, the
time limit (sql_time_limit_ms) stopping a long sentiment query cleanly with
a message that says what to do, and the "Sentiment labels" enrichment
(datasette-enrichments) writing label and score columns in batches."""

import inspect
import json
import sqlite3
import time

import pytest

datasette_app = pytest.importorskip("datasette.app", reason="datasette not installed")
pytest.importorskip("pytest_asyncio", reason="pytest-asyncio not installed")
Datasette = datasette_app.Datasette

from conftest import POSITIVE, NEGATIVE, reference  # noqa: E402

pytestmark = pytest.mark.asyncio


def make_db(path, texts):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE reviews(id INTEGER PRIMARY KEY, comment TEXT, stars INTEGER)")
    conn.executemany("INSERT INTO reviews(comment, stars) VALUES (?, ?)",
                     [(t, i % 5 + 1) for i, t in enumerate(texts)])
    conn.commit()
    conn.close()


async def make_datasette(path, plugin_config=None, **settings):
    kw = {"settings": settings} if settings else {}
    if plugin_config is not None:
        plugins = {"plugins": {"sqlite-sentiment": plugin_config}}
        # Datasette 1.0 reads plugin settings from config, 0.x from metadata.
        if "config" in inspect.signature(Datasette.__init__).parameters:
            kw["config"] = plugins
        else:
            kw["metadata"] = plugins
    ds = Datasette([str(path)], **kw)
    # Datasette creates its _internal catalogue on the first request, while
    # datasette-enrichments' start-up task (started by that same request)
    # reads it: in a shared-cache memory database that can fail with
    # "database table is locked". Created here first, as a server has it
    # created by the time it is used.
    await ds.invoke_startup()
    await ds.refresh_schemas()
    return ds


@pytest.fixture
def db_path(tmp_path, texts):
    path = tmp_path / "reviews.db"
    make_db(path, texts)
    return path


async def test_plugin_listed(db_path):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/-/plugins.json")
    ours = [p for p in r.json() if p["name"] == "sqlite-sentiment"]
    assert ours, r.json()
    assert {"prepare_connection", "handle_exception", "asgi_wrapper"} <= set(ours[0]["hooks"])


async def test_functions_in_sql(db_path, texts, expected):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/reviews.json", params={
        "sql": "select id, sentiment(comment) as label, sentiment_score(comment) as score "
               "from reviews order by id", "_shape": "array"})
    assert r.status_code == 200, r.text
    rows = r.json()
    assert [x["label"] for x in rows] == [e[0] for e in expected]
    for x, e in zip(rows, expected):
        if e[1] is not None:
            assert x["score"] == pytest.approx(e[1], abs=1e-6)
    r = await ds.client.get("/reviews.json", params={
        "sql": "select id, label from classify('reviews', 'comment')", "_shape": "array"})
    assert [x["label"] for x in r.json()] == [e[0] for e in expected]
    r = await ds.client.get("/reviews.json", params={
        "sql": "select name, source from sentiment_models", "_shape": "array"})
    assert {"name": "default", "source": "builtin"} in r.json()


# Datasette turns on sqlite3's callback tracebacks: each refusal is logged.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_admin_functions_refused(db_path, tmp_path):
    ds = await make_datasette(db_path)
    target = tmp_path / "exported"
    for sql, name in ((f"select sentiment_export('default', '{target}')", "sentiment_export"),
                      ("select sentiment_config('threads', '1')", "sentiment_config"),
                      ("select sentiment_load('x', '/etc')", "sentiment_load"),
                      ("select sentiment_save('x')", "sentiment_save"),
                      ("select sentiment_drop('x', 1)", "sentiment_drop"),
                      ("select sentiment_use('x', 1)", "sentiment_use"),
                      ("select train('m', comment, stars) from reviews", "train"),
                      ("select * from classify('select 1, sentiment_export(''default'', "
                       f"''{target}'')')", "sentiment_export")):
        r = await ds.client.get("/reviews.json", params={"sql": sql})
        assert r.status_code == 403, (sql, r.text)
        # The visitor is told which function and why, in plain text.
        error = r.json()["error"]
        assert f"{name}() is turned off on this connection" in error, (sql, r.text)
        assert "admin_functions" in error and "<" not in error, error
    assert not target.exists()
    r = await ds.client.get("/reviews", params={"sql": "select sentiment_save('x')"})
    assert r.status_code == 403 and "sentiment_save() is turned off" in r.text, r.text
    # The connection still works.
    r = await ds.client.get("/reviews.json", params={
        "sql": "select sentiment('送得太慢了') as s", "_shape": "array"})
    assert r.status_code == 200, r.text
    # Reading a setting is still allowed, and so is everything that classifies.
    r = await ds.client.get("/reviews.json", params={
        "sql": "select sentiment_config('batch_size') as b, sentiment_tokens('好') as t",
        "_shape": "array"})
    assert r.status_code == 200 and int(r.json()[0]["b"]) > 0


async def test_admin_functions_when_turned_on(db_path):
    ds = await make_datasette(db_path, {"admin_functions": True})
    r = await ds.client.get("/reviews.json", params={
        "sql": "select sentiment_config('batch_size', '16') as b", "_shape": "array"})
    assert r.status_code == 200, r.text


@pytest.fixture
def big_db(tmp_path):
    # Several seconds of classification, far over a 100 ms limit.
    (tmp_path / "big").mkdir()
    path = tmp_path / "big" / "reviews.db"
    base = POSITIVE + NEGATIVE
    make_db(path, [f"{base[i % len(base)]}，第{i}条" for i in range(8000)])
    return path


@pytest.mark.parametrize("sql", [
    "select count(sentiment(comment)) from reviews",
    "select label, count(*) from classify('reviews', 'comment') group by label",
    "select count(*) from classify('reviews', 'comment')",
])
async def test_time_limit_stops_cleanly_with_advice(big_db, sql):
    ds = await make_datasette(big_db, sql_time_limit_ms=100)
    start = time.perf_counter()
    r = await ds.client.get("/reviews", params={"sql": sql})
    elapsed = time.perf_counter() - start
    assert r.status_code == 400, r.text
    assert "stopped by Datasette's time limit" in r.text, r.text
    assert "sql_time_limit_ms (100 ms)" in r.text
    assert "Sentiment labels" in r.text and "enrichment" in r.text
    assert "LIMIT" in r.text
    # Stopped within an engine call of the limit, not after the whole table.
    assert elapsed < 2.0, elapsed
    # The JSON API says the same, as text, not HTML.
    r = await ds.client.get("/reviews.json", params={"sql": sql})
    assert r.status_code == 400 and "time limit" in r.json()["error"]
    assert "<" not in r.json()["error"] and "LIMIT" in r.json()["error"], r.json()
    # The connection still works.
    r = await ds.client.get("/reviews.json", params={
        "sql": "select sentiment('送得太慢了') as s", "_shape": "array"})
    assert r.status_code == 200 and r.json() == [{"s": reference(["送得太慢了"])[0][0]}]


async def test_other_slow_queries_keep_datasettes_message(big_db):
    ds = await make_datasette(big_db, sql_time_limit_ms=50)
    sql = ("with recursive c(x) as (select 1 union all select x + 1 from c) "
           "select count(*) from c")
    r = await ds.client.get("/reviews", params={"sql": sql})
    assert r.status_code == 400
    assert "SQL query took too long" in r.text and "Sentiment labels" not in r.text


# ---- the enrichment -----------------------------------------------------------

def root_cookies(ds):
    return {"ds_actor": ds.sign({"a": {"id": "root"}}, "actor")}


async def start_enrichment(ds, query="", **form):
    pytest.importorskip("datasette_enrichments", reason="datasette-enrichments not installed")
    cookies = root_cookies(ds)
    path = "/-/enrich/reviews/reviews/sentiment" + query
    r = await ds.client.get(path, cookies=cookies)
    assert r.status_code == 200, r.text
    assert "Sentiment labels" in r.text
    cookies["ds_csrftoken"] = r.cookies["ds_csrftoken"]
    data = {"source_column": "comment", "model": "default", "label_column": "sentiment",
            "score_column": "sentiment_score", "probs_column": "",
            "csrftoken": cookies["ds_csrftoken"], **form}
    r = await ds.client.post(path, data=data, cookies=cookies)
    return r, cookies


async def test_enrichment_in_picker(db_path):
    pytest.importorskip("datasette_enrichments", reason="datasette-enrichments not installed")
    ds = await make_datasette(db_path)
    r = await ds.client.get("/-/enrich/reviews/reviews", cookies=root_cookies(ds))
    assert r.status_code == 200 and "Sentiment labels" in r.text, r.text


async def test_enrichment_labels_all_rows(tmp_path):
    from datasette_enrichments.utils import wait_for_job
    texts = [(POSITIVE + NEGATIVE)[i % 16] + ("" if i < 16 else f" #{i}") for i in range(600)]
    texts[7] = None
    texts[8] = "  "
    path = tmp_path / "reviews.db"
    make_db(path, texts)
    ds = await make_datasette(path)
    r, cookies = await start_enrichment(ds, probs_column="sentiment_probs")
    assert r.status_code == 302, r.text
    job_id = int(r.headers["location"].split("_enrichment_job=")[1])
    await wait_for_job(ds, job_id, database="reviews", timeout=60)

    conn = sqlite3.connect(path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(reviews)")]
    assert cols == ["id", "comment", "stars", "sentiment", "sentiment_score", "sentiment_probs"]
    got = conn.execute("SELECT comment, sentiment, sentiment_score, sentiment_probs "
                       "FROM reviews ORDER BY id").fetchall()
    want = reference(texts)
    assert [g[0] for g in got] == texts
    for (_, label, score, probs), (wl, ws, wp) in zip(got, want):
        assert label == wl
        if wl is None:
            assert score is None and probs is None
        else:
            assert score == pytest.approx(ws, abs=1e-5)
            assert json.loads(probs) == pytest.approx(wp, abs=1e-5)

    # The job view: finished, every row a success, more than one batch.
    r = await ds.client.get(f"/-/enrichment-jobs/reviews/{job_id}", cookies=cookies)
    progress = r.json()
    assert progress["is_complete"] and progress["total"] == 600
    assert progress["sections"] == [{"type": "success", "count": 600}], progress
    job = conn.execute("SELECT status, done_count, error_count FROM _enrichment_jobs "
                       "WHERE id = ?", (job_id,)).fetchone()
    assert job == ("finished", 600, 0)
    batches = conn.execute("SELECT count(*) FROM _enrichment_progress WHERE job_id = ? AND "
                           "success_count > 0", (job_id,)).fetchone()[0]
    assert batches == 3          # 600 rows, 256 a batch
    r = await ds.client.get(f"/-/enrich/reviews/-/jobs/{job_id}", cookies=cookies)
    assert r.status_code == 200 and "Sentiment labels" in r.text


async def test_enrichment_only_selected_rows(db_path, texts):
    from datasette_enrichments.utils import wait_for_job
    ds = await make_datasette(db_path)
    r, _ = await start_enrichment(ds, query="?stars=1", label_column="mood",
                                  score_column="p")
    assert r.status_code == 302, r.text
    job_id = int(r.headers["location"].split("_enrichment_job=")[1])
    await wait_for_job(ds, job_id, database="reviews", timeout=30)
    conn = sqlite3.connect(db_path)
    rows = conn.execute("SELECT comment, stars, mood, p FROM reviews ORDER BY id").fetchall()
    want = reference([r[0] for r in rows])
    for (text, stars, mood, p), (wl, ws, _) in zip(rows, want):
        if stars == 1:
            assert mood == wl
        else:
            assert mood is None and p is None


async def test_enrichment_form_rejects_bad_columns(db_path):
    ds = await make_datasette(db_path)
    r, _ = await start_enrichment(ds, label_column="id")
    assert r.status_code == 200 and "is the primary key" in r.text
    r, _ = await start_enrichment(ds, label_column="x", score_column="x")
    assert r.status_code == 200 and "its own name" in r.text
    r, _ = await start_enrichment(ds, label_column="comment")
    assert r.status_code == 200 and "must differ from the text column" in r.text
