"""Query a composition: search each wiki on its own, fuse, cut to the top ``k``.

Every entry point takes the caller's clearance. The composition is refused if it is above it, and each
wiki is checked again at retrieval time (its level read from ``.wiki.yaml`` as it is now, not from the
index), so no passage above the clearance is returned even from a hand-edited composition.

Indexes load once per process (:class:`IndexCache`) and are reloaded when a build swaps in a new one
(one ``stat`` of ``CURRENT`` per wiki per query notices it). The loaded BM25 layers of a composition are
merged in memory once (:class:`~wikirag.bm25.MergedBM25`) so a query scores all its wikis in one pass;
each wiki still ranks with its own statistics and contributes its own top-N list to the fusion.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import audit, dense, embeddings
from . import fusion as fusion_mod
from . import index as index_mod
from .access import Level, require
from .bm25 import MergedBM25, tokenize
from .composition import Composition
from .embeddings import EmbeddingError
from .errors import AccessDenied, CompositionError, IndexMissing, QueryError
from .fusion import Candidates, Contribution, Fused
from .graph import ComposedGraph, Hop
from .index import LoadedIndex
from .wiki import Wiki
from .workspace import Workspace

MAX_K = 1000
GRAPH_WINDOW = 100
LAYERS = ("bm25", "dense", "graph")


def _dense_rows(question: str, indexes: list[LoadedIndex], depth: int, warnings: list[str],
                bm25_fallback: bool) -> list[tuple]:
    """Each dense wiki's nearest passages; the question is embedded once per embedding model."""
    groups: dict[tuple[str, str | None], list[int]] = {}
    for w, idx in enumerate(indexes):
        if idx.dense is not None:
            groups.setdefault((idx.dense.model, idx.dense.api_base), []).append(w)
    rows = []
    fallback = "searched with BM25 only" if bm25_fallback else "left out"
    for (model, api_base), members in groups.items():
        try:
            vector = embeddings.get(model, api_base).embed([question])[0]
        except EmbeddingError as exc:
            names = ", ".join(indexes[w].wiki for w in members)
            warnings.append(f"dense layer of {names} unavailable ({exc}): {fallback}")
            continue
        for w in members:
            idx = indexes[w]
            dense_store = dense.store()
            dense_store.ensure(idx.wiki, idx.build_id, idx.folder / "dense", idx.dense)
            ids, scores = dense_store.search(idx.wiki, vector, idx.dense.model_id, depth)
            rows.append((np.full(len(ids), w), np.ones(len(ids), dtype=np.int64), ids,
                         np.arange(1, len(ids) + 1), scores))
    return rows


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

    def to_dict(self) -> dict:
        data = asdict(self)
        data["contributions"] = [asdict(c) for c in self.contributions]
        data["via"] = [asdict(h) for h in self.via]
        return data


@dataclass(frozen=True)
class SearchResult:
    """The passages of a query, best first, with warnings (stale or missing indexes) and a hint."""

    question: str
    composition: str
    passages: list[Passage]
    warnings: list[str] = field(default_factory=list)
    hint: str | None = None
    seconds: float = 0.0
    wikis: list[str] = field(default_factory=list)


class Composed:
    """The loaded indexes of one query's wikis, with their BM25 layers merged (built once, cached)."""

    def __init__(self, indexes: list[LoadedIndex]):
        self.names = tuple(idx.wiki for idx in indexes)
        self.chunks = {idx.wiki: idx.chunks for idx in indexes}
        self.stats = tuple({"chunks": idx.bm25.num_docs} for idx in indexes)
        self.bm25 = MergedBM25([idx.bm25 for idx in indexes])
        self._link_graphs = [idx.graph for idx in indexes]
        self._graphs: dict[tuple, ComposedGraph] = {}
        self._lock = threading.Lock()

    def graph(self, enabled: tuple[bool, ...], tags: tuple[bool, ...]) -> ComposedGraph:
        """The joined link graph for the wikis that opt in (cached per choice of wikis)."""
        key = (enabled, tags)
        with self._lock:
            if key not in self._graphs:
                self._graphs[key] = ComposedGraph(self.names, self._link_graphs, self.bm25.offsets, enabled, tags)
            return self._graphs[key]


class IndexCache:
    """Loaded indexes (and merged views of them) shared by every query of a process. Thread-safe.

    A build in this process is seen by the next query. A build by another process (``wikirag build``
    while the app runs) is seen within ``recheck_seconds``: until then the previous, complete index
    keeps serving. Checking ``CURRENT`` at most that often keeps the per-wiki cost of a query low.
    """

    def __init__(self, max_views: int = 32, recheck_seconds: float = 0.5) -> None:
        # pointer path -> (CURRENT's stat, build generation, checked at, index, warnings)
        self._entries: dict[str, tuple[tuple | None, int, float, LoadedIndex, list[str]]] = {}
        self._views: OrderedDict[tuple, Composed] = OrderedDict()
        self._max_views = max_views
        self.recheck_seconds = recheck_seconds
        self._lock = threading.RLock()

    def get(self, wiki: Wiki) -> tuple[LoadedIndex, list[str]]:
        """The wiki's serving index and warnings about it (e.g. stale). Raises IndexMissing."""
        pointer = wiki.current_pointer
        entry = self._entries.get(pointer)
        now = time.monotonic()
        if (entry is not None and entry[1] == index_mod.build_generation
                and now - entry[2] < self.recheck_seconds):
            return entry[3], entry[4]
        try:
            st = os.stat(pointer)
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            key = None
        if entry is not None and key is not None and entry[0] == key:
            self._entries[pointer] = (key, index_mod.build_generation, now, entry[3], entry[4])
            return entry[3], entry[4]
        with self._lock:
            generation = index_mod.build_generation
            loaded = index_mod.load(wiki)
            state = index_mod.status(wiki)
            warnings = [f"wiki '{wiki.name}' is stale ({state.detail})"] if state.state == "stale" else []
            self._entries[pointer] = (key, generation, now, loaded, warnings)
            return loaded, warnings

    def merged(self, indexes: list[LoadedIndex]) -> Composed:
        """The merged view of these exact builds (cached; a new build makes a new view)."""
        key = tuple([idx.build_id for idx in indexes])
        with self._lock:
            view = self._views.get(key)
            if view is None:
                view = self._views[key] = Composed(indexes)
                while len(self._views) > self._max_views:
                    self._views.popitem(last=False)
            else:
                self._views.move_to_end(key)
            return view

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._views.clear()


DEFAULT_CACHE = IndexCache()


def search(workspace: Workspace, composition: str | Path | Composition, question: str, *,
           clearance: Level | str, k: int | None = None, fusion: str | None = None,
           layers: tuple[str, ...] = LAYERS, cache: IndexCache | None = None,
           user: str | None = None, audit_event: str | None = "search") -> SearchResult:
    """Search ``composition`` for ``question`` as ``user`` with ``clearance``; recorded in the audit log
    (``audit_event=None`` leaves it to the caller, as :func:`~wikirag.answer.answer` does).

    ``layers`` limits the layers used (``("bm25",)``, ``("dense",)``; default: every layer a wiki has).
    Raises AccessDenied if the composition (or any of its wikis) is above the clearance,
    CompositionError/NotFound for a bad composition, QueryError for a bad ``k``, fusion or layer, and
    IndexMissing only when no wiki of the composition has an index (otherwise a warning). A dense layer
    that cannot be used (missing, model unavailable) is a warning: that wiki is searched with BM25.
    """
    clearance = Level.parse(clearance)
    who = user or audit.default_user()
    try:
        result = _search(workspace, composition, question, clearance, k, fusion, layers, cache)
    except (AccessDenied, CompositionError) as exc:
        audit.record(workspace.home, "refused", user=who, clearance=clearance, asked=str(composition), reason=str(exc))
        raise
    if audit_event:
        audit.record(workspace.home, audit_event, **audit_fields(result, who, clearance))
    return result


def audit_fields(result: SearchResult, user: str, clearance: Level) -> dict:
    """What the audit log records about a search: ids and hashes, never passage or question text."""
    return {"user": user, "clearance": clearance, "composition": result.composition, "wikis": result.wikis,
            "question_sha256": audit.question_hash(result.question),
            "passages": [audit.passage_id(p) for p in result.passages], "seconds": round(result.seconds, 4)}


def _search(workspace: Workspace, composition: str | Path | Composition, question: str, clearance: Level,
            k: int | None, fusion: str | None, layers: tuple[str, ...], cache: IndexCache | None) -> SearchResult:
    started = time.perf_counter()
    # loading (or refreshing a given Composition) re-reads changed wiki manifests and re-checks levels
    comp = workspace.composition(composition, clearance)
    require(clearance, comp.level, f"composition '{comp.name}'")
    k = comp.k if k is None else k
    if not 1 <= k <= MAX_K:
        raise QueryError(f"k must be between 1 and {MAX_K}, not {k}")
    method = comp.fusion if fusion is None else fusion_mod.get(fusion)
    unknown = set(layers) - set(LAYERS)
    if unknown or not layers:
        raise QueryError(f"unknown layer(s) {sorted(unknown)}: use {', '.join(LAYERS)}")
    if set(layers) == {"graph"}:
        raise QueryError("the graph layer follows links from the hits of the other layers: add bm25 or dense")
    cache = cache or DEFAULT_CACHE
    indexes: list[LoadedIndex] = []
    warnings: list[str] = []
    for wiki in comp.wikis:
        if wiki.level > clearance:  # defence in depth: resolving the composition checked this already
            require(clearance, wiki.level, f"wiki '{wiki.name}'")
        try:
            loaded, index_warnings = cache.get(wiki)
        except IndexMissing as exc:
            warnings.append(str(exc))
            continue
        warnings += index_warnings
        changed = index_mod.level_change(loaded.manifest, wiki)
        if changed:
            warnings.append(f"wiki '{wiki.name}' changed level since it was indexed ({changed}); "
                            f"it is treated as {wiki.level}: rebuild it to record the change")
        if wiki.manifest.layers.dense is not None and loaded.dense is None and "dense" in layers:
            warnings.append(f"wiki '{wiki.name}' declares a dense layer but its index has none: "
                            f"run 'wikirag build {wiki.name}'; searched with BM25 only")
        indexes.append(loaded)
    if not indexes:
        raise IndexMissing(f"no wiki of composition '{comp.name}' has an index: " + "; ".join(warnings))
    tokens = tokenize([question])[0]
    view = cache.merged(indexes)
    cols = view.bm25.columns(tokens)
    specs = [wiki.manifest.layers.graph for wiki in comp.wikis if wiki.name in view.names]
    use_graph = "graph" in layers and any(specs)
    # with the graph layer, every list is as deep as GRAPH_WINDOW whatever k: the within-wiki fusion of
    # a linked passage's ranks then does not depend on how many passages were asked for
    depth = max(method.depth(k), GRAPH_WINDOW) if use_graph else method.depth(k)
    rows = []
    if "bm25" in layers:
        hits = view.bm25.search_columns(cols, depth, method.scoring)
        rows.append((hits.wiki, np.zeros(len(hits.wiki), dtype=np.int64), hits.chunk, hits.rank, hits.score))
    if "dense" in layers:
        rows += _dense_rows(question, indexes, depth, warnings, bm25_fallback="bm25" in layers)
    weights = np.array([comp.weight(name) for name in view.names], dtype=np.float64)
    term_counts = view.bm25.term_counts(cols) if method.term_stats else None
    candidates = _candidates(view, rows, weights, term_counts)
    graph = None
    if use_graph:
        graph = view.graph(tuple(spec is not None for spec in specs), tuple(bool(spec and spec.tags) for spec in specs))
        seed_count = max(spec.seeds for spec in specs if spec)
        first = method.fuse(candidates, max(k, seed_count))
        seeds = _seeds(view, first, specs, seed_count)
        if seeds:
            rows.append(_graph_rows(graph, seeds, specs, view.bm25.num_docs))
            candidates = _candidates(view, rows, weights, term_counts)
    else:
        seeds = []
    passages = []
    for rank, hit in enumerate(method.fuse(candidates, k), start=1):
        c = view.chunks[hit.wiki][hit.id]
        via = ()
        if graph is not None and any(x.layer == "graph" for x in hit.contributions):
            node = int(view.bm25.offsets[view.names.index(hit.wiki)]) + hit.id
            via = tuple(graph.path([s for s, _ in seeds], node))
        passages.append(Passage(rank, hit.wiki, c.path, c.start, c.end, c.line, c.heading, hit.score,
                                c.text, hit.contributions, via))
    hint = None
    if not passages and "bm25" in layers:
        hint = ("the question has only very common words (stopwords): add a specific term"
                if not tokens else "no passage contains any of the question's terms: try other words")
    return SearchResult(question, comp.name, passages, warnings, hint, time.perf_counter() - started,
                        [w.name for w in comp.wikis])


def _candidates(view: Composed, rows: list[tuple], weights: np.ndarray, term_counts: np.ndarray | None) -> Candidates:
    """The ranked lists' rows (wiki, layer, chunk, rank, score) as the fusion's input."""
    wiki, layer, chunk, rank, score = (np.concatenate(parts) for parts in zip(*rows)) if rows else [np.empty(0)] * 5
    order = np.lexsort((rank, layer, wiki))  # rows by wiki, then layer, then rank
    return Candidates(
        wikis=view.names, layers=LAYERS, stats=view.stats, weights=weights,
        wiki=wiki[order].astype(np.int64), layer=layer[order].astype(np.int64), chunk=chunk[order].astype(np.int64),
        rank=rank[order].astype(np.int64), score=score[order].astype(np.float64),
        term_counts=term_counts, wiki_tokens=view.bm25.wiki_tokens,
    )


def _seeds(view: Composed, first: list[Fused], specs: list, count: int) -> list[tuple[int, float]]:
    """The fused top ``count`` hits in wikis with a graph layer, as (node, restart weight 1/rank)."""
    seeds = []
    for rank, hit in enumerate(first[:count], start=1):
        w = view.names.index(hit.wiki)
        if specs[w] is not None:
            seeds.append((int(view.bm25.offsets[w]) + hit.id, 1.0 / rank))
    return seeds


def _graph_rows(graph: ComposedGraph, seeds: list[tuple[int, float]], specs: list, passages: int) -> tuple:
    """The graph layer's ranked list per wiki: passages that links lead to from the seeds, by the walk's
    traffic arriving over links (:meth:`ComposedGraph.link_inflow`), at most the largest ``passages``
    setting per wiki. A seed linked from another seed is in it too."""
    nodes = np.array([s for s, _ in seeds], dtype=np.int64)
    score = graph.link_inflow(graph.pagerank(nodes, np.array([wt for _, wt in seeds])))
    reached = np.flatnonzero(score > 1e-12)
    wiki = np.searchsorted(graph.offsets, reached, side="right") - 1
    order = np.lexsort((reached, -score[reached], wiki))  # by wiki, best first
    reached, wiki = reached[order], wiki[order]
    starts = np.searchsorted(wiki, np.arange(len(graph.offsets) - 1))
    rank = np.arange(len(reached)) - starts[wiki] + 1
    keep = rank <= max(spec.passages for spec in specs if spec)
    reached, wiki, rank = reached[keep], wiki[keep], rank[keep]
    return (wiki, np.full(len(wiki), LAYERS.index("graph")), reached - graph.offsets[wiki], rank, score[reached])
