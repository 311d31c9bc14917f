"""End to end in a real browser: start the app, sign in, ask, get a cited answer, open the citation.

Uses Debian's chromium (installed by .ci/run) through Playwright; the app runs as users start it,
``wikirag app`` (the router and pages inside the package, ``wikirag/webapp/``), on 127.0.0.1 over a built
copy of the bundled examples. The checkout's ``app.py`` and thin ``pages/`` run the same page code: see
tests/test_app.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from wikirag import Workspace, build

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run installs the Debian package chromium")
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("browser") / "ws"
    for part in ("wikis", "rags"):
        shutil.copytree(REPO / part, home / part, ignore=shutil.ignore_patterns(".index"))
    ws = Workspace(home)
    for name in ws.wiki_names():
        build(ws.wiki(name))
    port = _free_port()
    env = {**os.environ, "WIKIRAG_HOME": str(home), "WIKIRAG_CACHE": str(home / "cache"), "WIKIRAG_DEMO": "1"}
    env.pop("WIKIRAG_USERS", None)
    # wikirag app becomes streamlit; a session of its own, so the teardown stops it and whatever it started
    server = subprocess.Popen(
        [sys.executable, "-m", "wikirag", "--home", str(home), "app", "--port", str(port), "--address", "127.0.0.1"],
        cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        assert server.poll() is None, server.stdout.read().decode()
        assert time.monotonic() - started < 60, "the app did not start within 60 s"
        time.sleep(0.2)
    yield url
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=20)


def test_sign_in_ask_and_open_a_citation(app_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        started = time.monotonic()
        page.goto(app_url)
        page.get_by_role("textbox", name="User name").wait_for(timeout=30_000)
        first_render = time.monotonic() - started
        page.get_by_role("textbox", name="User name").fill("demo-internal")
        page.get_by_role("textbox", name="Password").fill("demo-internal-pw")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_text("Signed in as")).to_be_visible(timeout=30_000)

        page.get_by_placeholder("Ask a question").fill("How do I roll back a bad production deploy?")
        page.keyboard.press("Enter")
        citation = page.get_by_role("button", name="[").filter(has_text="engineering-handbook/").first
        expect(citation).to_be_visible(timeout=60_000)
        expect(page.get_by_text("retrieval", exact=False).first).to_be_visible()
        page.screenshot(path=str(tmp_path / "answer.png"), full_page=True)

        citation.click()
        link = page.get_by_role("link", name="Open engineering-handbook/").first
        expect(link).to_be_visible(timeout=10_000)
        link.click()
        expect(page.get_by_text("Cited passage")).to_be_visible(timeout=30_000)
        page.screenshot(path=str(tmp_path / "cited.png"), full_page=True)
        browser.close()
    assert (tmp_path / "answer.png").stat().st_size > 10_000
    assert first_render < 10, f"first page took {first_render:.1f} s"
