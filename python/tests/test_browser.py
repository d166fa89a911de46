"""End to end in a real headless browser: a `datasette serve` process on a
small table, Chromium driven by selenium, clicking through the "Sentiment
labels" enrichment as a user would (table actions menu, Enrich selected
data, the enrichment, the form), then checking that the label and score
columns were written, equal to the extension's answers in SQL, and shown
on the table page. Skipped, saying why, without chromium, chromedriver,
selenium or datasette-enrichments."""

import importlib.util
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import (BROWSER_MARKS, CHROMEDRIVER, CHROMIUM, NEGATIVE, POSITIVE, bin_path,
                      reference)

pytestmark = BROWSER_MARKS
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
# Looked up, not imported: the server is another process, and importing
# datasette_enrichments before datasette.app would load Datasette's plugins
# out of order in this one.
if importlib.util.find_spec("datasette_enrichments") is None:
    pytest.skip("datasette-enrichments not installed", allow_module_level=True)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

TEXTS = [(POSITIVE + NEGATIVE)[i % 16] for i in range(40)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    db = tmp_path / "reviews.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE reviews(id INTEGER PRIMARY KEY, comment TEXT)")
    conn.executemany("INSERT INTO reviews(comment) VALUES (?)", [(t,) for t in TEXTS])
    conn.commit()
    conn.close()
    port = free_port()
    proc = subprocess.Popen([bin_path("datasette"), "serve", str(db), "--root", "-p", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    token_url, seen = None, []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and token_url is None:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(r"(http://\S+/-/auth-token\?token=\w+)", line)
        if m:
            token_url = m.group(1)
    if token_url is None:
        proc.kill()
        pytest.fail("datasette did not start:\n" + "".join(seen))
    base = f"http://127.0.0.1:{port}"
    # Until it answers: the first request also creates Datasette's _internal
    # catalogue, which can race datasette-enrichments' start-up task ("database
    # table is locked", a 500 once); a user would reload.
    for _ in range(100):
        try:
            with urllib.request.urlopen(base + "/-/versions.json", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.1)
    yield base, token_url, db
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
              "--window-size=1280,1000"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER),
                              options=opts)
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


def test_enrichment_through_the_browser(server, browser):
    base, token_url, db = server
    wait = WebDriverWait(browser, 30)
    browser.get(token_url)                      # signs in as root
    browser.get(base + "/reviews/reviews")
    assert "40 rows" in browser.page_source

    # Table actions menu -> Enrich selected data -> Sentiment labels.
    browser.find_element(By.CSS_SELECTOR, "details.actions-menu-links summary").click()
    browser.find_element(By.LINK_TEXT, "Enrich selected data").click()
    wait.until(lambda d: "/-/enrich/reviews/reviews" in d.current_url)
    browser.find_element(By.LINK_TEXT, "Sentiment labels").click()
    wait.until(lambda d: d.current_url.split("?")[0].endswith("/sentiment"))
    assert "40 rows selected" in browser.page_source

    Select(browser.find_element(By.NAME, "source_column")).select_by_value("comment")
    label_field = browser.find_element(By.NAME, "label_column")
    assert label_field.get_attribute("value") == "sentiment"
    browser.find_element(By.CSS_SELECTOR, "input[type=submit][value='Enrich data']").click()
    wait.until(lambda d: "_enrichment_job=" in d.current_url)
    assert "Enrichment started: Sentiment labels for 40 rows" in browser.page_source

    # The job runs in the server; wait until every row has a label.
    conn = sqlite3.connect(db)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if conn.execute("SELECT count(*) FROM reviews WHERE sentiment IS NOT NULL"
                            ).fetchone()[0] == len(TEXTS):
                break
        except sqlite3.OperationalError:
            pass                                  # column not there yet
        time.sleep(0.2)
    rows = conn.execute("SELECT comment, sentiment, sentiment_score FROM reviews ORDER BY id"
                        ).fetchall()
    want = reference(TEXTS)
    assert [r[1] for r in rows] == [w[0] for w in want]
    for r, w in zip(rows, want):
        assert r[2] == pytest.approx(w[1], abs=1e-5)

    # The table page shows the new columns.
    browser.get(base + "/reviews/reviews?_size=100")
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "table.rows-and-columns th")]
    assert any(h.startswith("sentiment_score") for h in headers), headers
    cells = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "td.col-sentiment")]
    assert cells == [w[0] for w in want]

    # And the job view says it finished.
    browser.get(base + "/-/enrich/reviews/-/jobs/1")
    wait.until(lambda d: "finished" in d.page_source)
    print(f"\nbrowser: {os.path.basename(CHROMIUM)}, python {sys.version.split()[0]}; "
          f"{len(TEXTS)} rows labeled through the enrichment")
