"""A model fine-tuned with train() in one database, labelled with on Ray
workers: read once on the driver, shipped through the object store, never
retrained; the workers' labels equal classify's in the database itself."""

import json
import os
import subprocess
import sqlite3
import sys
import tempfile

import pyarrow as pa
import pytest

import sqlite_sentiment
import sqlite_sentiment.ray as sr
from conftest import assert_same_labels, classify_in_process
from test_sqlite_shards import make_shards, read_output


def train_tiny(path, rows):
    """Fine-tunes 'tiny' on 64 rows with labels of its own ('好'/'差'), one
    epoch: a model whose labels the built-in one never gives."""
    conn = sqlite3.connect(path)
    sqlite_sentiment.load(conn)
    conn.execute("CREATE TABLE train_rows(text, label)")
    conn.executemany("INSERT INTO train_rows VALUES (?, ?)",
                     [(r[1], "好" if r[3] == 1 else "差") for r in rows])
    conn.commit()
    (report,) = conn.execute("SELECT train('tiny', text, label, "
                             "'{\"epochs\":1,\"labels\":{},\"seed\":3}') FROM train_rows").fetchone()
    conn.close()
    return json.loads(report)


@pytest.fixture(scope="module")
def tiny_db(corpus, tmp_path_factory):
    db = str(tmp_path_factory.mktemp("tiny") / "train.db")
    report = train_tiny(db, corpus[::max(1, len(corpus) // 64)][:64])
    assert report["rows"] == 64
    return db


def stored_versions(path):
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM sentiment_model_store WHERE name = 'tiny'").fetchone()[0]
    finally:
        conn.close()


def test_fine_tuned_model_shipped_to_workers(ray_cluster, corpus, tiny_db, tmp_path):
    import ray.data
    db = tiny_db
    rows = corpus[:2000]
    want = classify_in_process(rows, model="tiny", database=db)
    assert {w[0] for w in want.values()} == {"好", "差"}

    files = sr.ModelFiles.from_database(db, "tiny")
    assert files.name == "tiny" and {"config.json", "vocab.txt", "model.safetensors"} <= set(files.files)
    ds = ray.data.from_arrow(pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows]})
                             ).repartition(4).materialize()
    out = sr.label_dataset(ds, column="text", model="tiny", database=db, num_workers=2).take_all()
    assert_same_labels({r["id"]: (r["label"], r["score"]) for r in out}, want, "tiny on workers")

    # The same files as a Hugging Face directory, and version syntax.
    export = str(tmp_path / "tiny-dir")
    conn = sqlite3.connect(db)
    sqlite_sentiment.load(conn)
    conn.execute("SELECT sentiment_export('tiny@1', ?)", (export,)).fetchone()
    conn.close()
    from_dir = sr.ModelFiles.from_directory(export)
    assert from_dir.name == "tiny-dir" and from_dir.files == files.files
    out2 = sr.label_dataset(ds, column="text", model=from_dir, num_workers=1).take_all()
    assert_same_labels({r["id"]: (r["label"], r["score"]) for r in out2}, want, "from a directory")

    # SQLite shards with the same model.
    paths, good, bad = make_shards(str(tmp_path / "shards"), rows[:1000], shards=2)
    sr.label_sqlite_files(paths, "reviews", "comment", "review_labels", model="tiny", database=db,
                          num_workers=2)
    for p in paths:
        got = {r[0]: (r[1], r[2]) for r in read_output(p)[0] if r[0] not in bad[p]}
        assert_same_labels(got, {r[0]: want[r[0]] for r in good[p]}, p)
    # Nothing was trained again: still the one version.
    assert stored_versions(db) == 1


def test_model_errors_said_on_the_driver(tmp_path):
    db = str(tmp_path / "none.db")
    sqlite3.connect(db).close()
    with pytest.raises(sqlite3.Error, match="nosuch"):
        sr.ModelFiles.from_database(db, "nosuch")
    with pytest.raises(FileNotFoundError):
        sr.ModelFiles.from_database(str(tmp_path / "absent.db"), "tiny")
    with pytest.raises(ValueError, match="no config.json"):
        sr.ModelFiles("m", {"vocab.txt": b""})
    with pytest.raises(ValueError, match="leaves the model directory"):
        sr.ModelFiles("m", {"config.json": b"{}", "../x": b""}).write(str(tmp_path))
    # A worker's engine says what is wrong with a model it cannot load.
    bad = sr.ModelFiles("broken", {"config.json": b"{", "vocab.txt": b"[PAD]\n",
                                   "model.safetensors": b""})
    with pytest.raises(sqlite3.Error, match="model 'broken'.*does not load.*too short"):
        sr.Engine("broken", bad)


def test_killed_workers_model_copies_removed(tiny_db):
    files = sr.ModelFiles.from_database(tiny_db, "tiny")
    # A pid that ran and no longer does.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    left = os.path.join(tempfile.gettempdir(), f"sentiment-model-{dead}-left")
    os.makedirs(left, exist_ok=True)
    files.write(left)
    mine = os.path.join(tempfile.gettempdir(), f"sentiment-model-{os.getpid()}-mine")
    os.makedirs(mine, exist_ok=True)
    engine = sr.Engine("tiny", files)
    try:
        assert not os.path.exists(left)
        assert os.path.isdir(mine)                  # a live process's copy stays
        own = engine._model_dir
        assert os.path.isfile(os.path.join(own, "model.safetensors"))
        assert engine.label(["房间很干净"])[0][0] in ("好", "差")
    finally:
        engine.close()
        os.rmdir(mine)
    assert not os.path.exists(own)
