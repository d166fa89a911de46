"""sentiment_embed() BLOBs in sqlite-vec (scripts/test-wheel.sh installs the
sqlite-vec wheel from PyPI when it can; without it these tests skip and say
why). Our BLOB is little-endian float32, the format vec_distance_cosine and
vec0 tables read: the distances sqlite-vec computes on it must be the ones
computed here from the unpacked floats."""

import json
import math
import os
import re
import sqlite3
import struct

import pytest

import sqlite_sentiment

try:
    import sqlite_vec
except ImportError as e:  # the reason is printed by pytest -rs
    sqlite_vec = None
    WHY = "sqlite-vec is not installed (pip install sqlite-vec): %s" % e

TEXTS = ["房间很干净，前台服务热情", "等了两个小时才送到，饭菜全凉了",
         "屏幕清晰，电池耐用", "客服态度很差"]


@pytest.fixture
def conn():
    if sqlite_vec is None:
        pytest.skip(WHY)
    c = sqlite3.connect(":memory:")
    sqlite_sentiment.load(c)
    c.enable_load_extension(True)
    sqlite_vec.load(c)
    yield c
    c.close()


def unpack(blob):
    assert len(blob) % 4 == 0
    return struct.unpack("<%df" % (len(blob) // 4), blob)


def cosine_distance(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return 1.0 - dot / (na * nb)


def test_vec_reads_our_blobs(conn):
    blob, = conn.execute("SELECT sentiment_embed(?)", (TEXTS[0],)).fetchone()
    dim = len(blob) // 4
    assert conn.execute("SELECT vec_length(?)", (blob,)).fetchone() == (dim,)
    # vec_to_json shows the same floats we packed (printed with 6 decimals:
    # compare within that, not by rounding, which differs at a boundary)
    js, = conn.execute("SELECT vec_to_json(?)", (blob,)).fetchone()
    shown, packed = json.loads(js), unpack(blob)
    assert len(shown) == len(packed) == dim
    assert max(abs(a - b) for a, b in zip(shown, packed)) < 1e-5


def test_vec_distance_cosine(conn):
    embs = [conn.execute("SELECT sentiment_embed(?)", (t,)).fetchone()[0] for t in TEXTS]
    for a in embs:
        for b in embs:
            got, = conn.execute("SELECT vec_distance_cosine(?, ?)", (a, b)).fetchone()
            assert abs(got - cosine_distance(unpack(a), unpack(b))) < 1e-5
    same, = conn.execute("SELECT vec_distance_cosine(sentiment_embed(?), sentiment_embed(?))",
                         (TEXTS[1], TEXTS[1])).fetchone()
    assert abs(same) < 1e-6


def test_vec0_knn_from_classify(conn):
    conn.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO docs(body) VALUES (?)", [(t,) for t in TEXTS])
    dim = conn.execute("SELECT length(sentiment_embed('好')) / 4").fetchone()[0]
    conn.execute("CREATE VIRTUAL TABLE vec_docs USING vec0(embedding float[%d])" % dim)
    conn.execute("INSERT INTO vec_docs(rowid, embedding) "
                 "SELECT id, embedding FROM classify('docs', 'body')")
    for i, t in enumerate(TEXTS, 1):
        rows = conn.execute("SELECT rowid FROM vec_docs WHERE embedding MATCH sentiment_embed(?) "
                            "AND k = 1 ORDER BY distance", (t,)).fetchall()
        assert rows == [(i,)]


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def readme_knn_query():
    """The README's k-nearest query over vec_docs (its sqlite-vec example)."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^ +(SELECT rowid, distance FROM vec_docs\n(?: {6}.*\n)+)", text, re.M)
    assert m, "README.md has no sqlite-vec query over vec_docs"
    return " ".join(line.strip() for line in m.group(1).splitlines())


def test_readme_vec0_query_runs_on_this_sqlite(conn):
    # SQLite < 3.41 passes no LIMIT to a virtual table: the README's query
    # must use k = ?, which every version passes, so it runs here as written
    # (with the default model in place of the e5 directory it loads).
    if not os.path.exists(README):
        pytest.skip("no README.md beside python/tests")
    sql = readme_knn_query().replace("'e5'", "'default'")
    conn.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO docs(body) VALUES (?)", [(t,) for t in TEXTS * 2])
    dim = conn.execute("SELECT length(sentiment_embed('好')) / 4").fetchone()[0]
    conn.execute("CREATE VIRTUAL TABLE vec_docs USING vec0(embedding float[%d])" % dim)
    conn.execute("INSERT INTO vec_docs(rowid, embedding) "
                 "SELECT id, sentiment_embed(body) FROM docs")
    rows = conn.execute(sql).fetchall()
    assert len(rows) == 5
    assert [d for _, d in rows] == sorted(d for _, d in rows)
