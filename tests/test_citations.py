"""A citation is never wrong (issue 21, item 1): every returned passage slices its file as it is now, is
found again there (``moved``), or is marked ``changed`` — and a changed one is never cited or given to a
model, whatever happened since the build (an edit, a move, a delete, a killed build)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from wikirag import Workspace, answer, build
from wikirag.cli import cli
from wikirag.retrieval import search

from .conftest import make_wiki

PAGE = ("# Roses\n\nPrune roses in early spring, just above an outward-facing bud.\n\n"
        "## Feeding\n\nFeed roses with a balanced fertiliser after the first flush of flowers.\n")


@pytest.fixture
def garden(home: Path) -> Workspace:
    make_wiki(home, "roses", {"roses.md": PAGE, "other.md": "# Lawns\n\nMow lawns weekly in summer, never too short.\n"})
    (home / "rags" / "roses.yaml").write_text("sensitivity: public\nwikis: [roses]\n")
    ws = Workspace(home, recheck_seconds=0)
    build(ws.wiki("roses"))
    return ws


def _page(ws: Workspace) -> Path:
    return ws.home / "wikis" / "roses" / "roses.md"


def _every_citation_holds(ws: Workspace, result) -> None:
    for p in result.passages:
        path = ws.home / "wikis" / p.wiki / p.path
        if p.state == "changed":
            assert not path.exists() or p.text not in path.read_text(encoding="utf-8")
        else:
            text = path.read_text(encoding="utf-8")
            assert text[p.start:p.end] == p.text, (p.state, p.path)
            assert text.count("\n", 0, p.start) + 1 == p.line


def test_unchanged_files_serve_their_passages_as_they_are(garden: Workspace) -> None:
    result = search(garden, "roses", "feed roses fertiliser", clearance="public", audit_event=None)
    assert result.passages and {p.state for p in result.passages} == {"current"} and not result.warnings
    _every_citation_holds(garden, result)


def test_text_moved_by_an_edit_above_it_is_found_again(garden: Workspace) -> None:
    before = search(garden, "roses", "feed roses fertiliser", clearance="public", audit_event=None).passages[0]
    _page(garden).write_text(PAGE.replace("# Roses\n\n", "# Roses\n\nA new first paragraph, two lines\nlong.\n\n"))
    result = search(garden, "roses", "feed roses fertiliser", clearance="public", audit_event=None)
    top = result.passages[0]
    assert top.state == "moved" and top.text == before.text and top.start > before.start and top.line == before.line + 3
    assert any("is stale" in w and "wikirag build roses" in w for w in result.warnings)
    _every_citation_holds(garden, result)
    data = json.loads(CliRunner().invoke(cli, ["--home", str(garden.home), "query", "roses", "feed roses fertiliser",
                                               "--json"]).stdout)
    assert data[0]["state"] == "moved" and data[0]["start"] == top.start


def test_text_that_is_gone_is_marked_changed_and_never_cited(garden: Workspace) -> None:
    _page(garden).write_text(PAGE.replace("balanced fertiliser", "seaweed feed"))
    result = search(garden, "roses", "feed roses fertiliser", clearance="public", audit_event=None)
    changed = [p for p in result.passages if p.state == "changed"]
    assert changed and all("balanced fertiliser" in p.text for p in changed)
    _every_citation_holds(garden, result)
    assert all(d["start"] is None and d["line"] is None for d in (p.to_dict() for p in changed))
    run = CliRunner().invoke(cli, ["--home", str(garden.home), "query", "roses", "feed roses fertiliser"])
    assert "[changed since the build: not citable]" in run.output
    got = answer(garden, "roses", "feed roses fertiliser", clearance="public", model="extractive").result
    assert got.passages and all(p.state != "changed" for p in got.passages)  # never handed to the model
    assert all("balanced fertiliser" not in c.passage.text for c in got.citations)
    assert any("left out" in w and "roses/roses.md" in w for w in got.warnings)


def test_a_deleted_file_marks_its_passages_changed(garden: Workspace) -> None:
    _page(garden).unlink()
    result = search(garden, "roses", "prune roses spring", clearance="public", audit_event=None)
    assert [p.state for p in result.passages if p.path == "roses.md"] and all(
        p.state == "changed" for p in result.passages if p.path == "roses.md")
    got = answer(garden, "roses", "prune roses spring", clearance="public", model="extractive").result
    assert all(p.path != "roses.md" for p in got.passages)


def test_a_symlink_swapped_in_for_a_page_is_not_followed(garden: Workspace, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text(PAGE)  # the same text, outside the wiki: must not be read as the page
    _page(garden).unlink()
    _page(garden).symlink_to(secret)
    result = search(garden, "roses", "prune roses spring", clearance="public", audit_event=None)
    assert all(p.state == "changed" for p in result.passages if p.path == "roses.md")


def test_after_a_killed_build_every_citation_still_holds(garden: Workspace) -> None:
    for round_ in range(3):
        intro = f"Round {round_}. " * (round_ + 1)
        _page(garden).write_text(PAGE.replace("# Roses\n\n", f"# Roses\n\n{intro}\n\n")
                                 .replace("outward-facing", "outward" if round_ % 2 else "outward-facing"))
        proc = subprocess.Popen([sys.executable, "-m", "wikirag", "--home", str(garden.home), "build", "roses"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.05 * round_)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for question in ("prune roses spring bud", "feed roses fertiliser"):
            result = search(garden, "roses", question, clearance="public", audit_event=None)
            assert result.passages
            _every_citation_holds(garden, result)
