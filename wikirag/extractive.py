"""Extractive answers: the passages' most relevant sentences, verbatim, each cited. Never invents text.

Used when no language model is configured (the offline default, see README) or asked for with
``--model extractive``. Each passage is cut into sentences (paragraphs and list items first, code blocks
and headings skipped); a sentence scores the sum of the IDF, over the candidate sentences, of the
question's terms it contains, divided by its passage's rank (the retriever's judgement of the whole
passage counts: this answered 15 of the 24 check questions in bench/answer_eval.py, against 11
without it); the best few are listed with the number of their passage.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from dataclasses import dataclass

from .bm25 import tokenize
from .prompt import NO_ANSWER
from .retrieval import Passage

MAX_SENTENCES = 3
MIN_CHARS = 20
_BLOCK_START = re.compile(r"^\s{0,3}(?:#{1,6}\s|[-*+]\s|\d+[.)]\s|>|\|)")
_MARKUP = re.compile(r"^\s{0,3}(?:[-*+]\s+|\d+[.)]\s+|>\s?)+")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[*`])")
_LINE = re.compile(r"[^\n]*\n?")
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


def _blocks(text: str) -> list[tuple[int, int]]:
    """Paragraphs and list items of a passage as ``(start, end)``; code blocks and headings left out."""
    blocks: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    in_code = False
    for m in _LINE.finditer(text):
        line, start = m.group(), m.start()
        if not line:
            break
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_code = not in_code
        if in_code or not stripped or stripped.startswith(("```", "~~~", "#")):
            if current:
                blocks.append(current)
            current = None
            continue
        if current is None or _BLOCK_START.match(line):
            if current:
                blocks.append(current)
            current = (start, start + len(line.rstrip()))
        else:
            current = (current[0], start + len(line.rstrip()))
    if current:
        blocks.append(current)
    return blocks


def sentences(n: int, passage: Passage) -> list[Sentence]:
    """The sentences of ``passage`` (number ``n``), each a verbatim span of the source file."""
    out = []
    for b_start, b_end in _blocks(passage.text):
        block = passage.text[b_start:b_end]
        markup = _MARKUP.match(block)
        offset = markup.end() if markup else 0
        cuts = [offset] + [m.end() for m in _SENTENCE_END.finditer(block, offset)] + [len(block)]
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
    idf = {t: math.log(1 + (len(pool) - d + 0.5) / (d + 0.5)) for t, d in df.items()}
    score = [sum(idf[t] for t in ts) / s.n for s, ts in zip(pool, terms)]
    # best score first; ties go to the better-ranked passage, then to the earlier sentence
    ranked = sorted((i for i in range(len(pool)) if score[i] > 0), key=lambda i: (-score[i], pool[i].n, i))
    chosen = [pool[i] for i in ranked[:limit]]
    if not chosen:
        return NO_ANSWER, []
    return "\n".join(f"- {_unlink(s.text)} [{s.n}]" for s in chosen), chosen
