"""Fusion: merge the ranked lists of a query (one per wiki and layer) into one ranking.

A fusion method is a small, pluggable step. It receives :class:`Candidates` — every list's hits as
parallel arrays, with each wiki's composition weight and compact per-wiki statistics — and returns
the top ``k`` as :class:`Fused` hits. Register one with :func:`register`; a composition picks one by
name with ``fusion:``, and :data:`DEFAULT_FUSION` applies when it names none.

Methods:

* ``rrf``: Reciprocal Rank Fusion exactly as the design states it, ``score = Σ weight / (60 + rank)``
  over the lists a passage appears in (ranks start at 1), each wiki ranked by its own statistics. It
  is right for fusing layers of one wiki (lists that rank the same passages); over disjoint wikis it
  is a round-robin that lets every wiki's best hit into the top, relevant or not.
* ``dfs``: every wiki scores with the composition's BM25 statistics (document count, document
  frequencies, average length — what a distributed engine's DFS phase gathers), so scores are
  comparable and the ranking equals one index over all the wikis; merged by ``weight × score``.
* ``dfs-prior``: ``weight × dfs score + log P(wiki | query)``, the second term from each wiki's language
  model (:func:`wiki_log_prior`). It leans towards the wiki the question is about.
* ``routed`` (the default): the routing stage. ``P(wiki | query)`` is each wiki's routing weight, and a
  wiki's passages move by ``ROUTING_STRENGTH × (the query's best BM25 score) × log(P(wiki) / P(best
  wiki))`` (:func:`routing_offsets`): none for the wiki the question most belongs to, more the less it
  belongs to a wiki, in proportion to the query's own score scale (a long query's scores are larger). A
  question that matches every wiki alike gets equal weights and no offset: the ranking is ``dfs``'s,
  the same as one index over all the wikis.

In every method a wiki's ``weight`` from the composition multiplies its contribution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import QueryError
from .passage import Contribution

RRF_K = 60
# weight of a list in RRF by its layer (1 when not named). The graph layer's list counts as much as the
# others since it ranks the linked passages by the question too (retrieval._graph_rows); when it ranked
# them by link traffic alone it counted 0.15, so that a weak match that happened to be linked would not
# beat the best direct one (README "Graph layer" has the figures of both)
LAYER_WEIGHTS = {"graph": 1.0}
_SHIFT = 40  # (wiki, chunk) packed into one int64 key: chunk ids below 2**40


@dataclass(frozen=True)
class Candidates:
    """Every ranked list of one query as parallel arrays, one row per hit.

    Rows are ordered by wiki (composition order), then layer, then rank; ``wiki`` and ``layer`` index
    into ``wikis`` and ``layers``; ``rank`` is 1-based within its (wiki, layer) list.
    """

    wikis: tuple[str, ...]
    layers: tuple[str, ...]
    weights: np.ndarray
    wiki: np.ndarray
    layer: np.ndarray
    chunk: np.ndarray
    rank: np.ndarray
    score: np.ndarray
    # for methods with ``term_stats``: occurrences of each query term in each wiki (terms × wikis)
    # and each wiki's total number of tokens
    term_counts: np.ndarray | None = None
    wiki_tokens: np.ndarray | None = None
    # log P(wiki | query) when already computed from these statistics (:func:`wiki_log_prior`)
    wiki_prior: np.ndarray | None = None
    # the query's best BM25 score with the composition's statistics over every wiki (the routing stage's
    # scale); None: the best BM25 row's score
    top_score: float | None = None


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
    """A named fusion.

    ``depth(k)``: how many hits each list must supply for an exact top ``k``. ``scoring``: whether the
    BM25 lists are scored with each wiki's own statistics (``local``) or the composition's
    (``global``). ``term_stats``: whether the method needs ``Candidates.term_counts``. ``linear``: for
    a method that, on one list per wiki, fuses a hit as ``scale[w] · score + offset[w]`` (``scale`` > 0),
    those two arrays from the candidates' statistics (no rows needed): the fused top ``k`` is then the
    top ``k`` of all passages by that value, found in one pass (:meth:`wikirag.bm25.MergedBM25.top_overall`)
    instead of a top-``depth`` list per wiki.
    """

    name: str
    fuse: FuseFn
    depth: Callable[[int], int]
    description: str
    scoring: str = "local"
    term_stats: bool = False
    linear: Callable[[Candidates], tuple[np.ndarray, np.ndarray]] | None = None


FUSIONS: dict[str, FusionMethod] = {}
DEFAULT_FUSION = "routed"
# how strongly the routing stage moves a wiki's passages: what bench/fusion_eval.py's tuning rule picks on
# the 16 mixes of the five shared evaluation collections (the best mean nDCG@10 among the strengths that
# leave every mix at least at the monolith; 0.2 and 0.3 score 0.0007 higher on average but put one mix,
# lisa + npl, below it). The same rule with leave-one-collection-out is how it is reported: README "Routing"
ROUTING_STRENGTH = 0.15
DIRICHLET_MU = 2000  # the usual Dirichlet smoothing constant of query-likelihood retrieval (Zhai & Lafferty)


def register(name: str, description: str, depth: Callable[[int], int] = lambda k: k, *,
             scoring: str = "local", term_stats: bool = False,
             linear: Callable[[Candidates], tuple[np.ndarray, np.ndarray]] | None = None):
    """Decorator: make ``fuse(candidates, k)`` available as fusion ``name``."""

    def wrap(fuse: FuseFn) -> FuseFn:
        FUSIONS[name] = FusionMethod(name, fuse, depth, description, scoring, term_stats, linear)
        return fuse

    return wrap


def get(name: str | None) -> FusionMethod:
    """The fusion called ``name`` (None → the default); an unknown name lists the known ones."""
    name = name or DEFAULT_FUSION
    try:
        return FUSIONS[name]
    except KeyError:
        raise QueryError(f"unknown fusion '{name}': use one of {', '.join(sorted(FUSIONS))}") from None


def top_by_passage(c: Candidates, values: np.ndarray, k: int, wiki_prior: np.ndarray | None = None,
                   offsets: np.ndarray | None = None) -> list[Fused]:
    """Sum ``values`` (one per row) per passage and return the top ``k``, with their contributions.

    Ties keep the order of the rows' first appearance, so results are deterministic. ``wiki_prior`` and
    ``offsets`` (one value per wiki: what a method added to each of the wiki's passages) are reported in
    the contributions.
    """
    if len(values) == 0:
        return []
    key = (c.wiki << _SHIFT) | c.chunk
    one_row_each = _one_layer(c)
    if one_row_each:  # one list per wiki: every (wiki, chunk) appears once, no grouping needed
        unique, first, inverse, sums = key, np.arange(len(key)), np.arange(len(key)), values
    else:
        unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        sums = np.bincount(inverse, weights=values)
    best = np.lexsort((first, -sums))[:k]
    if one_row_each:
        rows_of = {i: [i] for i in best.tolist()}
    else:
        rows_of = {i: [] for i in best.tolist()}
        for row in np.flatnonzero(np.isin(inverse, best)).tolist():
            rows_of[int(inverse[row])].append(row)
    # the contributing rows' fields as Python values, fetched once (not one numpy scalar at a time)
    rows = np.array([r for group in rows_of.values() for r in group], dtype=np.int64)
    wiki, layer, rank, score = (c.wiki[rows].tolist(), c.layer[rows].tolist(), c.rank[rows].tolist(),
                                c.score[rows].tolist())
    prior, offset = ([None] * len(rows) if per_wiki is None
                     else np.asarray(per_wiki, dtype=np.float64)[c.wiki[rows]].tolist()
                     for per_wiki in (wiki_prior, offsets))
    contributions = [Contribution(c.wikis[w], c.layers[y], r, s, p, o)
                     for w, y, r, s, p, o in zip(wiki, layer, rank, score, prior, offset)]
    fused, at = [], 0
    for group, key_i, sum_i in zip(rows_of.values(), unique[best].tolist(), sums[best].tolist()):
        fused.append(Fused(c.wikis[key_i >> _SHIFT], key_i & ((1 << _SHIFT) - 1), sum_i,
                           tuple(contributions[at:at + len(group)])))
        at += len(group)
    return fused


def _one_layer(c: Candidates) -> bool:
    """True when every row comes from the same layer (e.g. a BM25-only query): one list per wiki."""
    return len(c.layers) == 1 or not len(c.layer) or bool((c.layer == c.layer[0]).all())


@register("rrf", "Reciprocal Rank Fusion: score = Σ weight / (60 + rank)")
def rrf(c: Candidates, k: int) -> list[Fused]:
    return top_by_passage(c, c.weights[c.wiki] * layer_weights(c) / (RRF_K + c.rank), k)


def layer_weights(c: Candidates) -> np.ndarray:
    """Each row's layer weight in RRF (:data:`LAYER_WEIGHTS`; 1 for BM25 and dense)."""
    per_layer = np.array([LAYER_WEIGHTS.get(name, 1.0) for name in c.layers])
    return per_layer[c.layer] if len(c.layer) else np.ones(0)


def layer_values(c: Candidates) -> np.ndarray:
    """One value per row for the score-based methods, so that each passage's rows sum to its score.

    A wiki searched by one layer keeps that layer's scores. A wiki searched by BM25 and dense layers
    gets one order by RRF of its lists (RRF is the right fusion for layers ranking the same passages),
    and its passages, in that order, take the wiki's own BM25 scores in descending order: the wiki's
    ranking is its hybrid one, and how it interleaves with other wikis is decided on the BM25 scale
    they share. Passages beyond the BM25 list (found by the dense layer only) continue below its
    lowest score.
    """
    values = c.score.astype(np.float64)
    if _one_layer(c):
        return values
    bm25 = c.layers.index("bm25") if "bm25" in c.layers else -1
    # only the wikis with lists from two layers or more need work: the others keep their scores
    lists = np.unique(c.wiki * len(c.layers) + c.layer) // len(c.layers)  # the wiki of each (wiki, layer) list
    weights = layer_weights(c)
    for w in np.unique(lists[1:][lists[1:] == lists[:-1]]).tolist():  # a wiki appears once per list it has
        rows = np.flatnonzero(c.wiki == w)
        unique, first, inverse = np.unique(c.chunk[rows], return_index=True, return_inverse=True)
        fused = np.bincount(inverse, weights=weights[rows] / (RRF_K + c.rank[rows]))
        order = np.lexsort((first, -fused))
        lexical = np.sort(c.score[rows][c.layer[rows] == bm25])[::-1]
        floor = lexical[-1] if len(lexical) else 1e-3
        extra = len(unique) - len(lexical)
        ladder = np.concatenate([lexical, floor * np.linspace(0.99, 0.5, extra)]) if extra > 0 else lexical
        per_passage = np.empty(len(unique))
        per_passage[order] = ladder[:len(unique)]
        row_values = np.zeros(len(rows))
        row_values[first] = per_passage
        values[rows] = row_values
    return values


@register("dfs", "BM25 with the composition's statistics, merged by score: equals one index over all the wikis",
          scoring="global", linear=lambda c: (c.weights, np.zeros(len(c.wikis))))
def dfs(c: Candidates, k: int) -> list[Fused]:
    return top_by_passage(c, c.weights[c.wiki] * layer_values(c), k)


def wiki_log_prior(c: Candidates) -> np.ndarray:
    """log P(wiki | query) for each wiki, from the wikis' own language models.

    Each wiki is a unigram model of all its text, smoothed towards the composition's (Dirichlet,
    ``DIRICHLET_MU``); the query's log-likelihood under it is averaged over the query's terms (so a
    long query is not more certain than a short one) and normalised over the wikis with a uniform
    prior, so a wiki's size neither helps nor hurts. Only per-wiki term counts and sizes are used.
    """
    if c.wiki_prior is not None:
        return c.wiki_prior
    return log_prior(c.term_counts, c.wiki_tokens, len(c.wikis))


def log_prior(counts: np.ndarray | None, sizes: np.ndarray | None, wikis: int) -> np.ndarray:
    """:func:`wiki_log_prior` from the statistics alone: ``counts`` (terms × wikis) and ``sizes``."""
    if counts is None or sizes is None or counts.size == 0 or wikis < 2:
        return np.zeros(wikis)
    background = counts.sum(axis=1) / sizes.sum()
    loglik = np.log((counts + DIRICHLET_MU * background[:, None]) / (sizes[None, :] + DIRICHLET_MU)).sum(axis=0)
    mean = loglik / counts.shape[0]
    return mean - mean.max() - np.log(np.exp(mean - mean.max()).sum())


def routing_offsets(c: Candidates) -> np.ndarray:
    """Each wiki's routing offset (0 for the wiki the question most belongs to, negative for the others):
    ``ROUTING_STRENGTH × top × (log P(wiki | query) − max log P)``, ``top`` the query's best BM25 score.
    Equal weights (a question that matches every wiki alike, one wiki, dense lists only) give 0 for all."""
    prior = wiki_log_prior(c)
    top = c.top_score
    if top is None:
        bm25 = c.layers.index("bm25") if "bm25" in c.layers else -1
        lexical = c.score[c.layer == bm25] if len(c.layer) else np.empty(0)
        top = float(lexical.max()) if len(lexical) else 0.0
    return ROUTING_STRENGTH * top * (prior - prior.max()) if len(prior) else prior


def _with_offsets(c: Candidates, k: int, offsets: np.ndarray, prior: np.ndarray) -> list[Fused]:
    """``weight × value + offsets[wiki]`` per passage, the offset counted once per passage."""
    values = c.weights[c.wiki] * layer_values(c)
    if _one_layer(c):  # one row per passage
        first = np.ones(len(values), dtype=bool)
    else:  # the offset counts once per passage, on its first row
        first = np.zeros(len(values), dtype=bool)
        _, first_rows = np.unique((c.wiki << _SHIFT) | c.chunk, return_index=True)
        first[first_rows] = True
    return top_by_passage(c, values + np.where(first, offsets[c.wiki], 0.0), k, wiki_prior=prior, offsets=offsets)


def _lexical(c: Candidates) -> bool:
    """True when the candidates hold BM25 rows (with dense lists only, scores are cosines: an offset on the
    BM25 scale, or in nats, would swamp them)."""
    return "bm25" in c.layers and bool((c.layer == c.layers.index("bm25")).any())


@register("dfs-prior",
          "dfs plus log P(wiki | query) from each wiki's language model: favours the wiki the question is about",
          scoring="global", term_stats=True, linear=lambda c: (c.weights, wiki_log_prior(c)))
def dfs_prior(c: Candidates, k: int) -> list[Fused]:
    prior = wiki_log_prior(c) if _lexical(c) else np.zeros(len(c.wikis))
    return _with_offsets(c, k, prior, prior)


@register("routed",
          "dfs with a routing stage: each wiki weighted by P(wiki | query) from its language model, its passages "
          "lowered in proportion to the query's score scale the less the question belongs to it",
          scoring="global", term_stats=True, linear=lambda c: (c.weights, routing_offsets(c)))
def routed(c: Candidates, k: int) -> list[Fused]:
    if not _lexical(c):
        zero = np.zeros(len(c.wikis))
        return _with_offsets(c, k, zero, zero)
    return _with_offsets(c, k, routing_offsets(c), wiki_log_prior(c))
