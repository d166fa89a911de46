#!/usr/bin/env python3
"""Times transformers' fast tokenizer (the Rust `tokenizers` library) on the
lines of a file, one thread, encoding each line as the model input with
truncation to --max-length, the same work bench/bench_tokenize.c times.

    RAYON_NUM_THREADS=1 python bench/tokenize_peer.py --tokenizer DIR --text FILE

Needs transformers (a virtual environment outside the repository). Prints
the median MB/s of --runs passes, in bench_tokenize's format.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import AutoTokenizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, help="model directory")
    ap.add_argument("--text", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--batch", action="store_true",
                    help="one batch call instead of a call per line")
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    with open(a.text, encoding="utf-8", errors="replace") as f:
        lines = [l.rstrip("\r\n") for l in f]
    nbytes = sum(len(l.encode("utf-8")) for l in lines)
    secs, tokens = [], 0
    for _ in range(a.runs):
        t0 = time.perf_counter()
        if a.batch:
            enc = tok(lines, truncation=True, max_length=a.max_length)["input_ids"]
            tokens = sum(len(e) for e in enc)
        else:
            tokens = 0
            for l in lines:
                tokens += len(tok(l, truncation=True, max_length=a.max_length)["input_ids"])
        secs.append(time.perf_counter() - t0)
    med = statistics.median(secs)
    kind = "batch" if a.batch else "per line"
    print("transformers fast (%s): %d lines, %.2f MB, median of %d: %.3f s, %.2f MB/s, "
          "%.0f lines/s, %.1f tokens/line" % (kind, len(lines), nbytes / 1e6, a.runs, med,
                                             nbytes / 1e6 / med, len(lines) / med,
                                             tokens / max(1, len(lines))))


if __name__ == "__main__":
    main()
