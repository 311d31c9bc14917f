"""Does the cross-wiki fusion generalise? The dev mix, every 2-wiki pair and every leave-one-out mix.

Runs the product's own query path (:func:`wikirag.evaluate.evaluate`, what ``wikirag eval`` runs) on:

* the five dev datasets together (scifact, cranfield, cisi, lisa, npl);
* all 10 pairs of them;
* the 5 leave-one-dataset-out mixes (four datasets each, one left out).

For each mix it prints macro nDCG@10 of ``monolith`` (one index), ``oracle`` (the query's own wiki
only), ``rrf``, ``dfs``, ``dfs-prior`` and ``routed`` (the default: the routing stage with its shipped
``ROUTING_STRENGTH``), and **routed (LOCO)**: the routing strength chosen by leave-one-collection-out.
For each collection, the tuning rule (:func:`choose`: the best mean macro nDCG@10 among the strengths
of :data:`GRID` that keep every mix at least at the monolith) runs on the mixes that do not contain it
(tuned on the other four), and its queries are scored at that strength in every mix that contains it;
a mix's LOCO figure is the mean over its collections of those held-out scores. The folds' choices are
printed, and the rule's choice on all 16 mixes (what ``ROUTING_STRENGTH`` should be). Then Recall@100 per mix (monolith, dfs-prior, routed) and queries/s.

Run from the repository root (a few minutes; datasets are converted and indexed once, cached)::

    python bench/fusion_eval.py [--eval-dir ../shared/eval] [--cache DIR] [--layers bm25,dense] [--json]

``--layers bm25,dense`` embeds the five corpora with the offline model the first time (about 25
minutes on 2 cores), then runs the same with both layers.
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
from wikirag import fusion

REPO = Path(__file__).resolve().parents[1]
DEV = ["beir/scifact", "classic/cranfield", "classic/cisi", "classic/lisa", "classic/npl"]
METHODS = [beir.MONOLITH, ev.ORACLE, "rrf", "dfs", "dfs-prior", "routed"]
GRID = [0.0, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8]  # routing strengths tried (0: no routing, the dfs ranking)
LOCO = "routed (LOCO)"


def mixes(names: list[str]) -> list[tuple[str, list[str]]]:
    out = [("all five", names)]
    out += [(" + ".join(pair), list(pair)) for pair in itertools.combinations(names, 2)]
    out += [(f"without {left}", [n for n in names if n != left]) for left in names]
    return out


def _macro(per_dataset: dict[str, float]) -> float:
    return sum(per_dataset.values()) / len(per_dataset)


def choose(rows: list[dict], grid_ndcg: list[list[dict[str, float]]], mixes_used: list[int]) -> tuple[int, dict]:
    """The strength the tuning rule picks on these mixes: the best mean macro nDCG@10 among the strengths
    that leave every one of them at least at the monolith (do no harm), else the best mean; ties go to the
    weaker strength."""
    mean = [sum(_macro(grid_ndcg[g][m]) for m in mixes_used) / len(mixes_used) for g in range(len(GRID))]
    harmless = [g for g in range(len(GRID))
                if all(_macro(grid_ndcg[g][m]) >= rows[m]["macro_ndcg@10"][beir.MONOLITH] - 1e-9 for m in mixes_used)]
    best = max(harmless or range(len(GRID)), key=lambda g: (mean[g], -g))
    return best, {"strength": GRID[best], "mixes": len(mixes_used), "mean_ndcg@10": mean[best],
                  "harmless": bool(harmless)}


def leave_one_out(rows: list[dict], grid_ndcg: list[list[dict[str, float]]]) -> tuple[list[dict[str, float]], dict]:
    """The LOCO figures: ``grid_ndcg[g][m]`` is mix ``m``'s per-dataset nDCG@10 at strength ``GRID[g]``.

    For each collection, :func:`choose` on the mixes without it; its queries are then scored at that
    strength in every mix that holds it. Returns each mix's per-dataset held-out nDCG@10 and each fold's
    choice."""
    collections = sorted({d for r in rows for d in r["datasets"]})
    chosen = {}
    for held in collections:
        _, chosen[held] = choose(rows, grid_ndcg, [m for m, r in enumerate(rows) if held not in r["datasets"]])
    held_out = [{d: grid_ndcg[GRID.index(chosen[d]["strength"])][m][d] for d in r["datasets"]}
                for m, r in enumerate(rows)]
    return held_out, chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, default=REPO.parent / "shared" / "eval")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "wikirag" / "eval")
    parser.add_argument("--layers", default="bm25", help="bm25 (default) or bm25,dense")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON")
    args = parser.parse_args()
    layers = tuple(x.strip() for x in args.layers.split(",") if x.strip())
    folders = [args.eval_dir / d for d in DEV]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        sys.exit(f"error: missing dataset folders: {', '.join(missing)} (pass --eval-dir)")
    datasets = {f.name: beir.load_beir(f) for f in folders}
    rows, grid_ndcg = [], [[] for _ in GRID]
    shipped = fusion.ROUTING_STRENGTH
    for label, names in mixes(list(datasets)):
        started = time.perf_counter()
        chosen = [datasets[n] for n in names]
        ws = beir.prepare(chosen, args.cache, layers=layers)
        results = ev.evaluate(ws, chosen, METHODS, layers=layers)
        for g, strength in enumerate(GRID):
            fusion.ROUTING_STRENGTH = strength
            try:
                tried = ev.evaluate(ws, chosen, ["routed"], layers=layers)["routed"]
            finally:
                fusion.ROUTING_STRENGTH = shipped
            grid_ndcg[g].append({d: v["ndcg@10"] for d, v in tried.per_dataset.items()})
        rows.append({"mix": label, "datasets": names,
                     "macro_ndcg@10": {m: r.macro["ndcg@10"] for m, r in results.items()},
                     "macro_recall@100": {m: r.macro["recall@100"] for m, r in results.items()},
                     "per_dataset_ndcg@10": {m: {d: v["ndcg@10"] for d, v in r.per_dataset.items()}
                                             for m, r in results.items()},
                     "queries_per_s": {m: r.queries_per_s for m, r in results.items()}})
        print(f"{label}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    held_out, folds = leave_one_out(rows, grid_ndcg)
    _, on_all = choose(rows, grid_ndcg, list(range(len(rows))))  # the rule on every mix: what ships
    for row, per in zip(rows, held_out):
        row["macro_ndcg@10"][LOCO] = _macro(per)
        row["per_dataset_ndcg@10"][LOCO] = per
    for row, *per_grid in zip(rows, *grid_ndcg):
        row["grid_macro_ndcg@10"] = {str(s): _macro(p) for s, p in zip(GRID, per_grid)}
    if args.json:
        print(json.dumps({"layers": layers, "shipped_strength": shipped, "rule_on_all_mixes": on_all, "folds": folds,
                          "mixes": rows, "grid": GRID, "grid_per_dataset_ndcg@10": grid_ndcg}, indent=2))
        return
    shown = [*METHODS, LOCO]
    print(f"macro nDCG@10, layers {' + '.join(layers)}\n")
    print("| mix | " + " | ".join(shown) + " |")
    print("|---|" + "---:|" * len(shown))
    for row in rows:
        print(f"| {row['mix']} | " + " | ".join(f"{row['macro_ndcg@10'][m]:.3f}" for m in shown) + " |")
    print()
    for method in shown[2:]:
        values = [r["macro_ndcg@10"][method] for r in rows]
        at_least = sum(r["macro_ndcg@10"][method] >= r["macro_ndcg@10"][beir.MONOLITH] - 1e-9 for r in rows)
        print(f"- {method}: mean over the {len(rows)} mixes {sum(values) / len(values):.4f}; "
              f">= monolith in {at_least} of {len(rows)}")
    mono = [r["macro_ndcg@10"][beir.MONOLITH] for r in rows]
    oracle = [r["macro_ndcg@10"][ev.ORACLE] for r in rows]
    print(f"- monolith mean {sum(mono) / len(mono):.4f}; oracle mean {sum(oracle) / len(oracle):.4f}")
    print("\nLOCO folds (strength chosen without the collection; mean macro nDCG@10 on its training mixes):")
    for held, fold in folds.items():
        print(f"- without {held}: strength {fold['strength']} ({fold['mixes']} mixes, {fold['mean_ndcg@10']:.4f}"
              f"{'' if fold['harmless'] else '; no strength kept every training mix at the monolith'})")
    print(f"- the rule on all {len(rows)} mixes: strength {on_all['strength']} (shipped: {shipped})")
    print("\nmean macro nDCG@10 over the 16 mixes by strength: "
          + ", ".join(f"{s}: {sum(r['grid_macro_ndcg@10'][str(s)] for r in rows) / len(rows):.4f}" for s in GRID))
    print("\n| mix | Recall@100 monolith | dfs-prior | routed | q/s dfs-prior | q/s routed |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        r, q = row["macro_recall@100"], row["queries_per_s"]
        print(f"| {row['mix']} | {r[beir.MONOLITH]:.3f} | {r['dfs-prior']:.3f} | {r['routed']:.3f} | "
              f"{q['dfs-prior']:.0f} | {q['routed']:.0f} |")


if __name__ == "__main__":
    main()
