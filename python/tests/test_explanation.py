"""explanation.py on explanations written here in sentiment_explain()'s JSON
format: which values count as one, the text kept whole (token spans plus
the characters between them), the tints (green toward the label, red
against it, by |attribution| relative to the largest), HTML escaping, and
the ANSI form. Then against the extension itself: its JSON parses and
renders back to the text explained."""

import html
import json
import re
import sqlite3

import pytest

import sqlite_sentiment
from sqlite_sentiment import explanation as ex


def make(text, attributions, label="negative", score=0.97, token_of=None, **extra):
    """An explanation of text with one token per non-space character (the
    spans of a Chinese BERT), attributions in order."""
    spans = [(i, i + 1) for i, c in enumerate(text) if not c.isspace()]
    assert len(spans) == len(attributions)
    tokens = [{"token": (token_of or (lambda s: s))(text[s:e]), "start": s, "end": e,
               "attribution": a} for (s, e), a in zip(spans, attributions)]
    e = {"label": label, "score": score, "method": "integrated_gradients", "steps": 32,
         "logit": 2.41, "baseline_logit": -0.38, "sum": sum(attributions), "truncated": False,
         "tokens": tokens}
    e.update(extra)
    return e


TEXT = "房间很脏，服务也差"
ATTR = [0.02, 0.01, 0.10, 0.83, 0.0, 0.05, 0.03, -0.20, 0.60]


def visible_text(markup):
    """What a browser shows of the explanation's text element."""
    m = re.search(r'<div class="sentiment-explanation-text"[^>]*>(.*?)</div>', markup, re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", m.group(1)))


def test_parse_accepts_explanations_only():
    e = make(TEXT, ATTR)
    s = json.dumps(e, ensure_ascii=False)
    assert ex.parse(s) == e
    assert ex.parse(s.encode()) == e
    assert ex.parse(e) == e
    for other in (None, 3, 2.5, "", "房间很脏", "{", "[1,2]", '{"label":"x"}',
                  '{"tokens":[]}', '{"label":"x","tokens":[{"start":0}]}',
                  '{"label":"x","tokens":[{"start":2,"end":1,"attribution":0}]}',
                  '{"label":"x","tokens":[{"start":0,"end":1,"attribution":"a"}]}',
                  b"\xff\xfe", json.dumps({"negative": 0.9, "positive": 0.1})):
        assert ex.parse(other) is None, other
    assert ex.parse('{"label":"positive","tokens":[]}') == {"label": "positive", "tokens": []}


def test_segments_keep_every_character():
    text = "  房间 很脏，  服务也差!! "
    e = make(text, [0.1] * len(text.replace(" ", "")))
    segs = ex.segments(e, text)
    assert "".join(p for p, _ in segs) == text
    assert [p for p, t in segs if t is None] == ["  ", " ", "  ", " "]
    # Tokens that span several characters, and characters no token covers.
    e = {"label": "positive", "tokens": [
        {"token": "iphone", "start": 0, "end": 6, "attribution": 0.5},
        {"token": "##15", "start": 6, "end": 8, "attribution": -0.1},
        {"token": "好", "start": 10, "end": 11, "attribution": 0.9}]}
    text = "iPhone15\u200b 好用"
    segs = ex.segments(e, text)
    assert "".join(p for p, _ in segs) == text
    assert [p for p, t in segs if t is not None] == ["iPhone", "15", "好"]


def test_segments_rebuilt_from_tokens_without_text():
    e = {"label": "positive", "tokens": [
        {"token": "iphone", "start": 0, "end": 6, "attribution": 0.5},
        {"token": "##15", "start": 6, "end": 8, "attribution": -0.1},
        {"token": "[UNK]", "start": 9, "end": 10, "attribution": 0.0},
        {"token": "好", "start": 11, "end": 12, "attribution": 0.9}]}
    assert "".join(p for p, _ in ex.segments(e)) == "iphone15 [UNK] 好"
    # A "text" member, when there is one, is the text.
    e["text"] = "iPhone15 😀 好"
    assert "".join(p for p, _ in ex.segments(e)) == "iPhone15 😀 好"


def test_pick_text_finds_the_row_column():
    e = make(TEXT, ATTR)
    assert ex.pick_text(e, [1, None, "别的文字", TEXT + "！", TEXT]) == TEXT + "！"
    assert ex.pick_text(e, [1, "房间很干净，服务也好"]) is None
    assert ex.pick_text(e, ["房间"]) is None        # shorter than the spans
    # Case and accents as an uncased tokenizer folds them.
    e = {"label": "positive", "tokens": [
        {"token": "cafe", "start": 0, "end": 4, "attribution": 0.5},
        {"token": "[UNK]", "start": 5, "end": 6, "attribution": 0.1}]}
    assert ex.pick_text(e, ["Café 😀"]) == "Café 😀"


def test_tints():
    assert ex.tint(0.8, 0.8) == ex.GREEN
    assert ex.tint(-0.8, 0.8) == ex.RED
    assert ex.tint(0.0, 0.8) == ex.WHITE
    assert ex.tint(0.3, 0) == ex.WHITE
    half = ex.tint(0.2, 0.8)                     # sqrt(0.25) = half the tint
    assert half == tuple(round(255 + (g - 255) * 0.5) for g in ex.GREEN)
    # Stronger for a bigger share, on both sides; always a light tint.
    greens = [ex.tint(a, 1.0) for a in (0.05, 0.2, 0.5, 1.0)]
    assert [g[0] for g in greens] == sorted((g[0] for g in greens), reverse=True)
    reds = [ex.tint(-a, 1.0) for a in (0.05, 0.2, 0.5, 1.0)]
    assert [r[1] for r in reds] == sorted((r[1] for r in reds), reverse=True)
    for rgb in greens + reds:
        assert _luminance(rgb) > 0.35           # dark text (#111827) stays readable


def _luminance(rgb):
    def lin(c):
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = map(lin, rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_html_shades_tokens_and_keeps_text():
    e = make(TEXT, ATTR)
    out = ex.to_html(e, TEXT)
    assert visible_text(out) == TEXT
    spans = re.findall(r'<span class="sentiment-token sentiment-(\w+)" style="background-color:'
                       r'(#[0-9a-f]{6});[^"]*" title="([^"]*)" data-attribution="([^"]*)">'
                       r"([^<]*)</span>", out)
    assert [s[4] for s in spans] == list(TEXT)
    by_char = {s[4]: s for s in spans}
    assert by_char["脏"][0] == "toward" and by_char["脏"][1] == "#86efac"   # the largest: full
    assert by_char["也"][0] == "against" and by_char["也"][1] == "#%02x%02x%02x" % ex.tint(-0.2, 0.83)
    assert by_char["，"][0] == "neutral" and by_char["，"][1] == "#ffffff"
    assert html.unescape(by_char["脏"][2]) == "脏: +0.8300 (toward negative)"
    assert html.unescape(by_char["也"][2]) == "也: -0.2000 (against negative)"
    assert float(by_char["差"][3]) == 0.60
    head = re.search(r'<div class="sentiment-explanation-head".*?</div>', out).group(0)
    assert "negative" in head and "0.9700" in head and "integrated gradients, 32 steps" in head
    assert "rebuilt" not in head
    assert "rebuilt from tokens" in ex.to_html(e)
    assert visible_text(ex.to_html(e)) == TEXT      # no gaps: the same


def test_html_escapes_everything():
    text = '<script>alert("x")</script> & 差'
    e = {"label": '<img src=x onerror="alert(1)">', "score": 0.5, "method": "gradient_x_input",
         "steps": 1, "tokens": [
             {"token": "<", "start": 0, "end": 1, "attribution": 0.1},
             {"token": "script", "start": 1, "end": 7, "attribution": -0.3},
             {"token": '"', "start": 15, "end": 16, "attribution": 0.2},
             {"token": "差", "start": len(text) - 1, "end": len(text), "attribution": 0.9}]}
    for out in (ex.to_html(e, text), ex.to_html(e)):
        assert "<script" not in out and "<img" not in out and 'onerror="' not in out
        assert "&lt;script&gt;" in out or "&lt;" in out
    assert visible_text(ex.to_html(e, text)) == text
    assert "gradient × input" in ex.to_html(e, text)


def test_ansi():
    e = make(TEXT, ATTR)
    out = ex.to_ansi(e, TEXT)
    assert re.sub(r"\x1b\[[0-9;]*m", "", out) == TEXT + "  negative 0.9700"
    assert "\x1b[48;2;134;239;172m" in out               # 脏, full green
    assert out.count("\x1b[0m") == sum(1 for a in ATTR if a)
    e["truncated"] = True
    assert "truncated" in ex.to_ansi(e, TEXT)


# ---- against the extension -----------------------------------------------

@pytest.fixture(scope="module")
def conn():
    c = sqlite3.connect(":memory:")
    sqlite_sentiment.load(c)
    try:
        c.execute("SELECT sentiment_explain('好')").fetchone()
    except sqlite3.OperationalError as e:
        pytest.skip(f"sentiment_explain() not usable in this build: {e}")
    return c


@pytest.mark.parametrize("text", ["房间很脏，服务也差", "  环境很好，但是 服务太差了!! ",
                                  "iPhone 15 的屏幕很清晰，电池也耐用"])
def test_extension_json_renders_back_to_its_text(conn, text):
    raw = conn.execute("SELECT sentiment_explain(?)", (text,)).fetchone()[0]
    e = ex.parse(raw)
    assert e is not None, raw
    assert e["label"] in ("negative", "positive") and e["tokens"]
    assert ex.pick_text(e, [text]) == text
    assert visible_text(ex.to_html(e, text)) == text
    assert re.sub(r"\x1b\[[0-9;]*m", "", ex.to_ansi(e, text)).startswith(text)
    assert e["sum"] == pytest.approx(sum(t["attribution"] for t in e["tokens"]), rel=1e-3,
                                     abs=1e-4)
