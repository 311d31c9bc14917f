"""The BM25 layer: ``bm25s`` indexes per wiki, and one merged view of several for fast queries.

Each wiki's index is built and saved by ``bm25s`` (Lucene BM25, k1 = 1.5, b = 0.75) on its own, so its
scores use its own statistics. Beside bm25s's files a build saves each posting's term frequency
(``tf.npy``, aligned with bm25s's postings) and each chunk's length in tokens (``doc_lengths.npy``):
compact statistics from which BM25 can be recomputed with corpus-wide statistics.

At query time the loaded layers of a composition are merged in memory (:class:`MergedBM25`, built
once per composition) so that one pass over the postings scores every wiki. Two scorings:

* ``local``: each wiki's own BM25 scores (its own IDF and average length) — exactly what searching
  each wiki alone gives;
* ``global``: BM25 with the composition's statistics (document count, document frequencies, average
  length summed over its wikis, as a distributed engine's DFS phase gathers them) — exactly the
  scores one index over all the wikis would give, without building one.

Either way each wiki contributes its own top-N list. :func:`tokenize` is used for passages and queries
alike: lower-case, ``\\w\\w+`` words, bm25s's English stopwords removed, PyStemmer's English stemmer.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

TOKENIZER = {"lower": True, "token_pattern": r"(?u)\b\w\w+\b", "stopwords": "bm25s-en", "stemmer": "english"}
BM25_PARAMS = {"method": "lucene", "k1": 1.5, "b": 0.75}
SCORINGS = ("local", "global")

_split = re.compile(TOKENIZER["token_pattern"]).findall
_STOPWORDS = frozenset(STOPWORDS_EN)
_local = threading.local()  # PyStemmer objects are not thread-safe: one per thread


def _stem(words: list[str]) -> list[str]:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer(TOKENIZER["stemmer"])
    return stemmer.stemWords(words)


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """One list of stemmed, stopword-free tokens per text."""
    return [_stem([w for w in _split(text.lower()) if w not in _STOPWORDS]) for text in texts]


def idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """Lucene's IDF, as bm25s computes it."""
    return np.log(1 + (n_docs - df + 0.5) / (df + 0.5))


class BM25Layer:
    """One wiki's BM25 index: per term, the postings (chunk ids), their precomputed BM25 scores and
    term frequencies (CSC arrays), plus each chunk's length. Read-only once built."""

    def __init__(self, vocab: dict[str, int], data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                 tf: np.ndarray, doc_len: np.ndarray):
        self.vocab, self.data, self.indices, self.indptr = vocab, data, indices, indptr
        self.tf, self.doc_len = tf, doc_len
        self.num_docs = len(doc_len)

    @classmethod
    def build(cls, token_lists: list[list[str]], folder: Path) -> BM25Layer:
        """Index ``token_lists`` (one per chunk) and save the files into ``folder``."""
        retriever = bm25s.BM25(**BM25_PARAMS)
        retriever.index(token_lists, show_progress=False)
        retriever.save(str(folder), show_progress=False)
        s, vocab = retriever.scores, retriever.vocab_dict
        # term frequency of every (term, chunk) posting, in bm25s's posting order
        ids = np.fromiter((vocab[t] for doc in token_lists for t in doc), dtype=np.int64)
        docs = np.repeat(np.arange(len(token_lists)), [len(doc) for doc in token_lists])
        keys, counts = np.unique(ids * len(token_lists) + docs, return_counts=True)
        terms = np.repeat(np.arange(len(s["indptr"]) - 1), np.diff(s["indptr"]))
        posting_keys = terms * len(token_lists) + s["indices"].astype(np.int64)
        tf = counts[np.searchsorted(keys, posting_keys)].astype(np.float32)
        doc_len = np.array([len(doc) for doc in token_lists], dtype=np.float32)
        np.save(folder / "tf.npy", tf)
        np.save(folder / "doc_lengths.npy", doc_len)
        return cls._from_bm25s(retriever, tf, doc_len)

    @classmethod
    def _from_bm25s(cls, retriever: bm25s.BM25, tf: np.ndarray, doc_len: np.ndarray) -> BM25Layer:
        s = retriever.scores
        vocab = {t: i for t, i in retriever.vocab_dict.items() if t}  # bm25s adds "" for empty docs
        return cls(vocab, s["data"], s["indices"], s["indptr"], tf, doc_len)

    @classmethod
    def load(cls, folder: Path) -> BM25Layer:
        retriever = bm25s.BM25.load(str(folder), show_progress=False, verbosity=0)
        return cls._from_bm25s(retriever, np.load(folder / "tf.npy"), np.load(folder / "doc_lengths.npy"))


@dataclass(frozen=True)
class LayerHits:
    """Each wiki's top-N for one query, as parallel arrays grouped by wiki, best first within a wiki."""

    wiki: np.ndarray   # index of the wiki in the merged view
    chunk: np.ndarray  # chunk id within that wiki
    rank: np.ndarray   # 1-based rank within the wiki
    score: np.ndarray  # BM25 score (local or global statistics)


class MergedBM25:
    """Several wikis' BM25 layers side by side in one matrix (doc ids offset per wiki). Read-only."""

    def __init__(self, layers: Sequence[BM25Layer]):
        self.offsets = np.cumsum([0] + [layer.num_docs for layer in layers])
        self.num_docs = int(self.offsets[-1])
        self.doc_len = np.concatenate([layer.doc_len for layer in layers])
        self.wiki_tokens = np.array([layer.doc_len.sum() for layer in layers], dtype=np.float64)
        if len(layers) == 1:  # nothing to merge: share the arrays
            only = layers[0]
            self.vocab, self.data, self.indices, self.indptr, self.tf = (
                only.vocab, only.data, only.indices, only.indptr, only.tf)
        else:
            self._merge(layers)
        k1, b = BM25_PARAMS["k1"], BM25_PARAMS["b"]
        avg_len = float(self.doc_len.mean()) if self.num_docs else 1.0
        self._length_norm = (k1 * (1 - b + b * self.doc_len / avg_len)).astype(np.float32)
        self._global_idf = idf(np.diff(self.indptr), self.num_docs).astype(np.float32)

    def _merge(self, layers: Sequence[BM25Layer]) -> None:
        vocab: dict[str, int] = {}
        cols, docs, datas, tfs = [], [], [], []
        for layer, offset in zip(layers, self.offsets[:-1]):
            local_to_global = np.empty(max(layer.vocab.values(), default=-1) + 2, dtype=np.int64)
            for term, local in layer.vocab.items():
                local_to_global[local] = vocab.setdefault(term, len(vocab))
            counts = np.diff(layer.indptr)
            keep = counts > 0
            terms = np.repeat(np.arange(len(counts))[keep], counts[keep])
            cols.append(local_to_global[terms])
            docs.append(layer.indices.astype(np.int64) + offset)
            datas.append(layer.data)
            tfs.append(layer.tf)
        col = np.concatenate(cols)
        order = np.argsort(col, kind="stable")
        self.vocab = vocab
        self.indices = np.concatenate(docs)[order]
        self.data = np.concatenate(datas)[order]
        self.tf = np.concatenate(tfs)[order]
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(col, minlength=len(vocab)))])

    def columns(self, tokens: list[str]) -> list[int]:
        """The merged vocabulary columns of the query tokens found in any wiki (repeats kept)."""
        return [self.vocab[t] for t in tokens if t in self.vocab]

    def scores(self, cols: list[int], scoring: str = "local") -> np.ndarray:
        """BM25 score of every document for these query columns, with local or global statistics."""
        scores = np.zeros(self.num_docs, dtype=np.float32)
        for col in cols:  # a term's postings hold each document once: plain fancy-index add is exact
            start, end = self.indptr[col], self.indptr[col + 1]
            docs = self.indices[start:end]
            if scoring == "global":
                tf = self.tf[start:end]
                scores[docs] += self._global_idf[col] * tf / (tf + self._length_norm[docs])
            else:
                scores[docs] += self.data[start:end]
        return scores

    def term_counts(self, cols: list[int]) -> np.ndarray:
        """Occurrences of each query column in each wiki: an array of shape (len(cols), wikis)."""
        counts = np.zeros((len(cols), len(self.offsets) - 1), dtype=np.float64)
        for i, col in enumerate(cols):
            start, end = self.indptr[col], self.indptr[col + 1]
            wiki = np.searchsorted(self.offsets, self.indices[start:end], side="right") - 1
            counts[i] = np.bincount(wiki, weights=self.tf[start:end], minlength=len(self.offsets) - 1)
        return counts

    def search_columns(self, cols: list[int], depth: int, scoring: str = "local") -> LayerHits:
        """Score every document once for query columns looked up with :meth:`columns`, then keep each
        wiki's own top ``depth`` (ties: lower chunk id)."""
        if not cols or depth <= 0:
            empty = np.empty(0, dtype=np.int64)
            return LayerHits(empty, empty, empty, np.empty(0, dtype=np.float32))
        return self.top_per_wiki(self.scores(cols, scoring), depth)

    def top_per_wiki(self, scores: np.ndarray, depth: int) -> LayerHits:
        """Each wiki's top ``depth`` documents with a non-zero score, grouped by wiki, best first."""
        docs = np.flatnonzero(scores)  # sorted by doc id, hence grouped by wiki
        bounds = np.searchsorted(docs, self.offsets)
        crowded = np.flatnonzero(np.diff(bounds) > depth)
        if len(crowded):  # keep only the top `depth` of each wiki that has more hits than that
            keep = np.ones(len(docs), dtype=bool)
            for w in crowded.tolist():
                lo, hi = bounds[w], bounds[w + 1]
                keep[lo:hi] = False
                keep[lo + np.argpartition(-scores[docs[lo:hi]], depth - 1)[:depth]] = True
            docs = docs[keep]
        wiki = np.searchsorted(self.offsets, docs, side="right") - 1
        top_scores = scores[docs]
        order = np.lexsort((docs, -top_scores, wiki))
        docs, wiki, top_scores = docs[order], wiki[order], top_scores[order]
        starts = np.searchsorted(wiki, np.arange(len(self.offsets) - 1))
        rank = np.arange(len(docs)) - starts[wiki] + 1
        return LayerHits(wiki, docs - self.offsets[wiki], rank, top_scores)
