"""The bad-input corpus (tests/fixtures/bad-input/, plus large inputs made here): each input gets a
specific error or is handled, and the table says which."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wikirag import CompositionError, ManifestError, Workspace, build, search, store
from wikirag.errors import QueryError
from wikirag.retrieval import check_question

from .conftest import build_probe, make_wiki

CORPUS = Path(__file__).parent / "fixtures" / "bad-input"


@pytest.mark.parametrize(("manifest", "expected"), [
    ("malformed-manifest.yaml", r"\.wiki\.yaml:3: invalid YAML: expected .,. or .\]., but got .:."),
    ("wrong-types-manifest.yaml", r"key 'title': Input should be a valid string"),
    ("unknown-key-manifest.yaml", r":4: unknown key 'sensitvity': remove it \(did you mean 'sensitivity'\?\)"),
])
def test_bad_manifests_get_specific_errors(home: Path, manifest: str, expected: str) -> None:
    folder = home / "wikis" / "broken"
    folder.mkdir()
    shutil.copy(CORPUS / manifest, folder / ".wiki.yaml")
    with pytest.raises(ManifestError, match=expected):
        Workspace(home).wiki("broken")


def test_a_composition_indented_with_tabs(home: Path) -> None:
    shutil.copy(CORPUS / "tabs-in-composition.yaml", home / "rags" / "tabs.yaml")
    with pytest.raises(CompositionError, match=r"tabs\.yaml:3: invalid YAML"):
        Workspace(home).composition("tabs")


def test_two_folders_claiming_one_wiki_name(home: Path) -> None:
    make_wiki(home, "copy", {"a.md": "# A\n\nA page in a folder that claims to be alpha.\n"})
    manifest = home / "wikis" / "copy" / ".wiki.yaml"
    manifest.write_text(manifest.read_text().replace("name: copy", "name: alpha"))
    with pytest.raises(ManifestError, match="name 'alpha' differs from its folder 'copy'"):
        Workspace(home).wiki("copy")


# what a build makes of each corpus page: indexed (with exact offsets) or skipped with this reason
PAGES = {
    "crlf-bom.md": None,
    "emoji-cjk.md": None,
    "binary.md": "binary file",
    "latin1.md": "not UTF-8",
    "empty.md": "no passage",
    "only-frontmatter.md": "no passage",
}


def test_each_corpus_page_is_indexed_exactly_or_skipped_with_a_reason(home: Path) -> None:
    folder = make_wiki(home, "corpus", {})
    for name in PAGES:
        shutil.copy(CORPUS / name, folder / name)
    (folder / "loop").symlink_to(folder, target_is_directory=True)  # a cycle
    report = build(Workspace(home).wiki("corpus"))
    reasons = {s.path: s.reason for s in report.skipped}
    assert reasons.pop("loop").startswith("symlinked folder")
    for name, expected in PAGES.items():
        if expected is None:
            assert name not in reasons
        else:
            assert reasons[name].startswith(expected), (name, reasons.get(name))
    loaded = store.load(Workspace(home).wiki("corpus"))
    assert {c.path for c in loaded.chunks} == {"crlf-bom.md", "emoji-cjk.md"}
    for c in loaded.chunks:
        assert (folder / c.path).read_bytes().decode("utf-8")[c.start:c.end] == c.text


def test_very_long_lines_are_cut_into_bounded_passages(home: Path) -> None:
    line = " ".join(f"token{i}" for i in range(300_000))  # one 2.3 MB line
    folder = make_wiki(home, "long", {"line.md": f"# One line\n\n{line}\n"})
    build(Workspace(home).wiki("long"))
    chunks = store.load(Workspace(home).wiki("long")).chunks
    text = (folder / "line.md").read_text(encoding="utf-8")
    assert len(chunks) > 100 and all(len(c.text) < 5000 for c in chunks)
    assert all(text[c.start:c.end] == c.text for c in chunks)







def test_a_50_mb_page_is_skipped_with_bounded_memory_and_a_5_mb_one_is_indexed(home: Path) -> None:
    paragraph = "Compost heaps need air, water and a balance of green and brown material. " * 20 + "\n\n"
    make_wiki(home, "huge", {"small.md": "# Small\n\nA normal page next to a huge one, about compost.\n"})
    with (home / "wikis" / "huge" / "huge.md").open("w") as fh:
        fh.write("# Huge\n\n")
        while fh.tell() < 50 * 2**20:
            fh.write(paragraph)
    skipped = build_probe(home, "huge")
    assert skipped["skipped"] == [["huge.md", "too large (50.0 MB > 10 MB): split it, or raise chunking.max_file_mb"]]
    assert skipped["peak_mb"] < 400, skipped
    make_wiki(home, "big", {})
    with (home / "wikis" / "big" / "big.md").open("w") as fh:
        for i in range(5 * 2**20 // len(paragraph)):
            fh.write(f"## Section {i}\n\n" if i % 50 == 0 else paragraph)
    indexed = build_probe(home, "big")
    assert indexed["files"] == 1 and indexed["chunks"] > 1000
    assert indexed["peak_mb"] < 1500, indexed
    print(f"\n50 MB page: skipped, peak {skipped['peak_mb']:.0f} MB; 5 MB page: {indexed['chunks']} chunks "
          f"in {indexed['seconds']:.1f} s, peak {indexed['peak_mb']:.0f} MB")


def test_a_composition_of_200_wikis(home: Path) -> None:
    names = [f"w{i:03d}" for i in range(200)]
    ws = Workspace(home, recheck_seconds=0)
    for i, name in enumerate(names):
        make_wiki(home, name, {"page.md": f"# Page {i}\n\nNotes number {i} about compost, keys and deploys.\n"})
        build(ws.wiki(name))
    (home / "rags" / "many.yaml").write_text("sensitivity: public\nwikis: [" + ", ".join(names) + "]\nk: 10\n")
    result = search(ws, "many", "notes number 150 compost", clearance="public")
    assert result.passages[0].wiki == "w150" and len(result.passages) == 10
    assert result.wikis == names and not result.warnings  # every wiki searched (its speed: bench/many_wikis.py)


# questions that cannot be made into text: one check (retrieval.check_question) at the start of retrieve() --
# (control characters that can be cleaned away are: tests/test_clean_text.py)

BAD_QUESTIONS = [
    pytest.param("\udcff water", r"the question is not valid text: character 1 is U\+DCFF, a lone surrogate "
                 r"\(the byte 0xff, which is not UTF-8: is your terminal set to UTF-8\?\); retype it",
                 id="surrogateescape-byte"),
    pytest.param("\ud800 water", r"the question is not valid text: character 1 is U\+D800, a lone surrogate; retype it",
                 id="lone-surrogate"),
    pytest.param("water \udfff", r"character 7 is U\+DFFF, a lone surrogate; retype it", id="low-surrogate-at-end"),
    pytest.param("\x00", r"the question is empty after removing control characters: character 1 is U\+0000, and "
                 r"no letter or digit is left; type the question, or paste it as plain text", id="nul-only"),
    pytest.param(" \x1b[31m\x7f ", r"empty after removing control characters: character 2 is U\+001B",
                 id="escape-only"),
    pytest.param("\u200b\ufeff\u00ad", r"empty after removing control characters: character 1 is U\+200B",
                 id="invisible-only"),
    pytest.param("\t\x97 \x85", r"empty after removing control characters: character 2 is U\+0097", id="c1-only"),
    pytest.param(b"water", r"the question is not valid text: it is bytes, not str; decode it to str first",
                 id="bytes"),
    pytest.param(None, r"the question is not valid text: it is NoneType, not str; pass the question as a str",
                 id="none"),
    pytest.param("water " * 2000, r"the question is too long: 12,000 characters, at most 10,000; shorten it",
                 id="too-long"),
]


@pytest.mark.parametrize(("question", "expected"), BAD_QUESTIONS)
def test_a_bad_question_gets_a_query_error_from_search_and_answer(ws: Workspace, question, expected: str) -> None:
    from wikirag import answer

    with pytest.raises(QueryError, match=expected):
        search(ws, "open", question, clearance="public")
    with pytest.raises(QueryError, match=expected):
        answer(ws, "open", question, clearance="public", model="extractive")
    with pytest.raises(QueryError, match=expected):
        check_question(question)


def test_text_that_is_fine_is_searched(built: Workspace) -> None:
    for question in ["how often to water tomatoes?", "🍅 tomatoes 水", ("tomatoes " + "water " * 1666)[:10_000]]:
        assert check_question(question) == question
        result = search(built, "open", question, clearance="public")
        assert result.passages and result.passages[0].wiki == "alpha", question


@pytest.mark.parametrize("question", ["\udcff water", chr(0xD800) + " water", "\x00\x1b", "x" * 10_001])
def test_the_cli_says_what_is_wrong_with_the_question(home: Path, question: str) -> None:
    from click.testing import CliRunner

    from wikirag.cli import cli

    result = CliRunner().invoke(cli, ["--home", str(home), "query", "open", question])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("Error: the question is ")
    assert "internal error" not in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no uncaught error


def test_a_raw_invalid_byte_on_the_command_line(home: Path) -> None:
    build(Workspace(home).wiki("alpha"))
    args = [sys.executable, "-m", "wikirag", "--home", str(home), "query", "open"]
    env = {**os.environ, "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}
    env.pop("WIKIRAG_DEBUG", None)
    bad = subprocess.run([*map(os.fsencode, args), b"\xff water"], capture_output=True, timeout=120, env=env,
                         check=False)
    assert bad.returncode == 1, bad.stderr
    assert bad.stderr.decode("utf-8") == ("Error: the question is not valid text: character 1 is U+DCFF, a lone "
                                          "surrogate (the byte 0xff, which is not UTF-8: is your terminal set to "
                                          "UTF-8?); retype it\n")
    assert bad.stdout == b""
    good = subprocess.run([*map(os.fsencode, args), b"water tomatoes"], capture_output=True, timeout=120,
                          env=env, check=False)
    assert good.returncode == 0 and b"alpha/tomatoes.md" in good.stdout, good.stderr


def test_the_app_shows_the_error_for_a_question_of_control_characters(home: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from wikirag.access import Level
    from wikirag.users import User

    monkeypatch.setenv("WIKIRAG_HOME", str(home))
    monkeypatch.setenv("WIKIRAG_DEMO", "1")
    st.cache_resource.clear()
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=120)
    at.session_state["user"] = User("demo-public", Level.PUBLIC)
    at.session_state["signed_in_at"] = time.time()
    at.switch_page("pages/chat.py")
    at.run()
    at.chat_input[0].set_value("\x00\u200b\x97").run()
    assert not at.exception
    assert [e.value for e in at.error] == [("the question is empty after removing control characters: character 1 "
                                            "is U+0000, and no letter or digit is left; type the question, or paste "
                                            "it as plain text")]
