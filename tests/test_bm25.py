"""The merged BM25 view gives every wiki exactly the ranking bm25s gives that wiki on its own."""

from __future__ import annotations

import subprocess
import sys

import bm25s
import numpy as np
import pytest

from wikirag import Workspace, build, store
from wikirag.bm25 import MergedBM25, tokenize
from wikirag.cache import IndexCache

from .conftest import make_wiki

PAGES = {
    "w1": ["Tomatoes need sun and deep watering.", "Compost heaps need turning and air.",
           "Watering tomatoes daily is wasteful; water deeply.", "Peppers like warm soil and sun."],
    "w2": ["Deploy to production before three.", "Rollback the deploy first, investigate later.",
           "Production graphs show the deploy health."],
    "w3": ["Sun, sun, sun: tomatoes and peppers in the greenhouse.", "Nothing relevant here at all."],
}


@pytest.fixture
def three(home) -> Workspace:
    for name, texts in PAGES.items():
        make_wiki(home, name, {f"p{i}.md": f"# Page {i}\n\n{t}\n" for i, t in enumerate(texts)},
                  extra="chunking: {min_chars: 5}\n")
    ws = Workspace(home)
    for name in PAGES:
        build(ws.wiki(name))
    return ws


@pytest.mark.parametrize("query", ["tomatoes sun", "deploy production", "water", "sun peppers compost", "zzz"])
@pytest.mark.parametrize("depth", [1, 2, 10])
def test_merged_view_equals_each_wiki_searched_alone(three: Workspace, query: str, depth: int) -> None:
    indexes = [store.load(three.wiki(name)) for name in PAGES]
    merged = MergedBM25([idx.bm25 for idx in indexes])
    hits = merged.search_columns(merged.columns(tokenize([query])[0]), depth)
    for w, idx in enumerate(indexes):
        # the reference: bm25s's own scoring of this wiki's saved index, alone
        folder = three.wiki(idx.wiki).index_dir / "builds" / idx.build_id / "bm25"
        alone = bm25s.BM25.load(str(folder))
        ids = [alone.vocab_dict[t] for t in tokenize([query])[0] if t in alone.vocab_dict]
        scores = alone.get_scores(ids) if ids else np.zeros(alone.scores["num_docs"])
        expected = [int(d) for d in np.lexsort((np.arange(len(scores)), -scores)) if scores[d] > 0][:depth]
        mine = hits.wiki == w
        assert hits.chunk[mine].tolist() == expected
        assert hits.rank[mine].tolist() == list(range(1, len(expected) + 1))
        np.testing.assert_allclose(hits.score[mine], scores[expected], rtol=1e-6)


def test_a_build_by_another_process_is_seen_after_the_recheck_interval(three: Workspace, home) -> None:
    now = [1000.0]
    cache = IndexCache(recheck_seconds=0.5, clock=lambda: now[0])
    first, _ = cache.get(three.wiki("w1"))
    assert cache.get(three.wiki("w1"))[0] is first  # unchanged: the same loaded object
    (home / "wikis/w1/p9.md").write_text("# New\n\nA new page about asparagus beds.\n")
    done = subprocess.run([sys.executable, "-m", "wikirag", "--home", str(home), "build", "w1"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    now[0] += 0.4  # within the interval: CURRENT is not looked at, the previous build keeps serving
    assert cache.get(three.wiki("w1"))[0] is first
    now[0] += 0.2  # past it: CURRENT is checked and the other process's build is loaded
    second, _ = cache.get(three.wiki("w1"))
    assert second is not first and len(second.chunks) == len(first.chunks) + 1
    assert second.build_id == store.current_build_id(three.wiki("w1"))


def _postings(vocab: dict, data, indices, indptr) -> dict:
    """term -> (doc ids, scores) of an index's CSC arrays, by token (ids differ between builds)."""
    return {t: (indices[indptr[i]:indptr[i + 1]].tolist(), data[indptr[i]:indptr[i + 1]].tobytes())
            for t, i in vocab.items() if t}


def test_the_index_is_bm25s_own_index_bit_for_bit(tmp_path) -> None:
    """Built from token ids with numpy, the arrays are exactly those bm25s's own ``index`` makes for the same
    tokens (an empty passage, repeated terms and a one-passage term included), and bm25s loads the files."""
    from wikirag.bm25 import BM25_PARAMS, BM25Layer

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(300)]
    token_lists = [list(rng.choice(words, size=int(rng.integers(0, 60)), p=None)) for _ in range(400)]
    token_lists += [[], ["solo"], ["w1"] * 9]
    mine = BM25Layer.build(token_lists, tmp_path / "bm25")
    ref = bm25s.BM25(**BM25_PARAMS)
    ref.index(token_lists, show_progress=False)
    s = ref.scores
    assert _postings(mine.vocab, mine.data, mine.indices, mine.indptr) == _postings(
        ref.vocab_dict, s["data"], s["indices"], s["indptr"])
    loaded = bm25s.BM25.load(str(tmp_path / "bm25"))
    for query in (["w1", "w2"], ["solo", "w299", "w1"], ["w5"]):
        assert np.array_equal(loaded.get_scores([loaded.vocab_dict[t] for t in query]),
                              ref.get_scores([ref.vocab_dict[t] for t in query]))
