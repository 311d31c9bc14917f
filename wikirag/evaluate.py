"""Retrieval evaluation on the product's own code path: ``wikirag eval``.

Every test query of every BEIR folder (converted into wikis by :mod:`wikirag.beir`) runs against the
composition of all folders, through the same search as ``wikirag query``, and is scored on its own
qrels, for each fusion method and two baselines: ``monolith`` (one wiki over all the folders) and
``oracle`` (the query's own folder only). A document's rank is its best passage's. A team's own
judgments over a composition are scored the same way (:func:`evaluate_composition`). :func:`run` is
the whole command; :func:`table` renders its report as markdown.

Metrics: nDCG@10 as trec_eval computes it (linear gains, the ideal ranking from the qrels) and
Recall@100, per dataset and macro-averaged over datasets; a query that retrieves nothing scores 0.
A query is searched as ``wikirag query`` would search it (control characters cleaned away,
:func:`~wikirag.retrieval.check_question`); one that cannot be searched at all (only control
characters, too long) is skipped, left out of the means and listed in the report's ``skipped``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import beir
from . import fusion as fusion_mod
from . import index as index_mod
from .access import Level
from .beir import MONOLITH, Dataset, beir_doc
from .config import cache_dir
from .errors import EvalError, QueryError
from .retrieval import LAYERS, check_question, search
from .workspace import Workspace

NDCG_K = 10
RECALL_K = 100
ORACLE = "oracle"


@dataclass
class MethodResult:
    per_dataset: dict[str, dict[str, float]] = field(default_factory=dict)
    macro: dict[str, float] = field(default_factory=dict)
    queries_per_s: float = 0.0


def ndcg_at_k(ranked: Sequence[str], rels: dict[str, int], k: int = NDCG_K) -> float:
    """trec_eval's ``ndcg_cut``: gain = grade, discount log2(rank + 1), ideal from all judged grades."""
    dcg = sum(rels.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]) if rels.get(doc, 0) > 0)
    ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], rels: dict[str, int], k: int = RECALL_K) -> float:
    relevant = {doc for doc, g in rels.items() if g > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


# running ------------------------------------------------------------------------------------------

def searchable(dataset: str, queries: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[dict]]:
    """``queries`` split into those a search takes (as given: the search cleans them) and those it refuses,
    each of these ``{"dataset", "id", "reason"}``: one bad query is skipped, not the end of the evaluation."""
    kept, skipped = [], []
    for qid, text in queries:
        try:
            check_question(text)
        except QueryError as exc:
            skipped.append({"dataset": dataset, "id": qid, "reason": str(exc)})
        else:
            kept.append((qid, text))
    return kept, skipped


def ranked_documents(ws: Workspace, composition: str, question: str, *, depth: int,
                     fusion: str | None = None, clearance: Level | str = Level.PUBLIC,
                     layers: Sequence[str] = LAYERS) -> list[str]:
    """Document ids ``wiki/path``, best first, each once at its best passage's rank."""
    result = search(ws, composition, question, clearance=clearance, k=depth, fusion=fusion, layers=tuple(layers))
    return list(dict.fromkeys(f"{p.wiki}/{p.path}" for p in result.passages))


def evaluate(ws: Workspace, datasets: list[Dataset], methods: Iterable[str], *, k: int = NDCG_K,
             depth: int = 200, layers: Sequence[str] = LAYERS,
             progress: Callable[[str], None] | None = None) -> dict[str, MethodResult]:
    """Run every query of every dataset under each method (a fusion name, ``monolith`` or ``oracle``)."""
    results: dict[str, MethodResult] = {}
    keys = (f"ndcg@{k}", f"recall@{RECALL_K}")
    for method in methods:
        if progress:
            progress(f"evaluating {method}")
        fusion = None if method in (MONOLITH, ORACLE) else fusion_mod.get(method).name
        result = MethodResult()
        route = {d.name: {MONOLITH: "eval-monolith", ORACLE: f"eval-oracle-{d.name}"}.get(method, "eval-all")
                 for d in datasets}
        for d in datasets:  # warm up: indexes load (and merged views build) before the clock starts
            if d.queries:
                ranked_documents(ws, route[d.name], d.queries[0][1], depth=depth, fusion=fusion, layers=layers)
        n_queries, started = 0, time.perf_counter()
        for d in datasets:
            comp = route[d.name]
            ndcgs, recalls = [], []
            for qid, text in d.queries:
                ranked = []  # other datasets' documents take their place in the ranking as non-relevant
                for document in ranked_documents(ws, comp, text, depth=depth, fusion=fusion, layers=layers):
                    wiki, doc = beir_doc(document)
                    if wiki != d.name:
                        ranked.append("\0" + document)
                    elif not (d.exclude_self and doc == qid):
                        ranked.append(doc)
                ndcgs.append(ndcg_at_k(ranked, d.qrels.get(qid, {}), k))
                recalls.append(recall_at_k(ranked, d.qrels.get(qid, {})))
                n_queries += 1
            result.per_dataset[d.name] = dict(zip(keys, (_mean(ndcgs), _mean(recalls))))
        result.queries_per_s = n_queries / max(time.perf_counter() - started, 1e-9)
        result.macro = {m: _mean([r[m] for r in result.per_dataset.values()]) for m in keys}
        results[method] = result
    return results


def evaluate_composition(ws: Workspace, composition: str, queries: list[tuple[str, str]],
                         qrels: dict[str, dict[str, int]], methods: Iterable[str], *, clearance: Level | str,
                         k: int = NDCG_K, depth: int = 200, layers: Sequence[str] = LAYERS) -> dict[str, MethodResult]:
    """A team's own judgments: qrels name documents as ``wiki/path`` (a page of a wiki). Besides nDCG@k and
    Recall@100 this reports Recall@k: with one answer page per question, the share of questions whose
    page is in the top k."""
    results: dict[str, MethodResult] = {}
    judged = [(qid, text) for qid, text in queries if any(g > 0 for g in qrels.get(qid, {}).values())]
    if not judged:
        raise EvalError("no query has a relevant document in the qrels: check the query ids match")
    for method in methods:
        fusion = fusion_mod.get(method).name
        ranked_documents(ws, composition, judged[0][1], depth=depth, fusion=fusion, clearance=clearance,
                         layers=layers)
        started = time.perf_counter()
        ndcgs, recalls, top_recalls = [], [], []
        for qid, text in judged:
            ranked = ranked_documents(ws, composition, text, depth=depth, fusion=fusion, clearance=clearance,
                                      layers=layers)
            ndcgs.append(ndcg_at_k(ranked, qrels[qid], k))
            recalls.append(recall_at_k(ranked, qrels[qid]))
            top_recalls.append(recall_at_k(ranked, qrels[qid], k))
        metrics = {f"ndcg@{k}": _mean(ndcgs), f"recall@{k}": _mean(top_recalls), f"recall@{RECALL_K}": _mean(recalls)}
        results[method] = MethodResult({composition: metrics}, dict(metrics),
                                       len(judged) / max(time.perf_counter() - started, 1e-9))
    return results


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def report(datasets: list[Dataset], results: dict[str, MethodResult], k: int = NDCG_K,
           skipped: Sequence[dict] = ()) -> dict:
    """The JSON shape ``wikirag eval --json`` prints: ``queries`` counts the queries evaluated; ``skipped``
    lists those that could not be searched (:func:`searchable`)."""
    return {
        "k": k,
        "datasets": {d.name: {"docs": d.docs, "queries": len(d.queries)} for d in datasets},
        "results": {m: {"per_dataset": r.per_dataset, "macro": r.macro, "queries_per_s": r.queries_per_s}
                    for m, r in results.items()},
        "skipped": list(skipped),
    }


def run(sources: Sequence[str], *, workspace: Workspace | None = None, methods: Sequence[str] = (),
        k: int = NDCG_K, exclude_self: Sequence[str] = (), queries: Path | None = None, qrels: Path | None = None,
        cache: Path | None = None, layers: Sequence[str] | None = None, clearance: Level | str = Level.PUBLIC,
        progress: Callable[[str], None] | None = None) -> dict:
    """``wikirag eval`` as a function: the report (:func:`report`) for BEIR folders, or for one
    composition of ``workspace`` with ``queries`` and ``qrels`` files. ``methods`` are fusion names
    (default: every registered one); ``layers`` default to ``bm25`` for BEIR folders, every layer for a
    composition. Raises :class:`QueryError` for a combination that cannot run; a query that cannot be
    searched is skipped and listed in the report's ``skipped``."""
    own = queries is not None or qrels is not None
    chosen = tuple(layers) if layers else (LAYERS if own else ("bm25",))
    if set(chosen) - set(LAYERS):
        raise QueryError(f"unknown layer(s) {sorted(set(chosen) - set(LAYERS))}: use {', '.join(LAYERS)}")
    if not own and "graph" in chosen:
        raise QueryError("the graph layer needs a composition with queries and qrels (BEIR documents have no links)")
    names = [m for m in (methods or sorted(fusion_mod.FUSIONS)) if m != "default"]
    for name in names:
        fusion_mod.get(name)
    if own:
        if queries is None or qrels is None or len(sources) != 1 or workspace is None:
            raise QueryError("give one composition of a workspace with both queries and qrels")
        judged = beir.read_qrels(qrels)
        relevant = {qid for qid, grades in judged.items() if any(g > 0 for g in grades.values())}
        asked, skipped = searchable(sources[0], beir.read_queries(queries))
        skipped = [s for s in skipped if s["id"] in relevant]  # the others would not be scored anyway
        if skipped and not any(qid in relevant for qid, _ in asked):
            raise EvalError(f"no judged query can be searched: all {len(skipped)} were skipped (the first: "
                            f"{skipped[0]['id']}: {skipped[0]['reason']})")
        results = evaluate_composition(workspace, sources[0], asked, judged, names, clearance=clearance, k=k,
                                       layers=chosen)
        pages = sum(index_mod.status(w).files for w in workspace.composition(sources[0], clearance).wikis)
        datasets = [Dataset(sources[0], None, [q for q in asked if q[0] in judged], judged, docs=pages)]
    else:
        datasets = [beir.load_beir(Path(s)) for s in sources]
        skipped = []
        for d in datasets:
            d.queries, refused = searchable(d.name, d.queries)
            skipped += refused
        unknown = set(exclude_self) - {d.name for d in datasets}
        if unknown:
            raise QueryError(f"--exclude-self names no dataset given: {', '.join(sorted(unknown))}")
        for d in datasets:
            d.exclude_self = d.name in exclude_self
        ws = beir.prepare(datasets, cache or cache_dir() / "eval", progress=progress, layers=chosen)
        results = evaluate(ws, datasets, [MONOLITH, ORACLE, *names], k=k, layers=chosen, progress=progress)
    if fusion_mod.DEFAULT_FUSION in results:
        results["default"] = results[fusion_mod.DEFAULT_FUSION]
    return report(datasets, results, k, skipped)


def table(report: dict) -> str:
    """The report as a markdown table: nDCG@k per dataset and macro, Recall@k (own judgments), Recall@100, q/s."""
    datasets, k = list(report["datasets"]), report["k"]
    top = any(f"recall@{k}" in r["macro"] for r in report["results"].values()) and k != RECALL_K
    lines = [(f"nDCG@{k} per dataset and macro-averaged; macro Recall@{RECALL_K}{f' and Recall@{k}' if top else ''}; "
             "queries/s of one thread"),
             "| method | " + " | ".join(datasets) + f" | macro |{f' R@{k} |' if top else ''} R@{RECALL_K} | q/s |",
             "|---|" + "---:|" * (len(datasets) + 3 + top)]
    for method, r in report["results"].items():
        cells = [f"{r['per_dataset'][d][f'ndcg@{k}']:.3f}" for d in datasets]
        recall_k = f" {r['macro'][f'recall@{k}']:.3f} |" if top else ""
        lines.append(f"| {method} | " + " | ".join(cells) + f" | **{r['macro'][f'ndcg@{k}']:.3f}** |{recall_k}"
                     + f" {r['macro'][f'recall@{RECALL_K}']:.3f} | {r['queries_per_s']:.0f} |")
    skipped = report.get("skipped") or []
    if skipped:
        lines.append(f"\n{len(skipped)} quer{'y' if len(skipped) == 1 else 'ies'} skipped (cannot be searched), "
                     "left out of the means: " + ", ".join(f"{s['dataset']}/{s['id']}" for s in skipped))
    return "\n".join(lines)
