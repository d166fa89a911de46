"""The sqlite-utils plugin (entry point sqlite_utils): every connection
sqlite-utils opens has the sentiment functions, through its Python API and
its command line."""

import json
import sqlite3

import pytest

sqlite_utils = pytest.importorskip("sqlite_utils", reason="sqlite-utils not installed")

from conftest import reference  # noqa: E402


@pytest.fixture
def db_path(tmp_path, texts):
    path = str(tmp_path / "reviews.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE reviews(id INTEGER PRIMARY KEY, comment TEXT)")
    conn.executemany("INSERT INTO reviews(comment) VALUES (?)", [(t,) for t in texts])
    conn.commit()
    conn.close()
    return path


def test_plugin_is_registered():
    import sqlite_sentiment
    from sqlite_utils.plugins import get_plugins
    ours = [p for p in get_plugins() if p["name"] == "sqlite-sentiment"]
    assert ours == [{"name": "sqlite-sentiment", "hooks": ["prepare_connection"],
                     "version": sqlite_sentiment.__version__}], get_plugins()


def test_python_api(db_path, texts, expected):
    db = sqlite_utils.Database(db_path)
    rows = db.execute("SELECT sentiment(comment), sentiment_score(comment) FROM reviews "
                      "ORDER BY id").fetchall()
    assert [r[0] for r in rows] == [e[0] for e in expected]
    for (_, score), (_, want, _) in zip(rows, expected):
        if want is None:
            assert score is None
        else:
            assert score == pytest.approx(want, abs=1e-6)
    got = list(db.query("SELECT id, label FROM classify('reviews', 'comment')"))
    assert [r["label"] for r in got] == [e[0] for e in expected]


def test_execute_plugins_false_has_no_functions(db_path):
    db = sqlite_utils.Database(db_path, execute_plugins=False)
    with pytest.raises(Exception, match="no such function: sentiment"):
        db.execute("SELECT sentiment('好')")


def test_cli_query(db_path, texts, expected):
    from click.testing import CliRunner
    from sqlite_utils.cli import cli
    result = CliRunner().invoke(cli, ["query", db_path,
                                      "select id, sentiment(comment) as s from reviews order by id"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["s"] for r in rows] == [e[0] for e in expected]


def test_cli_memory_and_version():
    from click.testing import CliRunner
    from sqlite_utils.cli import cli
    import sqlite_sentiment
    result = CliRunner().invoke(cli, ["memory", "select sentiment_version() as v, "
                                      "sentiment('送得太慢了') as s"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [{"v": sqlite_sentiment.__version__,
                                          "s": reference(["送得太慢了"])[0][0]}]
