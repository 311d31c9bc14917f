"""Background builds (wikirag.background): real builds in a child process of a temp workspace, while the
test process keeps searching the previous index."""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import time
import types
from pathlib import Path

import pytest

from wikirag import Workspace, background, build, search
from wikirag.store import build_lock, current_build_id

from .conftest import make_wiki

REPO = Path(__file__).resolve().parent.parent

WORDS = ["soil", "compost", "tomato", "basil", "pepper", "water", "seed", "sun", "shade", "mulch", "root", "leaf",
         "stem", "fruit", "flower", "pest", "aphid", "worm", "spade", "rake", "trellis", "sprout", "harvest"]


def _pages(n: int, extra: str = "") -> dict[str, str]:
    """``n`` pages of six paragraphs each, drawn from a pool so that writing them is quick."""
    rng = random.Random(18)
    pool = [" ".join(rng.choice(WORDS) for _ in range(60)) for _ in range(50)]
    return {f"p{i:05d}.md": f"# Page {i}\n\n" + "\n\n".join(f"{pool[(i + j) % 50]} {extra}" for j in range(6)) + "\n"
            for i in range(n)}


def _solo(home: Path, name: str, files: dict[str, str]) -> Workspace:
    """Wiki ``name`` with ``files``, built, and a composition of it alone."""
    make_wiki(home, name, files)
    (home / "rags" / f"{name}.yaml").write_text(f"sensitivity: public\nwikis: [{name}]\n", encoding="utf-8")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki(name))
    return ws


def test_a_job_builds_in_the_background_and_its_build_serves(ws: Workspace, home: Path) -> None:
    build(ws.wiki("alpha"))
    before = current_build_id(ws.wiki("alpha"))
    page = next((home / "wikis" / "alpha").rglob("*.md"))
    page.write_text(page.read_text(encoding="utf-8") + "\n\nA new paragraph about zucchini in raised beds.\n",
                    encoding="utf-8")
    job = background.start(ws, "alpha")
    assert job.running and job.pid and background.start(ws, "alpha") is job  # one job per wiki at a time
    assert background.job(ws, "alpha") is job and background.job(home, "alpha") is job
    assert job.wait(60), "the build did not end within 60 s"
    assert (job.state, job.error) == ("built", None)
    assert job.build_id == current_build_id(ws.wiki("alpha")) != before
    assert job.files > 0 and job.chunks > 0 and job.seconds > 0 and job.started <= job.ended
    assert (job.stage, job.done) == ("reading", job.total) and job.total >= job.files and job.fraction == 1.0
    assert any("zucchini" in p.text for p in search(ws, "open", "zucchini", clearance="public").passages)

    again = background.start(ws, "alpha")  # the last job ended: a new one, with nothing to do
    assert again is not job and again.wait(60)
    assert (again.state, again.build_id) == ("up to date", job.build_id)
    assert background.job(ws, "alpha") is again and background.job(ws, "beta") is None


def test_a_failed_build_reports_its_message_and_the_previous_index_serves(home: Path) -> None:
    ws = _solo(home, "solo", {"a.md": "# Asparagus\n\nA page about asparagus beds and their care in spring.\n"})
    before = current_build_id(ws.wiki("solo"))
    (home / "wikis" / "solo" / "a.md").write_text("", encoding="utf-8")
    job = background.start(ws, "solo")
    assert job.wait(60)
    assert job.state == "failed" and "nothing to index" in job.error and "Traceback" not in job.error
    assert job.ended and job.build_id is None
    assert current_build_id(ws.wiki("solo")) == before
    assert search(ws, "solo", "asparagus", clearance="public").passages


def test_a_build_running_elsewhere_fails_the_job(ws: Workspace) -> None:
    build(ws.wiki("alpha"))
    with build_lock(ws.wiki("alpha")):  # as a `wikirag build` in another process holds it
        job = background.start(ws, "alpha", force=True)
        assert job.wait(60)
    assert job.state == "failed" and "another build of wiki 'alpha' is running" in job.error


def test_a_killed_build_fails_and_the_previous_index_serves(ws: Workspace) -> None:
    build(ws.wiki("alpha"))
    before = current_build_id(ws.wiki("alpha"))
    job = background.start(ws, "alpha", force=True)
    os.kill(job.pid, signal.SIGKILL)  # e.g. the out-of-memory killer
    assert job.wait(60)
    assert job.state == "failed" and "ended unexpectedly" in job.error
    assert current_build_id(ws.wiki("alpha")) == before
    assert search(ws, "open", "compost", clearance="public").passages


def test_an_unexpected_error_is_logged_never_shown(home: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What the parent does with the child's report of an exception that is not a WikiragError."""
    job = background.Job(home, "alpha")
    with caplog.at_level(logging.ERROR, logger="wikirag.background"):
        background._apply(job, ("crash", "Traceback (most recent call last):\n  ...\nKeyError: 'secret'"))
    assert job.state == "failed" and job.error == background.CRASHED and job.wait(0)
    assert "KeyError: 'secret'" in caplog.text and "secret" not in job.error


def test_searches_during_a_background_build_are_answered_from_the_previous_index(home: Path) -> None:
    ws = _solo(home, "big", _pages(3000))
    before = current_build_id(ws.wiki("big"))
    make_wiki(home, "big", _pages(3000, extra="zucchini"))  # every page changed: a full rebuild
    job = background.start(ws, "big")
    searched, seconds = 0, []
    while job.running:
        started = time.perf_counter()
        result = search(ws, "big", "compost mulch tomato", clearance="public", k=10, audit_event=None)
        seconds.append(time.perf_counter() - started)
        # the previous index answers (and says the pages changed since it was built)
        assert len(result.passages) == 10 and all("is stale" in w for w in result.warnings)
        searched += 1
        time.sleep(0.02)  # a busy app, not a loop that starves the (lower-priority) build of the CPU
    assert (job.state, job.error) == ("built", None) and job.files == 3000
    assert current_build_id(ws.wiki("big")) == job.build_id != before
    assert searched >= 5, f"only {searched} searches during a {job.seconds:.1f} s build"
    deadline = time.monotonic() + 10  # the index cache notices the new build within its recheck interval
    while not search(ws, "big", "zucchini", clearance="public", audit_event=None).passages:
        assert time.monotonic() < deadline, "the new build was not served within 10 s"
        time.sleep(0.1)


def test_the_parents_main_script_is_not_run_again_in_the_build_process(ws: Workspace, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Streamlit installs the app's entry script as ``__main__``; spawn would run it again in the child."""
    marker = tmp_path / "ran"
    script = tmp_path / "app.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    fake = types.ModuleType("__main__")
    fake.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", fake)
    job = background.start(ws, "alpha")
    assert sys.modules["__main__"] is fake and job.wait(60)
    assert job.state == "built" and not marker.exists()


def test_the_portal_shows_a_running_build_to_every_builder(ws: Workspace, home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A new session (someone coming back to the page) sees the running build, then its result; a user who
    may not build sees neither. The build process is paused (SIGSTOP) so that it is surely running."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from wikirag.access import Level
    from wikirag.users import User

    monkeypatch.setenv("WIKIRAG_HOME", str(home))
    monkeypatch.setenv("WIKIRAG_DEMO", "1")

    def portal(user: User) -> AppTest:
        st.cache_resource.clear()  # the app's workspace is this test's
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
        at.session_state["user"], at.session_state["signed_in_at"] = user, time.time()
        at.switch_page("pages/portal.py")
        return at.run()

    builder, reader = User("b", Level.CONFIDENTIAL, can_build=True), User("r", Level.CONFIDENTIAL)
    job = background.start(ws, "alpha")
    os.kill(job.pid, signal.SIGSTOP)
    try:
        at = portal(builder)
        assert not at.exception and [s.label[:16] for s in at.status] == ["Building alpha… "]
        assert not portal(reader).status
    finally:
        os.kill(job.pid, signal.SIGCONT)
    assert job.wait(60)
    labels = [s.label for s in portal(builder).status]
    assert len(labels) == 1 and labels[0].startswith("alpha: built — ")
