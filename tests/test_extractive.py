"""Extractive answers: which markdown blocks sentences come from, exact offsets, IDF ranking."""

from __future__ import annotations

import pytest

from wikirag.extractive import extract, sentences
from wikirag.passage import Passage

PREFIX = "---\ntitle: x\n---\n"  # the passage sits after other text of its file: offsets are file offsets

CASES = {
    "paragraph": (
        "First sentence is long enough here. Second sentence follows it closely!\n",
        ["First sentence is long enough here.", "Second sentence follows it closely!"],
    ),
    "paragraph over lines": (
        "A sentence that runs over\ntwo lines of the file. Then another one here.\n",
        ["A sentence that runs over two lines of the file.", "Then another one here."],
    ),
    "list items": (
        ("- The first item is long enough.\n- The second item, also long enough,\n  continues here.\n"
         "1. An ordered item that is long enough.\n   - A nested item that is long enough.\n"),
        ["The first item is long enough.", "The second item, also long enough, continues here.",
         "An ordered item that is long enough.", "A nested item that is long enough."],
    ),
    "fenced code": (
        ("Text before the code block is long enough.\n\n```\nThis line looks like a sentence. Do not quote it.\n```\n"
         "~~~python\nprint('Neither should this line be quoted at all.')\n~~~\n"),
        ["Text before the code block is long enough."],
    ),
    "indented code": (
        "Text before the indented block is long enough.\n\n    This indented line is code, not a sentence.\n",
        ["Text before the indented block is long enough."],
    ),
    "headings": (
        ("# An ATX heading that is long enough\n\nSetext heading long enough to count\n---\n\n"
         "The body sentence is long enough here.\n"),
        ["The body sentence is long enough here."],
    ),
    "quote": (
        ("> A quoted sentence that is long enough.\n> Its second line is quoted as well.\n\n"
         "> - A list item inside a quote, long enough.\n"),
        ["A quoted sentence that is long enough.", "Its second line is quoted as well.",
         "A list item inside a quote, long enough."],
    ),
    "table": (
        "| Tier | Notify within |\n|---|---|\n| Tier 1 vendors | 24 hours of a breach |\n",
        ["| Tier | Notify within |", "| Tier 1 vendors | 24 hours of a breach |"],
    ),
    "html": (
        ("<!-- An editing note that is long enough. -->\n\n<div>A block of HTML that is long enough.</div>\n\n"
         "Plain text after the HTML is long enough.\n"),
        ["Plain text after the HTML is long enough."],
    ),
    "crlf": (
        "# Title\r\n\r\nA paragraph with Windows line breaks.\r\nIt goes on here, long enough.\r\n",
        ["A paragraph with Windows line breaks.", "It goes on here, long enough."],
    ),
    "short fragments": (
        "Too short. This one is long enough to keep.\n",
        ["This one is long enough to keep."],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sentences_come_from_prose_blocks_with_exact_offsets(name: str) -> None:
    text, expected = CASES[name]
    file_text = PREFIX + text + "\nTrailing text of the file."
    passage = Passage(2, "w", "p.md", len(PREFIX), len(PREFIX) + len(text), 4, "", 1.0, text)
    found = sentences(3, passage)
    assert [s.text for s in found] == expected
    for s in found:
        raw = file_text[s.start:s.end]
        assert s.n == 3 and raw == raw.strip() and " ".join(raw.split()) == s.text
        assert passage.start <= s.start < s.end <= passage.end


def test_a_leading_bom_does_not_hide_a_heading() -> None:
    text = "\ufeff# A heading that is long enough\n\nThe body sentence is long enough here.\n"
    passage = Passage(1, "w", "p.md", 0, len(text), 1, "", 1.0, text)
    assert [s.text for s in sentences(1, passage)] == ["The body sentence is long enough here."]


def test_rare_question_terms_weigh_more_and_rank_divides() -> None:
    text = ("Water the plants in the morning. Water tomatoes deeply twice a week. "
            "Water the lawn when it is dry.")
    passages = [Passage(1, "w", "a.md", 0, len(text), 1, "", 1.0, text)]
    answer, chosen = extract("water tomatoes", passages, limit=1)
    assert [s.text for s in chosen] == ["Water tomatoes deeply twice a week."]
    assert answer == "- Water tomatoes deeply twice a week. [1]"
    # the same sentence in the second passage loses to a weaker one in the first
    other = "Tomatoes need a sunny spot in the garden."
    passages = [Passage(1, "w", "b.md", 0, len(other), 1, "", 1.0, other),
                Passage(2, "w", "a.md", 0, len(text), 1, "", 1.0, text)]
    assert extract("water tomatoes", passages, limit=1)[1][0].text == other
