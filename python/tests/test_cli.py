"""The sqlite-sentiment command (the installed console script): label on
CSV, TSV, JSON Lines and Parquet, malformed rows, --skip-bad-rows, empty
files, missing columns; train and evaluate. Every label, score and
probability must equal what the extension gives for the same text in SQL
(conftest.reference)."""

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys

import pytest

import sqlite_sentiment
from conftest import NEGATIVE, POSITIVE, bin_path, reference

CLI = bin_path("sqlite-sentiment")
LABELS = ["negative", "positive"]


def run(*args, stdin=None, check_rc=None, process=False):
    """Runs the command: in this process (cli.main, quick), or with
    process=True as the installed console script."""
    if process:
        p = subprocess.run([CLI, *args], input=stdin, capture_output=True)
        rc, out, err = p.returncode, p.stdout.decode(), p.stderr.decode()
    else:
        rc, out, err = _run_in_process(args, stdin)
    if check_rc is not None:
        assert rc == check_rc, (rc, out, err)
    return rc, out, err


def _run_in_process(args, stdin):
    from sqlite_sentiment import cli
    saved = sys.stdin, sys.stdout, sys.stderr
    out_bytes = io.BytesIO()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out_bytes, encoding="utf-8")
    sys.stderr = io.StringIO()
    cli._STDOUT.clear()
    try:
        try:
            rc = cli.main(list(args))
        except SystemExit as e:             # argparse
            rc = e.code
        for f in cli._STDOUT:
            f.flush()
        sys.stdout.flush()
        return rc, out_bytes.getvalue().decode(), sys.stderr.getvalue()
    finally:
        cli._STDOUT.clear()
        sys.stdin, sys.stdout, sys.stderr = saved


def write_csv(path, header, rows, delimiter=","):
    with open(path, "w", encoding="utf-8", newline="") as f:
        if delimiter == "\t":          # TSV: no quoting at all
            for r in [header, *rows]:
                f.write("\t".join(str(v) for v in r) + "\n")
            return
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def read_csv(path_or_text, delimiter=","):
    f = io.StringIO(path_or_text) if "\n" in path_or_text or not os.path.exists(path_or_text) \
        else open(path_or_text, encoding="utf-8", newline="")
    kw = {"quoting": csv.QUOTE_NONE} if delimiter == "\t" else {}
    return list(csv.DictReader(f, delimiter=delimiter, **kw))


def assert_matches(rows, texts, expected, text_key="text", prefix="", tabular=True):
    assert [r[text_key] for r in rows] == texts
    for r, (label, score, probs) in zip(rows, expected):
        got_label = r[prefix + "label"]
        if label is None:
            assert got_label in ("", None), r
            continue
        assert got_label == label, r
        assert float(r[prefix + "score"]) == pytest.approx(score, abs=1e-5)
        got = {l: float(r[prefix + "prob_" + l]) for l in LABELS} if tabular \
            else r[prefix + "probs"]
        assert got == pytest.approx(probs, abs=1e-5)


# ---- label: each format ----------------------------------------------------

def test_label_csv(tmp_path, texts, expected):
    src = tmp_path / "in.csv"
    write_csv(src, ["id", "text", "stars"], [[i, t, i % 5] for i, t in enumerate(texts)])
    run("label", str(src), "-o", str(tmp_path / "out.csv"), check_rc=0, process=True)
    rows = read_csv(str(tmp_path / "out.csv"))
    assert list(rows[0]) == ["id", "text", "stars", "label", "score", "prob_negative",
                             "prob_positive"]
    assert [r["id"] for r in rows] == [str(i) for i in range(len(texts))]
    assert [r["stars"] for r in rows] == [str(i % 5) for i in range(len(texts))]
    assert_matches(rows, texts, expected)


def test_label_csv_multiline_field_and_stdout(tmp_path):
    texts = ["第一行不错\n第二行也好", "送得太慢了"]
    src = tmp_path / "in.csv"
    write_csv(src, ["text"], [[t] for t in texts])
    _, out, _ = run("label", str(src), check_rc=0)
    assert_matches(read_csv(out), texts, reference(texts))


def test_label_tsv(tmp_path, texts, expected):
    # TSV has no quoting: a quote is an ordinary character.
    tsv_texts = [t for t in texts if t.strip()] + ['"引号"开头也行']
    src = tmp_path / "in.tsv"
    write_csv(src, ["label", "text"], [[i % 2, t] for i, t in enumerate(tsv_texts)], "\t")
    run("label", str(src), "--prefix", "pred_", "-o", str(tmp_path / "out.tsv"), check_rc=0)
    rows = read_csv(str(tmp_path / "out.tsv"), "\t")
    assert [r["label"] for r in rows] == [str(i % 2) for i in range(len(tsv_texts))]
    assert_matches(rows, tsv_texts, reference(tsv_texts), prefix="pred_")


def test_label_jsonl(tmp_path, texts, expected):
    src = tmp_path / "in.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t, "meta": {"k": [i]}}, ensure_ascii=False) + "\n")
        f.write("\n")                           # a blank line is skipped
        f.write(json.dumps({"id": 99, "text": None}) + "\n")
    _, out, _ = run("label", str(src), check_rc=0)
    rows = [json.loads(l) for l in out.splitlines()]
    assert rows[-1] == {"id": 99, "text": None, "label": None, "score": None, "probs": None}
    rows = rows[:-1]
    assert [r["meta"] for r in rows] == [{"k": [i]} for i in range(len(texts))]
    assert_matches(rows, texts, expected, tabular=False)


def test_label_stdin_jsonl_to_csv(texts, expected):
    data = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)
    _, out, _ = run("label", "-", "--format", "jsonl", "--output-format", "csv",
                    stdin=data.encode(), check_rc=0, process=True)
    assert_matches(read_csv(out), texts, expected)


def test_label_parquet(tmp_path, texts, expected):
    pa = pytest.importorskip("pyarrow", reason="pyarrow not installed (Parquet is optional)")
    import pyarrow.parquet as pq
    table = pa.table({"id": pa.array(range(len(texts)), pa.int64()),
                      "text": pa.array(texts, pa.string()),
                      "when": pa.array([1.5] * len(texts), pa.float32())})
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=5)
    run("label", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "out.parquet"),
        "--chunk-size", "4", check_rc=0)
    out = pq.read_table(tmp_path / "out.parquet")
    assert out.schema.field("id").type == pa.int64()          # input types kept
    assert out.schema.field("when").type == pa.float32()
    assert out.schema.field("score").type == pa.float64()
    assert out.column_names == ["id", "text", "when", "label", "score", "prob_negative",
                                "prob_positive"]
    assert_matches(out.to_pylist(), texts, expected)
    # and Parquet to CSV
    _, text, _ = run("label", str(tmp_path / "in.parquet"), "--output-format", "csv",
                     check_rc=0)
    assert_matches(read_csv(text), texts, expected)


def test_label_parquet_not_string_column(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow not installed (Parquet is optional)")
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "n.parquet")
    rc, _, err = run("label", str(tmp_path / "n.parquet"), "-o", str(tmp_path / "o.parquet"))
    assert rc == 1 and "'text' is int64, expected a string column" in err, err


def test_label_not_parquet(tmp_path):
    pytest.importorskip("pyarrow", reason="pyarrow not installed (Parquet is optional)")
    (tmp_path / "x.parquet").write_bytes(b"PAR1 not really")
    rc, _, err = run("label", str(tmp_path / "x.parquet"), "-o", str(tmp_path / "o.parquet"))
    assert rc == 1 and "not a readable Parquet file" in err, err
    assert not os.path.exists(tmp_path / "o.parquet")


def test_chunk_size_does_not_change_results(tmp_path, texts):
    src = tmp_path / "in.csv"
    write_csv(src, ["text"], [[t] for t in texts])
    # Batches of other sizes may move a score in float32's last bits, no more.
    want = reference(texts)
    for n in ("1", "3", "4096"):
        assert_matches(read_csv(run("label", str(src), "--chunk-size", n, check_rc=0)[1]),
                       texts, want)


# ---- label: malformed rows ----------------------------------------------

def test_csv_bad_rows(tmp_path):
    src = tmp_path / "bad.csv"
    src.write_text('id,text\n1,房间很干净\n2,多了,一列\n3,"引号"后面\n4,送得很快\n', encoding="utf-8")
    out = tmp_path / "out.csv"
    rc, _, err = run("label", str(src), "-o", str(out), process=True)
    assert rc == 1
    assert "row 2 (line 3): 3 fields, the header has 2" in err, err
    assert "--skip-bad-rows" in err
    assert not out.exists()                       # no half-written output
    assert not [p for p in os.listdir(tmp_path) if ".part-" in p]

    rc, _, err = run("label", str(src), "--skip-bad-rows", "-o", str(out), check_rc=0)
    assert "skipped" in err and "row 2 (line 3)" in err
    assert "row 3 (line 4): ',' expected after '\"'" in err, err
    assert "2 bad rows skipped" in err
    rows = read_csv(str(out))
    assert [r["id"] for r in rows] == ["1", "4"]
    assert_matches(rows, ["房间很干净", "送得很快"], reference(["房间很干净", "送得很快"]))


def test_csv_unterminated_quote(tmp_path):
    src = tmp_path / "bad.csv"
    src.write_text('text\n好\n"没有结束的引号\n还有一行\n', encoding="utf-8")
    rc, _, err = run("label", str(src))
    assert rc == 1 and "row 2 (lines 3-4)" in err and "unexpected end of data" in err, err


def test_tsv_bad_rows(tmp_path):
    src = tmp_path / "bad.tsv"
    src.write_text("label\ttext\n1\t好\n0\n1\t很好\t多余\n0\t差\n", encoding="utf-8")
    rc, _, err = run("label", str(src), "--prefix", "p_")
    assert rc == 1 and "row 2 (line 3): 1 field, the header has 2" in err, err
    rc, out, err = run("label", str(src), "--prefix", "p_", "--skip-bad-rows", check_rc=0)
    assert "row 3 (line 4): 3 fields, the header has 2" in err
    assert [r["text"] for r in read_csv(out, "\t")] == ["好", "差"]


def test_jsonl_bad_rows(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"text": "好"}\n[1, 2]\n{"id": 3}\n{"text": "未闭合\n'
                   '{"text": ["列表"]}\n{"text": true}\n{"text": "差"}\n', encoding="utf-8")
    rc, _, err = run("label", str(src))
    assert rc == 1 and "row 2 (line 2): a JSON array, expected an object" in err, err
    rc, out, err = run("label", str(src), "--skip-bad-rows", check_rc=0)
    for msg in ("row 3 (line 3): no key 'text' (keys: 'id')",
                "row 4 (line 4): not valid JSON",
                "row 5 (line 5): 'text' is a JSON array, expected a string",
                "row 6 (line 6): 'text' is a JSON boolean, expected a string",
                "5 bad rows skipped"):
        assert msg in err, (msg, err)
    assert [json.loads(l)["text"] for l in out.splitlines()] == ["好", "差"]


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    src = tmp_path / "u.csv"
    src.write_bytes("text\n好".encode() + b"\xff" + "吃\n".encode())
    rc, out, err = run("label", str(src), check_rc=0)
    assert "1 invalid UTF-8 byte replaced by U+FFFD" in err, err
    assert_matches(read_csv(out), ["好\ufffd吃"], reference(["好\ufffd吃"]))


def test_tsv_output_cannot_hold_a_tab(tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps({"text": "一\t二"}) + "\n", encoding="utf-8")
    rc, _, err = run("label", str(src), "-o", str(tmp_path / "o.tsv"))
    assert rc == 1 and "TSV cannot carry" in err, err


# ---- label: empty input, missing column, bad options ----------------------

@pytest.mark.parametrize("ext", ["csv", "tsv", "jsonl", "parquet"])
def test_empty_file(tmp_path, ext):
    if ext == "parquet":
        pytest.importorskip("pyarrow", reason="pyarrow not installed (Parquet is optional)")
    src = tmp_path / f"empty.{ext}"
    src.write_bytes(b"")
    out = tmp_path / f"out.{ext}"
    rc, _, err = run("label", str(src), "-o", str(out), check_rc=0)
    assert "empty: 0 rows" in err
    assert out.exists() and out.stat().st_size == 0


def test_header_only_csv(tmp_path):
    src = tmp_path / "h.csv"
    src.write_text("id,text\n", encoding="utf-8")
    _, out, _ = run("label", str(src), check_rc=0)
    assert out == "id,text,label,score,prob_negative,prob_positive\n"


def test_missing_column(tmp_path):
    src = tmp_path / "m.csv"
    write_csv(src, ["id", "comment"], [[1, "好"]])
    rc, out, err = run("label", str(src))
    assert rc == 2 and "no column 'text'; the header has: 'id', 'comment'" in err, err
    _, out, _ = run("label", str(src), "--column", "comment", check_rc=0)
    assert read_csv(out)[0]["label"] == reference(["好"])[0][0]


def test_existing_output_column_gets_a_prefix(tmp_path):
    src = tmp_path / "l.csv"
    write_csv(src, ["text", "label"], [["好", "1"]])
    _, out, err = run("label", str(src), check_rc=0)
    assert "already has a column 'label'" in err and "--prefix" in err, err
    assert list(read_csv(out)[0]) == ["text", "label", "pred_label", "pred_score",
                                      "pred_prob_negative", "pred_prob_positive"]


def test_unknown_model_and_format(tmp_path):
    src = tmp_path / "a.csv"
    write_csv(src, ["text"], [["好"]])
    rc, _, err = run("label", str(src), "--model", "hotle")
    assert rc == 2 and "hotle" in err and "default" in err, err
    (tmp_path / "a.xyz").write_text("text\n好\n")
    rc, _, err = run("label", str(tmp_path / "a.xyz"))
    assert rc == 2 and "--format" in err, err
    rc, _, err = run("label", str(tmp_path / "nope.csv"))
    assert rc == 2 and "no such file" in err, err


def test_progress_bar_when_asked(tmp_path, texts):
    src = tmp_path / "p.csv"
    write_csv(src, ["text"], [[t] for t in texts * 20])
    _, _, err = run("label", str(src), "--progress", "on", "--chunk-size", "50", check_rc=0)
    assert "rows/s" in err and "ETA" in err and "%" in err, err
    assert f"{len(texts) * 20:,} rows labeled" in err
    _, _, err = run("label", str(src), check_rc=0, process=True)   # stderr: not a terminal
    assert err == ""


def test_python_m_entry(tmp_path):
    src = tmp_path / "a.csv"
    write_csv(src, ["text"], [["好"]])
    p = subprocess.run([sys.executable, "-m", "sqlite_sentiment", "label", str(src)],
                       capture_output=True, text=True, check=True)
    assert "label,score" in p.stdout


# ---- train and evaluate -------------------------------------------------------

TRAIN_ROWS = [(t, 1) for t in POSITIVE] + [(t, 0) for t in NEGATIVE]


def test_train_then_label_and_evaluate(tmp_path):
    src = tmp_path / "train.csv"
    write_csv(src, ["review", "y"], TRAIN_ROWS)
    db = tmp_path / "models.db"
    _, out, err = run("train", str(src), "--text-column", "review", "--label-column", "y",
                      "--name", "shop", "--db", str(db), "--epochs", "1", "--seed", "7",
                      check_rc=0)
    report = json.loads(out)
    assert report["model"] == "shop" and report["version"] == 1
    assert report["rows"] == len(TRAIN_ROWS) and report["epochs"] == 1
    # CSV labels "0"/"1" reached train() as integers: the 0/1 convention.
    assert report["label_map_by"] == "convention", report
    assert "stored model 'shop' version 1" in err

    # The stored model, as SQL sees it.
    conn = sqlite3.connect(db)
    sqlite_sentiment.load(conn)
    assert conn.execute("SELECT source, metrics IS NOT NULL FROM sentiment_models "
                        "WHERE name = 'shop'").fetchall() == [("database", 1)]
    texts = [t for t, _ in TRAIN_ROWS]
    want = reference(texts, "shop", conn)

    _, out, _ = run("label", str(src), "--column", "review", "--model", "shop",
                    "--db", str(db), check_rc=0)
    assert_matches(read_csv(out), texts, want, text_key="review")

    # evaluate equals sentiment_evaluate() over the same rows in SQL.
    conn.execute("CREATE TEMP TABLE t(text, label)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", TRAIN_ROWS)
    sql_report = json.loads(conn.execute(
        "SELECT sentiment_evaluate(text, label, 'shop') FROM t").fetchone()[0])
    _, out, err = run("evaluate", str(src), "--text-column", "review", "--label-column", "y",
                      "--model", "shop", "--db", str(db), "--json", check_rc=0)
    assert json.loads(out) == sql_report
    assert f"accuracy {sql_report['accuracy']:.4f}" in err

    conn.commit()
    conn.close()         # its read of the models table would hold the lock train() needs

    # Training again adds version 2.
    _, out, _ = run("train", str(src), "--text-column", "review", "--label-column", "y",
                    "--name", "shop", "--db", str(db), "--epochs", "1", check_rc=0)
    assert json.loads(out)["version"] == 2


def test_evaluate_builtin_with_label_map(tmp_path):
    src = tmp_path / "e.jsonl"
    rows = [("好评" if y else "差评", t) for t, y in TRAIN_ROWS]
    with open(src, "w", encoding="utf-8") as f:
        for y, t in rows:
            f.write(json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n")
    labels = json.dumps({"差评": "negative", "好评": "positive"}, ensure_ascii=False)
    _, out, _ = run("evaluate", str(src), "--labels", labels, "--json", check_rc=0)
    got = json.loads(out)
    conn = sqlite3.connect(":memory:")
    sqlite_sentiment.load(conn)
    conn.execute("CREATE TABLE t(text, label)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(t, y) for y, t in rows])
    want = json.loads(conn.execute("SELECT sentiment_evaluate(text, label, 'default', ?) "
                                   "FROM t", (labels,)).fetchone()[0])
    assert got == want and got["rows"] == len(rows) and got["label_map_by"] == "option"


def test_train_errors(tmp_path):
    src = tmp_path / "t.csv"
    write_csv(src, ["text", "label"], TRAIN_ROWS[:3])
    rc, _, err = run("train", str(src))
    assert rc == 2 and "--db" in err
    rc, _, err = run("train", str(src), "--db", str(tmp_path / "m.db"))
    assert rc == 1 and "train()" in err and "8" in err, err     # too few rows
    rc, _, err = run("train", str(src), "--db", str(tmp_path / "m.db"), "--label-column", "y")
    assert rc == 2 and "no column 'y'" in err
    rc, _, err = run("evaluate", str(src), "--db", str(tmp_path / "absent.db"))
    assert rc == 2 and "no such file" in err
