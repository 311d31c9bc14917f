"""The values that travel the query path: a passage of a file (:class:`Chunk`), a search result
(:class:`Passage`) and why it ranks (:class:`Contribution`, :class:`Hop`).

A leaf module: it imports nothing from wikirag, so every layer (chunking, fusion, the graph, prompts,
answers) can use these types without importing the layers that make them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Chunk:
    """One passage of a markdown file; ``text`` is exactly ``file_text[start:end]``."""

    path: str
    start: int
    end: int
    line: int
    heading: str
    text: str


@dataclass(frozen=True)
class Contribution:
    """Where a fused hit came from: the list's wiki and layer, its 1-based rank and raw score there."""

    wiki: str
    layer: str
    rank: int
    score: float
    wiki_prior: float | None = None  # log P(wiki | query), for methods that use one
    # what the fusion added to the passage's score for its wiki (once per passage): the routing offset of
    # ``routed``, the log prior of ``dfs-prior``; None for methods that add nothing
    offset: float | None = None


@dataclass(frozen=True)
class Hop:
    """One link followed to reach a passage: the page and line it is on, its markup, where it leads."""

    wiki: str
    path: str
    line: int
    link: str
    to_wiki: str
    to_path: str



@dataclass(frozen=True)
class Passage:
    """One result: where it is (wiki, path, exact offsets, line, heading), its text and why it ranks."""

    rank: int
    wiki: str
    path: str
    start: int
    end: int
    line: int
    heading: str
    score: float
    text: str
    contributions: tuple[Contribution, ...] = ()
    via: tuple[Hop, ...] = ()  # for a passage the graph layer found: the links followed to reach it
    # its file now: "current" (``text`` is file[start:end]), "moved" (found again: new offsets and line)
    # or "changed" (its text or file is gone: never to be cited with offsets or given to a model)
    state: str = "current"

    def to_dict(self) -> dict:
        data = asdict(self)
        data["contributions"] = [asdict(c) for c in self.contributions]
        data["via"] = [asdict(h) for h in self.via]
        if self.state == "changed":  # its offsets and line no longer point at its text
            data["start"] = data["end"] = data["line"] = None
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Passage:
        """The passage :meth:`to_dict` gave (a kept conversation's passages are read back with this)."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k not in ("contributions", "via")}
        for key in ("start", "end", "line"):
            if known.get(key) is None:
                known[key] = 0
        return cls(**known, contributions=tuple(Contribution(**c) for c in data.get("contributions") or ()),
                   via=tuple(Hop(**h) for h in data.get("via") or ()))
