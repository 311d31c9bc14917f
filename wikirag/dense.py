"""The dense layer of a wiki: chunk embeddings, kept with each build and served by Qdrant.

A build embeds every passage (heading path + text, as BM25 indexes it) and saves the vectors with the
build (``dense/vectors.npy``, ``dense/hashes.json``): plain files, written atomically with the rest of
the build. Only new or changed passages are embedded — the previous build's vectors are reused by
content hash — and changing the model re-embeds the wiki.

Queries go through ``qdrant-client``, one collection per wiki build: the embedded engine in memory by
default (``QdrantClient(":memory:")``, filled from the vector file when a build is first queried), or a
Qdrant server when ``QDRANT_URL`` (and ``QDRANT_API_KEY``) is set — the same calls either way. Keeping
the vectors in plain files means a build never needs the engine's storage folder, which embedded Qdrant
lets only one process open: ``wikirag build`` works while the app is running, and loading 10k vectors
takes about a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import embeddings
from .errors import DenseMismatch
from .passage import Chunk

QDRANT_URL_ENV = "QDRANT_URL"
QDRANT_KEY_ENV = "QDRANT_API_KEY"
VECTORS = "vectors.npy"
HASHES = "hashes.json"


def passage_text(chunk: Chunk) -> str:
    return f"{chunk.heading}\n{chunk.text}" if chunk.heading else chunk.text


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


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
    passages with the same text and model from ``sources`` (earlier builds' ``dense/`` folders)."""
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
    np.save(folder / VECTORS, vectors)
    (folder / HASHES).write_text(json.dumps({"model": model, "hashes": hashes}))
    return DenseInfo(model, embedder.model_id, dim, api_base, len(todo), len(chunks) - len(todo),
                     round(time.perf_counter() - started, 3))


class DenseStore:
    """One Qdrant client per process; a collection per (wiki, build), filled from the build's vectors."""

    def __init__(self, url: str | None = None, api_key: str | None = None):
        from qdrant_client import QdrantClient

        self.url = url
        self.client = QdrantClient(url=url, api_key=api_key) if url else QdrantClient(":memory:")
        self._ready: dict[str, tuple[str, str, int]] = {}  # wiki -> (collection, model id, dim)
        self._lock = threading.Lock()

    @staticmethod
    def collection_name(wiki: str, build_id: str) -> str:
        return f"wikirag__{wiki}__{build_id}"

    def ensure(self, wiki: str, build_id: str, folder: Path, info: DenseInfo) -> str:
        """Make sure the build's vectors are in Qdrant; drop this wiki's older collection."""
        from qdrant_client import models

        name = self.collection_name(wiki, build_id)
        current = self._ready.get(wiki)
        if current is not None and current[0] == name:
            return name
        with self._lock:
            if not self.client.collection_exists(name):
                vectors = np.load(folder / VECTORS)
                self.client.create_collection(
                    name, vectors_config=models.VectorParams(size=info.dim, distance=models.Distance.COSINE))
                if len(vectors):
                    self.client.upload_collection(name, vectors=vectors, ids=range(len(vectors)), batch_size=1024)
            self._drop_old(wiki, name)
            self._ready[wiki] = (name, info.model_id, info.dim)
        return name

    def _drop_old(self, wiki: str, current: str) -> None:
        """In memory: drop the wiki's previous collection. On a server, shared with other processes that
        may still read the previous build: keep the newest two (build ids sort by time)."""
        prefix = f"wikirag__{wiki}__"
        names = sorted(c.name for c in self.client.get_collections().collections if c.name.startswith(prefix))
        keep = {current} if self.url is None else {current, *names[-2:]}
        for name in names:
            if name not in keep:
                self.client.delete_collection(name)

    def search(self, wiki: str, vector: np.ndarray, model_id: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """Chunk ids and cosine scores of the ``limit`` nearest passages of ``wiki``'s loaded build."""
        name, built_with, dim = self._ready[wiki]
        if model_id != built_with or len(vector) != dim:
            raise DenseMismatch(
                f"the dense layer of wiki '{wiki}' was built with {built_with} ({dim} dimensions); a query "
                f"embedded with {model_id} ({len(vector)} dimensions) cannot search it: use the same model, "
                f"or rebuild the wiki with 'wikirag build {wiki}'")
        points = self.client.query_points(name, query=vector.tolist(), limit=limit, with_payload=False).points
        return (np.array([p.id for p in points], dtype=np.int64),
                np.array([p.score for p in points], dtype=np.float64))


_STORE: DenseStore | None = None
_STORE_LOCK = threading.Lock()


def store() -> DenseStore:
    """The process's store: a Qdrant server if ``QDRANT_URL`` is set, else embedded in memory."""
    global _STORE
    with _STORE_LOCK:
        if _STORE is None:
            _STORE = DenseStore(os.environ.get(QDRANT_URL_ENV) or None, os.environ.get(QDRANT_KEY_ENV) or None)
        return _STORE
