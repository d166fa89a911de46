"""sqlite-sentiment explain: JSON lines (the extension's own JSON) when
stdout is not a terminal or with --json, coloured text on a terminal (a
pseudo-terminal here) or with --text, texts from stdin with '-', the
options, and the exit statuses."""

import json
import os
import pty
import re
import sqlite3
import subprocess

import pytest

import sqlite_sentiment
from conftest import bin_path
from test_cli import run

CLI = bin_path("sqlite-sentiment")
TEXTS = ["房间很脏，服务也差", "环境很好，但是 服务太差了", "屏幕清晰"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sql_explain(text, options=None):
    c = sqlite3.connect(":memory:")
    sqlite_sentiment.load(c)
    return c.execute("SELECT sentiment_explain(?, 'default', ?)",
                     (text, json.dumps(options or {}))).fetchone()[0]


def same_explanation(got, want):
    """Equal but for the last digits of the floats (threads sum in any order)."""
    assert {k: v for k, v in got.items() if k != "tokens" and not isinstance(v, float)} == \
        {k: v for k, v in want.items() if k != "tokens" and not isinstance(v, float)}
    assert [(t["token"], t["start"], t["end"]) for t in got["tokens"]] == \
        [(t["token"], t["start"], t["end"]) for t in want["tokens"]]
    assert [t["attribution"] for t in got["tokens"]] == pytest.approx(
        [t["attribution"] for t in want["tokens"]], abs=1e-4)
    assert got["score"] == pytest.approx(want["score"], abs=1e-5)


def test_json_lines_when_not_a_terminal():
    rc, out, err = run("explain", *TEXTS, process=True)
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == len(TEXTS)
    for line, text in zip(lines, TEXTS):
        same_explanation(json.loads(line), json.loads(sql_explain(text)))
    assert "\x1b[" not in out and err == ""


def test_options():
    rc, out, _ = run("explain", TEXTS[0], "--method", "gradient_x_input", check_rc=0)
    got = json.loads(out)
    assert got["method"] == "gradient_x_input" and got["steps"] == 1
    same_explanation(got, json.loads(sql_explain(TEXTS[0], {"method": "gradient_x_input"})))
    rc, out, _ = run("explain", TEXTS[0], "--steps", "8", "--json", check_rc=0)
    assert json.loads(out)["steps"] == 8
    same_explanation(json.loads(out), json.loads(sql_explain(TEXTS[0], {"steps": 8})))
    for label in ("positive", "1"):
        rc, out, _ = run("explain", TEXTS[0], "--label", label, check_rc=0)
        assert json.loads(out)["label"] == "positive"


def test_stdin():
    stdin = ("\n".join([TEXTS[0], "", "   ", TEXTS[2]]) + "\n").encode()
    rc, out, _ = run("explain", "-", TEXTS[1], stdin=stdin, check_rc=0)
    lines = out.splitlines()
    assert len(lines) == 5
    assert lines[1] == "null" and lines[2] == "null"
    assert [json.loads(lines[i])["tokens"][0]["token"] for i in (0, 3, 4)] == ["房", "屏", "环"]
    rc, out, err = run("explain", "-", stdin=b"", check_rc=1)
    assert "no text to explain" in err


def test_text_form():
    rc, out, err = run("explain", "--text", *TEXTS, "  ", check_rc=0)
    lines = out.splitlines()
    assert len(lines) == 4
    for line, text in zip(lines, TEXTS):
        e = json.loads(sql_explain(text))
        assert re.fullmatch(re.escape(text) + r"  (negative|positive) [01]\.\d{4}",
                            ANSI.sub("", line)), line
        assert e["label"] in line
        assert "\x1b[48;2;134;239;172m" in line or "\x1b[48;2;252;165;165m" in line
    assert "nothing to explain" in lines[3]
    assert "green" in err and "red" in err


def test_terminal_gets_colours():
    master, slave = pty.openpty()
    try:
        p = subprocess.run([CLI, "explain", TEXTS[0]], stdout=slave, stderr=subprocess.PIPE,
                           timeout=120)
        os.close(slave)
        slave = None
        chunks = []
        while True:
            try:
                b = os.read(master, 65536)
            except OSError:
                break
            if not b:
                break
            chunks.append(b)
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)
    assert p.returncode == 0, p.stderr
    out = b"".join(chunks).decode()
    assert "\x1b[48;2;" in out
    assert ANSI.sub("", out).strip().startswith(TEXTS[0])
    # --json on a terminal: JSON all the same.
    master, slave = pty.openpty()
    p = subprocess.run([CLI, "explain", "--json", TEXTS[0]], stdout=slave, timeout=120)
    os.close(slave)
    out = os.read(master, 65536).decode()
    os.close(master)
    assert p.returncode == 0 and json.loads(out.strip())["label"] == "negative"


@pytest.mark.parametrize("args,message", [
    (["--model", "nope"], "no model named 'nope'"),
    (["--steps", "0"], "--steps must be from 1 to 1024"),
    (["--steps", "2000"], "--steps must be from 1 to 1024"),
    (["--method", "gradient_x_input", "--steps", "4"], "--steps is for integrated_gradients"),
    (["--method", "bogus"], "invalid choice"),
    (["--label", "7"], "the model's labels are negative (0), positive (1)"),
    (["--label", "neutral"], "the model's labels are"),
    (["--db", "/nonexistent/models.db"], "no such file"),
])
def test_usage_errors(args, message):
    rc, out, err = run("explain", "好", *args, check_rc=2)
    assert message in err and out == ""


def test_help():
    rc, out, _ = run("explain", "--help", check_rc=0)
    for word in ("--method", "--steps", "--json", "'-' reads texts from stdin", "Exit status"):
        assert word in out
    rc, out, _ = run("--help", check_rc=0)
    assert "explain" in out
