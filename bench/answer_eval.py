"""Which answer mode should be the offline default? Extractive vs the bundled local model, measured.

Runs ``bench/qa_examples.jsonl`` (24 hand-made questions over the example wikis, each with the page
that answers it and 1–2 exact facts a correct answer contains) through :func:`wikirag.answers.answer`
— retrieval, prompt, model, citation check — for each mode, and reports per mode:

* facts: share of answers containing every expected fact (case and whitespace ignored);
* page cited: share of answers citing a passage from the expected page;
* cited: share of answers with at least one valid citation; invalid: citations naming no passage;
* time to first token, answer seconds and (for models) decoding tokens/s (after the first token).

Run from the repository root (the local model starts on demand; stop it with ``wikirag serve-model --stop``)::

    python bench/answer_eval.py [--models extractive local] [-k 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from wikirag import Workspace
from wikirag.answers import answer

REPO = Path(__file__).resolve().parents[1]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def run(models: list[str], k: int) -> dict:
    ws = Workspace(REPO)
    items = [json.loads(line) for line in (REPO / "bench" / "qa_examples.jsonl").read_text().splitlines() if line]
    report = {}
    for model in models:
        rows = []
        for item in items:
            result = answer(ws, item["composition"], item["question"], clearance=item["clearance"],
                            model=model, k=k).result
            pages = {(c.wiki, c.path) for c in result.citations}
            rows.append({
                "question": item["question"],
                "answer": result.text,
                "facts": all(_norm(f) in _norm(result.text) for f in item["facts"]),
                "page_cited": (item["wiki"], item["page"]) in pages,
                "page_retrieved": any((p.wiki, p.path) == (item["wiki"], item["page"]) for p in result.passages),
                "cited": bool(result.citations),
                "invalid": len(result.invalid_citations),
                "error": result.error,
                "first_token_s": result.first_token_seconds,
                "seconds": result.generation_seconds,
                "completion_tokens": result.completion_tokens,
            })
            print(f"{model}: {item['question'][:60]} -> {'ok' if rows[-1]['facts'] else '--'}", file=sys.stderr)
        # decoding speed: tokens after the first one, over the time after the first one (prefill excluded)
        tokens = [(r["completion_tokens"] - 1) / (r["seconds"] - r["first_token_s"]) for r in rows
                  if r["completion_tokens"] and r["completion_tokens"] > 1 and r["seconds"] > (r["first_token_s"] or 0)]
        report[model] = {
            "facts": sum(r["facts"] for r in rows) / len(rows),
            "page_cited": sum(r["page_cited"] for r in rows) / len(rows),
            "page_retrieved": sum(r["page_retrieved"] for r in rows) / len(rows),
            "cited": sum(r["cited"] for r in rows) / len(rows),
            "invalid_citations": sum(r["invalid"] for r in rows),
            "errors": sum(1 for r in rows if r["error"]),
            "first_token_s_median": statistics.median(r["first_token_s"] or 0 for r in rows),
            "answer_s_median": statistics.median(r["seconds"] for r in rows),
            "tokens_per_s_median": statistics.median(tokens) if tokens else None,
            "rows": rows,
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["extractive", "local"])
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run(args.models, args.k)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    print(f"| mode (k = {args.k}) | facts | page cited | page retrieved | cited | invalid | "
          "first token s | answer s | tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model, r in report.items():
        tps = f"{r['tokens_per_s_median']:.0f}" if r["tokens_per_s_median"] else "–"
        print(f"| {model} | {r['facts']:.0%} | {r['page_cited']:.0%} | {r['page_retrieved']:.0%} | {r['cited']:.0%} "
              f"| {r['invalid_citations']} | {r['first_token_s_median']:.2f} | {r['answer_s_median']:.2f} | {tps} |")


if __name__ == "__main__":
    main()
