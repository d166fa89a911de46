"""Explanations in Datasette, through its test client: a cell holding
sentiment_explain()'s JSON shown as the shaded text (from the row's text
column when it has it, else rebuilt from the tokens), the
/-/sentiment-explain page for one row (token shading and sentiment_clauses'
labels, equal to the extension's answers in plain SQL), its form, its
errors, its permission check and its time limit, the table and row action
links, and both functions open to visitors' SQL with the admin functions
turned off."""

import html
import json
import re
import sqlite3

import pytest

datasette_app = pytest.importorskip("datasette.app", reason="datasette not installed")
pytest.importorskip("pytest_asyncio", reason="pytest-asyncio not installed")

import sqlite_sentiment  # noqa: E402
from sqlite_sentiment import datasette_plugin  # noqa: E402
from test_datasette_plugin import make_datasette  # noqa: E402

pytestmark = pytest.mark.asyncio

TEXTS = ["房间很脏，服务也差", "环境很好，但是服务太差了", '<b>"差"</b> & <script>alert(1)</script>',
         "   ", "  屏幕清晰， 电池耐用，就是有点重 "]


def explanation_of(tokens, label="negative", score=0.9):
    return json.dumps({"label": label, "score": score, "method": "integrated_gradients",
                       "steps": 32, "logit": 1.0, "baseline_logit": 0.0, "sum": 1.0,
                       "truncated": False, "tokens": tokens}, ensure_ascii=False)


def char_tokens(text, attributions):
    spans = [(i, i + 1) for i, c in enumerate(text) if not c.isspace()]
    return [{"token": text[s:e], "start": s, "end": e, "attribution": a}
            for (s, e), a in zip(spans, attributions)]


@pytest.fixture
def db_path(tmp_path):
    path = tmp_path / "reviews.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE reviews(id INTEGER PRIMARY KEY, comment TEXT, stars INTEGER)")
    conn.executemany("INSERT INTO reviews(comment, stars) VALUES (?, ?)",
                     [(t, i + 1) for i, t in enumerate(TEXTS)])
    # Stored explanations, written here in the extension's format.
    conn.execute("CREATE TABLE stored(id INTEGER PRIMARY KEY, comment TEXT, explanation TEXT)")
    text = "  房间很脏，服务 也差! "
    attrs = [0.01, 0.1, 0.2, 0.9, 0.0, 0.05, -0.3, -0.05, 0.5, 0.02]
    conn.execute("INSERT INTO stored VALUES (1, ?, ?)",
                 (text, explanation_of(char_tokens(text, attrs))))
    conn.execute("CREATE TABLE pairs(a TEXT, b TEXT, comment TEXT, PRIMARY KEY (a, b))")
    conn.execute("INSERT INTO pairs VALUES ('x,1', 'y/2', '服务太差了')")
    conn.commit()
    conn.close()
    return path


def explanation_texts(page):
    """The visible text of every explanation element on a page."""
    out = []
    for m in re.finditer(r'<div class="sentiment-explanation-text"[^>]*>(.*?)</div>', page,
                         re.S):
        out.append(html.unescape(re.sub(r"<[^>]+>", "", m.group(1))))
    return out


def token_spans(page):
    return re.findall(r'<span class="sentiment-token sentiment-(\w+)" style="background-color:'
                      r'(#[0-9a-f]{6});[^"]*" title="([^"]*)" data-attribution="([^"]*)">'
                      r"([^<]*)</span>", page)


def reference_explain(text, options=None):
    c = sqlite3.connect(":memory:")
    sqlite_sentiment.load(c)
    e = c.execute("SELECT sentiment_explain(?, 'default', ?)",
                  (text, json.dumps(options or {}))).fetchone()[0]
    clauses = c.execute('SELECT idx, clause, start, "end", label, score, probs '
                        "FROM sentiment_clauses(?)", (text,)).fetchall()
    return json.loads(e), clauses


async def test_hooks_listed(db_path):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/-/plugins.json")
    hooks = set(next(p for p in r.json() if p["name"] == "sqlite-sentiment")["hooks"])
    assert {"render_cell", "register_routes", "table_actions"} <= hooks


async def test_stored_explanation_cell_uses_the_rows_text(db_path):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/reviews/stored")
    assert r.status_code == 200
    assert explanation_texts(r.text) == ["  房间很脏，服务 也差! "]
    spans = token_spans(r.text)
    assert [s[4] for s in spans] == list("房间很脏，服务也差!")
    by = {s[4]: s for s in spans}
    assert by["脏"][:2] == ("toward", "#86efac")            # the largest: full green
    assert by["也"][0] == "against" and by["也"][1] != "#ffffff"
    assert by["，"][:2] == ("neutral", "#ffffff")
    assert html.unescape(by["脏"][2]) == "脏: +0.9000 (toward negative)"
    assert "rebuilt from tokens" not in r.text
    # The JSON API is untouched.
    r = await ds.client.get("/reviews/stored.json?_shape=array")
    assert json.loads(r.json()[0]["explanation"])["label"] == "negative"


async def test_query_column_with_and_without_text(db_path):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/reviews", params={
        "sql": "select comment, sentiment_explain(comment) as explanation from reviews "
               "where id in (1, 2, 5) order by id"})
    assert r.status_code == 200, r.text
    assert explanation_texts(r.text) == [TEXTS[0], TEXTS[1], TEXTS[4]]
    assert len(token_spans(r.text)) >= len("房间很脏，服务也差环境很好，但是服务太差了")
    # Without the text column: the JSON's own "text", so nothing is rebuilt.
    r = await ds.client.get("/reviews", params={
        "sql": "select sentiment_explain(comment) as e from reviews where id in (1, 2)"})
    assert r.status_code == 200, r.text
    assert explanation_texts(r.text) == TEXTS[:2]
    assert "rebuilt from tokens" not in r.text
    # Escaped, whatever the text holds.
    r = await ds.client.get("/reviews", params={
        "sql": "select comment, sentiment_explain(comment) as e from reviews where id = 3"})
    assert "<script>alert" not in r.text and "<b>" not in r.text
    assert explanation_texts(r.text) == [TEXTS[2]]


async def test_classify_explanation_column(db_path):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/reviews", params={
        "sql": "select r.comment, c.label, c.explanation from classify('select id, comment "
               "from reviews where id in (1, 2)') c join reviews r on r.id = c.id order by r.id"})
    assert r.status_code == 200, r.text
    assert explanation_texts(r.text) == TEXTS[:2]
    assert "rebuilt from tokens" not in r.text


async def test_other_cells_untouched(db_path):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/reviews", params={
        "sql": "select sentiment_probs('好') as p, '{\"tokens\":1}' as q"})
    assert r.status_code == 200 and "sentiment-explanation" not in r.text


async def test_explain_page(db_path):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/-/sentiment-explain",
                            params={"db": "reviews", "table": "reviews", "row": "2",
                                    "column": "comment"})
    assert r.status_code == 200, r.text
    want, clauses = reference_explain(TEXTS[1])
    assert explanation_texts(r.text) == [TEXTS[1]]
    spans = token_spans(r.text)
    assert [float(s[3]) for s in spans] == pytest.approx(
        [t["attribution"] for t in want["tokens"]], abs=1e-5)
    assert f'<strong class="sentiment-label">{want["label"]}</strong>' in r.text
    # The clauses, each with its label and the probability of that label.
    got = re.findall(r'<span class="sentiment-clause" data-label="([^"]*)"[^>]*>([^<]*)'
                     r'<sup class="sentiment-badge"[^>]*>([^<]*)</sup>', r.text)
    assert [(g[0], g[1]) for g in got] == [(c[4], c[1]) for c in clauses]
    for g, c in zip(got, clauses):
        assert g[2] == f"{c[4]} {json.loads(c[6])[c[4]]:.2f}"
    assert len(clauses) == 2
    assert 'href="/reviews/reviews/2"' in r.text


async def test_explain_page_escapes_and_keeps_gaps(db_path):
    ds = await make_datasette(db_path)
    for row, text in ((3, TEXTS[2]), (5, TEXTS[4])):
        r = await ds.client.get("/-/sentiment-explain", params={
            "db": "reviews", "table": "reviews", "row": str(row), "column": "comment",
            "method": "gradient_x_input"})
        assert r.status_code == 200, r.text
        assert "<script>alert" not in r.text and "<b>" not in r.text
        assert explanation_texts(r.text) == [text]
        assert "gradient × input" in r.text


async def test_explain_page_composite_key_and_blank(db_path):
    ds = await make_datasette(db_path)
    from datasette.utils import tilde_encode
    row = tilde_encode("x,1") + "," + tilde_encode("y/2")
    r = await ds.client.get("/-/sentiment-explain", params={
        "db": "reviews", "table": "pairs", "row": row, "column": "comment", "steps": "8"})
    assert r.status_code == 200, r.text
    assert explanation_texts(r.text) == ["服务太差了"]
    assert "integrated gradients, 8 steps" in r.text
    r = await ds.client.get("/-/sentiment-explain", params={
        "db": "reviews", "table": "reviews", "row": "4", "column": "comment"})
    assert r.status_code == 200 and "nothing to explain" in r.text


async def test_explain_form(db_path):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/-/sentiment-explain", params={"db": "reviews", "table": "reviews"})
    assert r.status_code == 200
    assert '<select name="column">' in r.text and 'name="row"' in r.text
    assert '<option value="comment">comment</option>' in r.text


@pytest.mark.parametrize("params,status,message", [
    ({}, 400, "Give db and table"),
    ({"db": "nope", "table": "reviews"}, 404, "No database named nope"),
    ({"db": "reviews", "table": "<nope>"}, 404, "No table named &lt;nope&gt;"),
    ({"db": "reviews", "table": "reviews", "row": "1", "column": "<x>"}, 404,
     "No column named &lt;x&gt;"),
    ({"db": "reviews", "table": "reviews", "row": "99", "column": "comment"}, 404, "No row 99"),
    ({"db": "reviews", "table": "pairs", "row": "1", "column": "comment"}, 400,
     "identified by a, b"),
    ({"db": "reviews", "table": "reviews", "row": "1", "column": "comment", "steps": "0"}, 400,
     "steps must be a whole number"),
    ({"db": "reviews", "table": "reviews", "row": "1", "column": "comment", "method": "x"}, 400,
     "method must be"),
    ({"db": "reviews", "table": "reviews", "row": "1", "column": "comment",
      "model": "<nope>"}, 400, "no model named &#x27;&lt;nope&gt;&#x27;"),
])
async def test_explain_page_errors(db_path, params, status, message):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/-/sentiment-explain", params=params)
    assert r.status_code == status, r.text
    assert message in r.text, r.text
    assert "<nope>" not in r.text and "<x>" not in r.text


async def test_explain_page_time_limit(db_path):
    ds = await make_datasette(db_path, {"explain_time_limit_ms": 1})
    r = await ds.client.get("/-/sentiment-explain", params={
        "db": "reviews", "table": "reviews", "row": "1", "column": "comment", "steps": "256"})
    assert r.status_code == 400 and "explain_time_limit_ms (1 ms)" in r.text, r.text
    # The connection still works.
    r = await ds.client.get("/reviews.json", params={"sql": "select sentiment('差') as s",
                                                     "_shape": "array"})
    assert r.status_code == 200


async def test_explain_page_needs_view_permission(db_path):
    ds = await make_datasette(db_path)
    ds._metadata_local = {"databases": {"reviews": {"tables": {"reviews": {
        "allow": {"id": "root"}}}}}}
    r = await ds.client.get("/-/sentiment-explain", params={
        "db": "reviews", "table": "reviews", "row": "1", "column": "comment"})
    assert r.status_code == 403, r.text
    assert TEXTS[0] not in r.text
    cookies = {"ds_actor": ds.sign({"a": {"id": "root"}}, "actor")}
    r = await ds.client.get("/-/sentiment-explain", params={
        "db": "reviews", "table": "reviews", "row": "1", "column": "comment"}, cookies=cookies)
    assert r.status_code == 200, r.text


async def test_table_action_link(db_path):
    ds = await make_datasette(db_path)
    r = await ds.client.get("/reviews/reviews")
    assert "Explain the sentiment of a row" in r.text
    assert html.escape("/-/sentiment-explain?db=reviews&table=reviews") in r.text


async def test_row_actions(db_path):
    ds = await make_datasette(db_path)
    conn = sqlite3.connect(db_path)
    conn.row_factory = sqlite3.Row
    row = conn.execute("SELECT rowid, * FROM reviews WHERE id = 2").fetchone()
    links = await datasette_plugin.row_actions(ds, None, None, "reviews", "reviews", row)()
    assert [l["label"] for l in links] == ["Explain the sentiment of comment"]
    assert links[0]["href"] == "/-/sentiment-explain?db=reviews&table=reviews&row=2&column=comment"
    row = conn.execute("SELECT * FROM pairs").fetchone()
    links = await datasette_plugin.row_actions(ds, None, None, "reviews", "pairs", row)()
    r = await ds.client.get(links[-1]["href"])
    assert r.status_code == 200 and explanation_texts(r.text) == ["服务太差了"], r.text


async def test_visitors_may_explain(db_path):
    ds = await make_datasette(db_path)          # admin functions off
    r = await ds.client.get("/reviews.json", params={
        "sql": "select sentiment_explain(comment) as e from reviews where id = 1",
        "_shape": "array"})
    assert r.status_code == 200, r.text
    assert json.loads(r.json()[0]["e"])["tokens"]
    r = await ds.client.get("/reviews.json", params={
        "sql": "select clause, label from sentiment_clauses('屏幕清晰，电池耐用')",
        "_shape": "array"})
    assert r.status_code == 200 and [x["clause"] for x in r.json()] == ["屏幕清晰", "电池耐用"]
