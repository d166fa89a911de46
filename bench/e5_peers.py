#!/usr/bin/env python3
"""multilingual-e5-small with a classification head: classify() against ONNX Runtime.

    PY=/path/to/venv/bin/python    # torch, transformers, onnx, onnxruntime, numpy
    $PY bench/e5_peers.py run --base DIR [--work DIR] [--threads 1,2] [--runs 5]
                              [--engines ours,ours-int8,ort,ort-int8[,ort-fused]]
                              [--texts 512] [--batch 32] [--data ../shared/data]
                              [--results bench/out/e5-<date>.md]
    $PY bench/e5_peers.py prepare --base DIR [--work DIR]   # the model files only

DIR is a converted multilingual-e5-small (`make e5-model` writes
build/models/multilingual-e5-small). Needs build/sentiment.so (`make`), a
Python whose sqlite3 can load extensions for our side (Debian's
/usr/bin/python3; found as bench/peers.py finds it), and the virtual
environment above for the rest (pip install onnxruntime onnx into one with
torch and transformers). --work takes about 1.4 GB (the head model and three
ONNX files). Nothing is written into the repository except the report under
bench/out/. A full run is about 15 minutes on 2 idle cores (30 under load).

What one run does:

1. Model (the `prepare` step, cached in --work, default
   ~/.cache/sentiment-bench/e5): XLMRobertaForSequenceClassification built
   from DIR's encoder with a new 2-label head (RobertaClassificationHead,
   initialised with torch.manual_seed(SEED)), saved as a Hugging Face
   directory (hf/: model.safetensors, config.json, DIR's tokenizer files),
   exported to ONNX (model.onnx: torch.onnx.export, opset 17, dynamic batch
   and sequence axes) and quantized with onnxruntime.quantization's
   quantize_dynamic (model-int8.onnx: the MatMul weights INT8, per output
   column; embeddings, LayerNorm, softmax FP32, the layers ours INT8 keeps
   in FP32 too).
2. Texts: N_TEXTS (512) reviews sampled with a fixed seed from
   chnsenticorp/dev.tsv (read at run time, never stored in the repository),
   truncated to 128 tokens.
3. Engines, each in its own process, loaded once:
   - ours FP32 / ours INT8: build/sentiment.so through sqlite3, end to end
     from text: SELECT id, probs FROM classify('t', 'text', 'e5') with
     sentiment_config threads = the thread count, max_length 128, batch_size
     32 (the default) and precision fp32 or int8.
   - ONNX Runtime FP32 / INT8: transformers' fast tokenizer on hf/ (one batch
     call, RAYON_NUM_THREADS = the thread count), the ids ordered by length
     the way classify orders them (windows of 4 x 32 x threads rows, each
     sorted by length, cut into batches of 32, each padded to its longest),
     InferenceSession with all graph optimizations, intra_op threads = the
     thread count, inter_op 1, sequential, then a softmax. The tokenizing
     (with the sorting and padding) and the sessions' runs are timed apart:
     "end to end" is both, "engine" the runs alone.
   - ONNX Runtime FP32, fused (--engines ...,ort-fused; not in the default
     list): the same on model-fused.onnx, model.onnx through
     onnxruntime.transformers' offline optimizer (model_type bert: Attention,
     SkipLayerNormalization and BiasGelu fusions; the session's own
     optimizer leaves attention unfused on this graph).
   Per thread count: a warm-up (the 64 longest texts) per engine, then
   --runs passes over all texts, taken in turn engine by engine
   (interleaved, so load changes touch every engine alike); the median pass
   gives rows/s.
4. Correctness: ONNX Runtime FP32's probabilities against ours FP32 on every
   text (within 1e-4), and sentiment_probs() on the first texts against
   them; the INT8 engines against their FP32 selves (largest and mean
   probability change, label agreement).
5. Report: a Markdown section on stdout and in the --results file (default
   bench/out/e5-<date>.md, with the raw timings in a .json beside it), in
   the form bench/RESULTS.md keeps under "Earlier measurements" (the part
   that `make bench` leaves in place).
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import peers  # noqa: E402  (helpers: Worker, serve's protocol, machine_info, ...)

SEED = 20240611  # the texts (as bench/peers.py samples them) and the head
N_TEXTS = 512
MAX_LEN = 128
BATCH = 32
WINDOW_BATCHES = 4  # classify reads 4 x batch_size x threads rows per engine call
WARM_TEXTS = 64
PROB_TOL = 1e-4
PROBE_TEXTS = 4  # sentiment_probs() checked on this many texts
LABELS = ["negative", "positive"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "sentencepiece.bpe.model")
ENGINES = ["ours", "ours-int8", "ort", "ort-int8", "ort-fused"]
DEFAULT_ENGINES = ["ours", "ours-int8", "ort", "ort-int8"]
TITLES = {"ours": "ours FP32", "ours-int8": "ours INT8", "ort": "ONNX Runtime FP32",
          "ort-int8": "ONNX Runtime INT8", "ort-fused": "ONNX Runtime FP32, fused"}
ONNX_FILES = {"ort": "model.onnx", "ort-int8": "model-int8.onnx",
              "ort-fused": "model-fused.onnx"}
# Bump when prepare() makes something else, so that a cached --work is rebuilt.
PREPARE_STAMP = 1

log = peers.log


# ---------------------------------------------------------------- prepare

def prepare(base, work):
    """Builds work/hf, work/model.onnx and work/model-int8.onnx from base
    (cached: kept when work/manifest.json names the same base and stamp)."""
    manifest_path = os.path.join(work, "manifest.json")
    want = {"base": os.path.abspath(base), "stamp": PREPARE_STAMP, "seed": SEED}
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            have = json.load(f)
        if all(have.get(k) == v for k, v in want.items()):
            fuse(work, have)
            return have
    import numpy as np
    import torch
    import transformers
    from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaForSequenceClassification
    t0 = time.time()
    os.makedirs(work, exist_ok=True)
    hf = os.path.join(work, "hf")
    if os.path.exists(hf):
        shutil.rmtree(hf)
    cfg = XLMRobertaConfig.from_pretrained(base)
    cfg.architectures = ["XLMRobertaForSequenceClassification"]
    cfg.num_labels = len(LABELS)
    cfg.id2label = dict(enumerate(LABELS))
    cfg.label2id = {v: k for k, v in cfg.id2label.items()}
    torch.manual_seed(SEED)  # the new head: classifier.dense, classifier.out_proj
    model = XLMRobertaForSequenceClassification.from_pretrained(
        base, config=cfg, dtype=torch.float32).eval()
    model.save_pretrained(hf, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(base, name)):
            shutil.copy(os.path.join(base, name), os.path.join(hf, name))
    tok = AutoTokenizer.from_pretrained(hf)
    probe = ["房间很干净，服务也好。", "太差了，再也不来了", "一般般吧。" * 40]
    enc = tok(probe, truncation=True, max_length=MAX_LEN, padding=True, return_tensors="pt")
    with torch.inference_mode():
        ref = model(**enc).logits.numpy()

    onnx_path = os.path.join(work, "model.onnx")
    eager = XLMRobertaForSequenceClassification.from_pretrained(
        hf, attn_implementation="eager", dtype=torch.float32).eval()
    names = ["input_ids", "attention_mask"]
    dyn = {n: {0: "batch", 1: "sequence"} for n in names}
    dyn["logits"] = {0: "batch"}
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(eager, (enc["input_ids"][:2, :16], enc["attention_mask"][:2, :16]),
                          onnx_path, input_names=names, output_names=["logits"],
                          dynamic_axes=dyn, opset_version=17, dynamo=False)
    del eager
    from onnxruntime.quantization import QuantType, quantize_dynamic
    int8_path = os.path.join(work, "model-int8.onnx")
    quantize_dynamic(onnx_path, int8_path, weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul"])
    import onnxruntime as ort
    feed = {n: enc[n].numpy() for n in names}
    diffs = {}
    for key, path in (("onnx_max_diff", onnx_path), ("onnx_int8_max_diff", int8_path)):
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        diffs[key] = float(np.abs(sess.run(None, feed)[0] - ref).max())
    manifest = dict(want, torch=torch.__version__, transformers=transformers.__version__,
                    onnxruntime=ort.__version__, params=sum(p.numel() for p in model.parameters()),
                    config={k: getattr(cfg, k) for k in ("num_hidden_layers", "hidden_size",
                                                         "num_attention_heads",
                                                         "intermediate_size", "vocab_size")},
                    seconds=round(time.time() - t0, 1), **diffs)
    with open(manifest_path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    fuse(work, manifest)
    log("e5: model ready in %.0f s (%.1fM parameters); ONNX vs PyTorch max |logit diff| %.2g, "
        "INT8 ONNX %.2g" % (manifest["seconds"], manifest["params"] / 1e6,
                            diffs["onnx_max_diff"], diffs["onnx_int8_max_diff"]))
    return manifest


def fuse(work, manifest):
    """work/model-fused.onnx: model.onnx through onnxruntime.transformers'
    offline optimizer (model_type bert: Attention, SkipLayerNormalization,
    BiasGelu fusions), the way ONNX Runtime is usually deployed for BERT-like
    encoders; the session-level optimizer alone leaves attention unfused."""
    path = os.path.join(work, "model-fused.onnx")
    if os.path.exists(path):
        return
    from onnxruntime.transformers import optimizer
    cfg = manifest["config"]
    opt = optimizer.optimize_model(os.path.join(work, "model.onnx"), model_type="bert",
                                   num_heads=cfg["num_attention_heads"],
                                   hidden_size=cfg["hidden_size"])
    opt.save_model_to_file(path + ".tmp")
    os.replace(path + ".tmp", path)
    log("e5: fused ONNX model: %s" % json.dumps(opt.get_fused_operator_statistics()))


# ---------------------------------------------------------------- workers

def classify_order(lengths, threads):
    """The order classify runs rows in: windows of WINDOW_BATCHES x BATCH x
    threads rows, each sorted by length (ties by position, as
    model/encoder/classifier.c sorts them)."""
    window = WINDOW_BATCHES * BATCH * threads
    order = []
    for first in range(0, len(lengths), window):
        idx = range(first, min(len(lengths), first + window))
        order += sorted(idx, key=lambda i: (lengths[i], i))
    return order


def set_batch(n):
    """classify's batch_size and ONNX Runtime's batches for this process."""
    global BATCH
    BATCH = n


def classify_batches(lengths, threads):
    """[[row index, ...] per batch] in classify's order."""
    order, out = classify_order(lengths, threads), []
    window = WINDOW_BATCHES * BATCH * threads
    for first in range(0, len(order), window):
        part = order[first:first + window]
        out += [part[k:k + BATCH] for k in range(0, len(part), BATCH)]
    return out


class OrtBench:
    """ONNX Runtime on texts: the fast tokenizer, then the session."""

    def __init__(self, work, engine, threads, texts_path, probs_path):
        import numpy as np
        import onnxruntime as ort
        from transformers import AutoTokenizer
        self.np, self.threads, self.probs_path = np, threads, probs_path
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        path = os.path.join(work, ONNX_FILES[engine])
        self.sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.tok = AutoTokenizer.from_pretrained(os.path.join(work, "hf"))
        self.pad = self.tok.pad_token_id
        with open(texts_path, encoding="utf-8") as f:
            self.texts = [line.rstrip("\n") for line in f]
        lengths = [len(x) for x in self.encode(self.texts)]
        self.longest = sorted(range(len(lengths)), key=lambda i: -lengths[i])[:WARM_TEXTS]
        self.passes = 0
        self.info = {"version": ort.__version__, "tokenizer": type(self.tok).__name__,
                     "tokens": sum(lengths),
                     "padded": sum(len(b) * max(lengths[i] for i in b)
                                   for b in classify_batches(lengths, threads))}

    def encode(self, texts):
        return self.tok(texts, truncation=True, max_length=MAX_LEN)["input_ids"]

    def forward(self, texts):
        """(probabilities in text order, tokenize seconds, engine seconds)."""
        np = self.np
        t0 = time.perf_counter()
        ids = self.encode(texts)
        feeds = []
        for rows in classify_batches([len(x) for x in ids], self.threads):
            T = max(len(ids[i]) for i in rows)
            a = np.full((len(rows), T), self.pad, dtype=np.int64)
            m = np.zeros((len(rows), T), dtype=np.int64)
            for b, i in enumerate(rows):
                a[b, :len(ids[i])] = ids[i]
                m[b, :len(ids[i])] = 1
            feeds.append((rows, {"input_ids": a, "attention_mask": m}))
        t1 = time.perf_counter()
        probs = np.zeros((len(texts), len(LABELS)))
        for rows, feed in feeds:
            probs[rows] = peers.softmax(np, self.sess.run(None, feed)[0])
        t2 = time.perf_counter()
        return probs, t1 - t0, t2 - t1

    def warm(self):
        _, a, b = self.forward([self.texts[i] for i in self.longest])
        return {"time": a + b}

    def run(self):
        probs, tok_s, eng_s = self.forward(self.texts)
        if not self.passes:
            self.np.savetxt(self.probs_path, probs, fmt="%.9g")
        self.passes += 1
        return {"time": tok_s + eng_s, "tokenize": tok_s, "engine": eng_s}


class SqlBench:
    """classify() through SQLite, from text to probabilities."""

    def __init__(self, work, engine, threads, texts_path, probs_path):
        import sqlite3
        int8 = engine == "ours-int8"
        db = sqlite3.connect(":memory:")
        db.enable_load_extension(True)
        db.load_extension(os.path.join(ROOT, "build", "sentiment"))
        db.enable_load_extension(False)
        self.db, self.probs_path, self.passes = db, probs_path, 0
        db.execute("SELECT sentiment_load('e5', ?)", (os.path.join(work, "hf"),))
        for key, val in (("device", "cpu"), ("threads", threads), ("max_length", MAX_LEN),
                         ("batch_size", BATCH), ("progress", "off"),
                         ("precision", "int8" if int8 else "fp32")):
            db.execute("SELECT sentiment_config(?, ?)", (key, val))
        with open(texts_path, encoding="utf-8") as f:
            texts = [line.rstrip("\n") for line in f]
        db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT)")
        db.executemany("INSERT INTO t(id, text) VALUES (?, ?)", enumerate(texts, 1))
        lengths = sorted(range(len(texts)), key=lambda i: -len(texts[i].encode("utf-8")))
        db.execute("CREATE TABLE warm(id INTEGER PRIMARY KEY, text TEXT)")
        db.executemany("INSERT INTO warm(id, text) VALUES (?, ?)",
                       [(i + 1, texts[i]) for i in sorted(lengths[:WARM_TEXTS])])
        # sentiment_probs() on the first texts, for the parity check.
        self.probe = [self.row(db.execute("SELECT sentiment_probs(?, 'e5')", (t,)).fetchone()[0])
                      for t in texts[:PROBE_TEXTS]]
        self.info = {"version": db.execute("SELECT sentiment_version()").fetchone()[0],
                     "sqlite": sqlite3.sqlite_version,
                     "device": db.execute("SELECT sentiment_device()").fetchone()[0],
                     "precision": db.execute("SELECT sentiment_config('precision')").fetchone()[0],
                     "probe": self.probe}

    @staticmethod
    def row(probs):
        p = json.loads(probs) if probs else {}
        return [p.get(lab, float("nan")) for lab in LABELS]

    def classify(self, table):
        return self.db.execute("SELECT id, probs FROM classify('%s', 'text', 'e5')"
                               % table).fetchall()

    def warm(self):
        t0 = time.perf_counter()
        self.classify("warm")
        return {"time": time.perf_counter() - t0}

    def run(self):
        t0 = time.perf_counter()
        rows = self.classify("t")
        t = time.perf_counter() - t0
        if not self.passes:
            with open(self.probs_path, "w", encoding="utf-8") as f:
                for _, probs in rows:
                    f.write(" ".join("%.9g" % x for x in self.row(probs)) + "\n")
        self.passes += 1
        return {"time": t}


def worker(args):
    """One engine, in serve mode: "warm texts" / "run texts" / "quit" on
    stdin, a JSON line each ({"result": {...}}), as bench/peers.py's serve."""
    kind = OrtBench if args.engine.startswith("ort") else SqlBench
    bench = kind(args.work, args.engine, args.threads, args.texts, args.probs)
    print(json.dumps(dict(bench.info, engine=args.engine, threads=args.threads,
                          threadpools=peers.threadpools() if kind is OrtBench else None)),
          flush=True)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        if parts[0] not in ("warm", "run"):
            print(json.dumps({"error": "unknown command %r" % line.strip()}), flush=True)
            continue
        out = bench.warm() if parts[0] == "warm" else bench.run()
        print(json.dumps({"work": "texts", "result": out}), flush=True)


# ---------------------------------------------------------------- report

def fmt(x):
    return "—" if x is None else peers.fmt_rate(x)


def ratio(a, b):
    return "%.2fx" % (a / b) if a and b else "—"


def render(res):
    m = res["machine"]
    lines = ["### multilingual-e5-small through classify (%s)" % res["date"], "",
             "`%s`" % res["command"], "",
             "- Machine: %s, %s cores (%s); load average (1, 5, 15 min) at the start %s, at the "
             "end %s; 1-minute load when each thread count began: %s." % (
                 m.get("cpu"), m.get("cores"), m.get("simd"), m.get("load"),
                 res.get("load_end"), ", ".join("%s thread%s %.1f" % (t, "s" if t > 1 else "", l)
                                                for t, l in res["loads"])),
             "- Commit %s; %s." % (m.get("commit"), res["engines"].get("ours", "")),
             "- Model: %s with a new 2-label head (XLMRobertaForSequenceClassification, "
             "torch.manual_seed(%d)); %.1fM parameters (%d layers, hidden %d, %d heads, FFN %d, "
             "vocabulary %d); ONNX export (opset 17) vs PyTorch max |logit diff| %.2g." % (
                 res["model"]["base"], SEED, res["model"]["params"] / 1e6,
                 *(res["model"]["config"][k] for k in ("num_hidden_layers", "hidden_size",
                                                       "num_attention_heads",
                                                       "intermediate_size", "vocab_size")),
                 res["model"]["onnx_max_diff"]),
             "- Texts: %d reviews sampled (seed %d) from shared/data/chnsenticorp/dev.tsv, max "
             "%d tokens: %d tokens in all (mean %.1f), %d once padded in classify's batches of "
             "%d (1 thread; %d with 2)." % (
                 res["texts"], SEED, MAX_LEN, res.get("tokens") or 0,
                 (res.get("tokens") or 0) / res["texts"],
                 res["padded"].get("1", 0), BATCH, res["padded"].get("2", 0)),
             "- ours: build/sentiment.so's classify('t', 'text', 'e5') through Python's sqlite3, "
             "end to end from text (tokenizing and SQLite included), sentiment_config threads, "
             "max_length %d, batch_size %d, precision fp32 / int8." % (MAX_LEN, BATCH),
             "- ONNX Runtime: %s" % res["engines"].get("ort", ""),
             "- ONNX Runtime INT8: the same with model-int8.onnx, "
             "onnxruntime.quantization.quantize_dynamic(weight_type QInt8, per_channel, "
             "op_types_to_quantize MatMul): the encoder's MatMul weights INT8 per output column, "
             "activations quantized per call (dynamic), the rest FP32, as ours INT8.",
             "", "Rows/s, median of %d passes over all %d texts after a warm-up, engines "
             "interleaved pass by pass (higher is better). ONNX Runtime \"end to end\" includes "
             "the fast tokenizer (with ordering and padding), \"engine\" the session runs only; "
             "ours is always end to end." % (res["runs"], res["texts"]), "",
             "| threads | ours FP32 | ours INT8 | ONNX Runtime FP32, end to end | ONNX Runtime "
             "FP32, engine | ONNX Runtime INT8, end to end | ONNX Runtime INT8, engine | ours / "
             "ORT FP32 (end to end) | ours INT8 / ORT INT8 (end to end) | ours INT8 / ours "
             "FP32 |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in res["threads"]:
        r = res["rates"][str(t)]
        lines.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            t, fmt(r.get("ours")), fmt(r.get("ours-int8")), fmt(r.get("ort")),
            fmt(r.get("ort/engine")), fmt(r.get("ort-int8")), fmt(r.get("ort-int8/engine")),
            ratio(r.get("ours"), r.get("ort")), ratio(r.get("ours-int8"), r.get("ort-int8")),
            ratio(r.get("ours-int8"), r.get("ours"))))
    for t in res["threads"]:
        r = res["rates"][str(t)]
        if r.get("ort-fused"):
            lines.append("\n%s, %d thread%s: %s rows/s end to end, %s engine; ours FP32 / it "
                         "%s." % (TITLES["ort-fused"], t, "s" if t > 1 else "",
                                  fmt(r["ort-fused"]), fmt(r.get("ort-fused/engine")),
                                  ratio(r.get("ours"), r["ort-fused"])))
    lines += ["", "Tokenizer share of ONNX Runtime's end-to-end pass (median): " + "; ".join(
        "%s thread%s %s" % (t, "s" if t > 1 else "", ", ".join(
            "%s %.1f%%" % (TITLES[e], 100 * res["tok_share"][str(t)][e])
            for e in ("ort", "ort-int8", "ort-fused") if e in res["tok_share"].get(str(t), {})))
        for t in res["threads"]) + ".", ""]
    lines += ["Correctness (every text, first pass):", ""]
    lines += ["- %s" % c for c in res["checks"]]
    lines += ["", "Spread of the timed passes, (slowest - fastest) / median: " + "; ".join(
        "%s %s thread%s %.0f%%" % (TITLES[e], t, "s" if int(t) > 1 else "", 100 * s)
        for (e, t), s in sorted(res["spread"].items(), key=lambda kv: (kv[0][1], kv[0][0]))) + "."]
    lines.append("Whole run: %d s." % res["seconds"])
    return "\n".join(lines)


def check(res, probs, probes):
    out = []
    ok = True
    for t, p in probs.items():
        for e in ("ort", "ort-fused"):
            if "ours" not in p or e not in p:
                continue
            worst, bad = peers.compare(p["ours"], p[e])
            good = worst <= PROB_TOL and bad == 0
            ok &= good
            out.append("%s thread%s: %s vs ours FP32: max |dp| %.2g (tolerance %g), %d label "
                       "differences: %s" % (t, "s" if int(t) > 1 else "", TITLES[e], worst,
                                           PROB_TOL, bad, "pass" if good else "FAIL"))
        for e8, e in (("ours-int8", "ours"), ("ort-int8", "ort"), ("ours-int8", "ort-int8")):
            if e8 in p and e in p:
                worst, total, count, same, decided, n = peers.compare_int8(p[e], p[e8])
                agree = sum(max(range(len(a)), key=a.__getitem__) ==
                            max(range(len(b)), key=b.__getitem__) for a, b in zip(p[e], p[e8]))
                out.append("%s thread%s: %s vs %s: max |dp| %.2g, mean %.2g, same label on %d "
                           "of %d texts" % (t, "s" if int(t) > 1 else "", TITLES[e8], TITLES[e],
                                            worst, total / max(1, count), agree, n))
    ref = next((p["ours"] for p in probs.values() if "ours" in p), None)
    if ref:
        pos = [r[1] for r in ref]
        out.append("ours FP32's P(%s) spans %.3f to %.3f over the texts (a random head: the "
                   "labels carry no meaning, the check is of the arithmetic)"
                   % (LABELS[1], min(pos), max(pos)))
    for t, (ours_probe, ort_rows) in probes.items():
        worst = max(abs(a - b) for r1, r2 in zip(ours_probe, ort_rows) for a, b in zip(r1, r2))
        good = worst <= PROB_TOL
        ok &= good
        out.append("%s thread%s: sentiment_probs() on the first %d texts vs ONNX Runtime FP32: "
                   "max |dp| %.2g: %s" % (t, "s" if int(t) > 1 else "", len(ours_probe), worst,
                                          "pass" if good else "FAIL"))
    res["checks"] = out
    return ok


def main_run(args):
    t_start = time.time()
    threads_list = [int(x) for x in args.threads.split(",")]
    engines = args.engines.split(",")
    for e in engines:
        if e not in ENGINES:
            raise SystemExit("unknown engine %s (from %s)" % (e, ",".join(ENGINES)))
    so = os.path.join(ROOT, "build", "sentiment.so")
    if not os.path.exists(so):
        raise SystemExit("%s is missing: run `make` first" % so)
    sql_py = peers.sql_python()
    if any(e.startswith("ours") for e in engines) and not sql_py:
        raise SystemExit("no Python here can load SQLite extensions (Debian's /usr/bin/python3 "
                         "can)")
    machine = peers.machine_info()
    model = prepare(args.base, args.work)
    src, texts = peers.sample_texts(args.data)
    texts = [t.replace("\n", " ") for t in texts[:args.texts]]
    os.makedirs(os.path.join(args.work, "run"), exist_ok=True)
    texts_path = os.path.join(args.work, "run", "texts.txt")
    with open(texts_path, "w", encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
    clean_env = {k: v for k, v in os.environ.items() if k not in peers.BLAS_ENV}
    res = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "machine": machine,
           "command": args.command or " ".join([sys.executable] + sys.argv),
           "model": model, "texts": len(texts), "runs": args.runs, "threads": threads_list,
           "rates": {}, "times": {}, "loads": [], "engines": {}, "tok_share": {},
           "spread": {}, "padded": {}}
    probs, probes = {}, {}
    for t in threads_list:
        env = peers.engine_env(t, clean_env)
        env["RAYON_NUM_THREADS"] = str(t)
        env["TOKENIZERS_PARALLELISM"] = "true" if t > 1 else "false"
        res["loads"].append((t, os.getloadavg()[0]))
        workers = {}
        for e in engines:
            py = sql_py if e.startswith("ours") else sys.executable
            out = os.path.join(args.work, "run", "probs-%s-%d.txt" % (e, t))
            cmd = [py, os.path.abspath(__file__), "worker", "--engine", e, "--work", args.work,
                   "--threads", str(t), "--texts", texts_path, "--probs", out,
                   "--batch", str(BATCH)]
            w = peers.Worker(e, cmd, env, os.path.join(args.work, "run", "%s-%d.log" % (e, t)))
            workers[e] = (w, out)
            info = w.info[0] if w.info else {}
            if e == "ours":
                res["engines"].setdefault("ours", "sentiment %s, SQLite %s, sentiment_device() "
                                          "at %d thread%s: %s" % (
                                              info.get("version"), info.get("sqlite"), t,
                                              "s" if t > 1 else "", info.get("device")))
                probes.setdefault(str(t), [info.get("probe")])
            if e.startswith("ort"):
                res["tokens"] = info.get("tokens")
                res["padded"][str(t)] = info.get("padded")
            if e.startswith("ort") and "ort" not in res["engines"]:
                res["engines"]["ort"] = peers.describe("onnxruntime", dict(
                    info, config="CPUExecutionProvider, graph optimizations ORT_ENABLE_ALL, "
                                 "intra_op_num_threads = threads, inter_op_num_threads 1, "
                                 "sequential; tokenizer %s, one batch call, RAYON_NUM_THREADS "
                                 "= threads" % info.get("tokenizer")))
            log("e5: %s, %d thread%s: started in %.1f s" % (e, t, "s" if t > 1 else "",
                                                            w.startup))
        for e, (w, _) in workers.items():
            w.ask("warm", "texts", "result")
        passes = {e: [] for e in engines}
        for k in range(args.runs):
            for e, (w, _) in workers.items():
                r = w.ask("run", "texts", "result")
                if r:
                    passes[e].append(r)
                    log("e5: %d thread%s pass %d %-9s %6.2f s%s" % (
                        t, "s" if t > 1 else "", k + 1, e, r["time"],
                        " (tokenize %.2f s)" % r["tokenize"] if "tokenize" in r else ""))
        for e, (w, out) in workers.items():
            why = w.close()
            if why:
                log("e5: %s failed: %s" % (e, why))
        rates, shares = {}, {}
        for e, ps in passes.items():
            if not ps:
                continue
            times = [p["time"] for p in ps]
            med = statistics.median(times)
            rates[e] = len(texts) / med
            res["spread"][(e, str(t))] = (max(times) - min(times)) / med
            if "engine" in ps[0]:
                rates[e + "/engine"] = len(texts) / statistics.median(p["engine"] for p in ps)
                shares[e] = statistics.median(p["tokenize"] / p["time"] for p in ps)
        res["rates"][str(t)], res["tok_share"][str(t)], res["times"][str(t)] = rates, shares, passes
        probs[str(t)] = {e: peers.load_probs(out) for e, (w, out) in workers.items()
                         if os.path.exists(out)}
        if str(t) in probes and "ort" in probs[str(t)]:
            probes[str(t)].append(probs[str(t)]["ort"][:PROBE_TEXTS])
    probes = {t: v for t, v in probes.items() if len(v) == 2}
    ok = check(res, probs, probes)
    res["load_end"] = " ".join("%.2f" % x for x in os.getloadavg())
    res["seconds"] = round(time.time() - t_start)
    md = render(res)
    print(md)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    path = args.results or os.path.join(ROOT, "bench", "out", "e5-%s.md" % stamp)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(md + "\n")
    with open(os.path.splitext(path)[0] + ".json", "w", encoding="utf-8") as f:
        json.dump(dict(res, spread={"%s/%s" % k: v for k, v in res["spread"].items()}), f,
                  indent=1, default=str)
    log("e5: wrote %s" % path)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    default_work = os.path.expanduser("~/.cache/sentiment-bench/e5")
    p = sub.add_parser("prepare", help="only build the model files in --work")
    p.add_argument("--base", required=True)
    p.add_argument("--work", default=default_work)
    r = sub.add_parser("run")
    r.add_argument("--base", required=True, help="a converted multilingual-e5-small directory")
    r.add_argument("--work", default=default_work)
    r.add_argument("--threads", default="1,2")
    r.add_argument("--runs", type=int, default=5)
    r.add_argument("--texts", type=int, default=N_TEXTS, help="use the first N sampled texts")
    r.add_argument("--batch", type=int, default=BATCH,
                   help="classify's batch_size, and ONNX Runtime's batches (default %d)" % BATCH)
    r.add_argument("--engines", default=",".join(DEFAULT_ENGINES),
                   help="from %s (default %s)" % (",".join(ENGINES), ",".join(DEFAULT_ENGINES)))
    r.add_argument("--data", default=os.path.join(os.path.dirname(ROOT), "shared", "data"))
    r.add_argument("--results", default="")
    r.add_argument("--command", default="", help="the command, as the report states it")
    w = sub.add_parser("worker")
    w.add_argument("--engine", required=True, choices=ENGINES)
    w.add_argument("--work", required=True)
    w.add_argument("--threads", type=int, required=True)
    w.add_argument("--texts", required=True)
    w.add_argument("--probs", required=True)
    w.add_argument("--batch", type=int, default=BATCH)
    args = ap.parse_args()
    if args.cmd in ("run", "worker"):
        if not 1 <= args.batch <= 1024:
            raise SystemExit("--batch must be 1 to 1024")
        set_batch(args.batch)
    if args.cmd == "prepare":
        prepare(args.base, args.work)
    elif args.cmd == "worker":
        worker(args)
    else:
        if args.runs < 1:
            raise SystemExit("--runs must be at least 1")
        sys.exit(main_run(args))


if __name__ == "__main__":
    main()
