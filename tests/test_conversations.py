"""Kept conversations (wikirag.conversations): real files in a copy of the fixture workspace, real
AnswerResults built from Passages, a second process writing at once, and the clearance checked on load."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wikirag import conversations as conv_mod
from wikirag.access import Level
from wikirag.answers import AnswerResult
from wikirag.conversations import MAX_CONVERSATIONS, MAX_TURNS, ConversationStore
from wikirag.errors import NotFound, WikiragError
from wikirag.passage import Passage
from wikirag.prompt import check_citations

REPO = Path(__file__).resolve().parent.parent


def passage(wiki: str, text: str, path: str = "page.md", rank: int = 1, start: int = 10) -> Passage:
    return Passage(rank, wiki, path, start, start + len(text), 3, "Watering", 1.5, text)


def result(question: str, composition: str, passages: list[Passage], text: str | None = None,
           searched: str = "", wikis: list[str] | None = None) -> AnswerResult:
    """An answer as answers.answer makes it: citations verified against the passages."""
    r = AnswerResult(question, composition, "extractive", passages=passages, searched=searched or question,
                     wikis=wikis if wikis is not None else sorted({p.wiki for p in passages}))
    r.text = text if text is not None else " ".join(f"{p.text} [{i}]" for i, p in enumerate(passages, 1))
    check = check_citations(r.text, r.passages)
    r.citations, r.uncited = check.citations, check.uncited
    return r


def public_turn(question: str = "How often should I water tomatoes?") -> AnswerResult:
    return result(question, "open", [passage("alpha", "Water deeply twice a week.", "tomatoes.md")])


def internal_turn(question: str = "When do deploys happen?") -> AnswerResult:
    return result(question, "team", [passage("beta", "Deploys happen on weekdays before 15:00.", "deploys.md")])


@pytest.fixture
def store(home: Path) -> ConversationStore:
    return ConversationStore(home)


def test_a_turn_round_trips_with_its_citations_and_feedback(ws, store: ConversationStore) -> None:
    first = result("How often to water?", "team",
                   [passage("alpha", "Water deeply twice a week.", "tomatoes.md"),
                    passage("beta", "Deploys happen on weekdays.", "deploys.md", rank=2, start=99)],
                   text="Twice a week [1].", searched="How often to water tomatoes?", wikis=["alpha", "beta"])
    first.rewrite = "offline"
    cid = store.new("ana", "team")
    tid = store.add_turn("ana", cid, first, Level.INTERNAL)
    store.set_feedback("ana", cid, tid, "down", "  too short  ")
    kept = store.load(ws, "ana", "internal", cid)
    assert (kept.id, kept.composition, kept.hidden, kept.note) == (cid, "team", 0, None)
    [turn] = kept.turns
    assert (turn.id, turn.level, turn.feedback, turn.comment, turn.hidden) == (tid, Level.INTERNAL, "down",
                                                                               "too short", False)
    assert turn.result.to_dict() == first.to_dict()
    assert [c.passage.wiki for c in turn.result.citations] == ["alpha"]
    assert kept.history()[0].searched == "How often to water tomatoes?"
    store.set_feedback("ana", cid, tid, None)
    assert store.load(ws, "ana", "internal", cid).turns[0].feedback is None
    with pytest.raises(WikiragError, match="a vote is"):
        store.set_feedback("ana", cid, tid, "sideways")
    with pytest.raises(NotFound):
        store.set_feedback("ana", cid, "nosuch", "up")
    with pytest.raises(NotFound):
        store.load(ws, "ana", "internal", "0123456789abcdef")
    with pytest.raises(NotFound):  # another user's conversations are not this one's
        store.load(ws, "bo", "internal", cid)


def test_the_title_is_the_first_question_until_renamed(ws, store: ConversationStore) -> None:
    cid = store.new("ana", "open")
    assert store.conversations("ana")[0].title == "New conversation"
    store.add_turn("ana", cid, public_turn("  How   often\nshould I water " + "tomatoes " * 10 + "?"), "public")
    store.add_turn("ana", cid, public_turn("And in summer?"), "public")
    title = store.conversations("ana")[0].title
    assert title.startswith("How often should I water tomatoes tomatoes") and title.endswith("…")
    assert len(title) == 60 and "\n" not in title
    store.rename("ana", cid, "  Watering\n plans  ")
    assert store.load(ws, "ana", "public", cid).title == "Watering plans"
    store.add_turn("ana", cid, public_turn("Another?"), "public")
    assert store.conversations("ana")[0].title == "Watering plans"
    store.rename("ana", cid, "x" * 200)
    assert store.conversations("ana")[0].title == "x" * 80
    for bad in ("", "   \n "):
        with pytest.raises(WikiragError, match="cannot be empty"):
            store.rename("ana", cid, bad)
    assert ConversationStore(ws.home).conversations("ana")[0].title == "x" * 80
    named = store.new("ana", "open", title="Named at the start")
    store.add_turn("ana", named, public_turn(), "public")
    assert store.conversations("ana")[0].title == "Named at the start"


def test_rename_delete_and_current(ws, store: ConversationStore) -> None:
    assert store.current("ana") is None and store.conversations("ana") == []
    a = store.new("ana", "open")
    b = store.new("ana", "team")
    assert store.current("ana") == b
    assert [s.id for s in store.conversations("ana")] == [b, a]
    store.add_turn("ana", a, public_turn(), "public")  # answering in it makes it newest and current
    assert store.current("ana") == a and [s.id for s in store.conversations("ana")] == [a, b]
    summary = store.conversations("ana")[0]
    assert (summary.composition, summary.turns) == ("open", 1) and summary.updated >= summary.created
    store.set_current("ana", b)
    assert ConversationStore(ws.home).current("ana") == b  # a reload (a new store, a new process) resumes it
    with pytest.raises(NotFound):
        store.set_current("ana", "nosuch")
    with pytest.raises(NotFound):
        store.rename("ana", "nosuch", "x")
    with pytest.raises(NotFound):
        store.add_turn("ana", "nosuch", public_turn(), "public")
    assert store.delete("ana", b) is True and store.delete("ana", b) is False
    assert store.current("ana") is None and [s.id for s in store.conversations("ana")] == [a]
    with pytest.raises(NotFound):
        store.load(ws, "ana", "public", b)


def test_files_are_private_and_named_by_a_hash(home: Path, store: ConversationStore) -> None:
    store.new("ana@example.com", "open")
    folder = home / ".sessions" / "conversations"
    name = hashlib.sha256(b"ana@example.com").hexdigest()[:32] + ".json"
    assert [p.name for p in folder.iterdir() if p.suffix == ".json"] == [name]
    assert (folder / name).stat().st_mode & 0o777 == 0o600
    assert folder.stat().st_mode & 0o777 == 0o700 and folder.parent.stat().st_mode & 0o777 == 0o700
    assert "ana@example.com" not in name


def test_bounds_drop_the_oldest(ws, store: ConversationStore, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [store.new("ana", "open") for _ in range(MAX_CONVERSATIONS + 1)]
    kept = [s.id for s in store.conversations("ana")]
    assert len(kept) == MAX_CONVERSATIONS and ids[0] not in kept and ids[1] in kept and kept[0] == ids[-1]
    cid = ids[-1]
    for i in range(MAX_TURNS + 1):
        store.add_turn("ana", cid, public_turn(f"Question {i}?"), "public")
    turns = store.load(ws, "ana", "public", cid).turns
    assert len(turns) == MAX_TURNS and turns[0].result.question == "Question 1?"
    assert store.conversations("ana")[0].title == "Question 0?"  # the first question, though its turn went
    # the file's size: whole older conversations go first, then the oldest turns of the one changed
    monkeypatch.setattr(conv_mod, "MAX_BYTES", 60_000)
    monkeypatch.setattr(conv_mod, "MAX_TURN_BYTES", 20_000)
    big = [passage("alpha", "Water deeply. " * 2000, rank=i) for i in range(1, 4)]  # 84 KB of text
    fresh = store.new("ana", "open")
    store.add_turn("ana", fresh, result("Big?", "open", big, text="Water [1]."), "public")
    path = next((ws.home / ".sessions" / "conversations").glob("*.json"))
    assert path.stat().st_size < 60_000
    assert [s.id for s in store.conversations("ana")][0] == fresh
    only = store.load(ws, "ana", "public", fresh).turns[0].result
    assert only.citations[0].passage.text.endswith(" …") and len(only.passages) == 3
    for i in range(10):
        store.add_turn("ana", fresh, result(f"Big {i}?", "open", big, text="Water [1]."), "public")
    assert path.stat().st_size < 60_000 and [s.id for s in store.conversations("ana")] == [fresh]
    turns = store.load(ws, "ana", "public", fresh).turns
    assert 1 <= len(turns) < 11 and turns[-1].result.question == "Big 9?"


WRITER = textwrap.dedent("""
    import sys, time
    from wikirag.answers import AnswerResult
    from wikirag.conversations import ConversationStore
    from wikirag.passage import Passage
    home, cid, tag, start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    store = ConversationStore(home)
    time.sleep(max(0.0, start - time.time()))  # both processes begin at the same moment
    for i in range(50):
        p = Passage(1, "alpha", "tomatoes.md", 0, 5, 1, "", 1.0, f"{tag} passage {i}")
        store.add_turn("ana", cid, AnswerResult(f"{tag} {i}?", "open", "extractive", text="x", passages=[p]),
                       "public")
""")


def test_two_processes_adding_turns_at_once_lose_nothing(ws, store: ConversationStore) -> None:
    cid = store.new("ana", "open")
    start = time.time() + 3
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(ws.home), cid, tag, str(start)], cwd=REPO)
             for tag in ("p", "q")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    turns = store.load(ws, "ana", "public", cid).turns
    questions = [t.result.question for t in turns]
    assert len(turns) == 100 and len({t.id for t in turns}) == 100
    assert sorted(questions) == sorted([f"p {i}?" for i in range(50)] + [f"q {i}?" for i in range(50)])
    # each process's turns are in its own order
    assert [q for q in questions if q.startswith("p")] == [f"p {i}?" for i in range(50)]


def test_a_lowered_clearance_hides_a_turn_checked_on_every_load(ws, store: ConversationStore) -> None:
    cid = store.new("ana", "team")
    store.add_turn("ana", cid, internal_turn("When do deploys happen?"), "internal")
    store.add_turn("ana", cid, public_turn("How often should I water?"), "public")
    seen = store.load(ws, "ana", "internal", cid)
    assert seen.hidden == 0 and seen.note is None and [t.hidden for t in seen.turns] == [False, False]
    lowered = store.load(ws, "ana", "public", cid)
    first, second = lowered.turns
    assert first.hidden and first.result is None and first.level is None and second.result is not None
    assert lowered.hidden == 1 and lowered.note == (
        "1 earlier turn is hidden: it used a composition or wiki you may no longer use.")
    assert [e.question for e in lowered.history()] == ["How often should I water?"]
    # neither the title (from the hidden first question) nor the composition it may not use is shown
    assert lowered.title == "How often should I water?" and lowered.composition is None
    [summary] = store.conversations("ana", ws, "public")
    assert (summary.title, summary.composition, summary.turns) == ("How often should I water?", None, 1)
    assert "deploys" not in repr(lowered) and "Deploys" not in repr(lowered)
    raised = store.load(ws, "ana", "internal", cid)  # raised again: shown again
    assert raised.hidden == 0 and raised.turns[0].result.question == "When do deploys happen?"
    assert store.conversations("ana", ws, "internal")[0].title == "When do deploys happen?"
    # a follow-up asked in a public composition is given only the turns asked at or below public
    assert [e.question for e in raised.history(at_most="public")] == ["How often should I water?"]
    assert len(raised.history(at_most="internal")) == 2


def test_a_removed_composition_hides_its_turns(ws, home: Path, store: ConversationStore) -> None:
    cid = store.new("ana", "team")
    store.add_turn("ana", cid, internal_turn(), "internal")
    store.add_turn("ana", cid, internal_turn("And rollbacks?"), "internal")
    (home / "rags" / "team.yaml").unlink()
    kept = store.load(ws, "ana", "restricted", cid)
    assert kept.hidden == 2 and kept.history() == [] and all(t.result is None for t in kept.turns)
    assert kept.note == "2 earlier turns are hidden: they used a composition or wiki you may no longer use."
    assert kept.title == "Untitled conversation" and kept.composition is None
    # an ad-hoc composition has no file: its turns are checked by their wikis alone
    adhoc = store.new("ana", "ad-hoc")
    store.add_turn("ana", adhoc, result("Deploys?", "ad-hoc", [passage("beta", "Weekdays.")]), "internal")
    assert store.load(ws, "ana", "internal", adhoc).hidden == 0
    assert store.load(ws, "ana", "public", adhoc).hidden == 1


def test_a_wiki_raised_in_its_manifest_hides_turns_citing_it(ws, home: Path, store: ConversationStore) -> None:
    cid = store.new("ana", "ad-hoc")
    store.add_turn("ana", cid, result("Water?", "ad-hoc", [passage("alpha", "Twice a week.")]), "public")
    store.add_turn("ana", cid, result("Searched only?", "ad-hoc", [], text="No passage.", wikis=["alpha"]), "public")
    assert store.load(ws, "ana", "public", cid).hidden == 0
    manifest = home / "wikis" / "alpha" / ".wiki.yaml"
    manifest.write_text(manifest.read_text().replace("sensitivity: public", "sensitivity: confidential"))
    assert store.load(ws, "ana", "public", cid).hidden == 2
    assert store.load(ws, "ana", "confidential", cid).hidden == 0
    # a wiki that no longer exists counts as restricted (fail closed)
    gone = store.new("ana", "ad-hoc")
    store.add_turn("ana", gone, result("Old?", "ad-hoc", [passage("vanished", "Old notes.")]), "public")
    assert store.load(ws, "ana", "confidential", gone).hidden == 1
    assert store.load(ws, "ana", "restricted", gone).hidden == 0
    # a stored level above the clearance hides a turn, whatever its wikis are
    high = store.new("ana", "ad-hoc")
    store.add_turn("ana", high, result("Water?", "ad-hoc", [passage("beta", "Weekdays.")]), "confidential")
    assert store.load(ws, "ana", "internal", high).hidden == 1


def test_export_has_the_citations_and_never_hidden_text(ws, store: ConversationStore) -> None:
    cid = store.new("ana", "team")
    store.add_turn("ana", cid, result("When do deploys happen?", "team",
                                      [passage("beta", "Deploys SECRET-WORD on weekdays.", "deploys.md")]), "internal")
    text = "Water deeply [1], morning is best [2]."
    two = [passage("alpha", "Water deeply\ntwice a week.", "tomatoes.md"),
           passage("alpha", "Water in the morning.", "tomatoes.md", rank=2, start=200)]
    store.add_turn("ana", cid, result("And how often?", "open", two, text=text,  # asked of a public one
                                      searched="How often should I water tomatoes?"), "public")
    full = store.export_markdown(ws, "ana", "internal", cid)
    assert full.startswith("# When do deploys happen?\n") and "## When do deploys happen?" in full
    assert "SECRET-WORD" in full and "hidden" not in full
    md = store.export_markdown(ws, "ana", "public", cid)
    assert "SECRET-WORD" not in md and "deploys" not in md.lower()
    assert md.startswith("# And how often?\n")
    assert "1 earlier turn is hidden" in md and "*(1 turn hidden here.)*" in md
    assert "## And how often?" in md and "Searched: How often should I water tomatoes?" in md
    assert text in md and "Sources:" in md
    assert "[1] alpha/tomatoes.md:3 (Watering), characters 10–36" in md
    assert "> Water deeply\n> twice a week." in md
    assert "[2] alpha/tomatoes.md:3 (Watering), characters 200–221\n\n> Water in the morning." in md


def test_a_damaged_file_is_not_fatal(ws, home: Path, store: ConversationStore) -> None:
    cid = store.new("ana", "open")
    path = next((home / ".sessions" / "conversations").glob("*.json"))
    for damage in ("{not json", json.dumps([1, 2]), json.dumps({"conversations": {"x": 3}, "current": "x"}),
                   "\xff\xfe"):
        path.write_text(damage, encoding="latin-1")
        assert store.conversations("ana") == [] and store.current("ana") is None
    with pytest.raises(NotFound):
        store.load(ws, "ana", "public", cid)
    fresh = store.new("ana", "open")  # the next write replaces it
    assert [s.id for s in store.conversations("ana")] == [fresh]
    # a damaged turn is left out, the others are shown
    store.add_turn("ana", fresh, public_turn(), "public")
    data = json.loads(path.read_text())
    data["conversations"][fresh]["turns"].insert(0, {"level": "public", "composition": "open",
                                                     "passages": [{"wiki": "alpha", "bogus": 1}]})
    path.write_text(json.dumps(data))
    kept = store.load(ws, "ana", "public", fresh)
    assert len(kept.turns) == 1 and kept.turns[0].result is not None


def test_a_read_only_workspace_still_answers(tmp_path: Path, caplog) -> None:
    home = tmp_path / "ro"
    home.mkdir()
    (home / ".sessions").write_text("a file where the folder would be")  # cannot be written
    store = ConversationStore(home)
    caplog.set_level(logging.WARNING, "wikirag.webapp")
    cid = store.new("ana", "open")
    assert store.add_turn("ana", cid, public_turn(), "public")  # no error: the chat still answers
    assert "conversations cannot be kept" in caplog.text
    assert store.conversations("ana") == [] and store.current("ana") is None
