"""Does the second stage (re-ordering the fused top 20 by question cosine) help on judged queries?

Runs :func:`wikirag.evaluate.run` — what ``wikirag eval`` runs — with the BM25 and dense layers on BEIR
folders twice: the second stage off (``RERANK_DEPTH = 0``) and on (the default), and prints both tables
(nDCG@10, Recall@100, queries/s). The first run embeds the corpora with the offline model (SciFact:
about 5 minutes on 2 cores), cached for the next::

    python bench/rerank_eval.py ../shared/eval/beir/scifact [more BEIR folders]
"""

from __future__ import annotations

import sys

from wikirag import evaluate, retrieval


def main() -> None:
    sources = sys.argv[1:] or ["../shared/eval/beir/scifact"]
    depth = retrieval.RERANK_DEPTH
    for label, value in (("second stage off", 0), (f"second stage on (top {depth})", depth)):
        retrieval.RERANK_DEPTH = value
        report = evaluate.run(sources, methods=["dfs-prior"], layers=("bm25", "dense"),
                              progress=lambda msg: print(msg, file=sys.stderr))
        print(f"\n{label}, layers bm25 + dense\n")
        print(evaluate.table(report))


if __name__ == "__main__":
    main()
