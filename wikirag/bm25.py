"""The BM25 layer: ``bm25s`` indexes per wiki, and one merged view of several for fast queries.

Each wiki's index is built and saved by ``bm25s`` (Lucene BM25, k1 = 1.5, b = 0.75) on its own, so its
scores use its own statistics. Beside bm25s's files a build saves each posting's term frequency
(``tf.npy``, aligned with bm25s's postings) and each chunk's length in tokens (``doc_lengths.npy``):
compact statistics from which BM25 can be recomputed with corpus-wide statistics.

At query time the loaded layers of a composition are merged (:class:`MergedBM25`, built once per set of
builds and saved for later processes by :mod:`wikirag.views`) so that one pass over the postings
scores every wiki. Two scorings:

* ``local``: each wiki's own BM25 scores (its own IDF and average length) — exactly what searching
  each wiki alone gives;
* ``global``: BM25 with the composition's statistics (document count, document frequencies, average
  length summed over its wikis, as a distributed engine's DFS phase gathers them) — exactly the
  scores one index over all the wikis would give, without building one.

Either way each wiki contributes its own top-N list (:meth:`MergedBM25.top_per_wiki`); a fusion that is
linear in the score takes the top k of all passages at once instead, which is the same
(:meth:`MergedBM25.top_overall`). :func:`tokenize` is used for passages and queries
alike: lower-case, ``\\w\\w+`` words, bm25s's English stopwords removed, PyStemmer's English stemmer.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import Stemmer

from . import checked


def _bm25s_stopwords() -> tuple[str, ...]:
    """bm25s's English stopwords, read from its ``stopwords`` module without importing the bm25s package
    (whose ``__init__`` imports scipy: 0.2 s of every start, for a tuple of words)."""
    import importlib.util
    import sys

    if "bm25s" in sys.modules:
        from bm25s.stopwords import STOPWORDS_EN

        return STOPWORDS_EN
    package = importlib.util.find_spec("bm25s")
    if package is None or not package.submodule_search_locations:
        from bm25s.stopwords import STOPWORDS_EN  # raises the usual ImportError

        return STOPWORDS_EN
    path = Path(next(iter(package.submodule_search_locations))) / "stopwords.py"
    spec = importlib.util.spec_from_file_location("_wikirag_bm25s_stopwords", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.STOPWORDS_EN


TOKENIZER = {"lower": True, "token_pattern": r"(?u)\b\w\w+\b", "stopwords": "bm25s-en", "stemmer": "english",
             "mnemonics": "unbracketed"}  # tldr-pages' "E[x]tract", "g[z]ipped" read as "Extract", "gzipped"
BM25_PARAMS = {"method": "lucene", "k1": 1.5, "b": 0.75}
SCORINGS = ("local", "global")

_split = re.compile(TOKENIZER["token_pattern"]).findall
_MNEMONIC = re.compile(r"(?<=\w)\[([a-z]{1,2})\]|\[([a-z]{1,2})\](?=\w)")  # a bracketed letter or two in a word (lowercased)
_STOPWORDS = frozenset(_bm25s_stopwords())
_local = threading.local()  # PyStemmer objects are not thread-safe: one per thread


def _stem(words: list[str]) -> list[str]:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer(TOKENIZER["stemmer"])
    return stemmer.stemWords(words)


_STEMS_KEPT = 500_000  # words whose stem (None: a stopword) a thread remembers, then starts again


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """One list of stemmed, stopword-free tokens per text. Each distinct word is looked up once per
    thread (its stem, or None for a stopword): a build tokenises a million passages, mostly of words it
    has seen (a third faster than stemming every word)."""
    stems = getattr(_local, "stems", None)
    if stems is None or len(stems) > _STEMS_KEPT:
        stems = _local.stems = {}
    out = []
    for text in texts:
        words = _split(_unbracket(text.lower()))
        new = [w for w in set(words) if w not in stems]
        if new:
            for word, stem in zip(new, _stem(new)):
                stems[word] = None if word in _STOPWORDS else stem
        out.append([s for s in map(stems.__getitem__, words) if s is not None])
    return out


def _unbracket(text: str) -> str:
    """``e[x]tract`` → ``extract``: the letters a command's option stands for, as tldr-pages marks them."""
    return _MNEMONIC.sub(lambda m: m.group(1) or m.group(2), text) if "[" in text else text


def idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """Lucene's IDF, as bm25s computes it."""
    return np.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def _out_of(ids: np.ndarray, n: int) -> bool:
    """Whether any of the int32 ``ids`` is negative or ``n`` or more: one pass (a negative id read as
    unsigned is larger than any ``n``), not a ``min`` and a ``max`` (50M postings: 12 ms, not 24)."""
    return bool(ids.view(np.uint32).max() >= n) if ids.dtype == np.int32 else bool(ids.min() < 0 or ids.max() >= n)


class BM25Layer:
    """One wiki's BM25 index: per term, the postings (chunk ids), their precomputed BM25 scores and
    term frequencies (CSC arrays), plus each chunk's length. Read-only once built.

    Built from token ids with numpy (:meth:`build_from_ids`) — the same arithmetic as bm25s's own
    ``BM25.index`` (Lucene IDF in double precision, the term-frequency part in double, scores stored as
    float32), so the arrays are identical to what bm25s makes for the same tokens (a test checks it bit
    for bit) at a fraction of its Python loop's cost — and saved in bm25s's file format, so
    ``bm25s.BM25.load`` opens every wikirag index. Loading reads the arrays with numpy directly.
    """

    def __init__(self, vocab: dict[str, int], data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                 tf: np.ndarray, doc_len: np.ndarray):
        self.vocab, self.data, self.indices, self.indptr = vocab, data, indices, indptr
        self._tf, self.doc_len = tf, doc_len
        self.num_docs = len(doc_len)

    @property
    def tf(self) -> np.ndarray:
        """Each posting's term frequency (read on first use when loaded: only merging several wikis needs it)."""
        if callable(self._tf):
            tf = self._tf()
            if len(tf) != len(self.data):
                raise ValueError("tf.npy does not fit the postings")  # checksum right, content not: made so
            self._tf = tf
        return self._tf

    @classmethod
    def build(cls, token_lists: list[list[str]], folder: Path) -> BM25Layer:
        """Index ``token_lists`` (one per chunk) and save the files into ``folder``."""
        vocab: dict[str, int] = {}
        ids, lengths = encode(token_lists, vocab)
        return cls.build_from_ids(ids, lengths, words_of(vocab), folder)

    @classmethod
    def build_from_ids(cls, ids: np.ndarray, lengths: np.ndarray, vocab: Sequence[str], folder: Path) -> BM25Layer:
        """Index chunks given as token ids: ``ids`` all chunks' ids end to end, ``lengths`` each chunk's
        count of tokens, ``vocab[i]`` the token of id ``i``. Terms no chunk uses are dropped. Saves into
        ``folder`` bm25s's files plus ``tf.npy``, ``doc_lengths.npy`` and ``tokens.npy`` (the chunks' token
        ids in the saved vocabulary, for the next build to reuse without tokenising again)."""
        n_docs = len(lengths)
        lengths = np.asarray(lengths, dtype=np.int64)
        ids = np.asarray(ids, dtype=np.int64)
        used = np.bincount(ids, minlength=len(vocab)) > 0
        remap = np.cumsum(used) - 1
        ids = remap[ids]
        vocab = [t for t, keep in zip(vocab, used.tolist()) if keep]
        n_vocab = len(vocab)
        docs = np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
        keys, tf = np.unique(ids * max(n_docs, 1) + docs, return_counts=True)  # postings sorted by term, then doc
        terms, posting_docs = np.divmod(keys, max(n_docs, 1))
        df = np.bincount(terms, minlength=n_vocab)
        k1, b = BM25_PARAMS["k1"], BM25_PARAMS["b"]
        # exactly bm25s's arithmetic: math.log per term, stored float32; tfc in float64; product cast to float32
        idf_terms = np.array([math.log(1 + (n_docs - d + 0.5) / (d + 0.5)) for d in df.tolist()], dtype=np.float32)
        avg_len = lengths.mean() if n_docs else np.float64(1.0)
        l_d = lengths[posting_docs].astype(np.float64)
        tf64 = tf.astype(np.float64)
        tfc = tf64 / (k1 * ((1 - b) + b * l_d / avg_len) + tf64)
        data = (idf_terms[terms].astype(np.float64) * tfc).astype(np.float32)
        indices = posting_docs.astype(np.int32)
        indptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "data.csc.index.npy", data)
        np.save(folder / "indices.csc.index.npy", indices)
        np.save(folder / "indptr.csc.index.npy", indptr)
        vocab_ids = {t: i for i, t in enumerate(vocab)}
        # bm25s's empty token, scored for chunks without any token
        saved = vocab_ids if "" in vocab_ids else {**vocab_ids, "": n_vocab}
        (folder / "vocab.index.json").write_text(json.dumps(saved, ensure_ascii=False), encoding="utf-8")
        params = {**BM25_PARAMS, "delta": 0.5, "idf_method": BM25_PARAMS["method"], "dtype": "float32",
                  "int_dtype": "int32", "num_docs": n_docs, "version": bm25s_version(), "backend": "numpy"}
        (folder / "params.index.json").write_text(json.dumps(params, indent=4), encoding="utf-8")
        tf32 = tf.astype(np.float32)
        doc_len = lengths.astype(np.float32)
        np.save(folder / "tf.npy", tf32)
        np.save(folder / "doc_lengths.npy", doc_len)
        np.save(folder / TOKENS, ids.astype(np.int32))
        return cls(vocab_ids, data, indices, indptr, tf32, doc_len)

    @classmethod
    def load(cls, folder: Path, read: checked.Files | None = None) -> BM25Layer:
        """The layer saved in ``folder``, its files checked by ``read`` (:func:`wikirag.checked.reader` of
        that folder's files; default: unchecked): the JSON files read, the arrays mapped (a query touches
        only its terms' postings; every process serving the build shares the pages)."""
        read = read or checked.plain(folder)
        params = json.loads(read("params.index.json"))
        arrays = {name: read.array(name) for name in LOADED if name.endswith(".npy")}
        # doc ids stay int32, as saved: numpy converts a term's slice to intp when it indexes (a few µs
        # a query), where an int64 copy would hold 8 bytes a posting in every process
        layer = cls(_parse_vocab(read("vocab.index.json")), arrays["data.csc.index.npy"],
                    arrays["indices.csc.index.npy"], arrays["indptr.csc.index.npy"],
                    lambda: read.array("tf.npy"), arrays["doc_lengths.npy"])
        if params.get("num_docs") != layer.num_docs:
            raise ValueError(f"params.index.json has {params.get('num_docs')} documents, the arrays {layer.num_docs}")
        return layer

TOKENS = "tokens.npy"
# the files BM25Layer.load reads (tf.npy is read when first merged, tokens.npy only by the next build)
LOADED = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "doc_lengths.npy",
          "vocab.index.json", "params.index.json")


def encode(token_lists: Sequence[Sequence[str]], vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Token lists as ``(ids end to end, lengths)``; ``vocab`` (token → id) is extended in place with new
    tokens, in order of first appearance."""
    ids = [vocab.setdefault(t, len(vocab)) for tokens in token_lists for t in tokens]
    return np.array(ids, dtype=np.int64), np.array([len(t) for t in token_lists], dtype=np.int64)


def words_of(vocab: dict[str, int]) -> list[str]:
    """The tokens of a vocabulary (token → id, ids 0…n-1) listed by id."""
    words = [""] * len(vocab)
    for t, i in vocab.items():
        words[i] = t
    return words


def _read_vocab(folder: Path) -> dict[str, int]:
    return _parse_vocab((folder / "vocab.index.json").read_bytes())


def _parse_vocab(data: bytes) -> dict[str, int]:
    vocab = json.loads(data)
    if not isinstance(vocab, dict):
        raise ValueError("vocab.index.json holds no vocabulary")  # noqa: TRY004 - damaged content
    vocab.pop("", None)  # bm25s adds "" for empty docs
    return vocab


def saved_tokens(folder: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A saved build's ``(vocabulary, token ids end to end, lengths)``, as :meth:`BM25Layer.build_from_ids` takes them."""
    return (words_of(_read_vocab(folder)), np.load(folder / TOKENS).astype(np.int64),
            np.load(folder / "doc_lengths.npy").astype(np.int64))


def bm25s_version() -> str:
    from importlib.metadata import version

    return version("bm25s")


@dataclass(frozen=True)
class LayerHits:
    """Each wiki's top-N for one query, as parallel arrays grouped by wiki, best first within a wiki."""

    wiki: np.ndarray   # index of the wiki in the merged view
    chunk: np.ndarray  # chunk id within that wiki
    rank: np.ndarray   # 1-based rank within the wiki
    score: np.ndarray  # BM25 score (local or global statistics)


class MergedBM25:
    """Several wikis' BM25 layers side by side in one matrix (doc ids offset per wiki). Read-only."""

    ROW_WIDTH = 512  # values per row when finding each wiki's cut (see _cuts)

    def __init__(self, layers: Sequence[BM25Layer]):
        self.offsets = np.cumsum([0] + [layer.num_docs for layer in layers])
        self.num_docs = int(self.offsets[-1])
        self.doc_len = np.concatenate([layer.doc_len for layer in layers])
        self.wiki_tokens = np.array([layer.doc_len.sum() for layer in layers], dtype=np.float64)
        self.doc_wiki = np.repeat(np.arange(len(layers), dtype=np.int64), np.diff(self.offsets))  # each doc's wiki
        self._global_data: np.ndarray | None = None  # each posting's global score, made on first use
        if len(layers) == 1:  # nothing to merge: share the arrays; one wiki's global statistics are its own
            only = layers[0]
            self.vocab, self.data, self.indices, self.indptr, self._layer, self._tf = (
                only.vocab, only.data, only.indices, only.indptr, only, None)
            self._global_data = only.data
        else:
            self._merge(layers)
        k1, b = BM25_PARAMS["k1"], BM25_PARAMS["b"]
        avg_len = float(self.doc_len.mean()) if self.num_docs else 1.0
        self._length_norm = (k1 * (1 - b + b * self.doc_len / avg_len)).astype(np.float32)
        self._global_idf = idf(np.diff(self.indptr), self.num_docs).astype(np.float32)
        self._term_runs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # see term_counts

    # a saved view (:meth:`save`): file name -> what it holds
    SAVED: ClassVar[dict[str, str]] = {"vocab.txt": "the columns' terms, one per line", "indptr.npy": "CSC column pointers",
             "indices.npy": "doc ids (int32)", "global.npy": "each posting's score with the composition's statistics",
             "data.npy": "each posting's score with its wiki's own statistics", "doc_len.npy": "tokens per document",
             "runs_ptr.npy": "term runs: column pointers", "runs_wiki.npy": "term runs: wiki",
             "runs_total.npy": "term runs: total term frequency"}

    def save(self, folder: Path) -> None:
        """Write this view into ``folder`` (:attr:`SAVED`): everything a query reads, computed once — the
        global scores and term runs included — so :meth:`load` is a read of arrays, not a merge."""
        words = words_of(self.vocab)
        if any("\n" in w for w in words):  # tokens are \w words: never
            raise ValueError("a term holds a line break")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "vocab.txt").write_text("\n".join(words), encoding="utf-8")
        ptr, wiki, total = self.term_runs()
        for name, array in (("indptr", self.indptr), ("indices", self.indices.astype(np.int32)),
                            ("global", self.global_data()), ("data", self.data), ("doc_len", self.doc_len),
                            ("runs_ptr", ptr), ("runs_wiki", wiki), ("runs_total", total)):
            np.save(folder / f"{name}.npy", np.ascontiguousarray(array))

    @classmethod
    def load(cls, read: checked.Files, docs: Sequence[int], wiki_tokens: Sequence[float]) -> MergedBM25:
        """A view saved by :meth:`save`, its files checked by ``read`` and its arrays mapped; ``docs`` and ``wiki_tokens``:
        each wiki's documents and tokens, as the view recorded them. :class:`ValueError` if the arrays do
        not fit together."""
        self = cls.__new__(cls)
        self.offsets = np.cumsum([0, *docs])
        self.num_docs = int(self.offsets[-1])
        self.doc_wiki = np.repeat(np.arange(len(docs), dtype=np.int64), np.diff(self.offsets))
        self.wiki_tokens = np.array(wiki_tokens, dtype=np.float64)
        words = read("vocab.txt").decode("utf-8")
        self.vocab = dict(zip(words.split("\n") if words else [], itertools.count()))
        arrays = {name: read.array(f"{name}.npy") for name in (
            "indptr", "indices", "global", "data", "doc_len", "runs_ptr", "runs_wiki", "runs_total")}
        self.indptr, self.doc_len, self.data = arrays["indptr"], arrays["doc_len"], arrays["data"]
        self.indices = arrays["indices"]  # int32, mapped (see BM25Layer.load)
        self._global_data = arrays["global"]
        self._tf = self._layer = None  # (what tf is for is saved)
        self._term_runs = (arrays["runs_ptr"], arrays["runs_wiki"], arrays["runs_total"])
        size = len(self.indices)
        if (len(self.indptr) != len(self.vocab) + 1 or self.indptr[0] != 0 or self.indptr[-1] != size
                or (np.diff(self.indptr) < 0).any() or len(self._global_data) != size or len(self.data) != size
                or len(self.doc_len) != self.num_docs
                or (size and _out_of(self.indices, self.num_docs))
                or len(self._term_runs[0]) != len(self.indptr) or self._term_runs[0][-1] != len(self._term_runs[1])
                or len(self._term_runs[1]) != len(self._term_runs[2])
                or (len(self._term_runs[1]) and (self._term_runs[1].min() < 0 or self._term_runs[1].max() >= len(docs)))):
            raise ValueError("the view's arrays do not fit together")
        return self

    @property
    def tf(self) -> np.ndarray:
        """Each posting's term frequency: merged, or one wiki's layer's (read on first use). A view read
        from disk has none: its global scores and term runs, all tf is for, are saved."""
        if self._tf is None and self._layer is None:
            raise AttributeError("a merged view read from disk holds no term frequencies")
        return self._tf if self._tf is not None else self._layer.tf

    def _merge(self, layers: Sequence[BM25Layer]) -> None:
        """One CSC matrix of all the layers: a column per term of any wiki (in order of first appearance),
        its postings grouped by wiki in composition order (and in doc-id order within a wiki), which
        :meth:`term_runs` relies on. Placed by counting, not sorting: each (wiki, term) block of postings
        goes straight to its place (O(postings); a stable argsort took 0.3 s at 100k passages)."""
        vocab = {t: i for i, t in enumerate(dict.fromkeys(itertools.chain.from_iterable(x.vocab for x in layers)))}
        maps, totals = [], np.zeros(len(vocab), dtype=np.int64)
        for layer in layers:
            counts = np.diff(layer.indptr)
            # -1: a column no query can name (bm25s's "" token of empty chunks): its postings are dropped
            local_to_global = np.full(len(counts), -1, dtype=np.int64)
            local = np.fromiter(layer.vocab.values(), dtype=np.int64, count=len(layer.vocab))
            known = np.fromiter(map(vocab.__getitem__, layer.vocab), dtype=np.int64, count=len(layer.vocab))
            inside = local < len(counts)
            local_to_global[local[inside]] = known[inside]
            named = local_to_global >= 0
            totals[local_to_global[named]] += counts[named]  # a term is one column of a wiki: no repeats
            maps.append((local_to_global, counts, named))
        self.indptr = np.concatenate([[0], np.cumsum(totals)])
        size = int(self.indptr[-1])
        self.indices = np.empty(size, dtype=np.int32 if self.num_docs < 2**31 else np.int64)
        self.data = np.empty(size, dtype=np.float32)
        self._tf, self._layer = np.empty(size, dtype=np.float32), None
        filled = self.indptr[:-1].copy()  # where the next wiki's block of each column starts
        for layer, offset, (local_to_global, counts, named) in zip(layers, self.offsets[:-1], maps):
            start = np.zeros(len(counts), dtype=np.int64)
            start[named] = filled[local_to_global[named]]
            filled[local_to_global[named]] += counts[named]
            keep = np.repeat(named, counts)
            dest = (np.arange(int(layer.indptr[-1]), dtype=np.int64) + np.repeat(start - layer.indptr[:-1], counts))[keep]
            self.indices[dest] = layer.indices[keep] + np.int64(offset)
            self.data[dest] = layer.data[keep]
            self._tf[dest] = layer.tf[keep]
        self.vocab = vocab

    def columns(self, tokens: list[str]) -> list[int]:
        """The merged vocabulary columns of the query tokens found in any wiki (repeats kept)."""
        return [self.vocab[t] for t in tokens if t in self.vocab]

    def global_data(self) -> np.ndarray:
        """Each posting's BM25 score with the composition's statistics, aligned with ``data``.

        Computed once per merged view (4 bytes a posting), with exactly the float32 operations a query
        would do term by term (``idf · tf / (tf + k1·(1 − b + b·len/avg))``), so the scores are the same.
        A view of one wiki has its wiki's statistics: its scores are the layer's own (bm25s's).
        """
        data = self._global_data
        if data is None:  # two threads may both compute it: the same array either way
            terms = np.repeat(np.arange(len(self.indptr) - 1, dtype=np.int32), np.diff(self.indptr))
            data = self._global_idf[terms] * self.tf / (self.tf + self._length_norm[self.indices])
            self._global_data = data
        return data

    def scores(self, cols: list[int], scoring: str = "local") -> np.ndarray:
        """BM25 score of every document for these query columns, with local or global statistics."""
        data = self.global_data() if scoring == "global" else self.data
        indptr, indices = self.indptr, self.indices
        scores = np.zeros(self.num_docs, dtype=np.float32)
        for col in cols:  # a term's postings hold each document once: plain fancy-index add is exact
            start, end = indptr[col], indptr[col + 1]
            scores[indices[start:end]] += data[start:end]
        return scores

    def term_counts(self, cols: list[int]) -> np.ndarray:
        """Occurrences of each query column in each wiki: an array of shape (len(cols), wikis)."""
        ptr, wiki, total = self.term_runs()
        n_wikis = len(self.offsets) - 1
        rows = self.__dict__.setdefault("_count_rows", {})  # col -> its row, for the terms queries repeat
        counts = np.empty((len(cols), n_wikis), dtype=np.float64)
        for i, col in enumerate(cols):
            row = rows.get(col)
            if row is None:
                lo, hi = ptr[col], ptr[col + 1]
                row = np.bincount(wiki[lo:hi], weights=total[lo:hi], minlength=n_wikis)
                if len(rows) >= 65536:
                    rows.clear()
                rows[col] = row
            counts[i] = row
        return counts

    def term_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The term frequencies summed over each run of a column's postings in one wiki, in CSC form:
        column ``c``'s runs are ``ptr[c]:ptr[c + 1]``, of wiki ``wiki[r]`` with total ``total[r]``.

        Made once per merged view. A column's postings are grouped by wiki (see :meth:`_merge`), so it
        has one run per wiki that uses the term and a query's term statistics cost a few entries per
        term, not a pass over its postings. Totals are sums of whole numbers: exact in float64, in any
        order.
        """
        runs = self._term_runs
        if runs is None:  # two threads may both make it: the same arrays either way
            wiki = (np.searchsorted(self.offsets, self.indices, side="right") - 1).astype(np.int32)
            first = np.zeros(len(wiki), dtype=bool)  # the first posting of each run
            first[self.indptr[:-1][np.diff(self.indptr) > 0]] = True
            first[1:] |= wiki[1:] != wiki[:-1]
            starts = np.flatnonzero(first)
            total = np.add.reduceat(self.tf, starts, dtype=np.float64) if len(starts) else np.empty(0)
            runs = self._term_runs = (np.searchsorted(starts, self.indptr), wiki[starts], total)
        return runs

    def search_columns(self, cols: list[int], depth: int, scoring: str = "local") -> LayerHits:
        """Score every document once for query columns looked up with :meth:`columns`, then keep each
        wiki's own top ``depth`` (ties: lower chunk id)."""
        if not cols or depth <= 0:
            empty = np.empty(0, dtype=np.int64)
            return LayerHits(empty, empty, empty, np.empty(0, dtype=np.float32))
        return self.top_per_wiki(self.scores(cols, scoring), depth)

    def top_overall(self, scores: np.ndarray, k: int, scale: np.ndarray, offset: np.ndarray) -> LayerHits:
        """The ``k`` documents with a non-zero score of highest ``scale[w] · score + offset[w]`` (``w`` a
        document's wiki, ``scale`` > 0) over all wikis, as :class:`LayerHits` with each one's rank within
        its wiki — the same rows as :meth:`top_per_wiki` with depth ``k`` gives, fused by that value and cut
        to ``k``, in one pass over the documents instead of a cut per wiki.

        Ties: wiki order, then lower chunk id (what fusing the per-wiki lists gives). ``scale`` > 0 keeps
        each wiki's documents in their order, so everything ranked above a winner in its wiki is a winner
        too and its rank is its place among its wiki's winners.
        """
        scale, offset = np.asarray(scale, dtype=np.float64), np.asarray(offset, dtype=np.float64)
        docs = np.flatnonzero(scores != 0)
        values = scores[docs]
        if len(docs) > k > 0:
            # the best k by score alone (a few more at the cut) bound the answer from below: the k-th best
            # fused value among them is at most the k-th best of all, so a winner's score is at least
            # (that value − offset[w]) / scale[w] for its wiki w; keep the documents that reach the lowest
            # such score (with slack for rounding: a superset, compared exactly below)
            first = np.flatnonzero(values >= self._cuts(values, np.array([len(values)]), k)[0])
            w = self.doc_wiki[docs[first]]
            f = scale[w] * values[first].astype(np.float64) + offset[w]
            floor = np.partition(f, len(f) - k)[len(f) - k]
            need = float(((floor - offset) / scale).min())
            keep = values >= need - abs(need) * 1e-6 - 1e-12
            docs, values = docs[keep], values[keep]
        wiki = self.doc_wiki[docs]
        fused = scale[wiki] * values.astype(np.float64) + offset[wiki]
        best = np.lexsort((docs, -fused))[:k]  # docs are wiki-major: ties go by wiki, then chunk id
        docs, values, wiki = docs[best], values[best], wiki[best]
        order = np.argsort(wiki, kind="stable")  # grouped by wiki, best first within each
        docs, values, wiki = docs[order], values[order], wiki[order]
        rank = np.arange(len(docs)) - np.searchsorted(wiki, wiki) + 1
        return LayerHits(wiki, docs - self.offsets[wiki], rank, values)

    def top_per_wiki(self, scores: np.ndarray, depth: int) -> LayerHits:
        """Each wiki's top ``depth`` documents with a non-zero score, grouped by wiki, best first (ties:
        lower chunk id first, also at the cut).

        No loop over the wikis: a cut per wiki (:meth:`_cuts`) leaves a few candidates beyond ``depth``
        in each (cut again while many are left, as with a large ``depth``), and one sort by (wiki, score,
        doc id) of those ranks them.
        """
        docs = np.flatnonzero(scores != 0)  # sorted by doc id, hence grouped by wiki (a bool mask: fast)
        values = scores[docs]
        n_wikis = len(self.offsets) - 1
        counts = np.diff(np.searchsorted(docs, self.offsets))
        for _ in range(4):  # keep the candidates at or above their wiki's cut
            crowded = counts > depth
            if not crowded.any():
                break
            keep = values >= np.repeat(self._cuts(values, counts, depth), counts)
            before = len(values)
            docs, values = docs[keep], values[keep]
            # stop when few are left (sorting them is cheap) or nothing was taken away (ties at the cut)
            if len(values) <= max(2048, 2 * depth * int(np.count_nonzero(crowded))) or len(values) == before:
                break
            kept = np.concatenate([[0], np.cumsum(keep)])
            bounds = np.concatenate([[0], np.cumsum(counts)])
            counts = kept[bounds[1:]] - kept[bounds[:-1]]
        wiki = np.searchsorted(self.offsets, docs, side="right") - 1
        order = np.lexsort((-values, wiki))  # stable, and docs are in id order: ties keep the lower id
        docs, wiki, values = docs[order], wiki[order], values[order]
        rank = np.arange(len(docs)) - np.searchsorted(wiki, np.arange(n_wikis))[wiki] + 1
        top = rank <= depth
        if not top.all():
            docs, wiki, rank, values = docs[top], wiki[top], rank[top], values[top]
        return LayerHits(wiki, docs - self.offsets[wiki], rank, values)

    @staticmethod
    def _cuts(values: np.ndarray, counts: np.ndarray, depth: int) -> np.ndarray:
        """Per wiki, a score at or below its ``depth``-th best one (−inf when it has at most ``depth``).

        ``values`` are the wikis' scores end to end, ``counts[w]`` of them wiki ``w``'s. The values of the
        wikis with more than ``depth`` are laid out in the rows of one matrix (each wiki from a new row,
        padded), one partition along the rows gives each row's ``depth``-th best score, and a wiki's cut
        is the best of its rows': a row holds ``depth`` scores at least that high, so nothing at or above
        the wiki's ``depth``-th best score is below the cut, ties included. Rows of at most
        :attr:`ROW_WIDTH` values: partitioning short rows is much faster than one long array, and the cut
        still leaves only a few candidates beyond ``depth``.
        """
        cuts = np.full(len(counts), -np.inf, dtype=values.dtype)
        crowded = np.flatnonzero(counts > depth)
        sizes = counts[crowded]
        width = max(2 * depth, min(MergedBM25.ROW_WIDTH, -(-int(sizes.sum()) // len(crowded))))
        rows = -(-sizes // width)
        first_row = np.cumsum(rows) - rows
        # the n-th crowded value goes to cell n + (padding before its wiki's first row)
        shift = first_row * width - (np.cumsum(sizes) - sizes)
        cells = np.full(int(rows.sum()) * width, np.inf, dtype=values.dtype)
        if len(crowded) == 1:  # one wiki's run: in place from the first cell
            start = int(counts[:crowded[0]].sum())
            np.negative(values[start:start + int(sizes[0])], out=cells[:int(sizes[0])])
        else:
            crowded_values = values if len(crowded) == len(counts) else values[np.repeat(counts > depth, counts)]
            cells[np.arange(len(crowded_values)) + np.repeat(shift, sizes)] = -crowded_values
        per_row = -np.partition(cells.reshape(-1, width), depth - 1, axis=1)[:, depth - 1]
        cuts[crowded] = np.maximum.reduceat(per_row, first_row)
        return cuts
