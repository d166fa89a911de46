"""reviews.py: the review texts the scale-out tests and bench/bench_ray.py label.

Built at run time, never stored in the repository: takeaway reviews
(waimai_10k, every row) and online-shopping reviews (online_shopping_10_cats,
an evenly spaced sample) from the shared data directory, ids 1..n in that
order. Without the data directory, synthetic reviews are put together from
phrases written for this project, and source() says so.
"""

import os
import random

DATA_DIR = os.environ.get("SENTIMENT_DATA_DIR", "")

_PHRASES_POS = ["房间很干净", "服务很周到", "送餐非常快", "味道不错", "性价比很高", "屏幕清晰",
                "电池耐用", "包装完好", "客服态度好", "下次还会再来"]
_PHRASES_NEG = ["等了两个小时", "饭菜全凉了", "房间有异味", "质量太差", "客服不理人",
                "和描述不符", "再也不买了", "送错了地址", "电池一天就没电", "价格太贵"]


def _tsv_texts(path, text_field="text", label_field="label"):
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        ti, li = header.index(text_field), header.index(label_field)
        for line in f:
            parts = line.rstrip("\n").split("\t")
            yield parts[ti], int(parts[li])


def have_data():
    return bool(DATA_DIR) and os.path.isfile(os.path.join(DATA_DIR, "waimai_10k", "all.tsv")) \
        and os.path.isfile(os.path.join(DATA_DIR, "online_shopping_10_cats", "all.tsv"))


def source():
    if have_data():
        return f"real reviews from {DATA_DIR} (waimai_10k + online_shopping_10_cats)"
    return "synthetic reviews (no shared data directory: SENTIMENT_DATA_DIR=%r)" % DATA_DIR


def synthetic(n, seed=7):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        good = rng.random() < 0.5
        mine = _PHRASES_POS if good else _PHRASES_NEG
        other = _PHRASES_NEG if good else _PHRASES_POS
        parts = rng.sample(mine, rng.randint(1, 3)) + rng.sample(other, rng.randint(0, 1))
        rng.shuffle(parts)
        rows.append(("，".join(parts), int(good)))
    return rows


def reviews(n):
    """[(id, text, source, gold)] for n rows (n <= 73,000 with the data)."""
    if not have_data():
        return [(i + 1, t, "synthetic", g) for i, (t, g) in enumerate(synthetic(n))]
    waimai = [(t, g, "waimai") for t, g in
              _tsv_texts(os.path.join(DATA_DIR, "waimai_10k", "all.tsv"))]
    shop = [(t, g, "shopping") for t, g in
            _tsv_texts(os.path.join(DATA_DIR, "online_shopping_10_cats", "all.tsv"))]
    take = max(0, n - len(waimai))
    if take > len(shop):
        raise ValueError(f"reviews({n}): only {len(waimai) + len(shop)} rows in the data")
    step = len(shop) / take if take else 1
    picked = waimai[:n] + [shop[int(i * step)] for i in range(take)]
    return [(i + 1, t, s, g) for i, (t, g, s) in enumerate(picked)]
