"""Load: 5 browser sessions at once through sign-in → question → cited answer, against the running app.

Starts the app (``streamlit run app.py``, demo mode) on a built copy of the bundled examples, then drives
5 concurrent sessions in Debian's chromium with Playwright (async API, one browser, one context per
session). Each session signs in as a different demo user, asks its own question and waits for the
cited answer. Reports each session's seconds to the sign-in page, to signed in, to the answer, and
errors (must be 0).

    python bench/load_browser.py [--sessions 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from wikirag import Workspace, build

REPO = Path(__file__).resolve().parents[1]
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
SESSIONS = [("demo-public", "public-help", "How long does cold brew keep in the fridge?", "brewing/"),
            ("demo-internal", "engineering", "How fast must a SEV2 page be acknowledged?", "engineering-handbook/"),
            ("demo-confidential", "security", "How quickly must a leaked API key be revoked?", "security-runbooks/"),
            ("demo-public", "public-help", "Which files does the indexer skip?", "wikirag-guide/"),
            ("demo-internal", "engineering", "How do I roll back a bad production deploy?", "engineering-handbook/")]


def start_app(home: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "WIKIRAG_HOME": str(home), "WIKIRAG_DEMO": "1", "WIKIRAG_CACHE": str(home / "cache")}
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(REPO / "app.py"), "--server.port",
                               str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
                               "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1):
                return server, url
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the app did not start")


async def session(browser, url: str, user: str, composition: str, question: str, expect_wiki: str) -> dict:
    from playwright.async_api import expect

    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    started = time.perf_counter()
    times: dict = {"user": user}
    try:
        await page.goto(url)
        await page.get_by_role("textbox", name="User name").wait_for(timeout=60_000)
        times["signin_page_s"] = round(time.perf_counter() - started, 2)
        await page.get_by_role("textbox", name="User name").fill(user)
        await page.get_by_role("textbox", name="Password").fill(f"{user}-pw")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_text("Signed in as")).to_be_visible(timeout=60_000)
        times["signed_in_s"] = round(time.perf_counter() - started, 2)
        await page.get_by_role("combobox").first.click()
        await page.get_by_role("option", name=re.compile(f"^{composition} ")).click()
        asked = time.perf_counter()
        await page.get_by_placeholder("Ask a question").fill(question)
        await page.keyboard.press("Enter")
        citation = page.get_by_role("button", name="[").filter(has_text=expect_wiki).first
        await expect(citation).to_be_visible(timeout=120_000)
        times["answer_s"] = round(time.perf_counter() - asked, 2)
        times["error"] = None
    except Exception as exc:  # noqa: BLE001 - reported per session
        times["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    await context.close()
    return times


async def drive(url: str, sessions: int) -> list[dict]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        plan = [SESSIONS[i % len(SESSIONS)] for i in range(sessions)]
        results = await asyncio.gather(*(session(browser, url, *item) for item in plan))
        await browser.close()
    return list(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "ws"
        for part in ("wikis", "rags"):
            shutil.copytree(REPO / part, home / part, ignore=shutil.ignore_patterns(".index"))
        ws = Workspace(home)
        for name in ws.wiki_names():
            build(ws.wiki(name))
        server, url = start_app(home)
        try:
            results = asyncio.run(drive(url, args.sessions))
        finally:
            server.terminate()
            server.wait(timeout=20)
    ok = [r for r in results if not r["error"]]
    summary = {"sessions": len(results), "errors": len(results) - len(ok),
               "answer_s_median": statistics.median(r["answer_s"] for r in ok) if ok else None,
               "answer_s_max": max((r["answer_s"] for r in ok), default=None), "per_session": results}
    print(json.dumps(summary, indent=2))
    sys.exit(1 if summary["errors"] else 0)


if __name__ == "__main__":
    main()
