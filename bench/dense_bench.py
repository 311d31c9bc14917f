"""Benchmark: dense search in-process (``DenseStore``, embedded) against plain numpy and Qdrant ``:memory:``.

    python bench/dense_bench.py [--vectors 50000] [--dim 384] [--queries 200] [--no-qdrant]

Writes ``--vectors`` random unit float32 vectors (seed 0) as a build's ``dense/vectors.npy``, the way
``build_layer`` saves them, and times, for ``--queries`` random queries at k = 10 and k = 100:

* ``DenseStore.search`` with no ``QDRANT_URL`` (the build's file memory-mapped, exact search);
* plain numpy on the same unit vectors in RAM: ``vectors @ q``, ``argpartition``, a sort of the k;
* ``QdrantClient(":memory:")``, filled with the same vectors (what the embedded default used to be).

The three are run in turn for each query (so load from other processes falls on all of them alike) and
their results compared: scores equal within 1e-6 rank by rank, ids the same except where two scores
are equal within 1e-6 (Qdrant re-normalises stored vectors and the query, which moves scores by an ulp
and can swap such near-ties); it counts the queries whose ids and order are identical. Prints a
markdown table of p50/p95 ms and the ratio to numpy, then how long loading a build took each way.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from wikirag.dense import VECTORS, DenseInfo, DenseStore, unit_rows


def numpy_search(vectors: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = vectors @ q
    top = np.argpartition(scores, len(scores) - k)[len(scores) - k:]
    top = top[np.lexsort((top, -scores[top]))]  # equal scores: lower id first, as DenseStore orders them
    return top, scores[top]


def same_up_to_near_ties(ids: list[int], scores: np.ndarray, ref_ids: np.ndarray, ref_scores: np.ndarray,
                         tol: float = 1e-6) -> bool:
    """Scores equal within ``tol`` rank by rank, and ids equal except where neighbouring scores are too."""
    np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=tol)
    for i in np.flatnonzero(np.asarray(ids) != ref_ids):
        near = [j for j in (i - 1, i + 1) if 0 <= j < len(ref_scores) and abs(ref_scores[j] - ref_scores[i]) <= tol]
        assert near or i == len(ref_ids) - 1, f"rank {i + 1} differs without a near-tie"
    return bool(np.array_equal(ids, ref_ids))


def percentiles(samples: list[float]) -> tuple[float, float]:
    ms = np.array(samples) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--no-qdrant", action="store_true", help="leave out qdrant-client :memory:")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((args.vectors, args.dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    info = DenseInfo("bench", "bench-model", args.dim, None, args.vectors, 0, 0.0)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "builds" / "20260101T000000-000000" / "dense"
        folder.mkdir(parents=True)
        np.save(folder / VECTORS, unit_rows(vectors))  # as build_layer writes it
        in_ram = np.load(folder / VECTORS)  # the plain-numpy reference: the same unit vectors, in RAM

        store = DenseStore()
        started = time.perf_counter()
        store.ensure("bench", "20260101T000000-000000", folder, info)
        loads = {"DenseStore.ensure (memory map + unit check)": time.perf_counter() - started}

        client = None
        if not args.no_qdrant:
            from qdrant_client import QdrantClient, models

            client = QdrantClient(":memory:")
            started = time.perf_counter()
            client.create_collection("bench", vectors_config=models.VectorParams(
                size=args.dim, distance=models.Distance.COSINE))
            client.upload_collection("bench", vectors=np.load(folder / VECTORS), ids=range(args.vectors),
                                     batch_size=1024)
            loads["qdrant :memory: (create + upload)"] = time.perf_counter() - started

        rows, agreement = [], []
        for k in (10, 100):
            times: dict[str, list[float]] = {"numpy": [], "DenseStore": [], "qdrant": []}
            exact = {"numpy": 0, "qdrant": 0}
            for q in queries:
                t0 = time.perf_counter()
                ref_ids, ref_scores = numpy_search(in_ram, q, k)
                t1 = time.perf_counter()
                ids, scores = store.search("bench", q, "bench-model", k)
                t2 = time.perf_counter()
                times["numpy"].append(t1 - t0)
                times["DenseStore"].append(t2 - t1)
                exact["numpy"] += same_up_to_near_ties(ids.tolist(), scores, ref_ids, ref_scores)
                if client is not None:
                    t3 = time.perf_counter()
                    points = client.query_points("bench", query=q.tolist(), limit=k, with_payload=False).points
                    times["qdrant"].append(time.perf_counter() - t3)
                    exact["qdrant"] += same_up_to_near_ties([p.id for p in points],
                                                            np.array([p.score for p in points]), ids, scores)
            agreement.append(f"k = {k}: same ids in the same order as plain numpy in {exact['numpy']}/{len(queries)} "
                             f"queries" + (f", as qdrant :memory: in {exact['qdrant']}/{len(queries)}" if client else ""))
            base = percentiles(times["numpy"])
            for name, label in (("DenseStore", "`DenseStore.search` (embedded)"), ("numpy", "plain numpy, in RAM"),
                                ("qdrant", "qdrant-client `:memory:` (before)")):
                if times[name]:
                    p50, p95 = percentiles(times[name])
                    rows.append(f"| {k} | {label} | {p50:.2f} | {p95:.2f} | {p50 / base[0]:.2f}× |")

    print(f"{args.vectors:,} vectors × {args.dim} dims, {args.queries} queries; scores equal rank by rank "
          "within 1e-6 everywhere, ids differing only between scores that equal within 1e-6:")
    print("\n".join(agreement) + "\n")
    print("| k | search | p50 ms | p95 ms | p50 vs numpy |")
    print("|---:|---|---:|---:|---:|")
    print("\n".join(rows))
    print()
    for name, seconds in loads.items():
        print(f"loading the build, {name}: {seconds * 1000:.1f} ms")


if __name__ == "__main__":
    main()
