"""Benchmark: does the graph layer find what needs two linked pages, and what does it cost?

1. **Multi-hop check.** ``bench/multihop_qa.jsonl``: 24 questions over the example wiki
   ``northwind-systems``, hand-made for this check (as is the wiki): each names a product or service
   and asks for a fact that is only on a page it links to ("What time of night does the backup of
   the database behind Project Falcon kick off?" — Falcon's page links to Cobalt DB's, which has the
   time). ``bench/singlehop_qa.jsonl``: 20 direct questions on the same wiki, the control that the
   graph must not spoil. Both run against the ``systems`` composition (the catalogue + the handbook)
   with ``layers`` bm25 vs bm25+graph (and with ``graph: {tags: true}``), reporting

   * Recall@10 of the answer *page* (``wikirag eval``'s path: documents are pages, depth 200), and
   * Recall@5 / @10 of the answer page among the top 5 / 10 *passages* (``search(k=10)``: what
     ``ask`` would give a model), and the mean rank of the answer page.
2. **Cost.** A generated 1,000-page wiki (random words, 2–6 wikilinks per page, a fixed seed) with the
   graph layer: query latency p50/p95 with and without it, and the build seconds. Index cost in LLM
   calls is 0 by construction — the build is checked not to import ``litellm`` at all.

Everything is built in a temporary workspace (copies of the two example wikis), removed at the end.
Run from the repository root::

    python bench/graph_eval.py [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from wikirag import Workspace, build, search
from wikirag.evaluate import evaluate_composition

SEED = 7
BASE = ("bm25",)
GRAPH = ("bm25", "graph")


def _questions(name: str) -> list[dict]:
    return [json.loads(line) for line in (REPO / "bench" / name).read_text(encoding="utf-8").splitlines() if line]


def _workspace(root: Path, tags: bool = False) -> Workspace:
    home = root / ("ws-tags" if tags else "ws")
    for wiki in ("northwind-systems", "engineering-handbook"):
        shutil.copytree(REPO / "wikis" / wiki, home / "wikis" / wiki, ignore=shutil.ignore_patterns(".index"))
    (home / "rags").mkdir()
    shutil.copy(REPO / "rags" / "systems.yaml", home / "rags" / "systems.yaml")
    if tags:
        manifest = home / "wikis" / "northwind-systems" / ".wiki.yaml"
        manifest.write_text(manifest.read_text().replace("graph: {}", "graph: {tags: true}"))
    ws = Workspace(home)
    for name in ws.wiki_names():
        build(ws.wiki(name))
    return ws


def answer_quality(ws: Workspace, questions: list[dict], layers: tuple[str, ...]) -> dict:
    queries = [(f"q{i}", q["question"]) for i, q in enumerate(questions)]
    qrels = {f"q{i}": {f"northwind-systems/{q['answer_page']}": 1} for i, q in enumerate(questions)}
    pages = evaluate_composition(ws, "systems", queries, qrels, ["dfs-prior"], clearance="internal",
                                 layers=layers)["dfs-prior"].macro
    ranks = []
    for q in questions:
        result = search(ws, "systems", q["question"], clearance="internal", k=10, layers=layers, audit_event=None)
        found = [p.path for p in result.passages if p.wiki == "northwind-systems"]
        ranks.append(next((r for r, p in enumerate(result.passages, 1)
                           if p.wiki == "northwind-systems" and p.path == q["answer_page"]), None) if found else None)
    hit = [r for r in ranks if r is not None]
    return {"page_recall@10": round(pages["recall@10"], 3), "page_ndcg@10": round(pages["ndcg@10"], 3),
            "passage_recall@5": round(sum(r <= 5 for r in hit) / len(ranks), 3),
            "passage_recall@10": round(len(hit) / len(ranks), 3),
            "mean_rank_when_found": round(statistics.mean(hit), 2) if hit else None}


def _generated_wiki(home: Path, pages: int = 1000) -> Workspace:
    rng = random.Random(SEED)
    words = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "vu", "ze")
             for b in ("ban", "cor", "dil", "fen", "gat", "hum", "jor", "kel", "mon", "pir", "quo", "sel")]
    folder = home / "wikis" / "linked"
    folder.mkdir(parents=True)
    (folder / ".wiki.yaml").write_text("name: linked\ntitle: Generated\nsensitivity: public\nlayers:\n  graph: {}\n")
    for i in range(pages):
        links = " ".join(f"[[page-{rng.randrange(pages)}]]" for _ in range(rng.randint(2, 6)))
        sections = "\n\n".join(f"## Part {s}\n\n" + " ".join(rng.choices(words, k=60)) for s in range(3))
        (folder / f"page-{i}.md").write_text(f"# Page {i}\n\nSee {links}.\n\n{sections}\n", encoding="utf-8")
    (home / "rags").mkdir()
    (home / "rags" / "linked.yaml").write_text("name: linked\nsensitivity: public\nwikis: [linked]\n")
    return Workspace(home)


def overhead(root: Path, queries: int = 300) -> dict:
    ws = _generated_wiki(root / "gen")
    before = "litellm" in sys.modules
    started = time.perf_counter()
    report = build(ws.wiki("linked"))
    build_seconds = time.perf_counter() - started
    llm_imported = "litellm" in sys.modules and not before
    rng = random.Random(SEED + 1)
    vocab = [w for w in (ws.wiki("linked").folder / "page-0.md").read_text().split() if w.isalpha()]
    texts = [" ".join(rng.sample(vocab, 3)) for _ in range(queries)]
    times: dict[tuple[str, ...], list[float]] = {BASE: [], GRAPH: []}
    for layers in (BASE, GRAPH):  # warm up: load, merge, build the joined graph
        for text in texts[:10]:
            search(ws, "linked", text, clearance="public", k=10, layers=layers, audit_event=None)
    for text in texts:
        for layers in (BASE, GRAPH):
            t = time.perf_counter()
            search(ws, "linked", text, clearance="public", k=10, layers=layers, audit_event=None)
            times[layers].append((time.perf_counter() - t) * 1000)

    def pct(values: list[float], q: float) -> float:
        return round(statistics.quantiles(values, n=100)[int(q) - 1], 2)

    return {"pages": 1000, "chunks": report.chunks, "build_seconds": round(build_seconds, 2),
            "llm_calls_at_index_time": 0 if not llm_imported else "litellm was imported!",
            "bm25_p50_ms": pct(times[BASE], 50), "bm25_p95_ms": pct(times[BASE], 95),
            "graph_p50_ms": pct(times[GRAPH], 50), "graph_p95_ms": pct(times[GRAPH], 95),
            "overhead_p50_ms": round(pct(times[GRAPH], 50) - pct(times[BASE], 50), 2),
            "overhead_p95_ms": round(pct(times[GRAPH], 95) - pct(times[BASE], 95), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wikirag-graph-bench-"))
    try:
        out: dict = {}
        ws, ws_tags = _workspace(root), _workspace(root, tags=True)
        for set_name in ("multihop_qa.jsonl", "singlehop_qa.jsonl"):
            qs = _questions(set_name)
            out[set_name] = {"questions": len(qs), "bm25": answer_quality(ws, qs, BASE),
                             "bm25+graph": answer_quality(ws, qs, GRAPH),
                             "bm25+graph (tags)": answer_quality(ws_tags, qs, GRAPH)}
        out["overhead"] = overhead(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for set_name in ("multihop_qa.jsonl", "singlehop_qa.jsonl"):
        print(f"{set_name} ({out[set_name]['questions']} questions)")
        print("| layers | page R@10 | page nDCG@10 | passage R@5 | passage R@10 | mean rank |")
        print("|---|---:|---:|---:|---:|---:|")
        for name in ("bm25", "bm25+graph", "bm25+graph (tags)"):
            r = out[set_name][name]
            print(f"| {name} | {r['page_recall@10']:.3f} | {r['page_ndcg@10']:.3f} | {r['passage_recall@5']:.3f} | "
                  f"{r['passage_recall@10']:.3f} | {r['mean_rank_when_found']} |")
    print("overhead on a 1,000-page wiki:", json.dumps(out["overhead"]))


if __name__ == "__main__":
    main()
