"""sqlite-utils plugin: every connection sqlite-utils opens gets the
sentiment functions (the prepare_connection hook).

    sqlite-utils install sqlite-sentiment        # or: pip install sqlite-sentiment
    sqlite-utils query reviews.db "select comment, sentiment(comment) from reviews"
    sqlite-utils query reviews.db "select id, label, score from classify('reviews', 'comment')"

    import sqlite_utils
    db = sqlite_utils.Database("reviews.db")     # plugins run unless execute_plugins=False
    db.execute("select sentiment('房间很干净')").fetchone()

Registered by the entry point sqlite_sentiment in the group sqlite_utils of
this package's metadata; sqlite-utils alone imports this module.
"""
from sqlite_utils import hookimpl

import sqlite_sentiment


@hookimpl
def prepare_connection(conn):
    sqlite_sentiment.load(conn)
