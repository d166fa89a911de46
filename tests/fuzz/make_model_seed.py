#!/usr/bin/env python3
"""make_model_seed.py OUT_DIR: writes seed inputs for fuzz_stored_model.c.

Each seed is a whole stored model, framed as the target reads it: config
length and vocab length (little-endian uint32), config.json, vocab.txt,
model.safetensors. The models are the smallest BERT shapes (hidden 4, one
layer, vocabulary of 8) in F32, F16 and BF16, one with three labels, and the
repository's bert_tiny fixture. Standard library only.
"""
import json
import os
import struct
import sys

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "好", "差", "很"]


def tensors(hidden, inter, layers, vocab, positions, labels):
    t = {
        "bert.embeddings.word_embeddings.weight": [vocab, hidden],
        "bert.embeddings.position_embeddings.weight": [positions, hidden],
        "bert.embeddings.token_type_embeddings.weight": [2, hidden],
        "bert.embeddings.LayerNorm.weight": [hidden],
        "bert.embeddings.LayerNorm.bias": [hidden],
        "bert.pooler.dense.weight": [hidden, hidden],
        "bert.pooler.dense.bias": [hidden],
        "classifier.weight": [labels, hidden],
        "classifier.bias": [labels],
    }
    for i in range(layers):
        p = "bert.encoder.layer.%d." % i
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


def frame(config, vocab, st):
    return struct.pack("<II", len(config), len(vocab)) + config + vocab + st


def micro(labels, dtype):
    cfg = {"model_type": "bert", "vocab_size": len(VOCAB), "hidden_size": 4,
           "num_hidden_layers": 1, "num_attention_heads": 1, "intermediate_size": 8,
           "max_position_embeddings": 8, "type_vocab_size": 2,
           "id2label": {str(i): l for i, l in enumerate(labels)}}
    shapes = tensors(4, 8, 1, len(VOCAB), 8, len(labels))
    return frame(json.dumps(cfg).encode(), ("\n".join(VOCAB) + "\n").encode(),
                 safetensors(shapes, dtype))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {
        "micro_f32": micro(["negative", "positive"], "F32"),
        "micro_f16": micro(["negative", "positive"], "F16"),
        "micro_bf16_3labels": micro(["x", "y", "z"], "BF16"),
    }
    tiny = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "bert_tiny")
    parts = [open(os.path.join(tiny, f), "rb").read()
             for f in ("config.json", "vocab.txt", "model.safetensors")]
    seeds["bert_tiny"] = frame(*parts)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
