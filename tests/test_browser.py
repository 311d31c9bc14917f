"""End to end in a real browser: start the app, sign in, ask, get a cited answer, open the citation.

Uses Debian's chromium (installed by .ci/run) through Playwright; the app runs as users start it,
``wikirag app`` (the router and pages inside the package, ``wikirag/webapp/``), on 127.0.0.1 over a built
copy of the bundled examples. The checkout's ``app.py`` and thin ``pages/`` run the same page code: see
tests/test_app.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import copy_built_examples, free_port, wait_until_healthy

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run installs the Debian package chromium")
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)




@pytest.fixture(scope="module")
def app_home(built_examples: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A built copy of the bundled examples (the repository is never written)."""
    return copy_built_examples(built_examples, tmp_path_factory.mktemp("browser") / "ws")


@contextlib.contextmanager
def _serve(home: Path, how: str, *options: str) -> Iterator[str]:
    """Start the app as users do, ``wikirag app`` (the package's router) or, in the checkout, ``streamlit run
    app.py`` (its .streamlit/config.toml applies there); yield its URL once it answers."""
    port = free_port()
    env = {**os.environ, "WIKIRAG_HOME": str(home), "WIKIRAG_CACHE": str(home / "cache"), "WIKIRAG_DEMO": "1"}
    env.pop("WIKIRAG_USERS", None)
    if how == "wikirag app":
        command, cwd = [sys.executable, "-m", "wikirag", "--home", str(home), "app", "--port", str(port),
                        "--address", "127.0.0.1", *options], home
    else:
        command, cwd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                        "--server.address", "127.0.0.1"], REPO
    # wikirag app becomes streamlit; a session of its own, so the teardown stops it and whatever it started
    server = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, server, lambda: "" if server.poll() is None else server.stdout.read().decode())
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)


@pytest.fixture(scope="module")
def app_url(app_home: Path) -> Iterator[str]:
    with _serve(app_home, "wikirag app") as url:
        yield url


# what a visitor must not see before signing in: the names of the app's pages and scripts (the page list once
# shown at /portal was "app, chat, compare, portal, signin, ui"), and anything from a wiki
PAGE_NAMES = re.compile(r"\b(chat|compare|portal|signin|ui|router|knowledge base)\b", re.IGNORECASE)
WIKI_TEXT = ["V60", "brewing", "Grind", "engineering", "Northwind", "NWL-"]
SIGNED_OUT_PATHS = ["/portal", "/portal?wiki=brewing&path=methods/v60.md", "/ui", "/app", "/signin", "/chat",
                    "/compare", "/"]


@pytest.mark.parametrize("how", ["wikirag app", "streamlit run app.py"])
def test_before_sign_in_every_url_shows_only_the_sign_in_page(app_home: Path, how: str) -> None:
    """A fresh process each, /portal first: on a process's first run Streamlit used to send the page list of
    a pages/ folder (the checkout's) before the router ran; it must never appear, not even for a moment."""
    from playwright.sync_api import sync_playwright

    with _serve(app_home, how) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        for path in SIGNED_OUT_PATHS:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url + path, wait_until="commit")
            form = page.get_by_role("textbox", name="User name")
            deadline = time.monotonic() + 30
            while True:  # watch the page while it loads: no navigation at any moment
                assert page.locator('[data-testid="stSidebarNav"]').count() == 0, (how, path)
                if form.count() and form.is_visible():
                    break
                assert time.monotonic() < deadline, f"{how} {path}: no sign-in form within 30 s"
                page.wait_for_timeout(50)
            page.wait_for_timeout(1000)  # let the run finish: nothing may come after the form either
            body = page.inner_text("body")
            assert page.locator('[data-testid="stSidebarNav"], [data-testid="stSidebar"]').count() == 0, (how, path)
            assert page.get_by_role("button", name="Sign in").is_visible()
            links = {a.inner_text().strip() for a in page.locator("a").all()} - {"", "Skip to main content"}
            assert not links, (how, path, links)
            assert not PAGE_NAMES.search(body), (how, path, body)
            assert not any(text in body for text in WIKI_TEXT), (how, path, body)
            assert "Traceback" not in body and "Error" not in body, (how, path, body)
            assert page.title() == "wikirag", (how, path)
            page.close()
        browser.close()


def _sign_in(page, name: str) -> None:
    from playwright.sync_api import expect

    page.get_by_role("textbox", name="User name").fill(name)
    page.get_by_role("textbox", name="Password").fill(f"{name}-pw")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_text("Signed in as")).to_be_visible(timeout=30_000)


def _thumbs_down(page, message, comment: str) -> None:
    """Thumbs down on the answer ``message`` of ``page``, with ``comment`` sent by Enter."""
    message.locator('[data-testid="stFeedbackButton"]').nth(1).click()
    box = page.get_by_placeholder("What was wrong or missing?")
    box.wait_for(timeout=30_000)
    box.fill(comment)
    box.press("Enter")
    page.wait_for_timeout(1500)


def test_sign_in_ask_and_open_a_citation(app_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        started = time.monotonic()
        page.goto(app_url)
        page.get_by_role("textbox", name="User name").wait_for(timeout=30_000)
        first_render = time.monotonic() - started
        _sign_in(page, "demo-internal")

        page.get_by_placeholder("Ask a question").fill("When are SEV1 action items due?")
        page.keyboard.press("Enter")
        citation = page.get_by_role("button", name="[").filter(has_text="engineering-handbook/").first
        expect(citation).to_be_visible(timeout=60_000)
        expect(page.get_by_text("retrieval", exact=False).first).to_be_visible()
        page.screenshot(path=str(tmp_path / "answer.png"), full_page=True)

        citation.click()
        expect(page.get_by_role("link", name="Open engineering-handbook/").first).to_be_visible(timeout=10_000)
        # a passage far down its page (operations/incident-response.md, line 69): the page opens scrolled to it
        link = page.get_by_role("link", name="Open engineering-handbook/").first
        assert int(re.search(r":(\d+)$", link.inner_text().strip()).group(1)) > 30, link.inner_text()
        link.click()
        expect(page.get_by_text("Cited passage")).to_be_visible(timeout=30_000)
        # the cited characters are highlighted in the page itself and scrolled into view
        cited = page.locator(".st-key-cited")
        expect(cited).to_be_in_viewport(timeout=10_000)
        assert "255, 164, 33" in cited.evaluate("e => getComputedStyle(e).backgroundColor")
        page.screenshot(path=str(tmp_path / "cited.png"))
        browser.close()
    assert (tmp_path / "answer.png").stat().st_size > 10_000
    assert first_render < 10, f"first page took {first_render:.1f} s"


def test_a_sign_in_survives_reloads_and_tabs_and_a_shared_link_lands_on_its_characters(app_home: Path,
                                                                                       app_url: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    source = (app_home / "wikis/engineering-handbook/operations/incident-response.md").read_text(encoding="utf-8")
    start = source.index("Action items from SEV1")
    end = source.index("\n", start)
    link = (f"{app_url}/portal?wiki=engineering-handbook&path=operations%2Fincident-response.md"
            f"&start={start}&end={end}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        # a shared link opened signed out: the sign-in form there (no "page not found"), then the page and its
        # characters, highlighted and in view
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.goto(link)
        page.get_by_role("textbox", name="User name").wait_for(timeout=30_000)
        expect(page.get_by_text("Page not found")).to_have_count(0)
        _sign_in(page, "demo-internal")
        expect(page.locator(".st-key-cited")).to_be_in_viewport(timeout=30_000)
        assert "/portal?" in page.url and f"start={start}" in page.url
        # the cookie holds an opaque token only: no name, clearance or password
        cookies = {c["name"]: c for c in context.cookies()}
        token = cookies["wikirag_session"]["value"]
        assert len(token) >= 40 and "demo" not in token and "internal" not in token
        # a reload, and a second tab: still signed in, on the same page
        page.reload()
        expect(page.locator(".st-key-cited")).to_be_in_viewport(timeout=30_000)
        expect(page.get_by_text("Signed in as")).to_be_visible()
        other = context.new_page()
        other.goto(f"{app_url}/compare")
        expect(other.get_by_text("Signed in as")).to_be_visible(timeout=30_000)
        # sign-out ends it everywhere: the other tab's reload and the old cookie sign nobody in
        other.get_by_role("button", name="Sign out").click()
        other.get_by_role("textbox", name="User name").wait_for(timeout=30_000)
        page.reload()
        page.get_by_role("textbox", name="User name").wait_for(timeout=30_000)
        stale = browser.new_context()
        stale.add_cookies([{"name": "wikirag_session", "value": token, "url": app_url}])
        again = stale.new_page()
        again.goto(f"{app_url}/portal")
        again.get_by_role("textbox", name="User name").wait_for(timeout=30_000)
        expect(again.get_by_text("Signed in as")).to_have_count(0)
        browser.close()


def test_a_conversation_follow_up_reload_feedback_and_the_gaps_view(app_url: str) -> None:
    """A follow-up answered in its conversation (the searched question shown), the conversation resumed by a
    reload, a thumbs-down with a comment, and that question in the wiki's "Questions we could not answer"."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{app_url}/chat")
        page.get_by_role("textbox", name="User name").wait_for(timeout=30_000)
        _sign_in(page, "demo-public")
        page.get_by_role("button", name="New conversation").click()
        page.get_by_placeholder("Ask a question").fill("How much coffee goes into a French press?")
        page.keyboard.press("Enter")
        messages = page.locator('[data-testid="stChatMessage"]')
        # kept: shown again from the conversation, with its feedback buttons (the page has finished its rerun)
        expect(messages.nth(1).locator('[data-testid="stFeedbackButton"]').first).to_be_visible(timeout=60_000)
        page.get_by_placeholder("Ask a question").fill("And how long do I leave it to steep?")
        page.keyboard.press("Enter")
        expect(page.get_by_text("Searched: How long do I leave it to steep? (French press)")).to_be_visible(
            timeout=60_000)
        expect(messages.nth(3)).to_contain_text("4 minutes")
        expect(messages.nth(3).locator('[data-testid="stFeedbackButton"]').first).to_be_visible(timeout=60_000)
        # a reload resumes the conversation: both turns, and its title in the sidebar
        page.reload()
        expect(page.locator('[data-testid="stChatMessage"]')).to_have_count(4, timeout=30_000)
        expect(page.get_by_text("Searched: How long do I leave it to steep? (French press)")).to_be_visible()
        expect(page.get_by_role("button", name="How much coffee goes into a French press?")).to_be_visible()
        # thumbs down on the follow-up, with a comment
        _thumbs_down(page, page.locator('[data-testid="stChatMessage"]').nth(3), "Say how long it settles too")
        # the wiki's gaps view lists it, for a user cleared for the wiki
        page.goto(f"{app_url}/portal?wiki=brewing&gaps=1")
        gaps = page.locator(".st-key-gaps")
        expect(gaps).to_contain_text("And how long do I leave it to steep?", timeout=30_000)
        expect(gaps).to_contain_text("Say how long it settles too")
        browser.close()


@pytest.mark.parametrize("width", [1400, 390])  # a laptop and a phone
def test_every_page_fits_a_laptop_and_a_phone(app_home: Path, app_url: str, tmp_path: Path, width: int) -> None:
    """Chat, compare, the knowledge base and a page view, with content, at both widths: nothing wider than the
    screen, and screenshots (into $WIKIRAG_SCREENSHOTS when set: the README's docs/ were taken so)."""
    from playwright.sync_api import expect, sync_playwright

    out = Path(os.environ.get("WIKIRAG_SCREENSHOTS") or tmp_path)
    source = (app_home / "wikis/brewing/fundamentals.md").read_text(encoding="utf-8")
    start = source.index("For filter coffee")
    end = source.index("\n\n", start)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": width, "height": 900 if width > 500 else 844})
        page.goto(f"{app_url}/chat")
        page.get_by_role("textbox", name="User name").wait_for(timeout=30_000)
        _sign_in(page, "demo-confidential")

        def fits(name: str) -> None:
            page.wait_for_timeout(500)
            wide = page.evaluate("document.documentElement.scrollWidth")
            assert wide <= width + 1, f"{name} is {wide} px wide at {width} px"
            page.screenshot(path=str(out / f"{name}-{width}.png"))

        page.get_by_placeholder("Ask a question").fill("What do I do first when an API key has leaked?")
        page.keyboard.press("Enter")
        expect(page.get_by_role("button", name="[").first).to_be_visible(timeout=60_000)
        fits("chat")
        page.goto(f"{app_url}/compare")
        page.get_by_role("textbox", name="Question").wait_for(timeout=30_000)
        page.get_by_role("textbox", name="Question").fill("How do I rotate a leaked API key?")
        page.get_by_role("button", name="Compare").click()
        expect(page.get_by_text("passage(s) found by more than one composition")).to_be_visible(timeout=60_000)
        fits("compare")
        page.goto(f"{app_url}/portal")
        expect(page.get_by_role("link", name="Brewing").first).to_be_visible(timeout=30_000)
        # every wiki's status is on screen, in words
        expect(page.get_by_text(re.compile(r"confidential · \d+ files · \d+ passages"))).to_be_visible()
        fits("portal")
        page.goto(f"{app_url}/portal?wiki=brewing&path=fundamentals.md&start={start}&end={end}")
        expect(page.locator(".st-key-cited")).to_be_in_viewport(timeout=30_000)
        fits("page")
        browser.close()


def test_a_rebuild_runs_in_the_background_with_progress(app_home: Path, app_url: str) -> None:
    """A wiki big enough that its build outlasts the page's first look at it: the progress shows, then the
    page refreshes itself to the result (wikirag.background, the portal's fragment)."""
    from playwright.sync_api import expect, sync_playwright

    folder = app_home / "wikis" / "bulk"
    folder.mkdir()
    (folder / ".wiki.yaml").write_text("name: bulk\ntitle: Bulk\nsensitivity: public\n", encoding="utf-8")
    for i in range(12000):
        (folder / f"p{i:05d}.md").write_text(f"# Page {i}\n\nNotes on bed {i}: compost, mulch and {i % 97} seeds.\n",
                                             encoding="utf-8")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(app_url)
            _sign_in(page, "demo-confidential")
            page.get_by_role("link", name="Knowledge base").click()
            # the page has run to its end (a dropdown opened while it still runs closes when it ends)
            expect(page.get_by_text(re.compile(r"public · 0 files"))).to_be_visible(timeout=30_000)
            expect(page.get_by_role("button", name="Rebuild index")).to_be_visible(timeout=30_000)
            page.wait_for_timeout(500)
            page.get_by_role("combobox", name="Wiki").click()
            page.keyboard.type("bulk")
            page.get_by_role("option", name="bulk").click()
            page.get_by_role("button", name="Rebuild index").click()
            expect(page.get_by_text("Building bulk")).to_be_visible(timeout=30_000)
            expect(page.get_by_text("bulk: built — 12000 files")).to_be_visible(timeout=120_000)
            assert "Traceback" not in page.inner_text("body")
            browser.close()
    finally:
        shutil.rmtree(folder)  # the other tests' workspace stays the examples


def test_an_app_that_watches_answers_an_edit_on_its_own(app_home: Path, tmp_path: Path) -> None:
    """``wikirag app --watch``: a page edited on disk is answered in the chat without any rebuild by hand
    (the seconds it takes are measured by bench/live_app_bench.py)."""
    from playwright.sync_api import expect, sync_playwright

    home = tmp_path / "ws"
    shutil.copytree(app_home, home, ignore=shutil.ignore_patterns("cache", ".sessions"))  # no kept conversation
    page_file = home / "wikis/brewing/fundamentals.md"
    with _serve(home, "wikirag app", "--watch") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.get_by_role("textbox", name="User name").fill("demo-public")
        page.get_by_role("textbox", name="Password").fill("demo-public-pw")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_text("Signed in as")).to_be_visible(timeout=30_000)
        page_file.write_text(page_file.read_text() + "\n## Kettle\n\nThe zqxlive kettle must be descaled every "
                                                     "40 days.\n")
        messages = page.locator('[data-testid="stChatMessage"]')
        deadline, text = time.monotonic() + 30, ""
        while "40 days" not in text and time.monotonic() < deadline:
            before = messages.count()
            page.get_by_placeholder("Ask a question").fill("How often must the zqxlive kettle be descaled?")
            page.keyboard.press("Enter")
            answer = messages.nth(before + 1)
            answer.get_by_text("retrieval", exact=False).first.wait_for(timeout=30_000)
            text = answer.inner_text()
        assert "40 days" in text, text
        page.get_by_role("link", name="Knowledge base").click()
        expect(page.get_by_text("Live: the app rebuilds")).to_be_visible(timeout=30_000)
        browser.close()
