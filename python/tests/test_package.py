"""Tests of the installed sqlite-sentiment wheel (scripts/test-wheel.sh runs
them in a fresh virtual environment): loading, the built-in model, classify,
the version conventions, the no-extension-loading error, and that every
library the extension needs comes from inside the wheel."""

import json
import os
import re
import sqlite3
import subprocess
import sys

import pytest

import sqlite_sentiment

PKG_DIR = os.path.dirname(os.path.abspath(sqlite_sentiment.__file__))
SO = sqlite_sentiment.loadable_path() + ".so"
VENDORED = ["libutf8proc.so.2", "libcjson.so.1", "libjansson.so.4",
            "libopenblas.so.0", "libgfortran.so.5", "libquadmath.so.0"]


@pytest.fixture
def conn():
    c = sqlite3.connect(":memory:")
    sqlite_sentiment.load(c)
    yield c
    c.close()


def test_installed_not_source_tree():
    # The module and the library come from the virtual environment.
    assert PKG_DIR.startswith(sys.prefix), (PKG_DIR, sys.prefix)
    assert "site-packages" in PKG_DIR


def test_loadable_path():
    p = sqlite_sentiment.loadable_path()
    assert not p.endswith(".so")
    assert os.path.dirname(p) == PKG_DIR
    assert os.path.isfile(p + ".so")


def test_sentiment_builtin_model(conn):
    assert conn.execute("SELECT sentiment('房间很干净')").fetchone() == ("positive",)
    assert conn.execute("SELECT sentiment('等了两个小时才送到，饭菜全凉了')").fetchone() == ("negative",)
    score = conn.execute("SELECT sentiment_score('房间很干净')").fetchone()[0]
    assert 0.5 < score <= 1.0


def test_classify_table(conn):
    rows = [(3, "房间很干净，前台服务热情"), (7, "等了两个小时才送到，饭菜全凉了"),
            (9, None), (12, "屏幕清晰，电池耐用")]
    conn.execute("CREATE TABLE reviews(id INTEGER PRIMARY KEY, comment TEXT)")
    conn.executemany("INSERT INTO reviews VALUES (?, ?)", rows)
    out = conn.execute("SELECT id, label, score, probs FROM classify('reviews', 'comment')").fetchall()
    assert [r[0] for r in out] == [3, 7, 9, 12]
    assert [r[1] for r in out] == ["positive", "negative", None, "positive"]
    for _, label, score, probs in out:
        if label is None:
            continue
        assert 0.0 <= score <= 1.0
        assert set(json.loads(probs)) == {"negative", "positive"}


def test_version_is_bare(conn):
    v = conn.execute("SELECT sentiment_version()").fetchone()[0]
    assert re.fullmatch(r"\d+\.\d+\.\d+", v), v
    assert v == sqlite_sentiment.__version__
    debug = json.loads(conn.execute("SELECT sentiment_debug()").fetchone()[0])
    assert debug["version"] == v
    assert debug["commit"] and debug["compiler"].startswith("gcc")


def test_load_disables_loading_again(conn):
    with pytest.raises(sqlite3.OperationalError, match="not authorized"):
        conn.load_extension(sqlite_sentiment.loadable_path())


class ConnectionWithoutLoading:
    """What sqlite3.connect returns in a Python built without
    --enable-loadable-sqlite-extensions: no enable_load_extension."""

    def execute(self, *args):
        raise AssertionError("not reached")


def test_no_extension_loading_names_alternatives():
    with pytest.raises(sqlite_sentiment.ExtensionLoadingUnavailable) as e:
        sqlite_sentiment.load(ConnectionWithoutLoading())
    msg = str(e.value)
    assert "enable_load_extension" in msg
    assert "pip install sqlean.py" in msg and "sqlean.connect" in msg
    assert "pysqlite3" in msg
    assert isinstance(e.value, RuntimeError)


@pytest.mark.skipif(not os.environ.get("SENTIMENT_NOLOAD_PYTHON"),
                    reason="no Python without extension loading given (SENTIMENT_NOLOAD_PYTHON)")
def test_real_python_without_extension_loading():
    # A real build whose sqlite3 lacks enable_load_extension, importing this
    # same pure-Python module.
    py = os.environ["SENTIMENT_NOLOAD_PYTHON"]
    code = ("import sqlite3, sqlite_sentiment\n"
            "assert not hasattr(sqlite3.connect(':memory:'), 'enable_load_extension')\n"
            "try:\n"
            "    sqlite_sentiment.load(sqlite3.connect(':memory:'))\n"
            "except sqlite_sentiment.ExtensionLoadingUnavailable as e:\n"
            "    print(e)\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(PKG_DIR))
    out = subprocess.run([py, "-c", code], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "pip install sqlean.py" in out, out


def test_sqlean_connection():
    sqlean = pytest.importorskip("sqlean")
    c = sqlean.connect(":memory:")
    sqlite_sentiment.load(c)
    assert c.execute("SELECT sentiment('房间很干净')").fetchone() == ("positive",)


def test_pysqlite3_connection():
    dbapi2 = pytest.importorskip("pysqlite3.dbapi2")
    c = dbapi2.connect(":memory:")
    sqlite_sentiment.load(c)
    assert c.execute("SELECT sentiment('房间很干净')").fetchone() == ("positive",)


def _ldd(path):
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"^\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$", out, re.M)), out


def test_libraries_resolve_inside_wheel():
    libs = os.path.join(PKG_DIR, "libs")
    deps, text = _ldd(SO)
    assert "not found" not in text, text
    for name in ("libutf8proc.so.2", "libcjson.so.1", "libjansson.so.4"):
        assert os.path.realpath(deps[name]) == os.path.join(libs, name), text
    # The engine's threads are its own (model/core/thread_pool.c): no OpenMP runtime.
    assert not any(d.startswith("libgomp") for d in deps), text
    for name in VENDORED:
        path = os.path.join(libs, name)
        assert os.path.isfile(path), name
        sub, text = _ldd(path)
        assert "not found" not in text, (name, text)
        for dep, where in sub.items():
            if dep in VENDORED:
                assert os.path.realpath(where) == os.path.join(libs, dep), (name, text)


@pytest.mark.skipif(not os.environ.get("SENTIMENT_HIDDEN_LIBS"),
                    reason="system libraries not hidden (scripts/test-wheel.sh does it as root)")
def test_system_copies_hidden():
    # scripts/test-wheel.sh's second run: the system's copies are empty
    # files, as on a machine without the Debian packages.
    for path in os.environ["SENTIMENT_HIDDEN_LIBS"].split():
        assert os.path.getsize(path) == 0, path


def test_openblas_dlopened_from_wheel(conn):
    # blas.c dlopens libopenblas.so.0 on first use: the copy in the wheel.
    conn.execute("SELECT sentiment('房间很干净')").fetchone()
    assert "OpenBLAS" in conn.execute("SELECT sentiment_device()").fetchone()[0]
    with open("/proc/self/maps") as f:
        maps = f.read()
    blas = {line.split()[-1] for line in maps.splitlines() if "libopenblas" in line}
    assert blas == {os.path.join(PKG_DIR, "libs", "libopenblas.so.0")}, blas
