"""The work a build does per file is bounded before parsing: a page of a million headings (or paragraphs)
is skipped with a reason in well under a second and little memory, and a normal large page is indexed.

Measured on the development machine (a subprocess per build, peak resident memory from /proc): a 9.9 MB
page of a million ``# h`` headings took 33.6 s and 1,708 MB before being skipped as "no passage"; with
the bound it is skipped in 0.4 s at a peak of 113 MB (the whole process, imports included).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from wikirag import Workspace, build, store
from wikirag.chunking import MAX_BLOCKS, count_blocks

from .conftest import build_probe, make_wiki

REASON = (f"too many markdown blocks (more than {MAX_BLOCKS:,} headings, paragraphs, list items or other "
          "block starts): split it into smaller pages")
SMALL = "# Small\n\nA normal page next to a pathological one, about compost heaps.\n"




def _write_until(path: Path, size: int, line: str | None = None, numbered: str | None = None) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        i = 0
        while fh.tell() < size:
            fh.write(line if line is not None else numbered.format(i))
            i += 1


@pytest.mark.parametrize(("text", "expected"), [
    ("", 1),
    ("one line", 1),
    ("a\nb\nc\n", 1),                   # one paragraph
    ("a\n\nb\n\n\n\nc", 3),             # paragraphs after blank lines, however many
    ("a\n  \t\nb", 2),                  # a blank line of spaces and tabs is blank
    ("a\r\nb\r\nc", 1),                 # CRLF is one line break, not a line and a blank line
    ("a\r\n\r\nb", 2),
    ("a\rb\r\rc", 2),                   # lone CRs break lines too (markdown-it counts them)
    ("# a\n## b\n   ### c\n", 3),       # headings, indented or not
    ("- a\n* b\n+ c\n1. d\n2) e\n", 5),  # list items
    ("> q\n---\n===\n| t |\n<div>\n```\n~~~\n___\n", 8),  # the first line is the one
    ("word # not a heading\n", 1),
])
def test_count_blocks_counts_lines_that_may_start_a_block(text: str, expected: int) -> None:
    assert count_blocks(text) == expected


def test_count_blocks_stops_at_the_bound() -> None:
    assert count_blocks("# h\n" * 50, limit=10) == 11
    assert count_blocks("# h\n" * 2_000_000) == MAX_BLOCKS + 1


def test_a_page_of_a_million_headings_is_skipped_quickly_with_bounded_memory(home: Path) -> None:
    make_wiki(home, "heads", {"small.md": SMALL})
    _write_until(home / "wikis" / "heads" / "heads.md", int(9.9 * 2**20), numbered="# h{:06d}\n")
    got = build_probe(home, "heads")
    assert got["skipped"] == [["heads.md", REASON]]
    assert got["files"] == 1 and got["chunks"] == 1  # the small page next to it is indexed
    assert got["seconds"] < 5 and got["peak_mb"] < 300, got  # was 33.6 s and 1,708 MB
    print(f"\n9.9 MB of a million headings: skipped in {got['seconds']:.2f} s, peak {got['peak_mb']:.0f} MB")


@pytest.mark.parametrize(("name", "line"), [
    ("cr-headings", "# h\r"),        # line breaks markdown-it counts that a '\n' count would miss
    ("paragraphs", "word\n \n"),     # a paragraph per line: as costly as headings
    ("bullets", "- [x](y)\n"),       # list items with link syntax (the link parse reads lists too)
])
def test_other_pathological_shapes_are_skipped(home: Path, name: str, line: str) -> None:
    make_wiki(home, name, {"small.md": SMALL})
    _write_until(home / "wikis" / name / "big.md", 4 * 2**20, line=line)
    report = build(Workspace(home).wiki(name))
    assert [(s.path, s.reason) for s in report.skipped] == [("big.md", REASON)]
    assert report.seconds < 5, report.seconds


def test_a_page_just_under_the_bound_is_indexed(home: Path) -> None:
    body = "".join(f"## Step {i}\n\nTurn the compost heap number {i} and water it well.\n\n" for i in range(20_000))
    assert count_blocks(body) < MAX_BLOCKS
    make_wiki(home, "steps", {"steps.md": body})
    report = build(Workspace(home).wiki("steps"))
    assert not report.skipped and report.chunks == 20_000


def test_a_normal_5_mb_page_is_still_indexed(home: Path) -> None:
    paragraph = "Compost heaps need air, water and a balance of green and brown material. " * 20 + "\n\n"
    make_wiki(home, "big", {})
    with (home / "wikis" / "big" / "big.md").open("w") as fh:
        for i in range(5 * 2**20 // len(paragraph)):
            fh.write(f"## Section {i}\n\n" if i % 50 == 0 else paragraph)
    text = (home / "wikis" / "big" / "big.md").read_text()
    assert count_blocks(text) < MAX_BLOCKS // 20
    got = build_probe(home, "big")
    assert got["files"] == 1 and got["chunks"] > 1000 and not got["skipped"], got
    assert store.load(Workspace(home).wiki("big")).chunks
    print(f"\n5 MB page: {got['chunks']} chunks in {got['seconds']:.1f} s, peak {got['peak_mb']:.0f} MB")
