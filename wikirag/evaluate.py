"""Retrieval evaluation on the product's own code path: ``wikirag eval``.

Each BEIR-format folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``) becomes one wiki:
every document is written as a markdown page (``# title`` + text) into a cache folder, and the wiki is
built and queried exactly as any other (same chunking, BM25 layer and fusion as ``wikirag query``). A
document's rank is its best passage's. The conversion and the indexes are cached and redone only when
the data changes. Every test query of every folder runs against the composition of all folders and is
scored on its own qrels, for each fusion method and two baselines: ``monolith`` (one wiki over all the
folders) and ``oracle`` (the query's own folder only).

Metrics: nDCG@10 as trec_eval computes it (linear gains, the ideal ranking from the qrels) and
Recall@100, per dataset and macro-averaged over datasets; a query that retrieves nothing scores 0.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import fusion as fusion_mod
from . import index as index_mod
from .access import Level
from .errors import EvalError
from .retrieval import LAYERS, search
from .wiki import write_manifest
from .workspace import Workspace

NDCG_K = 10
RECALL_K = 100
MONOLITH = "monolith"
ORACLE = "oracle"
# documents are the unit being judged: keep short ones (NPL's titles) that passages would drop
EVAL_CHUNKING = {"max_tokens": 512, "min_chars": 1}


@dataclass
class Dataset:
    """One judged collection: its queries (id, text) and graded relevance judgments."""

    name: str
    folder: Path | None
    queries: list[tuple[str, str]]
    qrels: dict[str, dict[str, int]]
    docs: int = 0
    exclude_self: bool = False


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


# data ---------------------------------------------------------------------------------------------

def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_") or "data"
    return slug if slug[0].isalnum() else f"d{slug}"


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """A TSV of ``query-id  corpus-id  score`` (a header line is skipped)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (n == 1 and not parts[-1].lstrip("-").isdigit()):
                continue
            if len(parts) < 3 or not parts[-1].lstrip("-").isdigit():
                raise EvalError(f"{path}:{n}: expected 'query-id<TAB>corpus-id<TAB>score'")
            qrels.setdefault(parts[0], {})[parts[-2]] = int(parts[-1])
    return qrels


def read_queries(path: Path) -> list[tuple[str, str]]:
    """JSON lines ``{"_id": …, "text": …}``, or a TSV of ``id<TAB>text``."""
    queries = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                if line.lstrip().startswith("{"):
                    item = json.loads(line)
                    queries.append((str(item["_id"]), str(item["text"])))
                else:
                    qid, text = line.rstrip("\n").split("\t", 1)
                    queries.append((qid, text))
            except (ValueError, KeyError):
                raise EvalError(f"{path}:{n}: expected a JSON object with _id and text, or id<TAB>text") from None
    return queries


def load_beir(folder: Path, exclude_self: bool = False) -> Dataset:
    """A BEIR folder's test queries that have at least one relevant document, and its qrels."""
    for part in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        if not (folder / part).is_file():
            raise EvalError(f"{folder} is not a BEIR folder: {part} is missing")
    qrels = read_qrels(folder / "qrels" / "test.tsv")
    queries = [(qid, text) for qid, text in read_queries(folder / "queries.jsonl")
               if any(g > 0 for g in qrels.get(qid, {}).values())]
    return Dataset(_slug(folder.resolve().name), folder, queries, qrels, exclude_self=exclude_self)


def _doc_file(doc_id: str) -> str:
    return urllib.parse.quote(doc_id, safe="").replace(".", "%2E") + ".md"


def _doc_id(path: str) -> str:
    return urllib.parse.unquote(Path(path).stem)


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except FileNotFoundError:
        pass
    path.write_text(text, encoding="utf-8")


def _convert(dataset: Dataset, target: Path) -> int:
    """Write each document of the corpus as ``target/<id>.md``; skip when the corpus is unchanged."""
    corpus = dataset.folder / "corpus.jsonl"
    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()
    stamp = target / ".corpus-sha256"
    if stamp.is_file() and stamp.read_text() == digest:
        return sum(1 for _ in target.glob("*.md"))
    target.mkdir(parents=True, exist_ok=True)
    wanted = set()
    with corpus.open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            title, text = (doc.get("title") or "").strip(), (doc.get("text") or "").strip()
            name = _doc_file(str(doc["_id"]))
            wanted.add(name)
            _write_if_changed(target / name, f"# {title}\n\n{text}\n" if title else f"{text}\n")
    for stale in target.glob("*.md"):
        if stale.name not in wanted:
            stale.unlink()
    stamp.write_text(digest)
    return len(wanted)


def monolith_name(datasets: Sequence[Dataset]) -> str:
    """The monolith wiki of this set of datasets (one per set, so several stay cached)."""
    names = ",".join(sorted(d.name for d in datasets))
    return f"{MONOLITH}-{hashlib.sha256(names.encode()).hexdigest()[:8]}"


def prepare(datasets: list[Dataset], cache: Path, progress: Callable[[str], None] | None = None,
            layers: Sequence[str] = ("bm25",)) -> Workspace:
    """Convert and build one wiki per dataset, plus the monolith wiki, in a cached workspace.

    With ``"dense"`` in ``layers`` every wiki gets the offline dense layer; the monolith reuses the
    datasets' vectors instead of embedding everything twice."""
    home, corpora = cache / "workspace", cache / "corpora"
    dense = "dense" in layers or any(  # once embedded, keep the layer (searching bm25 alone ignores it)
        "layers:" in (home / "wikis" / d.name / ".wiki.yaml").read_text()
        for d in datasets if (home / "wikis" / d.name / ".wiki.yaml").is_file())
    extra = {"layers": {"dense": {}}} if dense else {}
    names = [d.name for d in datasets]
    if len(set(names)) != len(names) or any(n.startswith(MONOLITH) for n in names):
        raise EvalError(f"dataset folder names must be distinct and not start with '{MONOLITH}': {names}")
    for d in datasets:
        if progress:
            progress(f"converting {d.name}")
        d.docs = _convert(d, corpora / d.name)
        write_manifest(home / "wikis" / d.name, {
            "name": d.name, "title": d.name, "sensitivity": "public", "source": str(corpora / d.name),
            "chunking": EVAL_CHUNKING, **extra})
    others = sorted(p.name for p in corpora.iterdir() if p.is_dir() and p.name not in names)
    mono = monolith_name(datasets)
    write_manifest(home / "wikis" / mono, {
        "name": mono, "title": "all datasets in one wiki", "sensitivity": "public", "source": str(corpora),
        "chunking": EVAL_CHUNKING, "exclude": [f"{n}/*" for n in others], **extra})
    ws = Workspace(home, recheck_seconds=0)
    sources = []
    for name in [*names, mono]:
        if progress:
            progress(f"indexing {name}")
        report = index_mod.build(ws.wiki(name), vector_sources=sources)
        sources.append(ws.wiki(name).index_dir / "builds" / report.build_id / "dense")
    ws.rags_dir.mkdir(parents=True, exist_ok=True)
    _write_composition(ws, "eval-all", names)
    _write_composition(ws, "eval-monolith", [mono])
    for name in names:
        _write_composition(ws, f"eval-oracle-{name}", [name])
    return ws


# running ------------------------------------------------------------------------------------------

def _write_composition(ws: Workspace, name: str, wikis: list[str]) -> None:
    data = {"name": name, "sensitivity": "public", "wikis": wikis}
    (ws.rags_dir / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def ranked_documents(ws: Workspace, composition: str, question: str, *, depth: int,
                     fusion: str | None = None, clearance: Level | str = Level.PUBLIC,
                     layers: Sequence[str] = LAYERS) -> list[str]:
    """Document ids ``wiki/path``, best first, each once at its best passage's rank."""
    result = search(ws, composition, question, clearance=clearance, k=depth, fusion=fusion, layers=tuple(layers))
    return list(dict.fromkeys(f"{p.wiki}/{p.path}" for p in result.passages))


def _beir_doc(document: str) -> tuple[str, str]:
    """``wiki/file.md`` (or ``monolith-x/wiki/file.md``) → (dataset, BEIR document id)."""
    wiki, _, path = document.partition("/")
    if wiki.startswith(MONOLITH):
        wiki, _, path = path.partition("/")
    return wiki, _doc_id(path)


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
                    wiki, doc = _beir_doc(document)
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


def report(datasets: list[Dataset], results: dict[str, MethodResult], k: int = NDCG_K) -> dict:
    """The JSON shape ``wikirag eval --json`` prints."""
    return {
        "k": k,
        "datasets": {d.name: {"docs": d.docs, "queries": len(d.queries)} for d in datasets},
        "results": {m: {"per_dataset": r.per_dataset, "macro": r.macro, "queries_per_s": r.queries_per_s}
                    for m, r in results.items()},
    }
