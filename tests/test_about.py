"""Questions about the knowledge base itself: recognised, answered from the composition's and wikis' own
descriptions and index pages with exact offsets, listing only what the caller may see."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wikirag import Workspace, catalog
from wikirag.about import extractive_answer, is_about, passages
from wikirag.access import Level
from wikirag.errors import NotFound
from wikirag.prompt import check_citations, label

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("question", [
    "What is this about?", "What is this knowledge base about?", "What can I ask?", "What can I ask you?",
    "Which wikis are here?", "What wikis do you have?", "What topics do you cover?", "What do you know about?",
    "Help", "What is in here?", "hi, what's this all about?", "What questions can I ask?", "Tell me about this wiki",
    "Which topics are covered?", "What can you help me with?",
])
def test_questions_about_the_knowledge_base_are_recognised(question: str) -> None:
    assert is_about(question)


@pytest.mark.parametrize("question", [
    "How do I build a wiki?", "What is the wikirag guide's advice about stale indexes?", "What about Fridays?",
    "How do I write a .wiki.yaml?", "What is a composition?", "How hot should the water be?",
    "What is this error about a stale index?", "Which wiki holds the on-call rota?", "Can I ask for a refund?",
    "Help me descale the kettle", "What is in a V60 recipe?", "What does this command do: wikirag build --all?",
    "Who approves a production deploy?", "What do I do when an API key leaks?", "How do I page the security team?",
])
def test_other_questions_are_not(question: str) -> None:
    assert not is_about(question)


@pytest.fixture
def examples(tmp_path: Path) -> Workspace:
    home = tmp_path / "ws"
    for part in ("wikis", "rags"):
        shutil.copytree(REPO / part, home / part, ignore=shutil.ignore_patterns(".index"))
    return Workspace(home, recheck_seconds=0)


def test_the_passages_quote_their_files_exactly_and_the_answer_cites_them(examples: Workspace) -> None:
    comp = examples.composition("public-help", "public")
    found = passages(examples, comp, "public")
    assert [(p.wiki, p.path) for p in found] == [("", "rags/public-help.yaml"), ("brewing", ".wiki.yaml"),
                                                 ("brewing", "index.md"), ("wikirag-guide", ".wiki.yaml"),
                                                 ("wikirag-guide", "index.md")]
    for p in found:
        source = examples.home / p.path if not p.wiki else examples.wiki_folder(p.wiki) / p.path
        text = source.read_text(encoding="utf-8")
        assert text[p.start:p.end] == p.text and text.count("\n", 0, p.start) + 1 == p.line
    assert label(found[0]).startswith("rags/public-help.yaml:")
    text = extractive_answer("What is this knowledge base about?", comp, found)
    check = check_citations(text, found)
    assert not check.invalid and not check.unsupported and {c.n for c in check.citations} == {1, 2, 3, 4, 5}
    assert "Coffee brewing" in text and "French press" in text
    assert extractive_answer("What can I ask?", comp, found).startswith("You can ask about")


def test_a_wiki_above_the_clearance_is_never_listed(examples: Workspace) -> None:
    comp = examples.composition("engineering", "internal")
    names = {p.wiki for p in passages(examples, comp, "internal")}
    assert names == {"", "engineering-handbook", "wikirag-guide"}
    shown = passages(examples, comp, Level.PUBLIC)  # the same composition asked for with a lower clearance
    assert {p.wiki for p in shown} == {"wikirag-guide"}
    assert not any("Northwind" in p.text for p in shown)


def test_the_portal_opens_a_wikis_index_page_and_nothing_else_new(examples: Workspace) -> None:
    assert catalog.read_page(examples, "brewing", "index.md", "public").text.startswith("# Coffee brewing wiki")
    for path in ("_template.md", "../engineering-handbook/index.md", "/etc/passwd"):
        with pytest.raises(NotFound):
            catalog.read_page(examples, "brewing", path, "public")
    with pytest.raises(NotFound):
        catalog.read_page(examples, "engineering-handbook", "index.md", "public")
