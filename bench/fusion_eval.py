"""Does the cross-wiki fusion generalise? The dev mix, every 2-wiki pair and every leave-one-out mix.

Runs ``wikirag eval`` (the library's :mod:`wikirag.evaluate`, the product's own query path) on:

* the five dev datasets together (scifact, cranfield, cisi, lisa, npl);
* all 10 pairs of them;
* the 5 leave-one-dataset-out mixes (four datasets each, one left out).

No fusion constant is tuned on these mixes: ``dfs-prior`` has none besides the Dirichlet smoothing
constant (2000) taken from the query-likelihood literature. For each mix it prints macro nDCG@10 of
``monolith`` (one index), ``oracle`` (the query's own wiki only), ``rrf``, ``dfs`` and ``dfs-prior``,
and a summary: the mean over mixes and how often each method is at least the monolith.

Run from the repository root (takes a few minutes the first time; datasets are cached)::

    python bench/fusion_eval.py [--eval-dir ../shared/eval] [--cache DIR] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from wikirag import beir
from wikirag import evaluate as ev

REPO = Path(__file__).resolve().parents[1]
DEV = ["beir/scifact", "classic/cranfield", "classic/cisi", "classic/lisa", "classic/npl"]
METHODS = [beir.MONOLITH, ev.ORACLE, "rrf", "dfs", "dfs-prior"]


def mixes(names: list[str]) -> list[tuple[str, list[str]]]:
    out = [("all five", names)]
    out += [(" + ".join(pair), list(pair)) for pair in itertools.combinations(names, 2)]
    out += [(f"without {left}", [n for n in names if n != left]) for left in names]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, default=REPO.parent / "shared" / "eval")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "wikirag" / "eval")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON")
    args = parser.parse_args()
    folders = [args.eval_dir / d for d in DEV]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        sys.exit(f"error: missing dataset folders: {', '.join(missing)} (pass --eval-dir)")
    datasets = {f.name: beir.load_beir(f) for f in folders}
    rows = []
    for label, names in mixes(list(datasets)):
        started = time.perf_counter()
        chosen = [datasets[n] for n in names]
        ws = beir.prepare(chosen, args.cache)
        results = ev.evaluate(ws, chosen, METHODS)
        rows.append({"mix": label, "datasets": names,
                     "macro_ndcg@10": {m: r.macro["ndcg@10"] for m, r in results.items()},
                     "per_dataset_ndcg@10": {m: {d: v["ndcg@10"] for d, v in r.per_dataset.items()}
                                             for m, r in results.items()},
                     "queries_per_s": {m: r.queries_per_s for m, r in results.items()}})
        print(f"{label}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| mix | " + " | ".join(METHODS) + " |")
    print("|---|" + "---:|" * len(METHODS))
    for row in rows:
        print(f"| {row['mix']} | " + " | ".join(f"{row['macro_ndcg@10'][m]:.3f}" for m in METHODS) + " |")
    print()
    for method in METHODS[2:]:
        values = [r["macro_ndcg@10"][method] for r in rows]
        at_least = sum(r["macro_ndcg@10"][method] >= r["macro_ndcg@10"][beir.MONOLITH] - 1e-9 for r in rows)
        print(f"- {method}: mean over the {len(rows)} mixes {sum(values) / len(values):.4f}; "
              f">= monolith in {at_least} of {len(rows)}")
    mono = [r["macro_ndcg@10"][beir.MONOLITH] for r in rows]
    oracle = [r["macro_ndcg@10"][ev.ORACLE] for r in rows]
    print(f"- monolith mean {sum(mono) / len(mono):.4f}; oracle mean {sum(oracle) / len(oracle):.4f}")


if __name__ == "__main__":
    main()
