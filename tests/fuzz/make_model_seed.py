#!/usr/bin/env python3
"""make_model_seed.py OUT_DIR: writes seed inputs for fuzz_stored_model.c.

Each seed is a whole stored model, framed as the target reads it: config
length and tokenizer length (little-endian uint32; the tokenizer length's top
bit set when the tokenizer is a tokenizer.json, the tokenizer column, else it
is a vocab.txt), config.json, the tokenizer, model.safetensors. The models are
the smallest BERT shapes (hidden 4, one layer, vocabulary of 8) in F32, F16
and BF16, one with three labels, one with a wide part (config.json's "wide"
key and the wide.weight, wide.bias and wide.idf tensors, 16 buckets), the same
shape as an XLM-RoBERTa classifier with a small Unigram tokenizer.json, and
the repository's bert_tiny and xlmr_tiny fixtures. Standard library only.
"""
import json
import os
import struct
import sys

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "好", "差", "很"]


def tensors(hidden, inter, layers, vocab, positions, labels, roberta=False):
    pre = "roberta." if roberta else "bert."
    t = {
        pre + "embeddings.word_embeddings.weight": [vocab, hidden],
        pre + "embeddings.position_embeddings.weight": [positions, hidden],
        pre + "embeddings.token_type_embeddings.weight": [1 if roberta else 2, hidden],
        pre + "embeddings.LayerNorm.weight": [hidden],
        pre + "embeddings.LayerNorm.bias": [hidden],
    }
    if roberta:  # RobertaClassificationHead
        t.update({"classifier.dense.weight": [hidden, hidden], "classifier.dense.bias": [hidden],
                  "classifier.out_proj.weight": [labels, hidden],
                  "classifier.out_proj.bias": [labels]})
    else:
        t.update({"bert.pooler.dense.weight": [hidden, hidden], "bert.pooler.dense.bias": [hidden],
                  "classifier.weight": [labels, hidden], "classifier.bias": [labels]})
    for i in range(layers):
        p = pre + "encoder.layer.%d." % i
        for n in ("attention.self.query", "attention.self.key", "attention.self.value",
                  "attention.output.dense"):
            t[p + n + ".weight"] = [hidden, hidden]
            t[p + n + ".bias"] = [hidden]
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + n + ".weight"] = [hidden]
            t[p + n + ".bias"] = [hidden]
        t[p + "intermediate.dense.weight"] = [inter, hidden]
        t[p + "intermediate.dense.bias"] = [inter]
        t[p + "output.dense.weight"] = [hidden, inter]
        t[p + "output.dense.bias"] = [hidden]
    return t


def safetensors(shapes, dtype):
    size = {"F32": 4, "F16": 2, "BF16": 2}[dtype]
    one = {"F32": struct.pack("<f", 0.5), "F16": b"\x00\x38", "BF16": b"\x00\x3f"}[dtype]
    header, data = {}, b""
    for name in sorted(shapes):
        n = 1
        for d in shapes[name]:
            n *= d
        header[name] = {"dtype": dtype, "shape": shapes[name],
                        "data_offsets": [len(data), len(data) + n * size]}
        data += one * n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def frame(config, vocab, st, tokenizer_json=False):
    n = len(vocab) | (0x80000000 if tokenizer_json else 0)
    return struct.pack("<II", len(config), n) + config + vocab + st


# A Unigram tokenizer.json as transformers writes XLM-RoBERTa's, without the
# Precompiled charsmap (the xlmr_tiny seed has one).
PIECES = [["<s>", 0.0], ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["\u2581", -2.0],
          ["好", -3.0], ["差", -3.5], ["很", -3.2], ["\u2581ok", -4.0], ["<mask>", 0.0]]


def unigram_json():
    added = [{"id": i, "content": PIECES[i][0], "single_word": False, "lstrip": i == 9,
              "rstrip": False, "normalized": False, "special": True} for i in (0, 1, 2, 3, 9)]
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
         "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}]},
         "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                           "prepend_scheme": "always", "split": True},
         "post_processor": {"type": "TemplateProcessing",
                            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                            "pair": [], "special_tokens": {
                                "<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                                "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
         "decoder": None,
         "model": {"type": "Unigram", "unk_id": 3, "vocab": PIECES, "byte_fallback": False}}
    return json.dumps(j, ensure_ascii=False).encode()


def micro_xlmr(dtype):
    cfg = {"model_type": "xlm-roberta", "vocab_size": len(PIECES), "hidden_size": 4,
           "num_hidden_layers": 1, "num_attention_heads": 1, "intermediate_size": 8,
           "max_position_embeddings": 10, "type_vocab_size": 1, "pad_token_id": 1,
           "id2label": {"0": "negative", "1": "positive"}}
    shapes = tensors(4, 8, 1, len(PIECES), 10, 2, roberta=True)
    return frame(json.dumps(cfg).encode(), unigram_json(), safetensors(shapes, dtype),
                 tokenizer_json=True)


WIDE = {"features": "char_ngrams", "ngram_range": [1, 3], "buckets": 16, "hash": "murmur3_32",
        "lowercase": "ascii", "tf": "sublinear", "idf": True, "norm": "l2"}


def micro(labels, dtype, wide=False):
    cfg = {"model_type": "bert", "vocab_size": len(VOCAB), "hidden_size": 4,
           "num_hidden_layers": 1, "num_attention_heads": 1, "intermediate_size": 8,
           "max_position_embeddings": 8, "type_vocab_size": 2,
           "id2label": {str(i): l for i, l in enumerate(labels)}}
    shapes = tensors(4, 8, 1, len(VOCAB), 8, len(labels))
    if wide:
        cfg["wide"] = WIDE
        shapes.update({"wide.weight": [len(labels), 16], "wide.bias": [len(labels)],
                       "wide.idf": [16]})
    return frame(json.dumps(cfg).encode(), ("\n".join(VOCAB) + "\n").encode(),
                 safetensors(shapes, dtype))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {
        "micro_f32": micro(["negative", "positive"], "F32"),
        "micro_f16": micro(["negative", "positive"], "F16"),
        "micro_bf16_3labels": micro(["x", "y", "z"], "BF16"),
        "micro_wide_f32": micro(["negative", "positive"], "F32", wide=True),
    }
    tiny = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "bert_tiny")
    parts = [open(os.path.join(tiny, f), "rb").read()
             for f in ("config.json", "vocab.txt", "model.safetensors")]
    seeds["bert_tiny"] = frame(*parts)
    seeds["micro_xlmr_f32"] = micro_xlmr("F32")
    xlmr = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "xlmr_tiny")
    parts = [open(os.path.join(xlmr, f), "rb").read()
             for f in ("config.json", "tokenizer.json", "model.safetensors")]
    seeds["xlmr_tiny"] = frame(*parts, tokenizer_json=True)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
