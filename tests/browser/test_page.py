"""The web page in a real browser (Debian's chromium driven by Playwright): it lists the indexes, shows results
with highlights while a query is typed key by key, draws the live charts, and survives a malformed query."""
import os

import pytest
from playwright.sync_api import sync_playwright

URL = os.environ.get("SPIRIT_URL")
INDEX = os.environ.get("SPIRIT_INDEX", "wiki")
QUERY = os.environ.get("SPIRIT_QUERY", "history")
CHROMIUM = os.environ.get("SPIRIT_CHROMIUM", "/usr/bin/chromium")
SHOT = os.environ.get("SPIRIT_SCREENSHOT", "docs/screenshot.png")


@pytest.fixture(scope="module")
def page():
    if not URL:
        pytest.fail("SPIRIT_URL is not set (see scripts/test-browser.sh)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        pg = browser.new_page(viewport={"width": 1280, "height": 800})
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(URL + "/")
        pg.errors = errors
        yield pg
        browser.close()


def test_search_as_you_type(page):
    page.wait_for_function(f"Array.from(document.querySelectorAll('#index-picker option')).some(o => o.value === '{INDEX}')")
    page.select_option("#index-picker", INDEX)
    page.click("#q")
    page.type("#q", QUERY, delay=50)
    page.wait_for_function(f"document.querySelector('#status').textContent.includes('hits') && document.querySelectorAll('#results li.hit mark').length > 0")
    hits = page.locator("#results li.hit")
    assert hits.count() >= 1
    marks = page.locator("#results li.hit mark").all_inner_texts()
    assert marks and all(QUERY[:4].lower() in m.lower() for m in marks)
    assert "hits in" in page.inner_text("#status")
    page.wait_for_function("window.spiritStatsPolls >= 2")
    page.screenshot(path=SHOT, full_page=False)
    assert page.errors == []


def test_malformed_query_shows_an_error_not_a_crash(page):
    page.fill("#q", "")
    page.type("#q", '"unbalanced', delay=20)
    page.wait_for_function("document.querySelector('#status').classList.contains('error') || document.querySelector('#status').textContent.includes('0 hits')")
    assert page.errors == []
    # The page keeps working afterwards.
    page.fill("#q", "")
    page.type("#q", QUERY, delay=20)
    page.wait_for_function("document.querySelectorAll('#results li.hit').length > 0")
    assert page.errors == []
