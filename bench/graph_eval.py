"""Benchmark: does the graph layer find what needs two linked pages, and what does it cost?

1. **Multi-hop check**, three question sets over the example wiki ``northwind-systems`` (a systems
   catalogue written for this, linking into ``engineering-handbook``), against the ``systems``
   composition (internal caller):

   * ``bench/multihop_hard.jsonl``: 88 questions, each naming a project or service and asking for a fact
     only on a page it links to (52 one-hop), on a page that page links to (30 two-hop: project →
     service → team), or in the handbook a team page links into (6 cross-wiki). Written so that no
     question repeats the answer page's title or its section's heading ("the store holding its sessions
     and rendered fragments" for Quartz Cache; "biggest value … turned away" for "Limits"). Each has the
     page the question names (``start_page``), the answer page and an exact ``fact`` of it.
   * ``bench/multihop_qa.jsonl``: the first 24, easier (they may say the heading's words).
   * ``bench/singlehop_qa.jsonl``: 20 direct questions, the control the graph must not spoil.
   * ``bench/multihop_unanswerable.jsonl``: 20 questions written the same way (a project named, a linked
     service or team described) for a fact no page has (a cost, a mascot, a licence fee): the offline
     answer must refuse them. Only the refusals are reported for it.

   For each of the layer sets bm25, bm25+graph, bm25+dense, bm25+dense+graph (the default, as every
   example wiki has a dense layer): **passage recall@5 / @10** (a passage of the answer page holding the
   fact among the top 5 / 10 of ``search``), **page nDCG@10** and page recall@10 (``wikirag eval``'s
   path: documents are pages), and search milliseconds p50 / p95 over the set. Then, with the default
   layers and the composition's ``k``, the **offline answer** (extractive): right when it holds the fact
   and cites the answer page and the page the question names; the hop stated ("Project Falcon → …").
2. **Cost.** A generated 1,000-page wiki (random words, 2–6 wikilinks per page, a fixed seed) with the
   graph layer: query latency p50/p95 with and without it, and the build seconds. Index cost in LLM
   calls is 0 by construction — the build is checked not to import ``litellm`` at all.

Everything is built in a temporary workspace (copies of the two example wikis), removed at the end.
Run from the repository root (about a minute)::

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
LAYER_SETS = {"bm25": BASE, "bm25+graph": GRAPH, "bm25+dense": ("bm25", "dense"),
              "bm25+dense+graph": ("bm25", "dense", "graph")}
SETS = ("multihop_hard.jsonl", "multihop_qa.jsonl", "singlehop_qa.jsonl")
UNANSWERABLE = "multihop_unanswerable.jsonl"


def _questions(name: str) -> list[dict]:
    return [json.loads(line) for line in (REPO / "bench" / name).read_text(encoding="utf-8").splitlines() if line]


def _workspace(root: Path) -> Workspace:
    home = root / "ws"
    for wiki in ("northwind-systems", "engineering-handbook"):
        shutil.copytree(REPO / "wikis" / wiki, home / "wikis" / wiki, ignore=shutil.ignore_patterns(".index"))
    (home / "rags").mkdir()
    shutil.copy(REPO / "rags" / "systems.yaml", home / "rags" / "systems.yaml")
    ws = Workspace(home)
    for name in ws.wiki_names():
        build(ws.wiki(name))
    return ws


def _wiki(q: dict) -> str:
    return q.get("answer_wiki", "northwind-systems")


def _pct(values: list[float], q: int) -> float:
    return round(statistics.quantiles(values, n=100)[q - 1], 2) if len(values) > 1 else round(values[0], 2)


def retrieval_quality(ws: Workspace, questions: list[dict], layers: tuple[str, ...]) -> dict:
    queries = [(f"q{i}", q["question"]) for i, q in enumerate(questions)]
    qrels = {f"q{i}": {f"{_wiki(q)}/{q['answer_page']}": 1} for i, q in enumerate(questions)}
    pages = evaluate_composition(ws, "systems", queries, qrels, ["dfs-prior"], clearance="internal",
                                 layers=layers)["dfs-prior"].macro
    for q in questions[:3]:  # warm: load, merge, embed once before timing
        search(ws, "systems", q["question"], clearance="internal", k=10, layers=layers, audit_event=None)
    ranks, ms = [], []
    for q in questions:
        started = time.perf_counter()
        result = search(ws, "systems", q["question"], clearance="internal", k=10, layers=layers, audit_event=None)
        ms.append((time.perf_counter() - started) * 1000)
        ranks.append(next((p.rank for p in result.passages if p.wiki == _wiki(q) and p.path == q["answer_page"]
                           and q["fact"] in p.text), None))
    by_kind: dict[str, list[bool]] = {}
    for q, r in zip(questions, ranks):
        by_kind.setdefault(q.get("kind", "single-hop"), []).append(r is not None)
    return {"passage_recall@5": round(sum(r is not None and r <= 5 for r in ranks) / len(ranks), 3),
            "passage_recall@10": round(sum(r is not None for r in ranks) / len(ranks), 3),
            "page_ndcg@10": round(pages["ndcg@10"], 3), "page_recall@10": round(pages["recall@10"], 3),
            "ms_p50": _pct(ms, 50), "ms_p95": _pct(ms, 95),
            "passage_recall@10_by_kind": {k: f"{sum(v)}/{len(v)}" for k, v in by_kind.items()}}


def answer_quality(ws: Workspace, questions: list[dict]) -> dict:
    """The offline answer with the default layers and the composition's k: right = the fact, the answer
    page cited and the page the question names cited (for a direct question, the answer page)."""
    from wikirag.answers import answer

    right = fact = hop = 0
    for q in questions:
        result = answer(ws, "systems", q["question"], clearance="internal", model="extractive").result
        cited = {(c.passage.wiki, c.passage.path) for c in result.citations}
        has = q["fact"] in result.text
        fact += has
        hop += " → " in result.text
        right += has and (_wiki(q), q["answer_page"]) in cited and \
            ("northwind-systems", q.get("start_page", q["answer_page"])) in cited
    n = len(questions)
    return {"right": f"{right}/{n}", "right_share": round(right / n, 3), "fact": f"{fact}/{n}",
            "hop_stated": f"{hop}/{n}"}


def refusals(ws: Workspace, questions: list[dict]) -> dict:
    """The offline answer (default layers, the composition's k) to questions no page answers: refused or not."""
    from wikirag.answers import answer
    from wikirag.prompt import NO_ANSWER

    refused = sum(answer(ws, "systems", q["question"], clearance="internal", model="extractive").result.text.strip()
                  == NO_ANSWER for q in questions)
    return {"refused": f"{refused}/{len(questions)}", "refused_share": round(refused / len(questions), 3)}


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

    return {"pages": 1000, "chunks": report.chunks, "build_seconds": round(build_seconds, 2),
            "llm_calls_at_index_time": 0 if not llm_imported else "litellm was imported!",
            "bm25_p50_ms": _pct(times[BASE], 50), "bm25_p95_ms": _pct(times[BASE], 95),
            "graph_p50_ms": _pct(times[GRAPH], 50), "graph_p95_ms": _pct(times[GRAPH], 95),
            "overhead_p50_ms": round(_pct(times[GRAPH], 50) - _pct(times[BASE], 50), 2),
            "overhead_p95_ms": round(_pct(times[GRAPH], 95) - _pct(times[BASE], 95), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wikirag-graph-bench-"))
    try:
        out: dict = {}
        ws = _workspace(root)
        for set_name in SETS:
            qs = _questions(set_name)
            out[set_name] = {"questions": len(qs),
                             "layers": {name: retrieval_quality(ws, qs, layers) for name, layers in LAYER_SETS.items()},
                             "answers": answer_quality(ws, qs)}
        out[UNANSWERABLE] = refusals(ws, _questions(UNANSWERABLE))
        out["overhead"] = overhead(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for set_name in SETS:
        print(f"{set_name} ({out[set_name]['questions']} questions)")
        print("| layers | passage R@5 | passage R@10 | page nDCG@10 | page R@10 | ms p50 / p95 | R@10 by kind |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for name, r in out[set_name]["layers"].items():
            kinds = ", ".join(f"{k} {v}" for k, v in r["passage_recall@10_by_kind"].items())
            print(f"| {name} | {r['passage_recall@5']:.3f} | {r['passage_recall@10']:.3f} | {r['page_ndcg@10']:.3f} | "
                  f"{r['page_recall@10']:.3f} | {r['ms_p50']} / {r['ms_p95']} | {kinds} |")
        a = out[set_name]["answers"]
        print(f"offline answers: right {a['right']} ({a['right_share']:.0%}), fact {a['fact']}, "
              f"hop stated {a['hop_stated']}\n")
    r = out[UNANSWERABLE]
    print(f"{UNANSWERABLE}: offline answers refused {r['refused']} ({r['refused_share']:.0%})\n")
    print("overhead on a 1,000-page wiki:", json.dumps(out["overhead"]))


if __name__ == "__main__":
    main()
