"""sentiment_explain()'s JSON as something to read: the text with each token
shaded by its attribution, as HTML (the Datasette plugin) or with ANSI
colours (the command line).

    {"label":"negative","score":0.97,"method":"integrated_gradients","steps":32,
     "logit":1.90,"baseline_logit":-0.50,"sum":2.40,"truncated":false,
     "tokens":[{"token":"脏","start":3,"end":4,"attribution":0.80}, ...]}

start and end are character offsets into the text explained (end
exclusive). Attribution > 0 pushes toward the label, < 0 away from it.

Shading. A token that pushes toward the label is green, one that pushes
against it red; the tint's strength is |attribution| over the largest
|attribution| in the text, through a square root, so that a token with a
tenth of the largest share still shows (at about a third of the full
tint). The full tints are light (green #86efac, red #fca5a5: Tailwind's
300 shades), so dark text stays readable on them; a token with no
attribution is left white.

The text. The JSON lists tokens and their spans, not the text. Given the
text (the row's column, or the text the command line explained), every
character is shown: each token's span from the text itself, and the
characters between tokens (spaces, characters the tokenizer drops) as
plain text. Without the text (a bare sentiment_explain() column in a
query), the text is rebuilt from the tokens: a token's own spelling (its
"##" or "\u2581" continuation mark removed; a lower-casing model's tokens
are lower case, [UNK] is shown as it is), and each gap between spans as
that many spaces. A JSON that carries a "text" member is rendered from
it.
"""

import html
import json
import unicodedata

GREEN = (0x86, 0xEF, 0xAC)
RED = (0xFC, 0xA5, 0xA5)
WHITE = (0xFF, 0xFF, 0xFF)
TEXT_COLOUR = "#111827"
_KEYS = ("label", "tokens")


def parse(value):
    """The explanation as a dict when value (str, bytes or dict) is one of
    sentiment_explain()'s results, else None. Cheap on other values."""
    if isinstance(value, dict):
        obj = value
    else:
        if isinstance(value, (bytes, bytearray)):
            try:
                value = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                return None
        if not isinstance(value, str):
            return None
        s = value.lstrip()
        if not s.startswith("{") or '"tokens"' not in s:
            return None
        try:
            obj = json.loads(s)
        except ValueError:
            return None
    if not isinstance(obj, dict) or any(k not in obj for k in _KEYS):
        return None
    tokens = obj["tokens"]
    if not isinstance(tokens, list):
        return None
    for t in tokens:
        if not isinstance(t, dict):
            return None
        s, e, a = t.get("start"), t.get("end"), t.get("attribution")
        if not (_is_int(s) and _is_int(e) and 0 <= s <= e and _is_number(a)):
            return None
    return obj


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def token_spelling(token):
    """A token as it reads in the text: without WordPiece's "##" or
    SentencePiece's "\u2581" mark."""
    if not isinstance(token, str):
        return ""
    if token.startswith("##") and len(token) > 2:
        return token[2:]
    return token.replace("\u2581", " ").lstrip(" ") if token.startswith("\u2581") else token


def _fold(s):
    """Case and accents dropped, as an uncased tokenizer does."""
    return "".join(c for c in unicodedata.normalize("NFD", s)
                   if unicodedata.category(c) != "Mn").lower()


def matches_text(explanation, text):
    """True when text is (very likely) the text explained: every span lies
    in it and the spelling of at least 80% of the tokens that have one
    ([UNK] has none) equals the text's characters at their span, case and
    accents aside."""
    if not isinstance(text, str):
        return False
    tokens = explanation.get("tokens") or []
    if not tokens:
        return False
    checked = same = 0
    for t in tokens:
        if t["end"] > len(text):
            return False
        spelling = token_spelling(t.get("token"))
        if not spelling or spelling == "[UNK]":
            continue
        checked += 1
        same += _fold(text[t["start"]:t["end"]]) == _fold(spelling)
    return checked == 0 or same >= 0.8 * checked


def pick_text(explanation, candidates):
    """The first of candidates (strings, e.g. a row's values) that is the
    text explained, or None."""
    if isinstance(explanation.get("text"), str):
        return explanation["text"]
    for c in candidates:
        if isinstance(c, str) and matches_text(explanation, c):
            return c
    return None


def segments(explanation, text=None):
    """The text in order as (piece, token or None): each token's span, and
    the pieces between (and after) them with None. From text when given
    (or the JSON's "text"), else rebuilt from the tokens' spellings, gaps
    as spaces. Overlapping spans (which a tokenizer does not make) are
    clipped so that no character is shown twice."""
    if text is None and isinstance(explanation.get("text"), str):
        text = explanation["text"]
    out = []
    pos = 0
    tokens = sorted(explanation.get("tokens") or [], key=lambda t: (t["start"], t["end"]))
    for t in tokens:
        start, end = max(t["start"], pos), t["end"]
        if text is not None:
            start, end = min(start, len(text)), min(end, len(text))
        if start > pos:
            out.append((text[pos:start] if text is not None else " " * (start - pos), None))
        if end > start:
            piece = text[start:end] if text is not None else token_spelling(t.get("token"))
            out.append((piece or "\ufffd", t))
            pos = end
        elif end == start == t["start"] and text is None:
            out.append((token_spelling(t.get("token")), t))
    if text is not None and pos < len(text):
        out.append((text[pos:], None))
    return out


def intensity(attribution, largest):
    """0..1: how strongly a token is shaded."""
    if not largest or not attribution:
        return 0.0
    return min(1.0, (abs(attribution) / largest) ** 0.5)


def largest(explanation):
    return max((abs(t["attribution"]) for t in explanation.get("tokens") or []), default=0.0)


def tint(attribution, big):
    """The background colour (r, g, b) of a token."""
    k = intensity(attribution, big)
    full = GREEN if attribution > 0 else RED
    return tuple(round(w + (f - w) * k) for w, f in zip(WHITE, full))


def _hex(rgb):
    return "#%02x%02x%02x" % rgb


def _fmt(x):
    return f"{x:+.4f}"


def _score_text(e):
    score = e.get("score")
    return f"{score:.4f}" if _is_number(score) else "?"


def method_text(e):
    m = e.get("method")
    if m == "integrated_gradients":
        steps = e.get("steps")
        return "integrated gradients" + (f", {steps} steps" if _is_int(steps) else "")
    if m == "gradient_x_input":
        return "gradient \u00d7 input"
    return str(m or "")


def to_html(explanation, text=None, header=True):
    """HTML (a str, everything escaped) of one explanation: a head with the
    label, its score and the method, and the text, each token a span with
    its tint, its attribution in title and data-attribution."""
    e = explanation
    big = largest(e)
    label = str(e.get("label", ""))
    rebuilt = text is None and not isinstance(e.get("text"), str)
    parts = ['<div class="sentiment-explanation" style="line-height:1.9">']
    if header:
        parts.append(
            '<div class="sentiment-explanation-head" style="font-size:0.85em;color:#374151">'
            f'<strong class="sentiment-label">{html.escape(label)}</strong> '
            f'<span class="sentiment-score">{html.escape(_score_text(e))}</span>'
            f' <span class="sentiment-method" style="color:#6b7280">'
            f'({html.escape(method_text(e))}'
            + (", truncated" if e.get("truncated") else "")
            + (", text rebuilt from tokens" if rebuilt else "") + ")</span> "
            f'<span class="sentiment-legend" style="color:#6b7280">'
            f'<span style="background:{_hex(GREEN)};padding:0 0.25em">toward</span> '
            f'<span style="background:{_hex(RED)};padding:0 0.25em">against</span> '
            f"{html.escape(label)}</span></div>")
    parts.append(f'<div class="sentiment-explanation-text" lang="zh" '
                 f'style="color:{TEXT_COLOUR};white-space:pre-wrap">')
    for piece, t in segments(e, text):
        if t is None:
            parts.append(f'<span class="sentiment-gap">{html.escape(piece)}</span>')
            continue
        a = t["attribution"]
        colour = _hex(tint(a, big)) if a else "#ffffff"
        side = "toward" if a > 0 else "against" if a < 0 else "neutral"
        title = f'{t.get("token", piece)}: {_fmt(a)} ({side} {label})'
        parts.append(
            f'<span class="sentiment-token sentiment-{side}" '
            f'style="background-color:{colour};border-radius:2px" '
            f'title="{html.escape(title, quote=True)}" '
            f'data-attribution="{a!r}">{html.escape(piece)}</span>')
    parts.append("</div></div>")
    return "".join(parts)


def to_ansi(explanation, text=None):
    """The text with each token on its tint (24-bit ANSI background, dark
    foreground), then the label and score: one line, no trailing newline."""
    e = explanation
    big = largest(e)
    out = []
    for piece, t in segments(e, text):
        if t is None or not t["attribution"]:
            out.append(piece)
            continue
        r, g, b = tint(t["attribution"], big)
        out.append(f"\x1b[48;2;{r};{g};{b}m\x1b[38;2;17;24;39m{piece}\x1b[0m")
    tail = f"  {e.get('label')} {_score_text(e)}"
    if e.get("truncated"):
        tail += " (truncated: the tokens after the model's maximum length are not explained)"
    return "".join(out) + tail
