"""Chunking: exact offsets for every passage, headings, frontmatter, tiny fragments, tags."""

from __future__ import annotations

from pathlib import Path

import pytest
import semchunk

from wikirag.chunking import chunk_markdown, count_tokens, encoding
from wikirag.page import parse_page, tag_matches

LONG = " ".join(f"Sentence number {i} talks about brewing coffee at ninety-three degrees." for i in range(400))

TEXTS = {
    "plain": "# Title\n\nSome introductory text that is long enough to be kept.\n\n## Part\n\nMore text in the part, long enough too.\n",
    "crlf": "# Title\r\n\r\nSome introductory text that is long enough to be kept.\r\n\r\n## Part\r\n\r\nMore text in part two, long enough.\r\n",
    "lone-cr": "# Title\r\rSome introductory text that is long enough to be kept.\r\r## Part\r\rMore text in part two here, long enough.\r",
    "bom": "\ufeff# Title\n\nSome introductory text that is long enough to be kept.\n",
    "bom-frontmatter-crlf": "\ufeff---\r\ntitle: x\r\ntags: [a]\r\n---\r\n# Title\r\n\r\nBody text after the frontmatter, long enough to keep.\r\n",
    "emoji-cjk": "# 咖啡 ☕\n\n日本語のテキストと絵文字 🎉🎉 が混ざった段落です。十分な長さがあります。\n\n## Zweiter Teil — Größe\n\nÄrger mit Ümlauten und 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 outside the BMP, long enough.\n",
    "code-fence": "# Real\n\nText before the fence, long enough to be kept as a chunk.\n\n```\n# not a heading\n```\n\nMore text after the fence in the same section.\n",
    "setext": "Title\n=====\n\nIntro paragraph that is long enough to be kept here.\n\nPart\n----\n\nPart paragraph that is long enough to be kept too.\n",
    "no-headings": "Just a paragraph of plain text without any heading at all, long enough.\n",
    "long": "# Long\n\n" + LONG + "\n\n## After\n\nA short closing section that is long enough.\n",
    "only-frontmatter": "---\ntitle: empty\n---\n",
    "unclosed-frontmatter": "---\ntitle: x\n\n# Heading\n\nText of the page, long enough to be kept here.\n",
}


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_every_chunk_slices_the_file_text_exactly(name: str, tmp_path: Path) -> None:
    text = TEXTS[name]
    path = tmp_path / "page.md"
    path.write_bytes(text.encode("utf-8"))
    file_text = path.read_bytes().decode("utf-8")  # the definition of offsets: no newline translation
    chunks = chunk_markdown(file_text, "page.md", max_tokens=128)
    for c in chunks:
        assert file_text[c.start:c.end] == c.text
        assert c.text == c.text.strip()
        assert len(c.text) >= 40
        assert count_tokens(c.text) <= 128
        # the 1-based line of start, counting \r\n, \r and \n as line breaks
        before = file_text[:c.start].replace("\r\n", "\n").replace("\r", "\n")
        assert c.line == before.count("\n") + 1


def test_headings_become_paths_and_code_fences_are_not_headings() -> None:
    chunks = chunk_markdown(TEXTS["code-fence"], "p.md")
    assert [c.heading for c in chunks] == ["Real"]
    assert "# not a heading" in chunks[0].text
    deep = "# Guide\n\n## Install\n\n### Linux\n\nRun the installer with sudo and wait until it finishes.\n"
    assert [c.heading for c in chunk_markdown(deep, "p.md")] == ["Guide > Install > Linux"]
    assert [c.heading for c in chunk_markdown(TEXTS["setext"], "p.md")] == ["Title", "Title > Part"]


def test_a_heading_with_no_text_of_its_own_is_no_passage() -> None:
    text = ("# Cold brew\n\n## Recipe: a one-litre batch of concentrate\n\n### Ingredients and gear\n\n"
            "- 125 g coffee, coarse\n- 1 litre of cold water\n\n### Steps\n\nSteep for 16 hours, then filter.\n\n"
            "## Serving, chilled or hot, with milk or water\n\n## A last heading with nothing below it at all\n")
    chunks = chunk_markdown(text, "p.md", min_chars=10)
    assert [c.heading for c in chunks] == ["Cold brew > Recipe: a one-litre batch of concentrate > Ingredients and gear",
                                           "Cold brew > Recipe: a one-litre batch of concentrate > Steps"]
    assert chunks[0].start == 0 and chunks[0].text.startswith("# Cold brew\n\n## Recipe")  # opens the next one
    assert all(text[c.start:c.end] == c.text for c in chunks)
    assert not any(c.text.lstrip("#").strip().startswith(("Serving", "A last")) for c in chunks)
    # a heading whose text is only a blank line or two is bare too; one with a sentence is not
    assert len(chunk_markdown("# Guide\n\n\n## Part\n\nEnough words here to keep.\n", "p.md", min_chars=5)) == 1
    assert len(chunk_markdown("# Guide\n\nIntro.\n\n## Part\n\nEnough words here to keep.\n", "p.md", min_chars=5)) == 2


def test_frontmatter_is_not_indexed() -> None:
    text = TEXTS["bom-frontmatter-crlf"]
    chunks = chunk_markdown(text, "p.md")
    assert len(chunks) == 1 and "title: x" not in chunks[0].text
    assert chunks[0].start == text.index("# Title") and chunks[0].line == 5
    assert chunk_markdown(TEXTS["only-frontmatter"], "p.md") == []


def test_tiny_fragments_are_dropped() -> None:
    text = "# A\n\n## B\n\nshort\n\n## C\n\nThis section is comfortably longer than forty characters.\n"
    chunks = chunk_markdown(text, "p.md", min_chars=40)
    assert [c.heading for c in chunks] == ["A > C"]
    assert len(chunk_markdown(text, "p.md", min_chars=5)) == 2


def test_long_sections_are_split_by_tokens() -> None:
    chunks = chunk_markdown(TEXTS["long"], "p.md", max_tokens=100)
    long_chunks = [c for c in chunks if c.heading == "Long"]
    assert len(long_chunks) > 10
    assert all(count_tokens(c.text) <= 100 for c in long_chunks)
    assert chunks[-1].heading == "Long > After"


@pytest.mark.parametrize("max_tokens", [16, 100, 512])
def test_the_cached_chunker_splits_as_plain_semchunk_does(max_tokens: int) -> None:
    """The chunkerify chunker (memoised counts, prefix-only counting of long texts) cuts where
    ``semchunk.chunk`` with an exact, unmemoised counter cuts."""
    text = TEXTS["long"]
    section_end = text.index("## After")
    _, offsets = semchunk.chunk(text[:section_end], max_tokens, _exact_count, memoize=False, offsets=True)
    expected = [(s, e) for s, e in offsets if len(text[s:e].strip()) >= 40]
    got = [(c.start, c.end) for c in chunk_markdown(text, "p.md", max_tokens=max_tokens) if c.heading == "Long"]
    assert len(got) == len(expected) > 1
    assert all(text[s:e].strip() == text[gs:ge] for (s, e), (gs, ge) in zip(expected, got))
    assert count_tokens(text) == _exact_count(text)  # the memoised public counter is exact


def _exact_count(text: str) -> int:
    return len(encoding().encode_ordinary(text))


@pytest.mark.parametrize(
    ("text", "wanted", "expected"),
    [
        ("---\ntags: [wiki/Topic]\n---\nbody", ["#wiki/Topic"], True),
        ("---\ntags: wiki/topic/sub, other\n---\nbody", ["#wiki/Topic"], True),
        ("body with an inline #wiki/Topic tag", ["wiki/topic"], True),
        ("body with #wiki/Topical only", ["#wiki/Topic"], False),
        ("```\n#wiki/Topic inside code\n```\n", ["#wiki/Topic"], False),
        ("# Heading is not a tag", ["heading"], False),
        ("no tags at all", ["#x"], False),
    ],
)
def test_tags_from_frontmatter_and_inline(text: str, wanted: list[str], expected: bool) -> None:
    assert tag_matches(parse_page(text).tags, wanted) is expected


def test_a_section_too_short_to_stand_alone_joins_its_neighbour_and_is_still_found() -> None:
    """"## Region / Hosted in region eu-north-1." is 39 characters, under min_chars (40): it used to be
    dropped, and with it the only place that fact is written. It now joins the passage before it (or, at
    the top of a page, the one after it); offsets stay exact."""
    text = ("# Marble\n\nMarble is the analytics warehouse, a columnar SQL engine.\n\n## Region\n\n"
            "Hosted in region eu-north-1.\n\n## Backups\n\nBackups run nightly at 04:00 UTC, kept 30 days.\n")
    chunks = chunk_markdown(text, "p.md")
    assert [c.heading for c in chunks] == ["Marble", "Marble > Backups"]
    assert "eu-north-1" in chunks[0].text and chunks[0].text.endswith("eu-north-1.")
    first = chunk_markdown("## Region\n\nHosted in eu-north-1.\n\n## Backups\n\nBackups run nightly, kept 30 days.\n",
                           "q.md")
    assert len(first) == 1 and first[0].start == 0 and first[0].heading == "Backups" and "eu-north-1" in first[0].text
    for c in chunks + first:
        source = text if c.path == "p.md" else "## Region\n\nHosted in eu-north-1.\n\n## Backups\n\nBackups run nightly, kept 30 days.\n"
        assert source[c.start:c.end] == c.text
    assert chunk_markdown("# Tiny\n\nToo short.\n", "t.md") == []  # a whole page that short: still no passage


def _parsed_headings(body: str) -> list[tuple[int, int, str, int]]:
    """What markdown-it finds (the slow path of chunking._sections)."""
    from wikirag import chunking

    line_starts = [0] + [m.end() for m in chunking._NEWLINE.finditer(body)]
    tokens = chunking._markdown().parse(body)
    return [(line_starts[t.map[0]], int(t.tag[1]), tokens[i + 1].content.strip(),
             line_starts[t.map[1]] if t.map[1] < len(line_starts) else len(body))
            for i, t in enumerate(tokens) if t.type == "heading_open"]


PLAIN = ["# a", "#a", "####### seven", "# C#", "# foo #", "# #", "#", "  ## x ##  ", "x\n# y\nz", "# t\n\n   # u  \n",
         "#\ttab", "# x\\#", "###   spaced   out   ###   ", "# é ü\n", "para\n# h\npara\n\n## h2\n\ntext",
         "\\# escaped\n", "* * *\n# after a break\n", "- item\n# h\n", "> quote\n# h\n", "1. one\n# h\n"]
# markdown-it decides: a fence, HTML, a setext underline, an indented line, a carriage return
NOT_PLAIN = ["```\n# not a heading\n```\n", "<div>\n# h\n</div>", "Title\n=====\n", "a\n---\n# b", "    # code\n",
             "# a\r\n# b\r\n", "~~~\n# x\n~~~"]


@pytest.mark.parametrize("body", PLAIN + NOT_PLAIN)
def test_headings_found_without_the_parse_are_the_parsers(body: str) -> None:
    """Plain pages (most) skip markdown-it: what the fast path finds must be what the parse finds."""
    from wikirag.chunking import _headings

    fast = _headings(body)
    assert (fast is None) == (body in NOT_PLAIN)
    assert fast is None or fast == _parsed_headings(body)


def test_the_example_wikis_headings_without_the_parse_are_the_parsers() -> None:
    from wikirag.chunking import _headings
    from wikirag.page import parse_page

    plain = 0
    for path in sorted((Path(__file__).resolve().parent.parent / "wikis").rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        body = text[parse_page(text).body_start:]
        fast = _headings(body)
        if fast is not None:
            plain += 1
            assert fast == _parsed_headings(body), path
    assert plain >= 20  # the fast path is the common one
