"""The search page at `/` in a real headless Chromium (Debian's package, driven by Selenium) against uvicorn on
127.0.0.1 and a real index: type a query, wait for the hits, compare them with what /search answers."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server

INSTALL = "apt-get install chromium chromium-driver"
QUERY = "How can I be a good geologist?"
WAIT_S = 120  # a deadline, not a pause: a loaded 2-core machine (beside CPU burners) answers late, never wrongly

selenium = pytest.importorskip("selenium", reason=f"selenium is not installed: pip install selenium; {INSTALL}")
from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


# Checked when the module loads: a fixture's skip would come after the session's index and server were built.
pytestmark = pytest.mark.skipif(_chromium() is None, reason=f"no Chromium and chromedriver on PATH: {INSTALL}")


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    found = _chromium()
    assert found is not None  # pytestmark
    binary, driver_path = found
    os.environ["SE_OFFLINE"] = "1"  # Selenium Manager must never try to download a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console errors, CSP violations included
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1200,900", "--lang=en-US"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: webdriver.Chrome, condition, what: str):  # noqa: ANN001, ANN201 (a Selenium condition)
    """Until `condition` holds. The page re-renders the index card, the live table and the chart on every /stats
    poll (and 300 ms after a search): an element a condition found can be replaced before it reads it, so a stale
    element means "not yet", and the condition is evaluated again on the new page state."""
    return WebDriverWait(driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        condition, message=f"waited {WAIT_S} s for {what}")


def texts(driver: webdriver.Chrome, css: str) -> list[str]:
    """The text of every element matching `css`, read in one script run: a snapshot of one page state, where a
    find_elements then `.text` per element could meet an element that a re-render replaced in between."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => (e.innerText ?? e.textContent).trim())", css)


def hit_texts(driver: webdriver.Chrome) -> list[str]:
    return texts(driver, "#hits li.hit .hit-text")


def search(driver: webdriver.Chrome, query: str, top_k: int | None = None) -> None:
    if top_k is not None:
        k = driver.find_element(By.ID, "top-k")
        k.send_keys(Keys.CONTROL, "a")
        k.send_keys(str(top_k))
    box = driver.find_element(By.ID, "query")
    box.clear()
    box.send_keys(query, Keys.ENTER)  # the keyboard path: Enter submits the form


def message(driver: webdriver.Chrome) -> tuple[str, str]:
    box = wait(driver, lambda d: d.find_element(By.ID, "message") if d.find_element(By.ID, "message").is_displayed()
               else False, "an error message")
    return box.get_attribute("data-status"), box.text


def test_search_shows_the_hits_search_returns(browser: webdriver.Chrome, server: Server, tmp_path: Path) -> None:
    browser.get(server.url + "/")
    with server.client() as c:
        ready = c.get("/ready").json()
        expected = c.post("/search", json={"query": QUERY, "top_k": 5}).json()["hits"]
    wait(browser, lambda d: d.find_element(By.ID, "index-state").text == "Ready", "the index card")
    card = browser.find_element(By.ID, "index-facts").text
    assert ready["index_version"] in card and "mean pooling" in card and "MRR@10" in card and "nprobe" in card
    assert browser.switch_to.active_element.get_attribute("id") == "query"  # autofocus: type at once
    # an open API: no key form, no message
    assert not browser.find_element(By.ID, "key-form").is_displayed()
    assert not browser.find_element(By.ID, "message").is_displayed()

    search(browser, QUERY, top_k=5)
    wait(browser, lambda d: len(hit_texts(d)) == 5, "5 hits")
    shown = hit_texts(browser)
    assert shown == [h["text"] for h in expected]
    assert shown[0] == "What should I do to be a great geologist?"
    first = texts(browser, "#hits li.hit .hit-meta")[0]
    assert f"id {expected[0]['id']}" in first and f"score {expected[0]['score']:.3f}" in first
    summary = browser.find_element(By.ID, "summary").text
    assert summary.startswith("5 hits · dense · ") and " ms on the server (encode " in summary
    assert ready["index_version"] in summary and "Default mode\ndense" in card

    # the chart and the live table pick the search up from /stats
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart .p50"), "the chart's p50")
    assert texts(browser, "#live-table tbody tr th") == ["total", "encode", "search"]  # re-rendered every poll
    assert "requests/s" in browser.find_element(By.ID, "live-rate").text

    # "/" brings the keyboard back to the search box
    browser.execute_script("document.activeElement.blur()")
    ActionChains(browser).send_keys("/").perform()
    assert browser.switch_to.active_element.get_attribute("id") == "query"

    shot = tmp_path / "search-page.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    # nothing went wrong in the console: no script error, no resource refused by the Content-Security-Policy
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []

    # a phone-sized window: one column, the card under the results, nothing wider than the screen
    size = browser.get_window_size()
    try:
        browser.set_window_size(420, 900)
        wait(browser, lambda d: d.execute_script("return window.innerWidth") <= 520, "a narrow window")
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
        card, hits = browser.find_element(By.CSS_SELECTOR, "aside.card"), browser.find_element(By.ID, "hits")
        assert card.rect["y"] > hits.rect["y"] + hits.rect["height"] - 1
        assert browser.find_element(By.ID, "query").rect["width"] > 200
        browser.save_screenshot(str(tmp_path / "search-page-narrow.png"))
    finally:
        browser.set_window_size(size["width"], size["height"])


def test_the_mode_selector_runs_the_chosen_mode(browser: webdriver.Chrome, server: Server) -> None:
    """Lexical mode from the selector: the hits /search answers in that mode, its stages in the summary, and the
    live table's count by mode."""
    browser.get(server.url + "/")
    wait(browser, lambda d: d.find_element(By.ID, "index-state").text == "Ready", "the index card")
    facts = browser.find_element(By.ID, "index-facts").text
    assert "BM25 k1 0.9 b 0.4" in facts
    assert "· bm25s ·" in facts  # the engine that answers the lexical leg, as the manifest names it
    with server.client() as c:
        expected = c.post("/search", json={"query": QUERY, "top_k": 5, "mode": "lexical"}).json()["hits"]
    Select(browser.find_element(By.ID, "mode")).select_by_value("lexical")
    search(browser, QUERY, top_k=5)
    wait(browser, lambda d: "lexical" in d.find_element(By.ID, "summary").text, "a lexical answer")
    assert hit_texts(browser) == [h["text"] for h in expected]
    summary = browser.find_element(By.ID, "summary").text
    assert "lexical " in summary and "encode" not in summary  # lexical mode runs no encoder
    wait(browser, lambda d: "lexical 0" not in d.find_element(By.ID, "live-modes").text, "the count by mode")
    Select(browser.find_element(By.ID, "mode")).select_by_value("hybrid")
    search(browser, QUERY, top_k=5)
    wait(browser, lambda d: "· hybrid ·" in d.find_element(By.ID, "summary").text, "a hybrid answer")
    assert "fusion" in browser.find_element(By.ID, "summary").text
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_a_blank_query_shows_the_servers_reason(browser: webdriver.Chrome, server: Server) -> None:
    browser.get(server.url + "/")
    search(browser, "   ")
    status, text = message(browser)
    assert status == "422"
    assert "cannot take this search" in text and "empty or whitespace" in text
    assert hit_texts(browser) == []


def test_a_server_without_an_index_says_it_is_not_ready(browser: webdriver.Chrome, tmp_path: Path,
                                                        minilm_mean: Path) -> None:
    """Not ready at first; then a version built with passages appears under the same server (its watcher swaps
    to it), and each hit shows its best passage's snippet with the query's terms marked, safely."""
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(tmp_path / "no-index")})
    try:
        browser.get(srv.url + "/")
        wait(browser, lambda d: d.find_element(By.ID, "index-state").text.startswith("Not ready:"), "not ready")
        card = browser.find_element(By.ID, "index-state").text
        search(browser, QUERY)
        status, text = message(browser)
        with srv.client() as c:
            reason = c.get("/ready").json()["reason"]
        assert card == f"Not ready: {reason}"
        assert status == "503" and text.startswith(f"The index is not ready: {reason}"), text
        _passages_show_their_snippets(browser, srv, tmp_path, minilm_mean)
    finally:
        stop_server(srv)


def _passages_show_their_snippets(browser: webdriver.Chrome, srv: Server, tmp_path: Path, minilm_mean: Path) -> None:
    from indexer.build import BuildConfig, build
    from tests.service.engine.test_passages import corpus, write_jsonl

    rows = corpus()
    rows[0]["text"] += " Comets <script>x</script> & tails."  # markup in a document stays text on the page
    build(BuildConfig(model_dir=minilm_mean, data=str(write_jsonl(tmp_path / "docs.jsonl", rows)),
                      root=tmp_path / "no-index", index="flat", evaluate=False, chunk=24, overlap=4, threads=1))
    with srv.client() as c:
        wait(browser, lambda d: c.get("/ready").status_code == 200, "the passages version served")
        got = c.post("/search", json={"query": "comets tails", "top_k": 3, "mode": "lexical"}).json()["hits"]
        assert len({h["id"] for h in got}) == 3 and all("<mark>" in h["passage"]["snippet"] for h in got)
        refused = c.post("/search", json={"query": "comets", "passages": "yes"})
        assert refused.status_code == 422 and "passages" in refused.text
        many = c.post("/search", json={"query": "comets", "top_k": 6, "passages": True, "mode": "lexical"}).json()
        assert len(many["hits"]) == 6 and len({h["id"] for h in many["hits"]}) < 6
    browser.get(srv.url + "/")
    wait(browser, lambda d: d.find_element(By.ID, "index-state").text == "Ready", "ready")
    Select(browser.find_element(By.ID, "mode")).select_by_value("lexical")
    search(browser, "comets tails", top_k=3)
    wait(browser, lambda d: len(texts(d, "#hits li.hit .hit-snippet")) == 3, "3 snippets")
    marks = texts(browser, "#hits li.hit .hit-snippet mark")
    assert marks and {m.lower().rstrip("s") for m in marks} <= {"comet", "tail"}
    assert [t.replace("…", "") for t in texts(browser, "#hits li.hit .hit-passage")][0].startswith("passage ")
    assert browser.find_elements(By.CSS_SELECTOR, "#hits script") == []
    shown = texts(browser, "#hits li.hit .hit-snippet")
    assert any("<script>x</script>" in t for t in shown) or all("script" not in t for t in shown)


def test_with_api_keys_the_page_asks_for_one_and_keeps_it_in_the_tab(browser: webdriver.Chrome, tmp_path: Path,
                                                                      quora_root: Path) -> None:
    key = "page-test-key-7"
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_API_KEYS": key})
    try:
        browser.get(srv.url + "/")
        form = wait(browser, lambda d: d.find_element(By.ID, "key-form") if d.find_element(By.ID, "key-form")
                    .is_displayed() else False, "the key form")
        assert "needs an API key" in form.text
        assert browser.switch_to.active_element.get_attribute("id") == "api-key"

        # a wrong key: the search is refused and the page asks again
        browser.find_element(By.ID, "api-key").send_keys("not-the-key", Keys.ENTER)
        search(browser, QUERY, top_k=3)
        status, text = message(browser)
        assert status == "401" and "refused" in text and "invalid API key" in text
        wait(browser, lambda d: d.find_element(By.ID, "key-form").is_displayed(), "the key form again")

        # the right key: the refused search runs again by itself
        browser.find_element(By.ID, "api-key").send_keys(key, Keys.ENTER)
        wait(browser, lambda d: len(hit_texts(d)) == 3, "3 hits")
        assert hit_texts(browser)[0] == "What should I do to be a great geologist?"
        assert browser.execute_script("return sessionStorage.getItem('strata.apiKey')") == key
        assert browser.execute_script("return localStorage.length") == 0
        assert browser.execute_script("return document.cookie") == ""
        assert browser.find_element(By.ID, "key-state").is_displayed()

        browser.find_element(By.ID, "forget-key").click()
        assert browser.execute_script("return sessionStorage.getItem('strata.apiKey')") is None
        assert browser.find_element(By.ID, "key-form").is_displayed()
    finally:
        stop_server(srv)


def test_a_busy_server_says_when_to_retry(browser: webdriver.Chrome, tmp_path: Path, quora_root: Path) -> None:
    """A real 429: one slot in flight, held by a heavy /encode, when the page searches."""
    # 32 × 256 tokens: ~4.6 CPU-seconds on the one worker, seen in flight before the page searches (a condition)
    heavy = {"texts": [("many different words in a long sentence " * 45)[:1990]] * 32}
    # STRATA_REQUEST_TIMEOUT_S: the heavy call must outlast the page's search, however slow the machine (it took
    # over the default 30 s beside two CPU burners, and its 504 failed this test)
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_MAX_IN_FLIGHT": "1",
                                  "STRATA_WORKERS": "1", "STRATA_RETRY_AFTER_S": "2",
                                  "STRATA_REQUEST_TIMEOUT_S": "600"})
    done: list[int] = []
    try:
        browser.get(srv.url + "/")
        wait(browser, lambda d: d.find_element(By.ID, "index-state").text == "Ready", "the index card")
        browser.find_element(By.ID, "query").send_keys(QUERY)
        worker = threading.Thread(target=lambda: done.append(
            httpx.post(f"{srv.url}/encode", json=heavy, timeout=600).status_code))
        worker.start()
        with srv.client() as c:
            wait(browser, lambda _: "strata_inference_in_flight 1.0" in c.get("/metrics").text, "the heavy call")
        browser.find_element(By.ID, "query").send_keys(Keys.ENTER)
        status, text = message(browser)
        worker.join(timeout=600)
    finally:
        stop_server(srv)
    assert done == [200], "the heavy call must still have been running when the page searched"
    assert status == "429" and "busy; try again in 2 s" in text, text


def test_metadata_and_string_ids_render_as_text(browser: webdriver.Chrome, server: Server) -> None:
    """Hits that carry metadata and string ids (corpus builds) show them, as text: markup in a document stays
    inert. The server's real answer is extended in the page's fetch, since this index's hits have no metadata."""
    browser.get(server.url + "/")
    browser.execute_script("""
        const real = window.fetch;
        window.fetch = async (url, init) => {
            const response = await real(url, init);
            if (!String(url).endsWith('/search')) return response;
            const body = await response.json();
            body.hits.forEach((h, i) => { h.id = 'doc-' + h.id; h.metadata = {rank: i, tag: '<b>bold</b>'}; });
            return new Response(JSON.stringify(body), {status: response.status, headers: response.headers});
        };""")
    search(browser, QUERY, top_k=2)
    wait(browser, lambda d: len(hit_texts(d)) == 2, "2 hits")
    first = browser.find_element(By.CSS_SELECTOR, "#hits li.hit")
    pairs = [(p.find_element(By.TAG_NAME, "dt").text, p.find_element(By.TAG_NAME, "dd").text)
             for p in first.find_elements(By.CSS_SELECTOR, "dl.metadata > div")]
    assert pairs == [("rank", "0"), ("tag", "<b>bold</b>")]
    assert first.find_elements(By.TAG_NAME, "b") == []
    assert "id doc-" in first.find_element(By.CLASS_NAME, "hit-meta").text


def test_low_traffic_axis_and_the_background_training(browser: webdriver.Chrome, tiny_exported: Path,
                                                       tmp_path: Path) -> None:
    """One request: the requests/s axis reads three different ticks and "1 request"; the card shows the demo's
    background chain (stage, progress, the chain's ETA) from /ready, then the swap it ended with."""
    import json
    import subprocess
    import sys
    import time

    from indexer.runtime.layout import IndexRoot
    from tests.conftest import REPO
    from tests.conftest import write_quora_like as quora_like

    root = tmp_path / "root"
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--root", str(root), "--model",
                        str(tiny_exported), "--data", str(quora_like(tmp_path / "q.tsv.gz")), "--rows", "60",
                        "--threads", "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    version = IndexRoot(root).current_version()
    chain = tmp_path / "chain.json"
    now = time.time()
    running = {"stage": "train", "stage_number": 3, "stages_total": 6, "step": 120, "total_steps": 500,
               "unit": "steps", "eta_s": 1234.0, "eta_at": now + 1234, "stage_eta_s": 900.0,
               "progress": "train sup_hardneg/avg_last: 120/500 steps (24.0%), 0.2 steps/s",
               "message": "500 steps, batch 64", "stages": [], "updated_at": now}
    chain.write_text(json.dumps(running))
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_TRAINING_STATUS": str(chain)})
    try:
        browser.get_log("browser")  # drop what earlier tests' deliberate errors left in the shared browser's log
        browser.get(srv.url + "/")
        wait(browser, lambda d: d.find_element(By.ID, "training").is_displayed(), "the training card")
        card = browser.find_element(By.ID, "training").text
        assert "train (3/6)" in card and "120/500 steps (24.0%)" in card, card
        assert "20 min 34 s for the whole chain" in card, card

        search(browser, "how can i learn python quickly", top_k=3)
        wait(browser, lambda d: len(hit_texts(d)) == 3, "3 hits")
        wait(browser, lambda d: d.find_element(By.ID, "live-rate").text.startswith("1 request,"), "1 request")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart rect.bar"), "the requests/s bar")
        ticks = texts(browser, "#chart text.rps")  # the chart is redrawn on every /stats poll
        assert len(ticks) == 3 and len(set(ticks)) == 3 and ticks[0] == "0", ticks
        assert float(ticks[0]) < float(ticks[1]) < float(ticks[2]), ticks
        assert "5 minutes: 1 request, p50" in browser.find_element(By.ID, "chart-desc").get_attribute("textContent")

        # the chain built a version and the API serves it: /ready (and the card) say when it swapped
        chain.write_text(json.dumps(running | {"stage": "swap", "stage_number": 6, "built_version": version}))
        wait(browser, lambda d: "swapped to " + version in d.find_element(By.ID, "training").text, "the swap")
        assert "ETA" not in browser.find_element(By.ID, "training").text
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        stop_server(srv)


def test_the_collection_selector_searches_the_chosen_collection(browser: webdriver.Chrome, quora_root: Path,
                                                                tmp_path: Path) -> None:
    """With two collections the page shows a selector (default first); a search runs on the chosen collection's
    route, and the summary names it. (Both are the session's Quora root, linked: one encoder, loaded once.)"""
    folder = tmp_path / "collections"
    folder.mkdir()
    for name in ("alpha", "beta"):
        (folder / name).symlink_to(quora_root, target_is_directory=True)
    srv = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(folder), "STRATA_DEFAULT_COLLECTION": "beta",
                                  "STRATA_WATCH_INTERVAL_S": "0"})
    try:
        browser.get("about:blank")
        browser.get_log("browser")  # drop what an earlier test's page logged (its server stopped under it)
        browser.get(srv.url + "/")
        wait(browser, lambda d: d.find_element(By.ID, "collection-field").is_displayed(), "the collection selector")
        select = Select(browser.find_element(By.ID, "collection"))
        assert [o.get_attribute("value") for o in select.options] == ["alpha", "beta"]
        assert select.first_selected_option.get_attribute("value") == "beta"  # the default collection
        select.select_by_value("alpha")
        with srv.client() as c:
            expected = c.post("/collections/alpha/search", json={"query": QUERY, "top_k": 3}).json()["hits"]
        search(browser, QUERY, top_k=3)
        wait(browser, lambda d: "collection alpha" in d.find_element(By.ID, "summary").text, "alpha's answer")
        assert hit_texts(browser) == [h["text"] for h in expected]
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        stop_server(srv)


def test_the_modes_offered_follow_the_chosen_collection(browser: webdriver.Chrome, tiny_exported: Path,
                                                        tmp_path: Path) -> None:
    """The mode selector took the default collection's lexical index and default mode (the index card's, /stats)
    for every collection: with a dense-only default, a collection with BM25 could not be searched in lexical or
    hybrid mode from the page. The choices follow the chosen collection."""
    import subprocess
    import sys

    from tests.conftest import REPO
    from tests.conftest import write_quora_like as quora_like

    folder = tmp_path / "collections"
    data = quora_like(tmp_path / "q.tsv.gz")
    for name, extra in (("plain", ["--no-lexical", "--default-mode", "dense"]), ("words", ["--default-mode",
                                                                                          "lexical"])):
        r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--root", str(folder / name), "--model",
                            str(tiny_exported), "--data", str(data), "--rows", "60", "--threads", "1", "--no-eval",
                            *extra], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    srv = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(folder), "STRATA_DEFAULT_COLLECTION": "plain",
                                  "STRATA_WATCH_INTERVAL_S": "0"})

    def offered(d: webdriver.Chrome) -> list[str]:
        return d.execute_script("return Array.from(document.querySelectorAll('#mode option'), "
                                "o => (o.disabled ? '-' : '') + (o.value || o.textContent))")

    try:
        browser.get("about:blank")
        browser.get_log("browser")
        browser.get(srv.url + "/")
        wait(browser, lambda d: d.find_element(By.ID, "collection-field").is_displayed(), "the collection selector")
        wait(browser, lambda d: offered(d) == ["Index default (dense)", "-hybrid", "dense", "-lexical"],
             "the default collection's modes: dense only")
        Select(browser.find_element(By.ID, "collection")).select_by_value("words")
        wait(browser, lambda d: offered(d) == ["Index default (lexical)", "hybrid", "dense", "lexical"],
             "words' modes")
        Select(browser.find_element(By.ID, "mode")).select_by_value("hybrid")
        with srv.client() as c:
            expected = c.post("/collections/words/search", json={"query": "python money", "top_k": 3,
                                                                 "mode": "hybrid"}).json()["hits"]
        search(browser, "python money", top_k=3)
        wait(browser, lambda d: "· hybrid ·" in d.find_element(By.ID, "summary").text, "words' hybrid answer")
        assert "collection words" in browser.find_element(By.ID, "summary").text
        assert hit_texts(browser) == [h["text"] for h in expected]
        Select(browser.find_element(By.ID, "collection")).select_by_value("plain")  # back: hybrid is not offered
        wait(browser, lambda d: offered(d)[1] == "-hybrid", "plain's modes again")
        assert Select(browser.find_element(By.ID, "mode")).first_selected_option.get_attribute("value") == ""
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        stop_server(srv)


def test_the_api_docs_render_offline(browser: webdriver.Chrome, server: Server) -> None:
    """/docs (Swagger UI) and /redoc load every script and style from this server (`service.routers.docs`): the
    machine has no route to a CDN, so a page that needed one would stay blank. Swagger UI renders the API's
    operations from /openapi.json; ReDoc renders its operations' headings."""
    browser.get("about:blank")
    browser.get_log("browser")  # drop what earlier tests left in the shared browser's log
    browser.get(server.url + "/docs")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) >= 5, "Swagger UI's operations")
    paths = texts(browser, ".opblock .opblock-summary-path")
    assert "/search" in paths and "/ready" in paths, paths
    scripts = browser.execute_script("return Array.from(document.scripts, s => s.src).filter(Boolean)")
    assert scripts and all(s.startswith(server.url + "/static-docs/") for s in scripts), scripts
    browser.get(server.url + "/redoc")
    wait(browser, lambda d: "/search" in d.find_element(By.TAG_NAME, "body").text, "ReDoc's operations")
    assert "Strata" in browser.title
    # the one outside request: ReDoc's decorative "powered by" logo, an <img> that removes itself when it fails
    logo = "https://cdn.redoc.ly/redoc/logo-mini.svg"
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE" and not e["message"].startswith(logo)] == []
