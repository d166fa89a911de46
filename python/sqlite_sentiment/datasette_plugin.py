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
"""
import html
import re

from datasette import hookimpl

import sqlite_sentiment

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
