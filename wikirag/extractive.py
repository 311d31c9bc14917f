"""Extractive answers: the passages' most relevant sentences, verbatim, each cited. Never invents text.

Used when no language model is configured (the offline default, see README) or asked for with
``--model extractive``. Each passage is cut into blocks by markdown-it (see :func:`_blocks`: paragraphs,
also inside list items and quotes, one line run at a time; code blocks, headings and HTML left out),
then into sentences; a sentence scores the sum of the IDF (:func:`wikirag.bm25.idf`, over the candidate
sentences) of the question's terms it contains, divided by its passage's rank (the retriever's judgement
of the whole passage counts: this answered 15 of the 24 check questions in bench/answer_eval.py, against
11 without it); the best few are listed with the number of their passage.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .bm25 import idf, tokenize
from .chunking import full_markdown
from .passage import Passage
from .prompt import NO_ANSWER

MAX_SENTENCES = 3
MIN_CHARS = 20
_MARKUP = re.compile(r"^\s*(?:[-*+]\s+|\d+[.)]\s+|>\s?)+")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[*`])")
_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line breaks markdown-it counts
_LINK = re.compile(r"\[\[([^\]|]+)(?:\|([^\]]+))?\]\]|\[([^\]]+)\]\([^)]*\)")


def _unlink(text: str) -> str:
    """``[text](target)`` → ``text`` and ``[[page|alias]]`` → ``alias``: links of a wiki page mean nothing
    (and lead nowhere) once its sentence is quoted elsewhere."""
    return _LINK.sub(lambda m: m.group(3) or m.group(2) or m.group(1), text)


@dataclass(frozen=True)
class Sentence:
    """A sentence of passage ``n``: its offsets in the source file and its text, whitespace collapsed."""

    n: int
    start: int
    end: int
    text: str


def _content_start(line: str, content: str) -> tuple[int, bool]:
    """Where ``line``'s own text starts once its container markup (list marker, ``>``, indentation) is
    skipped, and whether there was markup. ``content`` is the line as markdown-it's paragraph holds it (the
    containers' prefixes removed); the regex is the fallback where the two do not align (a NUL byte)."""
    own = content.strip()
    if own and line.rstrip().endswith(own):
        prefix = len(line.rstrip()) - len(own)
        return prefix, bool(line[:prefix].strip())
    markup = _MARKUP.match(line)
    lead = len(line) - len(line.lstrip())
    return (markup.end(), True) if markup else (lead, False)


def _blocks(text: str) -> list[tuple[int, int]]:
    """The runs of text of a passage that sentences may be cut from, as ``(start, end)`` offsets in it.

    Blocks come from markdown-it's block tokens (:func:`wikirag.chunking.full_markdown`, their ``map`` of
    source lines): every paragraph, at any depth in list items and quotes, is kept; fenced and indented
    code, headings (ATX and setext) and HTML blocks are left out. Within a paragraph a new block starts at
    each line that carries container markup (a list marker or ``>``: a sentence must not swallow the ``>``
    of the next quoted line, since it is quoted verbatim) and at each line starting with ``|``. Tables: the
    CommonMark parser sees a pipe table as a paragraph, and each of its rows is a block of its own, as
    before markdown-it was used; the delimiter row (``|---|``, no word in it) is dropped. Each block starts
    after its line's markup and ends at its last line's last non-space character.
    """
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
    line_ends = [m.start() for m in _NEWLINE.finditer(text)] + [len(text)]
    # markdown-it would not see a heading behind a BOM; a space keeps lengths and lines the same
    parsed = " " + text[1:] if text.startswith("\ufeff") else text
    tokens = full_markdown().parse(parsed)
    blocks: list[tuple[int, int]] = []
    for opening, inline in itertools.pairwise(tokens):
        if opening.type != "paragraph_open" or not opening.map:
            continue
        first, last = opening.map
        current: tuple[int, int] | None = None
        for number, content in zip(range(first, last), inline.content.split("\n")):
            line = text[line_starts[number]:line_ends[number]]
            offset, markup = _content_start(line, content)
            start, end = line_starts[number] + offset, line_starts[number] + len(line.rstrip())
            if current is None or markup or line[offset:].startswith("|"):
                if current:
                    blocks.append(current)
                current = (start, end)
            elif end > start:
                current = (current[0], end)
        if current:
            blocks.append(current)
    return [(s, e) for s, e in blocks if e > s and re.search(r"\w", text[s:e])]


def sentences(n: int, passage: Passage) -> list[Sentence]:
    """The sentences of ``passage`` (number ``n``), each a verbatim span of the source file."""
    out = []
    for b_start, b_end in _blocks(passage.text):
        block = passage.text[b_start:b_end]
        cuts = [0] + [m.end() for m in _SENTENCE_END.finditer(block)] + [len(block)]
        for s, e in itertools.pairwise(cuts):
            raw = block[s:e].rstrip()
            if len(raw.strip()) >= MIN_CHARS:
                start = passage.start + b_start + s + (len(raw) - len(raw.lstrip()))
                out.append(Sentence(n, start, passage.start + b_start + s + len(raw), " ".join(raw.split())))
    return out


def extract(question: str, passages: list[Passage], limit: int = MAX_SENTENCES) -> tuple[str, list[Sentence]]:
    """The answer text (one cited sentence per line) and the sentences it quotes."""
    wanted = set(tokenize([question])[0])
    pool = [s for i, p in enumerate(passages, start=1) for s in sentences(i, p)]
    terms = [set(tokens) & wanted for tokens in tokenize([s.text for s in pool])]
    df = Counter(t for ts in terms for t in ts)
    weights = dict(zip(df, idf(np.array(list(df.values()), dtype=np.float64), len(pool)).tolist()))
    score = [sum(weights[t] for t in ts) / s.n for s, ts in zip(pool, terms)]
    # best score first; ties go to the better-ranked passage, then to the earlier sentence
    ranked = sorted((i for i in range(len(pool)) if score[i] > 0), key=lambda i: (-score[i], pool[i].n, i))
    chosen = [pool[i] for i in ranked[:limit]]
    if not chosen:
        return NO_ANSWER, []
    return "\n".join(f"- {_unlink(s.text)} [{s.n}]" for s in chosen), chosen
