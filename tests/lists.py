"""Ranked lists written by hand, as fusion's input: the tests' way to build :class:`Candidates`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wikirag.fusion import Candidates


@dataclass(frozen=True)
class RankedList:
    """One layer's ranked chunk ids for one wiki, best first."""

    wiki: str
    ids: np.ndarray
    scores: np.ndarray
    layer: str = "bm25"
    weight: float = 1.0


def candidates(lists: Sequence[RankedList]) -> Candidates:
    """The lists as parallel arrays, rows by wiki (first appearance), then layer, then rank."""
    wikis = tuple(dict.fromkeys(r.wiki for r in lists))
    layers = tuple(dict.fromkeys(r.layer for r in lists))
    weights = {r.wiki: r.weight for r in lists}

    def column(values) -> np.ndarray:
        return np.concatenate([np.asarray(v) for v in values]) if lists else np.empty(0)

    return Candidates(
        wikis, layers, np.array([weights[w] for w in wikis], dtype=np.float64),
        column([np.full(len(r.ids), wikis.index(r.wiki)) for r in lists]).astype(np.int64),
        column([np.full(len(r.ids), layers.index(r.layer)) for r in lists]).astype(np.int64),
        column([r.ids for r in lists]).astype(np.int64),
        column([np.arange(1, len(r.ids) + 1) for r in lists]).astype(np.int64),
        column([r.scores for r in lists]).astype(np.float64),
    )
