"""A BERT sequence classifier in paddle.nn, loaded from a Hugging Face model.

The network is the one PaddleNLP's BertModel / ErnieModel builds (word +
position + token-type embeddings, LayerNorm, nn.TransformerEncoder of
post-LN layers with exact GELU, pooler, classifier), so Paddle Inference
sees the graph it is tuned for. Weights come from the same
model.safetensors every other engine reads; paddle.nn.Linear stores (in,
out), so the Hugging Face (out, in) matrices are transposed.

Inputs: input_ids and token_type_ids (B, T) int64, attention_mask (B, T)
float32 with 1 for tokens and 0 for padding. Output: logits (B, K).
"""
import json
import os

import numpy as np
import paddle
from paddle import nn
from safetensors.numpy import load_file


class PaddleBert(nn.Layer):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["hidden_size"]
        self.word = nn.Embedding(cfg["vocab_size"], C)
        self.pos = nn.Embedding(cfg["max_position_embeddings"], C)
        self.tok_type = nn.Embedding(cfg["type_vocab_size"], C)
        eps = cfg.get("layer_norm_eps", 1e-12)
        self.emb_ln = nn.LayerNorm(C, epsilon=eps)
        layer = nn.TransformerEncoderLayer(
            C, cfg["num_attention_heads"], cfg["intermediate_size"],
            dropout=0.0, activation="gelu", attn_dropout=0.0, act_dropout=0.0,
            normalize_before=False, layer_norm_eps=eps)
        self.encoder = nn.TransformerEncoder(layer, cfg["num_hidden_layers"])
        self.pool = nn.Linear(C, C)
        self.cls = nn.Linear(C, len(cfg.get("id2label") or {0: 0, 1: 1}))

    def forward(self, input_ids, token_type_ids, attention_mask):
        T = paddle.shape(input_ids)[1]
        pos = paddle.arange(T, dtype="int64").unsqueeze(0)
        x = self.word(input_ids) + self.pos(pos) + self.tok_type(token_type_ids)
        x = self.emb_ln(x)
        # Additive mask (B, 1, 1, T): 0 for tokens, -1e4 for padding, as
        # PaddleNLP builds it.
        mask = ((1.0 - attention_mask) * -1e4).unsqueeze([1, 2])
        x = self.encoder(x, mask)
        pooled = paddle.tanh(self.pool(x[:, 0]))
        return self.cls(pooled)


def load(hf_dir):
    """PaddleBert with the weights of a Hugging Face BERT directory."""
    with open(os.path.join(hf_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    w = load_file(os.path.join(hf_dir, "model.safetensors"))
    w = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in w.items()}
    net = PaddleBert(cfg)
    state = {}

    def put(name, array, transpose=False):
        a = np.ascontiguousarray(array.T if transpose else array, dtype=np.float32)
        state[name] = a

    put("word.weight", w["embeddings.word_embeddings.weight"])
    put("pos.weight", w["embeddings.position_embeddings.weight"])
    put("tok_type.weight", w["embeddings.token_type_embeddings.weight"])
    put("emb_ln.weight", w["embeddings.LayerNorm.weight"])
    put("emb_ln.bias", w["embeddings.LayerNorm.bias"])
    for i in range(cfg["num_hidden_layers"]):
        hf = "encoder.layer.%d." % i
        pd = "encoder.layers.%d." % i
        for mine, theirs in (("q_proj", "attention.self.query"),
                             ("k_proj", "attention.self.key"),
                             ("v_proj", "attention.self.value"),
                             ("out_proj", "attention.output.dense")):
            put(pd + "self_attn." + mine + ".weight", w[hf + theirs + ".weight"], True)
            put(pd + "self_attn." + mine + ".bias", w[hf + theirs + ".bias"])
        put(pd + "norm1.weight", w[hf + "attention.output.LayerNorm.weight"])
        put(pd + "norm1.bias", w[hf + "attention.output.LayerNorm.bias"])
        put(pd + "linear1.weight", w[hf + "intermediate.dense.weight"], True)
        put(pd + "linear1.bias", w[hf + "intermediate.dense.bias"])
        put(pd + "linear2.weight", w[hf + "output.dense.weight"], True)
        put(pd + "linear2.bias", w[hf + "output.dense.bias"])
        put(pd + "norm2.weight", w[hf + "output.LayerNorm.weight"])
        put(pd + "norm2.bias", w[hf + "output.LayerNorm.bias"])
    put("pool.weight", w["pooler.dense.weight"], True)
    put("pool.bias", w["pooler.dense.bias"])
    put("cls.weight", w["classifier.weight"], True)
    put("cls.bias", w["classifier.bias"])
    mine = set(net.state_dict().keys())
    if mine != set(state):
        raise RuntimeError("paddle_bert: parameter names differ: missing %s, extra %s"
                           % (sorted(mine - set(state)), sorted(set(state) - mine)))
    net.set_state_dict({k: paddle.to_tensor(v) for k, v in state.items()})
    net.eval()
    return net


def save_inference(net, prefix):
    """Saves net for paddle.inference (dynamic batch and sequence axes)."""
    spec = [paddle.static.InputSpec([None, None], "int64", "input_ids"),
            paddle.static.InputSpec([None, None], "int64", "token_type_ids"),
            paddle.static.InputSpec([None, None], "float32", "attention_mask")]
    static = paddle.jit.to_static(net, input_spec=spec, full_graph=True)
    paddle.jit.save(static, prefix)
