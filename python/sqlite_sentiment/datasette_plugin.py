"""Datasette plugin: the sentiment functions on every connection, a clear
message when a sentiment query meets Datasette's time limit, and (with
datasette-enrichments) an enrichment that labels a column in batches.

    datasette install sqlite-sentiment          # or: pip install sqlite-sentiment
    datasette reviews.db
    # /reviews?sql=select comment, sentiment(comment), sentiment_score(comment) from reviews limit 20

Connections. prepare_connection loads the extension into each connection
Datasette opens for a database (read connections, the write connection,
_memory; not Datasette's own _internal one) and turns its progress line
off. Datasette lets visitors run their own SQL, so the functions the
extension marks SQLITE_DIRECTONLY, those that read files, write files or the
database, or change a connection's settings (sentiment_load, sentiment_save,
sentiment_drop, sentiment_export, sentiment_use, train, sentiment_config(key,
value)), are turned off on these connections with the extension's own
switch, sentiment_config('admin_functions', 'off'), which nothing turns back
on in that connection. A visitor's call then fails with the extension's
message, which names the function and the reason ("sentiment_export() is
turned off on this connection: ..."), also for SQL run inside classify's
source; the asgi_wrapper gives such a response status 403 (HTML page and
JSON alike). Queries can classify (sentiment(), sentiment_score(),
sentiment_probs(), classify, sentiment_evaluate(), sentiment_models, ...)
and read settings (sentiment_config(key)), nothing more. The site's owner
keeps them with the plugin setting admin_functions:

    datasette reviews.db -m metadata.json
    metadata.json: {"plugins": {"sqlite-sentiment": {"admin_functions": true}}}

Time limit. Datasette stops every query after sql_time_limit_ms (1 s by
default) with a progress handler; SQLite then ends the statement between
rows (classify between engine calls) and the connection stays usable.
Classifying costs time per row, so a sentiment query over a large table
meets that limit. handle_exception turns Datasette's "SQL query took too
long" (and classify's own "interrupted") into a message that says what
happened and what to do: the enrichment for a whole table, a LIMIT, or a
higher sql_time_limit_ms; HTML for a page, plain text in the JSON error of
a .json request.

Enrichment. With datasette-enrichments installed, "Sentiment labels"
appears under a table's "Enrich selected data": it classifies a column of
the selected rows, 256 at a time through classify, and writes the label
and score (and optionally the probabilities) to columns it adds, with
progress in the enrichment's job view (enrichment.py).

Explanations. A cell whose value is sentiment_explain()'s JSON (select
sentiment_explain(comment) as explanation from reviews) is shown as the
text with each token shaded by its attribution: green toward the label,
red against it, stronger for a bigger share (explanation.py), the label
and score above, each token's attribution in its tooltip. The text is
taken from the row when one of its columns is the text explained (select
comment, sentiment_explain(comment) ...), else rebuilt from the tokens.
The page /-/sentiment-explain?db=DB&table=TABLE&row=ROW&column=COLUMN
explains one row's text column (ROW as in the row's URL: its rowid or its
primary key values), with its clauses from sentiment_clauses() and their
labels; without row or column it is a form. Reached from a table's
actions menu ("Explain the sentiment of a row") and, on Datasette 1.0, a
row's actions menu (one entry per text column). It needs the view-table
permission; it runs one sentiment_explain() and one sentiment_clauses()
under the limit explain_time_limit_ms (plugin setting, default 30,000),
not sql_time_limit_ms: explaining costs about 3 x steps passes of the
model. sentiment_explain and sentiment_clauses are not admin functions:
visitors' SQL can call them.
"""
import html
import json
import re
import urllib.parse

from datasette import hookimpl

import sqlite_sentiment
from . import explanation

PLUGIN = "sqlite-sentiment"
_OUR_CALL = re.compile(r"\b(sentiment\w*|classify|train)\s*\(", re.I)
# What the extension says when a turned-off function is called.
_TURNED_OFF = b"is turned off on this connection"


@hookimpl
def prepare_connection(conn, database, datasette):
    if database == "_internal":
        return      # Datasette's own catalogue: shared-cache memory, not for users
    config = datasette.plugin_config(PLUGIN, database=database) or {}
    sqlite_sentiment.load(conn)
    # fetchall: stepped to the end, so no statement is left open on conn.
    conn.execute("SELECT sentiment_config('progress', 'off')").fetchall()
    if not config.get("admin_functions"):
        conn.execute("SELECT sentiment_config('admin_functions', 'off')").fetchall()


def _time_limit_text(datasette):
    limit = datasette.setting("sql_time_limit_ms")
    return (f"This query was stopped by Datasette's time limit: it ran longer than "
            f"sql_time_limit_ms ({limit:,} ms). SQLite stopped it cleanly; nothing was "
            "changed. Classifying text costs time for every row, so sentiment(), "
            "sentiment_score(), sentiment_probs() or classify over many rows does not fit "
            "in one web request. To label a whole table, use the Sentiment labels "
            "enrichment (datasette-enrichments), which writes label and score columns in "
            "the background; or classify fewer rows (a LIMIT or a WHERE); or raise the "
            "limit (datasette --setting sql_time_limit_ms 60000); for files, "
            "sqlite-sentiment label has no limit.")


def _wants_json(request):
    return request is not None and request.path.split("?")[0].endswith(".json")


def _time_limit_message(datasette, sql):
    limit = datasette.setting("sql_time_limit_ms")
    parts = [
        "<p><strong>This query was stopped by Datasette's time limit</strong>: it ran longer "
        f"than sql_time_limit_ms ({limit:,} ms). SQLite stopped it cleanly; nothing was changed.</p>",
        "<p>Classifying text costs time for every row, so <code>sentiment()</code>, "
        "<code>sentiment_score()</code>, <code>sentiment_probs()</code> or <code>classify</code> "
        "over many rows does not fit in one web request.</p>",
        "<p>What to do:</p><ul>"
        "<li>To label a whole table, use the <strong>Sentiment labels</strong> enrichment "
        "(the table's actions menu, <em>Enrich selected data</em>; needs datasette-enrichments): "
        "it classifies the rows in batches in the background and writes label and score "
        "columns, which then answer queries at once.</li>"
        "<li>Or classify fewer rows: add a <code>LIMIT</code> or a <code>WHERE</code>.</li>"
        "<li>Or raise the limit: <code>datasette --setting sql_time_limit_ms 60000 ...</code>; "
        "from the shell, <code>sqlite-sentiment label</code> labels a CSV, JSON Lines or "
        "Parquet file with no limit.</li></ul>",
    ]
    if sql:
        parts.append('<textarea style="width: 90%" readonly>' + html.escape(sql) + "</textarea>")
    return "".join(parts)


@hookimpl(tryfirst=True)
def handle_exception(datasette, request, exception):
    """Rewrites the message of a sentiment query's time-limit error (what to
    do): HTML for a page, plain text for a .json request. The default
    handler renders it."""
    try:
        from datasette.views.base import DatasetteError
    except ImportError:
        return None
    if not isinstance(exception, DatasetteError):
        return None
    message = str(getattr(exception, "message", "") or "")
    if getattr(exception, "title", None) != "SQL Interrupted":
        return None
    if not _OUR_CALL.search(html.unescape(message)):
        return None          # another slow query: Datasette's own message
    sql = request.args.get("sql") if request is not None else None
    if not sql:
        m = re.search(r"<textarea[^>]*>(.*?)</textarea>", message, re.S)
        sql = html.unescape(m.group(1)) if m else None
    if _wants_json(request):
        exception.message = _time_limit_text(datasette)
        exception.message_is_html = False
    else:
        exception.message = _time_limit_message(datasette, sql)
        exception.message_is_html = True
    exception.title = "Sentiment query stopped by the time limit"
    return None


@hookimpl
def asgi_wrapper(datasette):
    """Status 403 for a query that failed because it called a turned-off
    function (see the module's text): a 400 response is held, and its
    status changed when its body carries the extension's refusal."""

    def wrap(app):
        async def wrapped(scope, receive, send):
            if scope.get("type") != "http":
                return await app(scope, receive, send)
            start, chunks = None, []

            async def held(message):
                nonlocal start
                if message["type"] == "http.response.start" and message.get("status") == 400:
                    start = message
                    return
                if message["type"] != "http.response.body" or start is None:
                    return await send(message)
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                body = b"".join(chunks)
                status = 403 if _TURNED_OFF in body else start["status"]
                await send({**start, "status": status})
                await send({"type": "http.response.body", "body": body})

            await app(scope, receive, held)
        return wrapped
    return wrap


@hookimpl
def register_enrichments(datasette):
    try:
        from .enrichment import SentimentEnrichment
    except ImportError:        # datasette-enrichments is not installed
        return []
    return [SentimentEnrichment()]


# ---- explanations --------------------------------------------------------

EXPLAIN_PATH = "/-/sentiment-explain"
DEFAULT_EXPLAIN_LIMIT_MS = 30_000
MAX_PAGE_STEPS = 256
_METHODS = ("integrated_gradients", "gradient_x_input")


@hookimpl
def render_cell(row, value, column, table, database, datasette):
    """sentiment_explain()'s JSON as the shaded text (module text)."""
    if not isinstance(value, str) or not value.startswith("{"):
        return None
    e = explanation.parse(value)
    if e is None:
        return None
    candidates = []
    if row is not None:
        try:
            keys = list(row.keys())
            candidates = [row[k] for k in keys if k != column]
        except (AttributeError, TypeError):
            try:
                candidates = list(row)
            except TypeError:
                candidates = []
    text = explanation.pick_text(e, candidates)
    from markupsafe import Markup
    return Markup(explanation.to_html(e, text))


@hookimpl
def register_routes(datasette):
    return [(r"^/-/sentiment-explain$", explain_view)]


def explain_url(datasette, database, table, row=None, column=None, **extra):
    args = {"db": database, "table": table}
    if row is not None:
        args["row"] = row
    if column is not None:
        args["column"] = column
    args.update({k: v for k, v in extra.items() if v is not None})
    return datasette.urls.path(EXPLAIN_PATH) + "?" + urllib.parse.urlencode(args)


@hookimpl
def table_actions(datasette, actor, database, table, request):
    async def inner():
        db = datasette.get_database(database)
        if not await db.table_exists(table):
            return []            # a view: no row to point at
        return [{"href": explain_url(datasette, database, table),
                 "label": "Explain the sentiment of a row",
                 "description": "Token attributions and clause labels of one row's text"}]
    return inner


@hookimpl
def row_actions(datasette, actor, request, database, table, row):
    """Datasette 1.0's row actions menu: one entry per column whose value in
    this row is text."""
    async def inner():
        from datasette.utils import path_from_row_pks
        db = datasette.get_database(database)
        pks = await db.primary_keys(table)
        try:
            keys = list(row.keys())
        except AttributeError:
            return []
        use_rowid = not pks
        if use_rowid and "rowid" not in keys:
            return []
        ident = path_from_row_pks(row, pks, use_rowid)   # tilde-encoded, as in its URL
        links = []
        for k in keys:
            v = row[k]
            if k == "rowid" or k in pks or not isinstance(v, str) or not v.strip():
                continue
            if explanation.parse(v) is not None:
                continue
            links.append({"href": explain_url(datasette, database, table, ident, k),
                          "label": f"Explain the sentiment of {k}",
                          "description": "Token attributions and clause labels"})
        return links
    return inner


class _PageError(Exception):
    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


async def _check_visible(datasette, request, database, table):
    perms = [("view-table", (database, table)), ("view-database", database), "view-instance"]
    ensure = getattr(datasette, "ensure_permissions", None)
    if ensure is None:           # Datasette versions without it: the visibility check
        visible, _ = await datasette.check_visibility(request.actor, permissions=perms)
        if not visible:
            raise _PageError("You do not have permission to view this table", 403)
        return
    from datasette import Forbidden
    try:
        await ensure(request.actor, perms)
    except Forbidden:
        raise _PageError("You do not have permission to view this table", 403)


def _options(method, steps):
    opts = {}
    if method:
        if method not in _METHODS:
            raise _PageError("method must be integrated_gradients or gradient_x_input")
        opts["method"] = method
    if steps:
        try:
            n = int(steps)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_PAGE_STEPS:
            raise _PageError(f"steps must be a whole number from 1 to {MAX_PAGE_STEPS}")
        opts["steps"] = n
    return opts


def _run_explain(limit_ms, text, model, options):
    from datasette.utils import sqlite_timelimit

    def work(conn):
        with sqlite_timelimit(conn, limit_ms):
            e = conn.execute("SELECT sentiment_explain(?, ?, ?)",
                             (text, model, json.dumps(options))).fetchone()[0]
            clauses = conn.execute(
                'SELECT idx, clause, start, "end", label, score, probs '
                "FROM sentiment_clauses(?, ?)", (text, model)).fetchall()
        return e, [tuple(c) for c in clauses]
    return work


async def explain_view(datasette, request):
    args = request.args
    database, table = args.get("db"), args.get("table")
    try:
        if not database or not table:
            raise _PageError("Give db and table: " + EXPLAIN_PATH
                             + "?db=DB&table=TABLE&row=ROW&column=COLUMN")
        try:
            db = datasette.get_database(database)
        except KeyError:
            raise _PageError(f"No database named {database}", 404)
        await _check_visible(datasette, request, database, table)
        if not await db.table_exists(table):
            raise _PageError(f"No table named {table} in {database}", 404)
        columns = await db.table_columns(table)
        column, row_ident = args.get("column"), args.get("row") or args.get("rowid")
        model = args.get("model") or "default"
        options = _options(args.get("method"), args.get("steps"))
        if column is not None and column not in columns:
            raise _PageError(f"No column named {column} in {table}", 404)
        if not column or not row_ident:
            body = _form_html(datasette, database, table, columns, column, row_ident, model,
                              options)
            return await _page(datasette, request, "Explain the sentiment of a row", body)
        text = await _row_value(db, table, column, row_ident)
        limit = (datasette.plugin_config(PLUGIN, database=database) or {}).get(
            "explain_time_limit_ms", DEFAULT_EXPLAIN_LIMIT_MS)
        if not isinstance(text, str) or not text.strip():
            body = _row_head(datasette, database, table, row_ident, column) + (
                "<p>This value is not text (or is blank): there is nothing to explain.</p>")
            return await _page(datasette, request, "Sentiment explained", body)
        try:
            e_json, clauses = await db.execute_fn(_run_explain(limit, text, model, options))
        except Exception as ex:      # the extension's message: unknown model, interrupted
            msg = str(ex)
            if msg.endswith("interrupted"):
                msg = (f"Explaining this text took longer than explain_time_limit_ms "
                       f"({limit:,} ms); try method=gradient_x_input or fewer steps.")
            raise _PageError(msg, 400)
        e = explanation.parse(e_json) if e_json else None
        body = _row_head(datasette, database, table, row_ident, column)
        if e is None:
            body += "<p>The model finds no tokens in this text: nothing to explain.</p>"
        else:
            body += _explained_html(e, text, clauses, options, model)
        return await _page(datasette, request, "Sentiment explained", body)
    except _PageError as err:
        body = f'<p class="message-error">{html.escape(str(err))}</p>'
        return await _page(datasette, request, "Sentiment explained", body, err.status)


async def _row_value(db, table, column, ident):
    from datasette.utils import escape_sqlite, tilde_decode
    pks = await db.primary_keys(table)
    keys = pks or ["rowid"]
    values = [tilde_decode(v) for v in str(ident).split(",")]
    if len(values) != len(keys):
        raise _PageError(f"row {ident!r}: {table} is identified by "
                         f"{', '.join(keys)} ({len(keys)} value{'s' if len(keys) > 1 else ''})")
    where = " AND ".join(f"{escape_sqlite(k)} = :p{i}" for i, k in enumerate(keys))
    sql = f"SELECT {escape_sqlite(column)} FROM {escape_sqlite(table)} WHERE {where}"
    rows = (await db.execute(sql, {f"p{i}": v for i, v in enumerate(values)})).rows
    if not rows:
        raise _PageError(f"No row {ident} in {table}", 404)
    return rows[0][0]


_PAGE = """{% extends "base.html" %}
{% block title %}{{ title }}{% endblock %}
{% block content %}<h1>{{ title }}</h1>{{ body }}{% endblock %}"""


async def _page(datasette, request, title, body, status=200):
    from datasette.utils.asgi import Response
    from markupsafe import Markup
    template = datasette.jinja_env.from_string(_PAGE)
    page = await datasette.render_template(template, {"title": title, "body": Markup(body)},
                                           request=request)
    return Response.html(page, status=status)


def _row_head(datasette, database, table, ident, column):
    from datasette.utils import tilde_encode
    row_path = datasette.urls.table(database, table) + "/" + ",".join(
        tilde_encode(v) for v in str(ident).split(","))
    return (f'<p>Column <strong>{html.escape(column)}</strong> of row '
            f'<a href="{html.escape(row_path, quote=True)}">{html.escape(str(ident))}</a> in '
            f'<a href="{html.escape(datasette.urls.table(database, table), quote=True)}">'
            f"{html.escape(table)}</a></p>")


def _form_html(datasette, database, table, columns, column, ident, model, options):
    opts = "".join(
        f'<option value="{html.escape(c, quote=True)}"{" selected" if c == column else ""}>'
        f"{html.escape(c)}</option>" for c in columns)
    method = options.get("method", "integrated_gradients")
    methods = "".join(
        f'<option value="{m}"{" selected" if m == method else ""}>{m}</option>'
        for m in _METHODS)
    return (f'<form action="{html.escape(datasette.urls.path(EXPLAIN_PATH), quote=True)}" '
            'method="get" class="core">'
            f'<input type="hidden" name="db" value="{html.escape(database, quote=True)}">'
            f'<input type="hidden" name="table" value="{html.escape(table, quote=True)}">'
            f"<p>Table <strong>{html.escape(table)}</strong></p>"
            f'<p><label>Row (rowid or primary key, as in its URL) <input name="row" '
            f'value="{html.escape(ident or "", quote=True)}"></label></p>'
            f'<p><label>Text column <select name="column">{opts}</select></label></p>'
            f'<p><label>Model <input name="model" value="{html.escape(model, quote=True)}">'
            "</label></p>"
            f'<p><label>Method <select name="method">{methods}</select></label> '
            f'<label>Steps <input name="steps" size="4" '
            f'value="{options.get("steps", 32)}"></label></p>'
            '<p><input type="submit" value="Explain"></p></form>')


_CLAUSE_TINTS = {"positive": "#bbf7d0", "negative": "#fecaca"}


def _clause_tint(label):
    return _CLAUSE_TINTS.get(str(label).lower(), "#e5e7eb")


def _explained_html(e, text, clauses, options, model):
    label = str(e.get("label"))
    parts = [
        '<section class="sentiment-explain-tokens">',
        "<h2>Tokens</h2>",
        '<div style="font-size:1.4em">' + explanation.to_html(e, text) + "</div>",
        '<p style="font-size:0.85em;color:#4b5563">'
        f'<span style="background:#86efac;padding:0 0.3em">green</span>: pushes toward '
        f"<strong>{html.escape(label)}</strong>; "
        f'<span style="background:#fca5a5;padding:0 0.3em">red</span>: pushes against it; '
        "the stronger the colour, the bigger the token's share (hover for its value). "
        f"Model {html.escape(model)}; logit {e.get('logit', 0):.4f}, baseline logit "
        f"{e.get('baseline_logit', 0):.4f}, sum of attributions {e.get('sum', 0):.4f}.</p>",
        "</section>",
    ]
    if clauses:
        parts.append('<section class="sentiment-explain-clauses"><h2>Clauses</h2>'
                     '<div class="sentiment-clauses-text" style="line-height:2.2;'
                     'color:#111827;white-space:pre-wrap">')
        pos = 0
        for idx, clause, start, end, clabel, score, probs in clauses:
            if start > pos:
                parts.append(html.escape(text[pos:start]))
            p = _label_prob(clabel, score, probs)
            parts.append(
                f'<span class="sentiment-clause" data-label="{html.escape(str(clabel), quote=True)}"'
                f' style="background:{_clause_tint(clabel)};padding:0.1em 0.2em;'
                f'border-radius:3px" title="{html.escape(f"{clabel} {p}", quote=True)}">'
                f"{html.escape(text[start:end])}"
                f'<sup class="sentiment-badge" style="font-size:0.7em;color:#374151;'
                f'margin-left:0.2em">{html.escape(str(clabel))} {html.escape(p)}</sup></span>')
            pos = max(pos, end)
        if pos < len(text):
            parts.append(html.escape(text[pos:]))
        parts.append('</div><table class="rows-and-columns"><thead><tr><th>#</th>'
                     "<th>clause</th><th>label</th><th>probability</th></tr></thead><tbody>")
        for idx, clause, start, end, clabel, score, probs in clauses:
            parts.append(
                f"<tr><td>{idx}</td><td>{html.escape(str(clause))}</td>"
                f'<td><span style="background:{_clause_tint(clabel)};padding:0 0.3em">'
                f"{html.escape(str(clabel))}</span></td>"
                f"<td>{html.escape(_label_prob(clabel, score, probs))}</td></tr>")
        parts.append("</tbody></table></section>")
    parts.append('<details><summary>Every token</summary><table class="rows-and-columns">'
                 "<thead><tr><th>token</th><th>start</th><th>end</th><th>attribution</th>"
                 "</tr></thead><tbody>")
    for t in e.get("tokens") or []:
        parts.append(f"<tr><td>{html.escape(str(t.get('token')))}</td><td>{t['start']}</td>"
                     f"<td>{t['end']}</td><td>{t['attribution']:+.4f}</td></tr>")
    parts.append("</tbody></table></details>")
    return "".join(parts)


def _label_prob(label, score, probs):
    """The probability of the clause's own label: from probs, else score."""
    try:
        p = json.loads(probs)[label]
    except (TypeError, ValueError, KeyError):
        p = score
    return f"{p:.2f}" if isinstance(p, (int, float)) else ""
