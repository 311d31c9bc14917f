"""The dense layer of a wiki: chunk embeddings, kept with each build, searched exactly in-process.

A build embeds every passage (heading path + text, as BM25 indexes it) and saves the vectors with the
build (``dense/vectors.npy``, float32, one unit-length row per passage; ``dense/hashes.json``): plain
files, written atomically and checksummed with the rest of the build. Only new or changed passages are
embedded — the previous build's vectors are reused by content hash — and changing the model re-embeds
the wiki.

By default a query is an exact search in the process: the build's vectors file memory-mapped (its rows
are unit length, so there is nothing to normalise; one pass checks it when a build is first queried and
normalises a copy if a file's rows are not), a product with the query, ``argpartition`` for the top k
and a sort of those k (equal scores: lower chunk id first). This replaced ``QdrantClient(":memory:")``,
which is a brute-force scan too, in Python, re-normalising the whole stored matrix on every query: at
50,000 384-d vectors it took 10–13× as long as numpy on the same vectors (36.5 vs 2.6 ms on an idle
machine), where this search takes 1.0–1.06× numpy's time, with the same hits in the same order (Qdrant
only swaps, rarely, two scores equal within 1e-6: it re-normalises; ``bench/dense_bench.py``). Loading a build is a memory map and that one pass (~5 ms for 50,000
vectors) instead of an upload into the engine (~7 s). The vectors are shared through the page cache by
the processes that serve a wiki; a wiki's previous build is dropped when a new one is first queried.

With ``QDRANT_URL`` (and ``QDRANT_API_KEY``) set, queries go to that Qdrant server instead, one
collection per wiki build (``wikirag__<wiki>__<build id>``, filled from the vector file, the newest two
kept), through ``qdrant-client``, imported only then. Either way a build never needs an engine's storage
folder: ``wikirag build`` works while the app is running. A build uploads its collection when it is done
(:func:`upload`), so no query waits for it; a process that finds the collection missing or short of
points (another process is still uploading it, or the upload failed) uploads it itself — points are
written by id, so two uploads at once write the same points — and serves it only once it is complete.

**When the server is down** (refused, timed out after :data:`SERVER_TIMEOUT` s, or an HTTP error) a call
raises :class:`~wikirag.errors.DenseUnavailable` naming the server and what to check; the query then
searches those wikis with BM25 only and says so in its warnings, and for :data:`SERVER_RETRY` s the store
does not call the server again (every query of fifty users would otherwise wait for the timeout). A
build whose upload fails is still built: the first query after the server is back uploads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import embeddings
from .errors import DenseMismatch, DenseUnavailable
from .passage import Chunk

QDRANT_URL_ENV = "QDRANT_URL"
QDRANT_KEY_ENV = "QDRANT_API_KEY"
SERVER_TIMEOUT = 5      # seconds a call to the Qdrant server may take
SERVER_RETRY = 30.0     # seconds after a failed call during which the server is not called again
UPLOAD_BATCH = 8192     # vectors per upload call (a progress step)
VECTORS = "vectors.npy"
HASHES = "hashes.json"
_UNIT_TOLERANCE = 1e-5  # |‖v‖² − 1| up to which a vector counts as unit length (float32 rounding: ~5e-7)


def passage_text(chunk: Chunk) -> str:
    return f"{chunk.heading}\n{chunk.text}" if chunk.heading else chunk.text


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def _off_unit(vectors: np.ndarray) -> np.ndarray:
    """Row indices of ``vectors`` that are neither unit length nor zero (zero rows score 0, as in Qdrant)."""
    squared = np.einsum("ij,ij->i", vectors, vectors)
    return np.flatnonzero(~((np.abs(squared - 1) <= _UNIT_TOLERANCE) | (squared == 0)))


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` with every row of length 1 (zero and non-finite rows become zero rows).

    Returns ``vectors`` itself when its rows already are (what the embedders return), else a normalised
    float32 copy; rows already of unit length keep their exact values."""
    bad = _off_unit(vectors)
    if not len(bad):
        return vectors
    out = np.array(vectors, dtype=np.float32)
    rows = out[bad].astype(np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    ok = np.isfinite(norms) & (norms > 0)
    out[bad] = np.where(ok, rows / np.where(ok, norms, 1.0), 0.0).astype(np.float32)
    return out


@dataclass(frozen=True)
class DenseInfo:
    """What the index manifest records about a build's dense layer."""

    model: str
    model_id: str
    dim: int
    api_base: str | None
    embedded: int
    reused: int
    seconds: float

    @classmethod
    def from_manifest(cls, data: dict | None) -> DenseInfo | None:
        return cls(**data) if data else None


def build_layer(folder: Path, chunks: list[Chunk], model: str, api_base: str | None,
                sources: list[Path] = (), progress: Callable[[int, int], None] | None = None) -> DenseInfo:
    """Embed ``chunks`` into ``folder`` (``dense/`` of a build in progress), reusing the vectors of
    passages with the same text and model from ``sources`` (earlier builds' ``dense/`` folders).

    The vectors file holds unit-length rows (float32, one per passage), so a query is one product."""
    started = time.perf_counter()
    texts = [passage_text(c) for c in chunks]
    hashes = [_hash(t) for t in texts]
    reuse: dict[str, np.ndarray] = {}
    for source in sources:
        if (source / HASHES).is_file():
            meta = json.loads((source / HASHES).read_text())
            if meta.get("model") == model:
                old = np.load(source / VECTORS, mmap_mode="r")
                reuse.update({h: old[i] for i, h in enumerate(meta["hashes"])})
    todo = [i for i, h in enumerate(hashes) if h not in reuse]
    embedder = embeddings.get(model, api_base)
    fresh = embedder.embed([texts[i] for i in todo], progress=progress) if todo else None
    dim = fresh.shape[1] if fresh is not None else len(next(iter(reuse.values())))
    vectors = np.empty((len(chunks), dim), dtype=np.float32)
    for row, i in enumerate(todo):
        vectors[i] = fresh[row]
    for i, h in enumerate(hashes):
        if h in reuse:
            vectors[i] = reuse[h]
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / VECTORS, unit_rows(vectors))
    (folder / HASHES).write_text(json.dumps({"model": model, "hashes": hashes}))
    return DenseInfo(model, embedder.model_id, dim, api_base, len(todo), len(chunks) - len(todo),
                     round(time.perf_counter() - started, 3))


def load_vectors(path: Path, dim: int) -> np.ndarray:
    """A build's vectors as a read-only matrix of unit rows: the file memory-mapped (its rows are unit
    length, as :func:`build_layer` writes them), or — for a file whose rows are not — a normalised copy."""
    mapped = np.load(path, mmap_mode="r")
    if mapped.ndim != 2 or mapped.shape[1] != dim or mapped.dtype != np.float32:
        raise DenseMismatch(f"the dense layer's vectors file holds a {mapped.dtype} array of shape "
                            f"{mapped.shape}, not {dim}-dimensional float32 rows: rebuild the wiki")
    vectors = unit_rows(mapped.view(np.ndarray))  # one pass over the file, which also warms the page cache
    vectors.flags.writeable = False
    return vectors


def top_k(vectors: np.ndarray, query: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosine search: the ids and scores of the ``limit`` rows of ``vectors`` (unit rows) nearest to
    ``query``, best first; equal scores in ascending id order."""
    query = np.asarray(query, dtype=np.float32)
    squared = float(query @ query)
    if not np.isfinite(squared):
        raise ValueError("the query vector is not finite")
    if squared > 0 and abs(squared - 1) > _UNIT_TOLERANCE:  # the embedders' vectors are unit already
        query = query / np.float32(np.sqrt(squared))
    scores = vectors @ query
    n = len(scores)
    k = max(0, min(int(limit), n))
    if k == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    if k < n:
        best = np.argpartition(scores, n - k)[n - k:]  # the k highest, in no order
        kth = scores[best].min()
        if np.count_nonzero(scores[best] == kth) != np.count_nonzero(scores == kth):
            # the k-th score is shared with rows left out: keep the lowest ids among the tied rows
            above = best[scores[best] > kth]
            best = np.concatenate([above, np.flatnonzero(scores == kth)[:k - len(above)]])
    else:
        best = np.arange(n)
    ids = best[np.lexsort((best, -scores[best]))]
    return ids.astype(np.int64), scores[ids].astype(np.float64)


@dataclass(frozen=True)
class _Loaded:
    """A wiki's build as the store serves it; replaced whole (never changed) when a new build is ensured."""

    build_id: str
    collection: str
    model_id: str
    dim: int
    vectors: np.ndarray | None  # embedded: the build's unit rows; None with a Qdrant server


class DenseStore:
    """The dense layer of every wiki a process queries: one build per wiki, searched exactly in-process
    (numpy over the build's memory-mapped vectors) or, with ``url``, a Qdrant server (a collection per
    build, filled from the build's vectors). Thread-safe: searches take no lock and keep the build they
    started on, while :meth:`ensure` swaps in a new one."""

    def __init__(self, url: str | None = None, api_key: str | None = None):
        self.url = url
        self.client = None
        if url:
            from qdrant_client import QdrantClient  # imported only for a server

            self.client = QdrantClient(url=url, api_key=api_key, timeout=SERVER_TIMEOUT, check_compatibility=False)
        self._down: tuple[float, str] | None = None  # (until when, why): the server failed, not called again
        self._ready: dict[str, _Loaded] = {}
        self._previous: dict[str, _Loaded] = {}  # the build each wiki served before: a query may still be on it
        self._lock = threading.Lock()

    def _call(self, what: str, fn: Callable, *args, **kwargs):
        """``fn(*args, **kwargs)`` on the server, its failure a :class:`DenseUnavailable` that says which
        server and what to do; while the server is marked down (:data:`SERVER_RETRY`), not called at all."""
        from qdrant_client.http.exceptions import ApiException

        down = self._down
        if down is not None and time.monotonic() < down[0]:
            raise DenseUnavailable(down[1])
        try:
            out = fn(*args, **kwargs)
        except (ApiException, OSError, TimeoutError) as exc:
            server = re.sub(r"//[^/@]*@", "//", self.url or "")  # never a password written in the URL
            why = f"the Qdrant server at {server} failed ({what}: {exc}); retried after {SERVER_RETRY:.0f} s. " \
                  f"Check that it is running and QDRANT_URL / QDRANT_API_KEY, or unset QDRANT_URL to search in-process"
            self._down = (time.monotonic() + SERVER_RETRY, why)
            raise DenseUnavailable(why) from exc
        self._down = None
        return out

    @staticmethod
    def collection_name(wiki: str, build_id: str) -> str:
        return f"wikirag__{wiki}__{build_id}"

    def ensure(self, wiki: str, build_id: str, folder: Path, info: DenseInfo,
               progress: Callable[[str, int, int], None] | None = None) -> str:
        """Make sure ``wiki``'s build ``build_id`` (vectors in ``folder``) is served; drop its previous one.
        Returns the build's collection name (on a server, the collection holding it). ``progress(stage,
        done, total)``: the upload to a server, by batches."""
        name = self.collection_name(wiki, build_id)
        current = self._ready.get(wiki)
        if current is not None and current.build_id == build_id:
            return name
        with self._lock:
            current = self._ready.get(wiki)
            if current is not None and current.build_id == build_id:
                return name
            if current is not None:
                self._previous[wiki] = current
            if self.client is None:
                # the build before the previous one goes now (searches under way keep their reference)
                self._ready[wiki] = _Loaded(build_id, name, info.model_id, info.dim,
                                            load_vectors(folder / VECTORS, info.dim))
            else:
                self._fill_collection(name, folder, info, progress)
                self._drop_old(wiki, name)
                self._ready[wiki] = _Loaded(build_id, name, info.model_id, info.dim, None)
        return name

    def _fill_collection(self, name: str, folder: Path, info: DenseInfo,
                         progress: Callable[[str, int, int], None] | None = None) -> None:
        """Create and fill the build's collection unless it holds every point already. Another process may
        be doing the same at once: a create that finds it made meanwhile is fine, and points are written by
        id (the same vectors), so the collection is served only once its count is complete."""
        from qdrant_client import models

        vectors = np.load(folder / VECTORS, mmap_mode="r")
        if not self._call("collection_exists", self.client.collection_exists, name):
            try:
                self._call("create_collection", self.client.create_collection, name,
                           vectors_config=models.VectorParams(size=info.dim, distance=models.Distance.COSINE))
            except DenseUnavailable:
                self._down = None  # another process may have created it between the two calls
                if not self._call("collection_exists", self.client.collection_exists, name):
                    raise
        total = len(vectors)
        if total and self._call("count", self.client.count, name, exact=True).count != total:
            for start in range(0, total, UPLOAD_BATCH):
                end = min(start + UPLOAD_BATCH, total)
                self._call("upload_collection", self.client.upload_collection, name,
                           vectors=np.asarray(vectors[start:end]), ids=range(start, end), batch_size=1024, wait=True)
                if progress is not None:
                    progress("uploading", end, total)

    def _drop_old(self, wiki: str, current: str) -> None:
        """On a server, shared with other processes that may still read the previous build: keep the
        wiki's newest two collections (build ids sort by time), drop the older ones."""
        prefix = f"wikirag__{wiki}__"
        names = sorted(c.name for c in self._call("get_collections", self.client.get_collections).collections
                       if c.name.startswith(prefix))
        keep = {current, *names[-2:]}
        for name in names:
            if name not in keep:
                self._call("delete_collection", self.client.delete_collection, name)

    def _served(self, wiki: str, build_id: str | None) -> _Loaded:
        loaded = self._ready[wiki]
        if build_id is not None and loaded.build_id != build_id:
            loaded = self._previous.get(wiki)
            if loaded is None or loaded.build_id != build_id:
                raise KeyError(f"build {build_id} of wiki '{wiki}' is no longer served: search again")
        return loaded

    def similarity(self, wiki: str, vector: np.ndarray, ids: np.ndarray, build_id: str | None = None) -> np.ndarray:
        """The cosine of ``vector`` with passages ``ids`` of ``wiki``'s build (see :meth:`search`): rows of
        the memory-mapped vectors, or the points' vectors from the server."""
        loaded = self._served(wiki, build_id)
        ids = np.asarray(ids, dtype=np.int64)
        if loaded.vectors is not None:
            return (loaded.vectors[ids] @ np.asarray(vector, dtype=np.float32)).astype(np.float64)
        points = {p.id: p.vector for p in self._call("retrieve", self.client.retrieve, loaded.collection,
                                                     ids=ids.tolist(), with_vectors=True)}
        rows = np.array([points[int(i)] for i in ids], dtype=np.float32).reshape(len(ids), loaded.dim)
        return (unit_rows(rows) @ np.asarray(vector, dtype=np.float32)).astype(np.float64)

    def search(self, wiki: str, vector: np.ndarray, model_id: str, limit: int,
               build_id: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Chunk ids and cosine scores of the ``limit`` nearest passages of ``wiki``'s loaded build, best
        first (equal scores: lower chunk id first, embedded). With ``build_id``, of exactly that build — the
        one whose passages the caller holds — even if another thread has since ensured a newer one (the
        store keeps one previous build per wiki); :class:`KeyError` if it is neither."""
        loaded = self._served(wiki, build_id)
        if model_id != loaded.model_id or len(vector) != loaded.dim:
            raise DenseMismatch(
                f"the dense layer of wiki '{wiki}' was built with {loaded.model_id} ({loaded.dim} dimensions); "
                f"a query embedded with {model_id} ({len(vector)} dimensions) cannot search it: use the same "
                f"model, or rebuild the wiki with 'wikirag build {wiki}'")
        if loaded.vectors is not None:
            return top_k(loaded.vectors, vector, limit)
        points = self._call("query_points", self.client.query_points, loaded.collection,
                            query=np.asarray(vector).tolist(), limit=limit, with_payload=False).points
        return (np.array([p.id for p in points], dtype=np.int64),
                np.array([p.score for p in points], dtype=np.float64))


def upload(wiki: str, build_id: str, folder: Path, info: dict | None,
           progress: Callable[[str, int, int], None] | None = None) -> list[str]:
    """After a build: with ``QDRANT_URL`` set and a dense layer built, fill the build's collection on the
    server now, so that no query waits for it. The warnings (none if it worked or there is no server): a
    server that fails leaves the build built, and the first query after it is back uploads it."""
    if not info or not os.environ.get(QDRANT_URL_ENV):
        return []
    try:
        store().ensure(wiki, build_id, folder, DenseInfo.from_manifest(info), progress)
    except DenseUnavailable as exc:
        return [(f"dense layer not uploaded: {exc}. The build serves BM25 at once; the first query after the "
                 "server is back uploads the vectors")]
    return []


_STORE: DenseStore | None = None
_STORE_LOCK = threading.Lock()


def store() -> DenseStore:
    """The process's store: a Qdrant server if ``QDRANT_URL`` is set, else exact search in-process."""
    global _STORE
    with _STORE_LOCK:
        if _STORE is None:
            _STORE = DenseStore(os.environ.get(QDRANT_URL_ENV) or None, os.environ.get(QDRANT_KEY_ENV) or None)
        return _STORE
