"""Questions about the knowledge base itself: recognised, answered from the composition's and wikis' own
descriptions and index pages with exact offsets, listing only what the caller may see."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from wikirag import Workspace, about, catalog
from wikirag.about import extractive_answer, is_about, passages
from wikirag.access import Level
from wikirag.errors import NotFound
from wikirag.passage import Passage
from wikirag.prompt import check_citations, label

from .conftest import make_wiki

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = [("public-help", "public"), ("engineering", "internal"), ("systems", "internal"),
            ("security", "confidential")]
ABOUT_QUESTIONS = ["What is this about?", "What can I ask?", "Which wikis are here?", "Help"]


@pytest.mark.parametrize("question", [
    "What is this about?", "What is this knowledge base about?", "What can I ask?", "What can I ask you?",
    "Which wikis are here?", "What wikis do you have?", "What topics do you cover?", "What do you know about?",
    "Help", "What is in here?", "hi, what's this all about?", "What questions can I ask?", "Tell me about this wiki",
    "Which topics are covered?", "What can you help me with?",
    "what's this all about", "What can I ask about?", "Which wikis can I search?", "What wikis are there?",
    "What topics are covered?", "What is this wiki about?", "What does this cover?", "what’s in here",
    "Tell me about this knowledge base", "List the wikis", "  WHAT CAN I ASK  ?", "help!",
])
def test_questions_about_the_knowledge_base_are_recognised(question: str) -> None:
    assert is_about(question)


@pytest.mark.parametrize("question", [
    "How do I build a wiki?", "What is the wikirag guide's advice about stale indexes?", "What about Fridays?",
    "How do I write a .wiki.yaml?", "What is a composition?", "How hot should the water be?",
    "What is this error about a stale index?", "Which wiki holds the on-call rota?", "Can I ask for a refund?",
    "Help me descale the kettle", "What is in a V60 recipe?", "What does this command do: wikirag build --all?",
    "Who approves a production deploy?", "What do I do when an API key leaks?", "How do I page the security team?",
    "What is this error about?", "What can I ask for in a code review?", "What do you know about espresso?",
    "What are wikis and compositions?", "Tell me about espresso", "Help with grind size",
    "What is it about compost that attracts flies?", "Which topics does the troubleshooting page cover?",
    "What wikis does a composition list?", "What can I search for with wikirag query?", "", "?",
    "What is the index about?",
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


def _file_of(ws: Workspace, p: Passage) -> str:
    if not p.wiki:
        return (ws.home / p.path).read_text(encoding="utf-8")
    wiki = ws.wiki(p.wiki)
    folder = wiki.folder if p.path == ".wiki.yaml" else Path(wiki.source_root)
    return (folder / p.path).read_text(encoding="utf-8")


@pytest.mark.parametrize("name,level", EXAMPLES)
def test_every_passage_is_exactly_its_files_text(examples: Workspace, name: str, level: str) -> None:
    found = about.passages(examples, examples.composition(name, level), level)
    assert [p.rank for p in found] == list(range(1, len(found) + 1))
    for p in found:
        text = _file_of(examples, p)
        assert p.text and text[p.start:p.end] == p.text, p
        assert p.line == text.count("\n", 0, p.start) + 1 and p.score == 0 and p.state == "current"
        if p.path == about.INDEX_PAGE:  # cut at a line end, within the limit
            assert len(p.text) <= about.INDEX_CHARS and (p.end == len(text.rstrip()) or text[p.end] == "\n")


def test_public_help_lists_its_description_and_both_public_wikis(examples: Workspace) -> None:
    found = about.passages(examples, examples.composition("public-help", "public"), "public")
    assert [(p.wiki, p.path) for p in found] == [
        ("", "rags/public-help.yaml"), ("brewing", ".wiki.yaml"), ("brewing", "index.md"),
        ("wikirag-guide", ".wiki.yaml"), ("wikirag-guide", "index.md")]
    assert found[0].text == "Public help — the coffee brewing wiki and the wikirag user guide."
    assert found[1].text.startswith("title: Coffee brewing\ndescription: Practical recipes")
    assert found[1].heading == "Coffee brewing" and found[2].heading == "Coffee brewing wiki"
    assert label(found[0]) == "rags/public-help.yaml:3 (public-help)"
    assert label(found[1]) == "brewing/.wiki.yaml:2 (Coffee brewing)"


def test_a_wiki_above_the_clearance_is_never_listed_in_a_composition_of_mixed_levels(ws: Workspace) -> None:
    team = ws.composition("team", "internal")  # internal: alpha (public) and beta (internal)
    assert {p.wiki for p in about.passages(ws, team, "internal")} == {"", "alpha", "beta"}
    low = about.passages(ws, team, "public")  # the composition is above it: no description either
    assert {p.wiki for p in low} == {"alpha"}
    assert not any("BETA" in p.text or "Beta" in p.heading for p in low)
    top = about.passages(ws, ws.composition("top", "restricted"), "internal")
    assert {p.wiki for p in top} == {"alpha", "beta"}
    answer = about.extractive_answer("Which wikis are here?", team, low)
    assert "Beta" not in answer and "one wiki" in answer


def test_a_raised_level_hides_the_wiki_at_once(ws: Workspace, home: Path) -> None:
    team = ws.composition("team", "internal")
    manifest = home / "wikis" / "alpha" / ".wiki.yaml"
    manifest.write_text(manifest.read_text().replace("sensitivity: public", "sensitivity: internal"))
    assert about.passages(ws, team, "public") == []
    assert about.extractive_answer("What is this about?", team, []) == about.NO_ANSWER


def test_an_adhoc_composition_has_no_description(ws: Workspace) -> None:
    found = about.passages(ws, ws.adhoc(["alpha"], "public"), "public")
    assert [(p.wiki, p.path) for p in found] == [("alpha", ".wiki.yaml"), ("alpha", "index.md")]


@pytest.mark.parametrize("name,level", EXAMPLES)
@pytest.mark.parametrize("question", ABOUT_QUESTIONS)
def test_the_offline_answer_cites_only_what_holds_it(examples: Workspace, name: str, level: str, question: str) -> None:
    comp = examples.composition(name, level)
    found = about.passages(examples, comp, level)
    text = about.extractive_answer(question, comp, found)
    check = check_citations(text, found)
    assert check.invalid == [] and check.unsupported == [], text
    assert {c.n for c in check.citations} == set(range(1, len(found) + 1))  # every passage is used
    first = "You can ask about" if question in ("What can I ask?", "Help") else f"This is **{name}**"
    assert text.startswith(first), text


def test_the_public_help_answer_reads_well(examples: Workspace) -> None:
    comp = examples.composition("public-help", "public")
    text = about.extractive_answer("What is this about?", comp, about.passages(examples, comp, "public"))
    assert text.splitlines()[0] == ("This is **public-help**: Public help — the coffee brewing wiki and the "
                                    "wikirag user guide. [1]")
    assert "It has 2 wikis:\n- **Coffee brewing**: Practical recipes" in text
    assert "Coffee brewing wiki: Grind, temperature and ratios; Pour-over with a V60; Water and cleaning; French " \
           "press;" in text  # its sections in turn
    assert "the template" not in text  # a meta page is no topic


def test_odd_manifests_and_index_pages(home: Path) -> None:
    make_wiki(home, "odd", {"page.md": "# Page\n\nSome words on a page.\n",
                            "index.md": "---\ntags: [x]\n---\n# Odd\n\n- Plain item one\n- Plain item two [3]\n"},
              extra="source: .\ndescription: >\n  Folded over\n  two lines [2].\n")
    make_wiki(home, "skipped", {"page.md": "# Page\n\nWords.\n", "index.md": "# Index\n\n- [Page](page.md)\n"},
              extra="exclude: ['index.md']\n")
    ws = Workspace(home, recheck_seconds=0)
    comp = ws.adhoc(["odd", "skipped"], "public")
    found = about.passages(ws, comp, "public")
    assert [(p.wiki, p.path) for p in found] == [("odd", ".wiki.yaml"), ("odd", "index.md"), ("skipped", ".wiki.yaml")]
    manifest, index = found[0], found[1]
    assert manifest.text.startswith("description:") and "source" not in manifest.text  # another key between
    assert index.text.startswith("# Odd") and index.line == 4  # after the frontmatter
    text = about.extractive_answer("What can I ask?", comp, found)
    check = check_citations(text, found)
    assert check.invalid == [] and check.unsupported == [] and "[2]" not in text.replace("[2]\n", ""), text
    assert "- **odd**: Folded over two lines (2). [1]" in text and "Plain item one; Plain item two (3)" in text


def test_the_portal_refuses_every_other_path(examples: Workspace) -> None:
    home = examples.home
    view = catalog.read_page(examples, "brewing", "index.md", "public")
    assert view.path == "index.md" and view.text == (home / "wikis" / "brewing" / "index.md").read_text()
    assert catalog.read_page(examples, "brewing", "methods/v60.md", "public").path == "methods/v60.md"  # as before
    for path in ["../x", "..%2Findex.md", "../brewing/index.md", "./index.md", ".wiki.yaml", "INDEX.md"]:
        with pytest.raises(NotFound):
            catalog.read_page(examples, "brewing", path, "public")
    assert catalog.read_page(examples, "engineering-handbook", "index.md", "internal").text.startswith("# Northwind")
    assert '"page_refused"' in (home / ".audit" / "audit.jsonl").read_text()


def test_an_index_page_that_is_a_symlink_out_is_refused(home: Path) -> None:
    folder = make_wiki(home, "linked", {"page.md": "# Page\n\nWords on a page here.\n"})
    os.symlink(home / "wikis" / "gamma" / "keys.md", folder / "index.md")
    ws = Workspace(home, recheck_seconds=0)
    with pytest.raises(NotFound):
        catalog.read_page(ws, "linked", "index.md", "public")
    assert [p.path for p in about.passages(ws, ws.adhoc(["linked"], "public"), "public")] == [".wiki.yaml"]
