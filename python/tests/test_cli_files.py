"""sqlite-sentiment label and the files around it: outputs that are devices,
FIFOs, stdout or links, the temporary file, full disks, names the input
already uses, encodings (a byte-order mark, GB18030), stdin, truncation,
number formats and types, the messages and exit statuses of evaluate and of
a missing pyarrow."""

import json
import os
import re
import resource
import shutil
import stat
import subprocess
import sys
import threading

import pytest

import sqlite_sentiment
from conftest import NEGATIVE, POSITIVE, reference
from test_cli import CLI, assert_matches, read_csv, run, write_csv

TEXTS = POSITIVE[:3] + NEGATIVE[:3]


def src_csv(tmp_path, texts=TEXTS, name="in.csv"):
    p = tmp_path / name
    write_csv(p, ["id", "text"], [[i, t] for i, t in enumerate(texts)])
    return p


def no_duplicate_keys(line):
    def hook(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), f"duplicate keys in {line}"
        return dict(pairs)
    return json.loads(line, object_pairs_hook=hook)


def one_line_error(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---- outputs that are not regular files; links; the temporary file -----------

def test_output_fifo_is_written_not_replaced(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = []

    def read():
        with open(fifo, encoding="utf-8") as f:
            got.append(f.read())
    t = threading.Thread(target=read, daemon=True)
    t.start()
    rc, _, err = run("label", str(src_csv(tmp_path)), "-o", str(fifo),
                     "--output-format", "csv")
    t.join(10)
    if t.is_alive():                 # nobody opened it for writing: let the reader go
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(5)
    assert rc == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a file"
    assert_matches(read_csv(got[0]), TEXTS, reference(TEXTS))
    assert sorted(os.listdir(tmp_path)) == ["in.csv", "out.fifo"]


def test_output_character_device_is_written_not_replaced(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    dev = tmp_path / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))     # a /dev/null
        open(dev, "w").close()
    except OSError as e:
        pytest.skip(f"no device nodes here: {e}")
    run("label", str(src_csv(tmp_path)), "-o", str(dev), "--output-format", "csv",
        check_rc=0)
    assert stat.S_ISCHR(os.lstat(dev).st_mode), "the device was replaced by a file"
    assert sorted(os.listdir(tmp_path)) == ["in.csv", "null"]


def test_output_dev_null_stays_a_device(tmp_path):
    run("label", str(src_csv(tmp_path)), "-o", "/dev/null", check_rc=0, process=True)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not [p for p in os.listdir("/dev") if p.startswith(".null.")]


def test_output_dev_stdout(tmp_path):
    _, out, err = run("label", str(src_csv(tmp_path)), "-o", "/dev/stdout", check_rc=0,
                      process=True)
    assert os.path.islink("/dev/stdout") or not os.path.isfile("/dev/stdout")
    assert_matches(read_csv(out), TEXTS, reference(TEXTS))


def test_output_symlink_updates_its_target(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "labels.csv"
    target.write_text("old\n")
    os.chmod(target, 0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    run("label", str(src_csv(tmp_path)), "-o", str(link), check_rc=0)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert_matches(read_csv(str(target)), TEXTS, reference(TEXTS))
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640       # its mode kept
    assert sorted(os.listdir(tmp_path / "real")) == ["labels.csv"]


def test_link_planted_at_the_old_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out.csv"
    # The name an earlier version wrote to: .<out>.part-<pid> (pid: this
    # process, as run() calls the command in it).
    (tmp_path / f".out.csv.part-{os.getpid()}").symlink_to(victim)
    run("label", str(src_csv(tmp_path)), "-o", str(out), check_rc=0)
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink()
    assert_matches(read_csv(str(out)), TEXTS, reference(TEXTS))
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


def test_new_output_follows_the_umask(tmp_path):
    out = tmp_path / "new.csv"
    old = os.umask(0o027)
    try:
        run("label", str(src_csv(tmp_path)), "-o", str(out), check_rc=0)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640


# ---- a full disk -------------------------------------------------------------

def dev_full():
    if not os.path.exists("/dev/full") or not stat.S_ISCHR(os.stat("/dev/full").st_mode):
        pytest.skip("no /dev/full device here")


def test_output_dev_full(tmp_path):
    dev_full()
    rc, _, err = run("label", str(src_csv(tmp_path)), "-o", "/dev/full",
                     "--output-format", "csv", process=True)
    assert rc == 1
    assert "cannot write /dev/full: No space left on device" in one_line_error(err)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_stdout_dev_full(tmp_path):
    dev_full()
    with open("/dev/full", "w") as full:
        p = subprocess.run([CLI, "label", str(src_csv(tmp_path))], stdout=full,
                           stderr=subprocess.PIPE, text=True)
    assert p.returncode == 1
    assert "No space left on device" in one_line_error(p.stderr)


def test_file_size_limit_leaves_nothing(tmp_path):
    (tmp_path / "in").mkdir()
    src = src_csv(tmp_path / "in", TEXTS * 100)
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "labels.csv"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
    p = subprocess.run([CLI, "label", str(src), "-o", str(out)], preexec_fn=limit,
                       capture_output=True, text=True)
    assert p.returncode == 1
    line = one_line_error(p.stderr)
    assert "labels.csv" in line and "File too large" in line, line
    assert os.listdir(tmp_path / "out") == []


# ---- names the input already has -----------------------------------------------

def test_csv_with_a_label_column_gets_prefixed_names(tmp_path):
    src = tmp_path / "l.csv"
    write_csv(src, ["text", "label"], [[t, i % 2] for i, t in enumerate(TEXTS)])
    _, out, err = run("label", str(src), check_rc=0)
    assert "already has a column 'label'" in err and "pred_label" in err, err
    rows = read_csv(out)
    assert list(rows[0]) == ["text", "label", "pred_label", "pred_score",
                             "pred_prob_negative", "pred_prob_positive"]
    assert [r["label"] for r in rows] == [str(i % 2) for i in range(len(TEXTS))]
    assert_matches(rows, TEXTS, reference(TEXTS), prefix="pred_")


def test_jsonl_row_with_its_own_label_and_score(tmp_path):
    src = tmp_path / "forged.jsonl"
    src.write_text("".join(json.dumps({"text": t, "label": "forged", "score": 1},
                                      ensure_ascii=False) + "\n" for t in TEXTS),
                   encoding="utf-8")
    _, out, err = run("label", str(src), check_rc=0)
    assert "pred_label" in err, err
    rows = [no_duplicate_keys(l) for l in out.splitlines()]
    assert all(r["label"] == "forged" and r["score"] == 1 for r in rows)
    assert_matches(rows, TEXTS, reference(TEXTS), prefix="pred_", tabular=False)
    # What SQLite reads from the line is the model's label, under its name.
    conn = __import__("sqlite3").connect(":memory:")
    line = out.splitlines()[0]
    assert conn.execute("SELECT json_extract(?, '$.pred_label'), json_extract(?, '$.label')",
                        (line, line)).fetchone() == (reference(TEXTS[:1])[0][0], "forged")


def test_jsonl_later_row_with_an_added_key_is_refused(tmp_path):
    src = tmp_path / "late.jsonl"
    src.write_text(json.dumps({"text": "好"}) + "\n" +
                   json.dumps({"text": "差", "probs": 1}) + "\n", encoding="utf-8")
    rc, out, err = run("label", str(src), "--chunk-size", "1")
    assert rc == 1 and "output row 2" in err and "'probs'" in err and "--prefix" in err, err


def test_explicit_prefix_that_clashes(tmp_path):
    src = tmp_path / "p.csv"
    write_csv(src, ["text", "x_label"], [["好", "1"]])
    rc, _, err = run("label", str(src), "--prefix", "x_")
    assert rc == 2 and "'x_label'" in err and "--prefix" in err, err


def test_prefix_taken_too(tmp_path):
    src = tmp_path / "p.csv"
    write_csv(src, ["text", "label", "pred_label"], [["好", "1", "0"]])
    _, out, _ = run("label", str(src), check_rc=0)
    assert list(read_csv(out)[0])[3:5] == ["pred2_label", "pred2_score"]


# ---- deep JSON ---------------------------------------------------------------

def test_deeply_nested_json_line(tmp_path):
    src = tmp_path / "deep.jsonl"
    src.write_text(json.dumps({"text": "好"}) + "\n" + '{"a": ' + "[" * 100000 + "]" * 100000
                   + "}\n" + json.dumps({"text": "差"}) + "\n")
    rc, out, err = run("label", str(src), "--skip-bad-rows", process=True)
    assert rc == 0 and "Traceback" not in err, err
    assert "row 2 (line 2)" in err and "nested too deeply" in err, err
    assert [json.loads(l)["text"] for l in out.splitlines()] == ["好", "差"]
    rc, _, err = run("label", str(src), process=True)
    assert rc == 1 and "nested too deeply" in one_line_error(err)


# ---- encodings and stdin ------------------------------------------------------

def test_utf8_byte_order_mark(tmp_path):
    src = tmp_path / "excel.csv"
    src.write_bytes(b"\xef\xbb\xbf" + "text,n\n".encode() +
                    "".join(f"{t},{i}\n" for i, t in enumerate(TEXTS)).encode())
    _, out, err = run("label", str(src), check_rc=0)
    rows = read_csv(out)
    assert list(rows[0])[:2] == ["text", "n"]
    assert_matches(rows, TEXTS, reference(TEXTS))


def test_gb18030_is_detected_and_said(tmp_path):
    src = tmp_path / "gbk.csv"
    src.write_bytes(("text\n" + "".join(t + "\n" for t in TEXTS)).encode("gb18030"))
    _, out, err = run("label", str(src), check_rc=0)
    assert "GB18030" in err and "--encoding" in err, err
    assert_matches(read_csv(out), TEXTS, reference(TEXTS))
    _, out, err = run("label", str(src), "--encoding", "gbk", check_rc=0)
    assert "GB18030" not in err
    assert_matches(read_csv(out), TEXTS, reference(TEXTS))


def test_wrong_encoding_refused_naming_the_row(tmp_path):
    src = tmp_path / "gbk.jsonl"
    src.write_bytes("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n"
                            for t in TEXTS).encode("gb18030"))
    rc, _, err = run("label", str(src), "--encoding", "utf-8")
    assert rc == 1 and "row 1 (line 1)" in err and "--encoding" in err, err
    src = tmp_path / "mixed.csv"
    src.write_bytes(("text\n" + TEXTS[0] + "\n").encode() + TEXTS[1].encode("gb18030") + b"\n"
                    + ("好" + "\n").encode() + b"\xff" + "差\n".encode())
    rc, out, err = run("label", str(src), "--skip-bad-rows", check_rc=0)
    assert "row 2 (line 3)" in err and "not valid UTF-8" in err, err
    assert [r["text"] for r in read_csv(out)] == [TEXTS[0], "好", "\ufffd差"]
    rc, _, err = run("label", str(src), "--encoding", "no-such-codec")
    assert rc == 2 and "unknown encoding" in err, err


def test_stdin_is_csv_by_default():
    data = "text\n" + "".join(t + "\n" for t in TEXTS)
    _, out, _ = run("label", "-", stdin=data.encode(), check_rc=0, process=True)
    assert_matches(read_csv(out), TEXTS, reference(TEXTS))


# ---- what is reported; numbers and types ------------------------------------------

def test_truncation_is_reported(tmp_path):
    long = "房间很干净，" * 200
    src = src_csv(tmp_path, [long, "好"])
    _, _, err = run("label", str(src), check_rc=0)
    assert "1 text truncated to the model's maximum length" in err, err


def test_singular_and_plural(tmp_path):
    _, _, err = run("label", str(src_csv(tmp_path, ["好"])), "--progress", "on", check_rc=0)
    assert "1 row labeled" in err and not re.search(r"\b1 rows\b", err), err
    _, _, err = run("label", str(src_csv(tmp_path, ["好", "差"])), "--progress", "on",
                    check_rc=0)
    assert "2 rows labeled" in err, err


def test_one_number_format(tmp_path):
    _, out, _ = run("label", str(src_csv(tmp_path)), check_rc=0)
    for r in read_csv(out):
        # For a negative/positive model score is P(positive): the same number.
        assert r["score"] == r["prob_positive"], r
        assert len(r["score"].replace("0.", "", 1).lstrip("0")) <= 6, r
    _, out, _ = run("label", str(src_csv(tmp_path)), "--output-format", "jsonl", check_rc=0)
    for r in map(json.loads, out.splitlines()):
        assert r["score"] == r["probs"]["positive"], r


TINY_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                          "fixtures", "models", "bert_tiny")


@pytest.fixture(scope="module")
def star_model(tmp_path_factory):
    """The tiny test model of tests/fixtures with its labels renamed 1 and 5
    (stars), as a model trained on integer labels has them."""
    if not os.path.isdir(TINY_MODEL):
        pytest.skip(f"no {TINY_MODEL}")
    d = tmp_path_factory.mktemp("stars") / "stars"
    shutil.copytree(TINY_MODEL, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["id2label"] = {"0": "1", "1": "5"}
    cfg["label2id"] = {"1": 0, "5": 1}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_integer_labels_keep_their_type(tmp_path, star_model):
    conn = __import__("sqlite3").connect(":memory:")
    sqlite_sentiment.load(conn)
    conn.execute("SELECT sentiment_load('stars', ?)", (str(star_model),)).fetchall()
    want = [l for l, _, _ in reference(TEXTS, "stars", conn)]
    assert set(want) <= {"1", "5"}
    _, out, _ = run("label", str(src_csv(tmp_path)), "--model", str(star_model),
                    "--output-format", "jsonl", check_rc=0)
    got = [json.loads(l)["label"] for l in out.splitlines()]
    assert got == [int(w) for w in want]
    pa = pytest.importorskip("pyarrow", reason="pyarrow not installed (Parquet is optional)")
    import pyarrow.parquet as pq
    run("label", str(src_csv(tmp_path)), "--model", str(star_model), "-o",
        str(tmp_path / "o.parquet"), check_rc=0)
    t = pq.read_table(tmp_path / "o.parquet")
    assert t.schema.field("label").type == pa.int64()
    assert t.column("label").to_pylist() == [int(w) for w in want]
    _, out, _ = run("label", str(src_csv(tmp_path)), "--model", str(star_model), check_rc=0)
    assert [r["label"] for r in read_csv(out)] == want


# ---- errors: pyarrow, an unknown model -------------------------------------------

def test_missing_pyarrow_is_a_usage_error(tmp_path):
    code = ("import sys; sys.modules['pyarrow'] = None; "
            "from sqlite_sentiment.cli import main; sys.exit(main(sys.argv[1:]))")
    p = subprocess.run([sys.executable, "-c", code, "label", str(src_csv(tmp_path)), "-o",
                        str(tmp_path / "o.parquet")], capture_output=True, text=True)
    assert p.returncode == 2
    assert "pip install pyarrow" in one_line_error(p.stderr)
    assert not (tmp_path / "o.parquet").exists()


def test_unknown_model_without_db_hints_at_db(tmp_path):
    rc, _, err = run("label", str(src_csv(tmp_path)), "--model", "shop")
    assert rc == 2 and "'shop'" in err and "--db" in err, err
    rc, _, err = run("evaluate", str(src_csv(tmp_path)), "--label-column", "id",
                     "--model", "shop")
    assert rc == 2 and "--db" in err, err


# ---- evaluate: tables, or JSON -------------------------------------------------------

def test_evaluate_prints_tables(tmp_path):
    src = tmp_path / "e.csv"
    write_csv(src, ["text", "label"], [(t, 1) for t in POSITIVE] + [(t, 0) for t in NEGATIVE])
    _, out, _ = run("evaluate", str(src), check_rc=0)
    _, js, _ = run("evaluate", str(src), "--json", check_rc=0)
    report = json.loads(js)
    assert out.startswith("model     default\n"), out
    assert f"accuracy  {report['accuracy']:.4f}" in out
    assert f"macro-F1  {report['macro_f1']:.4f}" in out
    assert "label" in out and "precision" in out and "recall" in out and "support" in out
    neg = report["labels"]["negative"]
    assert any(l.split() == ["negative", f"{neg['precision']:.4f}", f"{neg['recall']:.4f}",
                             f"{neg['f1']:.4f}", str(neg["support"])]
               for l in out.splitlines()), out
    assert "confusion matrix" in out
    m = report["confusion"]["matrix"]
    assert any(l.split() == ["positive", str(m[1][0]), str(m[1][1])] for l in out.splitlines())
    assert len(out.splitlines()) < 16
