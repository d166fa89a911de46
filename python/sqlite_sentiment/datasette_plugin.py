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
value)), are replaced on these connections by one that always fails. Python's
sqlite3 reports any failing Python function as "user-defined function raised
exception", so the plugin's asgi_wrapper rewrites that error, in the JSON of a
.json request and on the HTML page alike, into the reason, with status 403:
"sentiment_export() is turned off on this Datasette: ...", for a request
whose SQL calls a function refused in the last seconds. Queries can classify (sentiment(), sentiment_score(),
sentiment_probs(), classify, sentiment_evaluate(), sentiment_models, ...)
and read settings (sentiment_config(key)), nothing more. The site's owner
keeps them with the plugin setting admin_functions:

    datasette reviews.db -m metadata.json
    metadata.json: {"plugins": {"sqlite-sentiment": {"admin_functions": true}}}

The functions to replace are found with PRAGMA function_list (those the
extension registered, with the SQLITE_DIRECTONLY flag), so a function added
later is covered too; a fixed list serves when the pragma is unavailable.
Replacing (same name and number of arguments) works on every connection
and for SQL run inside classify's source; an authorizer would not: the
extension installs its own while it prepares a persistent classify table's
stored source, and SQLite keeps one authorizer per connection.

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
import json
import re
import threading
import time
import urllib.parse

from datasette import hookimpl

import sqlite_sentiment

PLUGIN = "sqlite-sentiment"
SQLITE_DIRECTONLY = 0x80000

# Used when PRAGMA function_list is not available: the extension's
# SQLITE_DIRECTONLY functions, (name, number of arguments).
_KNOWN_DIRECTONLY = [
    ("sentiment_load", 2), ("sentiment_save", 1), ("sentiment_save", 2),
    ("sentiment_drop", 1), ("sentiment_drop", 2), ("sentiment_export", 2),
    ("sentiment_use", 2), ("sentiment_config", 2), ("train", 3), ("train", 4),
]
_OUR_CALL = re.compile(r"\b(sentiment\w*|classify|train)\s*\(", re.I)


def _function_list(conn):
    try:
        return {(r[0], r[1], r[2]) for r in conn.execute(
            "SELECT name, narg, flags FROM pragma_function_list")}
    except Exception:
        return None


# Refusals of the last seconds: function name -> when. The query runs in a
# worker thread, the response is rewritten on the event loop: this is how
# the reason crosses over.
_REFUSED = {}
_REFUSED_LOCK = threading.Lock()
_REFUSAL_SECONDS = 30


def _refusal(name):
    def refuse(*args):
        with _REFUSED_LOCK:
            _REFUSED[name] = time.monotonic()
        raise PermissionError(f"{name}() is turned off in Datasette: it reads or writes files, "
                              "stores models or changes settings (plugin setting "
                              "sqlite-sentiment admin_functions)")
    return refuse


def _refused_in(sql):
    """The turned-off functions that sql calls and that refused lately."""
    now = time.monotonic()
    with _REFUSED_LOCK:
        recent = [n for n, t in _REFUSED.items() if now - t < _REFUSAL_SECONDS]
    return [n for n in sorted(recent) if re.search(rf"\b{re.escape(n)}\s*\(", sql, re.I)]


def _refusal_message(names):
    calls = ", ".join(f"{n}()" for n in names)
    return (f"{calls} {'is' if len(names) == 1 else 'are'} turned off on this Datasette: "
            "such functions read or write files, store models or change settings, which "
            "visitors' SQL may not do. The site's owner can turn them on with the plugin "
            "setting admin_functions of sqlite-sentiment.")


def _replace_admin_functions(conn, before):
    after = _function_list(conn)
    if before is not None and after:
        ours = {(name, narg) for name, narg, flags in after - before
                if flags & SQLITE_DIRECTONLY}
    else:
        ours = set(_KNOWN_DIRECTONLY)
    for name, narg in sorted(ours):
        conn.create_function(name, narg, _refusal(name))


@hookimpl
def prepare_connection(conn, database, datasette):
    if database == "_internal":
        return      # Datasette's own catalogue: shared-cache memory, not for users
    config = datasette.plugin_config(PLUGIN, database=database) or {}
    before = _function_list(conn)
    sqlite_sentiment.load(conn)
    # fetchall: stepped to the end, so no statement is left open on conn.
    conn.execute("SELECT sentiment_config('progress', 'off')").fetchall()
    if not config.get("admin_functions"):
        _replace_admin_functions(conn, before)


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


_UDF_ERROR = "user-defined function raised exception"
_ADMIN_NAMES = sorted({n for n, _ in _KNOWN_DIRECTONLY})


def _rewrite_refusal(status, headers, body, sql):
    """(status, body) with the reason in place of Python's generic error,
    or None to leave the response as it is."""
    if status != 400 or _UDF_ERROR.encode() not in body:
        return None
    names = _refused_in(sql)
    if not names:
        return None
    text = _refusal_message(names)
    ctype = dict((k.lower(), v) for k, v in headers).get(b"content-type", b"")
    if ctype.startswith(b"application/json"):
        try:
            data = json.loads(body)
        except ValueError:
            return None
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, str) or _UDF_ERROR not in error:
            return None
        data["error"] = error.replace(_UDF_ERROR, text)
        if "status" in data:
            data["status"] = 403
        return 403, json.dumps(data).encode()
    return 403, body.replace(_UDF_ERROR.encode(), html.escape(text).encode())


@hookimpl
def asgi_wrapper(datasette):
    """Says why a turned-off function failed (see the module's text): for a
    request whose sql= calls one, the response is held and its generic
    error replaced by the reason."""
    names = re.compile(r"\b(" + "|".join(map(re.escape, _ADMIN_NAMES)) + r")\s*\(", re.I)

    def wrap(app):
        async def wrapped(scope, receive, send):
            if scope.get("type") != "http":
                return await app(scope, receive, send)
            query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
            sql = " ".join(query.get("sql", []))
            if not sql or not names.search(sql):
                return await app(scope, receive, send)
            start, chunks = None, []

            async def held(message):
                nonlocal start
                if message["type"] == "http.response.start":
                    start = message
                    return
                if message["type"] != "http.response.body" or start is None:
                    return await send(message)
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                body = b"".join(chunks)
                status, headers = start["status"], list(start.get("headers", []))
                new = _rewrite_refusal(status, headers, body, sql)
                if new is not None:
                    status, body = new
                    headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
                    headers.append((b"content-length", str(len(body)).encode()))
                await send({**start, "status": status, "headers": headers})
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
