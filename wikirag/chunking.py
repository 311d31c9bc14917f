"""Markdown-aware chunking with exact character offsets.

A page is cut at its top-level headings first (ATX and setext, found by ``markdown-it-py`` so that
``#`` lines inside code blocks are not headings), then any section longer than ``max_tokens`` (tiktoken
``cl100k_base``) is split by a ``semchunk`` chunker (paragraph → sentence → word), built once per
``max_tokens`` with ``semchunk.chunkerify``. Token counts are memoised (:func:`count_tokens`) and a text
far longer than ``max_tokens`` is judged "too long" from a prefix only. YAML frontmatter is not
indexed. Each passage keeps ``start``/``end`` offsets into the file's text exactly as
``path.read_bytes().decode("utf-8")`` gives it (no newline translation; a BOM is character 0), so that
``text == file_text[start:end]`` always holds.

Bound on the work per file: a parse costs per markdown block, not per byte. A 9.9 MB page of a million
``# h`` headings took 34 s and 1.7 GB in markdown-it (about 30 µs and 2 KB per block), where 5 MB of
prose takes 0.4 s. So before a file is parsed, :func:`count_blocks` counts, with one regular expression
that stops at the bound (about 0.1 s for 10 MB), the lines that may start a block: a line after a blank
line, and a line starting with one of ``# > - * + = _ | <``, a backtick, ``~``, or ``1.``/``1)``
(headings, quotes, list items, rules, tables, HTML, fences). It over-counts rather than under-counts (it
does not know about code blocks). A build skips a file with more than :data:`MAX_BLOCKS` (100,000) of
them, with a reason that says to split it: a parse just under the bound takes about 3 s and 200 MB,
and a normal page is far below it (10 MB of prose wrapped at 80 columns has about 26,000).
"""

from __future__ import annotations

import bisect
import functools
import importlib.util
import os
import re
from pathlib import Path

import semchunk
from markdown_it import MarkdownIt

from .errors import MissingDependency
from .page import Page, parse_page
from .passage import Chunk

ENCODING_NAME = "cl100k_base"
# the rules that cut a page into sections, part of every index's settings (a change re-chunks every page):
# 2 = a heading with no text of its own opens the next section instead of being a passage
# 3 = a section shorter than ``min_chars`` joins the passage before it on its page (the one after it when
#     it is the first), instead of being dropped: "## Region / Hosted in region eu-north-1." is 39 characters
#     and the only place that fact is written; only a page whose whole text is that short has no passage
SECTION_RULES = 3
_NEWLINE = re.compile(r"\r\n|\r|\n")  # the same line breaks markdown-it counts
MAX_BLOCKS = 100_000  # a build skips a file with more lines that may start a block (see the module docstring)
_NL = r"(?:\r\n|\r(?!\n)|\n)"  # one line break: a CRLF is one, not a line break and a blank line
# a line break, then: a blank line and a non-blank line, or a line starting with a block marker
_BLOCK_START = re.compile(_NL + r"[ \t]*(?:" + _NL + r"[ \t]*\S|[#>*+=|<`~_-]|\d{1,9}[.)])")


def count_blocks(text: str, limit: int = MAX_BLOCKS) -> int:
    """How many lines of ``text`` may start a markdown block (an upper estimate, the first line included),
    counting no further than ``limit + 1``: cheap whatever the file holds."""
    count = 1
    for count, _ in enumerate(_BLOCK_START.finditer(text), start=2):
        if count > limit:
            break
    return count


def _tiktoken_dir() -> str | None:
    """litellm ships tiktoken's BPE files; find them without importing litellm (slow)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return str(folder) if folder.is_dir() else None


@functools.lru_cache(maxsize=1)
def encoding():
    """The ``cl100k_base`` tiktoken encoding, loaded offline from litellm's copy of the BPE file."""
    import tiktoken

    if not os.environ.get("TIKTOKEN_CACHE_DIR"):
        folder = _tiktoken_dir()
        if folder:
            os.environ["TIKTOKEN_CACHE_DIR"] = folder
    try:
        return tiktoken.get_encoding(ENCODING_NAME)
    except Exception as exc:  # noqa: BLE001 - tiktoken raises plain exceptions when it cannot fetch the file
        raise MissingDependency(
            f"cannot load the tiktoken encoding {ENCODING_NAME} ({exc}). Install litellm, which ships "
            "the file, or point TIKTOKEN_CACHE_DIR at a folder holding it."
        ) from None


@functools.lru_cache(maxsize=4096)
def count_tokens(text: str) -> int:
    """Number of ``cl100k_base`` tokens in ``text`` (special-token strings count as plain text). Memoised:
    semchunk counts the same spans many times while it searches for a chunk's end."""
    return len(encoding().encode_ordinary(text))


@functools.lru_cache(maxsize=8)
def _chunker(max_tokens: int) -> semchunk.Chunker:
    """The semchunk chunker for ``max_tokens``, counting with :func:`count_tokens`.

    ``max_token_chars`` (the longest token's length in bytes, which bounds its length in characters) is
    what chunkerify would find itself from the encoding; given it, semchunk counts only a prefix of
    ``6 * max_tokens`` characters (plus one token) of a longer text and, if that is already over the limit,
    reports ``max_tokens + 1``. semchunk's own memoisation is off: :func:`count_tokens` already is, and
    semchunk's registry of memoised counters is a module global that would keep every chunker's counter.
    """
    longest = max(len(token) for token in encoding().token_byte_values())
    return semchunk.chunkerify(count_tokens, max_tokens, max_token_chars=longest, memoize=False)


@functools.lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark")
    # only block structure is needed: skip inline parsing, which is most of the cost
    md.core.ruler.disable(["inline", "text_join"])
    # a heading inside a list, quote or table does not start a section; skipping them halves the time
    md.block.ruler.disable(["list", "blockquote", "table", "reference"])
    return md


@functools.lru_cache(maxsize=1)
def full_markdown() -> MarkdownIt:
    """CommonMark block structure including lists and quotes (where code blocks may sit); no inline parsing."""
    md = MarkdownIt("commonmark")
    md.core.ruler.disable(["inline", "text_join"])
    return md


# a body in which markdown-it can find no block but paragraphs, ATX headings, thematic breaks and blank lines
# (no code fence, HTML block, setext underline, indented line or carriage return): its headings are its ATX
# lines, found without parsing it (most pages; the parse was a third of a build's work at a million pages)
_NOT_PLAIN = re.compile(r"^(?: {0,3}(?:`{3}|~{3}|<|[=-]+[ \t]*$)| {4}|\t)|\r", re.MULTILINE)
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+|$)(.*)$", re.MULTILINE)


def _headings(body: str) -> list[tuple[int, int, str, int]] | None:
    """The headings of a plain body (see :data:`_NOT_PLAIN`) as :func:`_sections` takes them — ``(offset
    of the heading's line, level, title, where the line after it starts)`` — the way markdown-it's heading
    rule reads them (a closing run of ``#`` after a space dropped); None if the body is not plain."""
    if _NOT_PLAIN.search(body):
        return None
    out = []
    for m in _ATX.finditer(body):
        title = m.group(2).rstrip(" \t")
        shorter = title.rstrip("#")
        if len(shorter) < len(title) and (not shorter or shorter[-1] in " \t"):
            title = shorter
        out.append((m.start(), len(m.group(1)), title.strip(), min(m.end() + 1, len(body))))
    return out


def _sections(text: str, body_start: int) -> list[tuple[int, int, str]]:
    """Split the body at headings: a list of ``(start, end, heading path)`` in file offsets. A heading with
    no text before the next heading is not a section of its own (see :data:`SECTION_RULES`)."""
    body = text[body_start:]
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(body)]
    # markdown-it would not see a heading behind a BOM; a space keeps lengths and lines the same
    parsed = body.replace("\ufeff", " ", 1) if body.startswith("\ufeff") else body
    # (offset in body, level, title, end of the heading's lines)
    cuts: list[tuple[int, int, str, int]] | None = _headings(parsed)
    if cuts is None:
        cuts = []
        tokens = _markdown().parse(parsed)
        for i, token in enumerate(tokens):
            if token.type == "heading_open" and token.map:
                title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
                after = line_starts[token.map[1]] if token.map[1] < len(line_starts) else len(body)
                cuts.append((line_starts[token.map[0]], int(token.tag[1]), title, after))
    # (start, end, heading path, where the text below its heading starts: None before the first) in body offsets
    raw: list[tuple[int, int, str, int | None]] = []
    stack: list[tuple[int, str]] = []
    previous, path, below = 0, "", None
    for offset, level, title, after in cuts:
        if offset > previous:
            raw.append((previous, offset, path, below))
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        path = " > ".join(t for _, t in stack if t)
        previous, below = offset, after
    raw.append((previous, len(body), path, below))
    # a heading followed at once by another one ("## Recipe" then "### Ingredients") is no passage of its
    # own: it opens the next section (whose heading path names it when it is its parent); a heading alone
    # at the end of a page is dropped
    sections: list[tuple[int, int, str]] = []
    held = None
    for start, end, path, below in raw:
        if below is not None and not body[below:end].strip():
            held = start if held is None else held
            continue
        sections.append((body_start + (start if held is None else held), body_start + end, path))
        held = None
    return sections


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink ``[start, end)`` so the span neither starts nor ends with whitespace."""
    span = text[start:end]
    lead = len(span) - len(span.lstrip())
    trail = len(span) - len(span.rstrip())
    return start + lead, max(start + lead, end - trail)


def chunk_markdown(text: str, path: str, max_tokens: int = 512, min_chars: int = 40,
                   page: Page | None = None) -> list[Chunk]:
    """Cut one file's text into passages (see the module docstring)."""
    page = page or parse_page(text)
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
    chunks: list[Chunk] = []
    chunker = _chunker(max_tokens)
    held: tuple[int, int, str] | None = None  # (start, end, heading) of short passages before any other
    for sec_start, sec_end, heading in _sections(text, page.body_start):
        spans: list[tuple[int, int]]
        section = text[sec_start:sec_end]
        # a token is at least one UTF-8 byte, so short sections need no counting
        if len(section.encode("utf-8")) <= max_tokens or chunker.token_counter(section) <= max_tokens:
            spans = [(sec_start, sec_end)]
        else:
            _, offsets = chunker(section, offsets=True)
            spans = [(sec_start + s, sec_start + e) for s, e in offsets]
        for raw_start, raw_end in spans:
            start, end = _trimmed(text, raw_start, raw_end)
            if end <= start:
                continue
            if end - start < max(min_chars, 1):  # too short to stand alone: a whole section joins a neighbour
                if len(spans) > 1:  # (rule 3); a short piece of a long section is dropped, keeping max_tokens
                    continue
                if chunks:
                    before = chunks[-1]
                    chunks[-1] = Chunk(path, before.start, end, before.line, before.heading, text[before.start:end])
                else:  # they open the next one
                    held = (start if held is None else held[0], end, heading if held is None else held[2])
                    if held[1] - held[0] >= max(min_chars, 1):  # short parts that are long enough together
                        line = bisect.bisect_right(line_starts, held[0])
                        chunks.append(Chunk(path, held[0], end, line, held[2], text[held[0]:end]))
                        held = None
                continue
            if held is not None:
                start, held = held[0], None
            line = bisect.bisect_right(line_starts, start)
            chunks.append(Chunk(path, start, end, line, heading, text[start:end]))
    return chunks
