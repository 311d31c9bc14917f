"""A markdown page's frontmatter and tags: what a build filters on (``include_tags``) and the portal shows.

Frontmatter is a YAML block between ``---`` lines at the very top of the file (a BOM may precede it); it
is never indexed. Tags are the frontmatter's ``tags`` (a list, or a string of words) and inline
``#tags`` outside fenced code, normalised to lower case without the ``#``; ``wiki/topic`` is nested
below ``wiki``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .config import load_text
from .errors import ConfigError

_FRONTMATTER_OPEN = re.compile(r"\ufeff?---[ \t]*(?:\r\n|\r|\n)")
_FRONTMATTER_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*(?:\r\n|\r|\n|$)", re.MULTILINE)
_INLINE_TAG = re.compile(r"(?<![\w/#&])#([A-Za-z_][\w/-]*|\d+[A-Za-z_/-][\w/-]*)")
_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Page:
    """A parsed markdown file: where its body starts, its frontmatter and its tags."""

    body_start: int
    frontmatter: dict[str, Any]
    tags: frozenset[str]


def parse_page(text: str) -> Page:
    """Find the frontmatter (if any) and the page's tags (frontmatter ``tags`` and inline ``#tags``)."""
    body_start, front = 0, {}
    opening = _FRONTMATTER_OPEN.match(text)
    if opening:
        closing = _FRONTMATTER_CLOSE.search(text, opening.end())
        if closing:
            body_start = closing.end()
            try:  # bounded like every YAML wikirag reads: no anchors/aliases (alias bombs), no deep nesting
                loaded = load_text(text[opening.end():closing.start()], "frontmatter")
            except ConfigError:
                loaded = None  # a broken frontmatter is still frontmatter: not indexed, no tags
            front = loaded if isinstance(loaded, dict) else {}
    tags: set[str] = set()
    raw = front.get("tags") or front.get("tag") or []
    if isinstance(raw, str):
        raw = re.split(r"[,\s]+", raw)
    if isinstance(raw, list):
        tags.update(normalize_tag(str(tag)) for tag in raw if tag)
    body = _FENCE.sub("", text[body_start:])
    tags.update(normalize_tag(match) for match in _INLINE_TAG.findall(body))
    tags.discard("")
    return Page(body_start, front, frozenset(tags))


def normalize_tag(tag: str) -> str:
    """``'#Wiki/Topic'`` → ``'wiki/topic'``."""
    return tag.strip().lstrip("#").strip("/").lower()


def tag_matches(page_tags: frozenset[str], wanted: list[str]) -> bool:
    """True when a page tag equals a wanted tag or is nested below it (``wiki/topic/sub``)."""
    for want in map(normalize_tag, wanted):
        if any(tag == want or tag.startswith(want + "/") for tag in page_tags):
            return True
    return False
