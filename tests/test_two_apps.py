"""Two ``wikirag app`` processes over one workspace serve the same users (README "Running for a team").

Both run as users start them, on two ports of 127.0.0.1, with one workspace folder; one real browser
(Debian's chromium through Playwright). A browser sends a host's cookies to every port of it, as it does
to every app process behind one reverse proxy: so a sign-in on one process is used on the other. Checked:
the session is valid on the other process; a conversation kept by one is listed and resumed by the other;
feedback given on the other is in the first one's gaps view; a rebuild started in one's portal is
answered by the other within its index re-check interval. Concurrent writes of the same files by two
processes (no lost write) are tested in tests/test_conversations.py and tests/test_feedback.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .test_browser import CHROMIUM, FLAGS, _serve, _sign_in, _thumbs_down

QUESTION = "When are SEV1 action items due?"
NEW_FACT = "The quarterly failover drill of the incident bridge runs on the first Thursday of March."


@pytest.fixture
def shared_home(built_examples: Path, tmp_path: Path) -> Path:
    from .conftest import copy_built_examples

    home = copy_built_examples(built_examples, tmp_path / "ws")
    shutil.rmtree(home / ".sessions", ignore_errors=True)
    return home


def test_two_app_processes_share_sign_ins_conversations_feedback_and_rebuilds(shared_home: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with _serve(shared_home, "wikirag app") as one, _serve(shared_home, "wikirag app") as two, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        a = context.new_page()
        a.goto(f"{one}/chat")
        _sign_in(a, "demo-confidential")
        a.get_by_role("button", name="New conversation").click()
        a.get_by_placeholder("Ask a question").fill(QUESTION)
        a.keyboard.press("Enter")
        messages = a.locator('[data-testid="stChatMessage"]')
        expect(messages.nth(1).locator('[data-testid="stFeedbackButton"]').first).to_be_visible(timeout=60_000)
        expect(messages.nth(1)).to_contain_text("30 days")

        # the other process: already signed in (the session is the workspace's, not the process's)
        b = context.new_page()
        b.goto(f"{two}/chat")
        expect(b.get_by_text("Signed in as")).to_be_visible(timeout=30_000)
        expect(b.get_by_text("Page not found")).to_have_count(0)  # /chat, signed in: the chat itself
        expect(b.get_by_text("demo-confidential").first).to_be_visible()
        # the conversation the first process kept is listed there, and resumed (the current one: disabled)
        expect(b.get_by_role("button", name=QUESTION)).to_be_disabled(timeout=30_000)
        turns = b.locator('[data-testid="stChatMessage"]')
        expect(turns).to_have_count(2, timeout=30_000)
        expect(turns.nth(1)).to_contain_text("30 days")
        # feedback given on the second process …
        _thumbs_down(b, turns.nth(1), "Name the SEV2 deadline too")
        # … is in the first one's gaps view of the wiki that answered
        a.goto(f"{one}/portal?wiki=engineering-handbook&gaps=1")
        expect(a.locator(".st-key-gaps")).to_contain_text("Name the SEV2 deadline too", timeout=30_000)

        # a page edited on disk and rebuilt from the first process's portal …
        page_file = shared_home / "wikis/engineering-handbook/operations/incident-response.md"
        page_file.write_text(page_file.read_text(encoding="utf-8") + f"\n## Drills\n\n{NEW_FACT}\n",
                             encoding="utf-8")
        a.goto(f"{one}/portal")
        # the page has run to its end (a dropdown opened while it still runs closes when it ends)
        expect(a.get_by_text("index stale").first).to_be_visible(timeout=30_000)
        expect(a.get_by_role("button", name="Rebuild index")).to_be_visible(timeout=30_000)
        a.wait_for_timeout(1000)
        wiki = a.get_by_role("combobox", name="Wiki")
        wiki.click()
        a.keyboard.type("engineering-handbook")
        a.keyboard.press("Enter")
        a.get_by_role("button", name="Rebuild index").click()
        expect(a.get_by_text("engineering-handbook: built")).to_be_visible(timeout=120_000)
        # … is answered by the second process, which has served the old build until now
        b.get_by_role("button", name="New conversation").click()
        b.get_by_placeholder("Ask a question").fill("When does the failover drill of the incident bridge run?")
        b.keyboard.press("Enter")
        answer = b.locator('[data-testid="stChatMessage"]').nth(1)
        expect(answer).to_contain_text("first Thursday of March", timeout=60_000)
        assert "Traceback" not in a.inner_text("body") + b.inner_text("body")
        browser.close()
