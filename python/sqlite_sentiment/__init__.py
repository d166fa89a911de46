"""sqlite-sentiment: Chinese text classification inside SQLite.

The package ships the sentiment SQLite extension (sentiment.so, with its
built-in review-sentiment model) and the shared libraries it needs:

    import sqlite3, sqlite_sentiment
    conn = sqlite3.connect("reviews.db")
    sqlite_sentiment.load(conn)
    conn.execute("SELECT sentiment('房间很干净')").fetchone()   # ('positive',)

load() works with any DB-API connection that can load SQLite extensions:
Python's sqlite3, sqlean.py (sqlean.connect) and pysqlite3.
"""

import os

from ._version import __version__

__all__ = ["load", "loadable_path", "ExtensionLoadingUnavailable", "__version__"]

_HERE = os.path.dirname(os.path.abspath(__file__))

_NO_LOADING = (
    "sqlite_sentiment.load(): this connection's SQLite module cannot load "
    "extensions ({kind} has no enable_load_extension; Python builds such as "
    "some pyenv and python.org ones are compiled without it). Use a module that "
    "can: `pip install sqlean.py` then `import sqlean; conn = sqlean.connect(path)`, "
    "or `pip install pysqlite3` (pysqlite3-binary on Linux) then "
    "`from pysqlite3 import dbapi2 as sqlite3`; or a Python built with "
    "--enable-loadable-sqlite-extensions (Debian's and Ubuntu's python3 are)."
)


class ExtensionLoadingUnavailable(RuntimeError):
    """The connection's SQLite module was built without extension loading."""


def loadable_path():
    """Path of the extension without its .so suffix, for load_extension()
    or the sqlite3 shell's .load (SQLite adds the suffix)."""
    return os.path.join(_HERE, "sentiment")


def load(conn):
    """Loads the extension into conn, then disables extension loading again.

    Raises ExtensionLoadingUnavailable when conn's module cannot load
    extensions, naming modules that can."""
    enable = getattr(conn, "enable_load_extension", None)
    if enable is None:
        raise ExtensionLoadingUnavailable(
            _NO_LOADING.format(kind=type(conn).__module__ + "." + type(conn).__qualname__))
    enable(True)
    try:
        conn.load_extension(loadable_path())
    finally:
        enable(False)
