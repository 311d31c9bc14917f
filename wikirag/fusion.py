"""Fusion: merge the ranked lists of a query (one per wiki and layer) into one ranking.

A fusion method is a small, pluggable step. It receives :class:`Candidates` — every list's hits as
parallel arrays, with each wiki's composition weight and compact per-wiki statistics — and returns
the top ``k`` as :class:`Fused` hits. Register one with :func:`register`; a composition picks one by
name with ``fusion:``, and :data:`DEFAULT_FUSION` applies when it names none.

``rrf`` is Reciprocal Rank Fusion exactly as the design states it: ``score = Σ weight / (60 + rank)``
over the lists a passage appears in (ranks start at 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import QueryError

RRF_K = 60
_SHIFT = 40  # (wiki, chunk) packed into one int64 key: chunk ids below 2**40


@dataclass(frozen=True)
class RankedList:
    """One layer's ranked chunk ids for one wiki, best first (a convenient way to build Candidates)."""

    wiki: str
    ids: np.ndarray
    scores: np.ndarray
    layer: str = "bm25"
    weight: float = 1.0
    stats: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Candidates:
    """Every ranked list of one query as parallel arrays, one row per hit.

    Rows are ordered by wiki (composition order), then layer, then rank; ``wiki`` and ``layer`` index
    into ``wikis`` and ``layers``; ``rank`` is 1-based within its (wiki, layer) list.
    """

    wikis: tuple[str, ...]
    layers: tuple[str, ...]
    weights: np.ndarray
    stats: tuple[Mapping[str, float], ...]
    wiki: np.ndarray
    layer: np.ndarray
    chunk: np.ndarray
    rank: np.ndarray
    score: np.ndarray

    @classmethod
    def from_lists(cls, lists: Sequence[RankedList]) -> Candidates:
        wikis = tuple(dict.fromkeys(r.wiki for r in lists))
        layers = tuple(dict.fromkeys(r.layer for r in lists))
        weights = {r.wiki: r.weight for r in lists}
        stats = {r.wiki: r.stats for r in lists}

        def column(values) -> np.ndarray:
            return np.concatenate([np.asarray(v) for v in values]) if lists else np.empty(0)

        return cls(
            wikis, layers, np.array([weights[w] for w in wikis], dtype=np.float64),
            tuple(stats[w] for w in wikis),
            column([np.full(len(r.ids), wikis.index(r.wiki)) for r in lists]).astype(np.int64),
            column([np.full(len(r.ids), layers.index(r.layer)) for r in lists]).astype(np.int64),
            column([r.ids for r in lists]).astype(np.int64),
            column([np.arange(1, len(r.ids) + 1) for r in lists]).astype(np.int64),
            column([r.scores for r in lists]).astype(np.float64),
        )


@dataclass(frozen=True)
class Contribution:
    """Where a fused hit came from: the list's wiki and layer, its 1-based rank and raw score there."""

    wiki: str
    layer: str
    rank: int
    score: float


@dataclass(frozen=True)
class Fused:
    """A fused hit: chunk ``id`` of ``wiki``, its fused score and the lists that contributed."""

    wiki: str
    id: int
    score: float
    contributions: tuple[Contribution, ...]


FuseFn = Callable[[Candidates, int], list[Fused]]


@dataclass(frozen=True)
class FusionMethod:
    """A named fusion. ``depth(k)`` is how many hits each list must supply for an exact top ``k``."""

    name: str
    fuse: FuseFn
    depth: Callable[[int], int]
    description: str


FUSIONS: dict[str, FusionMethod] = {}
DEFAULT_FUSION = "rrf"


def register(name: str, description: str, depth: Callable[[int], int] = lambda k: k):
    """Decorator: make ``fuse(candidates, k)`` available as fusion ``name``."""

    def wrap(fuse: FuseFn) -> FuseFn:
        FUSIONS[name] = FusionMethod(name, fuse, depth, description)
        return fuse

    return wrap


def get(name: str | None) -> FusionMethod:
    """The fusion called ``name`` (None → the default); an unknown name lists the known ones."""
    name = name or DEFAULT_FUSION
    try:
        return FUSIONS[name]
    except KeyError:
        raise QueryError(f"unknown fusion '{name}': use one of {', '.join(sorted(FUSIONS))}") from None


def top_by_passage(c: Candidates, values: np.ndarray, k: int) -> list[Fused]:
    """Sum ``values`` (one per row) per passage and return the top ``k``, with their contributions.

    Ties keep the order of the rows' first appearance, so results are deterministic.
    """
    if len(values) == 0:
        return []
    key = (c.wiki << _SHIFT) | c.chunk
    if len(c.layers) == 1:  # one list per wiki: every (wiki, chunk) appears once, no grouping needed
        unique, first, inverse, sums = key, np.arange(len(key)), np.arange(len(key)), values
    else:
        unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        sums = np.bincount(inverse, weights=values)
    best = np.lexsort((first, -sums))[:k]
    rows_of: dict[int, list[int]] = {i: [] for i in best.tolist()}
    for row in np.flatnonzero(np.isin(inverse, best)).tolist():
        rows_of[int(inverse[row])].append(row)
    fused = []
    for i, rows in rows_of.items():
        contributions = tuple(Contribution(c.wikis[c.wiki[r]], c.layers[c.layer[r]], int(c.rank[r]),
                                           float(c.score[r])) for r in rows)
        fused.append(Fused(c.wikis[int(unique[i] >> _SHIFT)], int(unique[i] & ((1 << _SHIFT) - 1)),
                           float(sums[i]), contributions))
    return fused


@register("rrf", "Reciprocal Rank Fusion: score = Σ weight / (60 + rank)")
def rrf(c: Candidates, k: int) -> list[Fused]:
    return top_by_passage(c, c.weights[c.wiki] / (RRF_K + c.rank), k)
