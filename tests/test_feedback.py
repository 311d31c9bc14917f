"""Feedback and gaps: what is recorded, votes, bounds, concurrent writers, who sees which gap, the CLI and the
portal's "Questions we could not answer"."""

from __future__ import annotations

import datetime as dt
import json
import logging
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from wikirag import feedback
from wikirag.access import Level
from wikirag.answers import AnswerResult
from wikirag.cli import cli
from wikirag.errors import NotFound
from wikirag.passage import Passage
from wikirag.prompt import NO_ANSWER, Citation
from wikirag.users import User

REPO = Path(__file__).resolve().parent.parent


def passage(wiki: str, path: str, start: int = 10, end: int = 60, text: str = "PASSAGE-TEXT-MARK") -> Passage:
    return Passage(1, wiki, path, start, end, 3, "Heading > Sub", 1.0, text)


def result(question: str = "how do I prune roses", *, composition: str = "open", wikis=("alpha",),
           text: str = "", cited=(), unsupported=(), passages=None, searched: str = "") -> AnswerResult:
    found = list(passages if passages is not None else [passage(w, f"{w}-page.md") for w in wikis])
    r = AnswerResult(question, composition, "extractive", text=text, passages=found, searched=searched,
                     wikis=list(wikis), unsupported_citations=list(unsupported))
    r.citations = [Citation(n, found[n - 1]) for n in cited]
    return r


def test_record_answer_keeps_refused_and_unsupported_answers_only(home: Path) -> None:
    nothing = result(passages=[])
    said_no = result(text=NO_ANSWER, searched="how do I prune roses in spring")
    unsupported = result(text="Prune in May [1].", cited=[1], unsupported=[1])
    good = result(text="Prune in May [1].", cited=[1])
    ids = [feedback.record_answer(home, r, user="ann", level=Level.PUBLIC)
           for r in (nothing, said_no, unsupported, good)]
    assert all(ids[:3]) and ids[3] is None
    kept = feedback.records(home)
    assert [r["kind"] for r in kept] == ["refused", "refused", "unsupported"]
    assert [r["id"] for r in kept] == ids[:3]
    first = kept[1]
    assert {k: first[k] for k in ("user", "composition", "level", "wikis", "question", "searched", "comment")} == {
        "user": "ann", "composition": "open", "level": "public", "wikis": ["alpha"],
        "question": "how do I prune roses", "searched": "how do I prune roses in spring", "comment": ""}
    assert kept[2]["cited"] == [{"n": 1, "wiki": "alpha", "path": "alpha-page.md", "start": 10, "end": 60,
                                 "line": 3, "heading": "Heading > Sub"}]
    assert kept[2]["unsupported"] == [1]
    assert "PASSAGE-TEXT-MARK" not in feedback.path_for(home).read_text()  # locations only, never text


def test_feedback_off_and_an_unwritable_workspace(home: Path, monkeypatch, caplog) -> None:
    monkeypatch.setenv("WIKIRAG_FEEDBACK", "off")
    assert feedback.record_answer(home, result(passages=[]), user="ann", level="public") is None
    assert feedback.vote(home, result(), user="ann", level="public", up=False) is None
    assert not feedback.path_for(home).exists() and not feedback.enabled()
    monkeypatch.delenv("WIKIRAG_FEEDBACK")
    (home / ".sessions").write_text("not a folder")  # every write fails, as on a read-only workspace
    with caplog.at_level(logging.WARNING, "wikirag.feedback"):
        assert feedback.record_answer(home, result(passages=[]), user="ann", level="public") is None
    assert "feedback cannot be kept" in caplog.text


def test_a_second_vote_on_a_turn_replaces_the_first(home: Path) -> None:
    r = result(text="Prune in May [1].", cited=[1])
    feedback.vote(home, r, user="ann", level="public", up=True, turn="t1")
    last = feedback.vote(home, r, user="ann", level="public", up=False, comment=" wrong\x00 month\r\n" + "x" * 3000,
                         turn="t1")
    feedback.vote(home, r, user="bob", level="public", up=True, turn="t1")  # another user: their own vote
    feedback.vote(home, r, user="ann", level="public", up=True)  # no turn: nothing to replace
    kept = feedback.records(home)
    assert [(k["user"], k["kind"], k["turn"]) for k in kept] == [
        ("ann", "down", "t1"), ("bob", "up", "t1"), ("ann", "up", None)]
    assert kept[0]["id"] == last
    assert kept[0]["comment"].startswith("wrong month\nxxx") and len(kept[0]["comment"]) == feedback.MAX_COMMENT


def test_the_file_is_bounded_and_private(home: Path, monkeypatch) -> None:
    monkeypatch.setattr(feedback, "MAX_RECORDS", 10)
    monkeypatch.setattr(feedback, "SLACK", 5)
    ids = [feedback.vote(home, result(f"question {i}"), user="ann", level="public", up=False) for i in range(40)]
    path = feedback.path_for(home)
    lines = path.read_text().splitlines()
    assert 10 <= len(lines) <= 15  # compacted whenever it went past 15
    assert [r["id"] for r in feedback.records(home)] == ids[-10:]  # the newest 10, oldest first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.chmod(0o644)
    feedback.vote(home, result(), user="ann", level="public", up=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_torn_last_line_does_not_spoil_the_next_record(home: Path) -> None:
    feedback.vote(home, result("first"), user="ann", level="public", up=False)
    with feedback.path_for(home).open("a") as out:
        out.write('{"id": "torn", "at": 1, "ki')  # a crash mid-write
    feedback.vote(home, result("second"), user="ann", level="public", up=False)
    assert [r["question"] for r in feedback.records(home)] == ["first", "second"]


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from wikirag import feedback
    from wikirag.answers import AnswerResult
    home, who, start = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    while time.time() < start:
        time.sleep(0.005)
    for i in range(50):
        feedback.vote(home, AnswerResult(f"{who} {i}", "open", "extractive", wikis=["alpha"]), user=who,
                      level="public", up=i % 2 == 0, turn=f"{who}-{i}")
""")


def test_two_processes_voting_at_once_lose_nothing(home: Path) -> None:
    start = time.time() + 1.5  # both start writing at the same moment
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(home), who, str(start)]) for who in ("p1", "p2")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    kept = feedback.records(home)
    assert len(kept) == 100 and len({r["id"] for r in kept}) == 100
    assert sorted(r["question"] for r in kept) == sorted(f"{w} {i}" for w in ("p1", "p2") for i in range(50))
    assert len(feedback.path_for(home).read_text().splitlines()) == 100


def _seed(home: Path) -> None:
    """A public question on alpha, an internal one on alpha and beta (citing both), a good answer voted up."""
    feedback.record_answer(home, result("PUBLIC-GAP how do I prune roses", passages=[]), user="ann",
                           level="public")
    team = result("INTERNAL-GAP which bin for deploy notes", composition="team", wikis=("alpha", "beta"),
                  text="Use bin 3 [1][2].", cited=[1, 2], unsupported=[2], searched="INTERNAL-GAP bins")
    feedback.record_answer(home, team, user="bob", level="internal")
    feedback.vote(home, result(text="ok [1]", cited=[1]), user="ann", level="public", up=True, turn="t")
    feedback.vote(home, team, user="bob", level="internal", up=False, comment="bin 3 is gone", turn="t2")


def test_gaps_follow_the_wikis_and_the_composition_level(ws) -> None:
    _seed(ws.home)
    public = feedback.gaps(ws, "public")
    assert [(g.wiki, g.kind, g.question) for g in public] == [("alpha", "refused", "PUBLIC-GAP how do I prune roses")]
    # the internal composition's question is not shown to a public user, not even under the public wiki
    assert [g.question for g in feedback.gaps(ws, "public", "alpha")] == ["PUBLIC-GAP how do I prune roses"]
    internal = feedback.gaps(ws, "internal")
    assert [(g.wiki, g.kind) for g in internal] == [  # newest first; a record under every wiki it searched
        ("alpha", "down"), ("beta", "down"), ("alpha", "unsupported"), ("beta", "unsupported"), ("alpha", "refused")]
    down = internal[0]
    assert down.comment == "bin 3 is gone" and down.searched == "INTERNAL-GAP bins"
    assert [(c.n, c.wiki) for c in down.cited] == [(1, "alpha"), (2, "beta")]
    assert [g.kind for g in feedback.gaps(ws, "internal", "beta", kinds=["unsupported"])] == ["unsupported"]
    assert "up" not in {g.kind for g in internal}
    assert feedback.weekly(internal) == [(internal[0].week, 5)]
    # an unknown wiki and one above the clearance: the same answer
    for name in ("beta", "nope"):
        with pytest.raises(NotFound, match=f"^no wiki '{name}' that you may see$"):
            feedback.gaps(ws, "public", name)


def test_a_raised_wiki_hides_its_gaps_and_cited_locations(ws) -> None:
    _seed(ws.home)
    beta = ws.home / "wikis/beta/.wiki.yaml"
    beta.write_text(beta.read_text().replace("sensitivity: internal", "sensitivity: confidential"))
    internal = feedback.gaps(ws, "internal")
    assert {g.wiki for g in internal} == {"alpha"}
    assert all(c.wiki == "alpha" for g in internal for c in g.cited)  # beta's location dropped
    assert [c.wiki for c in feedback.gaps(ws, "confidential", "beta")[0].cited] == ["alpha", "beta"]
    alpha = ws.home / "wikis/alpha/.wiki.yaml"
    alpha.write_text(alpha.read_text().replace("sensitivity: public", "sensitivity: internal"))
    assert feedback.gaps(ws, "public") == []
    with pytest.raises(NotFound):
        feedback.gaps(ws, "public", "alpha")


def test_weekly_counts_iso_weeks_newest_first() -> None:
    def gap(day: dt.date) -> feedback.Gap:
        at = dt.datetime(day.year, day.month, day.day, 12, tzinfo=dt.timezone.utc).timestamp()
        return feedback.Gap("alpha", "x", at, "refused", "open", "public", "q", "q", "", ())

    found = [gap(dt.date(2026, 12, 3)), gap(dt.date(2026, 12, 1)), gap(dt.date(2026, 11, 25)), gap(dt.date(2027, 1, 1))]
    assert feedback.weekly(found) == [("2026-W53", 1), ("2026-W49", 2), ("2026-W48", 1)]


def test_gaps_command(home: Path) -> None:
    _seed(home)
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(cli, ["--home", str(home), "gaps", *args], catch_exceptions=False)

    listed = run("--json", "--clearance", "internal")
    assert listed.exit_code == 0, listed.output
    found = json.loads(listed.stdout)
    assert [(g["wiki"], g["kind"]) for g in found][:2] == [("alpha", "down"), ("beta", "down")]
    assert set(found[0]) == {"wiki", "at", "kind", "composition", "question", "searched", "comment", "cited",
                             "unsupported"}
    assert dt.datetime.fromisoformat(found[0]["at"]).tzinfo is not None
    assert found[0]["cited"][0] == {"n": 1, "wiki": "alpha", "path": "alpha-page.md", "start": 10, "end": 60,
                                    "line": 3, "heading": "Heading > Sub"}
    public = json.loads(run("alpha", "--json").stdout)
    assert [g["question"] for g in public] == ["PUBLIC-GAP how do I prune roses"]
    refused = json.loads(run("--json", "--kind", "refused", "--clearance", "internal").stdout)
    assert {g["kind"] for g in refused} == {"refused"}
    text = run("--clearance", "internal")
    assert text.exit_code == 0
    lines = text.stdout.splitlines()
    assert lines[0].startswith("alpha: 3 question(s) (20") and lines[4].startswith("beta: 2 question(s)")
    assert "voted" not in text.stdout and "down  " in lines[1] and "(searched: INTERNAL-GAP bins)" in lines[1]
    assert "— bin 3 is gone" in lines[1]
    denied = run("beta")
    assert denied.exit_code == 1 and "Error: no wiki 'beta' that you may see" in denied.stderr


# the portal ---------------------------------------------------------------------------------------------

def _portal(home: Path, user: User, monkeypatch, **params: str):
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("WIKIRAG_HOME", str(home))
    st.cache_resource.clear()
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.session_state["user"] = user
    at.session_state["signed_in_at"] = time.time()
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page("pages/portal.py")
    at.run()
    assert not at.exception
    return at


def _shown(at) -> str:
    def walk(node) -> list[str]:
        children = getattr(node, "children", None) or {}
        children = children.values() if isinstance(children, dict) else children
        return [str(getattr(node, "proto", ""))] + [t for child in children for t in walk(child)]
    return "\n".join(walk(at._tree))


def test_the_portal_shows_a_wikis_gaps_to_cleared_users_only(home: Path, monkeypatch) -> None:
    _seed(home)
    public = _portal(home, User("demo-public", Level.PUBLIC), monkeypatch, wiki="alpha", gaps="1")
    texts = [t.value for t in public.text]
    assert "PUBLIC-GAP how do I prune roses" in texts
    assert not [t for t in texts if "INTERNAL-GAP" in t] and "INTERNAL-GAP" not in _shown(public)
    assert "Questions we could not answer (1)" in _shown(public)
    internal = _portal(home, User("demo-internal", Level.INTERNAL), monkeypatch, wiki="alpha")
    texts = [t.value for t in internal.text]
    assert texts.count("INTERNAL-GAP which bin for deploy notes") == 2  # unsupported, and voted down
    assert "Searched as: INTERNAL-GAP bins" in texts and "Comment: bin 3 is gone" in texts
    links = {link.proto.label: link.proto.query_string for link in internal.get("page_link")}
    assert links["[2] beta/beta-page.md:3 (unsupported)"] == "wiki=beta&path=beta-page.md&start=10&end=60", links
    assert any("Per week: 20" in c.value for c in internal.caption)
    # a wiki above the clearance: nothing of it, its gaps included
    refused = _portal(home, User("demo-public", Level.PUBLIC), monkeypatch, wiki="beta")
    assert [e.value for e in refused.error] == ["That wiki does not exist, or you may not see it."]
    assert "INTERNAL-GAP" not in _shown(refused)
    # the main page: the count per wiki the user may see
    overview = _portal(home, User("demo-internal", Level.INTERNAL), monkeypatch)
    labels = [link.proto.label for link in overview.get("page_link")]
    assert "alpha: 3" in labels and "beta: 2" in labels
    public_overview = _portal(home, User("demo-public", Level.PUBLIC), monkeypatch)
    labels = [link.proto.label for link in public_overview.get("page_link")]
    assert "alpha: 1" in labels and not [label for label in labels if label.startswith("beta")]
