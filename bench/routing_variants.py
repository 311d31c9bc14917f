"""The routing methods tried besides the shipped one, on the 16 mixes of ``bench/fusion_eval.py`` (BM25).

For each mix and query it takes, once, each wiki's top 400 documents with the composition's BM25
statistics (``dfs`` scores: the product's own merged view and scoring), then re-ranks them offline under
each routing method, so that a method is a function of (per-wiki statistics, per-wiki lists) → per-wiki
scale and offset. nDCG@10 is computed as ``wikirag eval`` does (other collections' documents count as
non-relevant). The shipped ``routed`` fusion is re-computed here too: its figures match
``bench/fusion_eval.py``'s (the check that this harness ranks as the product does).

Reports:

* **routing accuracy** of each wiki-level signal on the dev mix: how often the wiki it scores highest is
  the query's own (the language model of ``dfs-prior``/``routed`` at several smoothings, document
  frequencies instead of counts, CORI, ReDDE counts in the top 50 of the merged ranking, per-size
  ReDDE, the wiki's best and top-10 mean score; the nearest dense centroid, when the workspace's wikis
  have the dense layer: after ``fusion_eval.py --layers bm25,dense``);
* **macro nDCG@10** per mix and the mean over the 16 for: a hard cut to the most likely wiki; a cut of
  the wikis below a share of the best one's weight; a multiplicative weight ``P(wiki)^λ``; the shipped
  additive offset at every strength, and its leave-one-collection-out (LOCO) choice; a learned router
  (a conditional logit over six signals, trained by LOCO on the queries of the other four collections,
  offset ``λ × top × log p``).

Run from the repository root (about 5 minutes; uses ``bench/fusion_eval.py``'s cached workspace, built
if needed)::

    python bench/routing_variants.py [--eval-dir ../shared/eval] [--cache DIR]
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import yaml

from wikirag import beir, retrieval
from wikirag import fusion as F
from wikirag.access import Level
from wikirag.bm25 import tokenize

sys.path.insert(0, str(Path(__file__).parent))
from fusion_eval import DEV, mixes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEPTH = 400


def collect(ws, datasets: dict, label: str, names: list[str]) -> dict:
    """Per query: each wiki's top documents (id, best passage's dfs score), term counts and frequencies."""
    comp_name = "variants-" + "-".join(names)
    (ws.rags_dir / f"{comp_name}.yaml").write_text(yaml.safe_dump({"name": comp_name, "sensitivity": "public",
                                                                  "wikis": names}))
    comp = retrieval.resolve(ws, comp_name, Level.PUBLIC)
    cache = retrieval.DEFAULT_CACHE
    indexes, *_, builds = cache.serving(comp.wikis, lambda: retrieval._serving(comp.wikis, cache, ws.home))
    view, _ = cache.merged(indexes, ws.home, builds)
    bm = view.bm25
    doc_of = [np.array([beir.beir_doc(f"{w}/{c.path}")[1] for c in view.chunks[w]], dtype=object) for w in view.names]
    rows = []
    for d in names:
        for qid, text in datasets[d].queries:
            cols = bm.columns(tokenize([retrieval.check_question(text)])[0])
            if not cols:
                rows.append({"ds": d, "qid": qid, "lists": None})
                continue
            scores = bm.scores(cols, "global")
            hits = bm.top_per_wiki(scores, DEPTH)
            lists = []
            for w in range(len(view.names)):
                mine = hits.wiki == w
                best: dict[str, float] = {}
                for doc, s in zip(doc_of[w][hits.chunk[mine]], hits.score[mine].tolist()):
                    best.setdefault(doc, s)
                lists.append((list(best), np.array(list(best.values()))))
            df = np.array([np.bincount(np.searchsorted(bm.offsets, bm.indices[bm.indptr[c]:bm.indptr[c + 1]],
                                                       side="right") - 1, minlength=len(view.names)) for c in cols])
            rows.append({"ds": d, "qid": qid, "lists": lists, "tc": bm.term_counts(cols), "df": df})
    centroids = []  # each wiki's mean passage vector, where it has the dense layer (the dense runs embed them)
    for idx in view.indexes:
        vectors = idx.folder / "dense" / "vectors.npy"
        if vectors.is_file():
            mean = np.load(vectors, mmap_mode="r").astype(np.float32).mean(0)
            centroids.append(mean / np.linalg.norm(mean))
    return {"names": list(view.names), "tokens": np.asarray(bm.wiki_tokens, float),
            "docs": np.diff(bm.offsets).astype(float), "rows": rows,
            "centroids": np.stack(centroids) if len(centroids) == len(view.names) else None}


def ndcg(ranked: list[str], rels: dict[str, int], k: int = 10) -> float:
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if rels.get(d, 0) > 0)
    ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def evaluate(mix: dict, qrels: dict, route) -> dict[str, float]:
    """Per-dataset nDCG@10 with ``route(row, mix) -> (scale, offset)`` (scale 0 leaves a wiki out)."""
    per: dict[str, list[float]] = {}
    for r in mix["rows"]:
        value = 0.0
        if r["lists"] is not None:
            scale, offset = route(r, mix)
            values, docs = [], []
            for w, (ids, sc) in enumerate(r["lists"]):
                if scale[w] > 0:
                    values.append(scale[w] * sc + offset[w])
                    docs += [ids_i if mix["names"][w] == r["ds"] else "\0" for ids_i in ids]
            if values:
                order = np.argsort(-np.concatenate(values), kind="stable")[:10]
                value = ndcg([docs[i] for i in order], qrels[r["ds"]].get(r["qid"], {}))
        per.setdefault(r["ds"], []).append(value)
    return {d: float(np.mean(v)) for d, v in per.items()}


# signals -------------------------------------------------------------------------------------------

def lm(r, m, mu=2000.0, use="tc"):
    counts, sizes = (r["tc"], m["tokens"]) if use == "tc" else (r["df"].astype(float), m["docs"])
    background = counts.sum(1) / sizes.sum()
    return np.log((counts + mu * background[:, None]) / (sizes[None, :] + mu)).mean(0)


def cori(r, m):
    df, cw = r["df"].astype(float), m["tokens"]
    t = df / (df + 50 + 150 * cw / cw.mean())
    i = np.log((df.shape[1] + 0.5) / np.maximum((df > 0).sum(1), 1)) / np.log(df.shape[1] + 1.0)
    return (0.4 + 0.6 * t * i[:, None]).mean(0)


def redde(r, m, n=50, per_size=False):
    values = np.concatenate([sc for _, sc in r["lists"]])
    wiki = np.concatenate([np.full(len(sc), w) for w, (_, sc) in enumerate(r["lists"])])
    counts = np.bincount(wiki[np.argsort(-values, kind="stable")[:n]], minlength=len(m["names"]))
    return (counts + 0.5) / m["docs"] if per_size else counts.astype(float)


def top_mean(r, n):
    return np.array([sc[:n].mean() if len(sc) else 0.0 for _, sc in r["lists"]])


def top(r):
    return max(sc[0] for _, sc in r["lists"] if len(sc))


SIGNALS = {
    "language model, counts, mu 2000 (routed)": lambda r, m: lm(r, m),
    "language model, counts, mu 200": lambda r, m: lm(r, m, 200),
    "language model, document frequencies, mu 200": lambda r, m: lm(r, m, 200, "df"),
    "CORI": cori,
    "ReDDE: documents in the merged top 50": redde,
    "ReDDE per document of the wiki": lambda r, m: redde(r, m, per_size=True),
    "best score": lambda r, m: top_mean(r, 1),
    "mean of the top 10 scores": lambda r, m: top_mean(r, 10),
}


def log_softmax(z):
    z = z - z.max()
    return z - np.log(np.exp(z).sum())


# methods -------------------------------------------------------------------------------------------

def additive(strength):
    return lambda r, m: (np.ones(len(m["names"])), strength * top(r) * (log_softmax(lm(r, m)) - log_softmax(lm(r, m)).max()))


def cut(share):
    def route(r, m):
        p = log_softmax(lm(r, m))
        return (p >= p.max() + math.log(share)).astype(float), np.zeros(len(p))
    return route


def power(lam):
    return lambda r, m: (np.exp(lam * log_softmax(lm(r, m))), np.zeros(len(m["names"])))


def features(r, m):
    f = np.stack([lm(r, m), lm(r, m, 200, "df"), 10 * cori(r, m), top_mean(r, 1) / top(r), top_mean(r, 10) / top(r),
                  np.log(redde(r, m, per_size=True))], 1)
    return f - f.max(0, keepdims=True)


def train_logit(data: dict, held: str, steps: int = 300, rate: float = 0.5, l2: float = 1e-3) -> np.ndarray:
    """A conditional logit over the wikis of each query, on every query not of ``held`` in every mix."""
    examples = [(features(r, m), m["names"].index(r["ds"])) for m in data.values() if len(m["names"]) > 1
                for r in m["rows"] if r["lists"] is not None and r["ds"] != held]
    w = np.zeros(examples[0][0].shape[1])
    for _ in range(steps):
        grad = np.zeros_like(w)
        for x, t in examples:
            p = np.exp(log_softmax(x @ w))
            grad += x[t] - p @ x
        w += rate * (grad / len(examples) - l2 * w)
    return w


def learned(weights: np.ndarray, lam: float):
    def route(r, m):
        p = log_softmax(features(r, m) @ weights)
        return np.ones(len(p)), lam * top(r) * (p - p.max())
    return route


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, default=REPO.parent / "shared" / "eval")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "wikirag" / "eval")
    args = parser.parse_args()
    datasets = {(args.eval_dir / d).name: beir.load_beir(args.eval_dir / d) for d in DEV}
    ws = beir.prepare(list(datasets.values()), args.cache)
    labels = [label for label, _ in mixes(list(datasets))]
    data = {label: collect(ws, datasets, label, names) for label, names in mixes(list(datasets))}
    qrels = {d: ds.qrels for d, ds in datasets.items()}
    dev = data["all five"]
    print("Routing accuracy on the dev mix (share of each collection's queries whose own wiki scores highest):\n")
    print("| signal | " + " | ".join(dev["names"]) + " |")
    print("|---|" + "---:|" * len(dev["names"]))
    for name, signal in SIGNALS.items():
        hits: dict[str, list[int]] = {}
        for r in dev["rows"]:
            if r["lists"] is not None:
                hits.setdefault(r["ds"], []).append(int(np.argmax(signal(r, dev)) == dev["names"].index(r["ds"])))
        print(f"| {name} | " + " | ".join(f"{np.mean(hits[d]):.0%}" for d in dev["names"]) + " |")
    if dev["centroids"] is not None:  # the wikis' dense centroids: the question's nearest one
        from wikirag import embeddings

        cells = []
        for d in dev["names"]:
            vectors = np.asarray(embeddings.recent([t for _, t in datasets[d].queries], embeddings.DEFAULT_EMBEDDING,
                                                   None), dtype=np.float32)
            cells.append(float(np.mean((vectors @ dev["centroids"].T).argmax(1) == dev["names"].index(d))))
        print("| nearest dense centroid (mean passage vector, MiniLM) | " + " | ".join(f"{c:.0%}" for c in cells) + " |")

    def table(route) -> dict[str, dict[str, float]]:
        return {label: evaluate(data[label], qrels, route) for label in labels}

    def macro(per: dict[str, float]) -> float:
        return float(np.mean(list(per.values())))

    results = {"dfs (no routing)": table(lambda r, m: (np.ones(len(m["names"])), np.zeros(len(m["names"])))),
               "dfs-prior": table(lambda r, m: (np.ones(len(m["names"])), log_softmax(lm(r, m)))),
               "oracle (the query's own wiki only)": table(
                   lambda r, m: (np.array([float(n == r["ds"]) for n in m["names"]]), np.zeros(len(m["names"]))))}
    for share in (1.0, 0.5, 0.2, 0.05):
        results[f"cut: wikis below {share:g} x the best weight left out"] = table(cut(share))
    for lam in (0.25, 0.5, 1.0):
        results[f"weight P(wiki)^{lam:g} (multiplied)"] = table(power(lam))
    strengths = [0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8]
    grid = {s: table(additive(s)) for s in strengths}
    for s in strengths[1:]:
        results[f"routed, strength {s:g}"] = grid[s]
    loco: dict[str, dict[str, float]] = {label: {} for label in labels}
    chosen = {}
    for held in datasets:
        train = [label for label in labels if held not in data[label]["names"]]
        chosen[held] = max(strengths, key=lambda s: (np.mean([macro(grid[s][label]) for label in train]), -s))
        for label in labels:
            if held in data[label]["names"]:
                loco[label][held] = grid[chosen[held]][label][held]
    results["routed, strength by LOCO"] = loco
    for lam in (0.05, 0.1, 0.2, 0.4):
        per: dict[str, dict[str, float]] = {label: {} for label in labels}
        for held in datasets:
            weights = train_logit(data, held)
            route = learned(weights, lam)
            for label in labels:
                if held in data[label]["names"]:
                    per[label][held] = evaluate(data[label], qrels, route)[held]
        results[f"learned router (LOCO), strength {lam:g}"] = per
        print(f"learned router {lam}: done", file=sys.stderr)
    print(f"\nLOCO choice of the routed strength: {chosen}\n")
    base = results["dfs (no routing)"]
    print("| method | all five | cisi + lisa | lisa + npl | mean of 16 | mixes >= monolith |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, per in results.items():
        values = {label: macro(per[label]) for label in labels}
        at_least = sum(values[label] >= macro(base[label]) - 1e-9 for label in labels)
        print(f"| {name} | {values['all five']:.3f} | {values['cisi + lisa']:.3f} | {values['lisa + npl']:.3f} | "
              f"{np.mean(list(values.values())):.4f} | {at_least} |")


if __name__ == "__main__":
    main()
