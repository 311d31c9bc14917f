"""Links between pages: parse a page's ``[[wikilinks]]`` and markdown links, resolve them to pages.

Recognised (outside code blocks and inline code spans, which are skipped):

* Obsidian wikilinks: ``[[page]]``, ``[[page|alias]]``, ``[[page#Heading]]``, ``[[page#Heading|alias]]``,
  ``[[folder/page]]``, ``[[#Heading]]`` (same page), embeds ``![[page]]``, and links into another wiki
  of a composition, ``[[other-wiki:page]]``. A ``#^block`` reference counts as a link to the page.
* Relative markdown links: ``[text](../services/db.md)``, ``[text](db.md#backups)``, ``<…>`` targets,
  ``%20``-encoded names, an optional title. Links with a scheme (``https:``, ``mailto:``), images of
  non-markdown files and pure ``#anchor`` links are not page links.

Resolution (:class:`PageIndex`), for a wikilink as Obsidian does it: the path relative to the source
root (``.md`` optional), else the file name without extension, case-insensitively (several candidates:
the one in the linking page's folder, else the shortest path), else a page's frontmatter ``title``. A
markdown link is resolved relative to the linking page's folder (``/…``: the source root); it never
leaves the root. Anchors match a heading by its GitHub-style slug, so ``#Backups`` and ``#backups``
name the same section.
"""

from __future__ import annotations

import bisect
import posixpath
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .wiki import SLUG_RE

_WIKILINK = re.compile(r"(!?)\[\[([^\[\]\n]+?)\]\]")
_MDLINK = re.compile(
    r"(!?)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]"              # [text], one level of nested brackets
    r"\(\s*(<[^<>\n]*>|[^\s()<>]*(?:\([^\s()]*\)[^\s()<>]*)*)"  # (target or <target>
    r"(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"    # optional "title")
)
_CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_NEWLINE = re.compile(r"\r\n|\r|\n")
MARKDOWN_EXT = (".md", ".markdown")


@dataclass(frozen=True)
class Link:
    """One link in a page: where it is (file offsets, 1-based line), what it says and where it points.

    ``target`` is the page as written (``""`` for the same page), ``anchor`` the heading or None,
    ``wiki`` another wiki's name for ``[[wiki:page]]`` (None: this wiki). ``to`` is the resolved page
    path within this wiki, filled in by :meth:`PageIndex.resolve_all` (None: unresolved or another wiki).
    """

    start: int
    end: int
    line: int
    kind: str  # "wikilink" or "markdown"
    text: str
    target: str
    anchor: str | None = None
    wiki: str | None = None
    to: str | None = None

    def to_row(self) -> list:
        return [self.start, self.end, self.line, self.kind, self.text, self.target, self.anchor, self.wiki, self.to]

    @classmethod
    def from_row(cls, row: list) -> Link:
        return cls(*row)


def slug(heading: str) -> str:
    """GitHub-style heading slug: ``'On-call & Escalation'`` → ``'on-call--escalation'``."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _code_ranges(text: str, body_start: int) -> list[tuple[int, int]]:
    """Character ranges of fenced and indented code blocks and inline code spans."""
    body = text[body_start:]
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(body)] + [len(body)]
    parsed = body.replace("\ufeff", " ", 1) if body.startswith("\ufeff") else body
    blocks = []
    from .chunking import full_markdown  # markdown-it: only builds parse pages, queries never do

    for token in full_markdown().parse(parsed):
        if token.type in ("fence", "code_block") and token.map:
            lo, hi = token.map
            blocks.append((body_start + line_starts[lo], body_start + line_starts[min(hi, len(line_starts) - 1)]))
    ranges = list(blocks)
    pos = body_start
    for lo, hi in [*blocks, (len(text), len(text))]:  # code spans live between the blocks
        ranges += [(pos + m.start(), pos + m.end()) for m in _CODE_SPAN.finditer(text[pos:lo])]
        pos = max(pos, hi)
    return sorted(ranges)


def _split_wikilink(inner: str) -> tuple[str | None, str, str | None]:
    """``'wiki:page#Heading|alias'`` → ``('wiki', 'page', 'Heading')``."""
    target = inner.split("|", 1)[0].strip()
    anchor = None
    if "#" in target:
        target, anchor = target.split("#", 1)
        anchor = anchor.split("#")[-1].strip()  # Obsidian's nested [[page#A#B]] names B
        if not anchor or anchor.startswith("^"):  # a block reference: the page itself
            anchor = None
        target = target.strip()
    wiki = None
    prefix, sep, rest = target.partition(":")
    if sep and SLUG_RE.fullmatch(prefix) and rest.strip():
        wiki, target = prefix, rest.strip()
    return wiki, target, anchor


def parse_links(text: str, body_start: int = 0) -> list[Link]:
    """Every page link in ``text`` after ``body_start`` (the frontmatter is not searched), in order."""
    if "[[" not in text and "](" not in text:  # no link syntax at all: skip parsing the page for code blocks
        return []
    code = _code_ranges(text, body_start)
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    def in_code(pos: int) -> bool:
        return any(lo <= pos < hi for lo, hi in code)

    def line_of(pos: int) -> int:
        return bisect.bisect_right(line_starts, pos)

    links: list[Link] = []
    taken: list[tuple[int, int]] = []
    for m in _WIKILINK.finditer(text, body_start):
        if in_code(m.start()):
            continue
        wiki, target, anchor = _split_wikilink(m.group(2))
        if not target and not anchor:
            continue
        if target and "." in posixpath.basename(target) and not target.lower().endswith(MARKDOWN_EXT):
            continue  # ![[diagram.png]] and other attachments
        links.append(Link(m.start(), m.end(), line_of(m.start()), "wikilink", m.group(0), target, anchor, wiki))
        taken.append((m.start(), m.end()))
    for m in _MDLINK.finditer(text, body_start):
        if in_code(m.start()) or any(lo <= m.start() < hi for lo, hi in taken):
            continue
        raw = m.group(3).strip()
        if raw.startswith("<") and raw.endswith(">"):
            raw = raw[1:-1].strip()
        if not raw or _SCHEME.match(raw) or raw.startswith("//"):
            continue
        path, _, anchor = raw.partition("#")
        path = urllib.parse.unquote(path.split("?", 1)[0])
        if not path or (m.group(1) and not path.lower().endswith(MARKDOWN_EXT)):
            continue  # a same-page anchor, or an image
        if "." in posixpath.basename(path) and not path.lower().endswith(MARKDOWN_EXT):
            continue  # a link to an attachment, not a page
        links.append(Link(m.start(), m.end(), line_of(m.start()), "markdown", m.group(0), path,
                          urllib.parse.unquote(anchor) or None))
    links.sort(key=lambda link: link.start)
    return links


def _strip_ext(path: str) -> str:
    for ext in MARKDOWN_EXT:
        if path.lower().endswith(ext):
            return path[: -len(ext)]
    return path


class PageIndex:
    """Resolves link targets to the page paths of one wiki (paths relative to its source root)."""

    def __init__(self, paths: Iterable[str], titles: Mapping[str, str | None] = {}):
        self.paths = sorted(set(paths))
        self._by_path = {_strip_ext(p).lower(): p for p in self.paths}
        self._by_stem: dict[str, list[str]] = {}
        for p in self.paths:
            self._by_stem.setdefault(posixpath.basename(_strip_ext(p)).lower(), []).append(p)
        self._by_title: dict[str, str] = {}
        for p in self.paths:
            title = titles.get(p)
            if isinstance(title, str) and title.strip():
                self._by_title.setdefault(title.strip().lower(), p)

    def resolve(self, link: Link, from_path: str) -> str | None:
        """The page ``link`` (written in page ``from_path``) points to in this wiki, or None."""
        if not link.target:
            return from_path if from_path in self.paths or not self.paths else None
        if link.kind == "markdown":
            base = "" if link.target.startswith("/") else posixpath.dirname(from_path)
            joined = posixpath.normpath(posixpath.join(base, link.target.lstrip("/")))
            if joined.startswith("../") or joined == "..":
                return None  # never outside the source root
            return self._by_path.get(_strip_ext(joined).lower())
        wanted = _strip_ext(link.target.strip().lstrip("/")).lower()
        if wanted in self._by_path:
            return self._by_path[wanted]
        candidates = self._by_stem.get(posixpath.basename(wanted), [])
        if "/" in wanted:  # a partial path: it must match the end of the page's path
            candidates = [p for p in candidates if _strip_ext(p).lower().endswith("/" + wanted)]
        if candidates:
            here = posixpath.dirname(from_path)
            same = [p for p in candidates if posixpath.dirname(p) == here]
            return (same or sorted(candidates, key=lambda p: (p.count("/"), len(p), p)))[0]
        return self._by_title.get(link.target.strip().lower())

    def resolve_all(self, links: list[Link], from_path: str) -> list[Link]:
        """``links`` with ``to`` filled in (links into another wiki are left for query time)."""
        out = []
        for link in links:
            to = None if link.wiki else self.resolve(link, from_path)
            out.append(Link(**{**link.__dict__, "to": to}))
        return out
