#!/usr/bin/env python3
"""Builds the benchmark models: one set of weights per shape, in every engine's format.

    python bench/make_models.py --cache DIR [--shapes builtin,ernie-medium,bert-base]

For each shape, under DIR/models/<shape>/:
    hf/          config.json, vocab.txt, model.safetensors (what our engine and
                 PyTorch load; BertForSequenceClassification, 2 labels)
    model.onnx   exported from hf/ with torch.onnx.export (opset 17, dynamic
                 batch and sequence axes), for ONNX Runtime
    paddle/      the same weights in a paddle.nn network (bench/paddle_bert.py)
                 saved with paddle.jit.save for paddle.inference
    manifest.json  shape, parameter count, where the weights came from, the
                 export checks (largest logit difference to PyTorch) and a stamp
                 that makes a later run rebuild when this script changes.

Weights are random (seeded): the benchmark measures speed, and the labels of a
random model mean nothing. The "builtin" shape is the built-in model when
model/builtin/ holds one (config.json, vocab.txt, model.safetensors); until
then it is a random stand-in of the shape the built-in model is planned at.
Its encoder only: the wide part (config.json's "wide", tensors wide.*, see
README "The wide part") is left out, since no peer can run it and every
engine, classify() through SQL included, must compute the same thing.

The vocabulary is tests/fixtures/vocab.txt followed by every CJK Unified
Ideograph (U+4E00..U+9FFF) it lacks: 21,512 entries, the size class of
bert-base-chinese's 21,128, and every Chinese character is one token, as with
the real vocabularies. The models are big (BERT-base: 400 MB per format), so
they live outside the repository and are never committed.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE_VOCAB = os.path.join(ROOT, "tests", "fixtures", "vocab.txt")
BUILTIN_DIR = os.path.join(ROOT, "model", "builtin")

SHAPES = {
    # name: (layers, hidden, heads, intermediate, label)
    "builtin": (6, 128, 4, 512, "built-in model shape"),
    "ernie-medium": (6, 768, 12, 3072, "ERNIE 3.0-medium shape"),
    "bert-base": (12, 768, 12, 3072, "BERT-base shape"),
}
SEEDS = {"builtin": 11, "ernie-medium": 12, "bert-base": 13}


def stamp():
    h = hashlib.sha256()
    for name in ("make_models.py", "paddle_bert.py"):
        with open(os.path.join(HERE, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def builtin_available():
    return all(os.path.isfile(os.path.join(BUILTIN_DIR, f))
               for f in ("config.json", "vocab.txt", "model.safetensors"))


def write_vocab(path):
    with open(FIXTURE_VOCAB, encoding="utf-8") as f:
        tokens = f.read().split("\n")
    while tokens and tokens[-1] == "":
        tokens.pop()
    have = set(tokens)
    tokens += [chr(c) for c in range(0x4E00, 0xA000) if chr(c) not in have]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return len(tokens)


def random_model(shape, vocab_size):
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    L, C, H, F, _ = SHAPES[shape]
    cfg = BertConfig(vocab_size=vocab_size, hidden_size=C, num_hidden_layers=L,
                     num_attention_heads=H, intermediate_size=F,
                     max_position_embeddings=512, hidden_act="gelu",
                     id2label={0: "negative", 1: "positive"},
                     label2id={"negative": 0, "positive": 1})
    torch.manual_seed(SEEDS[shape])
    model = BertForSequenceClassification(cfg).eval()
    g = torch.Generator().manual_seed(SEEDS[shape])
    with torch.no_grad():
        # transformers' init leaves LayerNorm at (1, 0) and biases at 0;
        # perturb every tensor so each one matters to the output, and give
        # the head a scale that spreads the probabilities out, so that a
        # label comparison between engines means something.
        for _, p in sorted(model.named_parameters()):
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
        # A random encoder's [CLS] vector varies little from text to text,
        # so a random head gives every text the same label. Scale the head
        # so that the logit difference varies by about 2 across random
        # token sequences, and centre it, so that the labels split and the
        # label comparison between engines tests something.
        n = 48
        lens = torch.randint(8, 129, (n,), generator=g)
        T = int(lens.max())
        ids = torch.randint(5, vocab_size, (n, T), generator=g)
        ids[:, 0] = 2
        mask = (torch.arange(T)[None, :] < lens[:, None]).long()
        h = model.bert(input_ids=ids, attention_mask=mask).pooler_output
        w = model.classifier.weight
        d = h @ (w[1] - w[0])
        k = min(50.0, max(1.0, 2.0 / float(d.std())))
        w.mul_(k)
        model.classifier.bias.zero_()
        model.classifier.bias[1] = -float((h @ (w[1] - w[0])).median())
    return model


def sample_batch(vocab_size, seed=5):
    """A padded batch with different lengths, for the export checks."""
    import numpy as np
    rng = np.random.default_rng(seed)
    lengths = [37, 5, 64, 20]
    T = max(lengths)
    ids = np.zeros((len(lengths), T), dtype=np.int64)
    mask = np.zeros((len(lengths), T), dtype=np.int64)
    for b, n in enumerate(lengths):
        ids[b, :n] = rng.integers(5, vocab_size, n)
        ids[b, 0], ids[b, n - 1] = 2, 3
        mask[b, :n] = 1
    return ids, mask, np.zeros_like(ids)


def copy_encoder_only(src, dst):
    """The model in src without its wide part, into dst."""
    from safetensors.numpy import load_file, save_file
    shutil.copy(os.path.join(src, "vocab.txt"), os.path.join(dst, "vocab.txt"))
    with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg.pop("wide", None)
    with open(os.path.join(dst, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    save_file({k: v for k, v in tensors.items() if not k.startswith("wide.")},
              os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})


def build(shape, cache, log):
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification

    out = os.path.join(cache, "models", shape)
    manifest_path = os.path.join(out, "manifest.json")
    source = "model/builtin" if shape == "builtin" and builtin_available() else "random"
    want = {"stamp": stamp(), "source": source}
    if source == "model/builtin":
        h = hashlib.sha256()
        for f in ("config.json", "vocab.txt", "model.safetensors"):
            with open(os.path.join(BUILTIN_DIR, f), "rb") as fh:
                h.update(fh.read())
        want["builtin_sha256"] = h.hexdigest()[:16]
    if os.path.isfile(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            have = json.load(f)
        if all(have.get(k) == v for k, v in want.items()) and have.get("ok"):
            log("%s: cached in %s" % (shape, out))
            return have

    t0 = time.time()
    shutil.rmtree(out, ignore_errors=True)
    hf = os.path.join(out, "hf")
    os.makedirs(hf)
    if source == "model/builtin":
        copy_encoder_only(BUILTIN_DIR, hf)
        model = AutoModelForSequenceClassification.from_pretrained(
            hf, attn_implementation="eager", dtype=torch.float32).eval()
        label = "built-in model (model/builtin)"
    else:
        vocab_size = write_vocab(os.path.join(hf, "vocab.txt"))
        model = random_model(shape, vocab_size)
        model.save_pretrained(hf, safe_serialization=True)
        label = SHAPES[shape][4] + (" (random stand-in)" if shape == "builtin" else "")
        for extra in os.listdir(hf):
            if extra not in ("config.json", "vocab.txt", "model.safetensors"):
                os.remove(os.path.join(hf, extra))
    cfg = model.config
    vocab_size = cfg.vocab_size
    ids, mask, types = sample_batch(vocab_size)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                    token_type_ids=torch.from_numpy(types)).logits.numpy()
    manifest = dict(want, shape=shape, label=label, layers=cfg.num_hidden_layers,
                    hidden=cfg.hidden_size, heads=cfg.num_attention_heads,
                    intermediate=cfg.intermediate_size, vocab=vocab_size,
                    params=sum(p.numel() for p in model.parameters()), ok=False)

    # ONNX: the eager attention graph (the one ONNX Runtime's BERT fusions
    # know), exported with the legacy TorchScript exporter, which takes
    # dynamic_axes; opset 17.
    onnx_path = os.path.join(out, "model.onnx")
    eager = AutoModelForSequenceClassification.from_pretrained(
        hf, attn_implementation="eager", dtype=torch.float32).eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    dyn = {n: {0: "batch", 1: "sequence"} for n in names}
    dyn["logits"] = {0: "batch"}
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(eager, (torch.from_numpy(ids[:2, :16]), torch.from_numpy(mask[:2, :16]),
                                  torch.from_numpy(types[:2, :16])),
                          onnx_path, input_names=names, output_names=["logits"],
                          dynamic_axes=dyn, opset_version=17, dynamo=False)
    del eager
    import onnxruntime as ort
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
    manifest["onnx_max_diff"] = float(np.abs(got - ref).max())
    del sess

    # Paddle: the same weights in paddle.nn, saved for paddle.inference.
    try:
        import paddle
        sys.path.insert(0, HERE)
        import paddle_bert
        paddle.set_device("cpu")
        net = paddle_bert.load(hf)
        got = net(paddle.to_tensor(ids), paddle.to_tensor(types),
                  paddle.to_tensor(mask.astype(np.float32))).numpy()
        manifest["paddle_dygraph_max_diff"] = float(np.abs(got - ref).max())
        paddle_bert.save_inference(net, os.path.join(out, "paddle", "model"))
        manifest["paddle"] = "saved"
    except Exception as e:  # Paddle missing or broken: the others still run
        manifest["paddle"] = "failed: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:300])

    manifest["ok"] = manifest["onnx_max_diff"] < 1e-3
    manifest["build_seconds"] = round(time.time() - t0, 1)
    with open(manifest_path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    log("%s: built in %.0f s (%s, %.1fM parameters); ONNX max |diff| %.2g, paddle: %s%s" % (
        shape, time.time() - t0, label, manifest["params"] / 1e6, manifest["onnx_max_diff"],
        manifest["paddle"], " max |diff| %.2g" % manifest["paddle_dygraph_max_diff"]
        if "paddle_dygraph_max_diff" in manifest else ""))
    return manifest


def main():
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    for shape in args.shapes.split(","):
        if shape not in SHAPES:
            sys.exit("make_models.py: unknown shape %r; known: %s" % (shape, ", ".join(SHAPES)))
        m = build(shape, args.cache, lambda s: print("make_models: " + s, flush=True))
        if not m.get("ok"):
            sys.exit("make_models.py: %s: the ONNX export does not match PyTorch" % shape)


if __name__ == "__main__":
    main()
