"""Loaded indexes, shared by every query of a process, and merged views of a composition's indexes.

Indexes load once per process (:class:`IndexCache`) and are reloaded when a build swaps in a new one
(one ``stat`` of ``CURRENT`` per wiki, at most every ``recheck_seconds``, notices it).

**Freshness costs no walk of the sources.** A build records the mtime and listing of every source folder
it walked; the cache compares them (one ``stat`` per folder, at most every ``freshness_seconds``) and
warns that a wiki is stale when a markdown file was added, removed or renamed since its build. A page
edited in place does not change its folder: :func:`wikirag.retrieval.retrieve` checks the files of the
passages it returns (one ``stat`` each) against what the build read. The full comparison — every file,
with hashes — is :func:`wikirag.index.status`, for ``wikirag list``, ``check`` and the portal. The BM25
layers of a composition are merged once (:class:`Composed`, holding a :class:`~wikirag.bm25.MergedBM25`;
read from :mod:`wikirag.views` when a process saved it before) so a query scores all its wikis in one
pass; each wiki still ranks with its own statistics.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from . import sources, store, views
from .bm25 import MergedBM25
from .errors import IndexMissing
from .graph import ComposedGraph
from .store import LoadedIndex
from .wiki import Wiki

T = TypeVar("T")


class Composed:
    """The loaded indexes of one query's wikis, with their BM25 layers merged (built once, cached)."""

    def __init__(self, indexes: list[LoadedIndex], bm25: MergedBM25 | None = None):
        self.names = tuple(idx.wiki for idx in indexes)
        self.chunks = _Passages(indexes)  # wiki -> its passages, read when first asked for (lazy loads)
        self.bm25 = bm25 if bm25 is not None else MergedBM25([idx.bm25 for idx in indexes])
        self.indexes = indexes  # their link graphs are read when a query first needs them
        self._graphs: dict[tuple, ComposedGraph] = {}
        self._lock = threading.Lock()

    def graph(self, enabled: tuple[bool, ...], tags: tuple[bool, ...]) -> ComposedGraph:
        """The joined link graph for the wikis that opt in (cached per choice of wikis)."""
        key = (enabled, tags)
        with self._lock:
            if key not in self._graphs:
                self._graphs[key] = ComposedGraph(self.names, [idx.graph for idx in self.indexes], self.bm25.offsets,
                                                  enabled, tags)
            return self._graphs[key]


class _Passages(Mapping):
    """Wiki name -> the passages of its loaded index (:attr:`LoadedIndex.chunks`), asked for only when a
    query uses them: a lazily loaded index reads them then (:class:`wikirag.store.PassagesDamaged` if
    they are damaged)."""

    def __init__(self, indexes: list[LoadedIndex]):
        self._indexes = {idx.wiki: idx for idx in indexes}

    def __getitem__(self, wiki: str):
        return self._indexes[wiki].chunks

    def __iter__(self):
        return iter(self._indexes)

    def __len__(self) -> int:
        return len(self._indexes)


class IndexCache:
    """Loaded indexes (and merged views of them) shared by every query of a process. Thread-safe.

    A build in this process is seen by the next query. A build by another process (``wikirag build``
    while the app runs) is seen within ``recheck_seconds``: until then the previous, complete index
    keeps serving. Checking ``CURRENT`` at most that often keeps the per-wiki cost of a query low.
    """

    def __init__(self, max_views: int = 32, recheck_seconds: float = 0.5, freshness_seconds: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # pointer path -> (CURRENT's stat, build generation, checked at, index, warnings)
        self._entries: dict[str, tuple[tuple | None, int, float, LoadedIndex, list[str]]] = {}
        self._fresh_at: dict[str, float] = {}  # pointer path -> when its folders were last compared
        self._views: OrderedDict[tuple, Composed] = OrderedDict()
        self._serving: OrderedDict[tuple, tuple] = OrderedDict()  # see serving()
        self._early_views: dict[tuple, tuple] = {}  # saved views read by prefetch, for merged()
        self._damaged: dict[str, tuple[str, str]] = {}  # pointer path -> (build id, why): see damaged()
        self._max_views = max_views
        self.recheck_seconds = recheck_seconds
        self.freshness_seconds = freshness_seconds
        self._clock = clock  # seconds; a test passes its own to step through the recheck interval
        self._lock = threading.RLock()

    def get(self, wiki: Wiki, with_bm25: bool = False, lazy: bool = False) -> tuple[LoadedIndex, list[str]]:
        """The wiki's serving index and warnings about it (e.g. stale). Raises IndexMissing. ``with_bm25``:
        a new load reads its BM25 layer at once too; ``lazy``: its passages when first used
        (:func:`wikirag.store.load`).

        The build's recorded level is checked against ``wiki``'s level on every call, cached or not
        (:func:`wikirag.store.check_level`): lowering a wiki's level in ``.wiki.yaml`` does not touch
        ``CURRENT``, and its cached build must stop serving at once.
        """
        loaded, warnings = self._get(wiki, with_bm25, lazy)
        damaged = self._damaged.get(wiki.current_pointer)
        if damaged is not None and damaged[0] == loaded.build_id:
            raise IndexMissing(damaged[1])
        if loaded.level is None or loaded.level > wiki.level:  # (the level is parsed once per build)
            store.check_level(loaded.manifest, wiki)  # raises, saying why
        return loaded, warnings

    def _get(self, wiki: Wiki, with_bm25: bool = False, lazy: bool = False) -> tuple[LoadedIndex, list[str]]:
        pointer = wiki.current_pointer
        entry = self._entries.get(pointer)
        now = self._clock()
        if (entry is not None and entry[1] == store.build_generation
                and now - entry[2] < self.recheck_seconds):
            return entry[3], entry[4]
        try:
            st = os.stat(pointer)
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            key = None
        if entry is not None and key is not None and entry[0] == key:
            warnings = entry[4]
            if now - self._fresh_at.get(pointer, 0.0) >= self.freshness_seconds:
                warnings = self._freshness(wiki, entry[3], now)
            self._entries[pointer] = (key, store.build_generation, now, entry[3], warnings)
            return entry[3], warnings
        generation = store.build_generation
        loaded = store.load(wiki, with_bm25, lazy)  # not under the lock: several wikis load at once (see prefetch)
        warnings = self._freshness(wiki, loaded, now)
        with self._lock:
            self._entries[pointer] = (key, generation, now, loaded, warnings)
        return loaded, warnings

    def prefetch(self, wikis: Sequence[Wiki], home: Path | None = None) -> None:
        """Load the wikis that are not loaded yet, four or more: ``lazy`` (:func:`wikirag.store.load`), so
        their passages are read when a query first returns one (about 1 ms a wiki, not spent on the many
        a query returns none of); then their saved merged view from workspace ``home`` (looked up by the
        builds loaded; :meth:`merged` takes it). One after the other: what is left of a load is Python
        and small reads, which two threads only contend for (100 wikis: 0.25 s median to a new process's
        first answer after its imports in one thread, 0.32 s in two). Errors are left for :meth:`get` to
        raise."""
        missing = [w for w in wikis if w.current_pointer not in self._entries]
        if len(missing) < 4:
            return
        for wiki in missing:
            with contextlib.suppress(Exception):
                self._get(wiki, False, True)
        views_dir = views.folder_of(home) if home is not None else None
        if views_dir is None:
            return
        entries = [self._entries.get(w.current_pointer) for w in wikis]
        pairs = tuple((w.name, e[3].build_id if e is not None else store.current_build_id(w) or "")
                      for w, e in zip(wikis, entries))
        with contextlib.suppress(Exception):
            got = views.load(views_dir, pairs)
            if got is not None:
                with self._lock:
                    if len(self._early_views) >= 2:  # read but never asked for (a build swapped in)
                        self._early_views.clear()
                    self._early_views[pairs] = got

    def damaged(self, exc: store.PassagesDamaged, wiki: Wiki) -> None:
        """A lazily loaded build of ``wiki`` whose passages turned out damaged when a query first used
        them (``exc``): :meth:`get` raises for it from now on (until another build serves), and what
        queries derived from it is made again, so the query that found it can run again without it."""
        with self._lock:
            self._damaged[wiki.current_pointer] = (exc.build_id, str(exc))
            self._serving.clear()

    def _freshness(self, wiki: Wiki, loaded: LoadedIndex, now: float) -> list[str]:
        """A warning if files were added, removed or renamed in the wiki's source folders since its build."""
        self._fresh_at[wiki.current_pointer] = now
        try:
            changed = sources.folders_changed(wiki, loaded.folders)
        except IndexMissing as exc:
            return [str(exc)]
        if not changed:
            return []
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        return [(f"wiki '{wiki.name}' is stale (files were added, removed or renamed in {shown} since the build: "
                 f"run 'wikirag build {wiki.name}')")]

    def serving(self, wikis: tuple[Wiki, ...], make: Callable[[], T]) -> T:
        """``make()`` — what a query derives from :meth:`get` of each of these wikis — made again only
        when a build swapped in (in this process) or ``recheck_seconds`` passed, the window in which
        :meth:`get` would answer the same anyway. Keyed by the very wiki objects (a changed manifest is a
        new object), so a composition of 50 wikis costs one lookup per query, not 50."""
        key = tuple(map(id, wikis))
        now = self._clock()
        hit = self._serving.get(key)
        if (hit is not None and hit[0] == store.build_generation and now - hit[1] < self.recheck_seconds
                and (hit[2] is wikis or all(a is b for a, b in zip(hit[2], wikis)))):
            return hit[3]
        generation = store.build_generation
        value = make()
        with self._lock:
            self._serving[key] = (generation, now, wikis, value)
            self._serving.move_to_end(key)
            while len(self._serving) > self._max_views:
                self._serving.popitem(last=False)
        return value

    def merged(self, indexes: list[LoadedIndex], home: Path | None = None,
               key: tuple[str, ...] | None = None) -> tuple[Composed, list[str]]:
        """The merged view of these exact builds (cached; a new build makes a new view), and warnings
        about wikis left out of it (a damaged BM25 layer: the others still serve; IndexMissing if
        every one is damaged).

        With the workspace ``home``, a view of several wikis is read from its saved views if a process
        saved it before (:mod:`wikirag.views`), else merged from the wikis' layers and saved for the next.
        """
        key = key or tuple([idx.build_id for idx in indexes])  # (the build ids: a caller may know them)
        with self._lock:
            got = self._views.get(key)
            if got is None:
                got = self._views[key] = self._compose(indexes, views.folder_of(home) if home is not None else None)
                while len(self._views) > self._max_views:
                    self._views.popitem(last=False)
            else:
                self._views.move_to_end(key)
            return got

    def _compose(self, indexes: list[LoadedIndex], views_dir: Path | None) -> tuple[Composed, list[str]]:
        pairs = tuple((idx.wiki, idx.build_id) for idx in indexes)
        if views_dir is not None and len(indexes) > 1:
            saved = self._early_views.pop(pairs, None) or views.load(views_dir, pairs)
            if saved is not None:
                if saved[1] == [idx.passages for idx in indexes]:
                    return Composed(indexes, saved[0]), []
                views.discard(views_dir, pairs)  # not these builds' passages: made so
        kept, warnings = [], []
        for idx in indexes:
            try:  # read and checked now (the term frequencies too, to merge), so a damaged one is left out
                if len(indexes) > 1:
                    idx.bm25.tf  # noqa: B018
                else:
                    idx.bm25  # noqa: B018
                kept.append(idx)
            except IndexMissing as exc:
                warnings.append(str(exc))
        if not kept:
            raise IndexMissing("; ".join(warnings))
        composed = Composed(kept)
        if views_dir is not None and len(kept) > 1 and len(kept) == len(indexes):
            composed.bm25.global_data()  # what the view saves beyond the merge; queries need them anyway
            composed.bm25.term_runs()
            views.save_later(views_dir, [(*pair, idx.passages) for pair, idx in zip(pairs, indexes)], composed.bm25)
        return composed, warnings

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._fresh_at.clear()
            self._views.clear()
            self._serving.clear()
            self._early_views.clear()
            self._damaged.clear()


DEFAULT_CACHE = IndexCache()  # the process's cache, used when a query passes none
