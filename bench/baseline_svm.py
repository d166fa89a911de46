#!/usr/bin/env python3
"""The floor the built-in model has to beat: a TF-IDF character 1-3-gram
linear SVM trained and scored on exactly the built-in model's split.

    build/train_builtin --split-dir build/split --split-only 1
    python bench/baseline_svm.py build/split [ROWS]

ROWS keeps only the first ROWS training rows: the rows the model was
trained on when train_builtin held the rest out (--calib-rows).

The split directory holds train.tsv and eval_*.tsv (label<TAB>text), written
by train_builtin from ../shared/data; it is never committed. Needs
scikit-learn (a benchmark tool, not a dependency of the extension).
"""
import csv
import glob
import os
import sys
import time

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.svm import LinearSVC


def read(path):
    labels, texts = [], []
    with open(path, encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(rows)
        for row in rows:
            labels.append(int(row[0]))
            texts.append(row[1])
    return texts, labels


def main():
    split = sys.argv[1] if len(sys.argv) > 1 else "build/split"
    texts, labels = read(os.path.join(split, "train.tsv"))
    if len(sys.argv) > 2:
        texts, labels = texts[:int(sys.argv[2])], labels[:int(sys.argv[2])]
    t0 = time.time()
    vec = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), min_df=2,
                          sublinear_tf=True)
    x = vec.fit_transform(texts)
    svm = LinearSVC(C=0.5)
    svm.fit(x, labels)
    print("trained on %d rows, %d features, %.0f s" % (len(texts), x.shape[1],
                                                      time.time() - t0))
    for path in sorted(glob.glob(os.path.join(split, "eval_*.tsv"))):
        t, y = read(path)
        pred = svm.predict(vec.transform(t))
        acc = sum(int(p == g) for p, g in zip(pred, y)) / len(y)
        print("accuracy %-28s %.4f (%d rows)" % (os.path.basename(path)[5:-4], acc, len(y)))


if __name__ == "__main__":
    main()
