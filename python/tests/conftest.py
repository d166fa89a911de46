"""Shared test data: short reviews written for these tests, and the
extension's own answers for them (sentiment(), sentiment_score(),
sentiment_probs() in plain SQL), which the CLI and the plugins must match."""

import json
import os
import shutil
import sqlite3
import sys

import pytest

import sqlite_sentiment

POSITIVE = [
    "房间很干净，前台服务热情",
    "屏幕清晰，电池耐用",
    "味道不错，送餐也快",
    "老师讲得很清楚，收获很大",
    "包装精美，物流很快，非常满意",
    "环境安静，床也舒服，下次还住",
    "这本书写得真好，一口气读完了",
    "性价比很高，推荐给朋友了",
]
NEGATIVE = [
    "等了两个小时才送到，饭菜全凉了",
    "质量太差，用了两天就坏了",
    "服务态度恶劣，再也不来了",
    "菜太咸了，分量也少",
    "客服一直不回消息，很失望",
    "房间有股霉味，隔音也很差",
    "发货慢，盒子还是破的",
    "说明书看不懂，功能也不全",
]
# Texts that exercise the formats: a comma and quotes, a blank one.
AWKWARD = ['他说"还行"，价格, 偏贵', "   "]


def reference(texts, model="default", conn=None):
    """(label, score, probs dict) per text, from SQL on a fresh connection."""
    c = conn or sqlite3.connect(":memory:")
    if conn is None:
        sqlite_sentiment.load(c)
    out = []
    for t in texts:
        label, score, probs = c.execute(
            "SELECT sentiment(?1, ?2), sentiment_score(?1, ?2), sentiment_probs(?1, ?2)",
            (t, model)).fetchone()
        out.append((label, score, None if probs is None else json.loads(probs)))
    return out


def bin_path(name):
    return os.path.join(sys.prefix, "bin", name)


@pytest.fixture(scope="session")
def texts():
    return POSITIVE + NEGATIVE + AWKWARD


@pytest.fixture(scope="session")
def expected(texts):
    return reference(texts)


# The browser tests' Chromium and chromedriver (Debian's chromium and
# chromium-driver, which scripts/install-deps.sh installs as root), and the
# marks that skip a browser test, saying why, where either is missing.
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))
                 if p), None)
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
BROWSER_MARKS = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)"),
    pytest.mark.skipif(CHROMEDRIVER is None,
                       reason="no chromedriver on PATH (apt-get install chromium-driver)"),
]
