"""Does the routing stage rank the wiki a question belongs to first, on the example wikis?

The answerable questions of ``bench/questions.jsonl`` asked of a composition of two wikis or more, and
among them the ``shared`` ones: questions whose telling word is in both wikis of the ``security``
composition ("rotation": the on-call rotation and credential rotation; "review": code review, vendor
security reviews and access reviews; "approval", "rollback", "incident"), each with the one page that
answers it. For ``routed`` (the default), ``dfs-prior`` and ``dfs`` (no routing) it reports

* **wiki@1**: the first passage is from the question's wiki;
* **hit@1** / **hit@3**: the question's page is the first passage / among the first three;

with BM25 alone and with every layer the wikis have (BM25 + dense, then the second stage that re-orders
the top 10 by cosine). It runs in a temporary copy of ``wikis/`` and ``rags/``, built fresh (the same
workspace ``bench/answer_eval.py`` makes, without the tldr wiki). Run from the repository root::

    python bench/routing_eval.py [--workspace DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from answer_eval import workspace

from wikirag import Workspace
from wikirag.retrieval import LAYERS, search

REPO = Path(__file__).resolve().parents[1]
FUSIONS = ["routed", "dfs-prior", "dfs"]
LAYER_SETS = {"bm25": ("bm25",), "every layer": LAYERS}


def build(folder: Path | None) -> tuple[Path, bool]:
    """answer_eval's workspace without the tldr wiki."""
    return workspace(folder, None, prefix="routing-eval-")


def run(home: Path) -> dict:
    ws = Workspace(home)
    items = [json.loads(line) for line in (REPO / "bench" / "questions.jsonl").read_text().splitlines() if line]
    items = [q for q in items if q["answerable"] and (home / "rags" / f"{q['composition']}.yaml").is_file()
             and len(ws.composition(q["composition"], q["clearance"]).names) > 1]
    report: dict = {"questions": len(items), "shared": sum("shared" in q for q in items), "results": {}}
    for layer_name, layers in LAYER_SETS.items():
        for fusion in FUSIONS:
            rows = []
            for q in items:
                result = search(ws, q["composition"], q["question"], clearance=q["clearance"], k=5,
                                fusion=fusion, layers=layers)
                pages = [(p.wiki, p.path) for p in result.passages]
                expected = (q["wiki"], q["page"])
                rows.append({"id": q["id"], "shared": "shared" in q,
                             "wiki@1": bool(pages) and pages[0][0] == q["wiki"],
                             "hit@1": bool(pages) and pages[0] == expected, "hit@3": expected in pages[:3],
                             "weights": {r.wiki: round(r.weight, 3) for r in result.routing}})
            report["results"][f"{layer_name} / {fusion}"] = {
                subset: {m: sum(r[m] for r in chosen) / len(chosen) for m in ("wiki@1", "hit@1", "hit@3")}
                for subset, chosen in (("shared", [r for r in rows if r["shared"]]), ("all", rows))} | {"rows": rows}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, help="build here once and reuse (default: a temporary one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    home, made = build(args.workspace)
    try:
        report = run(home)
    finally:
        if made:
            shutil.rmtree(home, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['shared']} shared-word questions (composition security), {report['questions']} answerable "
          "questions of compositions with two wikis or more\n")
    print("| layers / fusion | shared wiki@1 | shared hit@1 | shared hit@3 | all wiki@1 | all hit@1 | all hit@3 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in report["results"].items():
        s, a = r["shared"], r["all"]
        print(f"| {name} | {s['wiki@1']:.0%} | {s['hit@1']:.0%} | {s['hit@3']:.0%} | {a['wiki@1']:.0%} | "
              f"{a['hit@1']:.0%} | {a['hit@3']:.0%} |")


if __name__ == "__main__":
    main()
