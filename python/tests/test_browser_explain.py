"""The explain page in a real headless browser: a `datasette serve` process,
Chromium driven by selenium, /-/sentiment-explain for one row. From the
DOM: the explanation's text is the row's text, every character, and each
token's shading is its attribution's tint. From a screenshot (PNG, decoded
here): green and red shading are both on screen, the strongest token of
each side in its own tint. Skipped, saying why, without chromium,
chromedriver, selenium or datasette."""

import importlib.util
import os
import re
import shutil
import socket
import sqlite3
import struct
import subprocess
import time
import urllib.parse
import urllib.request
import zlib

import pytest

from conftest import BROWSER_MARKS, CHROMEDRIVER, CHROMIUM, bin_path
from sqlite_sentiment import explanation

pytestmark = BROWSER_MARKS
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
if importlib.util.find_spec("datasette") is None:
    pytest.skip("datasette not installed", allow_module_level=True)
from selenium.webdriver.common.by import By  # noqa: E402

# Praise, then a complaint: tokens on both sides of the label. A space and
# punctuation stay in the text, as the page must show them.
TEXT = "环境很好，房间也干净，但是 服务太差了！"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    db = tmp_path / "reviews.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE reviews(id INTEGER PRIMARY KEY, comment TEXT)")
    conn.executemany("INSERT INTO reviews(comment) VALUES (?)", [("很好",), (TEXT,)])
    conn.commit()
    conn.close()
    port = free_port()
    proc = subprocess.Popen([bin_path("datasette"), "serve", str(db), "-p", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(base + "/-/versions.json", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("datasette did not start:\n" + proc.stdout.read())
            time.sleep(0.1)
    yield base
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def browser():
    os.environ.setdefault("SE_OFFLINE", "true")     # never download a driver
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,1000", "--force-device-scale-factor=1",
              "--force-color-profile=srgb"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER),
                              options=opts)
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


def png_pixels(data):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    w, h, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def near(p, q, tol=3):
    return all(abs(a - b) <= tol for a, b in zip(p, q))


def test_explain_page_in_the_browser(server, browser, tmp_path):
    url = server + "/-/sentiment-explain?" + urllib.parse.urlencode(
        {"db": "reviews", "table": "reviews", "row": "2", "column": "comment"})
    browser.get(url)
    assert "Sentiment explained" in browser.title, browser.page_source[:2000]
    box = browser.find_element(By.CSS_SELECTOR, ".sentiment-explain-tokens "
                                                ".sentiment-explanation-text")

    # The DOM: the text intact, every character, tokens and gaps in order.
    assert box.get_attribute("textContent") == TEXT
    assert box.text == TEXT                      # what is rendered (white-space: pre-wrap)
    pieces = box.find_elements(By.CSS_SELECTOR, "span")
    assert "".join(p.get_attribute("textContent") for p in pieces) == TEXT
    tokens = box.find_elements(By.CSS_SELECTOR, "span.sentiment-token")
    assert all(t.is_displayed() for t in tokens)
    attrs = [float(t.get_attribute("data-attribution")) for t in tokens]
    assert any(a > 0 for a in attrs) and any(a < 0 for a in attrs), attrs
    big = max(abs(a) for a in attrs)
    for t, a in zip(tokens, attrs):
        want = explanation.tint(a, big) if a else explanation.WHITE
        got = browser.execute_script(
            "return getComputedStyle(arguments[0]).backgroundColor", t)
        assert tuple(map(int, re.findall(r"\d+", got)[:3])) == want, (t.text, a, got)
        assert re.fullmatch(r".+: [+-]\d\.\d{4} \((toward|against) \w+\)",
                            t.get_attribute("title")), t.get_attribute("title")

    # The pixels: a screenshot of the shaded text.
    png = box.screenshot_as_png
    browser.save_screenshot(str(tmp_path / "explain-page.png"))
    out = os.environ.get("SENTIMENT_SCREENSHOT_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "explain-tokens.png"), "wb") as f:
            f.write(png)
        shutil.copy(tmp_path / "explain-page.png", out)
    w, h, rows = png_pixels(png)
    pixels = [p for r in rows for p in r]
    green = sum(1 for r, g, b in pixels if g > r + 25 and g > b + 25)
    red = sum(1 for r, g, b in pixels if r > g + 25 and r > b + 25)
    assert green > 50 and red > 50, (green, red, w, h)
    # The strongest token of each side is on screen in its own tint.
    for side in (1, -1):
        strongest = max((a for a in attrs if a * side > 0), key=abs)
        tint = explanation.tint(strongest, big)
        assert sum(1 for p in pixels if near(p, tint)) > 20, (side, strongest, tint)
    # The clauses, each with its label.
    badges = [b.text for b in browser.find_elements(By.CSS_SELECTOR, ".sentiment-badge")]
    assert len(badges) == 3 and all(re.fullmatch(r"(positive|negative) [01]\.\d\d", b)
                                    for b in badges), badges
