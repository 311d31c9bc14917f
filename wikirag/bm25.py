"""The BM25 layer: ``bm25s`` indexes per wiki, and one merged view of several for fast queries.

Each wiki's index is built and saved by ``bm25s`` (Lucene BM25, k1 = 1.5, b = 0.75) on its own, so its
scores use its own statistics. At query time the loaded layers of a composition are merged in memory
(:class:`MergedBM25`: the same per-wiki scores, concatenated) so that one pass over the postings
scores every wiki and each wiki's own top-N is taken from its own slice. The result is exactly what
searching each wiki separately gives, without a fixed cost per wiki per query.

:func:`tokenize` is used for passages and queries alike: lower-case, ``\\w\\w+`` words, bm25s's English
stopwords removed, PyStemmer's English stemmer. The settings are recorded in each index manifest.
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


class BM25Layer:
    """One wiki's BM25 index: a term → postings matrix of precomputed BM25 scores (CSC arrays)."""

    def __init__(self, vocab: dict[str, int], data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                 num_docs: int):
        self.vocab, self.data, self.indices, self.indptr = vocab, data, indices, indptr
        self.num_docs = num_docs

    @classmethod
    def _from_bm25s(cls, retriever: bm25s.BM25) -> BM25Layer:
        s = retriever.scores
        vocab = {t: i for t, i in retriever.vocab_dict.items() if t}  # bm25s adds "" for empty docs
        return cls(vocab, s["data"], s["indices"], s["indptr"], int(s["num_docs"]))

    @classmethod
    def build(cls, token_lists: list[list[str]], folder: Path) -> BM25Layer:
        """Index ``token_lists`` (one per chunk) and save the bm25s files into ``folder``."""
        retriever = bm25s.BM25(**BM25_PARAMS)
        retriever.index(token_lists, show_progress=False)
        retriever.save(str(folder), show_progress=False)
        return cls._from_bm25s(retriever)

    @classmethod
    def load(cls, folder: Path) -> BM25Layer:
        return cls._from_bm25s(bm25s.BM25.load(str(folder), show_progress=False, verbosity=0))


@dataclass(frozen=True)
class LayerHits:
    """Each wiki's top-N for one query, as parallel arrays grouped by wiki, best first within a wiki."""

    wiki: np.ndarray   # index of the wiki in the merged view
    chunk: np.ndarray  # chunk id within that wiki
    rank: np.ndarray   # 1-based rank within the wiki
    score: np.ndarray  # the wiki's own BM25 score


class MergedBM25:
    """Several wikis' BM25 layers side by side in one matrix (doc ids offset per wiki). Read-only."""

    def __init__(self, layers: Sequence[BM25Layer]):
        self.offsets = np.cumsum([0] + [layer.num_docs for layer in layers])
        self.num_docs = int(self.offsets[-1])
        if len(layers) == 1:  # nothing to merge: share the arrays
            only = layers[0]
            self.vocab, self.data, self.indices, self.indptr = only.vocab, only.data, only.indices, only.indptr
            return
        vocab: dict[str, int] = {}
        cols, docs, datas = [], [], []
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
        col = np.concatenate(cols)
        order = np.argsort(col, kind="stable")
        self.vocab = vocab
        self.indices = np.concatenate(docs)[order]
        self.data = np.concatenate(datas)[order]
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(col, minlength=len(vocab)))])

    def search(self, tokens: list[str], depth: int) -> LayerHits:
        """Score every document once, then keep each wiki's own top ``depth`` (ties: lower chunk id)."""
        cols = [self.vocab[t] for t in tokens if t in self.vocab]
        if not cols or depth <= 0:
            empty = np.empty(0, dtype=np.int64)
            return LayerHits(empty, empty, empty, np.empty(0, dtype=np.float32))
        scores = np.zeros(self.num_docs, dtype=np.float32)
        for col in cols:  # a term's postings hold each document once: plain fancy-index add is exact
            start, end = self.indptr[col], self.indptr[col + 1]
            scores[self.indices[start:end]] += self.data[start:end]
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
